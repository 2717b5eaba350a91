/* bench_control.c — the control plane alone: synthetic ranks that move no
 * data drive one or more hvd-coordinatord (one per emulated node, peer
 * links on loopback) through the worker protocol, from one process: one
 * ZeroMQ DEALER per rank speaking Hello → Welcome, then per step one Ready
 * per rank with every tensor of a model (cold: requests by name, in one
 * Ready alike on every rank, or with --cold-batches in several, cut in
 * other places on neighbouring ranks; steady
 * state: the cache ids the schedules handed out) and the Schedules that
 * cover them, as libhvd's background thread does: no Done per schedule
 * (the last schedule run rides on the next Ready), schedules kept by key
 * and their repeats resolved from what was kept.
 * On several nodes of several ranks each, the steady state goes as libhvd
 * sends it (its HVD_FAST_PATH default): each node's ranks post their cached
 * ids on a shared-memory board (libhvd's own, client/fastpath.c, one per
 * node in this process's memory), and the rank whose turn completes them
 * sends one Ready for the host; the daemons send small schedules to local
 * rank 0 alone, which posts them on the board for the others. --no-board:
 * every rank sends its own Ready and gets every schedule (HVD_FAST_PATH=0).
 * A step's latency runs from the first Ready sent to the last rank's last
 * schedule entry received. One line per measurement:
 *   bench=control ranks=.. nodes=.. tensors=.. phase=cold|steady steps=..
 *   ms_median=.. ms_min=.. tensors_per_sec=.. join_ms=.. [driver_cpu_ms=.. daemons_cpu_ms=.. root_cpu_ms=..
 *   node_cpu_ms=.. root_runs=.. ms_mean=..] root_idle_cpu_ms_per_s=.. root_net_cpu_ms=..
 *   ready_bytes=.. sched_bytes=..
 * (steady state: CPU time per step of this process, of all daemons, of
 * the job's root daemon and the most any other daemon used, to tell the
 * daemons' cost from the synthetic driver's own; the daemons' from their
 * threads' schedstat, in nanoseconds; root_runs: how many times a thread of
 * the root daemon was put on a CPU, per step). root_idle_cpu_ms_per_s: the
 * root's CPU per second while the joined job idles for a second before the
 * cold step (heartbeats with every node, housekeeping); root_net_cpu_ms: the
 * step's root CPU less that rate times the step's wall time (the mean, for
 * the steady state), i.e. the step's own work. --isolate-root gives the
 * root daemon a CPU of its own.
 * --minute S --step-ms T: a job's first S seconds instead of the steady
 * phase: the cold step, then steady steps started every T ms (a training
 * step's time; one that runs late starts the next at once, without
 * catching up) until S seconds after the cold step began. One more line,
 *   bench=control phase=minute .. root_minute_cpu_ms=.. root_minute_stat_ms=..
 *   root_steady_cpu_us_per_step=.. cold_msgs_*=.. steady_msgs_*_per_step=..
 * Every rank sends its Heartbeat every Welcome.heartbeat_interval_usec
 * meanwhile, as libhvd does (a minute outlasts the heartbeat timeout).
 * The line has the root daemon's CPU over those S seconds (schedstat,
 * and utime + stime from /proc/PID/stat), over the steady steps per step,
 * of the busiest other daemon and of all of them, and the root's counters
 * (hvdctl metrics: messages received by type, requests shared,
 * schedules repeated) over the cold step and per steady step.
 * Every rank is this process (its pid in Hello), so the daemons' pidfds all
 * watch it; the daemons are children, started with private runtime dirs. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "step_model.h"
#include "fastpath.h"
#include "hvd.h"
#include "util.h"
#include "wire.h"

typedef struct rank {
        void *sock;
        uint32_t node;
        uint64_t epoch;
        size_t got; /* schedule entries received this step */
        bool welcomed;
        uint64_t done_seq;                         /* last schedule received, sent with the next Ready */
        uint32_t kept[HVD_WIRE_SCHEDULE_KEYS + 1]; /* entries of the schedules kept by key */
        hvd_fastpath_t *fp;                        /* on its node's board (node mode) */
        double last_hb;                            /* --minute: its last Heartbeat */
} rank_t;

static struct {
        int n_ranks, n_nodes, per_node;
        rank_t *r;
        pid_t *daemons;
        char base[64];
        char root_peer[256];
        uint32_t *ids; /* cache id per tensor index, learned from rank 0's schedules */
        bool *have_id;
        size_t errors;
        size_t sched_bytes; /* schedule bytes rank 0 received this step */
        size_t ready_bytes; /* one rank's Ready message this step */
        char first_error[512];
        const char *relay_fanout; /* the daemons' --relay-fanout */
        bool isolate_root;        /* the root daemon on a CPU of its own, everything else on the others */
        bool board;               /* steady state: each node's ranks post on a shared-memory board, as libhvd does */
        int cold_batches;         /* a cold step's requests in this many Readys a rank, split differently by rank */
        void **boards;            /* one per node */
        uint32_t *host_ids;       /* node mode: what one step's records completed for a host */
        size_t n_host_ids;
        cpu_set_t root_cpu, other_cpus;
        uint64_t hb_interval_usec; /* Welcome's: a rank's Heartbeat this often, as libhvd sends it */
        bool heartbeats;           /* --minute: send them (a job's lifetime outlasts the heartbeat timeout) */
} B;

/* --isolate-root: the last CPU this process may use goes to the root
 * daemon alone, the others to the driver and every other daemon, so that
 * the root's CPU per step is what its own machine would spend rather than
 * what 64 daemons thrashing two CPUs make of it. */
static int isolate_setup(void) {
        cpu_set_t all;
        if (sched_getaffinity(0, sizeof all, &all) < 0)
                return -errno;
        if (CPU_COUNT(&all) < 2) {
                fprintf(stderr, "bench: --isolate-root needs at least 2 CPUs\n");
                return -EINVAL;
        }
        int last = -1;
        for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &all))
                        last = c;
        B.other_cpus = all;
        CPU_CLR(last, &B.other_cpus);
        CPU_ZERO(&B.root_cpu);
        CPU_SET(last, &B.root_cpu);
        return sched_setaffinity(0, sizeof B.other_cpus, &B.other_cpus) < 0 ? -errno : 0;
}

static void stop_daemons(void) {
        for (int i = 0; i < B.n_nodes; i++)
                if (B.daemons && B.daemons[i] > 0)
                        kill(B.daemons[i], SIGTERM);
        for (int i = 0; i < B.n_nodes; i++)
                if (B.daemons && B.daemons[i] > 0)
                        waitpid(B.daemons[i], NULL, 0);
        if (B.base[0]) {
                char cmd[128];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", B.base);
                if (system(cmd) != 0)
                        fprintf(stderr, "bench: could not remove %s\n", B.base);
        }
}

static void dump_logs(void) {
        for (int i = 0; i < B.n_nodes && i < 4; i++) {
                char p[128];
                snprintf(p, sizeof p, "%s/n%d/daemon.log", B.base, i);
                FILE *f = fopen(p, "r");
                if (!f)
                        continue;
                char line[512];
                int n = 0;
                while (fgets(line, sizeof line, f) && n++ < 10)
                        fprintf(stderr, "[daemon n%d] %s", i, line);
                fclose(f);
        }
}

