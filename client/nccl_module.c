/* nccl_module.c — libhvd-nccl: the GPU data plane behind gpu_module.h.
 * One NCCL communicator per job (created non-blocking, so a missing rank
 * times out instead of hanging), one CUDA stream, one fusion buffer; every
 * operation is planned by gpu_plan.c and runs entirely on the stream:
 * batched copies in, one NCCL group per step, copies out, an event the
 * background thread polls. Invariants: the host never waits for a
 * collective to finish; no CUDA kernel goes on the stream while a NCCL
 * group is still being enqueued (ncclInProgress); after any NCCL or CUDA
 * error every communicator is aborted, so no rank stays inside NCCL.
 * Single-threaded: all calls come from libhvd's background thread, except
 * probe() and unique_id(). */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>
/* nccl.h declares f() functions without prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_module.h"
#include "gpu_plan.h"
#include "nccl_kernels.h"

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 2700
#error "libhvd-nccl needs NCCL >= 2.7 (ncclSend/ncclRecv)"
#endif
#define NCCL_AT_LEAST(maj, min) (NCCL_VERSION_CODE >= NCCL_VERSION(maj, min, 0))
#define HAVE_NCCL_AVG           NCCL_AT_LEAST(2, 10) /* ncclAvg, ncclBfloat16 */
#define HAVE_NCCL_LAST_ERROR    NCCL_AT_LEAST(2, 13) /* ncclGetLastError */
#define HAVE_NCCL_NONBLOCKING   NCCL_AT_LEAST(2, 14) /* ncclConfig_t, blocking = 0 */
#define HAVE_NCCL_SPLIT         NCCL_AT_LEAST(2, 18) /* ncclCommSplit */

_Static_assert(sizeof(ncclUniqueId) == HVD_NCCL_ID_BYTES, "ncclUniqueId size");
_Static_assert((int) HVD_GPU_T_INT8 == (int) ncclInt8 && (int) HVD_GPU_T_UINT8 == (int) ncclUint8 &&
                       (int) HVD_GPU_T_INT32 == (int) ncclInt32 && (int) HVD_GPU_T_INT64 == (int) ncclInt64 &&
                       (int) HVD_GPU_T_FLOAT16 == (int) ncclFloat16 && (int) HVD_GPU_T_FLOAT32 == (int) ncclFloat32 &&
                       (int) HVD_GPU_T_FLOAT64 == (int) ncclFloat64,
               "hvd_gpu_type_t must match ncclDataType_t");
_Static_assert((int) HVD_GPU_OP_SUM == (int) ncclSum && (int) HVD_GPU_OP_PROD == (int) ncclProd &&
                       (int) HVD_GPU_OP_MAX == (int) ncclMax && (int) HVD_GPU_OP_MIN == (int) ncclMin,
               "hvd_gpu_redop_t must match ncclRedOp_t");
#if HAVE_NCCL_AVG
_Static_assert((int) HVD_GPU_T_BFLOAT16 == (int) ncclBfloat16 && (int) HVD_GPU_OP_AVG == (int) ncclAvg,
               "bfloat16/avg must match NCCL");
#endif

#define MIN_FUSION_BYTES      (UINT64_C(4) << 20)  /* staging for joined ranks and transforms */
#define MIN_RANK_WINDOW_BYTES (UINT64_C(64) << 10) /* allgather/reducescatter window per rank */
#define DEFAULT_TIMEOUT_USEC  (UINT64_C(60) * 1000000)
#define OP_POOL_INITIAL       32

struct hvd_gpu_op {
        hvd_gpu_op_t *next_free;
        cudaEvent_t ev;
        bool recorded; /* ev recorded after the op's last kernel */
        bool nothing;  /* nothing to do on this rank: complete at once */
};

typedef struct pset {
        bool valid;
        uint32_t n;
        uint32_t *ranks; /* owned */
        ncclComm_t comm; /* NULL: this rank is not a member */
        int me;
        uint64_t *scratch; /* [n] for plans */
} pset_t;

typedef struct pcall {
        hvd_gpu_call_t c;
        ncclComm_t comm;
} pcall_t;

/* What runs after the NCCL group of a flush, in order: an OUT batch, or
 * the completion event of an op. */
typedef struct item {
        hvd_gpu_op_t *op; /* NULL: batch */
        size_t batch;     /* index into outs */
} item_t;

struct hvd_gpu {
        int device, rank, size;
        ncclComm_t comm;
        cudaStream_t stream;
        cudaEvent_t wait_ev; /* recorded on member streams our stream waits for */
        void *fbuf;
        uint64_t cap;      /* fusion buffer bytes every rank agreed on */
        uint32_t features; /* HVD_GPU_HAS_*, agreed */
        uint64_t timeout_usec;
        uint64_t *scratch; /* [size] */
        pset_t sets[HVD_MAX_PROCESS_SETS];

        bool grouping; /* between group_start and group_end */
        bool defer;    /* the op being planned joins the open group */
        hvd_gpu_group_t group;
        ncclComm_t cur_comm;

        /* deferred work of the open group (or the current step) */
        pcall_t *calls;
        size_t n_calls, cap_calls;
        hvd_gpu_batch_t *outs;
        size_t n_outs, cap_outs;
        item_t *items;
        size_t n_items, cap_items;

