/* hvdrun_elastic.c — hvdrun's elastic mode: a worker's end does not end
 * the job; the hosts the discovery script prints and those whose daemons
 * offer them to the root daemon (--discover-daemons) get workers, up to
 * --max-np, and hosts no longer discovered lose theirs; the first host,
 * whose daemon is the elastic job's root, keeps its workers. The options,
 * the script and the blacklist are tools/elastic_driver.c's; hosts of
 * other machines, reached over ssh, tools/hvdrun_remote.c's; membership
 * is the root daemon's. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elastic_driver.h"
#include "embedded.h"
#include "hvdrun.h"
#include "hvdrun_run.h"
#include "util.h"

/* A worker of an elastic job ended: the others go on (the daemons form the
 * next generation); a failure keeps new workers off its host for the
 * cool-down. */
void elastic_exit(run_t *run, worker_t *w, const siginfo_t *si) {
        if (w->status == 0) {
                hvd_discovery_destroy(&run->disc); /* the training is done: no more workers */
                run->finished = true;
        }
        if (w->status == 0 || run->interrupt_sig || w->stopped)
                return;
        if (si->si_code == CLD_EXITED && w->host->kind == HOST_REMOTE && w->status == 255)
                remote_lost(run, w);
        else if (si->si_code == CLD_EXITED)
                fprintf(stderr, "hvdrun: worker %d on %s exited with status %d; the elastic job goes on\n", w->rank,
                        w->host->name, w->status);
        else
                fprintf(stderr, "hvdrun: worker %d on %s killed by signal %d (%s); the elastic job goes on\n", w->rank,
                        w->host->name, si->si_status, strsignal(si->si_status));
        hvd_discovery_blacklist(run->disc, w->host->name, hvd_now_usec());
}

static host_t *elastic_host(run_t *run, const char *name) {
        for (size_t i = 0; i < run->n_hosts; i++)
                if (strcmp(run->hosts[i].name, name) == 0)
                        return &run->hosts[i];
        for (size_t i = 0; i < run->n_added; i++)
                if (strcmp(run->added[i]->name, name) == 0)
                        return run->added[i];
        return NULL;
}

/* The offer of host name among the root daemon's last answer, or NULL. */
static const hvd_daemon_offer_t *elastic_offer(const run_t *run, const char *name, size_t n_offers) {
        for (size_t i = 0; i < n_offers; i++)
                if (strcmp(run->offers[i].host, name) == 0)
                        return &run->offers[i];
        return NULL;
}

/* A host the discovery script found: emulated here (its own daemon),
 * this machine (its daemon), or another machine (its daemon, over ssh:
 * tools/hvdrun_remote.c); one a daemon offered (off): that daemon's, on
 * this machine or over ssh. NULL for the others, which are not added. */
static host_t *elastic_add_host(run_t *run, const char *name, const hvd_daemon_offer_t *off) {
        static char refused[256];
        const host_t *root = run->job->root;
        bool here = !off && !run->o->emulate_hosts && host_is_local(name) && root->kind == HOST_LOCAL;
        bool remote = off ? !off->here : !run->o->emulate_hosts && !host_is_local(name);
        char msg[PATH_MAX + 256];
        const char *why = run->n_added == ELEMENTSOF(run->added) ? "hvdrun adds at most 64 hosts"
                          : remote                               ? remote_refusal(run, off, msg, sizeof msg)
                          : !off && !run->o->emulate_hosts && !here
                                  ? "an elastic job grows onto emulated hosts (--emulate-hosts), this machine, "
                                    "other machines, or hosts whose daemons offer them (--discover-daemons)"
                                  : NULL;
        uint32_t pid = 0;
        /* the daemon answering in the offered directory is the one that offered it */
        if (!why && off && !remote &&
            hvd_daemon_probe(off->runtime_dir, PROBE_TIMEOUT_USEC, msg, sizeof msg, NULL, 0, &pid) < 0)
                why = msg;
        else if (!why && off && !remote && pid != off->pid) {
                snprintf(msg, sizeof msg,
                         "the daemon in %s (pid %" PRIu32 ") is not the one that offered it (pid %" PRIu32 ")",
                         off->runtime_dir, pid, off->pid);
                why = msg;
        }
        if (why) {
                if (strcmp(refused, name) != 0)
                        fprintf(stderr, "hvdrun: %s host %s is not added: %s\n", off ? "offered" : "discovered", name,
                                why);
                snprintf(refused, sizeof refused, "%s", name);
                return NULL;
        }
        host_t *h = calloc(1, sizeof *h);
        if (!h || !(h->name = strdup(name)) || (off && !(h->offered_dir = strdup(off->runtime_dir)))) {
                if (h)
                        free(h->name);
                free(h);
                return NULL;
        }
        h->kind = remote ? HOST_REMOTE : here ? HOST_LOCAL : off ? HOST_NODE : HOST_EMULATED;
        h->cross_rank = 1;
        h->runtime_dir = remote ? run->o->runtime_dir : root->runtime_dir;
        if (off)
                h->runtime_dir = h->node_dir = h->offered_dir;
        else if (!here && !remote) {
                h->private_daemon = true;
                if (embedded_start(&h->emb, run->o, "tcp://127.0.0.1:*", h->peer_ep, sizeof h->peer_ep) < 0) {
                        free(h->name);
                        free(h);
                        return NULL;
                }
                h->runtime_dir = h->emb.dir;
        }
        run->added[run->n_added++] = h;
        if (off)
                fprintf(stderr, "hvdrun: host %s offered by its daemon in %s%s: starting workers there\n", name,
                        off->runtime_dir, remote ? " on another machine, over ssh" : "");
        else if (remote)
                fprintf(stderr, "hvdrun: host %s discovered: starting workers there over ssh\n", name);
        else
                fprintf(stderr, "hvdrun: host %s discovered: starting workers there\n", name);
        return h;
}

