/* cpu_rsring.c — reducescatter across nodes as a ring reduce-scatter
 * alone. An allreduce followed by keeping one's own rows sends 2(C-1)/C of
 * the tensor from every node and receives as much; this sends and receives
 * (C-1)/C, and reduces each byte once, as the allreduce's first half does.
 * Block j of the ring holds the rows of node j's ranks, member by member;
 * at step t node c sends block c-t-1 and receives block c-t-2 (mod C),
 * which it reduces with its own contribution, so after C-1 steps the last
 * block it receives, its own, is the full reduction. A block is a list of
 * pieces (runs of rows), each with its own source and destination, so the
 * ring runs straight from the inputs into the outputs where a node has one
 * rank, and over a slice of the shared-memory slot where it has several. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "cpu_internal.h"
#include "hvd.pb-c.h"
#include "reduce.h"
#include "tcp.h"
#include "util.h"

#define RS_MAX_STEPS 1024 /* C-1 steps: up to 1025 nodes, as the allreduce's ring */

/* A run of rows of one block: the ring's bytes [end - its length, end). */
typedef struct rs_piece {
        uint64_t end;
        const uint8_t *src; /* this node's contribution to them */
        uint8_t *dst;       /* where their reduction goes (may be src) */
} rs_piece_t;

struct rsring {
        hvd_dtype_t dt;
        hvd_reduce_op_t op;
        size_t es;
        const hvd_cpu_group_t *g; /* the ring's ranks: block j is position j's */
        int C, c;
        double scale;
        rs_piece_t *p; /* [np], block by block; grows, never shrinks */
        size_t p_cap, np;
        int *node_ranks, *node_first;    /* node j's ranks: node_ranks[node_first[j] .. node_first[j + 1]) */
        uint64_t bend[RS_MAX_STEPS + 1]; /* block j ends at bend[j] */
        uint8_t *tmp;                    /* a received block's frames, reduced as they arrive */
        uint64_t send_len[RS_MAX_STEPS], recv_len[RS_MAX_STEPS];
        uint64_t done[RS_MAX_STEPS]; /* bytes of step t's block reduced (acquire/release) */
};

void hvd_cpu_rsring_free(struct rsring *g) {
        if (g) {
                free(g->p);
                free(g->node_ranks);
                free(g->node_first);
        }
        free(g);
}

static inline int rs_sb(const struct rsring *g, int t) {
        return ((g->c - t - 1) % g->C + g->C) % g->C;
}

static inline int rs_rb(const struct rsring *g, int t) {
        return ((g->c - t - 2) % g->C + 2 * g->C) % g->C;
}

static inline uint64_t rs_b0(const struct rsring *g, int j) {
        return j ? g->bend[j - 1] : 0;
}

/* The piece holding ring byte at (the first that ends after it). */
static const rs_piece_t *rs_piece(const struct rsring *g, uint64_t at, uint64_t *beg) {
        size_t lo = 0, hi = g->np;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (g->p[mid].end > at)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        *beg = lo ? g->p[lo - 1].end : 0;
        return &g->p[lo];
}

static const uint8_t *rs_send_at(void *ud, size_t seg, uint64_t off, uint64_t *ready) {
        struct rsring *g = ud;
        int t = (int) seg;
        /* step 0 sends this node's contribution; step t the block step t-1 reduced */
        uint64_t have = t == 0 ? g->send_len[0] : __atomic_load_n(&g->done[t - 1], __ATOMIC_ACQUIRE);
        uint64_t at = rs_b0(g, rs_sb(g, t)) + off, beg;
        if (have <= off) {
                *ready = 0;
                return NULL;
        }
        const rs_piece_t *p = rs_piece(g, at, &beg);
        *ready = HVD_MIN(have - off, p->end - at);
        return (t == 0 ? p->src : p->dst) + (at - beg);
}

static uint8_t *rs_recv_at(void *ud, size_t seg, uint64_t off, uint64_t *room) {
        struct rsring *g = ud;
        *room = g->recv_len[seg] - off;
        return g->tmp + off; /* reduced frame by frame before the next step reuses it */
}

static int rs_received(void *ud, size_t seg, uint64_t off, uint64_t len, char *err, size_t err_len) {
        (void) err;
        (void) err_len;
        struct rsring *g = ud;
        int t = (int) seg;
        /* the last step completes this node's block: scaled as it is reduced */
        double scale = t == g->C - 2 ? g->scale : 1.0;
        uint64_t at = rs_b0(g, rs_rb(g, t)) + off;
        for (uint64_t k = 0; k < len;) {
                uint64_t beg;
                const rs_piece_t *p = rs_piece(g, at + k, &beg);
                uint64_t l = HVD_MIN(p->end - (at + k), len - k), d = at + k - beg;
                const void *srcs[2] = { p->src + d, g->tmp + off + k };
                hvd_reduce_n(g->dt, g->op, p->dst + d, srcs, 2, l / g->es, scale);
                k += l;
        }
        __atomic_store_n(&g->done[t], off + len, __ATOMIC_RELEASE);
        return 0;
}

