/* kernels.c — the compute functions of hvd's TensorFlow ops: each
 * execution turns its input tensors into libhvd requests, submits them
 * asynchronously and returns; the completion thread (complete.c) finishes
 * it. An eager execution, whose caller waits for it anyway, finishes on
 * the calling thread. Outputs of a known shape (allreduce, broadcast) are
 * allocated before submission (a kept buffer from 256 KiB, else the
 * input's where TensorFlow allows) and hvd writes into them; the others
 * are allocated at completion. Names: the name attribute, else the node's
 * name, else (eager execution, where a kernel is named after its op type)
 * a number counted per kind and process set, so that every rank names the
 * same call alike. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorflow/c/kernels.h>

#include "tf_ops.h"

#define MAX_PROCESS_SETS 64 /* ids libhvd gives are below this */
#define NAME_CAP         (HVD_MAX_NAME_BYTES + 96)

const char *const hvd_tf_op_types[_HVD_TF_KIND_COUNT] = {
        [HVD_TF_ALLREDUCE] = "HvdAllreduce",
        [HVD_TF_GROUPED_ALLREDUCE] = "HvdGroupedAllreduce",
        [HVD_TF_ALLGATHER] = "HvdAllgather",
        [HVD_TF_BROADCAST] = "HvdBroadcast",
        [HVD_TF_ALLTOALL] = "HvdAlltoall",
        [HVD_TF_REDUCESCATTER] = "HvdReducescatter",
        [HVD_TF_GROUPED_ALLGATHER] = "HvdGroupedAllgather",
        [HVD_TF_GROUPED_REDUCESCATTER] = "HvdGroupedReducescatter",
        [HVD_TF_SIZE] = "HvdSize",
        [HVD_TF_RANK] = "HvdRank",
        [HVD_TF_LOCAL_SIZE] = "HvdLocalSize",
        [HVD_TF_LOCAL_RANK] = "HvdLocalRank",
        [HVD_TF_PROCESS_SET_INCLUDED] = "HvdProcessSetIncluded",
        [HVD_TF_JOIN] = "HvdJoin",
        [HVD_TF_BARRIER] = "HvdBarrier",
};

/* The prefix of the tensor names, as the other frontends of hvd name them. */
static const char *const kind_prefix[HVD_TF_N_COLLECTIVES] = {
        [HVD_TF_ALLREDUCE] = "allreduce",
        [HVD_TF_GROUPED_ALLREDUCE] = "grouped_allreduce",
        [HVD_TF_ALLGATHER] = "allgather",
        [HVD_TF_BROADCAST] = "broadcast",
        [HVD_TF_ALLTOALL] = "alltoall",
        [HVD_TF_REDUCESCATTER] = "reducescatter",
        [HVD_TF_GROUPED_ALLGATHER] = "grouped_allgather",
        [HVD_TF_GROUPED_REDUCESCATTER] = "grouped_reducescatter",
};

/* A graph op alone in flight waits for its result this long on
 * TensorFlow's thread before it leaves it to the completion thread: in a
 * chain the op cannot complete before the other ranks reach it anyway, and
 * on a loaded machine they often come 200 µs or more later (a wait of
 * 200 µs ran out on 1 op in 10 there, one of 1 ms on 1 in 60 at most). */
#define INLINE_WAIT_USEC 1000

/* graph executions submitted and not yet finished (see finished_inline) */
static atomic_int graph_in_flight;

/* eager executions so far, per kind and process set */
static atomic_uint_fast64_t noname[HVD_TF_N_COLLECTIVES][MAX_PROCESS_SETS];

void hvd_tf_names_reset(int process_set) {
        for (int k = 0; k < HVD_TF_N_COLLECTIVES; k++)
                for (int ps = 0; ps < MAX_PROCESS_SETS; ps++)
                        if (process_set < 0 || ps == process_set)
                                atomic_store(&noname[k][ps], 0);
}

