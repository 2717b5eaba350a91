/* mock_cuda.c — just enough of the CUDA runtime and of NCCL, on the host,
 * to run the real libhvd-nccl code (client/nccl_module.c) and the real
 * GPU test harness without a GPU: tests/gpu/check_gpu_mock. Ranks are
 * threads of one process; "device memory" is host memory; a device thread
 * executes every stream's queue in order, asynchronously from the callers
 * (so events, stream waits, host functions and blocked collectives behave
 * as on a GPU); a NCCL group becomes one stream item that completes when
 * every rank's stream has reached its part (inputs are copied when a rank
 * arrives, so in-place collectives are safe). Communicators are
 * non-blocking: init and split stay ncclInProgress until all ranks came.
 * Collective mismatches across ranks abort the process with a message.
 * Reductions use the CPU kernels (common/reduce.c). Not a CUDA emulator:
 * the copy kernel is replaced by tests/gpu/mock_kernels.c. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "gpu_plan.h"
#include "mock_cuda.h"
#include "reduce.h"

#define MAXDEV 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static _Thread_local int cur_dev;

static void die(const char *what) {
        fprintf(stderr, "mock_cuda: %s\n", what);
        abort();
}

/* ---- streams and events ---- */

enum { IT_BATCH, IT_COPY, IT_SET, IT_RECORD, IT_WAIT, IT_HOSTFN, IT_NCCL };

typedef struct mcall {
        hvd_gpu_call_t c; /* kind, type, op, peer, send, recv, count */
        ncclComm_t comm;
        bool arrived, done;
        struct slot *slot;
        uint64_t p2p_seq;
} mcall_t;

typedef struct item {
        int kind;
        struct item *next;
        hvd_gpu_batch_t batch;
        void *dst;
        const void *src;
        void *owned; /* snapshot to free */
        size_t bytes;
        int value;
        cudaEvent_t ev;
        uint64_t gen;
        cudaHostFn_t fn;
        void *ud;
        bool fn_started, fn_done;
        mcall_t *calls;
        size_t n_calls;
} item_t;

struct CUstream_st {
        int device;
        item_t *head, *tail;
        struct CUstream_st *next_all;
        bool dead;
};

struct CUevent_st {
        uint64_t gen, done_gen;
};

static struct CUstream_st *streams;
static struct CUstream_st legacy[MAXDEV];
static bool legacy_init;

static cudaStream_t real_stream(cudaStream_t s) {
        if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
                return &legacy[cur_dev];
        return s;
}

static void *device_main(void *arg);

static void mock_init(void) {
        for (int d = 0; d < MAXDEV; d++) {
                legacy[d].device = d;
                legacy[d].next_all = d + 1 < MAXDEV ? &legacy[d + 1] : NULL;
        }
        streams = &legacy[0];
        legacy_init = true;
        pthread_t t;
        if (pthread_create(&t, NULL, device_main, NULL) != 0)
                die("cannot start the device thread");
        pthread_detach(t);
}

static void start_device(void) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, mock_init);
}

static void push(cudaStream_t s, item_t *it) {
        s = real_stream(s);
        it->next = NULL;
        if (s->tail)
                s->tail->next = it;
        else
                s->head = it;
        s->tail = it;
        pthread_cond_broadcast(&changed);
}

static item_t *new_item(int kind) {
        item_t *it = calloc(1, sizeof *it);
        if (!it)
                die("out of memory");
        it->kind = kind;
        return it;
}

/* ---- NCCL state ---- */

typedef struct slot { /* one collective of a clique */
        struct slot *next;
        uint64_t seq;
        int arrived, consumed;
        hvd_gpu_call_t call[MAXDEV];
        void *snap[MAXDEV];
} slot_t;

typedef struct msg { /* one send */
        struct msg *next;
        int src, dst;
        uint64_t seq;
        void *data;
        size_t bytes;
} msg_t;

typedef struct split {
        struct split *next;
        uint64_t seq;
        int arrived;
        int color[MAXDEV], key[MAXDEV];
        ncclComm_t child[MAXDEV];
} split_t;

