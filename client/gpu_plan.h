/* gpu_plan.h — planning of the GPU data plane in pure C (no CUDA headers):
 * where each member of a fused operation lives in the GPU fusion buffer,
 * how its copies are cut and batched into copy-kernel launches, which NCCL
 * calls run in which step, and which operations of a libhvd group share one
 * ncclGroupStart/End. libhvd-nccl executes what this plans; tests/
 * check_gpu_plan.c checks it without a GPU.
 *
 * Every decision that shapes the sequence of NCCL calls (direct or fused,
 * number of steps, window sizes, group boundaries) depends only on values
 * that are the same on every rank (the schedule, the agreed capacity), never
 * on this rank's pointers: a joined rank (in/out NULL) issues exactly the
 * calls its peers issue. Not thread-safe by itself; no allocation. */
#ifndef HVD_GPU_PLAN_H
#define HVD_GPU_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every member starts at a multiple of this in the fusion buffer (and every
 * per-rank block and window is a multiple of it): cudaMalloc alignment,
 * enough for 16-byte vector copies and for any element size. */
#define HVD_GPU_ALIGN_BYTES 256
/* Copy descriptors per copy-kernel launch. The batch goes to the kernel by
 * value, so sizeof(hvd_gpu_batch_t) must stay below CUDA's 4 KiB parameter
 * limit. */
#define HVD_GPU_BATCH_CAPACITY 128
/* Largest piece one thread block copies; longer copies are cut into pieces
 * (at multiples of HVD_GPU_ALIGN_BYTES) so the blocks of a launch share work. */
#define HVD_GPU_PIECE_BYTES (UINT64_C(256) << 10)
/* NCCL calls in one ncclGroupStart/End at most (a single alltoall member
 * that needs more gets a group of its own). */
#define HVD_GPU_GROUP_MAX_CALLS 2048

/* NCCL data types and reduction ops. Values are ncclDataType_t /
 * ncclRedOp_t; nccl_module.c asserts that they agree. */
typedef enum hvd_gpu_type {
        HVD_GPU_T_INT8 = 0,
        HVD_GPU_T_UINT8 = 1,
        HVD_GPU_T_INT32 = 2,
        HVD_GPU_T_INT64 = 4,
        HVD_GPU_T_FLOAT16 = 6,
        HVD_GPU_T_FLOAT32 = 7,
        HVD_GPU_T_FLOAT64 = 8,
        HVD_GPU_T_BFLOAT16 = 9,
        HVD_GPU_T_NONE = -1
} hvd_gpu_type_t;

typedef enum hvd_gpu_redop {
        HVD_GPU_OP_SUM = 0,
        HVD_GPU_OP_PROD = 1,
        HVD_GPU_OP_MAX = 2,
        HVD_GPU_OP_MIN = 3,
        HVD_GPU_OP_AVG = 4
} hvd_gpu_redop_t;

/* What the NCCL library offers (run-time and compile-time). */
#define HVD_GPU_HAS_AVG  0x1u /* ncclAvg: NCCL >= 2.10 */
#define HVD_GPU_HAS_BF16 0x2u /* ncclBfloat16: NCCL >= 2.10 */

/* ---- copies ---- */

typedef enum hvd_gpu_copy_mode {
        HVD_GPU_COPY = 0,       /* bytes */
        HVD_GPU_COPY_SCALE = 1, /* elements of dtype times scale (CPU rounding rules) */
        HVD_GPU_COPY_BOOL = 2   /* bytes normalised to 0/1 */
} hvd_gpu_copy_mode_t;

/* One copy: bytes from src to dst (device addresses). src == 0 writes zeros. */
typedef struct hvd_gpu_copy {
        uint64_t src, dst, bytes;
} hvd_gpu_copy_t;

