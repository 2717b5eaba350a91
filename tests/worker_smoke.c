/* worker_smoke.c — every collective once with exact checks, for any
 * topology: one node or several (tests/test-multinode.sh, test-netns.sh).
 * Usage: worker_smoke [ELEMENTS] (large enough to cross the slot size to
 * exercise chunking). Exits non-zero with a message on any difference.
 * worker_smoke stall: rank 0 submits 'stuck.tensor', the others never do;
 * prints the error rank 0 and the others get (the stall inspector).
 * worker_smoke late MS: the other ranks submit MS ms after rank 0, three
 * times: twice rank 0 waits at once (a blocking allreduce of a new name,
 * then of the same again), once it submits and sleeps before it waits; it
 * prints each wait's wall time and the CPU time its process (every
 * thread) took meanwhile. Every sum is checked. */
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "hvd.h"
#define CHECK(c, ...)                                                                                                  \
        do {                                                                                                           \
                if (!(c)) {                                                                                            \
                        fprintf(stderr, "rank %d: ", rank);                                                            \
                        fprintf(stderr, __VA_ARGS__);                                                                  \
                        fprintf(stderr, "\n");                                                                         \
                        exit(1);                                                                                       \
                }                                                                                                      \
        } while (0)
static int stall(int rank) {
        float x = 1, y;
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[1] = { 1 };
        q.name = rank == 0 ? "stuck.tensor" : "other.tensor";
        q.input = &x;
        q.output = &y;
        q.ndim = 1;
        q.shape = shape;
        hvd_handle_t *h = NULL;
        if (rank == 0 && hvd_allreduce_async(&q, &h) < 0)
                return 1;
        if (rank != 0) {
                /* everyone but rank 0 waits in a barrier, which rank 0 never
                 * reaches. A second later: the barrier stalls too, and the
                 * inspector names the oldest stall, which must be rank 0's
                 * tensor even when rank 0 starts late on a loaded machine */
                usleep(1000 * 1000);
                int r = hvd_barrier();
                printf("rank %d: barrier: %s: %s\n", rank, hvd_strerror(r), hvd_last_error());
                return r < 0 ? 3 : 0;
        }
        int r = hvd_handle_wait(h);
        printf("rank %d: stuck.tensor: %s: %s\n", rank, hvd_strerror(r), hvd_handle_error(h));
        hvd_handle_release(&h);
        return r < 0 ? 3 : 0;
}