typedef struct clique {
        struct clique *next;
        char id[NCCL_UNIQUE_ID_BYTES];
        int n, arrived;
        ncclComm_t comm[MAXDEV];
        slot_t *slots;
        msg_t *msgs;
        split_t *splits;
} clique_t;

struct ncclComm {
        clique_t *clique;
        int rank, n;
        bool ready, aborted;
        bool failed; /* MOCK_NCCL_FAIL_AT: an injected asynchronous error */
        uint64_t coll_seq, split_seq;
        uint64_t send_seq[MAXDEV], recv_seq[MAXDEV];
};

static clique_t *cliques;

static size_t type_size(ncclDataType_t t) {
        switch (t) {
        case ncclInt8:
        case ncclUint8: return 1;
        case ncclFloat16:
        case ncclBfloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        default: return 8;
        }
}

static hvd_dtype_t hvd_type(int t) {
        switch (t) {
        case ncclInt8: return HVD_INT8;
        case ncclUint8: return HVD_UINT8;
        case ncclInt32: return HVD_INT32;
        case ncclInt64: return HVD_INT64;
        case ncclFloat16: return HVD_FLOAT16;
        case ncclBfloat16: return HVD_BFLOAT16;
        case ncclFloat32: return HVD_FLOAT32;
        case ncclFloat64: return HVD_FLOAT64;
        default: die("unsupported NCCL type in a reduction"); return HVD_UINT8;
        }
}

static void reduce_into(const hvd_gpu_call_t *c, void *dst, void *const *srcs, int n, size_t off_bytes) {
        size_t count = (size_t) c->count;
        if (c->type == ncclUint64) { /* only min/max/sum of a few values (the module's agreement) */
                for (size_t i = 0; i < count; i++) {
                        uint64_t acc = ((const uint64_t *) ((const char *) srcs[0] + off_bytes))[i];
                        for (int k = 1; k < n; k++) {
                                uint64_t v = ((const uint64_t *) ((const char *) srcs[k] + off_bytes))[i];
                                acc = c->op == ncclMin   ? (v < acc ? v : acc)
                                      : c->op == ncclMax ? (v > acc ? v : acc)
                                                         : acc + v;
                        }
                        ((uint64_t *) dst)[i] = acc;
                }
                return;
        }
        const void *s[MAXDEV];
        for (int k = 0; k < n; k++)
                s[k] = (const char *) srcs[k] + off_bytes;
        hvd_reduce_op_t op = c->op == ncclProd  ? HVD_REDUCE_PRODUCT
                             : c->op == ncclMax ? HVD_REDUCE_MAX
                             : c->op == ncclMin ? HVD_REDUCE_MIN
                                                : HVD_REDUCE_SUM;
        hvd_dtype_t dt = hvd_type(c->type);
        bool integer = dt == HVD_INT8 || dt == HVD_UINT8 || dt == HVD_INT32 || dt == HVD_INT64;
        hvd_reduce_n(dt, op, dst, s, (size_t) n, count, c->op == ncclAvg && !integer ? 1.0 / n : 1.0);
        if (c->op == ncclAvg && integer) /* NCCL divides integer sums exactly */
                for (size_t i = 0; i < count; i++)
                        switch (dt) {
                        case HVD_INT8: ((int8_t *) dst)[i] = (int8_t) (((int8_t *) dst)[i] / n); break;
                        case HVD_UINT8: ((uint8_t *) dst)[i] = (uint8_t) (((uint8_t *) dst)[i] / n); break;
                        case HVD_INT32: ((int32_t *) dst)[i] /= n; break;
                        default: ((int64_t *) dst)[i] /= n; break;
                        }
}

static slot_t *slot_get(clique_t *q, uint64_t seq) {
        for (slot_t *s = q->slots; s; s = s->next)
                if (s->seq == seq)
                        return s;
        slot_t *s = calloc(1, sizeof *s);
        if (!s)
                die("out of memory");
        s->seq = seq;
        s->next = q->slots;
        q->slots = s;
        return s;
}

