/* cpu_stream.c — broadcast, allgather and alltoall inside one node, as
 * byte streams through the shared-memory slots of cpu_backend.c: every
 * member publishes its pieces window by window, and every reader copies
 * the ranges it wants after the window's barrier. The double-buffering
 * invariant of cpu_backend.c holds: each window is one step. */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "cpu_internal.h"
#include "hvd.pb-c.h"
#include "reduce.h"
#include "util.h"

/* Byte streams: every member publishes a stream (its pieces, concatenated),
 * window by window through its slot; every reader copies the ranges it
 * wants. Broadcast, allgather and alltoall are all this. An alltoall's
 * piece leaves out the rows a member sends itself, which go straight from
 * its input to its output: its stream holds only what others read. */

/* Bytes of member tensor m that member j publishes. */
static uint64_t pub_bytes(const hvd_xop_t *op, const hvd_xmember_t *m, int j, size_t es, int size) {
        switch (op->kind) {
        case HVD__KIND__KIND_BROADCAST: return j == op->root ? m->count * es : 0;
        case HVD__KIND__KIND_ALLGATHER: return (uint64_t) m->rank_rows[j] * m->row_elems * es;
        case HVD__KIND__KIND_ALLTOALL: {
                uint64_t rows = 0;
                for (int d = 0; d < size; d++)
                        if (d != j)
                                rows += (uint64_t) m->splits[(size_t) j * size + d];
                return rows * m->row_elems * es;
        }
        }
        return 0;
}

/* The rows of member tensor m that member `me` keeps itself: at byte src
 * of its input, byte dst of its output, len bytes (an allgather's own rows;
 * an alltoall's rows to itself). */
static void own_piece(const hvd_xop_t *op, const hvd_xmember_t *m, int me, int size, size_t es, uint64_t *src,
                      uint64_t *dst, uint64_t *len) {
        uint64_t row = m->row_elems * es;
        *src = *dst = 0;
        if (op->kind == HVD__KIND__KIND_ALLGATHER) {
                for (int k = 0; k < me; k++)
                        *dst += (uint64_t) m->rank_rows[k] * row;
                *len = (uint64_t) m->rank_rows[me] * row;
                return;
        }
        for (int d = 0; d < me; d++)
                *src += (uint64_t) m->splits[(size_t) me * size + d] * row;
        for (int k = 0; k < me; k++)
                *dst += (uint64_t) m->splits[(size_t) k * size + me] * row;
        *len = (uint64_t) m->splits[(size_t) me * size + me] * row;
}

/* Window [w0, w1) of my stream into my slot: the part of member m's piece,
 * stream bytes [p0, p1), that falls in it; the piece is m's input but for
 * hole bytes at offset at (an alltoall's rows to myself); around the
 * caches where `around` (slot_mode.c). */
static void publish(uint8_t *slot, const hvd_xmember_t *m, uint64_t p0, uint64_t p1, uint64_t w0, uint64_t w1,
                    uint64_t at, uint64_t hole, bool around) {
        /* stream [p0, p0 + at) is input [0, at); [p0 + at, p1) is input [at + hole, ...) */
        uint64_t part[2][3] = { { p0, HVD_MIN(p1, p0 + at), 0 }, { HVD_MIN(p1, p0 + at), p1, hole } };
        for (int k = 0; k < 2; k++) {
                uint64_t a = HVD_MAX(part[k][0], w0), e = HVD_MIN(part[k][1], w1);
                if (a >= e)
                        continue;
                if (m->in)
                        (around ? hvd_copy_stream : hvd_copy)(slot + (a - w0),
                                                              (const uint8_t *) m->in + (a - p0) + part[k][2], e - a);
                else
                        memset(slot + (a - w0), 0, e - a);
        }
}