void hvd_tf_fail(TF_OpKernelContext *ctx, int err, const char *msg) {
        TF_Code code;
        switch (err) {
        case -EINVAL:
        case -E2BIG:
        case HVD_EDUPLICATE: code = TF_INVALID_ARGUMENT; break;
        case HVD_EMISMATCH:
        case -ENOENT:
        case HVD_ENOTINIT: code = TF_FAILED_PRECONDITION; break;
        case HVD_EABORTED:
        case HVD_ESHUTDOWN: code = TF_ABORTED; break;
        /* hvd.tensorflow.elastic knows a reset by this code and text */
        case HVD_ERESET:
                code = TF_ABORTED;
                msg = NULL;
                break;
        case HVD_ETIMEOUT: code = TF_DEADLINE_EXCEEDED; break;
        case HVD_ENODAEMON: code = TF_UNAVAILABLE; break;
        case HVD_ENODEVICE: code = TF_UNIMPLEMENTED; break;
        case -ENOMEM: code = TF_RESOURCE_EXHAUSTED; break;
        default: code = TF_INTERNAL;
        }
        TF_Status *st = TF_NewStatus();
        TF_SetStatus(st, code, msg && *msg ? msg : hvd_strerror(err));
        TF_OpKernelContext_Failure(ctx, st);
        TF_DeleteStatus(st);
}

static int dtype_to_hvd(TF_DataType t, hvd_dtype_t *out) {
        switch (t) {
        case TF_UINT8: *out = HVD_UINT8; return 0;
        case TF_INT8: *out = HVD_INT8; return 0;
        case TF_INT16: *out = HVD_INT16; return 0;
        case TF_INT32: *out = HVD_INT32; return 0;
        case TF_INT64: *out = HVD_INT64; return 0;
        case TF_HALF: *out = HVD_FLOAT16; return 0;
        case TF_BFLOAT16: *out = HVD_BFLOAT16; return 0;
        case TF_FLOAT: *out = HVD_FLOAT32; return 0;
        case TF_DOUBLE: *out = HVD_FLOAT64; return 0;
        case TF_BOOL: *out = HVD_BOOL; return 0;
        default: return -EINVAL;
        }
}

/* ---- kernel instances ---- */

static int attr_int(TF_OpKernelConstruction *ctx, const char *name, int *out, TF_Status *st) {
        int32_t v = 0;
        TF_OpKernelConstruction_GetAttrInt32(ctx, name, &v, st);
        if (TF_GetCode(st) != TF_OK)
                return -1;
        *out = v;
        return 0;
}

static int attr_float(TF_OpKernelConstruction *ctx, const char *name, double *out, TF_Status *st) {
        float v = 0;
        TF_OpKernelConstruction_GetAttrFloat(ctx, name, &v, st);
        if (TF_GetCode(st) != TF_OK)
                return -1;
        *out = v;
        return 0;
}

/* The name attr ("" when unset), malloc'd. */
static char *attr_string(TF_OpKernelConstruction *ctx, const char *name, TF_Status *st) {
        int32_t list = 0, total = 0;
        TF_OpKernelConstruction_GetAttrSize(ctx, name, &list, &total, st);
        if (TF_GetCode(st) != TF_OK || total < 0)
                return NULL;
        char *s = malloc((size_t) total + 1);
        if (!s)
                return NULL;
        TF_OpKernelConstruction_GetAttrString(ctx, name, s, (size_t) total, st);
        s[total] = '\0';
        if (TF_GetCode(st) != TF_OK) {
                free(s);
                return NULL;
        }
        return s;
}

/* "<kind>.<base>", or "<kind>.ps<id>.<base>" in process set id (names are
 * scoped by process set, as in Horovod). */
static char *make_name(hvd_tf_kind_t kind, int process_set, const char *base) {
        char *s = NULL;
        int r = process_set ? asprintf(&s, "%s.ps%d.%s", kind_prefix[kind], process_set, base)
                            : asprintf(&s, "%s.%s", kind_prefix[kind], base);
        return r < 0 ? NULL : s;
}

void hvd_tf_kernel_destroy(void *kp) {
        hvd_tf_kernel_t *k = kp;
        if (!k)
                return;
        free(k->name);
        free(k);
}