static void slot_release(clique_t *q, slot_t *s) {
        if (++s->consumed < q->n)
                return;
        for (slot_t **p = &q->slots; *p; p = &(*p)->next)
                if (*p == s) {
                        *p = s->next;
                        break;
                }
        for (int k = 0; k < q->n; k++)
                free(s->snap[k]);
        free(s);
}

static void check_same(const hvd_gpu_call_t *a, const hvd_gpu_call_t *b, int ra, int rb) {
        if (a->kind != b->kind || a->count != b->count || a->type != b->type ||
            ((a->kind == HVD_GPU_CALL_ALLREDUCE || a->kind == HVD_GPU_CALL_REDUCESCATTER) && a->op != b->op) ||
            (a->kind == HVD_GPU_CALL_BROADCAST && a->peer != b->peer)) {
                fprintf(stderr,
                        "mock_cuda: collective mismatch: rank %d kind %u count %llu type %d op %u root %d, rank %d "
                        "kind "
                        "%u count %llu type %d op %u root %d\n",
                        ra, a->kind, (unsigned long long) a->count, a->type, a->op, a->peer, rb, b->kind,
                        (unsigned long long) b->count, b->type, b->op, b->peer);
                abort();
        }
}

/* A rank's stream reached the call: take a copy of what it sends. */
static void arrive(mcall_t *m) {
        struct ncclComm *c = m->comm;
        clique_t *q = c->clique;
        hvd_gpu_call_t *k = &m->c;
        size_t ts = type_size((ncclDataType_t) k->type), bytes = (size_t) k->count * ts;
        m->arrived = true;
        if (k->kind == HVD_GPU_CALL_SEND) {
                msg_t *g = calloc(1, sizeof *g);
                g->src = c->rank;
                g->dst = k->peer;
                g->seq = c->send_seq[k->peer]++;
                g->bytes = bytes;
                g->data = malloc(bytes ? bytes : 1);
                memcpy(g->data, (const void *) (uintptr_t) k->send, bytes);
                g->next = q->msgs;
                q->msgs = g;
                m->done = true;
                return;
        }
        if (k->kind == HVD_GPU_CALL_RECV) {
                m->p2p_seq = c->recv_seq[k->peer]++;
                return;
        }
        const char *fail_at = getenv("MOCK_NCCL_FAIL_AT");
        if (fail_at && c->coll_seq >= (uint64_t) atoll(fail_at))
                c->failed = true; /* this collective hangs; GetAsyncError reports it */
        slot_t *s = slot_get(q, c->coll_seq++);
        m->slot = s;
        s->call[c->rank] = *k;
        size_t snap = k->kind == HVD_GPU_CALL_REDUCESCATTER                     ? bytes * (size_t) c->n
                      : k->kind == HVD_GPU_CALL_BROADCAST && c->rank != k->peer ? 0
                                                                                : bytes;
        s->snap[c->rank] = malloc(snap ? snap : 1);
        if (snap)
                memcpy(s->snap[c->rank], (const void *) (uintptr_t) k->send, snap);
        s->arrived++;
}

