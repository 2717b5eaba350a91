/* cpu_internal.h — what the CPU data plane's files share: the node's
 * shared-memory segment (header, barriers, slots), the backend's state and
 * the steps that the byte streams (cpu_stream.c), the paths across nodes
 * (cpu_multi.c) and the zero-copy path (zero_copy.c) take from
 * cpu_backend.c. Nothing outside the CPU backend includes it. */
#ifndef HVD_CPU_INTERNAL_H
#define HVD_CPU_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "shared_arena.h"
#include "tcp.h"

#define HEADER_BYTES      (64 * 1024)
#define HVD_MAX_SET_LOCAL 4096
/* Allreduces of shared tensors (hvd_shared_alloc) on every local rank read
 * each other's inputs in place from this size on (HVD_SHM_ZERO_COPY_BYTES),
 * with up to ZC_MAX_LOCAL ranks on the node: four barriers an operation,
 * against one a chunk, so small ones keep the chunked path. */
#define ZC_BYTES     (UINT64_C(1) << 20)
#define ZC_MAX_LOCAL 64

typedef struct shm_barrier {
        _Alignas(64) _Atomic uint32_t count;
        _Alignas(64) _Atomic uint32_t gen;
        _Atomic uint32_t waiters;
} shm_barrier_t;

/* A rank's word on the allreduce at hand (zero-copy path): written before
 * the operation's first barrier, read after it; by the step's parity, like
 * the slot halves. */
typedef struct zc_entry {
        hvd_arena_id_t id; /* the rank's arena (its members' offsets in it: in its slot) */
        uint32_t shared;   /* 1: every member's input and output in the arena */
        uint32_t mapped;   /* 1: it mapped every other rank's arena (after the first barrier) */
} zc_entry_t;

typedef struct shm_header {
        _Atomic uint64_t magic;
        uint32_t local_size;
        uint64_t slot_bytes;
        uint64_t chunk_bytes;  /* set by local rank 0: every rank chunks alike */
        uint64_t chunk_cached; /* likewise: an allreduce's chunk while its data fits the caches (0: chunk_bytes) */
        uint64_t direct_bytes; /* likewise: every rank takes the same path */
        uint64_t zc_bytes;     /* likewise: the zero-copy path's smallest operation, 0: off */
        _Atomic uint32_t attached;
        _Atomic uint32_t aborted;
        char abort_reason[512];
        shm_barrier_t bar;                           /* all local ranks */
        shm_barrier_t set_bar[HVD_MAX_PROCESS_SETS]; /* by process set id */
        _Atomic int32_t cpu[HVD_MAX_SET_LOCAL];      /* by local rank: 1 + its CPU at its last barrier, 0: none yet */
        zc_entry_t zc[2][ZC_MAX_LOCAL];              /* by step parity, local rank */
} shm_header_t;
_Static_assert(sizeof(shm_header_t) <= HEADER_BYTES, "shm header too large");

/* The ranks taking part in one operation: all local ranks, or the members
 * of a process set (which use their own barrier and slot region, and fence
 * every step with a trailing barrier). */
/* Ranks that run a collective among themselves over TCP, each at a
 * position 0..n: the ranks with one local rank on every node, the whole
 * job, or a process set's members across nodes. */
typedef struct hvd_cpu_group {
        int n, me;       /* positions, and mine */
        const int *rank; /* [n]: the job rank at each position (NULL: the position) */
        const int *col;  /* [n]: its index among the op's ranks (rows, splits, reduced rows; NULL: the position) */
        int space;       /* how many ranks the op has: the job's or the set's */
} hvd_cpu_group_t;

static inline int hvd_group_rank(const hvd_cpu_group_t *g, int pos) {
        return g->rank ? g->rank[pos] : pos;
}

static inline int hvd_group_col(const hvd_cpu_group_t *g, int pos) {
        return g->col ? g->col[pos] : pos;
}

typedef struct view {
        int me, size;           /* my index among the members, member count */
        const uint32_t *member; /* member index → local rank; NULL = identity */
        shm_barrier_t *bar;
        bool set;
} view_t;

/* slot_mode.c: per size class of the segment path (and, apart, of the
 * byte streams: broadcast, allgather, alltoall), whether this rank writes
 * its slot with non-temporal stores, from measured rates */
#define HVD_SLOT_MODE_CLASSES 14
typedef struct hvd_slot_mode {
        uint64_t n, since;   /* operations of the class; since it last measured both modes */
        int burst;           /* 0, or which operation of a measurement is next (1 .. 2 x burst) */
        double best[2];      /* that measurement's fastest, bytes/us: in the mode in use, in the other */
        double recent, peak; /* ordinary stores: recent rate, and the best, decaying */
        bool stream;         /* the mode in use */
} hvd_slot_mode_t;