static int start_daemons(const char *daemon) {
        B.daemons = calloc((size_t) B.n_nodes, sizeof *B.daemons);
        if (!B.daemons)
                return -ENOMEM;
        for (int i = 0; i < B.n_nodes; i++) {
                char dir[128], log[160];
                snprintf(dir, sizeof dir, "%s/n%d", B.base, i);
                snprintf(log, sizeof log, "%s/daemon.log", dir);
                if (mkdir(dir, 0700) < 0)
                        return -errno;
                pid_t p = fork();
                if (p < 0)
                        return -errno;
                if (p == 0) {
                        /* a bench killed outright takes its daemons along */
                        prctl(PR_SET_PDEATHSIG, SIGTERM);
                        if (getppid() == 1)
                                _exit(1);
                        if (B.isolate_root && i == 0 && sched_setaffinity(0, sizeof B.root_cpu, &B.root_cpu) < 0)
                                _exit(126);
                        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                        if (fd >= 0)
                                dup2(fd, 2);
                        if (B.n_nodes > 1)
                                execl(daemon, daemon, "--runtime-dir", dir, "--peer-listen", "tcp://127.0.0.1:*",
                                      "--log-level", "warning", "--relay-fanout", B.relay_fanout, (char *) NULL);
                        else
                                execl(daemon, daemon, "--runtime-dir", dir, "--log-level", "warning", (char *) NULL);
                        fprintf(stderr, "cannot run %s: %s\n", daemon, strerror(errno));
                        _exit(127);
                }
                B.daemons[i] = p;
        }
        /* up: every worker socket, and the root's peer endpoint */
        for (int tries = 0; tries < 600; tries++) {
                int up = 0;
                for (int i = 0; i < B.n_nodes; i++) {
                        int st;
                        if (waitpid(B.daemons[i], &st, WNOHANG) == B.daemons[i]) {
                                B.daemons[i] = 0;
                                fprintf(stderr, "bench: daemon n%d exited at start (status %d)\n", i,
                                        WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
                                dump_logs();
                                return -ECHILD;
                        }
                }
                for (int i = 0; i < B.n_nodes; i++) {
                        char p[160];
                        snprintf(p, sizeof p, "%s/n%d/worker.sock", B.base, i);
                        struct stat st;
                        up += stat(p, &st) == 0;
                }
                if (up == B.n_nodes && B.n_nodes > 1) {
                        char p[160];
                        snprintf(p, sizeof p, "%s/n0/peer.endpoint", B.base);
                        FILE *f = fopen(p, "r");
                        if (f) {
                                if (fgets(B.root_peer, sizeof B.root_peer, f))
                                        B.root_peer[strcspn(B.root_peer, "\r\n")] = 0;
                                fclose(f);
                        }
                        if (B.root_peer[0])
                                return 0;
                } else if (up == B.n_nodes)
                        return 0;
                usleep(50000);
        }
        fprintf(stderr, "bench: the daemons did not come up within 30 s\n");
        return -ETIMEDOUT;
}

/* CPU seconds (user + system) this process and the daemons have used. */
static double self_cpu_sec(void) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return (double) ru.ru_utime.tv_sec + (double) ru.ru_stime.tv_sec +
               ((double) ru.ru_utime.tv_usec + (double) ru.ru_stime.tv_usec) * 1e-6;
}

/* CPU seconds daemon i (n0: the job's root) has used: the sum of its
 * threads' time on a CPU in nanoseconds (/proc/PID/task/TID/schedstat;
 * /proc/PID/stat counts clock ticks, too coarse for one cold step), or
 * the ticks where schedstat is missing. */
