/* backend.h — the CPU data plane's interface: the backend executes one
 * fused operation of a schedule for this rank (shared memory between the
 * ranks of a node, TCP between nodes). It is built into libhvd. GPU work
 * does not come here: it goes to the GPU module through its own table
 * (gpu_module.h), which shares the operation (hvd_xop_t) and the topology
 * (hvd_topology_t) types defined here. Called by the runner only (client.h):
 * the background thread, or a user thread taking the fast path's turn. */
#ifndef HVD_BACKEND_H
#define HVD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hvd.h"

/* One member tensor of a fused operation, as this rank sees it. */
typedef struct hvd_xmember {
        const void *in;           /* NULL: this rank contributes zeros / no rows (joined) */
        void *out;                /* NULL: discard the result (joined) */
        uint64_t count;           /* elements of the (common) tensor; allgather/alltoall: unused */
        uint64_t row_elems;       /* elements per first-dimension row */
        const int64_t *rank_rows; /* allgather: rows each rank contributes [size];
                                     reducescatter: NULL (rows = shape[0]) */
        int64_t rows;             /* reducescatter: first dimension */
        const int64_t *splits;    /* alltoall: [size * size] rows, [src][dst] */
        void *stream;             /* GPU: the cudaStream_t the input is ready on, or NULL */
} hvd_xmember_t;

typedef struct hvd_xop {
        uint32_t kind; /* HVD__KIND__* */
        hvd_dtype_t dtype;
        hvd_reduce_op_t reduce_op;
        double prescale, postscale;
        int root;
        const char *name; /* first member's name, for messages */
        size_t n;
        const hvd_xmember_t *m;
        int device;                /* HVD_DEVICE_CPU or the GPU the members live on */
        uint32_t process_set;      /* 0 = all ranks */
        const uint32_t *set_ranks; /* members (ranks), when process_set != 0 */
        size_t n_set;
        /* the timeline, while one is recording (else NULL): called with
         * HVD_TL_PHASE_* as the operation moves between phases */
        void (*phase)(void *userdata, int phase);
        void *phase_userdata;
} hvd_xop_t;

/* What the data plane is doing inside an operation (hvd_xop_t.phase). */
enum {
        HVD_TL_PHASE_NONE = 0,
        HVD_TL_PHASE_COPY_IN,    /* inputs into the fusion buffer */
        HVD_TL_PHASE_COLLECTIVE, /* the collective inside the node (shared memory) */
        HVD_TL_PHASE_NETWORK,    /* the collective across nodes (TCP ring) */
        HVD_TL_PHASE_COPY_OUT,   /* results out of the fusion buffer */
};

static inline void hvd_xop_phase(const hvd_xop_t *op, int phase) {
        if (op->phase)
                op->phase(op->phase_userdata, phase);
}

#define HVD_MAX_PROCESS_SETS 64

/* Called while waiting; returns < 0 (and fills err) to give up because the
 * job was aborted. */
typedef int (*hvd_wait_check_fn)(void *userdata, char *err, size_t err_len);

typedef struct hvd_backend hvd_backend_t;

/* Where this rank is, and how to reach the others. */
typedef struct hvd_topology {
        int rank, size;             /* in the job */
        int local_rank, local_size; /* on this node */
        int cross_rank, cross_size; /* this node among the job's nodes */
        const int *rank_cross;      /* [size]: node of each rank */
        const int *rank_local;      /* [size]: local rank of each rank */
        char *const *addrs;         /* [size]: data-plane "ip:port" of each rank */
        int listen_fd;              /* this rank's data-plane listener, or -1 */
        uint64_t job_hash;
        bool ring_checksum;           /* a CRC-32C on every TCP ring frame (the job's setting) */
        uint64_t shm_chunk_bytes;     /* HVD_SHM_CHUNK_BYTES (>= 4096), 0: the backend's choice */
        uint64_t shm_direct_bytes;    /* HVD_SHM_DIRECT_BYTES (>= 1), 0: the backend's choice */
        uint64_t shm_zero_copy_bytes; /* HVD_SHM_ZERO_COPY_BYTES, 0: the backend's choice, UINT64_MAX: off */
        int shm_slot_stream;          /* HVD_SHM_SLOT_STREAM: 0 measured, 1 always, 2 never (slot_mode.c) */
        bool tcp_send_thread;         /* HVD_TCP_SEND_THREAD: large TCP exchanges send on a thread of their own */
        uint64_t tcp_frame_bytes;     /* HVD_TCP_FRAME_BYTES, 0: HVD_TCP_FRAME_BYTES */
        uint64_t ring_chunk_bytes;    /* HVD_RING_CHUNK_BYTES: most bytes of a hierarchical chunk, 0: half a slot */
        /* an _Atomic uint32_t, borrowed, or NULL (always): a barrier spins
         * only while it is not 0, i.e. while an application thread waits
         * for an operation; otherwise the application computes, and a
         * spin would take its core (client.h's app_waiting) */
        const void *spin_gate;
} hvd_topology_t;

/* CPU backend: shared memory between the ranks of this node (segment
 * shm_name: local rank 0 creates it, everyone attaches, the last to attach
 * unlinks the name), and TCP between nodes. One rank needs no segment.
 * Takes ownership of topo->listen_fd. */
int hvd_cpu_backend_new(const char *shm_name, const hvd_topology_t *topo, uint64_t slot_bytes, uint64_t timeout_usec,
                        hvd_wait_check_fn check, void *userdata, hvd_backend_t **ret, char *err, size_t err_len);

/* Executes op; returns 0 or < 0 with a message in err. */
int hvd_backend_execute(hvd_backend_t *b, const hvd_xop_t *op, char *err, size_t err_len);
/* The fast path's readiness board in the node's shared memory
 * (hvd_fastpath_board_bytes(local_size) bytes, zeroed at creation), and the
 * data plane's abort flag (an _Atomic uint32_t); both borrowed, valid until destroy. NULL when
 * this rank is alone on its node. */
void *hvd_backend_board(hvd_backend_t *b, const void **aborted);
/* The autotuner's switches (HVD_TUNE_SWITCH_* bits, tune_search.h), in
 * force from the next operation; a bit in `fixed` keeps what the topology
 * set. Every rank of a job switches at the same schedule (the chunk size
 * must agree across nodes). b may be NULL. */
void hvd_backend_set_switches(hvd_backend_t *b, uint32_t switches, uint32_t fixed);
/* Marks the job aborted for every local rank (wakes their waits). */
void hvd_backend_abort(hvd_backend_t *b, const char *reason);
void hvd_backend_destroy(hvd_backend_t **b);

/* reducescatter: rows of rank r out of `rows` split over size ranks. */
static inline void hvd_reducescatter_rows(int64_t rows, int size, int r, int64_t *start, int64_t *n) {
        int64_t q = rows / size, rem = rows % size;
        *start = r * q + (r < rem ? r : rem);
        *n = q + (r < rem ? 1 : 0);
}

/* reducescatter: rank r's rows of member m as its elements [*e0, *e1). */
static inline void hvd_reducescatter_elems(const hvd_xmember_t *m, int size, int r, uint64_t *e0, uint64_t *e1) {
        int64_t start, n;
        hvd_reducescatter_rows(m->rows, size, r, &start, &n);
        *e0 = (uint64_t) start * m->row_elems;
        *e1 = *e0 + (uint64_t) n * m->row_elems;
}

#endif
