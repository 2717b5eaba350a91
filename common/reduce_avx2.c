/* reduce_avx2.c — AVX2 (+F16C) reduction kernels, chosen at run time by
 * reduce.c. Same order of operations as the portable kernels: srcs[0]
 * first, one op per further source, the scale multiply last. FMA is left
 * out of the target list so the compiler cannot contract either; tails
 * shorter than a vector use the same scalar formulas. So every result is
 * bit-identical to reduce.c. Each block of elements is read from all
 * sources before dst is written, so dst may be one of the sources. */
#include "config.h"

#include "reduce-internal.h"

#if HVD_REDUCE_HAVE_AVX2

#include <immintrin.h>
#include <string.h>

#include "util.h"

#define AVX2   __attribute__((target("avx2,f16c")))
#define INLINE static inline __attribute__((always_inline)) AVX2

/* 4 vectors per step: enough independent chains to hide load and add
 * latency; the loop over sources is inside so dst is written once. W is
 * the number of elements per vector. */
#define KERNEL_LOOP(T, VT, W, LOADV, OPV, STOREV, AT, LOADS, OPS, STORES)                                              \
        do {                                                                                                           \
                size_t i = 0;                                                                                          \
                for (; count - i >= 4 * (W); i += 4 * (W)) {                                                           \
                        const T *p = (const T *) srcs[0] + i;                                                          \
                        VT a0 = LOADV(p), a1 = LOADV(p + (W)), a2 = LOADV(p + 2 * (W)), a3 = LOADV(p + 3 * (W));       \
                        for (size_t k = 1; k < n; k++) {                                                               \
                                p = (const T *) srcs[k] + i;                                                           \
                                a0 = OPV(a0, LOADV(p));                                                                \
                                a1 = OPV(a1, LOADV(p + (W)));                                                          \
                                a2 = OPV(a2, LOADV(p + 2 * (W)));                                                      \
                                a3 = OPV(a3, LOADV(p + 3 * (W)));                                                      \
                        }                                                                                              \
                        STOREV(dst + i, a0);                                                                           \
                        STOREV(dst + i + (W), a1);                                                                     \
                        STOREV(dst + i + 2 * (W), a2);                                                                 \
                        STOREV(dst + i + 3 * (W), a3);                                                                 \
                }                                                                                                      \
                for (; count - i >= (W); i += (W)) {                                                                   \
                        VT a0 = LOADV((const T *) srcs[0] + i);                                                        \
                        for (size_t k = 1; k < n; k++)                                                                 \
                                a0 = OPV(a0, LOADV((const T *) srcs[k] + i));                                          \
                        STOREV(dst + i, a0);                                                                           \
                }                                                                                                      \
                for (; i < count; i++) {                                                                               \
                        AT a = LOADS(((const T *) srcs[0])[i]);                                                        \
                        for (size_t k = 1; k < n; k++)                                                                 \
                                a = OPS(a, LOADS(((const T *) srcs[k])[i]));                                           \
                        dst[i] = STORES(a);                                                                            \
                }                                                                                                      \
        } while (0)

/* One always-inlined body per dtype, instantiated once per op by a switch
 * so that `op` is a constant inside each copy. SUM, the hot case, also
 * gets `scaled` as a constant, and unscaled 2-source SUM (a ring step:
 * dst = dst + incoming) a constant source count, so its loops unroll. */
#define DISPATCH_OPS(BODY)                                                                                             \
        switch (op) {                                                                                                  \
        case HVD_REDUCE_MIN: BODY(HVD_REDUCE_MIN, scale != 1.0, dst_, srcs, n, count, scale); break;                   \
        case HVD_REDUCE_MAX: BODY(HVD_REDUCE_MAX, scale != 1.0, dst_, srcs, n, count, scale); break;                   \
        case HVD_REDUCE_PRODUCT: BODY(HVD_REDUCE_PRODUCT, scale != 1.0, dst_, srcs, n, count, scale); break;           \
        default:                                                                                                       \
                if (scale != 1.0)                                                                                      \
                        BODY(HVD_REDUCE_SUM, true, dst_, srcs, n, count, scale);                                       \
                else if (n == 2)                                                                                       \
                        BODY(HVD_REDUCE_SUM, false, dst_, srcs, 2, count, scale);                                      \
                else                                                                                                   \
                        BODY(HVD_REDUCE_SUM, false, dst_, srcs, n, count, scale);                                      \
                break;                                                                                                 \
        }

