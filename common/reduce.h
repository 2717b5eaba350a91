/* reduce.h — element types and the reduction kernels of the CPU data
 * plane. Kernels read several sources at once and write one destination, so
 * a reduction touches each input byte exactly once; float16 and bfloat16
 * accumulate in float. No allocation, no locks: safe from any thread. */
#ifndef HVD_REDUCE_H
#define HVD_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hvd.h"

static inline bool hvd_dtype_valid(uint32_t dt) {
        return dt < _HVD_DTYPE_COUNT;
}
static inline bool hvd_reduce_op_valid(uint32_t op) {
        return op < _HVD_REDUCE_COUNT;
}
bool hvd_dtype_is_float(hvd_dtype_t dt);

/* dst[i] = scale * OP(srcs[0][i], ..., srcs[nsrc-1][i]) for i < count.
 * nsrc >= 1. dst may be identical to any srcs[k] (not partially
 * overlapping). HVD_REDUCE_AVERAGE is treated as SUM: the caller folds
 * 1/n into scale. scale == 1.0 skips the multiply. Integer types: the
 * scaled value is computed in double and truncated toward zero, saturating at the type's range (NaN gives 0). bool:
 * SUM/MAX = or, MIN/PRODUCT = and, never scaled. */
void hvd_reduce_n(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t nsrc, size_t count,
                  double scale);

/* hvd_reduce_n, writing dst around the caches (non-temporal stores) where
 * a kernel for that exists (float32 SUM and AVERAGE with AVX2), for a
 * destination larger than the caches; the same results. dst must not be
 * one of the sources. */
void hvd_reduce_n_stream(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t nsrc,
                         size_t count, double scale);

/* memcpy, writing dst around the caches (non-temporal stores) where the
 * CPU has AVX2: for a destination that is not in the caches and will not
 * be read soon. The regions must not overlap. Takes NULL pointers when
 * bytes is 0, as hvd_copy does. */
void hvd_copy_stream(void *dst, const void *src, size_t bytes);

/* The CPU's maker, where the data plane's choices differ by it (hvd_copy's
 * loop, the shared-memory chunk). */
typedef enum { HVD_CPU_OTHER, HVD_CPU_AMD, HVD_CPU_INTEL } hvd_cpu_vendor_t;
hvd_cpu_vendor_t hvd_cpu_vendor(void);

/* memcpy for the data plane's copies (into and out of the shared slots):
 * on AMD CPUs with AVX2, from 2 KiB, an AVX2 loop; elsewhere memcpy. glibc
 * copies from 2 KiB up to the L2's size with `rep movsb`, which on the AMD
 * EPYC machines here ran 3-5x slower than its own vector loop (a 512 KiB
 * allreduce of 2 ranks, whose 256 KiB pieces took it: 205 against 44 us).
 * The regions must not overlap. Unlike memcpy, takes NULL pointers when
 * bytes is 0, as an empty tensor's buffers may be. */
void hvd_copy(void *dst, const void *src, size_t bytes);

/* dst[i] = scale * src[i]; scale == 1.0 is a plain copy (memmove if dst == src
 * is a no-op). Same integer/bool rules as hvd_reduce_n. */
void hvd_scale_copy(hvd_dtype_t dt, void *dst, const void *src, size_t count, double scale);

/* float16 / bfloat16 <-> float, round to nearest even, NaN/Inf preserved. */
float hvd_half_to_float(uint16_t h);
uint16_t hvd_float_to_half(float f);
float hvd_bf16_to_float(uint16_t h);
uint16_t hvd_float_to_bf16(float f);

/* Name of the kernel variant chosen at run time ("avx2", "generic", ...). */
const char *hvd_reduce_impl(void);

#endif
