/* hvdctl.c — operator CLI for hvd-coordinatord: one request over the
 * control socket (status, metrics, log level), printed as a readable
 * summary, one line per job, per-rank detail, Prometheus text, or JSON
 * (field names = hvd.proto's); --watch repeats it until Ctrl-C. Exit status
 * tells what went wrong: 1 no daemon or other error, 2 usage, 3 timeout,
 * 4 permission denied, 5 no such job. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "conf.h"
#include "hvd.h"
#include "invariant.h"
#include "log.h"
#include "status_json.h"
#include "tune_search.h"
#include "util.h"
#include "wire.h"

#define DEFAULT_TIMEOUT_USEC (5 * USEC_PER_SEC)

enum {
        EXIT_ERROR = 1,
        EXIT_USAGE = 2,
        EXIT_TIMEOUT = 3,
        EXIT_DENIED = 4,
        EXIT_NO_JOB = 5,
};

typedef struct ctl {
        const char *runtime_dir; /* for messages; the endpoint's directory with --endpoint */
        char endpoint[PATH_MAX + 32];
        char dir_buf[PATH_MAX];
        uint64_t timeout_usec;
        bool json;
        const char *job_id; /* job ID */
        const char *level;  /* log-level LEVEL */
} ctl_t;

static void help(void) {
        printf("Usage: hvdctl [OPTIONS] COMMAND [ARG] [--json]\n"
               "\n"
               "Asks an hvd-coordinatord (by default the local one) about its state and\n"
               "its jobs.\n"
               "\n"
               "Commands:\n"
               "  status          Daemon, configuration in force, peers, and a table of jobs\n"
               "                  with their counters and stalled tensors\n"
               "  jobs            One line per job: id, size, state, age, joined ranks\n"
               "  job ID          One job in detail, with a row per rank\n"
               "  metrics         Counters and latency histograms, Prometheus text format\n"
               "  log-level [LEVEL]\n"
               "                  Show the daemon's log level, or set it now to err, warning,\n"
               "                  notice, info or debug (root or the daemon's user only)\n"
               "  version         Versions of hvdctl and of the running daemon\n"
               "  timeline JOB start FILE [--mark-cycles]\n"
               "                  Rank 0 of JOB records a timeline into FILE (opened by rank 0,\n"
               "                  relative to its working directory)\n"
               "  timeline JOB stop\n"
               "                  Ends JOB's timeline; the file is then complete JSON\n"
               "  timeline-repair FILE\n"
               "                  Closes the JSON array of a killed job's timeline\n"
               "  keygen [DIR]    Write a CURVE key pair for the peer socket into DIR\n"
               "                  (default %s/hvd): coordinatord.key, coordinatord.secret\n"
               "\n"
               "Options:\n"
               "  -r, --runtime-dir DIR    The daemon's runtime directory (default\n"
               "                           $HVD_RUNTIME_DIR, else %s)\n"
               "  -e, --endpoint ENDPOINT  Another daemon: its control endpoint\n"
               "                           (ipc:///run/hvd/control.sock, tcp://HOST:PORT) or\n"
               "                           its runtime directory\n"
               "  -t, --timeout SEC        Give up after SEC seconds (default 5)\n"
               "  -j, --json               Print JSON (status, jobs, job)\n"
               "  -w, --watch [SECONDS]    Repeat every SECONDS (default 2) until Ctrl-C,\n"
               "                           clearing the terminal in between (status, jobs,\n"
               "                           job, metrics)\n"
               "  -h, --help               Show this help\n"
               "  -V, --version            Show hvdctl's version\n"
               "\n"
               "Exit status: 0 success (also a watch ended by Ctrl-C), 1 no daemon or other\n"
               "error, 2 usage error, 3 the daemon did not answer in time, 4 permission\n"
               "denied, 5 no such job.\n",
               SYSCONFDIR, HVD_DEFAULT_RUNTIME_DIR);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
        va_list ap;
        fputs("hvdctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nTry 'hvdctl --help'.\n", stderr);
        return EXIT_USAGE;
}

static void no_daemon(const ctl_t *c, const char *detail) {
        fprintf(stderr,
                "hvdctl: no hvd-coordinatord is running at %s (%s); start it with 'systemctl start "
                "hvd-coordinatord' or run jobs with hvdrun\n",
                c->runtime_dir, detail);
}

static int denied(const char *path) {
        fprintf(stderr,
                "hvdctl: permission denied on %s: only root and members of group hvd may talk to "
                "hvd-coordinatord (sudo usermod -aG hvd $USER, then log in again)\n",
                path);
        return EXIT_DENIED;
}

/* zmq retries a refused or forbidden ipc connect silently until the timeout;
 * one plain connect() tells the three cases apart at once. Returns 0 to go on,
 * else an exit status after a message. */
static int precheck_ipc(const ctl_t *c) {
        const char *path = c->endpoint + 6;
        struct stat st;
        if (stat(path, &st) < 0) {
                if (errno == ENOENT || errno == ENOTDIR) {
                        no_daemon(c, "no control socket");
                        return EXIT_ERROR;
                }
                if (errno == EACCES || errno == EPERM)
                        return denied(path);
                fprintf(stderr, "hvdctl: cannot use %s: %s\n", path, strerror(errno));
                return EXIT_ERROR;
        }
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return 0; /* zmq will say */
        memcpy(sa.sun_path, path, strlen(path));
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return 0;
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0)
                return 0;
        if (errno == ECONNREFUSED) {
                no_daemon(c, "stale control socket, nobody listening");
                return EXIT_ERROR;
        }
        if (errno == EACCES || errno == EPERM)
                return denied(path);
        return 0;
}

