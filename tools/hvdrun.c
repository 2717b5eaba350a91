/* hvdrun.c — launcher: `hvdrun -np N PROGRAM ARGS...` starts N local workers of one
 * job, against the node's hvd-coordinatord or else a private one run in a thread.
 * Invariants: each worker leads its own process group and stays a zombie we own
 * until that group is killed, so nothing of the job outlives hvdrun; output is
 * passed on in whole lines; the first failure decides the exit status. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"
#include "coordinator.h"
#include "hvd.h"
#include "log.h"
#include "util.h"
#include "wire.h"

#define MAX_NP 4096
#define DEFAULT_GRACE_USEC (5 * USEC_PER_SEC)
#define KILL_AFTER_USEC (2 * USEC_PER_SEC)
#define DRAIN_USEC (1 * USEC_PER_SEC)   /* output still open after every worker exited */
#define PROBE_TIMEOUT_USEC USEC_PER_SEC
#define LINE_BYTES 65536                /* a longer line is passed on in pieces */
#define EXIT_USAGE 2

extern char **environ;

typedef struct options {
        long np;                 /* 0 = not given */
        const char *hosts;       /* -H */
        const char *hostfile;
        char **exports;          /* -x NAME[=VALUE], in order */
        size_t n_exports;
        const char *fusion_mb, *cycle_ms, *start_timeout;
        uint64_t fusion_bytes, start_timeout_usec;
        uint64_t grace_usec;
        const char *runtime_dir;
        int embedded;            /* -1 probe (default), 0 --no-embedded, 1 --embedded */
        bool prefix;
        bool verbose;
        char **argv;             /* PROGRAM ARGS..., borrowed from main's argv */
} options_t;

typedef struct stream {
        int fd;                  /* read end of the worker's pipe, -1 once closed */
        int out_fd;              /* 1 or 2 */
        char *buf;
        size_t len;
} stream_t;

typedef struct worker {
        int rank;
        pid_t pid;               /* also its process group; 0 = not started */
        bool exited;             /* seen with WNOWAIT: a zombie we still hold */
        bool reaped;
        int status;              /* exit code, or 128 + signal */
        stream_t out, err;
        char **envp;
} worker_t;

typedef struct env_list {
        char **v;                /* NULL-terminated, every string owned */
        size_t n, cap;
} env_list_t;

typedef struct embedded {
        hvd_daemon_t *daemon;
        pthread_t thread;
        bool thread_started;
        int run_result;
        char dir[PATH_MAX];
} embedded_t;

typedef struct run {
        worker_t *w;
        int n;
        int sfd;
        bool verbose;
        uint64_t grace_usec;
        int first_fail_rank;     /* -1 = none yet */
        int exit_status;
        int interrupt_sig;       /* SIGINT/SIGTERM/SIGHUP received, 0 = none */
        uint64_t grace_deadline, kill_deadline, drain_deadline;
        bool term_sent, kill_sent;
        bool out_dead[3];        /* EPIPE on our stdout/stderr: discard */
        char *scratch;
        size_t scratch_cap;
} run_t;

/* ---- small helpers ---- */

static void help(void) {
        printf("Usage: hvdrun -np N [OPTIONS] PROGRAM [ARGS...]\n"
               "\n"
               "Starts N worker processes of one hvd training job on this host, against the\n"
               "local hvd-coordinatord or, when none is running, a private one.\n"
               "\n"
               "Job:\n"
               "  -n, -np, --num-proc N      Number of workers (ranks) to start (1..%d)\n"
               "  -H, --hosts LIST           Hosts and slots, e.g. localhost:4 (this build\n"
               "                             launches on the local host only)\n"
               "      --hostfile FILE        Hosts and slots, one per line: 'host slots=N'\n"
               "                             or 'host:N'\n"
               "  -x NAME[=VALUE]            Set NAME=VALUE (or pass NAME on) in the\n"
               "                             workers' environment; may be repeated\n"
               "      --fusion-threshold-mb N  Fusion buffer size in MiB (HVD_FUSION_THRESHOLD)\n"
               "      --cycle-time-ms T      Negotiation cycle in ms (HVD_CYCLE_TIME)\n"
               "      --start-timeout SEC    All ranks must join within SEC seconds\n"
               "                             (HVD_START_TIMEOUT; default 30)\n"
               "      --grace-period SEC     After the first failure, the other workers get\n"
               "                             SEC seconds to finish before SIGTERM (default 5)\n"
               "\n"
               "Coordinator:\n"
               "      --runtime-dir DIR      Where the node's daemon listens (default\n"
               "                             $HVD_RUNTIME_DIR, else %s)\n"
               "      --embedded             Always start a private daemon for this job\n"
               "      --no-embedded          Require the node's daemon; fail if none answers\n"
               "\n"
               "Output:\n"
               "      --no-prefix            Pass the workers' output through unprefixed\n"
               "                             (default: every line starts with '[RANK] ')\n"
               "  -v, --verbose              Say which daemon is used; log more\n"
               "  -h, --help                 Show this help\n"
               "  -V, --version              Show the version\n"
               "\n"
               "Exit status: 0 when every worker exits 0; else the status of the first worker\n"
               "that failed (128+N for signal N); 126/127 when PROGRAM cannot be run; 130/143\n"
               "after SIGINT/SIGTERM; 2 for usage errors; 1 for other errors.\n",
               MAX_NP, HVD_DEFAULT_RUNTIME_DIR);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
        va_list ap;
        fputs("hvdrun: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nTry 'hvdrun --help'.\n", stderr);
        return -EINVAL;
}