/* Completes the call if every rank arrived; true when done. */
static bool try_complete(mcall_t *m) {
        struct ncclComm *c = m->comm;
        clique_t *q = c->clique;
        hvd_gpu_call_t *k = &m->c;
        if (m->done)
                return true;
        size_t ts = type_size((ncclDataType_t) k->type), bytes = (size_t) k->count * ts;
        if (k->kind == HVD_GPU_CALL_RECV) {
                for (msg_t **p = &q->msgs; *p; p = &(*p)->next) {
                        msg_t *g = *p;
                        if (g->src == k->peer && g->dst == c->rank && g->seq == m->p2p_seq) {
                                if (g->bytes != bytes) {
                                        fprintf(stderr, "mock_cuda: recv of %zu bytes from %d, which sent %zu\n", bytes,
                                                k->peer, g->bytes);
                                        abort();
                                }
                                memcpy((void *) (uintptr_t) k->recv, g->data, bytes);
                                *p = g->next;
                                free(g->data);
                                free(g);
                                return m->done = true;
                        }
                }
                return false;
        }
        slot_t *s = m->slot;
        if (s->arrived < q->n || c->failed)
                return false;
        for (int r = 1; r < q->n; r++)
                check_same(&s->call[0], &s->call[r], 0, r);
        void *dst = (void *) (uintptr_t) k->recv;
        switch (k->kind) {
        case HVD_GPU_CALL_ALLREDUCE: reduce_into(k, dst, s->snap, q->n, 0); break;
        case HVD_GPU_CALL_BROADCAST: memcpy(dst, s->snap[k->peer], bytes); break;
        case HVD_GPU_CALL_ALLGATHER:
                for (int r = 0; r < q->n; r++)
                        memcpy((char *) dst + (size_t) r * bytes, s->snap[r], bytes);
                break;
        case HVD_GPU_CALL_REDUCESCATTER: reduce_into(k, dst, s->snap, q->n, (size_t) c->rank * bytes); break;
        default: die("unknown collective");
        }
        slot_release(q, s);
        return m->done = true;
}

/* ---- the device thread ---- */

static void *hostfn_main(void *p) {
        item_t *it = p;
        it->fn(it->ud);
        pthread_mutex_lock(&lock);
        it->fn_done = true;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
        return NULL;
}

static bool run_item(item_t *it) {
        switch (it->kind) {
        case IT_BATCH: mock_run_batch(&it->batch); return true;
        case IT_COPY: memmove(it->dst, it->owned ? it->owned : it->src, it->bytes); return true;
        case IT_SET: memset(it->dst, it->value, it->bytes); return true;
        case IT_RECORD:
                if (it->ev->done_gen < it->gen)
                        it->ev->done_gen = it->gen;
                return true;
        case IT_WAIT: return it->ev->done_gen >= it->gen;
        case IT_HOSTFN:
                /* runs on its own thread: only this stream waits for it */
                if (!it->fn_started) {
                        pthread_t t;
                        it->fn_started = true;
                        if (pthread_create(&t, NULL, hostfn_main, it) != 0)
                                die("cannot start a host function");
                        pthread_detach(t);
                }
                return it->fn_done;
        case IT_NCCL: {
                bool all = true;
                for (size_t i = 0; i < it->n_calls; i++) {
                        mcall_t *m = &it->calls[i];
                        if (m->comm->aborted)
                                continue; /* ncclCommAbort ends it */
                        if (!m->arrived)
                                arrive(m);
                }
                for (size_t i = 0; i < it->n_calls; i++)
                        if (!it->calls[i].comm->aborted && !try_complete(&it->calls[i]))
                                all = false;
                return all;
        }
        }
        return true;
}

static void *device_main(void *arg) {
        (void) arg;
        pthread_mutex_lock(&lock);
        (void) legacy_init;
        for (;;) {
                bool progress = false;
                for (struct CUstream_st *s = streams; s; s = s->next_all) {
                        while (s->head && run_item(s->head)) {
                                item_t *it = s->head;
                                s->head = it->next;
                                if (!s->head)
                                        s->tail = NULL;
                                free(it->owned);
                                free(it->calls);
                                free(it);
                                progress = true;
                        }
                }
                if (progress)
                        pthread_cond_broadcast(&changed);
                else {
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += 1000000;
                        if (ts.tv_nsec >= 1000000000) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000;
                        }
                        pthread_cond_timedwait(&changed, &lock, &ts);
                }
        }
        return NULL;
}

static void wait_idle(cudaStream_t s) {
        while (s->head)
                pthread_cond_wait(&changed, &lock);
}

void mock_enqueue_batch(const hvd_gpu_batch_t *b, void *stream) {
        start_device();
        item_t *it = new_item(IT_BATCH);
        it->batch = *b;
        pthread_mutex_lock(&lock);
        push(stream, it);
        pthread_mutex_unlock(&lock);
}

/* ---- CUDA runtime ---- */

