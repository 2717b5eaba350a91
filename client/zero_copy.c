/* zero_copy.c — the one-node allreduce of shared tensors (hvd_shared_alloc)
 * read in place: each rank reduces its segment straight from the other
 * local ranks' inputs, mapped read-only from their arenas, and copies the
 * others' segments from their outputs. The ranks agree on it at the
 * operation's first barrier, in the segment header (cpu_internal.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "hvd.pb-c.h"
#include "log.h"
#include "reduce.h"
#include "util.h"

/* The zero-copy path's unit of work, in bytes of the fused element space:
 * what one rank reduces of it stays in the caches until the others copy it. */
#define ZC_CHUNK_BYTES (UINT64_C(1) << 20)

/* Local rank k's arena, mapped read-only (once per arena), or NULL with a
 * warning the first time one cannot be mapped. */
static const uint8_t *peer_arena(hvd_backend_t *b, int k, const hvd_arena_id_t *id) {
        struct peer_arena *p = &b->peers[k];
        if (p->base && p->id.pid == id->pid && p->id.nonce == id->nonce)
                return p->base;
        if (p->base)
                munmap((void *) p->base, p->id.bytes);
        p->base = NULL;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int) id->pid, (int) id->fd);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        void *q = MAP_FAILED;
        if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t) st.st_size >= id->bytes)
                q = mmap(NULL, id->bytes, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
        int e = errno;
        if (fd >= 0)
                close(fd);
        if (q == MAP_FAILED) {
                if (!b->zc_warned)
                        hvd_log_warning("cannot map local rank %d's shared tensors (%s: %s): allreduces of shared "
                                        "tensors copy them as others do",
                                        k, path, strerror(e));
                b->zc_warned = true;
                return NULL;
        }
        p->base = q;
        p->id = *id;
        return p->base;
}

/* Where a member tensor lives in its rank's arena (zero-copy path). */
typedef struct zc_member {
        uint64_t in_off, out_off;
} zc_member_t;

/* Whether every member's input and output lie in this process's arena;
 * their offsets into d[] and the arena into *id. */
static bool zc_describe(const hvd_xop_t *op, size_t es, zc_member_t *d, hvd_arena_id_t *id) {
        for (size_t i = 0; i < op->n; i++) {
                const hvd_xmember_t *m = &op->m[i];
                size_t bytes = m->count * es;
                if (!m->in || !m->out || !hvd_arena_find(m->in, bytes, &d[i].in_off, id) ||
                    !hvd_arena_find(m->out, bytes, &d[i].out_off, id))
                        return false;
        }
        return true;
}

/* Maps every other rank's arena and checks its members' offsets lie in it. */
static bool zc_map(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, const zc_entry_t *e, size_t es) {
        for (int k = 0; k < v->size; k++) {
                if (k == v->me)
                        continue;
                const hvd_arena_id_t *id = &e[k].id;
                if (!peer_arena(b, k, id))
                        return false;
                const zc_member_t *d = (const zc_member_t *) slot_of(b, v, k);
                for (size_t i = 0; i < op->n; i++) {
                        uint64_t bytes = op->m[i].count * es;
                        if (d[i].in_off > id->bytes || bytes > id->bytes - d[i].in_off || d[i].out_off > id->bytes ||
                            bytes > id->bytes - d[i].out_off)
                                return false;
                }
        }
        return true;
}

/* Segment [a, z) of the fused element space, reduced from every rank's
 * inputs into my outputs (ordinary stores: the others read them next). */
static void zc_reduce(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t a, uint64_t z, size_t es,
                      double post) {
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t x0 = HVD_MAX(off, a), x1 = HVD_MIN(off + m->count, z);
                if (x0 >= x1)
                        continue;
                uint64_t at = (x0 - off) * es;
                for (int k = 0; k < v->size; k++) {
                        const zc_member_t *d = (const zc_member_t *) slot_of(b, v, k);
                        b->srcs[k] = k == v->me ? (const uint8_t *) m->in + at : b->peers[k].base + d[i].in_off + at;
                }
                hvd_reduce_n(op->dtype, op->reduce_op, (uint8_t *) m->out + at, b->srcs, (size_t) v->size, x1 - x0,
                             post);
        }
}

/* Segment [a, z), which rank k reduced, from its outputs into mine. */
static void zc_gather(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, int k, uint64_t a, uint64_t z,
                      size_t es) {
        const zc_member_t *d = (const zc_member_t *) slot_of(b, v, k);
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t x0 = HVD_MAX(off, a), x1 = HVD_MIN(off + m->count, z);
                if (x0 < x1)
                        hvd_copy((uint8_t *) m->out + (x0 - off) * es,
                                 b->peers[k].base + d[i].out_off + (x0 - off) * es, (x1 - x0) * es);
        }
}

