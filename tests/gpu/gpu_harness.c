/* gpu_harness.c — `make check-gpu`: drives libhvd-nccl through
 * gpu_module.h directly (libhvd's routing of device tensors is not needed),
 * ranks as processes, one GPU each. Tests: exact allreduce / broadcast /
 * allgather / reducescatter / alltoall for every dtype (int16 reductions
 * must fail cleanly), fusion of many small tensors, several windows,
 * grouped ops, joined members, ordering after a user stream and the legacy
 * default stream without blocking the host, a rank that never arrives, and
 * abort while a peer sits inside a collective. Every test skips (77) with
 * the reason when there are not enough GPUs. Process sets, split from the
 * job's communicator on first use. Outputs allocated by the module's
 * mem_alloc, as libhvd allocates allgather/alltoall/reducescatter outputs. Built with GPU_LAUNCH_MOCK it runs over
 * tests/gpu/mock_cuda.c, ranks as threads (tests/gpu/check_gpu_mock), and
 * can inject an asynchronous NCCL error.
 *
 *   gpu_harness probe          the no-device contract (test-gpu-module.sh)
 *   gpu_harness TEST NP        TEST: collectives fusion stream abort-init abort psets
 *                              async-error (mock only) alloc;
 *                              NP: ranks, or "all" (one per GPU, 2 to 8) */
#include "config.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_launch.h"
#include "hvd.pb-c.h"
#include "reduce.h"

#define MAXM           8
#define OP_TIMEOUT_SEC 120.0

static _Thread_local int me_rank; /* for messages; ranks are threads under the mock */

#define FAIL(...)                                                                                                      \
        do {                                                                                                           \
                fprintf(stderr, "rank %d: FAIL: ", me_rank);                                                           \
                fprintf(stderr, __VA_ARGS__);                                                                          \
                fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                                                     \
                return 1;                                                                                              \
        } while (0)

