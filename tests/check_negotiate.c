/* check_negotiate.c — unit tests of one job's negotiation table
 * (common/negotiate.c): a tensor is scheduled only when every rank is ready,
 * in ready order, with numbered schedules and exact fused-op contents; every
 * disagreement across ranks becomes a TensorError naming the ranks and both
 * values; cached ids, duplicates, join, groups, process sets, table capacity
 * and the pending description behave as negotiate.h documents. */
#include "config.h"

#include <check.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include "hvd.h"
#include "hvd.pb-c.h"
#include "negotiate.h"
#include "util.h"

#define MiB    (UINT64_C(1) << 20)
#define MAXREQ 32

/* ---- building Ready messages ---- */

typedef struct rq {
        Hvd__Ready ready;
        Hvd__Request req[MAXREQ];
        Hvd__Request *rp[MAXREQ];
        int64_t shape[MAXREQ][HVD_MAX_NDIM];
        int64_t splits[MAXREQ][8];
        uint32_t set[MAXREQ][8];
        uint32_t cached[MAXREQ];
} rq_t;

static void rq_init(rq_t *b) {
        memset(b, 0, sizeof *b);
        hvd__ready__init(&b->ready);
        b->ready.requests = b->rp;
        b->ready.cached = b->cached;
}

/* shape: "" = scalar, "2x3" = [2, 3] */
static Hvd__Request *rq_add(rq_t *b, const char *name, uint32_t kind, hvd_dtype_t dt, const char *shape) {
        ck_assert_uint_lt(b->ready.n_requests, MAXREQ);
        size_t i = b->ready.n_requests++;
        Hvd__Request *q = &b->req[i];
        hvd__request__init(q);
        q->name = (char *) name;
        q->kind = (Hvd__Kind) kind;
        q->dtype = dt;
        q->reduce_op = HVD_REDUCE_SUM;
        q->prescale = 1.0;
        q->postscale = 1.0;
        q->device = HVD_DEVICE_CPU;
        q->shape = b->shape[i];
        for (const char *s = shape; *s;) {
                char *end;
                ck_assert_uint_lt(q->n_shape, HVD_MAX_NDIM);
                b->shape[i][q->n_shape++] = strtoll(s, &end, 10);
                s = *end == 'x' ? end + 1 : end;
        }
        b->rp[i] = q;
        return q;
}

static void rq_splits(rq_t *b, Hvd__Request *q, size_t n, ...) {
        size_t i = (size_t) (q - b->req);
        va_list ap;
        va_start(ap, n);
        for (size_t k = 0; k < n; k++)
                b->splits[i][k] = va_arg(ap, int64_t);
        va_end(ap);
        q->splits = b->splits[i];
        q->n_splits = n;
}

static void rq_cached(rq_t *b, uint32_t id) {
        b->cached[b->ready.n_cached++] = id;
}

static void submit_ok(hvd_negotiator_t *n, uint32_t rank, const rq_t *b) {
        char err[1024] = "";
        int r = hvd_negotiator_submit(n, rank, &b->ready, err, sizeof err);
        ck_assert_msg(r == 0, "submit of rank %u failed: %d (%s)", rank, r, err);
}

/* one tensor from one rank */
static void sub1(hvd_negotiator_t *n, uint32_t rank, const char *name, uint32_t kind, hvd_dtype_t dt,
                 const char *shape) {
        rq_t b;
        rq_init(&b);
        rq_add(&b, name, kind, dt, shape);
        submit_ok(n, rank, &b);
}

static void sub_all(hvd_negotiator_t *n, uint32_t size, const char *name, uint32_t kind, hvd_dtype_t dt,
                    const char *shape) {
        for (uint32_t r = 0; r < size; r++)
                sub1(n, r, name, kind, dt, shape);
}

static void join(hvd_negotiator_t *n, uint32_t rank) {
        rq_t b;
        rq_init(&b);
        rq_add(&b, HVD_JOIN_NAME, HVD__KIND__KIND_JOIN, HVD_FLOAT32, "");
        submit_ok(n, rank, &b);
}

static Hvd__Schedule *take(hvd_negotiator_t *n) {
        Hvd__Schedule *s = NULL;
        ck_assert(hvd_negotiator_has_work(n));
        int r = hvd_negotiator_take_schedule(n, &s);
        ck_assert_int_eq(r, 1);
        ck_assert_ptr_nonnull(s);
        return s;
}

static void take_none(hvd_negotiator_t *n) {
        Hvd__Schedule *s = NULL;
        ck_assert_int_eq(hvd_negotiator_take_schedule(n, &s), 0);
        ck_assert_ptr_null(s);
}

static hvd_negotiator_t *neg_new(uint32_t size, uint32_t max, uint64_t threshold) {
        hvd_negotiator_t *n = NULL;
        ck_assert_int_eq(hvd_negotiator_new(size, max, threshold, &n), 0);
        ck_assert_ptr_nonnull(n);
        return n;
}

static const Hvd__Entry *entry(const Hvd__Schedule *s, size_t op, size_t k) {
        ck_assert_uint_lt(op, s->n_ops);
        ck_assert_uint_lt(k, s->ops[op]->n_entries);
        return s->ops[op]->entries[k];
}

/* the name an entry stands for, given the ids announced so far */
static char ids[256][64];
static const char *entry_name(const Hvd__Entry *e) {
        ck_assert_uint_lt(e->id, 256);
        if (e->name && e->name[0])
                snprintf(ids[e->id], sizeof ids[e->id], "%s", e->name);
        ck_assert_msg(ids[e->id][0], "entry with id %u was never announced with a name", e->id);
        return ids[e->id];
}

/* needles must appear in msg, in this order (case-insensitive) */
static void assert_in_order(const char *msg, ...) {
        va_list ap;
        va_start(ap, msg);
        const char *p = msg;
        for (const char *needle; (needle = va_arg(ap, const char *));) {
                const char *q = strcasestr(p, needle);
                ck_assert_msg(q, "expected \"%s\" (in this order) in: %s", needle, msg);
                p = q + strlen(needle);
        }
        va_end(ap);
}

/* ---- readiness and scheduling ---- */

