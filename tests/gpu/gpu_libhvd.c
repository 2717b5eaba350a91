/* gpu_libhvd.c — libhvd's GPU routing end to end, without a GPU: the real
 * libhvd loads tests/gpu/libhvd-nccl-mock.so (client/nccl_module.c over the
 * host mock of CUDA and NCCL, so "device memory" is host memory) through
 * HVD_GPU_MODULE, in a job of one rank (with or without a daemon). Checks
 * that GPU allgather, alltoall and reducescatter get outputs allocated by
 * the module (mem_alloc), with exact values, shapes and received splits;
 * that releasing a handle frees them and a stolen one is freed by
 * hvd_free_output; and, in `abi` mode, that a module of another ABI is
 * refused with a message naming both versions.
 *
 *   gpu_libhvd outputs    the device-output path (HVD_GPU_MODULE = the mock)
 *   gpu_libhvd abi        HVD_GPU_MODULE = a module of ABI 1 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_module.h"
#include "hvd.h"

#define CHECK(cond, ...)                                                                                               \
        do {                                                                                                           \
                if (!(cond)) {                                                                                         \
                        fprintf(stderr, "FAIL: " __VA_ARGS__);                                                         \
                        fprintf(stderr, " (%s:%d; last error: %s)\n", __FILE__, __LINE__, hvd_last_error());           \
                        exit(1);                                                                                       \
                }                                                                                                      \
        } while (0)

static long (*live_allocs)(void);
static int gpu_dev; /* this rank's GPU: HVD_GPU_DEVICE, else 0 */

static long live(void) {
        return live_allocs();
}

/* Waits for h and checks member `index`'s output: ndim 2 with the given
 * first dimension and `cols` columns, device memory (not the input), and
 * values want[] (float32). */
static void check_output(hvd_handle_t *h, size_t index, const void *input, int64_t rows, int64_t cols,
                         const float *want, const char *what) {
        const void *data = NULL;
        size_t bytes = 0;
        int ndim = 0;
        const int64_t *shape = NULL;
        int r = hvd_handle_output(h, index, &data, &bytes, &ndim, &shape);
        CHECK(r == 0, "%s: hvd_handle_output: %d", what, r);
        CHECK(data && data != input, "%s: output %p is not a fresh allocation", what, data);
        CHECK(bytes == (size_t) (rows * cols) * 4, "%s: %zu bytes, want %lld", what, bytes,
              (long long) (rows * cols * 4));
        CHECK(ndim == 2 && shape[0] == rows && shape[1] == cols, "%s: shape [%lld, %lld] (ndim %d)", what,
              (long long) shape[0], (long long) (ndim > 1 ? shape[1] : -1), ndim);
        for (int64_t i = 0; i < rows * cols; i++)
                CHECK(((const float *) data)[i] == want[i], "%s: [%lld] = %g, want %g", what, (long long) i,
                      ((const float *) data)[i], want[i]);
}

static hvd_request_t gpu_request(const char *name, const float *in, const int64_t *shape) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = in;
        q.dtype = HVD_FLOAT32;
        q.ndim = 2;
        q.shape = shape;
        q.device = gpu_dev;
        q.reduce_op = HVD_REDUCE_SUM;
        return q;
}

