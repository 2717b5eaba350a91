/* check_gpu_plan.c — unit tests of the GPU data plane's planner
 * (client/gpu_plan.c), without a GPU: fused members sit at 256-byte
 * boundaries, many small copies share few kernel launches, long copies are
 * cut into pieces, NCCL types and ops for every dtype, direct vs fused
 * paths, and group placement. A host simulator then runs the plans of
 * several ranks step by step (copies on host memory standing in for the
 * device, NCCL calls computed across the ranks), so fused allreduce,
 * broadcast, allgather, reducescatter and alltoall are checked end to end,
 * with several windows and joined ranks, and every rank must issue the same
 * sequence of calls. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_plan.h"
#include "hvd.pb-c.h"

#define ALL_FEATURES (HVD_GPU_HAS_AVG | HVD_GPU_HAS_BF16)
#define ADDR(p)      ((uint64_t) (uintptr_t) (p))
#define MAXR         8

/* ---- recording an emitted plan ---- */

enum { EV_IN, EV_OUT, EV_CALL, EV_STEP };

typedef struct ev {
        int type;
        hvd_gpu_batch_t *b; /* EV_IN / EV_OUT, owned */
        hvd_gpu_call_t c;
} ev_t;

typedef struct rec {
        ev_t *ev;
        size_t n, cap;
} rec_t;

static void rec_push(rec_t *r, ev_t e) {
        if (r->n == r->cap) {
                r->cap = r->cap ? 2 * r->cap : 64;
                r->ev = realloc(r->ev, r->cap * sizeof *r->ev);
                ck_assert_ptr_nonnull(r->ev);
        }
        r->ev[r->n++] = e;
}

static int on_batch(void *ud, int phase, const hvd_gpu_batch_t *b) {
        ck_assert_uint_ge(b->n, 1);
        ck_assert_uint_le(b->n, HVD_GPU_BATCH_CAPACITY);
        hvd_gpu_batch_t *copy = malloc(sizeof *copy);
        ck_assert_ptr_nonnull(copy);
        *copy = *b;
        rec_push(ud, (ev_t){ .type = phase == HVD_GPU_PHASE_IN ? EV_IN : EV_OUT, .b = copy });
        return 0;
}
static int on_call(void *ud, const hvd_gpu_call_t *c) {
        rec_push(ud, (ev_t){ .type = EV_CALL, .c = *c });
        return 0;
}
static int on_step(void *ud) {
        rec_push(ud, (ev_t){ .type = EV_STEP });
        return 0;
}

static void rec_free(rec_t *r) {
        for (size_t i = 0; i < r->n; i++)
                free(r->ev[i].b);
        free(r->ev);
        *r = (rec_t){ 0 };
}

static size_t count_type(const rec_t *r, int type) {
        size_t n = 0;
        for (size_t i = 0; i < r->n; i++)
                n += r->ev[i].type == type;
        return n;
}

static size_t count_copies(const rec_t *r, int type) {
        size_t n = 0;
        for (size_t i = 0; i < r->n; i++)
                if (r->ev[i].type == type)
                        n += r->ev[i].b->n;
        return n;
}

static uint64_t scratch[MAXR];

static int plan_rec(const hvd_xop_t *op, int me, int size, void *fbuf, uint64_t cap, rec_t *r,
                    hvd_gpu_plan_info_t *info) {
        hvd_gpu_plan_args_t a = { .op = op,
                                  .me = me,
                                  .size = size,
                                  .fbuf = ADDR(fbuf),
                                  .cap_bytes = cap,
                                  .features = ALL_FEATURES,
                                  .scratch = scratch };
        hvd_gpu_emit_t e = { .batch = on_batch, .call = on_call, .step_end = on_step, .userdata = r };
        char err[256] = "";
        hvd_gpu_plan_info_t dry;
        int rc = hvd_gpu_plan_op(&a, NULL, &dry, err, sizeof err);
        if (rc < 0)
                return rc;
        rc = hvd_gpu_plan_op(&a, &e, info, err, sizeof err);
        ck_assert_msg(rc == 0, "plan failed: %s", err);
        /* the dry run predicts the real one */
        ck_assert_uint_eq(dry.steps, info->steps);
        ck_assert_uint_eq(dry.calls, info->calls);
        ck_assert_uint_eq(dry.fbuf_bytes, info->fbuf_bytes);
        ck_assert_uint_eq(count_type(r, EV_STEP), info->steps);
        ck_assert_uint_eq(count_type(r, EV_CALL), info->calls);
        return 0;
}

static hvd_xop_t xop(uint32_t kind, hvd_dtype_t dt, hvd_xmember_t *m, size_t n) {
        return (hvd_xop_t){ .kind = kind,
                            .dtype = dt,
                            .reduce_op = HVD_REDUCE_SUM,
                            .prescale = 1.0,
                            .postscale = 1.0,
                            .root = 0,
                            .name = "t",
                            .n = n,
                            .m = m,
                            .device = 0 };
}

/* ---- the simulator: "device" memory is host memory ---- */

static void apply_batch(const hvd_gpu_batch_t *b) {
        for (uint32_t k = 0; k < b->n; k++) {
                const hvd_gpu_copy_t *c = &b->c[k];
                uint8_t *dst = (uint8_t *) (uintptr_t) c->dst;
                const uint8_t *src = (const uint8_t *) (uintptr_t) c->src;
                if (!src) {
                        memset(dst, 0, c->bytes);
                        continue;
                }
                switch (b->mode) {
                case HVD_GPU_COPY: memmove(dst, src, c->bytes); break;
                case HVD_GPU_COPY_BOOL:
                        for (uint64_t i = 0; i < c->bytes; i++)
                                dst[i] = src[i] != 0;
                        break;
                case HVD_GPU_COPY_SCALE:
                        ck_assert_int_eq(b->dtype, HVD_FLOAT32); /* what the simulated tests use */
                        for (uint64_t i = 0; i < c->bytes / 4; i++) {
                                float v;
                                memcpy(&v, src + 4 * i, 4);
                                v *= (float) b->scale;
                                memcpy(dst + 4 * i, &v, 4);
                        }
                        break;
                }
        }
}

static float reduce2(uint32_t op, float a, float b) {
        switch (op) {
        case HVD_GPU_OP_PROD: return a * b;
        case HVD_GPU_OP_MAX: return a > b ? a : b;
        case HVD_GPU_OP_MIN: return a < b ? a : b;
        default: return a + b;
        }
}

/* Runs the calls of one step across all ranks (call k of every rank is
 * one collective) into temporaries first, since NCCL works in place. */
