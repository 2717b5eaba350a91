/* hvdctl.c — operator CLI for hvd-coordinatord: one StatusRequest over the
 * control socket, printed as a readable summary, one line per job, or JSON
 * (field names = hvd.proto's). Exit status tells what went wrong: 1 no daemon
 * or other error, 2 usage, 3 timeout, 4 permission denied. */
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
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "conf.h"
#include "hvd.h"
#include "util.h"
#include "wire.h"

#define DEFAULT_TIMEOUT_USEC (5 * USEC_PER_SEC)

enum {
        EXIT_ERROR = 1,
        EXIT_USAGE = 2,
        EXIT_TIMEOUT = 3,
        EXIT_DENIED = 4,
};

typedef struct ctl {
        const char *runtime_dir;  /* for messages; the endpoint's directory with --endpoint */
        char endpoint[PATH_MAX + 32];
        char dir_buf[PATH_MAX];
        uint64_t timeout_usec;
        bool json;
} ctl_t;

static void help(void) {
        printf("Usage: hvdctl [OPTIONS] COMMAND [--json]\n"
               "\n"
               "Asks the local hvd-coordinatord about its state and its jobs.\n"
               "\n"
               "Commands:\n"
               "  status      Daemon summary and a table of jobs (--json: the same as JSON)\n"
               "  jobs        One line per job: id, size, state, age, joined ranks (--json: array)\n"
               "  version     Versions of hvdctl and of the running daemon\n"
               "  keygen [DIR]  Write a CURVE key pair for the peer socket into DIR\n"
               "              (default %s/hvd): coordinatord.key, coordinatord.secret\n"
               "\n"
               "Options:\n"
               "  -r, --runtime-dir DIR    The daemon's runtime directory (default\n"
               "                           $HVD_RUNTIME_DIR, else %s)\n"
               "  -e, --endpoint ENDPOINT  Control endpoint, e.g. ipc:///run/hvd/control.sock\n"
               "                           (instead of --runtime-dir)\n"
               "  -t, --timeout SEC        Give up after SEC seconds (default 5)\n"
               "  -j, --json               Print JSON (status, jobs)\n"
               "  -h, --help               Show this help\n"
               "  -V, --version            Show hvdctl's version\n"
               "\n"
               "Exit status: 0 success, 1 no daemon or other error, 2 usage error,\n"
               "3 the daemon did not answer in time, 4 permission denied.\n",
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

/* Sends one StatusRequest. Returns 0 and the Status envelope in *ret (free
 * with hvd_wire_free), or an exit status after a message. */
static int fetch_status(const ctl_t *c, Hvd__Envelope **ret) {
        if (strncmp(c->endpoint, "ipc://", 6) == 0) {
                int e = precheck_ipc(c);
                if (e)
                        return e;
        }
        Hvd__StatusRequest q = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT, *reply = NULL;
        req.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        req.status_request = &q;
        int r = hvd_control_call(NULL, c->endpoint, &req, c->timeout_usec, &reply);
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
                hvd_wire_free(&reply);
                return EXIT_ERROR;
        }
        if (reply->body_case != HVD__ENVELOPE__BODY_STATUS) {
                fprintf(stderr, "hvdctl: unexpected reply from hvd-coordinatord at %s\n", c->endpoint);
                hvd_wire_free(&reply);
                return EXIT_ERROR;
        }
        *ret = reply;
        return 0;
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

/* A JSON string: quotes, backslashes and control characters escaped,
 * invalid UTF-8 replaced by U+FFFD so the output always parses. */
static void json_string(FILE *f, const char *s) {
        const unsigned char *p = (const unsigned char *) (s ? s : "");
        fputc('"', f);
        while (*p) {
                unsigned char ch = *p;
                if (ch == '"' || ch == '\\') {
                        fputc('\\', f);
                        fputc(ch, f);
                        p++;
                } else if (ch < 0x20 || ch == 0x7f) {
                        switch (ch) {
                        case '\n': fputs("\\n", f); break;
                        case '\r': fputs("\\r", f); break;
                        case '\t': fputs("\\t", f); break;
                        case '\b': fputs("\\b", f); break;
                        case '\f': fputs("\\f", f); break;
                        default: fprintf(f, "\\u%04x", ch); break;
                        }
                        p++;
                } else if (ch < 0x80) {
                        fputc(ch, f);
                        p++;
                } else {
                        /* validate one UTF-8 sequence: length, continuation bytes, no
                         * overlong forms, no surrogates, nothing above U+10FFFF */
                        size_t n = ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc2 ? 2 : 0;
                        uint32_t cp = n == 4 ? ch & 0x07u : n == 3 ? ch & 0x0fu : ch & 0x1fu;
                        bool ok = n > 0 && ch < 0xf5;
                        for (size_t i = 1; ok && i < n; i++) {
                                if ((p[i] & 0xc0) != 0x80)
                                        ok = false;
                                else
                                        cp = (cp << 6) | (p[i] & 0x3fu);
                        }
                        if (ok && ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
                                   (n == 4 && (cp < 0x10000 || cp > 0x10ffff))))
                                ok = false;
                        if (ok) {
                                fwrite(p, 1, n, f);
                                p += n;
                        } else {
                                fputs("\\ufffd", f);
                                p++;
                        }
                }
        }
        fputc('"', f);
}

static void json_job(FILE *f, const Hvd__JobStatus *j, const char *ind) {
        fprintf(f, "%s{\n%s  \"job_id\": ", ind, ind);
        json_string(f, j->job_id);
        fprintf(f, ",\n%s  \"size\": %" PRIu32 ",\n%s  \"state\": ", ind, j->size, ind);
        json_string(f, j->state);
        fprintf(f, ",\n%s  \"ranks\": [", ind);
        for (size_t i = 0; i < j->n_ranks; i++) {
                const Hvd__RankInfo *ri = j->ranks[i];
                fprintf(f, "%s\n%s    {\"rank\": %" PRIu32 ", \"local_rank\": %" PRIu32 ", \"pid\": %" PRIu32
                           ", \"host\": ",
                        i ? "," : "", ind, ri->rank, ri->local_rank, ri->pid);
                json_string(f, ri->host);
                fputs(", \"data_addr\": ", f);
                json_string(f, ri->data_addr);
                fprintf(f, ", \"cross_rank\": %" PRIu32 "}", ri->cross_rank);
        }
        if (j->n_ranks)
                fprintf(f, "\n%s  ],\n", ind);
        else
                fprintf(f, "],\n");
        fprintf(f,
                "%s  \"cycles\": %" PRIu64 ",\n"
                "%s  \"tensors_negotiated\": %" PRIu64 ",\n"
                "%s  \"fused_ops\": %" PRIu64 ",\n"
                "%s  \"bytes_reduced\": %" PRIu64 ",\n"
                "%s  \"age_usec\": %" PRIu64 ",\n"
                "%s  \"schedules\": %" PRIu64 ",\n"
                "%s  \"cache_hits\": %" PRIu64 ",\n"
                "%s  \"tensors_in_fused_ops\": %" PRIu64 ",\n"
                "%s  \"joined_ranks\": %" PRIu32 ",\n"
                "%s  \"abort_reason\": ",
                ind, j->cycles, ind, j->tensors_negotiated, ind, j->fused_ops, ind, j->bytes_reduced, ind,
                j->age_usec, ind, j->schedules, ind, j->cache_hits, ind, j->tensors_in_fused_ops, ind,
                j->joined_ranks, ind);
        json_string(f, j->abort_reason);
        fprintf(f, ",\n%s  \"stalled\": ", ind);
        json_string(f, j->stalled);
        fprintf(f, "\n%s}", ind);
}

static void print_status_json(const Hvd__Status *s) {
        printf("{\n  \"version\": ");
        json_string(stdout, s->version);
        printf(",\n  \"uptime_usec\": %" PRIu64 ",\n  \"pid\": %" PRIu32 ",\n  \"runtime_dir\": ", s->uptime_usec,
               s->pid);
        json_string(stdout, s->runtime_dir);
        printf(",\n  \"epoch\": %" PRIu64 ",\n  \"jobs\": [", s->epoch);
        for (size_t i = 0; i < s->n_jobs; i++) {
                fputs(i ? ",\n" : "\n", stdout);
                json_job(stdout, s->jobs[i], "    ");
        }
        printf("%s],\n  \"fusion_threshold\": %" PRIu64 ",\n  \"cycle_time_usec\": %" PRIu64 ",\n  \"host\": ",
               s->n_jobs ? "\n  " : "", s->fusion_threshold, s->cycle_time_usec);
        json_string(stdout, s->host);
        printf(",\n  \"peer_endpoint\": ");
        json_string(stdout, s->peer_endpoint);
        printf(",\n  \"peers\": [");
        for (size_t i = 0; i < s->n_peers; i++) {
                const Hvd__PeerStatus *p = s->peers[i];
                printf("%s\n    {\"endpoint\": ", i ? "," : "");
                json_string(stdout, p->endpoint);
                printf(", \"state\": ");
                json_string(stdout, p->state);
                printf(", \"last_heard_usec\": %" PRIu64 ", \"rtt_usec\": %" PRIu64 "}", p->last_heard_usec,
                       p->rtt_usec);
        }
        printf("%s]\n}\n", s->n_peers ? "\n  " : "");
}

static void print_jobs_json(const Hvd__Status *s) {
        printf("[");
        for (size_t i = 0; i < s->n_jobs; i++) {
                fputs(i ? ",\n" : "\n", stdout);
                json_job(stdout, s->jobs[i], "  ");
        }
        printf("%s]\n", s->n_jobs ? "\n" : "");
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

static void print_status(const Hvd__Status *s) {
        char a[64], b[64];
        printf("hvd-coordinatord %s, pid %" PRIu32 " on %s, up %s\n", s->version, s->pid, s->host,
               fmt_duration(s->uptime_usec, a, sizeof a));
        printf("  runtime dir:       %s\n", s->runtime_dir);
        printf("  fusion threshold:  %s (default for jobs)\n", fmt_bytes(s->fusion_threshold, a, sizeof a));
        printf("  cycle time:        %.3g ms (default for jobs)\n", (double) s->cycle_time_usec / 1e3);
        if (s->peer_endpoint && *s->peer_endpoint)
                printf("  peer endpoint:     %s\n", s->peer_endpoint);
        for (size_t i = 0; i < s->n_peers; i++) {
                const Hvd__PeerStatus *p = s->peers[i];
                printf("  peer:              %s %s, heard %s ago, rtt %.3g ms\n", p->endpoint, p->state,
                       fmt_duration(p->last_heard_usec, a, sizeof a), (double) p->rtt_usec / 1e3);
        }
        printf("  jobs:              %zu\n", s->n_jobs);
        if (!s->n_jobs)
                return;
        int w = 6;
        for (size_t i = 0; i < s->n_jobs; i++)
                w = HVD_MAX(w, text_width(s->jobs[i]->job_id));
        printf("\n%-*s  %5s  %-8s  %8s  %9s  %8s  %9s  %9s  %10s  %10s\n", w, "JOB", "SIZE", "STATE", "AGE",
               "CYCLES", "TENSORS", "FUSED-OPS", "IN-FUSED", "CACHE-HITS", "BYTES");
        for (size_t i = 0; i < s->n_jobs; i++) {
                const Hvd__JobStatus *j = s->jobs[i];
                printf("%s%*s  %5" PRIu32 "  %-8s  %8s  %9" PRIu64 "  %8" PRIu64 "  %9" PRIu64 "  %9" PRIu64
                       "  %10" PRIu64 "  %10s\n",
                       j->job_id, w - text_width(j->job_id), "", j->size, j->state, fmt_duration(j->age_usec, a, sizeof a), j->cycles,
                       j->tensors_negotiated, j->fused_ops, j->tensors_in_fused_ops, j->cache_hits,
                       fmt_bytes(j->bytes_reduced, b, sizeof b));
                if (strcmp(j->state, "joining") == 0)
                        printf("    waiting: %zu of %" PRIu32 " ranks have joined\n", j->n_ranks, j->size);
                print_ranks(s, j);
                if (j->abort_reason && *j->abort_reason)
                        printf("    aborted: %s\n", j->abort_reason);
                if (j->stalled && *j->stalled)
                        printf("    stalled: %s\n", j->stalled);
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

static int parse_timeout(const char *s, uint64_t *ret) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (!*s || errno || *end || !isfinite(v) || v <= 0 || v > 3600)
                return -EINVAL;
        *ret = (uint64_t) llround(v * 1e6);
        return 0;
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
        printf("public key %s\nwritten to %s/coordinatord.key; secret key in %s/coordinatord.secret (mode 0600)\n",
               pub, dir, dir);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "runtime-dir", required_argument, NULL, 'r' },
                { "endpoint", required_argument, NULL, 'e' },
                { "timeout", required_argument, NULL, 't' },
                { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        if (argc >= 2 && strcmp(argv[1], "keygen") == 0)
                return cmd_keygen(argc - 1, argv + 1);
        ctl_t c = { .timeout_usec = DEFAULT_TIMEOUT_USEC };
        const char *endpoint = NULL, *command = NULL;
        int opt;

        opterr = 0;
        /* options may come before or after COMMAND: "hvdctl status --json" */
        while (optind < argc) {
                opt = getopt_long(argc, argv, "+:r:e:t:jhV", opts, NULL);
                if (opt < 0) {
                        if (optind >= argc)
                                break;
                        if (command)
                                return usage_error("unexpected argument '%s'", argv[optind]);
                        command = argv[optind++];
                        continue;
                }
                switch (opt) {
                case 'r':
                        if (!*optarg || strlen(optarg) >= PATH_MAX - 32)
                                return usage_error("--runtime-dir '%s': expected a directory", optarg);
                        c.runtime_dir = optarg;
                        break;
                case 'e':
                        if (!*optarg || strlen(optarg) >= PATH_MAX)
                                return usage_error("--endpoint '%s': expected e.g. ipc:///run/hvd/control.sock",
                                                   optarg);
                        endpoint = optarg;
                        break;
                case 't':
                        if (parse_timeout(optarg, &c.timeout_usec) < 0)
                                return usage_error("--timeout '%s': expected seconds in (0, 3600]", optarg);
                        break;
                case 'j': c.json = true; break;
                case 'h': help(); return 0;
                case 'V': printf("hvdctl (hvd) %s\n", PACKAGE_VERSION); return 0;
                case ':': return usage_error("option '%s' requires an argument", argv[optind - 1]);
                default:
                        if (optopt && optopt < 0x100)
                                return usage_error("unknown option '-%c'", optopt);
                        return usage_error("unknown option '%s'", argv[optind - 1]);
                }
        }
        if (!command)
                return usage_error("no command given: status, jobs or version");
        if (endpoint && c.runtime_dir)
                return usage_error("--runtime-dir and --endpoint exclude each other");
        if (strcmp(command, "help") == 0) {
                help();
                return 0;
        }
        bool is_status = strcmp(command, "status") == 0, is_jobs = strcmp(command, "jobs") == 0,
             is_version = strcmp(command, "version") == 0;
        if (!is_status && !is_jobs && !is_version)
                return usage_error("unknown command '%s': expected status, jobs or version", command);
        if (c.json && is_version)
                return usage_error("--json is for status and jobs");

        if (endpoint) {
                snprintf(c.endpoint, sizeof c.endpoint, "%s", endpoint);
                if (strncmp(endpoint, "ipc://", 6) == 0) {
                        snprintf(c.dir_buf, sizeof c.dir_buf, "%s", endpoint + 6);
                        char *slash = strrchr(c.dir_buf, '/');
                        if (slash && slash != c.dir_buf)
                                *slash = 0;
                        else if (slash)
                                slash[1] = 0;
                        c.runtime_dir = c.dir_buf;
                } else
                        c.runtime_dir = endpoint;
        } else {
                if (!c.runtime_dir) {
                        const char *e = getenv("HVD_RUNTIME_DIR");
                        c.runtime_dir = e && *e ? e : HVD_DEFAULT_RUNTIME_DIR;
                }
                snprintf(c.endpoint, sizeof c.endpoint, "ipc://%s/control.sock", c.runtime_dir);
        }

        if (is_version)
                printf("hvdctl %s\n", PACKAGE_VERSION);
        fflush(stdout);
        Hvd__Envelope *reply = NULL;
        int e = fetch_status(&c, &reply);
        if (e)
                return e;
        const Hvd__Status *s = reply->status;
        if (is_version)
                printf("hvd-coordinatord %s (pid %" PRIu32 ") at %s\n", s->version, s->pid, s->runtime_dir);
        else if (is_status)
                c.json ? print_status_json(s) : print_status(s);
        else
                c.json ? print_jobs_json(s) : print_jobs(s);
        hvd_wire_free(&reply);
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "hvdctl: cannot write the output: %s\n", strerror(errno));
                return EXIT_ERROR;
        }
        return 0;
}