START_TEST(test_negotiate_schedule_only_when_all_ready) {
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        ck_assert(!hvd_negotiator_has_work(n));
        ck_assert(!hvd_negotiator_any_pending(n));
        take_none(n);
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        ck_assert(!hvd_negotiator_has_work(n));
        ck_assert(hvd_negotiator_any_pending(n));
        ck_assert(hvd_negotiator_rank_has_pending(n, 0));
        ck_assert(!hvd_negotiator_rank_has_pending(n, 1));
        take_none(n);
        sub1(n, 2, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        ck_assert(!hvd_negotiator_has_work(n));
        take_none(n);
        sub1(n, 1, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        ck_assert(hvd_negotiator_has_work(n));

        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->seq, 1);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_int_eq(s->join_done_last_rank, -1);
        ck_assert_uint_eq(s->n_ops, 1);
        const Hvd__Op *op = s->ops[0];
        ck_assert_uint_eq(op->kind, HVD__KIND__KIND_ALLREDUCE);
        ck_assert_uint_eq(op->dtype, HVD_FLOAT32);
        ck_assert_uint_eq(op->reduce_op, HVD_REDUCE_SUM);
        ck_assert(op->prescale == 1.0 && op->postscale == 1.0);
        ck_assert_uint_eq(op->n_joined, 0);
        ck_assert_uint_eq(op->n_entries, 1);
        const Hvd__Entry *e = op->entries[0];
        ck_assert_uint_eq(e->id, 0);
        ck_assert_str_eq(e->name, "a");
        ck_assert_uint_eq(e->count, 4);
        ck_assert_uint_eq(e->row_elems, 1);
        ck_assert_uint_eq(e->n_shape, 1);
        ck_assert_int_eq(e->shape[0], 4);
        hvd_negotiator_schedule_free(&s);
        ck_assert_ptr_null(s);

        ck_assert(!hvd_negotiator_has_work(n));
        ck_assert(!hvd_negotiator_any_pending(n));
        ck_assert(!hvd_negotiator_rank_has_pending(n, 0));
        take_none(n);
        hvd_negotiator_destroy(&n);
        ck_assert_ptr_null(n);
        hvd_negotiator_destroy(&n); /* NULL-safe */
        hvd_negotiator_destroy(NULL);
}
END_TEST

START_TEST(test_negotiate_seq_numbers) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        for (uint64_t round = 1; round <= 3; round++) {
                sub_all(n, 2, "a", HVD__KIND__KIND_ALLREDUCE, HVD_INT32, "3");
                Hvd__Schedule *s = take(n);
                ck_assert_uint_eq(s->seq, round);
                ck_assert_uint_eq(s->n_ops, 1);
                ck_assert_uint_eq(entry(s, 0, 0)->id, 0);
                /* the name goes out once, then the id alone */
                ck_assert_str_eq(entry(s, 0, 0)->name, round == 1 ? "a" : "");
                hvd_negotiator_schedule_free(&s);
        }
        hvd_negotiator_stats_t st;
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.schedules, 3);
        ck_assert_uint_eq(st.tensors_negotiated, 3);
        ck_assert_uint_eq(st.fused_ops, 3);
        ck_assert_uint_eq(st.tensors_in_fused_ops, 0);
        ck_assert_uint_eq(st.n_tensors, 1);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_ready_order_preserved) {
        /* rank 0 sends a, b, c; rank 1 sends c, a, b: they become ready as
         * c, a, b and every rank executes them in that order */
        for (int fuse = 0; fuse < 2; fuse++) {
                hvd_negotiator_t *n = neg_new(2, 64, fuse ? 64 * MiB : 0);
                rq_t b;
                rq_init(&b);
                rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
                rq_add(&b, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2");
                rq_add(&b, "c", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "3");
                submit_ok(n, 0, &b);
                rq_init(&b);
                rq_add(&b, "c", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "3");
                rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
                rq_add(&b, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2");
                submit_ok(n, 1, &b);
                Hvd__Schedule *s = take(n);
                const char *want[] = { "c", "a", "b" };
                if (fuse) {
                        ck_assert_uint_eq(s->n_ops, 1);
                        ck_assert_uint_eq(s->ops[0]->n_entries, 3);
                        for (size_t k = 0; k < 3; k++)
                                ck_assert_str_eq(entry(s, 0, k)->name, want[k]);
                } else {
                        ck_assert_uint_eq(s->n_ops, 3);
                        for (size_t k = 0; k < 3; k++) {
                                ck_assert_uint_eq(s->ops[k]->n_entries, 1);
                                ck_assert_str_eq(entry(s, k, 0)->name, want[k]);
                        }
                }
                /* ids are given in order of first appearance */
                ck_assert_uint_eq(entry(s, 0, 0)->id, 2);
                hvd_negotiator_schedule_free(&s);
                hvd_negotiator_destroy(&n);
        }

        /* across messages: a ready, then b */
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        sub1(n, 1, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        sub1(n, 1, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        sub1(n, 0, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_entries, 2);
        ck_assert_str_eq(entry(s, 0, 0)->name, "a");
        ck_assert_str_eq(entry(s, 0, 1)->name, "b");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_fused_op_contents) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                rq_add(&b, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2x3");
                rq_add(&b, "c", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT64, "5");
                rq_add(&b, "d", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1000x1000");
                rq_add(&b, "e", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "");
                submit_ok(n, r, &b);
        }
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 2);
        const Hvd__Op *f32 = s->ops[0], *f64 = s->ops[1];
        ck_assert_uint_eq(f32->dtype, HVD_FLOAT32);
        ck_assert_uint_eq(f32->n_entries, 4);
        ck_assert_str_eq(f32->entries[0]->name, "a");
        ck_assert_uint_eq(f32->entries[0]->count, 4);
        ck_assert_uint_eq(f32->entries[0]->row_elems, 1);
        ck_assert_str_eq(f32->entries[1]->name, "b");
        ck_assert_uint_eq(f32->entries[1]->count, 6);
        ck_assert_uint_eq(f32->entries[1]->row_elems, 3);
        ck_assert_uint_eq(f32->entries[1]->n_shape, 2);
        ck_assert_int_eq(f32->entries[1]->shape[0], 2);
        ck_assert_int_eq(f32->entries[1]->shape[1], 3);
        ck_assert_str_eq(f32->entries[2]->name, "d");
        ck_assert_uint_eq(f32->entries[2]->count, 1000000);
        ck_assert_str_eq(f32->entries[3]->name, "e");
        ck_assert_uint_eq(f32->entries[3]->count, 1); /* a scalar has one element */
        ck_assert_uint_eq(f32->entries[3]->n_shape, 0);
        ck_assert_uint_eq(f64->dtype, HVD_FLOAT64);
        ck_assert_uint_eq(f64->n_entries, 1);
        ck_assert_str_eq(f64->entries[0]->name, "c");
        ck_assert_uint_eq(f64->entries[0]->count, 5);
        hvd_negotiator_schedule_free(&s);

        hvd_negotiator_stats_t st;
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.tensors_negotiated, 5);
        ck_assert_uint_eq(st.fused_ops, 2);
        ck_assert_uint_eq(st.tensors_in_fused_ops, 4);
        ck_assert_uint_eq(st.bytes_scheduled, (4 + 6 + 1000000 + 1) * 4 + 5 * 8);
        ck_assert_uint_eq(st.schedules, 1);
        ck_assert_uint_eq(st.n_tensors, 5);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_fusion_threshold_applies) {
        /* 3 x 40 MiB float32 with a 64 MiB threshold: three ops */
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                rq_add(&b, "x0", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "10485760");
                rq_add(&b, "x1", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "10485760");
                rq_add(&b, "x2", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "10485760");
                submit_ok(n, r, &b);
        }
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 3);
        for (size_t k = 0; k < 3; k++)
                ck_assert_uint_eq(s->ops[k]->n_entries, 1);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_allgather_rank_rows) {
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        sub1(n, 0, "g", HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, "2x5");
        sub1(n, 1, "g", HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, "0x5");
        sub1(n, 2, "g", HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, "3x5");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->kind, HVD__KIND__KIND_ALLGATHER);
        const Hvd__Entry *e = entry(s, 0, 0);
        ck_assert_uint_eq(e->n_rank_rows, 3);
        ck_assert_int_eq(e->rank_rows[0], 2);
        ck_assert_int_eq(e->rank_rows[1], 0);
        ck_assert_int_eq(e->rank_rows[2], 3);
        ck_assert_uint_eq(e->row_elems, 5);
        ck_assert_uint_eq(e->n_shape, 2);
        ck_assert_int_eq(e->shape[1], 5);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_stats_t st;
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.bytes_scheduled, 5 * 5 * 4); /* the gathered size */
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_alltoall_splits_matrix) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b;
        rq_init(&b);
        rq_splits(&b, rq_add(&b, "t", HVD__KIND__KIND_ALLTOALL, HVD_INT32, "3x2"), 2, (int64_t) 1, (int64_t) 2);
        rq_add(&b, "u", HVD__KIND__KIND_ALLTOALL, HVD_INT32, "4");
        submit_ok(n, 0, &b);
        rq_init(&b);
        rq_add(&b, "t", HVD__KIND__KIND_ALLTOALL, HVD_INT32, "4x2"); /* NULL splits: 2 + 2 */
        rq_splits(&b, rq_add(&b, "u", HVD__KIND__KIND_ALLTOALL, HVD_INT32, "4"), 2, (int64_t) 0, (int64_t) 4);
        submit_ok(n, 1, &b);
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 2); /* alltoall never fuses */
        const Hvd__Entry *e = entry(s, 0, 0);
        ck_assert_str_eq(e->name, "t");
        ck_assert_uint_eq(e->row_elems, 2);
        ck_assert_uint_eq(e->n_splits, 4);
        const int64_t want[] = { 1, 2, 2, 2 };
        for (int k = 0; k < 4; k++)
                ck_assert_int_eq(e->splits[k], want[k]);
        e = entry(s, 1, 0);
        ck_assert_str_eq(e->name, "u");
        const int64_t want_u[] = { 2, 2, 0, 4 };
        for (int k = 0; k < 4; k++)
                ck_assert_int_eq(e->splits[k], want_u[k]);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_barrier) {
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        sub_all(n, 3, HVD_BARRIER_NAME, HVD__KIND__KIND_BARRIER, HVD_FLOAT32, "");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->kind, HVD__KIND__KIND_BARRIER);
        ck_assert_uint_eq(s->ops[0]->n_entries, 1);
        hvd_negotiator_schedule_free(&s);
        /* barriers are never fused with each other or with anything */
        hvd_negotiator_destroy(&n);
}
END_TEST

/* ---- consistency across ranks ---- */

/* rank 0 sends (k0, d0, s0), rank `other` of `size` sends (k1, d1, s1); the
 * schedule must carry exactly one error for 'w', no op, and the message. */
static Hvd__Schedule *mismatch(hvd_negotiator_t *n, uint32_t size, rq_t *b0, rq_t *b1, uint32_t other) {
        for (uint32_t r = 0; r < size; r++)
                submit_ok(n, r, r == other ? b1 : b0);
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 0);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->name, "w");
        return s;
}

static void one(rq_t *b, uint32_t kind, hvd_dtype_t dt, const char *shape) {
        rq_init(b);
        rq_add(b, "w", kind, dt, shape);
}