static void simulate_calls(hvd_gpu_call_t **calls, size_t n_calls, int N, bool p2p) {
        for (size_t k = 0; k < n_calls && !p2p; k++) {
                const hvd_gpu_call_t *c0 = &calls[0][k];
                for (int r = 1; r < N; r++) {
                        ck_assert_uint_eq(calls[r][k].kind, c0->kind);
                        if (c0->kind != HVD_GPU_CALL_SEND && c0->kind != HVD_GPU_CALL_RECV) {
                                ck_assert_uint_eq(calls[r][k].count, c0->count);
                                ck_assert_int_eq(calls[r][k].type, c0->type);
                                ck_assert_uint_eq(calls[r][k].op, c0->op);
                                ck_assert_int_eq(calls[r][k].peer, c0->peer);
                        }
                }
                uint64_t n = c0->count;
                switch (c0->kind) {
                case HVD_GPU_CALL_ALLREDUCE: {
                        ck_assert_int_eq(c0->type, HVD_GPU_T_FLOAT32);
                        float *acc = calloc(n ? n : 1, 4);
                        for (int r = 0; r < N; r++) {
                                const float *s = (const float *) (uintptr_t) calls[r][k].send;
                                for (uint64_t i = 0; i < n; i++)
                                        acc[i] = r ? reduce2(c0->op, acc[i], s[i]) : s[i];
                        }
                        if (c0->op == HVD_GPU_OP_AVG)
                                for (uint64_t i = 0; i < n; i++)
                                        acc[i] /= (float) N;
                        for (int r = 0; r < N; r++)
                                memcpy((void *) (uintptr_t) calls[r][k].recv, acc, n * 4);
                        free(acc);
                        break;
                }
                case HVD_GPU_CALL_BROADCAST: {
                        uint8_t *tmp = malloc(n ? n : 1);
                        memcpy(tmp, (const void *) (uintptr_t) calls[c0->peer][k].send, n);
                        for (int r = 0; r < N; r++)
                                memcpy((void *) (uintptr_t) calls[r][k].recv, tmp, n);
                        free(tmp);
                        break;
                }
                case HVD_GPU_CALL_ALLGATHER: {
                        uint8_t *tmp = malloc(n * N + 1);
                        for (int r = 0; r < N; r++)
                                memcpy(tmp + r * n, (const void *) (uintptr_t) calls[r][k].send, n);
                        for (int r = 0; r < N; r++)
                                memcpy((void *) (uintptr_t) calls[r][k].recv, tmp, n * N);
                        free(tmp);
                        break;
                }
                case HVD_GPU_CALL_REDUCESCATTER: {
                        ck_assert_int_eq(c0->type, HVD_GPU_T_FLOAT32);
                        float *acc = calloc(n * N + 1, 4);
                        for (int r = 0; r < N; r++) {
                                const float *s = (const float *) (uintptr_t) calls[r][k].send;
                                for (uint64_t i = 0; i < n * N; i++)
                                        acc[i] = r ? reduce2(c0->op, acc[i], s[i]) : s[i];
                        }
                        if (c0->op == HVD_GPU_OP_AVG)
                                for (uint64_t i = 0; i < n * N; i++)
                                        acc[i] /= (float) N;
                        for (int r = 0; r < N; r++)
                                memcpy((void *) (uintptr_t) calls[r][k].recv, acc + r * n, n * 4);
                        free(acc);
                        break;
                }
                default: break; /* send/recv: matched below */
                }
        }
        /* p2p: the j-th send from a to b pairs with the j-th recv at b from a */
        for (int a = 0; a < N; a++)
                for (int b = 0; b < N; b++) {
                        size_t si = 0, ri = 0;
                        for (;;) {
                                while (si < n_calls &&
                                       !(calls[a][si].kind == HVD_GPU_CALL_SEND && calls[a][si].peer == b))
                                        si++;
                                while (ri < n_calls &&
                                       !(calls[b][ri].kind == HVD_GPU_CALL_RECV && calls[b][ri].peer == a))
                                        ri++;
                                if (si == n_calls || ri == n_calls) {
                                        ck_assert_msg(si == n_calls && ri == n_calls, "unmatched send/recv %d->%d", a,
                                                      b);
                                        break;
                                }
                                ck_assert_uint_eq(calls[a][si].count, calls[b][ri].count);
                                memcpy((void *) (uintptr_t) calls[b][ri].recv,
                                       (const void *) (uintptr_t) calls[a][si].send, calls[a][si].count);
                                si++;
                                ri++;
                        }
                }
}

/* Plans op on every rank (m[r] are rank r's members) and runs the plans in
 * stream order: per step, every rank's copies in, the collectives, every
 * rank's copies out. */