struct hvd_backend {
        int rank, size;
        uint64_t slot_bytes, half_bytes, stride_bytes;
        uint64_t ring_chunk_bytes; /* most bytes of a chunk across nodes (0: half_bytes), alike on every rank */
        uint64_t direct_bytes;     /* allreduce chunks up to this size: one barrier, every rank reduces all */
        uint64_t chunk_bytes;      /* per step of the shared-memory reductions (at most half a slot) */
        uint64_t chunk_default;    /* chunk_bytes as local rank 0 published it (the autotuner's switch off) */
        uint64_t chunk_cached;     /* with chunk_default, for allreduces that fit the caches (0: the same) */
        uint64_t timeout_usec;
        uint64_t step; /* selects the slot half */
        hvd_wait_check_fn check;
        void *userdata;
        shm_header_t *hdr;
        uint8_t *base;
        uint8_t *private_base; /* one rank on this node, several nodes */
        void *board;           /* the fast path's readiness board (after the header), or NULL */
        void *private_board;   /* one rank in the whole job: its board, in private memory */
        size_t map_bytes;
        uint64_t spin_usec;                /* how long a barrier spins before it sleeps (0: not at all) */
        const _Atomic uint32_t *spin_gate; /* topology's: spin only while it is not 0 (NULL: always) */
        const void **srcs;                 /* [size] scratch for reductions */
        uint64_t zc_bytes;                 /* zero-copy allreduces from this size (0: never) */
        struct peer_arena {
                hvd_arena_id_t id;
                const uint8_t *base; /* mapped read-only, or NULL */
        } * peers;                   /* [size] when size <= ZC_MAX_LOCAL */
        bool zc_warned;
        /* several nodes */
        int g_rank, g_size, cross_rank, cross_size;
        int lmin; /* smallest local size of any node: ranks below it drive the network */
        int lmax; /* largest: 1 when every node has one rank */
        int *rank_cross, *rank_local;
        int *node_peer;             /* [cross_size]: rank with my local rank on each node (-1: none) */
        bool node_blocks;           /* every node's ranks are consecutive ranks, in local rank order */
        hvd_cpu_group_t nodes, all; /* node_peer's ranks; every rank of the job */
        int *set_rank;              /* [g_size]: a process set's members, for its group (cpu_set.c) */
        hvd_tcp_t *tcp;
        struct ring *ring; /* the TCP ring's state, allocated on first use */
        uint64_t *mend;    /* [mend_cap]: the ring's member ends (grows, never shrinks) */
        size_t mend_cap;
        uint8_t *scratch; /* grows, never shrinks: no allocation per operation once warm */
        size_t scratch_bytes;
        /* reducescatter across nodes: the whole reduced buffer and the
         * members pointing into it (grow, never shrink, like scratch) */
        uint8_t *rs_full;
        size_t rs_full_bytes;
        hvd_xmember_t *rs_m;
        size_t rs_m_cap;
        struct rsring *rsring; /* the reduce-scatter ring's state (cpu_rsring.c), on first use */
        uint32_t set_local[HVD_MAX_SET_LOCAL];
        hvd_slot_mode_t slot_mode[HVD_SLOT_MODE_CLASSES];
        hvd_slot_mode_t pub_mode[HVD_SLOT_MODE_CLASSES]; /* the byte streams' */
        int slot_stream;                                 /* HVD_SHM_SLOT_STREAM: 0 measured, 1 always, 2 never */
};

static inline uint8_t *slot_of(hvd_backend_t *b, const view_t *v, int k) {
        int local = v->member ? (int) v->member[k] : k;
        uint8_t *slot = b->base + (size_t) local * b->stride_bytes;
        return v->set ? slot + b->slot_bytes : slot + (b->step & 1) * b->half_bytes;
}

/* cpu_backend.c: the barrier of the view's members; chunk [c0, c0 + cl)
 * of the inputs into my slot (all of it, or all but my segment [s0, s1)) */
int hvd_cpu_barrier(hvd_backend_t *b, const view_t *v, const char *what, char *err, size_t err_len);
void hvd_cpu_copy_in(const hvd_xop_t *op, uint8_t *mine, uint64_t c0, uint64_t cl, uint64_t s0, uint64_t s1,
                     bool direct, bool around, size_t es);
/* The end of a step (the halves alternate; a process set's barrier); the
 * factor a result is scaled by (postscale, and 1/size for an average);
 * chunk [c0, c0 + cl) of the members' inputs into slot, and out of the
 * slots (segment k in slot k, but segment skip, -1: none) to the outputs. */
int hvd_cpu_end_step(hvd_backend_t *b, const view_t *v, const char *what, char *err, size_t err_len);
double hvd_cpu_reduce_scale(const hvd_xop_t *op, int size);
/* -EOPNOTSUPP, err naming op and its kind */
int hvd_cpu_unsupported(const hvd_xop_t *op, char *err, size_t err_len);
void hvd_cpu_chunk_copy_in(const hvd_xop_t *op, uint8_t *slot, uint64_t c0, uint64_t cl, bool around, size_t es);
void hvd_cpu_chunk_copy_out(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t c0, uint64_t cl,
                            uint64_t seg, size_t es, int skip, bool stream);