static void *construction_failed(TF_OpKernelConstruction *ctx, hvd_tf_kernel_t *k, TF_Status *st, const char *msg) {
        if (msg)
                TF_SetStatus(st, TF_INVALID_ARGUMENT, msg);
        TF_OpKernelConstruction_Failure(ctx, st);
        TF_DeleteStatus(st);
        hvd_tf_kernel_destroy(k);
        return NULL;
}

void *hvd_tf_kernel_new(TF_OpKernelConstruction *ctx, hvd_tf_kind_t kind) {
        hvd_tf_kernel_t *k = calloc(1, sizeof *k);
        TF_Status *st = TF_NewStatus();
        if (!k || !st) {
                TF_DeleteStatus(st);
                free(k);
                return NULL;
        }
        k->kind = kind;
        k->reduce_op = HVD_REDUCE_SUM;
        k->prescale = k->postscale = 1.0;
        bool in_set = kind < HVD_TF_N_COLLECTIVES || kind == HVD_TF_SIZE || kind == HVD_TF_RANK ||
                      kind == HVD_TF_PROCESS_SET_INCLUDED;
        if (in_set && attr_int(ctx, "process_set", &k->process_set, st) < 0)
                return construction_failed(ctx, k, st, NULL);
        if (k->process_set < 0 || k->process_set >= MAX_PROCESS_SETS)
                return construction_failed(ctx, k, st, "process_set: not an id of a process set");
        if (kind >= HVD_TF_N_COLLECTIVES) {
                TF_DeleteStatus(st);
                return k;
        }
        if (kind == HVD_TF_ALLREDUCE || kind == HVD_TF_GROUPED_ALLREDUCE || kind == HVD_TF_REDUCESCATTER ||
            kind == HVD_TF_GROUPED_REDUCESCATTER) {
                int op = 0;
                if (attr_int(ctx, "reduce_op", &op, st) < 0 || attr_float(ctx, "prescale", &k->prescale, st) < 0 ||
                    attr_float(ctx, "postscale", &k->postscale, st) < 0)
                        return construction_failed(ctx, k, st, NULL);
                if (op < 0 || op >= _HVD_REDUCE_COUNT)
                        return construction_failed(ctx, k, st, "reduce_op: not a reduce op of hvd");
                k->reduce_op = (hvd_reduce_op_t) op;
        }
        if (kind == HVD_TF_BROADCAST && attr_int(ctx, "root_rank", &k->root, st) < 0)
                return construction_failed(ctx, k, st, NULL);
        char *given = attr_string(ctx, "tensor_name", st);
        if (!given)
                return construction_failed(ctx, k, st, TF_GetCode(st) == TF_OK ? "out of memory" : NULL);
        TF_StringView node = TF_OpKernelConstruction_GetName(ctx);
        size_t type_len = strlen(hvd_tf_op_types[kind]);
        bool eager = node.len == type_len && memcmp(node.data, hvd_tf_op_types[kind], type_len) == 0;
        bool named = *given || !eager;
        k->eager = eager;
        if (*given)
                k->name = make_name(kind, k->process_set, given);
        else if (!eager) {
                char base[HVD_MAX_NAME_BYTES];
                snprintf(base, sizeof base, "%.*s", (int) node.len, node.data);
                k->name = make_name(kind, k->process_set, base);
        }
        free(given);
        if (named && !k->name)
                return construction_failed(ctx, k, st, "out of memory");
        TF_DeleteStatus(st);
        return k;
}

/* ---- one execution ---- */

static void op_free(hvd_tf_op_t *op) {
        if (!op)
                return;
        for (int i = 0; i < op->n; i++) {
                if (op->in)
                        TF_DeleteTensor(op->in[i]);
                if (op->out)
                        TF_DeleteTensor(op->out[i]);
        }
        hvd_handle_release(&op->handle);
        free(op->in);
        free(op->out);
        free(op->dtype);
        free(op->shape);
        free(op->splits);
        free(op);
}

