/* bench_step.c — one data-parallel training step through hvd: every
 * gradient of a model (read from a tsv, parameter order) is submitted for
 * allreduce asynchronously in backward order, as an optimizer hook does,
 * then all are waited for. Warm-up steps, then timed steps; rank 0 prints
 *   bench=step impl=hvd model=.. np=.. mode=fusion fusion_bytes=.. cycle_ms=..
 *   tensors=.. bytes=.. steps=.. ms_median=.. ms_mean=.. ms_min=.. algbw_gbs=.. busbw_gbs=..
 * The fusion threshold and cycle time are the job's (HVD_FUSION_THRESHOLD,
 * hvdrun --fusion-threshold-mb, 0 = fusion off; HVD_CYCLE_TIME; "default"
 * when unset). float32 sums, in place. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"
#include "step_model.h"

static int run_step(const step_model_t *m, float **grad, hvd_handle_t **h) {
        int r = 0;
        size_t submitted = 0;
        /* backward: the last layer's gradients are ready first */
        for (size_t k = m->n; k-- > 0;) {
                const step_tensor_t *t = &m->t[k];
                hvd_request_t q = HVD_REQUEST_INIT;
                q.name = t->name;
                q.input = grad[k];
                q.output = grad[k];
                q.dtype = HVD_FLOAT32;
                q.ndim = t->ndim;
                q.shape = t->shape;
                q.reduce_op = HVD_REDUCE_SUM;
                r = hvd_allreduce_async(&q, &h[k]);
                if (r < 0) {
                        fprintf(stderr, "bench: allreduce '%s': %s\n", t->name, hvd_last_error());
                        break;
                }
                submitted++;
        }
        for (size_t k = m->n; k-- > m->n - submitted;) {
                int w = hvd_handle_wait(h[k]);
                if (w < 0 && r >= 0) {
                        fprintf(stderr, "bench: allreduce '%s': %s\n", m->t[k].name, hvd_handle_error(h[k]));
                        r = w;
                }
                hvd_handle_release(&h[k]);
        }
        return r;
}

int main(int argc, char **argv) {
        const char *tsv = NULL;
        int steps = 10, warmup = 3;
        static const struct option opts[] = {
                { "model", required_argument, NULL, 'm' },
                { "steps", required_argument, NULL, 'n' },
                { "warmup", required_argument, NULL, 'w' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "m:n:w:h", opts, NULL)) >= 0) {
                switch (c) {
                case 'm': tsv = optarg; break;
                case 'n': steps = atoi(optarg); break;
                case 'w': warmup = atoi(optarg); break;
                default:
                        printf("usage: bench_step --model FILE.tsv [--steps N] [--warmup N]\n"
                               "Run under hvdrun; the fusion threshold is hvdrun's --fusion-threshold-mb.\n");
                        return c == 'h' ? 0 : 2;
                }
        }
        if (!tsv || steps < 1 || warmup < 1) {
                fprintf(stderr, "bench: --model FILE.tsv is required; --steps and --warmup >= 1\n");
                return 2;
        }
        step_model_t m;
        if (step_model_load(tsv, &m) < 0)
                return 1;
        char label[256];
        step_model_label(tsv, label, sizeof label);
        if (hvd_init() < 0) {
                fprintf(stderr, "bench: %s\n", hvd_last_error());
                step_model_free(&m);
                return 1;
        }
        int rank = hvd_rank(), size = hvd_size();
        float **grad = calloc(m.n, sizeof *grad);
        hvd_handle_t **h = calloc(m.n, sizeof *h);
        double *dt = calloc((size_t) steps, sizeof *dt);
        int status = 1;
        if (!grad || !h || !dt)
                goto out;
        for (size_t k = 0; k < m.n; k++) {
                if (!(grad[k] = malloc((m.t[k].numel ? m.t[k].numel : 1) * sizeof(float))))
                        goto out;
                for (size_t i = 0; i < m.t[k].numel; i++)
                        grad[k][i] = (float) (rank + 1);
        }
        for (int s = 0; s < warmup; s++) {
                if (run_step(&m, grad, h) < 0)
                        goto out;
                if (s == 0) {
                        /* every element is now the sum of rank+1 over the ranks */
                        float want = (float) size * (float) (size + 1) / 2.0f;
                        for (size_t k = 0; k < m.n; k++)
                                if (m.t[k].numel && (grad[k][0] != want || grad[k][m.t[k].numel - 1] != want)) {
                                        fprintf(stderr, "bench: '%s' holds %g after one step, expected %g\n",
                                                m.t[k].name, grad[k][0], want);
                                        goto out;
                                }
                        /* keep the values small: sums grow by size each step */
                        for (size_t k = 0; k < m.n; k++)
                                for (size_t i = 0; i < m.t[k].numel; i++)
                                        grad[k][i] = 1.0f / 1024;
                }
        }
        double total = 0;
        for (int s = 0; s < steps; s++) {
                double t0 = step_now_sec();
                if (run_step(&m, grad, h) < 0)
                        goto out;
                dt[s] = step_now_sec() - t0;
                total += dt[s];
        }
        if (rank == 0) {
                const char *ft = getenv("HVD_FUSION_THRESHOLD");
                if (!ft)
                        ft = getenv("HOROVOD_FUSION_THRESHOLD");
                double bytes = (double) m.total_numel * sizeof(float);
                double mean = total / steps, min = dt[0];
                for (int s = 1; s < steps; s++)
                        min = fmin(min, dt[s]);
                double med = step_median(dt, steps);
                double algbw = bytes / med / 1e9;
                const char *ct = getenv("HVD_CYCLE_TIME");
                printf("bench=step impl=hvd model=%s np=%d mode=fusion fusion_bytes=%s cycle_ms=%s tensors=%zu "
                       "bytes=%.0f steps=%d ms_median=%.3f ms_mean=%.3f ms_min=%.3f algbw_gbs=%.3f busbw_gbs=%.3f\n",
                       label, size, ft ? ft : "default", ct ? ct : "default", m.n, bytes, steps, med * 1e3, mean * 1e3,
                       min * 1e3, algbw, algbw * 2.0 * (size - 1) / size);
                fflush(stdout);
        }
        status = 0;
out:
        if (grad)
                for (size_t k = 0; k < m.n; k++)
                        free(grad[k]);
        free(grad);
        free(h);
        free(dt);
        step_model_free(&m);
        hvd_shutdown();
        return status;
}