#define ID(x)       (x)
#define C_MIN(a, b) ((b) < (a) ? (b) : (a))
#define C_MAX(a, b) ((b) > (a) ? (b) : (a))

/* ---- float32, float16, bfloat16: all computed in float ---- */

/* min_ps(b, a) is `b < a ? b : a` lane by lane, NaN and ±0 included,
 * which is exactly C_MIN(a, b). */
INLINE __m256 ps_op(hvd_reduce_op_t op, __m256 a, __m256 b) {
        switch (op) {
        case HVD_REDUCE_MIN: return _mm256_min_ps(b, a);
        case HVD_REDUCE_MAX: return _mm256_max_ps(b, a);
        case HVD_REDUCE_PRODUCT: return _mm256_mul_ps(a, b);
        default: return _mm256_add_ps(a, b);
        }
}
INLINE float ss_op(hvd_reduce_op_t op, float a, float b) {
        switch (op) {
        case HVD_REDUCE_MIN: return C_MIN(a, b);
        case HVD_REDUCE_MAX: return C_MAX(a, b);
        case HVD_REDUCE_PRODUCT: return a * b;
        default: return a + b;
        }
}

INLINE __m256 f16_load(const uint16_t *p) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
}
INLINE void f16_store(uint16_t *p, __m256 v) {
        _mm_storeu_si128((__m128i *) p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* bfloat16 goes 16 elements at a time as two float vectors: the even
 * elements shifted up, the odd ones masked in place. Lanes are permuted
 * the same way for every source, and bf16_store() undoes it, so no
 * cross-lane shuffles. */
typedef struct {
        __m256 even, odd;
} bf16x16;

INLINE bf16x16 bf16_load(const uint16_t *p) {
        __m256i x = _mm256_loadu_si256((const __m256i *) p);
        __m256i odd = _mm256_and_si256(x, _mm256_set1_epi32((int) 0xffff0000));
        __m256i even = _mm256_slli_epi32(x, 16);
        return (bf16x16){ _mm256_castsi256_ps(even), _mm256_castsi256_ps(odd) };
}
/* hvd_float_to_bf16() on 8 lanes, the result in the top 16 bits of each:
 * round to nearest even (overflow becomes Inf); with `nan`, NaN lanes
 * keep their top bits and turn quiet instead. */
INLINE __m256i bf16_round(__m256 v, bool nan) {
        __m256i f = _mm256_castps_si256(v);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(f, 16), _mm256_set1_epi32(1));
        __m256i rnd = _mm256_add_epi32(_mm256_add_epi32(f, _mm256_set1_epi32(0x7fff)), lsb);
        if (!nan)
                return rnd;
        __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m256i qnan = _mm256_or_si256(f, _mm256_set1_epi32(0x400000));
        return _mm256_blendv_epi8(rnd, qnan, isnan);
}
INLINE void bf16_store(uint16_t *p, bf16x16 v) {
        /* NaN is rare: one compare checks both halves for it */
        __m256 any = _mm256_cmp_ps(v.even, v.odd, _CMP_UNORD_Q);
        __m256i even, odd;
        if (_likely_(_mm256_testz_ps(any, any))) {
                even = bf16_round(v.even, false);
                odd = bf16_round(v.odd, false);
        } else {
                even = bf16_round(v.even, true);
                odd = bf16_round(v.odd, true);
        }
        __m256i r = _mm256_blend_epi16(_mm256_srli_epi32(even, 16), odd, 0xaa);
        _mm256_storeu_si256((__m256i *) p, r);
}
INLINE bf16x16 bf16_op(hvd_reduce_op_t op, bf16x16 a, bf16x16 b) {
        return (bf16x16){ ps_op(op, a.even, b.even), ps_op(op, a.odd, b.odd) };
}
INLINE bf16x16 bf16_scale(bf16x16 a, __m256 s) {
        return (bf16x16){ _mm256_mul_ps(a.even, s), _mm256_mul_ps(a.odd, s) };
}

#define PS_OPV(a, b) ps_op(op, a, b)
#define SS_OPS(a, b) ss_op(op, a, b)
#define SCALE_PS(v)  (scaled ? _mm256_mul_ps(v, vs) : (v))
#define SCALE_SS(a)  (scaled ? (a) *sf : (a))

#define F32_LOADV(p)     _mm256_loadu_ps(p)
#define F32_STOREV(p, v) _mm256_storeu_ps(p, SCALE_PS(v))
INLINE void f32_body(hvd_reduce_op_t op, bool scaled, void *dst_, const void *const *srcs, size_t n, size_t count,
                     double scale) {
        float *dst = dst_;
        const float sf = (float) scale;
        const __m256 vs = _mm256_set1_ps(sf);
        KERNEL_LOOP(float, __m256, 8, F32_LOADV, PS_OPV, F32_STOREV, float, ID, SS_OPS, SCALE_SS);
}
AVX2 static void f32_kernel(hvd_reduce_op_t op, void *dst_, const void *const *srcs, size_t n, size_t count,
                            double scale){ DISPATCH_OPS(f32_body) }

#define F16_STOREV(p, v) f16_store(p, SCALE_PS(v))
#define F16_STORES(a)    hvd_float_to_half(SCALE_SS(a))
INLINE void f16_body(hvd_reduce_op_t op, bool scaled, void *dst_, const void *const *srcs, size_t n, size_t count,
                     double scale) {
        uint16_t *dst = dst_;
        const float sf = (float) scale;
        const __m256 vs = _mm256_set1_ps(sf);
        KERNEL_LOOP(uint16_t, __m256, 8, f16_load, PS_OPV, F16_STOREV, float, hvd_half_to_float, SS_OPS, F16_STORES);
}
AVX2 static void f16_kernel(hvd_reduce_op_t op, void *dst_, const void *const *srcs, size_t n, size_t count,
                            double scale){ DISPATCH_OPS(f16_body) }

#define BF16_OPV(a, b)    bf16_op(op, a, b)
#define BF16_STOREV(p, v) bf16_store(p, scaled ? bf16_scale(v, vs) : (v))
#define BF16_STORES(a)    hvd_float_to_bf16(SCALE_SS(a))
INLINE void bf16_body(hvd_reduce_op_t op, bool scaled, void *dst_, const void *const *srcs, size_t n, size_t count,
                      double scale) {
        uint16_t *dst = dst_;
        const float sf = (float) scale;
        const __m256 vs = _mm256_set1_ps(sf);
        KERNEL_LOOP(uint16_t, bf16x16, 16, bf16_load, BF16_OPV, BF16_STOREV, float, hvd_bf16_to_float, SS_OPS,
                    BF16_STORES);
}
AVX2 static void bf16_kernel(hvd_reduce_op_t op, void *dst_, const void *const *srcs, size_t n, size_t count,
                             double scale){ DISPATCH_OPS(bf16_body) }

/* ---- float64 ---- */

INLINE __m256d pd_op(hvd_reduce_op_t op, __m256d a, __m256d b) {
        switch (op) {
        case HVD_REDUCE_MIN: return _mm256_min_pd(b, a);
        case HVD_REDUCE_MAX: return _mm256_max_pd(b, a);
        case HVD_REDUCE_PRODUCT: return _mm256_mul_pd(a, b);
        default: return _mm256_add_pd(a, b);
        }
}
INLINE double sd_op(hvd_reduce_op_t op, double a, double b) {
        switch (op) {
        case HVD_REDUCE_MIN: return C_MIN(a, b);
        case HVD_REDUCE_MAX: return C_MAX(a, b);
        case HVD_REDUCE_PRODUCT: return a * b;
        default: return a + b;
        }
}
#define PD_OPV(a, b)     pd_op(op, a, b)
#define SD_OPS(a, b)     sd_op(op, a, b)
#define F64_LOADV(p)     _mm256_loadu_pd(p)
#define F64_STOREV(p, v) _mm256_storeu_pd(p, scaled ? _mm256_mul_pd(v, vd) : (v))
#define F64_STORES(a)    (scaled ? (a) *scale : (a))
INLINE void f64_body(hvd_reduce_op_t op, bool scaled, void *dst_, const void *const *srcs, size_t n, size_t count,
                     double scale) {
        double *dst = dst_;
        const __m256d vd = _mm256_set1_pd(scale);
        KERNEL_LOOP(double, __m256d, 4, F64_LOADV, PD_OPV, F64_STOREV, double, ID, SD_OPS, F64_STORES);
}
AVX2 static void f64_kernel(hvd_reduce_op_t op, void *dst_, const void *const *srcs, size_t n, size_t count,
                            double scale) {
        DISPATCH_OPS(f64_body)
}

/* ---- integers: SUM and PRODUCT wrap, scaled results saturate ---- */

#define SI_LOADV(p) _mm256_loadu_si256((const __m256i *) (p))

/* low 8 bits of each byte product: even and odd bytes through 16-bit multiplies */
INLINE __m256i mullo_epi8(__m256i a, __m256i b) {
        __m256i even = _mm256_mullo_epi16(a, b);
        __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
        return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)), _mm256_slli_epi16(odd, 8));
}
/* low 64 bits of each product: lo*lo + ((hi*lo + lo*hi) << 32) */
INLINE __m256i mullo_epi64(__m256i a, __m256i b) {
        __m256i lo = _mm256_mul_epu32(a, b);
        __m256i t = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                     _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
        return _mm256_add_epi64(lo, _mm256_slli_epi64(t, 32));
}