/* Starts local rank lr of n on h; the root daemon places it. */
static int elastic_spawn(run_t *run, host_t *h, int lr, int n) {
        worker_t *w = &run->w[run->n];
        *w = (worker_t){
                .rank = run->n, .host = h, .out = { .fd = -1, .out_fd = 1 }, .err = { .fd = -1, .out_fd = 2 }
        };
        h->first_rank = 0;
        h->n_ranks = n;
        if (run->o->prefix && (!(w->out.buf = malloc(LINE_BYTES)) || !(w->err.buf = malloc(LINE_BYTES))))
                return -ENOMEM;
        if (h->kind == HOST_REMOTE)
                return remote_spawn(run, w, lr, n);
        if (prepare_worker(run->o, run->job, run->path, w, lr) < 0)
                return -ENOMEM;
        run->n++;
        env_list_t e = { .v = w->envp };
        while (e.v[e.n])
                e.n++;
        e.cap = e.n + 1;
        /* not the root's host: its enrolment goes through its daemon to the root's */
        int r = h == run->job->root ? 0 : -ENOMEM;
        if (r < 0 && env_list_set(&e, "HVD_CROSS_RANK", "1") == 0 && env_list_set(&e, "HVD_CROSS_SIZE", "2") == 0 &&
            env_list_set(&e, "HVD_HOSTS", "%s:1,%s:%d", run->job->root->name, h->name, n) == 0 &&
            env_list_set(&e, "HVD_ROOT_PEER", "%s", run->job->root_peer) == 0 &&
            env_list_set(&e, "HVD_SIZE", "%ld", HVD_MAX(run->o->np, (long) n)) == 0)
                r = 0;
        w->envp = e.v;
        /* a standby interpreter, when one is ready (tools/hvdrun_warm.c) */
        if (r == 0 && warm_take(run, w) == 0)
                return 0;
        int in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (r == 0)
                r = spawn_worker(w, run->path, run->o->argv, run->o->prefix, in_fd);
        if (in_fd >= 0)
                close(in_fd);
        return r;
}

/* --discover-daemons: the hosts offered to the root daemon join those of
 * the script (or, without one, the job's own); 0, or < 0 when the root
 * daemon did not answer (printed once: the job keeps its hosts). */
static int elastic_offers(run_t *run, uint64_t now, const hvd_discovered_t **hs, size_t *n, size_t *n_offers) {
        *n_offers = 0;
        if (!run->o->elastic.daemons)
                return 0;
        char msg[sizeof run->offers_error];
        size_t k = 0;
        int r = hvd_daemon_offers(run->job->root->runtime_dir, PROBE_TIMEOUT_USEC, run->offers, MAX_OFFERS, &k, msg,
                                  sizeof msg);
        if (r < 0) {
                if (strcmp(msg, run->offers_error) != 0)
                        fprintf(stderr,
                                "hvdrun: cannot read the hosts offered to the root daemon: %s; keeping the "
                                "job's hosts\n",
                                msg);
                snprintf(run->offers_error, sizeof run->offers_error, "%s", msg);
                return r;
        }
        run->offers_error[0] = 0;
        *n_offers = k;
        for (size_t i = 0; i < k; i++) {
                const host_t *h = elastic_host(run, run->offers[i].host);
                /* a host of the job's own keeps its daemon */
                if ((!h || h->offered_dir) &&
                    hvd_discovery_add(run->disc, run->offers[i].host, (long) run->offers[i].slots, now, hs, n) < 0)
                        break;
        }
        return 0;
}

/* Whether host h stays though the discovery left it out: a host of -H
 * without a script, and the root daemon's host, whose daemon decides
 * every generation and holds rank 0 (docs/ELASTIC.md). */
