/* hvd.h — the whole public API of libhvd: synchronous data-parallel
 * training collectives (allreduce, broadcast, allgather, alltoall,
 * reducescatter, barrier, join) negotiated by hvd-coordinatord.
 *
 * Conventions: functions return >= 0 on success and a negative error code
 * (-errno or HVD_E*) on failure; hvd_strerror() names it. A failed call
 * leaves its out-parameters untouched. All functions are thread-safe unless
 * stated otherwise; collectives may be submitted from any thread. */
#ifndef HVD_H
#define HVD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_VERSION_MAJOR  0
#define HVD_VERSION_MINOR  1
#define HVD_MAX_NDIM       8
#define HVD_MAX_NAME_BYTES 1024
#define HVD_DEVICE_CPU     (-1)

/* Element types. Values are part of the wire format: never renumber. */
typedef enum hvd_dtype {
        HVD_UINT8 = 0,
        HVD_INT8 = 1,
        HVD_INT32 = 2,
        HVD_INT64 = 3,
        HVD_FLOAT16 = 4,
        HVD_BFLOAT16 = 5,
        HVD_FLOAT32 = 6,
        HVD_FLOAT64 = 7,
        HVD_BOOL = 8,
        HVD_INT16 = 9,
        _HVD_DTYPE_COUNT
} hvd_dtype_t;

/* Reduction operators. Average = sum / number of ranks. */
typedef enum hvd_reduce_op {
        HVD_REDUCE_AVERAGE = 0,
        HVD_REDUCE_SUM = 1,
        HVD_REDUCE_MIN = 2,
        HVD_REDUCE_MAX = 3,
        HVD_REDUCE_PRODUCT = 4,
        _HVD_REDUCE_COUNT
} hvd_reduce_op_t;

/* hvd-specific error codes, below -errno space. */
#define HVD_ERRORS(X)                                                                                                  \
        X(HVD_EMISMATCH, -1001, "Tensor parameters differ across ranks")                                               \
        X(HVD_EABORTED, -1002, "Job aborted")                                                                          \
        X(HVD_ENOTINIT, -1003, "hvd is not initialized (call hvd_init first)")                                         \
        X(HVD_ENODAEMON, -1004, "Coordinator not reachable")                                                           \
        X(HVD_EPROTO, -1005, "Protocol error")                                                                         \
        X(HVD_EDENIED, -1006, "Access denied")                                                                         \
        X(HVD_ETIMEOUT, -1007, "Deadline exceeded")                                                                    \
        X(HVD_ESHUTDOWN, -1008, "hvd has been shut down")                                                              \
        X(HVD_EDUPLICATE, -1009, "A tensor with this name is already in flight")                                       \
        X(HVD_ENODEVICE, -1010, "No GPU backend or device available")                                                  \
        X(HVD_EJOINED, -1011, "Not supported while ranks have joined")                                                 \
        X(HVD_ERESET, -1012, "The elastic job's membership changed: re-initialise")

enum {
#define HVD_ERR_ENUM(name, value, text) name = value,
        HVD_ERRORS(HVD_ERR_ENUM)
#undef HVD_ERR_ENUM
};

/* Text for an error code (negative errno or HVD_E*). Static string. */
const char *hvd_strerror(int err);

/* ---- life cycle ---------------------------------------------------------
 * hvd_init() reads HVD_* (and HOROVOD_*) environment variables set by
 * hvdrun, connects to the local coordinator and waits until every rank of
 * the job has joined (HVD_START_TIMEOUT, default 30 s). Without them it
 * reads the variables of a cluster launcher that started the process
 * (Open MPI's mpirun, MPICH, torchrun, Slurm's srun; libhvd(3),
 * docs/LAUNCHERS.md) and joins those ranks as one job; a half-set or
 * contradictory environment is an error naming the variables. Started by
 * none of them, it runs as a job of one rank without any daemon, like
 * Horovod without horovodrun. Returns 0, or an
 * error; hvd_last_error() has the detailed message. Calling it again after
 * success returns 0. When the GPU backend (libhvd-nccl.so in hvd's library
 * directory, or the file named by $HVD_GPU_MODULE) is installed and a GPU
 * is usable, hvd_init also opens it, in a job of one rank too; otherwise
 * GPU requests (device >= 0) fail with HVD_ENODEVICE and the reason.
 * hvd_shutdown() says goodbye and stops the background thread; pending
 * handles complete with HVD_ESHUTDOWN. */