static double daemon_cpu_sec_runs(int i, double *runs) {
        char p[64], buf[1024];
        snprintf(p, sizeof p, "/proc/%d/task", (int) B.daemons[i]);
        DIR *dir = opendir(p);
        if (dir) {
                double ns = 0;
                bool any = false;
                struct dirent *de;
                while ((de = readdir(dir))) {
                        if (de->d_name[0] == '.')
                                continue;
                        char sp[320];
                        snprintf(sp, sizeof sp, "/proc/%d/task/%s/schedstat", (int) B.daemons[i], de->d_name);
                        FILE *f = fopen(sp, "r");
                        unsigned long long run = 0, wait = 0, slices = 0;
                        int got = f ? fscanf(f, "%llu %llu %llu", &run, &wait, &slices) : 0;
                        if (got >= 1) {
                                ns += (double) run;
                                any = true;
                        }
                        if (got == 3 && runs)
                                *runs += (double) slices;
                        if (f)
                                fclose(f);
                }
                closedir(dir);
                if (any)
                        return ns * 1e-9;
        }
        double tick = (double) sysconf(_SC_CLK_TCK);
        snprintf(p, sizeof p, "/proc/%d/stat", (int) B.daemons[i]);
        FILE *f = fopen(p, "r");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        /* fields after the ")" closing the command name: 14 utime, 15 stime */
        char *q = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (q && sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
                return (double) (ut + st) / tick;
        return 0;
}

static double daemon_cpu_sec(int i) {
        return daemon_cpu_sec_runs(i, NULL);
}

/* utime + stime of daemon i from /proc/PID/stat (clock ticks; dead
 * threads included). */
static double daemon_stat_sec(int i) {
        char p[64], buf[1024];
        double tick = (double) sysconf(_SC_CLK_TCK);
        snprintf(p, sizeof p, "/proc/%d/stat", (int) B.daemons[i]);
        FILE *f = fopen(p, "r");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *q = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (q && sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
                return (double) (ut + st) / tick;
        return 0;
}

/* The root daemon's counters (its control socket, as hvdctl metrics
 * reads them): messages received by type and what its mechanisms did. */
enum { MK_READY, MK_NODE_READY, MK_PING, MK_ALL, MK_SHARED, MK_REPEATS, MK_BOARD, MK_REQUESTS, MK_SCHEDULES, MK_N };
static const char *const MK_NAME[MK_N] = { "msgs_ready",    "msgs_node_ready", "msgs_ping", "msgs_all", "shared_reqs",
                                           "sched_repeats", "board_scheds",    "requests",  "schedules" };
static const char *const MK_KEY[MK_N] = {
        "hvd_messages_received_total{type=\"ready\"}",
        "hvd_messages_received_total{type=\"node_ready\"}",
        "hvd_messages_received_total{type=\"ping\"}",
        NULL, /* every type but the metrics requests themselves */
        "hvd_node_shared_requests_total",
        "hvd_schedule_repeats_total",
        "hvd_board_schedules_total",
        "hvd_requests_total",
        "hvd_schedules_total",
};

static int root_metrics(double v[MK_N]) {
        for (int k = 0; k < MK_N; k++)
                v[k] = 0;
        char ep[160];
        snprintf(ep, sizeof ep, "ipc://%s/n0/control.sock", B.base);
        Hvd__MetricsRequest q = HVD__METRICS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT, *reply = NULL;
        req.body_case = HVD__ENVELOPE__BODY_METRICS_REQUEST;
        req.metrics_request = &q;
        int r = hvd_control_call(NULL, ep, &req, 5 * 1000000, &reply);
        if (r < 0 || reply->body_case != HVD__ENVELOPE__BODY_METRICS_REPLY) {
                fprintf(stderr, "bench: no metrics from the root daemon: %d\n", r);
                hvd_wire_free(&reply);
                return r < 0 ? r : -EPROTO;
        }
        for (const char *line = reply->metrics_reply->text; line && *line;) {
                const char *end = strchr(line, '\n');
                size_t len = end ? (size_t) (end - line) : strlen(line);
                const char *sp = memchr(line, ' ', len);
                if (line[0] != '#' && sp) {
                        size_t kl = (size_t) (sp - line);
                        double x = strtod(sp + 1, NULL);
                        for (int k = 0; k < MK_N; k++)
                                if (MK_KEY[k] && strlen(MK_KEY[k]) == kl && !memcmp(MK_KEY[k], line, kl))
                                        v[k] = x;
                        static const char all[] = "hvd_messages_received_total{";
                        if (kl > sizeof all - 1 && !memcmp(line, all, sizeof all - 1) &&
                            !memmem(line, kl, "metrics_request", 15))
                                v[MK_ALL] += x;
                }
                line = end ? end + 1 : NULL;
        }
        hvd_wire_free(&reply);
        return 0;
}

static int send_env(void *sock, Hvd__Envelope *env) {
        int r = hvd_wire_send(sock, env, 0);
        if (r < 0)
                fprintf(stderr, "bench: send: %s\n", zmq_strerror(-r));
        return r;
}

/* The daemons send every rank of a job the same bytes for a schedule: the
 * driver decodes each distinct message once (so that its own cost stays
 * far below the daemons') and recognises the copies. */
typedef struct seen {
        uint8_t *bytes;
        size_t len;
        uint64_t seq;
        uint32_t entries, keep_key, repeat_key;
        bool board;
} seen_t;
static seen_t SEEN[8];
static unsigned n_seen_next;

static const seen_t *seen_find(const void *data, size_t len) {
        for (size_t k = 0; k < sizeof SEEN / sizeof SEEN[0]; k++)
                if (SEEN[k].bytes && SEEN[k].len == len && memcmp(SEEN[k].bytes, data, len) == 0)
                        return &SEEN[k];
        return NULL;
}

static void seen_add(const void *data, size_t len, const Hvd__Schedule *s, uint32_t entries) {
        if (seen_find(data, len))
                return;
        seen_t *e = &SEEN[n_seen_next++ % (sizeof SEEN / sizeof SEEN[0])];
        free(e->bytes);
        e->bytes = malloc(len ? len : 1);
        if (!e->bytes)
                return;
        memcpy(e->bytes, data, len);
        e->len = len;
        e->seq = s->seq;
        e->entries = entries;
        e->keep_key = s->keep_key;
        e->repeat_key = s->repeat_key;
        e->board = s->board;
}

static int board_after(int i, const void *data, size_t len, uint64_t seq, bool inline_);

/* A schedule rk received that rank 0 decoded before: its entries counted
 * (a repeat by what rk kept under its key) without decoding it again. */
static void seen_count(rank_t *rk, const seen_t *sn) {
        rk->done_seq = sn->seq;
        uint32_t got = sn->repeat_key ? rk->kept[sn->repeat_key] : sn->entries;
        rk->got += got;
        if (sn->keep_key)
                rk->kept[sn->keep_key] = got;
}

static void seen_free(void) {
        for (size_t k = 0; k < sizeof SEEN / sizeof SEEN[0]; k++)
                free(SEEN[k].bytes);
}

/* Receives whatever is waiting on rank i's socket and counts schedule
 * entries (a repeat by its key: the entries of the schedule kept there).
 * Returns 0, or < 0 on an abort/error. */
static int drain(int i, const step_model_t *m) {
        rank_t *rk = &B.r[i];
        for (;;) {
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, rk->sock, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&msg);
                        return 0;
                }
                Hvd__Envelope *env = NULL;
                char err[512];
                if (i == 0)
                        B.sched_bytes += zmq_msg_size(&msg);
                /* rank 0 decodes everything: it learns the cache ids */
                const seen_t *sn = i ? seen_find(zmq_msg_data(&msg), zmq_msg_size(&msg)) : NULL;
                if (sn) {
                        seen_count(rk, sn);
                        int r = B.board ? board_after(i, zmq_msg_data(&msg), zmq_msg_size(&msg), sn->seq, sn->board)
                                        : 0;
                        zmq_msg_close(&msg);
                        if (r < 0)
                                return r;
                        continue;
                }
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &env, err, sizeof err);
                if (r < 0) {
                        zmq_msg_close(&msg);
                        fprintf(stderr, "bench: rank %d: invalid message: %s\n", i, err);
                        return r;
                }
                switch (env->body_case) {
                case HVD__ENVELOPE__BODY_WELCOME:
                        rk->welcomed = true;
                        rk->epoch = env->welcome->epoch;
                        B.hb_interval_usec = env->welcome->heartbeat_interval_usec;
                        break;
                case HVD__ENVELOPE__BODY_SCHEDULE: {
                        const Hvd__Schedule *s = env->schedule;
                        rk->done_seq = s->seq;
                        if (s->repeat_key) {
                                rk->got += rk->kept[s->repeat_key];
                                seen_add(zmq_msg_data(&msg), zmq_msg_size(&msg), s, 0);
                                if (B.board &&
                                    board_after(i, zmq_msg_data(&msg), zmq_msg_size(&msg), s->seq, s->board) < 0) {
                                        zmq_msg_close(&msg);
                                        hvd_wire_free(&env);
                                        return -EIO;
                                }
                                break;
                        }
                        size_t before = rk->got;
                        for (size_t o = 0; o < s->n_ops; o++) {
                                rk->got += s->ops[o]->n_entries;
                                if (i == 0)
                                        for (size_t e = 0; e < s->ops[o]->n_entries; e++) {
                                                const Hvd__Entry *en = s->ops[o]->entries[e];
                                                if (!en->name[0])
                                                        continue;
                                                for (size_t k = 0; k < m->n; k++)
                                                        if (!B.have_id[k] && !strcmp(m->t[k].name, en->name)) {
                                                                B.ids[k] = en->id;
                                                                B.have_id[k] = true;
                                                                break;
                                                        }
                                        }
                        }
                        rk->got += s->n_errors;
                        if (s->n_errors && !B.errors++)
                                snprintf(B.first_error, sizeof B.first_error, "%s: %s", s->errors[0]->name,
                                         s->errors[0]->message);
                        if (s->keep_key)
                                rk->kept[s->keep_key] = (uint32_t) (rk->got - before);
                        if (!s->n_errors)
                                seen_add(zmq_msg_data(&msg), zmq_msg_size(&msg), s, (uint32_t) (rk->got - before));
                        if (B.board && board_after(i, zmq_msg_data(&msg), zmq_msg_size(&msg), s->seq, s->board) < 0) {
                                zmq_msg_close(&msg);
                                hvd_wire_free(&env);
                                return -EIO;
                        }
                        break;
                }
                case HVD__ENVELOPE__BODY_ABORT:
                        fprintf(stderr, "bench: rank %d: job aborted: %s\n", i, env->abort->reason);
                        zmq_msg_close(&msg);
                        hvd_wire_free(&env);
                        return HVD_EABORTED;
                case HVD__ENVELOPE__BODY_ERROR:
                        fprintf(stderr, "bench: rank %d: coordinator: %s\n", i, env->error->message);
                        zmq_msg_close(&msg);
                        hvd_wire_free(&env);
                        return HVD_EPROTO;
                default: break;
                }
                zmq_msg_close(&msg);
                hvd_wire_free(&env);
        }
}