/* Sends one request. Returns 0 and the reply envelope, whose body is
 * `expect`, in *ret (free with hvd_wire_free), or an exit status after a
 * message. */
static int call(const ctl_t *c, Hvd__Envelope *req, int expect, Hvd__Envelope **ret) {
        if (strncmp(c->endpoint, "ipc://", 6) == 0) {
                int e = precheck_ipc(c);
                if (e)
                        return e;
        }
        Hvd__Envelope *reply = NULL;
        int r = hvd_control_call(NULL, c->endpoint, req, c->timeout_usec, &reply);
        if (r == -ECONNREFUSED || r == -ENOENT) {
                no_daemon(c, "no control socket");
                return EXIT_ERROR;
        }
        if (r == -EACCES || r == -EPERM)
                return denied(c->endpoint);
        if (r == HVD_ETIMEOUT) {
                fprintf(stderr,
                        "hvdctl: hvd-coordinatord at %s did not answer within %.1f s; it may be busy or hung "
                        "(see 'systemctl status hvd-coordinatord'), or try a longer --timeout\n",
                        c->endpoint, (double) c->timeout_usec / 1e6);
                return EXIT_TIMEOUT;
        }
        if (r < 0) {
                fprintf(stderr, "hvdctl: cannot query hvd-coordinatord at %s: %s\n", c->endpoint, hvd_strerror(r));
                return EXIT_ERROR;
        }
        if (reply->body_case == HVD__ENVELOPE__BODY_ERROR) {
                fprintf(stderr, "hvdctl: hvd-coordinatord at %s refused the request: %s\n", c->endpoint,
                        reply->error->message);
                int e = reply->error->code == HVD_EDENIED ? EXIT_DENIED : EXIT_ERROR;
                hvd_wire_free(&reply);
                return e;
        }
        if ((int) reply->body_case != expect) {
                fprintf(stderr, "hvdctl: unexpected reply from hvd-coordinatord at %s\n", c->endpoint);
                hvd_wire_free(&reply);
                return EXIT_ERROR;
        }
        *ret = reply;
        return 0;
}

static int fetch_status(const ctl_t *c, const char *job_id, Hvd__Envelope **ret) {
        Hvd__StatusRequest q = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT;
        if (job_id) {
                q.job_id = (char *) job_id;
                q.rank_detail = true;
        }
        req.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        req.status_request = &q;
        return call(c, &req, HVD__ENVELOPE__BODY_STATUS, ret);
}

/* ---- formatting ---- */

static const char *fmt_duration(uint64_t usec, char *buf, size_t len) {
        uint64_t s = usec / USEC_PER_SEC;
        if (usec < 10 * USEC_PER_SEC)
                snprintf(buf, len, "%.1fs", (double) usec / 1e6);
        else if (s < 60)
                snprintf(buf, len, "%" PRIu64 "s", s);
        else if (s < 3600)
                snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
        else if (s < 86400)
                snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
        else
                snprintf(buf, len, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s / 3600 % 24);
        return buf;
}

static const char *fmt_bytes(uint64_t b, char *buf, size_t len) {
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        double v = (double) b;
        size_t u = 0;
        while (v >= 1024 && u + 1 < ELEMENTSOF(units)) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, len, "%" PRIu64 " B", b);
        else if (v == floor(v))
                snprintf(buf, len, "%.0f %s", v, units[u]);
        else
                snprintf(buf, len, "%.1f %s", v, units[u]);
        return buf;
}

/* A --json document (NULL: memory ran out), freed; returns 0 or an exit status. */
static int print_json(json_t *doc) {
        int r = doc ? hvd_json_write(doc, stdout) : -ENOMEM;
        json_decref(doc);
        if (r == -ENOMEM)
                fprintf(stderr, "hvdctl: out of memory\n");
        return r < 0 ? EXIT_ERROR : 0;
}

static void print_ranks(const Hvd__Status *s, const Hvd__JobStatus *j) {
        if (!j->n_ranks)
                return;
        printf("    ranks:");
        for (size_t i = 0; i < j->n_ranks; i++) {
                const Hvd__RankInfo *ri = j->ranks[i];
                printf("%s %" PRIu32 " pid %" PRIu32, i ? "," : "", ri->rank, ri->pid);
                if (ri->host && *ri->host && strcmp(ri->host, s->host) != 0)
                        printf(" on %s", ri->host);
        }
        printf("\n");
}

/* Terminal columns of a UTF-8 string, counting every code point as one. */
static int text_width(const char *s) {
        int n = 0;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                n += (*p & 0xc0) != 0x80;
        return n;
}

/* The counters that need a sentence: rates, sizes, where the time went. */
static void print_job_counters(const Hvd__JobStatus *j, const char *ind) {
        char a[64], b[64], c[64];
        if (j->root) {
                printf("%scache hit rate %.1f%%, mean fused op %s, throughput %s/s over the last 10 s\n", ind,
                       100.0 * j->cache_hit_rate, fmt_bytes(j->mean_fused_bytes, a, sizeof a),
                       fmt_bytes((uint64_t) llround(j->throughput_bytes_per_sec), b, sizeof b));
                printf("%stime: negotiation %.3g ms per tensor (%s in all)", ind,
                       j->tensors_negotiated ? (double) j->negotiation_usec / 1e3 / (double) j->tensors_negotiated
                                             : 0.0,
                       fmt_duration(j->negotiation_usec, c, sizeof c));
        } else
                printf("%stime: negotiated by the job's root daemon", ind);
        printf(", data movement %s per rank here\n", fmt_duration(j->data_usec, a, sizeof a));
}