static hvd_tf_op_t *op_new(const hvd_tf_kernel_t *k, TF_OpKernelContext *ctx, int n) {
        hvd_tf_op_t *op = calloc(1, sizeof *op);
        if (!op)
                return NULL;
        op->kernel = k;
        op->ctx = ctx;
        op->n = n;
        op->in = calloc((size_t) n, sizeof *op->in);
        op->out = calloc((size_t) n, sizeof *op->out);
        op->dtype = calloc((size_t) n, sizeof *op->dtype);
        op->shape = calloc((size_t) n, sizeof *op->shape);
        if (!op->in || !op->out || !op->dtype || !op->shape) {
                op_free(op);
                return NULL;
        }
        return op;
}

/* Member i's output allocated by hvd into TensorFlow's output i. */
static void member_output(hvd_tf_op_t *op, int i, TF_Status *st) {
        const void *data = NULL;
        size_t bytes = 0;
        int ndim = 0;
        const int64_t *shape = NULL;
        int64_t empty[HVD_MAX_NDIM];
        if (hvd_handle_output(op->handle, (size_t) i, &data, &bytes, &ndim, &shape) < 0) {
                /* nothing allocated: an empty result, rows of the input's shape */
                ndim = TF_NumDims(op->in[i]);
                for (int d = 0; d < ndim; d++)
                        empty[d] = d == 0 ? 0 : TF_Dim(op->in[i], d);
                shape = empty;
                bytes = 0;
        }
        TF_Tensor *t = TF_AllocateOutput(op->ctx, i, op->dtype[i], shape, ndim, bytes, st);
        if (TF_GetCode(st) == TF_OK && bytes)
                memcpy(TF_TensorData(t), data, bytes);
        TF_DeleteTensor(t);
}

/* Results of a completed op into TensorFlow's outputs. 0 or an error
 * already recorded in the context. */
static int op_outputs(hvd_tf_op_t *op) {
        const hvd_tf_kernel_t *k = op->kernel;
        if (k->kind != HVD_TF_ALLGATHER && k->kind != HVD_TF_ALLTOALL && k->kind != HVD_TF_REDUCESCATTER &&
            k->kind != HVD_TF_GROUPED_ALLGATHER && k->kind != HVD_TF_GROUPED_REDUCESCATTER)
                return 0; /* written in place by hvd */
        TF_Status *st = TF_NewStatus();
        if (!st)
                return -ENOMEM;
        for (int i = 0; i < op->n && TF_GetCode(st) == TF_OK; i++)
                member_output(op, i, st);
        if (TF_GetCode(st) == TF_OK && k->kind == HVD_TF_ALLTOALL) {
                const int64_t *recv = NULL;
                int size = hvd_process_set_size(k->process_set);
                int64_t dims[1] = { size < 0 ? 0 : size };
                TF_Tensor *s = TF_AllocateOutput(op->ctx, 1, TF_INT32, dims, 1, (size_t) dims[0] * sizeof(int32_t), st);
                if (TF_GetCode(st) == TF_OK && hvd_handle_recv_splits(op->handle, &recv) == 0) {
                        int32_t *p = TF_TensorData(s);
                        for (int64_t r = 0; r < dims[0]; r++)
                                p[r] = (int32_t) recv[r];
                }
                TF_DeleteTensor(s);
        }
        int r = 0;
        if (TF_GetCode(st) != TF_OK) {
                TF_OpKernelContext_Failure(op->ctx, st);
                r = -EIO;
        }
        TF_DeleteStatus(st);
        return r;
}

void hvd_tf_op_finish(hvd_tf_op_t *op) {
        if (op->handle) {
                int r = hvd_handle_wait(op->handle);
                if (r < 0)
                        hvd_tf_fail(op->ctx, r, hvd_handle_error(op->handle));
                else
                        (void) op_outputs(op);
        }
        hvd_tf_done_t *done = op->done;
        op->done = NULL;
        if (op->counted)
                atomic_fetch_sub(&graph_in_flight, 1);
        op_free(op);
        hvd_tf_done_run(&done);
}