/* The ring's state for op among grp in *ret, its pieces emptied: 0, or
 * < 0 with err set (out of memory, more ranks than the ring takes). */
static int rs_begin(hvd_backend_t *b, const hvd_cpu_group_t *grp, const hvd_xop_t *op, double scale,
                    struct rsring **ret, char *err, size_t err_len) {
        int C = b->cross_size;
        if (grp->n - 1 > RS_MAX_STEPS) {
                snprintf(err, err_len, "%d ranks in a ring: the CPU ring supports at most %d", grp->n,
                         RS_MAX_STEPS + 1);
                return -EINVAL;
        }
        struct rsring *g = b->rsring;
        if (!g) {
                g = calloc(1, sizeof *g);
                if (g) {
                        g->node_ranks = malloc((size_t) b->g_size * sizeof *g->node_ranks);
                        g->node_first = calloc((size_t) C + 1, sizeof *g->node_first);
                }
                if (!g || !g->node_ranks || !g->node_first) {
                        hvd_cpu_rsring_free(g);
                        snprintf(err, err_len, "%s: out of memory for the reduce-scatter ring", op->name);
                        return -ENOMEM;
                }
                /* the ranks of each node in rank order (a counting sort):
                 * the order of a block's pieces on every node */
                for (int r = 0; r < b->g_size; r++)
                        g->node_first[b->rank_cross[r] + 1]++;
                for (int j = 0; j < C; j++)
                        g->node_first[j + 1] += g->node_first[j];
                for (int r = 0; r < b->g_size; r++)
                        g->node_ranks[g->node_first[b->rank_cross[r]]++] = r;
                for (int j = C; j > 0; j--) /* each start moved to its node's end: back */
                        g->node_first[j] = g->node_first[j - 1];
                g->node_first[0] = 0;
                b->rsring = g;
        }
        g->dt = op->dtype;
        g->op = op->reduce_op;
        g->es = hvd_dtype_size(op->dtype);
        g->g = grp;
        g->C = grp->n;
        g->c = grp->me;
        g->scale = scale;
        g->np = 0;
        *ret = g;
        return 0;
}

/* Appends bytes [src, src + len) reduced into dst to the ring's bytes,
 * as part of the piece before when they continue it. */
static int rs_add(struct rsring *g, const uint8_t *src, uint8_t *dst, uint64_t len) {
        if (!len)
                return 0;
        uint64_t end = g->np ? g->p[g->np - 1].end : 0;
        if (g->np) {
                rs_piece_t *q = &g->p[g->np - 1];
                uint64_t ql = q->end - (g->np > 1 ? g->p[g->np - 2].end : 0);
                if (q->src + ql == src && q->dst + ql == dst) {
                        q->end += len;
                        return 0;
                }
        }
        if (g->np == g->p_cap) {
                size_t cap = g->p_cap ? 2 * g->p_cap : 64;
                rs_piece_t *p = realloc(g->p, cap * sizeof *p);
                if (!p)
                        return -ENOMEM;
                g->p = p;
                g->p_cap = cap;
        }
        g->p[g->np++] = (rs_piece_t){ .end = end + len, .src = src, .dst = dst };
        return 0;
}

/* Block j ends here. */
static void rs_close(struct rsring *g, int j) {
        g->bend[j] = g->np ? g->p[g->np - 1].end : 0;
}

/* Runs the ring over the blocks planned. */
static int rs_run(hvd_backend_t *b, struct rsring *g, const hvd_xop_t *op, char *err, size_t err_len) {
        int C = g->C;
        uint64_t blk = 0;
        for (int t = 0; t < C - 1; t++) {
                g->send_len[t] = g->bend[rs_sb(g, t)] - rs_b0(g, rs_sb(g, t));
                g->recv_len[t] = g->bend[rs_rb(g, t)] - rs_b0(g, rs_rb(g, t));
                blk = HVD_MAX(blk, g->recv_len[t]);
                g->done[t] = 0;
        }
        if (!(g->tmp = hvd_cpu_scratch(b, blk ? blk : 1))) {
                snprintf(err, err_len, "%s: out of memory for the reduce-scatter ring", op->name);
                return -ENOMEM;
        }
        hvd_tcp_stream_t s = {
                .to = hvd_group_rank(g->g, (g->c + 1) % C),
                .from = hvd_group_rank(g->g, (g->c + C - 1) % C),
                .n_send = (size_t) (C - 1),
                .n_recv = (size_t) (C - 1),
                .send_len = g->send_len,
                .recv_len = g->recv_len,
                .send_at = rs_send_at,
                .recv_at = rs_recv_at,
                .received = rs_received,
                .ud = g,
                .concurrent = true,
        };
        return hvd_tcp_stream(b->tcp, &s, err, err_len);
}

