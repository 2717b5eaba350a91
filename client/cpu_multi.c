/* cpu_multi.c — the CPU data plane across nodes: the ranks of one local
 * rank on every node form a TCP ring (tcp.c), and each node's ranks meet
 * in cpu_backend.c's shared memory around it. Allreduce: local reduction
 * into the slots, a pipelined ring allreduce per slice, the result copied
 * out; reducescatter likewise (cpu_rsring.c), broadcast and allgather in
 * cpu_gather.c, alltoall by pairwise exchanges, the wire carrying each
 * byte the fewest times its collective allows. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu_internal.h"
#include "hvd.pb-c.h"
#include "reduce.h"
#include "tcp.h"
#include "util.h"

#define HVD_RING_MAX_STEPS 2048 /* 2(C-1) steps: up to 1025 nodes */

/* ---- several nodes ---- */

int hvd_cpu_multi_init(hvd_backend_t *b, const hvd_topology_t *t) {
        if (t->cross_size <= 1) {
                if (t->listen_fd >= 0)
                        close(t->listen_fd);
                return 0;
        }
        b->rank_cross = malloc((size_t) t->size * sizeof(int));
        b->rank_local = malloc((size_t) t->size * sizeof(int));
        b->node_peer = malloc((size_t) t->cross_size * sizeof(int));
        b->set_rank = malloc((size_t) t->size * sizeof(int));
        int *local_sizes = calloc((size_t) t->cross_size, sizeof(int));
        if (!b->rank_cross || !b->rank_local || !b->node_peer || !b->set_rank || !local_sizes) {
                free(local_sizes);
                if (t->listen_fd >= 0)
                        close(t->listen_fd);
                return -ENOMEM;
        }
        memcpy(b->rank_cross, t->rank_cross, (size_t) t->size * sizeof(int));
        memcpy(b->rank_local, t->rank_local, (size_t) t->size * sizeof(int));
        for (int c = 0; c < t->cross_size; c++)
                b->node_peer[c] = -1;
        for (int r = 0; r < t->size; r++) {
                local_sizes[t->rank_cross[r]]++;
                if (t->rank_local[r] == t->local_rank)
                        b->node_peer[t->rank_cross[r]] = r;
        }
        /* a node's rank is its column among the job's ranks too */
        b->nodes = (hvd_cpu_group_t){
                .n = t->cross_size, .me = t->cross_rank, .rank = b->node_peer, .col = b->node_peer, .space = t->size
        };
        b->all = (hvd_cpu_group_t){ .n = t->size, .me = t->rank, .space = t->size };
        b->node_blocks = true;
        for (int r = 0; r < t->size; r++) {
                bool fresh = r == 0 || t->rank_cross[r] != t->rank_cross[r - 1];
                b->node_blocks = b->node_blocks && t->rank_local[r] == (fresh ? 0 : t->rank_local[r - 1] + 1);
        }
        b->lmin = INT32_MAX;
        b->lmax = 0;
        for (int c = 0; c < t->cross_size; c++) {
                b->lmin = HVD_MIN(b->lmin, local_sizes[c]);
                b->lmax = HVD_MAX(b->lmax, local_sizes[c]);
        }
        free(local_sizes);
        int r = hvd_tcp_new(t->listen_fd, t->rank, t->size, t->addrs, t->job_hash, b->timeout_usec, b->check,
                            b->userdata, &b->tcp);
        if (r >= 0) {
                hvd_tcp_set_checksum(b->tcp, t->ring_checksum);
                hvd_tcp_set_send_thread(b->tcp, t->tcp_send_thread);
                if (t->tcp_frame_bytes)
                        hvd_tcp_set_frame_bytes(b->tcp, t->tcp_frame_bytes);
        }
        return r;
}

