/* metrics.c — counters, fixed-bucket histograms, Prometheus text rendering
 * and the /metrics HTTP listener (see metrics.h). The listener serves one
 * request per connection (HTTP/1.0 style: the response ends with the
 * close), holds at most MAX_CONNS connections, reads at most REQ_MAX bytes
 * of request head and drops a connection that has not been answered within
 * CONN_DEADLINE_USEC. Nothing here blocks: every fd is non-blocking. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hvd.pb-c.h"
#include "log.h"
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
        counter(&b, "hvd_relay_shared_requests_total",
                "New requests of a host that a relay daemon sent on once with the same of the other hosts of its "
                "group (decoded and entered once by the root).",
                m->relay_shared);
        counter(&b, "hvd_relay_group_ids_total",
                "Cache ids a relay daemon sent on as one entry for its whole group (every host of it had posted them).",
                m->relay_group_ids);
        counter(&b, "hvd_schedule_repeats_total", "Schedules sent as a repeat of one kept by key (a few bytes).",
                m->schedule_repeats);
        head(&b, "hvd_worker_requests_decoded_total", "counter",
             "Requests by name in local workers' readiness messages: copied from those decoded lately with the same "
             "bytes (another local rank's, a first step), or parsed.");
        sb_printf(&b,
                  "hvd_worker_requests_decoded_total{how=\"copied\"} %" PRIu64
                  "\nhvd_worker_requests_decoded_total{how=\"parsed\"} %" PRIu64 "\n",
                  m->requests_copied, m->requests_parsed);
        counter(&b, "hvd_log_level_changes_total", "Run-time log level changes (hvdctl log-level).",
                m->log_level_changes);
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

/* ---- HTTP ---- */

#define MAX_CONNS          16
#define REQ_MAX            4096
#define CONN_DEADLINE_USEC (5 * USEC_PER_SEC)

typedef struct conn {
        int fd;
        char in[REQ_MAX];
        size_t in_len;
        char *out; /* the whole response, malloc'd */
        size_t out_len, out_off;
        uint64_t deadline;
        /* response sent and write side shut: read what the client still
         * sends until it closes, so that closing with unread data does not
         * reset the connection before the client has read the response */
        bool draining;
        size_t drained;
} conn_t;

struct hvd_http {
        int fd;
        char address[INET6_ADDRSTRLEN + 16];
        hvd_http_render_fn render;
        void *userdata;
        hvd_metrics_t *m;
        conn_t conns[MAX_CONNS];
        /* which conn each filled poll item is, -1 for the listener */
        int item_conn[MAX_CONNS + 1];
};

static void conn_close(conn_t *c) {
        if (c->fd >= 0)
                close(c->fd);
        free(c->out);
        c->fd = -1;
        c->out = NULL;
        c->in_len = c->out_len = c->out_off = c->drained = 0;
        c->draining = false;
}

int hvd_http_new(const char *address, hvd_http_render_fn render, void *userdata, hvd_metrics_t *m, hvd_http_t **ret,
                 char *err, size_t err_len) {
        char host[256];
        const char *colon = strrchr(address, ':');
        if (!colon || colon == address || !colon[1] || (size_t) (colon - address) >= sizeof host) {
                snprintf(err, err_len, "metrics_listen '%s': expected ADDRESS:PORT, e.g. 127.0.0.1:9464", address);
                return -EINVAL;
        }
        memcpy(host, address, (size_t) (colon - address));
        host[colon - address] = 0;
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
                memmove(host, host + 1, strlen(host));
                host[strlen(host) - 1] = 0;
        }
        char *end;
        errno = 0;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (errno || *end || port > 65535) {
                snprintf(err, err_len, "metrics_listen '%s': port must be 0..65535", address);
                return -EINVAL;
        }
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
        struct addrinfo *ai = NULL;
        int g = getaddrinfo(host, colon + 1, &hints, &ai);
        if (g != 0) {
                snprintf(err, err_len, "metrics_listen '%s': %s", address, gai_strerror(g));
                return -EINVAL;
        }
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1, r = 0;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
                r = -errno;
                snprintf(err, err_len, "metrics_listen '%s': cannot listen: %s", address, strerror(errno));
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(ai);
                return r;
        }
        freeaddrinfo(ai);
        hvd_http_t *h = calloc(1, sizeof *h);
        if (!h) {
                close(fd);
                snprintf(err, err_len, "out of memory");
                return -ENOMEM;
        }
        h->fd = fd;
        h->render = render;
        h->userdata = userdata;
        h->m = m;
        for (size_t i = 0; i < MAX_CONNS; i++)
                h->conns[i].fd = -1;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        char ip[INET6_ADDRSTRLEN] = "?";
        unsigned bound = 0;
        if (getsockname(fd, (struct sockaddr *) &ss, &sl) == 0) {
                if (ss.ss_family == AF_INET) {
                        struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;
                        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
                        bound = ntohs(s4->sin_port);
                } else if (ss.ss_family == AF_INET6) {
                        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;
                        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
                        bound = ntohs(s6->sin6_port);
                }
        }
        snprintf(h->address, sizeof h->address, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, bound);
        *ret = h;
        return 0;
}