static void simulate(uint32_t kind, hvd_dtype_t dt, hvd_reduce_op_t rop, double pre, double post, int root,
                     hvd_xmember_t **m, size_t n, int N, uint64_t cap, uint32_t max_calls) {
        rec_t rec[MAXR] = { 0 };
        uint8_t *fbuf[MAXR];
        hvd_gpu_plan_info_t info[MAXR];
        for (int r = 0; r < N; r++) {
                fbuf[r] = aligned_alloc(HVD_GPU_ALIGN_BYTES, cap);
                memset(fbuf[r], 0xa5, cap);
                hvd_xop_t op = xop(kind, dt, m[r], n);
                op.reduce_op = rop;
                op.prescale = pre;
                op.postscale = post;
                op.root = root;
                hvd_gpu_plan_args_t a = { .op = &op,
                                          .me = r,
                                          .size = N,
                                          .fbuf = ADDR(fbuf[r]),
                                          .cap_bytes = cap,
                                          .features = ALL_FEATURES,
                                          .max_calls = max_calls,
                                          .scratch = scratch };
                hvd_gpu_emit_t e = { .batch = on_batch, .call = on_call, .step_end = on_step, .userdata = &rec[r] };
                char err[256] = "";
                int rc = hvd_gpu_plan_op(&a, &e, &info[r], err, sizeof err);
                ck_assert_msg(rc == 0, "rank %d: %s", r, err);
                ck_assert_uint_le(info[r].fbuf_bytes, cap);
        }
        for (int r = 1; r < N; r++) {
                ck_assert_uint_eq(info[r].steps, info[0].steps);
                ck_assert_uint_eq(info[r].fbuf_bytes, info[0].fbuf_bytes);
                ck_assert_uint_eq(info[r].direct, info[0].direct);
        }
        size_t pos[MAXR] = { 0 };
        for (uint32_t s = 0; s < info[0].steps; s++) {
                hvd_gpu_call_t *calls[MAXR];
                size_t n_calls[MAXR];
                for (int r = 0; r < N; r++) {
                        calls[r] = calloc(rec[r].n + 1, sizeof(hvd_gpu_call_t));
                        n_calls[r] = 0;
                        /* in, then calls; no copy out before the last call of a step */
                        bool seen_out = false;
                        size_t i = pos[r];
                        for (; rec[r].ev[i].type != EV_STEP; i++) {
                                ev_t *e = &rec[r].ev[i];
                                if (e->type == EV_IN) {
                                        ck_assert_msg(n_calls[r] == 0, "copy in after a call");
                                        apply_batch(e->b);
                                } else if (e->type == EV_CALL) {
                                        ck_assert_msg(!seen_out, "call after a copy out");
                                        calls[r][n_calls[r]++] = e->c;
                                } else
                                        seen_out = true;
                        }
                        if (r > 0 && kind != HVD__KIND__KIND_ALLTOALL)
                                ck_assert_uint_eq(n_calls[r], n_calls[0]);
                }
                if (kind == HVD__KIND__KIND_ALLTOALL) { /* p2p: call counts differ per rank */
                        size_t most = 0;
                        for (int r = 0; r < N; r++)
                                most = n_calls[r] > most ? n_calls[r] : most;
                        for (int r = 0; r < N; r++) {
                                calls[r] = realloc(calls[r], (most + 1) * sizeof(hvd_gpu_call_t));
                                for (size_t k = n_calls[r]; k < most; k++)
                                        calls[r][k].kind = 99;
                        }
                        simulate_calls(calls, most, N, true);
                } else
                        simulate_calls(calls, n_calls[0], N, false);
                for (int r = 0; r < N; r++) {
                        size_t i = pos[r];
                        for (; rec[r].ev[i].type != EV_STEP; i++)
                                if (rec[r].ev[i].type == EV_OUT)
                                        apply_batch(rec[r].ev[i].b);
                        pos[r] = i + 1;
                        free(calls[r]);
                }
        }
        for (int r = 0; r < N; r++) {
                ck_assert_uint_eq(pos[r], rec[r].n);
                rec_free(&rec[r]);
                free(fbuf[r]);
        }
}

static float valf(int r, size_t i, size_t k) {
        return (float) ((int) ((r + 1) * 7 + i * 13 + k) % 97) - 40.0f;
}

/* ---- tests ---- */

START_TEST(test_gpu_plan_members_aligned_256) {
        /* 5 float32 tensors of odd lengths: each starts at a multiple of 256 */
        static float in[5][1000], out[5][1000];
        uint64_t counts[5] = { 1, 63, 65, 257, 999 };
        hvd_xmember_t m[5];
        for (int i = 0; i < 5; i++)
                m[i] = (hvd_xmember_t){ .in = in[i], .out = out[i], .count = counts[i] };
        hvd_xop_t op = xop(HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, m, 5);
        static uint8_t fbuf[1 << 16] __attribute__((aligned(256)));
        rec_t r = { 0 };
        hvd_gpu_plan_info_t info;
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), 0);
        ck_assert_uint_eq(info.steps, 1);
        ck_assert(!info.direct);
        uint64_t expect = 0;
        for (int i = 0; i < 5; i++)
                expect = hvd_gpu_align_up(expect) + counts[i] * 4;
        ck_assert_uint_eq(info.fbuf_bytes, hvd_gpu_align_up(expect));
        /* the one IN batch: member i at the aligned offset */
        const hvd_gpu_batch_t *b = r.ev[0].b;
        ck_assert_int_eq(r.ev[0].type, EV_IN);
        ck_assert_uint_eq(b->n, 5);
        uint64_t off = 0;
        for (int i = 0; i < 5; i++) {
                off = hvd_gpu_align_up(off);
                ck_assert_uint_eq(b->c[i].dst - ADDR(fbuf), off);
                ck_assert_uint_eq((b->c[i].dst - ADDR(fbuf)) % HVD_GPU_ALIGN_BYTES, 0);
                ck_assert_uint_eq(b->c[i].src, ADDR(in[i]));
                ck_assert_uint_eq(b->c[i].bytes, counts[i] * 4);
                off += counts[i] * 4;
        }
        /* one allreduce over the whole padded range, in place */
        ck_assert_int_eq(r.ev[1].type, EV_CALL);
        ck_assert_uint_eq(r.ev[1].c.kind, HVD_GPU_CALL_ALLREDUCE);
        ck_assert_uint_eq(r.ev[1].c.send, ADDR(fbuf));
        ck_assert_uint_eq(r.ev[1].c.recv, ADDR(fbuf));
        ck_assert_uint_eq(r.ev[1].c.count, expect / 4);
        ck_assert_int_eq(r.ev[1].c.type, HVD_GPU_T_FLOAT32);
        rec_free(&r);
}
END_TEST

START_TEST(test_gpu_plan_many_small_copies_few_launches) {
        /* 1000 tensors of 10 floats: 1000 copies in 8 launches each way, one collective */
        enum { N = 1000 };
        static float in[N][10], out[N][10];
        static hvd_xmember_t m[N];
        for (int i = 0; i < N; i++)
                m[i] = (hvd_xmember_t){ .in = in[i], .out = out[i], .count = 10 };
        hvd_xop_t op = xop(HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, m, N);
        static uint8_t fbuf[N * 256] __attribute__((aligned(256)));
        rec_t r = { 0 };
        hvd_gpu_plan_info_t info;
        ck_assert_int_eq(plan_rec(&op, 1, 4, fbuf, sizeof fbuf, &r, &info), 0);
        ck_assert_uint_eq(info.steps, 1);
        ck_assert_uint_eq(info.calls, 1);
        size_t launches = (N + HVD_GPU_BATCH_CAPACITY - 1) / HVD_GPU_BATCH_CAPACITY;
        ck_assert_uint_eq(count_type(&r, EV_IN), launches);
        ck_assert_uint_eq(count_type(&r, EV_OUT), launches);
        ck_assert_uint_eq(count_copies(&r, EV_IN), N);
        ck_assert_uint_eq(count_copies(&r, EV_OUT), N);
        /* order: all copies in, the call, all copies out, step end */
        ck_assert_int_eq(r.ev[launches].type, EV_CALL);
        ck_assert_int_eq(r.ev[r.n - 1].type, EV_STEP);
        rec_free(&r);
}
END_TEST

