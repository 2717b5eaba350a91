/* bench_reduce.c — throughput of the CPU reduction kernels (hvd_reduce_n,
 * SUM, one thread) for float32/float16/bfloat16, 2 and 4 sources, 64 KiB to
 * 64 MiB per buffer: portable kernels, the run-time choice, and memcpy of
 * one buffer for scale. GB/s counts memory traffic, bytes read plus bytes
 * written: (nsrc + 1) * bytes for a reduction, 2 * bytes for memcpy, so the
 * columns compare directly. Each figure is the best of several rounds.
 * Usage: bench_reduce [-q]   (-q: one short round, for smoke tests) */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "reduce-internal.h"
#include "reduce.h"

#define MAX_SRC 4

static int rounds = 5;
static double round_sec = 0.05;

static double now_sec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* keeps the compiler from merging or dropping the repeated calls */
static void clobber(void) {
        __asm__ volatile("" ::: "memory");
}

typedef void (*op_fn)(void *ctx);

/* best seconds per call of fn over `rounds` rounds of ~round_sec each */
static double time_best(op_fn fn, void *ctx) {
        fn(ctx); /* warm up: page faults, caches, the dispatch decision */
        clobber();
        double t0 = now_sec();
        fn(ctx);
        clobber();
        double one = now_sec() - t0;
        long iters = one > 0 ? (long) (round_sec / one) : 1000;
        if (iters < 1)
                iters = 1;
        double best = one;
        for (int r = 0; r < rounds; r++) {
                t0 = now_sec();
                for (long i = 0; i < iters; i++) {
                        fn(ctx);
                        clobber();
                }
                double t = (now_sec() - t0) / (double) iters;
                if (t < best)
                        best = t;
        }
        return best;
}

struct job {
        hvd_dtype_t dt;
        void *dst;
        const void *srcs[MAX_SRC];
        size_t nsrc, count, bytes;
};

static void run_reduce(void *ctx) {
        struct job *j = ctx;
        hvd_reduce_n(j->dt, HVD_REDUCE_SUM, j->dst, j->srcs, j->nsrc, j->count, 1.0);
}

/* the TCP ring's checksum (HVD_RING_CHECKSUM): CRC-32C over the buffer */
static volatile uint32_t crc_sink;

static int crc_level;

static void run_crc(void *ctx) {
        struct job *j = ctx;
        crc_sink = hvd_crc32c_at(crc_level, 0, j->srcs[0], j->bytes);
}

static void run_memcpy(void *ctx) {
        struct job *j = ctx;
        memcpy(j->dst, j->srcs[0], j->bytes);
}

/* values in [-1, 1): no NaN, Inf or subnormal slow paths */
static void fill(hvd_dtype_t dt, void *buf, size_t count, uint32_t seed) {
        for (size_t i = 0; i < count; i++) {
                seed = seed * 1664525u + 1013904223u;
                float f = (float) (int32_t) seed * 0x1p-31f;
                switch (dt) {
                case HVD_FLOAT16: ((uint16_t *) buf)[i] = hvd_float_to_half(f); break;
                case HVD_BFLOAT16: ((uint16_t *) buf)[i] = hvd_float_to_bf16(f); break;
                default: ((float *) buf)[i] = f; break;
                }
        }
}

int main(int argc, char **argv) {
        static const hvd_dtype_t dtypes[] = { HVD_FLOAT32, HVD_FLOAT16, HVD_BFLOAT16 };
        static const size_t nsrcs[] = { 2, 4 };
        static const size_t sizes[] = { 64 << 10, 1 << 20, 64 << 20 };

        if (argc > 1 && strcmp(argv[1], "-q") == 0) {
                rounds = 1;
                round_sec = 0.005;
        } else if (argc > 1) {
                fprintf(stderr, "usage: %s [-q]\n", argv[0]);
                return 2;
        }

        const size_t max_bytes = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
        void *bufs[MAX_SRC + 1];
        for (int k = 0; k <= MAX_SRC; k++) {
                bufs[k] = aligned_alloc(64, max_bytes);
                if (!bufs[k]) {
                        fprintf(stderr, "bench_reduce: cannot allocate %zu bytes\n", max_bytes);
                        return 1;
                }
                memset(bufs[k], 0, max_bytes);
        }

        const char *best_impl = hvd_reduce_impl();
        const int last_variant = strcmp(best_impl, "generic") == 0 ? 1 : 0;
        for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
                for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
                        for (size_t ns = 0; ns < sizeof(nsrcs) / sizeof(nsrcs[0]); ns++) {
                                struct job j = {
                                        .dt = dtypes[d],
                                        .dst = bufs[MAX_SRC],
                                        .nsrc = nsrcs[ns],
                                        .bytes = sizes[s],
                                        .count = sizes[s] / hvd_dtype_size(dtypes[d]),
                                };
                                for (size_t k = 0; k < j.nsrc; k++) {
                                        fill(j.dt, bufs[k], j.count, (uint32_t) (k + 1));
                                        j.srcs[k] = bufs[k];
                                }
                                double t_copy = time_best(run_memcpy, &j);
                                double memcpy_gbs = 2.0 * (double) j.bytes / t_copy * 1e-9;
                                double traffic = (double) (j.nsrc + 1) * (double) j.bytes;
                                /* the portable kernels, then the run-time choice if it differs */
                                for (int generic = 1; generic >= last_variant; generic--) {
                                        hvd_reduce_force_generic(generic);
                                        double t = time_best(run_reduce, &j);
                                        printf("bench=reduce dtype=%s nsrc=%zu bytes=%zu impl=%s "
                                               "gbs=%.2f "
                                               "memcpy_gbs=%.2f usec=%.1f\n",
                                               hvd_dtype_name(j.dt), j.nsrc, j.bytes, generic ? "generic" : best_impl,
                                               traffic / t * 1e-9, memcpy_gbs, t * 1e6);
                                        fflush(stdout);
                                }
                                hvd_reduce_force_generic(false);
                        }
        /* CRC-32C: one ring frame (256 KiB, in cache) and a large buffer */
        static const size_t crc_sizes[] = { 256 << 10, 64 << 20 };
        for (size_t s = 0; s < sizeof(crc_sizes) / sizeof(crc_sizes[0]); s++) {
                struct job j = { .bytes = crc_sizes[s] };
                fill(HVD_FLOAT32, bufs[0], j.bytes / 4, 7);
                j.srcs[0] = bufs[0];
                static const char *const crc_impl[] = { "slicing-by-8", "sse4.2", "vpclmulqdq" };
                for (crc_level = 0; crc_level <= hvd_crc32c_hw(); crc_level++) {
                        double t = time_best(run_crc, &j);
                        printf("bench=crc32c bytes=%zu impl=%s gbs=%.2f usec=%.1f\n", j.bytes, crc_impl[crc_level],
                               (double) j.bytes / t * 1e-9, t * 1e6);
                        fflush(stdout);
                }
        }
        for (int k = 0; k <= MAX_SRC; k++)
                free(bufs[k]);
        return 0;
}
