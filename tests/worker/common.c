/* common.c — what every scenario of the integration worker uses: the job's
 * globals (rank, size, failures, the scenario running), reporting (a failure
 * is one "rank R: FAIL [scenario] ..." line; a call that cannot go on exits,
 * so the daemon aborts the job rather than leave a rank hanging), and element
 * access for every dtype, float16 and bfloat16 converted by hand so that the
 * worker needs nothing but hvd.h, with which one generator function both
 * fills the inputs and checks the outputs. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker.h"

int rank = -1, size = -1;
int failures;
const char *scenario = "init";

/* ---- reporting ---- */

uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

const char *errname(int e) {
        static __thread char buf[96];
#define ERRNAME(name, value, text)                                                                                     \
        if (e == (value))                                                                                              \
                return #name;
        HVD_ERRORS(ERRNAME)
#undef ERRNAME
        if (e == 0)
                return "0";
        snprintf(buf, sizeof buf, "%d (%s)", e, e < 0 ? strerror(-e) : "?");
        return buf;
}

void fail(const char *fmt, ...) {
        char msg[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        printf("rank %d: FAIL [%s] %s\n", rank, scenario, msg);
        fflush(stdout);
        if (++failures > 50) {
                printf("rank %d: too many failures, giving up\n", rank);
                exit(1);
        }
}

void *xmalloc(size_t n) {
        void *p = malloc(n ? n : 1);
        if (!p) {
                printf("rank %d: out of memory (%zu bytes)\n", rank, n);
                exit(1);
        }
        return p;
}

/* Waits for a handle (at most 60 s: a hang is a failure, not a timeout of
 * the whole test) and returns its status. */
int wait_h(hvd_handle_t *h, const char *what) {
        int r = hvd_handle_wait_timeout(h, 60 * 1000000ull);
        if (r == HVD_ETIMEOUT) {
                printf("rank %d: FAIL [%s] %s still pending after 60 s\n", rank, scenario, what);
                exit(1);
        }
        return r;
}

void wait_ok(hvd_handle_t *h, const char *what) {
        int r = wait_h(h, what);
        if (r < 0) {
                printf("rank %d: FAIL [%s] %s failed: %s: %s\n", rank, scenario, what, errname(r), hvd_handle_error(h));
                exit(1);
        }
        CHECK(hvd_handle_poll(h) == 1, "%s: poll after completion says pending", what);
        CHECK(hvd_handle_error(h)[0] == 0, "%s: error text \"%s\" on success", what, hvd_handle_error(h));
}

const char *tmpdir(void) {
        const char *d = getenv("HVD_TEST_TMPDIR");
        return d && *d ? d : "/tmp";
}

/* ---- element access (float16 / bfloat16 by hand: only hvd.h is used) ---- */

static uint16_t f32_to_f16(float f) {
        uint32_t x;
        memcpy(&x, &f, 4);
        uint32_t sign = (x >> 16) & 0x8000, e8 = (x >> 23) & 0xff, mant = x & 0x7fffff;
        if (e8 == 0xff)
                return (uint16_t) (sign | 0x7c00 | (mant ? 0x200 : 0));
        int32_t e = (int32_t) e8 - 127 + 15;
        if (e >= 31)
                return (uint16_t) (sign | 0x7c00);
        if (e <= 0) {
                if (e < -10)
                        return (uint16_t) sign;
                mant |= 0x800000;
                uint32_t shift = (uint32_t) (14 - e), h = mant >> shift, rem = mant & ((1u << shift) - 1),
                         half = 1u << (shift - 1);
                if (rem > half || (rem == half && (h & 1)))
                        h++;
                return (uint16_t) (sign | h);
        }
        uint32_t h = ((uint32_t) e << 10) | (mant >> 13), rem = mant & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
                h++;
        return (uint16_t) (sign | h);
}

static float f16_to_f32(uint16_t h) {
        uint32_t e = (h >> 10) & 0x1f, mant = h & 0x3ff;
        float f;
        if (e == 0)
                f = ldexpf((float) mant, -24);
        else if (e == 31)
                f = mant ? NAN : INFINITY;
        else
                f = ldexpf((float) (mant | 0x400), (int) e - 25);
        return (h & 0x8000) ? -f : f;
}

static uint16_t f32_to_bf16(float f) {
        uint32_t x;
        memcpy(&x, &f, 4);
        x += 0x7fff + ((x >> 16) & 1);
        return (uint16_t) (x >> 16);
}

static float bf16_to_f32(uint16_t h) {
        uint32_t x = (uint32_t) h << 16;
        float f;
        memcpy(&f, &x, 4);
        return f;
}

double get_elem(hvd_dtype_t dt, const void *p, size_t i) {
        switch (dt) {
        case HVD_UINT8: return ((const uint8_t *) p)[i];
        case HVD_INT8: return ((const int8_t *) p)[i];
        case HVD_INT16: return ((const int16_t *) p)[i];
        case HVD_INT32: return ((const int32_t *) p)[i];
        case HVD_INT64: return (double) ((const int64_t *) p)[i];
        case HVD_FLOAT16: return f16_to_f32(((const uint16_t *) p)[i]);
        case HVD_BFLOAT16: return bf16_to_f32(((const uint16_t *) p)[i]);
        case HVD_FLOAT32: return ((const float *) p)[i];
        case HVD_FLOAT64: return ((const double *) p)[i];
        case HVD_BOOL: return ((const uint8_t *) p)[i];
        default: return NAN;
        }
}

void set_elem(hvd_dtype_t dt, void *p, size_t i, double v) {
        switch (dt) {
        case HVD_UINT8: ((uint8_t *) p)[i] = (uint8_t) v; break;
        case HVD_INT8: ((int8_t *) p)[i] = (int8_t) v; break;
        case HVD_INT16: ((int16_t *) p)[i] = (int16_t) v; break;
        case HVD_INT32: ((int32_t *) p)[i] = (int32_t) v; break;
        case HVD_INT64: ((int64_t *) p)[i] = (int64_t) v; break;
        case HVD_FLOAT16: ((uint16_t *) p)[i] = f32_to_f16((float) v); break;
        case HVD_BFLOAT16: ((uint16_t *) p)[i] = f32_to_bf16((float) v); break;
        case HVD_FLOAT32: ((float *) p)[i] = (float) v; break;
        case HVD_FLOAT64: ((double *) p)[i] = v; break;
        case HVD_BOOL: ((uint8_t *) p)[i] = v != 0; break;
        default: break;
        }
}

bool is_float(hvd_dtype_t dt) {
        return dt == HVD_FLOAT16 || dt == HVD_BFLOAT16 || dt == HVD_FLOAT32 || dt == HVD_FLOAT64;
}
bool is_unsigned(hvd_dtype_t dt) {
        return dt == HVD_UINT8 || dt == HVD_BOOL;
}

/* Compares n elements of buf with gen(ctx, i); reports the first few
 * differences. Returns the number of differences. */
size_t compare(const char *what, hvd_dtype_t dt, const void *buf, size_t n, gen_fn gen, const void *ctx) {
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
                double got = get_elem(dt, buf, i), want = gen(ctx, i);
                if (got == want || (isnan(got) && isnan(want)))
                        continue;
                if (bad++ < 4)
                        fail("%s (%s): element %zu is %.17g, expected %.17g", what, hvd_dtype_name(dt), i, got, want);
        }
        if (bad > 4)
                fail("%s: %zu of %zu elements differ", what, bad, n);
        return bad;
}

void *make_buf(hvd_dtype_t dt, size_t n, gen_fn gen, const void *ctx) {
        void *p = xmalloc(n * hvd_dtype_size(dt));
        for (size_t i = 0; i < n; i++)
                set_elem(dt, p, i, gen(ctx, i));
        return p;
}

void fill(hvd_dtype_t dt, void *p, size_t n, double v) {
        for (size_t i = 0; i < n; i++)
                set_elem(dt, p, i, v);
}