START_TEST(test_negotiate_mismatch_dtype) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT64, "4");
        Hvd__Schedule *s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_int_eq(s->errors[0]->code, HVD_EMISMATCH);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'w': rank 1 sent dtype float64, rank 0 sent float32");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_mismatch_shape) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2x3");
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "3x2");
        Hvd__Schedule *s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_int_eq(s->errors[0]->code, HVD_EMISMATCH);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'w': rank 1 sent shape [3, 2], rank 0 sent [2, 3]");
        hvd_negotiator_schedule_free(&s);

        /* a different number of dimensions */
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "6");
        s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'w': rank 1 sent shape [6], rank 0 sent [2, 3]");
        hvd_negotiator_schedule_free(&s);

        /* allgather: the first dimension may differ, the rest may not */
        one(&b0, HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, "2x3");
        one(&b1, HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, "2x4");
        s = mismatch(n, 2, &b0, &b1, 1);
        assert_in_order(s->errors[0]->message, "allgather 'w': rank 1 sent shape [2, 4], rank 0 sent [2, 3]", NULL);
        hvd_negotiator_schedule_free(&s);

        /* reducescatter: the first dimension must agree too */
        one(&b0, HVD__KIND__KIND_REDUCESCATTER, HVD_FLOAT32, "5x2");
        one(&b1, HVD__KIND__KIND_REDUCESCATTER, HVD_FLOAT32, "4x2");
        s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_str_eq(s->errors[0]->message, "reducescatter 'w': rank 1 sent shape [4, 2], rank 0 sent [5, 2]");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_mismatch_three_ranks) {
        /* the rank that differs is named, with the reference rank 0 */
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "128x64");
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "64x128");
        Hvd__Schedule *s = mismatch(n, 3, &b0, &b1, 2);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'w': rank 2 sent shape [64, 128], rank 0 sent [128, 64]");
        hvd_negotiator_schedule_free(&s);
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_INT32, "128x64");
        s = mismatch(n, 3, &b0, &b1, 1);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'w': rank 1 sent dtype int32, rank 0 sent float32");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_mismatch_reduce_op) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        b1.req[0].reduce_op = HVD_REDUCE_MIN;
        Hvd__Schedule *s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_int_eq(s->errors[0]->code, HVD_EMISMATCH);
        /* the operators by name, as the user wrote them: min vs sum */
        assert_in_order(s->errors[0]->message, "allreduce 'w': rank 1 sent ", "min", "rank 0 sent", "sum", NULL);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_mismatch_scale) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        b1.req[0].prescale = 0.5;
        Hvd__Schedule *s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_int_eq(s->errors[0]->code, HVD_EMISMATCH);
        assert_in_order(s->errors[0]->message, "allreduce 'w': rank 1 sent", "0.5", "rank 0 sent", "1", NULL);
        hvd_negotiator_schedule_free(&s);
        b1.req[0].prescale = 1.0;
        b1.req[0].postscale = 0.25;
        s = mismatch(n, 2, &b0, &b1, 1);
        assert_in_order(s->errors[0]->message, "allreduce 'w': rank 1 sent", "0.25", "rank 0 sent", "1", NULL);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_mismatch_root) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_BROADCAST, HVD_FLOAT32, "4");
        one(&b1, HVD__KIND__KIND_BROADCAST, HVD_FLOAT32, "4");
        b1.req[0].root = 1;
        Hvd__Schedule *s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_int_eq(s->errors[0]->code, HVD_EMISMATCH);
        ck_assert_str_eq(s->errors[0]->message, "broadcast 'w': rank 1 sent root 1, rank 0 sent root 0");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_mismatch_kind) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        one(&b1, HVD__KIND__KIND_BROADCAST, HVD_FLOAT32, "4");
        Hvd__Schedule *s = mismatch(n, 2, &b0, &b1, 1);
        ck_assert_int_eq(s->errors[0]->code, HVD_EMISMATCH);
        assert_in_order(s->errors[0]->message, "'w'", "rank 1", "broadcast", "rank 0", "allreduce", NULL);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_error_then_consistent) {
        /* an error completes the tensor; the next consistent round runs,
         * and the error carries the id the later entries use */
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b0, b1;
        one(&b0, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        one(&b1, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT64, "4");
        Hvd__Schedule *s = mismatch(n, 2, &b0, &b1, 1);
        uint32_t id = s->errors[0]->id;
        ck_assert(!hvd_negotiator_any_pending(n));
        hvd_negotiator_schedule_free(&s);
        sub_all(n, 2, "w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(entry(s, 0, 0)->id, id);
        ck_assert_uint_eq(s->seq, 2);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_invalid_requests) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        /* broadcast root out of range */
        rq_t b;
        one(&b, HVD__KIND__KIND_BROADCAST, HVD_FLOAT32, "4");
        b.req[0].root = 5;
        submit_ok(n, 0, &b);
        submit_ok(n, 1, &b);
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_int_lt(s->errors[0]->code, 0);
        ck_assert_str_eq(s->errors[0]->message, "broadcast 'w': root rank 5 out of range (size 2)");
        hvd_negotiator_schedule_free(&s);
        /* alltoall without splits whose first dimension does not divide */
        rq_init(&b);
        rq_add(&b, "t", HVD__KIND__KIND_ALLTOALL, HVD_FLOAT32, "3");
        submit_ok(n, 0, &b);
        submit_ok(n, 1, &b);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        assert_in_order(s->errors[0]->message, "alltoall 't'", "3", "2 ranks", NULL);
        hvd_negotiator_schedule_free(&s);
        /* alltoall splits that do not sum to the first dimension */
        rq_init(&b);
        rq_splits(&b, rq_add(&b, "t", HVD__KIND__KIND_ALLTOALL, HVD_FLOAT32, "4"), 2, (int64_t) 1, (int64_t) 1);
        submit_ok(n, 0, &b);
        submit_ok(n, 1, &b);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->message, "alltoall 't': rank 0 sent 2 splits summing to 2; expected 2 "
                                                "splits summing to the first dimension 4");
        hvd_negotiator_schedule_free(&s);
        /* an allgather of a scalar */
        rq_init(&b);
        rq_add(&b, "g", HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, "");
        submit_ok(n, 0, &b);
        submit_ok(n, 1, &b);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->message, "allgather 'g': a scalar has no first dimension to split");
        hvd_negotiator_schedule_free(&s);
        /* rank out of range */
        char err[256] = "";
        ck_assert_int_eq(hvd_negotiator_submit(n, 2, &b.ready, err, sizeof err), HVD_EPROTO);
        ck_assert_str_eq(err, "rank 2 out of range");
        hvd_negotiator_destroy(&n);
}
END_TEST

/* ---- cache ids ---- */