START_TEST(test_gpu_plan_long_copy_cut_into_pieces) {
        hvd_gpu_batcher_t bt;
        hvd_gpu_batcher_init(&bt, HVD_GPU_COPY, HVD_FLOAT32, 1.0, NULL, NULL);
        uint64_t bytes = 3 * HVD_GPU_PIECE_BYTES + 100;
        ck_assert_int_eq(hvd_gpu_batcher_add(&bt, 0x100000, 0x900000, bytes), 0);
        ck_assert_uint_eq(bt.b.n, 4);
        for (uint32_t i = 0; i < 4; i++) {
                ck_assert_uint_eq(bt.b.c[i].dst, 0x100000 + i * HVD_GPU_PIECE_BYTES);
                ck_assert_uint_eq(bt.b.c[i].src, 0x900000 + i * HVD_GPU_PIECE_BYTES);
                ck_assert_uint_eq(bt.b.c[i].bytes, i < 3 ? HVD_GPU_PIECE_BYTES : 100);
                ck_assert_uint_eq((bt.b.c[i].dst - 0x100000) % HVD_GPU_ALIGN_BYTES, 0);
        }
        /* zero fill stays zero fill in every piece; 0 bytes adds nothing */
        ck_assert_int_eq(hvd_gpu_batcher_add(&bt, 0x200000, 0, HVD_GPU_PIECE_BYTES + 1), 0);
        ck_assert_int_eq(hvd_gpu_batcher_add(&bt, 0x300000, 0x1, 0), 0);
        ck_assert_uint_eq(bt.b.n, 6);
        ck_assert_uint_eq(bt.b.c[4].src, 0);
        ck_assert_uint_eq(bt.b.c[5].src, 0);
        ck_assert_int_eq(hvd_gpu_batcher_finish(&bt), 0);
        ck_assert_uint_eq(bt.launches, 1);
        ck_assert_uint_eq(bt.b.n, 0);
        /* a full batch goes out as soon as the next copy arrives */
        for (int i = 0; i < HVD_GPU_BATCH_CAPACITY + 1; i++)
                ck_assert_int_eq(hvd_gpu_batcher_add(&bt, 0x1000 * (uint64_t) i, 0x2000, 16), 0);
        ck_assert_uint_eq(bt.launches, 2);
        ck_assert_uint_eq(bt.b.n, 1);
        ck_assert_uint_lt(sizeof(hvd_gpu_batch_t), 4096);
}
END_TEST

START_TEST(test_gpu_plan_types_and_ops) {
        static const struct {
                hvd_dtype_t dt;
                hvd_gpu_type_t t;
        } map[] = {
                { HVD_UINT8, HVD_GPU_T_UINT8 },     { HVD_INT8, HVD_GPU_T_INT8 },
                { HVD_INT32, HVD_GPU_T_INT32 },     { HVD_INT64, HVD_GPU_T_INT64 },
                { HVD_FLOAT16, HVD_GPU_T_FLOAT16 }, { HVD_BFLOAT16, HVD_GPU_T_BFLOAT16 },
                { HVD_FLOAT32, HVD_GPU_T_FLOAT32 }, { HVD_FLOAT64, HVD_GPU_T_FLOAT64 },
                { HVD_BOOL, HVD_GPU_T_UINT8 },      { HVD_INT16, HVD_GPU_T_NONE },
        };
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
                ck_assert_int_eq(hvd_gpu_reduce_type(map[i].dt, ALL_FEATURES), map[i].t);
        ck_assert_int_eq(hvd_gpu_reduce_type(HVD_BFLOAT16, 0), HVD_GPU_T_NONE);
        ck_assert_int_eq(hvd_gpu_dtype_size(_HVD_DTYPE_COUNT), 0);

        hvd_gpu_reduce_t rd;
        char err[256];
        /* int16: a clear error naming the tensor */
        ck_assert_int_eq(
                hvd_gpu_reduce_plan("grad.w", HVD_INT16, HVD_REDUCE_SUM, 1, 1, 4, ALL_FEATURES, &rd, err, sizeof err),
                -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(err, "grad.w"));
        ck_assert_ptr_nonnull(strstr(err, "int16"));
        ck_assert_int_eq(hvd_gpu_reduce_plan("b", HVD_BFLOAT16, HVD_REDUCE_SUM, 1, 1, 4, 0, &rd, err, sizeof err),
                         -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(err, "2.10"));
        /* average: ncclAvg, or sum and 1/size folded into the postscale */
        ck_assert_int_eq(
                hvd_gpu_reduce_plan("a", HVD_FLOAT32, HVD_REDUCE_AVERAGE, 1, 1, 4, ALL_FEATURES, &rd, err, sizeof err),
                0);
        ck_assert_int_eq(rd.op, HVD_GPU_OP_AVG);
        ck_assert_int_eq(rd.post_mode, HVD_GPU_COPY);
        ck_assert_int_eq(hvd_gpu_reduce_plan("a", HVD_FLOAT32, HVD_REDUCE_AVERAGE, 1, 3, 4, 0, &rd, err, sizeof err),
                         0);
        ck_assert_int_eq(rd.op, HVD_GPU_OP_SUM);
        ck_assert_int_eq(rd.post_mode, HVD_GPU_COPY_SCALE);
        ck_assert(fabs(rd.post_scale - 0.75) < 1e-12);
        /* prescale and postscale */
        ck_assert_int_eq(
                hvd_gpu_reduce_plan("a", HVD_INT32, HVD_REDUCE_MAX, 2, 0.5, 4, ALL_FEATURES, &rd, err, sizeof err), 0);
        ck_assert_int_eq(rd.op, HVD_GPU_OP_MAX);
        ck_assert_int_eq(rd.pre_mode, HVD_GPU_COPY_SCALE);
        ck_assert(rd.pre_scale == 2.0 && rd.post_scale == 0.5);
        ck_assert_int_eq(
                hvd_gpu_reduce_plan("a", HVD_FLOAT16, HVD_REDUCE_PRODUCT, 1, 1, 4, ALL_FEATURES, &rd, err, sizeof err),
                0);
        ck_assert_int_eq(rd.op, HVD_GPU_OP_PROD);
        ck_assert_int_eq(rd.pre_mode, HVD_GPU_COPY);
        /* bool: or / and over normalised bytes, never scaled */
        static const hvd_reduce_op_t ops[] = { HVD_REDUCE_SUM, HVD_REDUCE_MAX, HVD_REDUCE_AVERAGE, HVD_REDUCE_MIN,
                                               HVD_REDUCE_PRODUCT };
        for (int i = 0; i < 5; i++) {
                ck_assert_int_eq(
                        hvd_gpu_reduce_plan("f", HVD_BOOL, ops[i], 3, 5, 4, ALL_FEATURES, &rd, err, sizeof err), 0);
                ck_assert_int_eq(rd.op, i < 3 ? HVD_GPU_OP_MAX : HVD_GPU_OP_MIN);
                ck_assert_int_eq(rd.pre_mode, HVD_GPU_COPY_BOOL);
                ck_assert_int_eq(rd.post_mode, HVD_GPU_COPY);
        }
        ck_assert_int_eq(hvd_gpu_reduce_plan("x", HVD_FLOAT32, (hvd_reduce_op_t) 17, 1, 1, 4, ALL_FEATURES, &rd, err,
                                             sizeof err),
                         -EINVAL);
}
END_TEST

