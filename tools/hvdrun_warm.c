/* hvdrun_warm.c — warm starts of an elastic job's Python workers. Most of
 * a new worker's start is the interpreter's and its framework's (import
 * torch: seconds), paid after its host appeared. hvdrun pays it before:
 * it keeps a few standby interpreters (`python -m hvd._warm SCRIPT ARGS`,
 * python-binding/hvd/_warm.py) that have imported the script's framework
 * and wait on a socket, their standard input. A worker hvdrun starts then
 * becomes a ready standby: it is sent the rank's environment and runs the
 * script as __main__. The standby is the worker process itself, not a
 * template that forks (TensorFlow's threads make a fork after its import
 * unsafe): it was started like any worker (tools/hvdrun_workers.c
 * spawn_worker()), so it leads its own process group, hvdrun reaps it, its
 * exit status is the script's, and its output goes through the pipes made
 * at its start.
 * A standby that ends before it is ready (a bad interpreter, an import
 * that fails) turns warm starts off, with a line saying so: workers then
 * start cold. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hvdrun.h"
#include "hvdrun_run.h"
#include "util.h"

#define WARM_MAX 16
/* standbys are replaced this long after one became a worker, so that the
 * new interpreters' imports do not compete with the workers just started */
#define WARM_REFILL_USEC (2 * USEC_PER_SEC)

typedef struct standby {
        pid_t pid; /* its process group too; 0: a free slot */
        int ctl;   /* hvdrun's end of the socket that is the standby's stdin */
        bool ready;
        stream_t out, err; /* with the output prefix: the pipes made at its start */
        uint64_t started, ready_at;
} standby_t;

struct hvd_warm {
        standby_t s[WARM_MAX];
        char **argv; /* python -m hvd._warm SCRIPT ARGS..., the words borrowed but the array */
        char **envp; /* owned: the workers' environment without the per-rank variables */
        bool prefix;
        bool off; /* a standby failed: workers start cold */
        uint64_t refill_at;
};

/* Whether PROGRAM ARGS is `python SCRIPT ARGS...` (python, python3, python3.11, a
 * path to one), the form a standby can run. */
static bool warm_command(char *const *argv) {
        const char *base = strrchr(argv[0], '/');
        base = base ? base + 1 : argv[0];
        return strncmp(base, "python", 6) == 0 && strspn(base + 6, "0123456789.") == strlen(base + 6) && argv[1] &&
               argv[1][0] != '-';
}

/* A slot that holds no standby (descriptors -1: 0 is hvdrun's stdin). */
static void standby_clear(standby_t *s) {
        *s = (standby_t){ .ctl = -1, .out = { .fd = -1 }, .err = { .fd = -1 } };
}

static void standby_close(standby_t *s) {
        if (s->ctl >= 0)
                close(s->ctl);
        if (s->out.fd >= 0)
                close(s->out.fd);
        if (s->err.fd >= 0)
                close(s->err.fd);
        standby_clear(s);
}