/* --minute: every rank whose Heartbeat is due sends it, as libhvd's
 * background thread does every Welcome.heartbeat_interval_usec whatever
 * else it sends (the ranks spread over the interval, as ranks that
 * started apart would be). */
static void heartbeats_due(void) {
        if (!B.heartbeats || !B.hb_interval_usec)
                return;
        double now = step_now_sec(), iv = (double) B.hb_interval_usec * 1e-6;
        for (int i = 0; i < B.n_ranks; i++) {
                rank_t *rk = &B.r[i];
                if (!rk->last_hb)
                        rk->last_hb = now - iv * (double) i / B.n_ranks;
                if (now - rk->last_hb < iv)
                        continue;
                rk->last_hb = now;
                Hvd__Heartbeat hb = HVD__HEARTBEAT__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                hb.epoch = rk->epoch;
                hb.sent_usec = hvd_now_usec();
                env.version = HVD_PROTOCOL_VERSION;
                env.body_case = HVD__ENVELOPE__BODY_HEARTBEAT;
                env.heartbeat = &hb;
                (void) hvd_wire_send(rk->sock, &env, ZMQ_DONTWAIT);
        }
}

/* Sleeps until the time `until` (step_now_sec), sending Heartbeats as they
 * fall due. */
static void sleep_until(double until) {
        for (;;) {
                heartbeats_due();
                double left = until - step_now_sec();
                if (left <= 0)
                        return;
                usleep((useconds_t) ((left < 0.02 ? left : 0.02) * 1e6));
        }
}

/* Waits until done(i) holds for every rank, or the deadline. */
static int wait_all(const step_model_t *m, bool welcome, double deadline_sec) {
        zmq_pollitem_t *items = calloc((size_t) B.n_ranks, sizeof *items);
        int *idx = calloc((size_t) B.n_ranks, sizeof *idx);
        int r = -ENOMEM;
        if (!items || !idx)
                goto out;
        for (;;) {
                int n = 0;
                for (int i = 0; i < B.n_ranks; i++) {
                        bool done = welcome ? B.r[i].welcomed : B.r[i].got >= m->n;
                        if (done)
                                continue;
                        items[n] = (zmq_pollitem_t){ .socket = B.r[i].sock, .events = ZMQ_POLLIN };
                        idx[n++] = i;
                }
                if (!n) {
                        r = 0;
                        goto out;
                }
                double left = deadline_sec - step_now_sec();
                if (left <= 0) {
                        fprintf(stderr, "bench: %d of %d ranks still wait for their %s\n", n, B.n_ranks,
                                welcome ? "welcome" : "schedules");
                        r = -ETIMEDOUT;
                        goto out;
                }
                int p = zmq_poll(items, n, (long) (left * 1000) + 1);
                if (p < 0 && zmq_errno() != EINTR) {
                        r = -zmq_errno();
                        goto out;
                }
                for (int k = 0; k < n && p > 0; k++)
                        if (items[k].revents & ZMQ_POLLIN) {
                                p--;
                                if ((r = drain(idx[k], m)) < 0)
                                        goto out;
                        }
        }
out:
        free(items);
        free(idx);
        return r;
}

/* A board per node, zeroed (as the job's shared memory starts), and each
 * rank's view of it. */
static int board_setup(void) {
        size_t bytes = hvd_fastpath_board_bytes(B.per_node);
        B.boards = calloc((size_t) B.n_nodes, sizeof *B.boards);
        B.host_ids = calloc(HVD_FASTPATH_MAX_IDS, sizeof *B.host_ids);
        if (!B.boards || !B.host_ids)
                return -ENOMEM;
        for (int node = 0; node < B.n_nodes; node++)
                if (!(B.boards[node] = aligned_alloc(4096, bytes)))
                        return -ENOMEM;
                else
                        memset(B.boards[node], 0, bytes);
        return 0;
}

static void board_free(void) {
        for (int i = 0; B.r && i < B.n_ranks; i++)
                hvd_fastpath_destroy(&B.r[i].fp);
        for (int node = 0; B.boards && node < B.n_nodes; node++)
                free(B.boards[node]);
        free(B.boards);
        free(B.host_ids);
}

static void board_demote(void *userdata, uint32_t id) {
        (void) userdata;
        fprintf(stderr, "bench: the board withdrew cache id %u\n", id);
        B.errors++;
}

/* Schedule bytes another rank of the node posted on the board: counted
 * for rank i as if they had come on its socket (seen before: they have). */
static void board_count(int i, const uint8_t *bytes, size_t len) {
        rank_t *rk = &B.r[i];
        const seen_t *sn = seen_find(bytes, len);
        if (!sn) {
                fprintf(stderr, "bench: rank %d: a schedule on the board that local rank 0 did not count\n", i);
                B.errors++;
                return;
        }
        seen_count(rk, sn);
}

static int board_take(void *userdata, const hvd_fastpath_record_t *rec) {
        int i = *(const int *) userdata;
        if (rec->slow && rec->n_bytes && i % B.per_node != 0)
                board_count(i, rec->bytes, rec->n_bytes);
        return 0;
}

/* A schedule that came to rank i's socket: onto its node's board (inline
 * when it came for the board, to local rank 0 alone), where the node's
 * other ranks take it, as libhvd's background threads do. */
static int board_after(int i, const void *data, size_t len, uint64_t seq, bool inline_) {
        rank_t *rk = &B.r[i];
        if (inline_ && hvd_fastpath_schedule_inline(rk->fp, seq, data, len) < 0)
                return -EINVAL;
        if (hvd_fastpath_schedule_arrived(rk->fp, seq) < 0)
                return -ENOMEM;
        const hvd_fastpath_ops_t ops = { .run = board_take, .demote = board_demote };
        uint64_t now = hvd_now_usec();
        int first = i - i % B.per_node;
        if (hvd_fastpath_step(rk->fp, now, false, &ops, &i) < 0)
                return -EIO;
        for (int l = first; inline_ && l < first + B.per_node; l++)
                if (l != i && hvd_fastpath_step(B.r[l].fp, now, false, &ops, &l) < 0)
                        return -EIO;
        return 0;
}

/* Node mode of the board (libhvd's, client/fastpath.c, on a job of several
 * hosts): a record's appender collects its ids for the host. */
static int board_run(void *userdata, const hvd_fastpath_record_t *rec) {
        int i = *(const int *) userdata;
        if (rec->slow)
                return board_take(userdata, rec);
        if (rec->appender == i % B.per_node)
                for (uint32_t k = 0; k < rec->n; k++)
                        B.host_ids[B.n_host_ids++] = rec->ids[k];
        return 0;
}

/* A steady step in node mode: every rank of a node posts the cached ids on
 * its node's board and takes a turn; the rank whose turn appends the
 * records sends one Ready for the host, as libhvd's background thread does;
 * the others take the records off later, as theirs do. */
