/* check_reduce.c — unit tests of the CPU reduction kernels (common/reduce.c,
 * common/reduce_avx2.c). Every dtype, op, source count, tail length, scale
 * and aliasing of dst is compared bit for bit against an independent
 * scalar reference written here (its own half/bfloat16 conversions via
 * ldexp/rint), on the portable path and, where the CPU has it, on AVX2. */
#include "config.h"

#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce-internal.h"
#include "reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h> /* _mm_getcsr: FTZ/DAZ */
#define HAVE_MXCSR 1
#else
#define HAVE_MXCSR 0
#endif

/* ck_assert_msg() records a mark point per call, which costs a write; in
 * loops over millions of elements only report failures. */
#define REQUIRE(cond, ...)                                                                                             \
        do {                                                                                                           \
                if (!(cond))                                                                                           \
                        ck_abort_msg("'" #cond "': " __VA_ARGS__);                                                     \
        } while (0)

enum { IMPL_GENERIC, IMPL_AVX2, IMPL_COUNT };
static const char *const impl_names[IMPL_COUNT] = { "generic", "avx2" };

/* Select a kernel family; false if this CPU cannot run it (the test then
 * passes vacuously; main() says so once). */
static bool select_impl(int impl) {
        if (impl == IMPL_AVX2 && !hvd_reduce_cpu_has_avx2())
                return false;
        hvd_reduce_force_generic(impl == IMPL_GENERIC);
        ck_assert_str_eq(hvd_reduce_impl(), impl_names[impl]);
        return true;
}

static void teardown(void) {
        hvd_reduce_force_generic(false);
}

/* ---- deterministic random numbers (splitmix64) ---- */

static uint64_t rng_state;
static uint64_t rnd(void) {
        uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

/* ---- reference conversions, by arithmetic rather than bit tricks ---- */

static float f_from_bits(uint32_t u) {
        float f;
        memcpy(&f, &u, 4);
        return f;
}
static uint32_t f_bits(float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        return u;
}

static float ref_half_to_float(uint16_t h) {
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v;
        if (e == 0)
                v = ldexp(m, -24);
        else if (e == 0x1f)
                v = m ? NAN : INFINITY;
        else
                v = ldexp(1024 + m, e - 25);
        return (float) ((h & 0x8000) ? -v : v);
}

static float ref_bf16_to_float(uint16_t b) {
        int e = (b >> 7) & 0xff, m = b & 0x7f;
        double v;
        if (e == 0)
                v = ldexp(m, -133);
        else if (e == 0xff)
                v = m ? NAN : INFINITY;
        else
                v = ldexp(128 + m, e - 134);
        return (float) ((b & 0x8000) ? -v : v);
}

/* x rounded to nearest even with `prec` significand bits, `emin` the least
 * normal exponent; beyond `maxv` it is infinite. */
static double ref_round(double x, int prec, int emin, double maxv) {
        if (x == 0 || isinf(x))
                return x;
        int e;
        frexp(fabs(x), &e);
        e -= 1; /* |x| in [2^e, 2^(e+1)) */
        if (e < emin)
                e = emin;
        double q = ldexp(1.0, e - (prec - 1));
        double r = rint(fabs(x) / q) * q;
        if (r > maxv)
                r = INFINITY;
        return copysign(r, x);
}

static uint16_t ref_float_to_half(float f) {
        if (isnan(f))
                return (uint16_t) (signbit(f) ? 0xfe00 : 0x7e00);
        double r = ref_round(f, 11, -14, 65504.0);
        uint16_t sign = signbit(r) ? 0x8000 : 0;
        double a = fabs(r);
        if (isinf(a))
                return sign | 0x7c00;
        if (a < 0x1p-14)
                return (uint16_t) (sign | (uint16_t) (a * 0x1p24));
        int e;
        frexp(a, &e);
        e -= 1;
        return (uint16_t) (sign | (uint16_t) ((e + 15) << 10) | (uint16_t) (ldexp(a, 10 - e) - 1024));
}

static uint16_t ref_float_to_bf16(float f) {
        if (isnan(f))
                return (uint16_t) (signbit(f) ? 0xffc0 : 0x7fc0);
        double r = ref_round(f, 8, -126, ldexp(255, 120));
        return (uint16_t) (f_bits((float) r) >> 16); /* r is exact in float */
}

static bool half_is_nan(uint16_t h) {
        return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}
static bool bf16_is_nan(uint16_t b) {
        return (b & 0x7f80) == 0x7f80 && (b & 0x7f);
}

/* ---- reference reduction ---- */

static int64_t get_int(hvd_dtype_t dt, const void *buf, size_t i) {
        switch (dt) {
        case HVD_UINT8: return ((const uint8_t *) buf)[i];
        case HVD_INT8: return ((const int8_t *) buf)[i];
        case HVD_INT16: return ((const int16_t *) buf)[i];
        case HVD_INT32: return ((const int32_t *) buf)[i];
        case HVD_INT64: return ((const int64_t *) buf)[i];
        case HVD_BOOL: return ((const uint8_t *) buf)[i];
        default: ck_abort_msg("not an integer dtype");
        }
        return 0;
}

/* the value modulo 2^bits of the type, as the type */
static void put_int(hvd_dtype_t dt, void *buf, size_t i, uint64_t v) {
        switch (dt) {
        case HVD_UINT8: ((uint8_t *) buf)[i] = (uint8_t) v; break;
        case HVD_INT8: ((int8_t *) buf)[i] = (int8_t) (uint8_t) v; break;
        case HVD_INT16: ((int16_t *) buf)[i] = (int16_t) (uint16_t) v; break;
        case HVD_INT32: ((int32_t *) buf)[i] = (int32_t) (uint32_t) v; break;
        case HVD_INT64: ((int64_t *) buf)[i] = (int64_t) v; break;
        default: ck_abort_msg("not an integer dtype");
        }
}

/* (double) v * scale, truncated toward zero, saturated, NaN -> 0 */
static int64_t ref_scale_int(hvd_dtype_t dt, int64_t v, double scale) {
        double x = (double) v * scale, lo, hi;
        if (isnan(x))
                return 0;
        switch (dt) {
        case HVD_UINT8: lo = 0, hi = UINT8_MAX; break;
        case HVD_INT8: lo = INT8_MIN, hi = INT8_MAX; break;
        case HVD_INT16: lo = INT16_MIN, hi = INT16_MAX; break;
        case HVD_INT32: lo = INT32_MIN, hi = INT32_MAX; break;
        default:
                if (x >= 0x1p63)
                        return INT64_MAX;
                if (x < -0x1p63)
                        return INT64_MIN;
                return (int64_t) trunc(x);
        }
        return (int64_t) trunc(x < lo ? lo : x > hi ? hi : x);
}

static float ref_fop(hvd_reduce_op_t op, float a, float b) {
        switch (op) {
        case HVD_REDUCE_MIN: return b < a ? b : a;
        case HVD_REDUCE_MAX: return b > a ? b : a;
        case HVD_REDUCE_PRODUCT: return a * b;
        default: return a + b;
        }
}
static double ref_dop(hvd_reduce_op_t op, double a, double b) {
        switch (op) {
        case HVD_REDUCE_MIN: return b < a ? b : a;
        case HVD_REDUCE_MAX: return b > a ? b : a;
        case HVD_REDUCE_PRODUCT: return a * b;
        default: return a + b;
        }
}

static void ref_reduce(hvd_dtype_t dt, hvd_reduce_op_t op, void *dst, const void *const *srcs, size_t n, size_t count,
                       double scale) {
        for (size_t i = 0; i < count; i++) {
                switch (dt) {
                case HVD_FLOAT32: {
                        float a = ((const float *) srcs[0])[i];
                        for (size_t k = 1; k < n; k++)
                                a = ref_fop(op, a, ((const float *) srcs[k])[i]);
                        if (scale != 1.0)
                                a = a * (float) scale;
                        ((float *) dst)[i] = a;
                        break;
                }
                case HVD_FLOAT64: {
                        double a = ((const double *) srcs[0])[i];
                        for (size_t k = 1; k < n; k++)
                                a = ref_dop(op, a, ((const double *) srcs[k])[i]);
                        if (scale != 1.0)
                                a = a * scale;
                        ((double *) dst)[i] = a;
                        break;
                }
                case HVD_FLOAT16:
                case HVD_BFLOAT16: {
                        float (*tof)(uint16_t) = dt == HVD_FLOAT16 ? ref_half_to_float : ref_bf16_to_float;
                        float a = tof(((const uint16_t *) srcs[0])[i]);
                        for (size_t k = 1; k < n; k++)
                                a = ref_fop(op, a, tof(((const uint16_t *) srcs[k])[i]));
                        if (scale != 1.0)
                                a = a * (float) scale;
                        ((uint16_t *) dst)[i] = dt == HVD_FLOAT16 ? ref_float_to_half(a) : ref_float_to_bf16(a);
                        break;
                }
                case HVD_BOOL: {
                        bool is_and = op == HVD_REDUCE_MIN || op == HVD_REDUCE_PRODUCT;
                        bool a = is_and;
                        for (size_t k = 0; k < n; k++) {
                                bool b = ((const uint8_t *) srcs[k])[i] != 0;
                                a = is_and ? a && b : a || b;
                        }
                        ((uint8_t *) dst)[i] = a;
                        break;
                }
                default: {
                        uint64_t u = op == HVD_REDUCE_PRODUCT ? 1 : 0;
                        int64_t m = get_int(dt, srcs[0], i);
                        for (size_t k = 0; k < n; k++) {
                                int64_t v = get_int(dt, srcs[k], i);
                                if (op == HVD_REDUCE_PRODUCT)
                                        u *= (uint64_t) v;
                                else
                                        u += (uint64_t) v;
                                if (op == HVD_REDUCE_MIN && v < m)
                                        m = v;
                                if (op == HVD_REDUCE_MAX && v > m)
                                        m = v;
                        }
                        if (op == HVD_REDUCE_MIN || op == HVD_REDUCE_MAX)
                                u = (uint64_t) m;
                        put_int(dt, dst, i, u);
                        if (scale != 1.0)
                                put_int(dt, dst, i, (uint64_t) ref_scale_int(dt, get_int(dt, dst, i), scale));
                        break;
                }
                }
        }
}

/* Equal bits, except that any NaN equals any NaN of the same type. */
static bool elem_equal(hvd_dtype_t dt, const void *a, const void *b, size_t i) {
        size_t es = hvd_dtype_size(dt);
        if (memcmp((const char *) a + i * es, (const char *) b + i * es, es) == 0)
                return true;
        switch (dt) {
        case HVD_FLOAT32: return isnan(((const float *) a)[i]) && isnan(((const float *) b)[i]);
        case HVD_FLOAT64: return isnan(((const double *) a)[i]) && isnan(((const double *) b)[i]);
        case HVD_FLOAT16: return half_is_nan(((const uint16_t *) a)[i]) && half_is_nan(((const uint16_t *) b)[i]);
        case HVD_BFLOAT16: return bf16_is_nan(((const uint16_t *) a)[i]) && bf16_is_nan(((const uint16_t *) b)[i]);
        default: return false;
        }
}

static uint64_t elem_bits(hvd_dtype_t dt, const void *buf, size_t i) {
        uint64_t v = 0;
        memcpy(&v, (const char *) buf + i * hvd_dtype_size(dt), hvd_dtype_size(dt));
        return v;
}

/* index of the first difference in [0, count), or SIZE_MAX */
static size_t first_diff(hvd_dtype_t dt, const void *got, const void *want, size_t count) {
        for (size_t i = 0; i < count; i++)
                if (!elem_equal(dt, got, want, i))
                        return i;
        return SIZE_MAX;
}

/* ---- test data ---- */

static double nice_value(hvd_dtype_t dt) {
        /* full-width significands over a modest exponent range: sums round */
        int64_t m = (int64_t) (rnd() & 0xffffff) - 0x800000;
        switch (dt) {
        case HVD_FLOAT64:
                return ldexp((double) ((int64_t) (rnd() >> 11) - (INT64_C(1) << 52)), (int) (rnd() % 20) - 62);
        case HVD_FLOAT16: return ldexp((double) m, (int) (rnd() % 32) - 47);
        default: return ldexp((double) m, (int) (rnd() % 17) - 30);
        }
}

static void fill_random(hvd_dtype_t dt, void *buf, size_t count) {
        static const float specials[] = { 0.0f,         -0.0f,         INFINITY, -INFINITY, NAN,  -NAN, FLT_MIN,
                                          FLT_TRUE_MIN, -FLT_TRUE_MIN, FLT_MAX,  -FLT_MAX,  1.0f, -1.0f };
        for (size_t i = 0; i < count; i++) {
                uint64_t r = rnd();
                unsigned kind = (unsigned) (r & 15); /* 0: special, 1-2: random bits, else nice */
                float sp = specials[(r >> 8) % (sizeof(specials) / sizeof(specials[0]))];
                switch (dt) {
                case HVD_FLOAT32:
                        ((float *) buf)[i] = kind == 0   ? sp
                                             : kind <= 2 ? f_from_bits((uint32_t) (r >> 32))
                                                         : (float) nice_value(dt);
                        break;
                case HVD_FLOAT64: {
                        double d;
                        uint64_t b = rnd();
                        memcpy(&d, &b, 8);
                        ((double *) buf)[i] = kind == 0 ? (double) sp : kind <= 2 ? d : nice_value(dt);
                        break;
                }
                case HVD_FLOAT16:
                        ((uint16_t *) buf)[i] = kind == 0   ? ref_float_to_half(sp)
                                                : kind <= 2 ? (uint16_t) (r >> 32)
                                                            : ref_float_to_half((float) nice_value(dt));
                        break;
                case HVD_BFLOAT16:
                        ((uint16_t *) buf)[i] = kind == 0   ? ref_float_to_bf16(sp)
                                                : kind <= 2 ? (uint16_t) (r >> 32)
                                                            : ref_float_to_bf16((float) nice_value(dt));
                        break;
                case HVD_BOOL: /* half false, the rest any non-zero byte */
                        ((uint8_t *) buf)[i] = (r & 1) ? 0 : (uint8_t) ((r >> 8) % 255 + 1);
                        break;
                default: /* integers: random bits, sometimes small */
                        put_int(dt, buf, i, kind < 8 ? r >> 16 : (uint64_t) ((int64_t) (r >> 40) % 7 - 3));
                        break;
                }
        }
}

/* ---- the main matrix ---- */

#define MAX_SRC 5
#define GUARD   5 /* elements of canary on both sides of dst */
static const size_t counts[] = { 0,  1,  2,  3,  4,   7,   8,   15,  16,  17,  31,   32,
                                 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4099 };
static const double scales[] = { 1.0, 0.5, -1.5, 3.0 };
enum { ALIAS_NONE, ALIAS_FIRST, ALIAS_LAST, ALIAS_COUNT };
static const char *const alias_names[] = { "none", "dst=srcs[0]", "dst=srcs[n-1]" };

static void check_one(int impl, hvd_dtype_t dt, hvd_reduce_op_t op, size_t n, size_t count, double scale, int alias) {
        size_t es = hvd_dtype_size(dt);
        void *base[MAX_SRC];
        const void *srcs[MAX_SRC];
        /* each source ends exactly at its allocation (ASan sees overreads)
         * and starts 1-3 elements past it (misaligned for the vector loads) */
        for (size_t k = 0; k < n; k++) {
                size_t off = k % 3 + 1;
                base[k] = malloc((count + off) * es);
                REQUIRE(base[k], "out of memory");
                fill_random(dt, (char *) base[k] + off * es, count);
                srcs[k] = (char *) base[k] + off * es;
        }
        char *want = malloc((count + 1) * es);
        char *dbase = malloc((count + 2 * GUARD) * es);
        REQUIRE(want, "out of memory");
        REQUIRE(dbase, "out of memory");
        char *dst = dbase + GUARD * es;
        memset(dbase, 0xa5, (count + 2 * GUARD) * es);

        ref_reduce(dt, op, want, srcs, n, count, scale);

        if (alias != ALIAS_NONE) {
                size_t k = alias == ALIAS_FIRST ? 0 : n - 1;
                memcpy(dst, srcs[k], count * es);
                srcs[k] = dst;
        }
        hvd_reduce_n(dt, op, dst, srcs, n, count, scale);

        size_t bad = first_diff(dt, dst, want, count);
        REQUIRE(bad == SIZE_MAX,
                "%s %s op=%d nsrc=%zu count=%zu scale=%g alias=%s: [%zu] = %#" PRIx64 ", want %#" PRIx64,
                impl_names[impl], hvd_dtype_name(dt), (int) op, n, count, scale, alias_names[alias], bad,
                elem_bits(dt, dst, bad), elem_bits(dt, want, bad));
        for (size_t i = 0; i < GUARD * es; i++) {
                REQUIRE((unsigned char) dbase[i] == 0xa5, "%s %s: wrote before dst", impl_names[impl],
                        hvd_dtype_name(dt));
                REQUIRE((unsigned char) dst[count * es + i] == 0xa5, "%s %s op=%d nsrc=%zu count=%zu: wrote past dst",
                        impl_names[impl], hvd_dtype_name(dt), (int) op, n, count);
        }
        for (size_t k = 0; k < n; k++)
                free(base[k]);
        free(want);
        free(dbase);
}

/* _i = impl * _HVD_DTYPE_COUNT + dtype */
START_TEST(test_reduce_matches_reference) {
        int impl = _i / _HVD_DTYPE_COUNT;
        hvd_dtype_t dt = (hvd_dtype_t) (_i % _HVD_DTYPE_COUNT);
        if (!select_impl(impl))
                return;
        rng_state = (uint64_t) _i * 1000003u;
        for (int op = 0; op < _HVD_REDUCE_COUNT; op++)
                for (size_t n = 1; n <= MAX_SRC; n++)
                        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                                for (size_t s = 0; s < sizeof(scales) / sizeof(scales[0]); s++)
                                        for (int alias = 0; alias < ALIAS_COUNT; alias++)
                                                check_one(impl, dt, (hvd_reduce_op_t) op, n, counts[c], scales[s],
                                                          alias);
}
END_TEST

/* The two kernel families agree on long random buffers, every op; also
 * with flush-to-zero, and with denormals-are-zero, as some frameworks set
 * them (the reference's arithmetic differs then, the kernels must not).
 * Under DAZ only the arithmetic ops are compared: MIN/MAX of a subnormal
 * may give it or a zero of the same sign (equal values under DAZ). */
START_TEST(test_generic_and_avx2_agree) {
        hvd_dtype_t dt = (hvd_dtype_t) (_i % _HVD_DTYPE_COUNT);
        int mode = _i / _HVD_DTYPE_COUNT; /* 0: default, 1: FTZ, 2: FTZ + DAZ */
        if (!hvd_reduce_cpu_has_avx2() || (mode && !HAVE_MXCSR))
                return;
        const size_t count = 65541, es = hvd_dtype_size(dt);
        rng_state = 77 + (uint64_t) _i;
        void *s[4];
        for (int k = 0; k < 4; k++) {
                s[k] = malloc(count * es);
                ck_assert_ptr_nonnull(s[k]);
                fill_random(dt, s[k], count);
        }
        void *a = malloc(count * es), *b = malloc(count * es);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
#if HAVE_MXCSR
        unsigned saved_csr = _mm_getcsr();
        _mm_setcsr(saved_csr | (mode >= 1 ? 0x8000 : 0) | (mode == 2 ? 0x0040 : 0));
#endif
        const void *const *srcs = (const void *const *) s;
        for (int op = 0; op < _HVD_REDUCE_COUNT; op++)
                for (int sc = 0; sc < 3; sc++) {
                        double scale = sc == 0 ? 1.0 : sc == 1 ? 0.25 : 0x1p-20;
                        if (mode == 2 && (op == HVD_REDUCE_MIN || op == HVD_REDUCE_MAX))
                                continue;
                        hvd_reduce_force_generic(true);
                        hvd_reduce_n(dt, (hvd_reduce_op_t) op, a, srcs, 4, count, scale);
                        hvd_reduce_force_generic(false);
                        hvd_reduce_n(dt, (hvd_reduce_op_t) op, b, srcs, 4, count, scale);
                        size_t bad = first_diff(dt, a, b, count);
                        ck_assert_msg(bad == SIZE_MAX,
                                      "%s op=%d scale=%g mode=%d: generic [%zu] = %#" PRIx64 ", avx2 %#" PRIx64,
                                      hvd_dtype_name(dt), op, scale, mode, bad, elem_bits(dt, a, bad),
                                      elem_bits(dt, b, bad));
                }
#if HAVE_MXCSR
        _mm_setcsr(saved_csr);
#endif
        for (int k = 0; k < 4; k++)
                free(s[k]);
        free(a);
        free(b);
}
END_TEST

/* The streaming-store variant writes the same bits as hvd_reduce_n for
 * every dtype and op (it falls back where it has no kernel), at every
 * alignment of the destination, with 2 to 4 sources, scaled or not. */
START_TEST(test_reduce_stream_agrees) {
        hvd_dtype_t dt = (hvd_dtype_t) _i;
        const size_t count = 4099, es = hvd_dtype_size(dt);
        rng_state = 991 + (uint64_t) _i;
        void *s[4];
        for (int k = 0; k < 4; k++) {
                s[k] = malloc(count * es);
                ck_assert_ptr_nonnull(s[k]);
                fill_random(dt, s[k], count);
        }
        size_t bytes = (count * es + 64 + 63) / 64 * 64;
        uint8_t *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        const void *const *srcs = (const void *const *) s;
        for (int op = 0; op < _HVD_REDUCE_COUNT; op++)
                for (size_t n = 2; n <= 4; n++)
                        for (int sc = 0; sc < 2; sc++)
                                for (size_t shift = 0; shift < 64; shift += es * 3) {
                                        double scale = sc ? 0.25 : 1.0;
                                        size_t c = count - shift / es;
                                        hvd_reduce_n(dt, (hvd_reduce_op_t) op, a + shift, srcs, n, c, scale);
                                        memset(b + shift, 0x5a, c * es);
                                        hvd_reduce_n_stream(dt, (hvd_reduce_op_t) op, b + shift, srcs, n, c, scale);
                                        size_t bad = first_diff(dt, a + shift, b + shift, c);
                                        ck_assert_msg(bad == SIZE_MAX,
                                                      "%s op=%d n=%zu scale=%g shift=%zu: [%zu] = %#" PRIx64
                                                      ", streamed %#" PRIx64,
                                                      hvd_dtype_name(dt), op, n, scale, shift, bad,
                                                      elem_bits(dt, a + shift, bad), elem_bits(dt, b + shift, bad));
                                }
        for (int k = 0; k < 4; k++)
                free(s[k]);
        free(a);
        free(b);
}
END_TEST

/* ---- copy, copy_stream ---- */

#if HVD_REDUCE_HAVE_AVX2
static void copy_avx2(void *dst, const void *src, size_t bytes) {
        hvd_copy_avx2(dst, src, bytes);
}
#endif

/* The data plane's copies (hvd_copy, hvd_copy_stream, and hvd_copy's AVX2
 * loop itself, which it takes only on AMD CPUs) copy exactly, whatever the
 * alignment of either side and the length (head and tail around the
 * 128-byte blocks), and write nothing past the end. */
START_TEST(test_copy_stream) {
        if (!select_impl(_i))
                return;
        struct {
                const char *name;
                void (*copy)(void *, const void *, size_t);
        } fns[] = {
                { "hvd_copy_stream", hvd_copy_stream },
                { "hvd_copy", hvd_copy },
#if HVD_REDUCE_HAVE_AVX2
                { "hvd_copy_avx2", hvd_reduce_cpu_has_avx2() ? copy_avx2 : NULL },
#endif
        };
        static const size_t lens[] = { 0, 1, 31, 2047, 2048, 4095, 4096, 4097, 4096 + 127, 65536 + 33, 1u << 20 };
        size_t cap = (1u << 20) + 256;
        uint8_t *src = malloc(cap), *dst = malloc(cap);
        ck_assert_ptr_nonnull(src);
        ck_assert_ptr_nonnull(dst);
        rng_state = 77;
        for (size_t i = 0; i < cap; i++)
                src[i] = (uint8_t) rnd();
        for (size_t f = 0; f < sizeof(fns) / sizeof(fns[0]); f++)
                for (size_t l = 0; fns[f].copy && l < sizeof(lens) / sizeof(lens[0]); l++)
                        for (size_t so = 0; so < 64; so += 13)
                                for (size_t d = 0; d < 64; d += 7) {
                                        size_t len = lens[l];
                                        memset(dst, 0xa5, cap);
                                        fns[f].copy(dst + d, src + so, len);
                                        ck_assert_msg(memcmp(dst + d, src + so, len) == 0,
                                                      "%s %s len=%zu src+%zu dst+%zu: copy differs", fns[f].name,
                                                      impl_names[_i], len, so, d);
                                        for (size_t i = 0; i < d; i++)
                                                ck_assert_uint_eq(dst[i], 0xa5);
                                        for (size_t i = d + len; i < d + len + 64 && i < cap; i++)
                                                ck_assert_uint_eq(dst[i], 0xa5);
                                }
        free(src);
        free(dst);
}
END_TEST

/* ---- scale_copy ---- */

START_TEST(test_scale_copy) {
        int impl = _i / _HVD_DTYPE_COUNT;
        hvd_dtype_t dt = (hvd_dtype_t) (_i % _HVD_DTYPE_COUNT);
        if (!select_impl(impl))
                return;
        static const double sc[] = { 1.0, 0.5, -2.0 };
        size_t es = hvd_dtype_size(dt);
        rng_state = 4242 + (uint64_t) _i;
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (size_t s = 0; s < sizeof(sc) / sizeof(sc[0]); s++)
                        for (int in_place = 0; in_place < 2; in_place++) {
                                size_t count = counts[c];
                                char *src = malloc(count * es + 1), *want = malloc(count * es + 1);
                                char *dst = malloc(count * es + 1);
                                ck_assert(src && want && dst);
                                fill_random(dt, src, count);
                                const void *one[1] = { src };
                                if (sc[s] == 1.0 || dt == HVD_BOOL)
                                        memcpy(want, src, count * es); /* a plain copy */
                                else
                                        ref_reduce(dt, HVD_REDUCE_SUM, want, one, 1, count, sc[s]);
                                if (in_place) {
                                        hvd_scale_copy(dt, src, src, count, sc[s]);
                                        memcpy(dst, src, count * es);
                                } else
                                        hvd_scale_copy(dt, dst, src, count, sc[s]);
                                size_t bad = first_diff(dt, dst, want, count);
                                ck_assert_msg(bad == SIZE_MAX, "%s %s count=%zu scale=%g in_place=%d: [%zu]",
                                              impl_names[impl], hvd_dtype_name(dt), count, sc[s], in_place, bad);
                                free(src);
                                free(want);
                                free(dst);
                        }
}
END_TEST

/* ---- integer scaling: truncation toward zero, saturation, NaN ---- */

START_TEST(test_int_scale_saturates) {
        int impl = _i;
        if (!select_impl(impl))
                return;
        static const hvd_dtype_t dts[] = { HVD_UINT8, HVD_INT8, HVD_INT16, HVD_INT32, HVD_INT64 };
        static const double sc[] = { -1.0, 3.0, -1.5, 1e10, -1e-3, 0.0, NAN, INFINITY, -INFINITY };
        enum { COUNT = 71 }; /* two vectors of int8 plus a tail */
        for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
                for (size_t s = 0; s < sizeof(sc) / sizeof(sc[0]); s++) {
                        hvd_dtype_t dt = dts[d];
                        void *buf = malloc(COUNT * 8), *out = malloc(COUNT * 8), *want = malloc(COUNT * 8);
                        ck_assert(buf && out && want);
                        static const int64_t extremes[] = { INT64_MIN, INT64_MAX, INT32_MIN, INT32_MAX, -129, -128, 127,
                                                            128,       255,       -7,        7,         -1,   0,    1 };
                        for (size_t i = 0; i < COUNT; i++)
                                put_int(dt, buf, i, (uint64_t) extremes[i % (sizeof(extremes) / sizeof(extremes[0]))]);
                        const void *one[1] = { buf };
                        ref_reduce(dt, HVD_REDUCE_SUM, want, one, 1, COUNT, sc[s]);
                        hvd_reduce_n(dt, HVD_REDUCE_SUM, out, one, 1, COUNT, sc[s]);
                        size_t bad = first_diff(dt, out, want, COUNT);
                        ck_assert_msg(bad == SIZE_MAX, "%s %s scale=%g: [%zu] = %" PRId64 ", want %" PRId64,
                                      impl_names[impl], hvd_dtype_name(dt), sc[s], bad, get_int(dt, out, bad),
                                      get_int(dt, want, bad));
                        free(buf);
                        free(out);
                        free(want);
                }
        /* spot values, independent of the reference */
        int8_t i8[40], o8[40];
        for (int i = 0; i < 40; i++)
                i8[i] = (int8_t) (i % 2 ? -128 : 127);
        const void *one8[1] = { i8 };
        hvd_reduce_n(HVD_INT8, HVD_REDUCE_SUM, o8, one8, 1, 40, -1.0);
        for (int i = 0; i < 40; i++)
                ck_assert_int_eq(o8[i], i % 2 ? 127 : -127);
        int32_t i32[9], o32[9];
        for (int i = 0; i < 9; i++)
                i32[i] = -7;
        const void *one32[1] = { i32 };
        hvd_reduce_n(HVD_INT32, HVD_REDUCE_AVERAGE, o32, one32, 1, 9, 0.5);
        for (int i = 0; i < 9; i++)
                ck_assert_int_eq(o32[i], -3);
}
END_TEST

/* ---- float16 ---- */

START_TEST(test_half_all_patterns) {
        int impl = _i;
        if (!select_impl(impl))
                return;
        enum { N = 65536 };
        uint16_t *h = malloc(N * 2), *out = malloc(N * 2);
        ck_assert(h && out);
        for (uint32_t i = 0; i < N; i++) {
                h[i] = (uint16_t) i;
                float f = hvd_half_to_float(h[i]), r = ref_half_to_float(h[i]);
                if (half_is_nan(h[i])) {
                        REQUIRE(isnan(f), "half %#x -> %a, want NaN", i, (double) f);
                        REQUIRE((!!signbit(f)) == (i >> 15), "%d != %d", (int) (!!signbit(f)), (int) (i >> 15));
                        REQUIRE(half_is_nan(hvd_float_to_half(f)), "half %#x", i);
                } else {
                        REQUIRE(f_bits(f) == f_bits(r), "half %#x -> %a, want %a", i, (double) f, (double) r);
                        REQUIRE(hvd_float_to_half(f) == h[i], "half %#x round trip gives %#x", i, hvd_float_to_half(f));
                }
        }
        /* the same through the kernel, then scaled so that results round */
        const void *srcs[1] = { h };
        hvd_reduce_n(HVD_FLOAT16, HVD_REDUCE_SUM, out, srcs, 1, N, 1.0);
        for (uint32_t i = 0; i < N; i++) {
                /* NaN keeps sign and payload and comes out quiet */
                REQUIRE(out[i] == (half_is_nan(h[i]) ? h[i] | 0x200 : h[i]), "half %#x copied as %#x", i, out[i]);
        }
        static const double sc[] = { 0.5, 0.25, 2.0, 3.0, 0.1, -1.0, 1e-3, 1e5 };
        for (size_t s = 0; s < sizeof(sc) / sizeof(sc[0]); s++) {
                hvd_reduce_n(HVD_FLOAT16, HVD_REDUCE_SUM, out, srcs, 1, N, sc[s]);
                for (uint32_t i = 0; i < N; i++) {
                        uint16_t want = ref_float_to_half(ref_half_to_float(h[i]) * (float) sc[s]);
                        REQUIRE(out[i] == want || (half_is_nan(out[i]) && half_is_nan(want)),
                                "half %#x * %g = %#x, want %#x", i, sc[s], out[i], want);
                }
        }
        free(h);
        free(out);
}
END_TEST

/* float -> half against the reference: every midpoint between neighbouring
 * halves and the floats either side of it, plus a sweep of all floats. */
START_TEST(test_half_rounding) {
        for (uint32_t h = 0; h < 0x7c00; h++)
                for (int sign = 0; sign < 2; sign++) {
                        double lo = ref_half_to_float((uint16_t) h);
                        double hi = h + 1 == 0x7c00 ? 65536.0 : ref_half_to_float((uint16_t) (h + 1));
                        float mid = (float) ((lo + hi) / 2); /* exact: 12 bits */
                        float cand[3] = { mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY) };
                        uint16_t even = (h & 1) ? (uint16_t) (h + 1) : (uint16_t) h;
                        uint16_t want[3] = { even, (uint16_t) h, (uint16_t) (h + 1) };
                        for (int c = 0; c < 3; c++) {
                                float f = sign ? -cand[c] : cand[c];
                                uint16_t w = (uint16_t) (want[c] | (sign ? 0x8000 : 0));
                                REQUIRE(hvd_float_to_half(f) == w, "%a -> %#x, want %#x", (double) f,
                                        hvd_float_to_half(f), w);
                                REQUIRE((ref_float_to_half(f)) == (w), "%d != %d", (int) (ref_float_to_half(f)),
                                        (int) (w));
                        }
                }
        for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += 4093) {
                float f = f_from_bits((uint32_t) u);
                uint16_t got = hvd_float_to_half(f), want = ref_float_to_half(f);
                REQUIRE(got == want || (half_is_nan(got) && half_is_nan(want)), "%a (%#" PRIx64 ") -> %#x, want %#x",
                        (double) f, u, got, want);
        }
#ifdef __FLT16_MAX__
        /* and against the compiler's own _Float16 */
        for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += 65521) {
                float f = f_from_bits((uint32_t) u);
                _Float16 c = (_Float16) f;
                uint16_t cb;
                memcpy(&cb, &c, 2);
                uint16_t got = hvd_float_to_half(f);
                REQUIRE(got == cb || (half_is_nan(got) && half_is_nan(cb)), "%a -> %#x, _Float16 gives %#x", (double) f,
                        got, cb);
        }
