/* worker_netfault.c — a rank of a job whose network is made to fail
 * (tests/test-netfault.sh). Runs allreduces (SUM of ELEMENTS floats whose
 * values change every iteration, so a stale or partial result cannot pass)
 * and checks every result exactly.
 *   worker_netfault ITERATIONS ELEMENTS [MAX_SECONDS]
 * After 3 good iterations it creates $HVD_TEST_TMPDIR/running.RANK. Prints
 *   rank R: netfault: ok N iterations                       (exit 0)
 *   rank R: netfault: ERROR at T_MS after N iterations: MSG  (exit 3)
 *   rank R: netfault: WRONG ...                             (exit 1)
 * where T_MS is CLOCK_REALTIME in milliseconds when the error came back, for
 * the test's time to detect. Stops with "ok" after MAX_SECONDS (default 60).
 * With HVD_TEST_GO set, it creates $HVD_TEST_TMPDIR/joined.RANK after
 * hvd_init and waits for the file HVD_TEST_GO before the first collective
 * (so that a fault can be made before the data-plane connections exist). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hvd.h"

static uint64_t clock_ms(clockid_t c) {
        struct timespec ts;
        clock_gettime(c, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static const char *errname(int e) {
#define ERRNAME(name, value, text)                                                                                     \
        if (e == (value))                                                                                              \
                return #name;
        HVD_ERRORS(ERRNAME)
#undef ERRNAME
        return "error";
}

int main(int argc, char **argv) {
        if (argc < 3) {
                fprintf(stderr, "usage: worker_netfault ITERATIONS ELEMENTS [MAX_SECONDS]\n");
                return 2;
        }
        long iters = strtol(argv[1], NULL, 0);
        size_t n = strtoull(argv[2], NULL, 0);
        uint64_t max_ms = (argc > 3 ? strtoull(argv[3], NULL, 0) : 60) * 1000;
        int r = hvd_init();
        if (r < 0) {
                printf("rank ?: netfault: ERROR at %llu after 0 iterations: init: %s\n",
                       (unsigned long long) clock_ms(CLOCK_REALTIME), hvd_last_error());
                return 3;
        }
        int rank = hvd_rank(), size = hvd_size();
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        if (!x || !y) {
                free(x);
                free(y);
                return 2;
        }
        const char *go = getenv("HVD_TEST_GO");
        if (go) {
                const char *dir = getenv("HVD_TEST_TMPDIR");
                char path[512];
                snprintf(path, sizeof path, "%s/joined.%d", dir ? dir : "/tmp", rank);
                FILE *f = fopen(path, "w");
                if (f)
                        fclose(f);
                for (int i = 0; i < 3000 && access(go, F_OK) != 0; i++)
                        usleep(10000);
        }
        uint64_t t0 = clock_ms(CLOCK_MONOTONIC);
        long it;
        for (it = 0; it < iters && clock_ms(CLOCK_MONOTONIC) - t0 < max_ms; it++) {
                for (size_t i = 0; i < n; i++)
                        x[i] = (float) (rank + (i + (size_t) it) % 10);
                int64_t shape[1] = { (int64_t) n };
                hvd_request_t q = HVD_REQUEST_INIT;
                q.name = "netfault";
                q.input = x;
                q.output = y;
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h = NULL;
                r = hvd_allreduce_async(&q, &h);
                if (r >= 0)
                        r = hvd_handle_wait(h);
                if (r < 0) {
                        printf("rank %d: netfault: ERROR at %llu after %ld iterations: %s: %s\n", rank,
                               (unsigned long long) clock_ms(CLOCK_REALTIME), it, errname(r),
                               h ? hvd_handle_error(h) : hvd_last_error());
                        fflush(stdout);
                        hvd_handle_release(&h);
                        hvd_shutdown();
                        free(x);
                        free(y);
                        return 3;
                }
                hvd_handle_release(&h);
                for (size_t i = 0; i < n; i++)
                        if (y[i] != (float) (size * ((i + (size_t) it) % 10) + size * (size - 1) / 2)) {
                                printf("rank %d: netfault: WRONG result at iteration %ld, element %zu: %g\n", rank, it,
                                       i, (double) y[i]);
                                free(x);
                                free(y);
                                hvd_shutdown();
                                return 1;
                        }
                if (it == 2) {
                        const char *dir = getenv("HVD_TEST_TMPDIR");
                        char path[512];
                        snprintf(path, sizeof path, "%s/running.%d", dir ? dir : "/tmp", rank);
                        FILE *f = fopen(path, "w");
                        if (f)
                                fclose(f);
                }
        }
        printf("rank %d: netfault: ok %ld iterations\n", rank, it);
        free(x);
        free(y);
        return hvd_shutdown() < 0 ? 3 : 0;
}