START_TEST(test_gpu_plan_direct_single_member) {
        static float in[1000], out[1000];
        static uint8_t fbuf[8192] __attribute__((aligned(256)));
        hvd_xmember_t m = { .in = in, .out = out, .count = 1000 };
        hvd_xop_t op = xop(HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, &m, 1);
        rec_t r = { 0 };
        hvd_gpu_plan_info_t info;
        /* no copies: NCCL reads in and writes out */
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), 0);
        ck_assert(info.direct);
        ck_assert_uint_eq(info.steps, 1);
        ck_assert_uint_eq(r.n, 2);
        ck_assert_uint_eq(r.ev[0].c.send, ADDR(in));
        ck_assert_uint_eq(r.ev[0].c.recv, ADDR(out));
        ck_assert_uint_eq(r.ev[0].c.count, 1000);
        rec_free(&r);
        /* prescale: scaled into out, then in place; postscale: a kernel on out */
        op.prescale = 2.0;
        op.postscale = 0.25;
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), 0);
        ck_assert_int_eq(r.ev[0].type, EV_IN);
        ck_assert_int_eq(r.ev[0].b->mode, HVD_GPU_COPY_SCALE);
        ck_assert(r.ev[0].b->scale == 2.0);
        ck_assert_uint_eq(r.ev[0].b->c[0].src, ADDR(in));
        ck_assert_uint_eq(r.ev[0].b->c[0].dst, ADDR(out));
        ck_assert_uint_eq(r.ev[1].c.send, ADDR(out));
        ck_assert_uint_eq(r.ev[1].c.recv, ADDR(out));
        ck_assert_int_eq(r.ev[2].type, EV_OUT);
        ck_assert(r.ev[2].b->scale == 0.25);
        ck_assert_uint_eq(r.ev[2].b->c[0].src, ADDR(out));
        ck_assert_uint_eq(r.ev[2].b->c[0].dst, ADDR(out));
        rec_free(&r);
        /* larger than the buffer: windows of the buffer's size, the same on a joined rank */
        op.prescale = op.postscale = 1.0;
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, 1024, &r, &info), 0);
        ck_assert_uint_eq(info.steps, 4); /* 4000 bytes / 1024 */
        uint64_t counts[4];
        for (int k = 0; k < 4; k++)
                counts[k] = r.ev[2 * k].c.count;
        ck_assert_uint_eq(counts[0], 256);
        ck_assert_uint_eq(counts[3], 1000 - 3 * 256);
        rec_free(&r);
        hvd_xmember_t joined = { .in = NULL, .out = NULL, .count = 1000 };
        op.m = &joined;
        ck_assert_int_eq(plan_rec(&op, 1, 2, fbuf, 1024, &r, &info), 0);
        ck_assert_uint_eq(info.steps, 4);
        size_t k = 0;
        for (size_t i = 0; i < r.n; i++) {
                if (r.ev[i].type == EV_IN) {
                        ck_assert_uint_eq(r.ev[i].b->c[0].src, 0); /* zeros */
                        ck_assert_uint_eq(r.ev[i].b->c[0].dst, ADDR(fbuf));
                }
                if (r.ev[i].type == EV_CALL) {
                        ck_assert_uint_eq(r.ev[i].c.count, counts[k++]);
                        ck_assert_uint_eq(r.ev[i].c.send, ADDR(fbuf));
                }
                ck_assert_int_ne(r.ev[i].type, EV_OUT);
        }
        rec_free(&r);
}
END_TEST

START_TEST(test_gpu_plan_calls_rank_independent) {
        /* a joined rank and a member rank issue the same collectives for every kind */
        static float in[4][600], out[4][6000];
        static uint8_t fbuf[4096] __attribute__((aligned(256)));
        int64_t rows[3] = { 3, 0, 5 }; /* rank 1 joined: no rows */
        uint32_t kinds[] = { HVD__KIND__KIND_ALLREDUCE, HVD__KIND__KIND_BROADCAST, HVD__KIND__KIND_ALLGATHER,
                             HVD__KIND__KIND_REDUCESCATTER };
        for (size_t kk = 0; kk < 4; kk++)
                for (size_t n = 1; n <= 3; n += 2) {
                        rec_t rec[3] = { { 0 } };
                        hvd_gpu_plan_info_t info[3];
                        for (int r = 0; r < 3; r++) {
                                hvd_xmember_t m[3];
                                for (size_t i = 0; i < n; i++)
                                        m[i] = (hvd_xmember_t){ .in = r == 1 ? NULL : in[i],
                                                                .out = r == 1 ? NULL : out[i],
                                                                .count = 600,
                                                                .row_elems = 100,
                                                                .rank_rows = rows,
                                                                .rows = 6 };
                                hvd_xop_t op = xop(kinds[kk], HVD_FLOAT32, m, n);
                                op.root = 2;
                                ck_assert_int_eq(plan_rec(&op, r, 3, fbuf, sizeof fbuf, &rec[r], &info[r]), 0);
                        }
                        for (int r = 1; r < 3; r++) {
                                ck_assert_uint_eq(info[r].steps, info[0].steps);
                                ck_assert_uint_eq(info[r].calls, info[0].calls);
                                size_t a = 0, b = 0;
                                for (;;) {
                                        while (a < rec[0].n && rec[0].ev[a].type != EV_CALL &&
                                               rec[0].ev[a].type != EV_STEP)
                                                a++;
                                        while (b < rec[r].n && rec[r].ev[b].type != EV_CALL &&
                                               rec[r].ev[b].type != EV_STEP)
                                                b++;
                                        ck_assert_int_eq(a < rec[0].n, b < rec[r].n);
                                        if (a == rec[0].n)
                                                break;
                                        ck_assert_int_eq(rec[0].ev[a].type, rec[r].ev[b].type);
                                        if (rec[0].ev[a].type == EV_CALL) {
                                                ck_assert_uint_eq(rec[0].ev[a].c.kind, rec[r].ev[b].c.kind);
                                                ck_assert_uint_eq(rec[0].ev[a].c.count, rec[r].ev[b].c.count);
                                                ck_assert_int_eq(rec[0].ev[a].c.peer, rec[r].ev[b].c.peer);
                                        }
                                        a++;
                                        b++;
                                }
                        }
                        for (int r = 0; r < 3; r++)
                                rec_free(&rec[r]);
                }
}
END_TEST