#endif
}
END_TEST

static uint16_t kernel_half(hvd_dtype_t dt, double scale, int n, uint16_t a, uint16_t b, uint16_t c) {
        /* a, b, c summed in every element of a 40-element run (vector + tail) */
        const uint16_t v[3] = { a, b, c };
        uint16_t in[3][40], out[40];
        const void *srcs[3];
        for (int k = 0; k < n; k++) {
                for (int i = 0; i < 40; i++)
                        in[k][i] = v[k];
                srcs[k] = in[k];
        }
        hvd_reduce_n(dt, HVD_REDUCE_SUM, out, srcs, (size_t) n, 40, scale);
        for (int i = 1; i < 40; i++)
                REQUIRE(out[i] == out[0], "element %d differs", i);
        return out[0];
}

START_TEST(test_half_known_values) {
        int impl = _i;
        if (!select_impl(impl))
                return;
        /* scalar conversion */
        ck_assert_int_eq(hvd_float_to_half(65504.0f), 0x7bff);
        ck_assert_int_eq(hvd_float_to_half(65519.99f), 0x7bff);
        ck_assert_int_eq(hvd_float_to_half(65520.0f), 0x7c00); /* tie, odd: up to Inf */
        ck_assert_int_eq(hvd_float_to_half(1e6f), 0x7c00);
        ck_assert_int_eq(hvd_float_to_half(-1e6f), 0xfc00);
        ck_assert_int_eq(hvd_float_to_half(INFINITY), 0x7c00);
        ck_assert_int_eq(hvd_float_to_half(0x1p-24f), 0x0001);
        ck_assert_int_eq(hvd_float_to_half(0x1p-25f), 0x0000); /* tie to even */
        ck_assert_int_eq(hvd_float_to_half(0x1.8p-25f), 0x0001);
        ck_assert_int_eq(hvd_float_to_half(0x1.8p-24f), 0x0002); /* tie, odd: up */
        ck_assert_int_eq(hvd_float_to_half(0x1p-14f), 0x0400);
        ck_assert_int_eq(hvd_float_to_half(0x1p-14f - 0x1p-25f), 0x0400); /* tie 0x3ff/0x400 */
        ck_assert_int_eq(hvd_float_to_half(1.0f + 0x1p-11f), 0x3c00);
        ck_assert_int_eq(hvd_float_to_half(1.0f + 0x1.8p-10f), 0x3c02);
        ck_assert_int_eq(hvd_float_to_half(FLT_TRUE_MIN), 0x0000);
        ck_assert_int_eq(hvd_float_to_half(-0.0f), 0x8000);
        ck_assert(half_is_nan(hvd_float_to_half(NAN)));
        ck_assert(half_is_nan(hvd_float_to_half(f_from_bits(0x7f800001)))); /* low payload only */
        ck_assert_int_eq(hvd_float_to_half(f_from_bits(0xffc00000)) & 0x8000, 0x8000);
        ck_assert(hvd_half_to_float(0x0001) == 0x1p-24f);
        ck_assert(hvd_half_to_float(0x03ff) == 0x1.ff8p-15f);
        ck_assert(hvd_half_to_float(0x7bff) == 65504.0f);
        ck_assert(isinf(hvd_half_to_float(0xfc00)) && hvd_half_to_float(0xfc00) < 0);

        /* through the kernels: accumulate in float, round once at the end */
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 2, 0x7bff, 0x7bff, 0), 0x7c00);
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 2, 0x7bff, 0x4800, 0), 0x7bff); /* +8 */
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 2, 0x7bff, 0x4c00, 0), 0x7c00); /* +16 */
        /* 65504 + 65504 - 65504: overflows only if rounded between steps */
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 3, 0x7bff, 0x7bff, 0xfbff), 0x7bff);
        /* 2 * 65504 * 0.5 */
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 0.5, 2, 0x7bff, 0x7bff, 0), 0x7bff);
        /* 1 + 2^-11 + 2^-11 is 1 + 2^-10 in float; stepwise half would give 1 */
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 3, 0x3c00, 0x1000, 0x1000), 0x3c01);
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 2, 0x3c00, 0x1000, 0), 0x3c00);
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 2, 0x3c01, 0x1000, 0), 0x3c02);
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 2, 0x0001, 0x0001, 0), 0x0002);
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 0.5, 1, 0x0001, 0, 0), 0x0000);
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 0.5, 1, 0x0003, 0, 0), 0x0002);
        ck_assert_int_eq(kernel_half(HVD_FLOAT16, 1.0, 2, 0x03ff, 0x0001, 0), 0x0400);
        ck_assert(half_is_nan(kernel_half(HVD_FLOAT16, 1.0, 2, 0x7c00, 0xfc00, 0)));
        ck_assert(half_is_nan(kernel_half(HVD_FLOAT16, 1.0, 2, 0x3c00, 0x7d00, 0)));
}
END_TEST