uint8_t *hvd_cpu_scratch(hvd_backend_t *b, size_t bytes) {
        if (bytes > b->scratch_bytes) {
                uint8_t *p = realloc(b->scratch, bytes);
                if (!p)
                        return NULL;
                b->scratch = p;
                b->scratch_bytes = bytes;
        }
        return b->scratch;
}

uint8_t *hvd_cpu_rs_full(hvd_backend_t *b, size_t bytes) {
        if (bytes > b->rs_full_bytes) {
                uint8_t *p = realloc(b->rs_full, bytes);
                if (!p)
                        return NULL;
                b->rs_full = p;
                b->rs_full_bytes = bytes;
        }
        return b->rs_full;
}

/* Allreduces across nodes of at most this many bytes take recursive
 * doubling, not the ring: a short message's time is trips, not bytes.
 * Between 2 nodes both send the whole buffer each way, the ring in two
 * trips of half of it, where each waits for the last: doubling wins
 * further, as long as the ring's reduction of one frame while the next
 * arrives does not pay more (10 Gbit/s: 1.67-1.86x at 128-256 KiB with
 * 250 us of latency, 1.02-1.14x with none; at 512 KiB-1 MiB 1.24-1.38x
 * and 0.74-0.79x). */
#define HVD_RD_MAX_BYTES      (UINT64_C(64) << 10)
#define HVD_RD_PAIR_MAX_BYTES (UINT64_C(256) << 10)

/* Bandwidth-optimal ring allreduce of buf (n elements) among the ranks
 * with my local rank on every node: reduce-scatter, scale my block once,
 * allgather. Each rank sends 2(C-1)/C of the buffer. The 2(C-1) steps are
 * one stream each way (hvd_tcp_stream, a segment per step), pipelined by
 * frames: a received frame is reduced at once, and the next step sends it
 * on as soon as it is — so the wire never waits for a whole block, the
 * reduction overlaps the transfer, and the allgather starts while the
 * reduce-scatter still runs. */
typedef struct ring {
        hvd_dtype_t dt;
        hvd_reduce_op_t op;
        size_t es;
        /* the buffer: contiguous (buf), or the outputs of members m[0..nm)
         * end to end, member k ending at byte mend[k] */
        uint8_t *buf;
        const hvd_xmember_t *m;
        size_t nm;
        const uint64_t *mend;
        uint8_t *tmp;
        uint64_t n, blk;
        int C, c;
        double scale;
        uint64_t len[2 * HVD_RING_MAX_STEPS]; /* bytes of each step's blocks, send then receive */
        uint64_t done[HVD_RING_MAX_STEPS];    /* bytes of step t's received block reduced or in place */
} ring_t;

static inline uint64_t ring_b0(const ring_t *g, int i) {
        return HVD_MIN((uint64_t) i * g->blk, g->n);
}

static inline uint64_t ring_bl(const ring_t *g, int i) {
        return HVD_MIN(ring_b0(g, i) + g->blk, g->n) - ring_b0(g, i);
}

/* blocks sent and received at step t (reduce-scatter for t < C-1) */
static inline int ring_sb(const ring_t *g, int t) {
        return t < g->C - 1 ? (g->c - t + g->C) % g->C : (g->c + 1 - (t - (g->C - 1)) + g->C) % g->C;
}

static inline int ring_rb(const ring_t *g, int t) {
        return t < g->C - 1 ? (g->c - t - 1 + 2 * g->C) % g->C : (g->c - (t - (g->C - 1)) + g->C) % g->C;
}

/* Byte `at` of the buffer, and in *contig how many bytes follow it there. */
static uint8_t *ring_ptr(const ring_t *g, uint64_t at, uint64_t *contig) {
        if (g->buf) {
                *contig = g->n * g->es - at;
                return g->buf + at;
        }
        size_t lo = 0, hi = g->nm; /* the first member ending after at */
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (g->mend[mid] > at)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        uint64_t beg = lo ? g->mend[lo - 1] : 0;
        *contig = g->mend[lo] - at;
        return (uint8_t *) g->m[lo].out + (at - beg);
}