static void print_config(const Hvd__Status *s) {
        if (!s->n_config)
                return;
        int col = printf("  configuration:    ");
        for (size_t i = 0; i < s->n_config; i++) {
                const Hvd__ConfigItem *ci = s->config[i];
                int w = (int) strlen(ci->key) + 1 + text_width(ci->value) + 1;
                if (col + w > 79 && col > 20) {
                        printf("\n                    ");
                        col = 20;
                }
                printf(" %s=%s", ci->key, *ci->value ? ci->value : "\"\"");
                col += w;
        }
        printf("\n");
}

static void print_status(const Hvd__Status *s) {
        char a[64], b[64];
        printf("hvd-coordinatord %s, pid %" PRIu32 " on %s, up %s\n", s->version, s->pid, s->host,
               fmt_duration(s->uptime_usec, a, sizeof a));
        printf("  runtime dir:       %s\n", s->runtime_dir);
        printf("  log level:         %s\n", s->log_level);
        if (s->metrics_listen && *s->metrics_listen)
                printf("  metrics:           http://%s/metrics\n", s->metrics_listen);
        printf("  fusion threshold:  %s (default for jobs)\n", fmt_bytes(s->fusion_threshold, a, sizeof a));
        printf("  cycle time:        %.3g ms (default for jobs)\n", (double) s->cycle_time_usec / 1e3);
        if (s->peer_endpoint && *s->peer_endpoint)
                printf("  peer endpoint:     %s\n", s->peer_endpoint);
        print_config(s);
        for (size_t i = 0; i < s->n_peers; i++) {
                const Hvd__PeerStatus *p = s->peers[i];
                bool in = strcmp(p->direction, "in") == 0;
                printf("  peer:              %s %s %s, heard %s ago, rtt ", in ? "node" : "root",
                       in ? p->host : p->endpoint, p->state, fmt_duration(p->last_heard_usec, a, sizeof a));
                if (p->rtt_usec)
                        printf("%.3g ms", (double) p->rtt_usec / 1e3);
                else
                        printf("not measured yet");
                printf(", %" PRIu32 " job%s\n", p->jobs, p->jobs == 1 ? "" : "s");
        }
        for (size_t i = 0; i < s->n_offers; i++) {
                const Hvd__HostOffer *o = s->offers[i];
                char slots[32] = "the job's slots";
                if (o->slots)
                        snprintf(slots, sizeof slots, "%" PRIu32 " slot%s", o->slots, o->slots == 1 ? "" : "s");
                printf("  offered host:      %s, %s, daemon pid %" PRIu32 " in %s, heard %s ago\n", o->host, slots,
                       o->pid, o->runtime_dir, fmt_duration(o->age_usec, a, sizeof a));
        }
        printf("  jobs:              %zu\n", s->n_jobs);
        if (!s->n_jobs)
                return;
        int w = 6;
        for (size_t i = 0; i < s->n_jobs; i++)
                w = HVD_MAX(w, text_width(s->jobs[i]->job_id));
        printf("\n%-*s  %5s  %-8s  %8s  %9s  %8s  %9s  %9s  %10s  %10s\n", w, "JOB", "SIZE", "STATE", "AGE", "CYCLES",
               "TENSORS", "FUSED-OPS", "IN-FUSED", "CACHE-HITS", "BYTES");
        for (size_t i = 0; i < s->n_jobs; i++) {
                const Hvd__JobStatus *j = s->jobs[i];
                printf("%s%*s  %5" PRIu32 "  %-8s  %8s  %9" PRIu64 "  %8" PRIu64 "  %9" PRIu64 "  %9" PRIu64
                       "  %10" PRIu64 "  %10s\n",
                       j->job_id, w - text_width(j->job_id), "", j->size, j->state,
                       fmt_duration(j->age_usec, a, sizeof a), j->cycles, j->tensors_negotiated, j->fused_ops,
                       j->tensors_in_fused_ops, j->cache_hits, fmt_bytes(j->bytes_reduced, b, sizeof b));
                if (strcmp(j->state, "joining") == 0)
                        printf("    waiting: %zu of %" PRIu32 " ranks have joined\n", j->n_ranks, j->size);
                print_ranks(s, j);
                if (strcmp(j->state, "joining") != 0)
                        print_job_counters(j, "    ");
                if (j->abort_reason && *j->abort_reason)
                        printf("    aborted: %s\n", j->abort_reason);
                if (j->stalled && *j->stalled)
                        printf("    stalled: %s\n", j->stalled);
                if (j->relay && *j->relay)
                        printf("    relay: %s\n", j->relay);
        }
}

static void print_jobs(const Hvd__Status *s) {
        char a[64];
        for (size_t i = 0; i < s->n_jobs; i++) {
                const Hvd__JobStatus *j = s->jobs[i];
                printf("%s %" PRIu32 " %s %s %zu/%" PRIu32 "\n", j->job_id, j->size, j->state,
                       fmt_duration(j->age_usec, a, sizeof a), j->n_ranks, j->size);
        }
}

/* The data plane's switches that are on, "+"-separated ("none" when none). */
static const char *fmt_switches(uint32_t sw, char *buf, size_t len) {
        static const char *const names[HVD_TUNE_N_SWITCHES] = {
                [HVD_TUNE_SWITCH_SEND_THREAD] = "send-thread",
                [HVD_TUNE_SWITCH_SMALL_CHUNKS] = "small-chunks",
                [HVD_TUNE_SWITCH_SHM_CHUNKS] = "shm-chunks",
        };
        size_t o = 0;
        buf[0] = '\0';
        for (int k = 0; k < HVD_TUNE_N_SWITCHES; k++)
                if (sw >> k & 1 && o < len)
                        o += (size_t) snprintf(buf + o, len - o, "%s%s", o ? "+" : "", names[k]);
        return o ? buf : "none";
}

