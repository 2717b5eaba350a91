/* gpu_plan.c — the GPU data plane's plans, in pure C: fusion-buffer
 * layout, copy batching, NCCL steps and group placement (see gpu_plan.h).
 * Invariants: every call sequence depends only on rank-independent values
 * (schedule, agreed capacity); member regions, per-rank blocks and windows
 * start at multiples of HVD_GPU_ALIGN_BYTES; no allocation. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu_plan.h"
#include "hvd.pb-c.h"

#define A HVD_GPU_ALIGN_BYTES

_Static_assert(sizeof(hvd_gpu_batch_t) <= 4000, "the copy batch is a kernel parameter: keep it below 4 KiB");

static uint64_t min_u64(uint64_t a, uint64_t b) {
        return a < b ? a : b;
}
static uint64_t max_u64(uint64_t a, uint64_t b) {
        return a > b ? a : b;
}

/* ---- copies ---- */

void hvd_gpu_batcher_init(hvd_gpu_batcher_t *bt, hvd_gpu_copy_mode_t mode, hvd_dtype_t dtype, double scale,
                          hvd_gpu_batch_fn fn, void *userdata) {
        bt->b.n = 0;
        bt->b.mode = (uint32_t) mode;
        bt->b.dtype = (int32_t) dtype;
        bt->b.reserved = 0;
        bt->b.scale = scale;
        bt->fn = fn;
        bt->userdata = userdata;
        bt->launches = 0;
}

static int batcher_emit(hvd_gpu_batcher_t *bt) {
        if (bt->b.n == 0)
                return 0;
        int r = bt->fn ? bt->fn(bt->userdata, &bt->b) : 0;
        bt->launches++;
        bt->b.n = 0;
        return r;
}

int hvd_gpu_batcher_add(hvd_gpu_batcher_t *bt, uint64_t dst, uint64_t src, uint64_t bytes) {
        for (uint64_t off = 0; off < bytes; off += HVD_GPU_PIECE_BYTES) {
                if (bt->b.n == HVD_GPU_BATCH_CAPACITY) {
                        int r = batcher_emit(bt);
                        if (r < 0)
                                return r;
                }
                hvd_gpu_copy_t *c = &bt->b.c[bt->b.n++];
                c->src = src ? src + off : 0;
                c->dst = dst + off;
                c->bytes = min_u64(HVD_GPU_PIECE_BYTES, bytes - off);
        }
        return 0;
}

int hvd_gpu_batcher_finish(hvd_gpu_batcher_t *bt) {
        return batcher_emit(bt);
}

/* ---- types and reductions ---- */

size_t hvd_gpu_dtype_size(hvd_dtype_t dt) {
        static const uint8_t sizes[_HVD_DTYPE_COUNT] = {
                [HVD_UINT8] = 1,    [HVD_INT8] = 1,    [HVD_INT32] = 4,   [HVD_INT64] = 8, [HVD_FLOAT16] = 2,
                [HVD_BFLOAT16] = 2, [HVD_FLOAT32] = 4, [HVD_FLOAT64] = 8, [HVD_BOOL] = 1,  [HVD_INT16] = 2,
        };
        return (unsigned) dt < _HVD_DTYPE_COUNT ? sizes[dt] : 0;
}

hvd_gpu_type_t hvd_gpu_reduce_type(hvd_dtype_t dt, uint32_t features) {
        switch (dt) {
        case HVD_UINT8:
        case HVD_BOOL: return HVD_GPU_T_UINT8;
        case HVD_INT8: return HVD_GPU_T_INT8;
        case HVD_INT32: return HVD_GPU_T_INT32;
        case HVD_INT64: return HVD_GPU_T_INT64;
        case HVD_FLOAT16: return HVD_GPU_T_FLOAT16;
        case HVD_BFLOAT16: return features & HVD_GPU_HAS_BF16 ? HVD_GPU_T_BFLOAT16 : HVD_GPU_T_NONE;
        case HVD_FLOAT32: return HVD_GPU_T_FLOAT32;
        case HVD_FLOAT64: return HVD_GPU_T_FLOAT64;
        default: /* int16: NCCL has no 16-bit integer type */ return HVD_GPU_T_NONE;
        }
}