static const uint8_t *ring_send_at(void *ud, size_t seg, uint64_t off, uint64_t *ready) {
        ring_t *g = ud;
        int t = (int) seg;
        /* step t sends what step t-1 received (done: see hvd_tcp_stream_t.concurrent) */
        uint64_t have = t == 0 ? g->len[0] : __atomic_load_n(&g->done[t - 1], __ATOMIC_ACQUIRE);
        uint64_t contig;
        const uint8_t *p = ring_ptr(g, ring_b0(g, ring_sb(g, t)) * g->es + off, &contig);
        *ready = have > off ? HVD_MIN(have - off, contig) : 0;
        return p;
}

static uint8_t *ring_recv_at(void *ud, size_t seg, uint64_t off, uint64_t *room) {
        ring_t *g = ud;
        int t = (int) seg;
        if (t < g->C - 1) {
                *room = g->len[HVD_RING_MAX_STEPS + t] - off;
                return g->tmp + off; /* reduced frame by frame before the next step reuses it */
        }
        return ring_ptr(g, ring_b0(g, ring_rb(g, t)) * g->es + off, room);
}

static int ring_received(void *ud, size_t seg, uint64_t off, uint64_t len, char *err, size_t err_len) {
        (void) err;
        (void) err_len;
        ring_t *g = ud;
        int t = (int) seg;
        if (t < g->C - 1) {
                uint64_t at = ring_b0(g, ring_rb(g, t)) * g->es + off;
                for (uint64_t k = 0; k < len;) {
                        uint64_t contig;
                        uint8_t *dst = ring_ptr(g, at + k, &contig);
                        uint64_t l = HVD_MIN(contig, len - k);
                        const void *srcs[2] = { dst, g->tmp + off + k };
                        hvd_reduce_n(g->dt, g->op, dst, srcs, 2, l / g->es, 1.0);
                        if (t == g->C - 2 && g->scale != 1.0) /* my block is complete: scale it once */
                                hvd_scale_copy(g->dt, dst, dst, l / g->es, g->scale);
                        k += l;
                }
        }
        __atomic_store_n(&g->done[t], off + len, __ATOMIC_RELEASE);
        return 0;
}

/* The job rank of the position with new rank k in recursive doubling,
 * rem positions folded into their neighbours (rd_allreduce). */
static int rd_peer(const hvd_cpu_group_t *g, int k, int rem) {
        return hvd_group_rank(g, k < rem ? 2 * k + 1 : k + rem);
}

/* buf = lo ⊕ hi, lo's elements the first operand on every node alike */
static void rd_combine(hvd_dtype_t dt, hvd_reduce_op_t op, uint8_t *buf, const uint8_t *theirs, bool mine_first,
                       uint64_t n) {
        const void *srcs[2] = { mine_first ? buf : theirs, mine_first ? theirs : buf };
        hvd_reduce_n(dt, op, buf, srcs, 2, n, 1.0);
}

/* Recursive doubling over buf (n elements, contiguous), MPICH's way for
 * short messages: with p2 the largest power of two <= C and rem = C - p2,
 * each of the first rem even nodes hands its buffer to the odd node after
 * it; the p2 that remain exchange whole buffers with the node d away, for
 * d = 1, 2, .. p2/2, and combine them; the odd nodes hand the result back.
 * log2(p2) trips (+2 when C is not a power of two) where the ring takes
 * 2(C-1). Each pair combines the lower node's buffer with the higher's in
 * that order on both sides, so every node ends with the same bits, as the
 * ring gives them; the scale is applied last, by every node alike. */