        hvd_gpu_op_t *free_ops;
        hvd_gpu_op_t **ops; /* every op ever made, for close */
        size_t n_ops, cap_ops;

        bool aborted; /* abort(): the job is over */
        bool failed;  /* a NCCL/CUDA error: communicators aborted */
        int error_code;
        char error[512];
};

/* ---- helpers ---- */

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* Sleeps a little longer the longer a wait lasts: yields first (an
 * enqueue usually finishes in microseconds), then 50 µs, then 1 ms. */
static void backoff(unsigned spin) {
        if (spin < 64)
                sched_yield();
        else
                usleep(spin < 1064 ? 50 : 1000);
}

static int cuda_err(cudaError_t e, const char *what, char *err, size_t err_len) {
        snprintf(err, err_len, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
        return -EIO;
}

static int nccl_err(ncclComm_t comm, ncclResult_t r, const char *what, char *err, size_t err_len) {
        const char *last = "";
#if HAVE_NCCL_LAST_ERROR
        last = ncclGetLastError(comm);
        if (!last)
                last = "";
#else
        (void) comm;
#endif
        snprintf(err, err_len, "%s: NCCL error: %s%s%s", what, ncclGetErrorString(r), last[0] ? ": " : "", last);
        return r == ncclInvalidArgument || r == ncclInvalidUsage ? -EINVAL : -EIO;
}

static uint64_t timeout_from_env(void) {
        /* the module's own setting, read here: its ABI (gpu_module.h)
         * carries no settings, and tests/gpu drives it without libhvd */
        const char *s = getenv("HVD_NCCL_TIMEOUT");
        if (s && *s) {
                char *end;
                double v = strtod(s, &end);
                if (*end == '\0' && v > 0 && v < 1e7)
                        return (uint64_t) (v * 1e6);
        }
        return DEFAULT_TIMEOUT_USEC;
}

/* Waits until a non-blocking communicator has finished what it was asked
 * (init, split, a group's enqueue, finalize), an error, or the deadline. */
static int comm_wait(ncclComm_t comm, uint64_t timeout_usec, const char *what, char *err, size_t err_len) {
#if HAVE_NCCL_NONBLOCKING
        uint64_t deadline = now_usec() + timeout_usec;
        for (unsigned spin = 0;; spin++) {
                ncclResult_t st = ncclSuccess, r = ncclCommGetAsyncError(comm, &st);
                if (r != ncclSuccess)
                        return nccl_err(comm, r, what, err, err_len);
                if (st == ncclSuccess)
                        return 0;
                if (st != ncclInProgress)
                        return nccl_err(comm, st, what, err, err_len);
                if (now_usec() > deadline) {
                        snprintf(err, err_len,
                                 "%s: not complete after %.0f s (HVD_NCCL_TIMEOUT): a peer rank is missing, stuck or "
                                 "unreachable",
                                 what, (double) timeout_usec / 1e6);
                        return HVD_ETIMEOUT;
                }
                backoff(spin);
        }
#else
        (void) comm, (void) timeout_usec, (void) what, (void) err, (void) err_len;
        return 0;
#endif
}

/* Destroys a communicator: finalize within the deadline when it is
 * healthy, otherwise abort. */
static void comm_free(ncclComm_t *c, bool graceful, uint64_t timeout_usec) {
        if (!*c)
                return;
#if HAVE_NCCL_NONBLOCKING
        if (graceful) {
                char ignore[256];
                ncclResult_t r = ncclCommFinalize(*c);
                if ((r == ncclSuccess || r == ncclInProgress) &&
                    comm_wait(*c, timeout_usec, "finalize", ignore, sizeof ignore) == 0) {
                        ncclCommDestroy(*c); /* quiescent: local and quick; never abort after it */
                        *c = NULL;
                        return;
                }
        }
#else
        (void) graceful, (void) timeout_usec;
#endif
        ncclCommAbort(*c);
        *c = NULL;
}

static void abort_comms(hvd_gpu_t *g) {
        for (int i = 0; i < HVD_MAX_PROCESS_SETS; i++)
                comm_free(&g->sets[i].comm, false, 0);
        comm_free(&g->comm, false, 0);
}

/* Waits (bounded) until the stream is idle, so no kernel of ours still
 * touches a user buffer when we report an error. */
static void drain_stream(hvd_gpu_t *g) {
        if (!g->stream)
                return;
        uint64_t deadline = now_usec() + g->timeout_usec;
        for (unsigned spin = 0; cudaStreamQuery(g->stream) == cudaErrorNotReady && now_usec() < deadline; spin++)
                backoff(spin);
}

static void clear_pending(hvd_gpu_t *g) {
        g->n_calls = g->n_outs = g->n_items = 0;
        hvd_gpu_group_reset(&g->group);
}

/* A NCCL or CUDA error: the job cannot go on on this rank. Aborts every
 * communicator (so peers see the failure instead of waiting in NCCL),
 * drains the stream, keeps the first message for every later call. */
static int fail(hvd_gpu_t *g, int r, const char *msg, char *err, size_t err_len) {
        if (!g->failed) {
                g->failed = true;
                g->error_code = r;
                snprintf(g->error, sizeof g->error, "%s", msg);
        }
        abort_comms(g);
        drain_stream(g);
        clear_pending(g);
        if (err != msg)
                snprintf(err, err_len, "%s", g->error);
        return g->error_code;
}

static int state_error(const hvd_gpu_t *g, char *err, size_t err_len) {
        if (g->failed) {
                snprintf(err, err_len, "%s", g->error);
                return g->error_code;
        }
        snprintf(err, err_len, "the job was aborted; its NCCL communicator is closed");
        return HVD_EABORTED;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
        if (need <= *cap)
                return 0;
        size_t n = *cap ? *cap * 2 : 16;
        while (n < need)
                n *= 2;
        void *q = realloc(*p, n * elem);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = n;
        return 0;
}

/* ---- op pool: ops and their events are made once and reused ---- */

static int op_new(hvd_gpu_t *g, char *err, size_t err_len) {
        if (grow((void **) &g->ops, &g->cap_ops, g->n_ops + 1, sizeof *g->ops) < 0)
                return -ENOMEM;
        hvd_gpu_op_t *o = calloc(1, sizeof *o);
        if (!o)
                return -ENOMEM;
        cudaError_t e = cudaEventCreateWithFlags(&o->ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
                free(o);
                return cuda_err(e, "cudaEventCreateWithFlags", err, err_len);
        }
        g->ops[g->n_ops++] = o;
        o->next_free = g->free_ops;
        g->free_ops = o;
        return 0;
}

static int op_get(hvd_gpu_t *g, hvd_gpu_op_t **ret, char *err, size_t err_len) {
        if (!g->free_ops) {
                int r = op_new(g, err, err_len);
                if (r < 0)
                        return r;
        }
        hvd_gpu_op_t *o = g->free_ops;
        g->free_ops = o->next_free;
        o->next_free = NULL;
        o->recorded = false;
        o->nothing = false;
        *ret = o;
        return 0;
}

static void op_put(hvd_gpu_t *g, hvd_gpu_op_t *o) {
        o->next_free = g->free_ops;
        g->free_ops = o;
}

/* ---- issuing ---- */

static ncclResult_t issue(const pcall_t *pc, cudaStream_t s) {
        const hvd_gpu_call_t *c = &pc->c;
        const void *send = (const void *) (uintptr_t) c->send;
        void *recv = (void *) (uintptr_t) c->recv;
        ncclDataType_t t = (ncclDataType_t) c->type;
        ncclRedOp_t op = (ncclRedOp_t) c->op;
        size_t n = (size_t) c->count;
        switch (c->kind) {
        case HVD_GPU_CALL_ALLREDUCE: return ncclAllReduce(send, recv, n, t, op, pc->comm, s);
        case HVD_GPU_CALL_BROADCAST: return ncclBroadcast(send, recv, n, t, c->peer, pc->comm, s);
        case HVD_GPU_CALL_ALLGATHER: return ncclAllGather(send, recv, n, t, pc->comm, s);
        case HVD_GPU_CALL_REDUCESCATTER: return ncclReduceScatter(send, recv, n, t, op, pc->comm, s);
        case HVD_GPU_CALL_SEND: return ncclSend(send, n, t, c->peer, pc->comm, s);
        case HVD_GPU_CALL_RECV: return ncclRecv(recv, n, t, c->peer, pc->comm, s);
        }
        return ncclInvalidArgument;
}

static int launch(hvd_gpu_t *g, const hvd_gpu_batch_t *b, char *err, size_t err_len) {
        int e = hvd_nccl_launch_batch(b, g->stream);
        if (e != 0) {
                char msg[256];
                cuda_err((cudaError_t) e, "copy kernel launch", msg, sizeof msg);
                return fail(g, -EIO, msg, err, err_len);
        }
        return 0;
}

/* Runs what is deferred: the NCCL calls as one group, then (only once NCCL
 * has finished enqueueing) the copies out and the completion events. */
static int flush(hvd_gpu_t *g, char *err, size_t err_len) {
        char msg[512];
        int r;
        if (g->n_calls) {
                ncclResult_t nr = ncclGroupStart(), first = ncclSuccess;
                size_t bad = 0;
                if (nr != ncclSuccess) {
                        nccl_err(g->calls[0].comm, nr, "ncclGroupStart", msg, sizeof msg);
                        return fail(g, -EIO, msg, err, err_len);
                }
                for (size_t i = 0; i < g->n_calls; i++) {
                        nr = issue(&g->calls[i], g->stream);
                        if (nr != ncclSuccess && nr != ncclInProgress && first == ncclSuccess) {
                                first = nr;
                                bad = i;
                        }
                }
                /* always close the group, even after an error */
                nr = ncclGroupEnd();
                if (first != ncclSuccess) {
                        nccl_err(g->calls[bad].comm, first, "enqueueing a collective", msg, sizeof msg);
                        return fail(g, -EIO, msg, err, err_len);
                }
                if (nr != ncclSuccess && nr != ncclInProgress) {
                        nccl_err(g->calls[0].comm, nr, "ncclGroupEnd", msg, sizeof msg);
                        return fail(g, -EIO, msg, err, err_len);
                }
                /* non-blocking: wait until every communicator of the group has enqueued */
                for (size_t i = 0; i < g->n_calls; i++) {
                        bool seen = false;
                        for (size_t k = 0; k < i && !seen; k++)
                                seen = g->calls[k].comm == g->calls[i].comm;
                        if (!seen && (r = comm_wait(g->calls[i].comm, g->timeout_usec, "enqueueing a NCCL group", msg,
                                                    sizeof msg)) < 0)
                                return fail(g, r, msg, err, err_len);
                }
        }
        for (size_t i = 0; i < g->n_items; i++) {
                const item_t *it = &g->items[i];
                if (!it->op) {
                        if ((r = launch(g, &g->outs[it->batch], err, err_len)) < 0)
                                return r;
                        continue;
                }
                if (!it->op->nothing) {
                        cudaError_t e = cudaEventRecord(it->op->ev, g->stream);
                        if (e != cudaSuccess) {
                                cuda_err(e, "cudaEventRecord", msg, sizeof msg);
                                return fail(g, -EIO, msg, err, err_len);
                        }
                }
                it->op->recorded = true;
        }
        g->n_calls = g->n_outs = g->n_items = 0;
        return 0;
}

/* ---- emitter: what the plan produces ---- */

typedef struct emit_ctx {
        hvd_gpu_t *g;
        char *err;
        size_t err_len;
} emit_ctx_t;

static int emit_batch(void *userdata, int phase, const hvd_gpu_batch_t *b) {
        emit_ctx_t *x = userdata;
        hvd_gpu_t *g = x->g;
        if (phase == HVD_GPU_PHASE_IN)
                return launch(g, b, x->err, x->err_len);
        if (grow((void **) &g->outs, &g->cap_outs, g->n_outs + 1, sizeof *g->outs) < 0 ||
            grow((void **) &g->items, &g->cap_items, g->n_items + 1, sizeof *g->items) < 0)
                return -ENOMEM;
        g->outs[g->n_outs] = *b;
        g->items[g->n_items++] = (item_t){ .op = NULL, .batch = g->n_outs++ };
        return 0;
}

static int emit_call(void *userdata, const hvd_gpu_call_t *c) {
        emit_ctx_t *x = userdata;
        hvd_gpu_t *g = x->g;
        if (grow((void **) &g->calls, &g->cap_calls, g->n_calls + 1, sizeof *g->calls) < 0)
                return -ENOMEM;
        g->calls[g->n_calls++] = (pcall_t){ .c = *c, .comm = g->cur_comm };
        return 0;
}

static int emit_step_end(void *userdata) {
        emit_ctx_t *x = userdata;
        return x->g->defer ? 0 : flush(x->g, x->err, x->err_len);
}

/* ---- process sets ---- */

static void pset_clear(hvd_gpu_t *g, pset_t *ps, bool graceful) {
        comm_free(&ps->comm, graceful, g->timeout_usec);
        free(ps->ranks);
        free(ps->scratch);
        *ps = (pset_t){ 0 };
}

/* The communicator, rank and size an op runs on. A process set's
 * communicator is split from the job's the first time the set is used:
 * that is collective over the whole job, so every rank of the job must
 * enqueue every process-set op, members or not. *comm = NULL: not a member. */
static int op_comm(hvd_gpu_t *g, const hvd_xop_t *op, ncclComm_t *comm, int *me, int *size, uint64_t **scratch,
                   char *err, size_t err_len) {
        if (op->process_set == 0) {
                *comm = g->comm;
                *me = g->rank;
                *size = g->size;
                *scratch = g->scratch;
                return 0;
        }
        const char *name = op->name ? op->name : "?";
        if (op->process_set >= HVD_MAX_PROCESS_SETS || !op->set_ranks || op->n_set < 1 ||
            op->n_set > (size_t) g->size) {
                snprintf(err, err_len, "'%s': invalid process set %u", name, op->process_set);
                return -EINVAL;
        }
        int mine = -1;
        for (size_t i = 0; i < op->n_set; i++) {
                if (op->set_ranks[i] >= (uint32_t) g->size) {
                        snprintf(err, err_len, "'%s': process set %u names rank %u of %d", name, op->process_set,
                                 op->set_ranks[i], g->size);
                        return -EINVAL;
                }
                if (op->set_ranks[i] == (uint32_t) g->rank)
                        mine = (int) i;
        }
        pset_t *ps = &g->sets[op->process_set];
        if (!ps->valid || ps->n != op->n_set || memcmp(ps->ranks, op->set_ranks, op->n_set * sizeof(uint32_t)) != 0) {
#if HAVE_NCCL_SPLIT
                char msg[512];
                int r;
                /* the set changed (removed and re-added): drop the old
                 * communicator once nothing deferred refers to it and it is idle */
                if (ps->valid) {
                        if ((r = flush(g, err, err_len)) < 0)
                                return r;
                        hvd_gpu_group_reset(&g->group);
                        drain_stream(g);
                        pset_clear(g, ps, true);
                }
                ps->ranks = malloc(op->n_set * sizeof(uint32_t));
                ps->scratch = calloc(op->n_set, sizeof(uint64_t));
                if (!ps->ranks || !ps->scratch) {
                        pset_clear(g, ps, false);
                        return -ENOMEM;
                }
                memcpy(ps->ranks, op->set_ranks, op->n_set * sizeof(uint32_t));
                ps->n = (uint32_t) op->n_set;
                ps->me = mine;
                ncclComm_t c = NULL;
                ncclResult_t nr =
                        ncclCommSplit(g->comm, mine >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, mine >= 0 ? mine : 0, &c, NULL);
                if (nr != ncclSuccess && nr != ncclInProgress) {
                        nccl_err(g->comm, nr, "ncclCommSplit", msg, sizeof msg);
                        pset_clear(g, ps, false);
                        return fail(g, -EIO, msg, err, err_len);
                }
                ps->comm = c;
                if ((r = comm_wait(g->comm, g->timeout_usec, "splitting the communicator of a process set", msg,
                                   sizeof msg)) < 0 ||
                    (c && (r = comm_wait(c, g->timeout_usec, "creating the communicator of a process set", msg,
                                         sizeof msg)) < 0)) {
                        pset_clear(g, ps, false);
                        return fail(g, r, msg, err, err_len);
                }
                ps->valid = true;
#else
                snprintf(err, err_len, "'%s': process sets on the GPU need NCCL >= 2.18 (ncclCommSplit)", name);
                return -EOPNOTSUPP;
#endif
        }
        *comm = ps->comm;
        *me = ps->me;
        *size = (int) ps->n;
        *scratch = ps->scratch;
        return 0;
}

/* ---- the module ---- */

static int gpu_probe(char *err, size_t err_len) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) {
                snprintf(err, err_len, "no CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
                (void) cudaGetLastError();
                return HVD_ENODEVICE;
        }
        if (n <= 0) {
                snprintf(err, err_len, "no CUDA device: the CUDA driver reports none");
                return HVD_ENODEVICE;
        }
        int v = 0;
        if (ncclGetVersion(&v) != ncclSuccess || v < 2700) {
                snprintf(err, err_len, "NCCL library unusable (version %d; NCCL >= 2.7 is needed)", v);
                return HVD_ENODEVICE;
        }
        return n;
}