int hvd_gpu_reduce_plan(const char *name, hvd_dtype_t dt, hvd_reduce_op_t op, double prescale, double postscale,
                        int size, uint32_t features, hvd_gpu_reduce_t *ret, char *err, size_t err_len) {
        if (!hvd_gpu_dtype_size(dt)) {
                snprintf(err, err_len, "'%s': invalid dtype %d", name, (int) dt);
                return -EINVAL;
        }
        if ((unsigned) op >= _HVD_REDUCE_COUNT) {
                snprintf(err, err_len, "'%s': invalid reduce op %d", name, (int) op);
                return -EINVAL;
        }
        hvd_gpu_reduce_t r = { .type = hvd_gpu_reduce_type(dt, features), .pre_scale = 1.0, .post_scale = 1.0 };
        if (r.type == HVD_GPU_T_NONE) {
                if (dt == HVD_BFLOAT16)
                        snprintf(err, err_len,
                                 "'%s': bfloat16 reductions need NCCL >= 2.10 (ncclBfloat16); this NCCL has none: "
                                 "reduce in float32",
                                 name);
                else
                        snprintf(err, err_len,
                                 "'%s': int16 cannot be reduced on the GPU: NCCL has no 16-bit integer type; use "
                                 "int32 or a floating-point type",
                                 name);
                return -EOPNOTSUPP;
        }
        if (dt == HVD_BOOL) {
                /* or / and over values normalised to 0/1 on the way in; never scaled */
                r.op = op == HVD_REDUCE_MIN || op == HVD_REDUCE_PRODUCT ? HVD_GPU_OP_MIN : HVD_GPU_OP_MAX;
                r.pre_mode = HVD_GPU_COPY_BOOL;
                r.post_mode = HVD_GPU_COPY;
                *ret = r;
                return 0;
        }
        double post = postscale;
        switch (op) {
        case HVD_REDUCE_SUM: r.op = HVD_GPU_OP_SUM; break;
        case HVD_REDUCE_MIN: r.op = HVD_GPU_OP_MIN; break;
        case HVD_REDUCE_MAX: r.op = HVD_GPU_OP_MAX; break;
        case HVD_REDUCE_PRODUCT: r.op = HVD_GPU_OP_PROD; break;
        default: /* average */
                if (features & HVD_GPU_HAS_AVG)
                        r.op = HVD_GPU_OP_AVG;
                else {
                        r.op = HVD_GPU_OP_SUM;
                        post /= size;
                }
                break;
        }
        r.pre_scale = prescale;
        r.pre_mode = prescale != 1.0 ? HVD_GPU_COPY_SCALE : HVD_GPU_COPY;
        r.post_scale = post;
        r.post_mode = post != 1.0 ? HVD_GPU_COPY_SCALE : HVD_GPU_COPY;
        *ret = r;
        return 0;
}

/* ---- operations ---- */

typedef struct plan {
        const hvd_gpu_plan_args_t *a;
        const hvd_xop_t *op;
        const hvd_gpu_emit_t *e;
        hvd_gpu_plan_info_t *info;
        uint64_t es, C, fbuf;
        int me, N;
        uint64_t *so; /* per-rank running stream offsets [N] */
        bool calls_done;
        hvd_gpu_batcher_t in, out;
} plan_t;

static int batch_in(void *userdata, const hvd_gpu_batch_t *b) {
        plan_t *p = userdata;
        return p->e->batch(p->e->userdata, HVD_GPU_PHASE_IN, b);
}
static int batch_out(void *userdata, const hvd_gpu_batch_t *b) {
        plan_t *p = userdata;
        return p->e->batch(p->e->userdata, HVD_GPU_PHASE_OUT, b);
}

static void step_begin(plan_t *p, hvd_gpu_copy_mode_t in_mode, double in_scale, hvd_gpu_copy_mode_t out_mode,
                       double out_scale) {
        hvd_gpu_batcher_init(&p->in, in_mode, p->op->dtype, in_scale, batch_in, p);
        hvd_gpu_batcher_init(&p->out, out_mode, p->op->dtype, out_scale, batch_out, p);
        p->calls_done = false;
}

static int copy_in(plan_t *p, uint64_t dst, uint64_t src, uint64_t bytes) {
        return p->e ? hvd_gpu_batcher_add(&p->in, dst, src, bytes) : 0;
}

