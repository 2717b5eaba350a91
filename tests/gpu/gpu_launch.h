/* gpu_launch.h — what tests/gpu/gpu_harness.c and benchmarks/bench_nccl.c
 * share: loading libhvd-nccl with dlopen(), running N ranks as processes
 * (rank 0's ncclUniqueIds reach the others through pipes, as the daemons
 * would pass it during the join), opening the module on the rank's GPU and
 * waiting for operations by polling, as libhvd's background thread does.
 * The parent process never initialises CUDA, so forking stays safe. */
#ifndef HVD_GPU_LAUNCH_H
#define HVD_GPU_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_module.h"

#define GPU_LAUNCH_MAX_RANKS 16
#define GPU_LAUNCH_SKIP      77

typedef struct gpu_rank {
        const hvd_gpu_module_t *m;
        void *dl;
        int rank, size;                 /* processes of the run */
        uint8_t id[HVD_NCCL_ID_BYTES];  /* for the module's communicator */
        uint8_t id2[HVD_NCCL_ID_BYTES]; /* a second one, for a peer communicator (benchmark) */
        hvd_topology_t topo;
        int rank_cross[GPU_LAUNCH_MAX_RANKS], rank_local[GPU_LAUNCH_MAX_RANKS];
        hvd_gpu_t *g;
        char err[1024];
} gpu_rank_t;

/* $HVD_NCCL_MODULE, else $HVD_BUILDDIR/client/.libs/libhvd-nccl.so, else
 * client/.libs/libhvd-nccl.so. Static or environment storage. */
const char *gpu_launch_module_path(void);

/* dlopen()s the module and checks its ABI. 0, or < 0 with err. */
int gpu_launch_load(const char *path, void **dl, const hvd_gpu_module_t **m, char *err, size_t err_len);

/* Probes in a child process: the number of GPUs, or < 0 with the reason. */
int gpu_launch_probe(char *msg, size_t msg_len);

typedef int (*gpu_rank_fn)(gpu_rank_t *r, void *userdata);

/* Forks np ranks. Each loads the module, gets rank 0's unique id, and runs
 * fn (which opens the module with gpu_rank_open() when it wants to) and
 * closes what is open. A rank's exit status is fn's return value (0 pass,
 * 77 skip, other fail). Returns 0 when all passed, 77 when any skipped and
 * none failed, 1 otherwise; after timeout_sec every rank is killed and the
 * run fails. */
int gpu_launch_run(int np, gpu_rank_fn fn, void *userdata, int timeout_sec);

/* Opens the module for this rank on GPU `rank` of a job of `size` ranks
 * (size may exceed the processes run, to test a missing rank). */
int gpu_rank_open(gpu_rank_t *r, int size, uint64_t fusion_bytes);

/* Polls op until it completes: 0, or < 0 (message in r->err) on error or
 * after timeout_sec. */
int gpu_rank_wait(gpu_rank_t *r, hvd_gpu_op_t *op, double timeout_sec);

double gpu_launch_now(void);

#endif
