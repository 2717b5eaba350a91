/* metrics.c — counters, fixed-bucket histograms and their rendering in the
 * Prometheus text format (see metrics.h). Counting never allocates;
 * rendering builds one string per request. The HTTP listener that serves
 * the text is http.c. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.pb-c.h"
#include "metrics.h"
#include "util.h"

static const uint64_t bounds_usec[HVD_HISTOGRAM_N_BOUNDS] = {
        10,    25,    50,     100,    250,    500,     1000,    2500,    5000,     10000,
        25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};

void hvd_histogram_observe(hvd_histogram_t *h, uint64_t usec) {
        size_t i = 0;
        while (i < HVD_HISTOGRAM_N_BOUNDS && usec > bounds_usec[i])
                i++;
        h->buckets[i]++;
        h->count++;
        h->sum_usec += usec;
}

/* ---- text ---- */

typedef struct sbuf {
        char *p;
        size_t len, cap;
        bool oom;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
        if (b->oom)
                return;
        for (;;) {
                va_list ap;
                va_start(ap, fmt);
                int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        b->oom = true;
                        return;
                }
                if (b->p && b->len + (size_t) n < b->cap) {
                        b->len += (size_t) n;
                        return;
                }
                size_t cap = b->cap ? b->cap * 2 : 8192;
                while (cap < b->len + (size_t) n + 1)
                        cap *= 2;
                char *np = realloc(b->p, cap);
                if (!np) {
                        b->oom = true;
                        return;
                }
                b->p = np;
                b->cap = cap;
        }
}