/* Fails the op before submission: the error into the context, then done. */
static void op_reject(hvd_tf_op_t *op, int err, const char *msg) {
        hvd_tf_fail(op->ctx, err, msg);
        hvd_tf_op_finish(op);
}

/* Input i of op into req (input, dtype, shape); 0, or -EINVAL with msg. */
static int describe(hvd_tf_op_t *op, int i, hvd_request_t *req, char *msg, size_t len) {
        static const char nothing[1];
        TF_Tensor *t = op->in[i];
        int ndim = TF_NumDims(t);
        op->dtype[i] = TF_TensorType(t);
        if (ndim > HVD_MAX_NDIM) {
                snprintf(msg, len, "%s: a tensor of %d dimensions (hvd takes at most %d)",
                         hvd_tf_op_types[op->kernel->kind], ndim, HVD_MAX_NDIM);
                return -EINVAL;
        }
        if (dtype_to_hvd(op->dtype[i], &req->dtype) < 0) {
                snprintf(msg, len,
                         "%s: tensors of TensorFlow dtype %d are not supported (use bool, (u)int8, int16, "
                         "int32, int64, float16, bfloat16, float32 or float64)",
                         hvd_tf_op_types[op->kernel->kind], (int) op->dtype[i]);
                return -EINVAL;
        }
        for (int d = 0; d < ndim; d++)
                op->shape[i][d] = TF_Dim(t, d);
        req->ndim = ndim;
        req->shape = op->shape[i];
        req->input = TF_TensorData(t) ? TF_TensorData(t) : nothing; /* empty tensors may have no buffer */
        req->reduce_op = op->kernel->reduce_op;
        req->prescale = op->kernel->prescale;
        req->postscale = op->kernel->postscale;
        req->root = op->kernel->root;
        req->process_set = op->kernel->process_set;
        return 0;
}

/* Outputs of allreduce and broadcast that took their input's buffer (in
 * place), and that are kept buffers, since the library loaded: for the
 * tests, through hvd_tf_output_counts. */
static _Atomic uint64_t forwarded, kept;

void hvd_tf_output_counts(uint64_t *n_forwarded, uint64_t *n_kept) {
        *n_forwarded = atomic_load_explicit(&forwarded, memory_order_relaxed);
        *n_kept = atomic_load_explicit(&kept, memory_order_relaxed);
}

/* A kept buffer (outbuf.c) as output i, or NULL. TensorFlow may set
 * another tensor of its own (an output it must allocate itself): then
 * that one. */
static TF_Tensor *kept_output(hvd_tf_op_t *op, int i, int ndim, TF_Status *st) {
        TF_Tensor *t = hvd_tf_outbuf_tensor(op->dtype[i], op->shape[i], ndim, TF_TensorByteSize(op->in[i]));
        if (!t)
                return NULL;
        TF_SetOutput(op->ctx, i, t, st);
        TF_Tensor *set = TF_GetCode(st) == TF_OK ? TF_GetMutableOutput(op->ctx, i, st) : NULL;
        if (set && TF_TensorData(set) == TF_TensorData(t)) {
                TF_DeleteTensor(set);
                atomic_fetch_add_explicit(&kept, 1, memory_order_relaxed);
                return t;
        }
        TF_DeleteTensor(t);
        return set;
}

/* The output of allreduce and broadcast. Best is the input's own buffer,
 * reduced in place: TensorFlow hands it over when nothing else holds it (a
 * gradient computed in the same graph), once this op lets go of its own
 * reference (op->in[i]; the context keeps the input alive until done).
 * Else, from HVD_TF_OUTBUF_MIN_BYTES, a kept buffer (no fresh pages to
 * fault in): an eager op's input is always held by its caller, and a
 * graph node whose large input was not handed over once (a function's
 * argument, a variable's value) is not asked again, as asking allocates
 * an output when TensorFlow refuses. */