START_TEST(test_negotiate_cached_ids) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b;
        rq_init(&b);
        rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_add(&b, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "8");
        submit_ok(n, 0, &b);
        submit_ok(n, 1, &b);
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_str_eq(entry_name(entry(s, 0, 0)), "a");
        ck_assert_str_eq(entry_name(entry(s, 0, 1)), "b");
        uint32_t id_a = entry(s, 0, 0)->id, id_b = entry(s, 0, 1)->id;
        ck_assert_uint_ne(id_a, id_b);
        hvd_negotiator_schedule_free(&s);

        /* second round: ids only, in the order b, a */
        for (uint32_t r = 0; r < 2; r++) {
                rq_init(&b);
                rq_cached(&b, id_b);
                rq_cached(&b, id_a);
                submit_ok(n, r, &b);
        }
        s = take(n);
        ck_assert_uint_eq(s->seq, 2);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_entries, 2);
        ck_assert_uint_eq(entry(s, 0, 0)->id, id_b);
        ck_assert_str_eq(entry(s, 0, 0)->name, "");
        ck_assert_str_eq(entry_name(entry(s, 0, 0)), "b");
        ck_assert_uint_eq(entry(s, 0, 0)->count, 8);
        ck_assert_str_eq(entry_name(entry(s, 0, 1)), "a");
        ck_assert_uint_eq(entry(s, 0, 1)->count, 4);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_stats_t st;
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.cache_hits, 4);

        /* mixed: rank 0 by id, rank 1 in full with the same parameters */
        rq_init(&b);
        rq_cached(&b, id_a);
        submit_ok(n, 0, &b);
        sub1(n, 1, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(entry(s, 0, 0)->id, id_a);
        hvd_negotiator_schedule_free(&s);

        /* an unknown id is a protocol error of that rank */
        char err[256] = "";
        rq_init(&b);
        rq_cached(&b, 99);
        ck_assert_int_eq(hvd_negotiator_submit(n, 0, &b.ready, err, sizeof err), HVD_EPROTO);
        ck_assert_str_eq(err, "unknown cached tensor id 99 from rank 0");
        hvd_negotiator_destroy(&n);

        /* an id this rank never sent in full is unknown to it too */
        n = neg_new(2, 64, 64 * MiB);
        sub1(n, 0, "c", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_init(&b);
        rq_cached(&b, 0);
        err[0] = 0;
        ck_assert_int_lt(hvd_negotiator_submit(n, 1, &b.ready, err, sizeof err), 0);
        ck_assert_str_eq(err, "unknown cached tensor id 0 from rank 1");
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_duplicate) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_t b;
        one(&b, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        b.req[0].name = "a";
        char err[256] = "";
        ck_assert_int_eq(hvd_negotiator_submit(n, 0, &b.ready, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'a' submitted twice by rank 0 before it completed");
        /* twice in one message */
        rq_init(&b);
        rq_add(&b, "z", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_add(&b, "z", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        err[0] = 0;
        ck_assert_int_eq(hvd_negotiator_submit(n, 1, &b.ready, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'z' submitted twice by rank 1 before it completed");
        /* the first submissions still count: a completes once rank 1 sends it */
        sub1(n, 1, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_entries, 1);
        ck_assert_str_eq(entry(s, 0, 0)->name, "a");
        hvd_negotiator_schedule_free(&s);
        /* after completion the same name is welcome again */
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");

        /* a cached id twice before completion */
        hvd_negotiator_destroy(&n);
        n = neg_new(2, 64, 64 * MiB);
        sub_all(n, 2, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        s = take(n);
        hvd_negotiator_schedule_free(&s);
        rq_init(&b);
        rq_cached(&b, 0);
        submit_ok(n, 0, &b);
        err[0] = 0;
        ck_assert_int_eq(hvd_negotiator_submit(n, 0, &b.ready, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'a' submitted twice by rank 0 before it completed");
        hvd_negotiator_destroy(&n);
}
END_TEST

/* ---- join ---- */

/* the one error of schedule s: its tensor, code and message */
static void assert_one_error(const Hvd__Schedule *s, const char *name, int code, const char *message) {
        ck_assert_uint_eq(s->n_ops, 0);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->name, name);
        ck_assert_int_eq(s->errors[0]->code, code);
        ck_assert_str_eq(s->errors[0]->message, message);
}

START_TEST(test_negotiate_join) {
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        join(n, 2);
        hvd_negotiator_stats_t st;
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.joined, 1);
        ck_assert(!hvd_negotiator_has_work(n));
        /* allreduces of the others complete without rank 2, which
         * contributes zeros (the op names it) */
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        ck_assert(!hvd_negotiator_has_work(n));
        sub1(n, 1, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_joined, 1);
        ck_assert_uint_eq(s->ops[0]->joined[0], 2);
        ck_assert_int_eq(s->join_done_last_rank, -1);
        hvd_negotiator_schedule_free(&s);

        /* every other kind fails as soon as the ranks that did not join are
         * in, as in Horovod, so that they can join too */
        sub_all(n, 2, "g", HVD__KIND__KIND_ALLGATHER, HVD_INT64, "2x3");
        s = take(n);
        assert_one_error(s, "g", HVD_EJOINED,
                         "allgather 'g' is not supported while rank 2 has joined: only allreduce runs until every "
                         "rank has joined (specify sparse_to_dense=True if using DistributedOptimizer)");
        uint32_t g_id = s->errors[0]->id;
        hvd_negotiator_schedule_free(&s);
        sub_all(n, 2, "rs", HVD__KIND__KIND_REDUCESCATTER, HVD_FLOAT32, "4");
        s = take(n);
        assert_one_error(s, "rs", HVD_EJOINED,
                         "reducescatter 'rs' is not supported while rank 2 has joined: only allreduce runs until "
                         "every rank has joined");
        hvd_negotiator_schedule_free(&s);
        sub_all(n, 2, "at", HVD__KIND__KIND_ALLTOALL, HVD_FLOAT32, "3");
        s = take(n);
        assert_one_error(s, "at", HVD_EJOINED,
                         "alltoall 'at' is not supported while rank 2 has joined: only allreduce runs until every "
                         "rank has joined");
        hvd_negotiator_schedule_free(&s);
        /* a broadcast fails whichever its root */
        for (int root = 0; root < 3; root++) {
                rq_t b;
                one(&b, HVD__KIND__KIND_BROADCAST, HVD_FLOAT32, "4");
                b.req[0].root = root;
                submit_ok(n, 0, &b);
                submit_ok(n, 1, &b);
                s = take(n);
                assert_one_error(s, "w", HVD_EJOINED,
                                 "broadcast 'w' is not supported while rank 2 has joined: only allreduce runs until "
                                 "every rank has joined");
                hvd_negotiator_schedule_free(&s);
        }
        sub_all(n, 2, HVD_BARRIER_NAME, HVD__KIND__KIND_BARRIER, HVD_FLOAT32, "");
        s = take(n);
        assert_one_error(s, HVD_BARRIER_NAME, HVD_EJOINED,
                         "barrier is not supported while rank 2 has joined: only allreduce runs until every rank "
                         "has joined");
        hvd_negotiator_schedule_free(&s);
        /* a grouped allreduce runs */
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                for (int k = 0; k < 2; k++) {
                        Hvd__Request *q =
                                rq_add(&b, k ? "grp.1" : "grp.0", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2");
                        q->group_id = 7;
                        q->group_size = 2;
                }
                submit_ok(n, r, &b);
        }
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_entries, 2);
        ck_assert_uint_eq(s->ops[0]->n_joined, 1);
        hvd_negotiator_schedule_free(&s);

        /* tensors waiting only for a rank that then joins complete: an
         * allreduce runs, an allgather fails naming both joined ranks */
        sub1(n, 0, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        sub1(n, 0, "g2", HVD__KIND__KIND_ALLGATHER, HVD_INT64, "1x3");
        ck_assert(!hvd_negotiator_has_work(n));
        join(n, 1);
        s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_str_eq(entry(s, 0, 0)->name, "b");
        ck_assert_uint_eq(s->ops[0]->n_joined, 2);
        ck_assert_uint_eq(s->ops[0]->joined[0], 1);
        ck_assert_uint_eq(s->ops[0]->joined[1], 2);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->message,
                         "allgather 'g2' is not supported while ranks [1, 2] have joined: only allreduce runs until "
                         "every rank has joined (specify sparse_to_dense=True if using DistributedOptimizer)");
        ck_assert_int_eq(s->join_done_last_rank, -1);
        hvd_negotiator_schedule_free(&s);

        /* the last join completes everybody's join: last rank = 0 */
        join(n, 0);
        ck_assert(hvd_negotiator_has_work(n));
        s = take(n);
        ck_assert_uint_eq(s->n_ops, 0);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_int_eq(s->join_done_last_rank, 0);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.joined, 0);
        ck_assert(!hvd_negotiator_has_work(n));
        ck_assert(!hvd_negotiator_any_pending(n));

        /* after the join round every rank is needed again, and every kind
         * runs: the allgather that failed goes by the id its error gave
         * (its name no longer sent: ranks learn it from the error) */
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        sub1(n, 1, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        ck_assert(!hvd_negotiator_has_work(n));
        sub1(n, 2, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        s = take(n);
        ck_assert_uint_eq(s->ops[0]->n_joined, 0);
        hvd_negotiator_schedule_free(&s);
        sub_all(n, 3, "g", HVD__KIND__KIND_ALLGATHER, HVD_INT64, "2x3");
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(entry(s, 0, 0)->id, g_id);
        ck_assert_str_eq(entry(s, 0, 0)->name, "");
        ck_assert_uint_eq(entry(s, 0, 0)->n_rank_rows, 3);
        hvd_negotiator_schedule_free(&s);
        sub_all(n, 3, HVD_BARRIER_NAME, HVD__KIND__KIND_BARRIER, HVD_FLOAT32, "");
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->kind, HVD__KIND__KIND_BARRIER);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_join_many_ranks_named) {
        /* 199 of 200 ranks joined: the error names as many as fit, then "..." */
        hvd_negotiator_t *n = neg_new(200, 64, 64 * MiB);
        for (uint32_t r = 0; r < 199; r++)
                join(n, r);
        sub1(n, 199, "g", HVD__KIND__KIND_ALLGATHER, HVD_INT64, "1");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        const char *m = s->errors[0]->message;
        assert_in_order(m, "allgather 'g' is not supported while ranks [0, 1, 2, ", ", ...] have joined: ",
                        "only allreduce runs until every rank has joined (specify sparse_to_dense=True", NULL);
        ck_assert_ptr_null(strstr(m, "198"));
        hvd_negotiator_schedule_free(&s);
        join(n, 199);
        s = take(n);
        ck_assert_int_eq(s->join_done_last_rank, 199);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_join_rounds) {
        /* four join rounds on a job of 3, rank (round % 3) joining first:
         * the others' allgather fails, they join, every rank learns the same
         * last rank; between the rounds every kind runs with every rank */
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        for (uint32_t round = 0; round < 4; round++) {
                uint32_t first = round % 3, second = (first + 1) % 3, last = (first + 2) % 3;
                join(n, first);
                sub1(n, second, "g", HVD__KIND__KIND_ALLGATHER, HVD_INT64, "2x3");
                ck_assert(!hvd_negotiator_has_work(n));
                sub1(n, last, "g", HVD__KIND__KIND_ALLGATHER, HVD_INT64, "2x3");
                Hvd__Schedule *s = take(n);
                char want[256];
                snprintf(want, sizeof want,
                         "allgather 'g' is not supported while rank %u has joined: only allreduce runs until every "
                         "rank has joined (specify sparse_to_dense=True if using DistributedOptimizer)",
                         first);
                assert_one_error(s, "g", HVD_EJOINED, want);
                hvd_negotiator_schedule_free(&s);
                join(n, second);
                ck_assert(!hvd_negotiator_has_work(n));
                join(n, last);
                s = take(n);
                ck_assert_int_eq(s->join_done_last_rank, (int32_t) last);
                hvd_negotiator_schedule_free(&s);
                ck_assert(!hvd_negotiator_any_pending(n));

                sub_all(n, 3, "g", HVD__KIND__KIND_ALLGATHER, HVD_INT64, "2x3");
                sub_all(n, 3, "rs", HVD__KIND__KIND_REDUCESCATTER, HVD_FLOAT32, "6");
                sub_all(n, 3, HVD_BARRIER_NAME, HVD__KIND__KIND_BARRIER, HVD_FLOAT32, "");
                s = take(n);
                ck_assert_uint_eq(s->n_errors, 0);
                ck_assert_uint_eq(s->n_ops, 3);
                for (int k = 0; k < 3; k++)
                        ck_assert_uint_eq(s->ops[k]->n_joined, 0);
                hvd_negotiator_schedule_free(&s);
        }
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_join_last_rank_order) {
        /* joins in the order 1, 2, 0 on a job of 3: the last is rank 0; in
         * the order 0, 2, 1: rank 1 */
        const uint32_t orders[2][3] = { { 1, 2, 0 }, { 0, 2, 1 } };
        for (int k = 0; k < 2; k++) {
                hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
                for (int i = 0; i < 3; i++) {
                        ck_assert(!hvd_negotiator_has_work(n));
                        join(n, orders[k][i]);
                }
                Hvd__Schedule *s = take(n);
                ck_assert_int_eq(s->join_done_last_rank, (int32_t) orders[k][2]);
                hvd_negotiator_schedule_free(&s);
                hvd_negotiator_destroy(&n);
        }
}
END_TEST

/* ---- groups ---- */

START_TEST(test_negotiate_group_held_until_complete) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                Hvd__Request *q = rq_add(&b, "g1", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                q->group_id = 5;
                q->group_size = 3;
                rq_add(&b, "x", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2");
                submit_ok(n, r, &b);
        }
        /* x goes; g1 waits for g2 and g3 */
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_entries, 1);
        ck_assert_str_eq(entry(s, 0, 0)->name, "x");
        hvd_negotiator_schedule_free(&s);
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                Hvd__Request *q = rq_add(&b, "g2", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT64, "3");
                q->group_id = 5;
                q->group_size = 3;
                submit_ok(n, r, &b);
        }
        take_none(n);
        ck_assert(!hvd_negotiator_has_work(n));
        /* g3 on rank 1 only: still held */
        rq_t b3;
        rq_init(&b3);
        Hvd__Request *q3 = rq_add(&b3, "g3", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        q3->group_id = 5;
        q3->group_size = 3;
        submit_ok(n, 1, &b3);
        take_none(n);
        submit_ok(n, 0, &b3);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        /* all three members in this one schedule; float32 ones fused */
        size_t total = 0;
        int seen = 0;
        for (size_t k = 0; k < s->n_ops; k++)
                for (size_t j = 0; j < s->ops[k]->n_entries; j++, total++) {
                        const char *nm = s->ops[k]->entries[j]->name;
                        seen |= !strcmp(nm, "g1") ? 1 : !strcmp(nm, "g2") ? 2 : !strcmp(nm, "g3") ? 4 : 8;
                }
        ck_assert_uint_eq(total, 3);
        ck_assert_int_eq(seen, 7);
        ck_assert_uint_eq(s->n_ops, 2);
        hvd_negotiator_schedule_free(&s);
        ck_assert(!hvd_negotiator_any_pending(n));
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_two_groups) {
        /* two groups in flight at once: each released when complete */
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                Hvd__Request *q = rq_add(&b, "a1", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                q->group_id = 1;
                q->group_size = 2;
                q = rq_add(&b, "b1", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                q->group_id = 2;
                q->group_size = 2;
                q = rq_add(&b, "b2", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                q->group_id = 2;
                q->group_size = 2;
                submit_ok(n, r, &b);
        }
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_entries, 2);
        ck_assert_str_eq(entry(s, 0, 0)->name, "b1");
        ck_assert_str_eq(entry(s, 0, 1)->name, "b2");
        hvd_negotiator_schedule_free(&s);
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                Hvd__Request *q = rq_add(&b, "a2", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                q->group_id = 1;
                q->group_size = 2;
                submit_ok(n, r, &b);
        }
        s = take(n);
        ck_assert_uint_eq(s->ops[0]->n_entries, 2);
        ck_assert_str_eq(entry(s, 0, 0)->name, "a1");
        ck_assert_str_eq(entry(s, 0, 1)->name, "a2");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* ---- process sets ---- */

START_TEST(test_negotiate_process_set) {
        /* set 1 = ranks {0, 2} of 3: complete without rank 1 */
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        for (uint32_t r = 0; r < 3; r += 2) {
                rq_t b;
                rq_init(&b);
                Hvd__Request *q = rq_add(&b, "p", HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, r ? "3x2" : "1x2");
                q->process_set = 1;
                b.set[0][0] = 0;
                b.set[0][1] = 2;
                q->set_ranks = b.set[0];
                q->n_set_ranks = 2;
                submit_ok(n, r, &b);
        }
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->process_set, 1);
        ck_assert_uint_eq(s->ops[0]->n_set_ranks, 2);
        ck_assert_uint_eq(s->ops[0]->set_ranks[0], 0);
        ck_assert_uint_eq(s->ops[0]->set_ranks[1], 2);
        const Hvd__Entry *e = entry(s, 0, 0);
        ck_assert_uint_eq(e->n_rank_rows, 2); /* by position in the set */
        ck_assert_int_eq(e->rank_rows[0], 1);
        ck_assert_int_eq(e->rank_rows[1], 3);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_process_set_join) {
        /* rank 2 of 3 joined: a set without it runs as ever; a set with it
         * fails once its other members are in, instead of waiting for it */
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        join(n, 2);
        const uint32_t sets[2][2] = { { 0, 1 }, { 0, 2 } };
        for (uint32_t ps = 1; ps <= 2; ps++)
                for (uint32_t i = 0; i < 2; i++) {
                        uint32_t r = sets[ps - 1][i];
                        if (r == 2)
                                continue;
                        rq_t b;
                        rq_init(&b);
                        Hvd__Request *q = rq_add(&b, "p", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                        q->process_set = ps;
                        b.set[0][0] = sets[ps - 1][0];
                        b.set[0][1] = sets[ps - 1][1];
                        q->set_ranks = b.set[0];
                        q->n_set_ranks = 2;
                        submit_ok(n, r, &b);
                }
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->process_set, 1);
        ck_assert_uint_eq(s->ops[0]->n_joined, 0);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->name, "p");
        ck_assert_int_eq(s->errors[0]->code, HVD_EJOINED);
        ck_assert_str_eq(s->errors[0]->message,
                         "allreduce 'p' of process set 2 is not supported while its member rank 2 has joined: a "
                         "joined rank takes part in allreduces of the global process set only");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* ---- capacity and description ---- */

START_TEST(test_negotiate_table_capacity) {
        /* capacity 4: four cached rows, then up to four transient rows waiting
         * at once; transient rows are sent without an id and their slots are
         * reused once scheduled, so distinct names never run out */
        hvd_negotiator_t *n = neg_new(2, 4, 64 * MiB);
        const char *names[] = { "a", "b", "c", "d", "e", "f", "g", "h" };
        for (int i = 0; i < 8; i++)
                sub1(n, 0, names[i], HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        rq_t b;
        one(&b, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        b.req[0].name = "i";
        char err[256] = "";
        ck_assert_int_eq(hvd_negotiator_submit(n, 0, &b.ready, err, sizeof err), -ENOSPC);
        ck_assert_str_eq(err, "too many tensors waiting at once (4 cached and 4 more pending): 'i' refused");
        hvd_negotiator_stats_t st;
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.n_tensors, 8);
        for (int i = 0; i < 8; i++)
                sub1(n, 1, names[i], HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->ops[0]->n_entries, 8);
        for (int i = 0; i < 8; i++) {
                const Hvd__Entry *e = s->ops[0]->entries[i];
                ck_assert_str_eq(e->name, names[i]);
                if (i < 4)
                        ck_assert_uint_eq(e->id, (unsigned) i);
                else
                        ck_assert_uint_eq(e->id, HVD_NEGOTIATOR_NO_ID);
        }
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_get_stats(n, &st);
        ck_assert_uint_eq(st.n_tensors, 4);
        /* new names keep working after the transient slots were freed */
        for (int r = 0; r < 2; r++)
                sub1(n, (uint32_t) r, "j", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        s = take(n);
        ck_assert_str_eq(s->ops[0]->entries[0]->name, "j");
        ck_assert_uint_eq(s->ops[0]->entries[0]->id, HVD_NEGOTIATOR_NO_ID);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

START_TEST(test_negotiate_describe_pending) {
        hvd_negotiator_t *n = neg_new(3, 64, 64 * MiB);
        char buf[512];
        ck_assert_uint_eq(hvd_negotiator_describe_pending(n, hvd_now_usec(), 0, buf, sizeof buf), 0);
        ck_assert_str_eq(buf, "");
        sub1(n, 0, "grad.w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        sub1(n, 2, "grad.w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        sub1(n, 1, "grad.b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        uint64_t now = hvd_now_usec();
        ck_assert_uint_eq(hvd_negotiator_describe_pending(n, now, 0, buf, sizeof buf), 2);
        ck_assert_str_eq(buf, "'grad.w' ready on ranks [0, 2], missing ranks [1]; "
                              "'grad.b' ready on ranks [1], missing ranks [0, 2]");
        /* younger than the minimum age: not reported */
        ck_assert_uint_eq(hvd_negotiator_describe_pending(n, now, 3600 * USEC_PER_SEC, buf, sizeof buf), 0);
        ck_assert_str_eq(buf, "");
        /* a small buffer is never overrun and stays terminated */
        char small[40];
        memset(small, 'x', sizeof small);
        ck_assert_uint_eq(hvd_negotiator_describe_pending(n, now, 0, small, 24), 2);
        ck_assert_uint_lt(strlen(small), 24);
        ck_assert_int_eq(small[39], 'x');
        /* a joined rank is not missing */
        join(n, 0);
        ck_assert_uint_eq(hvd_negotiator_describe_pending(n, hvd_now_usec(), 0, buf, sizeof buf), 2);
        ck_assert_str_eq(buf, "'grad.w' ready on ranks [0, 2], missing ranks [1]; "
                              "'grad.b' ready on ranks [1], missing ranks [2]");
        hvd_negotiator_destroy(&n);
}
END_TEST

/* Node-level readiness: 5 ranks on 2 nodes ({0, 1} and {2, 3, 4}); node 1
 * posts its cached ids once for its three ranks. */
START_TEST(test_negotiate_node_ready) {
        hvd_negotiator_t *n = neg_new(5, 64, 64 * MiB);
        const uint32_t node_of[5] = { 0, 0, 1, 1, 1 };
        ck_assert_int_eq(hvd_negotiator_set_nodes(n, 2, node_of), 0);
        char err[256] = "";
        uint32_t nids[2];
        /* a node-level id before the ranks named the tensor is refused */
        uint32_t bogus = 0;
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, &bogus, 1, NULL, err, sizeof err), HVD_EPROTO);
        for (uint32_t r = 0; r < 5; r++) {
                rq_t b;
                rq_init(&b);
                rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                rq_add(&b, "b", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "8");
                submit_ok(n, r, &b);
        }
        Hvd__Schedule *s = take(n);
        nids[0] = entry(s, 0, 0)->id;
        nids[1] = entry(s, 0, 1)->id;
        hvd_negotiator_schedule_free(&s);
        /* ranks 0 and 1 one by one, node 1 at once: the same schedule */
        hvd_negotiator_stats_t before, after;
        hvd_negotiator_get_stats(n, &before);
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, nids, 2, NULL, err, sizeof err), 0);
        take_none(n);
        for (uint32_t r = 0; r < 2; r++) {
                rq_t b;
                rq_init(&b);
                rq_cached(&b, nids[1]);
                rq_cached(&b, nids[0]);
                submit_ok(n, r, &b);
        }
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->ops[0]->n_entries, 2);
        ck_assert_uint_eq(entry(s, 0, 0)->count + entry(s, 0, 1)->count, 12);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_get_stats(n, &after);
        ck_assert_uint_eq(after.cache_hits - before.cache_hits, 10);
        ck_assert_uint_eq(after.requests - before.requests, 10);
        /* partial: rank 1 missing; node 1's ranks count as ready */
        rq_t b;
        rq_init(&b);
        rq_cached(&b, nids[0]);
        submit_ok(n, 0, &b);
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, nids, 1, NULL, err, sizeof err), 0);
        char buf[256];
        ck_assert_uint_eq(hvd_negotiator_describe_pending(n, hvd_now_usec(), 0, buf, sizeof buf), 1);
        ck_assert_str_eq(buf, "'a' ready on ranks [0, 2, 3, 4], missing ranks [1]");
        ck_assert_uint_eq(hvd_negotiator_rank_pending(n, 3), 1);
        ck_assert_uint_eq(hvd_negotiator_rank_pending(n, 1), 0);
        /* twice before it completed: from the node, and from one of its ranks */
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, nids, 1, NULL, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'a' submitted twice by a rank of node 1 before it completed");
        rq_init(&b);
        rq_cached(&b, nids[0]);
        ck_assert_int_eq(hvd_negotiator_submit(n, 3, &b.ready, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'a' submitted twice by rank 3 before it completed");
        rq_init(&b);
        rq_cached(&b, nids[0]);
        submit_ok(n, 1, &b);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->ops[0]->n_entries, 1);
        hvd_negotiator_schedule_free(&s);
        /* a rank of node 0 changes the shape: the node's cached nids are
         * checked again and the mismatch names it */
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "6");
        rq_init(&b);
        rq_cached(&b, nids[0]);
        submit_ok(n, 1, &b);
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, nids, 1, NULL, err, sizeof err), 0);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_ptr_nonnull(strstr(s->errors[0]->message, "rank 1 sent shape [4], rank 0 sent [6]"));
        hvd_negotiator_schedule_free(&s);
        /* a node out of range, and nodes set too late */
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 2, nids, 1, NULL, err, sizeof err), HVD_EPROTO);
        ck_assert_int_eq(hvd_negotiator_set_nodes(n, 2, node_of), -EBUSY);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* Readiness times for the timeline: only while it is on; one per ready
 * rank, the earliest ready the oldest; a rank ready before it was turned on
 * counts from the first readiness. */
START_TEST(test_negotiate_timeline_ready_times) {
        hvd_negotiator_t *n = neg_new(3, 16, 1 << 20);
        sub_all(n, 3, "off", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(entry(s, 0, 0)->n_ready_ranks, 0);
        ck_assert_uint_eq(entry(s, 0, 0)->n_ready_age_usec, 0);
        hvd_negotiator_schedule_free(&s);

        sub1(n, 2, "grad", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4"); /* before the timeline */
        usleep(3000);
        hvd_negotiator_set_timeline(n, true);
        sub1(n, 0, "grad", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        usleep(20000);
        sub1(n, 1, "grad", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        s = take(n);
        const Hvd__Entry *e = entry(s, 0, 0);
        ck_assert_uint_eq(e->n_ready_ranks, 3);
        ck_assert_uint_eq(e->n_ready_age_usec, 3);
        uint64_t age[3] = { 0 };
        for (size_t i = 0; i < 3; i++) {
                ck_assert_uint_eq(e->ready_ranks[i], i);
                age[i] = e->ready_age_usec[i];
        }
        ck_assert_uint_ge(age[0], 20000); /* ready 20 ms before rank 1 */
        ck_assert_uint_lt(age[1], age[0]);
        ck_assert_uint_ge(age[2], age[0] + 3000); /* from its first readiness */
        hvd_negotiator_schedule_free(&s);

        /* the next round starts afresh; off again records nothing */
        hvd_negotiator_set_timeline(n, false);
        sub_all(n, 3, "grad", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        s = take(n);
        ck_assert_uint_eq(entry(s, 0, 0)->n_ready_ranks, 0);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* A Ready several ranks shared (a node forwards its ranks' identical new
 * requests once): entered once for all of them, the same schedule and the
 * same errors as the ranks one by one. */
START_TEST(test_negotiate_submit_ranks) {
        hvd_negotiator_t *n = neg_new(6, 64, 64 * MiB);
        char err[256] = "";
        rq_t b;
        rq_init(&b);
        rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_add(&b, "b", HVD__KIND__KIND_BROADCAST, HVD_FLOAT32, "2x3")->root = 4;
        const uint32_t r012[] = { 0, 1, 2 }, r34[] = { 3, 4 };
        hvd_negotiator_stats_t before, after;
        hvd_negotiator_get_stats(n, &before);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, r012, 3, &b.ready, err, sizeof err), 0);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, r34, 2, &b.ready, err, sizeof err), 0);
        hvd_negotiator_get_stats(n, &after);
        ck_assert_uint_eq(after.requests - before.requests, 10);
        ck_assert_uint_eq(after.n_tensors, 2);
        ck_assert_uint_eq(hvd_negotiator_rank_pending(n, 4), 2);
        take_none(n);
        /* the last rank alone: both complete, in request order */
        submit_ok(n, 5, &b);
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 2);
        ck_assert_str_eq(entry(s, 0, 0)->name, "a");
        ck_assert_str_eq(entry(s, 1, 0)->name, "b");
        ck_assert_int_eq(s->ops[1]->root, 4);
        uint32_t ida = entry(s, 0, 0)->id;
        hvd_negotiator_schedule_free(&s);
        /* a shared Ready with cached ids: each rank's ids, in order */
        rq_init(&b);
        rq_cached(&b, ida);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, r012, 3, &b.ready, err, sizeof err), 0);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, r34, 2, &b.ready, err, sizeof err), 0);
        submit_ok(n, 5, &b);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(entry(s, 0, 0)->id, ida);
        hvd_negotiator_schedule_free(&s);
        /* a rank that differs from ranks whose parameters came shared:
         * the real error, naming it and the reference rank */
        rq_init(&b);
        rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, r012, 3, &b.ready, err, sizeof err), 0);
        sub1(n, 3, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        sub1(n, 4, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT64, "4");
        sub1(n, 5, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'a': rank 4 sent dtype float64, rank 0 sent float32");
        hvd_negotiator_schedule_free(&s);
        /* the shared ones differ from the first rank, which came alone */
        sub1(n, 0, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_init(&b);
        rq_add(&b, "a", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "5");
        const uint32_t r12345[] = { 1, 2, 3, 4, 5 };
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, r12345, 5, &b.ready, err, sizeof err), 0);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'a': rank 1 sent shape [5], rank 0 sent [4]");
        hvd_negotiator_schedule_free(&s);
        /* a rank listed twice, and a rank out of range */
        const uint32_t twice[] = { 2, 2 }, bad[] = { 1, 6 };
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, twice, 2, &b.ready, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'a' submitted twice by rank 2 before it completed");
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, bad, 2, &b.ready, err, sizeof err), HVD_EPROTO);
        ck_assert_str_eq(err, "rank 6 out of range");
        ck_assert_uint_eq(hvd_negotiator_rank_pending(n, 1), 0);
        ck_assert_uint_eq(hvd_negotiator_rank_pending(n, 2), 1);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* Node-level state survives the table's growth (kept node by node, it
 * moves when the table doubles past 64 rows). */
