/* streams.c — the scenarios of the collectives whose outputs are laid out
 * by rank: broadcast from every root, allgather and alltoall with uneven rows
 * and splits (zeros included), reducescatter with rows that do not divide
 * evenly among the ranks, each also grouped or synchronous; every output is
 * checked element by element, with its shape and size. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"

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

void scenario_broadcast(void) {
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

void scenario_allgather(void) {
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

void scenario_alltoall(void) {
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
        int r;        /* >= 0: input of rank r; -1: expected output rows from first_row */
        double scale; /* the request's prescale x postscale (powers of 2: exact) */
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
        return (c->op == HVD_REDUCE_AVERAGE ? acc / size : acc) * c->scale;
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
        c->ctx = (rs_ctx_t){ dt, op, rest, 0, rank, 1.0 };
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
        if (c->ctx.scale != 1.0) {
                q.prescale = 0.5;
                q.postscale = 2 * c->ctx.scale;
        }
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

void scenario_reducescatter(void) {
        for (int round = 0; round < 2; round++) {
                enum { NR = 7 };
                rs_case_t c[NR];
                hvd_handle_t *h[NR];
                rs_case_init(&c[0], "sum.f32", HVD_FLOAT32, HVD_REDUCE_SUM, 2 * size + 1, 3, round);
                rs_case_init(&c[1], "avg.f64", HVD_FLOAT64, HVD_REDUCE_AVERAGE, 3 * size + 2, 2, round);
                rs_case_init(&c[2], "sum.i32.onerow", HVD_INT32, HVD_REDUCE_SUM, 1, 4, round);
                rs_case_init(&c[3], "avg.f32", HVD_FLOAT32, HVD_REDUCE_AVERAGE, 5 * size, 7, round);
                rs_case_init(&c[4], "sum.i64", HVD_INT64, HVD_REDUCE_SUM, size + size / 2 + 1, 5, round);
                rs_case_init(&c[5], "sum.large", HVD_FLOAT32, HVD_REDUCE_SUM, 700000 * (int64_t) size + 3, 2, round);
                /* prescale 0.5, postscale 8: 4x the sum, both factors applied */
                rs_case_init(&c[6], "scaled.f64", HVD_FLOAT64, HVD_REDUCE_SUM, 40000 * (int64_t) size + 1, 3, round);
                c[6].ctx.scale = 4.0;
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