/* every tie between neighbouring halves, made by adding half an ulp */
START_TEST(test_half_ties_in_kernel) {
        int impl = _i;
        if (!select_impl(impl))
                return;
        enum { N = 0x7c00 - 0x0800 };
        uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *out = malloc(N * 2);
        ck_assert(a && b && out);
        for (uint32_t i = 0; i < N; i++) {
                uint32_t h = 0x0800 + i; /* from exponent 2 on, ulp/2 is a half too */
                a[i] = (uint16_t) h;
                double ulp = ref_half_to_float((uint16_t) (h + 1 == 0x7c00 ? h : h + 1)) -
                             ref_half_to_float((uint16_t) (h + 1 == 0x7c00 ? h - 1 : h));
                b[i] = ref_float_to_half((float) (ulp / 2));
        }
        const void *srcs[2] = { a, b };
        hvd_reduce_n(HVD_FLOAT16, HVD_REDUCE_SUM, out, srcs, 2, N, 1.0);
        for (uint32_t i = 0; i < N; i++) {
                uint32_t h = a[i], want = (h & 1) ? h + 1 : h;
                REQUIRE(out[i] == want, "%#x + ulp/2 = %#x, want %#x", h, out[i], want);
        }
        free(a);
        free(b);
        free(out);
}
END_TEST