static int output_like_input(hvd_tf_kernel_t *k, hvd_tf_op_t *op, int i, hvd_request_t *req, TF_Status *st) {
        bool large = TF_TensorByteSize(op->in[i]) >= HVD_TF_OUTBUF_MIN_BYTES;
        if (large && (k->eager || atomic_load_explicit(&k->no_forward, memory_order_relaxed)))
                op->out[i] = kept_output(op, i, req->ndim, st);
        if (!op->out[i] && TF_GetCode(st) == TF_OK) {
                TF_DeleteTensor(op->in[i]);
                op->in[i] = NULL;
                int from = -1;
                op->out[i] = TF_ForwardInputOrAllocateOutput(op->ctx, &i, 1, i, op->shape[i], req->ndim, &from, st);
                if (from == i)
                        atomic_fetch_add_explicit(&forwarded, 1, memory_order_relaxed);
                else if (large)
                        atomic_store_explicit(&k->no_forward, true, memory_order_relaxed);
        }
        if (TF_GetCode(st) != TF_OK)
                return -ENOMEM;
        req->output = TF_TensorData(op->out[i]) ? TF_TensorData(op->out[i]) : (void *) req->input;
        return 0;
}

/* A graph op alone in flight (a chain of ops, as in a tf.while_loop of
 * allreduces, where the next waits for this one) waits for its result a
 * short while on TensorFlow's thread, where libhvd lets it run the fast
 * path itself: no switch to libhvd's thread, to the completion thread and
 * back. Ops in flight together (a step's gradients) go to the completion
 * thread at once, so that none holds a thread of TensorFlow's while the
 * others wait to be submitted. true when op has been finished. */
static bool finished_inline(hvd_tf_op_t *op) {
        op->counted = true;
        if (atomic_fetch_add(&graph_in_flight, 1) != 0)
                return false;
        if (hvd_handle_wait_timeout(op->handle, INLINE_WAIT_USEC) == HVD_ETIMEOUT)
                return false;
        hvd_tf_op_finish(op);
        return true;
}

/* Submits an execution's requests. An eager one is waited for at once on
 * the calling thread (hvd_tf_compute): submitted for a waiting caller,
 * it runs there on one node in the steady state, without waking libhvd's
 * thread and being woken by it (two switches a call). */
static int submit(const hvd_tf_kernel_t *k, const hvd_request_t *reqs, int n, hvd_handle_t **h) {
        bool w = k->eager;
        switch (k->kind) {
        case HVD_TF_ALLREDUCE: return (w ? hvd_allreduce_async_waiting : hvd_allreduce_async)(&reqs[0], h);
        case HVD_TF_ALLGATHER: return (w ? hvd_allgather_async_waiting : hvd_allgather_async)(&reqs[0], h);
        case HVD_TF_BROADCAST: return (w ? hvd_broadcast_async_waiting : hvd_broadcast_async)(&reqs[0], h);
        case HVD_TF_ALLTOALL: return (w ? hvd_alltoall_async_waiting : hvd_alltoall_async)(&reqs[0], h);
        case HVD_TF_REDUCESCATTER: return (w ? hvd_reducescatter_async_waiting : hvd_reducescatter_async)(&reqs[0], h);
        case HVD_TF_GROUPED_ALLREDUCE:
                return (w ? hvd_grouped_allreduce_async_waiting : hvd_grouped_allreduce_async)(reqs, (size_t) n, h);
        case HVD_TF_GROUPED_ALLGATHER:
                return (w ? hvd_grouped_allgather_async_waiting : hvd_grouped_allgather_async)(reqs, (size_t) n, h);
        case HVD_TF_GROUPED_REDUCESCATTER:
                return (w ? hvd_grouped_reducescatter_async_waiting : hvd_grouped_reducescatter_async)(reqs, (size_t) n,
                                                                                                       h);
        default: return -EINVAL;
        }
}