static int rd_allreduce(hvd_backend_t *b, const hvd_cpu_group_t *g, hvd_dtype_t dt, hvd_reduce_op_t op, uint8_t *buf,
                        uint8_t *tmp, uint64_t n, double scale, char *err, size_t err_len) {
        int C = g->n, c = g->me, p2 = 1;
        while (p2 * 2 <= C)
                p2 *= 2;
        int rem = C - p2, r = 0;
        size_t bytes = n * hvd_dtype_size(dt);
        int k = c < 2 * rem ? (c % 2 ? c / 2 : -1) : c - rem;   /* my new rank; -1: folded */
        int pair = c < 2 * rem ? hvd_group_rank(g, c ^ 1) : -1; /* the position I fold with */
        if (pair >= 0) {
                if (k < 0)
                        r = hvd_tcp_sendrecv(b->tcp, pair, buf, bytes, pair, NULL, 0, err, err_len);
                else if ((r = hvd_tcp_sendrecv(b->tcp, pair, NULL, 0, pair, tmp, bytes, err, err_len)) == 0)
                        rd_combine(dt, op, buf, tmp, false, n);
        }
        for (int d = 1; r == 0 && k >= 0 && d < p2; d *= 2) {
                int other = rd_peer(g, k ^ d, rem);
                if ((r = hvd_tcp_sendrecv(b->tcp, other, buf, bytes, other, tmp, bytes, err, err_len)) == 0)
                        rd_combine(dt, op, buf, tmp, k < (k ^ d), n);
        }
        if (r == 0 && pair >= 0)
                r = k < 0 ? hvd_tcp_sendrecv(b->tcp, pair, NULL, 0, pair, buf, bytes, err, err_len)
                          : hvd_tcp_sendrecv(b->tcp, pair, buf, bytes, pair, NULL, 0, err, err_len);
        if (r == 0 && scale != 1.0)
                hvd_scale_copy(dt, buf, buf, n, scale);
        return r;
}

/* The outputs of op's members, end to end, into buf (gather) or back. */
static void members_copy(const hvd_xop_t *xop, size_t es, uint8_t *buf, bool gather) {
        for (size_t i = 0, at = 0; i < xop->n; at += xop->m[i].count * es, i++)
                memcpy(gather ? buf + at : xop->m[i].out, gather ? xop->m[i].out : buf + at, xop->m[i].count * es);
}

/* rd_allreduce over buf, or over the outputs of op's members end to end
 * (buf NULL) through a contiguous copy: the messages are short */
static int rd_run(hvd_backend_t *b, const hvd_cpu_group_t *g, hvd_dtype_t dt, hvd_reduce_op_t op, uint8_t *buf,
                  const hvd_xop_t *xop, uint64_t n, double scale, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(dt), bytes = n * es;
        uint8_t *s = hvd_cpu_scratch(b, 2 * bytes + 1);
        if (!s)
                return -ENOMEM;
        uint8_t *work = buf ? buf : s + bytes;
        if (!buf)
                members_copy(xop, es, work, true);
        int r = rd_allreduce(b, g, dt, op, work, s, n, scale, err, err_len);
        if (r == 0 && !buf)
                members_copy(xop, es, work, false);
        return r;
}

/* The ring, or recursive doubling up to HVD_RD_MAX_BYTES
 * (HVD_RD_PAIR_MAX_BYTES between 2 positions): the same choice at every
 * position, as n, the dtype and C are. */