void hvd_http_destroy(hvd_http_t **hp) {
        if (!hp || !*hp)
                return;
        hvd_http_t *h = *hp;
        for (size_t i = 0; i < MAX_CONNS; i++)
                conn_close(&h->conns[i]);
        if (h->fd >= 0)
                close(h->fd);
        free(h);
        *hp = NULL;
}

const char *hvd_http_address(const hvd_http_t *h) {
        return h->address;
}

size_t hvd_http_max_items(const hvd_http_t *h) {
        (void) h;
        return MAX_CONNS + 1;
}

size_t hvd_http_fill_items(hvd_http_t *h, zmq_pollitem_t *items) {
        size_t n = 0;
        items[n] = (zmq_pollitem_t){ .fd = h->fd, .events = ZMQ_POLLIN };
        h->item_conn[n++] = -1;
        for (size_t i = 0; i < MAX_CONNS; i++) {
                conn_t *c = &h->conns[i];
                if (c->fd < 0)
                        continue;
                items[n] = (zmq_pollitem_t){ .fd = c->fd, .events = c->out ? ZMQ_POLLOUT : ZMQ_POLLIN };
                h->item_conn[n++] = (int) i;
        }
        return n;
}

static void respond(hvd_http_t *h, conn_t *c, int status, const char *reason, const char *type, char *body,
                    size_t body_len, bool head_only) {
        char hdr[256];
        int n = snprintf(hdr, sizeof hdr,
                         "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                         status, reason, type, body_len);
        size_t total = (size_t) n + (head_only ? 0 : body_len);
        c->out = malloc(total);
        if (!c->out) {
                conn_close(c);
                free(body);
                return;
        }
        memcpy(c->out, hdr, (size_t) n);
        if (!head_only && body_len)
                memcpy(c->out + n, body, body_len);
        free(body);
        c->out_len = total;
        c->out_off = 0;
        (void) h;
}

static void respond_text(hvd_http_t *h, conn_t *c, int status, const char *reason, const char *text) {
        char *body = strdup(text);
        respond(h, c, status, reason, "text/plain; charset=utf-8", body, body ? strlen(body) : 0, false);
}

/* A complete request head is in c->in: answer it. */
static void serve(hvd_http_t *h, conn_t *c) {
        h->m->control_requests++;
        char *eol = memchr(c->in, '\n', c->in_len);
        *eol = 0;
        if (eol > c->in && eol[-1] == '\r')
                eol[-1] = 0;
        char method[16], target[1024], version[16];
        if (sscanf(c->in, "%15s %1023s %15s", method, target, version) != 3 || strncmp(version, "HTTP/1.", 7) != 0) {
                h->m->rejected[HVD_METRICS_SOCK_HTTP]++;
                respond_text(h, c, 400, "Bad Request", "bad request\n");
                return;
        }
        bool get = strcmp(method, "GET") == 0, head_only = strcmp(method, "HEAD") == 0;
        if (!get && !head_only) {
                respond_text(h, c, 405, "Method Not Allowed", "only GET and HEAD\n");
                return;
        }
        char *q = strchr(target, '?');
        if (q)
                *q = 0;
        if (strcmp(target, "/metrics") != 0) {
                respond_text(h, c, 404, "Not Found", "not found: try /metrics\n");
                return;
        }
        char *body = NULL;
        size_t len = 0;
        if (h->render(h->userdata, &body, &len) < 0) {
                respond_text(h, c, 500, "Internal Server Error", "cannot render the metrics\n");
                return;
        }
        respond(h, c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body, len, head_only);
}

static void conn_read(hvd_http_t *h, conn_t *c) {
        for (;;) {
                if (c->in_len == sizeof c->in - 1) {
                        h->m->rejected[HVD_METRICS_SOCK_HTTP]++;
                        respond_text(h, c, 431, "Request Header Fields Too Large", "request too large\n");
                        return;
                }
                ssize_t k = read(c->fd, c->in + c->in_len, sizeof c->in - 1 - c->in_len);
                if (k < 0) {
                        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                                conn_close(c);
                        return;
                }
                if (k == 0) { /* the client left before finishing its request */
                        conn_close(c);
                        return;
                }
                c->in_len += (size_t) k;
                c->in[c->in_len] = 0;
                if (memchr(c->in, 0, c->in_len)) {
                        h->m->rejected[HVD_METRICS_SOCK_HTTP]++;
                        respond_text(h, c, 400, "Bad Request", "bad request\n");
                        return;
                }
                if (strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n")) {
                        serve(h, c);
                        return;
                }
        }
}

#define DRAIN_MAX  (1 << 20)
#define DRAIN_USEC (2 * USEC_PER_SEC)

static void conn_drain(conn_t *c) {
        char buf[4096];
        for (;;) {
                ssize_t k = read(c->fd, buf, sizeof buf);
                if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                        return;
                if (k <= 0 || (c->drained += (size_t) k) > DRAIN_MAX) {
                        conn_close(c);
                        return;
                }
        }
}

static void conn_write(conn_t *c) {
        while (c->out_off < c->out_len) {
                ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                                return;
                        break;
                }
                c->out_off += (size_t) k;
        }
        /* all sent (or the client is gone): the end of the stream ends the
         * response; then wait for the client's close */
        shutdown(c->fd, SHUT_WR);
        free(c->out);
        c->out = NULL;
        c->draining = true;
        uint64_t limit = hvd_now_usec() + DRAIN_USEC;
        if (limit < c->deadline)
                c->deadline = limit;
        conn_drain(c);
}