static int board_step(const step_model_t *m, const uint32_t *cached, size_t n_cached) {
        (void) m;
        const hvd_fastpath_ops_t ops = { .run = board_run, .demote = board_demote };
        uint64_t now = hvd_now_usec();
        for (int node = 0; node < B.n_nodes; node++) {
                for (int l = 0; l < B.per_node; l++) {
                        int i = node * B.per_node + l;
                        rank_t *rk = &B.r[i];
                        B.n_host_ids = 0;
                        for (size_t k = 0; k < n_cached; k++) {
                                hvd_fastpath_instance(rk->fp, cached[k]);
                                if (hvd_fastpath_post(rk->fp, cached[k], now) < 0) {
                                        fprintf(stderr, "bench: rank %d: the board refused cache id %u\n", i,
                                                cached[k]);
                                        return -EAGAIN;
                                }
                        }
                        if (hvd_fastpath_step(rk->fp, now, false, &ops, &i) < 0)
                                return -EIO;
                        if (!B.n_host_ids)
                                continue;
                        Hvd__Ready ready = HVD__READY__INIT;
                        Hvd__Envelope env = HVD__ENVELOPE__INIT;
                        ready.epoch = rk->epoch;
                        ready.done_seq = rk->done_seq;
                        ready.n_node_cached = B.n_host_ids;
                        ready.node_cached = B.host_ids;
                        env.body_case = HVD__ENVELOPE__BODY_READY;
                        env.ready = &ready;
                        env.version = HVD_PROTOCOL_VERSION;
                        B.ready_bytes = hvd__envelope__get_packed_size(&env);
                        if (send_env(rk->sock, &env) < 0)
                                return -EIO;
                }
                /* the others take the records off */
                for (int i = node * B.per_node; i < (node + 1) * B.per_node; i++) {
                        B.n_host_ids = 0;
                        if (hvd_fastpath_step(B.r[i].fp, now, false, &ops, &i) < 0)
                                return -EIO;
                }
        }
        return B.errors ? -EIO : 0;
}

/* The model with every name suffixed ".cold<k>": names no step sent before. */
static int model_renamed(const step_model_t *m, int k, step_model_t *out) {
        *out = (step_model_t){ .n = m->n, .total_numel = m->total_numel };
        if (!(out->t = calloc(m->n ? m->n : 1, sizeof *out->t)))
                return -ENOMEM;
        for (size_t i = 0; i < m->n; i++) {
                out->t[i] = m->t[i];
                size_t len = strlen(m->t[i].name) + 24;
                if (!(out->t[i].name = malloc(len))) {
                        step_model_free(out);
                        return -ENOMEM;
                }
                snprintf(out->t[i].name, len, "%s.cold%d", m->t[i].name, k);
        }
        return 0;
}

/* A cold step's requests rp[0..n) as libhvd's clients send them: in
 * B.cold_batches Readys a rank, as the gradients come, and cut in other
 * places on each of 8 neighbouring ranks (one batching per rank % 8, each
 * packed once). Returns 0 or < 0. */
static int send_cold_batches(Hvd__Request **rp, size_t n, const Hvd__Ready *base) {
        enum { V = 8 };
        size_t chunk = (n + (size_t) B.cold_batches - 1) / (size_t) B.cold_batches;
        zmq_msg_t *msgs = calloc((size_t) V * ((size_t) B.cold_batches + 1), sizeof *msgs);
        size_t n_msgs[V] = { 0 };
        int r = -ENOMEM;
        if (!msgs || !chunk)
                goto out;
        for (int v = 0; v < V; v++) {
                /* variant v cuts at chunk·k + shift */
                size_t shift = chunk * (size_t) v / V, at = 0;
                while (at < n) {
                        size_t end = at == 0 ? (shift ? shift : chunk) : at + chunk;
                        if (end > n)
                                end = n;
                        Hvd__Ready ready = *base;
                        ready.requests = rp + at;
                        ready.n_requests = end - at;
                        Hvd__Envelope env = HVD__ENVELOPE__INIT;
                        env.version = HVD_PROTOCOL_VERSION;
                        env.body_case = HVD__ENVELOPE__BODY_READY;
                        env.ready = &ready;
                        size_t len = hvd__envelope__get_packed_size(&env);
                        zmq_msg_t *mm = &msgs[(size_t) v * ((size_t) B.cold_batches + 1) + n_msgs[v]];
                        if (zmq_msg_init_size(mm, len) < 0)
                                goto out;
                        n_msgs[v]++;
                        hvd__envelope__pack(&env, zmq_msg_data(mm));
                        B.ready_bytes = len;
                        at = end;
                }
        }
        for (int i = 0; i < B.n_ranks; i++) {
                int v = i % V;
                for (size_t k = 0; k < n_msgs[v]; k++) {
                        zmq_msg_t mm;
                        zmq_msg_init(&mm);
                        if (zmq_msg_copy(&mm, &msgs[(size_t) v * ((size_t) B.cold_batches + 1) + k]) < 0 ||
                            zmq_msg_send(&mm, B.r[i].sock, 0) < 0) {
                                fprintf(stderr, "bench: send: %s\n", zmq_strerror(zmq_errno()));
                                zmq_msg_close(&mm);
                                r = -EIO;
                                goto out;
                        }
                }
        }
        r = 0;
out:
        for (int v = 0; msgs && v < V; v++)
                for (size_t k = 0; k < n_msgs[v]; k++)
                        zmq_msg_close(&msgs[(size_t) v * ((size_t) B.cold_batches + 1) + k]);
        free(msgs);
        return r;
}

/* One step: every rank's Ready (packed once: the ranks send the same), then
 * every rank's schedules. Returns seconds, or < 0. */
static double run_step(const step_model_t *m, bool cold) {
        Hvd__Request *reqs = calloc(m->n, sizeof *reqs);
        Hvd__Request **rp = calloc(m->n, sizeof *rp);
        uint32_t *cached = calloc(m->n, sizeof *cached);
        double t = -1;
        if (!reqs || !rp || !cached)
                goto out;
        Hvd__Ready ready = HVD__READY__INIT;
        for (size_t k = m->n; k-- > 0;) {
                /* backward order, as the gradients become ready */
                if (cold) {
                        Hvd__Request *q = &reqs[ready.n_requests];
                        hvd__request__init(q);
                        q->name = m->t[k].name;
                        q->kind = HVD__KIND__KIND_ALLREDUCE;
                        q->dtype = 6; /* HVD_FLOAT32 */
                        q->n_shape = (size_t) m->t[k].ndim;
                        q->shape = (int64_t *) m->t[k].shape;
                        q->reduce_op = 1; /* HVD_REDUCE_SUM */
                        q->prescale = q->postscale = 1.0;
                        q->device = -1;
                        rp[ready.n_requests++] = q;
                } else {
                        if (!B.have_id[k]) {
                                fprintf(stderr, "bench: no cache id learned for '%s'\n", m->t[k].name);
                                goto out;
                        }
                        cached[ready.n_cached++] = B.ids[k];
                }
        }
        ready.requests = rp;
        ready.cached = cached;
        ready.epoch = B.r[0].epoch;
        /* every rank has run the same schedules: the same done_seq */
        ready.done_seq = B.r[0].done_seq;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.version = HVD_PROTOCOL_VERSION;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        size_t len = hvd__envelope__get_packed_size(&env);
        uint8_t *buf = malloc(len);
        if (!buf)
                goto out;
        hvd__envelope__pack(&env, buf);
        B.ready_bytes = len;
        for (int i = 0; i < B.n_ranks; i++)
                B.r[i].got = 0;
        B.sched_bytes = 0;
        /* one buffer, shared by every rank's message (no copy per send) */
        zmq_msg_t packed;
        if (zmq_msg_init_size(&packed, len) < 0) {
                free(buf);
                goto out;
        }
        memcpy(zmq_msg_data(&packed), buf, len);
        free(buf);
        double t0 = step_now_sec();
        /* a cold step in batches, or the steady state on the boards */
        if ((cold && B.cold_batches > 1) || (!cold && B.board)) {
                zmq_msg_close(&packed);
                if ((cold ? send_cold_batches(rp, ready.n_requests, &ready) : board_step(m, cached, ready.n_cached)) <
                    0)
                        goto out;
                int r = wait_all(m, false, t0 + 60);
                double t1 = step_now_sec();
                if (r >= 0)
                        t = t1 - t0;
                goto out;
        }
        for (int i = 0; i < B.n_ranks; i++) {
                zmq_msg_t mm;
                zmq_msg_init(&mm);
                if (zmq_msg_copy(&mm, &packed) < 0 || zmq_msg_send(&mm, B.r[i].sock, 0) < 0) {
                        fprintf(stderr, "bench: send: %s\n", zmq_strerror(zmq_errno()));
                        zmq_msg_close(&mm);
                        zmq_msg_close(&packed);
                        goto out;
                }
        }
        zmq_msg_close(&packed);
        int r = wait_all(m, false, t0 + 60);
        double t1 = step_now_sec();
        if (r >= 0)
                t = t1 - t0;
out:
        free(reqs);
        free(rp);
        free(cached);
        return t;
}