START_TEST(test_gpu_sim_allreduce_fused_windows_joined) {
        /* 3 ranks, 40 tensors of odd lengths through a 2 KiB buffer (many
         * windows, members cut across windows), rank 2 joined; sum, average
         * with pre/postscale */
        enum { N = 3, T = 40 };
        static float in[N][T][300], out[N][T][300];
        static hvd_xmember_t mem[N][T];
        hvd_xmember_t *m[N];
        for (int pass = 0; pass < 2; pass++) {
                for (int r = 0; r < N; r++) {
                        m[r] = mem[r];
                        for (size_t i = 0; i < T; i++) {
                                size_t cnt = 1 + (i * 37) % 300;
                                for (size_t k = 0; k < cnt; k++)
                                        in[r][i][k] = valf(r, i, k);
                                memset(out[r][i], 0xff, sizeof out[r][i]);
                                mem[r][i] = (hvd_xmember_t){ .in = r == 2 ? NULL : in[r][i],
                                                             .out = r == 2 ? NULL : out[r][i],
                                                             .count = cnt };
                        }
                }
                bool avg = pass == 1;
                simulate(HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, avg ? HVD_REDUCE_AVERAGE : HVD_REDUCE_SUM,
                         avg ? 2.0 : 1.0, avg ? 0.5 : 1.0, 0, m, T, N, 2048, 0);
                for (int r = 0; r < 2; r++)
                        for (size_t i = 0; i < T; i++)
                                for (size_t k = 0; k < mem[r][i].count; k++) {
                                        float e = valf(0, i, k) + valf(1, i, k);
                                        if (avg)
                                                e = e * 2.0f / 3.0f * 0.5f;
                                        ck_assert_msg(fabsf(out[r][i][k] - e) < 1e-4f, "rank %d t %zu [%zu]: %g != %g",
                                                      r, i, k, out[r][i][k], e);
                                }
        }
}
END_TEST

START_TEST(test_gpu_sim_broadcast) {
        enum { N = 3, T = 7 };
        static float in[N][T][500], out[N][T][500];
        static hvd_xmember_t mem[N][T];
        hvd_xmember_t *m[N];
        for (size_t n = 1; n <= T; n += T - 1) /* direct (1 member) and fused */
                for (uint64_t cap = 1024; cap <= 65536; cap *= 64) {
                        for (int r = 0; r < N; r++) {
                                m[r] = mem[r];
                                for (size_t i = 0; i < n; i++) {
                                        for (size_t k = 0; k < 500; k++)
                                                in[r][i][k] = valf(r, i, k);
                                        memset(out[r][i], 0, sizeof out[r][i]);
                                        mem[r][i] = (hvd_xmember_t){ .in = in[r][i],
                                                                     .out = out[r][i],
                                                                     .count = 100 + 57 * i };
                                }
                        }
                        simulate(HVD__KIND__KIND_BROADCAST, HVD_FLOAT32, HVD_REDUCE_SUM, 1, 1, 1, m, n, N, cap, 0);
                        for (int r = 0; r < N; r++)
                                for (size_t i = 0; i < n; i++)
                                        ck_assert_int_eq(memcmp(out[r][i], in[1][i], mem[r][i].count * 4), 0);
                }
}
END_TEST

START_TEST(test_gpu_sim_allgather_uneven) {
        enum { N = 3, T = 4 };
        static float in[N][T][400], out[N][T][1200];
        static hvd_xmember_t mem[N][T];
        static int64_t rows[T][N] = { { 2, 0, 5 }, { 1, 1, 1 }, { 7, 3, 0 }, { 4, 4, 4 } };
        hvd_xmember_t *m[N];
        size_t sizes[] = { 1, 2, T };
        for (size_t si = 0; si < 3; si++)
                for (size_t shift = 0; shift < 2; shift++) /* n == 1, shift 1: even rows, direct */
                        for (uint64_t cap = 768; cap <= 65536; cap *= 16) {
                                size_t n = sizes[si];
                                for (int r = 0; r < N; r++) {
                                        m[r] = mem[r];
                                        for (size_t i = 0; i < n; i++) {
                                                size_t re = 3 + i; /* row elements */
                                                for (size_t k = 0; k < 400; k++)
                                                        in[r][i][k] = valf(r, i, k);
                                                memset(out[r][i], 0, sizeof out[r][i]);
                                                mem[r][i] = (hvd_xmember_t){ .in = in[r][i],
                                                                             .out = out[r][i],
                                                                             .row_elems = re,
                                                                             .rank_rows = rows[(i + shift) % T] };
                                        }
                                }
                                simulate(HVD__KIND__KIND_ALLGATHER, HVD_FLOAT32, HVD_REDUCE_SUM, 1, 1, 0, m, n, N, cap,
                                         0);
                                for (int r = 0; r < N; r++)
                                        for (size_t i = 0; i < n; i++) {
                                                size_t re = 3 + i, o = 0;
                                                for (int j = 0; j < N; j++) {
                                                        size_t len = (size_t) rows[(i + shift) % T][j] * re;
                                                        ck_assert_msg(memcmp(out[r][i] + o, in[j][i], len * 4) == 0,
                                                                      "n %zu cap %llu rank %d member %zu from %d", n,
                                                                      (unsigned long long) cap, r, i, j);
                                                        o += len;
                                                }
                                        }
                        }
}
END_TEST