INLINE __m256i u8_op(hvd_reduce_op_t op, __m256i a, __m256i b) {
        switch (op) {
        case HVD_REDUCE_MIN: return _mm256_min_epu8(a, b);
        case HVD_REDUCE_MAX: return _mm256_max_epu8(a, b);
        case HVD_REDUCE_PRODUCT: return mullo_epi8(a, b);
        default: return _mm256_add_epi8(a, b);
        }
}
INLINE __m256i i8_op(hvd_reduce_op_t op, __m256i a, __m256i b) {
        switch (op) {
        case HVD_REDUCE_MIN: return _mm256_min_epi8(a, b);
        case HVD_REDUCE_MAX: return _mm256_max_epi8(a, b);
        case HVD_REDUCE_PRODUCT: return mullo_epi8(a, b);
        default: return _mm256_add_epi8(a, b);
        }
}
INLINE __m256i i16_op(hvd_reduce_op_t op, __m256i a, __m256i b) {
        switch (op) {
        case HVD_REDUCE_MIN: return _mm256_min_epi16(a, b);
        case HVD_REDUCE_MAX: return _mm256_max_epi16(a, b);
        case HVD_REDUCE_PRODUCT: return _mm256_mullo_epi16(a, b);
        default: return _mm256_add_epi16(a, b);
        }
}
INLINE __m256i i32_op(hvd_reduce_op_t op, __m256i a, __m256i b) {
        switch (op) {
        case HVD_REDUCE_MIN: return _mm256_min_epi32(a, b);
        case HVD_REDUCE_MAX: return _mm256_max_epi32(a, b);
        case HVD_REDUCE_PRODUCT: return _mm256_mullo_epi32(a, b);
        default: return _mm256_add_epi32(a, b);
        }
}
INLINE __m256i i64_op(hvd_reduce_op_t op, __m256i a, __m256i b) {
        switch (op) {
        case HVD_REDUCE_MIN: return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
        case HVD_REDUCE_MAX: return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a));
        case HVD_REDUCE_PRODUCT: return mullo_epi64(a, b);
        default: return _mm256_add_epi64(a, b);
        }
}

