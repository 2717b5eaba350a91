/* reduce-internal.h — private to the reduction kernels (reduce.c,
 * reduce_<isa>.c), their unit test and their benchmark. Not installed, not
 * exported from libhvd. */
#ifndef HVD_REDUCE_INTERNAL_H
#define HVD_REDUCE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "reduce.h"

/* The AVX2 (+F16C) kernels exist where GCC/clang can target them per
 * function; whether the CPU runs them is decided at run time. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HVD_REDUCE_HAVE_AVX2 1
#else
#define HVD_REDUCE_HAVE_AVX2 0
#endif

/* Test hook: force the portable kernels (true) or go back to the best the
 * CPU supports (false). Takes effect for calls that start afterwards; meant
 * for tests and benchmarks, not for production code. Thread-safe. */
void hvd_reduce_force_generic(bool on);

/* True if this CPU (and OS) can run the AVX2 kernels. */
bool hvd_reduce_cpu_has_avx2(void);

#if HVD_REDUCE_HAVE_AVX2
/* reduce_avx2.c. Same contract as hvd_reduce_n() after argument
 * normalisation: op is never AVERAGE, nsrc >= 1, count >= 1, dt valid.
 * Only call when hvd_reduce_cpu_has_avx2(). */
void hvd_reduce_n_avx2(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t nsrc,
                       size_t count, double scale);
/* float32 SUM, dst written with non-temporal stores; the same bits as
 * hvd_reduce_n_avx2. dst must not be one of the sources. */
void hvd_reduce_sum_f32_stream_avx2(float *dst, const float *const *srcs, size_t nsrc, size_t count, float scale,
                                    bool scaled);
/* memcpy with ordinary stores (hvd_copy on AMD) */
void hvd_copy_avx2(uint8_t *dst, const uint8_t *src, size_t bytes);
/* memcpy with non-temporal stores (hvd_copy_stream) */
void hvd_copy_stream_avx2(uint8_t *dst, const uint8_t *src, size_t bytes);
#endif

/* Integer results of a scale multiply (computed in double, truncated toward
 * zero) saturate at the limits of the type; NaN gives 0. Both kernel
 * families use these bounds so they agree also out of range. */
static inline double hvd_reduce_clamp(double x, double lo, double hi) {
        if (x != x)
                return 0.0;
        return x < lo ? lo : x > hi ? hi : x;
}

static inline int64_t hvd_reduce_scale_i64(int64_t v, double scale) {
        double x = (double) v * scale;
        if (x != x)
                return 0;
        if (x >= 0x1p63)
                return INT64_MAX;
        if (x <= -0x1p63)
                return INT64_MIN;
        return (int64_t) x;
}

#endif