static int outputs(void) {
        const char *path = getenv("HVD_GPU_MODULE");
        CHECK(path, "HVD_GPU_MODULE is not set");
        const char *dev = getenv("HVD_GPU_DEVICE");
        gpu_dev = dev ? atoi(dev) : 0;
        /* loaded here first, so hvd_init's dlopen() gets this same image,
         * whose counter of live device allocations the test reads */
        void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        CHECK(dl, "cannot load the GPU module %s: %s", path, dlerror());
        live_allocs = (long (*)(void)) dlsym(dl, "mock_cuda_live_allocs");
        CHECK(live_allocs, "%s is not the mock module (no mock_cuda_live_allocs)", path);
        long before_init = live();
        CHECK(hvd_init() == 0, "hvd_init");
        CHECK(hvd_size() == 1, "a job of one rank expected, size %d", hvd_size());
        long base = live();
        CHECK(base == before_init + 1, "hvd_init: the module made %ld device allocations, want 1 (fusion buffer)",
              base - before_init);

        /* "device" inputs: the mock's device memory is host memory */
        float in[12], want[12];
        for (int i = 0; i < 12; i++)
                in[i] = (float) (i + 1) * 1.5f;
        int64_t shape[2] = { 4, 3 };
        hvd_handle_t *h = NULL;

        /* allreduce writes into the caller's device buffer, as before */
        float ar[12];
        hvd_request_t q = gpu_request("gpu.allreduce", in, shape);
        q.output = ar;
        CHECK(hvd_allreduce_async(&q, &h) == 0 && hvd_handle_wait(h) == 0, "allreduce");
        CHECK(memcmp(ar, in, sizeof ar) == 0, "allreduce of one rank changed the values");
        CHECK(hvd_handle_output(h, 0, NULL, NULL, NULL, NULL) == -ENODATA, "allreduce has no hvd output");
        hvd_handle_release(&h);
        CHECK(live() == base, "allreduce allocated device memory");

        /* allgather: the module allocates the output; releasing frees it */
        q = gpu_request("gpu.allgather", in, shape);
        CHECK(hvd_allgather_async(&q, &h) == 0, "allgather submit");
        CHECK(hvd_handle_wait(h) == 0, "allgather: %s", hvd_handle_error(h));
        CHECK(live() == base + 1, "allgather: %ld device allocations, want 1", live() - base);
        check_output(h, 0, in, 4, 3, in, "allgather");
        hvd_handle_release(&h);
        CHECK(live() == base, "allgather: releasing the handle did not free the device output");

        /* alltoall without splits: everything to the only rank */
        q = gpu_request("gpu.alltoall", in, shape);
        CHECK(hvd_alltoall_async(&q, &h) == 0 && hvd_handle_wait(h) == 0, "alltoall: %s", hvd_last_error());
        check_output(h, 0, in, 4, 3, in, "alltoall");
        const int64_t *recv = NULL;
        CHECK(hvd_handle_recv_splits(h, &recv) == 0 && recv[0] == 4, "alltoall received splits");
        /* stolen: the handle no longer frees it; hvd_free_output does */
        void *stolen = NULL;
        size_t bytes = 0;
        CHECK(hvd_handle_steal_output(h, 0, &stolen, &bytes) == 0 && stolen && bytes == sizeof in, "steal");
        CHECK(hvd_handle_output(h, 0, NULL, NULL, NULL, NULL) == -ENODATA, "output after steal");
        hvd_handle_release(&h);
        CHECK(live() == base + 1, "the stolen output was freed with its handle");
        CHECK(memcmp(stolen, in, sizeof in) == 0, "alltoall: stolen output changed");
        CHECK(hvd_free_output(stolen, gpu_dev) == 0, "hvd_free_output");
        CHECK(live() == base, "hvd_free_output did not free the device output");

        /* reducescatter with postscale 2 (exact in float32) */
        q = gpu_request("gpu.reducescatter", in, shape);
        q.postscale = 2.0;
        for (int i = 0; i < 12; i++)
                want[i] = in[i] * 2;
        CHECK(hvd_reducescatter_async(&q, &h) == 0 && hvd_handle_wait(h) == 0, "reducescatter: %s", hvd_last_error());
        check_output(h, 0, in, 4, 3, want, "reducescatter");
        hvd_handle_release(&h);

        /* a group of three allgathers, one of them empty */
        float in2[6] = { -1, -2, -3, -4, -5, -6 };
        int64_t s1[2] = { 2, 3 }, s0[2] = { 0, 3 };
        hvd_request_t g[3] = { gpu_request("gpu.ag.0", in, shape), gpu_request("gpu.ag.1", in2, s1),
                               gpu_request("gpu.ag.2", NULL, s0) };
        CHECK(hvd_grouped_allgather_async(g, 3, &h) == 0 && hvd_handle_wait(h) == 0, "grouped allgather: %s",
              hvd_last_error());
        CHECK(live() == base + 3, "grouped allgather: %ld device allocations, want 3", live() - base);
        check_output(h, 0, in, 4, 3, in, "grouped allgather 0");
        check_output(h, 1, in2, 2, 3, in2, "grouped allgather 1");
        check_output(h, 2, NULL, 0, 3, NULL, "grouped allgather 2 (empty)");
        CHECK(hvd_handle_steal_output(h, 1, &stolen, NULL) == 0, "steal member 1");
        hvd_handle_release(&h);
        CHECK(live() == base + 1, "grouped allgather: release freed %ld, want the 2 not stolen", base + 3 - live());
        CHECK(hvd_free_output(stolen, gpu_dev) == 0 && live() == base, "hvd_free_output of member 1");

        /* hvd_free_output's arguments */
        CHECK(hvd_free_output(NULL, 0) == 0 && hvd_free_output(NULL, HVD_DEVICE_CPU) == 0, "free NULL");
        CHECK(hvd_free_output(in, -7) == -EINVAL, "a negative device is refused");
        void *host = malloc(16);
        CHECK(hvd_free_output(host, HVD_DEVICE_CPU) == 0, "free host memory");

        /* a CPU allgather still gets host memory (freed by hvd_free_output(.., CPU)) */
        q = gpu_request("cpu.allgather", in, shape);
        q.device = HVD_DEVICE_CPU;
        CHECK(hvd_allgather_async(&q, &h) == 0 && hvd_handle_wait(h) == 0, "cpu allgather");
        CHECK(live() == base, "a CPU allgather allocated device memory");
        CHECK(hvd_handle_steal_output(h, 0, &stolen, NULL) == 0 && hvd_free_output(stolen, HVD_DEVICE_CPU) == 0,
              "cpu steal/free");
        hvd_handle_release(&h);

        /* another GPU than this rank's is refused at submission, naming the tensor */
        q = gpu_request("gpu.wrongdev", in, shape);
        q.device = gpu_dev == 3 ? 1 : 3;
        char gpu_name[32];
        snprintf(gpu_name, sizeof gpu_name, "GPU %d", q.device);
        int r = hvd_allgather_async(&q, &h);
        CHECK(r == -EINVAL && strstr(hvd_last_error(), "gpu.wrongdev") && strstr(hvd_last_error(), gpu_name),
              "allgather on device %d: %d", q.device, r);
        CHECK(live() == base, "a refused op allocated device memory");
        /* and the job goes on */
        q = gpu_request("gpu.after", in, shape);
        CHECK(hvd_allgather_async(&q, &h) == 0 && hvd_handle_wait(h) == 0, "allgather after a refused one");
        check_output(h, 0, in, 4, 3, in, "allgather after a refused one");
        hvd_handle_release(&h);
        /* the output of a handle released while pending is freed by the
         * background thread once the op completes */
        q = gpu_request("gpu.detached", in, shape);
        CHECK(hvd_allgather_async(&q, &h) == 0, "detached allgather");
        hvd_handle_release(&h);
        for (int i = 0; i < 3000 && live() != base; i++)
                usleep(10000);
        CHECK(live() == base, "the output of a released pending handle was not freed after 30 s");
        /* and by shutdown when it is still pending then */
        q = gpu_request("gpu.last", in, shape);
        CHECK(hvd_allgather_async(&q, &h) == 0, "last allgather");
        hvd_handle_release(&h);
        hvd_shutdown();
        CHECK(live() == before_init, "shutdown left %ld device allocations behind", live() - before_init);
        printf("gpu_libhvd: device outputs of allgather, alltoall, reducescatter (single, grouped, empty), "
               "release, steal + hvd_free_output: ok (GPU %d)\n",
               gpu_dev);
        return 0;
}

static int abi(void) {
        CHECK(hvd_init() == 0, "hvd_init must succeed without a usable GPU backend");
        float in[4] = { 1, 2, 3, 4 };
        int64_t shape[2] = { 2, 2 };
        hvd_request_t q = gpu_request("gpu.abi", in, shape);
        hvd_handle_t *h = NULL;
        int r = hvd_allgather_async(&q, &h);
        CHECK(r == HVD_ENODEVICE, "a GPU request with a module of another ABI returned %d", r);
        const char *e = hvd_last_error();
        char needs[32];
        snprintf(needs, sizeof needs, "needs %d", HVD_GPU_MODULE_ABI);
        CHECK(strstr(e, "module ABI 1") && strstr(e, needs), "the error does not name both ABIs: %s", e);
        printf("gpu_libhvd: %s\n", e);
        hvd_shutdown();
        return 0;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc == 2 && strcmp(argv[1], "outputs") == 0)
                return outputs();
        if (argc == 2 && strcmp(argv[1], "abi") == 0)
                return abi();
        fprintf(stderr, "usage: %s outputs|abi\n", argv[0]);
        return 2;
}