static void head(sbuf_t *b, const char *name, const char *type, const char *help) {
        sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(sbuf_t *b, const char *name, const char *help, uint64_t v) {
        head(b, name, "counter", help);
        sb_printf(b, "%s %" PRIu64 "\n", name, v);
}

static void gauge(sbuf_t *b, const char *name, const char *help, double v) {
        head(b, name, "gauge", help);
        sb_printf(b, "%s %.17g\n", name, v);
}

static void histogram(sbuf_t *b, const char *name, const char *help, const hvd_histogram_t *h) {
        head(b, name, "histogram", help);
        uint64_t cum = 0;
        for (size_t i = 0; i < HVD_HISTOGRAM_N_BOUNDS; i++) {
                cum += h->buckets[i];
                sb_printf(b, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, (double) bounds_usec[i] / 1e6, cum);
        }
        cum += h->buckets[HVD_HISTOGRAM_N_BOUNDS];
        sb_printf(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
        sb_printf(b, "%s_sum %.9g\n", name, (double) h->sum_usec / 1e6);
        sb_printf(b, "%s_count %" PRIu64 "\n", name, h->count);
}

static const char *const sock_names[HVD_METRICS_N_SOCK] = { "worker", "peer", "root", "control", "http" };

int hvd_metrics_render(const hvd_metrics_t *m, const hvd_metrics_gauges_t *g, char **ret, size_t *len) {
        sbuf_t b = { 0 };
        head(&b, "hvd_build_info", "gauge", "Version of hvd-coordinatord (always 1).");
        sb_printf(&b, "hvd_build_info{version=\"%s\"} 1\n", g->version);
        gauge(&b, "hvd_uptime_seconds", "Time since the daemon started.", (double) g->uptime_usec / 1e6);
        gauge(&b, "hvd_log_level", "Syslog priority of the most verbose messages logged (3 err .. 7 debug).",
              g->log_level);
        head(&b, "hvd_jobs", "gauge", "Jobs this daemon serves, by state.");
        sb_printf(&b,
                  "hvd_jobs{state=\"joining\"} %" PRIu32 "\nhvd_jobs{state=\"running\"} %" PRIu32
                  "\nhvd_jobs{state=\"aborted\"} %" PRIu32 "\n",
                  g->jobs_joining, g->jobs_running, g->jobs_aborted);
        gauge(&b, "hvd_workers", "Worker processes connected to this daemon.", g->workers);
        head(&b, "hvd_peers", "gauge", "Root daemons this daemon reports to, by state.");
        sb_printf(&b,
                  "hvd_peers{state=\"connected\"} %" PRIu32 "\nhvd_peers{state=\"idle\"} %" PRIu32
                  "\nhvd_peers{state=\"lost\"} %" PRIu32 "\n",
                  g->peers_connected, g->peers_idle, g->peers_lost);
        counter(&b, "hvd_jobs_started_total", "Jobs created on this daemon.", m->jobs_started);
        counter(&b, "hvd_jobs_finished_total", "Jobs that ended without an abort.", m->jobs_finished);
        counter(&b, "hvd_jobs_aborted_total", "Jobs aborted (rank lost, timeout, mismatch, stall).", m->jobs_aborted);
        counter(&b, "hvd_workers_connected_total", "Workers that joined a job here.", m->workers_connected);
        counter(&b, "hvd_workers_lost_total", "Workers declared lost: no heartbeat within heartbeat_timeout.",
                m->workers_lost);
        counter(&b, "hvd_elastic_resets_total", "Elastic jobs: generations formed after a reset (root daemon).",
                m->elastic_resets);
        counter(&b, "hvd_stale_messages_total",
                "Messages refused as stale: from a worker declared lost, or for a job aborted or gone.",
                m->stale_messages);
        head(&b, "hvd_messages_received_total", "counter", "Valid messages received, by type.");
        for (size_t i = 0; i < HVD_METRICS_MAX_BODY; i++) {
                const ProtobufCFieldDescriptor *f =
                        protobuf_c_message_descriptor_get_field(&hvd__envelope__descriptor, (unsigned) i);
                if (f && f->id >= 10)
                        sb_printf(&b, "hvd_messages_received_total{type=\"%s\"} %" PRIu64 "\n", f->name,
                                  m->messages[i]);
        }
        head(&b, "hvd_messages_rejected_total", "counter", "Messages refused as malformed or invalid, by socket.");
        for (size_t i = 0; i < HVD_METRICS_N_SOCK; i++)
                sb_printf(&b, "hvd_messages_rejected_total{socket=\"%s\"} %" PRIu64 "\n", sock_names[i],
                          m->rejected[i]);
        counter(&b, "hvd_control_requests_total", "Requests on the control socket and the HTTP listener.",
                m->control_requests);
        counter(&b, "hvd_cycles_total", "Readiness messages from ranks (negotiation cycles).", m->cycles);
        counter(&b, "hvd_requests_total", "Tensor requests negotiated here, by name or cached id.", m->requests);
        counter(&b, "hvd_tensors_negotiated_total",
                "Tensors negotiated for jobs whose root is this daemon (scheduled, or run by the fast path).",
                m->tensors_negotiated);
        counter(&b, "hvd_fast_path_tensors_total",
                "Tensors the workers of one-node jobs ran from their shared-memory board, without a schedule.",
                m->fast_path_tensors);
        counter(&b, "hvd_cache_hits_total", "Requests that came as cached ids.", m->cache_hits);
        counter(&b, "hvd_fused_operations_total", "Operations in schedules (each one collective).", m->fused_ops);
        counter(&b, "hvd_schedules_total", "Schedules sent.", m->schedules);
        counter(&b, "hvd_bytes_scheduled_total", "Payload bytes per rank of the scheduled operations.",
                m->bytes_scheduled);
        counter(&b, "hvd_stall_warnings_total", "Stall inspector warnings.", m->stall_warnings);
        head(&b, "hvd_node_readiness_total", "counter",
             "Readiness a root daemon received from the other nodes of its jobs: node-level messages (every "
             "local rank ready for a set of cached ids) and per-rank readiness.");
        sb_printf(&b,
                  "hvd_node_readiness_total{kind=\"node\"} %" PRIu64
                  "\nhvd_node_readiness_total{kind=\"rank\"} %" PRIu64 "\n",
                  m->node_ready_received, m->rank_readies_received);
        counter(&b, "hvd_node_cached_ids_total", "Cached ids a root daemon received node by node.", m->node_cached_ids);
        counter(&b, "hvd_node_ready_sent_total", "Node-level readiness messages this daemon sent to a root daemon.",
                m->node_ready_sent);
        counter(&b, "hvd_node_shared_requests_total",
                "Requests by name that several local ranks sent alike (a first step), forwarded once for all of them "
                "(jobs on several hosts), or entered once at the job's root.",
                m->node_shared_requests);
        counter(&b, "hvd_board_host_readiness_total",
                "Readiness messages from local workers that spoke for every local rank: ids completed on the workers' "
                "shared-memory board (jobs on several hosts), sent once for the host.",
                m->board_node_ready);
        counter(&b, "hvd_board_host_ids_total", "Cached ids those messages carried.", m->board_node_ids);
        counter(&b, "hvd_board_schedules_total",
                "Schedules sent to local rank 0 alone, which posted them on the board for the host's other ranks.",
                m->board_schedules);
        head(&b, "hvd_relay_messages_total", "counter",
             "Control plane relays: readiness messages a relay daemon took from the hosts of its group (in), sent "
             "on to the root daemon (out), and relayed messages a root daemon received (root).");
        sb_printf(&b,
                  "hvd_relay_messages_total{direction=\"in\"} %" PRIu64
                  "\nhvd_relay_messages_total{direction=\"out\"} %" PRIu64
                  "\nhvd_relay_messages_total{direction=\"root\"} %" PRIu64 "\n",
                  m->relay_in, m->relay_out, m->relayed_received);
        counter(&b, "hvd_relay_group_ids_total",
                "Cache ids a relay daemon sent on as one entry for its whole group (every host of it had posted them).",
                m->relay_group_ids);
        counter(&b, "hvd_schedule_repeats_total", "Schedules sent as a repeat of one kept by key (a few bytes).",
                m->schedule_repeats);
        counter(&b, "hvd_log_level_changes_total", "Run-time log level changes (hvdctl log-level).",
                m->log_level_changes);
        histogram(&b, "hvd_elastic_reset_seconds", "Elastic jobs: from a generation's end to the next one's placement.",
                  &m->elastic_reset);
        histogram(&b, "hvd_negotiation_latency_seconds",
                  "Per tensor: from its first readiness on any rank to its schedule.", &m->negotiation);
        histogram(&b, "hvd_cycle_duration_seconds", "Reactor iterations: from waking up to going back to sleep.",
                  &m->iteration);
        histogram(&b, "hvd_control_request_duration_seconds", "Handling of one control request.", &m->control);
        if (b.oom) {
                free(b.p);
                return -ENOMEM;
        }
        *ret = b.p;
        *len = b.len;
        return 0;
}