int hvd_init(void);
int hvd_shutdown(void);
int hvd_is_initialized(void);

/* Who placed this rank at the last hvd_init: "hvdrun", "Horovod"
 * (HOROVOD_* names), "Open MPI", "MPICH", "torchrun", "Slurm", or "none"
 * (a job of one rank). Static string; "none" before hvd_init. */
const char *hvd_rank_source(void);

/* Detailed message of the last failed call of this thread (hvd_init,
 * hvd_shutdown, the synchronous hvd_allreduce/hvd_broadcast/hvd_barrier/
 * hvd_join, a submission), or of the job's abort. Borrowed; valid until the next call into hvd
 * from the same thread. Empty string when none. */
const char *hvd_last_error(void);

/* Topology. Each returns HVD_ENOTINIT (< 0) before hvd_init(). */
int hvd_rank(void);
int hvd_size(void);
int hvd_local_rank(void);
int hvd_local_size(void);
int hvd_cross_rank(void);
int hvd_cross_size(void);

/* ---- collectives --------------------------------------------------------
 * One request describes one tensor. Initialise with HVD_REQUEST_INIT (or
 * hvd_request_init) and set what you need. The caller keeps ownership of
 * name, input, output, shape and splits; they must stay valid until the
 * handle completes (name is copied at submission and may go at once).
 *
 * - allreduce:     output has the same shape as input; input == output allowed.
 * - broadcast:     root's input is copied to every rank's output
 *                  (input == output allowed; non-root input ignored).
 * - allgather:     input shape [d0, rest...]; d0 may differ per rank; output
 *                  is allocated by hvd: hvd_handle_output().
 * - alltoall:      splits[r] rows (first dimension) go to rank r; NULL splits
 *                  = d0 / size rows each (d0 must divide). Output allocated
 *                  by hvd; hvd_handle_output(), hvd_handle_recv_splits().
 * - reducescatter: reduce, then rank r keeps rows [r0, r1) of the first
 *                  dimension (the first d0 % size ranks get one extra row).
 *                  Output allocated by hvd: hvd_handle_output().
 *
 * GPU tensors (device >= 0; needs the GPU backend, see hvd_init): input and
 * output are device pointers on that GPU. stream is the cudaStream_t the
 * input is produced on (NULL: the legacy default stream); hvd's stream
 * waits for it with an event, so the caller need not synchronise the
 * device or the stream before submitting. Pass the stream of the
 * framework (e.g. PyTorch's current stream). Work the caller queues on
 * that stream after submitting may be waited for too, so do not make it
 * wait on hvd's result. A handle completes only once the GPU has finished
 * writing the output: after hvd_handle_wait() returns, the output may be
 * used on any stream without further synchronisation. Outputs hvd
 * allocates for allgather, alltoall and reducescatter are device memory on
 * the request's GPU (see hvd_handle_output).
 */
typedef struct hvd_request {
        const char *name; /* unique among this rank's in-flight requests */
        const void *input;
        void *output; /* allreduce/broadcast: required */
        hvd_dtype_t dtype;
        int ndim;                  /* 0 .. HVD_MAX_NDIM */
        const int64_t *shape;      /* ndim entries, each >= 0 */
        hvd_reduce_op_t reduce_op; /* default HVD_REDUCE_AVERAGE, as in Horovod */
        double prescale;           /* multiply inputs before reducing (1.0 = none) */
        double postscale;          /* multiply result after reducing (1.0 = none) */
        int root;                  /* broadcast root: a rank of the job, or of the process set */
        const int64_t *splits;     /* alltoall: size() entries, or NULL */
        int process_set;           /* 0 = all ranks */
        int device;                /* HVD_DEVICE_CPU or a GPU ordinal */
        void *stream;              /* GPU: cudaStream_t the input is ready on (NULL = default) */
} hvd_request_t;

#define HVD_REQUEST_INIT                                                                                               \
        {                                                                                                              \
                .name = NULL, .input = NULL, .output = NULL, .dtype = HVD_FLOAT32, .ndim = 0, .shape = NULL,           \
                .reduce_op = HVD_REDUCE_AVERAGE, .prescale = 1.0, .postscale = 1.0, .root = 0, .splits = NULL,         \
                .process_set = 0, .device = HVD_DEVICE_CPU, .stream = NULL                                             \
        }

