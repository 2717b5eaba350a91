/* old_abi_module.c — a GPU module as an older hvd built it (ABI 1, before
 * mem_alloc/mem_free), for tests/gpu/test-gpu-libhvd.sh: libhvd must refuse
 * it with a message naming both ABI versions, and never call into it. */
#include "config.h"

#include "gpu_module.h"

const hvd_gpu_module_t hvd_gpu_module_v1 = {
        .abi = 1,
        .name = "old",
};