/* The root's autotuner: its state, what is in force, the best so far. */
static void print_autotune(const Hvd__AutotuneStatus *a) {
        char b[64], c[64], s[96];
        printf("  autotune: %s, %" PRIu32 " samples; now %s, %.1f ms, switches %s", a->state, a->samples,
               fmt_bytes(a->fusion_threshold, b, sizeof b), (double) a->cycle_time_usec / 1e3,
               fmt_switches(a->switches, s, sizeof s));
        if (a->generation)
                printf(" (change %" PRIu64 ", from schedule %" PRIu64 ")", a->generation, a->applied_seq);
        if (a->best_score > 0)
                printf("; best %s, %.1f ms, switches %s at %s/s", fmt_bytes(a->best_fusion_threshold, c, sizeof c),
                       (double) a->best_cycle_time_usec / 1e3, fmt_switches(a->best_switches, s, sizeof s),
                       fmt_bytes((uint64_t) a->best_score, b, sizeof b));
        if (a->fixed_switches)
                printf("; fixed switches %s", fmt_switches(a->fixed_switches, s, sizeof s));
        printf("\n");
}

static void print_job(const Hvd__Status *s, const Hvd__JobStatus *j) {
        char a[64], b[64], c[64];
        printf("job %s: %s, %" PRIu32 " ranks on %" PRIu32 " host%s (%" PRIu32 " here), age %s, %s\n", j->job_id,
               j->state, j->size, j->cross_size, j->cross_size == 1 ? "" : "s", j->ranks_here,
               fmt_duration(j->age_usec, a, sizeof a),
               j->root ? "negotiated here" : "negotiated by the root daemon of its first host");
        printf("  cycles %" PRIu64 ", tensors negotiated %" PRIu64 ", fused ops %" PRIu64
               ", bytes %s, cache hits %" PRIu64 "\n",
               j->cycles, j->tensors_negotiated, j->fused_ops, fmt_bytes(j->bytes_reduced, b, sizeof b), j->cache_hits);
        print_job_counters(j, "  ");
        if (j->abort_reason && *j->abort_reason)
                printf("  aborted: %s\n", j->abort_reason);
        if (j->stalled && *j->stalled)
                printf("  stalled: %s\n", j->stalled);
        if (j->relay && *j->relay)
                printf("  relay: %s\n", j->relay);
        if (j->launcher && *j->launcher)
                printf("  placed by: %s\n", j->launcher);
        if (j->autotune)
                print_autotune(j->autotune);
        if (j->elastic) {
                const Hvd__ElasticStatus *e = j->elastic;
                printf("  elastic: generation %" PRIu64 ", %u to %u ranks, %u reset%s (last %.2f s), %u waiting\n",
                       e->generation, e->min_size, e->max_size, e->resets, e->resets == 1 ? "" : "s",
                       (double) e->last_reset_usec / 1e6, e->waiting);
                if (*e->left)
                        printf("  left: %s\n", e->left);
                if (*e->joined)
                        printf("  joined: %s\n", e->joined);
        }
        int hw = 4;
        for (size_t i = 0; i < j->n_rank_status; i++)
                hw = HVD_MAX(hw, text_width(j->rank_status[i]->host));
        printf("\n%5s  %-6s  %-*s  %8s  %5s  %-8s  %9s  %7s  %8s  %8s  %8s\n", "RANK", "WHERE", hw, "HOST", "PID",
               "LOCAL", "STATE", "LAST-SEEN", "PENDING", "READIES", "DONE-SEQ", "BUSY");
        for (size_t i = 0; i < j->n_rank_status; i++) {
                const Hvd__RankStatus *r = j->rank_status[i];
                char pid[16] = "-", seen[64] = "-", seq[24] = "-", busy[64] = "-";
                if (r->pid)
                        snprintf(pid, sizeof pid, "%" PRIu32, r->pid);
                if (r->seen)
                        snprintf(seen, sizeof seen, "%s ago", fmt_duration(r->last_seen_usec, c, sizeof c));
                if (r->local) {
                        snprintf(seq, sizeof seq, "%" PRIu64, r->done_seq);
                        fmt_duration(r->busy_usec, busy, sizeof busy);
                }
                printf("%5" PRIu32 "  %-6s  %s%*s  %8s  %5" PRIu32 "  %-8s  %9s  %7" PRIu32 "  %8" PRIu64
                       "  %8s  %8s\n",
                       r->rank, r->local ? "local" : "remote", r->host, hw - text_width(r->host), "", pid,
                       r->local_rank, r->state, seen, r->tensors_pending, r->readies, seq, busy);
        }
        (void) s;
}

static int parse_timeout(const char *s, uint64_t *ret) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (!*s || errno || *end || !isfinite(v) || v <= 0 || v > 3600)
                return -EINVAL;
        *ret = (uint64_t) llround(v * 1e6);
        return 0;
}

/* Sets c->endpoint (and c->runtime_dir, for messages) from --endpoint
 * (ipc://PATH, tcp://HOST:PORT or a runtime directory), else from
 * c->runtime_dir, $HVD_RUNTIME_DIR or the default. Returns 0 or an exit
 * status after a message. */