int hvd_cpu_allreduce_group(hvd_backend_t *b, const hvd_cpu_group_t *grp, hvd_dtype_t dt, hvd_reduce_op_t op,
                            uint8_t *buf, const hvd_xop_t *xop, uint64_t n, double scale, char *err, size_t err_len) {
        int C = grp->n, c = grp->me;
        if (C > 1 && n * hvd_dtype_size(dt) <= (C == 2 ? HVD_RD_PAIR_MAX_BYTES : HVD_RD_MAX_BYTES))
                return rd_run(b, grp, dt, op, buf, xop, n, scale, err, err_len);
        if (2 * (C - 1) > HVD_RING_MAX_STEPS) {
                snprintf(err, err_len, "%d ranks in a ring: the CPU ring supports at most %d", C,
                         HVD_RING_MAX_STEPS / 2 + 1);
                return -EINVAL;
        }
        if (!b->ring && !(b->ring = malloc(sizeof *b->ring)))
                return -ENOMEM;
        ring_t *g = b->ring;
        *g = (ring_t){
                .dt = dt, .op = op, .es = hvd_dtype_size(dt), .buf = buf, .n = n, .C = C, .c = c, .scale = scale
        };
        if (!buf) {
                if (xop->n > b->mend_cap) {
                        uint64_t *p = realloc(b->mend, xop->n * sizeof *p);
                        if (!p)
                                return -ENOMEM;
                        b->mend = p;
                        b->mend_cap = xop->n;
                }
                uint64_t at = 0;
                for (size_t i = 0; i < xop->n; i++)
                        b->mend[i] = at += xop->m[i].count * g->es;
                g->m = xop->m;
                g->nm = xop->n;
                g->mend = b->mend;
        }
        g->blk = (n + (uint64_t) C - 1) / (uint64_t) C;
        if (!(g->tmp = hvd_cpu_scratch(b, g->blk * g->es > 0 ? g->blk * g->es : 1)))
                return -ENOMEM;
        int steps = 2 * (C - 1);
        for (int t = 0; t < steps; t++) {
                g->len[t] = ring_bl(g, ring_sb(g, t)) * g->es;
                g->len[HVD_RING_MAX_STEPS + t] = ring_bl(g, ring_rb(g, t)) * g->es;
        }
        if (steps == 0)
                return 0;
        hvd_tcp_stream_t s = {
                .to = hvd_group_rank(grp, (c + 1) % C),
                .from = hvd_group_rank(grp, (c + C - 1) % C),
                .n_send = (size_t) steps,
                .n_recv = (size_t) steps,
                .send_len = g->len,
                .recv_len = g->len + HVD_RING_MAX_STEPS,
                .send_at = ring_send_at,
                .recv_at = ring_recv_at,
                .received = ring_received,
                .ud = g,
                .concurrent = true,
        };
        return hvd_tcp_stream(b->tcp, &s, err, err_len);
}

static int ring_allreduce(hvd_backend_t *b, hvd_dtype_t dt, hvd_reduce_op_t op, uint8_t *buf, uint64_t n, double scale,
                          char *err, size_t err_len) {
        return hvd_cpu_allreduce_group(b, &b->nodes, dt, op, buf, NULL, n, scale, err, err_len);
}

/* Allreduce among g straight from the inputs to the outputs, where every
 * node has one rank or a process set spans nodes: no shared memory to go
 * through. Inputs are copied (prescaled) to the outputs unless in place,
 * and the ring runs on the outputs themselves, end to end: the fused
 * buffer is never materialised, and every byte is read and written once
 * by the ring. The ring is pipelined inside (hvd_tcp_stream), so no
 * chunking either. Where a member has no output (an empty tensor's may
 * be NULL), the operation goes through b->rs_full instead. */
int hvd_cpu_reduce_direct(hvd_backend_t *b, const hvd_cpu_group_t *g, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t total = 0;
        bool outs = true;
        for (size_t i = 0; i < op->n; i++) {
                total += op->m[i].count;
                outs = outs && op->m[i].out;
        }
        uint8_t *buf = NULL;
        if (!outs && !(buf = hvd_cpu_rs_full(b, total * es > 0 ? total * es : 1)))
                return -ENOMEM;
        hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
        for (size_t i = 0, at = 0; i < op->n; at += op->m[i].count * es, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint8_t *dst = buf ? buf + at : m->out;
                if (!m->in)
                        memset(dst, 0, m->count * es);
                else if (m->in != dst || op->prescale != 1.0)
                        hvd_scale_copy(op->dtype, dst, m->in, m->count, op->prescale);
        }
        hvd_xop_phase(op, HVD_TL_PHASE_NETWORK);
        int r = hvd_cpu_allreduce_group(b, g, op->dtype, op->reduce_op, buf, op, total,
                                        hvd_cpu_reduce_scale(op, g->space), err, err_len);
        hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
        for (size_t i = 0, at = 0; r == 0 && buf && i < op->n; at += op->m[i].count * es, i++)
                if (op->m[i].out)
                        hvd_copy(op->m[i].out, buf + at, op->m[i].count * es);
        if (r < 0)
                hvd_backend_abort(b, err);
        return r;
}

