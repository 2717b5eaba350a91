/* mock_cuda.h — the two halves of the host mock of CUDA/NCCL
 * (tests/gpu/mock_cuda.c) and of the copy kernel (mock_kernels.c). */
#ifndef HVD_MOCK_CUDA_H
#define HVD_MOCK_CUDA_H

#include "gpu_plan.h"

/* Queues a copy batch on a stream (what a kernel launch does). */
void mock_enqueue_batch(const hvd_gpu_batch_t *b, void *stream);
/* Runs a copy batch on host memory: the kernel's semantics. */
void mock_run_batch(const hvd_gpu_batch_t *b);
/* Device allocations (cudaMalloc) not freed yet, over every mock GPU. */
long mock_cuda_live_allocs(void);

#endif