static int set_endpoint(ctl_t *c, const char *endpoint) {
        if (endpoint && !strstr(endpoint, "://")) {
                /* a runtime directory */
                snprintf(c->endpoint, sizeof c->endpoint, "ipc://%s/control.sock", endpoint);
                c->runtime_dir = endpoint;
        } else if (endpoint) {
                if (strncmp(endpoint, "ipc://", 6) != 0 && strncmp(endpoint, "tcp://", 6) != 0)
                        return usage_error("--endpoint '%s': expected ipc://PATH, tcp://HOST:PORT or a directory",
                                           endpoint);
                snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
                if (strncmp(endpoint, "ipc://", 6) == 0) {
                        snprintf(c->dir_buf, sizeof c->dir_buf, "%s", endpoint + 6);
                        char *slash = strrchr(c->dir_buf, '/');
                        if (slash && slash != c->dir_buf)
                                *slash = 0;
                        else if (slash)
                                slash[1] = 0;
                        c->runtime_dir = c->dir_buf;
                } else
                        c->runtime_dir = endpoint;
        } else {
                if (!c->runtime_dir) {
                        const char *e = getenv("HVD_RUNTIME_DIR");
                        c->runtime_dir = e && *e ? e : HVD_DEFAULT_RUNTIME_DIR;
                }
                snprintf(c->endpoint, sizeof c->endpoint, "ipc://%s/control.sock", c->runtime_dir);
        }
        return 0;
}

/* ---- timeline ---- */

/* The timeline commands take their own arguments: "hvdctl [OPTIONS]
 * timeline JOB start FILE [--mark-cycles]", "... timeline JOB stop",
 * "hvdctl timeline-repair FILE". True when argv's command is one of them. */
static bool is_timeline_command(int argc, char **argv) {
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (strcmp(a, "-r") == 0 || strcmp(a, "-e") == 0 || strcmp(a, "-t") == 0 ||
                    strcmp(a, "--runtime-dir") == 0 || strcmp(a, "--endpoint") == 0 || strcmp(a, "--timeout") == 0) {
                        i++;
                        continue;
                }
                if (a[0] == '-')
                        continue;
                return strcmp(a, "timeline") == 0 || strcmp(a, "timeline-repair") == 0;
        }
        return false;
}

/* Whether line [s, e) is whole JSON braces: every "{" closed, outside strings. */
static bool line_balanced(const char *s, const char *e) {
        int depth = 0;
        bool str = false, seen = false;
        for (const char *p = s; p < e; p++) {
                if (str) {
                        if (*p == '\\')
                                p++;
                        else if (*p == '"')
                                str = false;
                } else if (*p == '"')
                        str = true;
                else if (*p == '{') {
                        depth++;
                        seen = true;
                } else if (*p == '}' && --depth < 0)
                        return false;
        }
        return seen && depth == 0 && !str;
}

/* A timeline of a killed job lacks its closing "]" (and, after a failed
 * write, may end in half an event): drop any partial last event and close
 * the array. Returns an exit status. */
static int timeline_repair(const char *path) {
        _cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
                fprintf(stderr, "hvdctl: cannot open '%s': %s\n", path, strerror(errno));
                return EXIT_ERROR;
        }
        char first = 0;
        if (pread(fd, &first, 1, 0) != 1 || first != '[') {
                fprintf(stderr, "hvdctl: '%s' is not a timeline (a JSON array of trace events)\n", path);
                return EXIT_ERROR;
        }
        /* the end is all that matters: the last events fit in the tail */
        size_t tail = (size_t) HVD_MIN((uint64_t) st.st_size, UINT64_C(1) << 20);
        off_t base = st.st_size - (off_t) tail;
        _cleanup_free_ char *t = malloc(tail + 1);
        if (!t || pread(fd, t, tail, base) != (ssize_t) tail) {
                fprintf(stderr, "hvdctl: cannot read '%s': %s\n", path, t ? strerror(errno) : "out of memory");
                return EXIT_ERROR;
        }
        size_t e = tail;
        while (e > 0 && strchr(" \t\r\n", t[e - 1]))
                e--;
        if (e > 0 && t[e - 1] == ']') {
                printf("%s is complete already\n", path);
                return 0;
        }
        /* the last line must be one whole event, else it goes */
        size_t ls = e;
        while (ls > 0 && t[ls - 1] != '\n')
                ls--;
        if (e > ls && !(t[e - 1] == '[' && base + (off_t) e == 1) && !line_balanced(t + ls, t + e))
                e = ls;
        while (e > 0 && strchr(" \t\r\n,", t[e - 1]))
                e--;
        if (e == 0 || (t[e - 1] != '}' && t[e - 1] != '[')) {
                fprintf(stderr, "hvdctl: '%s' does not end like a timeline; not changed\n", path);
                return EXIT_ERROR;
        }
        off_t end = base + (off_t) e;
        if (ftruncate(fd, end) < 0 || pwrite(fd, "\n]\n", 3, end) != 3) {
                fprintf(stderr, "hvdctl: cannot write '%s': %s\n", path, strerror(errno));
                return EXIT_ERROR;
        }
        printf("%s repaired: %jd bytes of events, closed with ]\n", path, (intmax_t) end);
        return 0;
}

