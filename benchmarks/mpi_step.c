/* mpi_step.c — the Open MPI peer of bench_step.c: the same training step
 * (every gradient of a tsv model allreduced in backward order, float32 sum,
 * in place) in the ways an MPI user would write it:
 *   mode=iallreduce  MPI_Iallreduce per tensor in backward order, one Waitall
 *   mode=blocking    MPI_Allreduce per tensor in backward order
 *   mode=fused       gradients copied in backward order into a buffer of
 *                    fusion_bytes, one MPI_Allreduce per full buffer, copied
 *                    out (the copies are inside the timed step)
 * Modes alternate step by step so that machine noise hits all alike. Rank 0
 * prints one line per mode in bench_step's format with impl=mpi. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step_model.h"

enum { M_IALLREDUCE, M_BLOCKING, M_FUSED };

static void step(int mode, size_t fusion_bytes, const step_model_t *m, float **grad, MPI_Request *req, float *fbuf) {
        if (mode == M_IALLREDUCE) {
                for (size_t k = m->n; k-- > 0;)
                        MPI_Iallreduce(MPI_IN_PLACE, grad[k], (int) m->t[k].numel, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                       &req[k]);
                MPI_Waitall((int) m->n, req, MPI_STATUSES_IGNORE);
        } else if (mode == M_BLOCKING) {
                for (size_t k = m->n; k-- > 0;)
                        MPI_Allreduce(MPI_IN_PLACE, grad[k], (int) m->t[k].numel, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {
                size_t cap = fusion_bytes / sizeof(float);
                size_t k = m->n;
                while (k > 0) {
                        /* [k, hi) packed in backward order (hi-1 first); a tensor larger
                         * than the buffer goes alone, in place, as a fusing framework does */
                        size_t used = 0, hi = k;
                        if (m->t[k - 1].numel > cap)
                                k--;
                        else
                                while (k > 0 && used + m->t[k - 1].numel <= cap) {
                                        used += m->t[k - 1].numel;
                                        k--;
                                }
                        if (hi - k == 1) {
                                MPI_Allreduce(MPI_IN_PLACE, grad[k], (int) m->t[k].numel, MPI_FLOAT, MPI_SUM,
                                              MPI_COMM_WORLD);
                                continue;
                        }
                        size_t off = 0;
                        for (size_t j = hi; j-- > k;) {
                                memcpy(fbuf + off, grad[j], m->t[j].numel * sizeof(float));
                                off += m->t[j].numel;
                        }
                        MPI_Allreduce(MPI_IN_PLACE, fbuf, (int) off, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                        off = 0;
                        for (size_t j = hi; j-- > k;) {
                                memcpy(grad[j], fbuf + off, m->t[j].numel * sizeof(float));
                                off += m->t[j].numel;
                        }
                }
        }
}