/* scalar tails: the same wrapping arithmetic as reduce.c */
#define DEF_SCALAR_INT_OP(SUF, T, UT, MT)                                                                              \
        INLINE T SUF##_sop(hvd_reduce_op_t op, T a, T b) {                                                             \
                switch (op) {                                                                                          \
                case HVD_REDUCE_MIN: return C_MIN(a, b);                                                               \
                case HVD_REDUCE_MAX: return C_MAX(a, b);                                                               \
                case HVD_REDUCE_PRODUCT: return (T) (UT) ((MT) (UT) a * (MT) (UT) b);                                  \
                default: return (T) (UT) ((UT) a + (UT) b);                                                            \
                }                                                                                                      \
        }
DEF_SCALAR_INT_OP(u8, uint8_t, uint8_t, uint32_t)
DEF_SCALAR_INT_OP(i8, int8_t, uint8_t, uint32_t)
DEF_SCALAR_INT_OP(i16, int16_t, uint16_t, uint32_t)
DEF_SCALAR_INT_OP(i32, int32_t, uint32_t, uint32_t)
DEF_SCALAR_INT_OP(i64, int64_t, uint64_t, uint64_t)

/* 4 int32 -> double, times scale, clamped to [lo, hi] (NaN -> 0), truncated:
 * hvd_reduce_clamp() lane by lane. max_pd(d, lo) gives lo for NaN, the
 * ordered mask then zeroes it. */