/* cpu_stream.c: a broadcast, allgather or alltoall of the view's members
 * on one node, as byte streams through the slots */
int hvd_cpu_execute_stream(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len);

/* cpu_multi.c: the ring's state from the topology (nothing on one node;
 * takes t->listen_fd), and an operation of the global view across nodes */
int hvd_cpu_multi_init(hvd_backend_t *b, const hvd_topology_t *t);
int hvd_cpu_execute_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len);
/* The allreduce over group g of buf (n elements), or of the outputs of
 * xop's members end to end (buf NULL; every member has an output), scaled
 * by scale: recursive doubling for short messages, else the ring; an
 * allreduce of op among g from its inputs to its outputs (scaled for
 * g->space ranks, aborting the job on failure); an alltoall's pairwise
 * exchanges among g, whose positions index the
 * splits; local: rows between ranks of one node are not sent (they went
 * through the slots). */
int hvd_cpu_allreduce_group(hvd_backend_t *b, const hvd_cpu_group_t *g, hvd_dtype_t dt, hvd_reduce_op_t op,
                            uint8_t *buf, const hvd_xop_t *xop, uint64_t n, double scale, char *err, size_t err_len);
int hvd_cpu_reduce_direct(hvd_backend_t *b, const hvd_cpu_group_t *g, const hvd_xop_t *op, char *err, size_t err_len);
int hvd_cpu_alltoall_pairs(hvd_backend_t *b, const hvd_cpu_group_t *g, const hvd_xop_t *op, bool local, char *err,
                           size_t err_len);
/* cpu_gather.c: a broadcast and an allgather of the global view across
 * nodes; a chain of N ranks from the root (pos 0) between prev and next;
 * an allgather's ring over group g, whose columns index the rows */
int hvd_cpu_broadcast_nodes(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len);
int hvd_cpu_allgather_nodes(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len);
int hvd_cpu_broadcast_chain(hvd_backend_t *b, const hvd_xop_t *op, int pos, int N, int prev, int next, char *err,
                            size_t err_len);
int hvd_cpu_allgather_group(hvd_backend_t *b, const hvd_cpu_group_t *g, const hvd_xop_t *op, char *err, size_t err_len);
/* cpu_set.c: an operation of a process set whose members are on several
 * nodes (me: my index among them), over TCP between its members */
int hvd_cpu_execute_set(hvd_backend_t *b, const hvd_xop_t *op, int me, char *err, size_t err_len);
/* b->scratch and b->rs_full, grown to at least bytes (NULL: out of memory) */
uint8_t *hvd_cpu_scratch(hvd_backend_t *b, size_t bytes);
uint8_t *hvd_cpu_rs_full(hvd_backend_t *b, size_t bytes);

/* cpu_rsring.c: reducescatter across nodes as a ring reduce-scatter.
 * _ring: among group g (nodes of one rank each, or a process set's
 * members), op's inputs to its outputs (prescale,
 * postscale and average applied). _slice: slice [s0, s1) of chunk c0 of
 * op's fused elements, in slot (the chunk, this node's ranks' slots
 * reduced into it), reduce-scattered among the nodes in place: the rows
 * of this node's ranks complete and scaled by scale. _copy_out: this
 * rank's rows of chunk [c0, c0 + cl), slice k in local rank k's slot
 * (slices of sl elements), to its outputs. */
int hvd_cpu_reducescatter_ring(hvd_backend_t *b, const hvd_cpu_group_t *g, const hvd_xop_t *op, char *err,
                               size_t err_len);
int hvd_cpu_reducescatter_slice(hvd_backend_t *b, const hvd_xop_t *op, uint8_t *slot, uint64_t c0, uint64_t s0,
                                uint64_t s1, double scale, char *err, size_t err_len);
void hvd_cpu_reducescatter_copy_out(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t c0, uint64_t cl,
                                    uint64_t sl, size_t es);
void hvd_cpu_rsring_free(struct rsring *g);

/* The size class of an operation of bytes on the segment path (NULL: too
 * small to measure); whether its next operation streams the slot writes;
 * the time that operation took (usec). */
hvd_slot_mode_t *hvd_slot_mode_of(hvd_backend_t *b, uint64_t bytes);
/* The same for a byte stream of which this rank publishes bytes. */
hvd_slot_mode_t *hvd_slot_mode_of_stream(hvd_backend_t *b, uint64_t bytes);
bool hvd_slot_mode_stream(const hvd_slot_mode_t *m);
void hvd_slot_mode_note(hvd_slot_mode_t *m, uint64_t bytes, uint64_t usec);

/* zero_copy.c: whether an allreduce may take the zero-copy path (alike on
 * every rank), and the path itself (1: done, 0: the chunked path goes on
 * with the first chunk in the slots, < 0: an error) */
bool hvd_zc_eligible(const hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t total, size_t es);
int hvd_zc_run(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t total, uint64_t cl, uint64_t s0,
               uint64_t s1, bool direct, bool around, size_t es, double post, char *err, size_t err_len);

#endif
