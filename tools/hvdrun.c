/* hvdrun.c — launcher: `hvdrun -np N [-H HOSTS] PROGRAM ARGS...` starts the ranks of one job:
 * here against the node's hvd-coordinatord (or a private one in a thread), on other hosts over
 * ssh, or on hosts emulated here with a private daemon each. Invariants: every child (worker or
 * ssh) leads its own process group and stays a zombie we own until that group is killed; remote
 * ranks carry the job id in their environment, by which an abort finds them; output is passed
 * on in whole lines; the first failure decides the exit status. Elastic mode (workers and hosts
 * that come and go) is tools/hvdrun_elastic.c. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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
#include "cpubind.h"
#include "elastic_driver.h"
#include "embedded.h"
#include "hostlist.h"
#include "hvd.h"
#include "hvdrun.h"
#include "hvdrun_run.h"
#include "invariant.h"
#include "launcher.h"
#include "log.h"
#include "shellquote.h"
#include "util.h"
#include "wire.h"

extern char **environ;

/* ---- small helpers ---- */

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

static void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
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

int env_list_set(env_list_t *e, const char *name, const char *fmt, ...) {
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

/* ---- daemons ---- */

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

/* Asks a running reactor to stop; embedded_stop() then waits for it. Splitting
 * the two lets several private daemons wind down at the same time. */
void embedded_ask_stop(embedded_t *e) {
        if (e)
                hvd_embedded_ask_stop(&e->run);
}

void embedded_stop(embedded_t *e) {
        if (!e)
                return;
        int r = hvd_embedded_stop(&e->run);
        if (r < 0)
                fprintf(stderr, "hvdrun: the embedded hvd-coordinatord failed: %s\n", hvd_strerror(r));
        if (e->dir[0]) {
                remove_dir(e->dir);
                e->dir[0] = 0;
        }
}

/* Starts a private daemon in a fresh directory, with peer_listen when given; its
 * bound peer endpoint is read back into peer_ep. */
int embedded_start(embedded_t *e, const options_t *o, const char *peer_listen, char *peer_ep, size_t peer_ep_len) {
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
        if (peer_listen)
                snprintf(cfg.peer_listen, sizeof cfg.peer_listen, "%s", peer_listen);
        cfg.log_level = o->verbose ? LOG_INFO : LOG_WARNING;
        if (o->start_timeout)
                cfg.start_timeout_usec = o->start_timeout_usec;
        if (o->heartbeat_timeout) {
                /* heartbeats at a quarter of the timeout, at most the default interval */
                cfg.heartbeat_timeout_usec = o->heartbeat_timeout_usec;
                if (o->heartbeat_timeout_usec && cfg.heartbeat_interval_usec > o->heartbeat_timeout_usec / 4)
                        cfg.heartbeat_interval_usec = HVD_MAX(o->heartbeat_timeout_usec / 4, 10 * USEC_PER_MSEC);
        }
        hvd_log_max_level = cfg.log_level;
        hvd_log_set_ident("hvdrun: coordinator");
        char msg[PATH_MAX + 512];
        int r = hvd_embedded_start(&e->run, &cfg, msg, sizeof msg);
        if (r < 0) {
                fprintf(stderr, "hvdrun: %s\n", msg);
                return r;
        }
        /* hvd_daemon_new() wrote it after binding */
        if (peer_listen && hvd_daemon_peer_endpoint(e->dir, peer_ep, peer_ep_len) < 0) {
                fprintf(stderr, "hvdrun: the private hvd-coordinatord in %s did not write its peer endpoint\n", e->dir);
                return -EIO;
        }
        return 0;
}

/* Asks DIR/control.sock for a status. Returns 0 when a daemon answered (a
 * message was printed with verbose), or < 0 with why in msg. */
static int probe_daemon(const char *dir, bool verbose, char *msg, size_t msg_len) {
        char version[64] = "";
        uint32_t pid = 0;
        int r = hvd_daemon_probe(dir, PROBE_TIMEOUT_USEC, msg, msg_len, version, sizeof version, &pid);
        if (r >= 0 && verbose)
                fprintf(stderr, "hvdrun: using hvd-coordinatord %s (pid %" PRIu32 ") at %s\n", version, pid, dir);
        return r;
}

/* The name other hosts reach host h (of this machine) by. */
static const char *net_name(const job_t *job, const host_t *h) {
        if (job->all_here)
                return "127.0.0.1";
        return is_loopback_name(h->name) ? job->me : h->name;
}

/* "tcp://0.0.0.0:7100" (a daemon bound to every interface) is reached at "tcp://HOST:7100". */
static void endpoint_for_host(const char *ep, const char *host, char *out, size_t len) {
        static const char *const wild[] = { "tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:", "tcp://[*]:" };
        for (size_t i = 0; i < ELEMENTSOF(wild); i++) {
                size_t n = strlen(wild[i]);
                if (strncmp(ep, wild[i], n) != 0)
                        continue;
                if (strchr(host, ':'))
                        snprintf(out, len, "tcp://[%s]:%s", host, ep + n);
                else
                        snprintf(out, len, "tcp://%s:%s", host, ep + n);
                return;
        }
        snprintf(out, len, "%s", ep);
}

/* The daemon of this machine's own host (HOST_LOCAL): the node's, or a private one.
 * A private one that is the root of a job spanning hosts (or taking offered hosts,
 * --discover-daemons) listens for their daemons:
 * on loopback when every host is on this machine, else on every interface at
 * --root-peer's port (or a free one). */
static int start_local_daemon(const options_t *o, const job_t *job, host_t *h) {
        bool root = (job->cross_size > 1 || o->elastic.daemons || !job->all_here) && h == job->root;
        h->runtime_dir = o->runtime_dir;
        int embedded = o->embedded;
        if (embedded != 1) {
                char why[PATH_MAX + 256];
                int r = probe_daemon(o->runtime_dir, o->verbose && !o->dry_run, why, sizeof why);
                if (r < 0 && embedded == 0) {
                        fprintf(stderr,
                                "hvdrun: %s, and --no-embedded forbids a private one; start it with "
                                "'systemctl start hvd-coordinatord' or drop --no-embedded\n",
                                why);
                        return r;
                }
                if (r < 0 && (r != -ECONNREFUSED || o->verbose) && !o->dry_run)
                        fprintf(stderr, "hvdrun: %s; starting a private one\n", why);
                if (r < 0)
                        embedded = 1;
        }
        if (embedded != 1) {
                if (root && hvd_daemon_peer_endpoint(h->runtime_dir, h->peer_ep, sizeof h->peer_ep) == 0) {
                        char ep[ENDPOINT_BYTES];
                        endpoint_for_host(h->peer_ep, net_name(job, h), ep, sizeof ep);
                        memcpy(h->peer_ep, ep, sizeof ep);
                }
                return 0;
        }
        h->private_daemon = true;
        if (o->dry_run) {
                h->runtime_dir = PRIVATE;
                if (root)
                        snprintf(h->peer_ep, sizeof h->peer_ep, "%s", PRIVATE);
                return 0;
        }
        char listen_ep[ENDPOINT_BYTES] = "";
        if (root && job->all_here)
                snprintf(listen_ep, sizeof listen_ep, "tcp://127.0.0.1:*");
        else if (root) {
                const char *port = o->root_peer ? strrchr(o->root_peer, ':') : NULL;
                snprintf(listen_ep, sizeof listen_ep, "tcp://0.0.0.0:%s",
                         port && port[1] && strspn(port + 1, "0123456789") == strlen(port + 1) ? port + 1 : "*");
        }
        int r = embedded_start(&h->emb, o, root ? listen_ep : NULL, h->peer_ep, sizeof h->peer_ep);
        if (r < 0)
                return r;
        h->runtime_dir = h->emb.dir;
        if (root) {
                char ep[ENDPOINT_BYTES];
                endpoint_for_host(h->peer_ep, net_name(job, h), ep, sizeof ep);
                memcpy(h->peer_ep, ep, sizeof ep);
        }
        if (o->verbose)
                fprintf(stderr, "hvdrun: using a private hvd-coordinatord %s in %s%s%s\n", PACKAGE_VERSION, h->emb.dir,
                        root ? ", peers at " : "", root ? h->peer_ep : "");
        return 0;
}

/* Every host's daemon: found, or started here. */
static int start_daemons(const options_t *o, job_t *job) {
        for (size_t i = 0; i < o->n_hosts; i++) {
                host_t *h = &o->hosts[i];
                if (h->n_ranks == 0)
                        continue;
                int r = 0;
                char why[PATH_MAX + 256];
                switch (h->kind) {
                case HOST_LOCAL: r = start_local_daemon(o, job, h); break;
                case HOST_NODE:
                        h->runtime_dir = h->node_dir;
                        if (!o->dry_run && (r = probe_daemon(h->node_dir, o->verbose, why, sizeof why)) < 0) {
                                fprintf(stderr,
                                        "hvdrun: host %s (--node-daemon): %s; start it first, e.g. "
                                        "hvd-coordinatord --runtime-dir %s --peer-listen 'tcp://127.0.0.1:*'\n",
                                        h->name, why, h->node_dir);
                                return r;
                        }
                        if (hvd_daemon_peer_endpoint(h->node_dir, h->peer_ep, sizeof h->peer_ep) == 0) {
                                char ep[ENDPOINT_BYTES];
                                endpoint_for_host(h->peer_ep, net_name(job, h), ep, sizeof ep);
                                memcpy(h->peer_ep, ep, sizeof ep);
                        }
                        break;
                case HOST_EMULATED:
                        h->private_daemon = true;
                        if (o->dry_run) {
                                h->runtime_dir = PRIVATE;
                                snprintf(h->peer_ep, sizeof h->peer_ep, "%s", PRIVATE);
                                break;
                        }
                        r = embedded_start(&h->emb, o, "tcp://127.0.0.1:*", h->peer_ep, sizeof h->peer_ep);
                        if (r < 0)
                                return r;
                        h->runtime_dir = h->emb.dir;
                        if (o->verbose)
                                fprintf(stderr,
                                        "hvdrun: host %s emulated: private hvd-coordinatord in %s, peers at %s\n",
                                        h->name, h->emb.dir, h->peer_ep);
                        break;
                case HOST_REMOTE: h->runtime_dir = o->runtime_dir; break;
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Stops every private daemon (all asked first, then each waited for) and removes
 * their directories. */
static void stop_daemons(host_t *hosts, size_t n) {
        for (size_t i = 0; i < n; i++)
                embedded_ask_stop(&hosts[i].emb);
        for (size_t i = 0; i < n; i++)
                embedded_stop(&hosts[i].emb);
}

/* HVD_ROOT_PEER for a job that spans hosts: see the man page, "Several hosts". */
static int find_root_peer(const options_t *o, job_t *job) {
        host_t *h = job->root;
        if (job->cross_size < 2 && job->all_here)
                return 0;
        const char *ep = NULL;
        char def[ENDPOINT_BYTES];
        switch (h->kind) {
        case HOST_EMULATED: ep = h->peer_ep; break;
        case HOST_LOCAL:
                /* a private root listens where --root-peer says; the node's daemon may
                 * be reached at another name than its peer.endpoint shows */
                ep = o->root_peer ? o->root_peer : h->peer_ep[0] ? h->peer_ep : NULL;
                break;
        case HOST_NODE: ep = o->root_peer ? o->root_peer : h->peer_ep[0] ? h->peer_ep : NULL; break;
        case HOST_REMOTE:
                if (strchr(h->name, ':'))
                        snprintf(def, sizeof def, "tcp://[%s]:%d", h->name, DEFAULT_PEER_PORT);
                else
                        snprintf(def, sizeof def, "tcp://%s:%d", h->name, DEFAULT_PEER_PORT);
                ep = o->root_peer ? o->root_peer : def;
                break;
        }
        if (!ep) {
                fprintf(stderr,
                        "hvdrun: the hvd-coordinatord at %s serves host %s, the first of the job, but has no peer "
                        "endpoint for the other hosts' daemons (no %s/peer.endpoint): start it with --peer-listen "
                        "(peer_listen in its configuration), or give --root-peer ENDPOINT\n",
                        h->runtime_dir, h->name, h->runtime_dir);
                return -EINVAL;
        }
        snprintf(job->root_peer, sizeof job->root_peer, "%s", ep);
        if (job->any_remote && (strstr(ep, "://127.") || strstr(ep, "://localhost") || strstr(ep, "://[::1]")))
                fprintf(stderr,
                        "hvdrun: warning: the root daemon's endpoint %s is on loopback, where the daemons "
                        "of remote hosts cannot reach it; see --root-peer\n",
                        ep);
        return 0;
}

/* --ssh split at blanks, then -p PORT and -i FILE. */
static int split_ssh(const options_t *o, job_t *job) {
        size_t cap = strlen(o->ssh) / 2 + 6;
        if (!(job->ssh_words = calloc(cap, sizeof *job->ssh_words)))
                return -ENOMEM;
        for (const char *p = o->ssh + strspn(o->ssh, " \t"); *p; p += strspn(p, " \t")) {
                size_t n = strcspn(p, " \t");
                if (!(job->ssh_words[job->n_ssh_words++] = strndup(p, n)))
                        return -ENOMEM;
                p += n;
        }
        const char *extra[] = { o->ssh_port ? "-p" : NULL, o->ssh_port, o->ssh_identity ? "-i" : NULL,
                                o->ssh_identity };
        for (size_t i = 0; i < ELEMENTSOF(extra); i++)
                if (extra[i] && !(job->ssh_words[job->n_ssh_words++] = strdup(extra[i])))
                        return -ENOMEM;
        return 0;
}

/* Job id and secret, the host list variable, the working directory, --ssh. */
static int job_init(const options_t *o, job_t *job) {
        memcpy(job->id, "job-", 4);
        if (random_hex(job->id + 4, 8) < 0 || random_hex(job->secret, 16) < 0) {
                fprintf(stderr, "hvdrun: cannot read random bytes for the job id and secret\n");
                return -EIO;
        }
        if (gethostname(job->me, sizeof job->me - 1) < 0 || !job->me[0])
                snprintf(job->me, sizeof job->me, "localhost");
        if (!getcwd(job->cwd, sizeof job->cwd))
                job->cwd[0] = 0;
        job->all_here = true;
        hvd_strbuf_t hv = { 0 };
        for (size_t i = 0; i < o->n_hosts; i++) {
                host_t *h = &o->hosts[i];
                if (h->n_ranks == 0)
                        continue;
                if (h->cross_rank == 0)
                        job->root = h;
                job->cross_size++;
                if (h->kind == HOST_REMOTE)
                        job->any_remote = true;
                else
                        job->any_here = true;
                char n[32];
                snprintf(n, sizeof n, ":%d", h->n_ranks);
                if (hv.len)
                        hvd_strbuf_puts(&hv, ",");
                hvd_strbuf_puts(&hv, h->name);
                hvd_strbuf_puts(&hv, n);
        }
        /* an elastic job that may grow onto other machines: the ranks here
         * are reached on the network too, not on loopback */
        job->all_here = !job->any_remote && !remote_elastic_ready(o);
        if (!(job->hosts_var = hvd_strbuf_take(&hv)))
                return -ENOMEM;
        if (strlen(job->hosts_var) > MAX_HOSTS_VAR) {
                fprintf(stderr, "hvdrun: the host list is too long for HVD_HOSTS (%zu bytes, at most %d)\n",
                        strlen(job->hosts_var), MAX_HOSTS_VAR);
                return -E2BIG;
        }
        if (!job->all_here && o->launcher == HVD_LAUNCH_SSH)
                return split_ssh(o, job);
        return 0;
}

static void job_free(job_t *job) {
        free(job->hosts_var);
        strv_free(job->ssh_words);
        *job = (job_t){ 0 };
}

/* ---- commands ---- */

/* The variables hvdrun sets for one rank (not the inherited environment): -x, the
 * knobs, the job, the host, the rank, under hvd's and Horovod's names. */
static int rank_vars(const options_t *o, const job_t *job, const host_t *h, int local_rank, env_list_t *e) {
        int r, rank = h->first_rank + local_rank;
        for (size_t i = 0; i < o->n_exports; i++) {
                const char *x = o->exports[i], *val = strchr(x, '=') ? NULL : getenv(x);
                if (strchr(x, '=')) {
                        if ((r = env_list_put(e, strdup(x))) < 0)
                                return r;
                } else if (val && (r = env_list_set(e, x, "%s", val)) < 0)
                        return r;
        }
        if ((o->fusion_mb && (r = env_list_set(e, "HVD_FUSION_THRESHOLD", "%" PRIu64, o->fusion_bytes)) < 0) ||
            (o->cycle_ms && (r = env_list_set(e, "HVD_CYCLE_TIME", "%s", o->cycle_ms)) < 0) ||
            (o->start_timeout && (r = env_list_set(e, "HVD_START_TIMEOUT", "%s", o->start_timeout)) < 0) ||
            (o->timeline && (r = env_list_set(e, "HVD_TIMELINE", "%s", o->timeline)) < 0) ||
            (o->timeline_mark_cycles && (r = env_list_set(e, "HVD_TIMELINE_MARK_CYCLES", "1")) < 0))
                return r;
        for (int k = 0; k < HVD_TUNE_OPTIONS; k++)
                if (o->tune[k] && (r = env_list_set(e, hvd_tune_option_var(k), "%s", o->tune[k])) < 0)
                        return r;
        /* Horovod's cross rank/size: among the hosts that have this local rank */
        int hcr = 0, hcs = 0;
        for (size_t i = 0; i < o->n_hosts; i++) {
                const host_t *g = &o->hosts[i];
                if (g == h)
                        hcr = hcs;
                if (g->n_ranks > local_rank)
                        hcs++;
        }
        const char *hostname = h->kind == HOST_LOCAL && is_loopback_name(h->name) ? job->me : h->name;
        if ((r = env_list_set(e, "HVD_JOB_ID", "%s", job->id)) < 0 ||
            ((h->kind != HOST_REMOTE || o->launcher == HVD_LAUNCH_SRUN) &&
             (r = env_list_set(e, "HVD_JOB_SECRET", "%s", job->secret)) < 0) ||
            (r = env_list_set(e, "HVD_SIZE", "%ld", o->np)) < 0 || (r = env_list_set(e, "HVD_RANK", "%d", rank)) < 0 ||
            (r = env_list_set(e, "HVD_LOCAL_RANK", "%d", local_rank)) < 0 ||
            (r = env_list_set(e, "HVD_LOCAL_SIZE", "%d", h->n_ranks)) < 0 ||
            (r = env_list_set(e, "HVD_CROSS_RANK", "%d", h->cross_rank)) < 0 ||
            (r = env_list_set(e, "HVD_CROSS_SIZE", "%d", job->cross_size)) < 0 ||
            (r = env_list_set(e, "HVD_HOSTNAME", "%s", hostname)) < 0)
                return r;
        if (h->kind != HOST_REMOTE &&
            (r = env_list_set(e, "HVD_COORDINATOR", "ipc://%s/worker.sock", h->runtime_dir)) < 0)
                return r;
        if ((r = env_list_set(e, "HVD_RUNTIME_DIR", "%s", h->runtime_dir)) < 0)
                return r;
        if (job->cross_size > 1 && ((r = env_list_set(e, "HVD_HOSTS", "%s", job->hosts_var)) < 0 ||
                                    (r = env_list_set(e, "HVD_ROOT_PEER", "%s", job->root_peer)) < 0))
                return r;
        /* hosts of one machine reach each other's ranks on loopback */
        bool elastic = hvd_elastic_on(&o->elastic);
        if ((job->cross_size > 1 || elastic) && job->all_here &&
            (r = env_list_set(e, "HVD_DATA_ADDR", "127.0.0.1")) < 0)
                return r;
        char ev[8][64];
        for (size_t i = 0, n = elastic ? hvd_elastic_env(&o->elastic, ev, 8) : 0; i < n; i++)
                if ((r = env_list_put(e, strdup(ev[i]))) < 0)
                        return r;
        if (elastic && job->cross_size == 1 && job->root_peer[0] &&
            (r = env_list_set(e, "HVD_ROOT_PEER", "%s", job->root_peer)) < 0)
                return r;
        if ((r = env_list_set(e, "HOROVOD_RANK", "%d", rank)) < 0 ||
            (r = env_list_set(e, "HOROVOD_SIZE", "%ld", o->np)) < 0 ||
            (r = env_list_set(e, "HOROVOD_LOCAL_RANK", "%d", local_rank)) < 0 ||
            (r = env_list_set(e, "HOROVOD_LOCAL_SIZE", "%d", h->n_ranks)) < 0 ||
            (r = env_list_set(e, "HOROVOD_CROSS_RANK", "%d", hcr)) < 0 ||
            (r = env_list_set(e, "HOROVOD_CROSS_SIZE", "%d", hcs)) < 0 ||
            (r = env_list_set(e, "HOROVOD_HOSTNAME", "%s", hostname)) < 0)
                return r;
        return 0;
}

/* "cd CWD && exec env VAR=VALUE... PROGRAM ARGS...", every word quoted for a
 * POSIX shell (shown: for showing, see hvd_strbuf_quoted_shown()). With
 * read_secret, the job secret is read from the first line of standard input
 * first, so that it never appears on a command line. */
static char *shell_command(const job_t *job, char *const *vars, const char *prog, char *const *args, bool read_secret,
                           bool shown) {
        void (*quoted)(hvd_strbuf_t *, const char *) = shown ? hvd_strbuf_quoted_shown : hvd_strbuf_quoted;
        hvd_strbuf_t b = { 0 };
        if (job->cwd[0]) {
                hvd_strbuf_puts(&b, "cd ");
                quoted(&b, job->cwd);
                hvd_strbuf_puts(&b, " && ");
        }
        if (read_secret)
                hvd_strbuf_puts(&b, "IFS= read -r HVD_JOB_SECRET && export HVD_JOB_SECRET && ");
        hvd_strbuf_puts(&b, "exec env");
        for (size_t i = 0; vars && vars[i]; i++) {
                hvd_strbuf_puts(&b, " ");
                quoted(&b, vars[i]);
        }
        hvd_strbuf_puts(&b, " ");
        quoted(&b, prog);
        for (size_t i = 0; args && args[i]; i++) {
                hvd_strbuf_puts(&b, " ");
                quoted(&b, args[i]);
        }
        return hvd_strbuf_take(&b);
}

/* SSH... -o BatchMode=yes -o StrictHostKeyChecking=accept-new HOST COMMAND; owned. */
static char **ssh_argv(const job_t *job, const char *host, const char *command) {
        static const char *const opts[] = { "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new" };
        size_t n = job->n_ssh_words + ELEMENTSOF(opts) + 2;
        char **v = calloc(n + 1, sizeof *v);
        if (!v)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < job->n_ssh_words; i++)
                v[k++] = strdup(job->ssh_words[i]);
        for (size_t i = 0; i < ELEMENTSOF(opts); i++)
                v[k++] = strdup(opts[i]);
        v[k++] = strdup(host);
        v[k++] = strdup(command);
        for (size_t i = 0; i < k; i++)
                if (!v[i]) {
                        for (size_t j = 0; j < k; j++)
                                free(v[j]);
                        free(v);
                        return NULL;
                }
        return v;
}

static char *argv_shown(char *const *argv) {
        hvd_strbuf_t b = { 0 };
        for (size_t i = 0; argv[i]; i++) {
                if (i)
                        hvd_strbuf_puts(&b, " ");
                hvd_strbuf_quoted_shown(&b, argv[i]);
        }
        return hvd_strbuf_take(&b);
}

/* Fills in w's environment (local rank) or ssh command line (remote rank), and with
 * --dry-run the command line to show. */
int prepare_worker(const options_t *o, const job_t *job, const char *path, worker_t *w, int local_rank) {
        env_list_t vars = { 0 }, env = { 0 };
        host_t *h = w->host;
        char *cmd = NULL;
        int r = -ENOMEM;
        bool ssh = h->kind == HOST_REMOTE && o->launcher == HVD_LAUNCH_SSH;
        if (ssh) {
                /* the remote login shell's own PATH etc. would find other programs */
                static const char *const pass[] = { "PATH", "LD_LIBRARY_PATH", "PYTHONPATH" };
                for (size_t i = 0; i < ELEMENTSOF(pass); i++) {
                        const char *v = getenv(pass[i]);
                        if (v && (r = env_list_set(&vars, pass[i], "%s", v)) < 0)
                                goto out;
                }
        }
        if ((r = rank_vars(o, job, h, local_rank, &vars)) < 0)
                goto out;
        for (size_t i = 0; w->vars && w->vars[i]; i++)
                if ((r = env_list_put(&vars, strdup(w->vars[i]))) < 0)
                        goto out;
        r = -ENOMEM;
        /* srun runs PROGRAM on the node in our environment: the variables (the
         * secret too) travel with the step, not on a command line */
        if (o->launcher == HVD_LAUNCH_SRUN &&
            !(w->argv = hvd_srun_argv("srun", h->name, w->rank == 0 && !isatty(0), o->argv)))
                goto out;
        if (ssh) {
                if (!(cmd = shell_command(job, vars.v, o->argv[0], o->argv + 1, true, false)) ||
                    !(w->argv = ssh_argv(job, h->name, cmd)))
                        goto out;
                if (o->dry_run && !(w->shown = argv_shown(w->argv)))
                        goto out;
        } else if (o->dry_run) {
                if (!(w->shown = shell_command(job, vars.v, w->argv ? w->argv[0] : path,
                                               w->argv ? w->argv + 1 : o->argv + 1, false, true)))
                        goto out;
        } else {
                if ((r = env_list_copy(&env, environ)) < 0)
                        goto out;
                for (size_t i = 0; i < vars.n; i++)
                        if ((r = env_list_put(&env, strdup(vars.v[i]))) < 0)
                                goto out;
                w->envp = env.v;
                env = (env_list_t){ 0 };
        }
        r = 0;
out:
        free(cmd);
        env_list_free(&vars);
        env_list_free(&env);
        return r;
}

/* ---- workers ---- */

static void stream_close(stream_t *s) {
        if (s->fd >= 0)
                close(s->fd);
        s->fd = -1;
}

static void run_free(run_t *run) {
        if (!run)
                return;
        for (int i = 0; run->w && i < run->n; i++) {
                stream_close(&run->w[i].out);
                stream_close(&run->w[i].err);
                free(run->w[i].out.buf);
                free(run->w[i].err.buf);
                strv_free(run->w[i].envp);
                strv_free(run->w[i].argv);
                strv_free(run->w[i].vars);
                free(run->w[i].shown);
        }
        free(run->w);
        run->w = NULL;
        free(run->scratch);
        run->scratch = NULL;
        free(run->helpers);
        run->helpers = NULL;
}

/* Passes on the complete lines in s->buf (all of it when at_eof), each with
 * the rank prefix, in one write. */
static void stream_emit(run_t *run, worker_t *w, stream_t *s, bool at_eof) {
        char prefix[32 + HOST_NAME_BYTES];
        int plen = run->prefix_host ? snprintf(prefix, sizeof prefix, "[%d@%s] ", w->rank, w->host->name)
                                    : snprintf(prefix, sizeof prefix, "[%d] ", w->rank);
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

/* Child side of fork(): only async-signal-safe calls until execve. */
/* fd as descriptor `to` across the exec; dup2 onto itself would keep its
 * FD_CLOEXEC (a pipe that got number 0 while our stdin was closed). */
static int fd_onto(int fd, int to) {
        return fd == to ? fcntl(to, F_SETFD, 0) : dup2(fd, to);
}

__attribute__((noreturn)) static void child_exec(const char *path, char *const *argv, char *const *envp, int in_fd,
                                                 int out_fd, int err_fd, int errpipe, pid_t parent,
                                                 const cpu_set_t *cpus) {
        (void) setpgid(0, 0);
        /* a rank that cannot be bound still runs, where the scheduler puts it */
        if (cpus)
                (void) sched_setaffinity(0, sizeof *cpus, cpus);
        /* hvdrun killed with SIGKILL: its workers follow */
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
                _exit(127);
        if ((in_fd >= 0 && fd_onto(in_fd, 0) < 0) || (out_fd >= 0 && fd_onto(out_fd, 1) < 0) ||
            (err_fd >= 0 && fd_onto(err_fd, 2) < 0))
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
        if (errpipe >= 0 && write(errpipe, &e, sizeof e) < 0)
                (void) 0;
        _exit(127);
}

/* A remote clean-up: "ssh HOST <signal every process of this job on HOST>". The ranks
 * of a job carry HVD_JOB_ID and HVD_HOSTNAME in their environment, and so do their
 * children; the host name keeps the clean-up of one host off the ranks of another
 * that shares its machine (a host listed under two names, network namespaces). */
void remote_signal(run_t *run, host_t *h, int sig) {
        int k = sig == SIGKILL;
        if (h->remote_kill_sent[k] || !run->ssh_path)
                return;
        h->remote_kill_sent[k] = true;
        char *cmd = NULL;
        hvd_strbuf_t q = { 0 };
        hvd_strbuf_puts(&q, "HVD_HOSTNAME=");
        hvd_strbuf_quoted(&q, h->name);
        char *quoted = hvd_strbuf_take(&q);
        if (!quoted ||
            asprintf(&cmd,
                     "for d in /proc/[0-9]*; do [ -O \"$d\" ] && [ \"$(tr '\\0' '\\n' 2>/dev/null <\"$d/environ\" | "
                     "grep -cxF -e HVD_JOB_ID=%s -e %s)\" = 2 ] && kill -s %s \"${d#/proc/}\" 2>/dev/null; done; "
                     "exit 0",
                     run->job->id, quoted, k ? "KILL" : "TERM") < 0) {
                free(quoted);
                return;
        }
        free(quoted);
        char **argv = ssh_argv(run->job, h->name, cmd);
        free(cmd);
        if (!argv)
                return;
        if (run->n_helpers == run->cap_helpers) {
                size_t cap = run->cap_helpers ? run->cap_helpers * 2 : 8;
                pid_t *p = realloc(run->helpers, cap * sizeof *p);
                if (!p) {
                        strv_free(argv);
                        return;
                }
                run->helpers = p;
                run->cap_helpers = cap;
        }
        if (run->verbose)
                fprintf(stderr, "hvdrun: sending SIG%s to the ranks on %s\n", k ? "KILL" : "TERM", h->name);
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        pid_t parent = getpid(), pid = fork();
        if (pid == 0)
                child_exec(run->ssh_path, argv, environ, devnull, devnull, -1, -1, parent, NULL);
        if (pid > 0) {
                (void) setpgid(pid, pid);
                run->helpers[run->n_helpers++] = pid;
        } else
                fprintf(stderr, "hvdrun: cannot stop the ranks on %s: %s\n", h->name, strerror(errno));
        if (devnull >= 0)
                close(devnull);
        strv_free(argv);
}

/* Local workers: their process groups. Remote ranks: SIGTERM goes to the remote
 * processes (the ssh sessions then end by themselves, with their output); SIGKILL
 * also kills the local ssh. */
static void kill_groups(run_t *run, int sig) {
        for (int i = 0; i < run->n; i++) {
                worker_t *w = &run->w[i];
                /* the leader is an unreaped child, so its group id cannot have been reused */
                if (w->pid <= 0 || w->reaped)
                        continue;
                /* srun passes a signal on to its step's task */
                bool over_ssh = w->host->kind == HOST_REMOTE && !run->srun;
                if (!over_ssh || sig == SIGKILL)
                        (void) kill(-w->pid, sig);
                if (over_ssh && !w->exited)
                        remote_signal(run, w->host, sig);
        }
}

int count_live(const run_t *run) {
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
        run->last_status = w->status;
        if (run->o && hvd_elastic_on(&run->o->elastic)) {
                elastic_exit(run, w, si);
                return;
        }
        if (w->status == 0 || run->interrupt_sig)
                return;
        bool first = run->first_fail_rank < 0;
        if (first || run->verbose) {
                char where[HOST_NAME_BYTES + 8] = "";
                if (run->multi)
                        snprintf(where, sizeof where, " on %s", w->host->name);
                if (si->si_code == CLD_EXITED)
                        fprintf(stderr, "hvdrun: rank %d%s exited with status %d%s\n", w->rank, where, w->status,
                                w->host->kind == HOST_REMOTE && w->status == 255
                                        ? " (ssh failed, or the remote program was killed by a signal)"
                                        : "");
                else
                        fprintf(stderr, "hvdrun: rank %d%s killed by signal %d (%s)\n", w->rank, where, si->si_status,
                                strsignal(si->si_status));
        }
        if (!first)
                return;
        run->first_fail_rank = w->rank;
        run->exit_status = w->status;
        if (count_live(run) > 0)
                run->grace_deadline = now + run->grace_usec;
}

static void reap_helpers(run_t *run) {
        for (size_t i = 0; i < run->n_helpers; i++)
                if (run->helpers[i] > 0 && waitpid(run->helpers[i], NULL, WNOHANG) == run->helpers[i])
                        run->helpers[i] = 0;
        if (run->pump > 0 && waitpid(run->pump, NULL, WNOHANG) == run->pump)
                run->pump = 0;
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
        reap_helpers(run);
}

static void reap_all(run_t *run) {
        for (int i = 0; run->w && i < run->n; i++) {
                worker_t *w = &run->w[i];
                if (w->pid <= 0 || w->reaped)
                        continue;
                /* whatever the worker left in its group goes with it */
                (void) kill(-w->pid, SIGKILL);
                while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                w->reaped = true;
        }
        /* the stdin pump may wait for input that never comes */
        if (run->pump > 0) {
                (void) kill(-run->pump, SIGKILL);
                while (waitpid(run->pump, NULL, 0) < 0 && errno == EINTR)
                        ;
                run->pump = 0;
        }
        /* remote clean-up commands get a moment to finish their work */
        uint64_t deadline = hvd_now_usec() + HELPER_WAIT_USEC;
        for (;;) {
                reap_helpers(run);
                size_t left = 0;
                for (size_t i = 0; i < run->n_helpers; i++)
                        left += run->helpers[i] > 0;
                if (left == 0)
                        break;
                if (hvd_now_usec() >= deadline) {
                        for (size_t i = 0; i < run->n_helpers; i++)
                                if (run->helpers[i] > 0) {
                                        (void) kill(-run->helpers[i], SIGKILL);
                                        while (waitpid(run->helpers[i], NULL, 0) < 0 && errno == EINTR)
                                                ;
                                        run->helpers[i] = 0;
                                }
                        break;
                }
                (void) poll(NULL, 0, 20);
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
                                        signame(run->interrupt_sig), count_live(run), count_live(run) == 1 ? "" : "s");
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
        size_t cap = (size_t) HVD_MAX(run->n, run->cap) * 2 + 1;
        struct pollfd *pfd = calloc(cap, sizeof *pfd);
        stream_t **pstream = calloc(cap, sizeof *pstream);
        worker_t **pworker = calloc(cap, sizeof *pworker);
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
                                fprintf(stderr,
                                        "hvdrun: stopping %d worker%s still running %g s after rank %d failed\n", live,
                                        live == 1 ? "" : "s", (double) run->grace_usec / 1e6, run->first_fail_rank);
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
                if (run->disc && live > 0 && !run->interrupt_sig)
                        next = HVD_MIN(next, hvd_discovery_deadline(run->disc));
                int timeout = next == UINT64_MAX ? -1 : next <= now ? 0 : (int) ((next - now + 999) / 1000);
                int k = poll(pfd, n, timeout);
                if (k < 0 && errno != EINTR) {
                        fprintf(stderr, "hvdrun: poll failed: %s; stopping the workers\n", strerror(errno));
                        kill_groups(run, SIGKILL);
                        break;
                }
                if (run->disc && live > 0 && !run->interrupt_sig)
                        elastic_discover(run, hvd_now_usec());
                warm_tick(run, hvd_now_usec());
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

/* The ranks that run here (not through ssh or srun) share hvdrun's CPUs,
 * each its own part, when there are enough of them (see cpubind.h). */
static void bind_workers(const options_t *o, run_t *run) {
        cpu_set_t avail;
        if (o->cpu_bind == HVD_CPU_BIND_NONE || o->launcher == HVD_LAUNCH_SRUN ||
            sched_getaffinity(0, sizeof avail, &avail) < 0)
                return;
        int here = 0;
        for (int i = 0; i < run->n; i++)
                here += run->w[i].host->kind != HOST_REMOTE;
        for (int i = 0, k = 0; i < run->n; i++) {
                worker_t *w = &run->w[i];
                if (w->host->kind == HOST_REMOTE)
                        continue;
                w->bound = hvd_cpu_share(&avail, k++, here, &w->cpus);
                if (w->bound && o->verbose) {
                        char list[256] = "";
                        size_t len = 0;
                        for (int c = 0; c < CPU_SETSIZE && len + 8 < sizeof list; c++)
                                if (CPU_ISSET(c, &w->cpus))
                                        len += (size_t) snprintf(list + len, sizeof list - len, "%s%d", len ? "," : "",
                                                                 c);
                        fprintf(stderr, "hvdrun: rank %d runs on CPUs %s\n", w->rank, list);
                }
        }
}

int spawn_worker(worker_t *w, const char *path, char *const *argv, bool prefix, int in_fd) {
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
                child_exec(path, argv, w->envp ? w->envp : environ, in_fd, outp[1], errp[1], ep[1], parent,
                           w->bound ? &w->cpus : NULL);
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

/* A remote rank's standard input: the job secret on the first line, then our
 * stdin (pump) or nothing. Returns the read end (close it after the fork). */
int remote_stdin(run_t *run, bool with_our_stdin) {
        int p[2];
        char line[sizeof run->job->secret + 1];
        size_t n = (size_t) snprintf(line, sizeof line, "%s\n", run->job->secret);
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        if (!with_our_stdin) {
                /* fits in the pipe: nobody has to wait for the reader */
                int r = write_all(p[1], line, n);
                close(p[1]);
                if (r < 0) {
                        close(p[0]);
                        return r;
                }
                return p[0];
        }
        pid_t parent = getpid(), pid = fork();
        if (pid < 0) {
                int r = -errno;
                close(p[0]);
                close(p[1]);
                return r;
        }
        if (pid == 0) {
                /* only async-signal-safe calls: the daemons' threads may hold locks */
                (void) setpgid(0, 0);
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(0);
                /* hold nothing of hvdrun's: not the daemons' sockets, not other pipes */
                if (p[1] != 3 && dup2(p[1], 3) < 0)
                        _exit(0);
#ifdef SYS_close_range
                if (syscall(SYS_close_range, 4U, ~0U, 0U) < 0)
#endif
                {
                        for (int fd = 4; fd < 65536; fd++)
                                (void) close(fd);
                }
                p[1] = 3;
                char buf[16384];
                if (write(p[1], line, n) != (ssize_t) n)
                        _exit(0);
                for (;;) {
                        ssize_t k = read(0, buf, sizeof buf);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                _exit(0);
                        for (ssize_t off = 0; off < k;) {
                                ssize_t m = write(p[1], buf + off, (size_t) (k - off));
                                if (m < 0 && errno == EINTR)
                                        continue;
                                if (m <= 0)
                                        _exit(0); /* the rank is gone (EPIPE) */
                                off += m;
                        }
                }
        }
        (void) setpgid(pid, pid);
        run->pump = pid;
        close(p[1]);
        return p[0];
}

static const char *kind_name(const host_t *h, bool srun) {
        if (srun)
                return h->kind != HOST_LOCAL ? "srun"
                       : h->private_daemon   ? "srun, this host's private daemon"
                                             : "srun, this host";
        switch (h->kind) {
        case HOST_LOCAL: return h->private_daemon ? "this host, private daemon" : "this host";
        case HOST_NODE: return "node daemon";
        case HOST_EMULATED: return "emulated";
        case HOST_REMOTE: return "ssh";
        }
        return "?";
}

int main(int argc, char **argv) {
        options_t o = { 0 };
        job_t job = { 0 };
        run_t run = { .sfd = -1, .first_fail_rank = -1 };
        char *path = NULL, *launch_path = NULL;
        int devnull = -1;
        int ret = 1, r;

        r = parse_options(argc, argv, &o);
        if (r != 0) {
                ret = r > 0 ? 0 : r == -ENOMEM ? 1 : EXIT_USAGE;
                if (r == -ENOMEM)
                        fprintf(stderr, "hvdrun: out of memory\n");
                goto out;
        }
        if (hvd_elastic_on(&o.elastic)) {
                char e[256];
                if (hvd_elastic_opts_check(&o.elastic, o.np, e, sizeof e) < 0 ||
                    hvd_discovery_new(&o.elastic, &run.disc) < 0) {
                        ret = usage_error("%s", e);
                        goto out;
                }
                run.cap = (int) o.np + 1024;
                if (o.elastic.daemons && !(run.offers = calloc(MAX_OFFERS, sizeof *run.offers)))
                        goto out_oom;
        }
        run.o = &o;
        run.verbose = o.verbose;
        run.grace_usec = o.grace_usec;
        run.prefix_host = o.prefix_host;
        run.srun = o.launcher == HVD_LAUNCH_SRUN;

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

        for (size_t i = 0; i < o.n_exports; i++)
                if (!strchr(o.exports[i], '=') && !getenv(o.exports[i]))
                        fprintf(stderr, "hvdrun: warning: -x %s: %s is not set here; not passed on\n", o.exports[i],
                                o.exports[i]);
        r = job_init(&o, &job);
        if (r < 0) {
                if (r == -ENOMEM)
                        fprintf(stderr, "hvdrun: out of memory\n");
                goto out;
        }
        run.job = &job;
        run.hosts = o.hosts;
        run.n_hosts = o.n_hosts;
        run.multi = job.cross_size > 1;

        if (job.any_here) {
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
        }
        if (run.srun && !o.dry_run) {
                r = resolve_program("srun", getenv("PATH"), &launch_path);
                if (r != 0) {
                        fprintf(stderr, "hvdrun: --launcher srun starts the ranks with srun: install Slurm's srun\n");
                        goto out;
                }
        } else if (!job.all_here && !o.dry_run) {
                r = resolve_program(job.ssh_words[0], getenv("PATH"), &launch_path);
                if (r != 0) {
                        fprintf(stderr, "hvdrun: remote hosts are reached with '%s': install ssh, or see --ssh\n",
                                o.ssh);
                        goto out;
                }
                run.ssh_path = launch_path;
        }
        if (start_daemons(&o, &job) < 0 || find_root_peer(&o, &job) < 0)
                goto out;
        /* an elastic job may grow onto other hosts: their daemons reach the root's */
        if (run.disc && !job.root_peer[0] && job.root && job.root->peer_ep[0])
                snprintf(job.root_peer, sizeof job.root_peer, "%s", job.root->peer_ep);
        if (o.elastic.daemons && !o.dry_run && elastic_daemons_check(&run) < 0)
                goto out;
        if (o.elastic.discovery && !o.dry_run && elastic_root_listed(&run) < 0)
                goto out;
        run.path = path;
        if (o.verbose) {
                fprintf(stderr, "hvdrun: job %s, %ld rank%s on %d host%s", job.id, o.np, o.np == 1 ? "" : "s",
                        job.cross_size, job.cross_size == 1 ? "" : "s");
                if (job.cross_size > 1)
                        fprintf(stderr, ", root daemon at %s", job.root_peer);
                fputc('\n', stderr);
                for (size_t i = 0; i < o.n_hosts; i++) {
                        const host_t *h = &o.hosts[i];
                        if (h->n_ranks == 1)
                                fprintf(stderr, "hvdrun:   %s (%s): rank %d\n", h->name, kind_name(h, run.srun),
                                        h->first_rank);
                        else if (h->n_ranks > 1)
                                fprintf(stderr, "hvdrun:   %s (%s): ranks %d-%d\n", h->name, kind_name(h, run.srun),
                                        h->first_rank, h->first_rank + h->n_ranks - 1);
                }
        }

        run.w = calloc((size_t) HVD_MAX(o.np, run.cap), sizeof *run.w);
        if (!run.w)
                goto out_oom;
        run.n = (int) o.np;
        /* rank by rank, each on the host whose range holds it */
        for (int rank = 0, hi = 0; rank < run.n; rank++) {
                while ((size_t) hi < o.n_hosts && rank >= o.hosts[hi].first_rank + o.hosts[hi].n_ranks)
                        hi++;
                hvd_assert((size_t) hi < o.n_hosts); /* plan_hosts() gave out all -np ranks */
                host_t *h = &o.hosts[hi];
                worker_t *w = &run.w[rank];
                w->rank = rank;
                w->host = h;
                w->out = (stream_t){ .fd = -1, .out_fd = 1 };
                w->err = (stream_t){ .fd = -1, .out_fd = 2 };
                if (o.prefix && !o.dry_run &&
                    (!(w->out.buf = malloc(LINE_BYTES)) || !(w->err.buf = malloc(LINE_BYTES))))
                        goto out_oom;
                if (prepare_worker(&o, &job, path, w, rank - h->first_rank) < 0)
                        goto out_oom;
        }
        bind_workers(&o, &run);
        if ((r = warm_new(&run)) < 0) {
                ret = r == -EINVAL ? EXIT_USAGE : 1;
                goto out;
        }
        if (o.dry_run) {
                for (int i = 0; i < run.n; i++)
                        printf("rank %d on %s: %s\n", i, run.w[i].host->name, run.w[i].shown);
                ret = fflush(stdout) == 0 ? 0 : 1;
                goto out;
        }

        /* rank 0 reads our stdin, unless it is the terminal (a background process
         * group reading the terminal would be stopped); the others read nothing */
        devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        bool stdin_to_rank0 = !isatty(0);
        for (int i = 0; i < run.n; i++) {
                worker_t *w = &run.w[i];
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
                int in_fd = i == 0 && stdin_to_rank0 ? -1 : devnull, remote_in = -1;
                if (w->host->kind == HOST_REMOTE && !run.srun) {
                        remote_in = remote_stdin(&run, i == 0 && stdin_to_rank0);
                        if (remote_in < 0) {
                                fprintf(stderr, "hvdrun: cannot start rank %d: %s\n", i, strerror(-remote_in));
                                r = remote_in;
                        }
                        in_fd = remote_in;
                }
                if (remote_in >= 0 || w->host->kind != HOST_REMOTE || run.srun)
                        r = spawn_worker(w, w->argv ? launch_path : path, w->argv ? w->argv : o.argv, o.prefix, in_fd);
                if (remote_in >= 0)
                        close(remote_in);
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
        else if (hvd_elastic_on(&o.elastic))
                ret = run.finished ? 0 : run.last_status; /* elastic: the training finished, or how it ended */
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
        warm_free(run.warm);
        stop_daemons(o.hosts, o.n_hosts);
        elastic_free_hosts(&run);
        hvd_discovery_destroy(&run.disc);
        run_free(&run);
        if (run.sfd >= 0)
                close(run.sfd);
        job_free(&job);
        hosts_free(o.hosts, o.n_hosts);
        free(path);
        free(launch_path);
        free(o.exports);
        free(o.node_daemons);
        return ret;
}
