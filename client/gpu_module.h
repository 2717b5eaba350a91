/* gpu_module.h — the interface between libhvd and its GPU data plane, a
 * module (libhvd-nccl.so, built when configure finds CUDA and NCCL) that
 * libhvd loads with dlopen() at hvd_init(), so one installed libhvd serves
 * GPU nodes and CPU-only nodes without CUDA libraries.
 *
 * The module exports one symbol, hvd_gpu_module_v1 (a const
 * hvd_gpu_module_t). All calls come from libhvd's background thread, except
 * probe() and unique_id() (hvd_init's thread, before the thread starts) and
 * mem_free() (any thread, any time).
 * Every function returns >= 0 or a negative error with a message in err. */
#ifndef HVD_GPU_MODULE_H
#define HVD_GPU_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define HVD_GPU_MODULE_SYMBOL "hvd_gpu_module_v1"
/* 2: mem_alloc and mem_free (device outputs of allgather, alltoall,
 * reducescatter). libhvd refuses a module of another ABI, with a message. */
#define HVD_GPU_MODULE_ABI 2
#define HVD_NCCL_ID_BYTES  128

typedef struct hvd_gpu hvd_gpu_t;       /* one job's GPU state on this rank */
typedef struct hvd_gpu_op hvd_gpu_op_t; /* one enqueued operation */

typedef struct hvd_gpu_module {
        uint32_t abi;     /* HVD_GPU_MODULE_ABI */
        const char *name; /* "nccl" */
        /* Number of usable devices (> 0), or < 0 with the reason (no driver,
         * no device) in err. */
        int (*probe)(char *err, size_t err_len);
        /* Rank 0: a fresh ncclUniqueId, distributed to every rank through the
         * daemons during the join. */
        int (*unique_id)(uint8_t id[HVD_NCCL_ID_BYTES], char *err, size_t err_len);
        /* Creates the communicator of the job (all ranks) on `device` (the
         * local rank's GPU unless HVD_GPU_DEVICE overrides), a stream, and a
         * fusion buffer of fusion_bytes on the device. */
        int (*open)(const hvd_topology_t *topo, const uint8_t id[HVD_NCCL_ID_BYTES], int device, uint64_t fusion_bytes,
                    hvd_gpu_t **ret, char *err, size_t err_len);
        /* Enqueues op (member pointers are device pointers; member streams or
         * events to wait on are in hvd_xmember_t.stream when not NULL): fused
         * copies in, one collective (several ops may be batched between
         * group_start/group_end), copies out, and an event recorded at the
         * end. Never blocks the host. *ret identifies it for poll(). */
        int (*enqueue)(hvd_gpu_t *g, const hvd_xop_t *op, hvd_gpu_op_t **ret, char *err, size_t err_len);
        int (*group_start)(hvd_gpu_t *g, char *err, size_t err_len);
        int (*group_end)(hvd_gpu_t *g, char *err, size_t err_len);
        /* 1 when op completed (op is then freed), 0 while pending, < 0 on an
         * error (ncclCommGetAsyncError or a CUDA error; op freed). */
        int (*poll)(hvd_gpu_t *g, hvd_gpu_op_t *op, char *err, size_t err_len);
        /* The job was aborted: ncclCommAbort, so no rank stays inside NCCL. */
        void (*abort)(hvd_gpu_t *g);
        /* NULL-safe; frees pending ops, destroys the communicator. */
        void (*close)(hvd_gpu_t **g);
        /* Device memory of bytes (> 0) on g's device, for an output libhvd
         * allocates (allgather, alltoall, reducescatter), before the op that
         * writes it is enqueued. cudaMalloc: the memory is not tied to any
         * stream, so whoever ends up owning it may use and free it on any
         * stream or thread. Free with mem_free. */
        int (*mem_alloc)(hvd_gpu_t *g, size_t bytes, void **ret, char *err, size_t err_len);
        /* Frees what mem_alloc returned (NULL-safe), on `device` (the device
         * of the g it came from). cudaFree, which waits until the device is
         * idle, so no kernel on any stream still uses the memory. Callable
         * from any thread, also after close(); leaves the calling thread's
         * current device as it was (switching to `device` for the free and
         * back, which on CUDA >= 12 sets up the old device's context if
         * the thread never used it: free from a thread whose current device
         * is the memory's to avoid that). */
        void (*mem_free)(int device, void *p);
} hvd_gpu_module_t;

#endif
