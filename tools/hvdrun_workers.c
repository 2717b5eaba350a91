/* hvdrun_workers.c — the workers' processes, from their fork to their reaping:
 * each child leads its own process group and stays a zombie we own (seen with
 * WNOWAIT) until that group is killed; their output comes through pipes and
 * is passed on in whole lines with the rank's prefix; SIGINT, SIGTERM, SIGHUP
 * and SIGCHLD arrive in a signalfd; the first failure decides the exit status
 * and, after the grace period, stops the others (in elastic mode a worker's
 * end is tools/hvdrun_elastic.c's); a remote rank is stopped over ssh.
 * run_loop() is the one loop over all of it. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpubind.h"
#include "elastic_driver.h"
#include "hvdrun.h"
#include "hvdrun_run.h"
#include "launcher.h"
#include "shellquote.h"
#include "util.h"

extern char **environ;

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

static void stream_close(stream_t *s) {
        if (s->fd >= 0)
                close(s->fd);
        s->fd = -1;
}

void run_free(run_t *run) {
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
void kill_groups(run_t *run, int sig) {
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

void reap_all(run_t *run) {
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

const char *signame(int sig) {
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
void run_loop(run_t *run) {
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
void bind_workers(const options_t *o, run_t *run) {
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