START_TEST(test_gpu_sim_reducescatter) {
        enum { N = 3, T = 3 };
        static float in[N][T][700], out[N][T][700];
        static hvd_xmember_t mem[N][T];
        int64_t rowsv[T] = { 7, 6, 10 }; /* uneven, even, uneven */
        hvd_xmember_t *m[N];
        size_t sizes[] = { 1, 2, T };
        for (size_t si = 0; si < 3; si++)
                for (size_t shift = 0; shift < 2; shift++) /* n == 1, shift 1: 6 rows, direct */
                        for (uint64_t cap = 768; cap <= 65536; cap *= 16)
                                for (int pass = 0; pass < 2; pass++) {
                                        size_t n = sizes[si];
                                        for (int r = 0; r < N; r++) {
                                                m[r] = mem[r];
                                                for (size_t i = 0; i < n; i++) {
                                                        size_t re = 5 + 2 * i;
                                                        int64_t rows = rowsv[(i + si + shift) % T];
                                                        for (size_t k = 0; k < 700; k++)
                                                                in[r][i][k] = valf(r, i, k);
                                                        memset(out[r][i], 0, sizeof out[r][i]);
                                                        mem[r][i] = (hvd_xmember_t){ .in = in[r][i],
                                                                                     .out = out[r][i],
                                                                                     .count = (uint64_t) rows * re,
                                                                                     .row_elems = re,
                                                                                     .rows = rows };
                                                }
                                        }
                                        bool scaled = pass == 1;
                                        simulate(HVD__KIND__KIND_REDUCESCATTER, HVD_FLOAT32, HVD_REDUCE_SUM,
                                                 scaled ? 2.0 : 1.0, scaled ? 0.25 : 1.0, 0, m, n, N, cap, 0);
                                        for (int r = 0; r < N; r++)
                                                for (size_t i = 0; i < n; i++) {
                                                        int64_t start, nr;
                                                        hvd_reducescatter_rows(mem[r][i].rows, N, r, &start, &nr);
                                                        size_t re = mem[r][i].row_elems;
                                                        for (size_t k = 0; k < (size_t) nr * re; k++) {
                                                                size_t x = (size_t) start * re + k;
                                                                float e = valf(0, i, x) + valf(1, i, x) + valf(2, i, x);
                                                                if (scaled)
                                                                        e *= 0.5f;
                                                                ck_assert_msg(fabsf(out[r][i][k] - e) < 1e-4f,
                                                                              "n %zu cap %llu rank %d member %zu "
                                                                              "[%zu]: %g != %g",
                                                                              n, (unsigned long long) cap, r, i, k,
                                                                              out[r][i][k], e);
                                                        }
                                                }
                                }
}
END_TEST

START_TEST(test_gpu_sim_alltoall) {
        enum { N = 3, T = 3 };
        static float in[N][T][400], out[N][T][400];
        static hvd_xmember_t mem[N][T];
        static int64_t splits[T][N * N];
        hvd_xmember_t *m[N];
        for (size_t i = 0; i < T; i++)
                for (int s = 0; s < N; s++)
                        for (int d = 0; d < N; d++)
                                splits[i][s * N + d] = (s + 2 * d + (int) i) % 4; /* zeros included */
        for (uint32_t max_calls = 0; max_calls <= 4; max_calls += 4) {            /* one step, or one member per step */
                for (int r = 0; r < N; r++) {
                        m[r] = mem[r];
                        for (size_t i = 0; i < T; i++) {
                                for (size_t k = 0; k < 400; k++)
                                        in[r][i][k] = valf(r, i, k);
                                memset(out[r][i], 0, sizeof out[r][i]);
                                mem[r][i] = (hvd_xmember_t){
                                        .in = in[r][i], .out = out[r][i], .row_elems = 2 + i, .splits = splits[i]
                                };
                        }
                }
                simulate(HVD__KIND__KIND_ALLTOALL, HVD_FLOAT32, HVD_REDUCE_SUM, 1, 1, 0, m, T, N, 4096, max_calls);
                for (int r = 0; r < N; r++)
                        for (size_t i = 0; i < T; i++) {
                                size_t re = 2 + i, o = 0;
                                for (int s = 0; s < N; s++) {
                                        size_t soff = 0;
                                        for (int d = 0; d < r; d++)
                                                soff += (size_t) splits[i][s * N + d] * re;
                                        size_t len = (size_t) splits[i][s * N + r] * re;
                                        ck_assert_int_eq(memcmp(out[r][i] + o, in[s][i] + soff, len * 4), 0);
                                        o += len;
                                }
                        }
        }
}
END_TEST

START_TEST(test_gpu_plan_rejects_bad_input) {
        static float buf[64];
        static uint8_t fbuf[4096] __attribute__((aligned(256)));
        hvd_gpu_plan_info_t info;
        char err[256];
        rec_t r = { 0 };
        /* a float32 buffer at an odd address */
        hvd_xmember_t m = { .in = (uint8_t *) buf + 1, .out = buf, .count = 4 };
        hvd_xop_t op = xop(HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, &m, 1);
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), -EINVAL);
        /* int16 reduction */
        m.in = buf;
        op.dtype = HVD_INT16;
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), -EOPNOTSUPP);
        /* but int16 moves as bytes */
        op.kind = HVD__KIND__KIND_BROADCAST;
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), 0);
        ck_assert_int_eq(r.ev[0].c.type, HVD_GPU_T_UINT8);
        ck_assert_uint_eq(r.ev[0].c.count, 8);
        rec_free(&r);
        /* root out of range */
        op.root = 2;
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), -EINVAL);
        /* reducescatter whose rows do not make its count */
        op = xop(HVD__KIND__KIND_REDUCESCATTER, HVD_FLOAT32, &m, 1);
        m.rows = 3;
        m.row_elems = 2;
        m.count = 4;
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), -EINVAL);
        /* alltoall on a joined rank that should send rows */
        int64_t sp[4] = { 1, 1, 1, 1 };
        hvd_xmember_t j = { .in = NULL, .out = NULL, .row_elems = 1, .splits = sp };
        op = xop(HVD__KIND__KIND_ALLTOALL, HVD_FLOAT32, &j, 1);
        ck_assert_int_eq(plan_rec(&op, 0, 2, fbuf, sizeof fbuf, &r, &info), -EINVAL);
        /* a buffer too small for the ranks, or not a multiple of the alignment */
        op = xop(HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, &m, 1);
        hvd_gpu_plan_args_t a = {
                .op = &op, .me = 0, .size = 8, .fbuf = ADDR(fbuf), .cap_bytes = 1024, .scratch = scratch
        };
        ck_assert_int_eq(hvd_gpu_plan_op(&a, NULL, &info, err, sizeof err), -EINVAL);
        a.size = 2;
        a.cap_bytes = 1000;
        ck_assert_int_eq(hvd_gpu_plan_op(&a, NULL, &info, err, sizeof err), -EINVAL);
        /* barrier is not a GPU collective */
        op.kind = HVD__KIND__KIND_BARRIER;
        a.cap_bytes = 1024;
        ck_assert_int_eq(hvd_gpu_plan_op(&a, NULL, &info, err, sizeof err), -EOPNOTSUPP);
}
END_TEST

static hvd_gpu_plan_info_t gi(uint32_t steps, uint64_t bytes, bool p2p, uint64_t calls) {
        return (hvd_gpu_plan_info_t){ .steps = steps, .fbuf_bytes = bytes, .p2p = p2p, .max_step_calls = calls };
}