/* ---- bfloat16 ---- */

START_TEST(test_bf16_all_patterns) {
        int impl = _i;
        if (!select_impl(impl))
                return;
        enum { N = 65536 };
        uint16_t *h = malloc(N * 2), *out = malloc(N * 2);
        ck_assert(h && out);
        for (uint32_t i = 0; i < N; i++) {
                h[i] = (uint16_t) i;
                float f = hvd_bf16_to_float(h[i]), r = ref_bf16_to_float(h[i]);
                if (bf16_is_nan(h[i])) {
                        REQUIRE(isnan(f), "bf16 %#x", i);
                        REQUIRE(bf16_is_nan(hvd_float_to_bf16(f)), "bf16 %#x", i);
                } else {
                        REQUIRE(f_bits(f) == f_bits(r), "bf16 %#x -> %a, want %a", i, (double) f, (double) r);
                        REQUIRE((hvd_float_to_bf16(f)) == (h[i]), "%d != %d", (int) (hvd_float_to_bf16(f)),
                                (int) (h[i]));
                }
        }
        const void *srcs[1] = { h };
        static const double sc[] = { 1.0, 0.5, 3.0, 0.1, -1.0, 1e30, 1e-30 };
        for (size_t s = 0; s < sizeof(sc) / sizeof(sc[0]); s++) {
                hvd_reduce_n(HVD_BFLOAT16, HVD_REDUCE_SUM, out, srcs, 1, N, sc[s]);
                for (uint32_t i = 0; i < N; i++) {
                        uint16_t want = ref_float_to_bf16(ref_bf16_to_float(h[i]) * (float) sc[s]);
                        /* unscaled, a conversion round trip: NaN keeps sign and
                         * payload and comes out quiet */
                        if (sc[s] == 1.0)
                                REQUIRE(out[i] == (bf16_is_nan(h[i]) ? h[i] | 0x40 : h[i]), "bf16 %#x copied as %#x", i,
                                        out[i]);
                        REQUIRE(out[i] == want || (bf16_is_nan(out[i]) && bf16_is_nan(want)),
                                "bf16 %#x * %g = %#x, want %#x", i, sc[s], out[i], want);
                }
        }
        free(h);
        free(out);
}
END_TEST