static int timeline_main(int argc, char **argv) {
        const char *pos[5] = { NULL }, *runtime_dir = NULL, *endpoint = NULL;
        size_t n_pos = 0;
        bool mark_cycles = false;
        ctl_t c = { .timeout_usec = DEFAULT_TIMEOUT_USEC };
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *val = NULL;
                bool needs = strcmp(a, "-r") == 0 || strcmp(a, "-e") == 0 || strcmp(a, "-t") == 0 ||
                             strcmp(a, "--runtime-dir") == 0 || strcmp(a, "--endpoint") == 0 ||
                             strcmp(a, "--timeout") == 0;
                if (needs) {
                        if (i + 1 >= argc)
                                return usage_error("option '%s' requires an argument", a);
                        val = argv[++i];
                } else if (strncmp(a, "--runtime-dir=", 14) == 0 || strncmp(a, "--endpoint=", 11) == 0 ||
                           strncmp(a, "--timeout=", 10) == 0) {
                        val = strchr(a, '=') + 1;
                        needs = true;
                }
                if (needs) {
                        if (a[1] == 'r' || strncmp(a, "--r", 3) == 0)
                                runtime_dir = val;
                        else if (a[1] == 'e' || strncmp(a, "--e", 3) == 0)
                                endpoint = val;
                        else if (parse_timeout(val, &c.timeout_usec) < 0)
                                return usage_error("--timeout '%s': expected seconds in (0, 3600]", val);
                } else if (strcmp(a, "--mark-cycles") == 0)
                        mark_cycles = true;
                else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                        help();
                        return 0;
                } else if (a[0] == '-' && a[1])
                        return usage_error("unknown option '%s'", a);
                else if (n_pos < ELEMENTSOF(pos))
                        pos[n_pos++] = a;
                else
                        return usage_error("unexpected argument '%s'", a);
        }
        hvd_assert(n_pos > 0); /* is_timeline_command() found the command word */
        if (strcmp(pos[0], "timeline-repair") == 0) {
                if (n_pos != 2)
                        return usage_error("usage: hvdctl timeline-repair FILE");
                return timeline_repair(pos[1]);
        }
        bool start = n_pos == 4 && strcmp(pos[2], "start") == 0, stop = n_pos == 3 && strcmp(pos[2], "stop") == 0;
        if (!start && !stop)
                return usage_error("usage: hvdctl timeline JOB start FILE [--mark-cycles] | hvdctl timeline JOB stop");
        if (mark_cycles && !start)
                return usage_error("--mark-cycles goes with 'start'");
        if (strlen(pos[1]) > HVD_WIRE_MAX_JOB_ID || (start && (!*pos[3] || strlen(pos[3]) > HVD_WIRE_MAX_TEXT)))
                return usage_error("job id or file name too long");
        if (endpoint && runtime_dir)
                return usage_error("--runtime-dir and --endpoint exclude each other");
        c.runtime_dir = runtime_dir;
        int e = set_endpoint(&c, endpoint);
        if (e)
                return e;
        Hvd__TimelineControl q = HVD__TIMELINE_CONTROL__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT, *reply = NULL;
        q.job_id = (char *) pos[1];
        q.start = start;
        q.file = (char *) (start ? pos[3] : "");
        q.mark_cycles = mark_cycles;
        req.body_case = HVD__ENVELOPE__BODY_TIMELINE_CONTROL;
        req.timeline_control = &q;
        if ((e = call(&c, &req, HVD__ENVELOPE__BODY_TIMELINE_CONTROL, &reply)))
                return e;
        int ret = 0;
        if (reply->timeline_control->code < 0) {
                fprintf(stderr, "hvdctl: job %s, rank 0: %s\n", pos[1], reply->timeline_control->message);
                ret = EXIT_ERROR;
        } else if (start)
                printf("job %s: rank 0 records the timeline into %s\n", pos[1], reply->timeline_control->message);
        else
                printf("job %s: timeline stopped\n", pos[1]);
        hvd_wire_free(&reply);
        return ret;
}

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
        (void) sig;
        interrupted = 1;
}

typedef enum { CMD_STATUS, CMD_JOBS, CMD_JOB, CMD_METRICS, CMD_LOG_LEVEL, CMD_VERSION } command_t;

/* Runs the command once. Returns 0 or an exit status after a message. */
static int run(const ctl_t *c, command_t cmd) {
        Hvd__Envelope *reply = NULL;
        int e;
        if (cmd == CMD_METRICS) {
                Hvd__MetricsRequest q = HVD__METRICS_REQUEST__INIT;
                Hvd__Envelope req = HVD__ENVELOPE__INIT;
                req.body_case = HVD__ENVELOPE__BODY_METRICS_REQUEST;
                req.metrics_request = &q;
                if ((e = call(c, &req, HVD__ENVELOPE__BODY_METRICS_REPLY, &reply)))
                        return e;
                fputs(reply->metrics_reply->text, stdout);
                hvd_wire_free(&reply);
                return 0;
        }
        if (cmd == CMD_LOG_LEVEL) {
                Hvd__LogLevel q = HVD__LOG_LEVEL__INIT;
                Hvd__Envelope req = HVD__ENVELOPE__INIT;
                q.level = (char *) (c->level ? c->level : "");
                req.body_case = HVD__ENVELOPE__BODY_LOG_LEVEL;
                req.log_level = &q;
                if ((e = call(c, &req, HVD__ENVELOPE__BODY_LOG_LEVEL, &reply)))
                        return e;
                printf("%s\n", reply->log_level->level);
                hvd_wire_free(&reply);
                return 0;
        }
        if ((e = fetch_status(c, cmd == CMD_JOB ? c->job_id : NULL, &reply)))
                return e;
        const Hvd__Status *s = reply->status;
        if (cmd == CMD_VERSION)
                printf("hvd-coordinatord %s (pid %" PRIu32 ") at %s\n", s->version, s->pid, s->runtime_dir);
        else if (cmd == CMD_STATUS && c->json)
                e = print_json(hvd_status_to_json(s));
        else if (cmd == CMD_STATUS)
                print_status(s);
        else if (cmd == CMD_JOBS && c->json)
                e = print_json(hvd_jobs_to_json(s));
        else if (cmd == CMD_JOBS)
                print_jobs(s);
        else if (s->n_jobs != 1) {
                fprintf(stderr, "hvdctl: hvd-coordinatord at %s has no job '%s' ('hvdctl jobs' lists its jobs)\n",
                        c->runtime_dir, c->job_id);
                e = EXIT_NO_JOB;
        } else if (c->json)
                e = print_json(hvd_job_to_json(s->jobs[0]));
        else
                print_job(s, s->jobs[0]);
        hvd_wire_free(&reply);
        return e;
}

