/* allreduce.c — the reduction scenarios of the integration worker: allreduce
 * over every dtype, op and size with exactly representable values (so every
 * element is checked for equality), prescale and postscale, tensors larger
 * than the fusion buffer; shared tensors (the zero-copy path), alone and
 * fused; groups; the same names batched differently by each rank; many
 * small tensors at once; and real models' gradients (resnet50, inception),
 * their shapes read from shared/data. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

static const hvd_dtype_t all_dtypes[] = { HVD_UINT8,   HVD_INT8,     HVD_INT16,   HVD_INT32,   HVD_INT64,
                                          HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL };
static const hvd_reduce_op_t all_ops[] = { HVD_REDUCE_AVERAGE, HVD_REDUCE_SUM, HVD_REDUCE_MIN, HVD_REDUCE_MAX,
                                           HVD_REDUCE_PRODUCT };
static const char *const op_names[] = { "average", "sum", "min", "max", "product" };
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])
#define N_OPS    (sizeof all_ops / sizeof all_ops[0])

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

void scenario_allreduce(void) {
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
        /* just over 16 MiB out of place: the smallest whose outputs are
         * written around the caches */
        ar_case_init(&cases[n++], "large", HVD_FLOAT32, HVD_REDUCE_SUM, (4u << 20) + 7, 1, 1.0, 1.0, false);
        run_cases(cases, n);
        /* mid sizes on either side of the shared-memory data plane's
         * threshold (one chunk reduced by every rank into its outputs up to
         * 64 KiB, by segments above), odd element counts, with and without
         * prescale */
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

/* Outputs of 16 MiB and more that are not also the inputs are written
 * around the caches on the segment path, in-place ones through them: a
 * group of one member of each, odd counts, so the member edge and the
 * segment edges fall inside chunks (one operation when the fusion
 * threshold holds both: test-collectives.sh runs it with 128 MiB), then
 * one out-of-place average alone. */
