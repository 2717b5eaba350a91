/* reduce.c — dtype tables, half/bfloat16 conversion, the portable reduction
 * kernels and the run-time choice between them and reduce_avx2.c.
 * Invariants shared by every kernel: sources are combined in the order
 * srcs[0], srcs[1], ... with no reassociation and no FMA, float16/bfloat16
 * accumulate in float and round once, so every variant gives the same bits.
 * No allocation, no locks. */
#include "config.h"

#include <assert.h>
#include <stdatomic.h>
#include <string.h>

#include "reduce-internal.h"
#include "reduce.h"

#if HVD_REDUCE_HAVE_AVX2
#include <cpuid.h>
#endif

static const size_t dtype_sizes[_HVD_DTYPE_COUNT] = {
        [HVD_UINT8] = 1,    [HVD_INT8] = 1,    [HVD_INT32] = 4,   [HVD_INT64] = 8, [HVD_FLOAT16] = 2,
        [HVD_BFLOAT16] = 2, [HVD_FLOAT32] = 4, [HVD_FLOAT64] = 8, [HVD_BOOL] = 1,  [HVD_INT16] = 2,
};
static const char *const dtype_names[_HVD_DTYPE_COUNT] = {
        [HVD_UINT8] = "uint8",     [HVD_INT8] = "int8",         [HVD_INT32] = "int32",     [HVD_INT64] = "int64",
        [HVD_FLOAT16] = "float16", [HVD_BFLOAT16] = "bfloat16", [HVD_FLOAT32] = "float32", [HVD_FLOAT64] = "float64",
        [HVD_BOOL] = "bool",       [HVD_INT16] = "int16",
};

size_t hvd_dtype_size(hvd_dtype_t dt) {
        return (unsigned) dt < _HVD_DTYPE_COUNT ? dtype_sizes[dt] : 0;
}
const char *hvd_dtype_name(hvd_dtype_t dt) {
        return (unsigned) dt < _HVD_DTYPE_COUNT ? dtype_names[dt] : "invalid";
}
bool hvd_dtype_is_float(hvd_dtype_t dt) {
        return dt == HVD_FLOAT16 || dt == HVD_BFLOAT16 || dt == HVD_FLOAT32 || dt == HVD_FLOAT64;
}

/* ---- float16 / bfloat16 <-> float ----
 * Branch-light forms (after F. Giesen's half<->float conversions); the
 * kernels inline them. Bit for bit what F16C does, NaN included: a NaN
 * keeps sign and top payload bits and comes out quiet. */

static inline uint32_t f2u(float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        return u;
}
static inline float u2f(uint32_t u) {
        float f;
        memcpy(&f, &u, 4);
        return f;
}

static inline float half_to_float(uint16_t h) {
        uint32_t u = (uint32_t) (h & 0x7fff) << 13; /* exponent and mantissa in place */
        uint32_t exp = u & 0x0f800000;
        u += (127 - 15) << 23;
        if (exp == 0x0f800000) /* Inf/NaN: exponent to 255 */
                u += (128 - 16) << 23;
        else if (exp == 0) /* zero/subnormal: renormalise through the FPU (exact) */
                u = f2u(u2f(u + (1 << 23)) - u2f(113u << 23));
        return u2f(u | (uint32_t) (h & 0x8000) << 16);
}

static inline uint16_t float_to_half(float v) {
        uint32_t u = f2u(v), sign = (u >> 16) & 0x8000, h;
        u &= 0x7fffffff;
        if (u >= (127u + 16) << 23) /* >= 65536, Inf or NaN */
                h = u > 0x7f800000 ? 0x7e00 | ((u >> 13) & 0x3ff) : 0x7c00;
        else if (u < 113u << 23) /* result subnormal or 0: let the FPU round (exact, RNE) */
                h = f2u(u2f(u) + 0.5f) - f2u(0.5f);
        else { /* rebias, round to nearest even: + 0xfff + lowest kept bit */
                u += ((uint32_t) (15 - 127) << 23) + 0xfff + ((u >> 13) & 1);
                h = u >> 13; /* a carry into the exponent is right, up to Inf */
        }
        return (uint16_t) (h | sign);
}

