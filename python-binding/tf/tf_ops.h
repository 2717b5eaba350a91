/* tf_ops.h — what the parts of hvd's TensorFlow op library share: the
 * copied done callbacks (done.cc), the operations in flight and their
 * completion thread (complete.c), the kernels (kernels.c) registered by
 * ops.c, the kept output buffers (outbuf.c). C and C++ (done.cc sees
 * only the callback functions). */
#ifndef HVD_TF_OPS_H
#define HVD_TF_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

struct TF_AsyncOpKernelDoneCallback;

/* A copy of TensorFlow's done callback, valid until run. */
typedef struct hvd_tf_done hvd_tf_done_t;

/* Copies cb (which dies when the compute function returns); NULL when out
 * of memory. */
hvd_tf_done_t *hvd_tf_done_copy(struct TF_AsyncOpKernelDoneCallback *cb);
/* Runs the copy once and frees it; sets *done = NULL. */
void hvd_tf_done_run(hvd_tf_done_t **done);

#ifdef __cplusplus
}
#endif

#ifndef __cplusplus
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* kernels.h itself is included by the files that call it (ops.c,
 * kernels.c): it defines a constant that C gives external linkage. */
#include <tensorflow/c/tf_status.h>
#include <tensorflow/c/tf_tensor.h>

typedef struct TF_OpKernelConstruction TF_OpKernelConstruction;
typedef struct TF_OpKernelContext TF_OpKernelContext;

#include "hvd.h"

/* What an op does; hvd_tf_op_types[] (kernels.c) names its op type. */
typedef enum hvd_tf_kind {
        HVD_TF_ALLREDUCE,
        HVD_TF_GROUPED_ALLREDUCE,
        HVD_TF_ALLGATHER,
        HVD_TF_BROADCAST,
        HVD_TF_ALLTOALL,
        HVD_TF_REDUCESCATTER,
        HVD_TF_GROUPED_ALLGATHER,
        HVD_TF_GROUPED_REDUCESCATTER,
        HVD_TF_N_COLLECTIVES,
        /* not collectives of tensors */
        HVD_TF_SIZE = HVD_TF_N_COLLECTIVES,
        HVD_TF_RANK,
        HVD_TF_LOCAL_SIZE,
        HVD_TF_LOCAL_RANK,
        HVD_TF_PROCESS_SET_INCLUDED,
        HVD_TF_JOIN,
        HVD_TF_BARRIER,
        _HVD_TF_KIND_COUNT
} hvd_tf_kind_t;

/* The op type registered for each kind ("HvdAllreduce", ...). */
extern const char *const hvd_tf_op_types[_HVD_TF_KIND_COUNT];

/* One kernel instance (one node of a graph, or one eager kernel): its
 * attributes, read once when TensorFlow creates it. */
typedef struct hvd_tf_kernel {
        hvd_tf_kind_t kind;
        hvd_reduce_op_t reduce_op;
        double prescale, postscale;
        int root;
        int process_set; /* also of size, rank, process_set_included */
        char *name;      /* the tensor name, from the name attr or the node; NULL: eager, numbered */
        bool eager;      /* an eager kernel (named after its op type), not a node of a graph */
        /* a large input of this node was not handed over as its output once:
         * its outputs are kept buffers from then on (kernels.c) */
        _Atomic bool no_forward;
} hvd_tf_kernel_t;

/* One execution of a kernel, from its compute function to its done
 * callback: owns its input and output views and the hvd handle. */
typedef struct hvd_tf_op {
        struct hvd_tf_op *next; /* the completion queue */
        const hvd_tf_kernel_t *kernel;
        TF_OpKernelContext *ctx;
        hvd_tf_done_t *done;
        hvd_handle_t *handle;
        int n;                          /* tensors (1 unless grouped) */
        TF_Tensor **in;                 /* [n] */
        TF_Tensor **out;                /* [n], outputs allocated before submission */
        TF_DataType *dtype;             /* [n] */
        int64_t (*shape)[HVD_MAX_NDIM]; /* [n]: the requests' shapes, valid until completion */
        int64_t *splits;                /* alltoall: the rows sent to each rank, or NULL */
        bool counted;                   /* a graph op counted in flight (kernels.c) */
} hvd_tf_op_t;

/* Hands op to the completion thread once its handle completes (through
 * hvd_handle_notify). Returns 0 or a negative error (then op is still the
 * caller's). */
int hvd_tf_complete_when_done(hvd_tf_op_t *op);

/* The completion thread's work for one op: results into TensorFlow's
 * outputs or a failure into its context, then done; frees op. Also used
 * on the compute thread for an op that failed before submission. */
void hvd_tf_op_finish(hvd_tf_op_t *op);

/* Restarts the numbering of eager executions in a process set (< 0: in
 * all), whose id has been given anew or released, or at hvd's init: the
 * set's members then count alike. Called by hvd.tensorflow through ctypes;
 * not thread-safe against executions in that set. */
__attribute__((visibility("default"))) void hvd_tf_names_reset(int process_set);

/* How many outputs of allreduce and broadcast took their input's buffer
 * (reduced in place), and how many were kept buffers, since the library
 * loaded. Called by hvd.tensorflow's tests through ctypes. */
__attribute__((visibility("default"))) void hvd_tf_output_counts(uint64_t *forwarded, uint64_t *kept);

/* Outputs of allreduce and broadcast of at least this many bytes are
 * buffers kept for reuse (outbuf.c, ../kept.h). */
#define HVD_TF_OUTBUF_MIN_BYTES ((size_t) 256 << 10) /* HVD_KEPT_MIN_BYTES */

/* A new tensor over a kept buffer of bytes (or a new one), given back to
 * the pool when TensorFlow frees it; NULL when out of memory. Owned by the
 * caller (TF_DeleteTensor). Thread-safe. */
TF_Tensor *hvd_tf_outbuf_tensor(TF_DataType dtype, const int64_t *dims, int ndim, size_t bytes);

/* Records a failure with hvd's code and message in ctx. */
void hvd_tf_fail(TF_OpKernelContext *ctx, int err, const char *msg);

/* The kernels' functions, registered by ops.c. */
void *hvd_tf_kernel_new(TF_OpKernelConstruction *ctx, hvd_tf_kind_t kind);
void hvd_tf_kernel_destroy(void *kernel);
void hvd_tf_compute(void *kernel, TF_OpKernelContext *ctx, struct TF_AsyncOpKernelDoneCallback *done);
void hvd_tf_compute_scalar(void *kernel, TF_OpKernelContext *ctx);
/* join and barrier: hvd's blocking calls, on a thread of their own */
void hvd_tf_compute_blocking(void *kernel, TF_OpKernelContext *ctx, struct TF_AsyncOpKernelDoneCallback *done);
#endif

#endif