START_TEST(test_bf16_rounding) {
        /* ties to even, both sides of each tie, every finite bf16 */
        for (uint32_t b = 0; b < 0x7f80; b++) {
                uint32_t mid = (b << 16) | 0x8000;
                uint16_t even = (uint16_t) ((b & 1) ? b + 1 : b);
                REQUIRE((hvd_float_to_bf16(f_from_bits(mid))) == (even), "%d != %d",
                        (int) (hvd_float_to_bf16(f_from_bits(mid))), (int) (even));
                REQUIRE((hvd_float_to_bf16(f_from_bits(mid - 1))) == (b), "%d != %d",
                        (int) (hvd_float_to_bf16(f_from_bits(mid - 1))), (int) (b));
                REQUIRE((hvd_float_to_bf16(f_from_bits(mid + 1))) == (b + 1), "%d != %d",
                        (int) (hvd_float_to_bf16(f_from_bits(mid + 1))), (int) (b + 1));
                REQUIRE((hvd_float_to_bf16(f_from_bits(mid | 0x80000000))) == (even | 0x8000), "%d != %d",
                        (int) (hvd_float_to_bf16(f_from_bits(mid | 0x80000000))), (int) (even | 0x8000));
                REQUIRE((ref_float_to_bf16(f_from_bits(mid))) == (even), "%d != %d",
                        (int) (ref_float_to_bf16(f_from_bits(mid))), (int) (even));
        }
        for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += 4093) {
                float f = f_from_bits((uint32_t) u);
                uint16_t got = hvd_float_to_bf16(f), want = ref_float_to_bf16(f);
                REQUIRE(got == want || (bf16_is_nan(got) && bf16_is_nan(want)), "%a -> %#x, want %#x", (double) f, got,
                        want);
        }
}
END_TEST