static inline float bf16_to_float(uint16_t h) {
        return u2f((uint32_t) h << 16);
}

static inline uint16_t float_to_bf16(float v) {
        uint32_t f = f2u(v);
        if ((f & 0x7fffffff) > 0x7f800000) /* NaN: keep it, make it quiet */
                return (uint16_t) ((f >> 16) | 0x40);
        return (uint16_t) ((f + 0x7fff + ((f >> 16) & 1)) >> 16);
}

float hvd_half_to_float(uint16_t h) {
        return half_to_float(h);
}
uint16_t hvd_float_to_half(float f) {
        return float_to_half(f);
}
float hvd_bf16_to_float(uint16_t h) {
        return bf16_to_float(h);
}
uint16_t hvd_float_to_bf16(float f) {
        return float_to_bf16(f);
}

/* ---- portable kernels ----
 *
 * Each (dtype, op) pair is one function. Elements go in blocks of BLOCK:
 * the block's accumulators live in a local array, every source is folded
 * into it in order, then dst is written once — which is what makes dst ==
 * srcs[k] safe. Full blocks have a constant trip count and no branches so
 * compilers can vectorise them for the baseline ISA without alias checks.
 * Integer SUM and PRODUCT wrap (done in the unsigned type, so no signed
 * overflow); MIN/MAX keep the running value unless the new one is strictly
 * smaller/larger (a NaN in srcs[0] stays, a later one is ignored; ±0 keeps
 * the first). With MXCSR.DAZ set, MIN/MAX over subnormals may give the
 * subnormal here and a zero of the same sign in reduce_avx2.c: equal values. */
#define BLOCK 64

#define BLOCK_BODY(T, M, LOAD, COMBINE, STORE, SSTORE)                                                                 \
        do {                                                                                                           \
                const T *p_ = (const T *) srcs[0] + i;                                                                 \
                for (size_t j = 0; j < (M); j++)                                                                       \
                        acc[j] = LOAD(p_[j]);                                                                          \
                for (size_t k = 1; k < n; k++) {                                                                       \
                        p_ = (const T *) srcs[k] + i;                                                                  \
                        for (size_t j = 0; j < (M); j++)                                                               \
                                acc[j] = COMBINE(acc[j], LOAD(p_[j]));                                                 \
                }                                                                                                      \
                if (scaled)                                                                                            \
                        for (size_t j = 0; j < (M); j++)                                                               \
                                dst[i + j] = SSTORE(acc[j]);                                                           \
                else                                                                                                   \
                        for (size_t j = 0; j < (M); j++)                                                               \
                                dst[i + j] = STORE(acc[j]);                                                            \
        } while (0)

/* STORE writes an unscaled result, SSTORE a scaled one; they may use
 * `scale` and `sf` */
#define DEF_KERNEL(NAME, T, AT, LOAD, COMBINE, STORE, SSTORE)                                                          \
        static void NAME(void *dst_, const void *const *srcs, size_t n, size_t count, double scale) {                  \
                T *dst = dst_;                                                                                         \
                const bool scaled = scale != 1.0;                                                                      \
                const float sf = (float) scale;                                                                        \
                AT acc[BLOCK];                                                                                         \
                size_t i = 0;                                                                                          \
                (void) sf;                                                                                             \
                for (; count - i >= BLOCK; i += BLOCK)                                                                 \
                        BLOCK_BODY(T, BLOCK, LOAD, COMBINE, STORE, SSTORE);                                            \
                if (i < count)                                                                                         \
                        BLOCK_BODY(T, count - i, LOAD, COMBINE, STORE, SSTORE);                                        \
        }

#define ID(x)        (x)
#define C_SUM(a, b)  ((a) + (b))
#define C_PROD(a, b) ((a) * (b))
#define C_MIN(a, b)  ((b) < (a) ? (b) : (a))
#define C_MAX(a, b)  ((b) > (a) ? (b) : (a))

/* Integers. UT: same-width unsigned type for wrapping SUM/PRODUCT; MT: at
 * least as wide as unsigned int, so the product never promotes to int.
 * Scaled: (double) value * scale, saturated (hvd_reduce_clamp), truncated. */