static int n_devices(void) {
        const char *s = getenv("MOCK_GPUS");
        int n = s ? atoi(s) : 4;
        return n < 0 ? 0 : n > MAXDEV ? MAXDEV : n;
}

cudaError_t cudaGetDeviceCount(int *count) {
        *count = n_devices();
        return *count ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int device) {
        if (device < 0 || device >= n_devices())
                return cudaErrorInvalidDevice;
        cur_dev = device;
        return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
        return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) {
        return e == cudaSuccess ? "no error" : "mock CUDA error";
}
const char *cudaGetErrorName(cudaError_t e) {
        return e == cudaSuccess ? "cudaSuccess" : "cudaErrorMock";
}
cudaError_t cudaGetDevice(int *device) {
        *device = cur_dev;
        return cudaSuccess;
}

static long live_allocs; /* cudaMalloc'ed, not yet freed */

long mock_cuda_live_allocs(void) {
        pthread_mutex_lock(&lock);
        long n = live_allocs;
        pthread_mutex_unlock(&lock);
        return n;
}
/* Device memory carries a 256-byte header naming its GPU, so that freeing
 * it from another current device (a caller that passed the wrong device
 * to mem_free) is caught. */
typedef struct {
        uint64_t magic;
        int device;
} dev_header_t;
#define DEV_MAGIC  UINT64_C(0x6876646465766d65)
#define DEV_HEADER 256

cudaError_t cudaMalloc(void **p, size_t bytes) {
        char *b = aligned_alloc(256, DEV_HEADER + (bytes + 255) / 256 * 256);
        if (!b)
                return cudaErrorMemoryAllocation;
        *(dev_header_t *) b = (dev_header_t){ .magic = DEV_MAGIC, .device = cur_dev };
        *p = b + DEV_HEADER;
        pthread_mutex_lock(&lock);
        live_allocs++;
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
        if (!p)
                return cudaSuccess;
        dev_header_t *h = (dev_header_t *) ((char *) p - DEV_HEADER);
        if (h->magic != DEV_MAGIC)
                die("cudaFree of a pointer cudaMalloc did not return");
        if (h->device != cur_dev) {
                fprintf(stderr, "mock_cuda: cudaFree of memory of GPU %d while the current device is %d\n", h->device,
                        cur_dev);
                abort();
        }
        h->magic = 0;
        pthread_mutex_lock(&lock);
        live_allocs--;
        pthread_mutex_unlock(&lock);
        free(h);
        return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
        *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
        return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) {
        free(p);
        return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
        (void) flags;
        start_device();
        struct CUstream_st *st = calloc(1, sizeof *st);
        if (!st)
                return cudaErrorMemoryAllocation;
        st->device = cur_dev;
        pthread_mutex_lock(&lock);
        st->next_all = streams;
        streams = st;
        pthread_mutex_unlock(&lock);
        *s = st;
        return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
        pthread_mutex_lock(&lock);
        wait_idle(s);
        s->dead = true; /* stays listed: the device thread may be iterating */
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
        pthread_mutex_lock(&lock);
        bool idle = real_stream(s)->head == NULL;
        pthread_mutex_unlock(&lock);
        return idle ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
        start_device();
        pthread_mutex_lock(&lock);
        wait_idle(real_stream(s));
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
        start_device();
        pthread_mutex_lock(&lock);
        for (struct CUstream_st *s = streams; s; s = s->next_all)
                if (s->device == cur_dev)
                        wait_idle(s);
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
        (void) flags;
        *ev = calloc(1, sizeof **ev);
        return *ev ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
        (void) ev; /* a queued record may still refer to it: leak */
        return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
        start_device();
        item_t *it = new_item(IT_RECORD);
        pthread_mutex_lock(&lock);
        it->ev = ev;
        it->gen = ++ev->gen;
        push(s, it);
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t ev) {
        pthread_mutex_lock(&lock);
        bool done = ev->done_gen >= ev->gen;
        pthread_mutex_unlock(&lock);
        return done ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
        (void) flags;
        start_device();
        item_t *it = new_item(IT_WAIT);
        pthread_mutex_lock(&lock);
        it->ev = ev;
        it->gen = ev->gen;
        push(s, it);
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *ud) {
        start_device();
        item_t *it = new_item(IT_HOSTFN);
        it->fn = fn;
        it->ud = ud;
        pthread_mutex_lock(&lock);
        push(s, it);
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s) {
        start_device();
        item_t *it = new_item(IT_COPY);
        it->dst = dst;
        it->src = src;
        it->bytes = bytes;
        if (kind == cudaMemcpyHostToDevice) { /* the host buffer is taken now */
                it->owned = malloc(bytes ? bytes : 1);
                memcpy(it->owned, src, bytes);
        }
        pthread_mutex_lock(&lock);
        push(s, it);
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
        (void) kind;
        cudaStreamSynchronize(NULL);
        memmove(dst, src, bytes);
        return cudaSuccess;
}
cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
        cudaStreamSynchronize(NULL);
        memset(dst, value, bytes);
        return cudaSuccess;
}