START_TEST(test_negotiate_node_state_growth) {
        hvd_negotiator_t *n = neg_new(4, 256, 64 * MiB);
        const uint32_t node_of[4] = { 0, 0, 1, 1 };
        ck_assert_int_eq(hvd_negotiator_set_nodes(n, 2, node_of), 0);
        enum { T = 100 };
        static char names[T][16];
        uint32_t tid[T];
        for (uint32_t r = 0; r < 4; r++)
                for (int i = 0; i < T; i += 25) {
                        rq_t b;
                        rq_init(&b);
                        for (int k = i; k < i + 25; k++) {
                                snprintf(names[k], sizeof names[k], "g%d", k);
                                rq_add(&b, names[k], HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
                        }
                        submit_ok(n, r, &b);
                }
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        size_t k = 0;
        for (size_t o = 0; o < s->n_ops; o++)
                for (size_t e = 0; e < s->ops[o]->n_entries; e++)
                        tid[k++] = s->ops[o]->entries[e]->id;
        ck_assert_uint_eq(k, T);
        hvd_negotiator_schedule_free(&s);
        char err[256] = "";
        /* node 1 at once for every id, node 0 rank by rank */
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, tid, T, NULL, err, sizeof err), 0);
        take_none(n);
        for (uint32_t r = 0; r < 2; r++)
                for (int i = 0; i < T; i += 25) {
                        rq_t b;
                        rq_init(&b);
                        for (int q = i; q < i + 25; q++)
                                rq_cached(&b, tid[q]);
                        submit_ok(n, r, &b);
                }
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        k = 0;
        for (size_t o = 0; o < s->n_ops; o++)
                k += s->ops[o]->n_entries;
        ck_assert_uint_eq(k, T);
        hvd_negotiator_schedule_free(&s);
        /* and the node's state was cleared with the schedule */
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, tid, 1, NULL, err, sizeof err), 0);
        ck_assert_int_eq(hvd_negotiator_submit_node(n, 1, tid, 1, NULL, err, sizeof err), HVD_EDUPLICATE);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* A scalar (no shape) asked for by name again in a later round: its
 * parameters are compared with the set the last round made. */
