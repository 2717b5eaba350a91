/* hvdrun_daemons.c — the daemon of each host of a job: on this machine the
 * node's hvd-coordinatord (found by a probe of its control socket) or a
 * private one in a thread of hvdrun (embedded_start()), a private one per
 * emulated host, the one --node-daemon names; on a remote host that host's
 * own. The ranks get the peer endpoint of the root daemon, rank 0's host's,
 * as HVD_ROOT_PEER. A private daemon's directory is hvdrun's, removed when
 * the daemon stops. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "embedded.h"
#include "hvd.h"
#include "hvdrun.h"
#include "hvdrun_run.h"
#include "log.h"
#include "util.h"

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
int start_daemons(const options_t *o, job_t *job) {
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
void stop_daemons(host_t *hosts, size_t n) {
        for (size_t i = 0; i < n; i++)
                embedded_ask_stop(&hosts[i].emb);
        for (size_t i = 0; i < n; i++)
                embedded_stop(&hosts[i].emb);
}

/* HVD_ROOT_PEER for a job that spans hosts: see the man page, "Several hosts". */
int find_root_peer(const options_t *o, job_t *job) {
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