/* One launch of the batched copy kernel: one thread block per entry. */
typedef struct hvd_gpu_batch {
        uint32_t n;    /* entries used */
        uint32_t mode; /* hvd_gpu_copy_mode_t */
        int32_t dtype; /* hvd_dtype_t, for HVD_GPU_COPY_SCALE */
        uint32_t reserved;
        double scale;
        hvd_gpu_copy_t c[HVD_GPU_BATCH_CAPACITY];
} hvd_gpu_batch_t;

typedef int (*hvd_gpu_batch_fn)(void *userdata, const hvd_gpu_batch_t *b);

/* Collects copies of one mode into batches; calls fn for each full batch
 * and for the last one at hvd_gpu_batcher_finish(). */
typedef struct hvd_gpu_batcher {
        hvd_gpu_batch_t b;
        hvd_gpu_batch_fn fn;
        void *userdata;
        uint64_t launches; /* batches handed to fn so far */
} hvd_gpu_batcher_t;

void hvd_gpu_batcher_init(hvd_gpu_batcher_t *bt, hvd_gpu_copy_mode_t mode, hvd_dtype_t dtype, double scale,
                          hvd_gpu_batch_fn fn, void *userdata);
/* Adds a copy, cut into pieces of at most HVD_GPU_PIECE_BYTES; 0 bytes is
 * nothing. Returns 0 or what fn returned (< 0). */
int hvd_gpu_batcher_add(hvd_gpu_batcher_t *bt, uint64_t dst, uint64_t src, uint64_t bytes);
int hvd_gpu_batcher_finish(hvd_gpu_batcher_t *bt);

/* ---- types and reductions ---- */

size_t hvd_gpu_dtype_size(hvd_dtype_t dt);
/* The NCCL type that reduces dt, or HVD_GPU_T_NONE (int16; bfloat16
 * without HVD_GPU_HAS_BF16). bool reduces as uint8 (after normalising). */
hvd_gpu_type_t hvd_gpu_reduce_type(hvd_dtype_t dt, uint32_t features);

/* How a reduction runs: the copy-in transform, the NCCL op, the copy-out
 * transform. */
typedef struct hvd_gpu_reduce {
        hvd_gpu_type_t type;
        hvd_gpu_redop_t op;
        hvd_gpu_copy_mode_t pre_mode, post_mode;
        double pre_scale, post_scale;
} hvd_gpu_reduce_t;

/* Returns 0, or -EOPNOTSUPP / -EINVAL with a message naming `name`.
 * Average uses ncclAvg when the library has it (else SUM and 1/size folded
 * into the post scale); postscale always runs as a copy-out transform.
 * bool: SUM/MAX/AVERAGE = or (MAX of 0/1), MIN/PRODUCT = and, never scaled. */
int hvd_gpu_reduce_plan(const char *name, hvd_dtype_t dt, hvd_reduce_op_t op, double prescale, double postscale,
                        int size, uint32_t features, hvd_gpu_reduce_t *ret, char *err, size_t err_len);

/* ---- operations ---- */

typedef enum hvd_gpu_call_kind {
        HVD_GPU_CALL_ALLREDUCE = 0,
        HVD_GPU_CALL_BROADCAST = 1,
        HVD_GPU_CALL_ALLGATHER = 2,
        HVD_GPU_CALL_REDUCESCATTER = 3,
        HVD_GPU_CALL_SEND = 4,
        HVD_GPU_CALL_RECV = 5
} hvd_gpu_call_kind_t;

/* One NCCL call. count is in elements of type (data movement uses uint8 and
 * bytes). peer: broadcast root, send/recv peer, both as ranks of the op. */
typedef struct hvd_gpu_call {
        uint32_t kind;
        int32_t type; /* hvd_gpu_type_t */
        uint32_t op;  /* hvd_gpu_redop_t */
        int32_t peer;
        uint64_t send, recv, count;
} hvd_gpu_call_t;

#define HVD_GPU_PHASE_IN  0 /* before the step's NCCL calls */
#define HVD_GPU_PHASE_OUT 1 /* after them */

/* Receives a plan, in order, step by step: the step's IN batches, its NCCL
 * calls (one group), its OUT batches, then step_end. Each returns 0 or < 0
 * to stop. */
