/* reduce.c — dtype tables, half/bfloat16 conversion, the portable reduction
 * kernels and the run-time choice between them and reduce_avx2.c.
 * Invariants shared by every kernel: sources are combined in the order
 * srcs[0], srcs[1], ... with no reassociation and no FMA, float16/bfloat16
 * accumulate in float and round once, so every variant gives the same bits.
 * No allocation, no locks. */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "reduce-internal.h"
#include "reduce.h"

static const size_t dtype_sizes[_HVD_DTYPE_COUNT] = {
        [HVD_UINT8] = 1, [HVD_INT8] = 1,     [HVD_INT32] = 4,   [HVD_INT64] = 8, [HVD_FLOAT16] = 2,
        [HVD_BFLOAT16] = 2, [HVD_FLOAT32] = 4, [HVD_FLOAT64] = 8, [HVD_BOOL] = 1, [HVD_INT16] = 2,
};
static const char *const dtype_names[_HVD_DTYPE_COUNT] = {
        [HVD_UINT8] = "uint8",     [HVD_INT8] = "int8",       [HVD_INT32] = "int32",
        [HVD_INT64] = "int64",     [HVD_FLOAT16] = "float16", [HVD_BFLOAT16] = "bfloat16",
        [HVD_FLOAT32] = "float32", [HVD_FLOAT64] = "float64", [HVD_BOOL] = "bool",
        [HVD_INT16] = "int16",
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

float hvd_half_to_float(uint16_t h) {
        uint32_t sign = (uint32_t) (h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, f;
        if (exp == 0) {
                if (man == 0)
                        f = sign;
                else { /* subnormal: normalise */
                        exp = 127 - 15 + 1;
                        while (!(man & 0x400)) {
                                man <<= 1;
                                exp--;
                        }
                        man &= 0x3ff;
                        f = sign | (exp << 23) | (man << 13);
                }
        } else if (exp == 0x1f)
                f = sign | 0x7f800000 | (man << 13);
        else
                f = sign | ((exp + 127 - 15) << 23) | (man << 13);
        float out;
        memcpy(&out, &f, 4);
        return out;
}

uint16_t hvd_float_to_half(float v) {
        uint32_t f;
        memcpy(&f, &v, 4);
        uint32_t sign = (f >> 16) & 0x8000;
        int32_t exp = (int32_t) ((f >> 23) & 0xff) - 127 + 15;
        uint32_t man = f & 0x7fffff;
        if (((f >> 23) & 0xff) == 0xff) /* Inf / NaN (NaN comes out quiet, as with F16C) */
                return (uint16_t) (sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
        if (exp >= 0x1f)
                return (uint16_t) (sign | 0x7c00);
        if (exp <= 0) {
                if (exp < -10)
                        return (uint16_t) sign;
                man |= 0x800000;
                uint32_t shift = (uint32_t) (14 - exp);
                uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
                if (rem > mid || (rem == mid && (half & 1)))
                        half++;
                return (uint16_t) (sign | half);
        }
        uint32_t half = sign | ((uint32_t) exp << 10) | (man >> 13);
        uint32_t rem = man & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
                half++; /* may carry into the exponent: still correct */
        return (uint16_t) half;
}

float hvd_bf16_to_float(uint16_t h) {
        uint32_t f = (uint32_t) h << 16;
        float out;
        memcpy(&out, &f, 4);
        return out;
}

uint16_t hvd_float_to_bf16(float v) {
        uint32_t f;
        memcpy(&f, &v, 4);
        if ((f & 0x7f800000) == 0x7f800000 && (f & 0x7fffff))
                return (uint16_t) ((f >> 16) | 0x40);
        f += 0x7fff + ((f >> 16) & 1);
        return (uint16_t) (f >> 16);
}

/* ---- portable kernels ----
 *
 * Each (dtype, op) pair is one function. Elements go in blocks of BLOCK:
 * the block's accumulators live in a local array, every source is folded
 * into it in order, then dst is written once — which is what makes dst ==
 * srcs[k] safe. Full blocks use a constant trip count so compilers can
 * vectorise them for the baseline ISA without alias checks. Integer SUM and
 * PRODUCT wrap (done in the unsigned type, so no signed overflow);
 * MIN/MAX keep the running value unless the new one is strictly
 * smaller/larger (a NaN in srcs[0] stays, a later one is ignored; ±0 keeps
 * the first). */
#define BLOCK 64

#define BLOCK_BODY(T, AT, M, LOAD, COMBINE, STORE)                                    \
        do {                                                                          \
                const T *p_ = (const T *) srcs[0] + i;                                \
                for (size_t j = 0; j < (M); j++)                                      \
                        acc[j] = LOAD(p_[j]);                                         \
                for (size_t k = 1; k < n; k++) {                                      \
                        p_ = (const T *) srcs[k] + i;                                 \
                        for (size_t j = 0; j < (M); j++)                              \
                                acc[j] = COMBINE(acc[j], LOAD(p_[j]));                \
                }                                                                     \
                for (size_t j = 0; j < (M); j++)                                      \
                        dst[i + j] = STORE(acc[j]);                                   \
        } while (0)

/* STORE expressions may use `scaled`, `scale` and `sf` */
#define DEF_KERNEL(NAME, T, AT, LOAD, COMBINE, STORE)                                         \
        static void NAME(void *dst_, const void *const *srcs, size_t n, size_t count,      \
                         double scale) {                                                      \
                T *dst = dst_;                                                                \
                const bool scaled = scale != 1.0;                                             \
                const float sf = (float) scale;                                               \
                AT acc[BLOCK];                                                                \
                size_t i = 0;                                                                 \
                (void) scaled;                                                                \
                (void) sf;                                                                    \
                for (; count - i >= BLOCK; i += BLOCK)                                        \
                        BLOCK_BODY(T, AT, BLOCK, LOAD, COMBINE, STORE);                       \
                if (i < count)                                                                \
                        BLOCK_BODY(T, AT, count - i, LOAD, COMBINE, STORE);                   \
        }

#define ID(x) (x)
#define C_SUM(a, b) ((a) + (b))
#define C_PROD(a, b) ((a) * (b))
#define C_MIN(a, b) ((b) < (a) ? (b) : (a))
#define C_MAX(a, b) ((b) > (a) ? (b) : (a))

/* Integers. UT: same-width unsigned type for wrapping SUM/PRODUCT; MT: at
 * least as wide as unsigned int, so the product never promotes to int. */
#define DEF_INT(SUF, T, UT, MT, LO, HI)                                                         \
        static inline UT SUF##_ld(T v) {                                                          \
                return (UT) v;                                                                    \
        }                                                                                         \
        static inline UT SUF##_add(UT a, UT b) {                                                  \
                return (UT) (a + b);                                                              \
        }                                                                                         \
        static inline UT SUF##_mul(UT a, UT b) {                                                  \
                return (UT) ((MT) a * (MT) b);                                                    \
        }                                                                                         \
        static inline T SUF##_st(T v, bool scaled, double scale) {                                \
                return scaled ? (T) hvd_reduce_clamp((double) v * scale, LO, HI) : v;             \
        }                                                                                         \
        DEF_KERNEL(SUF##_sum, T, UT, SUF##_ld, SUF##_add, SUF##_stu)                              \
        DEF_KERNEL(SUF##_prod, T, UT, SUF##_ld, SUF##_mul, SUF##_stu)                             \
        DEF_KERNEL(SUF##_min, T, T, ID, C_MIN, SUF##_stt)                                         \
        DEF_KERNEL(SUF##_max, T, T, ID, C_MAX, SUF##_stt)

/* the store expressions of the integer kernels (need the locals of DEF_KERNEL) */
#define u8_stu(a) u8_st((uint8_t) (a), scaled, scale)
#define u8_stt(a) u8_st((a), scaled, scale)
#define i8_stu(a) i8_st((int8_t) (a), scaled, scale)
#define i8_stt(a) i8_st((a), scaled, scale)
#define i16_stu(a) i16_st((int16_t) (a), scaled, scale)
#define i16_stt(a) i16_st((a), scaled, scale)
#define i32_stu(a) i32_st((int32_t) (a), scaled, scale)
#define i32_stt(a) i32_st((a), scaled, scale)
#define i64_stu(a) i64_st((int64_t) (a), scaled, scale)
#define i64_stt(a) i64_st((a), scaled, scale)

DEF_INT(u8, uint8_t, uint8_t, uint32_t, 0.0, 255.0)
DEF_INT(i8, int8_t, uint8_t, uint32_t, -128.0, 127.0)
DEF_INT(i16, int16_t, uint16_t, uint32_t, -32768.0, 32767.0)
DEF_INT(i32, int32_t, uint32_t, uint32_t, -2147483648.0, 2147483647.0)

/* int64 has no exact double bounds: its own saturating conversion */
static inline uint64_t i64_ld(int64_t v) {
        return (uint64_t) v;
}
static inline uint64_t i64_add(uint64_t a, uint64_t b) {
        return a + b;
}
static inline uint64_t i64_mul(uint64_t a, uint64_t b) {
        return a * b;
}
static inline int64_t i64_st(int64_t v, bool scaled, double scale) {
        return scaled ? hvd_reduce_scale_i64(v, scale) : v;
}
DEF_KERNEL(i64_sum, int64_t, uint64_t, i64_ld, i64_add, i64_stu)
DEF_KERNEL(i64_prod, int64_t, uint64_t, i64_ld, i64_mul, i64_stu)
DEF_KERNEL(i64_min, int64_t, int64_t, ID, C_MIN, i64_stt)
DEF_KERNEL(i64_max, int64_t, int64_t, ID, C_MAX, i64_stt)

#define F32_ST(a) (scaled ? (a) * sf : (a))
DEF_KERNEL(f32_sum, float, float, ID, C_SUM, F32_ST)
DEF_KERNEL(f32_prod, float, float, ID, C_PROD, F32_ST)
DEF_KERNEL(f32_min, float, float, ID, C_MIN, F32_ST)
DEF_KERNEL(f32_max, float, float, ID, C_MAX, F32_ST)

#define F64_ST(a) (scaled ? (a) * scale : (a))
DEF_KERNEL(f64_sum, double, double, ID, C_SUM, F64_ST)
DEF_KERNEL(f64_prod, double, double, ID, C_PROD, F64_ST)
DEF_KERNEL(f64_min, double, double, ID, C_MIN, F64_ST)
DEF_KERNEL(f64_max, double, double, ID, C_MAX, F64_ST)

#define F16_ST(a) hvd_float_to_half(F32_ST(a))
DEF_KERNEL(f16_sum, uint16_t, float, hvd_half_to_float, C_SUM, F16_ST)
DEF_KERNEL(f16_prod, uint16_t, float, hvd_half_to_float, C_PROD, F16_ST)
DEF_KERNEL(f16_min, uint16_t, float, hvd_half_to_float, C_MIN, F16_ST)
DEF_KERNEL(f16_max, uint16_t, float, hvd_half_to_float, C_MAX, F16_ST)

#define BF16_ST(a) hvd_float_to_bf16(F32_ST(a))
DEF_KERNEL(bf16_sum, uint16_t, float, hvd_bf16_to_float, C_SUM, BF16_ST)
DEF_KERNEL(bf16_prod, uint16_t, float, hvd_bf16_to_float, C_PROD, BF16_ST)
DEF_KERNEL(bf16_min, uint16_t, float, hvd_bf16_to_float, C_MIN, BF16_ST)
DEF_KERNEL(bf16_max, uint16_t, float, hvd_bf16_to_float, C_MAX, BF16_ST)

/* bool: SUM/MAX = or, MIN/PRODUCT = and; any non-zero byte is true */
#define B_LD(v) ((uint8_t) ((v) != 0))
#define B_OR(a, b) ((uint8_t) ((a) | (b)))
#define B_AND(a, b) ((uint8_t) ((a) & (b)))
DEF_KERNEL(b_or, uint8_t, uint8_t, B_LD, B_OR, ID)
DEF_KERNEL(b_and, uint8_t, uint8_t, B_LD, B_AND, ID)

typedef void (*kernel_fn)(void *dst, const void *const *srcs, size_t n, size_t count,
                          double scale);

/* [dtype][op - HVD_REDUCE_SUM] */
#define ROW(P) { P##_sum, P##_min, P##_max, P##_prod }
static const kernel_fn generic_kernels[_HVD_DTYPE_COUNT][4] = {
        [HVD_UINT8] = ROW(u8),     [HVD_INT8] = ROW(i8),       [HVD_INT16] = ROW(i16),
        [HVD_INT32] = ROW(i32),    [HVD_INT64] = ROW(i64),     [HVD_FLOAT16] = ROW(f16),
        [HVD_BFLOAT16] = ROW(bf16), [HVD_FLOAT32] = ROW(f32),  [HVD_FLOAT64] = ROW(f64),
        [HVD_BOOL] = { b_or, b_and, b_or, b_and },
};

/* ---- run-time choice ---- */

enum { IMPL_UNKNOWN, IMPL_GENERIC, IMPL_AVX2 };
static atomic_int detected_impl = IMPL_UNKNOWN;
static atomic_bool forced_generic = false;

bool hvd_reduce_cpu_has_avx2(void) {
#if HVD_REDUCE_HAVE_AVX2
        int impl = atomic_load_explicit(&detected_impl, memory_order_relaxed);
        if (impl == IMPL_UNKNOWN) {
                /* libgcc's cpu model also checks that the OS saves the YMM state */
                __builtin_cpu_init();
                impl = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")
                               ? IMPL_AVX2
                               : IMPL_GENERIC;
                atomic_store_explicit(&detected_impl, impl, memory_order_relaxed);
        }
        return impl == IMPL_AVX2;
#else
        return false;
#endif
}

static bool use_avx2(void) {
        return !atomic_load_explicit(&forced_generic, memory_order_relaxed) &&
               hvd_reduce_cpu_has_avx2();
}

void hvd_reduce_force_generic(bool on) {
        atomic_store_explicit(&forced_generic, on, memory_order_relaxed);
}

const char *hvd_reduce_impl(void) {
        return use_avx2() ? "avx2" : "generic";
}

void hvd_reduce_n(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t n,
                  size_t count, double scale) {
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

void hvd_scale_copy(hvd_dtype_t dt, void *dst, const void *src, size_t count, double scale) {
        if (scale == 1.0 || dt == HVD_BOOL) {
                if (dst != src)
                        memmove(dst, src, count * hvd_dtype_size(dt));
                return;
        }
        const void *srcs[1] = { src };
        hvd_reduce_n(dt, HVD_REDUCE_SUM, dst, srcs, 1, count, scale);
}