INLINE __m128i scale_4(__m128i v, __m256d s, __m256d lo, __m256d hi) {
        __m256d d = _mm256_mul_pd(_mm256_cvtepi32_pd(v), s);
        __m256d ord = _mm256_cmp_pd(d, d, _CMP_ORD_Q);
        d = _mm256_min_pd(_mm256_max_pd(d, lo), hi);
        return _mm256_cvttpd_epi32(_mm256_and_pd(d, ord));
}
/* 16 bytes (sign- or zero-extended) through scale_4, packed back to bytes */
INLINE __m128i scale_16x8(__m128i x, bool sgn, __m256d s, __m256d lo, __m256d hi) {
#define WIDEN(b) (sgn ? _mm_cvtepi8_epi32(b) : _mm_cvtepu8_epi32(b))
        __m128i g0 = scale_4(WIDEN(x), s, lo, hi);
        __m128i g1 = scale_4(WIDEN(_mm_srli_si128(x, 4)), s, lo, hi);
        __m128i g2 = scale_4(WIDEN(_mm_srli_si128(x, 8)), s, lo, hi);
        __m128i g3 = scale_4(WIDEN(_mm_srli_si128(x, 12)), s, lo, hi);
#undef WIDEN
        __m128i w0 = _mm_packs_epi32(g0, g1), w1 = _mm_packs_epi32(g2, g3);
        return sgn ? _mm_packs_epi16(w0, w1) : _mm_packus_epi16(w0, w1);
}
INLINE __m128i scale_8x16(__m128i x, __m256d s, __m256d lo, __m256d hi) {
        __m128i g0 = scale_4(_mm_cvtepi16_epi32(x), s, lo, hi);
        __m128i g1 = scale_4(_mm_cvtepi16_epi32(_mm_srli_si128(x, 8)), s, lo, hi);
        return _mm_packs_epi32(g0, g1);
}