static void accept_all(hvd_http_t *h, uint64_t now) {
        for (;;) {
                int fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                        return; /* EAGAIN, or a client that left already */
                conn_t *c = NULL;
                for (size_t i = 0; i < MAX_CONNS && !c; i++)
                        if (h->conns[i].fd < 0)
                                c = &h->conns[i];
                if (!c) {
                        /* full: refuse rather than queue; a scraper retries */
                        static const char busy[] = "HTTP/1.0 503 Service Unavailable\r\nConnection: close\r\n\r\n";
                        (void) !send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                        close(fd);
                        continue;
                }
                c->fd = fd;
                c->in_len = 0;
                c->deadline = now + CONN_DEADLINE_USEC;
        }
}

void hvd_http_dispatch(hvd_http_t *h, const zmq_pollitem_t *items, size_t n, uint64_t now_usec) {
        for (size_t i = 0; i < n && i <= MAX_CONNS; i++) {
                if (!items[i].revents)
                        continue;
                int ci = h->item_conn[i];
                if (ci < 0) {
                        accept_all(h, now_usec);
                        continue;
                }
                conn_t *c = &h->conns[ci];
                if (c->fd != items[i].fd)
                        continue;
                if (items[i].revents & ZMQ_POLLERR) {
                        conn_close(c);
                        continue;
                }
                if (c->draining) {
                        conn_drain(c);
                        continue;
                }
                if (!c->out)
                        conn_read(h, c);
                /* a response made just now goes out at once if it can */
                if (c->fd >= 0 && c->out)
                        conn_write(c);
        }
}

uint64_t hvd_http_expire(hvd_http_t *h, uint64_t now_usec) {
        uint64_t next = UINT64_MAX;
        for (size_t i = 0; i < MAX_CONNS; i++) {
                conn_t *c = &h->conns[i];
                if (c->fd < 0)
                        continue;
                if (now_usec >= c->deadline)
                        conn_close(c);
                else if (c->deadline < next)
                        next = c->deadline;
        }
        return next;
}