/* Copies window [w0, w1) of member j's stream (at `slot`) into my outputs. */
static void read_window(const view_t *v, const hvd_xop_t *op, int j, const uint8_t *slot, uint64_t w0, uint64_t w1,
                        size_t es) {
        int me = v->me, size = v->size;
        uint64_t soff = 0; /* offset of tensor i's piece in j's stream */
        for (size_t i = 0; i < op->n; i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t plen = pub_bytes(op, m, j, es, size);
                uint64_t want0 = 0, want1 = 0, dst = 0; /* in piece coordinates; dst offset in out */
                uint64_t row_bytes = m->row_elems * es;
                switch (op->kind) {
                case HVD__KIND__KIND_BROADCAST: want1 = plen; break;
                case HVD__KIND__KIND_ALLGATHER:
                        want1 = plen;
                        for (int k = 0; k < j; k++)
                                dst += (uint64_t) m->rank_rows[k] * row_bytes;
                        break;
                case HVD__KIND__KIND_ALLTOALL:
                        for (int d = 0; d < me; d++)
                                if (d != j) /* not in j's stream */
                                        want0 += (uint64_t) m->splits[(size_t) j * size + d] * row_bytes;
                        want1 = want0 + (uint64_t) m->splits[(size_t) j * size + me] * row_bytes;
                        for (int k = 0; k < j; k++)
                                dst += (uint64_t) m->splits[(size_t) k * size + me] * row_bytes;
                        break;
                }
                uint64_t a = HVD_MAX(soff + want0, w0), e = HVD_MIN(soff + want1, w1);
                if (a < e && m->out)
                        hvd_copy((uint8_t *) m->out + dst + (a - soff - want0), slot + (a - w0), e - a);
                soff += plen;
        }
}

int hvd_cpu_execute_stream(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        int size = v->size, me = v->me, r;
        uint64_t win = HVD_MIN(b->half_bytes, b->chunk_bytes), longest = 0, mine = 0;
        for (int j = 0; j < size; j++) {
                uint64_t len = 0;
                for (size_t i = 0; i < op->n; i++)
                        len += pub_bytes(op, &op->m[i], j, es, size);
                longest = HVD_MAX(longest, len);
                if (j == me)
                        mine = len;
        }
        /* my slot writes: measured per size class (slot_mode.c), or
         * HVD_SHM_SLOT_STREAM's */
        hvd_slot_mode_t *sm = !b->slot_stream ? hvd_slot_mode_of_stream(b, mine) : NULL;
        bool pub_nt = sm ? hvd_slot_mode_stream(sm) : b->slot_stream == 1;
        uint64_t t0 = sm ? hvd_now_usec() : 0;
        /* the root's own result goes straight from input to output */
        if (op->kind == HVD__KIND__KIND_BROADCAST && me == op->root) {
                for (size_t i = 0; i < op->n; i++)
                        if (op->m[i].out && op->m[i].in != op->m[i].out)
                                memmove(op->m[i].out, op->m[i].in, op->m[i].count * es);
        }
        /* so do an allgather's own rows, and the rows an alltoall sends this
         * rank itself (which then stay out of its slot): one copy, not two
         * through the slot */
        bool own_direct = op->kind == HVD__KIND__KIND_ALLGATHER || op->kind == HVD__KIND__KIND_ALLTOALL;
        if (own_direct)
                for (size_t i = 0; i < op->n; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        uint64_t src, dst, len;
                        own_piece(op, m, me, size, es, &src, &dst, &len);
                        if (!m->out || !len)
                                continue;
                        if (m->in && (const uint8_t *) m->in + src != (uint8_t *) m->out + dst)
                                memmove((uint8_t *) m->out + dst, (const uint8_t *) m->in + src, len);
                        else if (!m->in)
                                memset((uint8_t *) m->out + dst, 0, len);
                }
        for (uint64_t w0 = 0; w0 < longest; w0 += win) {
                uint64_t w1 = w0 + win;
                uint8_t *slot = slot_of(b, v, me);
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
                if (w0 < mine) {
                        uint64_t soff = 0;
                        for (size_t i = 0; i < op->n; i++) {
                                const hvd_xmember_t *m = &op->m[i];
                                uint64_t plen = pub_bytes(op, m, me, es, size);
                                /* an alltoall's rows to this rank itself are not in its stream */
                                uint64_t at = plen, hole = 0, dst;
                                if (op->kind == HVD__KIND__KIND_ALLTOALL)
                                        own_piece(op, m, me, size, es, &at, &dst, &hole);
                                publish(slot, m, soff, soff + plen, w0, w1, at, hole, pub_nt);
                                soff += plen;
                        }
                }
                hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                for (int j = 0; j < size; j++) {
                        if (op->kind == HVD__KIND__KIND_BROADCAST && (j != op->root || me == op->root))
                                continue;
                        if (own_direct && j == me)
                                continue;
                        read_window(v, op, j, slot_of(b, v, j), w0, w1, es);
                }
                if ((r = hvd_cpu_end_step(b, v, op->name, err, err_len)) < 0)
                        return r;
        }
        if (sm)
                hvd_slot_mode_note(sm, mine, hvd_now_usec() - t0);
        return 0;
}
