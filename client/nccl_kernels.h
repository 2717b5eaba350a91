/* nccl_kernels.h — the CUDA kernels of libhvd-nccl, callable from C: the
 * batched copy (copies into and out of the fusion buffer, zero fill, the
 * prescale/postscale and bool transforms). No CUDA headers needed. */
#ifndef HVD_NCCL_KERNELS_H
#define HVD_NCCL_KERNELS_H

#include "gpu_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launches one batch (one thread block per entry) on stream (a
 * cudaStream_t). Returns the cudaError_t of the launch: 0 on success.
 * Never blocks; b is copied into the launch. */
int hvd_nccl_launch_batch(const hvd_gpu_batch_t *b, void *stream);

#ifdef __cplusplus
}
#endif
#endif