INLINE void u8_store(uint8_t *p, __m256i v, bool scaled, __m256d s, __m256d lo, __m256d hi) {
        if (scaled) {
                __m128i r0 = scale_16x8(_mm256_castsi256_si128(v), false, s, lo, hi);
                __m128i r1 = scale_16x8(_mm256_extracti128_si256(v, 1), false, s, lo, hi);
                v = _mm256_set_m128i(r1, r0);
        }
        _mm256_storeu_si256((__m256i *) p, v);
}
INLINE void i8_store(int8_t *p, __m256i v, bool scaled, __m256d s, __m256d lo, __m256d hi) {
        if (scaled) {
                __m128i r0 = scale_16x8(_mm256_castsi256_si128(v), true, s, lo, hi);
                __m128i r1 = scale_16x8(_mm256_extracti128_si256(v, 1), true, s, lo, hi);
                v = _mm256_set_m128i(r1, r0);
        }
        _mm256_storeu_si256((__m256i *) p, v);
}
INLINE void i16_store(int16_t *p, __m256i v, bool scaled, __m256d s, __m256d lo, __m256d hi) {
        if (scaled) {
                __m128i r0 = scale_8x16(_mm256_castsi256_si128(v), s, lo, hi);
                __m128i r1 = scale_8x16(_mm256_extracti128_si256(v, 1), s, lo, hi);
                v = _mm256_set_m128i(r1, r0);
        }
        _mm256_storeu_si256((__m256i *) p, v);
}
INLINE void i32_store(int32_t *p, __m256i v, bool scaled, __m256d s, __m256d lo, __m256d hi) {
        if (scaled) {
                __m128i r0 = scale_4(_mm256_castsi256_si128(v), s, lo, hi);
                __m128i r1 = scale_4(_mm256_extracti128_si256(v, 1), s, lo, hi);
                v = _mm256_set_m128i(r1, r0);
        }
        _mm256_storeu_si256((__m256i *) p, v);
}
/* no int64 <-> double conversion in AVX2: scale lane by lane */
INLINE void i64_store(int64_t *p, __m256i v, bool scaled, double scale) {
        _mm256_storeu_si256((__m256i *) p, v);
        if (scaled)
                for (int j = 0; j < 4; j++)
                        p[j] = hvd_reduce_scale_i64(p[j], scale);
}