static int call(plan_t *p, uint32_t kind, int32_t type, uint32_t op, int peer, uint64_t send, uint64_t recv,
                uint64_t count) {
        p->info->calls++;
        if (!p->e)
                return 0;
        int r = hvd_gpu_batcher_finish(&p->in); /* the step's copies in go first */
        if (r < 0)
                return r;
        hvd_gpu_call_t c = {
                .kind = kind, .type = type, .op = op, .peer = peer, .send = send, .recv = recv, .count = count
        };
        return p->e->call(p->e->userdata, &c);
}

static int copy_out(plan_t *p, uint64_t dst, uint64_t src, uint64_t bytes) {
        return p->e ? hvd_gpu_batcher_add(&p->out, dst, src, bytes) : 0;
}

static int step_end(plan_t *p) {
        p->info->steps++;
        if (!p->e)
                return 0;
        int r = hvd_gpu_batcher_finish(&p->in);
        if (r >= 0)
                r = hvd_gpu_batcher_finish(&p->out);
        if (r >= 0)
                r = p->e->step_end(p->e->userdata);
        return r;
}

#define ADDR(ptr) ((uint64_t) (uintptr_t) (ptr))

/* allreduce and broadcast: one stream of members */
static int plan_flat(plan_t *p, bool reduce) {
        const hvd_xop_t *op = p->op;
        const hvd_gpu_reduce_t *rd = &p->info->reduce;
        uint64_t es = p->es, C = p->C, fbuf = p->fbuf;
        bool root = !reduce && p->me == op->root;
        int r;
        hvd_gpu_copy_mode_t in_mode = reduce ? rd->pre_mode : HVD_GPU_COPY;
        hvd_gpu_copy_mode_t out_mode = reduce ? rd->post_mode : HVD_GPU_COPY;
        double in_scale = reduce ? rd->pre_scale : 1.0, out_scale = reduce ? rd->post_scale : 1.0;
        int32_t type = reduce ? rd->type : HVD_GPU_T_UINT8;
        uint32_t kind = reduce ? HVD_GPU_CALL_ALLREDUCE : HVD_GPU_CALL_BROADCAST;
        uint64_t unit = reduce ? es : 1; /* bytes per NCCL element */

        if (op->n == 1) {
                /* direct: NCCL on the member itself, window by window; the
                 * fusion buffer stands in for a missing input or output */
                const hvd_xmember_t *m = &op->m[0];
                uint64_t bytes = m->count * es;
                p->info->direct = true;
                p->info->fbuf_bytes = hvd_gpu_align_up(min_u64(bytes, C));
                p->info->max_step_calls = 1;
                for (uint64_t off = 0; off < bytes; off += C) {
                        uint64_t w = min_u64(C, bytes - off);
                        uint64_t dst = m->out ? ADDR(m->out) + off : fbuf, src;
                        step_begin(p, in_mode, in_scale, out_mode, out_scale);
                        bool stage = reduce ? !m->in || in_mode != HVD_GPU_COPY : root && !m->in;
                        if (stage) {
                                if ((r = copy_in(p, dst, m->in ? ADDR(m->in) + off : 0, w)) < 0)
                                        return r;
                                src = dst;
                        } else
                                src = (reduce || root) ? ADDR(m->in) + off : dst;
                        if ((r = call(p, kind, type, rd->op, op->root, src, dst, w / unit)) < 0)
                                return r;
                        if (m->out && out_mode != HVD_GPU_COPY && (r = copy_out(p, dst, dst, w)) < 0)
                                return r;
                        if ((r = step_end(p)) < 0)
                                return r;
                }
                return 0;
        }

        /* fused: members side by side, each at a multiple of A */
        uint64_t total = 0;
        for (size_t i = 0; i < op->n; i++)
                total = hvd_gpu_align_up(total) + op->m[i].count * es;
        p->info->fbuf_bytes = hvd_gpu_align_up(min_u64(total, C));
        p->info->max_step_calls = 1;
        for (uint64_t a = 0; a < total; a += C) {
                uint64_t b = min_u64(a + C, total), o = 0;
                step_begin(p, in_mode, in_scale, out_mode, out_scale);
                if (reduce || root) {
                        for (size_t i = 0; i < op->n && o < b; i++) {
                                const hvd_xmember_t *m = &op->m[i];
                                o = hvd_gpu_align_up(o);
                                uint64_t len = m->count * es, x = max_u64(a, o), y = min_u64(b, o + len);
                                if (x < y &&
                                    (r = copy_in(p, fbuf + (x - a), m->in ? ADDR(m->in) + (x - o) : 0, y - x)) < 0)
                                        return r;
                                o += len;
                        }
                }
                if ((r = call(p, kind, type, rd->op, op->root, fbuf, fbuf, (b - a) / unit)) < 0)
                        return r;
                o = 0;
                for (size_t i = 0; i < op->n && o < b; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        o = hvd_gpu_align_up(o);
                        uint64_t len = m->count * es, x = max_u64(a, o), y = min_u64(b, o + len);
                        if (x < y && m->out && (r = copy_out(p, ADDR(m->out) + (x - o), fbuf + (x - a), y - x)) < 0)
                                return r;
                        o += len;
                }
                if ((r = step_end(p)) < 0)
                        return r;
        }
        return 0;
}

