/* mock_kernels.c — client/nccl_kernels.cu's batched copy on the host, for
 * tests/gpu/check_gpu_mock: the same descriptor semantics (zero fill when
 * src is 0, bytes, bool normalisation, scaling with the CPU rounding rules
 * of common/reduce.c), queued on the stream like a kernel launch. */
#include "config.h"

#include <string.h>

#include "mock_cuda.h"
#include "nccl_kernels.h"
#include "reduce.h"

void mock_run_batch(const hvd_gpu_batch_t *b) {
        for (uint32_t k = 0; k < b->n; k++) {
                const hvd_gpu_copy_t *c = &b->c[k];
                uint8_t *dst = (uint8_t *) (uintptr_t) c->dst;
                const uint8_t *src = (const uint8_t *) (uintptr_t) c->src;
                if (!src) {
                        memset(dst, 0, c->bytes);
                        continue;
                }
                if (b->mode == HVD_GPU_COPY_BOOL) {
                        for (uint64_t i = 0; i < c->bytes; i++)
                                dst[i] = src[i] != 0;
                } else if (b->mode == HVD_GPU_COPY_SCALE && b->dtype != HVD_BOOL) {
                        size_t es = hvd_gpu_dtype_size((hvd_dtype_t) b->dtype);
                        hvd_scale_copy((hvd_dtype_t) b->dtype, dst, src, c->bytes / es, b->scale);
                } else
                        memmove(dst, src, c->bytes);
        }
}

int hvd_nccl_launch_batch(const hvd_gpu_batch_t *b, void *stream) {
        if (b->n == 0)
                return 0;
        if (b->n > HVD_GPU_BATCH_CAPACITY)
                return 1; /* cudaErrorInvalidValue */
        mock_enqueue_batch(b, stream);
        return 0;
}