/* ---- NCCL ---- */

static _Thread_local mcall_t *group;
static _Thread_local size_t group_n, group_cap;
static _Thread_local int group_depth;
static _Thread_local cudaStream_t group_stream;

ncclResult_t ncclGetVersion(int *v) {
        *v = NCCL_VERSION_CODE;
        return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
        static int counter;
        memset(id, 0, sizeof *id);
        pthread_mutex_lock(&lock);
        snprintf(id->internal, sizeof id->internal, "mock-%d", ++counter);
        pthread_mutex_unlock(&lock);
        return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
        return r == ncclSuccess ? "no error" : "mock NCCL error";
}
const char *ncclGetLastError(ncclComm_t comm) {
        (void) comm;
        return "";
}

static struct ncclComm *comm_join(clique_t *q, int rank) {
        struct ncclComm *c = calloc(1, sizeof *c);
        c->clique = q;
        c->rank = rank;
        c->n = q->n;
        q->comm[rank] = c;
        if (++q->arrived == q->n)
                for (int k = 0; k < q->n; k++)
                        q->comm[k]->ready = true;
        return c;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int n, ncclUniqueId id, int rank, ncclConfig_t *config) {
        if (n < 1 || n > MAXDEV || rank < 0 || rank >= n)
                return ncclInvalidArgument;
        pthread_mutex_lock(&lock);
        clique_t *q = cliques;
        while (q && memcmp(q->id, id.internal, sizeof q->id) != 0)
                q = q->next;
        if (!q) {
                q = calloc(1, sizeof *q);
                memcpy(q->id, id.internal, sizeof q->id);
                q->n = n;
                q->next = cliques;
                cliques = q;
        }
        *comm = comm_join(q, rank);
        bool blocking = !config || config->blocking != 0;
        if (blocking)
                while (!(*comm)->ready)
                        pthread_cond_wait(&changed, &lock);
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
        return blocking ? ncclSuccess : ncclInProgress;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int n, ncclUniqueId id, int rank) {
        return ncclCommInitRankConfig(comm, n, id, rank, NULL);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *st) {
        pthread_mutex_lock(&lock);
        *st = comm->aborted || comm->failed ? ncclRemoteError : comm->ready ? ncclSuccess : ncclInProgress;
        pthread_mutex_unlock(&lock);
        return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
        pthread_mutex_lock(&lock);
        comm->aborted = true; /* kept: queued calls still refer to it */
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
        return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
        (void) comm;
        return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
        return ncclCommAbort(comm);
}
ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
        (void) config;
        pthread_mutex_lock(&lock);
        clique_t *pq = parent->clique;
        uint64_t seq = parent->split_seq++;
        split_t *sp = pq->splits;
        while (sp && sp->seq != seq)
                sp = sp->next;
        if (!sp) {
                sp = calloc(1, sizeof *sp);
                sp->seq = seq;
                sp->next = pq->splits;
                pq->splits = sp;
        }
        int r = parent->rank;
        sp->color[r] = color;
        sp->key[r] = key;
        *newcomm = NULL;
        if (color != NCCL_SPLIT_NOCOLOR) {
                sp->child[r] = calloc(1, sizeof(struct ncclComm));
                *newcomm = sp->child[r];
        }
        if (++sp->arrived == pq->n) {
                /* every color becomes a clique, ranks ordered by key */
                for (int a = 0; a < pq->n; a++) {
                        if (sp->color[a] == NCCL_SPLIT_NOCOLOR || sp->child[a]->clique)
                                continue;
                        clique_t *q = calloc(1, sizeof *q);
                        int members[MAXDEV], m = 0;
                        for (int b = 0; b < pq->n; b++)
                                if (sp->color[b] == sp->color[a])
                                        members[m++] = b;
                        for (int i = 1; i < m; i++) /* insertion sort by key */
                                for (int j = i; j > 0 && sp->key[members[j]] < sp->key[members[j - 1]]; j--) {
                                        int t = members[j];
                                        members[j] = members[j - 1];
                                        members[j - 1] = t;
                                }
                        q->n = m;
                        q->arrived = m;
                        q->next = cliques;
                        cliques = q;
                        for (int i = 0; i < m; i++) {
                                struct ncclComm *c = sp->child[members[i]];
                                c->clique = q;
                                c->rank = i;
                                c->n = m;
                                c->ready = true;
                                q->comm[i] = c;
                        }
                }
                pthread_cond_broadcast(&changed);
        }
        pthread_mutex_unlock(&lock);
        return ncclInProgress;
}