/* Bytes of member i that rank j owns (allgather: contributes; reducescatter:
 * keeps), and where they start in the member's input (reducescatter) or
 * output (allgather: the sum over ranks before j, computed by the caller). */
static uint64_t part_bytes(const plan_t *p, const hvd_xmember_t *m, int j, uint64_t *in_off) {
        uint64_t rb = m->row_elems * p->es;
        if (p->op->kind == HVD__KIND__KIND_ALLGATHER) {
                if (in_off)
                        *in_off = 0;
                return (uint64_t) m->rank_rows[j] * rb;
        }
        int64_t start, n;
        hvd_reducescatter_rows(m->rows, p->N, j, &start, &n);
        if (in_off)
                *in_off = (uint64_t) start * rb;
        return (uint64_t) n * rb;
}

/* allgather and reducescatter: rank j's pieces of every member form its
 * stream (each piece at a multiple of A); streams are padded to one block
 * length and moved window by window, window w of rank j at fbuf + j * w. */
static int plan_blocked(plan_t *p, bool gather) {
        const hvd_xop_t *op = p->op;
        const hvd_gpu_reduce_t *rd = &p->info->reduce;
        uint64_t es = p->es, C = p->C, fbuf = p->fbuf, *so = p->so;
        int N = p->N, me = p->me, r;
        hvd_gpu_copy_mode_t in_mode = gather ? HVD_GPU_COPY : rd->pre_mode;
        hvd_gpu_copy_mode_t out_mode = gather ? HVD_GPU_COPY : rd->post_mode;
        double in_scale = gather ? 1.0 : rd->pre_scale, out_scale = gather ? 1.0 : rd->post_scale;
        p->info->max_step_calls = 1;

        if (op->n == 1) {
                /* direct when NCCL's equal blocks fit the member as it is */
                const hvd_xmember_t *m = &op->m[0];
                uint64_t part = part_bytes(p, m, 0, NULL);
                bool even = true;
                for (int j = 1; j < N && even; j++)
                        even = part_bytes(p, m, j, NULL) == part;
                if (even && (gather || in_mode == HVD_GPU_COPY) && part <= C / (uint64_t) N) {
                        p->info->direct = true;
                        p->info->fbuf_bytes = hvd_gpu_align_up(part * (uint64_t) N);
                        if (part == 0)
                                return 0;
                        step_begin(p, in_mode, in_scale, out_mode, out_scale);
                        uint64_t send, recv;
                        if (gather) {
                                recv = m->out ? ADDR(m->out) : fbuf;
                                send = m->in ? ADDR(m->in) : fbuf + (uint64_t) me * part;
                                if (!m->in && (r = copy_in(p, send, 0, part)) < 0)
                                        return r;
                                r = call(p, HVD_GPU_CALL_ALLGATHER, HVD_GPU_T_UINT8, 0, 0, send, recv, part);
                        } else {
                                send = m->in ? ADDR(m->in) : fbuf;
                                if (!m->in && (r = copy_in(p, fbuf, 0, part * (uint64_t) N)) < 0)
                                        return r;
                                recv = m->out ? ADDR(m->out) : m->in ? fbuf : fbuf + (uint64_t) me * part;
                                r = call(p, HVD_GPU_CALL_REDUCESCATTER, rd->type, rd->op, 0, send, recv, part / es);
                                if (r >= 0 && m->out && out_mode != HVD_GPU_COPY)
                                        r = copy_out(p, recv, recv, part);
                        }
                        return r < 0 ? r : step_end(p);
                }
        }

        /* fused */
        uint64_t blk = 0;
        for (int j = 0; j < N; j++)
                so[j] = 0;
        for (size_t i = 0; i < op->n; i++)
                for (int j = 0; j < N; j++)
                        so[j] = hvd_gpu_align_up(so[j]) + part_bytes(p, &op->m[i], j, NULL);
        for (int j = 0; j < N; j++)
                blk = max_u64(blk, so[j]);
        blk = hvd_gpu_align_up(blk);
        uint64_t W = C / (uint64_t) N / A * A;
        p->info->fbuf_bytes = (uint64_t) N * min_u64(blk, W);
        for (uint64_t base = 0; base < blk; base += W) {
                uint64_t ws = min_u64(W, blk - base), end = base + ws;
                step_begin(p, in_mode, in_scale, out_mode, out_scale);
                /* in: allgather my stream; reducescatter every rank's stream from my input */
                for (int j = 0; j < N; j++)
                        so[j] = 0;
                for (size_t i = 0; i < op->n; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        for (int j = gather ? me : 0; j < (gather ? me + 1 : N); j++) {
                                uint64_t ioff, len = part_bytes(p, m, j, &ioff), s = hvd_gpu_align_up(so[j]);
                                uint64_t x = max_u64(base, s), y = min_u64(end, s + len);
                                so[j] = s + len;
                                if (x >= y)
                                        continue;
                                r = copy_in(p, fbuf + (uint64_t) j * ws + (x - base),
                                            m->in ? ADDR(m->in) + ioff + (x - s) : 0, y - x);
                                if (r < 0)
                                        return r;
                        }
                }
                if (gather)
                        r = call(p, HVD_GPU_CALL_ALLGATHER, HVD_GPU_T_UINT8, 0, 0, fbuf + (uint64_t) me * ws, fbuf, ws);
                else
                        r = call(p, HVD_GPU_CALL_REDUCESCATTER, rd->type, rd->op, 0, fbuf, fbuf + (uint64_t) me * ws,
                                 ws / es);
                if (r < 0)
                        return r;
                /* out: allgather every rank's piece to its place; reducescatter my piece */
                for (int j = 0; j < N; j++)
                        so[j] = 0;
                for (size_t i = 0; i < op->n; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        uint64_t disp = 0; /* allgather: rank j's rows in the output */
                        for (int j = 0; j < N; j++) {
                                uint64_t len = part_bytes(p, m, j, NULL), s = hvd_gpu_align_up(so[j]);
                                uint64_t x = max_u64(base, s), y = min_u64(end, s + len);
                                so[j] = s + len;
                                if (x < y && m->out && (gather || j == me)) {
                                        r = copy_out(p, ADDR(m->out) + (gather ? disp : 0) + (x - s),
                                                     fbuf + (uint64_t) j * ws + (x - base), y - x);
                                        if (r < 0)
                                                return r;
                                }
                                disp += len;
                        }
                }
                if ((r = step_end(p)) < 0)
                        return r;
        }
        return 0;
}

