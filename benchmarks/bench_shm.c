/* bench_shm.c — the one-node CPU data plane alone (client/cpu_backend.c):
 * NP forked processes on one shared-memory segment run float32 sum
 * allreduces through hvd_backend_execute, with no daemon, no negotiation
 * and no fast path, so what it measures is the shared-memory algorithm
 * itself. Beside bench_collective (the whole library) it tells the data
 * plane's cost from the control plane's. One line per size, from rank 0:
 * bench=shm_allreduce bytes=.. np=.. time_us=.. busbw_gbs=.. copy_in_us=.. wait_us=.. out_us=..
 * best_us=.. best_busbw_gbs=.. (the fastest single operation: on a busy
 * machine, what the algorithm costs when no rank was descheduled; with
 * --best every operation starts on all ranks at once after a barrier and
 * its time runs to a barrier after it, so that an algorithm with fewer
 * barriers does not look faster than it is; the phases: copying into the slot, waiting at barriers, reducing or
 * copying out; per operation, rank 0's). --pin binds rank i to cpu i mod
 * ncpu, which takes the scheduler's placement out of A/B comparisons. */
#include "config.h"

#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "hvd.pb-c.h"

static double now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec * 1e-3;
}

/* --best: a barrier before and after each timed operation */
static bool best_mode;

/* time spent in each phase, from the operation's phase callback */
typedef struct phases {
        double t[5];
        double since;
        int cur;
} phases_t;

static void on_phase(void *ud, int phase) {
        phases_t *p = ud;
        double t = now_usec();
        if (p->cur > 0)
                p->t[p->cur] += t - p->since;
        p->since = t;
        p->cur = phase;
}

static int run(int np, int me, const char *shm, uint64_t slot, size_t min_bytes, size_t max_bytes, int iters,
               bool inplace) {
        int rank_cross[64], rank_local[64];
        for (int i = 0; i < np; i++) {
                rank_cross[i] = 0;
                rank_local[i] = i;
        }
        hvd_topology_t topo = {
                .rank = me,
                .size = np,
                .local_rank = me,
                .local_size = np,
                .cross_rank = 0,
                .cross_size = 1,
                .rank_cross = rank_cross,
                .rank_local = rank_local,
                .listen_fd = -1,
        };
        /* as libhvd reads it (client/settings.c), for tuning runs */
        const char *cb = getenv("HVD_SHM_CHUNK_BYTES");
        char *end;
        if (cb && *cb && (topo.shm_chunk_bytes = strtoull(cb, &end, 10), *end))
                topo.shm_chunk_bytes = 0;
        char err[512];
        hvd_backend_t *b = NULL;
        if (hvd_cpu_backend_new(shm, &topo, slot, 60 * UINT64_C(1000000), NULL, NULL, &b, err, sizeof err) < 0) {
                fprintf(stderr, "bench_shm: rank %d: %s\n", me, err);
                return 1;
        }
        float *in = aligned_alloc(4096, (max_bytes + 4095) & ~(size_t) 4095);
        float *out = inplace ? in : aligned_alloc(4096, (max_bytes + 4095) & ~(size_t) 4095);
        if (!in || !out)
                return 1;
        for (size_t i = 0; i < max_bytes / 4; i++)
                in[i] = out[i] = (float) (i % 7);
        hvd_xop_t bar = { .kind = HVD__KIND__KIND_BARRIER, .name = "barrier" };
        for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
                size_t count = bytes / 4;
                int n = iters ? iters : (bytes <= (1u << 20) ? 400 : bytes <= (16u << 20) ? 40 : 8);
                phases_t ph = { .cur = 0 };
                hvd_xmember_t m = { .in = in, .out = out, .count = count, .row_elems = count };
                hvd_xop_t op = {
                        .kind = HVD__KIND__KIND_ALLREDUCE,
                        .dtype = HVD_FLOAT32,
                        .reduce_op = HVD_REDUCE_SUM,
                        .prescale = 1.0,
                        .postscale = 1.0,
                        .name = "bench",
                        .n = 1,
                        .m = &m,
                        .device = HVD_DEVICE_CPU,
                };
                for (int i = 0; i < 3; i++)
                        if (hvd_backend_execute(b, &op, err, sizeof err) < 0)
                                goto fail;
                if (hvd_backend_execute(b, &bar, err, sizeof err) < 0)
                        goto fail;
                op.phase = on_phase;
                op.phase_userdata = &ph;
                double t0 = now_usec(), best = 1e30;
                for (int i = 0; i < n; i++) {
                        /* with --best, every rank starts each operation together and
                         * it is timed up to the last rank's end */
                        if (best_mode && hvd_backend_execute(b, &bar, err, sizeof err) < 0)
                                goto fail;
                        double ti = now_usec();
                        if (hvd_backend_execute(b, &op, err, sizeof err) < 0)
                                goto fail;
                        if (best_mode && hvd_backend_execute(b, &bar, err, sizeof err) < 0)
                                goto fail;
                        double d = now_usec() - ti;
                        best = d < best ? d : best;
                        on_phase(&ph, 0);
                        ph.cur = 0;
                }
                double t = (now_usec() - t0) / n;
                if (hvd_backend_execute(b, &bar, err, sizeof err) < 0)
                        goto fail;
                if (me == 0)
                        printf("bench=shm_allreduce bytes=%zu np=%d time_us=%.1f busbw_gbs=%.3f copy_in_us=%.1f "
                               "wait_us=%.1f out_us=%.1f best_us=%.1f best_busbw_gbs=%.3f\n",
                               bytes, np, t, (double) bytes / t / 1e3 * 2.0 * (np - 1) / np,
                               ph.t[HVD_TL_PHASE_COPY_IN] / n, ph.t[HVD_TL_PHASE_COLLECTIVE] / n,
                               ph.t[HVD_TL_PHASE_COPY_OUT] / n, best,
                               (double) bytes / best / 1e3 * 2.0 * (np - 1) / np);
                fflush(stdout);
        }
        hvd_backend_destroy(&b);
        return 0;