int main(int argc, char **argv) {
        const char *tsv = NULL;
        int steps = 10, warmup = 3;
        size_t fusions[8] = { 4u << 20, 16u << 20, 64u << 20 };
        int n_fusions = 3;
        MPI_Init(&argc, &argv);
        for (int i = 1; i + 1 < argc; i += 2) {
                if (!strcmp(argv[i], "--model"))
                        tsv = argv[i + 1];
                else if (!strcmp(argv[i], "--steps"))
                        steps = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--warmup"))
                        warmup = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--fusion-mb")) {
                        /* comma-separated MiB list */
                        n_fusions = 0;
                        for (char *s = argv[i + 1]; *s && n_fusions < 8;) {
                                char *end;
                                unsigned long v = strtoul(s, &end, 10);
                                if (end == s || !v)
                                        break;
                                fusions[n_fusions++] = (size_t) v << 20;
                                s = *end == ',' ? end + 1 : end;
                        }
                }
        }
        int rank, size;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (!tsv || steps < 1 || warmup < 1) {
                if (rank == 0)
                        fprintf(stderr,
                                "usage: mpi_step --model FILE.tsv [--steps N] [--warmup N] [--fusion-mb 4,16,64]\n");
                MPI_Finalize();
                return 2;
        }
        step_model_t m;
        if (step_model_load(tsv, &m) < 0)
                MPI_Abort(MPI_COMM_WORLD, 1);
        char label[256];
        step_model_label(tsv, label, sizeof label);
        float **grad = calloc(m.n, sizeof *grad);
        MPI_Request *req = calloc(m.n, sizeof *req);
        size_t max_fusion = 0;
        for (int f = 0; f < n_fusions; f++)
                if (fusions[f] > max_fusion)
                        max_fusion = fusions[f];
        float *fbuf = malloc(max_fusion ? max_fusion : 1);
        int n_modes = 2 + n_fusions;
        double *dt = calloc((size_t) (n_modes * steps), sizeof *dt);
        if (!grad || !req || !fbuf || !dt)
                MPI_Abort(MPI_COMM_WORLD, 1);
        for (size_t k = 0; k < m.n; k++) {
                if (!(grad[k] = malloc((m.t[k].numel ? m.t[k].numel : 1) * sizeof(float))))
                        MPI_Abort(MPI_COMM_WORLD, 1);
                for (size_t i = 0; i < m.t[k].numel; i++)
                        grad[k][i] = (float) (rank + 1);
        }
        /* check every mode once: sum of rank+1 */
        float want = (float) size * (float) (size + 1) / 2.0f;
        for (int md = 0; md < n_modes; md++) {
                int mode = md < 2 ? md : M_FUSED;
                step(mode, md < 2 ? 0 : fusions[md - 2], &m, grad, req, fbuf);
                for (size_t k = 0; k < m.n; k++) {
                        if (m.t[k].numel && (grad[k][0] != want || grad[k][m.t[k].numel - 1] != want)) {
                                fprintf(stderr, "bench: mode %d: '%s' holds %g, expected %g\n", md, m.t[k].name,
                                        grad[k][0], want);
                                MPI_Abort(MPI_COMM_WORLD, 1);
                        }
                        for (size_t i = 0; i < m.t[k].numel; i++)
                                grad[k][i] = (float) (rank + 1);
                }
        }
        for (size_t k = 0; k < m.n; k++)
                for (size_t i = 0; i < m.t[k].numel; i++)
                        grad[k][i] = 1.0f / 1024;
        for (int s = -warmup; s < steps; s++)
                for (int md = 0; md < n_modes; md++) {
                        MPI_Barrier(MPI_COMM_WORLD);
                        double t0 = MPI_Wtime();
                        step(md < 2 ? md : M_FUSED, md < 2 ? 0 : fusions[md - 2], &m, grad, req, fbuf);
                        if (s >= 0)
                                dt[md * steps + s] = MPI_Wtime() - t0;
                }
        if (rank == 0) {
                double bytes = (double) m.total_numel * sizeof(float);
                for (int md = 0; md < n_modes; md++) {
                        double *v = dt + md * steps, total = 0, min = v[0];
                        for (int s = 0; s < steps; s++) {
                                total += v[s];
                                min = fmin(min, v[s]);
                        }
                        double med = step_median(v, steps), algbw = bytes / med / 1e9;
                        const char *mode = md == 0 ? "iallreduce" : md == 1 ? "blocking" : "fused";
                        printf("bench=step impl=mpi model=%s np=%d mode=%s fusion_bytes=%zu tensors=%zu bytes=%.0f "
                               "steps=%d ms_median=%.3f ms_mean=%.3f ms_min=%.3f algbw_gbs=%.3f busbw_gbs=%.3f\n",
                               label, size, mode, md < 2 ? (size_t) 0 : fusions[md - 2], m.n, bytes, steps, med * 1e3,
                               total / steps * 1e3, min * 1e3, algbw, algbw * 2.0 * (size - 1) / size);
                }
                fflush(stdout);
        }
        for (size_t k = 0; k < m.n; k++)
                free(grad[k]);
        free(grad);
        free(req);
        free(fbuf);
        free(dt);
        step_model_free(&m);
        MPI_Finalize();
        return 0;
}
