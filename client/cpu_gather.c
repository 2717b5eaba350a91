/* cpu_gather.c — broadcast and allgather across nodes. Where every node
 * has one rank, or the ranks' placement does not allow better, a chain
 * (broadcast) or ring (allgather) of whole contributions over all ranks,
 * pipelined frame by frame in the members' outputs. Where nodes have
 * several ranks, by node: the ranks with one local rank on every node
 * run that chain or ring among themselves, so that each byte enters
 * every node once, and each node's ranks then share what they received
 * through the shared-memory slots (cpu_stream.c) instead of passing it
 * on to each other over TCP. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_internal.h"
#include "hvd.pb-c.h"
#include "reduce.h"
#include "tcp.h"
#include "util.h"

/* The broadcast chain's stream, one segment per member, straight in and
 * out of the members' outputs: a rank receives into its output and sends
 * on from there each frame that is in (done[i]: bytes of member i in). */
typedef struct bchain {
        const hvd_xop_t *op;
        const uint64_t *len;
        uint64_t *done; /* NULL at the root: everything is ready */
} bchain_t;

static const uint8_t *bchain_send_at(void *ud, size_t seg, uint64_t off, uint64_t *ready) {
        const bchain_t *g = ud;
        uint64_t have = g->done ? __atomic_load_n(&g->done[seg], __ATOMIC_ACQUIRE) : g->len[seg];
        *ready = have > off ? have - off : 0;
        return (const uint8_t *) g->op->m[seg].out + off;
}

static uint8_t *bchain_recv_at(void *ud, size_t seg, uint64_t off, uint64_t *room) {
        const bchain_t *g = ud;
        *room = g->len[seg] - off;
        return (uint8_t *) g->op->m[seg].out + off;
}

static int bchain_received(void *ud, size_t seg, uint64_t off, uint64_t len, char *err, size_t err_len) {
        (void) err;
        (void) err_len;
        const bchain_t *g = ud;
        __atomic_store_n(&g->done[seg], off + len, __ATOMIC_RELEASE);
        return 0;
}

/* One pipelined stream, with no copy but the root's input to its output.
 * Every member has its input at the root and its output everywhere (a
 * broadcast does not run while a rank is joined); only one of no
 * elements may be NULL. */
int hvd_cpu_broadcast_chain(hvd_backend_t *b, const hvd_xop_t *op, int pos, int N, int prev, int next, char *err,
                            size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t *len = calloc(2 * op->n + 1, sizeof *len), *done = pos > 0 ? len + op->n : NULL;
        if (!len)
                return -ENOMEM;
        for (size_t i = 0; i < op->n; i++)
                len[i] = op->m[i].count * es;
        if (pos == 0)
                for (size_t i = 0; i < op->n; i++)
                        if (len[i] && op->m[i].in != op->m[i].out)
                                memmove(op->m[i].out, op->m[i].in, len[i]);
        bchain_t g = { .op = op, .len = len, .done = done };
        hvd_tcp_stream_t st = {
                .to = next,
                .from = prev,
                .n_send = pos < N - 1 ? op->n : 0,
                .n_recv = pos > 0 ? op->n : 0,
                .send_len = len,
                .recv_len = len,
                .send_at = bchain_send_at,
                .recv_at = bchain_recv_at,
                .received = bchain_received,
                .ud = &g,
                .concurrent = true,
        };
        int r = hvd_tcp_stream(b->tcp, &st, err, err_len);
        free(len);
        return r;
}

/* By node: the ranks with the root's local rank form a chain of nodes
 * from the root's; every node's rank of it then broadcasts to the node's
 * other ranks through the slots. */
static int broadcast_by_node(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        int lr = b->rank_local[op->root], C = b->cross_size, c = b->cross_rank, r = 0;
        if (v->me == lr)
                r = hvd_cpu_broadcast_chain(b, op, (c - b->rank_cross[op->root] + C) % C, C,
                                            b->node_peer[(c - 1 + C) % C], b->node_peer[(c + 1) % C], err, err_len);
        if (r < 0 || v->size == 1) /* a host of one rank holds the result */
                return r;
        hvd_xmember_t *m = calloc(op->n ? op->n : 1, sizeof *m);
        if (!m)
                return -ENOMEM;
        /* every member's result is in its output at the chain's rank now */
        for (size_t i = 0; i < op->n; i++) {
                m[i] = op->m[i];
                m[i].in = m[i].out;
        }
        hvd_xop_t x = *op;
        x.m = m;
        x.root = lr;
        r = hvd_cpu_execute_stream(b, v, &x, err, err_len);
        free(m);
        return r;
}

