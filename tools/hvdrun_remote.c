/* hvdrun_remote.c — an elastic job's hosts on other machines: a host the
 * discovery script prints that is not this machine, or one offered by a
 * daemon of another machine (--ssh-offered-hosts), gets its workers over
 * ssh as a static job's remote ranks do, against that host's own daemon
 * (the node's, in --runtime-dir; an offered host's, in the directory its
 * offer gave), which reaches the root daemon at --root-peer. Losing the
 * host (its ssh sessions end, its daemon is lost, the discovery drops it)
 * stops what of the job runs there, over ssh. */
#include "config.h"

#include <errno.h>
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

bool remote_elastic_ready(const options_t *o) {
        const char *ep = o->root_peer;
        return hvd_elastic_on(&o->elastic) && !o->emulate_hosts && o->launcher == HVD_LAUNCH_SSH && ep &&
               !strstr(ep, "://127.") && !strstr(ep, "://localhost") && !strstr(ep, "://[::1]");
}

const char *remote_refusal(const run_t *run, const hvd_daemon_offer_t *off, char *msg, size_t len) {
        const options_t *o = run->o;
        if (off && !o->elastic.ssh_offered)
                return "its daemon runs on another machine: hvdrun starts workers there over ssh only with "
                       "--ssh-offered-hosts";
        if (o->launcher != HVD_LAUNCH_SSH)
                return "an elastic job reaches the hosts of other machines over ssh, not srun";
        if (!remote_elastic_ready(o)) {
                snprintf(msg, len,
                         "it is another machine, and the daemons there cannot reach this job's root daemon%s%s: "
                         "give --root-peer tcp://ADDRESS:PORT, an address of this machine that the other "
                         "hosts reach",
                         o->root_peer ? " at " : " (no --root-peer)", o->root_peer ? o->root_peer : "");
                return msg;
        }
        if (!run->ssh_path)
                return "hvdrun found no ssh (see --ssh)";
        return NULL;
}

int remote_spawn(run_t *run, worker_t *w, int lr, int n) {
        host_t *h = w->host;
        env_list_t e = { 0 };
        /* not the root's host: its enrolment goes through its daemon to the root's */
        int r = -ENOMEM;
        if (env_list_set(&e, "HVD_CROSS_RANK", "1") == 0 && env_list_set(&e, "HVD_CROSS_SIZE", "2") == 0 &&
            env_list_set(&e, "HVD_HOSTS", "%s:1,%s:%d", run->job->root->name, h->name, n) == 0 &&
            env_list_set(&e, "HVD_ROOT_PEER", "%s", run->job->root_peer) == 0 &&
            env_list_set(&e, "HVD_SIZE", "%ld", HVD_MAX(run->o->np, (long) n)) == 0)
                r = 0;
        w->vars = e.v;
        /* counted at once: what it holds is freed with the others, and a
         * worker never started (pid 0) is no live one */
        run->n++;
        if (r < 0 || (r = prepare_worker(run->o, run->job, run->path, w, lr)) < 0) {
                fprintf(stderr, "hvdrun: cannot start a worker on %s: out of memory\n", h->name);
                return -ENOMEM;
        }
        /* a host dropped earlier may be cleaned up again */
        h->remote_kill_sent[0] = h->remote_kill_sent[1] = false;
        int in_fd = remote_stdin(run, false);
        if (in_fd < 0) {
                fprintf(stderr, "hvdrun: cannot start a worker on %s: %s\n", h->name, strerror(-in_fd));
                return in_fd;
        }
        r = spawn_worker(w, run->ssh_path, w->argv, run->o->prefix, in_fd);
        close(in_fd);
        return r;
}

void remote_stop(run_t *run, worker_t *w) {
        (void) kill(-w->pid, SIGTERM);
        remote_signal(run, w->host, SIGTERM);
}

void remote_lost(run_t *run, worker_t *w) {
        fprintf(stderr,
                "hvdrun: the ssh session of worker %d on %s failed (status 255: ssh could not reach the host, or the "
                "remote program was killed by a signal); stopping the job's processes there\n",
                w->rank, w->host->name);
        remote_signal(run, w->host, SIGTERM);
}