static int gpu_unique_id(uint8_t id[HVD_NCCL_ID_BYTES], char *err, size_t err_len) {
        ncclUniqueId u;
        ncclResult_t r = ncclGetUniqueId(&u);
        if (r != ncclSuccess)
                return nccl_err(NULL, r, "ncclGetUniqueId", err, err_len);
        memcpy(id, u.internal, HVD_NCCL_ID_BYTES);
        return 0;
}

static void gpu_close(hvd_gpu_t **gp);

/* The device of this rank: the caller's choice, else HVD_GPU_DEVICE, else
 * the local rank. */
static int pick_device(const hvd_topology_t *t, int device, int count, char *err, size_t err_len) {
        if (device < 0) {
                /* libhvd always passes its device (client/settings.c); a
                 * caller without one (tests/gpu/gpu_harness) gets this */
                const char *s = getenv("HVD_GPU_DEVICE");
                if (s && *s) {
                        char *end;
                        long v = strtol(s, &end, 10);
                        if (*end || v < 0 || v > 1 << 20) {
                                snprintf(err, err_len, "HVD_GPU_DEVICE='%s' is not a device number", s);
                                return -EINVAL;
                        }
                        device = (int) v;
                } else
                        device = t->local_rank;
        }
        if (device >= count) {
                snprintf(err, err_len,
                         "rank %d (local rank %d) wants GPU %d, but this host has %d: start at most %d ranks per host "
                         "or set HVD_GPU_DEVICE",
                         t->rank, t->local_rank, device, count, count);
                return HVD_ENODEVICE;
        }
        return device;
}