static double cpu_ms(void) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return (double) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
               (double) (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static double wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static int late(int rank, int size, int late_ms) {
        float x = (float) (rank + 1), y = 0, want = (float) size * (float) (size + 1) / 2;
        for (int i = 0; i < 3; i++) { /* the names known everywhere */
                CHECK(hvd_allreduce("late.warm", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM) == 0, "warm %s",
                      hvd_last_error());
                CHECK(y == want, "warm sum %g, want %g", y, want);
        }
        /* waiting at once: a new name (a first step's, which a host of
         * several ranks holds for its late ones), then the same again */
        for (int it = 0; it < 2; it++) {
                if (rank != 0)
                        usleep((useconds_t) late_ms * 1000);
                double c0 = cpu_ms(), w0 = wall_ms();
                CHECK(hvd_allreduce("late.blocking", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM) == 0, "blocking %s",
                      hvd_last_error());
                double c1 = cpu_ms(), w1 = wall_ms();
                CHECK(y == want, "blocking sum %g, want %g", y, want);
                if (rank == 0)
                        printf("late blocking%d wall_ms=%.1f cpu_ms=%.1f\n", it, w1 - w0, c1 - c0);
        }
        /* submitted, then computing (here: asleep) while the others come */
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[1] = { 1 };
        q.name = "late.async";
        q.reduce_op = HVD_REDUCE_SUM;
        q.input = &x;
        q.output = &y;
        q.ndim = 1;
        q.shape = shape;
        hvd_handle_t *h = NULL;
        y = 0;
        if (rank != 0)
                usleep((useconds_t) late_ms * 1000);
        double c0 = cpu_ms(), w0 = wall_ms();
        CHECK(hvd_allreduce_async(&q, &h) == 0, "async submit %s", hvd_last_error());
        if (rank == 0)
                usleep((useconds_t) late_ms * 1000 + 200000);
        double c1 = cpu_ms(), w1 = wall_ms();
        CHECK(hvd_handle_wait(h) == 0, "async %s", hvd_handle_error(h));
        hvd_handle_release(&h);
        CHECK(y == want, "async sum %g, want %g", y, want);
        if (rank == 0)
                printf("late async wall_ms=%.1f cpu_ms=%.1f\n", w1 - w0, c1 - c0);
        return 0;
}

int main(int argc, char **argv) {
        size_t big = argc > 1 ? strtoull(argv[1], 0, 0) : 1000;
        if (hvd_init() < 0) {
                fprintf(stderr, "init %s\n", hvd_last_error());
                return 1;
        }
        int rank = hvd_rank(), size = hvd_size();
        if (argc > 1 && strcmp(argv[1], "stall") == 0)
                return stall(rank);
        if (argc > 2 && strcmp(argv[1], "late") == 0)
                return late(rank, size, atoi(argv[2]));
        for (int it = 0; it < 3; it++) {
                /* allgather: rank r contributes r+1 rows of 3 */
                {
                        int64_t shape[2] = { rank + 1, 3 };
                        int32_t *in = malloc(sizeof(int32_t) * (rank + 1) * 3);
                        for (int i = 0; i < (rank + 1) * 3; i++)
                                in[i] = rank * 1000 + i;
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = "ag";
                        q.input = in;
                        q.dtype = HVD_INT32;
                        q.ndim = 2;
                        q.shape = shape;
                        hvd_handle_t *h;
                        CHECK(hvd_allgather_async(&q, &h) == 0, "ag submit %s", hvd_last_error());
                        CHECK(hvd_handle_wait(h) == 0, "ag %s", hvd_handle_error(h));
                        const void *out;
                        size_t bytes;
                        int nd;
                        const int64_t *osh;
                        CHECK(hvd_handle_output(h, 0, &out, &bytes, &nd, &osh) == 0, "out");
                        const int32_t *o = out;
                        size_t k = 0;
                        for (int r = 0; r < size; r++)
                                for (int i = 0; i < (r + 1) * 3; i++, k++)
                                        CHECK(o[k] == r * 1000 + i, "ag value r%d i%d got %d", r, i, o[k]);
                        CHECK(osh[0] == size * (size + 1) / 2, "ag shape");
                        hvd_handle_release(&h);
                        free(in);
                }
                /* broadcast from every root, big */
                for (int root = 0; root < size; root++) {
                        float *buf = malloc(big * 4);
                        for (size_t i = 0; i < big; i++)
                                buf[i] = rank == root ? (float) (i % 1000) + root : -1;
                        CHECK(hvd_broadcast("bc", buf, big, HVD_FLOAT32, root) == 0, "bc %s", hvd_last_error());
                        for (size_t i = 0; i < big; i++)
                                CHECK(buf[i] == (float) (i % 1000) + root, "bc value");
                        free(buf);
                }
                /* alltoall uneven: rank r sends (r + d) % 3 rows of 2 to d */
                {
                        int64_t splits[64];
                        int64_t rows = 0;
                        for (int d = 0; d < size; d++) {
                                splits[d] = (rank + d) % 3;
                                rows += splits[d];
                        }
                        int64_t shape[2] = { rows, 2 };
                        float *in = malloc(sizeof(float) * (rows * 2 + 1));
                        size_t k = 0;
                        for (int d = 0; d < size; d++)
                                for (int i = 0; i < splits[d] * 2; i++)
                                        in[k++] = rank * 100 + d * 10 + i;
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = "a2a";
                        q.input = in;
                        q.dtype = HVD_FLOAT32;
                        q.ndim = 2;
                        q.shape = shape;
                        q.splits = splits;
                        hvd_handle_t *h;
                        CHECK(hvd_alltoall_async(&q, &h) == 0, "a2a submit %s", hvd_last_error());
                        CHECK(hvd_handle_wait(h) == 0, "a2a %s", hvd_handle_error(h));
                        const void *out;
                        size_t bytes;
                        CHECK(hvd_handle_output(h, 0, &out, &bytes, NULL, NULL) == 0, "out");
                        const float *o = out;
                        k = 0;
                        for (int s = 0; s < size; s++)
                                for (int i = 0; i < ((s + rank) % 3) * 2; i++, k++)
                                        CHECK(o[k] == s * 100 + rank * 10 + i, "a2a value s%d i%d got %f", s, i, o[k]);
                        CHECK(bytes == k * 4, "a2a bytes");
                        hvd_handle_release(&h);
                        free(in);
                }
                /* reducescatter: 7 rows of 5 */
                {
                        int64_t shape[2] = { 7, 5 };
                        double in[35];
                        for (int i = 0; i < 35; i++)
                                in[i] = i + rank;
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = "rs";
                        q.input = in;
                        q.dtype = HVD_FLOAT64;
                        q.ndim = 2;
                        q.shape = shape;
                        q.reduce_op = HVD_REDUCE_SUM;
                        hvd_handle_t *h;
                        CHECK(hvd_reducescatter_async(&q, &h) == 0, "rs submit");
                        CHECK(hvd_handle_wait(h) == 0, "rs %s", hvd_handle_error(h));
                        const void *out;
                        size_t bytes;
                        const int64_t *osh;
                        int nd;
                        CHECK(hvd_handle_output(h, 0, &out, &bytes, &nd, &osh) == 0, "out");
                        int64_t q0 = 7 / size, rem = 7 % size, start = rank * q0 + (rank < rem ? rank : rem),
                                n = q0 + (rank < rem);
                        CHECK(osh[0] == n, "rs rows %ld vs %ld", (long) osh[0], (long) n);
                        const double *o = out;
                        for (int i = 0; i < n * 5; i++)
                                CHECK(o[i] == size * (start * 5 + i) + size * (size - 1) / 2.0, "rs value");
                        hvd_handle_release(&h);
                }
                /* allreduce big, average int32 */
                {
                        int32_t *x = malloc(big * 4);
                        for (size_t i = 0; i < big; i++)
                                x[i] = (int32_t) (i % 100) * size + rank;
                        CHECK(hvd_allreduce("ar", x, x, big, HVD_INT32, HVD_REDUCE_MAX) == 0, "ar");
                        for (size_t i = 0; i < big; i++)
                                CHECK(x[i] == (int32_t) (i % 100) * size + size - 1, "ar value");
                        free(x);
                }
                CHECK(hvd_barrier() == 0, "barrier %s", hvd_last_error());
        }
        if (rank == 0)
                printf("coll ok size %d\n", size);
        hvd_shutdown();
        return 0;
}
