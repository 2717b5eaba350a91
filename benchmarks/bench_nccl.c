/* bench_nccl.c — allreduce bus bandwidth of the NCCL data plane through
 * libhvd-nccl's interface (what libhvd's background thread does: enqueue,
 * poll) beside raw ncclAllReduce on a second communicator of the same GPUs,
 * alternating per size so both see the same machine. Two shapes: one
 * tensor of `bytes` (the module runs NCCL on it directly), and 64 tensors
 * of bytes/64 (the module fuses them into one collective; the peer issues
 * 64 ncclAllReduce calls in one ncclGroupStart/End). One parseable line per
 * result, busbw as nccl-tests defines it (bytes * 2(n-1)/n / time; with one
 * rank, bytes / time). Skips (77) without a GPU. Built by `make bench`.
 *
 *   bench_nccl [--np N] [--min-bytes B] [--max-bytes B] [--iters K] */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "gpu_launch.h"
#include "hvd.pb-c.h"

#define FUSED 64

typedef struct opts {
        uint64_t min_bytes, max_bytes;
        int iters;
} opts_t;

#define TRY_CUDA(call)                                                                                                 \
        do {                                                                                                           \
                cudaError_t e_ = (call);                                                                               \
                if (e_ != cudaSuccess) {                                                                               \
                        fprintf(stderr, "rank %d: %s: %s\n", R->rank, #call, cudaGetErrorString(e_));                  \
                        return 1;                                                                                      \
                }                                                                                                      \
        } while (0)
#define TRY_NCCL(call)                                                                                                 \
        do {                                                                                                           \
                ncclResult_t r_ = (call);                                                                              \
                if (r_ != ncclSuccess) {                                                                               \
                        fprintf(stderr, "rank %d: %s: %s\n", R->rank, #call, ncclGetErrorString(r_));                  \
                        return 1;                                                                                      \
                }                                                                                                      \
        } while (0)

/* k allreduces of op through the module, all enqueued before the first poll */
static int run_module(gpu_rank_t *R, hvd_xop_t *op, int k, double *sec) {
        hvd_gpu_op_t *h[64];
        double t0 = gpu_launch_now();
        for (int done = 0; done < k;) {
                int batch = k - done < 64 ? k - done : 64;
                for (int i = 0; i < batch; i++)
                        if (R->m->enqueue(R->g, op, &h[i], R->err, sizeof R->err) < 0) {
                                fprintf(stderr, "rank %d: enqueue: %s\n", R->rank, R->err);
                                return 1;
                        }
                for (int i = 0; i < batch; i++)
                        if (gpu_rank_wait(R, h[i], 300) < 0) {
                                fprintf(stderr, "rank %d: %s\n", R->rank, R->err);
                                return 1;
                        }
                done += batch;
        }
        *sec = (gpu_launch_now() - t0) / k;
        return 0;
}

static int run_raw(gpu_rank_t *R, ncclComm_t comm, cudaStream_t s, void *const *bufs, size_t n_bufs, size_t count,
                   int k, double *sec) {
        double t0 = gpu_launch_now();
        for (int i = 0; i < k; i++) {
                TRY_NCCL(ncclGroupStart());
                for (size_t b = 0; b < n_bufs; b++)
                        TRY_NCCL(ncclAllReduce(bufs[b], bufs[b], count, ncclFloat32, ncclSum, comm, s));
                TRY_NCCL(ncclGroupEnd());
        }
        TRY_CUDA(cudaStreamSynchronize(s));
        *sec = (gpu_launch_now() - t0) / k;
        return 0;
}

static int bench_rank(gpu_rank_t *R, void *ud) {
        const opts_t *o = ud;
        int rc = gpu_rank_open(R, R->size, UINT64_C(64) << 20);
        if (rc < 0) {
                fprintf(stderr, "rank %d: open: %s\n", R->rank, R->err);
                return 1;
        }
        ncclUniqueId id2;
        memcpy(id2.internal, R->id2, sizeof id2.internal);
        ncclComm_t comm;
        cudaStream_t s;
        TRY_CUDA(cudaSetDevice(R->rank));
        TRY_NCCL(ncclCommInitRank(&comm, R->size, id2, R->rank));
        TRY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        void *buf, *parts[FUSED];
        TRY_CUDA(cudaMalloc(&buf, o->max_bytes));
        TRY_CUDA(cudaMemset(buf, 0, o->max_bytes));
        int N = R->size;
        double factor = N > 1 ? 2.0 * (N - 1) / N : 1.0;
        for (uint64_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 4) {
                for (int fused = 0; fused < 2; fused++) {
                        size_t n = fused ? FUSED : 1;
                        size_t count = bytes / 4 / n;
                        if (count == 0)
                                continue;
                        hvd_xmember_t m[FUSED];
                        for (size_t i = 0; i < n; i++) {
                                parts[i] = (char *) buf + i * count * 4;
                                m[i] = (hvd_xmember_t){ .in = parts[i], .out = parts[i], .count = count };
                        }
                        hvd_xop_t op = { .kind = HVD__KIND__KIND_ALLREDUCE,
                                         .dtype = HVD_FLOAT32,
                                         .reduce_op = HVD_REDUCE_SUM,
                                         .prescale = 1.0,
                                         .postscale = 1.0,
                                         .name = "bench",
                                         .n = n,
                                         .m = m,
                                         .device = R->rank };
                        int iters = bytes >= (UINT64_C(64) << 20) ? (o->iters + 4) / 5 : o->iters;
                        double tm = 0, tr = 0, t;
                        /* warm up both, then alternate: module, raw, module, raw */
                        if (run_module(R, &op, 3, &t) || run_raw(R, comm, s, parts, n, count, 3, &t))
                                return 1;
                        for (int rep = 0; rep < 2; rep++) {
                                if (run_module(R, &op, iters, &t))
                                        return 1;
                                tm += t / 2;
                                if (run_raw(R, comm, s, parts, n, count, iters, &t))
                                        return 1;
                                tr += t / 2;
                        }
                        if (R->rank == 0) {
                                double b = (double) (count * n * 4);
                                printf("bench=nccl_allreduce%s bytes=%.0f np=%d busbw_gbs=%.2f time_us=%.1f "
                                       "peer=nccl_raw%s "
                                       "peer_busbw_gbs=%.2f peer_time_us=%.1f ratio=%.3f\n",
                                       fused ? "_fused64" : "", b, N, b * factor / tm / 1e9, tm * 1e6,
                                       fused ? "_group64" : "", b * factor / tr / 1e9, tr * 1e6, tr / tm);
                        }
                }
        }
        cudaFree(buf);
        cudaStreamDestroy(s);
        ncclCommDestroy(comm);
        return 0;
}

int main(int argc, char **argv) {
        opts_t o = { .min_bytes = 1024, .max_bytes = UINT64_C(256) << 20, .iters = 50 };
        int np = 0;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (strcmp(argv[i], "--np") == 0)
                        np = atoi(argv[i + 1]);
                else if (strcmp(argv[i], "--min-bytes") == 0)
                        o.min_bytes = strtoull(argv[i + 1], NULL, 0);
                else if (strcmp(argv[i], "--max-bytes") == 0)
                        o.max_bytes = strtoull(argv[i + 1], NULL, 0);
                else if (strcmp(argv[i], "--iters") == 0)
                        o.iters = atoi(argv[i + 1]);
                else {
                        fprintf(stderr, "usage: %s [--np N] [--min-bytes B] [--max-bytes B] [--iters K]\n", argv[0]);
                        return 2;
                }
        }
        if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.iters < 1) {
                fprintf(stderr, "bench_nccl: bad sizes or iterations\n");
                return 2;
        }
        char msg[1024];
        int gpus = gpu_launch_probe(msg, sizeof msg);
        if (gpus <= 0) {
                printf("SKIP: bench_nccl: %s\n", msg);
                return GPU_LAUNCH_SKIP;
        }
        if (np <= 0)
                np = gpus < 8 ? gpus : 8;
        if (np > gpus) {
                printf("SKIP: bench_nccl: %d ranks need %d GPUs; this host has %d\n", np, np, gpus);
                return GPU_LAUNCH_SKIP;
        }
        return gpu_launch_run(np, bench_rank, &o, 3600);
}