void hvd_tf_compute(void *kp, TF_OpKernelContext *ctx, struct TF_AsyncOpKernelDoneCallback *done_cb) {
        const hvd_tf_kernel_t *k = kp;
        bool grouped = k->kind == HVD_TF_GROUPED_ALLREDUCE || k->kind == HVD_TF_GROUPED_ALLGATHER ||
                       k->kind == HVD_TF_GROUPED_REDUCESCATTER;
        int n = grouped ? TF_NumInputs(ctx) : 1;
        uint64_t seq = 0;
        if (!k->name)
                seq = atomic_fetch_add(&noname[k->kind][k->process_set], 1);
        hvd_tf_op_t *op = op_new(k, ctx, n);
        if (op)
                op->done = hvd_tf_done_copy(done_cb);
        if (!op || !op->done) {
                op_free(op);
                hvd_tf_fail(ctx, -ENOMEM, "out of memory");
                TF_RunAsyncOpKernelDoneCallback(done_cb);
                return;
        }
        /* names longer than hvd takes are passed on for hvd to refuse */
        char base[NAME_CAP - 32], msg[NAME_CAP + 512] = "";
        if (k->name)
                snprintf(base, sizeof base, "%s", k->name);
        else if (k->process_set)
                snprintf(base, sizeof base, "%s.tf.noname.ps%d.%llu", kind_prefix[k->kind], k->process_set,
                         (unsigned long long) seq);
        else
                snprintf(base, sizeof base, "%s.tf.noname.%llu", kind_prefix[k->kind], (unsigned long long) seq);

        /* the requests and their names, freed once submitted (hvd copies names) */
        hvd_request_t *reqs = calloc((size_t) n, sizeof *reqs);
        char(*names)[NAME_CAP] = grouped ? calloc((size_t) n, sizeof *names) : NULL;
        TF_Status *st = TF_NewStatus();
        int r = st && reqs && (names || !grouped) ? 0 : -ENOMEM;
        for (int i = 0; r == 0 && i < n; i++) {
                hvd_request_init(&reqs[i]);
                TF_GetInput(ctx, i, &op->in[i], st);
                if (TF_GetCode(st) != TF_OK) {
                        snprintf(msg, sizeof msg, "%s", TF_Message(st));
                        r = -EINVAL;
                        break;
                }
                r = describe(op, i, &reqs[i], msg, sizeof msg);
                if (r == 0 &&
                    (k->kind == HVD_TF_ALLREDUCE || k->kind == HVD_TF_GROUPED_ALLREDUCE || k->kind == HVD_TF_BROADCAST))
                        r = output_like_input(kp, op, i, &reqs[i], st);
                if (grouped) {
                        snprintf(names[i], sizeof names[i], "%s.%dof%d", base, i, n);
                        reqs[i].name = names[i];
                } else
                        reqs[i].name = base;
        }
        if (r == 0 && k->kind == HVD_TF_ALLTOALL) {
                TF_Tensor *splits = NULL;
                TF_GetInput(ctx, 1, &splits, st);
                int64_t ns = TF_GetCode(st) == TF_OK ? TF_TensorElementCount(splits) : -1;
                if (ns > 0 && (op->splits = malloc((size_t) ns * sizeof *op->splits)) != NULL) {
                        const int32_t *p = TF_TensorData(splits);
                        for (int64_t j = 0; j < ns; j++)
                                op->splits[j] = p[j];
                        int size = hvd_process_set_size(k->process_set);
                        if (size >= 0 && ns != size) {
                                snprintf(msg, sizeof msg,
                                         "alltoall '%s': splits has %lld entries, the process set "
                                         "has %d ranks",
                                         base, (long long) ns, size);
                                r = -EINVAL;
                        }
                        reqs[0].splits = op->splits;
                } else if (ns != 0)
                        r = ns < 0 ? -EINVAL : -ENOMEM;
                TF_DeleteTensor(splits);
        }
        if (r == 0) {
                r = submit(k, reqs, n, &op->handle);
                if (r < 0)
                        snprintf(msg, sizeof msg, "%s", hvd_last_error());
        }
        TF_DeleteStatus(st);
        free(reqs);
        free(names);
        if (r == 0 && k->eager) {
                /* the calling thread waits for the result anyway: it waits
                 * here, where libhvd lets it run the fast path itself (no
                 * switch to libhvd's thread, nor to the completion thread) */
                hvd_tf_op_finish(op);
                return;
        }
        if (r == 0 && finished_inline(op))
                return;
        if (r == 0)
                r = hvd_tf_complete_when_done(op);
        if (r < 0)
                op_reject(op, r, msg);
}