/* Stops standby s (its whole group) and reaps it. */
static void standby_kill(standby_t *s) {
        if (s->pid > 0) {
                (void) kill(-s->pid, SIGKILL);
                while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        standby_close(s);
}

/* What a failed standby wrote to its stderr pipe (with the output prefix),
 * passed on. */
static void standby_pass_stderr(const standby_t *s) {
        char buf[4096];
        ssize_t k;
        if (s->err.fd < 0)
                return;
        while ((k = read(s->err.fd, buf, sizeof buf)) > 0)
                if (write(2, buf, (size_t) k) < 0)
                        break;
}

static void warm_turn_off(hvd_warm_t *wm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warm_turn_off(hvd_warm_t *wm, const char *fmt, ...) {
        va_list ap;
        fputs("hvdrun: warm start: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("; new workers start cold\n", stderr);
        wm->off = true;
        for (size_t i = 0; i < WARM_MAX; i++)
                standby_kill(&wm->s[i]);
}

int warm_new(run_t *run) {
        const options_t *o = run->o;
        /* workers start later only on hosts discovered */
        bool elastic = hvd_elastic_on(&o->elastic) && (o->elastic.discovery || o->elastic.daemons);
        if (o->warm_start == HVD_WARM_ON && (!elastic || !warm_command(o->argv) || run->srun)) {
                fprintf(stderr, "hvdrun: --elastic-warm-start on: %s\n",
                        !elastic    ? "warm starts are for elastic jobs that discover hosts "
                                      "(--host-discovery-script, --discover-daemons)"
                        : run->srun ? "warm starts are for workers hvdrun starts itself, not with --launcher srun"
                                    : "the command must be `python SCRIPT ARGS...`");
                return -EINVAL;
        }
        if (o->warm_start == HVD_WARM_OFF || !elastic || !warm_command(o->argv) || run->srun || o->dry_run ||
            run->n < 1 || !run->w[0].envp)
                return 0;
        hvd_warm_t *wm = calloc(1, sizeof *wm);
        if (wm)
                for (size_t i = 0; i < WARM_MAX; i++)
                        standby_clear(&wm->s[i]);
        size_t n_args = 0, n_env = 0;
        while (o->argv[n_args])
                n_args++;
        while (run->w[0].envp[n_env])
                n_env++;
        if (!wm || !(wm->argv = calloc(n_args + 3, sizeof *wm->argv)) ||
            !(wm->envp = calloc(n_env + 1, sizeof *wm->envp))) {
                warm_free(wm);
                return -ENOMEM;
        }
        wm->argv[0] = o->argv[0];
        wm->argv[1] = (char *) "-m";
        wm->argv[2] = (char *) "hvd._warm";
        for (size_t i = 1; i < n_args; i++)
                wm->argv[i + 2] = o->argv[i];
        /* the environment every worker shares: hvdrun's and -x; the rank's
         * own variables come when the standby becomes a worker */
        for (size_t i = 0, k = 0; i < n_env; i++) {
                const char *e = run->w[0].envp[i];
                if (strncmp(e, "HVD_", 4) == 0 || strncmp(e, "HOROVOD_", 8) == 0)
                        continue;
                if (!(wm->envp[k++] = strdup(e))) {
                        warm_free(wm);
                        return -ENOMEM;
                }
        }
        wm->prefix = o->prefix;
        run->warm = wm;
        return 0;
}

void warm_free(hvd_warm_t *wm) {
        if (!wm)
                return;
        for (size_t i = 0; i < WARM_MAX; i++)
                standby_kill(&wm->s[i]);
        for (size_t i = 0; wm->envp && wm->envp[i]; i++)
                free(wm->envp[i]);
        free(wm->envp);
        free(wm->argv);
        free(wm);
}

/* How many standbys to keep: as many as one host brings (the most slots
 * of a listed host, or --slots), within what --max-np leaves. */
static long warm_target(const run_t *run) {
        const options_t *o = run->o;
        long width = o->elastic.slots;
        for (size_t i = 0; i < run->n_hosts; i++)
                width = HVD_MAX(width, (long) run->hosts[i].n_ranks);
        long room = o->elastic.max_np - count_live(run);
        return HVD_MIN(HVD_MIN(width, room), WARM_MAX);
}

static int standby_start(run_t *run, standby_t *s) {
        hvd_warm_t *wm = run->warm;
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        worker_t tmp = { .rank = -1, .envp = wm->envp, .out = { .fd = -1 }, .err = { .fd = -1 } };
        int r = spawn_worker(&tmp, run->path, wm->argv, wm->prefix, sv[1]);
        close(sv[1]);
        if (r < 0) {
                close(sv[0]);
                if (tmp.pid > 0)
                        while (waitpid(tmp.pid, NULL, 0) < 0 && errno == EINTR)
                                ;
                return r;
        }
        (void) fcntl(sv[0], F_SETFL, O_NONBLOCK);
        *s = (standby_t){ .pid = tmp.pid, .ctl = sv[0], .out = tmp.out, .err = tmp.err, .started = hvd_now_usec() };
        return 0;
}

/* Reads standby s's ready byte; 1 when ready, 0 not yet, < 0 when its end
 * closed (it exited). */
static int standby_poll(standby_t *s, uint64_t now) {
        if (s->ready)
                return 1;
        char c;
        ssize_t k = recv(s->ctl, &c, 1, MSG_DONTWAIT);
        if (k == 1 && c == 'R') {
                s->ready = true;
                s->ready_at = now;
                return 1;
        }
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR) || k == 1 ? -EPIPE : 0;
}

void warm_tick(run_t *run, uint64_t now) {
        hvd_warm_t *wm = run->warm;
        if (!wm || wm->off || run->interrupt_sig || run->finished)
                return;
        long have = 0;
        for (size_t i = 0; i < WARM_MAX; i++) {
                standby_t *s = &wm->s[i];
                if (s->pid <= 0)
                        continue;
                bool was = s->ready;
                siginfo_t si = { 0 };
                /* WNOWAIT: the zombie keeps its group id ours until the group is killed */
                bool gone = waitid(P_PID, (id_t) s->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == s->pid;
                if (gone || standby_poll(s, now) < 0) {
                        /* ended, or its end closed (exiting, or it does not speak our protocol) */
                        pid_t pid = s->pid;
                        int st = 0;
                        /* its socket closes as it exits, a moment before it is a zombie */
                        for (int t = 0; !gone && t < 50; t++) {
                                (void) poll(NULL, 0, 2);
                                gone = waitid(P_PID, (id_t) pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                                       si.si_pid == pid;
                        }
                        (void) kill(-pid, SIGKILL);
                        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                                ;
                        standby_pass_stderr(s);
                        s->pid = 0; /* reaped */
                        standby_close(s);
                        if (gone && WIFSIGNALED(st))
                                warm_turn_off(wm,
                                              "the standby interpreter (pid %d, %s -m hvd._warm) was killed by "
                                              "signal %d %s",
                                              (int) pid, run->o->argv[0], WTERMSIG(st),
                                              was ? "while it waited" : "before it was ready");
                        else if (gone)
                                warm_turn_off(wm,
                                              "the standby interpreter (pid %d, %s -m hvd._warm) exited with "
                                              "status %d %s",
                                              (int) pid, run->o->argv[0], WEXITSTATUS(st),
                                              was ? "while it waited" : "before it was ready");
                        else
                                warm_turn_off(wm,
                                              "the standby interpreter (pid %d, %s -m hvd._warm) closed its "
                                              "socket %s",
                                              (int) pid, run->o->argv[0],
                                              was ? "while it waited" : "before it was ready");
                        return;
                }
                if (s->ready && !was && run->verbose)
                        fprintf(stderr, "hvdrun: warm start: standby interpreter pid %d ready after %.1f s\n",
                                (int) s->pid, (double) (now - s->started) / 1e6);
                have++;
        }
        long want = warm_target(run);
        /* the surplus once the job has grown to --max-np */
        for (size_t i = WARM_MAX; i-- > 0 && have > want;)
                if (wm->s[i].pid > 0) {
                        standby_kill(&wm->s[i]);
                        have--;
                }
        if (now < wm->refill_at)
                return;
        for (size_t i = 0; i < WARM_MAX && have < want; i++) {
                if (wm->s[i].pid > 0)
                        continue;
                int r = standby_start(run, &wm->s[i]);
                if (r < 0) {
                        warm_turn_off(wm, "cannot start a standby interpreter: %s", strerror(-r));
                        return;
                }
                have++;
                if (run->verbose)
                        fprintf(stderr, "hvdrun: warm start: standby interpreter pid %d started\n", (int) wm->s[i].pid);
        }
}

/* Sends the worker's environment and closes hvdrun's end: the standby
 * reads it to the end of input. 0, or < 0 when it did not take it. */
static int standby_send(standby_t *s, char *const *envp) {
        (void) fcntl(s->ctl, F_SETFL, 0);
        for (size_t i = 0; envp[i]; i++) {
                const char *p = envp[i];
                size_t n = strlen(p) + 1; /* with its NUL */
                while (n > 0) {
                        ssize_t k = send(s->ctl, p, n, MSG_NOSIGNAL);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                return -errno;
                        p += k;
                        n -= (size_t) k;
                }
        }
        close(s->ctl);
        s->ctl = -1;
        return 0;
}

int warm_take(run_t *run, worker_t *w) {
        hvd_warm_t *wm = run->warm;
        /* standbys run here: a worker of another machine starts over ssh */
        if (!wm || wm->off || w->host->kind == HOST_REMOTE)
                return -EAGAIN;
        uint64_t now = hvd_now_usec();
        for (size_t i = 0; i < WARM_MAX; i++) {
                standby_t *s = &wm->s[i];
                if (s->pid <= 0 || standby_poll(s, now) != 1)
                        continue;
                if (standby_send(s, w->envp) < 0) {
                        /* it ended meanwhile: warm_tick() would have said why */
                        standby_kill(s);
                        continue;
                }
                w->pid = s->pid;
                if (wm->prefix) {
                        w->out.fd = s->out.fd;
                        w->err.fd = s->err.fd;
                        (void) fcntl(w->out.fd, F_SETFL, O_NONBLOCK);
                        (void) fcntl(w->err.fd, F_SETFL, O_NONBLOCK);
                        s->out.fd = s->err.fd = -1;
                }
                fprintf(stderr, "hvdrun: worker %d on %s: warm start (pid %d, its interpreter ready for %.1f s)\n",
                        w->rank, w->host->name, (int) s->pid, (double) (now - s->ready_at) / 1e6);
                s->pid = 0; /* the worker's now: hvdrun's loop reaps it */
                standby_close(s);
                wm->refill_at = now + WARM_REFILL_USEC;
                return 0;
        }
        return -EAGAIN;
}