START_TEST(test_gpu_group_placement) {
        hvd_gpu_group_t g;
        uint64_t off = 99;
        hvd_gpu_group_init(&g, 4096);
        /* single-step collectives share a group side by side, 256-aligned */
        hvd_gpu_plan_info_t a = gi(1, 1000, false, 1);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &a, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_uint_eq(off, 0);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &a, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_uint_eq(off, 1024);
        hvd_gpu_plan_info_t empty = gi(0, 0, false, 0);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &empty, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_uint_eq(off, 2048);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &a, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_uint_eq(off, 2048);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &a, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_uint_eq(off, 3072);
        /* the buffer is full: flush, and the op starts the next group */
        ck_assert_int_eq(hvd_gpu_group_place(&g, &a, &off), HVD_GPU_PLACE_FLUSH_JOIN);
        ck_assert_uint_eq(off, 0);
        ck_assert_uint_eq(g.n_ops, 1);
        /* send/recv never shares a group with collectives; direct ops need no buffer */
        hvd_gpu_plan_info_t p = gi(1, 0, true, 4);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &p, &off), HVD_GPU_PLACE_FLUSH_JOIN);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &p, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &a, &off), HVD_GPU_PLACE_FLUSH_JOIN);
        /* an op of several steps runs alone and leaves the group empty */
        hvd_gpu_plan_info_t big = gi(3, 4096, false, 1);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &big, &off), HVD_GPU_PLACE_ALONE);
        ck_assert_uint_eq(off, 0);
        ck_assert_uint_eq(g.n_ops, 0);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &a, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_uint_eq(off, 0);
        /* too many NCCL calls for one group */
        hvd_gpu_group_reset(&g);
        hvd_gpu_plan_info_t many = gi(1, 0, true, HVD_GPU_GROUP_MAX_CALLS / 2 + 1);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &many, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &many, &off), HVD_GPU_PLACE_FLUSH_JOIN);
        /* an op as large as the whole buffer fits an empty group */
        hvd_gpu_group_reset(&g);
        hvd_gpu_plan_info_t whole = gi(1, 4096, false, 1);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &whole, &off), HVD_GPU_PLACE_JOIN);
        ck_assert_int_eq(hvd_gpu_group_place(&g, &whole, &off), HVD_GPU_PLACE_FLUSH_JOIN);
}
END_TEST

START_TEST(test_gpu_plan_group_regions_from_real_plans) {
        /* what the module does: plan with the full capacity, place, plan again
         * at the offset; regions of one group never overlap */
        static float in[6][200], out[6][200];
        static uint8_t fbuf[8192] __attribute__((aligned(256)));
        hvd_gpu_group_t g;
        hvd_gpu_group_init(&g, sizeof fbuf);
        uint64_t lo[6], hi[6];
        int groups = 1;
        for (int k = 0; k < 6; k++) {
                hvd_xmember_t m[2] = { { .in = in[k], .out = out[k], .count = 200 },
                                       { .in = in[k], .out = out[k], .count = 150 + k } };
                hvd_xop_t op = xop(HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, m, 2);
                hvd_gpu_plan_args_t a = { .op = &op,
                                          .me = 0,
                                          .size = 2,
                                          .fbuf = ADDR(fbuf),
                                          .cap_bytes = sizeof fbuf,
                                          .features = ALL_FEATURES,
                                          .scratch = scratch };
                hvd_gpu_plan_info_t info;
                char err[128];
                ck_assert_int_eq(hvd_gpu_plan_op(&a, NULL, &info, err, sizeof err), 0);
                uint64_t off;
                hvd_gpu_place_t w = hvd_gpu_group_place(&g, &info, &off);
                ck_assert_int_ne(w, HVD_GPU_PLACE_ALONE);
                groups += w == HVD_GPU_PLACE_FLUSH_JOIN;
                a.fbuf += off;
                rec_t r = { 0 };
                hvd_gpu_emit_t e = { .batch = on_batch, .call = on_call, .step_end = on_step, .userdata = &r };
                ck_assert_int_eq(hvd_gpu_plan_op(&a, &e, &info, err, sizeof err), 0);
                lo[k] = UINT64_MAX;
                hi[k] = 0;
                for (size_t i = 0; i < r.n; i++)
                        if (r.ev[i].type == EV_IN)
                                for (uint32_t c = 0; c < r.ev[i].b->n; c++) {
                                        uint64_t d = r.ev[i].b->c[c].dst - ADDR(fbuf);
                                        lo[k] = d < lo[k] ? d : lo[k];
                                        hi[k] = d + r.ev[i].b->c[c].bytes > hi[k] ? d + r.ev[i].b->c[c].bytes : hi[k];
                                }
                ck_assert_uint_le(hi[k], sizeof fbuf);
                ck_assert_uint_eq(lo[k] % HVD_GPU_ALIGN_BYTES, 0);
                if (w == HVD_GPU_PLACE_JOIN && k > 0)
                        ck_assert_uint_ge(lo[k], hi[k - 1]);
                rec_free(&r);
        }
        ck_assert_int_eq(groups, 2); /* 6 ops of ~1.6 KiB in 8 KiB: 4 + 2 */
}
END_TEST

static Suite *gpu_plan_suite(void) {
        Suite *s = suite_create("gpu_plan");
        TCase *tc = tcase_create("plan");
        tcase_add_test(tc, test_gpu_plan_members_aligned_256);
        tcase_add_test(tc, test_gpu_plan_many_small_copies_few_launches);
        tcase_add_test(tc, test_gpu_plan_long_copy_cut_into_pieces);
        tcase_add_test(tc, test_gpu_plan_types_and_ops);
        tcase_add_test(tc, test_gpu_plan_direct_single_member);
        tcase_add_test(tc, test_gpu_plan_calls_rank_independent);
        tcase_add_test(tc, test_gpu_plan_rejects_bad_input);
        suite_add_tcase(s, tc);
        TCase *ts = tcase_create("simulated");
        tcase_set_timeout(ts, 60);
        tcase_add_test(ts, test_gpu_sim_allreduce_fused_windows_joined);
        tcase_add_test(ts, test_gpu_sim_broadcast);
        tcase_add_test(ts, test_gpu_sim_allgather_uneven);
        tcase_add_test(ts, test_gpu_sim_reducescatter);
        tcase_add_test(ts, test_gpu_sim_alltoall);
        suite_add_tcase(s, ts);
        TCase *tg = tcase_create("groups");
        tcase_add_test(tg, test_gpu_group_placement);
        tcase_add_test(tg, test_gpu_plan_group_regions_from_real_plans);
        suite_add_tcase(s, tg);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(gpu_plan_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