int hvd_cpu_reducescatter_ring(hvd_backend_t *b, const hvd_cpu_group_t *grp, const hvd_xop_t *op, char *err,
                               size_t err_len) {
        struct rsring *g;
        int r = rs_begin(b, grp, op, hvd_cpu_reduce_scale(op, grp->space), &g, err, err_len);
        if (r < 0)
                return r;
        size_t es = g->es;
        uint64_t total = 0;
        for (size_t i = 0; i < op->n; i++)
                total += op->m[i].count * es;
        /* a rank contributes its inputs as they are, unless prescaled: then
         * its contribution is staged in acc first; acc also holds the
         * blocks on their way. Every member has an input and an output
         * (a reducescatter does not run while a rank is joined), but
         * those of no elements, which may be NULL and are never touched. */
        bool stage = op->prescale != 1.0;
        uint8_t *acc = hvd_cpu_rs_full(b, total ? total : 1);
        if (!acc) {
                snprintf(err, err_len, "%s: out of memory for the reduce-scatter ring", op->name);
                return -ENOMEM;
        }
        if (stage)
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
        uint64_t at = 0;
        for (int j = 0; j < g->C; j++) {
                int col = hvd_group_col(grp, j); /* position j's rows */
                for (size_t i = 0; i < op->n; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        uint64_t e0, e1;
                        hvd_reducescatter_elems(m, grp->space, col, &e0, &e1);
                        uint64_t bytes = (e1 - e0) * es;
                        if (!bytes)
                                continue;
                        const uint8_t *in = (const uint8_t *) m->in + e0 * es;
                        if (stage) {
                                hvd_scale_copy(g->dt, acc + at, in, e1 - e0, op->prescale);
                                in = acc + at;
                        }
                        if (rs_add(g, in, j == g->c ? m->out : acc + at, bytes) < 0) {
                                snprintf(err, err_len, "%s: out of memory for the reduce-scatter ring", op->name);
                                return -ENOMEM;
                        }
                        at += bytes;
                }
                rs_close(g, j);
        }
        hvd_xop_phase(op, HVD_TL_PHASE_NETWORK);
        r = rs_run(b, g, op, err, err_len);
        hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
        return r;
}

int hvd_cpu_reducescatter_slice(hvd_backend_t *b, const hvd_xop_t *op, uint8_t *slot, uint64_t c0, uint64_t s0,
                                uint64_t s1, double scale, char *err, size_t err_len) {
        struct rsring *g;
        int r = rs_begin(b, &b->nodes, op, scale, &g, err, err_len);
        if (r < 0)
                return r;
        size_t es = g->es;
        uint64_t a = c0 + s0, e = c0 + s1; /* the slice, in the fused element space */
        for (int j = 0; j < g->C; j++) {
                uint64_t off = 0;
                for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        if (off >= e || off + m->count <= a)
                                continue;
                        for (int k = g->node_first[j]; k < g->node_first[j + 1]; k++) {
                                uint64_t x, y;
                                hvd_reducescatter_elems(m, b->g_size, g->node_ranks[k], &x, &y);
                                x = HVD_MAX(off + x, a);
                                y = HVD_MIN(off + y, e);
                                if (x < y && rs_add(g, slot + (x - c0) * es, slot + (x - c0) * es, (y - x) * es) < 0) {
                                        snprintf(err, err_len, "%s: out of memory for the reduce-scatter ring",
                                                 op->name);
                                        return -ENOMEM;
                                }
                        }
                }
                rs_close(g, j);
        }
        return rs_run(b, g, op, err, err_len);
}

void hvd_cpu_reducescatter_copy_out(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t c0, uint64_t cl,
                                    uint64_t sl, size_t es) {
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t mine0, mine1;
                hvd_reducescatter_elems(m, b->g_size, b->g_rank, &mine0, &mine1);
                mine0 += off;
                uint64_t a = HVD_MAX(mine0, c0), e = HVD_MIN(mine1 + off, c0 + cl);
                for (uint64_t x = a; x < e;) { /* slice k of the chunk is in local rank k's slot */
                        uint64_t k = (x - c0) / sl, y = HVD_MIN(e, c0 + (k + 1) * sl);
                        hvd_copy((uint8_t *) m->out + (x - mine0) * es, slot_of(b, v, (int) k) + (x - c0) * es,
                                 (y - x) * es);
                        x = y;
                }
        }
}
