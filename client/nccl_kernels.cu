/* nccl_kernels.cu — the batched copy kernel of the GPU data plane: one
 * thread block per descriptor (pieces of at most HVD_GPU_PIECE_BYTES), the
 * descriptor table passed by value (below the 4 KiB parameter limit), so a
 * fused operation's many small copies cost one launch and no host-to-device
 * transfer. Scaling follows the CPU kernels (common/reduce.c) bit for bit:
 * float16/bfloat16 scale in float and round to nearest even, integers scale
 * in double, saturate and truncate, bool is normalised and never scaled. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu_plan.h"
#include "nccl_kernels.h"

#define THREADS 256

#if defined(__CUDACC_VER_MAJOR__) &&                                                                                   \
        (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7))
#define GRID_CONSTANT __grid_constant__
#else
#define GRID_CONSTANT
#endif

__device__ __forceinline__ double clamp_d(double x, double lo, double hi) {
        if (x != x)
                return 0.0;
        return x < lo ? lo : x > hi ? hi : x;
}

template <typename T> struct scaler;
template <> struct scaler<uint8_t> {
        __device__ static uint8_t f(uint8_t v, double s, float) {
                return (uint8_t) clamp_d((double) v * s, 0.0, 255.0);
        }
};
template <> struct scaler<int8_t> {
        __device__ static int8_t f(int8_t v, double s, float) {
                return (int8_t) clamp_d((double) v * s, -128.0, 127.0);
        }
};
template <> struct scaler<int16_t> {
        __device__ static int16_t f(int16_t v, double s, float) {
                return (int16_t) clamp_d((double) v * s, -32768.0, 32767.0);
        }
};
template <> struct scaler<int32_t> {
        __device__ static int32_t f(int32_t v, double s, float) {
                return (int32_t) clamp_d((double) v * s, -2147483648.0, 2147483647.0);
        }
};
template <> struct scaler<int64_t> {
        __device__ static int64_t f(int64_t v, double s, float) {
                double x = (double) v * s;
                if (x != x)
                        return 0;
                if (x >= 0x1p63)
                        return INT64_MAX;
                if (x <= -0x1p63)
                        return INT64_MIN;
                return (int64_t) x;
        }
};
template <> struct scaler<float> {
        __device__ static float f(float v, double, float sf) {
                return __fmul_rn(v, sf);
        }
};
template <> struct scaler<double> {
        __device__ static double f(double v, double s, float) {
                return __dmul_rn(v, s);
        }
};
struct half_bits {
        uint16_t u;
};
struct bf16_bits {
        uint16_t u;
};
template <> struct scaler<half_bits> {
        __device__ static half_bits f(half_bits v, double, float sf) {
                float x = __fmul_rn(__half2float(__ushort_as_half(v.u)), sf);
                return half_bits{__half_as_ushort(__float2half_rn(x))};
        }
};
template <> struct scaler<bf16_bits> {
        __device__ static bf16_bits f(bf16_bits v, double, float sf) {
                float x = __fmul_rn(__bfloat162float(__ushort_as_bfloat16(v.u)), sf);
                return bf16_bits{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
        }
};

template <typename T> __device__ void scale_piece(const hvd_gpu_copy_t &c, double s) {
        const T *src = (const T *) c.src;
        T *dst = (T *) c.dst;
        uint64_t n = c.bytes / sizeof(T);
        float sf = (float) s;
        for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
                dst[i] = scaler<T>::f(src[i], s, sf);
}

template <typename V> __device__ void copy_words(uint8_t *dst, const uint8_t *src, uint64_t bytes) {
        uint64_t n = bytes / sizeof(V);
        V *d = (V *) dst;
        const V *s = (const V *) src;
        if (src)
                for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
                        d[i] = s[i];
        else {
                V z;
                memset(&z, 0, sizeof z);
                for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
                        d[i] = z;
        }
        for (uint64_t i = n * sizeof(V) + threadIdx.x; i < bytes; i += blockDim.x)
                dst[i] = src ? src[i] : 0;
}

/* bytes, or zeros when src is 0, as wide as the alignment allows */
__device__ void copy_piece(const hvd_gpu_copy_t &c) {
        uint8_t *dst = (uint8_t *) c.dst;
        const uint8_t *src = (const uint8_t *) c.src;
        uintptr_t al = (uintptr_t) dst | (uintptr_t) src;
        if ((al & 15) == 0)
                copy_words<uint4>(dst, src, c.bytes);
        else if ((al & 7) == 0)
                copy_words<uint2>(dst, src, c.bytes);
        else if ((al & 3) == 0)
                copy_words<uint32_t>(dst, src, c.bytes);
        else
                copy_words<uint8_t>(dst, src, c.bytes);
}

__global__ void __launch_bounds__(THREADS) batch_kernel(const GRID_CONSTANT hvd_gpu_batch_t b) {
        const hvd_gpu_copy_t &c = b.c[blockIdx.x];
        if (!c.src || b.mode == HVD_GPU_COPY) {
                copy_piece(c);
                return;
        }
        if (b.mode == HVD_GPU_COPY_BOOL) {
                const uint8_t *src = (const uint8_t *) c.src;
                uint8_t *dst = (uint8_t *) c.dst;
                for (uint64_t i = threadIdx.x; i < c.bytes; i += blockDim.x)
                        dst[i] = src[i] != 0;
                return;
        }
        switch (b.dtype) {
        case HVD_UINT8: scale_piece<uint8_t>(c, b.scale); break;
        case HVD_INT8: scale_piece<int8_t>(c, b.scale); break;
        case HVD_INT16: scale_piece<int16_t>(c, b.scale); break;
        case HVD_INT32: scale_piece<int32_t>(c, b.scale); break;
        case HVD_INT64: scale_piece<int64_t>(c, b.scale); break;
        case HVD_FLOAT16: scale_piece<half_bits>(c, b.scale); break;
        case HVD_BFLOAT16: scale_piece<bf16_bits>(c, b.scale); break;
        case HVD_FLOAT32: scale_piece<float>(c, b.scale); break;
        case HVD_FLOAT64: scale_piece<double>(c, b.scale); break;
        default: /* bool is never scaled */ copy_piece(c); break;
        }
}

extern "C" int hvd_nccl_launch_batch(const hvd_gpu_batch_t *b, void *stream) {
        if (b->n == 0)
                return 0;
        if (b->n > HVD_GPU_BATCH_CAPACITY)
                return (int) cudaErrorInvalidValue;
        batch_kernel<<<b->n, THREADS, 0, (cudaStream_t) stream>>>(*b);
        return (int) cudaGetLastError();
}