/* A plain decimal number in [min, max] (no suffix). */
static int parse_number(const char *s, double min, double max, double *ret) {
        char *end;
        if (!s || !*s || isspace((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || *end || !isfinite(v) || v < min || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

static int write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                struct pollfd pfd = { .fd = fd, .events = POLLOUT };
                                (void) poll(&pfd, 1, 100);
                                continue;
                        }
                        return -errno;
                }
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

static int random_hex(char *out, size_t n_bytes) {
        uint8_t b[64];
        size_t got = 0;
        if (n_bytes > sizeof b)
                return -EINVAL;
        while (got < n_bytes) {
                ssize_t k = getrandom(b + got, n_bytes - got, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                got += (size_t) k;
        }
        if (got < n_bytes) {
                /* kernels without getrandom() */
                _cleanup_close_ int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
                if (fd < 0 || read(fd, b, n_bytes) != (ssize_t) n_bytes)
                        return -EIO;
        }
        for (size_t i = 0; i < n_bytes; i++)
                sprintf(out + 2 * i, "%02x", b[i]);
        return 0;
}

/* ---- environment ---- */

static void env_list_free(env_list_t *e) {
        if (!e)
                return;
        for (size_t i = 0; i < e->n; i++)
                free(e->v[i]);
        free(e->v);
        *e = (env_list_t){ 0 };
}

static int env_list_push(env_list_t *e, char *owned) {
        if (e->n + 2 > e->cap) {
                size_t cap = e->cap ? e->cap * 2 : 64;
                char **v = realloc(e->v, cap * sizeof *v);
                if (!v) {
                        free(owned);
                        return -ENOMEM;
                }
                e->v = v;
                e->cap = cap;
        }
        e->v[e->n++] = owned;
        e->v[e->n] = NULL;
        return 0;
}

static ssize_t env_list_find(const env_list_t *e, const char *name, size_t name_len) {
        for (size_t i = 0; i < e->n; i++)
                if (strncmp(e->v[i], name, name_len) == 0 && e->v[i][name_len] == '=')
                        return (ssize_t) i;
        return -1;
}

/* Sets "NAME=VALUE" (entry holds both), replacing an existing NAME. Takes entry. */
static int env_list_put(env_list_t *e, char *entry) {
        if (!entry)
                return -ENOMEM;
        size_t name_len = strcspn(entry, "=");
        ssize_t i = env_list_find(e, entry, name_len);
        if (i >= 0) {
                free(e->v[i]);
                e->v[i] = entry;
                return 0;
        }
        return env_list_push(e, entry);
}

static int env_list_set(env_list_t *e, const char *name, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int env_list_set(env_list_t *e, const char *name, const char *fmt, ...) {
        char *value = NULL, *entry = NULL;
        va_list ap;
        va_start(ap, fmt);
        int k = vasprintf(&value, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        k = asprintf(&entry, "%s=%s", name, value);
        free(value);
        if (k < 0)
                return -ENOMEM;
        return env_list_put(e, entry);
}

static int env_list_copy(env_list_t *dst, char *const *src) {
        if (!dst->v) {
                /* an empty environment is still a NULL-terminated array */
                if (!(dst->v = calloc(64, sizeof *dst->v)))
                        return -ENOMEM;
                dst->cap = 64;
        }
        for (size_t i = 0; src && src[i]; i++) {
                char *s = strdup(src[i]);
                if (!s || env_list_push(dst, s) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* ---- hosts ---- */

static bool host_is_local(const char *host) {
        char me[HOST_NAME_MAX + 1] = "";
        if (strcasecmp(host, "localhost") == 0 || strcasecmp(host, "localhost.localdomain") == 0 ||
            strcmp(host, "127.0.0.1") == 0 || strcmp(host, "::1") == 0)
                return true;
        if (gethostname(me, sizeof me - 1) == 0 && me[0]) {
                if (strcasecmp(host, me) == 0)
                        return true;
                size_t a = strcspn(host, "."), b = strcspn(me, ".");
                /* "node1" for "node1.cluster" and the other way round */
                if (a == b && strncasecmp(host, me, a) == 0 && (!host[a] || !me[b]))
                        return true;
        }
        struct in_addr a4;
        struct in6_addr a6;
        bool is4 = inet_pton(AF_INET, host, &a4) == 1, is6 = !is4 && inet_pton(AF_INET6, host, &a6) == 1;
        if (!is4 && !is6)
                return false;
        if (is4 && (ntohl(a4.s_addr) >> 24) == 127)
                return true;
        struct ifaddrs *ifs = NULL;
        bool found = false;
        if (getifaddrs(&ifs) < 0)
                return false;
        for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
                if (!i->ifa_addr)
                        continue;
                if (is4 && i->ifa_addr->sa_family == AF_INET)
                        found = ((struct sockaddr_in *) (void *) i->ifa_addr)->sin_addr.s_addr == a4.s_addr;
                else if (is6 && i->ifa_addr->sa_family == AF_INET6)
                        found = memcmp(&((struct sockaddr_in6 *) (void *) i->ifa_addr)->sin6_addr, &a6,
                                       sizeof a6) == 0;
        }
        freeifaddrs(ifs);
        return found;
}

/* One "host[:slots]" or "[v6addr]:slots" or "host slots=N" entry; adds its slots to *total. */
static int add_host(const char *entry, size_t len, const char *where, long *total) {
        char buf[512];
        while (len > 0 && isspace((unsigned char) *entry))
                entry++, len--;
        while (len > 0 && isspace((unsigned char) entry[len - 1]))
                len--;
        if (len == 0)
                return 0;
        if (len >= sizeof buf)
                return usage_error("host entry '%.40s...' in %s is too long", entry, where);
        memcpy(buf, entry, len);
        buf[len] = 0;

        char *host = buf, *slots = NULL, *p;
        if (buf[0] == '[') {
                p = strchr(buf, ']');
                if (!p)
                        return usage_error("host entry '%s' in %s: missing ']'", buf, where);
                host = buf + 1;
                *p++ = 0;
                if (*p == ':')
                        slots = p + 1;
                else if (*p)
                        return usage_error("host entry '[%s]%s' in %s: expected ':SLOTS' after ']'", host, p,
                                           where);
        } else if ((p = strpbrk(buf, " \t"))) {
                *p++ = 0;
                p += strspn(p, " \t");
                if (strncmp(p, "slots=", 6) == 0)
                        slots = p + 6;
                else if (strncmp(p, "slots ", 6) == 0 || strncmp(p, "slots\t", 6) == 0)
                        slots = p + 6 + strspn(p + 6, " \t=");
                else
                        return usage_error("host entry '%s %s' in %s: expected 'slots=N'", buf, p, where);
        } else if ((p = strrchr(buf, ':')) && strchr(buf, ':') == p) {
                *p = 0;
                slots = p + 1;
        }
        double v = 1;
        if (slots && parse_number(slots, 1, MAX_NP, &v) < 0)
                return usage_error("host '%s' in %s: slots '%s' is not a number in 1..%d", host, where, slots,
                                   MAX_NP);
        if (v != floor(v))
                return usage_error("host '%s' in %s: slots '%s' is not a whole number", host, where, slots);
        if (!*host)
                return usage_error("empty host name in %s", where);
        if (!host_is_local(host)) {
                fprintf(stderr,
                        "hvdrun: host '%s' (from %s) is not this host; multi-node launch is not available in "
                        "this build. Run hvdrun on each host, or list only localhost.\n",
                        host, where);
                return -EINVAL;
        }
        *total += (long) v;
        if (*total > MAX_NP)
                return usage_error("more than %d slots listed in %s", MAX_NP, where);
        return 0;
}

static int parse_host_list(const char *list, long *total) {
        for (const char *p = list;;) {
                size_t n = strcspn(p, ",");
                int r = add_host(p, n, "-H", total);
                if (r < 0)
                        return r;
                if (!p[n])
                        return 0;
                p += n + 1;
        }
}

static int parse_hostfile(const char *path, long *total) {
        FILE *f = fopen(path, "re");
        if (!f) {
                fprintf(stderr, "hvdrun: cannot open host file %s: %s\n", path, strerror(errno));
                return -errno;
        }
        char line[1024];
        int r = 0;
        while (r == 0 && fgets(line, sizeof line, f)) {
                line[strcspn(line, "#\n")] = 0;
                r = add_host(line, strlen(line), path, total);
        }
        fclose(f);
        return r;
}

/* ---- options ---- */

static int parse_options(int argc, char **argv, options_t *o) {
        enum {
                OPT_HOSTFILE = 0x100,
                OPT_FUSION,
                OPT_CYCLE,
                OPT_START,
                OPT_GRACE,
                OPT_RUNTIME,
                OPT_EMBEDDED,
                OPT_NO_EMBEDDED,
                OPT_NO_PREFIX,
        };
        static const struct option opts[] = {
                { "num-proc", required_argument, NULL, 'n' },
                { "hosts", required_argument, NULL, 'H' },
                { "hostfile", required_argument, NULL, OPT_HOSTFILE },
                { "fusion-threshold-mb", required_argument, NULL, OPT_FUSION },
                { "cycle-time-ms", required_argument, NULL, OPT_CYCLE },
                { "start-timeout", required_argument, NULL, OPT_START },
                { "grace-period", required_argument, NULL, OPT_GRACE },
                { "runtime-dir", required_argument, NULL, OPT_RUNTIME },
                { "embedded", no_argument, NULL, OPT_EMBEDDED },
                { "no-embedded", no_argument, NULL, OPT_NO_EMBEDDED },
                { "no-prefix", no_argument, NULL, OPT_NO_PREFIX },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        double v;
        int c;

        o->embedded = -1;
        o->prefix = true;
        o->grace_usec = DEFAULT_GRACE_USEC;
        o->exports = calloc((size_t) argc + 1, sizeof *o->exports);
        if (!o->exports)
                return -ENOMEM;
        opterr = 0;
        /* '+': stop at PROGRAM, whose own options are not ours */
        while ((c = getopt_long(argc, argv, "+:n:H:x:vhV", opts, NULL)) >= 0) {
                const char *arg = optarg;
                switch (c) {
                case 'n':
                        /* getopt reads Horovod's "-np 4" as -n with argument "p" */
                        if (strncmp(argv[optind - 1], "-np", 3) == 0 && strcmp(arg, argv[optind - 1] + 2) == 0) {
                                arg += 1;
                                if (*arg == '=')
                                        arg++;
                                if (!*arg) {
                                        if (optind >= argc)
                                                return usage_error("option '-np' requires an argument");
                                        arg = argv[optind++];
                                }
                        }
                        if (parse_number(arg, 1, MAX_NP, &v) < 0 || v != floor(v))
                                return usage_error("invalid number of workers '%s': expected 1..%d", arg, MAX_NP);
                        o->np = (long) v;
                        break;
                case 'H': o->hosts = arg; break;
                case OPT_HOSTFILE: o->hostfile = arg; break;
                case 'x':
                        if (!*arg || *arg == '=' || strcspn(arg, "=") != strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                                      "abcdefghijklmnopqrstuvwxyz"
                                                                                      "0123456789_") ||
                            isdigit((unsigned char) *arg))
                                return usage_error("-x '%s': expected NAME or NAME=VALUE", arg);
                        o->exports[o->n_exports++] = (char *) arg;
                        break;
                case OPT_FUSION:
                        if (parse_number(arg, 0, 1 << 20, &v) < 0)
                                return usage_error("--fusion-threshold-mb '%s': expected a number of MiB", arg);
                        o->fusion_mb = arg;
                        o->fusion_bytes = (uint64_t) llround(v * 1048576.0);
                        break;
                case OPT_CYCLE:
                        if (parse_number(arg, 0.001, 60000, &v) < 0)
                                return usage_error("--cycle-time-ms '%s': expected milliseconds in 0.001..60000",
                                                   arg);
                        o->cycle_ms = arg;
                        break;
                case OPT_START:
                        if (parse_number(arg, 0.001, 86400, &v) < 0)
                                return usage_error("--start-timeout '%s': expected seconds in 0.001..86400", arg);
                        o->start_timeout = arg;
                        o->start_timeout_usec = (uint64_t) llround(v * 1e6);
                        break;
                case OPT_GRACE:
                        if (parse_number(arg, 0, 86400, &v) < 0)
                                return usage_error("--grace-period '%s': expected seconds in 0..86400", arg);
                        o->grace_usec = (uint64_t) llround(v * 1e6);
                        break;
                case OPT_RUNTIME:
                        if (!*arg || strlen(arg) >= PATH_MAX - 32)
                                return usage_error("--runtime-dir '%s': expected a directory path", arg);
                        o->runtime_dir = arg;
                        break;
                case OPT_EMBEDDED: o->embedded = 1; break;
                case OPT_NO_EMBEDDED: o->embedded = 0; break;
                case OPT_NO_PREFIX: o->prefix = false; break;
                case 'v': o->verbose = true; break;
                case 'h': help(); return 1;
                case 'V': printf("hvdrun (hvd) %s\n", PACKAGE_VERSION); return 1;
                case ':': return usage_error("option '%s' requires an argument", argv[optind - 1]);
                default:
                        if (optopt && optopt < 0x100)
                                return usage_error("unknown option '-%c'", optopt);
                        return usage_error("unknown option '%s'", argv[optind - 1]);
                }
        }
        if (optind >= argc)
                return usage_error("no PROGRAM given: hvdrun -np N PROGRAM [ARGS...]");
        o->argv = argv + optind;

        long slots = 0;
        int r;
        if (o->hosts && (r = parse_host_list(o->hosts, &slots)) < 0)
                return r;
        if (o->hostfile && (r = parse_hostfile(o->hostfile, &slots)) < 0)
                return r;
        if ((o->hosts || o->hostfile) && slots == 0)
                return usage_error("no hosts listed in %s", o->hosts ? "-H" : o->hostfile);
        if (o->np == 0) {
                if (slots == 0)
                        return usage_error("missing -np N: how many workers to start");
                o->np = slots;
        } else if (slots > 0 && o->np > slots)
                return usage_error("-np %ld is more than the %ld slot%s listed by %s", o->np, slots,
                                   slots == 1 ? "" : "s", o->hosts ? "-H" : "--hostfile");
        if (!o->runtime_dir) {
                const char *e = getenv("HVD_RUNTIME_DIR");
                o->runtime_dir = e && *e ? e : HVD_DEFAULT_RUNTIME_DIR;
        }
        return 0;
}

/* PATH lookup done before fork, so a missing PROGRAM is reported once, clearly.
 * Returns 0 and a malloc'd path, or 126 / 127 (the shell's codes) after a message. */
static int resolve_program(const char *prog, const char *path_env, char **ret) {
        if (strchr(prog, '/')) {
                if (access(prog, X_OK) < 0) {
                        fprintf(stderr, "hvdrun: cannot run %s: %s\n", prog, strerror(errno));
                        return errno == ENOENT ? 127 : 126;
                }
                *ret = strdup(prog);
                return *ret ? 0 : 1;
        }
        const char *p = path_env && *path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
        bool denied = false;
        for (;;) {
                size_t n = strcspn(p, ":");
                char *cand = NULL;
                /* an empty PATH entry is the current directory */
                if ((n ? asprintf(&cand, "%.*s/%s", (int) n, p, prog) : asprintf(&cand, "./%s", prog)) < 0)
                        return 1;
                struct stat st;
                if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
                        if (access(cand, X_OK) == 0) {
                                *ret = cand;
                                return 0;
                        }
                        denied = true;
                }
                free(cand);
                if (!p[n])
                        break;
                p += n + 1;
        }
        fprintf(stderr, "hvdrun: %s: %s\n", prog, denied ? "permission denied" : "command not found");
        return denied ? 126 : 127;
}

/* ---- daemon ---- */

static void *embedded_main(void *arg) {
        embedded_t *e = arg;
        e->run_result = hvd_daemon_run(e->daemon);
        return NULL;
}

static void remove_dir(const char *dir) {
        DIR *d = opendir(dir);
        if (d) {
                struct dirent *de;
                while ((de = readdir(d)))
                        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                                (void) unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        if (rmdir(dir) < 0 && errno != ENOENT)
                fprintf(stderr, "hvdrun: cannot remove %s: %s\n", dir, strerror(errno));
}

static void embedded_stop(embedded_t *e) {
        if (!e)
                return;
        if (e->daemon && e->thread_started) {
                hvd_daemon_stop(e->daemon);
                pthread_join(e->thread, NULL);
                e->thread_started = false;
                if (e->run_result < 0)
                        fprintf(stderr, "hvdrun: the embedded hvd-coordinatord failed: %s\n",
                                hvd_strerror(e->run_result));
        }
        hvd_daemon_destroy(&e->daemon);
        if (e->dir[0]) {
                remove_dir(e->dir);
                e->dir[0] = 0;
        }
}

static int embedded_start(embedded_t *e, const options_t *o) {
        const char *tmp = getenv("TMPDIR");
        if (!tmp || !*tmp)
                tmp = "/tmp";
        if ((size_t) snprintf(e->dir, sizeof e->dir, "%s/hvdrun-XXXXXX", tmp) >= sizeof e->dir - 32) {
                e->dir[0] = 0;
                fprintf(stderr, "hvdrun: TMPDIR '%s' is too long\n", tmp);
                return -ENAMETOOLONG;
        }
        if (!mkdtemp(e->dir)) {
                int r = -errno;
                fprintf(stderr, "hvdrun: cannot create a directory for the private coordinator in %s: %s\n", tmp,
                        strerror(-r));
                e->dir[0] = 0;
                return r;
        }
        hvd_daemon_config_t cfg;
        hvd_daemon_config_init(&cfg);
        snprintf(cfg.runtime_dir, sizeof cfg.runtime_dir, "%s", e->dir);
        cfg.log_level = o->verbose ? LOG_INFO : LOG_WARNING;
        if (o->start_timeout)
                cfg.start_timeout_usec = o->start_timeout_usec;
        hvd_log_max_level = cfg.log_level;
        hvd_log_set_ident("hvdrun: coordinator");
        int r = hvd_daemon_new(&cfg, &e->daemon);
        if (r < 0) {
                fprintf(stderr, "hvdrun: cannot start a private hvd-coordinatord in %s: %s\n", e->dir,
                        hvd_strerror(r));
                return r;
        }
        r = -pthread_create(&e->thread, NULL, embedded_main, e);
        if (r < 0) {
                fprintf(stderr, "hvdrun: cannot start the coordinator thread: %s\n", strerror(-r));
                return r;
        }
        e->thread_started = true;
        if (o->verbose)
                fprintf(stderr, "hvdrun: using a private hvd-coordinatord %s in %s\n", PACKAGE_VERSION, e->dir);
        return 0;
}

/* Asks DIR/control.sock for a status. Returns 0 when a daemon answered (a
 * message was printed with --verbose), or < 0 with why in msg. */
static int probe_daemon(const options_t *o, char *msg, size_t msg_len) {
        char ep[PATH_MAX + 48], path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/control.sock", o->runtime_dir);
        snprintf(ep, sizeof ep, "ipc://%s", path);
        if (access(path, F_OK) < 0 && errno == ENOENT) {
                snprintf(msg, msg_len, "no hvd-coordinatord is running at %s (no control socket)", o->runtime_dir);
                return -ECONNREFUSED;
        }
        /* zmq retries a refused ipc connect silently: check the permission here */
        char wpath[PATH_MAX + 32];
        snprintf(wpath, sizeof wpath, "%s/worker.sock", o->runtime_dir);
        if (access(path, R_OK | W_OK) < 0 || access(wpath, R_OK | W_OK) < 0) {
                int e = errno;
                if (e == EACCES || e == EPERM)
                        snprintf(msg, msg_len,
                                 "the hvd-coordinatord at %s cannot be used: permission denied (are you in group "
                                 "hvd?)",
                                 o->runtime_dir);
                else
                        snprintf(msg, msg_len, "the hvd-coordinatord at %s cannot be used: %s", o->runtime_dir,
                                 strerror(e));
                return -e;
        }
        Hvd__StatusRequest q = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT, *reply = NULL;
        req.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        req.status_request = &q;
        int r = hvd_control_call(NULL, ep, &req, PROBE_TIMEOUT_USEC, &reply);
        if (r < 0) {
                if (r == HVD_ETIMEOUT)
                        snprintf(msg, msg_len, "the hvd-coordinatord at %s does not answer within %.0f s",
                                 o->runtime_dir, (double) PROBE_TIMEOUT_USEC / 1e6);
                else if (r == -ECONNREFUSED)
                        snprintf(msg, msg_len, "no hvd-coordinatord is running at %s (no control socket)",
                                 o->runtime_dir);
                else
                        snprintf(msg, msg_len, "cannot reach the hvd-coordinatord at %s: %s", o->runtime_dir,
                                 hvd_strerror(r));
                return r;
        }
        if (reply->body_case != HVD__ENVELOPE__BODY_STATUS) {
                snprintf(msg, msg_len, "the hvd-coordinatord at %s refused a status request: %s", o->runtime_dir,
                         reply->body_case == HVD__ENVELOPE__BODY_ERROR ? reply->error->message : "unexpected reply");
                hvd_wire_free(&reply);
                return HVD_EPROTO;
        }
        if (o->verbose)
                fprintf(stderr, "hvdrun: using hvd-coordinatord %s (pid %" PRIu32 ") at %s\n",
                        reply->status->version, reply->status->pid, o->runtime_dir);
        hvd_wire_free(&reply);
        return 0;
}

/* ---- workers ---- */

static void stream_close(stream_t *s) {
        if (s->fd >= 0)
                close(s->fd);
        s->fd = -1;
}

static void run_free(run_t *run) {
        if (!run || !run->w)
                return;
        for (int i = 0; i < run->n; i++) {
                stream_close(&run->w[i].out);
                stream_close(&run->w[i].err);
                free(run->w[i].out.buf);
                free(run->w[i].err.buf);
                if (run->w[i].envp) {
                        env_list_t e = { .v = run->w[i].envp };
                        while (e.v[e.n])
                                e.n++;
                        env_list_free(&e);
                }
        }
        free(run->w);
        run->w = NULL;
        free(run->scratch);
        run->scratch = NULL;
}

/* Passes on the complete lines in s->buf (all of it when at_eof), each with
 * the rank prefix, in one write. */
static void stream_emit(run_t *run, worker_t *w, stream_t *s, bool at_eof) {
        char prefix[24];
        int plen = snprintf(prefix, sizeof prefix, "[%d] ", w->rank);
        size_t need = s->len + ((s->len + 1) * (size_t) plen) + 1;
        if (need > run->scratch_cap) {
                char *p = realloc(run->scratch, need);
                if (!p)
                        return; /* keep the data; retried on the next read */
                run->scratch = p;
                run->scratch_cap = need;
        }
        size_t start = 0, o = 0;
        for (;;) {
                char *nl = memchr(s->buf + start, '\n', s->len - start);
                size_t end;
                if (nl)
                        end = (size_t) (nl - s->buf) + 1;
                else if (start < s->len && (at_eof || (start == 0 && s->len == LINE_BYTES)))
                        end = s->len; /* last words without a newline, or an overlong line */
                else
                        break;
                memcpy(run->scratch + o, prefix, (size_t) plen);
                o += (size_t) plen;
                memcpy(run->scratch + o, s->buf + start, end - start);
                o += end - start;
                if (!nl)
                        run->scratch[o++] = '\n';
                start = end;
        }
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
        if (o > 0 && !run->out_dead[s->out_fd] && write_all(s->out_fd, run->scratch, o) == -EPIPE)
                run->out_dead[s->out_fd] = true;
}

/* Reads what is there (non-blocking). until_empty: loop until EAGAIN or EOF. */
static void stream_read(run_t *run, worker_t *w, stream_t *s, bool until_empty) {
        while (s->fd >= 0) {
                if (s->len == LINE_BYTES) {
                        stream_emit(run, w, s, true);
                        if (s->len == LINE_BYTES)
                                s->len = 0; /* no memory to pass it on: drop rather than spin */
                }
                ssize_t k = read(s->fd, s->buf + s->len, LINE_BYTES - s->len);
                if (k > 0) {
                        s->len += (size_t) k;
                        stream_emit(run, w, s, false);
                        if (!until_empty)
                                return;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return;
                stream_emit(run, w, s, true);
                stream_close(s);
        }
}

static void kill_groups(run_t *run, int sig) {
        for (int i = 0; i < run->n; i++)
                /* the leader is an unreaped child, so its group id cannot have been reused */
                if (run->w[i].pid > 0 && !run->w[i].reaped)
                        (void) kill(-run->w[i].pid, sig);
}

static int count_live(const run_t *run) {
        int n = 0;
        for (int i = 0; i < run->n; i++)
                n += run->w[i].pid > 0 && !run->w[i].exited;
        return n;
}

static void note_exit(run_t *run, worker_t *w, const siginfo_t *si, uint64_t now) {
        w->exited = true;
        if (si->si_code == CLD_EXITED)
                w->status = si->si_status;
        else
                w->status = 128 + si->si_status;
        /* pass on the worker's last output before saying it failed */
        stream_read(run, w, &w->out, true);
        stream_read(run, w, &w->err, true);
        if (w->status == 0 || run->interrupt_sig)
                return;
        bool first = run->first_fail_rank < 0;
        if (first || run->verbose) {
                if (si->si_code == CLD_EXITED)
                        fprintf(stderr, "hvdrun: rank %d exited with status %d\n", w->rank, w->status);
                else
                        fprintf(stderr, "hvdrun: rank %d killed by signal %d (%s)\n", w->rank, si->si_status,
                                strsignal(si->si_status));
        }
        if (!first)
                return;
        run->first_fail_rank = w->rank;
        run->exit_status = w->status;
        if (count_live(run) > 0)
                run->grace_deadline = now + run->grace_usec;
}

static void check_children(run_t *run, uint64_t now) {
        for (int i = 0; i < run->n; i++) {
                worker_t *w = &run->w[i];
                if (w->pid <= 0 || w->exited)
                        continue;
                siginfo_t si = { 0 };
                /* WNOWAIT: keep the zombie, so the pid (= the group id) stays ours */
                if (waitid(P_PID, (id_t) w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == w->pid)
                        note_exit(run, w, &si, now);
        }
}

static void reap_all(run_t *run) {
        for (int i = 0; i < run->n; i++) {
                worker_t *w = &run->w[i];
                if (w->pid <= 0 || w->reaped)
                        continue;
                /* whatever the worker left in its group goes with it */
                (void) kill(-w->pid, SIGKILL);
                while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                w->reaped = true;
        }
}

static const char *signame(int sig) {
        switch (sig) {
        case SIGINT: return "SIGINT";
        case SIGTERM: return "SIGTERM";
        case SIGHUP: return "SIGHUP";
        default: return "a signal";
        }
}

static void handle_signals(run_t *run, uint64_t now) {
        struct signalfd_siginfo si;
        bool child = false;
        while (read(run->sfd, &si, sizeof si) == (ssize_t) sizeof si) {
                if (si.ssi_signo == SIGCHLD) {
                        child = true;
                        continue;
                }
                if (!run->interrupt_sig) {
                        run->interrupt_sig = (int) si.ssi_signo;
                        if (count_live(run) > 0)
                                fprintf(stderr, "hvdrun: %s received, stopping %d worker%s\n",
                                        signame(run->interrupt_sig), count_live(run),
                                        count_live(run) == 1 ? "" : "s");
                        kill_groups(run, SIGTERM);
                        run->term_sent = true;
                        run->grace_deadline = 0;
                        run->kill_deadline = now + KILL_AFTER_USEC;
                } else if (!run->kill_sent) {
                        /* a second Ctrl-C: no more waiting */
                        kill_groups(run, SIGKILL);
                        run->kill_sent = true;
                }
        }
        if (child)
                check_children(run, now);
}

/* The event loop: runs until every worker exited and its output is passed on. */
static void run_loop(run_t *run) {
        struct pollfd *pfd = calloc((size_t) run->n * 2 + 1, sizeof *pfd);
        stream_t **pstream = calloc((size_t) run->n * 2 + 1, sizeof *pstream);
        worker_t **pworker = calloc((size_t) run->n * 2 + 1, sizeof *pworker);
        if (!pfd || !pstream || !pworker) {
                fprintf(stderr, "hvdrun: out of memory; stopping the workers\n");
                kill_groups(run, SIGKILL);
                goto out;
        }
        /* a worker may have gone before SIGCHLD was unblocked into the signalfd */
        check_children(run, hvd_now_usec());
        for (;;) {
                uint64_t now = hvd_now_usec();
                int live = count_live(run);
                if (run->grace_deadline && now >= run->grace_deadline && !run->term_sent) {
                        if (live > 0)
                                fprintf(stderr, "hvdrun: stopping %d worker%s still running %g s after rank %d failed\n",
                                        live, live == 1 ? "" : "s", (double) run->grace_usec / 1e6,
                                        run->first_fail_rank);
                        kill_groups(run, SIGTERM);
                        run->term_sent = true;
                        run->kill_deadline = now + KILL_AFTER_USEC;
                }
                if (run->kill_deadline && now >= run->kill_deadline && !run->kill_sent) {
                        kill_groups(run, SIGKILL);
                        run->kill_sent = true;
                }
                size_t n = 0;
                pfd[n++] = (struct pollfd){ .fd = run->sfd, .events = POLLIN };
                for (int i = 0; i < run->n; i++) {
                        stream_t *ss[2] = { &run->w[i].out, &run->w[i].err };
                        for (int k = 0; k < 2; k++)
                                if (ss[k]->fd >= 0) {
                                        pstream[n] = ss[k];
                                        pworker[n] = &run->w[i];
                                        pfd[n++] = (struct pollfd){ .fd = ss[k]->fd, .events = POLLIN };
                                }
                }
                if (live == 0 && n == 1)
                        break;
                if (live == 0) {
                        /* something the workers started holds their output open */
                        if (!run->drain_deadline)
                                run->drain_deadline = now + DRAIN_USEC;
                        else if (now >= run->drain_deadline) {
                                kill_groups(run, SIGKILL);
                                for (size_t i = 1; i < n; i++) {
                                        stream_read(run, pworker[i], pstream[i], true);
                                        stream_emit(run, pworker[i], pstream[i], true);
                                        stream_close(pstream[i]);
                                }
                                break;
                        }
                }
                uint64_t next = UINT64_MAX;
                if (run->grace_deadline && !run->term_sent)
                        next = HVD_MIN(next, run->grace_deadline);
                if (run->kill_deadline && !run->kill_sent)
                        next = HVD_MIN(next, run->kill_deadline);
                if (run->drain_deadline)
                        next = HVD_MIN(next, run->drain_deadline);
                int timeout = next == UINT64_MAX ? -1 : next <= now ? 0 : (int) ((next - now + 999) / 1000);
                int k = poll(pfd, n, timeout);
                if (k < 0 && errno != EINTR) {
                        fprintf(stderr, "hvdrun: poll failed: %s; stopping the workers\n", strerror(errno));
                        kill_groups(run, SIGKILL);
                        break;
                }
                if (k <= 0)
                        continue;
                now = hvd_now_usec();
                for (size_t i = 1; i < n; i++)
                        if (pfd[i].revents)
                                stream_read(run, pworker[i], pstream[i], false);
                if (pfd[0].revents)
                        handle_signals(run, now);
        }
out:
        free(pfd);
        free(pstream);
        free(pworker);
}

/* Child side of fork(): only async-signal-safe calls until execve. */
__attribute__((noreturn)) static void child_exec(const char *path, char *const *argv, char *const *envp,
                                                  int in_fd, int out_fd, int err_fd, int errpipe, pid_t parent) {
        (void) setpgid(0, 0);
        /* hvdrun killed with SIGKILL: its workers follow */
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
                _exit(127);
        if ((in_fd >= 0 && dup2(in_fd, 0) < 0) || (out_fd >= 0 && dup2(out_fd, 1) < 0) ||
            (err_fd >= 0 && dup2(err_fd, 2) < 0))
                goto fail;
        struct sigaction sa = { .sa_handler = SIG_DFL };
        sigemptyset(&sa.sa_mask);
        (void) sigaction(SIGPIPE, &sa, NULL);
        sigset_t none;
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);
        /* zmq's and the embedded daemon's descriptors must not leak into workers */
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) < 0)
#endif
        {
                for (int fd = 3; fd < 65536; fd++)
                        (void) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        execve(path, argv, envp);
fail:;
        int e = errno;
        if (write(errpipe, &e, sizeof e) < 0)
                (void) 0;
        _exit(127);
}

static int spawn_worker(worker_t *w, const char *path, char *const *argv, bool prefix, int in_fd) {
        int outp[2] = { -1, -1 }, errp[2] = { -1, -1 }, ep[2] = { -1, -1 };
        int r = 0;
        if ((prefix && (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0)) || pipe2(ep, O_CLOEXEC) < 0) {
                r = -errno;
                fprintf(stderr, "hvdrun: cannot create pipes for rank %d: %s\n", w->rank, strerror(errno));
                goto out;
        }
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                r = -errno;
                fprintf(stderr, "hvdrun: cannot start rank %d: %s\n", w->rank, strerror(errno));
                goto out;
        }
        if (pid == 0)
                child_exec(path, argv, w->envp, in_fd, outp[1], errp[1], ep[1], parent);
        /* both sides set the group: whichever runs first, kill(-pid) works at once */
        (void) setpgid(pid, pid);
        w->pid = pid;
        close(ep[1]);
        ep[1] = -1;
        int e = 0;
        ssize_t k;
        while ((k = read(ep[0], &e, sizeof e)) < 0 && errno == EINTR)
                ;
        if (k == (ssize_t) sizeof e) {
                fprintf(stderr, "hvdrun: cannot run %s for rank %d: %s\n", path, w->rank, strerror(e));
                r = e == ENOENT ? -ENOENT : -EACCES;
                goto out;
        }
        if (prefix) {
                w->out.fd = outp[0];
                w->err.fd = errp[0];
                outp[0] = errp[0] = -1;
                (void) fcntl(w->out.fd, F_SETFL, O_NONBLOCK);
                (void) fcntl(w->err.fd, F_SETFL, O_NONBLOCK);
        }
out:
        for (int i = 0; i < 2; i++) {
                if (outp[i] >= 0)
                        close(outp[i]);
                if (errp[i] >= 0)
                        close(errp[i]);
                if (ep[i] >= 0)
                        close(ep[i]);
        }
        return r;
}

/* The environment all ranks share: ours, then -x, then knobs, then the job. */
static int build_base_env(const options_t *o, const char *coordinator, const char *runtime_dir,
                          env_list_t *env) {
        char job_id[4 + 32 + 1] = "job-", secret[33], host[HOST_NAME_MAX + 1] = "";
        int r;
        if ((r = env_list_copy(env, environ)) < 0)
                return r;
        for (size_t i = 0; i < o->n_exports; i++) {
                const char *x = o->exports[i];
                if (strchr(x, '=')) {
                        if ((r = env_list_put(env, strdup(x))) < 0)
                                return r;
                } else if (!getenv(x))
                        fprintf(stderr, "hvdrun: warning: -x %s: %s is not set here; not passed on\n", x, x);
        }
        if (random_hex(job_id + 4, 8) < 0 || random_hex(secret, 16) < 0) {
                fprintf(stderr, "hvdrun: cannot read random bytes for the job id and secret\n");
                return -EIO;
        }
        if (gethostname(host, sizeof host - 1) < 0 || !host[0])
                snprintf(host, sizeof host, "localhost");
        if ((o->fusion_mb && (r = env_list_set(env, "HVD_FUSION_THRESHOLD", "%" PRIu64, o->fusion_bytes)) < 0) ||
            (o->cycle_ms && (r = env_list_set(env, "HVD_CYCLE_TIME", "%s", o->cycle_ms)) < 0) ||
            (o->start_timeout && (r = env_list_set(env, "HVD_START_TIMEOUT", "%s", o->start_timeout)) < 0))
                return r;
        if ((r = env_list_set(env, "HVD_JOB_ID", "%s", job_id)) < 0 ||
            (r = env_list_set(env, "HVD_JOB_SECRET", "%s", secret)) < 0 ||
            (r = env_list_set(env, "HVD_SIZE", "%d", (int) o->np)) < 0 ||
            (r = env_list_set(env, "HVD_LOCAL_SIZE", "%d", (int) o->np)) < 0 ||
            (r = env_list_set(env, "HVD_CROSS_RANK", "0")) < 0 ||
            (r = env_list_set(env, "HVD_CROSS_SIZE", "1")) < 0 ||
            (r = env_list_set(env, "HVD_HOSTNAME", "%s", host)) < 0 ||
            (r = env_list_set(env, "HVD_COORDINATOR", "%s", coordinator)) < 0 ||
            (r = env_list_set(env, "HVD_RUNTIME_DIR", "%s", runtime_dir)) < 0 ||
            (r = env_list_set(env, "HOROVOD_SIZE", "%d", (int) o->np)) < 0 ||
            (r = env_list_set(env, "HOROVOD_LOCAL_SIZE", "%d", (int) o->np)) < 0 ||
            (r = env_list_set(env, "HOROVOD_CROSS_RANK", "0")) < 0 ||
            (r = env_list_set(env, "HOROVOD_CROSS_SIZE", "1")) < 0)
                return r;
        if (o->verbose)
                fprintf(stderr, "hvdrun: job %s, %ld rank%s on %s\n", job_id, o->np, o->np == 1 ? "" : "s", host);
        return 0;
}

static int build_rank_env(const env_list_t *base, int rank, char ***ret) {
        env_list_t e = { 0 };
        int r;
        if ((r = env_list_copy(&e, base->v)) < 0 || (r = env_list_set(&e, "HVD_RANK", "%d", rank)) < 0 ||
            (r = env_list_set(&e, "HVD_LOCAL_RANK", "%d", rank)) < 0 ||
            (r = env_list_set(&e, "HOROVOD_RANK", "%d", rank)) < 0 ||
            (r = env_list_set(&e, "HOROVOD_LOCAL_RANK", "%d", rank)) < 0) {
                env_list_free(&e);
                return r;
        }
        *ret = e.v;
        return 0;
}

int main(int argc, char **argv) {
        options_t o = { 0 };
        run_t run = { .sfd = -1, .first_fail_rank = -1 };
        embedded_t emb = { 0 };
        env_list_t base = { 0 };
        char *path = NULL;
        int devnull = -1;
        int ret = 1, r;

        r = parse_options(argc, argv, &o);
        if (r != 0) {
                free(o.exports);
                return r > 0 ? 0 : r == -ENOMEM ? 1 : EXIT_USAGE;
        }
        run.verbose = o.verbose;
        run.grace_usec = o.grace_usec;

        /* Block before any thread exists, so every thread inherits the mask and
         * the signals wait in the signalfd for the main loop. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        /* an ignored signal stays ignored (nohup, "hvdrun &" in a script);
         * a blocked one would still be queued for the signalfd */
        static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
        for (size_t i = 0; i < ELEMENTSOF(stop_signals); i++) {
                struct sigaction old;
                if (sigaction(stop_signals[i], NULL, &old) < 0 || old.sa_handler != SIG_IGN)
                        sigaddset(&mask, stop_signals[i]);
        }
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0 ||
            (run.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
                fprintf(stderr, "hvdrun: cannot set up signal handling: %s\n", strerror(errno));
                goto out;
        }
        signal(SIGPIPE, SIG_IGN);

        /* -x PATH=... changes where PROGRAM is looked up, as in the workers */
        const char *path_env = getenv("PATH");
        for (size_t i = 0; i < o.n_exports; i++)
                if (strncmp(o.exports[i], "PATH=", 5) == 0)
                        path_env = o.exports[i] + 5;
        r = resolve_program(o.argv[0], path_env, &path);
        if (r != 0) {
                ret = r;
                goto out;
        }

        char coordinator[PATH_MAX + 32];
        const char *runtime_dir = o.runtime_dir;
        if (o.embedded != 1) {
                char why[PATH_MAX + 256];
                r = probe_daemon(&o, why, sizeof why);
                if (r < 0 && o.embedded == 0) {
                        fprintf(stderr, "hvdrun: %s, and --no-embedded forbids a private one; start it with "
                                        "'systemctl start hvd-coordinatord' or drop --no-embedded\n", why);
                        goto out;
                }
                if (r < 0 && (r != -ECONNREFUSED || o.verbose))
                        fprintf(stderr, "hvdrun: %s; starting a private one\n", why);
                if (r < 0)
                        o.embedded = 1;
        }
        if (o.embedded == 1) {
                if (embedded_start(&emb, &o) < 0)
                        goto out;
                runtime_dir = emb.dir;
        }
        snprintf(coordinator, sizeof coordinator, "ipc://%s/worker.sock", runtime_dir);

        if (build_base_env(&o, coordinator, runtime_dir, &base) < 0)
                goto out_oom;
        run.w = calloc((size_t) o.np, sizeof *run.w);
        if (!run.w)
                goto out_oom;
        run.n = (int) o.np;
        for (int i = 0; i < run.n; i++) {
                worker_t *w = &run.w[i];
                w->rank = i;
                w->out = (stream_t){ .fd = -1, .out_fd = 1 };
                w->err = (stream_t){ .fd = -1, .out_fd = 2 };
                if (o.prefix && (!(w->out.buf = malloc(LINE_BYTES)) || !(w->err.buf = malloc(LINE_BYTES))))
                        goto out_oom;
                if (build_rank_env(&base, i, &w->envp) < 0)
                        goto out_oom;
        }
        env_list_free(&base);

        /* rank 0 reads our stdin, unless it is the terminal (a background process
         * group reading the terminal would be stopped); the others read nothing */
        devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        bool stdin_to_rank0 = !isatty(0);
        for (int i = 0; i < run.n; i++) {
                struct signalfd_siginfo si;
                /* stop starting workers when Ctrl-C came in meanwhile */
                ssize_t k = read(run.sfd, &si, sizeof si);
                if (k == (ssize_t) sizeof si && si.ssi_signo != SIGCHLD) {
                        run.interrupt_sig = (int) si.ssi_signo;
                        fprintf(stderr, "hvdrun: %s received, stopping\n", signame(run.interrupt_sig));
                        kill_groups(&run, SIGTERM);
                        run.term_sent = true;
                        run.kill_deadline = hvd_now_usec() + KILL_AFTER_USEC;
                        break;
                }
                r = spawn_worker(&run.w[i], path, o.argv, o.prefix, i == 0 && stdin_to_rank0 ? -1 : devnull);
                if (r < 0) {
                        /* a job with a rank missing cannot run: stop the others */
                        kill_groups(&run, SIGTERM);
                        run.term_sent = true;
                        run.kill_deadline = hvd_now_usec() + KILL_AFTER_USEC;
                        run.first_fail_rank = i;
                        run.exit_status = r == -ENOENT ? 127 : r == -EACCES ? 126 : 1;
                        break;
                }
        }
        if (devnull >= 0)
                close(devnull);
        devnull = -1;
        run_loop(&run);
        reap_all(&run);
        if (run.interrupt_sig)
                ret = 128 + run.interrupt_sig;
        else
                ret = run.first_fail_rank >= 0 ? run.exit_status : 0;
        goto out;

out_oom:
        fprintf(stderr, "hvdrun: out of memory\n");
        kill_groups(&run, SIGKILL);
        reap_all(&run);
out:
        if (devnull >= 0)
                close(devnull);
        embedded_stop(&emb);
        env_list_free(&base);
        run_free(&run);
        if (run.sfd >= 0)
                close(run.sfd);
        free(path);
        free(o.exports);
        return ret;
}