START_TEST(test_bf16_known_values) {
        int impl = _i;
        if (!select_impl(impl))
                return;
        ck_assert_int_eq(hvd_float_to_bf16(1.0f), 0x3f80);
        ck_assert_int_eq(hvd_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);   /* tie, even: down */
        ck_assert_int_eq(hvd_float_to_bf16(1.0f + 0x1.8p-7f), 0x3f82); /* tie, odd: up */
        ck_assert_int_eq(hvd_float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
        ck_assert_int_eq(hvd_float_to_bf16(FLT_MAX), 0x7f80);
        ck_assert_int_eq(hvd_float_to_bf16(-FLT_MAX), 0xff80);
        ck_assert_int_eq(hvd_float_to_bf16(f_from_bits(0x7f7f7fff)), 0x7f7f);
        ck_assert_int_eq(hvd_float_to_bf16(f_from_bits(0x7f7f8000)), 0x7f80);
        ck_assert_int_eq(hvd_float_to_bf16(INFINITY), 0x7f80);
        ck_assert_int_eq(hvd_float_to_bf16(-0.0f), 0x8000);
        ck_assert_int_eq(hvd_float_to_bf16(FLT_TRUE_MIN), 0x0000);
        ck_assert_int_eq(hvd_float_to_bf16(f_from_bits(0x00008000)), 0x0000); /* subnormal tie */
        ck_assert_int_eq(hvd_float_to_bf16(f_from_bits(0x00018000)), 0x0002);
        ck_assert_int_eq(hvd_float_to_bf16(f_from_bits(0x007fffff)), 0x0080); /* up to FLT_MIN */
        ck_assert(bf16_is_nan(hvd_float_to_bf16(f_from_bits(0x7f800001))));   /* low payload only */
        ck_assert_int_eq(hvd_float_to_bf16(f_from_bits(0xff800001)), 0xffc0);
        ck_assert(hvd_bf16_to_float(0x0001) == 0x1p-133f);

        /* through the kernels */
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 1.0, 2, 0x7f7f, 0x7f7f, 0), 0x7f80);
        /* the float sum overflows before the scale: Inf * 0.5 */
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 0.5, 2, 0x7f7f, 0x7f7f, 0), 0x7f80);
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 2.0, 2, 0x7f7f, 0xfeff, 0), 0x7f7f);
        /* 1 + 2^-8: a tie, to even */
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 1.0, 2, 0x3f80, 0x3b80, 0), 0x3f80);
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 1.0, 2, 0x3f81, 0x3b80, 0), 0x3f82);
        /* 1 + 2^-8 + 2^-8: exact in float, 1 + 2^-7 once rounded */
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 1.0, 3, 0x3f80, 0x3b80, 0x3b80), 0x3f81);
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 1.0, 2, 0x0001, 0x0001, 0), 0x0002);
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 0.5, 1, 0x0001, 0, 0), 0x0000);
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 0.5, 1, 0x0003, 0, 0), 0x0002);
        ck_assert(bf16_is_nan(kernel_half(HVD_BFLOAT16, 1.0, 2, 0x7f80, 0xff80, 0)));
        ck_assert_int_eq(kernel_half(HVD_BFLOAT16, 1.0, 2, 0xff81, 0x3f80, 0) & 0xffc0, 0xffc0);
}
END_TEST