void scenario_streamed(void) {
        enum { G = 2 };
        const size_t ns[G] = { (9u << 20) + 5, (9u << 20) - 3 };
        for (int round = 0; round < 2; round++) {
                ar_case_t k[G];
                hvd_request_t q[G];
                for (int i = 0; i < G; i++) {
                        ar_case_init(&k[i], "streamed", HVD_FLOAT32, HVD_REDUCE_SUM, ns[i], 1, 1.0, 1.0, i == 1);
                        q[i] = (hvd_request_t) HVD_REQUEST_INIT;
                        q[i].name = k[i].name;
                        q[i].input = k[i].in;
                        q[i].output = k[i].out;
                        q[i].dtype = HVD_FLOAT32;
                        q[i].ndim = 1;
                        q[i].shape = k[i].shape;
                        q[i].reduce_op = HVD_REDUCE_SUM;
                }
                hvd_handle_t *h = NULL;
                MUST(hvd_grouped_allreduce_async(q, G, &h));
                wait_ok(h, "grouped allreduce of 72 MiB");
                hvd_handle_release(&h);
                for (int i = 0; i < G; i++) {
                        compare(k[i].name, HVD_FLOAT32, k[i].out, k[i].n, ar_gen, &k[i].want_ctx);
                        if (k[i].out != k[i].in)
                                free(k[i].out);
                        free(k[i].in);
                }
                ar_case_t alone;
                ar_case_init(&alone, "streamed", HVD_FLOAT32, HVD_REDUCE_AVERAGE, (8u << 20) + 1, 1, 1.0, 1.0, false);
                run_cases(&alone, 1);
        }
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

void scenario_shared(void) {
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

void scenario_shared_fused(void) {
        for (int round = 0; round < 3; round++) {
                shared_fused_round("inplace", true, false);
                shared_fused_round("outofplace", false, false);
                shared_fused_round("mixed", true, true);
        }
}

void scenario_grouped(void) {
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
void scenario_staggered(void) {
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

void scenario_many(void) {
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

void scenario_resnet50(void) {
        model_step("resnet50.tsv");
}

void scenario_inception(void) {
        model_step("inception_v3.tsv");
}

/* ---- the same bits on every rank ---- */

/* A value whose sum over the ranks depends on the order of the additions
 * (magnitudes from 1e-4 to 1e4), with NaNs at some places of some ranks. */
static double uneven(size_t i, int r, bool nans) {
        if (nans && i % 17 == 0 && (int) (i / 17 % (size_t) size) == r)
                return NAN;
        return sin((double) i * 0.37 + r * 1.91) * pow(10.0, (double) ((i + (size_t) r) % 9) - 4.0);
}

/* rank r's element i of uneven(), as dtype dt holds it */
static double uneven_as(hvd_dtype_t dt, size_t i, int r, bool nans) {
        uint8_t one[8];
        set_elem(dt, one, 0, uneven(i, r, nans));
        return get_elem(dt, one, 0);
}

/* The result's values: a minimum or maximum exactly (where no rank has a
 * NaN), a sum or average within the rounding of size - 1 additions in dt
 * (relative to the magnitudes added; float16's subnormals absolutely).
 * Returns how many differ. */
static size_t same_bits_values(hvd_dtype_t dt, hvd_reduce_op_t op, const void *out, size_t n) {
        double u = dt == HVD_FLOAT16 ? 0x1p-11 : dt == HVD_FLOAT32 ? 0x1p-24 : 0x1p-53;
        double tiny = dt == HVD_FLOAT16 ? 0x1p-24 : 0.0;
        bool nans = op == HVD_REDUCE_MAX || op == HVD_REDUCE_MIN;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
                double want = 0.0, mag = 0.0, got = get_elem(dt, out, i);
                bool nan = false;
                for (int r = 0; r < size; r++) {
                        double x = uneven_as(dt, i, r, nans);
                        nan = nan || isnan(x);
                        if (op == HVD_REDUCE_MAX)
                                want = r == 0 || x > want ? x : want;
                        else if (op == HVD_REDUCE_MIN)
                                want = r == 0 || x < want ? x : want;
                        else
                                want += x;
                        mag += fabs(x);
                }
                bool ok;
                if (nans)
                        ok = nan || got == want;
                else {
                        if (op == HVD_REDUCE_AVERAGE)
                                want /= size, mag /= size;
                        ok = fabs(got - want) <= 2.0 * size * (u * mag + tiny);
                }
                if (!ok && bad++ < 3)
                        fail("%s of %zu %s: element %zu is %.17g, expected %.17g", op_names[op], n, hvd_dtype_name(dt),
                             i, got, want);
        }
        return bad;
}

/* One allreduce of uneven() values of dt; an allgather of every rank's
 * result compares its bits with this rank's. */
static void same_bits_case(hvd_dtype_t dt, hvd_reduce_op_t op, size_t n) {
        size_t es = hvd_dtype_size(dt);
        bool nans = op == HVD_REDUCE_MAX || op == HVD_REDUCE_MIN;
        uint8_t *in = xmalloc(n * es), *out = xmalloc(n * es);
        for (size_t i = 0; i < n; i++)
                set_elem(dt, in, i, uneven(i, rank, nans));
        char name[64], gname[80];
        snprintf(name, sizeof name, "bits.%zu.%d.%d", n, (int) dt, (int) op);
        snprintf(gname, sizeof gname, "%s.gather", name);
        int64_t shape[1] = { (int64_t) n }, gshape[1] = { (int64_t) (n * es) };
        hvd_request_t q = HVD_REQUEST_INIT, g = HVD_REQUEST_INIT;
        q.name = name;
        q.input = in;
        q.output = out;
        q.dtype = dt;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = op;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        wait_ok(h, name);
        hvd_handle_release(&h);
        same_bits_values(dt, op, out, n);
        g.name = gname;
        g.input = out;
        g.dtype = HVD_UINT8;
        g.ndim = 1;
        g.shape = gshape;
        MUST(hvd_allgather_async(&g, &h));
        wait_ok(h, gname);
        const void *data;
        size_t bytes;
        int nd;
        const int64_t *os;
        MUST(hvd_handle_output(h, 0, &data, &bytes, &nd, &os));
        CHECK(bytes == (size_t) size * n * es, "%s: %zu bytes gathered", gname, bytes);
        for (int r = 0; r < size && bytes == (size_t) size * n * es; r++)
                CHECK(memcmp((const uint8_t *) data + (size_t) r * n * es, out, n * es) == 0,
                      "%s: rank %d's result differs from rank %d's", name, r, rank);
        hvd_handle_release(&h);
        free(in);
        free(out);
}

/* Floating-point allreduces whose results depend on the order in which
 * the ranks' values are combined: right to the rounding, and the same
 * bits on every rank, on either side of the size where the data plane
 * changes algorithm. */
void scenario_same_bits(void) {
        static const size_t sizes[] = { 1, 7, 1000, 16383, 16385, 100000, 300000 };
        static const hvd_dtype_t dts[] = { HVD_FLOAT16, HVD_FLOAT32, HVD_FLOAT64 };
        static const hvd_reduce_op_t ops[] = { HVD_REDUCE_SUM, HVD_REDUCE_AVERAGE, HVD_REDUCE_MAX, HVD_REDUCE_MIN };
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
                for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
                        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
                                same_bits_case(dts[d], ops[o], sizes[s]);
}
