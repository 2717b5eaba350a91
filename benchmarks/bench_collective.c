/* bench_collective.c — time one collective over a range of sizes through
 * hvd, the way nccl-tests does: algbw = bytes / time, busbw = algbw scaled
 * by the collective's traffic factor (allreduce 2(n-1)/n). One line per
 * size: bench=allreduce impl=hvd bytes=.. np=.. time_us=.. algbw_gbs=.. busbw_gbs=..
 * Run under hvdrun (or tests/lib/launch.sh); rank 0 prints. With --set,
 * the collective runs in a process set of those ranks, its first prints,
 * and the others wait. */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_set.h"
#include "bench_window.h"
#include "hvd.h"

static double now_sec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int run_once(const char *op, const char *name, float *in, float *out, size_t count, int size, int async,
                    int set) {
        if (!async && !set && !strcmp(op, "allreduce")) { /* the blocking call, as MPI_Allreduce is */
                int r = hvd_allreduce(name, in, out, count, HVD_FLOAT32, HVD_REDUCE_SUM);
                if (r < 0)
                        fprintf(stderr, "bench: %s\n", hvd_last_error());
                return r;
        }
        int64_t shape[1] = { (int64_t) count };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = in;
        q.output = out;
        q.dtype = HVD_FLOAT32;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_SUM;
        q.process_set = set;
        hvd_handle_t *h = NULL;
        int r;
        /* without --async: submitted for a caller that waits at once, the
         * blocking call's way (hvd_broadcast's; there is no blocking
         * allgather, reducescatter or alltoall: their outputs are hvd's) */
        if (!strcmp(op, "allreduce"))
                r = hvd_allreduce_async(&q, &h);
        else if (!strcmp(op, "broadcast"))
                r = async ? hvd_broadcast_async(&q, &h) : hvd_broadcast_async_waiting(&q, &h);
        else if (!strcmp(op, "allgather")) {
                shape[0] = (int64_t) (count / (size_t) size);
                r = async ? hvd_allgather_async(&q, &h) : hvd_allgather_async_waiting(&q, &h);
        } else if (!strcmp(op, "reducescatter"))
                r = async ? hvd_reducescatter_async(&q, &h) : hvd_reducescatter_async_waiting(&q, &h);
        else if (!strcmp(op, "alltoall")) {
                /* count elements sent in all, equal parts to every rank */
                shape[0] = (int64_t) (count / (size_t) size * (size_t) size);
                r = async ? hvd_alltoall_async(&q, &h) : hvd_alltoall_async_waiting(&q, &h);
        } else
                return -1;
        if (r < 0)
                return r;
        r = hvd_handle_wait(h);
        if (r < 0)
                fprintf(stderr, "bench: %s\n", hvd_handle_error(h));
        hvd_handle_release(&h);
        return r;
}