#define SPLIT(m, src, dst) ((uint64_t) (m)->splits[(size_t) (src) * (size_t) N + (size_t) (dst)])

/* alltoall: grouped send/recv straight between the members' buffers; my
 * own rows are a copy. Members go into steps of at most max_calls calls,
 * counted as 2 (N - 1) per member on every rank. */
static int plan_alltoall(plan_t *p) {
        const hvd_xop_t *op = p->op;
        int N = p->N, me = p->me, r;
        uint64_t es = p->es, weight = 2 * (uint64_t) (N - 1), max_calls = p->a->max_calls;
        p->info->p2p = true;
        p->info->direct = true;
        for (size_t i0 = 0; i0 < op->n;) {
                size_t i1 = i0 + 1;
                uint64_t w = weight;
                while (i1 < op->n && w + weight <= max_calls) {
                        w += weight;
                        i1++;
                }
                p->info->max_step_calls = max_u64(p->info->max_step_calls, w);
                step_begin(p, HVD_GPU_COPY, 1.0, HVD_GPU_COPY, 1.0);
                for (size_t i = i0; i < i1; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        uint64_t rb = m->row_elems * es, soff = 0, roff = 0;
                        for (int q = 0; q < me; q++) {
                                soff += SPLIT(m, me, q) * rb;
                                roff += SPLIT(m, q, me) * rb;
                        }
                        if ((r = copy_in(p, ADDR(m->out) + roff, ADDR(m->in) + soff, SPLIT(m, me, me) * rb)) < 0)
                                return r;
                }
                for (size_t i = i0; i < i1; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        uint64_t rb = m->row_elems * es, soff = 0, roff = 0;
                        for (int q = 0; q < N; q++) {
                                uint64_t sb = SPLIT(m, me, q) * rb, rcv = SPLIT(m, q, me) * rb;
                                if (q != me && sb &&
                                    (r = call(p, HVD_GPU_CALL_SEND, HVD_GPU_T_UINT8, 0, q, ADDR(m->in) + soff, 0, sb)) <
                                            0)
                                        return r;
                                if (q != me && rcv &&
                                    (r = call(p, HVD_GPU_CALL_RECV, HVD_GPU_T_UINT8, 0, q, 0, ADDR(m->out) + roff,
                                              rcv)) < 0)
                                        return r;
                                soff += sb;
                                roff += rcv;
                        }
                }
                if ((r = step_end(p)) < 0)
                        return r;
                i0 = i1;
        }
        return 0;
}