typedef struct hvd_gpu_emit {
        int (*batch)(void *userdata, int phase, const hvd_gpu_batch_t *b);
        int (*call)(void *userdata, const hvd_gpu_call_t *c);
        int (*step_end)(void *userdata);
        void *userdata;
} hvd_gpu_emit_t;

typedef struct hvd_gpu_plan_args {
        const hvd_xop_t *op;
        int me, size;       /* this rank and the ranks of the op (process set or job) */
        uint64_t fbuf;      /* device address of the fusion-buffer region the op may use */
        uint64_t cap_bytes; /* fusion buffer capacity all ranks agreed on; the plan's
                               decisions use it. A multiple of HVD_GPU_ALIGN_BYTES and
                               >= size * HVD_GPU_ALIGN_BYTES. */
        uint32_t features;  /* HVD_GPU_HAS_* */
        uint32_t max_calls; /* NCCL calls per step; 0 = HVD_GPU_GROUP_MAX_CALLS */
        uint64_t *scratch;  /* size entries the plan may overwrite (NULL when size == 1) */
} hvd_gpu_plan_args_t;

typedef struct hvd_gpu_plan_info {
        uint32_t steps;          /* NCCL groups the op needs, one after another */
        uint64_t fbuf_bytes;     /* largest fusion-buffer region any step uses on any rank */
        uint64_t calls;          /* NCCL calls over all steps, on this rank */
        uint64_t max_step_calls; /* bound of the calls of one step, the same on every rank */
        bool p2p;                /* send/recv (alltoall) rather than collectives */
        bool direct;             /* NCCL reads and writes the member tensors themselves */
        hvd_gpu_reduce_t reduce; /* reductions */
} hvd_gpu_plan_info_t;

/* Plans (and with e != NULL, emits) one operation. With e == NULL it only
 * validates and fills *info, which is how the module checks an op before it
 * touches the GPU. Returns 0 or < 0 (argument errors with a message in err,
 * or what an emit callback returned). */
int hvd_gpu_plan_op(const hvd_gpu_plan_args_t *a, const hvd_gpu_emit_t *e, hvd_gpu_plan_info_t *info, char *err,
                    size_t err_len);

/* ---- groups ----
 * Inside a libhvd group (group_start .. group_end), operations whose plan is
 * one step share one ncclGroupStart/End while their fusion-buffer regions
 * fit side by side; collectives and send/recv never share one. */
typedef struct hvd_gpu_group {
        uint64_t cap_bytes; /* fusion buffer */
        uint64_t used;      /* bytes taken by the open group */
        uint64_t calls;     /* bound of its NCCL calls */
        uint32_t n_ops;
        int p2p; /* -1: empty */
} hvd_gpu_group_t;

typedef enum hvd_gpu_place {
        HVD_GPU_PLACE_JOIN = 0,       /* joins the open group at *offset */
        HVD_GPU_PLACE_FLUSH_JOIN = 1, /* flush the open group, then start a new one with it (offset 0) */
        HVD_GPU_PLACE_ALONE = 2       /* flush the open group, then run it alone (several steps) */
} hvd_gpu_place_t;

void hvd_gpu_group_init(hvd_gpu_group_t *g, uint64_t cap_bytes);
/* Decides where an operation with plan info goes and accounts for it.
 * After FLUSH_JOIN the group holds just this op; after ALONE it is empty. */
hvd_gpu_place_t hvd_gpu_group_place(hvd_gpu_group_t *g, const hvd_gpu_plan_info_t *info, uint64_t *offset);
/* Empties the group (after a flush). */
void hvd_gpu_group_reset(hvd_gpu_group_t *g);

static inline uint64_t hvd_gpu_align_up(uint64_t x) {
        return (x + HVD_GPU_ALIGN_BYTES - 1) & ~(uint64_t) (HVD_GPU_ALIGN_BYTES - 1);
}

#ifdef __cplusplus
}
#endif
#endif