#define DEF_INT_KERNEL(SUF, T, W, LO, HI)                                                                              \
        INLINE void SUF##_body(hvd_reduce_op_t op, bool scaled, void *dst_, const void *const *srcs, size_t n,         \
                               size_t count, double scale) {                                                           \
                T *dst = dst_;                                                                                         \
                const __m256d vs = _mm256_set1_pd(scale), vlo = _mm256_set1_pd(LO), vhi = _mm256_set1_pd(HI);          \
                (void) vs, (void) vlo, (void) vhi; /* int64 scales lane by lane */                                     \
                KERNEL_LOOP(T, __m256i, W, SI_LOADV, SUF##_OPV, SUF##_STOREV, T, ID, SUF##_OPS, SUF##_STORES);         \
        }                                                                                                              \
        AVX2 static void SUF##_kernel(hvd_reduce_op_t op, void *dst_, const void *const *srcs, size_t n, size_t count, \
                                      double scale) {                                                                  \
                DISPATCH_OPS(SUF##_body)                                                                               \
        }
#define INT_STORES(T, a, LO, HI) (scaled ? (T) hvd_reduce_clamp((double) (a) *scale, LO, HI) : (a))

#define u8_OPV(a, b)    u8_op(op, a, b)
#define u8_OPS(a, b)    u8_sop(op, a, b)
#define u8_STOREV(p, v) u8_store(p, v, scaled, vs, vlo, vhi)
#define u8_STORES(a)    INT_STORES(uint8_t, a, 0.0, 255.0)
DEF_INT_KERNEL(u8, uint8_t, 32, 0.0, 255.0)

#define i8_OPV(a, b)    i8_op(op, a, b)
#define i8_OPS(a, b)    i8_sop(op, a, b)
#define i8_STOREV(p, v) i8_store(p, v, scaled, vs, vlo, vhi)
#define i8_STORES(a)    INT_STORES(int8_t, a, -128.0, 127.0)
DEF_INT_KERNEL(i8, int8_t, 32, -128.0, 127.0)

#define i16_OPV(a, b)    i16_op(op, a, b)
#define i16_OPS(a, b)    i16_sop(op, a, b)
#define i16_STOREV(p, v) i16_store(p, v, scaled, vs, vlo, vhi)
#define i16_STORES(a)    INT_STORES(int16_t, a, -32768.0, 32767.0)
DEF_INT_KERNEL(i16, int16_t, 16, -32768.0, 32767.0)

#define i32_OPV(a, b)    i32_op(op, a, b)
#define i32_OPS(a, b)    i32_sop(op, a, b)
#define i32_STOREV(p, v) i32_store(p, v, scaled, vs, vlo, vhi)
#define i32_STORES(a)    INT_STORES(int32_t, a, -2147483648.0, 2147483647.0)
DEF_INT_KERNEL(i32, int32_t, 8, -2147483648.0, 2147483647.0)

#define i64_OPV(a, b)    i64_op(op, a, b)
#define i64_OPS(a, b)    i64_sop(op, a, b)
#define i64_STOREV(p, v) i64_store(p, v, scaled, scale)
#define i64_STORES(a)    (scaled ? hvd_reduce_scale_i64(a, scale) : (a))
DEF_INT_KERNEL(i64, int64_t, 4, 0.0, 0.0)

/* ---- bool: track "is zero" masks; SUM/MAX = or, MIN/PRODUCT = and ---- */

#define B_LOADV(p) _mm256_cmpeq_epi8(SI_LOADV(p), _mm256_setzero_si256())
/* or: zero only if all are zero; and: zero if any is zero */
#define B_OPV(a, b)    (is_and ? _mm256_or_si256(a, b) : _mm256_and_si256(a, b))
#define B_STOREV(p, z) _mm256_storeu_si256((__m256i *) (p), _mm256_andnot_si256(z, _mm256_set1_epi8(1)))
#define B_LOADS(v)     ((uint8_t) ((v) != 0))
#define B_OPS(a, b)    ((uint8_t) (is_and ? (a) & (b) : (a) | (b)))
INLINE void bool_body(hvd_reduce_op_t op, void *dst_, const void *const *srcs, size_t n, size_t count) {
        uint8_t *dst = dst_;
        const bool is_and = op == HVD_REDUCE_MIN || op == HVD_REDUCE_PRODUCT;
        KERNEL_LOOP(uint8_t, __m256i, 32, B_LOADV, B_OPV, B_STOREV, uint8_t, B_LOADS, B_OPS, ID);
}
AVX2 static void bool_kernel(hvd_reduce_op_t op, void *dst_, const void *const *srcs, size_t n, size_t count,
                             double scale) {
        (void) scale; /* bool is never scaled */
        if (op == HVD_REDUCE_MIN || op == HVD_REDUCE_PRODUCT)
                bool_body(HVD_REDUCE_MIN, dst_, srcs, n, count);
        else
                bool_body(HVD_REDUCE_SUM, dst_, srcs, n, count);
}

typedef void (*kernel_fn)(hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t n, size_t count, double scale);
static const kernel_fn avx2_kernels[_HVD_DTYPE_COUNT] = {
        [HVD_UINT8] = u8_kernel,      [HVD_INT8] = i8_kernel,     [HVD_INT16] = i16_kernel,
        [HVD_INT32] = i32_kernel,     [HVD_INT64] = i64_kernel,   [HVD_FLOAT16] = f16_kernel,
        [HVD_BFLOAT16] = bf16_kernel, [HVD_FLOAT32] = f32_kernel, [HVD_FLOAT64] = f64_kernel,
        [HVD_BOOL] = bool_kernel,
};

void hvd_reduce_n_avx2(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t nsrc,
                       size_t count, double scale) {
        avx2_kernels[dt](op, dst, srcs, nsrc, count, scale);
}

/* float32 SUM with non-temporal stores: dst is written around the caches
 * (for outputs larger than the caches, which would otherwise be read in
 * before being overwritten, and evict the data still to be read). The
 * same additions in the same order as the SUM kernel, so the same bits.
 * Elements before dst's first 32-byte boundary and after the last whole
 * vector take the scalar formula. */
AVX2 void hvd_reduce_sum_f32_stream_avx2(float *dst, const float *const *srcs, size_t n, size_t count, float scale,
                                         bool scaled) {
        size_t i = 0;
        for (; i < count && ((uintptr_t) (dst + i) & 31); i++) {
                float a = srcs[0][i];
                for (size_t k = 1; k < n; k++)
                        a = a + srcs[k][i];
                dst[i] = scaled ? a * scale : a;
        }
        __m256 sv = _mm256_set1_ps(scale);
        for (; count - i >= 16; i += 16) {
                __m256 a0 = _mm256_loadu_ps(srcs[0] + i), a1 = _mm256_loadu_ps(srcs[0] + i + 8);
                for (size_t k = 1; k < n; k++) {
                        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(srcs[k] + i));
                        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(srcs[k] + i + 8));
                }
                if (scaled) {
                        a0 = _mm256_mul_ps(a0, sv);
                        a1 = _mm256_mul_ps(a1, sv);
                }
                _mm256_stream_ps(dst + i, a0);
                _mm256_stream_ps(dst + i + 8, a1);
        }
        _mm_sfence();
        for (; i < count; i++) {
                float a = srcs[0][i];
                for (size_t k = 1; k < n; k++)
                        a = a + srcs[k][i];
                dst[i] = scaled ? a * scale : a;
        }
}