/* Hierarchical allreduce: shared-memory reduce inside the node (each of
 * the first lmin local ranks owns a slice), the ring across nodes per slice
 * (every such local rank drives the network at once), copy-out from shared
 * memory. A reducescatter likewise, its ring a reduce-scatter, each rank
 * copying out its own rows. */
static int execute_reduce_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        /* one ring over the whole tensor only when every node runs it so:
         * a node of several ranks cuts it into chunks, each its own ring,
         * and the nodes' rings must cut alike */
        if (b->lmax == 1 && op->kind == HVD__KIND__KIND_ALLREDUCE) {
                bool outs = true;
                for (size_t i = 0; i < op->n; i++)
                        outs = outs && op->m[i].out;
                if (outs)
                        return hvd_cpu_reduce_direct(b, &b->nodes, op, err, err_len);
        }
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t total = 0;
        for (size_t i = 0; i < op->n; i++)
                total += op->m[i].count;
        uint64_t chunk_bytes = b->ring_chunk_bytes ? HVD_MIN(b->ring_chunk_bytes, b->half_bytes) : b->half_bytes;
        uint64_t chunk = HVD_MAX((chunk_bytes / 64) * 64 / es, 1);
        double post = hvd_cpu_reduce_scale(op, b->g_size);
        bool rs = op->kind == HVD__KIND__KIND_REDUCESCATTER;
        int r;
        for (uint64_t c0 = 0; c0 < total; c0 += chunk) {
                uint64_t cl = HVD_MIN(chunk, total - c0);
                uint8_t *mine = slot_of(b, v, v->me);
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
                hvd_cpu_chunk_copy_in(op, mine, c0, cl, false, es);
                hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                uint64_t sl = (cl + (uint64_t) b->lmin - 1) / (uint64_t) b->lmin;
                sl = (sl + 15) & ~UINT64_C(15);
                if (v->me < b->lmin) {
                        uint64_t s0 = HVD_MIN((uint64_t) v->me * sl, cl), s1 = HVD_MIN(s0 + sl, cl);
                        if (s1 > s0) {
                                if (v->size > 1) {
                                        for (int k = 0; k < v->size; k++)
                                                b->srcs[k] = slot_of(b, v, k) + s0 * es;
                                        hvd_reduce_n(op->dtype, op->reduce_op, mine + s0 * es, b->srcs,
                                                     (size_t) v->size, s1 - s0, 1.0);
                                }
                                hvd_xop_phase(op, HVD_TL_PHASE_NETWORK);
                                r = rs ? hvd_cpu_reducescatter_slice(b, op, mine, c0, s0, s1, post, err, err_len)
                                       : ring_allreduce(b, op->dtype, op->reduce_op, mine + s0 * es, s1 - s0, post, err,
                                                        err_len);
                                hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
                                if (r < 0) {
                                        hvd_backend_abort(b, err);
                                        return r;
                                }
                        }
                }
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                if (rs)
                        hvd_cpu_reducescatter_copy_out(b, v, op, c0, cl, sl, es);
                else
                        hvd_cpu_chunk_copy_out(b, v, op, c0, cl, sl, es, -1, false);
                if ((r = hvd_cpu_end_step(b, v, op->name, err, err_len)) < 0)
                        return r;
        }
        return 0;
}