/* Repeats the command every interval until SIGINT or SIGTERM, which end it
 * with status 0. A failure after the first round is shown and retried: a
 * restarting daemon should not end the watch. */
static int watch(const ctl_t *c, command_t cmd, uint64_t interval_usec) {
        struct sigaction sa = { .sa_handler = on_signal };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        bool tty = isatty(STDOUT_FILENO);
        for (unsigned round = 0; !interrupted; round++) {
                if (tty)
                        fputs("\033[H\033[2J", stdout);
                else if (round && !c->json)
                        putchar('\n');
                if (tty || !c->json) {
                        time_t t = time(NULL);
                        char when[64];
                        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
                        if (!c->json && cmd != CMD_METRICS)
                                printf("Every %.3gs: hvdctl at %s, %s\n\n", (double) interval_usec / 1e6,
                                       c->runtime_dir, when);
                }
                int e = run(c, cmd);
                if (e && round == 0)
                        return e;
                if (fflush(stdout) != 0 || ferror(stdout))
                        return EXIT_ERROR;
                struct timespec ts = { .tv_sec = (time_t) (interval_usec / USEC_PER_SEC),
                                       .tv_nsec = (long) (interval_usec % USEC_PER_SEC) * 1000 };
                while (!interrupted && nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        return 0;
}

static bool is_number(const char *s) {
        char *end;
        if (!s || !*s)
                return false;
        errno = 0;
        double v = strtod(s, &end);
        return !errno && !*end && isfinite(v);
}

/* hvdctl keygen [DIR]: a new CURVE key pair for hvd-coordinatord's peer
 * socket, as Z85 text: DIR/coordinatord.key (public, to list in the other
 * daemons' peer_public_keys) and DIR/coordinatord.secret (mode 0600, for
 * curve_secret_key_file). Existing files are never overwritten. */
static int cmd_keygen(int argc, char **argv) {
        if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
                if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
                        printf("Usage: hvdctl keygen [DIR]\n"
                               "Writes a new CURVE key pair for hvd-coordinatord into DIR (default %s/hvd):\n"
                               "DIR/coordinatord.key (public) and DIR/coordinatord.secret (secret, mode 0600).\n",
                               SYSCONFDIR);
                        return 0;
                }
                return usage_error("keygen takes one argument, a directory");
        }
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", argc == 2 ? argv[1] : SYSCONFDIR "/hvd");
        if (!zmq_has("curve")) {
                fprintf(stderr, "hvdctl: this libzmq has no CURVE support\n");
                return EXIT_ERROR;
        }
        char pub[41], sec[41];
        if (zmq_curve_keypair(pub, sec) < 0) {
                fprintf(stderr, "hvdctl: cannot make a key pair: %s\n", zmq_strerror(zmq_errno()));
                return EXIT_ERROR;
        }
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
                fprintf(stderr, "hvdctl: cannot create %s: %s\n", dir, strerror(errno));
                return errno == EACCES ? EXIT_DENIED : EXIT_ERROR;
        }
        static const struct {
                const char *name;
                mode_t mode;
                bool secret;
        } files[] = { { "coordinatord.secret", 0600, true }, { "coordinatord.key", 0644, false } };
        for (size_t i = 0; i < 2; i++) {
                char path[PATH_MAX + 32];
                snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
                int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, files[i].mode);
                if (fd < 0) {
                        int e = errno;
                        fprintf(stderr, "hvdctl: cannot create %s: %s%s\n", path, strerror(e),
                                e == EEXIST ? " (remove the old key pair first)" : "");
                        if (i == 1) {
                                snprintf(path, sizeof path, "%s/%s", dir, files[0].name);
                                unlink(path);
                        }
                        explicit_bzero(sec, sizeof sec);
                        return e == EACCES ? EXIT_DENIED : EXIT_ERROR;
                }
                char text[256];
                int n = snprintf(text, sizeof text,
                                 "# hvd-coordinatord CURVE %s key (Z85), made by hvdctl keygen\n%s\n",
                                 files[i].secret ? "secret" : "public", files[i].secret ? sec : pub);
                bool ok = fchmod(fd, files[i].mode) == 0 && write(fd, text, (size_t) n) == n;
                ok = close(fd) == 0 && ok;
                explicit_bzero(text, sizeof text);
                if (!ok) {
                        fprintf(stderr, "hvdctl: cannot write %s: %s\n", path, strerror(errno));
                        explicit_bzero(sec, sizeof sec);
                        return EXIT_ERROR;
                }
        }
        explicit_bzero(sec, sizeof sec);
        printf("public key %s\nwritten to %s/coordinatord.key; secret key in %s/coordinatord.secret (mode 0600)\n", pub,
               dir, dir);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "runtime-dir", required_argument, NULL, 'r' }, { "endpoint", required_argument, NULL, 'e' },
                { "timeout", required_argument, NULL, 't' },     { "json", no_argument, NULL, 'j' },
                { "watch", optional_argument, NULL, 'w' },       { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },           {},
        };
        if (argc >= 2 && strcmp(argv[1], "keygen") == 0)
                return cmd_keygen(argc - 1, argv + 1);
        ctl_t c = { .timeout_usec = DEFAULT_TIMEOUT_USEC };
        const char *endpoint = NULL, *args[3] = { NULL };
        size_t n_args = 0;
        uint64_t watch_usec = 0;
        int opt;
        if (is_timeline_command(argc, argv))
                return timeline_main(argc, argv);

        opterr = 0;
        /* options may come before or after COMMAND: "hvdctl status --json" */
        while (optind < argc) {
                opt = getopt_long(argc, argv, "+:r:e:t:jw::hV", opts, NULL);
                if (opt < 0) {
                        if (optind >= argc)
                                break;
                        if (n_args == ELEMENTSOF(args))
                                return usage_error("unexpected argument '%s'", argv[optind]);
                        args[n_args++] = argv[optind++];
                        continue;
                }
                /* getopt gives every option that requires an argument one */
                hvd_assert(optarg || (opt != 'r' && opt != 'e' && opt != 't'));
                switch (opt) {
                case 'r':
                        if (!*optarg || strlen(optarg) >= PATH_MAX - 32)
                                return usage_error("--runtime-dir '%s': expected a directory", optarg);
                        c.runtime_dir = optarg;
                        break;
                case 'e':
                        if (!*optarg || strlen(optarg) >= PATH_MAX - 32)
                                return usage_error("--endpoint '%s': expected e.g. ipc:///run/hvd/control.sock",
                                                   optarg);
                        endpoint = optarg;
                        break;
                case 't':
                        if (parse_timeout(optarg, &c.timeout_usec) < 0)
                                return usage_error("--timeout '%s': expected seconds in (0, 3600]", optarg);
                        break;
                case 'j': c.json = true; break;
                case 'w': {
                        /* "--watch 5" as well as "--watch=5" */
                        const char *v = optarg;
                        if (!v && optind < argc && is_number(argv[optind]))
                                v = argv[optind++];
                        watch_usec = 2 * USEC_PER_SEC;
                        if (v && (parse_timeout(v, &watch_usec) < 0 || watch_usec < 100 * USEC_PER_MSEC))
                                return usage_error("--watch '%s': expected seconds in [0.1, 3600]", v);
                        break;
                }
                case 'h': help(); return 0;
                case 'V': printf("hvdctl (hvd) %s\n", PACKAGE_VERSION); return 0;
                case ':': return usage_error("option '%s' requires an argument", argv[optind - 1]);
                default:
                        if (optopt && optopt < 0x100)
                                return usage_error("unknown option '-%c'", optopt);
                        return usage_error("unknown option '%s'", argv[optind - 1]);
                }
        }
        if (!n_args)
                return usage_error("no command given: status, jobs, job, metrics, log-level or version");
        const char *command = args[0];
        if (endpoint && c.runtime_dir)
                return usage_error("--runtime-dir and --endpoint exclude each other");
        if (strcmp(command, "help") == 0) {
                help();
                return 0;
        }
        static const struct {
                const char *name;
                command_t cmd;
                size_t min_args, max_args;
                bool json, watch;
        } cmds[] = {
                { "status", CMD_STATUS, 0, 0, true, true },
                { "jobs", CMD_JOBS, 0, 0, true, true },
                { "job", CMD_JOB, 1, 1, true, true },
                { "metrics", CMD_METRICS, 0, 0, false, true },
                { "log-level", CMD_LOG_LEVEL, 0, 1, false, false },
                { "version", CMD_VERSION, 0, 0, false, false },
        };
        size_t k = 0;
        while (k < ELEMENTSOF(cmds) && strcmp(cmds[k].name, command) != 0)
                k++;
        if (k == ELEMENTSOF(cmds))
                return usage_error("unknown command '%s': expected status, jobs, job, metrics, log-level or version",
                                   command);
        if (n_args - 1 < cmds[k].min_args)
                return usage_error("%s needs an argument: hvdctl job ID", command);
        if (n_args - 1 > cmds[k].max_args)
                return usage_error("unexpected argument '%s'", args[cmds[k].max_args + 1]);
        if (c.json && !cmds[k].json)
                return usage_error("--json is for status, jobs and job");
        if (watch_usec && !cmds[k].watch)
                return usage_error("--watch is for status, jobs, job and metrics");
        command_t cmd = cmds[k].cmd;
        if (cmd == CMD_JOB) {
                c.job_id = args[1];
                if (!*c.job_id || strlen(c.job_id) > HVD_WIRE_MAX_JOB_ID)
                        return usage_error("job id '%s': expected 1 to %d bytes", c.job_id, HVD_WIRE_MAX_JOB_ID);
        }
        if (cmd == CMD_LOG_LEVEL && n_args == 2) {
                c.level = args[1];
                if (hvd_log_level_from_string(c.level) < 0)
                        return usage_error("log level '%s': expected err, warning, notice, info or debug", c.level);
        }

        int e = set_endpoint(&c, endpoint);
        if (e)
                return e;

        if (cmd == CMD_VERSION)
                printf("hvdctl %s\n", PACKAGE_VERSION);
        fflush(stdout);
        e = watch_usec ? watch(&c, cmd, watch_usec) : run(&c, cmd);
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "hvdctl: cannot write the output: %s\n", strerror(errno));
                return EXIT_ERROR;
        }
        return e;
}