START_TEST(test_negotiate_scalar_by_name_again) {
        hvd_negotiator_t *n = neg_new(2, 64, 64 * MiB);
        rq_t b, o;
        one(&b, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "");
        b.req[0].shape = NULL; /* as decoded */
        for (int round = 0; round < 3; round++) {
                submit_ok(n, 0, &b);
                submit_ok(n, 1, &b);
                Hvd__Schedule *s = take(n);
                ck_assert_uint_eq(s->n_errors, 0);
                ck_assert_uint_eq(s->n_ops, 1);
                hvd_negotiator_schedule_free(&s);
        }
        /* and one rank's differs: the error names it */
        one(&o, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "1");
        Hvd__Schedule *s = mismatch(n, 2, &b, &o, 1);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'w': rank 1 sent shape [1], rank 0 sent []");
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* A request by name that every rank of a node shares marks the node ready
 * as one (whatever the order of its ranks); a node listed in part, a rank
 * listed again, and parameters that differ between hosts still come out as
 * they would rank by rank. */
START_TEST(test_negotiate_shared_whole_nodes) {
        hvd_negotiator_t *n = neg_new(6, 64, 64 * MiB);
        const uint32_t node_of[6] = { 0, 0, 0, 1, 1, 2 };
        ck_assert_int_eq(hvd_negotiator_set_nodes(n, 3, node_of), 0);
        char err[256] = "";
        rq_t b;
        rq_init(&b);
        rq_add(&b, "w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_add(&b, "v", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2x2");
        /* node 0 in another order than its ranks', node 1 with node 2 */
        const uint32_t n0[] = { 2, 0, 1 }, n12[] = { 4, 3, 5 };
        ck_assert(!hvd_negotiator_any_pending(n));
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n0, 3, &b.ready, err, sizeof err), 0);
        ck_assert(hvd_negotiator_any_pending(n));
        ck_assert_uint_eq(hvd_negotiator_rank_pending(n, 1), 2);
        ck_assert_uint_eq(hvd_negotiator_rank_pending(n, 3), 0);
        /* a rank of a node that is ready as one */
        ck_assert_int_eq(hvd_negotiator_submit(n, 1, &b.ready, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'v' submitted twice by rank 1 before it completed");
        char buf[512];
        ck_assert_uint_eq(hvd_negotiator_describe_pending(n, UINT64_MAX / 2, 0, buf, sizeof buf), 2);
        ck_assert_str_eq(buf, "'w' ready on ranks [0, 1, 2], missing ranks [3, 4, 5]; "
                              "'v' ready on ranks [0, 1, 2], missing ranks [3, 4, 5]");
        take_none(n);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n12, 3, &b.ready, err, sizeof err), 0);
        Hvd__Schedule *s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_entries, 2);
        ck_assert_str_eq(entry(s, 0, 0)->name, "w");
        uint32_t idw = entry(s, 0, 0)->id;
        hvd_negotiator_schedule_free(&s);
        ck_assert(!hvd_negotiator_any_pending(n));
        /* the parameters were taken for each rank: the nodes' cached ids */
        for (uint32_t c = 0; c < 3; c++)
                ck_assert_int_eq(hvd_negotiator_submit_node(n, c, &idw, 1, NULL, err, sizeof err), 0);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(entry(s, 0, 0)->id, idw);
        hvd_negotiator_schedule_free(&s);
        /* node 0 in part, then the rest rank by rank; host 1's shape differs */
        rq_t o;
        rq_init(&o);
        rq_add(&o, "w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "8");
        const uint32_t part[] = { 0, 2 }, n1[] = { 3, 4 };
        rq_init(&b);
        rq_add(&b, "w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, part, 2, &b.ready, err, sizeof err), 0);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n1, 2, &o.ready, err, sizeof err), 0);
        /* rank 0 again, with node 0 marked rank by rank */
        ck_assert_int_eq(hvd_negotiator_submit(n, 0, &b.ready, err, sizeof err), HVD_EDUPLICATE);
        ck_assert_str_eq(err, "tensor 'w' submitted twice by rank 0 before it completed");
        submit_ok(n, 1, &b);
        submit_ok(n, 5, &b);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 1);
        ck_assert_str_eq(s->errors[0]->message, "allreduce 'w': rank 3 sent shape [8], rank 0 sent [4]");
        hvd_negotiator_schedule_free(&s);
        ck_assert(!hvd_negotiator_any_pending(n));
        /* alike again on every host: one round, no error */
        const uint32_t all[] = { 5, 3, 4, 0, 1, 2 };
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, all, 6, &b.ready, err, sizeof err), 0);
        s = take(n);
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(entry(s, 0, 0)->id, idw);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