/* reducescatter across nodes: a ring reduce-scatter (cpu_rsring.c), from
 * the inputs to the outputs where every node has one rank, else per slice
 * of the hierarchical path; but short messages between more than 2 nodes,
 * where its C-1 trips cost more than recursive doubling's, take the
 * hierarchical allreduce into a buffer kept for the next one (no
 * allocation per operation once warm), each rank keeping its rows. */
static int execute_reducescatter_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err,
                                       size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t total = 0;
        for (size_t i = 0; i < op->n; i++)
                total += op->m[i].count;
        if (b->cross_size == 2 || total * es > HVD_RD_MAX_BYTES) {
                if (b->lmax > 1)
                        return execute_reduce_multi(b, v, op, err, err_len);
                int r = hvd_cpu_reducescatter_ring(b, &b->nodes, op, err, err_len);
                if (r < 0)
                        hvd_backend_abort(b, err);
                return r;
        }
        size_t nm = op->n ? op->n : 1;
        if (!hvd_cpu_rs_full(b, total * es > 0 ? total * es : 1))
                return -ENOMEM;
        if (nm > b->rs_m_cap) {
                hvd_xmember_t *p = realloc(b->rs_m, nm * sizeof *p);
                if (!p)
                        return -ENOMEM;
                b->rs_m = p;
                b->rs_m_cap = nm;
        }
        hvd_xmember_t *tm = b->rs_m;
        uint8_t *full = b->rs_full;
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; i++) {
                tm[i] = op->m[i];
                tm[i].out = full + off * es;
                off += op->m[i].count;
        }
        hvd_xop_t ar = *op;
        ar.kind = HVD__KIND__KIND_ALLREDUCE;
        ar.m = tm;
        int r = execute_reduce_multi(b, v, &ar, err, err_len);
        off = 0;
        for (size_t i = 0; i < op->n && r >= 0; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t e0, e1;
                hvd_reducescatter_elems(m, b->g_size, b->g_rank, &e0, &e1);
                if (m->out)
                        hvd_copy(m->out, full + (off + e0) * es, (e1 - e0) * es);
        }
        return r;
}

/* An alltoall's rows between this node's ranks, where they are
 * consecutive ranks: those rows are one range of each input and output,
 * exchanged through the slots (cpu_stream.c) with the local ranks' block
 * of each member's splits. */
static int alltoall_local(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype), nm = op->n, L = (size_t) v->size;
        int N = b->g_size, f = b->g_rank - v->me; /* this node's lowest rank */
        hvd_xmember_t *m = calloc(nm + 1, sizeof *m);
        int64_t *spl = calloc(nm * L * L + 1, sizeof *spl);
        int r = m && spl ? 0 : -ENOMEM;
        for (size_t i = 0; i < nm && r >= 0; i++) {
                const hvd_xmember_t *g = &op->m[i];
                uint64_t row = g->row_elems * es, soff = 0, roff = 0;
                for (int d = 0; d < f; d++) {
                        soff += (uint64_t) g->splits[(size_t) b->g_rank * N + d] * row;
                        roff += (uint64_t) g->splits[(size_t) d * N + b->g_rank] * row;
                }
                for (size_t x = 0; x < L; x++)
                        for (size_t y = 0; y < L; y++)
                                spl[i * L * L + x * L + y] = g->splits[(size_t) (f + (int) x) * N + (size_t) f + y];
                m[i] = (hvd_xmember_t){
                        .in = g->in ? (const uint8_t *) g->in + soff : NULL,
                        .out = g->out ? (uint8_t *) g->out + roff : NULL,
                        .row_elems = g->row_elems,
                        .splits = spl + i * L * L,
                };
        }
        hvd_xop_t x = *op;
        x.m = m;
        if (r >= 0)
                r = hvd_cpu_execute_stream(b, v, &x, err, err_len);
        free(spl);
        free(m);
        return r;
}

/* Pairwise exchanges, step s with positions me±s; with local, both ends
 * of a pair on one node skip it at the same step (each pair's step is the
 * distance between its positions). */
