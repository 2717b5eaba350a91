/* worker_autotune.c — a training loop of many small gradients for the
 * autotuner's tests (tests/test-autotune.sh): STEPS steps of TENSORS
 * float allreduces of ELEMS each, submitted together and awaited, every
 * result checked exactly. Whenever the autotuner's settings change on this
 * rank (hvd_tuning_get, looked at after each step and after a final
 * barrier), prints "tune GEN seq SEQ threshold T cycle C switches W".
 * Every rank prints the same lines, but for changes sent after the final
 * barrier, which may reach a rank after its last look. Usage:
 * worker_autotune STEPS TENSORS ELEMS. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"

/* Prints the autotuner's settings when their generation is not *gen. */
static int print_change(int rank, uint64_t *gen) {
        hvd_tuning_t tu;
        if (hvd_tuning_get(&tu) < 0) {
                fprintf(stderr, "rank %d: hvd_tuning_get: %s\n", rank, hvd_last_error());
                return -1;
        }
        if (tu.generation != *gen) {
                *gen = tu.generation;
                printf("tune %" PRIu64 " seq %" PRIu64 " threshold %" PRIu64 " cycle %" PRIu64 " switches %" PRIu32
                       "\n",
                       tu.generation, tu.schedule_seq, tu.fusion_threshold_bytes, tu.cycle_time_usec, tu.switches);
                fflush(stdout);
        }
        return 0;
}

int main(int argc, char **argv) {
        if (argc != 4) {
                fprintf(stderr, "usage: worker_autotune STEPS TENSORS ELEMS\n");
                return 2;
        }
        int steps = atoi(argv[1]), n = atoi(argv[2]), elems = atoi(argv[3]);
        if (steps < 1 || n < 1 || n > 4096 || elems < 1) {
                fprintf(stderr, "worker_autotune: bad arguments\n");
                return 2;
        }
        if (hvd_init() < 0) {
                fprintf(stderr, "init: %s\n", hvd_last_error());
                return 1;
        }
        int rank = hvd_rank(), size = hvd_size();
        float *in = malloc(sizeof *in * (size_t) n * (size_t) elems);
        float *out = malloc(sizeof *out * (size_t) n * (size_t) elems);
        hvd_handle_t **h = calloc((size_t) n, sizeof *h);
        char(*names)[32] = calloc((size_t) n, sizeof *names);
        if (!in || !out || !h || !names)
                return 1;
        int64_t shape[1] = { elems };
        uint64_t gen = 0;
        for (int s = 0; s < steps; s++) {
                for (int t = 0; t < n; t++) {
                        for (int i = 0; i < elems; i++)
                                in[(size_t) t * elems + i] = (float) (rank + t + i % 7 + s % 3);
                        snprintf(names[t], sizeof names[t], "grad.%d", t);
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = names[t];
                        q.input = in + (size_t) t * elems;
                        q.output = out + (size_t) t * elems;
                        q.dtype = HVD_FLOAT32;
                        q.reduce_op = HVD_REDUCE_SUM;
                        q.ndim = 1;
                        q.shape = shape;
                        if (hvd_allreduce_async(&q, &h[t]) < 0) {
                                fprintf(stderr, "rank %d: submit: %s\n", rank, hvd_last_error());
                                return 1;
                        }
                }
                for (int t = 0; t < n; t++) {
                        if (hvd_handle_wait(h[t]) < 0) {
                                fprintf(stderr, "rank %d: step %d: %s\n", rank, s, hvd_handle_error(h[t]));
                                return 1;
                        }
                        hvd_handle_release(&h[t]);
                        for (int i = 0; i < elems; i++) {
                                float want = (float) (size * (t + i % 7 + s % 3)) + (float) (size * (size - 1) / 2);
                                if (out[(size_t) t * elems + i] != want) {
                                        fprintf(stderr, "rank %d: step %d: grad.%d[%d] = %g, expected %g\n", rank, s, t,
                                                i, out[(size_t) t * elems + i], want);
                                        return 1;
                                }
                        }
                }
                if (print_change(rank, &gen) < 0)
                        return 1;
        }
        /* a barrier's schedule runs after every earlier one on every rank,
         * so up to it all ranks print the same changes; one sent after it
         * may reach some ranks before this last look and others not */
        if (hvd_barrier() < 0) {
                fprintf(stderr, "rank %d: barrier: %s\n", rank, hvd_last_error());
                return 1;
        }
        if (print_change(rank, &gen) < 0)
                return 1;
        printf("done %d steps\n", steps);
        hvd_shutdown();
        free(in);
        free(out);
        free(h);
        free(names);
        return 0;
}