/* ---- misc ---- */

START_TEST(test_impl_and_tables) {
        hvd_reduce_force_generic(true);
        ck_assert_str_eq(hvd_reduce_impl(), "generic");
        hvd_reduce_force_generic(false);
        ck_assert_str_eq(hvd_reduce_impl(), hvd_reduce_cpu_has_avx2() ? "avx2" : "generic");
        static const size_t sizes[_HVD_DTYPE_COUNT] = {
                [HVD_UINT8] = 1,   [HVD_INT8] = 1,     [HVD_INT16] = 2,   [HVD_INT32] = 4,   [HVD_INT64] = 8,
                [HVD_FLOAT16] = 2, [HVD_BFLOAT16] = 2, [HVD_FLOAT32] = 4, [HVD_FLOAT64] = 8, [HVD_BOOL] = 1
        };
        for (int dt = 0; dt < _HVD_DTYPE_COUNT; dt++) {
                ck_assert_uint_eq(hvd_dtype_size((hvd_dtype_t) dt), sizes[dt]);
                ck_assert_str_ne(hvd_dtype_name((hvd_dtype_t) dt), "invalid");
        }
        ck_assert_uint_eq(hvd_dtype_size(_HVD_DTYPE_COUNT), 0);
        ck_assert_str_eq(hvd_dtype_name(_HVD_DTYPE_COUNT), "invalid");
        ck_assert_str_eq(hvd_dtype_name(HVD_BFLOAT16), "bfloat16");
        ck_assert(hvd_dtype_is_float(HVD_FLOAT16) && !hvd_dtype_is_float(HVD_INT16));
}
END_TEST