int main(int argc, char **argv) {
        size_t min_bytes = 8, max_bytes = 64u << 20;
        int iters = 0, warmup = 3, async = 0, out_of_place = 0, shared = 0;
        double min_time = 0.1;
        const char *op = "allreduce", *set_arg = NULL;
        static const struct option opts[] = {
                { "set", required_argument, NULL, 'S' },
                { "min-bytes", required_argument, NULL, 'b' },
                { "max-bytes", required_argument, NULL, 'e' },
                { "iters", required_argument, NULL, 'n' },
                { "warmup", required_argument, NULL, 'w' },
                { "min-time", required_argument, NULL, 't' },
                { "op", required_argument, NULL, 'o' },
                { "async", no_argument, NULL, 'a' },
                { "out-of-place", no_argument, NULL, 'O' },
                { "shared", no_argument, NULL, 's' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "b:e:n:w:t:o:aOsS:h", opts, NULL)) >= 0) {
                switch (c) {
                case 'b': min_bytes = strtoull(optarg, NULL, 0); break;
                case 'e': max_bytes = strtoull(optarg, NULL, 0); break;
                case 'n': iters = atoi(optarg); break;
                case 'w': warmup = atoi(optarg); break;
                case 't': min_time = atof(optarg); break;
                case 'o': op = optarg; break;
                case 'a': async = 1; break;
                case 'O': out_of_place = 1; break;
                case 's': shared = 1; break;
                case 'S': set_arg = optarg; break;
                default:
                        printf("usage: bench_collective [--op allreduce|broadcast|allgather|reducescatter|alltoall]\n"
                               "       [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N] [--async]\n"
                               "       [--min-time SECONDS] [--out-of-place] [--shared] [--set R,R,...]\n"
                               "Each size is timed over --iters calls, or else over as many as fill\n"
                               "--min-time (0.1 s) at the last warm-up call's pace (rank 0 decides).\n"
                               "allreduce uses the blocking hvd_allreduce unless --async (hvd_allreduce_async +\n"
                               "hvd_handle_wait); the others are submitted for a caller that waits at once\n"
                               "(hvd_broadcast_async_waiting...) unless --async (hvd_broadcast_async...).\n"
                               "allreduce and broadcast run in place (input == output), as the peers'\n"
                               "MPI_Allreduce(MPI_IN_PLACE), MPI_Bcast and torch's all_reduce do, unless\n"
                               "--out-of-place (separate input and output: twice the memory touched).\n"
                               "--shared: the buffers are shared tensors (hvd_shared_alloc), which an\n"
                               "allreduce on one node reads in place\n"
                               "--set: in a process set of those ranks (the others wait)\n");
                        return c == 'h' ? 0 : 2;
                }
        }
        if (!iters && warmup < 1)
                warmup = 1; /* the pace comes from a warm-up call */
        if (hvd_init() < 0) {
                fprintf(stderr, "bench: %s\n", hvd_last_error());
                return 1;
        }
        int rank = hvd_rank(), size = hvd_size(), set = 0, first = 0;
        bool member = true;
        if (set_arg) {
                int ranks[1024], n = bench_set_ranks(set_arg, ranks, 1024);
                if (n < 0) {
                        fprintf(stderr, "bench: --set %s: not a list of at most 1024 ranks (R,R,...)\n", set_arg);
                        return 2;
                }
                if ((set = hvd_add_process_set(ranks, (size_t) n)) < 0) {
                        fprintf(stderr, "bench: --set %s: %s\n", set_arg, hvd_last_error());
                        return 1;
                }
                size = n;
                first = ranks[0];
                member = hvd_process_set_included(set) == 1;
        }
        /* in place, as the peers run: one buffer of the size touched */
        bool may_be_in_place = !strcmp(op, "allreduce") || !strcmp(op, "broadcast");
        bool in_place = may_be_in_place && !out_of_place;
        float *in = NULL, *out = NULL;
        if (shared) {
                if (hvd_shared_alloc(max_bytes, (void **) &in) < 0 || hvd_shared_alloc(max_bytes, (void **) &out) < 0)
                        return 1;
        } else {
                in = malloc(max_bytes);
                out = malloc(max_bytes);
        }
        if (!in || !out)
                return 1;
        for (size_t i = 0; i < max_bytes / 4; i++)
                in[i] = out[i] = (float) (i % 7);
        for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
                size_t count = bytes / 4;
                if (count < (size_t) size)
                        continue;
                char name[64];
                snprintf(name, sizeof name, "bench.%s.%zu", op, bytes);
                float *src = in_place ? out : in;
                double last = 0;
                for (int i = 0; i < warmup && member; i++) {
                        double w0 = now_sec();
                        if (run_once(op, name, src, out, count, size, async, set) < 0)
                                return 1;
                        last = now_sec() - w0;
                }
                int32_t n = iters;
                if (!n) {
                        /* the same count on every rank: rank 0's (the set's
                         * first member's), broadcast, then warm again, since
                         * the broadcast came between */
                        n = bench_iters(min_time, last);
                        char nname[80];
                        snprintf(nname, sizeof nname, "bench.iters.%zu", bytes);
                        if (hvd_broadcast(nname, &n, 1, HVD_INT32, first) < 0) {
                                fprintf(stderr, "bench: %s\n", hvd_last_error());
                                return 1;
                        }
                        for (int i = 0; i < warmup && member; i++)
                                if (run_once(op, name, src, out, count, size, async, set) < 0)
                                        return 1;
                }
                /* the last warm-up call, a blocking collective, lined the ranks up */
                if (!member)
                        continue;
                double t0 = now_sec();
                for (int i = 0; i < n; i++)
                        if (run_once(op, name, src, out, count, size, async, set) < 0)
                                return 1;
                double t = (now_sec() - t0) / n;
                double algbw = (double) bytes / t / 1e9;
                double factor = !strcmp(op, "allreduce")   ? 2.0 * (size - 1) / size
                                : !strcmp(op, "broadcast") ? 1.0
                                                           : (double) (size - 1) / size;
                if (rank == first)
                        printf("bench=%s impl=hvd bytes=%zu np=%d time_us=%.1f algbw_gbs=%.3f busbw_gbs=%.3f%s%s%s%s\n",
                               op, bytes, size, t * 1e6, algbw, algbw * factor,
                               may_be_in_place && !in_place ? " out_of_place=1" : "", shared ? " shared=1" : "",
                               set_arg ? " set=" : "", set_arg ? set_arg : "");
                fflush(stdout);
        }
        if (set && hvd_barrier() < 0) { /* the others wait for the set */
                fprintf(stderr, "bench: %s\n", hvd_last_error());
                return 1;
        }
        if (shared) {
                hvd_shared_free(in);
                hvd_shared_free(out);
        } else {
                free(in);
                free(out);
        }
        hvd_shutdown();
        return 0;
}
