/* hvdrun.c — launcher: `hvdrun -np N [-H HOSTS] PROGRAM ARGS...` starts the ranks of one job:
 * here against the node's hvd-coordinatord (or a private one in a thread), on other hosts over
 * ssh, or on hosts emulated here with a private daemon each. Here: the job (its id and secret,
 * its host list) and main(), which takes the steps in order: the command line
 * (tools/hvdrun_options.c), the daemons (hvdrun_daemons.c), each rank's environment and command
 * line (hvdrun_command.c), the workers and the loop (hvdrun_workers.c). Invariants: remote ranks
 * carry the job id in their environment, by which an abort finds them; the first failure decides
 * the exit status. Elastic mode (workers and hosts that come and go) is tools/hvdrun_elastic.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "elastic_driver.h"
#include "hvdrun.h"
#include "hvdrun_run.h"
#include "invariant.h"
#include "launcher.h"
#include "shellquote.h"
#include "util.h"

/* ---- the job ---- */

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

/* ---- main ---- */

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