static Suite *reduce_suite(void) {
        Suite *s = suite_create("reduce");
        TCase *tc = tcase_create("kernels");
        tcase_add_checked_fixture(tc, NULL, teardown);
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, test_impl_and_tables);
        tcase_add_loop_test(tc, test_reduce_matches_reference, 0, IMPL_COUNT * _HVD_DTYPE_COUNT);
        tcase_add_loop_test(tc, test_generic_and_avx2_agree, 0, 3 * _HVD_DTYPE_COUNT);
        tcase_add_loop_test(tc, test_reduce_stream_agrees, 0, _HVD_DTYPE_COUNT);
        tcase_add_loop_test(tc, test_scale_copy, 0, IMPL_COUNT * _HVD_DTYPE_COUNT);
        tcase_add_loop_test(tc, test_copy_stream, 0, IMPL_COUNT);
        tcase_add_loop_test(tc, test_int_scale_saturates, 0, IMPL_COUNT);
        suite_add_tcase(s, tc);

        tc = tcase_create("conversions");
        tcase_add_checked_fixture(tc, NULL, teardown);
        tcase_set_timeout(tc, 600);
        tcase_add_loop_test(tc, test_half_all_patterns, 0, IMPL_COUNT);
        tcase_add_test(tc, test_half_rounding);
        tcase_add_loop_test(tc, test_half_known_values, 0, IMPL_COUNT);
        tcase_add_loop_test(tc, test_half_ties_in_kernel, 0, IMPL_COUNT);
        tcase_add_loop_test(tc, test_bf16_all_patterns, 0, IMPL_COUNT);
        tcase_add_test(tc, test_bf16_rounding);
        tcase_add_loop_test(tc, test_bf16_known_values, 0, IMPL_COUNT);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        if (!hvd_reduce_cpu_has_avx2())
                fprintf(stderr, "check_reduce: no AVX2/F16C on this CPU: only the portable "
                                "kernels are tested\n");
        SRunner *sr = srunner_create(reduce_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