fail:
        fprintf(stderr, "bench_shm: rank %d: %s\n", me, err);
        hvd_backend_destroy(&b);
        return 1;
}

int main(int argc, char **argv) {
        size_t min_bytes = 65536, max_bytes = 16u << 20;
        uint64_t slot = UINT64_C(64) << 20;
        int np = 2, iters = 0;
        bool inplace = false, pin = false;
        static const struct option opts[] = {
                { "np", required_argument, NULL, 'p' },
                { "min-bytes", required_argument, NULL, 'b' },
                { "max-bytes", required_argument, NULL, 'e' },
                { "iters", required_argument, NULL, 'n' },
                { "slot-bytes", required_argument, NULL, 's' },
                { "in-place", no_argument, NULL, 'i' },
                { "pin", no_argument, NULL, 'P' },
                { "best", no_argument, NULL, 'B' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "p:b:e:n:s:iPBh", opts, NULL)) >= 0) {
                switch (c) {
                case 'p': np = atoi(optarg); break;
                case 'b': min_bytes = strtoull(optarg, NULL, 0); break;
                case 'e': max_bytes = strtoull(optarg, NULL, 0); break;
                case 'n': iters = atoi(optarg); break;
                case 's': slot = strtoull(optarg, NULL, 0); break;
                case 'i': inplace = true; break;
                case 'P': pin = true; break;
                case 'B': best_mode = true; break;
                default:
                        printf("usage: bench_shm [--np N] [--min-bytes N] [--max-bytes N] [--iters N]\n"
                               "       [--slot-bytes N] [--in-place] [--pin] [--best]\n");
                        return c == 'h' ? 0 : 2;
                }
        }
        if (np < 2 || np > 64 || min_bytes < 4 || max_bytes < min_bytes || max_bytes > slot / 2 * 64) {
                fprintf(stderr, "bench_shm: bad arguments\n");
                return 2;
        }
        char shm[64];
        snprintf(shm, sizeof shm, "/hvd-bench-shm-%d", (int) getpid());
        pid_t pids[64];
        for (int i = 0; i < np; i++) {
                pids[i] = fork();
                if (pids[i] == 0) {
                        if (pin) {
                                /* rank i on cpu i mod ncpu: the same placement every run */
                                cpu_set_t set;
                                CPU_ZERO(&set);
                                CPU_SET(i % (int) sysconf(_SC_NPROCESSORS_ONLN), &set);
                                sched_setaffinity(0, sizeof set, &set);
                        }
                        _exit(run(np, i, shm, slot, min_bytes, max_bytes, iters, inplace));
                }
                if (pids[i] < 0) {
                        perror("fork");
                        for (int k = 0; k < i; k++)
                                kill(pids[k], SIGKILL);
                        return 1;
                }
        }
        int rc = 0;
        for (int i = 0; i < np; i++) {
                int st;
                if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
                        rc = 1;
        }
        return rc;
}