void hvd_request_init(hvd_request_t *req);

/* A handle to one submitted operation (or one group). Opaque. */
typedef struct hvd_handle hvd_handle_t;

/* Submit asynchronously. On success *handle is a new handle owned by the
 * caller: release it with hvd_handle_release() after it completes (or to
 * abandon it; the operation still runs). Argument errors are returned at
 * once (-EINVAL, HVD_EDUPLICATE, HVD_ENOTINIT) with no handle made. */
int hvd_allreduce_async(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_broadcast_async(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_allgather_async(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_alltoall_async(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_reducescatter_async(const hvd_request_t *req, hvd_handle_t **handle);
/* hvd_allreduce_async for a caller about to wait on the handle: on one node
 * in the steady state the background thread is not woken for it, and the
 * waiting thread runs the operation itself, as hvd_allreduce does (an
 * asynchronous submission wakes that thread, which then hands the result
 * over: two wakeups, several microseconds). Wait on the handle at once:
 * one that no thread waits on still completes, carried by the background
 * thread, only later. The same for a broadcast, an allgather, a
 * reducescatter and an alltoall (of the CPU: a GPU request is carried as
 * usual; an alltoall runs from the board on one host only). */
int hvd_allreduce_async_waiting(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_broadcast_async_waiting(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_allgather_async_waiting(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_reducescatter_async_waiting(const hvd_request_t *req, hvd_handle_t **handle);
int hvd_alltoall_async_waiting(const hvd_request_t *req, hvd_handle_t **handle);

/* n requests of one kind executed as one atomic group: none starts before
 * all are ready on every rank. One handle for the group; outputs by index. */
int hvd_grouped_allreduce_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);
int hvd_grouped_allgather_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);
int hvd_grouped_reducescatter_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);
/* The same for a caller that waits on the handle at once (see
 * hvd_allreduce_async_waiting): a group of CPU tensors of all ranks then
 * runs on the waiting thread, from the board. */
int hvd_grouped_allreduce_async_waiting(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);
int hvd_grouped_allgather_async_waiting(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);
int hvd_grouped_reducescatter_async_waiting(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);

/* Releasing a handle frees the outputs hvd allocated that were not stolen
 * (device memory too; that waits until the GPU is idle, outside hvd's lock).
 *
 * Block until the handle completes. Returns 0 or the operation's error
 * (hvd_handle_error() has the message). Once a handle has completed, with
 * or without an error, hvd no longer touches the caller's buffers. Waiting
 * only sleeps on a condition variable. hvd_handle_wait_timeout returns
 * HVD_ETIMEOUT if the handle is still pending after timeout_usec. */
int hvd_handle_wait(hvd_handle_t *handle);
int hvd_handle_wait_timeout(hvd_handle_t *handle, uint64_t timeout_usec);
/* Calls fn(arg) once, when the handle completes (successfully or not),
 * so that a caller need not keep a thread waiting on each handle. fn runs
 * on the thread that completes the handle, with hvd's internal lock held:
 * it must return quickly and must not call any hvd function (hand the
 * handle over to a thread of yours, e.g. by signalling a condition
 * variable, and read its results there). If the handle has already
 * completed, fn runs at once on the calling thread, before this returns.
 * fn is still called if the handle is released while pending. Returns 0,
 * -EINVAL (NULL handle or fn), or -EBUSY when a callback is already set. */
int hvd_handle_notify(hvd_handle_t *handle, void (*fn)(void *arg), void *arg);
/* 1 when complete (successfully or not), 0 while pending. */
int hvd_handle_poll(hvd_handle_t *handle);
/* Error message of a failed operation; borrowed, valid until release. "" if none. */
const char *hvd_handle_error(const hvd_handle_t *handle);
/* Output allocated by hvd (allgather, alltoall, reducescatter) of member
 * index (0 unless grouped): data, byte count, ndim and shape. Borrowed:
 * valid until hvd_handle_release(). -ENODATA before completion or for kinds
 * that write into the caller's output. For a GPU request data is device
 * memory on the request's device (never NULL, at least one byte even for
 * an empty result), allocated with cudaMalloc by the GPU backend. */
int hvd_handle_output(const hvd_handle_t *handle, size_t index, const void **data, size_t *bytes, int *ndim,
                      const int64_t **shape);
/* alltoall: rows received from each rank (size() entries). Borrowed. */
int hvd_handle_recv_splits(const hvd_handle_t *handle, const int64_t **splits);
/* Take ownership of the allocated output: avoids a copy. Free it with
 * hvd_free_output(data, device of the request) — for a CPU request that is
 * free() — or, for a CPU request, hand it back with hvd_recycle_output().
 * After a steal, hvd_handle_output() of that index is -ENODATA. */
int hvd_handle_steal_output(hvd_handle_t *handle, size_t index, void **data, size_t *bytes);
/* Frees an output taken with hvd_handle_steal_output(); device is the
 * request's (HVD_DEVICE_CPU: free()). NULL-safe. A device output is freed
 * with cudaFree, which first waits until the GPU is idle, so work still
 * queued on any stream that reads it is safe. Any thread, also after
 * hvd_shutdown(). Returns 0, -EINVAL for a negative device other than
 * HVD_DEVICE_CPU, HVD_ENODEVICE when no GPU backend is loaded. */
int hvd_free_output(void *data, int device);
/* Hands a CPU output taken with hvd_handle_steal_output() back to hvd
 * instead of free()ing it: bytes as the steal reported. hvd keeps large
 * ones (a bounded number, while initialised) for later outputs of about
 * their size, which then need no fresh pages (a new large allocation
 * faults in and zeroes each page as it is first written); it frees the
 * rest. NULL-safe; any thread, also after hvd_shutdown(). */
void hvd_recycle_output(void *data, size_t bytes);
/* NULL-safe; sets *handle = NULL. Releasing a pending handle detaches it. */
void hvd_handle_release(hvd_handle_t **handle);

/* Convenience: submit and wait. */
int hvd_allreduce(const char *name, const void *input, void *output, size_t count, hvd_dtype_t dtype,
                  hvd_reduce_op_t op);
int hvd_broadcast(const char *name, void *buffer, size_t count, hvd_dtype_t dtype, int root);

/* ---- shared tensors ----------------------------------------------------
 * Memory the other ranks of this node can read in place: an allreduce on
 * one node whose input and output live here on every local rank skips the
 * copy into the data plane's shared-memory slots (each byte is touched
 * about half as often; docs/PERFORMANCE.md). Any other tensor still works
 * as before, and a rank whose tensor is elsewhere only makes that
 * operation take the usual path. hvd_shared_alloc returns page-aligned,
 * zero-filled memory of at least bytes (0: one page): 0 and *ptr, -EINVAL
 * (ptr NULL), -ENOMEM, or -errno of memfd_create. Any thread, before
 * hvd_init and after hvd_shutdown. hvd_shared_free is NULL-safe; -EINVAL
 * for memory not from hvd_shared_alloc. A forked child must not use its
 * parent's shared tensors (they stay the parent's); it allocates its own. */
int hvd_shared_alloc(size_t bytes, void **ptr);
int hvd_shared_free(void *ptr);

/* ---- process sets ------------------------------------------------------
 * A process set is a subset of the job's ranks whose collectives run among
 * themselves (request.process_set = its id; 0 is the set of all ranks).
 * Like Horovod's add_process_set: every rank of the job calls
 * hvd_add_process_set with the same ranks in the same order of calls; it is
 * collective and returns the new id (> 0), or an error. Within a set,
 * ranks (broadcast roots, alltoall splits, allgather order) are positions
 * in the set's sorted member list. ranks must be
 * distinct, in range, and are sorted by hvd. Removing is collective too. */
int hvd_add_process_set(const int *ranks, size_t n);
int hvd_remove_process_set(int id);
/* This rank's rank within set id, or -ENOENT if not a member; size of set
 * id; whether this rank is a member (1/0). -EINVAL for an unknown id. */
int hvd_process_set_rank(int id);
int hvd_process_set_size(int id);
int hvd_process_set_included(int id);
/* The members of set id (borrowed; valid until the set is removed). */
int hvd_process_set_ranks(int id, const int **ranks, size_t *n);

/* Every rank waits until all have called it. */
int hvd_barrier(void);

/* This rank has no more data: it keeps serving the other ranks' allreduces
 * of the job (contributing zeros; an average still divides by the job's
 * size) until every rank has joined, as Horovod's join does. Meanwhile any
 * other collective of the ranks that have not joined (allgather,
 * broadcast, alltoall, reducescatter, barrier, and any collective of a
 * process set with a joined member) fails at once with HVD_EJOINED, and
 * those ranks join in turn. Returns the rank that joined last (>= 0, the
 * same on every rank) or an error. */
int hvd_join(void);

/* ---- elastic membership -------------------------------------------------
 * In an elastic job (HVD_ELASTIC=1, as hvdrun --min-np/--max-np sets), the
 * root daemon places each rank at hvd_init: the job is a series of numbered
 * generations. A lost rank or host fails every survivor's collectives with
 * HVD_ERESET; each then calls hvd_shutdown() and hvd_init() again and is
 * placed in the next generation (ranks renumbered densely, survivors in
 * their order, new ranks after). See docs/ELASTIC.md.
 *
 * The generation this rank was placed in (>= 1), 0 outside an elastic job
 * or before hvd_init. */
uint64_t hvd_elastic_generation(void);
/* 1 when every rank of this generation is to take the state from rank 0
 * (ranks joined, or ranks were lost), else 0: the same on every rank. */
int hvd_elastic_sync_needed(void);
/* How many workers wait to join the next generation, as this rank last
 * heard from its daemon (0: none). Ranks may hear it at different times:
 * agree on it with a collective (hvd.elastic's check_host_updates does). */
int hvd_elastic_waiting(void);

/* ---- timeline ----------------------------------------------------------
 * Records what the job does into a Chrome trace-event JSON file (open it in
 * https://ui.perfetto.dev or chrome://tracing): one row per tensor with its
 * negotiation (a mark per rank as it became ready), the operation, its
 * fusion-buffer copies and the collective; with mark_cycles != 0, a marker
 * per negotiation cycle. Like Horovod, rank 0 alone writes the file: call
 * these on every rank (the others return 0 and do nothing). file is opened
 * by rank 0's process (relative to its working directory), created or
 * truncated; a timeline already on is closed first. HVD_TIMELINE=FILE (or
 * HOROVOD_TIMELINE) starts one at hvd_init, HVD_TIMELINE_MARK_CYCLES=1 adds
 * the cycle markers. hvd_stop_timeline() ends the file with "]", so it is
 * strict JSON when it returns; hvd_shutdown() and a normal exit() do the
 * same. hvd_start_timeline() returns once the coordinator knows (it then
 * records when each rank becomes ready), at most about 2 s later. Returns
 * 0, -EINVAL, HVD_ENOTINIT, or -errno when the file cannot be created or
 * written (hvd_last_error() says which). Thread-safe. See docs/TIMELINE.md. */
int hvd_start_timeline(const char *file, int mark_cycles);
int hvd_stop_timeline(void);

/* The settings the autotuner (HVD_AUTOTUNE=1, docs/AUTOTUNE.md) has put in
 * force on this rank: how many changes it applied (0: none yet), the
 * schedule number the last one applied at (every rank applies each change
 * at the same schedule), and the fusion threshold and cycle time in force
 * since, and the data plane's switches in force (bit 0: the TCP ring's
 * send thread, bit 1: small chunks across nodes, bit 2: 2 MiB shared-memory
 * chunks on a host; docs/AUTOTUNE.md). Returns 0 (*out filled), -EINVAL (out NULL) or
 * HVD_ENOTINIT. Thread-safe. */
typedef struct hvd_tuning {
        uint64_t generation;
        uint64_t schedule_seq;
        uint64_t fusion_threshold_bytes;
        uint64_t cycle_time_usec;
        uint32_t switches;
} hvd_tuning_t;
int hvd_tuning_get(hvd_tuning_t *out);

/* Element size of a dtype in bytes (0 if invalid) and its name ("float32"). */
size_t hvd_dtype_size(hvd_dtype_t dtype);
const char *hvd_dtype_name(hvd_dtype_t dtype);

/* Library version string, e.g. "0.1.0". Static. */
const char *hvd_version(void);

#ifdef __cplusplus
}
#endif
#endif