#define DEF_INT(SUF, T, UT, MT, LO, HI)                                                                                \
        static inline UT SUF##_ld(T v) {                                                                               \
                return (UT) v;                                                                                         \
        }                                                                                                              \
        static inline UT SUF##_add(UT a, UT b) {                                                                       \
                return (UT) (a + b);                                                                                   \
        }                                                                                                              \
        static inline UT SUF##_mul(UT a, UT b) {                                                                       \
                return (UT) ((MT) a * (MT) b);                                                                         \
        }                                                                                                              \
        static inline T SUF##_scaled(T v, double scale) {                                                              \
                return (T) hvd_reduce_clamp((double) v * scale, LO, HI);                                               \
        }                                                                                                              \
        DEF_KERNEL(SUF##_sum, T, UT, SUF##_ld, SUF##_add, (T), SUF##_ssu)                                              \
        DEF_KERNEL(SUF##_prod, T, UT, SUF##_ld, SUF##_mul, (T), SUF##_ssu)                                             \
        DEF_KERNEL(SUF##_min, T, T, ID, C_MIN, ID, SUF##_sst)                                                          \
        DEF_KERNEL(SUF##_max, T, T, ID, C_MAX, ID, SUF##_sst)

/* the scaled stores of the integer kernels (need `scale` from DEF_KERNEL) */
#define u8_ssu(a)  u8_scaled((uint8_t) (a), scale)
#define u8_sst(a)  u8_scaled((a), scale)
#define i8_ssu(a)  i8_scaled((int8_t) (a), scale)
#define i8_sst(a)  i8_scaled((a), scale)
#define i16_ssu(a) i16_scaled((int16_t) (a), scale)
#define i16_sst(a) i16_scaled((a), scale)
#define i32_ssu(a) i32_scaled((int32_t) (a), scale)
#define i32_sst(a) i32_scaled((a), scale)
#define i64_ssu(a) hvd_reduce_scale_i64((int64_t) (a), scale)
#define i64_sst(a) hvd_reduce_scale_i64((a), scale)

DEF_INT(u8, uint8_t, uint8_t, uint32_t, 0.0, 255.0)
DEF_INT(i8, int8_t, uint8_t, uint32_t, -128.0, 127.0)
DEF_INT(i16, int16_t, uint16_t, uint32_t, -32768.0, 32767.0)
DEF_INT(i32, int32_t, uint32_t, uint32_t, -2147483648.0, 2147483647.0)

/* int64 has no exact double bounds: hvd_reduce_scale_i64() saturates */
static inline uint64_t i64_ld(int64_t v) {
        return (uint64_t) v;
}
static inline uint64_t i64_add(uint64_t a, uint64_t b) {
        return a + b;
}
static inline uint64_t i64_mul(uint64_t a, uint64_t b) {
        return a * b;
}
DEF_KERNEL(i64_sum, int64_t, uint64_t, i64_ld, i64_add, (int64_t), i64_ssu)
DEF_KERNEL(i64_prod, int64_t, uint64_t, i64_ld, i64_mul, (int64_t), i64_ssu)
DEF_KERNEL(i64_min, int64_t, int64_t, ID, C_MIN, ID, i64_sst)
DEF_KERNEL(i64_max, int64_t, int64_t, ID, C_MAX, ID, i64_sst)

#define F32_SST(a) ((a) *sf)
DEF_KERNEL(f32_sum, float, float, ID, C_SUM, ID, F32_SST)
DEF_KERNEL(f32_prod, float, float, ID, C_PROD, ID, F32_SST)
DEF_KERNEL(f32_min, float, float, ID, C_MIN, ID, F32_SST)
DEF_KERNEL(f32_max, float, float, ID, C_MAX, ID, F32_SST)

#define F64_SST(a) ((a) *scale)
DEF_KERNEL(f64_sum, double, double, ID, C_SUM, ID, F64_SST)
DEF_KERNEL(f64_prod, double, double, ID, C_PROD, ID, F64_SST)
DEF_KERNEL(f64_min, double, double, ID, C_MIN, ID, F64_SST)
DEF_KERNEL(f64_max, double, double, ID, C_MAX, ID, F64_SST)

#define F16_SST(a) float_to_half((a) *sf)
DEF_KERNEL(f16_sum, uint16_t, float, half_to_float, C_SUM, float_to_half, F16_SST)
DEF_KERNEL(f16_prod, uint16_t, float, half_to_float, C_PROD, float_to_half, F16_SST)
DEF_KERNEL(f16_min, uint16_t, float, half_to_float, C_MIN, float_to_half, F16_SST)
DEF_KERNEL(f16_max, uint16_t, float, half_to_float, C_MAX, float_to_half, F16_SST)

#define BF16_SST(a) float_to_bf16((a) *sf)
DEF_KERNEL(bf16_sum, uint16_t, float, bf16_to_float, C_SUM, float_to_bf16, BF16_SST)
DEF_KERNEL(bf16_prod, uint16_t, float, bf16_to_float, C_PROD, float_to_bf16, BF16_SST)
DEF_KERNEL(bf16_min, uint16_t, float, bf16_to_float, C_MIN, float_to_bf16, BF16_SST)
DEF_KERNEL(bf16_max, uint16_t, float, bf16_to_float, C_MAX, float_to_bf16, BF16_SST)

/* bool: SUM/MAX = or, MIN/PRODUCT = and; any non-zero byte is true; never scaled */
#define B_LD(v)     ((uint8_t) ((v) != 0))
#define B_OR(a, b)  ((uint8_t) ((a) | (b)))
#define B_AND(a, b) ((uint8_t) ((a) & (b)))
DEF_KERNEL(b_or, uint8_t, uint8_t, B_LD, B_OR, ID, ID)
DEF_KERNEL(b_and, uint8_t, uint8_t, B_LD, B_AND, ID, ID)

typedef void (*kernel_fn)(void *dst, const void *const *srcs, size_t n, size_t count, double scale);

/* [dtype][op - HVD_REDUCE_SUM] */
#define ROW(P)                                                                                                         \
        { P##_sum, P##_min, P##_max, P##_prod }
static const kernel_fn generic_kernels[_HVD_DTYPE_COUNT][4] = {
        [HVD_UINT8] = ROW(u8),      [HVD_INT8] = ROW(i8),
        [HVD_INT16] = ROW(i16),     [HVD_INT32] = ROW(i32),
        [HVD_INT64] = ROW(i64),     [HVD_FLOAT16] = ROW(f16),
        [HVD_BFLOAT16] = ROW(bf16), [HVD_FLOAT32] = ROW(f32),
        [HVD_FLOAT64] = ROW(f64),   [HVD_BOOL] = { b_or, b_and, b_or, b_and },
};

/* ---- run-time choice ---- */

static atomic_bool forced_generic = false;

#if HVD_REDUCE_HAVE_AVX2
enum { IMPL_UNKNOWN, IMPL_GENERIC, IMPL_AVX2 };
static atomic_int detected_impl = IMPL_UNKNOWN;
#endif

bool hvd_reduce_cpu_has_avx2(void) {
#if HVD_REDUCE_HAVE_AVX2
        int impl = atomic_load_explicit(&detected_impl, memory_order_relaxed);
        if (impl == IMPL_UNKNOWN) {
                /* the cpu model also checks that the OS saves the YMM state;
                 * F16C (not a __builtin_cpu_supports name everywhere) from CPUID.1:ECX[29] */
                unsigned eax, ebx, ecx = 0, edx;
                __builtin_cpu_init();
                bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
                impl = __builtin_cpu_supports("avx2") && f16c ? IMPL_AVX2 : IMPL_GENERIC;
                atomic_store_explicit(&detected_impl, impl, memory_order_relaxed);
        }
        return impl == IMPL_AVX2;
#else
        return false;
#endif
}

static bool use_avx2(void) {
        return !atomic_load_explicit(&forced_generic, memory_order_relaxed) && hvd_reduce_cpu_has_avx2();
}

void hvd_reduce_force_generic(bool on) {
        atomic_store_explicit(&forced_generic, on, memory_order_relaxed);
}

const char *hvd_reduce_impl(void) {
        return use_avx2() ? "avx2" : "generic";
}

void hvd_reduce_n(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t n, size_t count,
                  double scale) {
        assert(hvd_dtype_valid(dt) && hvd_reduce_op_valid(op));
        assert(n >= 1 && srcs && (dst || count == 0));
        if (count == 0 || !hvd_dtype_valid(dt) || !hvd_reduce_op_valid(op) || n == 0)
                return;
        if (op == HVD_REDUCE_AVERAGE)
                op = HVD_REDUCE_SUM;
        /* One source, no scale: a copy. Not for bool (normalised to 0/1) nor
         * float16/bfloat16 (a signalling NaN comes out quiet). */
        if (n == 1 && scale == 1.0 && dt != HVD_BOOL && dt != HVD_FLOAT16 && dt != HVD_BFLOAT16) {
                if (dst != srcs[0])
                        memcpy(dst, srcs[0], count * dtype_sizes[dt]);
                return;
        }
#if HVD_REDUCE_HAVE_AVX2
        if (use_avx2()) {
                hvd_reduce_n_avx2(dt, op, dst, srcs, n, count, scale);
                return;
        }
#endif
        generic_kernels[dt][op - HVD_REDUCE_SUM](dst, srcs, n, count, scale);
}

void hvd_reduce_n_stream(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t n, size_t count,
                         double scale) {
#if HVD_REDUCE_HAVE_AVX2
        if (dt == HVD_FLOAT32 && (op == HVD_REDUCE_SUM || op == HVD_REDUCE_AVERAGE) && n >= 2 && count > 0 &&
            use_avx2()) {
                hvd_reduce_sum_f32_stream_avx2(dst, (const float *const *) srcs, n, count, (float) scale, scale != 1.0);
                return;
        }
#endif
        hvd_reduce_n(dt, op, dst, srcs, n, count, scale);
}

void hvd_copy_stream(void *dst, const void *src, size_t bytes) {
        if (!bytes)
                return;
#if HVD_REDUCE_HAVE_AVX2
        if (bytes >= 4096 && use_avx2()) {
                hvd_copy_stream_avx2(dst, src, bytes);
                return;
        }
#endif
        memcpy(dst, src, bytes);
}

hvd_cpu_vendor_t hvd_cpu_vendor(void) {
#if defined(__x86_64__) || defined(__i386__)
        static _Atomic int vendor = -1;
        int v = atomic_load_explicit(&vendor, memory_order_relaxed);
        if (v < 0) {
                __builtin_cpu_init();
                v = __builtin_cpu_is("amd") ? HVD_CPU_AMD : __builtin_cpu_is("intel") ? HVD_CPU_INTEL : HVD_CPU_OTHER;
                atomic_store_explicit(&vendor, v, memory_order_relaxed);
        }
        return (hvd_cpu_vendor_t) v;
#else
        return HVD_CPU_OTHER;
#endif
}

/* Where hvd_copy takes the AVX2 loop: AVX2 and an AMD CPU (see reduce.h). */
static bool copy_loop(void) {
#if HVD_REDUCE_HAVE_AVX2
        return hvd_cpu_vendor() == HVD_CPU_AMD && use_avx2();
#else
        return false;
#endif
}

#define COPY_LOOP_BYTES 2048

void hvd_copy(void *dst, const void *src, size_t bytes) {
        if (!bytes)
                return;
#if HVD_REDUCE_HAVE_AVX2
        if (bytes >= COPY_LOOP_BYTES && copy_loop()) {
                hvd_copy_avx2(dst, src, bytes);
                return;
        }
#endif
        memcpy(dst, src, bytes);
}

void hvd_scale_copy(hvd_dtype_t dt, void *dst, const void *src, size_t count, double scale) {
        if (scale == 1.0 || dt == HVD_BOOL) {
                size_t bytes = count * hvd_dtype_size(dt);
                const uint8_t *d = dst, *s = src;
                if (d + bytes <= s || s + bytes <= d)
                        hvd_copy(dst, src, bytes);
                else if (dst != src)
                        memmove(dst, src, bytes);
                return;
        }
        const void *srcs[1] = { src };
        hvd_reduce_n(dt, HVD_REDUCE_SUM, dst, srcs, 1, count, scale);
}