/* nccl.h declares these two without prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
ncclResult_t ncclGroupStart(void) {
        group_depth++;
        return ncclSuccess;
}

static ncclResult_t add_call(uint32_t kind, const void *send, void *recv, size_t count, ncclDataType_t t,
                             ncclRedOp_t op, int peer, ncclComm_t comm, cudaStream_t s) {
        if (!comm || !comm->ready || comm->aborted)
                return ncclInvalidUsage;
        if (group_n == group_cap) {
                group_cap = group_cap ? 2 * group_cap : 16;
                group = realloc(group, group_cap * sizeof *group);
        }
        if (group_n && group_stream != s)
                die("one stream per group in this mock");
        group_stream = s;
        group[group_n++] = (mcall_t){ .c = { .kind = kind,
                                             .type = t,
                                             .op = op,
                                             .peer = peer,
                                             .send = (uint64_t) (uintptr_t) send,
                                             .recv = (uint64_t) (uintptr_t) recv,
                                             .count = count },
                                      .comm = comm };
        if (group_depth == 0)
                return ncclGroupEnd();
        return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
        if (group_depth > 0 && --group_depth > 0)
                return ncclSuccess;
        if (!group_n)
                return ncclSuccess;
        start_device();
        item_t *it = new_item(IT_NCCL);
        it->calls = malloc(group_n * sizeof *it->calls);
        memcpy(it->calls, group, group_n * sizeof *it->calls);
        it->n_calls = group_n;
        group_n = 0;
        pthread_mutex_lock(&lock);
        push(group_stream, it);
        pthread_mutex_unlock(&lock);
        return ncclSuccess;
}
#pragma GCC diagnostic pop

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s) {
        return add_call(HVD_GPU_CALL_ALLREDUCE, send, recv, count, t, op, 0, comm, s);
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t s) {
        return add_call(HVD_GPU_CALL_BROADCAST, send, recv, count, t, ncclSum, root, comm, s);
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t s) {
        return add_call(HVD_GPU_CALL_ALLGATHER, send, recv, count, t, ncclSum, 0, comm, s);
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s) {
        return add_call(HVD_GPU_CALL_REDUCESCATTER, send, recv, count, t, op, 0, comm, s);
}
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
        return add_call(HVD_GPU_CALL_SEND, send, NULL, count, t, ncclSum, peer, comm, s);
}
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
        return add_call(HVD_GPU_CALL_RECV, NULL, recv, count, t, ncclSum, peer, comm, s);
}