int main(int argc, char **argv) {
        const char *tsv = NULL, *daemon = NULL;
        int steps = 50, warmup = 5, cold_steps = 1;
        double minute = 0, step_ms = 100;
        B.n_ranks = 2;
        B.n_nodes = 1;
        B.relay_fanout = "8";
        B.board = true;
        B.cold_batches = 1;
        static const struct option opts[] = {
                { "model", required_argument, NULL, 'm' },
                { "daemon", required_argument, NULL, 'd' },
                { "ranks", required_argument, NULL, 'r' },
                { "nodes", required_argument, NULL, 'k' },
                { "steps", required_argument, NULL, 'n' },
                { "warmup", required_argument, NULL, 'w' },
                { "relay-fanout", required_argument, NULL, 'f' },
                { "cold-steps", required_argument, NULL, 'c' },
                { "cold-batches", required_argument, NULL, 'B' },
                { "isolate-root", no_argument, NULL, 'i' },
                { "no-board", no_argument, NULL, 'b' },
                { "minute", required_argument, NULL, 'M' },
                { "step-ms", required_argument, NULL, 'T' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "m:d:r:k:n:w:f:c:B:ibM:T:h", opts, NULL)) >= 0) {
                switch (c) {
                case 'm': tsv = optarg; break;
                case 'd': daemon = optarg; break;
                case 'r': B.n_ranks = atoi(optarg); break;
                case 'k': B.n_nodes = atoi(optarg); break;
                case 'n': steps = atoi(optarg); break;
                case 'w': warmup = atoi(optarg); break;
                case 'f': B.relay_fanout = optarg; break;
                case 'c': cold_steps = atoi(optarg); break;
                case 'B': B.cold_batches = atoi(optarg); break;
                case 'i': B.isolate_root = true; break;
                case 'b': B.board = false; break;
                case 'M': minute = atof(optarg); break;
                case 'T': step_ms = atof(optarg); break;
                default:
                        printf("usage: bench_control --daemon PATH/hvd-coordinatord --model FILE.tsv\n"
                               "       [--ranks N] [--nodes K] [--steps N] [--warmup N] [--cold-steps N]\n"
                               "       [--cold-batches N] [--relay-fanout N]\n"
                               "       [--isolate-root] [--no-board] [--minute S [--step-ms T]]\n"
                               "N synthetic ranks (no data) spread evenly over K daemons, one per emulated node;\n"
                               "--relay-fanout is the daemons' (default 8; 0 = every node speaks to the root);\n"
                               "--isolate-root gives the root daemon a CPU of its own and everything else the others;\n"
                               "--no-board: in the steady state every rank sends its own readiness (HVD_FAST_PATH=0),\n"
                               "rather than each node's ranks posting on a shared-memory board that sends it once;\n"
                               "--cold-steps N: N cold steps (default 1), each with names never seen before\n"
                               "(the model's names with a suffix, the last one's as they are);\n"
                               "--cold-batches N: each rank sends a cold step's requests in N Readys, cut\n"
                               "in other places on neighbouring ranks, as clients batch them as the gradients\n"
                               "come (default 1: one Ready, alike on every rank);\n"
                               "--minute S: a job's first S seconds: the cold step, then steady steps every\n"
                               "--step-ms T ms (default 100) until S s after it began, instead of --steps.\n");
                        return c == 'h' ? 0 : 2;
                }
        }
        if (!tsv || !daemon || B.n_ranks < 1 || B.n_nodes < 1 || B.n_ranks % B.n_nodes || steps < 1 || warmup < 0 ||
            cold_steps < 1 || B.cold_batches < 1 || B.n_ranks > 65536 || minute < 0 || step_ms <= 0) {
                fprintf(stderr, "bench: --daemon and --model are required; --ranks a multiple of --nodes\n");
                return 2;
        }
        if (access(daemon, X_OK) < 0) {
                fprintf(stderr, "bench: cannot run %s: %s\n", daemon, strerror(errno));
                return 2;
        }
        B.per_node = B.n_ranks / B.n_nodes;
        B.heartbeats = minute > 0;
        /* libhvd's board: the fast path on one host, node mode on several */
        B.board = B.board && B.n_nodes > 1 && B.per_node > 1;
        if (B.board && board_setup() < 0) {
                fprintf(stderr, "bench: out of memory\n");
                return 1;
        }
        if (B.isolate_root && isolate_setup() < 0)
                return 2;
        step_model_t m;
        if (step_model_load(tsv, &m) < 0)
                return 1;
        /* a socket and its mailbox per rank here; a connection and a pidfd per rank in the daemons */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
                rlim_t want = (rlim_t) B.n_ranks * 4 + 256;
                if (rl.rlim_cur < want) {
                        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
                        if (rl.rlim_max < want && geteuid() == 0)
                                rl.rlim_cur = rl.rlim_max = want;
                        setrlimit(RLIMIT_NOFILE, &rl);
                }
        }
        snprintf(B.base, sizeof B.base, "/tmp/hvd-ctl-XXXXXX");
        if (!mkdtemp(B.base)) {
                B.base[0] = 0;
                perror("bench: mkdtemp");
                return 1;
        }
        int status = 1;
        B.ids = calloc(m.n, sizeof *B.ids);
        B.have_id = calloc(m.n, sizeof *B.have_id);
        B.r = calloc((size_t) B.n_ranks, sizeof *B.r);
        double *dt = calloc((size_t) steps, sizeof *dt);
        char *hostlist = NULL;
        void *ctx = zmq_ctx_new();
        if (!B.ids || !B.have_id || !B.r || !dt || !ctx)
                goto out;
        for (int i = 0; B.board && i < B.n_ranks; i++)
                if (hvd_fastpath_new(B.boards[i / B.per_node], i % B.per_node, B.per_node, NULL, &B.r[i].fp) < 0)
                        goto out;
        zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, B.n_ranks + 64);
        if (start_daemons(daemon) < 0)
                goto out;

        char job[64];
        snprintf(job, sizeof job, "ctl-%d", (int) getpid());
        char **hosts = calloc((size_t) B.n_nodes, sizeof *hosts);
        hostlist = calloc((size_t) B.n_nodes, 16);
        if (!hosts || !hostlist) {
                free(hosts);
                goto out;
        }
        for (int i = 0; i < B.n_nodes; i++) {
                hosts[i] = hostlist + 16 * i;
                snprintf(hosts[i], 16, "n%d", i);
        }
        uint8_t secret[16];
        srand((unsigned) getpid() ^ (unsigned) (step_now_sec() * 1e6));
        for (size_t i = 0; i < sizeof secret; i++)
                secret[i] = (uint8_t) rand();
        double tj = step_now_sec();
        for (int i = 0; i < B.n_ranks; i++) {
                rank_t *rk = &B.r[i];
                rk->node = (uint32_t) (i / B.per_node);
                if (!(rk->sock = zmq_socket(ctx, ZMQ_DEALER))) {
                        fprintf(stderr, "bench: socket %d: %s\n", i, zmq_strerror(zmq_errno()));
                        free(hosts);
                        goto out;
                }
                int zero = 0;
                int64_t maxmsg = (int64_t) HVD_WIRE_MAX_MESSAGE_BYTES;
                zmq_setsockopt(rk->sock, ZMQ_LINGER, &zero, sizeof zero);
                zmq_setsockopt(rk->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
                char ep[160];
                snprintf(ep, sizeof ep, "ipc://%s/n%u/worker.sock", B.base, rk->node);
                if (zmq_connect(rk->sock, ep) < 0) {
                        fprintf(stderr, "bench: connect %s: %s\n", ep, zmq_strerror(zmq_errno()));
                        free(hosts);
                        goto out;
                }
                Hvd__Hello h = HVD__HELLO__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                h.job_id = job;
                h.secret.data = secret;
                h.secret.len = sizeof secret;
                h.world_size = (uint32_t) B.n_ranks;
                h.rank = (uint32_t) i;
                h.local_rank = (uint32_t) (i % B.per_node);
                h.local_size = (uint32_t) B.per_node;
                h.board = B.board;
                h.pid = (uint32_t) getpid();
                h.host = hosts[rk->node];
                h.device = -1;
                h.fusion_threshold = -1;
                h.data_addr = "127.0.0.1:9";
                h.cross_rank = rk->node;
                h.cross_size = (uint32_t) B.n_nodes;
                h.root_peer = B.n_nodes > 1 ? B.root_peer : "";
                if (B.n_nodes > 1) {
                        h.hosts = hosts;
                        h.n_hosts = (size_t) B.n_nodes;
                }
                env.body_case = HVD__ENVELOPE__BODY_HELLO;
                env.hello = &h;
                if (send_env(rk->sock, &env) < 0) {
                        free(hosts);
                        goto out;
                }
        }
        free(hosts);
        if (wait_all(&m, true, step_now_sec() + 120) < 0) {
                dump_logs();
                goto out;
        }
        double join_ms = (step_now_sec() - tj) * 1e3;
        /* the root's CPU while the job idles (heartbeats with every node,
         * housekeeping): what a step's figure holds for the time it lasts,
         * not for its work; net_* figures take it out */
        double idle0 = daemon_cpu_sec(0), ti0 = step_now_sec();
        if (B.heartbeats)
                sleep_until(ti0 + 1);
        else
                usleep(1000000);
        double idle_rate = (daemon_cpu_sec(0) - idle0) / (step_now_sec() - ti0); /* CPU s per s */

        /* cold: names first seen; the tensors get their cache ids (the
         * last cold step's names are the model's own, which the steady
         * state then sends as ids) */
        double cc_self = self_cpu_sec(), cc_root = daemon_cpu_sec(0), cc_node = 0;
        double *cc0 = calloc((size_t) B.n_nodes, sizeof *cc0);
        double *cdt = calloc((size_t) cold_steps, sizeof *cdt);
        if (!cc0 || !cdt) {
                free(cc0);
                free(cdt);
                goto out;
        }
        for (int i = 1; i < B.n_nodes; i++)
                cc0[i] = daemon_cpu_sec(i);
        /* --minute: the job's first minute counts from here */
        double mk0[MK_N], mk1[MK_N], mk2[MK_N];
        double *mm0 = calloc((size_t) B.n_nodes, sizeof *mm0);
        if (!mm0) {
                free(cc0);
                free(cdt);
                goto out;
        }
        if (minute > 0 && root_metrics(mk0) < 0) {
                free(mm0);
                free(cc0);
                free(cdt);
                goto out;
        }
        double m_stat0 = daemon_stat_sec(0), m_self0 = self_cpu_sec();
        for (int i = 0; i < B.n_nodes; i++)
                mm0[i] = daemon_cpu_sec(i);
        double tc0 = step_now_sec();
        for (int k = 0; k < cold_steps; k++) {
                step_model_t mk;
                if (k < cold_steps - 1 ? model_renamed(&m, k, &mk) < 0 : (mk = m, 0)) {
                        cdt[k] = -1;
                        break;
                }
                cdt[k] = run_step(&mk, true);
                if (k < cold_steps - 1)
                        step_model_free(&mk);
                if (cdt[k] < 0 || B.errors)
                        break;
        }
        double cold_mean = (step_now_sec() - tc0) / cold_steps;
        cc_self = (self_cpu_sec() - cc_self) / cold_steps;
        cc_root = (daemon_cpu_sec(0) - cc_root) / cold_steps;
        for (int i = 1; i < B.n_nodes; i++) {
                double ci = (daemon_cpu_sec(i) - cc0[i]) / cold_steps;
                cc_node = ci > cc_node ? ci : cc_node;
        }
        free(cc0);
        bool cold_ok = !B.errors;
        for (int k = 0; k < cold_steps; k++)
                cold_ok = cold_ok && cdt[k] >= 0;
        if (!cold_ok) {
                free(mm0);
                free(cdt);
                if (B.errors)
                        fprintf(stderr, "bench: %zu tensor errors, first: %s\n", B.errors, B.first_error);
                dump_logs();
                goto out;
        }
        double cold = step_median(cdt, cold_steps), cold_min = cdt[0];
        for (int k = 1; k < cold_steps; k++)
                cold_min = cdt[k] < cold_min ? cdt[k] : cold_min;
        free(cdt);
        printf("bench=control ranks=%d nodes=%d tensors=%zu phase=cold steps=%d ms_median=%.3f ms_min=%.3f "
               "tensors_per_sec=%.0f join_ms=%.1f driver_cpu_ms=%.3f root_cpu_ms=%.3f node_cpu_ms=%.3f "
               "root_idle_cpu_ms_per_s=%.3f root_net_cpu_ms=%.3f ready_bytes=%zu sched_bytes=%zu\n",
               B.n_ranks, B.n_nodes, m.n, cold_steps, cold * 1e3, cold_min * 1e3, (double) m.n / cold, join_ms,
               cc_self * 1e3, cc_root * 1e3, cc_node * 1e3, idle_rate * 1e3, (cc_root - idle_rate * cold_mean) * 1e3,
               B.ready_bytes, B.sched_bytes);
        fflush(stdout);
        if (minute > 0) {
                double root_c1 = daemon_cpu_sec(0), stat_c1 = daemon_stat_sec(0);
                if (root_metrics(mk1) < 0) {
                        free(mm0);
                        goto out;
                }
                /* what answering that cost the root is not the job's */
                double mcost = daemon_cpu_sec(0) - root_c1, mcost_stat = daemon_stat_sec(0) - stat_c1;
                double *mdt = calloc(1, sizeof *mdt);
                size_t n_mdt = 0, cap_mdt = 1;
                double t_end = tc0 + minute, next = step_now_sec(), t_s0 = next, t_s1 = next;
                double root_s0 = daemon_cpu_sec(0), root_s1 = root_s0;
                while (mdt && next < t_end) {
                        sleep_until(next);
                        double start = step_now_sec();
                        double t = run_step(&m, false);
                        if (t < 0 || B.errors) {
                                if (B.errors)
                                        fprintf(stderr, "bench: %zu tensor errors, first: %s\n", B.errors,
                                                B.first_error);
                                dump_logs();
                                free(mdt);
                                free(mm0);
                                goto out;
                        }
                        if (n_mdt == cap_mdt) {
                                double *nm = realloc(mdt, 2 * cap_mdt * sizeof *nm);
                                if (!nm)
                                        break;
                                mdt = nm;
                                cap_mdt *= 2;
                        }
                        mdt[n_mdt++] = t;
                        t_s1 = step_now_sec();
                        root_s1 = daemon_cpu_sec(0);
                        next = start + step_ms * 1e-3;
                        if (next < t_s1)
                                next = t_s1; /* late: the next step at once, no catching up */
                }
                sleep_until(t_end);
                double m_wall = step_now_sec() - tc0;
                double m_root = daemon_cpu_sec(0) - mm0[0] - mcost, m_stat = daemon_stat_sec(0) - m_stat0 - mcost_stat;
                double m_self = self_cpu_sec() - m_self0, m_all = m_root, m_node = 0;
                for (int i = 1; i < B.n_nodes; i++) {
                        double ci = daemon_cpu_sec(i) - mm0[i];
                        m_all += ci;
                        m_node = ci > m_node ? ci : m_node;
                }
                if (root_metrics(mk2) < 0) {
                        free(mdt);
                        free(mm0);
                        goto out;
                }
                double smed = n_mdt ? step_median(mdt, (int) n_mdt) : 0;
                double per = n_mdt ? (root_s1 - root_s0) / (double) n_mdt : 0;
                printf("bench=control ranks=%d nodes=%d tensors=%zu phase=minute minute_s=%.1f step_ms=%.1f "
                       "steady_steps=%zu steady_span_s=%.2f cold_ms=%.3f steady_ms_median=%.3f "
                       "root_minute_cpu_ms=%.3f root_minute_stat_ms=%.1f root_cold_cpu_ms=%.3f "
                       "root_steady_cpu_us_per_step=%.1f root_steady_net_us_per_step=%.1f "
                       "root_idle_cpu_ms_per_s=%.3f node_max_minute_cpu_ms=%.3f daemons_minute_cpu_ms=%.3f "
                       "driver_minute_cpu_ms=%.3f",
                       B.n_ranks, B.n_nodes, m.n, m_wall, step_ms, n_mdt, t_s1 - t_s0, cold * 1e3, smed * 1e3,
                       m_root * 1e3, m_stat * 1e3, (root_c1 - mm0[0]) * 1e3, per * 1e6,
                       (per - idle_rate * (n_mdt ? (t_s1 - t_s0) / (double) n_mdt : 0)) * 1e6, idle_rate * 1e3,
                       m_node * 1e3, m_all * 1e3, m_self * 1e3);
                for (int k = 0; k < MK_N; k++)
                        printf(" cold_%s=%.0f", MK_NAME[k], mk1[k] - mk0[k]);
                for (int k = 0; k < MK_N; k++)
                        printf(" steady_%s_per_step=%.2f", MK_NAME[k], n_mdt ? (mk2[k] - mk1[k]) / (double) n_mdt : 0);
                printf("\n");
                fflush(stdout);
                free(mdt);
                free(mm0);
                goto bye;
        }
        free(mm0);
        double c_self = 0, c_daemons = 0, c_root = 0, c_node = 0, runs0 = 0, runs1 = 0;
        double *c0 = calloc((size_t) B.n_nodes, sizeof *c0);
        if (!c0)
                goto out;
        double t_steady = 0;
        for (int s = -warmup; s < steps; s++) {
                if (s == 0) {
                        t_steady = step_now_sec();
                        c_self = self_cpu_sec();
                        for (int i = 0; i < B.n_nodes; i++)
                                c0[i] = daemon_cpu_sec_runs(i, i ? NULL : &runs0);
                }
                double t = run_step(&m, false);
                if (t < 0 || B.errors) {
                        if (B.errors)
                                fprintf(stderr, "bench: %zu tensor errors, first: %s\n", B.errors, B.first_error);
                        dump_logs();
                        goto out;
                }
                if (s >= 0)
                        dt[s] = t;
        }
        double mean = (step_now_sec() - t_steady) / steps;
        c_self = (self_cpu_sec() - c_self) / steps;
        for (int i = 0; i < B.n_nodes; i++) {
                double ci = (daemon_cpu_sec_runs(i, i ? NULL : &runs1) - c0[i]) / steps;
                c_daemons += ci;
                if (i == 0)
                        c_root = ci;
                else if (ci > c_node)
                        c_node = ci;
        }
        free(c0);
        double min = dt[0];
        for (int s = 1; s < steps; s++)
                min = dt[s] < min ? dt[s] : min;
        double med = step_median(dt, steps);
        printf("bench=control ranks=%d nodes=%d tensors=%zu phase=steady steps=%d ms_median=%.3f ms_min=%.3f "
               "tensors_per_sec=%.0f join_ms=%.1f driver_cpu_ms=%.3f daemons_cpu_ms=%.3f root_cpu_ms=%.3f "
               "node_cpu_ms=%.3f "
               "root_runs=%.1f ms_mean=%.3f root_idle_cpu_ms_per_s=%.3f root_net_cpu_ms=%.3f ready_bytes=%zu "
               "sched_bytes=%zu\n",
               B.n_ranks, B.n_nodes, m.n, steps, med * 1e3, min * 1e3, (double) m.n / med, join_ms, c_self * 1e3,
               c_daemons * 1e3, c_root * 1e3, c_node * 1e3, (runs1 - runs0) / steps, mean * 1e3, idle_rate * 1e3,
               (c_root - idle_rate * mean) * 1e3, B.ready_bytes, B.sched_bytes);
        fflush(stdout);
bye:
        status = 0;
        /* goodbye from every rank, so the daemons end the job cleanly */
        for (int i = 0; i < B.n_ranks; i++) {
                Hvd__Goodbye g = HVD__GOODBYE__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                g.rank = (uint32_t) i;
                env.body_case = HVD__ENVELOPE__BODY_GOODBYE;
                env.goodbye = &g;
                send_env(B.r[i].sock, &env);
        }
        usleep(100000);
out:
        if (B.r)
                for (int i = 0; i < B.n_ranks; i++)
                        if (B.r[i].sock)
                                zmq_close(B.r[i].sock);
        if (ctx)
                zmq_ctx_term(ctx);
        stop_daemons();
        board_free();
        free(B.r);
        free(B.daemons);
        free(B.ids);
        free(B.have_id);
        seen_free();
        free(dt);
        free(hostlist);
        step_model_free(&m);
        return status;
}