static bool elastic_keeps(run_t *run, const host_t *h) {
        if (!run->o->elastic.discovery && !h->offered_dir && h >= run->hosts && h < run->hosts + run->n_hosts)
                return true;
        if (h != run->job->root)
                return false;
        if (!run->root_kept)
                fprintf(stderr,
                        "hvdrun: host %s is no longer discovered, but its daemon is the job's root (it decides "
                        "every generation, and rank 0 is there): its workers are kept\n",
                        h->name);
        run->root_kept = true;
        return true;
}

/* The discovered hosts (the script's, the offered ones): workers of hosts
 * no longer listed are stopped, new hosts get workers (up to --max-np in
 * all). */
void elastic_discover(run_t *run, uint64_t now) {
        const hvd_discovered_t *hs;
        size_t n, n_offers;
        if (hvd_discovery_poll(run->disc, now, &hs, &n) <= 0 || elastic_offers(run, now, &hs, &n, &n_offers) < 0)
                return;
        for (int i = 0; i < run->n; i++) {
                worker_t *w = &run->w[i];
                bool listed = hvd_discovery_blacklisted(run->disc, w->host->name, now);
                for (size_t k = 0; k < n && !listed; k++)
                        listed = strcmp(hs[k].name, w->host->name) == 0;
                if (w->pid <= 0 || w->exited || w->stopped || listed || elastic_keeps(run, w->host))
                        continue;
                fprintf(stderr, "hvdrun: host %s is no longer discovered: stopping worker %d\n", w->host->name,
                        w->rank);
                if (w->host->kind == HOST_REMOTE)
                        remote_stop(run, w);
                else
                        (void) kill(-w->pid, SIGTERM);
                w->stopped = true;
        }
        long live = count_live(run);
        for (size_t k = 0; k < n; k++) {
                host_t *h = elastic_host(run, hs[k].name);
                bool busy = false;
                for (int i = 0; h && i < run->n && !busy; i++)
                        busy = run->w[i].host == h && run->w[i].pid > 0 && !run->w[i].exited;
                long want = HVD_MIN(hs[k].slots, run->o->elastic.max_np - live);
                if (busy || want <= 0 ||
                    (!h && !(h = elastic_add_host(run, hs[k].name, elastic_offer(run, hs[k].name, n_offers)))))
                        continue;
                for (int lr = 0; lr < want && run->n < run->cap; lr++)
                        if (elastic_spawn(run, h, lr, (int) want) == 0)
                                live++;
        }
}

void elastic_free_hosts(run_t *run) {
        for (size_t i = 0; i < run->n_added; i++)
                embedded_ask_stop(&run->added[i]->emb);
        for (size_t i = 0; i < run->n_added; i++) {
                embedded_stop(&run->added[i]->emb);
                free(run->added[i]->offered_dir);
                free(run->added[i]->name);
                free(run->added[i]);
        }
        run->n_added = 0;
        free(run->offers);
        run->offers = NULL;
}

/* --discover-daemons: the root daemon must have a peer endpoint, where the
 * daemons that offer their hosts (elastic_root) reach it; it is shown. */
int elastic_daemons_check(const run_t *run) {
        const host_t *root = run->job->root;
        if (!run->job->root_peer[0]) {
                fprintf(stderr,
                        "hvdrun: --discover-daemons: the job's root daemon (host %s, %s) has no peer endpoint where "
                        "other daemons could offer their hosts: give it a peer_listen, or use --emulate-hosts\n",
                        root->name, root->runtime_dir);
                return -EINVAL;
        }
        fprintf(stderr, "hvdrun: daemons with elastic_root = %s offer their hosts to this job\n", run->job->root_peer);
        return 0;
}

/* A discovery script must list the first host, whose daemon is the job's
 * root: it decides every generation, and the committed state is broadcast
 * from its rank 0 (docs/ELASTIC.md). Checked once before any worker
 * starts; a script that fails now is judged at its next run. */
int elastic_root_listed(run_t *run) {
        const hvd_discovered_t *hs;
        size_t n;
        const host_t *root = run->job->root;
        if (hvd_discovery_poll(run->disc, hvd_now_usec(), &hs, &n) <= 0)
                return 0;
        for (size_t i = 0; i < n; i++)
                if (strcmp(hs[i].name, root->name) == 0 ||
                    (root->kind == HOST_LOCAL && host_is_local(hs[i].name) && host_is_local(root->name)))
                        return 0;
        fprintf(stderr,
                "hvdrun: the host discovery script '%s' does not list host %s, the job's first host: its daemon is "
                "the root of the elastic job (it decides every generation, and the state is broadcast from its "
                "rank 0), so it must keep a worker; list it in the script's output\n",
                run->o->elastic.discovery, root->name);
        return -EINVAL;
}