/* Checks what the plan relies on; messages name the tensor. */
static int validate(plan_t *p, char *err, size_t err_len) {
        const hvd_xop_t *op = p->op;
        const char *name = op->name ? op->name : "?";
        int N = p->N;
        uint64_t es = p->es, lim = UINT64_MAX / 4;
        for (size_t i = 0; i < op->n; i++) {
                const hvd_xmember_t *m = &op->m[i];
                if ((m->in && ADDR(m->in) % es) || (m->out && ADDR(m->out) % es)) {
                        snprintf(err, err_len, "'%s': member %zu: buffer address not aligned to its element size (%u)",
                                 name, i, (unsigned) es);
                        return -EINVAL;
                }
                if (m->count > lim / es || m->row_elems > lim / es) {
                        snprintf(err, err_len, "'%s': member %zu: tensor too large", name, i);
                        return -EINVAL;
                }
                switch (op->kind) {
                case HVD__KIND__KIND_ALLGATHER:
                        if (!m->rank_rows) {
                                snprintf(err, err_len, "'%s': allgather member %zu has no per-rank rows", name, i);
                                return -EINVAL;
                        }
                        for (int j = 0; j < N; j++)
                                if (m->rank_rows[j] < 0 || (uint64_t) m->rank_rows[j] > lim / (m->row_elems * es + 1)) {
                                        snprintf(err, err_len, "'%s': rank %d contributes an invalid row count", name,
                                                 j);
                                        return -EINVAL;
                                }
                        break;
                case HVD__KIND__KIND_REDUCESCATTER:
                        if (m->rows < 0 || (uint64_t) m->rows * m->row_elems != m->count) {
                                snprintf(err, err_len,
                                         "'%s': reducescatter member %zu: %lld rows of %llu elements is not "
                                         "%llu elements",
                                         name, i, (long long) m->rows, (unsigned long long) m->row_elems,
                                         (unsigned long long) m->count);
                                return -EINVAL;
                        }
                        break;
                case HVD__KIND__KIND_ALLTOALL: {
                        if (!m->splits) {
                                snprintf(err, err_len, "'%s': alltoall member %zu has no splits", name, i);
                                return -EINVAL;
                        }
                        uint64_t sent = 0, recvd = 0;
                        for (int q = 0; q < N; q++) {
                                int64_t s = m->splits[(size_t) p->me * N + q], t = m->splits[(size_t) q * N + p->me];
                                if (s < 0 || t < 0 || (uint64_t) s > lim / (m->row_elems * es + 1) ||
                                    (uint64_t) t > lim / (m->row_elems * es + 1)) {
                                        snprintf(err, err_len, "'%s': alltoall member %zu has an invalid split", name,
                                                 i);
                                        return -EINVAL;
                                }
                                sent += (uint64_t) s * m->row_elems;
                                recvd += (uint64_t) t * m->row_elems;
                        }
                        if ((sent && !m->in) || (recvd && !m->out)) {
                                snprintf(err, err_len,
                                         "'%s': alltoall on the GPU needs an input and an output on "
                                         "every rank (a joined rank cannot take part)",
                                         name);
                                return -EINVAL;
                        }
                        break;
                }
                default: break;
                }
        }
        return 0;
}