/* Every rank must plan with the same capacity and features: agree on the
 * minimum of both with one small allreduce (which also sets up the
 * connections before the first real operation). Waits, bounded. */
static int agree(hvd_gpu_t *g, char *err, size_t err_len) {
        uint64_t v[2] = { g->cap, g->features }, got[2];
        cudaError_t e = cudaMemcpyAsync(g->fbuf, v, sizeof v, cudaMemcpyHostToDevice, g->stream);
        if (e != cudaSuccess)
                return cuda_err(e, "cudaMemcpyAsync", err, err_len);
        ncclResult_t nr = ncclGroupStart();
        if (nr == ncclSuccess) {
                ncclResult_t nr2 = ncclAllReduce(g->fbuf, g->fbuf, 2, ncclUint64, ncclMin, g->comm, g->stream);
                nr = ncclGroupEnd();
                if (nr2 != ncclSuccess && nr2 != ncclInProgress)
                        nr = nr2;
        }
        if (nr != ncclSuccess && nr != ncclInProgress)
                return nccl_err(g->comm, nr, "first allreduce", err, err_len);
        int r = comm_wait(g->comm, g->timeout_usec, "first allreduce", err, err_len);
        if (r < 0)
                return r;
        hvd_gpu_op_t *o;
        if ((r = op_get(g, &o, err, err_len)) < 0)
                return r;
        e = cudaEventRecord(o->ev, g->stream);
        uint64_t deadline = now_usec() + g->timeout_usec;
        for (unsigned spin = 0; e == cudaSuccess; spin++) {
                if ((e = cudaEventQuery(o->ev)) != cudaErrorNotReady)
                        break; /* done (cudaSuccess) or failed */
                e = cudaSuccess;
                ncclResult_t st = ncclSuccess;
                if (ncclCommGetAsyncError(g->comm, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
                        op_put(g, o);
                        return nccl_err(g->comm, st, "first allreduce", err, err_len);
                }
                if (now_usec() > deadline) {
                        op_put(g, o);
                        snprintf(err, err_len, "first allreduce: not complete after %.0f s (HVD_NCCL_TIMEOUT)",
                                 (double) g->timeout_usec / 1e6);
                        return HVD_ETIMEOUT;
                }
                backoff(spin);
        }
        op_put(g, o);
        if (e != cudaSuccess)
                return cuda_err(e, "first allreduce", err, err_len);
        if ((e = cudaMemcpy(got, g->fbuf, sizeof got, cudaMemcpyDeviceToHost)) != cudaSuccess)
                return cuda_err(e, "cudaMemcpy", err, err_len);
        g->cap = got[0] / HVD_GPU_ALIGN_BYTES * HVD_GPU_ALIGN_BYTES;
        g->features = (uint32_t) got[1];
        return 0;
}

static int gpu_open(const hvd_topology_t *topo, const uint8_t id[HVD_NCCL_ID_BYTES], int device, uint64_t fusion_bytes,
                    hvd_gpu_t **ret, char *err, size_t err_len) {
        char msg[512];
        if (!topo || !id || !ret || topo->size < 1 || topo->rank < 0 || topo->rank >= topo->size) {
                snprintf(err, err_len, "invalid arguments to the NCCL module's open");
                return -EINVAL;
        }
        int count = gpu_probe(err, err_len);
        if (count < 0)
                return count;
        if ((device = pick_device(topo, device, count, err, err_len)) < 0)
                return device;
        hvd_gpu_t *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        g->device = device;
        g->rank = topo->rank;
        g->size = topo->size;
        g->timeout_usec = timeout_from_env();
        int r = -EIO;
        cudaError_t e;
        if ((e = cudaSetDevice(device)) != cudaSuccess) {
                r = cuda_err(e, "cudaSetDevice", msg, sizeof msg);
                goto fail;
        }
        if ((e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess ||
            (e = cudaEventCreateWithFlags(&g->wait_ev, cudaEventDisableTiming)) != cudaSuccess) {
                r = cuda_err(e, "creating the stream", msg, sizeof msg);
                goto fail;
        }
        uint64_t cap = fusion_bytes;
        if (cap < MIN_FUSION_BYTES)
                cap = MIN_FUSION_BYTES;
        if (cap / (uint64_t) g->size < MIN_RANK_WINDOW_BYTES)
                cap = (uint64_t) g->size * MIN_RANK_WINDOW_BYTES;
        g->cap = hvd_gpu_align_up(cap);
        if ((e = cudaMalloc(&g->fbuf, g->cap)) != cudaSuccess) {
                snprintf(msg, sizeof msg, "allocating a %llu-byte fusion buffer on GPU %d: %s",
                         (unsigned long long) g->cap, device, cudaGetErrorString(e));
                goto fail;
        }
        if (!(g->scratch = calloc((size_t) g->size, sizeof(uint64_t)))) {
                r = -ENOMEM;
                snprintf(msg, sizeof msg, "out of memory");
                goto fail;
        }
        for (int i = 0; i < OP_POOL_INITIAL; i++)
                if ((r = op_new(g, msg, sizeof msg)) < 0)
                        goto fail;
        int v = 0;
        if (HAVE_NCCL_AVG && ncclGetVersion(&v) == ncclSuccess && v >= 21000)
                g->features = HVD_GPU_HAS_AVG | HVD_GPU_HAS_BF16;

        ncclUniqueId uid;
        memcpy(uid.internal, id, HVD_NCCL_ID_BYTES);
        ncclResult_t nr;
#if HAVE_NCCL_NONBLOCKING
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        nr = ncclCommInitRankConfig(&g->comm, g->size, uid, g->rank, &config);
#else
        nr = ncclCommInitRank(&g->comm, g->size, uid, g->rank);
#endif
        if (nr != ncclSuccess && nr != ncclInProgress) {
                r = nccl_err(g->comm, nr, "creating the NCCL communicator", msg, sizeof msg);
                goto fail;
        }
        char what[128];
        snprintf(what, sizeof what, "creating the NCCL communicator of %d ranks (rank %d, GPU %d)", g->size, g->rank,
                 device);
        if ((r = comm_wait(g->comm, g->timeout_usec, what, msg, sizeof msg)) < 0)
                goto fail;
        if ((r = agree(g, msg, sizeof msg)) < 0)
                goto fail;
        if (g->cap < (uint64_t) g->size * HVD_GPU_ALIGN_BYTES) {
                r = -EINVAL;
                snprintf(msg, sizeof msg, "fusion buffer of %llu bytes is too small for %d ranks",
                         (unsigned long long) g->cap, g->size);
                goto fail;
        }
        hvd_gpu_group_init(&g->group, g->cap);
        *ret = g;
        return 0;
fail:
        snprintf(err, err_len, "%s", msg);
        g->failed = true; /* close aborts rather than finalizes */
        gpu_close(&g);
        return r < 0 ? r : -EIO;
}

static int gpu_enqueue(hvd_gpu_t *g, const hvd_xop_t *op, hvd_gpu_op_t **ret, char *err, size_t err_len) {
        if (!g || !op || !ret || (op->n && !op->m)) {
                snprintf(err, err_len, "invalid arguments to the NCCL module's enqueue");
                return -EINVAL;
        }
        if (g->failed || g->aborted)
                return state_error(g, err, err_len);
        const char *name = op->name ? op->name : "?";
        if (op->device != g->device) {
                snprintf(err, err_len, "'%s': tensor on device %d, but this rank's NCCL communicator uses GPU %d", name,
                         op->device, g->device);
                return -EINVAL;
        }
        cudaError_t e = cudaSetDevice(g->device);
        if (e != cudaSuccess)
                return cuda_err(e, "cudaSetDevice", err, err_len);

        ncclComm_t comm = NULL;
        int me = 0, size = 0, r;
        uint64_t *scratch = NULL;
        if ((r = op_comm(g, op, &comm, &me, &size, &scratch, err, err_len)) < 0)
                return r;
        hvd_gpu_op_t *o;
        if (!comm) { /* not a member of the process set */
                if ((r = op_get(g, &o, err, err_len)) < 0)
                        return r;
                o->nothing = true;
                *ret = o;
                return 0;
        }
        hvd_gpu_plan_args_t a = { .op = op,
                                  .me = me,
                                  .size = size,
                                  .fbuf = (uint64_t) (uintptr_t) g->fbuf,
                                  .cap_bytes = g->cap,
                                  .features = g->features,
                                  .scratch = scratch };
        hvd_gpu_plan_info_t info;
        if ((r = hvd_gpu_plan_op(&a, NULL, &info, err, err_len)) < 0)
                return r; /* nothing touched the GPU */
        if ((r = op_get(g, &o, err, err_len)) < 0)
                return r;

        g->defer = false;
        if (g->grouping) {
                uint64_t off;
                hvd_gpu_place_t where = hvd_gpu_group_place(&g->group, &info, &off);
                /* the open group goes first (place() already accounts for this op) */
                if (where != HVD_GPU_PLACE_JOIN && (r = flush(g, err, err_len)) < 0) {
                        op_put(g, o);
                        return r;
                }
                g->defer = where != HVD_GPU_PLACE_ALONE;
                a.fbuf += off;
        }

        /* order after the producers of the inputs, without a device-wide sync */
        void *seen[8] = { 0 };
        size_t n_seen = 0;
        for (size_t i = 0; i < op->n; i++) {
                void *s = op->m[i].stream;
                bool dup = false;
                for (size_t k = 0; k < n_seen && k < 8 && !dup; k++)
                        dup = seen[k] == s;
                if (dup)
                        continue;
                seen[n_seen++ % 8] = s;
                cudaStream_t cs = s ? (cudaStream_t) s : cudaStreamLegacy;
                if ((e = cudaEventRecord(g->wait_ev, cs)) != cudaSuccess ||
                    (e = cudaStreamWaitEvent(g->stream, g->wait_ev, 0)) != cudaSuccess) {
                        char msg[HVD_MAX_NAME_BYTES + 256];
                        snprintf(msg, sizeof msg, "'%s': waiting for the stream of member %zu: %s (%s)", name, i,
                                 cudaGetErrorString(e), cudaGetErrorName(e));
                        op_put(g, o);
                        /* the group's earlier ops are already on the stream: fatal in a group */
                        if (g->defer)
                                return fail(g, -EIO, msg, err, err_len);
                        snprintf(err, err_len, "%s", msg);
                        return -EINVAL;
                }
        }

        g->cur_comm = comm;
        emit_ctx_t x = { .g = g, .err = err, .err_len = err_len };
        hvd_gpu_emit_t em = { .batch = emit_batch, .call = emit_call, .step_end = emit_step_end, .userdata = &x };
        r = hvd_gpu_plan_op(&a, &em, &info, err, err_len);
        if (r >= 0 && (r = grow((void **) &g->items, &g->cap_items, g->n_items + 1, sizeof *g->items)) >= 0) {
                g->items[g->n_items++] = (item_t){ .op = o };
                if (!g->defer)
                        r = flush(g, err, err_len);
        }
        g->defer = false;
        if (r < 0) {
                op_put(g, o);
                if (!g->failed) {
                        /* out of memory half-way: part of the op may be on the stream */
                        char msg[512];
                        snprintf(msg, sizeof msg, "'%s': %s", name, r == -ENOMEM ? "out of memory" : err);
                        return fail(g, r, msg, err, err_len);
                }
                return r;
        }
        *ret = o;
        return 0;
}

static int gpu_group_start(hvd_gpu_t *g, char *err, size_t err_len) {
        if (!g)
                return -EINVAL;
        if (g->failed || g->aborted)
                return state_error(g, err, err_len);
        if (g->grouping) {
                snprintf(err, err_len, "group_start: a group is already open");
                return -EBUSY;
        }
        g->grouping = true;
        hvd_gpu_group_reset(&g->group);
        return 0;
}

static int gpu_group_end(hvd_gpu_t *g, char *err, size_t err_len) {
        if (!g)
                return -EINVAL;
        bool was = g->grouping;
        g->grouping = false;
        hvd_gpu_group_reset(&g->group);
        if (g->failed || g->aborted)
                return state_error(g, err, err_len);
        if (!was)
                return 0;
        cudaError_t e = cudaSetDevice(g->device);
        if (e != cudaSuccess)
                return cuda_err(e, "cudaSetDevice", err, err_len);
        return flush(g, err, err_len);
}

/* Polls NCCL's asynchronous errors of every communicator. */
static int check_async(hvd_gpu_t *g, char *err, size_t err_len) {
        for (int i = -1; i < HVD_MAX_PROCESS_SETS; i++) {
                ncclComm_t c = i < 0 ? g->comm : g->sets[i].comm;
                if (!c)
                        continue;
                ncclResult_t st = ncclSuccess, r = ncclCommGetAsyncError(c, &st);
                if (r == ncclSuccess && (st == ncclSuccess || st == ncclInProgress))
                        continue;
                char msg[512];
                nccl_err(c, r != ncclSuccess ? r : st, "collective failed asynchronously", msg, sizeof msg);
                return fail(g, -EIO, msg, err, err_len);
        }
        return 0;
}

static int gpu_poll(hvd_gpu_t *g, hvd_gpu_op_t *o, char *err, size_t err_len) {
        if (!g || !o)
                return -EINVAL;
        if (o->nothing) {
                op_put(g, o);
                return 1;
        }
        if (!o->recorded) {
                if (g->failed || g->aborted) {
                        op_put(g, o);
                        return state_error(g, err, err_len);
                }
                return 0; /* in a group not yet ended */
        }
        cudaError_t e = cudaSetDevice(g->device);
        if (e == cudaSuccess)
                e = cudaEventQuery(o->ev);
        if (e == cudaSuccess) {
                op_put(g, o);
                return g->failed || g->aborted ? state_error(g, err, err_len) : 1;
        }
        if (e == cudaErrorNotReady) {
                /* an asynchronous NCCL error aborts the communicators, which
                 * ends the op's kernels: report once its event completed */
                if (!g->failed && !g->aborted && check_async(g, err, err_len) < 0 &&
                    cudaEventQuery(o->ev) != cudaErrorNotReady) {
                        op_put(g, o);
                        return state_error(g, err, err_len);
                }
                return 0;
        }
        char msg[512];
        cuda_err(e, "waiting for a GPU operation", msg, sizeof msg);
        op_put(g, o);
        return fail(g, -EIO, msg, err, err_len);
}

static void gpu_abort(hvd_gpu_t *g) {
        if (!g || g->aborted)
                return;
        g->aborted = true;
        g->grouping = false;
        if (cudaSetDevice(g->device) != cudaSuccess)
                return;
        abort_comms(g);
        drain_stream(g);
        clear_pending(g);
}

static void gpu_close(hvd_gpu_t **gp) {
        hvd_gpu_t *g = gp ? *gp : NULL;
        if (!g)
                return;
        bool ok = cudaSetDevice(g->device) == cudaSuccess;
        bool graceful = ok && !g->failed && !g->aborted;
        if (graceful && (g->n_calls || g->n_items)) {
                char ignore[512];
                if (flush(g, ignore, sizeof ignore) < 0)
                        graceful = false;
        }
        for (int i = 0; i < HVD_MAX_PROCESS_SETS; i++)
                pset_clear(g, &g->sets[i], graceful);
        comm_free(&g->comm, graceful, g->timeout_usec);
        if (ok) {
                drain_stream(g);
                for (size_t i = 0; i < g->n_ops; i++)
                        cudaEventDestroy(g->ops[i]->ev);
                if (g->wait_ev)
                        cudaEventDestroy(g->wait_ev);
                if (g->stream)
                        cudaStreamDestroy(g->stream);
                if (g->fbuf)
                        cudaFree(g->fbuf);
        }
        for (size_t i = 0; i < g->n_ops; i++)
                free(g->ops[i]);
        free(g->ops);
        free(g->calls);
        free(g->outs);
        free(g->items);
        free(g->scratch);
        free(g);
        *gp = NULL;
}

static int gpu_mem_alloc(hvd_gpu_t *g, size_t bytes, void **ret, char *err, size_t err_len) {
        if (!g || !ret || bytes == 0) {
                snprintf(err, err_len, "invalid arguments to the NCCL module's mem_alloc");
                return -EINVAL;
        }
        if (g->failed || g->aborted)
                return state_error(g, err, err_len);
        cudaError_t e = cudaSetDevice(g->device);
        if (e != cudaSuccess)
                return cuda_err(e, "cudaSetDevice", err, err_len);
        void *p = NULL;
        if ((e = cudaMalloc(&p, bytes)) != cudaSuccess) {
                (void) cudaGetLastError(); /* not sticky: the next call may succeed */
                snprintf(err, err_len, "allocating %zu bytes on GPU %d: %s (%s)", bytes, g->device,
                         cudaGetErrorString(e), cudaGetErrorName(e));
                return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
        }
        *ret = p;
        return 0;
}

static void gpu_mem_free(int device, void *p) {
        if (!p)
                return;
        int old = -1;
        bool switched = cudaGetDevice(&old) == cudaSuccess && old != device && cudaSetDevice(device) == cudaSuccess;
        cudaFree(p);
        if (switched)
                cudaSetDevice(old);
}

const hvd_gpu_module_t hvd_gpu_module_v1 = {
        .abi = HVD_GPU_MODULE_ABI,
        .name = "nccl",
        .probe = gpu_probe,
        .unique_id = gpu_unique_id,
        .open = gpu_open,
        .enqueue = gpu_enqueue,
        .group_start = gpu_group_start,
        .group_end = gpu_group_end,
        .poll = gpu_poll,
        .abort = gpu_abort,
        .close = gpu_close,
        .mem_alloc = gpu_mem_alloc,
        .mem_free = gpu_mem_free,
};