/* ---- the topology ---- */

/* A scalar of the topology, or a negative error with its message. */
static int scalar_value(const hvd_tf_kernel_t *k, const char **msg) {
        int v;
        *msg = "hvd is not initialized: call hvd.tensorflow.init() first";
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        switch (k->kind) {
        case HVD_TF_SIZE: v = k->process_set ? hvd_process_set_size(k->process_set) : hvd_size(); break;
        case HVD_TF_RANK: v = k->process_set ? hvd_process_set_rank(k->process_set) : hvd_rank(); break;
        case HVD_TF_LOCAL_SIZE: v = hvd_local_size(); break;
        case HVD_TF_LOCAL_RANK: v = hvd_local_rank(); break;
        default: v = hvd_process_set_included(k->process_set); break;
        }
        if (v == -ENOENT)
                *msg = "rank_op: this rank is not a member of the process set";
        else if (v < 0)
                *msg = "process_set: no process set has this id (add_process_set gives ids)";
        return v;
}

void hvd_tf_compute_scalar(void *kp, TF_OpKernelContext *ctx) {
        const char *msg;
        int v = scalar_value(kp, &msg);
        if (v < 0) {
                hvd_tf_fail(ctx, v, msg);
                return;
        }
        TF_Status *st = TF_NewStatus();
        TF_Tensor *t = TF_AllocateOutput(ctx, 0, TF_INT32, NULL, 0, sizeof(int32_t), st);
        if (TF_GetCode(st) == TF_OK)
                *(int32_t *) TF_TensorData(t) = v;
        else
                TF_OpKernelContext_Failure(ctx, st);
        TF_DeleteTensor(t);
        TF_DeleteStatus(st);
}

/* ---- join and barrier ---- */

typedef struct blocking_call {
        const hvd_tf_kernel_t *kernel;
        TF_OpKernelContext *ctx;
        hvd_tf_done_t *done;
} blocking_call_t;

static void *blocking_main(void *arg) {
        blocking_call_t *c = arg;
        int r = c->kernel->kind == HVD_TF_JOIN ? hvd_join() : hvd_barrier();
        if (r < 0)
                hvd_tf_fail(c->ctx, r, hvd_last_error());
        else if (c->kernel->kind == HVD_TF_JOIN) {
                TF_Status *st = TF_NewStatus();
                TF_Tensor *t = TF_AllocateOutput(c->ctx, 0, TF_INT32, NULL, 0, sizeof(int32_t), st);
                if (TF_GetCode(st) == TF_OK)
                        *(int32_t *) TF_TensorData(t) = r;
                else
                        TF_OpKernelContext_Failure(c->ctx, st);
                TF_DeleteTensor(t);
                TF_DeleteStatus(st);
        }
        hvd_tf_done_run(&c->done);
        free(c);
        return NULL;
}

/* hvd_join and hvd_barrier block until every rank calls them: on a thread
 * of their own, so that they hold none of TensorFlow's. */
void hvd_tf_compute_blocking(void *kp, TF_OpKernelContext *ctx, struct TF_AsyncOpKernelDoneCallback *done_cb) {
        blocking_call_t *c = calloc(1, sizeof *c);
        pthread_attr_t attr;
        pthread_t t;
        if (c) {
                c->kernel = kp;
                c->ctx = ctx;
                c->done = hvd_tf_done_copy(done_cb);
        }
        int r = c && c->done ? pthread_attr_init(&attr) : ENOMEM;
        if (r == 0) {
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = pthread_create(&t, &attr, blocking_main, c);
                pthread_attr_destroy(&attr);
        }
        if (r == 0)
                return;
        if (c && c->done) {
                hvd_tf_fail(ctx, -r, "cannot start a thread for join or barrier");
                hvd_tf_done_run(&c->done);
        } else {
                hvd_tf_fail(ctx, -ENOMEM, "out of memory");
                TF_RunAsyncOpKernelDoneCallback(done_cb);
        }
        free(c);
}
