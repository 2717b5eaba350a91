/* worker_collectives.c — the integration worker: run as N ranks of one job
 * (tests/lib/launch.sh -n N -- worker_collectives SCENARIO...), it drives
 * every collective of the public API (hvd.h only) with values whose results
 * are exactly representable, and checks every element, shape and error
 * message. Any difference prints "rank R: FAIL ..." and the exit status is
 * non-zero; "all" runs every scenario that needs no special setup (not
 * longrun*, early-shutdown, nor the flows notinit, reinit and
 * expect-init-error, which the test scripts start on their own). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hvd.h"

static int rank = -1, size = -1;
static int failures;
static const char *scenario = "init";

static const hvd_dtype_t all_dtypes[] = { HVD_UINT8,   HVD_INT8,     HVD_INT16,   HVD_INT32,   HVD_INT64,
                                          HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL };
static const hvd_reduce_op_t all_ops[] = { HVD_REDUCE_AVERAGE, HVD_REDUCE_SUM, HVD_REDUCE_MIN, HVD_REDUCE_MAX,
                                           HVD_REDUCE_PRODUCT };
static const char *const op_names[] = { "average", "sum", "min", "max", "product" };
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])
#define N_OPS    (sizeof all_ops / sizeof all_ops[0])

/* ---- reporting ---- */

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static const char *errname(int e) {
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

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
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

/* A call that must succeed; on failure the process exits (without
 * hvd_shutdown: the daemon then aborts the job, so no rank hangs). */
#define MUST(call)                                                                                                     \
        do {                                                                                                           \
                int _r = (call);                                                                                       \
                if (_r < 0) {                                                                                          \
                        printf("rank %d: FAIL [%s] %s:%d: %s returned %s: %s\n", rank, scenario, __FILE__, __LINE__,   \
                               #call, errname(_r), hvd_last_error());                                                  \
                        exit(1);                                                                                       \
                }                                                                                                      \
        } while (0)

#define CHECK(cond, ...)                                                                                               \
        do {                                                                                                           \
                if (!(cond))                                                                                           \
                        fail(__VA_ARGS__);                                                                             \
        } while (0)

static void *xmalloc(size_t n) {
        void *p = malloc(n ? n : 1);
        if (!p) {
                printf("rank %d: out of memory (%zu bytes)\n", rank, n);
                exit(1);
        }
        return p;
}

/* Waits for a handle (at most 60 s: a hang is a failure, not a timeout of
 * the whole test) and returns its status. */
static int wait_h(hvd_handle_t *h, const char *what) {
        int r = hvd_handle_wait_timeout(h, 60 * 1000000ull);
        if (r == HVD_ETIMEOUT) {
                printf("rank %d: FAIL [%s] %s still pending after 60 s\n", rank, scenario, what);
                exit(1);
        }
        return r;
}

static void wait_ok(hvd_handle_t *h, const char *what) {
        int r = wait_h(h, what);
        if (r < 0) {
                printf("rank %d: FAIL [%s] %s failed: %s: %s\n", rank, scenario, what, errname(r), hvd_handle_error(h));
                exit(1);
        }
        CHECK(hvd_handle_poll(h) == 1, "%s: poll after completion says pending", what);
        CHECK(hvd_handle_error(h)[0] == 0, "%s: error text \"%s\" on success", what, hvd_handle_error(h));
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

static double get_elem(hvd_dtype_t dt, const void *p, size_t i) {
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

static void set_elem(hvd_dtype_t dt, void *p, size_t i, double v) {
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

static bool is_float(hvd_dtype_t dt) {
        return dt == HVD_FLOAT16 || dt == HVD_BFLOAT16 || dt == HVD_FLOAT32 || dt == HVD_FLOAT64;
}
static bool is_unsigned(hvd_dtype_t dt) {
        return dt == HVD_UINT8 || dt == HVD_BOOL;
}

typedef double (*gen_fn)(const void *ctx, size_t i);

/* Compares n elements of buf with gen(ctx, i); reports the first few
 * differences. Returns the number of differences. */
static size_t compare(const char *what, hvd_dtype_t dt, const void *buf, size_t n, gen_fn gen, const void *ctx) {
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

static void *make_buf(hvd_dtype_t dt, size_t n, gen_fn gen, const void *ctx) {
        void *p = xmalloc(n * hvd_dtype_size(dt));
        for (size_t i = 0; i < n; i++)
                set_elem(dt, p, i, gen(ctx, i));
        return p;
}

static void fill(hvd_dtype_t dt, void *p, size_t n, double v) {
        for (size_t i = 0; i < n; i++)
                set_elem(dt, p, i, v);
}

/* ---- allreduce values: exact for every dtype and op ---- */

typedef struct ar_ctx {
        hvd_dtype_t dt;
        hvd_reduce_op_t op;
        double pre, post;
        int r; /* the rank whose input this is; -1 = the expected result */
        size_t salt;
} ar_ctx_t;

static double ar_input(hvd_dtype_t dt, hvd_reduce_op_t op, int r, size_t i) {
        if (dt == HVD_BOOL)
                return ((i + i / 7 + (size_t) r) % 3) == 0 || (r == 0 && i % 5 == 1);
        switch (op) {
        case HVD_REDUCE_AVERAGE: {
                /* v + (2r - (size - 1)): the offsets cancel, the average is v */
                double v = (double) (i % 7) + 3.0 + (is_float(dt) ? 0.5 * (double) (i % 2) : 0.0);
                return v + (double) (2 * r - (size - 1));
        }
        case HVD_REDUCE_SUM:
                if (is_unsigned(dt))
                        return (double) (i % 5) + r;
                if (is_float(dt))
                        return ((double) (i % 9) - 4.0) * 0.5 + r;
                return (double) (i % 5) - 2.0 + r;
        case HVD_REDUCE_MIN:
        case HVD_REDUCE_MAX: {
                double v = (double) ((i * 7 + (size_t) r * 3) % 11);
                if (is_unsigned(dt))
                        return v;
                return is_float(dt) ? (v - 5.0) * 0.25 : v - 5.0;
        }
        case HVD_REDUCE_PRODUCT:
                if (is_unsigned(dt))
                        return 1.0 + (double) ((i + (size_t) r) % 2);
                return (double) ((i + (size_t) r) % 4) - 1.0;
        default: return 0;
        }
}

/* The value a rank contributes after the prescale (integers: truncated). */
static double prescaled(const ar_ctx_t *c, int r, size_t i) {
        double x = ar_input(c->dt, c->op, r, i + c->salt);
        if (c->dt == HVD_BOOL || c->pre == 1.0)
                return x;
        x *= c->pre;
        return is_float(c->dt) ? x : trunc(x);
}

static double ar_gen(const void *vctx, size_t i) {
        const ar_ctx_t *c = vctx;
        if (c->r >= 0)
                return ar_input(c->dt, c->op, c->r, i + c->salt);
        double acc = prescaled(c, 0, i);
        for (int r = 1; r < size; r++) {
                double x = prescaled(c, r, i);
                if (c->dt == HVD_BOOL) {
                        bool any = c->op == HVD_REDUCE_SUM || c->op == HVD_REDUCE_MAX || c->op == HVD_REDUCE_AVERAGE;
                        acc = any ? (acc != 0 || x != 0) : (acc != 0 && x != 0);
                        continue;
                }
                switch (c->op) {
                case HVD_REDUCE_AVERAGE:
                case HVD_REDUCE_SUM: acc += x; break;
                case HVD_REDUCE_MIN: acc = x < acc ? x : acc; break;
                case HVD_REDUCE_MAX: acc = x > acc ? x : acc; break;
                case HVD_REDUCE_PRODUCT: acc *= x; break;
                default: break;
                }
        }
        if (c->dt == HVD_BOOL)
                return acc;
        if (c->op == HVD_REDUCE_AVERAGE)
                acc /= size;
        acc *= c->post;
        return is_float(c->dt) ? acc : trunc(acc);
}

typedef struct ar_case {
        char name[128];
        ar_ctx_t in_ctx, want_ctx;
        size_t n;
        int ndim;
        int64_t shape[3];
        void *in, *out;
        hvd_handle_t *h;
} ar_case_t;

static void ar_case_init(ar_case_t *k, const char *tag, hvd_dtype_t dt, hvd_reduce_op_t op, size_t n, int ndim,
                         double pre, double post, bool in_place) {
        snprintf(k->name, sizeof k->name, "ar.%s.%s.%s.%zu.d%d%s", tag, hvd_dtype_name(dt), op_names[op], n, ndim,
                 in_place ? ".inplace" : "");
        k->in_ctx = (ar_ctx_t){ .dt = dt, .op = op, .pre = pre, .post = post, .r = rank, .salt = n };
        k->want_ctx = k->in_ctx;
        k->want_ctx.r = -1;
        k->n = n;
        k->ndim = ndim;
        if (ndim == 1)
                k->shape[0] = (int64_t) n;
        else if (ndim == 2) {
                k->shape[0] = n % 10 == 0 && n ? 10 : 1;
                k->shape[1] = (int64_t) n / k->shape[0];
        } else if (ndim == 3) {
                k->shape[0] = 1;
                k->shape[1] = (int64_t) n;
                k->shape[2] = 1;
        }
        k->in = make_buf(dt, n, ar_gen, &k->in_ctx);
        if (in_place)
                k->out = k->in;
        else {
                k->out = xmalloc(n * hvd_dtype_size(dt));
                fill(dt, k->out, n, dt == HVD_BOOL ? 1 : 99); /* garbage to be overwritten */
        }
        k->h = NULL;
}

static void ar_case_submit(ar_case_t *k) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = k->name;
        q.input = k->in;
        q.output = k->out;
        q.dtype = k->in_ctx.dt;
        q.ndim = k->ndim;
        q.shape = k->shape;
        q.reduce_op = k->in_ctx.op;
        q.prescale = k->in_ctx.pre;
        q.postscale = k->in_ctx.post;
        MUST(hvd_allreduce_async(&q, &k->h));
}

static void ar_case_finish(ar_case_t *k) {
        wait_ok(k->h, k->name);
        compare(k->name, k->in_ctx.dt, k->out, k->n, ar_gen, &k->want_ctx);
        hvd_handle_release(&k->h);
        CHECK(k->h == NULL, "hvd_handle_release did not clear the pointer");
        if (k->out != k->in)
                free(k->out);
        free(k->in);
}

static void run_cases(ar_case_t *cases, size_t n) {
        for (size_t i = 0; i < n; i++)
                ar_case_submit(&cases[i]);
        for (size_t i = n; i-- > 0;) /* wait in reverse: completion order is the library's business */
                ar_case_finish(&cases[i]);
}

static void scenario_allreduce(void) {
        static const size_t sizes[] = { 0, 1, 7, 1000 };
        size_t cap = N_DTYPES * N_OPS * 6 + 64, n = 0;
        ar_case_t *cases = calloc(cap, sizeof *cases);

        /* every dtype x op x size, all in flight at once (fusion mixes them) */
        for (size_t d = 0; d < N_DTYPES; d++)
                for (size_t o = 0; o < N_OPS; o++) {
                        for (size_t s = 0; s < 4; s++)
                                ar_case_init(&cases[n++], "all", all_dtypes[d], all_ops[o], sizes[s], 1, 1.0, 1.0,
                                             false);
                        ar_case_init(&cases[n++], "all", all_dtypes[d], all_ops[o], 1, 0, 1.0, 1.0, false);
                        ar_case_init(&cases[n++], "all", all_dtypes[d], all_ops[o], 1000, 2, 1.0, 1.0, true);
                }
        run_cases(cases, n);

        /* one at a time, synchronous, in place */
        for (size_t d = 0; d < N_DTYPES; d++)
                for (size_t o = 0; o < N_OPS; o++) {
                        ar_case_t k;
                        ar_case_init(&k, "sync", all_dtypes[d], all_ops[o], 33, 1, 1.0, 1.0, true);
                        MUST(hvd_allreduce(k.name, k.in, k.out, k.n, k.in_ctx.dt, k.in_ctx.op));
                        compare(k.name, k.in_ctx.dt, k.out, k.n, ar_gen, &k.want_ctx);
                        free(k.in);
                }

        /* prescale and postscale (powers of two: exact) */
        n = 0;
        const hvd_dtype_t fdt[] = { HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64 };
        for (size_t d = 0; d < 4; d++) {
                ar_case_init(&cases[n++], "scaled", fdt[d], HVD_REDUCE_SUM, 100, 1, 0.5, 4.0, false);
                ar_case_init(&cases[n++], "scaled", fdt[d], HVD_REDUCE_AVERAGE, 100, 1, 2.0, 0.25, false);
                ar_case_init(&cases[n++], "scaled", fdt[d], HVD_REDUCE_MAX, 100, 1, 0.5, 2.0, true);
                ar_case_init(&cases[n++], "scaled", fdt[d], HVD_REDUCE_MIN, 100, 1, 4.0, 1.0, false);
                ar_case_init(&cases[n++], "prepost", fdt[d], HVD_REDUCE_SUM, 7, 1, 1.0, 0.5, false);
        }
        ar_case_init(&cases[n++], "scaled", HVD_INT32, HVD_REDUCE_SUM, 100, 1, 2.0, 3.0, false);
        ar_case_init(&cases[n++], "scaled", HVD_INT64, HVD_REDUCE_SUM, 100, 1, 3.0, 1.0, false);
        ar_case_init(&cases[n++], "scaled", HVD_INT16, HVD_REDUCE_MAX, 100, 1, 2.0, 1.0, false);
        run_cases(cases, n);

        /* larger than the fusion buffer / shared-memory slot: chunked */
        n = 0;
        ar_case_init(&cases[n++], "large", HVD_FLOAT32, HVD_REDUCE_SUM, 9u << 20, 1, 1.0, 1.0, false);
        ar_case_init(&cases[n++], "large", HVD_FLOAT32, HVD_REDUCE_AVERAGE, 3u << 20, 1, 1.0, 1.0, true);
        ar_case_init(&cases[n++], "large", HVD_FLOAT16, HVD_REDUCE_SUM, 3u << 20, 1, 1.0, 1.0, false);
        ar_case_init(&cases[n++], "large", HVD_INT64, HVD_REDUCE_MAX, 3u << 19, 1, 1.0, 1.0, false);
        ar_case_init(&cases[n++], "large", HVD_FLOAT64, HVD_REDUCE_SUM, (1u << 20) + 3, 1, 0.5, 2.0, true);
        run_cases(cases, n);
        /* mid sizes on either side of the shared-memory data plane's
         * thresholds (one chunk reduced by every rank into its outputs up to
         * 64 KiB, or up to 1 MiB when the ranks outnumber the cores; by
         * segments above), odd element counts, with and without prescale */
        n = 0;
        ar_case_init(&cases[n++], "mid", HVD_FLOAT32, HVD_REDUCE_SUM, 16384, 1, 1.0, 1.0, false);
        ar_case_init(&cases[n++], "mid", HVD_FLOAT32, HVD_REDUCE_SUM, 16385, 1, 1.0, 1.0, true);
        ar_case_init(&cases[n++], "mid", HVD_FLOAT32, HVD_REDUCE_AVERAGE, 40001, 1, 2.0, 0.5, false);
        ar_case_init(&cases[n++], "mid", HVD_FLOAT16, HVD_REDUCE_SUM, 131073, 1, 1.0, 1.0, false);
        ar_case_init(&cases[n++], "mid", HVD_INT32, HVD_REDUCE_MAX, 262143, 1, 1.0, 1.0, true);
        ar_case_init(&cases[n++], "mid", HVD_FLOAT64, HVD_REDUCE_MIN, 131073, 1, 1.0, 1.0, false);
        ar_case_init(&cases[n++], "mid", HVD_FLOAT32, HVD_REDUCE_SUM, 262145, 1, 1.0, 1.0, false);
        run_cases(cases, n);
        /* and synchronously, in place, after something small */
        ar_case_init(&cases[0], "large2", HVD_FLOAT32, HVD_REDUCE_SUM, 9u << 20, 1, 1.0, 1.0, true);
        ar_case_init(&cases[1], "small2", HVD_FLOAT32, HVD_REDUCE_SUM, 5, 1, 1.0, 1.0, false);
        run_cases(cases, 2);
        free(cases);
}

/* Shared tensors (hvd_shared_alloc): allreduces whose tensors are shared
 * on every rank read the others' in place (the zero-copy path, from
 * HVD_SHM_ZERO_COPY_BYTES, 1 MiB by default); where only some ranks' are,
 * or a tensor is below that size, the usual path. Exact results either
 * way, inputs of out-of-place calls untouched; the allocator's own
 * contract (zero-filled pages, errors). One call at a time, so no two
 * tensors fuse. */
static void *shared_buf(hvd_dtype_t dt, size_t n, gen_fn gen, const void *ctx) {
        void *p = NULL;
        MUST(hvd_shared_alloc(n * hvd_dtype_size(dt), &p));
        CHECK(((uintptr_t) p & 4095) == 0, "hvd_shared_alloc returned %p, not page-aligned", p);
        for (size_t i = 0; gen && i < n; i++)
                set_elem(dt, p, i, gen(ctx, i));
        return p;
}

static void shared_case(const char *tag, hvd_dtype_t dt, hvd_reduce_op_t op, size_t n, bool in_place, bool in_shared,
                        bool out_shared) {
        ar_case_t k;
        snprintf(k.name, sizeof k.name, "shared.%s.%s.%s.%zu%s", tag, hvd_dtype_name(dt), op_names[op], n,
                 in_place ? ".inplace" : "");
        k.in_ctx = (ar_ctx_t){ .dt = dt, .op = op, .pre = 1.0, .post = 1.0, .r = rank, .salt = n };
        k.want_ctx = k.in_ctx;
        k.want_ctx.r = -1;
        void *in = in_shared ? shared_buf(dt, n, ar_gen, &k.in_ctx) : make_buf(dt, n, ar_gen, &k.in_ctx);
        void *out = in;
        if (!in_place) {
                out = out_shared ? shared_buf(dt, n, NULL, NULL) : xmalloc(n * hvd_dtype_size(dt));
                fill(dt, out, n, dt == HVD_BOOL ? 1 : 99);
        }
        MUST(hvd_allreduce(k.name, in, out, n, dt, op));
        compare(k.name, dt, out, n, ar_gen, &k.want_ctx);
        if (!in_place) {
                char what[160];
                snprintf(what, sizeof what, "%s: the input after the call", k.name);
                compare(what, dt, in, n, ar_gen, &k.in_ctx);
        }
        if (out != in) {
                if (out_shared)
                        MUST(hvd_shared_free(out));
                else
                        free(out);
        }
        if (in_shared)
                MUST(hvd_shared_free(in));
        else
                free(in);
}

static void scenario_shared(void) {
        /* the allocator */
        CHECK(hvd_shared_alloc(16, NULL) == -EINVAL, "hvd_shared_alloc(16, NULL) is not -EINVAL");
        CHECK(hvd_shared_free(NULL) == 0, "hvd_shared_free(NULL) is not 0");
        void *heap = xmalloc(64), *p = NULL, *q = NULL;
        CHECK(hvd_shared_free(heap) == -EINVAL, "hvd_shared_free of malloc's memory is not -EINVAL");
        free(heap);
        MUST(hvd_shared_alloc(3 << 20, &p));
        CHECK(hvd_shared_free((char *) p + 4096) == -EINVAL, "hvd_shared_free inside a block is not -EINVAL");
        memset(p, 0x5a, 3 << 20);
        MUST(hvd_shared_free(p));
        MUST(hvd_shared_alloc(3 << 20, &q));
        size_t dirty = 0;
        for (size_t i = 0; i < (3u << 20); i++)
                dirty += ((unsigned char *) q)[i] != 0;
        CHECK(dirty == 0, "a block allocated again has %zu non-zero bytes, expected zero-filled memory", dirty);
        MUST(hvd_shared_free(q));
        MUST(hvd_shared_alloc(0, &p));
        CHECK(p != NULL, "hvd_shared_alloc(0) returned NULL");
        MUST(hvd_shared_free(p));

        /* every rank shared: in place, out of place, every op, odd sizes,
         * segments that do not divide evenly, several dtypes */
        for (size_t o = 0; o < N_OPS; o++)
                shared_case("all", HVD_FLOAT32, all_ops[o], (1u << 18) + 5, true, true, true);
        shared_case("all", HVD_FLOAT32, HVD_REDUCE_SUM, 9u << 20, true, true, true);
        shared_case("all", HVD_FLOAT32, HVD_REDUCE_AVERAGE, (3u << 20) + 1, false, true, true);
        shared_case("all", HVD_FLOAT64, HVD_REDUCE_SUM, (1u << 17) + 3, false, true, true);
        shared_case("all", HVD_FLOAT16, HVD_REDUCE_SUM, (1u << 19) + 7, true, true, true);
        shared_case("all", HVD_INT32, HVD_REDUCE_MAX, (1u << 18) + 1, true, true, true);
        shared_case("all", HVD_INT64, HVD_REDUCE_SUM, (1u << 17) + 9, false, true, true);
        shared_case("all", HVD_UINT8, HVD_REDUCE_MIN, (3u << 20) + 2, true, true, true);
        shared_case("all", HVD_BOOL, HVD_REDUCE_MAX, (1u << 20) + 3, true, true, true);
        /* below the threshold, and the same tensor twice in a row */
        shared_case("small", HVD_FLOAT32, HVD_REDUCE_SUM, 1000, true, true, true);
        shared_case("again", HVD_FLOAT32, HVD_REDUCE_SUM, 9u << 20, true, true, true);
        /* some ranks shared, others not: the usual path, exact */
        shared_case("rank0", HVD_FLOAT32, HVD_REDUCE_SUM, (1u << 20) + 5, true, rank == 0, true);
        shared_case("last", HVD_FLOAT32, HVD_REDUCE_AVERAGE, 3u << 20, false, rank != size - 1, rank != size - 1);
        /* the input shared, the output not: the usual path */
        shared_case("outheap", HVD_FLOAT32, HVD_REDUCE_SUM, (1u << 20) + 5, false, true, false);
        shared_case("after", HVD_FLOAT32, HVD_REDUCE_SUM, 9u << 20, false, true, true);
}

/* Shared tensors in one group, each below the zero-copy threshold: fused
 * (a group is released whole, its 2.6 MB under the 4 MiB threshold), the
 * operation reads them in place as one (every member shared on every
 * rank), or takes the usual path (one member not shared on rank 0). Exact
 * results, out-of-place inputs untouched. */
static void shared_fused_round(const char *tag, bool in_place, bool mixed) {
        enum { N_T = 8 };
        ar_case_t k[N_T];
        void *in[N_T], *out[N_T];
        bool heap[N_T];
        hvd_request_t q[N_T];
        int64_t shape[N_T][1];
        for (int i = 0; i < N_T; i++) {
                size_t n = 75000 + (size_t) i * 13;
                hvd_dtype_t dt = i % 3 == 2 ? HVD_FLOAT64 : HVD_FLOAT32;
                snprintf(k[i].name, sizeof k[i].name, "shared.fused.%s.%d", tag, i);
                k[i].in_ctx =
                        (ar_ctx_t){ .dt = dt, .op = HVD_REDUCE_SUM, .pre = 1.0, .post = 1.0, .r = rank, .salt = n };
                k[i].want_ctx = k[i].in_ctx;
                k[i].want_ctx.r = -1;
                k[i].n = n;
                heap[i] = mixed && rank == 0 && i == 3;
                in[i] = heap[i] ? make_buf(dt, n, ar_gen, &k[i].in_ctx) : shared_buf(dt, n, ar_gen, &k[i].in_ctx);
                out[i] = in_place ? in[i] : heap[i] ? xmalloc(n * hvd_dtype_size(dt)) : shared_buf(dt, n, NULL, NULL);
                q[i] = (hvd_request_t) HVD_REQUEST_INIT;
                q[i].name = k[i].name;
                q[i].input = in[i];
                q[i].output = out[i];
                q[i].dtype = dt;
                q[i].ndim = 1;
                shape[i][0] = (int64_t) n;
                q[i].shape = shape[i];
                q[i].reduce_op = HVD_REDUCE_SUM;
        }
        hvd_handle_t *h = NULL;
        MUST(hvd_grouped_allreduce_async(q, N_T, &h));
        wait_ok(h, k[0].name);
        hvd_handle_release(&h);
        for (int i = N_T; i-- > 0;) {
                compare(k[i].name, k[i].in_ctx.dt, out[i], k[i].n, ar_gen, &k[i].want_ctx);
                if (!in_place)
                        compare(k[i].name, k[i].in_ctx.dt, in[i], k[i].n, ar_gen, &k[i].in_ctx);
                if (out[i] != in[i]) {
                        if (heap[i])
                                free(out[i]);
                        else
                                MUST(hvd_shared_free(out[i]));
                }
                if (heap[i])
                        free(in[i]);
                else
                        MUST(hvd_shared_free(in[i]));
        }
}

static void scenario_shared_fused(void) {
        for (int round = 0; round < 3; round++) {
                shared_fused_round("inplace", true, false);
                shared_fused_round("outofplace", false, false);
                shared_fused_round("mixed", true, true);
        }
}

static void scenario_grouped(void) {
        /* one handle, many tensors of different dtypes, ops and sizes */
        enum { G = 8 };
        ar_case_t k[G];
        const hvd_dtype_t dts[G] = { HVD_FLOAT32, HVD_FLOAT64, HVD_INT32, HVD_FLOAT16,
                                     HVD_UINT8,   HVD_FLOAT32, HVD_INT64, HVD_BFLOAT16 };
        const hvd_reduce_op_t ops[G] = { HVD_REDUCE_SUM, HVD_REDUCE_AVERAGE, HVD_REDUCE_MAX, HVD_REDUCE_SUM,
                                         HVD_REDUCE_MIN, HVD_REDUCE_SUM,     HVD_REDUCE_SUM, HVD_REDUCE_PRODUCT };
        const size_t ns[G] = { 10, 1000, 7, 1, 0, 2u << 20, 100, 64 };
        /* HVD_TEST_LATE_RANK (ranks, comma-separated) / HVD_TEST_LATE_MS:
         * those ranks come late to the first group (their hosts' other
         * ranks' requests wait for them) */
        const char *late = getenv("HVD_TEST_LATE_RANK"), *late_ms = getenv("HVD_TEST_LATE_MS");
        for (const char *c = late; c && late_ms && *c; c += strcspn(c, ","), c += *c == ',')
                if (atoi(c) == rank)
                        usleep((useconds_t) atoi(late_ms) * 1000);
        for (int round = 0; round < 3; round++) {
                hvd_request_t q[G];
                for (int i = 0; i < G; i++) {
                        char tag[32];
                        snprintf(tag, sizeof tag, "group%d", i);
                        ar_case_init(&k[i], tag, dts[i], ops[i], ns[i], 1, 1.0, 1.0, i == 3);
                        q[i] = (hvd_request_t) HVD_REQUEST_INIT;
                        q[i].name = k[i].name;
                        q[i].input = k[i].in;
                        q[i].output = k[i].out;
                        q[i].dtype = dts[i];
                        q[i].ndim = 1;
                        q[i].shape = k[i].shape;
                        q[i].reduce_op = ops[i];
                }
                hvd_handle_t *h = NULL;
                MUST(hvd_grouped_allreduce_async(q, G, &h));
                wait_ok(h, "grouped allreduce");
                for (int i = 0; i < G; i++) {
                        compare(k[i].name, dts[i], k[i].out, k[i].n, ar_gen, &k[i].want_ctx);
                        if (k[i].out != k[i].in)
                                free(k[i].out);
                        free(k[i].in);
                }
                CHECK(hvd_handle_output(h, 0, NULL, NULL, NULL, NULL) == -ENODATA,
                      "hvd_handle_output on an allreduce should be -ENODATA");
                hvd_handle_release(&h);
        }
}

/* The same new names, batched differently by each rank's client: local
 * rank 0 asks for all of them at once, the others one by one,
 * HVD_TEST_STAGGER_MS apart (default 3), twice (each host's daemon shares
 * the names its ranks all sent alike, whatever batches they came in). */
static void scenario_staggered(void) {
        enum { S = 12 };
        ar_case_t k[S];
        const char *gap = getenv("HVD_TEST_STAGGER_MS");
        useconds_t gap_us = (useconds_t) (gap ? atoi(gap) : 3) * 1000;
        for (int round = 0; round < 2; round++) {
                for (int i = 0; i < S; i++) {
                        char tag[32];
                        snprintf(tag, sizeof tag, "stag%d.%d", round, i);
                        ar_case_init(&k[i], tag, i % 2 ? HVD_FLOAT64 : HVD_FLOAT32, HVD_REDUCE_SUM, 100 + (size_t) i, 1,
                                     1.0, 1.0, false);
                }
                for (int i = 0; i < S; i++) {
                        if (hvd_local_rank() != 0)
                                usleep(gap_us);
                        ar_case_submit(&k[i]);
                }
                for (int i = S; i-- > 0;)
                        ar_case_finish(&k[i]);
        }
}

/* ---- broadcast ---- */

typedef struct bc_ctx {
        hvd_dtype_t dt;
        int who;
} bc_ctx_t;

static double bc_gen(const void *vctx, size_t i) {
        const bc_ctx_t *c = vctx;
        if (c->dt == HVD_BOOL)
                return (i + (size_t) c->who) % 2;
        double v = (double) ((i * 13 + (size_t) c->who * 7) % 101);
        if (is_unsigned(c->dt))
                return v;
        return is_float(c->dt) ? (v - 50.0) * 0.5 : v - 50.0;
}

static void scenario_broadcast(void) {
        const hvd_dtype_t dts[] = { HVD_UINT8,   HVD_INT16,   HVD_INT64, HVD_FLOAT16, HVD_BFLOAT16,
                                    HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL,  HVD_INT8,    HVD_INT32 };
        const size_t ns[] = { 0, 1, 1000 };
        enum { MAXK = 10 * 3 + 8 };
        for (int root = 0; root < size; root++) {
                struct {
                        char name[96];
                        hvd_dtype_t dt;
                        size_t n;
                        int64_t shape[2];
                        int ndim;
                        void *in, *out;
                        hvd_handle_t *h;
                } k[MAXK];
                size_t nk = 0;
                for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
                        for (size_t s = 0; s < 3; s++) {
                                snprintf(k[nk].name, sizeof k[nk].name, "bc.root%d.%s.%zu", root,
                                         hvd_dtype_name(dts[d]), ns[s]);
                                k[nk].dt = dts[d];
                                k[nk].n = ns[s];
                                k[nk].ndim = 1;
                                k[nk].shape[0] = (int64_t) ns[s];
                                nk++;
                        }
                /* multi-dim, scalar, and larger than a shared-memory slot */
                snprintf(k[nk].name, sizeof k[nk].name, "bc.root%d.2d", root);
                k[nk].dt = HVD_FLOAT32;
                k[nk].n = 60;
                k[nk].ndim = 2;
                k[nk].shape[0] = 6;
                k[nk].shape[1] = 10;
                nk++;
                snprintf(k[nk].name, sizeof k[nk].name, "bc.root%d.scalar", root);
                k[nk].dt = HVD_FLOAT64;
                k[nk].n = 1;
                k[nk].ndim = 0;
                nk++;
                snprintf(k[nk].name, sizeof k[nk].name, "bc.root%d.large", root);
                k[nk].dt = HVD_FLOAT32;
                k[nk].n = 5u << 20;
                k[nk].ndim = 1;
                k[nk].shape[0] = 5 << 20;
                nk++;
                snprintf(k[nk].name, sizeof k[nk].name, "bc.root%d.large16", root);
                k[nk].dt = HVD_BFLOAT16;
                k[nk].n = (3u << 20) + 1;
                k[nk].ndim = 1;
                k[nk].shape[0] = (3 << 20) + 1;
                nk++;
                for (size_t i = 0; i < nk; i++) {
                        bc_ctx_t mine = { k[i].dt, rank == root ? root : 100 + rank };
                        k[i].in = make_buf(k[i].dt, k[i].n, bc_gen, &mine);
                        bool in_place = i % 3 == 1;
                        k[i].out = in_place ? k[i].in : xmalloc(k[i].n * hvd_dtype_size(k[i].dt));
                        if (!in_place)
                                fill(k[i].dt, k[i].out, k[i].n, 7);
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = k[i].name;
                        q.input = k[i].in;
                        q.output = k[i].out;
                        q.dtype = k[i].dt;
                        q.ndim = k[i].ndim;
                        q.shape = k[i].shape;
                        q.root = root;
                        MUST(hvd_broadcast_async(&q, &k[i].h));
                }
                for (size_t i = 0; i < nk; i++) {
                        wait_ok(k[i].h, k[i].name);
                        bc_ctx_t want = { k[i].dt, root };
                        compare(k[i].name, k[i].dt, k[i].out, k[i].n, bc_gen, &want);
                        if (k[i].out != k[i].in) {
                                /* the root's input is untouched */
                                bc_ctx_t mine = { k[i].dt, rank == root ? root : 100 + rank };
                                compare("broadcast input", k[i].dt, k[i].in, k[i].n, bc_gen, &mine);
                                free(k[i].out);
                        }
                        free(k[i].in);
                        hvd_handle_release(&k[i].h);
                }
                /* the synchronous helper, in place */
                bc_ctx_t mine = { HVD_INT32, rank == root ? root : 100 + rank }, want = { HVD_INT32, root };
                void *buf = make_buf(HVD_INT32, 257, bc_gen, &mine);
                char name[64];
                snprintf(name, sizeof name, "bc.sync.root%d", root);
                MUST(hvd_broadcast(name, buf, 257, HVD_INT32, root));
                compare(name, HVD_INT32, buf, 257, bc_gen, &want);
                free(buf);
        }
        /* a root out of range is refused at submission */
        float x = 0;
        CHECK(hvd_broadcast("bc.badroot", &x, 1, HVD_FLOAT32, size) == -EINVAL,
              "broadcast with root %d of %d was not refused with -EINVAL", size, size);
        CHECK(hvd_broadcast("bc.badroot", &x, 1, HVD_FLOAT32, -1) == -EINVAL,
              "broadcast with root -1 was not refused with -EINVAL");
}

/* ---- allgather ---- */

typedef struct ag_spec {
        const char *tag;
        hvd_dtype_t dt;
        int ndim;
        int64_t rest[3]; /* dims after the first */
        int64_t (*rows)(int r);
} ag_spec_t;

static int64_t rows_r(int r) {
        return r;
} /* rank 0 has none */
static int64_t rows_r1(int r) {
        return r + 1;
}
static int64_t rows_odd(int r) {
        return 2 * r + 1;
}
static int64_t rows_rev(int r) {
        return size - r;
}
static int64_t rows_big(int r) {
        return (int64_t) (r + 1) * 100000;
}
static int64_t rows_none(int r) {
        return 0;
}

typedef struct ag_ctx {
        hvd_dtype_t dt;
        int r; /* >= 0: this rank's input; -1: gathered output */
        int64_t row_elems;
        int64_t (*rows)(int r);
        int salt;
} ag_ctx_t;

static double ag_value(hvd_dtype_t dt, int src, int64_t row, int64_t k, int salt) {
        int64_t v = (src * 37 + row * 5 + k * 3 + salt) % 97;
        if (dt == HVD_BOOL)
                return v % 2;
        if (is_unsigned(dt))
                return (double) v;
        return is_float(dt) ? (double) (v - 48) * 0.5 : (double) (v - 48);
}

static double ag_gen(const void *vctx, size_t i) {
        const ag_ctx_t *c = vctx;
        int64_t row = (int64_t) i / c->row_elems, k = (int64_t) i % c->row_elems;
        if (c->r >= 0)
                return ag_value(c->dt, c->r, row, k, c->salt);
        for (int s = 0; s < size; s++) {
                int64_t n = c->rows(s);
                if (row < n)
                        return ag_value(c->dt, s, row, k, c->salt);
                row -= n;
        }
        return NAN;
}

typedef struct ag_case {
        char name[96];
        const ag_spec_t *spec;
        int64_t shape[4], row_elems;
        size_t n_in;
        void *in;
        ag_ctx_t in_ctx;
} ag_case_t;

static void ag_case_init(ag_case_t *c, const ag_spec_t *sp, int salt) {
        c->spec = sp;
        snprintf(c->name, sizeof c->name, "ag.%s.%d", sp->tag, salt);
        c->shape[0] = sp->rows(rank);
        c->row_elems = 1;
        for (int d = 1; d < sp->ndim; d++) {
                c->shape[d] = sp->rest[d - 1];
                c->row_elems *= sp->rest[d - 1];
        }
        c->n_in = (size_t) (c->shape[0] * c->row_elems);
        c->in_ctx = (ag_ctx_t){ sp->dt, rank, c->row_elems, sp->rows, salt };
        c->in = make_buf(sp->dt, c->n_in, ag_gen, &c->in_ctx);
}

static hvd_request_t ag_request(const ag_case_t *c) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = c->name;
        q.input = c->in;
        q.dtype = c->spec->dt;
        q.ndim = c->spec->ndim;
        q.shape = c->shape;
        return q;
}

static void ag_check_output(const ag_case_t *c, const hvd_handle_t *h, size_t index) {
        const void *data = NULL;
        size_t bytes = 0;
        int ndim = -1;
        const int64_t *shape = NULL;
        int r = hvd_handle_output(h, index, &data, &bytes, &ndim, &shape);
        if (r < 0) {
                fail("%s: hvd_handle_output: %s", c->name, errname(r));
                return;
        }
        int64_t total = 0;
        for (int s = 0; s < size; s++)
                total += c->spec->rows(s);
        size_t want_elems = (size_t) (total * c->row_elems);
        CHECK(ndim == c->spec->ndim, "%s: output ndim %d, expected %d", c->name, ndim, c->spec->ndim);
        CHECK(shape && shape[0] == total, "%s: output first dimension %" PRId64 ", expected %" PRId64, c->name,
              shape ? shape[0] : -1, total);
        for (int d = 1; d < c->spec->ndim && shape; d++)
                CHECK(shape[d] == c->shape[d], "%s: output dim %d is %" PRId64 ", expected %" PRId64, c->name, d,
                      shape[d], c->shape[d]);
        CHECK(bytes == want_elems * hvd_dtype_size(c->spec->dt), "%s: output %zu bytes, expected %zu", c->name, bytes,
              want_elems * hvd_dtype_size(c->spec->dt));
        if (bytes == want_elems * hvd_dtype_size(c->spec->dt) && data) {
                ag_ctx_t want = c->in_ctx;
                want.r = -1;
                compare(c->name, c->spec->dt, data, want_elems, ag_gen, &want);
        }
}

static void scenario_allgather(void) {
        static const ag_spec_t specs[] = {
                { "rows_r.3d.f32", HVD_FLOAT32, 3, { 3, 2 }, rows_r },
                { "rows_r1.1d.i64", HVD_INT64, 1, { 0 }, rows_r1 },
                { "odd.2d.f16", HVD_FLOAT16, 2, { 4 }, rows_odd },
                { "rev.2d.u8", HVD_UINT8, 2, { 5 }, rows_rev },
                { "rev.2d.bool", HVD_BOOL, 2, { 3 }, rows_rev },
                { "r1.4d.f64", HVD_FLOAT64, 4, { 2, 1, 3 }, rows_r1 },
                { "none.2d.i32", HVD_INT32, 2, { 3 }, rows_none },
                { "big.2d.f32", HVD_FLOAT32, 2, { 4 }, rows_big },
        };
        enum { NS = sizeof specs / sizeof specs[0] };
        for (int round = 0; round < 2; round++) {
                ag_case_t c[NS];
                hvd_handle_t *h[NS];
                for (int i = 0; i < NS; i++) {
                        ag_case_init(&c[i], &specs[i], round);
                        hvd_request_t q = ag_request(&c[i]);
                        MUST(hvd_allgather_async(&q, &h[i]));
                }
                for (int i = 0; i < NS; i++) {
                        wait_ok(h[i], c[i].name);
                        ag_check_output(&c[i], h[i], 0);
                        if (i == 1) { /* take the output instead of copying it */
                                void *data = NULL;
                                size_t bytes = 0;
                                MUST(hvd_handle_steal_output(h[i], 0, &data, &bytes));
                                CHECK(data != NULL, "steal_output gave NULL");
                                free(data);
                        }
                        hvd_handle_release(&h[i]);
                        free(c[i].in);
                }
        }

        /* grouped allgather: one handle, outputs by index */
        static const ag_spec_t gspecs[] = {
                { "g0", HVD_FLOAT32, 2, { 3 }, rows_r1 },
                { "g1", HVD_INT8, 1, { 0 }, rows_r },
                { "g2", HVD_FLOAT64, 3, { 2, 2 }, rows_rev },
        };
        ag_case_t g[3];
        hvd_request_t q[3];
        for (int i = 0; i < 3; i++) {
                ag_case_init(&g[i], &gspecs[i], 7);
                q[i] = ag_request(&g[i]);
        }
        hvd_handle_t *h = NULL;
        MUST(hvd_grouped_allgather_async(q, 3, &h));
        wait_ok(h, "grouped allgather");
        for (int i = 0; i < 3; i++) {
                ag_check_output(&g[i], h, (size_t) i);
                free(g[i].in);
        }
        CHECK(hvd_handle_output(h, 3, NULL, NULL, NULL, NULL) == -EINVAL, "output index 3 of 3 not refused");
        hvd_handle_release(&h);
}

/* ---- alltoall ---- */

static double a2a_value(int src, int dst, int64_t j, int64_t col) {
        return (double) (src * 10000 + dst * 100 + j) * (col ? -1 : 1);
}

static void scenario_alltoall(void) {
        for (int round = 0; round < 2; round++) {
                /* uneven splits with zeros: rank r sends (r + d) % 3 rows to d */
                int64_t *splits = xmalloc((size_t) size * sizeof *splits);
                int64_t rows = 0;
                for (int d = 0; d < size; d++)
                        rows += splits[d] = (rank + d) % 3;
                int32_t *in = xmalloc((size_t) rows * 2 * sizeof *in);
                int64_t o = 0;
                for (int d = 0; d < size; d++)
                        for (int64_t j = 0; j < splits[d]; j++, o++) {
                                in[o * 2] = (int32_t) a2a_value(rank, d, j, 0);
                                in[o * 2 + 1] = (int32_t) a2a_value(rank, d, j, 1);
                        }
                int64_t shape[2] = { rows, 2 };
                hvd_request_t q = HVD_REQUEST_INIT;
                char name[64];
                snprintf(name, sizeof name, "a2a.uneven.%d", round);
                q.name = name;
                q.input = in;
                q.dtype = HVD_INT32;
                q.ndim = 2;
                q.shape = shape;
                q.splits = splits;
                hvd_handle_t *h = NULL;
                MUST(hvd_alltoall_async(&q, &h));

                /* NULL splits: 2 rows to everybody, float64 rows of 3 */
                int64_t shape2[2] = { 2 * size, 3 };
                double *in2 = xmalloc((size_t) size * 2 * 3 * sizeof *in2);
                for (int64_t k = 0; k < 2 * size; k++)
                        for (int c = 0; c < 3; c++)
                                in2[k * 3 + c] = rank * 1000 + (double) k * 10 + c + 0.5;
                hvd_request_t q2 = HVD_REQUEST_INIT;
                char name2[64];
                snprintf(name2, sizeof name2, "a2a.even.%d", round);
                q2.name = name2;
                q2.input = in2;
                q2.dtype = HVD_FLOAT64;
                q2.ndim = 2;
                q2.shape = shape2;
                hvd_handle_t *h2 = NULL;
                MUST(hvd_alltoall_async(&q2, &h2));

                /* everything to rank 0: the others receive nothing */
                int64_t *splits3 = calloc((size_t) size, sizeof *splits3);
                splits3[0] = rank + 1;
                int64_t shape3[1] = { rank + 1 };
                float *in3 = xmalloc((size_t) (rank + 1) * sizeof *in3);
                for (int k = 0; k <= rank; k++)
                        in3[k] = (float) (rank * 10 + k);
                hvd_request_t q3 = HVD_REQUEST_INIT;
                char name3[64];
                snprintf(name3, sizeof name3, "a2a.to0.%d", round);
                q3.name = name3;
                q3.input = in3;
                q3.dtype = HVD_FLOAT32;
                q3.ndim = 1;
                q3.shape = shape3;
                q3.splits = splits3;
                hvd_handle_t *h3 = NULL;
                MUST(hvd_alltoall_async(&q3, &h3));

                /* larger than a slot: 600000 float32 to everybody */
                const int64_t per = 600000;
                int64_t shape4[1] = { per * size };
                float *in4 = xmalloc((size_t) (per * size) * sizeof *in4);
                for (int64_t k = 0; k < per * size; k++)
                        in4[k] = (float) (rank * 4000000 + k);
                hvd_request_t q4 = HVD_REQUEST_INIT;
                char name4[64];
                snprintf(name4, sizeof name4, "a2a.large.%d", round);
                q4.name = name4;
                q4.input = in4;
                q4.dtype = HVD_FLOAT32;
                q4.ndim = 1;
                q4.shape = shape4;
                hvd_handle_t *h4 = NULL;
                MUST(hvd_alltoall_async(&q4, &h4));

                /* check 1 */
                wait_ok(h, name);
                const void *data;
                size_t bytes;
                int ndim;
                const int64_t *oshape, *recv;
                MUST(hvd_handle_output(h, 0, &data, &bytes, &ndim, &oshape));
                MUST(hvd_handle_recv_splits(h, &recv));
                int64_t want_rows = 0;
                for (int s = 0; s < size; s++) {
                        int64_t w = (s + rank) % 3;
                        CHECK(recv[s] == w, "%s: recv_splits[%d] = %" PRId64 ", expected %" PRId64, name, s, recv[s],
                              w);
                        want_rows += w;
                }
                CHECK(ndim == 2 && oshape[0] == want_rows && oshape[1] == 2,
                      "%s: output shape [%" PRId64 ", %" PRId64 "] (ndim %d), expected [%" PRId64 ", 2]", name,
                      oshape[0], ndim > 1 ? oshape[1] : -1, ndim, want_rows);
                CHECK(bytes == (size_t) want_rows * 2 * 4, "%s: %zu bytes, expected %zu", name, bytes,
                      (size_t) want_rows * 8);
                if (bytes == (size_t) want_rows * 8) {
                        const int32_t *out = data;
                        int64_t k = 0;
                        for (int s = 0; s < size; s++)
                                for (int64_t j = 0; j < (s + rank) % 3; j++, k++)
                                        for (int c = 0; c < 2; c++)
                                                CHECK(out[k * 2 + c] == (int32_t) a2a_value(s, rank, j, c),
                                                      "%s: row %" PRId64 " col %d is %d, expected %d", name, k, c,
                                                      out[k * 2 + c], (int32_t) a2a_value(s, rank, j, c));
                }
                hvd_handle_release(&h);

                /* check 2 */
                wait_ok(h2, name2);
                MUST(hvd_handle_output(h2, 0, &data, &bytes, &ndim, &oshape));
                MUST(hvd_handle_recv_splits(h2, &recv));
                for (int s = 0; s < size; s++)
                        CHECK(recv[s] == 2, "%s: recv_splits[%d] = %" PRId64 ", expected 2", name2, s, recv[s]);
                CHECK(ndim == 2 && oshape[0] == 2 * size && oshape[1] == 3, "%s: wrong output shape", name2);
                CHECK(bytes == (size_t) size * 2 * 3 * 8, "%s: %zu bytes", name2, bytes);
                if (bytes == (size_t) size * 48) {
                        const double *out = data;
                        for (int s = 0; s < size; s++)
                                for (int j = 0; j < 2; j++)
                                        for (int c = 0; c < 3; c++) {
                                                double w = s * 1000 + (double) (rank * 2 + j) * 10 + c + 0.5;
                                                double g = out[(s * 2 + j) * 3 + c];
                                                CHECK(g == w, "%s: from rank %d row %d col %d is %g, expected %g",
                                                      name2, s, j, c, g, w);
                                        }
                }
                hvd_handle_release(&h2);

                /* check 3 */
                wait_ok(h3, name3);
                MUST(hvd_handle_output(h3, 0, &data, &bytes, &ndim, &oshape));
                MUST(hvd_handle_recv_splits(h3, &recv));
                int64_t total3 = 0;
                for (int s = 0; s < size; s++) {
                        int64_t w = rank == 0 ? s + 1 : 0;
                        CHECK(recv[s] == w, "%s: recv_splits[%d] = %" PRId64 ", expected %" PRId64, name3, s, recv[s],
                              w);
                        total3 += w;
                }
                CHECK(ndim == 1 && oshape[0] == total3, "%s: output rows %" PRId64 ", expected %" PRId64, name3,
                      oshape[0], total3);
                CHECK(bytes == (size_t) total3 * 4, "%s: %zu bytes, expected %zu", name3, bytes, (size_t) total3 * 4);
                if (rank == 0 && bytes == (size_t) total3 * 4) {
                        const float *out = data;
                        int64_t k = 0;
                        for (int s = 0; s < size; s++)
                                for (int j = 0; j <= s; j++, k++)
                                        CHECK(out[k] == (float) (s * 10 + j), "%s: element %" PRId64 " is %g", name3, k,
                                              out[k]);
                }
                hvd_handle_release(&h3);

                /* check 4 */
                wait_ok(h4, name4);
                MUST(hvd_handle_output(h4, 0, &data, &bytes, &ndim, &oshape));
                CHECK(bytes == (size_t) (per * size) * 4, "%s: %zu bytes", name4, bytes);
                if (bytes == (size_t) (per * size) * 4) {
                        const float *out = data;
                        size_t bad = 0;
                        for (int s = 0; s < size; s++)
                                for (int64_t j = 0; j < per; j++) {
                                        float w = (float) (s * 4000000 + rank * per + j);
                                        if (out[s * per + j] != w && bad++ < 3)
                                                fail("%s: from rank %d element %" PRId64 " is %g, expected %g", name4,
                                                     s, j, out[s * per + j], w);
                                }
                }
                hvd_handle_release(&h4);
                free(in);
                free(in2);
                free(in3);
                free(in4);
                free(splits);
                free(splits3);
        }
        /* splits that do not sum to the first dimension: refused at once */
        int64_t bad_splits[64] = { 0 };
        bad_splits[0] = 5;
        int64_t shape[1] = { 4 };
        float in[4] = { 0 };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = "a2a.badsplits";
        q.input = in;
        q.dtype = HVD_FLOAT32;
        q.ndim = 1;
        q.shape = shape;
        q.splits = bad_splits;
        hvd_handle_t *h = NULL;
        CHECK(size > 64 || hvd_alltoall_async(&q, &h) == -EINVAL, "alltoall with bad splits not refused");
        CHECK(h == NULL, "a refused submission produced a handle");
}

/* ---- reducescatter ---- */

static void rs_rows(int64_t rows, int r, int64_t *start, int64_t *n) {
        int64_t q = rows / size, rem = rows % size;
        *start = r * q + (r < rem ? r : rem);
        *n = q + (r < rem ? 1 : 0);
}

typedef struct rs_ctx {
        hvd_dtype_t dt;
        hvd_reduce_op_t op;
        int64_t row_elems, first_row;
        int r; /* >= 0: input of rank r; -1: expected output rows from first_row */
} rs_ctx_t;

static double rs_input(const rs_ctx_t *c, int r, size_t i) {
        double v = (double) ((int64_t) i % 23);
        if (c->op == HVD_REDUCE_AVERAGE)
                return v + (is_float(c->dt) ? 0.5 : 0) + (2 * r - (size - 1));
        return is_float(c->dt) ? (v - 11) * 0.5 + r : v + r;
}

static double rs_gen(const void *vctx, size_t i) {
        const rs_ctx_t *c = vctx;
        if (c->r >= 0)
                return rs_input(c, c->r, i);
        size_t g = (size_t) (c->first_row * c->row_elems) + i;
        double acc = 0;
        for (int r = 0; r < size; r++)
                acc += rs_input(c, r, g);
        return c->op == HVD_REDUCE_AVERAGE ? acc / size : acc;
}

typedef struct rs_case {
        char name[96];
        rs_ctx_t ctx;
        int ndim;
        int64_t shape[3];
        void *in;
} rs_case_t;

static void rs_case_init(rs_case_t *c, const char *tag, hvd_dtype_t dt, hvd_reduce_op_t op, int64_t rows, int64_t rest,
                         int round) {
        snprintf(c->name, sizeof c->name, "rs.%s.%d", tag, round);
        c->ctx = (rs_ctx_t){ dt, op, rest, 0, rank };
        c->ndim = 2;
        c->shape[0] = rows;
        c->shape[1] = rest;
        c->in = make_buf(dt, (size_t) (rows * rest), rs_gen, &c->ctx);
}

static hvd_request_t rs_request(const rs_case_t *c) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = c->name;
        q.input = c->in;
        q.dtype = c->ctx.dt;
        q.reduce_op = c->ctx.op;
        q.ndim = c->ndim;
        q.shape = c->shape;
        return q;
}

static void rs_check(const rs_case_t *c, const hvd_handle_t *h, size_t index) {
        const void *data;
        size_t bytes;
        int ndim;
        const int64_t *shape;
        int r = hvd_handle_output(h, index, &data, &bytes, &ndim, &shape);
        if (r < 0) {
                fail("%s: hvd_handle_output: %s", c->name, errname(r));
                return;
        }
        int64_t start, n;
        rs_rows(c->shape[0], rank, &start, &n);
        CHECK(ndim == 2 && shape[0] == n && shape[1] == c->shape[1],
              "%s: output shape [%" PRId64 ", %" PRId64 "], expected [%" PRId64 ", %" PRId64 "]", c->name, shape[0],
              ndim > 1 ? shape[1] : -1, n, c->shape[1]);
        size_t elems = (size_t) (n * c->shape[1]);
        CHECK(bytes == elems * hvd_dtype_size(c->ctx.dt), "%s: %zu bytes, expected %zu", c->name, bytes,
              elems * hvd_dtype_size(c->ctx.dt));
        if (bytes == elems * hvd_dtype_size(c->ctx.dt)) {
                rs_ctx_t want = c->ctx;
                want.r = -1;
                want.first_row = start;
                compare(c->name, c->ctx.dt, data, elems, rs_gen, &want);
        }
}

static void scenario_reducescatter(void) {
        for (int round = 0; round < 2; round++) {
                enum { NR = 6 };
                rs_case_t c[NR];
                hvd_handle_t *h[NR];
                rs_case_init(&c[0], "sum.f32", HVD_FLOAT32, HVD_REDUCE_SUM, 2 * size + 1, 3, round);
                rs_case_init(&c[1], "avg.f64", HVD_FLOAT64, HVD_REDUCE_AVERAGE, 3 * size + 2, 2, round);
                rs_case_init(&c[2], "sum.i32.onerow", HVD_INT32, HVD_REDUCE_SUM, 1, 4, round);
                rs_case_init(&c[3], "avg.f32", HVD_FLOAT32, HVD_REDUCE_AVERAGE, 5 * size, 7, round);
                rs_case_init(&c[4], "sum.i64", HVD_INT64, HVD_REDUCE_SUM, size + size / 2 + 1, 5, round);
                rs_case_init(&c[5], "sum.large", HVD_FLOAT32, HVD_REDUCE_SUM, 700000 * (int64_t) size + 3, 2, round);
                for (int i = 0; i < NR; i++) {
                        hvd_request_t q = rs_request(&c[i]);
                        MUST(hvd_reducescatter_async(&q, &h[i]));
                }
                for (int i = 0; i < NR; i++) {
                        wait_ok(h[i], c[i].name);
                        rs_check(&c[i], h[i], 0);
                        hvd_handle_release(&h[i]);
                        free(c[i].in);
                }
        }
        /* grouped */
        rs_case_t g[3];
        rs_case_init(&g[0], "g.sum", HVD_FLOAT32, HVD_REDUCE_SUM, 4 * size + 3, 2, 9);
        rs_case_init(&g[1], "g.avg", HVD_FLOAT64, HVD_REDUCE_AVERAGE, size + 1, 3, 9);
        rs_case_init(&g[2], "g.i16", HVD_INT16, HVD_REDUCE_SUM, 2 * size, 1, 9);
        hvd_request_t q[3];
        for (int i = 0; i < 3; i++)
                q[i] = rs_request(&g[i]);
        hvd_handle_t *h = NULL;
        MUST(hvd_grouped_reducescatter_async(q, 3, &h));
        wait_ok(h, "grouped reducescatter");
        for (int i = 0; i < 3; i++) {
                rs_check(&g[i], h, (size_t) i);
                free(g[i].in);
        }
        hvd_handle_release(&h);
}

/* ---- barrier ---- */

static const char *tmpdir(void) {
        const char *d = getenv("HVD_TEST_TMPDIR");
        return d && *d ? d : "/tmp";
}

static void scenario_barrier(void) {
        const char *job = getenv("HVD_JOB_ID");
        char path[512];
        /* the ordering check leaves marker files: only in a test's own
         * directory (HVD_TEST_TMPDIR), where a failure cannot litter /tmp */
        const char *d = getenv("HVD_TEST_TMPDIR");
        for (int round = 0; round < 3 && d && *d; round++) {
                snprintf(path, sizeof path, "%s/barrier.%s.%d.%d", tmpdir(), job ? job : "solo", round, rank);
                FILE *f = fopen(path, "w");
                if (!f) {
                        fail("cannot create %s: %s", path, strerror(errno));
                        return;
                }
                fclose(f);
                MUST(hvd_barrier());
                /* everybody created their file before anybody passed */
                for (int r = 0; r < size; r++) {
                        snprintf(path, sizeof path, "%s/barrier.%s.%d.%d", tmpdir(), job ? job : "solo", round, r);
                        CHECK(access(path, F_OK) == 0, "after barrier %d, rank %d's marker is missing", round, r);
                }
                MUST(hvd_barrier());
                snprintf(path, sizeof path, "%s/barrier.%s.%d.%d", tmpdir(), job ? job : "solo", round, rank);
                unlink(path);
        }
        /* barriers interleaved with async work */
        float x[4] = { 1, 2, 3, 4 }, y[4];
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[1] = { 4 };
        q.name = "barrier.around";
        q.input = x;
        q.output = y;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_SUM;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        MUST(hvd_barrier());
        wait_ok(h, "barrier.around");
        for (int i = 0; i < 4; i++)
                CHECK(y[i] == (float) ((i + 1) * size), "barrier.around[%d] = %g", i, y[i]);
        hvd_handle_release(&h);
}

/* ---- join ---- */

/* "rank 0 has" / "ranks [0, 1] have": the ranks that ran out of steps
 * before step i (rank r runs (r + 1) * k steps) */
static void join_who(char *buf, size_t len, int i, int k) {
        int n = 0;
        char list[256] = "";
        size_t o = 0;
        for (int r = 0; r < size; r++)
                if ((r + 1) * k <= i) {
                        o += (size_t) snprintf(list + o, sizeof list - o, "%s%d", n ? ", " : "", r);
                        n++;
                }
        if (n == 1)
                snprintf(buf, len, "rank %s has", list);
        else
                snprintf(buf, len, "ranks [%s] have", list);
}

/* h failed at once with the join error for what ("allgather 'x'") */
static void wait_joined(hvd_handle_t *h, const char *what, const char *who, const char *hint) {
        char want[512];
        snprintf(want, sizeof want,
                 "%s is not supported while %s joined: only allreduce runs until every rank has joined%s", what, who,
                 hint);
        int r = hvd_handle_wait(h);
        CHECK(r == HVD_EJOINED, "%s returned %s, expected HVD_EJOINED", what, errname(r));
        CHECK(strcmp(hvd_handle_error(h), want) == 0, "%s: error \"%s\", expected \"%s\"", what, hvd_handle_error(h),
              want);
}

/* Rank r runs (r + 1) * k steps of an allreduce, an allgather and a
 * broadcast, then joins: the allreduces of the others go on with zeros
 * from the joined ranks; their allgathers and broadcasts (and a barrier)
 * fail as in Horovod; every join returns the last rank, size - 1; then
 * every rank takes part again. Two rounds, the same names. */
static void scenario_join(void) {
        const int k = 3;
        for (int round = 0; round < 2; round++) {
                int steps = (rank + 1) * k;
                for (int i = 0; i < steps; i++) {
                        /* a rank whose steps ended before step i has joined (it
                         * never submits step i's tensors, so they complete
                         * only once its join is in) */
                        bool some_joined = i >= k;
                        char who[300] = "";
                        if (some_joined)
                                join_who(who, sizeof who, i, k);
                        char an[64], gn[64], bn[64];
                        snprintf(an, sizeof an, "join.ar.%d", i);
                        snprintf(gn, sizeof gn, "join.ag.%d", i);
                        snprintf(bn, sizeof bn, "join.bc.%d", i);
                        float x[5], y[5];
                        for (int j = 0; j < 5; j++)
                                x[j] = (float) ((rank + 1) * 100 + i + j);
                        int64_t shape[1] = { 5 };
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = an;
                        q.input = x;
                        q.output = y;
                        q.ndim = 1;
                        q.shape = shape;
                        q.reduce_op = HVD_REDUCE_SUM;
                        hvd_handle_t *ha = NULL, *hg = NULL, *hb = NULL;
                        MUST(hvd_allreduce_async(&q, &ha));
                        int32_t *g = xmalloc((size_t) (rank + 1) * 2 * sizeof *g);
                        int64_t gshape[2] = { rank + 1, 2 };
                        for (int j = 0; j < (rank + 1) * 2; j++)
                                g[j] = rank * 1000 + i * 10 + j;
                        hvd_request_t qg = HVD_REQUEST_INIT;
                        qg.name = gn;
                        qg.input = g;
                        qg.dtype = HVD_INT32;
                        qg.ndim = 2;
                        qg.shape = gshape;
                        MUST(hvd_allgather_async(&qg, &hg));
                        /* from the rank that never joins early */
                        int32_t bv[3] = { rank, rank, rank };
                        int64_t bshape[1] = { 3 };
                        hvd_request_t qb = HVD_REQUEST_INIT;
                        qb.name = bn;
                        qb.input = bv;
                        qb.output = bv;
                        qb.dtype = HVD_INT32;
                        qb.ndim = 1;
                        qb.shape = bshape;
                        qb.root = size - 1;
                        MUST(hvd_broadcast_async(&qb, &hb));
                        wait_ok(ha, an);
                        /* ranks that still run step i: (r + 1) * k > i */
                        for (int j = 0; j < 5; j++) {
                                float want = 0;
                                for (int r = 0; r < size; r++)
                                        if ((r + 1) * k > i)
                                                want += (float) ((r + 1) * 100 + i + j);
                                CHECK(y[j] == want, "round %d %s[%d] = %g, expected %g (joined ranks give zeros)",
                                      round, an, j, y[j], want);
                        }
                        hvd_handle_release(&ha);
                        char what[96];
                        if (some_joined) {
                                snprintf(what, sizeof what, "broadcast '%s'", bn);
                                wait_joined(hb, what, who, "");
                                snprintf(what, sizeof what, "allgather '%s'", gn);
                                wait_joined(hg, what, who,
                                            " (specify sparse_to_dense=True if using DistributedOptimizer)");
                                int r = hvd_barrier();
                                CHECK(r == HVD_EJOINED, "round %d step %d: a barrier returned %s, expected HVD_EJOINED",
                                      round, i, errname(r));
                        } else {
                                wait_ok(hb, bn);
                                for (int j = 0; j < 3; j++)
                                        CHECK(bv[j] == size - 1, "%s[%d] = %d, expected %d", bn, j, bv[j], size - 1);
                                wait_ok(hg, gn);
                                const void *data;
                                size_t bytes;
                                int nd;
                                const int64_t *os;
                                MUST(hvd_handle_output(hg, 0, &data, &bytes, &nd, &os));
                                int64_t rows = (int64_t) size * (size + 1) / 2;
                                CHECK(os[0] == rows, "round %d %s: %" PRId64 " rows, expected %" PRId64, round, gn,
                                      os[0], rows);
                                if (os[0] == rows && bytes == (size_t) rows * 8) {
                                        const int32_t *o = data;
                                        int64_t at = 0;
                                        for (int r = 0; r < size; r++)
                                                for (int j = 0; j < (r + 1) * 2; j++, at++)
                                                        CHECK(o[at] == r * 1000 + i * 10 + j,
                                                              "%s: element %" PRId64 " is %d", gn, at, o[at]);
                                }
                        }
                        hvd_handle_release(&hb);
                        hvd_handle_release(&hg);
                        free(g);
                }
                int last = hvd_join();
                if (last < 0)
                        fail("round %d: hvd_join failed: %s: %s", round, errname(last), hvd_last_error());
                else
                        CHECK(last == size - 1, "round %d: hvd_join returned %d, expected the last rank to join, %d",
                              round, last, size - 1);
                /* after everybody joined, everybody takes part again */
                float x = (float) rank, y = -1;
                char nm[32];
                snprintf(nm, sizeof nm, "join.after.%d", round);
                MUST(hvd_allreduce(nm, &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
                CHECK(y == (float) (size * (size - 1) / 2), "%s = %g after join, expected %d", nm, y,
                      size * (size - 1) / 2);
                MUST(hvd_barrier());
                int32_t v = rank, got[64];
                int64_t vs[1] = { 1 };
                hvd_request_t qv = HVD_REQUEST_INIT;
                qv.name = "join.ag.after";
                qv.input = &v;
                qv.dtype = HVD_INT32;
                qv.ndim = 1;
                qv.shape = vs;
                hvd_handle_t *hv = NULL;
                MUST(hvd_allgather_async(&qv, &hv));
                wait_ok(hv, qv.name);
                const void *data;
                size_t bytes;
                int nd;
                const int64_t *os;
                MUST(hvd_handle_output(hv, 0, &data, &bytes, &nd, &os));
                CHECK(bytes == (size_t) size * sizeof v && size <= 64, "join.ag.after: %zu bytes", bytes);
                if (bytes == (size_t) size * sizeof v && size <= 64) {
                        memcpy(got, data, bytes);
                        for (int r = 0; r < size; r++)
                                CHECK(got[r] == r, "join.ag.after[%d] = %d after join", r, got[r]);
                }
                hvd_handle_release(&hv);
        }
}

/* ---- many small tensors ---- */

typedef struct many_ctx {
        int k, r;
} many_ctx_t;

static double many_gen(const void *vctx, size_t j) {
        const many_ctx_t *c = vctx;
        if (c->r >= 0)
                return c->k + (double) j * 0.5 + c->r;
        return size * (c->k + (double) j * 0.5) + size * (size - 1) / 2.0;
}

static void scenario_many(void) {
        enum { M = 300 };
        for (int round = 0; round < 3; round++) {
                float *in[M], *out[M];
                size_t n[M];
                hvd_handle_t *h[M];
                char names[M][32];
                uint64_t t0 = now_usec();
                for (int k = 0; k < M; k++) {
                        n[k] = 1 + (size_t) (k * 37) % 100;
                        many_ctx_t c = { k, rank };
                        in[k] = make_buf(HVD_FLOAT32, n[k], many_gen, &c);
                        out[k] = xmalloc(n[k] * sizeof(float));
                        snprintf(names[k], sizeof names[k], "many.%d", k);
                        int64_t shape[1] = { (int64_t) n[k] };
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = names[k];
                        q.input = in[k];
                        q.output = out[k];
                        q.ndim = 1;
                        q.shape = shape;
                        q.reduce_op = HVD_REDUCE_SUM;
                        MUST(hvd_allreduce_async(&q, &h[k]));
                }
                for (int k = 0; k < M; k++) {
                        wait_ok(h[k], names[k]);
                        many_ctx_t c = { k, -1 };
                        compare(names[k], HVD_FLOAT32, out[k], n[k], many_gen, &c);
                        hvd_handle_release(&h[k]);
                        free(in[k]);
                        free(out[k]);
                }
                if (rank == 0)
                        printf("rank 0: many: round %d: %d tensors in %.1f ms\n", round, M,
                               (double) (now_usec() - t0) / 1000.0);
        }
}

/* ---- a real model's gradients ---- */

typedef struct model_ctx {
        size_t t;
        int r;
} model_ctx_t;

static double model_val(size_t t, int r, size_t i) {
        return (double) ((i * 7 + t + (size_t) r) % 17) - 8.0;
}

static double model_gen(const void *vctx, size_t i) {
        const model_ctx_t *c = vctx;
        if (c->r >= 0)
                return model_val(c->t, c->r, i);
        double acc = 0;
        for (int r = 0; r < size; r++)
                acc += model_val(c->t, r, i);
        return acc;
}

static void model_step(const char *file) {
        const char *dir = getenv("HVD_TEST_DATA_DIR");
        const char *src = getenv("HVD_SRCDIR");
        char path[1024];
        if (dir && *dir)
                snprintf(path, sizeof path, "%s/%s", dir, file);
        else
                snprintf(path, sizeof path, "%s/../shared/data/%s", src && *src ? src : ".", file);
        FILE *f = fopen(path, "r");
        if (!f) {
                /* every rank sees the same file system, so they all skip */
                printf("rank %d: SKIP [%s] %s: %s\n", rank, scenario, path, strerror(errno));
                return;
        }
        enum { MAXT = 1024 };
        char *names[MAXT];
        int64_t shapes[MAXT][HVD_MAX_NDIM];
        int ndims[MAXT];
        size_t numel[MAXT], nt = 0, total = 0;
        char line[4096];
        while (fgets(line, sizeof line, f) && nt < MAXT) {
                if (line[0] == '#' || !strncmp(line, "name\t", 5))
                        continue;
                char *name = strtok(line, "\t\n"), *shape = strtok(NULL, "\t\n"), *ne = strtok(NULL, "\t\n");
                if (!name || !shape || !ne)
                        continue;
                names[nt] = strdup(name);
                ndims[nt] = 0;
                size_t prod = 1;
                for (char *s = shape, *end; *s && ndims[nt] < HVD_MAX_NDIM; s = *end ? end + 1 : end) {
                        shapes[nt][ndims[nt]] = strtoll(s, &end, 10);
                        prod *= (size_t) shapes[nt][ndims[nt]++];
                }
                numel[nt] = (size_t) strtoull(ne, NULL, 10);
                if (prod != numel[nt])
                        fail("%s: %s: shape %s has %zu elements, the file says %zu", path, name, shape, prod,
                             numel[nt]);
                total += numel[nt];
                nt++;
        }
        fclose(f);
        if (rank == 0)
                printf("rank 0: %s: %zu tensors, %zu parameters\n", file, nt, total);
        for (int step = 0; step < 2; step++) {
                float **buf = calloc(nt, sizeof *buf);
                hvd_handle_t **h = calloc(nt, sizeof *h);
                uint64_t t0 = now_usec();
                /* backward makes gradients ready in reverse order */
                for (size_t t = nt; t-- > 0;) {
                        model_ctx_t c = { t, rank };
                        buf[t] = make_buf(HVD_FLOAT32, numel[t], model_gen, &c);
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = names[t];
                        q.input = buf[t];
                        q.output = buf[t];
                        q.ndim = ndims[t];
                        q.shape = shapes[t];
                        q.reduce_op = HVD_REDUCE_SUM;
                        MUST(hvd_allreduce_async(&q, &h[t]));
                }
                for (size_t t = nt; t-- > 0;)
                        wait_ok(h[t], names[t]);
                double ms = (double) (now_usec() - t0) / 1000.0;
                for (size_t t = 0; t < nt; t++) {
                        model_ctx_t c = { t, -1 };
                        compare(names[t], HVD_FLOAT32, buf[t], numel[t], model_gen, &c);
                        hvd_handle_release(&h[t]);
                        free(buf[t]);
                }
                if (rank == 0)
                        printf("rank 0: %s step %d: %zu tensors in %.1f ms\n", file, step, nt, ms);
                free(buf);
                free(h);
        }
        for (size_t t = 0; t < nt; t++)
                free(names[t]);
}

static void scenario_resnet50(void) {
        model_step("resnet50.tsv");
}

static void scenario_inception(void) {
        model_step("inception_v3.tsv");
}

/* ---- bad input inside a running job ---- */

/* submits one allreduce/broadcast with per-rank parameters and expects
 * HVD_EMISMATCH with `want` (exact when the message is deterministic) */
static void expect_mismatch(const char *name, hvd_dtype_t dt, int ndim, const int64_t *shape, hvd_reduce_op_t op,
                            int root, bool bcast, const char *want, const char *n1, const char *n2) {
        double in[64] = { 0 }, out[64];
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = in;
        q.output = out;
        q.dtype = dt;
        q.ndim = ndim;
        q.shape = shape;
        q.reduce_op = op;
        q.root = root;
        hvd_handle_t *h = NULL;
        MUST(bcast ? hvd_broadcast_async(&q, &h) : hvd_allreduce_async(&q, &h));
        int r = wait_h(h, name);
        const char *msg = hvd_handle_error(h);
        CHECK(r == HVD_EMISMATCH, "%s: completed with %s (\"%s\"), expected HVD_EMISMATCH", name, errname(r), msg);
        if (want)
                CHECK(strcmp(msg, want) == 0, "%s: error \"%s\", expected \"%s\"", name, msg, want);
        if (n1)
                CHECK(strstr(msg, n1) != NULL, "%s: error \"%s\" does not mention \"%s\"", name, msg, n1);
        if (n2)
                CHECK(strstr(msg, n2) != NULL, "%s: error \"%s\" does not mention \"%s\"", name, msg, n2);
        hvd_handle_release(&h);
}

static void scenario_mismatch(void) {
        if (size < 2) {
                printf("rank %d: SKIP [mismatch] needs at least 2 ranks\n", rank);
                return;
        }
        int64_t s4[1] = { 4 }, s23[2] = { 2, 3 }, s32[2] = { 3, 2 };
        expect_mismatch("mm.dtype", rank == 0 ? HVD_FLOAT32 : HVD_FLOAT64, 1, s4, HVD_REDUCE_SUM, 0, false,
                        "allreduce 'mm.dtype': rank 1 sent dtype float64, rank 0 sent float32", NULL, NULL);
        expect_mismatch("mm.shape", HVD_FLOAT32, 2, rank == 0 ? s23 : s32, HVD_REDUCE_SUM, 0, false,
                        "allreduce 'mm.shape': rank 1 sent shape [3, 2], rank 0 sent [2, 3]", NULL, NULL);
        expect_mismatch("mm.op", HVD_FLOAT32, 1, s4, rank == 0 ? HVD_REDUCE_SUM : HVD_REDUCE_MIN, 0, false, NULL,
                        "rank 1", "rank 0");
        expect_mismatch("mm.root", HVD_FLOAT32, 1, s4, HVD_REDUCE_SUM, rank == 0 ? 0 : 1, true,
                        "broadcast 'mm.root': rank 1 sent root 1, rank 0 sent root 0", NULL, NULL);
        /* the job goes on: a following allreduce works */
        float x[3] = { 1, 2, 3 }, y[3];
        MUST(hvd_allreduce("mm.after", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM));
        for (int i = 0; i < 3; i++)
                CHECK(y[i] == (float) ((i + 1) * size), "mm.after[%d] = %g, expected %d", i, y[i], (i + 1) * size);
}

static void scenario_mismatch_retry(void) {
        if (size < 2) {
                printf("rank %d: SKIP [mismatch-retry] needs at least 2 ranks\n", rank);
                return;
        }
        /* a tensor that failed with a mismatch is submitted again, now
         * consistently, under the same name: it must simply work */
        int64_t s4[1] = { 4 };
        expect_mismatch("mm.retry", rank == 0 ? HVD_FLOAT32 : HVD_INT32, 1, s4, HVD_REDUCE_SUM, 0, false,
                        "allreduce 'mm.retry': rank 1 sent dtype int32, rank 0 sent float32", NULL, NULL);
        for (int round = 0; round < 3; round++) {
                float x[4] = { 1, 2, 3, 4 }, y[4];
                int r = hvd_allreduce("mm.retry", x, y, 4, HVD_FLOAT32, HVD_REDUCE_SUM);
                CHECK(r == 0, "round %d: consistent 'mm.retry' after a mismatch failed: %s: %s", round, errname(r),
                      hvd_last_error());
                if (r < 0)
                        return;
                for (int i = 0; i < 4; i++)
                        CHECK(y[i] == (float) ((i + 1) * size), "mm.retry[%d] = %g", i, y[i]);
        }
}

static void scenario_duplicate(void) {
        /* the same name twice in one group: refused, no handle */
        float a[2] = { 1, 2 }, b[2];
        int64_t shape[1] = { 2 };
        hvd_request_t q[2];
        for (int i = 0; i < 2; i++) {
                q[i] = (hvd_request_t) HVD_REQUEST_INIT;
                q[i].name = "dup.group";
                q[i].input = a;
                q[i].output = b;
                q[i].ndim = 1;
                q[i].shape = shape;
        }
        hvd_handle_t *h = NULL;
        int r = hvd_grouped_allreduce_async(q, 2, &h);
        CHECK(r == HVD_EDUPLICATE, "a group naming 'dup.group' twice: %s, expected HVD_EDUPLICATE", errname(r));
        CHECK(h == NULL, "a refused group submission produced a handle");
        CHECK(strstr(hvd_last_error(), "dup.group") != NULL, "last error \"%s\" does not name the tensor",
              hvd_last_error());

        if (size >= 2) {
                /* rank 0's 'dup.a' cannot complete before the others submit
                 * it, which they do only after the barrier */
                float x[3] = { 1, 2, 3 }, y[3], z[3];
                int64_t s3[1] = { 3 };
                hvd_request_t qa = HVD_REQUEST_INIT;
                qa.name = "dup.a";
                qa.input = x;
                qa.output = y;
                qa.ndim = 1;
                qa.shape = s3;
                qa.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h1 = NULL, *h2 = NULL;
                if (rank == 0) {
                        MUST(hvd_allreduce_async(&qa, &h1));
                        hvd_request_t qb = qa;
                        qb.output = z;
                        r = hvd_allreduce_async(&qb, &h2);
                        CHECK(r == HVD_EDUPLICATE,
                              "'dup.a' submitted twice while in flight: %s, expected "
                              "HVD_EDUPLICATE",
                              errname(r));
                        CHECK(h2 == NULL, "a refused submission produced a handle");
                        CHECK(strstr(hvd_last_error(), "'dup.a'") != NULL, "last error \"%s\" does not name 'dup.a'",
                              hvd_last_error());
                        r = hvd_allreduce("dup.a", x, z, 3, HVD_FLOAT32, HVD_REDUCE_SUM);
                        CHECK(r == HVD_EDUPLICATE, "synchronous duplicate of 'dup.a': %s", errname(r));
                        MUST(hvd_barrier());
                } else {
                        MUST(hvd_barrier());
                        MUST(hvd_allreduce_async(&qa, &h1));
                }
                wait_ok(h1, "dup.a");
                for (int i = 0; i < 3; i++)
                        CHECK(y[i] == (float) ((i + 1) * size), "dup.a[%d] = %g after the refused duplicate", i, y[i]);
                hvd_handle_release(&h1);
        }
        /* after completion the name is free again */
        float x[3] = { 1, 2, 3 }, y[3];
        for (int round = 0; round < 2; round++) {
                MUST(hvd_allreduce("dup.a", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM));
                for (int i = 0; i < 3; i++)
                        CHECK(y[i] == (float) ((i + 1) * size), "dup.a[%d] = %g on reuse", i, y[i]);
        }
        /* releasing a pending handle detaches it: the operation still runs
         * (the buffers are written) and the name is free once it completed,
         * which the barrier after it guarantees (schedules run in order) */
        float dx[2] = { 3, 4 }, dy[2] = { 0, 0 };
        int64_t s2[1] = { 2 };
        hvd_request_t qd = HVD_REQUEST_INIT;
        qd.name = "detach.x";
        qd.input = dx;
        qd.output = dy;
        qd.ndim = 1;
        qd.shape = s2;
        qd.reduce_op = HVD_REDUCE_SUM;
        hvd_handle_t *hd = NULL;
        MUST(hvd_allreduce_async(&qd, &hd));
        hvd_handle_release(&hd);
        CHECK(hd == NULL, "release did not clear the handle pointer");
        hvd_handle_release(&hd); /* NULL-safe */
        MUST(hvd_barrier());
        CHECK(dy[0] == 3.0f * size && dy[1] == 4.0f * size, "a detached allreduce gave [%g, %g], expected [%d, %d]",
              dy[0], dy[1], 3 * size, 4 * size);
        MUST(hvd_allreduce("detach.x", dx, dy, 2, HVD_FLOAT32, HVD_REDUCE_SUM));

        /* reserved and invalid names are argument errors */
        CHECK(hvd_allreduce("__hvd.mine", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a reserved '__hvd.' name was accepted");
        CHECK(hvd_allreduce("", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL, "an empty name was accepted");
        CHECK(hvd_allreduce("bad\nname", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a name with a newline was accepted");
        CHECK(hvd_allreduce("x", x, y, 3, (hvd_dtype_t) 42, HVD_REDUCE_SUM) == -EINVAL, "dtype 42 was accepted");
        CHECK(hvd_allreduce("x", x, y, 3, HVD_FLOAT32, (hvd_reduce_op_t) 9) == -EINVAL, "reduce op 9 was accepted");
}

/* ---- a long run, for the kill test ---- */

static void scenario_longrun(void) {
        char path[512];
        snprintf(path, sizeof path, "%s/pid.%d", tmpdir(), rank);
        FILE *f = fopen(path, "w");
        if (f) {
                fprintf(f, "%d\n", (int) getpid());
                fclose(f);
        }
        enum { LN = 1000 };
        float *x = xmalloc(LN * sizeof *x), *y = xmalloc(LN * sizeof *y);
        uint64_t t0 = now_usec();
        for (long it = 0;; it++) {
                for (int i = 0; i < LN; i++)
                        x[i] = (float) (rank + i % 10);
                hvd_request_t q = HVD_REQUEST_INIT;
                int64_t shape[1] = { LN };
                q.name = "longrun";
                q.input = x;
                q.output = y;
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h = NULL;
                int r = hvd_allreduce_async(&q, &h);
                if (r >= 0) {
                        r = hvd_handle_wait_timeout(h, 20 * 1000000ull);
                        if (r == HVD_ETIMEOUT) {
                                printf("rank %d: longrun: HUNG: iteration %ld still pending after 20 s\n", rank, it);
                                exit(4);
                        }
                }
                if (r < 0) {
                        const char *msg = h ? hvd_handle_error(h) : hvd_last_error();
                        printf("rank %d: longrun: %s after %ld iterations: %s\n", rank, errname(r), it, msg);
                        /* later calls fail at once with the same cause */
                        float z = 0;
                        int r2 = hvd_allreduce("longrun.after", &z, &z, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
                        printf("rank %d: longrun: next call: %s: %s\n", rank, errname(r2), hvd_last_error());
                        hvd_handle_release(&h);
                        hvd_shutdown();
                        exit(3);
                }
                for (int i = 0; i < LN; i++)
                        if (y[i] != (float) (size * (i % 10) + size * (size - 1) / 2)) {
                                printf("rank %d: FAIL [longrun] wrong sum at iteration %ld\n", rank, it);
                                exit(1);
                        }
                hvd_handle_release(&h);
                if (it == 20) {
                        snprintf(path, sizeof path, "%s/running.%d", tmpdir(), rank);
                        if ((f = fopen(path, "w")))
                                fclose(f);
                }
                if (now_usec() - t0 > 60 * 1000000ull) {
                        printf("rank %d: longrun: 60 s without an error\n", rank);
                        return;
                }
        }
}

/* ---- several user threads at once ---- */

enum { TH = 4, TH_OPS = 60 };

static void *thread_main(void *arg) {
        int t = (int) (intptr_t) arg;
        for (int round = 0; round < 3; round++) {
                float x[TH_OPS][17], y[TH_OPS][17];
                hvd_handle_t *h[TH_OPS];
                char names[TH_OPS][48];
                for (int k = 0; k < TH_OPS; k++) {
                        for (int j = 0; j < 17; j++)
                                x[k][j] = (float) (t * 1000 + k * 10 + j + rank);
                        snprintf(names[k], sizeof names[k], "thread%d.op%d", t, k);
                        int64_t shape[1] = { 17 };
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = names[k];
                        q.input = x[k];
                        q.output = y[k];
                        q.ndim = 1;
                        q.shape = shape;
                        q.reduce_op = HVD_REDUCE_SUM;
                        MUST(hvd_allreduce_async(&q, &h[k]));
                        if (k % 7 == 3) /* some waited at once, some later */
                                wait_ok(h[k], names[k]);
                }
                for (int k = 0; k < TH_OPS; k++) {
                        wait_ok(h[k], names[k]);
                        for (int j = 0; j < 17; j++) {
                                float want = (float) (size * (t * 1000 + k * 10 + j) + size * (size - 1) / 2);
                                CHECK(y[k][j] == want, "%s[%d] = %g, expected %g", names[k], j, y[k][j], want);
                        }
                        hvd_handle_release(&h[k]);
                }
        }
        return NULL;
}

static void scenario_threads(void) {
        /* TH threads submit and wait at the same time, each its own names */
        pthread_t th[TH];
        for (int t = 0; t < TH; t++)
                if (pthread_create(&th[t], NULL, thread_main, (void *) (intptr_t) t) != 0) {
                        fail("pthread_create failed");
                        return;
                }
        for (int t = 0; t < TH; t++)
                pthread_join(th[t], NULL);
}

/* ---- edge cases of the request ---- */

static void scenario_edges(void) {
        /* the longest legal name, UTF-8 names, 8 dimensions */
        char longname[HVD_MAX_NAME_BYTES + 2];
        memset(longname, 'n', HVD_MAX_NAME_BYTES);
        longname[HVD_MAX_NAME_BYTES] = 0;
        float x[6] = { 1, 2, 3, 4, 5, 6 }, y[6];
        MUST(hvd_allreduce(longname, x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM));
        CHECK(y[5] == 6.0f * size, "1024-byte name: %g", y[5]);
        longname[HVD_MAX_NAME_BYTES] = 'n';
        longname[HVD_MAX_NAME_BYTES + 1] = 0;
        CHECK(hvd_allreduce(longname, x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a 1025-byte name was accepted");
        MUST(hvd_allreduce("gr\xc3\xb6\xc3\x9f"
                           "e.\xe6\x97\xa5\xe6\x9c\xac.\xf0\x9f\x98\x80",
                           x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM));
        CHECK(y[0] == (float) size, "UTF-8 name: %g", y[0]);
        CHECK(hvd_allreduce("bad\xff", x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a name that is not UTF-8 was accepted");
        int64_t s8[8] = { 1, 1, 1, 1, 1, 1, 2, 3 }, s9[9] = { 1, 1, 1, 1, 1, 1, 1, 2, 3 };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = "edge.8d";
        q.input = x;
        q.output = y;
        q.ndim = 8;
        q.shape = s8;
        q.reduce_op = HVD_REDUCE_MAX;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        wait_ok(h, "edge.8d");
        hvd_handle_release(&h);
        CHECK(y[3] == 4.0f, "8-d max: %g", y[3]);
        q.ndim = 9;
        q.shape = s9;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "9 dimensions were accepted");
        q.ndim = 2;
        int64_t neg[2] = { 2, -3 };
        q.shape = neg;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "a negative dimension was accepted");
        q.ndim = 1;
        q.shape = s8 + 7;
        q.output = NULL;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "an allreduce without output was accepted");
        q.output = y;
        q.input = NULL;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "an allreduce without input was accepted");
        CHECK(hvd_allreduce_async(NULL, &h) == -EINVAL, "a NULL request was accepted");
        q.input = x;
        q.device = 0;
        int r = hvd_allreduce_async(&q, &h);
        CHECK(r == HVD_ENODEVICE, "an allreduce on GPU 0 without a GPU backend: %s", errname(r));
        if (r >= 0) {
                wait_h(h, "edge.gpu");
                hvd_handle_release(&h);
        }

        /* empty tensors everywhere: alltoall, reducescatter, allgather */
        int64_t z2[2] = { 0, 3 };
        int64_t *zs = calloc((size_t) size, sizeof *zs);
        hvd_request_t qa = HVD_REQUEST_INIT;
        qa.name = "edge.a2a.empty";
        qa.ndim = 2;
        qa.shape = z2;
        qa.splits = zs;
        MUST(hvd_alltoall_async(&qa, &h));
        wait_ok(h, qa.name);
        const void *data;
        size_t bytes = 99;
        int nd = -1;
        const int64_t *os = NULL;
        MUST(hvd_handle_output(h, 0, &data, &bytes, &nd, &os));
        CHECK(bytes == 0 && nd == 2 && os[0] == 0 && os[1] == 3, "empty alltoall: %zu bytes, ndim %d", bytes, nd);
        hvd_handle_release(&h);
        free(zs);
        qa.name = "edge.rs.empty";
        qa.splits = NULL;
        qa.reduce_op = HVD_REDUCE_SUM;
        MUST(hvd_reducescatter_async(&qa, &h));
        wait_ok(h, qa.name);
        MUST(hvd_handle_output(h, 0, &data, &bytes, &nd, &os));
        CHECK(bytes == 0 && os[0] == 0, "empty reducescatter: %zu bytes, %" PRId64 " rows", bytes, os[0]);
        hvd_handle_release(&h);

        /* a handle waited with a deadline before it can complete */
        if (size >= 2) {
                float a = 1, b = 0;
                int64_t s1[1] = { 1 };
                hvd_request_t qw = HVD_REQUEST_INIT;
                qw.name = "edge.late";
                qw.input = &a;
                qw.output = &b;
                qw.ndim = 1;
                qw.shape = s1;
                qw.reduce_op = HVD_REDUCE_SUM;
                if (rank == 0) {
                        MUST(hvd_allreduce_async(&qw, &h));
                        uint64_t t0 = now_usec();
                        r = hvd_handle_wait_timeout(h, 100000);
                        uint64_t dt = now_usec() - t0;
                        CHECK(r == HVD_ETIMEOUT, "wait_timeout on a handle that cannot complete: %s", errname(r));
                        CHECK(dt >= 90000 && dt < 2000000, "wait_timeout(100 ms) took %" PRIu64 " us", dt);
                        CHECK(hvd_handle_poll(h) == 0, "poll says complete before the others submitted");
                        CHECK(hvd_handle_output(h, 0, NULL, NULL, NULL, NULL) == -ENODATA, "output before completion");
                        MUST(hvd_barrier());
                } else {
                        MUST(hvd_barrier());
                        MUST(hvd_allreduce_async(&qw, &h));
                }
                wait_ok(h, "edge.late");
                CHECK(b == (float) size, "edge.late = %g", b);
                hvd_handle_release(&h);
        }
}

/* ---- topology and the small API ---- */

static void scenario_api(void) {
        const char *e;
        CHECK(hvd_is_initialized() == 1, "hvd_is_initialized() = %d", hvd_is_initialized());
        if ((e = getenv("HVD_JOB_ID")) && *e) {
                CHECK(rank == atoi(getenv("HVD_RANK")), "hvd_rank() = %d, HVD_RANK = %s", rank, getenv("HVD_RANK"));
                CHECK(size == atoi(getenv("HVD_SIZE")), "hvd_size() = %d, HVD_SIZE = %s", size, getenv("HVD_SIZE"));
                CHECK(hvd_local_rank() == atoi(getenv("HVD_LOCAL_RANK")), "hvd_local_rank() = %d", hvd_local_rank());
                CHECK(hvd_local_size() == atoi(getenv("HVD_LOCAL_SIZE")), "hvd_local_size() = %d", hvd_local_size());
        } else {
                CHECK(rank == 0 && size == 1, "without a job: rank %d of %d", rank, size);
                CHECK(hvd_local_rank() == 0 && hvd_local_size() == 1, "without a job: local rank %d of %d",
                      hvd_local_rank(), hvd_local_size());
        }
        CHECK(hvd_cross_rank() == 0 && hvd_cross_size() == 1, "one host: cross rank %d of %d", hvd_cross_rank(),
              hvd_cross_size());
        static const size_t sizes[] = {
                [HVD_UINT8] = 1,    [HVD_INT8] = 1,    [HVD_INT32] = 4,   [HVD_INT64] = 8, [HVD_FLOAT16] = 2,
                [HVD_BFLOAT16] = 2, [HVD_FLOAT32] = 4, [HVD_FLOAT64] = 8, [HVD_BOOL] = 1,  [HVD_INT16] = 2
        };
        static const char *const names[] = {
                [HVD_UINT8] = "uint8",     [HVD_INT8] = "int8",       [HVD_INT32] = "int32",
                [HVD_INT64] = "int64",     [HVD_FLOAT16] = "float16", [HVD_BFLOAT16] = "bfloat16",
                [HVD_FLOAT32] = "float32", [HVD_FLOAT64] = "float64", [HVD_BOOL] = "bool",
                [HVD_INT16] = "int16"
        };
        for (int d = 0; d < _HVD_DTYPE_COUNT; d++) {
                CHECK(hvd_dtype_size((hvd_dtype_t) d) == sizes[d], "hvd_dtype_size(%d) = %zu", d,
                      hvd_dtype_size((hvd_dtype_t) d));
                CHECK(hvd_dtype_name((hvd_dtype_t) d) && !strcmp(hvd_dtype_name((hvd_dtype_t) d), names[d]),
                      "hvd_dtype_name(%d) = %s", d, hvd_dtype_name((hvd_dtype_t) d));
        }
        CHECK(hvd_dtype_size(_HVD_DTYPE_COUNT) == 0, "hvd_dtype_size of an invalid dtype is not 0");
        CHECK(hvd_dtype_name(_HVD_DTYPE_COUNT) != NULL, "hvd_dtype_name of an invalid dtype is NULL");
#define STRERR(name, value, text)                                                                                      \
        CHECK(!strcmp(hvd_strerror(value), text), "hvd_strerror(%s) = \"%s\"", #name, hvd_strerror(value));
        HVD_ERRORS(STRERR)
#undef STRERR
        CHECK(!strcmp(hvd_strerror(-ENOENT), strerror(ENOENT)), "hvd_strerror(-ENOENT) = %s", hvd_strerror(-ENOENT));
        char v[32];
        snprintf(v, sizeof v, "%d.%d.", HVD_VERSION_MAJOR, HVD_VERSION_MINOR);
        CHECK(!strncmp(hvd_version(), v, strlen(v)), "hvd_version() = %s, the header says %d.%d", hvd_version(),
              HVD_VERSION_MAJOR, HVD_VERSION_MINOR);
        hvd_request_t q;
        memset(&q, 0xff, sizeof q);
        hvd_request_init(&q);
        hvd_request_t w = HVD_REQUEST_INIT;
        CHECK(q.name == w.name && q.dtype == w.dtype && q.reduce_op == HVD_REDUCE_AVERAGE && q.prescale == 1.0 &&
                      q.postscale == 1.0 && q.root == 0 && q.splits == NULL && q.process_set == 0 &&
                      q.device == HVD_DEVICE_CPU && q.ndim == 0,
              "hvd_request_init differs from HVD_REQUEST_INIT");
        /* the default reduce op is average, as in Horovod */
        float x = (float) (2 * rank), y = -1;
        int64_t s1[1] = { 1 };
        q.name = "api.default.op";
        q.input = &x;
        q.output = &y;
        q.ndim = 1;
        q.shape = s1;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        wait_ok(h, q.name);
        hvd_handle_release(&h);
        CHECK(y == (float) (size - 1), "default op: %g, expected the average %d", y, size - 1);
}

static void scenario_bcast_null_input(void) {
        /* broadcast: "non-root input ignored" (hvd.h), so it may be NULL */
        float b[2] = { (float) rank, (float) rank };
        hvd_handle_t *h = NULL;
        int64_t s2[1] = { 2 };
        hvd_request_t qb = HVD_REQUEST_INIT;
        qb.name = "api.bcast.noinput";
        qb.input = rank == 0 ? b : NULL;
        qb.output = b;
        qb.ndim = 1;
        qb.shape = s2;
        int r = hvd_broadcast_async(&qb, &h);
        CHECK(r == 0, "broadcast with input NULL on a non-root rank: %s: %s", errname(r), hvd_last_error());
        if (r < 0) {
                /* keep the root's broadcast company, with an input */
                qb.input = b;
                MUST(hvd_broadcast_async(&qb, &h));
        }
        wait_ok(h, qb.name);
        hvd_handle_release(&h);
        CHECK(b[0] == 0 && b[1] == 0, "broadcast: [%g, %g]", b[0], b[1]);
}

/* ---- process sets ---- */

static int set_of(int parity, int *members) {
        int n = 0;
        for (int r = parity; r < size; r += 2)
                members[n++] = r;
        return n;
}

/* allreduce SUM of `name` among set `id` (members given), value rank+k */
static void ps_allreduce(int id, const char *name, const int *members, int n, float base) {
        float x[3], y[3] = { -1, -1, -1 };
        for (int i = 0; i < 3; i++)
                x[i] = base + (float) (rank * 10 + i);
        int64_t shape[1] = { 3 };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = x;
        q.output = y;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_SUM;
        q.process_set = id;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        int r = wait_h(h, name);
        CHECK(r == 0, "%s in process set %d: %s: %s", name, id, errname(r), hvd_handle_error(h));
        for (int i = 0; i < 3 && r == 0; i++) {
                float want = 0;
                for (int k = 0; k < n; k++)
                        want += base + (float) (members[k] * 10 + i);
                CHECK(y[i] == want, "%s in process set %d: element %d is %g, expected %g", name, id, i, y[i], want);
        }
        hvd_handle_release(&h);
}

static void scenario_process_sets(void) {
        if (size < 2) {
                printf("rank %d: SKIP [process-sets] needs at least 2 ranks\n", rank);
                return;
        }
        int even[64], odd[64];
        int ne = set_of(0, even), no = set_of(1, odd);
        int id_e = hvd_add_process_set(even, (size_t) ne);
        MUST(id_e);
        int id_o = hvd_add_process_set(odd, (size_t) no);
        MUST(id_o);
        CHECK(id_e > 0 && id_o > 0 && id_e != id_o, "process set ids %d and %d", id_e, id_o);
        bool is_even = rank % 2 == 0;
        int mine = is_even ? id_e : id_o, other = is_even ? id_o : id_e;
        const int *mem = is_even ? even : odd;
        int nm = is_even ? ne : no;
        CHECK(hvd_process_set_size(id_e) == ne, "size of the even set: %d", hvd_process_set_size(id_e));
        CHECK(hvd_process_set_size(id_o) == no, "size of the odd set: %d", hvd_process_set_size(id_o));
        CHECK(hvd_process_set_included(mine) == 1, "not included in my own set");
        CHECK(hvd_process_set_included(other) == 0, "included in the other set");
        CHECK(hvd_process_set_rank(mine) == rank / 2, "rank in my set: %d, expected %d", hvd_process_set_rank(mine),
              rank / 2);
        CHECK(hvd_process_set_rank(other) == -ENOENT, "rank in the other set: %d", hvd_process_set_rank(other));
        const int *ranks = NULL;
        size_t n = 0;
        MUST(hvd_process_set_ranks(mine, &ranks, &n));
        CHECK(n == (size_t) nm, "my set has %zu members, expected %d", n, nm);
        for (size_t i = 0; i < n && i < (size_t) nm; i++)
                CHECK(ranks[i] == mem[i], "member %zu of my set is %d, expected %d", i, ranks[i], mem[i]);
        CHECK(hvd_process_set_size(999) == -EINVAL, "an unknown set id was accepted");
        /* the same members again: refused */
        int r = hvd_add_process_set(even, (size_t) ne);
        CHECK(r == -EEXIST, "adding the even set twice: %s", errname(r));

        /* collectives inside my set only, several rounds (cached ids) */
        for (int round = 0; round < 3; round++) {
                ps_allreduce(mine, is_even ? "ps.even.w" : "ps.odd.w", mem, nm, (float) round);
                /* and one over everybody in between */
                float x = 1, y = 0;
                MUST(hvd_allreduce("ps.world", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
                CHECK(y == (float) size, "ps.world = %g", y);
        }
        /* allgather in my set: rows = rank + 1 */
        int64_t shape[2] = { rank + 1, 2 };
        int32_t *in = xmalloc((size_t) (rank + 1) * 2 * sizeof *in);
        for (int i = 0; i < (rank + 1) * 2; i++)
                in[i] = rank * 100 + i;
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = is_even ? "ps.even.g" : "ps.odd.g";
        q.input = in;
        q.dtype = HVD_INT32;
        q.ndim = 2;
        q.shape = shape;
        q.process_set = mine;
        hvd_handle_t *h = NULL;
        MUST(hvd_allgather_async(&q, &h));
        wait_ok(h, q.name);
        const void *data;
        size_t bytes;
        int nd;
        const int64_t *os;
        MUST(hvd_handle_output(h, 0, &data, &bytes, &nd, &os));
        int64_t rows = 0;
        for (int k = 0; k < nm; k++)
                rows += mem[k] + 1;
        CHECK(os[0] == rows && bytes == (size_t) rows * 8, "%s: %" PRId64 " rows, expected %" PRId64, q.name, os[0],
              rows);
        if (os[0] == rows && bytes == (size_t) rows * 8) {
                const int32_t *o = data;
                int64_t at = 0;
                for (int k = 0; k < nm; k++)
                        for (int i = 0; i < (mem[k] + 1) * 2; i++, at++)
                                CHECK(o[at] == mem[k] * 100 + i, "%s: element %" PRId64 " is %d, expected %d", q.name,
                                      at, o[at], mem[k] * 100 + i);
        }
        hvd_handle_release(&h);
        free(in);
        /* a set this rank is not in cannot be used */
        float x = 0, y;
        hvd_request_t bad = HVD_REQUEST_INIT;
        int64_t s1[1] = { 1 };
        bad.name = "ps.notmine";
        bad.input = &x;
        bad.output = &y;
        bad.ndim = 1;
        bad.shape = s1;
        bad.process_set = other;
        r = hvd_allreduce_async(&bad, &h);
        CHECK(r < 0, "an allreduce in a process set this rank is not in was accepted");
        if (r >= 0) {
                wait_h(h, "ps.notmine");
                hvd_handle_release(&h);
        }
        MUST(hvd_remove_process_set(id_o));
        MUST(hvd_remove_process_set(id_e));
        bad.process_set = mine;
        h = NULL;
        r = hvd_allreduce_async(&bad, &h);
        CHECK(r == -EINVAL, "an allreduce in a removed process set: %s", errname(r));
        CHECK(h == NULL, "a refused submission produced a handle");
        MUST(hvd_barrier());
}

static void scenario_process_sets_grouped(void) {
        /* grouped ops inside one set, then grouped ops of the whole job: the
         * set's groups must not throw the ranks' group numbering apart */
        if (size < 2) {
                printf("rank %d: SKIP [process-sets-grouped] needs at least 2 ranks\n", rank);
                return;
        }
        int even[64];
        int ne = set_of(0, even);
        int id_e = hvd_add_process_set(even, (size_t) ne);
        MUST(id_e);
        float x[2][4], y[2][4];
        int64_t s4[1] = { 4 };
        hvd_request_t q[2];
        for (int round = 0; round < 2; round++) {
                const char *nm[2][2] = { { "psg.set.a", "psg.set.b" }, { "psg.all.a", "psg.all.b" } };
                for (int which = 0; which < 2; which++) {
                        bool in_set = which == 0;
                        if (in_set && rank % 2)
                                continue;
                        for (int i = 0; i < 2; i++) {
                                for (int j = 0; j < 4; j++)
                                        x[i][j] = (float) (rank + i * 10 + j);
                                q[i] = (hvd_request_t) HVD_REQUEST_INIT;
                                q[i].name = nm[which][i];
                                q[i].input = x[i];
                                q[i].output = y[i];
                                q[i].ndim = 1;
                                q[i].shape = s4;
                                q[i].reduce_op = HVD_REDUCE_SUM;
                                q[i].process_set = in_set ? id_e : 0;
                        }
                        hvd_handle_t *h = NULL;
                        MUST(hvd_grouped_allreduce_async(q, 2, &h));
                        int r = wait_h(h, nm[which][0]);
                        CHECK(r == 0, "round %d: grouped allreduce %s: %s: %s", round,
                              in_set ? "in the even set" : "of the whole job", errname(r), hvd_handle_error(h));
                        int n = in_set ? ne : size, sum_r = 0;
                        for (int k = 0; k < n; k++)
                                sum_r += in_set ? even[k] : k;
                        for (int i = 0; i < 2 && r == 0; i++)
                                for (int j = 0; j < 4; j++)
                                        CHECK(y[i][j] == (float) (sum_r + n * (i * 10 + j)), "%s[%d] = %g",
                                              nm[which][i], j, y[i][j]);
                        hvd_handle_release(&h);
                }
        }
        MUST(hvd_remove_process_set(id_e));
}

static void scenario_process_sets_same_name(void) {
        /* two disjoint sets both reducing a tensor called "ps.grad" at the
         * same time, as two data-parallel groups of one job would */
        if (size < 2) {
                printf("rank %d: SKIP [process-sets-same-name] needs at least 2 ranks\n", rank);
                return;
        }
        int even[64], odd[64];
        int ne = set_of(0, even), no = set_of(1, odd);
        int id_e = hvd_add_process_set(even, (size_t) ne);
        MUST(id_e);
        int id_o = hvd_add_process_set(odd, (size_t) no);
        MUST(id_o);
        bool is_even = rank % 2 == 0;
        for (int round = 0; round < 3; round++)
                ps_allreduce(is_even ? id_e : id_o, "ps.grad", is_even ? even : odd, is_even ? ne : no, (float) round);
        MUST(hvd_remove_process_set(id_o));
        MUST(hvd_remove_process_set(id_e));
}

/* ---- misuse of the job as a whole ---- */

static void scenario_unique_names(void) {
        /* a new name on every step (like Horovod's "allreduce.noname.N"):
         * far more distinct names than the daemon's tensor table holds */
        int steps = 300;
        const char *e = getenv("HVD_TEST_UNIQUE_STEPS");
        if (e && atoi(e) > 0)
                steps = atoi(e);
        for (int i = 0; i < steps; i++) {
                char name[64];
                snprintf(name, sizeof name, "uniq.step%d", i);
                float x = (float) (rank + i), y = -1;
                int r = hvd_allreduce(name, &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
                if (r < 0) {
                        fail("step %d ('%s'): %s: %s", i, name, errname(r), hvd_last_error());
                        return;
                }
                float want = (float) (size * i + size * (size - 1) / 2);
                CHECK(y == want, "%s = %g, expected %g", name, y, want);
        }
}

static void scenario_early_shutdown(void) {
        /* rank 0 leaves; the others then submit a collective it will never
         * join: they must get an error naming rank 0, not hang */
        MUST(hvd_barrier());
        if (rank == 0) {
                MUST(hvd_shutdown());
                printf("rank 0: early-shutdown: left the job\n");
                return;
        }
        usleep(300 * 1000);
        float x = 1, y;
        uint64_t t0 = now_usec();
        int r = hvd_allreduce("early.after", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
        double ms = (double) (now_usec() - t0) / 1000.0;
        printf("rank %d: early-shutdown: %s after %.0f ms: %s\n", rank, errname(r), ms, hvd_last_error());
        CHECK(r == HVD_EABORTED, "an allreduce after rank 0 shut down: %s, expected HVD_EABORTED", errname(r));
        CHECK(strstr(hvd_last_error(), "rank 0") != NULL, "the error \"%s\" does not name rank 0", hvd_last_error());
        CHECK(ms < 5000, "the error took %.0f ms", ms);
}

/* longrun with handles released at once (detached operations): when the
 * job is aborted under them, nothing may touch the freed handles. */
static void scenario_longrun_detached(void) {
        char path[512];
        snprintf(path, sizeof path, "%s/pid.%d", tmpdir(), rank);
        FILE *f = fopen(path, "w");
        if (f) {
                fprintf(f, "%d\n", (int) getpid());
                fclose(f);
        }
        enum { LN = 4096, SLOTS = 16 };
        static float x[SLOTS][LN], y[SLOTS][LN];
        uint64_t t0 = now_usec();
        for (long it = 0;; it++) {
                int k = (int) (it % SLOTS);
                char name[32];
                snprintf(name, sizeof name, "detached.%d", k);
                for (int i = 0; i < LN; i++)
                        x[k][i] = (float) (rank + i % 10);
                int64_t shape[1] = { LN };
                hvd_request_t q = HVD_REQUEST_INIT;
                q.name = name;
                q.input = x[k];
                q.output = y[k];
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h = NULL;
                int r = hvd_allreduce_async(&q, &h);
                hvd_handle_release(&h);
                /* every SLOTS operations, a barrier: the ones before it are done
                 * (schedules run in order), so the names can be reused */
                if (r >= 0 && k == SLOTS - 1)
                        r = hvd_barrier();
                if (r < 0) {
                        printf("rank %d: longrun: %s after %ld iterations: %s\n", rank, errname(r), it,
                               hvd_last_error());
                        float z = 0;
                        int r2 = hvd_allreduce("longrun.after", &z, &z, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
                        printf("rank %d: longrun: next call: %s: %s\n", rank, errname(r2), hvd_last_error());
                        hvd_shutdown();
                        exit(3);
                }
                if (it == 3 * SLOTS) {
                        snprintf(path, sizeof path, "%s/running.%d", tmpdir(), rank);
                        if ((f = fopen(path, "w")))
                                fclose(f);
                }
                if (now_usec() - t0 > 60 * 1000000ull) {
                        printf("rank %d: longrun: 60 s without an error\n", rank);
                        return;
                }
        }
}

/* ---- flows that run without (or before) a successful hvd_init ---- */

static int code_of(const char *name) {
#define ERRCODE(n, value, text)                                                                                        \
        if (!strcmp(name, #n))                                                                                         \
                return value;
        HVD_ERRORS(ERRCODE)
#undef ERRCODE
        return atoi(name);
}

/* expect-init-error CODE MAX_MS NEEDLE...: hvd_init fails with CODE within
 * MAX_MS and hvd_last_error() contains every needle. */
static int flow_expect_init_error(int argc, char **argv) {
        scenario = "expect-init-error";
        if (argc < 2) {
                fprintf(stderr, "usage: expect-init-error CODE MAX_MS [NEEDLE...]\n");
                return 2;
        }
        int want = code_of(argv[0]);
        double max_ms = atof(argv[1]);
        const char *r_env = getenv("HVD_RANK");
        rank = r_env ? atoi(r_env) : 0;
        uint64_t t0 = now_usec();
        int r = hvd_init();
        double ms = (double) (now_usec() - t0) / 1000.0;
        const char *msg = hvd_last_error();
        if (r == 0) {
                printf("rank %d: FAIL [expect-init-error] hvd_init succeeded after %.0f ms\n", rank, ms);
                hvd_shutdown();
                return 1;
        }
        printf("rank %d: hvd_init failed after %.0f ms: %s: %s\n", rank, ms, errname(r), msg);
        CHECK(r == want, "hvd_init returned %s, expected %s", errname(r), argv[0]);
        CHECK(ms <= max_ms, "hvd_init took %.0f ms to fail, expected at most %.0f", ms, max_ms);
        for (int i = 2; i < argc; i++)
                CHECK(strstr(msg, argv[i]) != NULL, "message \"%s\" does not mention \"%s\"", msg, argv[i]);
        CHECK(!hvd_is_initialized(), "hvd_is_initialized() after a failed hvd_init");
        CHECK(hvd_rank() == HVD_ENOTINIT, "hvd_rank() after a failed hvd_init: %d", hvd_rank());
        return failures ? 1 : 0;
}

static void expect_notinit(const char *when) {
        float x = 1, y;
        hvd_handle_t *h = (hvd_handle_t *) 0x1;
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[1] = { 1 };
        q.name = "ni";
        q.input = &x;
        q.output = &y;
        q.ndim = 1;
        q.shape = shape;
        CHECK(!hvd_is_initialized(), "%s: hvd_is_initialized() is true", when);
        CHECK(hvd_rank() == HVD_ENOTINIT, "%s: hvd_rank() = %d", when, hvd_rank());
        CHECK(hvd_size() == HVD_ENOTINIT, "%s: hvd_size() = %d", when, hvd_size());
        CHECK(hvd_local_rank() == HVD_ENOTINIT, "%s: hvd_local_rank() = %d", when, hvd_local_rank());
        CHECK(hvd_local_size() == HVD_ENOTINIT, "%s: hvd_local_size() = %d", when, hvd_local_size());
        CHECK(hvd_cross_rank() == HVD_ENOTINIT, "%s: hvd_cross_rank() = %d", when, hvd_cross_rank());
        int r = hvd_allreduce_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_allreduce_async: %s", when, errname(r));
        CHECK(h == (hvd_handle_t *) 0x1, "%s: the handle out-parameter was written on failure", when);
        CHECK(strstr(hvd_last_error(), "hvd_init") != NULL, "%s: last error \"%s\" does not say to call hvd_init", when,
              hvd_last_error());
        r = hvd_allreduce("ni", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_allreduce: %s", when, errname(r));
        r = hvd_broadcast("ni", &x, 1, HVD_FLOAT32, 0);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_broadcast: %s", when, errname(r));
        r = hvd_allgather_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_allgather_async: %s", when, errname(r));
        r = hvd_alltoall_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_alltoall_async: %s", when, errname(r));
        r = hvd_reducescatter_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_reducescatter_async: %s", when, errname(r));
        r = hvd_grouped_allreduce_async(&q, 1, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_grouped_allreduce_async: %s", when, errname(r));
        r = hvd_barrier();
        CHECK(r == HVD_ENOTINIT, "%s: hvd_barrier: %s", when, errname(r));
        r = hvd_join();
        CHECK(r == HVD_ENOTINIT, "%s: hvd_join: %s", when, errname(r));
        CHECK(hvd_shutdown() == 0, "%s: hvd_shutdown of an uninitialised hvd is not a no-op", when);
}

static int flow_notinit(void) {
        scenario = "notinit";
        const char *r_env = getenv("HVD_RANK");
        rank = r_env ? atoi(r_env) : 0;
        expect_notinit("before hvd_init");
        MUST(hvd_init());
        MUST(hvd_init()); /* again: 0 */
        CHECK(hvd_is_initialized() == 1, "hvd_is_initialized() is not 1");
        rank = hvd_rank();
        size = hvd_size();
        CHECK(rank >= 0 && size >= 1 && rank < size, "rank %d of size %d", rank, size);
        const char *s_env = getenv("HVD_SIZE");
        if (s_env && getenv("HVD_JOB_ID"))
                CHECK(size == atoi(s_env), "hvd_size() = %d, HVD_SIZE = %s", size, s_env);
        float x = 1, y = 0;
        MUST(hvd_allreduce("ni.ok", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
        CHECK(y == (float) size, "ni.ok = %g", y);
        MUST(hvd_barrier());
        hvd_handle_t *pending = NULL;
        if (size >= 2 && rank == 1) {
                /* only this rank submits it: still pending at shutdown */
                hvd_request_t q = HVD_REQUEST_INIT;
                int64_t shape[1] = { 1 };
                q.name = "ni.pending";
                q.input = &x;
                q.output = &y;
                q.ndim = 1;
                q.shape = shape;
                MUST(hvd_allreduce_async(&q, &pending));
        } else if (size >= 2)
                usleep(500 * 1000); /* let rank 1 shut down first */
        MUST(hvd_shutdown());
        if (pending) {
                int r = hvd_handle_wait_timeout(pending, 5 * 1000000ull);
                CHECK(r == HVD_ESHUTDOWN,
                      "a handle pending at hvd_shutdown completed with %s, expected "
                      "HVD_ESHUTDOWN",
                      errname(r));
                hvd_handle_release(&pending);
        }
        expect_notinit("after hvd_shutdown");
        if (!failures)
                printf("rank %d: notinit ok\n", rank);
        return failures ? 1 : 0;
}

/* reinit: hvd_init → work → hvd_shutdown, twice in one process (as a
 * Horovod script that shuts down and initialises again does) */
static int flow_reinit(void) {
        scenario = "reinit";
        const char *r_env = getenv("HVD_RANK");
        rank = r_env ? atoi(r_env) : 0;
        for (int round = 0; round < 2; round++) {
                int r = hvd_init();
                if (r < 0) {
                        printf("rank %d: FAIL [reinit] hvd_init of round %d: %s: %s\n", rank, round, errname(r),
                               hvd_last_error());
                        return 1;
                }
                rank = hvd_rank();
                size = hvd_size();
                float x = (float) (rank + round), y = -1;
                MUST(hvd_allreduce("reinit.x", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
                CHECK(y == (float) (size * round + size * (size - 1) / 2), "round %d: reinit.x = %g", round, y);
                MUST(hvd_barrier());
                MUST(hvd_shutdown());
        }
        if (!failures)
                printf("rank %d: reinit ok\n", rank);
        return failures ? 1 : 0;
}

/* ---- the steady state over several nodes ---- */

/* HVD_TEST_STEPS steps (default 60) of the same 15 tensors (cached ids
 * after the first: node-level readiness, repeated schedules), every
 * element exact: rank r contributes (r + 1) * (step + 1) + i % 7. */
static void scenario_steady(void) {
        enum { T = 15 };
        static const size_t ns[T] = { 1, 3, 10, 33, 100, 257, 1000, 4096, 5, 64, 999, 2048, 7, 128, 3000 };
        const char *e = getenv("HVD_TEST_STEPS");
        int steps = e && atoi(e) > 0 ? atoi(e) : 60;
        for (int st = 0; st < steps; st++) {
                void *in[T], *out[T];
                hvd_handle_t *h[T];
                char names[T][32];
                for (int k = 0; k < T; k++) {
                        hvd_dtype_t dt = k % 3 == 0 ? HVD_FLOAT32 : k % 3 == 1 ? HVD_INT32 : HVD_FLOAT64;
                        size_t es = dt == HVD_FLOAT64 ? 8 : 4;
                        in[k] = xmalloc(ns[k] * es);
                        out[k] = xmalloc(ns[k] * es);
                        for (size_t i = 0; i < ns[k]; i++) {
                                long v = (long) (rank + 1) * (st + 1) + (long) (i % 7);
                                if (dt == HVD_FLOAT32)
                                        ((float *) in[k])[i] = (float) v;
                                else if (dt == HVD_INT32)
                                        ((int32_t *) in[k])[i] = (int32_t) v;
                                else
                                        ((double *) in[k])[i] = (double) v;
                        }
                        snprintf(names[k], sizeof names[k], "steady.%d", k);
                        int64_t shape[1] = { (int64_t) ns[k] };
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = names[k];
                        q.input = in[k];
                        q.output = out[k];
                        q.dtype = dt;
                        q.ndim = 1;
                        q.shape = shape;
                        q.reduce_op = k % 3 == 2 ? HVD_REDUCE_MAX : HVD_REDUCE_SUM;
                        MUST(hvd_allreduce_async(&q, &h[k]));
                }
                for (int k = 0; k < T; k++) {
                        wait_ok(h[k], names[k]);
                        hvd_handle_release(&h[k]);
                        long base = (long) (st + 1) * size * (size + 1) / 2;
                        for (size_t i = 0; i < ns[k]; i++) {
                                double got, want;
                                if (k % 3 == 0) {
                                        got = ((float *) out[k])[i];
                                        want = (double) (base + (long) size * (long) (i % 7));
                                } else if (k % 3 == 1) {
                                        got = ((int32_t *) out[k])[i];
                                        want = (double) (base + (long) size * (long) (i % 7));
                                } else {
                                        got = ((double *) out[k])[i];
                                        want = (double) ((long) size * (st + 1) + (long) (i % 7));
                                }
                                if (got != want) {
                                        CHECK(false, "step %d: %s[%zu] = %g, expected %g", st, names[k], i, got, want);
                                        break;
                                }
                        }
                        free(in[k]);
                        free(out[k]);
                }
        }
        if (rank == 0)
                printf("rank 0: steady: %d steps of %d tensors exact\n", steps, (int) T);
}

/* Five rounds of "stall.t" on every rank, then rank HVD_TEST_STALL_RANK
 * (default the last) stays away: the job's stall shutdown ends the
 * others' wait, with the message that names who is missing. */
static void scenario_stall_one(void) {
        const char *e = getenv("HVD_TEST_STALL_RANK");
        int victim = e ? atoi(e) : size - 1;
        for (int it = 0; it < 6; it++) {
                if (it == 5 && rank == victim)
                        for (int k = 0; k < 160; k++)
                                usleep(50 * 1000);
                float x[4] = { 1, 1, 1, 1 }, y[4] = { 0 };
                int64_t shape[1] = { 4 };
                hvd_request_t q = HVD_REQUEST_INIT;
                q.name = "stall.t";
                q.input = x;
                q.output = y;
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h = NULL;
                int r = hvd_allreduce_async(&q, &h);
                if (r >= 0)
                        r = hvd_handle_wait_timeout(h, 30 * 1000000ull);
                if (it < 5)
                        CHECK(r == 0 && y[0] == (float) size, "round %d: %s, %g", it, errname(r), y[0]);
                else {
                        const char *msg = h ? hvd_handle_error(h) : hvd_last_error();
                        printf("rank %d: stall-one: %s: %s\n", rank, errname(r), msg ? msg : "");
                        CHECK(r < 0, "the stalled round completed");
                }
                hvd_handle_release(&h);
                if (r < 0)
                        return;
        }
}

/* ---- main ---- */

typedef struct scen {
        const char *name;
        void (*fn)(void);
        bool special; /* not part of "all": needs its own setup */
} scen_t;

static const scen_t scenarios[] = {
        { "api", scenario_api },
        { "bcast-null-input", scenario_bcast_null_input },
        { "allreduce", scenario_allreduce },
        { "grouped", scenario_grouped },
        { "shared", scenario_shared },
        { "shared-fused", scenario_shared_fused },
        { "staggered", scenario_staggered },
        { "broadcast", scenario_broadcast },
        { "allgather", scenario_allgather },
        { "alltoall", scenario_alltoall },
        { "reducescatter", scenario_reducescatter },
        { "barrier", scenario_barrier },
        { "join", scenario_join },
        { "many", scenario_many },
        { "threads", scenario_threads },
        { "edges", scenario_edges },
        { "resnet50", scenario_resnet50 },
        { "inception", scenario_inception },
        { "mismatch", scenario_mismatch },
        { "duplicate", scenario_duplicate },
        { "mismatch-retry", scenario_mismatch_retry },
        { "process-sets", scenario_process_sets },
        { "process-sets-grouped", scenario_process_sets_grouped },
        { "process-sets-same-name", scenario_process_sets_same_name },
        { "unique-names", scenario_unique_names },
        { "longrun", scenario_longrun, true },
        { "longrun-detached", scenario_longrun_detached, true },
        { "early-shutdown", scenario_early_shutdown, true },
        { "steady", scenario_steady, true },
        { "stall-one", scenario_stall_one, true },
};
#define N_SCEN (sizeof scenarios / sizeof scenarios[0])

/* With HVD_TEST_HOLD=PATH, the job stays alive after its scenarios until
 * PATH.go exists (rank 0 creates PATH.ready when all ranks are there), so a
 * test can inspect the daemon's status of a live job. */
static void hold(void) {
        const char *p = getenv("HVD_TEST_HOLD");
        if (!p || !*p)
                return;
        MUST(hvd_barrier());
        char path[1024];
        if (rank == 0) {
                snprintf(path, sizeof path, "%s.ready", p);
                FILE *f = fopen(path, "w");
                if (f)
                        fclose(f);
        }
        snprintf(path, sizeof path, "%s.go", p);
        for (int i = 0; i < 600 && access(path, F_OK) != 0; i++)
                usleep(50 * 1000);
        MUST(hvd_barrier());
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc < 2) {
                fprintf(stderr,
                        "usage: %s SCENARIO... | all | notinit | expect-init-error CODE MAX_MS NEEDLE...\n"
                        "scenarios:",
                        argv[0]);
                for (size_t i = 0; i < N_SCEN; i++)
                        fprintf(stderr, " %s", scenarios[i].name);
                fprintf(stderr, "\n");
                return 2;
        }
        if (!strcmp(argv[1], "expect-init-error"))
                return flow_expect_init_error(argc - 2, argv + 2);
        if (!strcmp(argv[1], "notinit"))
                return flow_notinit();
        if (!strcmp(argv[1], "reinit"))
                return flow_reinit();

        uint64_t t_init = now_usec();
        int r = hvd_init();
        if (r < 0) {
                printf("rank %s: FAIL hvd_init: %s: %s\n", getenv("HVD_RANK") ? getenv("HVD_RANK") : "?", errname(r),
                       hvd_last_error());
                return 1;
        }
        rank = hvd_rank();
        size = hvd_size();
        if (rank == 0)
                printf("rank 0: job of %d ranks up in %.1f ms\n", size, (double) (now_usec() - t_init) / 1000.0);
        int ran = 0;
        for (int a = 1; a < argc; a++) {
                bool all = !strcmp(argv[a], "all"), found = false;
                for (size_t i = 0; i < N_SCEN; i++) {
                        if (!(all ? !scenarios[i].special : !strcmp(argv[a], scenarios[i].name)))
                                continue;
                        found = true;
                        scenario = scenarios[i].name;
                        int before = failures;
                        uint64_t t0 = now_usec();
                        scenarios[i].fn();
                        printf("rank %d: %s: %s (%.0f ms)\n", rank, scenario, failures == before ? "ok" : "FAILED",
                               (double) (now_usec() - t0) / 1000.0);
                        ran++;
                }
                if (!found) {
                        printf("rank %d: unknown scenario '%s'\n", rank, argv[a]);
                        failures++;
                }
        }
        scenario = "shutdown";
        hold();
        r = hvd_shutdown();
        CHECK(r == 0, "hvd_shutdown: %s", errname(r));
        if (failures)
                printf("rank %d: %d failure(s)\n", rank, failures);
        else
                printf("rank %d: all %d scenario(s) passed\n", rank, ran);
        return failures ? 1 : 0;
}