/* The first error of a round's schedule (NULL without one). */
static const char *round_error(hvd_negotiator_t *n, Hvd__Schedule **s) {
        *s = take(n);
        return (*s)->n_errors ? (*s)->errors[0]->message : NULL;
}

/* A node that shared a request by name keeps one parameter set for all its
 * ranks; a rank of it that later asks alone, or differently, takes its own
 * again, and the node's other ranks keep theirs: checks, errors and cached
 * ids come out as rank by rank. */
START_TEST(test_negotiate_node_parameter_sets) {
        hvd_negotiator_t *n = neg_new(6, 64, 64 * MiB);
        const uint32_t node_of[6] = { 0, 0, 0, 1, 1, 2 };
        ck_assert_int_eq(hvd_negotiator_set_nodes(n, 3, node_of), 0);
        char err[256] = "";
        rq_t b, o, q;
        rq_init(&b);
        rq_add(&b, "w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "4");
        rq_init(&o);
        rq_add(&o, "w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "8");
        rq_init(&q);
        rq_add(&q, "w", HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, "2x2");
        const uint32_t all[] = { 0, 1, 2, 3, 4, 5 }, n0[] = { 0, 1, 2 }, n1[] = { 3, 4 };
        Hvd__Schedule *s;
        /* every node as one */
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, all, 6, &b.ready, err, sizeof err), 0);
        ck_assert_ptr_null(round_error(n, &s));
        uint32_t idw = entry(s, 0, 0)->id;
        hvd_negotiator_schedule_free(&s);
        /* node 1 as one with another shape */
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n0, 3, &b.ready, err, sizeof err), 0);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n1, 2, &o.ready, err, sizeof err), 0);
        submit_ok(n, 5, &b);
        ck_assert_str_eq(round_error(n, &s), "allreduce 'w': rank 3 sent shape [8], rank 0 sent [4]");
        hvd_negotiator_schedule_free(&s);
        /* node 0 rank by rank, rank 2 differently; node 1 as one again */
        submit_ok(n, 0, &b);
        submit_ok(n, 2, &q);
        submit_ok(n, 1, &b);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n1, 2, &b.ready, err, sizeof err), 0);
        submit_ok(n, 5, &b);
        ck_assert_str_eq(round_error(n, &s), "allreduce 'w': rank 2 sent shape [2, 2], rank 0 sent [4]");
        hvd_negotiator_schedule_free(&s);
        /* cached ids keep each rank's last parameters: rank 2's differ */
        for (uint32_t c = 0; c < 3; c++)
                ck_assert_int_eq(hvd_negotiator_submit_node(n, c, &idw, 1, NULL, err, sizeof err), 0);
        ck_assert_str_eq(round_error(n, &s), "allreduce 'w': rank 2 sent shape [2, 2], rank 0 sent [4]");
        hvd_negotiator_schedule_free(&s);
        /* node 0 as one after its ranks' own sets; then cached rank by rank */
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n0, 3, &b.ready, err, sizeof err), 0);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n1, 2, &b.ready, err, sizeof err), 0);
        submit_ok(n, 5, &b);
        ck_assert_ptr_null(round_error(n, &s));
        hvd_negotiator_schedule_free(&s);
        rq_t c;
        rq_init(&c);
        rq_cached(&c, idw);
        for (uint32_t r = 0; r < 6; r++)
                submit_ok(n, r, &c);
        ck_assert_ptr_null(round_error(n, &s));
        ck_assert_uint_eq(entry(s, 0, 0)->count, 4);
        hvd_negotiator_schedule_free(&s);
        /* a rank of a node that shares its set, alone with another shape */
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, all, 6, &b.ready, err, sizeof err), 0);
        ck_assert_ptr_null(round_error(n, &s));
        hvd_negotiator_schedule_free(&s);
        for (uint32_t r = 0; r < 6; r++)
                submit_ok(n, r, r == 4 ? &o : &c);
        ck_assert_str_eq(round_error(n, &s), "allreduce 'w': rank 4 sent shape [8], rank 0 sent [4]");
        hvd_negotiator_schedule_free(&s);
        /* node 0's ranks alone share a set; then node 0 as one with it (its
         * ranks' last references to it go as the node's first come) */
        for (uint32_t r = 3; r < 6; r++)
                submit_ok(n, r, &b);
        for (uint32_t r = 0; r < 3; r++)
                submit_ok(n, r, &q);
        ck_assert_str_eq(round_error(n, &s), "allreduce 'w': rank 3 sent shape [4], rank 0 sent [2, 2]");
        hvd_negotiator_schedule_free(&s);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n0, 3, &q.ready, err, sizeof err), 0);
        for (uint32_t r = 3; r < 6; r++)
                submit_ok(n, r, &c);
        ck_assert_str_eq(round_error(n, &s), "allreduce 'w': rank 3 sent shape [4], rank 0 sent [2, 2]");
        hvd_negotiator_schedule_free(&s);
        ck_assert_int_eq(hvd_negotiator_submit_ranks(n, n1, 2, &q.ready, err, sizeof err), 0);
        submit_ok(n, 5, &q);
        for (uint32_t r = 0; r < 3; r++)
                submit_ok(n, r, &c);
        ck_assert_ptr_null(round_error(n, &s));
        ck_assert_int_eq(s->ops[0]->kind, HVD__KIND__KIND_ALLREDUCE);
        ck_assert_int_eq(s->ops[0]->dtype, HVD_FLOAT32);
        ck_assert_uint_eq(entry(s, 0, 0)->count, 4);
        ck_assert_uint_eq(entry(s, 0, 0)->n_shape, 2);
        hvd_negotiator_schedule_free(&s);
        hvd_negotiator_destroy(&n);
}
END_TEST