/* broadcast across nodes: by node, or a chain over all ranks */
int hvd_cpu_broadcast_nodes(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        int N = b->g_size, me = b->g_rank;
        /* alike on every rank: the topology and the root decide */
        if (b->lmax > 1 && b->rank_local[op->root] < b->lmin)
                return broadcast_by_node(b, v, op, err, err_len);
        return hvd_cpu_broadcast_chain(b, op, (me - op->root + N) % N, N, (me - 1 + N) % N, (me + 1) % N, err, err_len);
}

/* The allgather ring's stream: at step s the rank at position me sends
 * the contribution of position me-s and receives that of me-s-1, which it
 * sends on at step s+1. Position p's rows are those of column
 * hvd_group_col(p) among the op's ranks. Segment s * nm + i is member
 * i's rows of step s's contribution, in member i's output (at[i * W + j]:
 * where column j's rows start in it). */
typedef struct agring {
        uint8_t *const *base; /* [nm]: member i's output */
        const uint64_t *at;   /* [nm * W] */
        const uint64_t *len;  /* [(N-1) * nm] send, then [(N-1) * nm] receive */
        uint64_t *done;       /* [(N-1) * nm]: bytes of each received segment in */
        const hvd_cpu_group_t *grp;
        size_t nm, W;
        int N, me;
} agring_t;

static inline size_t agring_rank(const agring_t *g, int pos) {
        return (size_t) hvd_group_col(g->grp, pos);
}

static inline int agring_sb(const agring_t *g, int s) {
        return (g->me - s + g->N) % g->N;
}

static inline int agring_rb(const agring_t *g, int s) {
        return (g->me - s - 1 + 2 * g->N) % g->N;
}

static const uint8_t *agring_send_at(void *ud, size_t seg, uint64_t off, uint64_t *ready) {
        agring_t *g = ud;
        int s = (int) (seg / g->nm);
        size_t i = seg % g->nm;
        uint64_t have = s == 0 ? g->len[seg] : __atomic_load_n(&g->done[seg - g->nm], __ATOMIC_ACQUIRE);
        *ready = have > off ? have - off : 0;
        return g->base[i] + g->at[i * g->W + agring_rank(g, agring_sb(g, s))] + off;
}

static uint8_t *agring_recv_at(void *ud, size_t seg, uint64_t off, uint64_t *room) {
        agring_t *g = ud;
        int s = (int) (seg / g->nm);
        size_t i = seg % g->nm;
        *room = g->len[(size_t) (g->N - 1) * g->nm + seg] - off;
        return g->base[i] + g->at[i * g->W + agring_rank(g, agring_rb(g, s))] + off;
}

static int agring_received(void *ud, size_t seg, uint64_t off, uint64_t len, char *err, size_t err_len) {
        (void) err;
        (void) err_len;
        agring_t *g = ud;
        __atomic_store_n(&g->done[seg], off + len, __ATOMIC_RELEASE);
        return 0;
}

/* One pipelined stream around the ring of g's positions, in the members'
 * outputs themselves. */
static int allgather_ring(hvd_backend_t *b, agring_t *g, char *err, size_t err_len) {
        size_t nm = g->nm, nseg = (size_t) (g->N - 1) * nm;
        uint64_t *lens = calloc(3 * nseg + 1, sizeof *lens);
        if (!lens)
                return -ENOMEM;
        g->len = lens;
        g->done = lens + 2 * nseg;
        for (int s = 0; s < g->N - 1; s++)
                for (size_t i = 0; i < nm; i++) {
                        const uint64_t *a = g->at + i * g->W;
                        size_t sr = agring_rank(g, agring_sb(g, s)), rr = agring_rank(g, agring_rb(g, s));
                        lens[(size_t) s * nm + i] = a[sr + 1] - a[sr];
                        lens[nseg + (size_t) s * nm + i] = a[rr + 1] - a[rr];
                }
        int N = g->N, me = g->me;
        hvd_tcp_stream_t st = {
                .to = hvd_group_rank(g->grp, (me + 1) % N),
                .from = hvd_group_rank(g->grp, (me - 1 + N) % N),
                .n_send = nseg,
                .n_recv = nseg,
                .send_len = lens,
                .recv_len = lens + nseg,
                .send_at = agring_send_at,
                .recv_at = agring_recv_at,
                .received = agring_received,
                .ud = g,
                .concurrent = true,
        };
        int r = hvd_tcp_stream(b->tcp, &st, err, err_len);
        free(lens);
        return r;
}