#define CUDA(call)                                                                                                     \
        do {                                                                                                           \
                cudaError_t e_ = (call);                                                                               \
                if (e_ != cudaSuccess)                                                                                 \
                        FAIL("%s: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_));                      \
        } while (0)

/* ---- values ---- */

static const hvd_dtype_t all_dtypes[] = { HVD_UINT8,   HVD_INT8,     HVD_INT16,   HVD_INT32,   HVD_INT64,
                                          HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL };
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

static bool is_float(hvd_dtype_t dt) {
        return dt == HVD_FLOAT16 || dt == HVD_BFLOAT16 || dt == HVD_FLOAT32 || dt == HVD_FLOAT64;
}
static bool is_signed(hvd_dtype_t dt) {
        return dt != HVD_UINT8 && dt != HVD_BOOL;
}

static void put(hvd_dtype_t dt, void *b, size_t i, double v) {
        switch (dt) {
        case HVD_UINT8: ((uint8_t *) b)[i] = (uint8_t) v; break;
        case HVD_INT8: ((int8_t *) b)[i] = (int8_t) v; break;
        case HVD_INT16: ((int16_t *) b)[i] = (int16_t) v; break;
        case HVD_INT32: ((int32_t *) b)[i] = (int32_t) v; break;
        case HVD_INT64: ((int64_t *) b)[i] = (int64_t) v; break;
        case HVD_FLOAT16: ((uint16_t *) b)[i] = hvd_float_to_half((float) v); break;
        case HVD_BFLOAT16: ((uint16_t *) b)[i] = hvd_float_to_bf16((float) v); break;
        case HVD_FLOAT32: ((float *) b)[i] = (float) v; break;
        case HVD_FLOAT64: ((double *) b)[i] = v; break;
        case HVD_BOOL: ((uint8_t *) b)[i] = v != 0; break;
        default: break;
        }
}

static double get(hvd_dtype_t dt, const void *b, size_t i) {
        switch (dt) {
        case HVD_UINT8:
        case HVD_BOOL: return ((const uint8_t *) b)[i];
        case HVD_INT8: return ((const int8_t *) b)[i];
        case HVD_INT16: return ((const int16_t *) b)[i];
        case HVD_INT32: return ((const int32_t *) b)[i];
        case HVD_INT64: return (double) ((const int64_t *) b)[i];
        case HVD_FLOAT16: return hvd_half_to_float(((const uint16_t *) b)[i]);
        case HVD_BFLOAT16: return hvd_bf16_to_float(((const uint16_t *) b)[i]);
        case HVD_FLOAT32: return ((const float *) b)[i];
        case HVD_FLOAT64: return ((const double *) b)[i];
        default: return NAN;
        }
}

/* v rounded to dt the way the GPU stores it */
static double quant(hvd_dtype_t dt, double v) {
        uint8_t tmp[8];
        put(dt, tmp, 0, v);
        return get(dt, tmp, 0);
}

static double tolerance(hvd_dtype_t dt) {
        switch (dt) {
        case HVD_FLOAT16: return 1e-2;
        case HVD_BFLOAT16: return 2e-2;
        case HVD_FLOAT32: return 1e-5;
        case HVD_FLOAT64: return 1e-12;
        default: return 0;
        }
}

/* ---- one operation under test ---- */

typedef struct kase {
        char name[96];
        hvd_xop_t op;
        hvd_xmember_t m[MAXM];
        int64_t rank_rows[GPU_LAUNCH_MAX_RANKS];
        int64_t splits[GPU_LAUNCH_MAX_RANKS * GPU_LAUNCH_MAX_RANKS];
        void *d_in[MAXM], *d_out[MAXM];
        void *want[MAXM]; /* expected output in dtype; NULL: not checked */
        size_t want_count[MAXM];
        bool approx;
        int expect_rc; /* 0, or the error enqueue must return */
        hvd_gpu_op_t *handle;
} kase_t;

/* Set while a test takes its outputs from the module's mem_alloc (as
 * libhvd does for allgather, alltoall and reducescatter). */
static _Thread_local gpu_rank_t *out_from_module;

static void kase_free(kase_t *k) {
        for (int i = 0; i < MAXM; i++) {
                if (k->d_in[i] && k->d_in[i] != k->d_out[i])
                        cudaFree(k->d_in[i]);
                if (k->d_out[i] && out_from_module)
                        out_from_module->m->mem_free(k->op.device, k->d_out[i]);
                else if (k->d_out[i])
                        cudaFree(k->d_out[i]);
                free(k->want[i]);
        }
        memset(k, 0, sizeof *k);
}

/* Uploads host values to a new device buffer of `bytes` (count elements). */
static int upload(void **d, const void *h, size_t bytes) {
        CUDA(cudaMalloc(d, bytes ? bytes : 1));
        if (bytes)
                CUDA(cudaMemcpy(*d, h, bytes, cudaMemcpyHostToDevice));
        return 0;
}

static int alloc_out(void **d, size_t bytes) {
        if (out_from_module) {
                gpu_rank_t *R = out_from_module;
                if (R->m->mem_alloc(R->g, bytes ? bytes : 1, d, R->err, sizeof R->err) < 0)
                        FAIL("mem_alloc(%zu): %s", bytes ? bytes : 1, R->err);
        } else
                CUDA(cudaMalloc(d, bytes ? bytes : 1));
        CUDA(cudaMemset(*d, 0xa5, bytes ? bytes : 1));
        return 0;
}

static void kase_init(kase_t *k, const gpu_rank_t *R, uint32_t kind, hvd_dtype_t dt, size_t n, const char *what) {
        memset(k, 0, sizeof *k);
        snprintf(k->name, sizeof k->name, "%s.%s.n%zu", what, hvd_dtype_name(dt), n);
        k->op = (hvd_xop_t){ .kind = kind,
                             .dtype = dt,
                             .reduce_op = HVD_REDUCE_SUM,
                             .prescale = 1.0,
                             .postscale = 1.0,
                             .root = 0,
                             .name = k->name,
                             .n = n,
                             .m = k->m,
                             .device = R->rank };
}

/* value of rank r, element i, for reduction rop */
static double red_value(hvd_reduce_op_t rop, hvd_dtype_t dt, int r, size_t i) {
        if (dt == HVD_BOOL)
                return (i + (size_t) r) % 3 == 0;
        double base = (r + 1) * (double) (i % 3 + 1);
        switch (rop) {
        case HVD_REDUCE_AVERAGE: return 2 * base; /* sum = k N (N+1): divisible by N */
        case HVD_REDUCE_MIN:
        case HVD_REDUCE_MAX: return is_signed(dt) && i % 2 ? -base : base;
        case HVD_REDUCE_PRODUCT: return i % 4 == (size_t) r % 4 ? (is_signed(dt) && i % 8 == 0 ? -2 : 2) : 1;
        default: return base;
        }
}

static double red_expect(hvd_reduce_op_t rop, hvd_dtype_t dt, int N, size_t i, double pre, double post, int skip_rank) {
        double acc = 0;
        bool first = true;
        for (int r = 0; r < N; r++) {
                double v = r == skip_rank ? 0 : red_value(rop, dt, r, i);
                if (dt != HVD_BOOL)
                        v = quant(dt, v * pre);
                if (first) {
                        acc = v;
                        first = false;
                        continue;
                }
                if (dt == HVD_BOOL)
                        acc = rop == HVD_REDUCE_MIN || rop == HVD_REDUCE_PRODUCT ? (acc && v) : (acc || v);
                else if (rop == HVD_REDUCE_MIN)
                        acc = v < acc ? v : acc;
                else if (rop == HVD_REDUCE_MAX)
                        acc = v > acc ? v : acc;
                else if (rop == HVD_REDUCE_PRODUCT)
                        acc *= v;
                else
                        acc += v;
        }
        if (dt == HVD_BOOL)
                return acc;
        if (rop == HVD_REDUCE_AVERAGE)
                acc /= N;
        return acc * post;
}

static const size_t ar_counts[MAXM] = { 4099, 17, 1000, 1, 333, 65, 2048, 7 };

/* allreduce of n members; member `joined` (or -1) is NULL on rank joined_rank */
static int prep_allreduce(kase_t *k, const gpu_rank_t *R, hvd_dtype_t dt, hvd_reduce_op_t rop, size_t n, double pre,
                          double post, int joined, int joined_rank) {
        static const char *opn[] = { "average", "sum", "min", "max", "product" };
        char what[48];
        snprintf(what, sizeof what, "allreduce.%s%s", opn[rop], pre != 1.0 || post != 1.0 ? ".scaled" : "");
        kase_init(k, R, HVD__KIND__KIND_ALLREDUCE, dt, n, what);
        k->op.reduce_op = rop;
        k->op.prescale = pre;
        k->op.postscale = post;
        size_t es = hvd_dtype_size(dt);
        int N = R->size;
        k->approx = is_float(dt) && (rop == HVD_REDUCE_AVERAGE || pre != 1.0 || post != 1.0);
        if (dt == HVD_INT16)
                k->expect_rc = -EOPNOTSUPP;
        for (size_t j = 0; j < n; j++) {
                size_t c = ar_counts[j];
                k->m[j].count = c;
                if ((int) j == joined && R->rank == joined_rank)
                        continue; /* joined: zeros in, nothing out */
                uint8_t *h = malloc(c * es);
                for (size_t i = 0; i < c; i++)
                        put(dt, h, i, red_value(rop, dt, R->rank, i));
                int rc = upload(&k->d_in[j], h, c * es);
                free(h);
                if (rc || alloc_out(&k->d_out[j], c * es))
                        return 1;
                k->m[j].in = k->d_in[j];
                k->m[j].out = k->d_out[j];
                k->want[j] = malloc(c * es);
                k->want_count[j] = c;
                for (size_t i = 0; i < c; i++)
                        put(dt, k->want[j], i,
                            red_expect(rop, dt, N, i, pre, post, (int) j == joined ? joined_rank : -1));
        }
        return 0;
}

static double bc_value(hvd_dtype_t dt, int r, size_t i) {
        double v = (double) (((size_t) r * 31 + i) % 100);
        return dt == HVD_BOOL ? (double) ((size_t) v % 2) : v;
}

/* broadcast from the last rank; member 0 in place */
static int prep_broadcast(kase_t *k, const gpu_rank_t *R, hvd_dtype_t dt, size_t n) {
        kase_init(k, R, HVD__KIND__KIND_BROADCAST, dt, n, "broadcast");
        int root = R->size - 1;
        k->op.root = root;
        size_t es = hvd_dtype_size(dt);
        for (size_t j = 0; j < n; j++) {
                size_t c = ar_counts[j];
                uint8_t *h = malloc(c * es);
                for (size_t i = 0; i < c; i++)
                        put(dt, h, i, bc_value(dt, R->rank, i + j));
                int rc = upload(&k->d_in[j], h, c * es);
                free(h);
                if (rc)
                        return 1;
                if (j == 0)
                        k->d_out[j] = k->d_in[j];
                else if (alloc_out(&k->d_out[j], c * es))
                        return 1;
                k->m[j] = (hvd_xmember_t){ .in = k->d_in[j], .out = k->d_out[j], .count = c };
                k->want[j] = malloc(c * es);
                k->want_count[j] = c;
                for (size_t i = 0; i < c; i++)
                        put(dt, k->want[j], i, bc_value(dt, root, i + j));
        }
        return 0;
}

static double ag_value(hvd_dtype_t dt, int r, size_t i, size_t j) {
        double v = (double) (((size_t) r * 7 + i + 3 * j) % 100);
        return dt == HVD_BOOL ? (double) ((size_t) v % 2) : v;
}

/* allgather: rank j contributes j + 1 rows (or 2 each when even) */
static int prep_allgather(kase_t *k, const gpu_rank_t *R, hvd_dtype_t dt, size_t n, bool even) {
        kase_init(k, R, HVD__KIND__KIND_ALLGATHER, dt, n, even ? "allgather.even" : "allgather.uneven");
        size_t es = hvd_dtype_size(dt), re = 3, total = 0;
        int N = R->size;
        for (int j = 0; j < N; j++) {
                k->rank_rows[j] = even ? 2 : j + 1;
                total += (size_t) k->rank_rows[j];
        }
        for (size_t j = 0; j < n; j++) {
                size_t mine = (size_t) k->rank_rows[R->rank] * re;
                uint8_t *h = malloc(mine * es + 1);
                for (size_t i = 0; i < mine; i++)
                        put(dt, h, i, ag_value(dt, R->rank, i, j));
                int rc = upload(&k->d_in[j], h, mine * es);
                free(h);
                if (rc || alloc_out(&k->d_out[j], total * re * es))
                        return 1;
                k->m[j] = (hvd_xmember_t){
                        .in = k->d_in[j], .out = k->d_out[j], .row_elems = re, .rank_rows = k->rank_rows
                };
                k->want[j] = malloc(total * re * es);
                k->want_count[j] = total * re;
                size_t o = 0;
                for (int r = 0; r < N; r++)
                        for (size_t i = 0; i < (size_t) k->rank_rows[r] * re; i++)
                                put(dt, k->want[j], o++, ag_value(dt, r, i, j));
        }
        return 0;
}

/* reducescatter (sum) of `rows` rows of 5 elements */
static int prep_reducescatter(kase_t *k, const gpu_rank_t *R, hvd_dtype_t dt, size_t n, int64_t rows, double pre,
                              double post) {
        kase_init(k, R, HVD__KIND__KIND_REDUCESCATTER, dt, n,
                  rows % R->size ? "reducescatter.uneven" : "reducescatter.even");
        k->op.prescale = pre;
        k->op.postscale = post;
        k->approx = is_float(dt) && (pre != 1.0 || post != 1.0);
        if (dt == HVD_INT16)
                k->expect_rc = -EOPNOTSUPP;
        size_t es = hvd_dtype_size(dt), re = 5, c = (size_t) rows * re;
        int64_t start, nr;
        hvd_reducescatter_rows(rows, R->size, R->rank, &start, &nr);
        for (size_t j = 0; j < n; j++) {
                uint8_t *h = malloc(c * es);
                for (size_t i = 0; i < c; i++)
                        put(dt, h, i, red_value(HVD_REDUCE_SUM, dt, R->rank, i + j));
                int rc = upload(&k->d_in[j], h, c * es);
                free(h);
                if (rc || alloc_out(&k->d_out[j], (size_t) nr * re * es))
                        return 1;
                k->m[j] = (hvd_xmember_t){
                        .in = k->d_in[j], .out = k->d_out[j], .count = c, .row_elems = re, .rows = rows
                };
                k->want[j] = malloc((size_t) nr * re * es + 1);
                k->want_count[j] = (size_t) nr * re;
                for (size_t i = 0; i < (size_t) nr * re; i++)
                        put(dt, k->want[j], i,
                            red_expect(HVD_REDUCE_SUM, dt, R->size, (size_t) start * re + i + j, pre, post, -1));
        }
        return 0;
}

static double a2a_value(hvd_dtype_t dt, int s, int d, size_t i, size_t j) {
        double v = (double) (((size_t) s * 13 + (size_t) d * 5 + i + j) % 100);
        return dt == HVD_BOOL ? (double) ((size_t) v % 2) : v;
}

static int prep_alltoall(kase_t *k, const gpu_rank_t *R, hvd_dtype_t dt, size_t n, bool zeros) {
        kase_init(k, R, HVD__KIND__KIND_ALLTOALL, dt, n, zeros ? "alltoall.zeros" : "alltoall");
        int N = R->size, me = R->rank;
        size_t es = hvd_dtype_size(dt), re = 2;
        for (int s = 0; s < N; s++)
                for (int d = 0; d < N; d++)
                        k->splits[s * N + d] = zeros ? (s + 2 * d) % 3 : (s + d) % 3 + 1;
        for (size_t j = 0; j < n; j++) {
                size_t sent = 0, recvd = 0;
                for (int q = 0; q < N; q++) {
                        sent += (size_t) k->splits[me * N + q] * re;
                        recvd += (size_t) k->splits[q * N + me] * re;
                }
                uint8_t *h = malloc(sent * es + 1);
                size_t o = 0;
                for (int d = 0; d < N; d++)
                        for (size_t i = 0; i < (size_t) k->splits[me * N + d] * re; i++)
                                put(dt, h, o++, a2a_value(dt, me, d, i, j));
                int rc = upload(&k->d_in[j], h, sent * es);
                free(h);
                if (rc || alloc_out(&k->d_out[j], recvd * es))
                        return 1;
                k->m[j] = (hvd_xmember_t){ .in = k->d_in[j], .out = k->d_out[j], .row_elems = re, .splits = k->splits };
                k->want[j] = malloc(recvd * es + 1);
                k->want_count[j] = recvd;
                o = 0;
                for (int s = 0; s < N; s++)
                        for (size_t i = 0; i < (size_t) k->splits[s * N + me] * re; i++)
                                put(dt, k->want[j], o++, a2a_value(dt, s, me, i, j));
        }
        return 0;
}

static int kase_enqueue(gpu_rank_t *R, kase_t *k) {
        int rc = R->m->enqueue(R->g, &k->op, &k->handle, R->err, sizeof R->err);
        if (k->expect_rc) {
                if (rc != k->expect_rc)
                        FAIL("%s: enqueue returned %d, expected %d (%s)", k->name, rc, k->expect_rc, R->err);
                if (!strstr(R->err, k->name))
                        FAIL("%s: the error does not name the tensor: %s", k->name, R->err);
                k->handle = NULL;
                return 0;
        }
        if (rc < 0)
                FAIL("%s: enqueue: %d %s", k->name, rc, R->err);
        return 0;
}

static int kase_finish(gpu_rank_t *R, kase_t *k) {
        if (k->handle) {
                int rc = gpu_rank_wait(R, k->handle, OP_TIMEOUT_SEC);
                k->handle = NULL;
                if (rc < 0)
                        FAIL("%s: %d %s", k->name, rc, R->err);
        }
        if (k->expect_rc)
                return 0;
        hvd_dtype_t dt = k->op.dtype;
        size_t es = hvd_dtype_size(dt);
        for (size_t j = 0; j < k->op.n; j++) {
                if (!k->want[j])
                        continue;
                size_t c = k->want_count[j];
                uint8_t *got = malloc(c * es + 1);
                CUDA(cudaMemcpy(got, k->d_out[j], c * es, cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < c; i++) {
                        double g = get(dt, got, i), w = get(dt, k->want[j], i);
                        bool ok = k->approx ? fabs(g - w) <= tolerance(dt) * (fabs(w) > 1 ? fabs(w) : 1) : g == w;
                        if (!ok) {
                                free(got);
                                FAIL("%s: member %zu element %zu: got %.9g, want %.9g", k->name, j, i, g, w);
                        }
                }
                free(got);
        }
        return 0;
}

static int kase_run(gpu_rank_t *R, kase_t *k) {
        int rc = kase_enqueue(R, k);
        if (rc == 0)
                rc = kase_finish(R, k);
        kase_free(k);
        return rc;
}

/* ---- tests ---- */

static int t_collectives(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
        int rc = gpu_rank_open(R, R->size, UINT64_C(64) << 20);
        if (rc < 0)
                FAIL("open: %d %s", rc, R->err);
        kase_t *k = calloc(1, sizeof *k);
        static const hvd_reduce_op_t rops[] = { HVD_REDUCE_SUM, HVD_REDUCE_AVERAGE, HVD_REDUCE_MIN, HVD_REDUCE_MAX,
                                                HVD_REDUCE_PRODUCT };
        int checks = 0;
        for (size_t d = 0; d < N_DTYPES; d++) {
                hvd_dtype_t dt = all_dtypes[d];
                for (size_t o = 0; o < 5; o++)
                        for (size_t n = 1; n <= 3; n += 2) {
                                if (prep_allreduce(k, R, dt, rops[o], n, 1.0, 1.0, -1, -1) || kase_run(R, k))
                                        return 1;
                                checks++;
                        }
                if (dt == HVD_FLOAT32 || dt == HVD_INT32 || dt == HVD_FLOAT16) {
                        if (prep_allreduce(k, R, dt, HVD_REDUCE_SUM, 3, 3.0, 0.5, -1, -1) || kase_run(R, k) ||
                            prep_allreduce(k, R, dt, HVD_REDUCE_AVERAGE, 1, 3.0, 0.5, -1, -1) || kase_run(R, k))
                                return 1;
                        checks += 2;
                }
                for (size_t n = 1; n <= 3; n += 2) {
                        if (prep_broadcast(k, R, dt, n) || kase_run(R, k) || prep_allgather(k, R, dt, n, true) ||
                            kase_run(R, k) || prep_allgather(k, R, dt, n, false) || kase_run(R, k) ||
                            prep_reducescatter(k, R, dt, n, 2 * R->size, 1.0, 1.0) || kase_run(R, k) ||
                            prep_reducescatter(k, R, dt, n, 2 * R->size + 1, 1.0, 1.0) || kase_run(R, k) ||
                            prep_alltoall(k, R, dt, n, false) || kase_run(R, k) || prep_alltoall(k, R, dt, n, true) ||
                            kase_run(R, k))
                                return 1;
                        checks += 7;
                }
                if (dt == HVD_FLOAT32 && (prep_reducescatter(k, R, dt, 1, 2 * R->size, 2.0, 0.25) || kase_run(R, k)))
                        return 1;
        }
        free(k);
        if (R->rank == 0)
                printf("collectives: %d checks on %d rank(s), every dtype, exact\n", checks, R->size);
        return 0;
}

/* Outputs in memory from the module's mem_alloc, as libhvd allocates them
 * for allgather, alltoall and reducescatter: exact results, single, fused
 * and in one group; mem_free from the rank's thread leaves its current
 * device alone; a zero-byte request is refused. */
static int t_alloc(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
        int rc = gpu_rank_open(R, R->size, UINT64_C(64) << 20);
        if (rc < 0)
                FAIL("open: %d %s", rc, R->err);
        void *p = NULL;
        if (R->m->mem_alloc(R->g, 0, &p, R->err, sizeof R->err) != -EINVAL || p)
                FAIL("mem_alloc of 0 bytes did not fail with -EINVAL");
        if (R->m->mem_alloc(R->g, 1000, &p, R->err, sizeof R->err) < 0 || !p)
                FAIL("mem_alloc(1000): %s", R->err);
        CUDA(cudaMemset(p, 1, 1000));
        int before = -1, after = -2;
        CUDA(cudaGetDevice(&before));
        R->m->mem_free(R->rank, p);
        R->m->mem_free(R->rank, NULL);
        CUDA(cudaGetDevice(&after));
        if (before != after)
                FAIL("mem_free changed the current device from %d to %d", before, after);

        out_from_module = R;
        static const hvd_dtype_t dts[] = { HVD_FLOAT32, HVD_INT64, HVD_BFLOAT16, HVD_UINT8, HVD_BOOL, HVD_INT16 };
        kase_t *k = calloc(4, sizeof *k);
        int checks = 0;
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
                hvd_dtype_t dt = dts[d];
                for (size_t n = 1; n <= 3; n += 2) {
                        if (prep_allgather(k, R, dt, n, true) || kase_run(R, k) || prep_allgather(k, R, dt, n, false) ||
                            kase_run(R, k) || prep_alltoall(k, R, dt, n, false) || kase_run(R, k) ||
                            prep_alltoall(k, R, dt, n, true) || kase_run(R, k))
                                return 1;
                        checks += 4;
                        if (dt == HVD_INT16)
                                continue; /* no NCCL reduction */
                        if (prep_reducescatter(k, R, dt, n, 2 * R->size, 1.0, 1.0) || kase_run(R, k) ||
                            prep_reducescatter(k, R, dt, n, 2 * R->size + 1, 1.0, 1.0) || kase_run(R, k))
                                return 1;
                        checks += 2;
                }
        }
        /* one group: allgather, reducescatter (scaled), alltoall */
        if (R->m->group_start(R->g, R->err, sizeof R->err) < 0)
                FAIL("group_start: %s", R->err);
        if (prep_allgather(&k[0], R, HVD_FLOAT32, 3, false) || kase_enqueue(R, &k[0]) ||
            prep_reducescatter(&k[1], R, HVD_FLOAT32, 2, 3 * R->size + 1, 2.0, 0.5) || kase_enqueue(R, &k[1]) ||
            prep_alltoall(&k[2], R, HVD_INT32, 2, true) || kase_enqueue(R, &k[2]))
                return 1;
        if (R->m->group_end(R->g, R->err, sizeof R->err) < 0)
                FAIL("group_end: %s", R->err);
        for (int i = 0; i < 3; i++) {
                if (kase_finish(R, &k[i]))
                        return 1;
                kase_free(&k[i]);
        }
        checks += 3;
        out_from_module = NULL;
        free(k);
        if (R->rank == 0)
                printf("alloc: %d checks of outputs from mem_alloc on %d rank(s), exact\n", checks, R->size);
        return 0;
}

static int t_fusion(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
        /* the smallest fusion buffer (4 MiB): big tensors take several windows */
        int rc = gpu_rank_open(R, R->size, 0);
        if (rc < 0)
                FAIL("open: %d %s", rc, R->err);
        int N = R->size, me = R->rank;

        /* 300 small float32 tensors in one fused allreduce; tensor 5 joined on rank 0 */
        enum { T = 300 };
        hvd_xmember_t *m = calloc(T, sizeof *m);
        void **din = calloc(T, sizeof *din), **dout = calloc(T, sizeof *dout);
        size_t *cnt = calloc(T, sizeof *cnt);
        if (!m || !din || !dout || !cnt)
                FAIL("out of memory");
        for (int i = 0; i < T; i++) {
                cnt[i] = (size_t) (i * 37) % 2000 + 1;
                float *h = malloc(cnt[i] * 4);
                for (size_t e = 0; e < cnt[i]; e++)
                        h[e] = (float) ((me + 1) * (int) ((e + (size_t) i) % 7));
                if (upload(&din[i], h, cnt[i] * 4) || alloc_out(&dout[i], cnt[i] * 4))
                        return 1;
                free(h);
                bool joined = i == 5 && me == 0;
                m[i] = (hvd_xmember_t){ .in = joined ? NULL : din[i], .out = joined ? NULL : dout[i], .count = cnt[i] };
        }
        hvd_xop_t op = { .kind = HVD__KIND__KIND_ALLREDUCE,
                         .dtype = HVD_FLOAT32,
                         .reduce_op = HVD_REDUCE_SUM,
                         .prescale = 1.0,
                         .postscale = 1.0,
                         .name = "fusion.300",
                         .n = T,
                         .m = m,
                         .device = me };
        hvd_gpu_op_t *h;
        if ((rc = R->m->enqueue(R->g, &op, &h, R->err, sizeof R->err)) < 0 ||
            (rc = gpu_rank_wait(R, h, OP_TIMEOUT_SEC)) < 0)
                FAIL("fusion.300: %d %s", rc, R->err);
        for (int i = 0; i < T; i++) {
                if (!m[i].out) {
                        cudaFree(din[i]);
                        cudaFree(dout[i]);
                        continue;
                }
                float *g = malloc(cnt[i] * 4);
                CUDA(cudaMemcpy(g, dout[i], cnt[i] * 4, cudaMemcpyDeviceToHost));
                for (size_t e = 0; e < cnt[i]; e++) {
                        float w = 0;
                        for (int r = 0; r < N; r++)
                                w += i == 5 && r == 0 ? 0 : (float) ((r + 1) * (int) ((e + (size_t) i) % 7));
                        if (g[e] != w)
                                FAIL("fusion.300: tensor %d [%zu]: %g != %g", i, e, g[e], w);
                }
                free(g);
                cudaFree(din[i]);
                cudaFree(dout[i]);
        }
        free(m);
        free(din);
        free(dout);
        free(cnt);

        /* several windows: one 12 MB tensor (direct) and a fused op of 8 MB + 4 MB + small */
        kase_t *k = calloc(6, sizeof *k);
        static const size_t big[] = { 3u << 20, 2u << 20, 1u << 20, 1000 };
        for (int pass = 0; pass < 2; pass++) {
                size_t n = pass == 0 ? 1 : 3;
                kase_init(&k[0], R, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, n,
                          pass ? "windows.fused" : "windows.direct");
                for (size_t j = 0; j < n; j++) {
                        size_t c = big[j + (size_t) pass];
                        float *hh = malloc(c * 4);
                        for (size_t e = 0; e < c; e++)
                                hh[e] = (float) ((me + 1) * (int) (e % 11));
                        if (upload(&k[0].d_in[j], hh, c * 4) || alloc_out(&k[0].d_out[j], c * 4))
                                return 1;
                        for (size_t e = 0; e < c; e++)
                                hh[e] = (float) (N * (N + 1) / 2 * (int) (e % 11));
                        k[0].want[j] = hh;
                        k[0].want_count[j] = c;
                        k[0].m[j] = (hvd_xmember_t){ .in = k[0].d_in[j], .out = k[0].d_out[j], .count = c };
                }
                if (kase_run(R, &k[0]))
                        return 1;
        }

        /* a group: fused allreduce (float16), broadcast (int32), allgather
         * (bfloat16), alltoall (send/recv: its own NCCL group), a big
         * allreduce (several steps: alone), allreduce float64 */
        if (R->m->group_start(R->g, R->err, sizeof R->err) < 0)
                FAIL("group_start: %s", R->err);
        if (prep_allreduce(&k[0], R, HVD_FLOAT16, HVD_REDUCE_SUM, 8, 1.0, 1.0, 2, 0) || kase_enqueue(R, &k[0]) ||
            prep_broadcast(&k[1], R, HVD_INT32, 1) || kase_enqueue(R, &k[1]) ||
            prep_allgather(&k[2], R, HVD_BFLOAT16, 3, false) || kase_enqueue(R, &k[2]) ||
            prep_alltoall(&k[3], R, HVD_FLOAT32, 2, false) || kase_enqueue(R, &k[3]))
                return 1;
        kase_init(&k[4], R, HVD__KIND__KIND_ALLREDUCE, HVD_FLOAT32, 1, "group.big");
        {
                size_t c = 3u << 20;
                float *hh = malloc(c * 4);
                for (size_t e = 0; e < c; e++)
                        hh[e] = (float) (me + 1);
                if (upload(&k[4].d_in[0], hh, c * 4) || alloc_out(&k[4].d_out[0], c * 4))
                        return 1;
                for (size_t e = 0; e < c; e++)
                        hh[e] = (float) (N * (N + 1) / 2);
                k[4].want[0] = hh;
                k[4].want_count[0] = c;
                k[4].m[0] = (hvd_xmember_t){ .in = k[4].d_in[0], .out = k[4].d_out[0], .count = c };
        }
        if (kase_enqueue(R, &k[4]) || prep_allreduce(&k[5], R, HVD_FLOAT64, HVD_REDUCE_MAX, 2, 1.0, 1.0, -1, -1) ||
            kase_enqueue(R, &k[5]))
                return 1;
        if (R->m->group_end(R->g, R->err, sizeof R->err) < 0)
                FAIL("group_end: %s", R->err);
        for (int i = 0; i < 6; i++) {
                if (kase_finish(R, &k[i]))
                        return 1;
                kase_free(&k[i]);
        }
        /* int16 reductions fail cleanly, on every rank, before touching the GPU */
        if (prep_allreduce(&k[0], R, HVD_INT16, HVD_REDUCE_SUM, 3, 1.0, 1.0, -1, -1) || kase_run(R, &k[0]))
                return 1;
        free(k);
        if (R->rank == 0)
                printf("fusion: 300 tensors in one op, joined member, windows, a group of 6 on %d rank(s)\n", N);
        return 0;
}

static void CUDART_CB sleeper(void *ud) {
        usleep((useconds_t) (uintptr_t) ud);
}

static int t_stream(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
        int rc = gpu_rank_open(R, R->size, UINT64_C(64) << 20);
        if (rc < 0)
                FAIL("open: %d %s", rc, R->err);
        int N = R->size;
        size_t c = 1 << 20;
        float *pinned, *d_in, *d_out;
        CUDA(cudaMallocHost((void **) &pinned, c * 4));
        CUDA(cudaMalloc((void **) &d_in, c * 4));
        CUDA(cudaMalloc((void **) &d_out, c * 4));
        cudaStream_t user;
        CUDA(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
        for (int pass = 0; pass < 2; pass++) {
                /* the input becomes ready on the producer stream 300 ms from now */
                cudaStream_t producer = pass == 0 ? user : cudaStreamLegacy;
                for (size_t e = 0; e < c; e++)
                        pinned[e] = (float) ((R->rank + 1) * (int) (e % 5 + 1));
                CUDA(cudaMemset(d_in, 0, c * 4));
                CUDA(cudaDeviceSynchronize());
                CUDA(cudaLaunchHostFunc(producer, sleeper, (void *) (uintptr_t) 300000));
                CUDA(cudaMemcpyAsync(d_in, pinned, c * 4, cudaMemcpyHostToDevice, producer));
                hvd_xmember_t m = { .in = d_in, .out = d_out, .count = c, .stream = pass == 0 ? (void *) user : NULL };
                hvd_xop_t op = { .kind = HVD__KIND__KIND_ALLREDUCE,
                                 .dtype = HVD_FLOAT32,
                                 .reduce_op = HVD_REDUCE_SUM,
                                 .prescale = 1.0,
                                 .postscale = 1.0,
                                 .name = pass ? "stream.legacy" : "stream.user",
                                 .n = 1,
                                 .m = &m,
                                 .device = R->rank };
                hvd_gpu_op_t *h;
                double t0 = gpu_launch_now();
                if ((rc = R->m->enqueue(R->g, &op, &h, R->err, sizeof R->err)) < 0)
                        FAIL("%s: enqueue: %s", op.name, R->err);
                double dt = gpu_launch_now() - t0;
                if (dt > 0.15)
                        FAIL("%s: enqueue blocked the host for %.0f ms while the producer stream was busy", op.name,
                             dt * 1e3);
                if ((rc = gpu_rank_wait(R, h, OP_TIMEOUT_SEC)) < 0)
                        FAIL("%s: %s", op.name, R->err);
                /* the output is ready for the user's stream too */
                CUDA(cudaMemcpyAsync(pinned, d_out, c * 4, cudaMemcpyDeviceToHost, user));
                CUDA(cudaStreamSynchronize(user));
                for (size_t e = 0; e < c; e++) {
                        float w = (float) (N * (N + 1) / 2 * (int) (e % 5 + 1));
                        if (pinned[e] != w)
                                FAIL("%s: [%zu] %g != %g: the collective did not wait for the producer stream", op.name,
                                     e, pinned[e], w);
                }
        }
        cudaStreamDestroy(user);
        cudaFreeHost(pinned);
        cudaFree(d_in);
        cudaFree(d_out);
        if (R->rank == 0)
                printf("stream: ordered after a user stream and the legacy default stream, host not blocked\n");
        return 0;
}

/* A job of two ranks where only this one arrives: open must fail by the
 * deadline (HVD_NCCL_TIMEOUT) with a message, not hang. */
static int t_abort_init(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
        setenv("HVD_NCCL_TIMEOUT", "4", 1);
        double t0 = gpu_launch_now();
        int rc = gpu_rank_open(R, 2, 0);
        double dt = gpu_launch_now() - t0;
        if (rc >= 0)
                FAIL("open of a 2-rank job with one rank succeeded");
        if (!strstr(R->err, "not complete"))
                FAIL("unexpected error %d: %s", rc, R->err);
        if (dt > 30)
                FAIL("open took %.1f s to give up (deadline 4 s)", dt);
        printf("abort-init: open failed after %.1f s: %s\n", dt, R->err);
        return 0;
}

/* Rank 1 enters a big allreduce; rank 0 never does. Rank 1 aborts after
 * 2 s: its op must complete with an error soon after, and close must not
 * hang. */
static int t_abort(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
        setenv("HVD_NCCL_TIMEOUT", "10", 1);
        int rc = gpu_rank_open(R, R->size, UINT64_C(64) << 20);
        if (rc < 0)
                FAIL("open: %d %s", rc, R->err);
        size_t c = 16u << 20;
        void *d;
        CUDA(cudaMalloc(&d, c * 4));
        CUDA(cudaMemset(d, 0, c * 4));
        hvd_xmember_t m = { .in = d, .out = d, .count = c };
        hvd_xop_t op = { .kind = HVD__KIND__KIND_ALLREDUCE,
                         .dtype = HVD_FLOAT32,
                         .reduce_op = HVD_REDUCE_SUM,
                         .prescale = 1.0,
                         .postscale = 1.0,
                         .name = "abort.warmup",
                         .n = 1,
                         .m = &m,
                         .device = R->rank };
        hvd_gpu_op_t *h;
        /* both ranks once, so the connections for this size exist */
        if ((rc = R->m->enqueue(R->g, &op, &h, R->err, sizeof R->err)) < 0 ||
            (rc = gpu_rank_wait(R, h, OP_TIMEOUT_SEC)) < 0)
                FAIL("warm-up: %s", R->err);
        if (R->rank == 0) {
                sleep(6);
                R->m->abort(R->g);
                cudaFree(d);
                return 0;
        }
        op.name = "abort.me";
        if ((rc = R->m->enqueue(R->g, &op, &h, R->err, sizeof R->err)) < 0)
                FAIL("enqueue: %s", R->err);
        double t0 = gpu_launch_now();
        while (gpu_launch_now() - t0 < 2.0) {
                rc = R->m->poll(R->g, h, R->err, sizeof R->err);
                if (rc != 0)
                        FAIL("the allreduce finished (%d: %s) although rank 0 never joined it", rc, R->err);
                usleep(1000);
        }
        double ta = gpu_launch_now();
        R->m->abort(R->g);
        for (;;) {
                rc = R->m->poll(R->g, h, R->err, sizeof R->err);
                if (rc < 0)
                        break;
                if (rc == 1)
                        FAIL("the aborted allreduce reported success");
                if (gpu_launch_now() - ta > 20)
                        FAIL("still pending 20 s after abort");
                usleep(1000);
        }
        double tc = gpu_launch_now();
        R->m->close(&R->g);
        double te = gpu_launch_now();
        if (te - tc > 20)
                FAIL("close took %.1f s after abort", te - tc);
        printf("abort: op failed %.2f s after abort (%d: %s); close took %.2f s\n", tc - ta, rc, R->err, te - tc);
        cudaFree(d);
        return 0;
}

/* Process sets: the first op of a set splits the job's communicator
 * (every rank takes part; non-members get an op that is complete at once),
 * a set whose ranks change under the same id is split again. */
static int pset_allreduce(gpu_rank_t *R, uint32_t id, const uint32_t *ranks, size_t n, const char *name) {
        int me = -1, rc;
        for (size_t i = 0; i < n; i++)
                if ((int) ranks[i] == R->rank)
                        me = (int) i;
        size_t c = 1000;
        float *h = malloc(c * 4), *d = NULL;
        for (size_t e = 0; e < c; e++)
                h[e] = (float) ((R->rank + 1) * (int) (e % 3 + 1));
        if (me >= 0 && upload((void **) &d, h, c * 4))
                return 1;
        hvd_xmember_t m = { .in = d, .out = d, .count = c };
        hvd_xop_t op = { .kind = HVD__KIND__KIND_ALLREDUCE,
                         .dtype = HVD_FLOAT32,
                         .reduce_op = HVD_REDUCE_SUM,
                         .prescale = 1.0,
                         .postscale = 1.0,
                         .name = name,
                         .n = 1,
                         .m = &m,
                         .device = R->rank,
                         .process_set = id,
                         .set_ranks = ranks,
                         .n_set = n };
        hvd_gpu_op_t *hd;
        if ((rc = R->m->enqueue(R->g, &op, &hd, R->err, sizeof R->err)) < 0 ||
            (rc = gpu_rank_wait(R, hd, OP_TIMEOUT_SEC)) < 0)
                FAIL("%s: %d %s", name, rc, R->err);
        if (me >= 0) {
                CUDA(cudaMemcpy(h, d, c * 4, cudaMemcpyDeviceToHost));
                int sum = 0;
                for (size_t i = 0; i < n; i++)
                        sum += (int) ranks[i] + 1;
                for (size_t e = 0; e < c; e++)
                        if (h[e] != (float) (sum * (int) (e % 3 + 1)))
                                FAIL("%s: [%zu] %g != %d", name, e, h[e], sum * (int) (e % 3 + 1));
                cudaFree(d);
        }
        free(h);
        return 0;
}

static int t_psets(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
        int rc = gpu_rank_open(R, R->size, UINT64_C(64) << 20);
        if (rc < 0)
                FAIL("open: %d %s", rc, R->err);
        int N = R->size;
        uint32_t a[2] = { 0, (uint32_t) N - 1 }, b[GPU_LAUNCH_MAX_RANKS];
        for (int i = 1; i < N; i++)
                b[i - 1] = (uint32_t) i;
        if (pset_allreduce(R, 1, a, 2, "pset.first") || pset_allreduce(R, 1, a, 2, "pset.again") ||
            pset_allreduce(R, 1, b, (size_t) N - 1, "pset.changed") || pset_allreduce(R, 2, a, 2, "pset.second"))
                return 1;
        /* the job's own communicator still works */
        kase_t *k = calloc(1, sizeof *k);
        if (prep_allreduce(k, R, HVD_FLOAT32, HVD_REDUCE_SUM, 3, 1.0, 1.0, -1, -1) || kase_run(R, k))
                return 1;
        free(k);
        if (R->rank == 0)
                printf("psets: split on first use, re-split when the ranks change, %d ranks\n", N);
        return 0;
}

/* An asynchronous NCCL failure (injected by the mock): the pending op
 * fails with NCCL's reason, the communicator is aborted, later calls fail
 * at once with the same message. */
static int t_async_error(gpu_rank_t *R, void *ud) {
        (void) ud;
        me_rank = R->rank;
#ifndef GPU_LAUNCH_MOCK
        printf("SKIP: async-error injects a NCCL failure and runs only over the mock (tests/gpu/check_gpu_mock)\n");
        return GPU_LAUNCH_SKIP;
#endif
        setenv("MOCK_NCCL_FAIL_AT", "2", 1); /* 0: open's agreement, 1: the first op */
        int rc = gpu_rank_open(R, R->size, UINT64_C(64) << 20);
        if (rc < 0)
                FAIL("open: %d %s", rc, R->err);
        kase_t *k = calloc(1, sizeof *k);
        if (prep_allreduce(k, R, HVD_FLOAT32, HVD_REDUCE_SUM, 1, 1.0, 1.0, -1, -1) || kase_run(R, k))
                return 1;
        if (prep_allreduce(k, R, HVD_FLOAT32, HVD_REDUCE_SUM, 1, 1.0, 1.0, -1, -1))
                return 1;
        /* the error may show at enqueue already, or while polling */
        rc = R->m->enqueue(R->g, &k->op, &k->handle, R->err, sizeof R->err);
        if (rc >= 0)
                rc = gpu_rank_wait(R, k->handle, 30);
        k->handle = NULL;
        if (rc >= 0 || !strstr(R->err, "NCCL error"))
                FAIL("the failing collective returned %d: %s", rc, R->err);
        char first[1024];
        snprintf(first, sizeof first, "%s", R->err);
        kase_free(k);
        if (prep_allreduce(k, R, HVD_FLOAT32, HVD_REDUCE_SUM, 1, 1.0, 1.0, -1, -1))
                return 1;
        hvd_gpu_op_t *h;
        rc = R->m->enqueue(R->g, &k->op, &h, R->err, sizeof R->err);
        if (rc >= 0 || strcmp(R->err, first) != 0)
                FAIL("enqueue after the failure returned %d: %s", rc, R->err);
        kase_free(k);
        free(k); /* MOCK_NCCL_FAIL_AT stays: a peer's stream may not have reached the collective yet */
        if (R->rank == 0)
                printf("async-error: the op failed with '%s'; later calls too\n", first);
        return 0;
}

/* ---- the no-device contract (tests/test-gpu-module.sh) ---- */

static int probe_contract(void) {
        void *dl;
        const hvd_gpu_module_t *m;
        char err[1024] = "";
        const char *path = gpu_launch_module_path();
        if (gpu_launch_load(path, &dl, &m, err, sizeof err) < 0) {
                printf("load: %s\n", err);
                return 1;
        }
        printf("module: %s (name %s, ABI %u)\n", path, m->name, m->abi);
        int n = m->probe(err, sizeof err);
        printf("probe: %d %s\n", n, n < 0 ? err : "device(s)");
        uint8_t id[HVD_NCCL_ID_BYTES] = { 0 };
        if (n > 0) {
                /* a GPU machine: make check-gpu covers the rest. Not without
                 * one: ncclGetUniqueId starts NCCL's bootstrap root thread,
                 * which no communicator ever ends here and which crashed the
                 * harness now and then (SIGSEGV in bootstrapRoot) */
                char err2[1024] = "";
                int u = m->unique_id(id, err2, sizeof err2);
                printf("unique_id: %d %s\n", u, u < 0 ? err2 : "ok");
                return 0;
        }
        int bad = 0;
        if (n != HVD_ENODEVICE || strncmp(err, "no CUDA device: ", 16) != 0) {
                printf("FAIL: probe must return HVD_ENODEVICE with 'no CUDA device: <reason>'\n");
                bad = 1;
        }
        /* open without a device fails the same way and leaves nothing behind */
        int rank_cross[1] = { 0 }, rank_local[1] = { 0 };
        hvd_topology_t t = { .rank = 0,
                             .size = 1,
                             .local_rank = 0,
                             .local_size = 1,
                             .cross_size = 1,
                             .rank_cross = rank_cross,
                             .rank_local = rank_local,
                             .listen_fd = -1 };
        hvd_gpu_t *g = NULL;
        char err3[1024] = "";
        int o = m->open(&t, id, 0, 1 << 20, &g, err3, sizeof err3);
        printf("open: %d %s\n", o, o < 0 ? err3 : "ok");
        if (o >= 0 || g || strncmp(err3, "no CUDA device: ", 16) != 0) {
                printf("FAIL: open must fail with 'no CUDA device: ...' and return no state\n");
                bad = 1;
        }
        m->close(&g); /* NULL-safe */
        dlclose(dl);
        return bad;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc == 2 && strcmp(argv[1], "probe") == 0)
                return probe_contract();
        if (argc != 3) {
                fprintf(stderr,
                        "usage: %s probe | %s collectives|fusion|stream|abort-init|abort|psets|async-error|alloc "
                        "NP|all\n",
                        argv[0], argv[0]);
                return 2;
        }
        static const struct {
                const char *name;
                gpu_rank_fn fn;
                int min_np;
                int timeout;
        } tests[] = {
                { "collectives", t_collectives, 1, 900 },
                { "fusion", t_fusion, 1, 600 },
                { "stream", t_stream, 1, 300 },
                { "abort-init", t_abort_init, 1, 120 },
                { "abort", t_abort, 2, 120 },
                { "psets", t_psets, 2, 300 },
                { "async-error", t_async_error, 1, 120 },
                { "alloc", t_alloc, 1, 600 },
        };
        size_t ti = 0;
        while (ti < sizeof tests / sizeof tests[0] && strcmp(tests[ti].name, argv[1]) != 0)
                ti++;
        if (ti == sizeof tests / sizeof tests[0]) {
                fprintf(stderr, "unknown test '%s'\n", argv[1]);
                return 2;
        }
        char msg[1024];
        int gpus = gpu_launch_probe(msg, sizeof msg);
        if (gpus <= 0) {
                printf("SKIP: %s: %s\n", argv[1], msg);
                return GPU_LAUNCH_SKIP;
        }
        bool all = strcmp(argv[2], "all") == 0;
        int np = all ? (gpus < 8 ? gpus : 8) : atoi(argv[2]);
        if (all && np < 2) {
                printf("SKIP: %s on every GPU needs at least 2 GPUs (NCCL allows one rank per GPU); this host has %d\n",
                       argv[1], gpus);
                return GPU_LAUNCH_SKIP;
        }
        if (strcmp(argv[1], "abort-init") == 0)
                np = 1; /* the second rank never comes */
        if (np < tests[ti].min_np || np > gpus || np > GPU_LAUNCH_MAX_RANKS) {
                printf("SKIP: %s with %s ranks needs %d GPU(s) (NCCL allows one rank per GPU); this host has %d\n",
                       argv[1], argv[2], np < tests[ti].min_np ? tests[ti].min_np : np, gpus);
                return GPU_LAUNCH_SKIP;
        }
        printf("%s: %d rank(s) on %d GPU(s)\n", argv[1], np, gpus);
        return gpu_launch_run(np, tests[ti].fn, NULL, tests[ti].timeout);
}