static Suite *negotiate_suite(void) {
        Suite *s = suite_create("negotiate");
        TCase *tc = tcase_create("schedule");
        tcase_add_test(tc, test_negotiate_schedule_only_when_all_ready);
        tcase_add_test(tc, test_negotiate_shared_whole_nodes);
        tcase_add_test(tc, test_negotiate_node_parameter_sets);
        tcase_add_test(tc, test_negotiate_scalar_by_name_again);
        tcase_add_test(tc, test_negotiate_seq_numbers);
        tcase_add_test(tc, test_negotiate_ready_order_preserved);
        tcase_add_test(tc, test_negotiate_fused_op_contents);
        tcase_add_test(tc, test_negotiate_fusion_threshold_applies);
        tcase_add_test(tc, test_negotiate_allgather_rank_rows);
        tcase_add_test(tc, test_negotiate_alltoall_splits_matrix);
        tcase_add_test(tc, test_negotiate_barrier);
        suite_add_tcase(s, tc);
        tc = tcase_create("consistency");
        tcase_add_test(tc, test_negotiate_mismatch_dtype);
        tcase_add_test(tc, test_negotiate_mismatch_shape);
        tcase_add_test(tc, test_negotiate_mismatch_three_ranks);
        tcase_add_test(tc, test_negotiate_mismatch_reduce_op);
        tcase_add_test(tc, test_negotiate_mismatch_scale);
        tcase_add_test(tc, test_negotiate_mismatch_root);
        tcase_add_test(tc, test_negotiate_mismatch_kind);
        tcase_add_test(tc, test_negotiate_error_then_consistent);
        tcase_add_test(tc, test_negotiate_invalid_requests);
        suite_add_tcase(s, tc);
        tc = tcase_create("table");
        tcase_add_test(tc, test_negotiate_cached_ids);
        tcase_add_test(tc, test_negotiate_duplicate);
        tcase_add_test(tc, test_negotiate_join);
        tcase_add_test(tc, test_negotiate_join_last_rank_order);
        tcase_add_test(tc, test_negotiate_join_rounds);
        tcase_add_test(tc, test_negotiate_join_many_ranks_named);
        tcase_add_test(tc, test_negotiate_group_held_until_complete);
        tcase_add_test(tc, test_negotiate_two_groups);
        tcase_add_test(tc, test_negotiate_process_set);
        tcase_add_test(tc, test_negotiate_process_set_join);
        tcase_add_test(tc, test_negotiate_table_capacity);
        tcase_add_test(tc, test_negotiate_describe_pending);
        tcase_add_test(tc, test_negotiate_timeline_ready_times);
        tcase_add_test(tc, test_negotiate_node_ready);
        tcase_add_test(tc, test_negotiate_submit_ranks);
        tcase_add_test(tc, test_negotiate_node_state_growth);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(negotiate_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