/* The zero-copy allreduce, when the operation allows it (see hvd_zc_eligible):
 * each rank posts whether its members' inputs and outputs are all shared
 * tensors (and where, in its slot, which it needs for nothing else then),
 * copying the first chunk into its slot as usual where they are not; after
 * the barrier every rank sees every post. When all are shared and mapped,
 * chunk by chunk (ZC_CHUNK_BYTES of the fused element space), each rank
 * reduces its segment of the chunk straight from the others' inputs into
 * its outputs, and after a barrier copies the others' segments of the
 * chunk from their outputs into its own, while they are still in the
 * caches: each byte read about half as often as through the slots, and
 * one barrier a chunk instead of two. (A rank's writes never touch what
 * the others read in the same phase: reducing, it writes only its own
 * segment of its own outputs, which the others read after the chunk's
 * barrier; copying, only the others' segments of its own outputs, which
 * the others read as inputs before that barrier. No rank gets further
 * than one chunk ahead, as the next chunk's barrier waits for everyone's
 * reduction of it; the last barrier keeps the outputs from being handed
 * back while the others still read them.) Whole tensors at once, the
 * copies of large ones came from memory: 0.75x the copying path's
 * ResNet-50 step on an AMD machine.
 * Otherwise the ranks that skipped the copy make it, and after one more
 * barrier the chunked path goes on (around: that copy's slot writes go
 * around the caches, slot_mode.c). Returns 1: the operation is done; 0:
 * the first chunk is in the slots and its barrier passed; < 0: an error. */
int hvd_zc_run(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t total, uint64_t cl, uint64_t s0,
               uint64_t s1, bool direct, bool around, size_t es, double post, char *err, size_t err_len) {
        uint8_t *mine = slot_of(b, v, v->me);
        zc_entry_t *e = b->hdr->zc[b->step & 1];
        hvd_arena_id_t id;
        bool shared = zc_describe(op, es, (zc_member_t *) mine, &id);
        e[v->me].shared = shared;
        if (shared)
                e[v->me].id = id;
        else
                hvd_cpu_copy_in(op, mine, 0, cl, s0, s1, direct, around, es);
        int r;
        if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                return r;
        int n_shared = 0;
        for (int k = 0; k < v->size; k++)
                n_shared += e[k].shared != 0;
        if (n_shared == 0)
                return 0;
        if (n_shared == v->size) {
                bool ok = zc_map(b, v, op, e, es);
                e[v->me].mapped = ok;
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                for (int k = 0; k < v->size; k++)
                        ok = ok && e[k].mapped;
                if (ok) {
                        /* chunk by chunk, so that what a rank reduced is still
                         * in the caches when the others copy it; one barrier a
                         * chunk suffices (see above) */
                        uint64_t chunk = HVD_MAX(ZC_CHUNK_BYTES / es, (uint64_t) v->size * 16);
                        for (uint64_t c0 = 0; c0 < total; c0 += chunk) {
                                uint64_t c1 = HVD_MIN(c0 + chunk, total);
                                uint64_t seg =
                                        ((c1 - c0 + (uint64_t) v->size - 1) / (uint64_t) v->size + 15) & ~UINT64_C(15);
                                uint64_t a = HVD_MIN(c0 + (uint64_t) v->me * seg, c1);
                                hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
                                zc_reduce(b, v, op, a, HVD_MIN(a + seg, c1), es, post);
                                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                                        return r;
                                hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                                for (int k = 0; k < v->size; k++) {
                                        uint64_t ka = HVD_MIN(c0 + (uint64_t) k * seg, c1);
                                        if (k != v->me)
                                                zc_gather(b, v, op, k, ka, HVD_MIN(ka + seg, c1), es);
                                }
                        }
                        if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                                return r;
                        b->step++;
                        static _Atomic bool said;
                        if (!atomic_exchange(&said, true))
                                hvd_log_notice("allreduce %s: shared tensors on all %d local ranks, read in place",
                                               op->name, v->size);
                        return 1;
                }
        }
        /* not every rank's tensors are shared, or not every arena mapped */
        if (shared)
                hvd_cpu_copy_in(op, mine, 0, cl, s0, s1, direct, around, es);
        if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                return r;
        return 0;
}

/* Whether an allreduce may take the zero-copy path: alike on every rank
 * (the operation, the view and the published threshold are), so all post
 * and barrier alike. Unscaled inputs (the copy in applies the prescale),
 * all the node's ranks, members few enough for their offsets to fit a
 * slot. */
bool hvd_zc_eligible(const hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t total, size_t es) {
        return b->zc_bytes && b->peers && !v->set && op->kind == HVD__KIND__KIND_ALLREDUCE && op->prescale == 1.0 &&
               total * es >= b->zc_bytes && v->size == b->size && op->n * sizeof(zc_member_t) <= b->half_bytes;
}