/* memcpy in 128-byte blocks, with non-temporal stores when nt (a constant
 * in both callers). The bytes before dst's first 32-byte boundary and
 * after the last whole block go through memcpy (under 160 bytes: no rep
 * movsb). */
static inline __attribute__((always_inline)) AVX2 void copy_blocks(uint8_t *dst, const uint8_t *src, size_t bytes,
                                                                   bool nt) {
        size_t head = HVD_MIN(bytes, (size_t) (-(uintptr_t) dst & 31));
        memcpy(dst, src, head);
        size_t i = head;
        for (; bytes - i >= 128; i += 128) {
                __m256i a0 = _mm256_loadu_si256((const __m256i *) (src + i));
                __m256i a1 = _mm256_loadu_si256((const __m256i *) (src + i + 32));
                __m256i a2 = _mm256_loadu_si256((const __m256i *) (src + i + 64));
                __m256i a3 = _mm256_loadu_si256((const __m256i *) (src + i + 96));
                __m256i *d = (__m256i *) (dst + i);
                if (nt) {
                        _mm256_stream_si256(d, a0);
                        _mm256_stream_si256(d + 1, a1);
                        _mm256_stream_si256(d + 2, a2);
                        _mm256_stream_si256(d + 3, a3);
                } else {
                        _mm256_store_si256(d, a0);
                        _mm256_store_si256(d + 1, a1);
                        _mm256_store_si256(d + 2, a2);
                        _mm256_store_si256(d + 3, a3);
                }
        }
        if (nt)
                _mm_sfence();
        memcpy(dst + i, src + i, bytes - i);
}

AVX2 void hvd_copy_avx2(uint8_t *dst, const uint8_t *src, size_t bytes) {
        copy_blocks(dst, src, bytes, false);
}

AVX2 void hvd_copy_stream_avx2(uint8_t *dst, const uint8_t *src, size_t bytes) {
        copy_blocks(dst, src, bytes, true);
}

#else
/* not x86 or no per-function targets: reduce.c uses the portable kernels */
typedef int hvd_reduce_avx2_unused;
#endif