int hvd_gpu_plan_op(const hvd_gpu_plan_args_t *a, const hvd_gpu_emit_t *e, hvd_gpu_plan_info_t *info, char *err,
                    size_t err_len) {
        const hvd_xop_t *op = a->op;
        const char *name = op->name ? op->name : "?";
        plan_t p = { .a = a,
                     .op = op,
                     .e = e,
                     .info = info,
                     .C = a->cap_bytes,
                     .fbuf = a->fbuf,
                     .me = a->me,
                     .N = a->size,
                     .so = a->scratch };
        uint64_t one_rank;
        if (!p.so && p.N == 1)
                p.so = &one_rank;
        hvd_gpu_plan_args_t args = *a;
        if (!args.max_calls)
                args.max_calls = HVD_GPU_GROUP_MAX_CALLS;
        p.a = &args;
        *info = (hvd_gpu_plan_info_t){ 0 };
        p.es = hvd_gpu_dtype_size(op->dtype);
        if (!p.es) {
                snprintf(err, err_len, "'%s': invalid dtype %d", name, (int) op->dtype);
                return -EINVAL;
        }
        if (p.N < 1 || p.me < 0 || p.me >= p.N || p.C % A || p.C < (uint64_t) p.N * A || (op->n && !op->m) ||
            (p.N > 1 && !p.so)) {
                snprintf(err, err_len, "'%s': invalid GPU plan arguments (rank %d of %d, capacity %llu)", name, p.me,
                         p.N, (unsigned long long) p.C);
                return -EINVAL;
        }
        int r = validate(&p, err, err_len);
        if (r < 0)
                return r;
        switch (op->kind) {
        case HVD__KIND__KIND_ALLREDUCE:
        case HVD__KIND__KIND_REDUCESCATTER:
                r = hvd_gpu_reduce_plan(name, op->dtype, op->reduce_op, op->prescale, op->postscale, p.N, a->features,
                                        &info->reduce, err, err_len);
                if (r < 0)
                        return r;
                return op->kind == HVD__KIND__KIND_ALLREDUCE ? plan_flat(&p, true) : plan_blocked(&p, false);
        case HVD__KIND__KIND_BROADCAST:
                if (op->root < 0 || op->root >= p.N) {
                        snprintf(err, err_len, "'%s': broadcast root %d out of range (%d ranks)", name, op->root, p.N);
                        return -EINVAL;
                }
                return plan_flat(&p, false);
        case HVD__KIND__KIND_ALLGATHER: return plan_blocked(&p, true);
        case HVD__KIND__KIND_ALLTOALL: return plan_alltoall(&p);
        default:
                snprintf(err, err_len, "'%s': operation kind %u is not a GPU collective", name, op->kind);
                return -EOPNOTSUPP;
        }
}

/* ---- groups ---- */

void hvd_gpu_group_init(hvd_gpu_group_t *g, uint64_t cap_bytes) {
        g->cap_bytes = cap_bytes;
        hvd_gpu_group_reset(g);
}

void hvd_gpu_group_reset(hvd_gpu_group_t *g) {
        g->used = 0;
        g->calls = 0;
        g->n_ops = 0;
        g->p2p = -1;
}

hvd_gpu_place_t hvd_gpu_group_place(hvd_gpu_group_t *g, const hvd_gpu_plan_info_t *info, uint64_t *offset) {
        if (info->steps > 1) {
                hvd_gpu_group_reset(g);
                *offset = 0;
                return HVD_GPU_PLACE_ALONE;
        }
        uint64_t need = hvd_gpu_align_up(info->fbuf_bytes);
        int kind = info->steps == 0 ? -1 : info->p2p;
        bool fits = g->used + need <= g->cap_bytes && g->calls + info->max_step_calls <= HVD_GPU_GROUP_MAX_CALLS &&
                    (g->p2p < 0 || kind < 0 || g->p2p == kind);
        hvd_gpu_place_t where = HVD_GPU_PLACE_JOIN;
        if (g->n_ops > 0 && !fits) {
                hvd_gpu_group_reset(g);
                where = HVD_GPU_PLACE_FLUSH_JOIN;
        }
        *offset = g->used;
        g->used += need;
        g->calls += info->max_step_calls;
        g->n_ops++;
        if (kind >= 0)
                g->p2p = kind;
        return where;
}