int hvd_cpu_alltoall_pairs(hvd_backend_t *b, const hvd_cpu_group_t *g, const hvd_xop_t *op, bool local, char *err,
                           size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        int N = g->n, me = g->me, r = 0;
        for (size_t i = 0; i < op->n && r >= 0; i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t row = m->row_elems * es;
#define SPL(src, dst) ((uint64_t) m->splits[(size_t) (src) *N + (dst)])
                for (int s = 0; s < N && r >= 0; s++) {
                        int to = (me + s) % N, from = (me - s + N) % N;
                        int rto = hvd_group_rank(g, to), rfrom = hvd_group_rank(g, from);
                        bool near_to = local && b->rank_cross[rto] == b->cross_rank;
                        bool near_from = local && b->rank_cross[rfrom] == b->cross_rank;
                        if (near_to && near_from)
                                continue;
                        uint64_t soff = 0, roff = 0;
                        for (int d = 0; d < to; d++)
                                soff += SPL(me, d) * row;
                        for (int k = 0; k < from; k++)
                                roff += SPL(k, me) * row;
                        if (s == 0) {
                                hvd_copy((uint8_t *) m->out + roff, (const uint8_t *) m->in + soff, SPL(me, me) * row);
                                continue;
                        }
                        r = hvd_tcp_sendrecv(b->tcp, rto, (const uint8_t *) m->in + soff,
                                             near_to ? 0 : SPL(me, to) * row, rfrom, (uint8_t *) m->out + roff,
                                             near_from ? 0 : SPL(from, me) * row, err, err_len);
                }
#undef SPL
        }
        return r;
}

/* alltoall across nodes: pairwise exchanges among all ranks; rows between
 * ranks of one node go through the slots instead where the node's ranks
 * are consecutive. */
static int execute_alltoall_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        /* alike on every rank: the topology decides */
        bool local = b->lmax > 1 && b->node_blocks;
        int r = local ? alltoall_local(b, v, op, err, err_len) : 0;
        return r < 0 ? r : hvd_cpu_alltoall_pairs(b, &b->all, op, local, err, err_len);
}

/* barrier across nodes: local barrier, an allreduce of one byte among
 * the first local ranks, local barrier. One byte is short: recursive
 * doubling, where every result depends on every node's entry. */
static int barrier_multi(hvd_backend_t *b, const view_t *v, char *err, size_t err_len) {
        int r = hvd_cpu_barrier(b, v, "barrier", err, err_len);
        if (r < 0)
                return r;
        if (v->me == 0) {
                uint8_t token = 0;
                r = ring_allreduce(b, HVD_UINT8, HVD_REDUCE_SUM, &token, 1, 1.0, err, err_len);
                if (r < 0) {
                        hvd_backend_abort(b, err);
                        return r;
                }
        }
        return hvd_cpu_barrier(b, v, "barrier", err, err_len);
}

int hvd_cpu_execute_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        int r;
        switch (op->kind) {
        case HVD__KIND__KIND_BARRIER: return barrier_multi(b, v, err, err_len);
        case HVD__KIND__KIND_ALLREDUCE: return execute_reduce_multi(b, v, op, err, err_len);
        case HVD__KIND__KIND_REDUCESCATTER: return execute_reducescatter_multi(b, v, op, err, err_len);
        case HVD__KIND__KIND_BROADCAST: r = hvd_cpu_broadcast_nodes(b, v, op, err, err_len); break;
        case HVD__KIND__KIND_ALLGATHER: r = hvd_cpu_allgather_nodes(b, v, op, err, err_len); break;
        case HVD__KIND__KIND_ALLTOALL: r = execute_alltoall_multi(b, v, op, err, err_len); break;
        default: return hvd_cpu_unsupported(op, err, err_len);
        }
        if (r < 0)
                hvd_backend_abort(b, err);
        return r;
}
