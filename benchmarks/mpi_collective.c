/* mpi_collective.c — the peer of bench_collective.c: the same sweep through
 * Open MPI (MPI_Allreduce in place, MPI_Bcast, MPI_Allgather,
 * MPI_Reduce_scatter_block), printing the same line format with impl=mpi. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
        size_t min_bytes = 8, max_bytes = 64u << 20;
        int iters = 0, warmup = 3;
        const char *op = "allreduce";
        MPI_Init(&argc, &argv);
        for (int i = 1; i + 1 < argc; i += 2) {
                if (!strcmp(argv[i], "--min-bytes"))
                        min_bytes = strtoull(argv[i + 1], NULL, 0);
                else if (!strcmp(argv[i], "--max-bytes"))
                        max_bytes = strtoull(argv[i + 1], NULL, 0);
                else if (!strcmp(argv[i], "--iters"))
                        iters = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--warmup"))
                        warmup = atoi(argv[i + 1]);
                else if (!strcmp(argv[i], "--op"))
                        op = argv[i + 1];
        }
        int rank, size;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        float *in = malloc(max_bytes), *out = malloc(max_bytes);
        for (size_t i = 0; i < max_bytes / 4; i++)
                in[i] = out[i] = (float) (i % 7);
        for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
                int count = (int) (bytes / 4);
                if (count < size)
                        continue;
                int n = iters ? iters : (bytes <= (1u << 20) ? 200 : bytes <= (16u << 20) ? 20 : 5);
                double t0 = 0;
                for (int i = -warmup; i < n; i++) {
                        if (i == 0) {
                                MPI_Barrier(MPI_COMM_WORLD);
                                t0 = MPI_Wtime();
                        }
                        if (!strcmp(op, "allreduce"))
                                MPI_Allreduce(MPI_IN_PLACE, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                        else if (!strcmp(op, "broadcast"))
                                MPI_Bcast(out, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
                        else if (!strcmp(op, "allgather"))
                                MPI_Allgather(in, count / size, MPI_FLOAT, out, count / size, MPI_FLOAT,
                                              MPI_COMM_WORLD);
                        else if (!strcmp(op, "reducescatter"))
                                MPI_Reduce_scatter_block(in, out, count / size, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                }
                double t = (MPI_Wtime() - t0) / n;
                double algbw = (double) bytes / t / 1e9;
                double factor = !strcmp(op, "allreduce")   ? 2.0 * (size - 1) / size
                                : !strcmp(op, "broadcast") ? 1.0
                                                           : (double) (size - 1) / size;
                if (rank == 0)
                        printf("bench=%s impl=mpi bytes=%zu np=%d time_us=%.1f algbw_gbs=%.3f busbw_gbs=%.3f\n", op,
                               bytes, size, t * 1e6, algbw, algbw * factor);
                fflush(stdout);
        }
        free(in);
        free(out);
        MPI_Finalize();
        return 0;
}