/* By node, where every node's ranks are consecutive ranks in local order:
 * after the ring of this local rank's peers, this rank holds the rows of
 * that local rank on every node, and node c's ranks' rows are one range
 * of each output. The node's ranks then allgather through the slots, one
 * member per node and tensor: this rank contributes its peer's rows on
 * node c, in place in its output, and takes the others'. */
static int allgather_share(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, const uint64_t *at, size_t W,
                           char *err, size_t err_len) {
        size_t nm = op->n, C = (size_t) b->cross_size;
        hvd_xmember_t *m = calloc(C * nm + 1, sizeof *m);
        if (!m)
                return -ENOMEM;
        for (size_t c = 0; c < C; c++) {
                int first = b->node_peer[c] - v->me; /* node c's lowest rank */
                for (size_t i = 0; i < nm; i++) {
                        const hvd_xmember_t *g = &op->m[i];
                        hvd_xmember_t *x = &m[c * nm + i];
                        x->row_elems = g->row_elems;
                        x->rank_rows = g->rank_rows + first;
                        if (g->out) {
                                x->in = (const uint8_t *) g->out + at[i * W + (size_t) b->node_peer[c]];
                                x->out = (uint8_t *) g->out + at[i * W + (size_t) first];
                        }
                }
        }
        hvd_xop_t x = *op;
        x.m = m;
        x.n = C * nm;
        int r = hvd_cpu_execute_stream(b, v, &x, err, err_len);
        free(m);
        return r;
}

/* An allgather's ring over grp, in the members' outputs. Every member has
 * its output (an allgather does not run while a rank is joined); only one
 * of no elements may be NULL, and its segments are empty. With share
 * (grp: the nodes), each node's ranks then share what they received. */
static int allgather_run(hvd_backend_t *b, const view_t *v, const hvd_cpu_group_t *grp, const hvd_xop_t *op, bool share,
                         char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype), nm = op->n, W = (size_t) grp->space + 1;
        size_t mine = (size_t) hvd_group_col(grp, grp->me);
        /* at: member i's column offsets in its output */
        uint64_t *at = calloc(nm * W + 1, sizeof *at);
        uint8_t **base = calloc(nm + 1, sizeof *base);
        if (!at || !base) {
                free(at);
                free(base);
                return -ENOMEM;
        }
        for (size_t i = 0; i < nm; i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t *a = at + i * W;
                for (size_t j = 0; j + 1 < W; j++)
                        a[j + 1] = a[j] + (uint64_t) m->rank_rows[j] * m->row_elems * es;
                base[i] = m->out;
                if (a[mine + 1] > a[mine])
                        hvd_copy(base[i] + a[mine], m->in, a[mine + 1] - a[mine]);
        }
        agring_t g = { .base = base, .at = at, .grp = grp, .nm = nm, .W = W, .N = grp->n, .me = grp->me };
        int r = allgather_ring(b, &g, err, err_len);
        if (r >= 0 && share)
                r = allgather_share(b, v, op, at, W, err, err_len);
        free(at);
        free(base);
        return r;
}

/* allgather across nodes: by node where every node's ranks are
 * consecutive and as many, else a ring over all ranks */
int hvd_cpu_allgather_nodes(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        /* alike on every rank: the topology decides */
        bool by_node = b->lmax > 1 && b->lmin == b->lmax && b->node_blocks;
        return allgather_run(b, v, by_node ? &b->nodes : &b->all, op, by_node, err, err_len);
}

int hvd_cpu_allgather_group(hvd_backend_t *b, const hvd_cpu_group_t *g, const hvd_xop_t *op, char *err,
                            size_t err_len) {
        return allgather_run(b, NULL, g, op, false, err, err_len);
}
