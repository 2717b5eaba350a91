/* mpi_collective.c — the peer of bench_collective.c: the same sweep through
 * Open MPI (MPI_Allreduce in place, MPI_Bcast, MPI_Allgather,
 * MPI_Reduce_scatter_block, MPI_Alltoall), printing the same line format with impl=mpi,
 * each size timed by the same rule (--iters, or calls filling --min-time).
 * --set R,R,...: in a communicator of those ranks (MPI_Comm_split), as
 * bench_collective's process set; its first prints, the others wait. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_set.h"
#include "bench_window.h"

static MPI_Comm comm;

static void run_once(const char *op, float *in, float *out, int count, int size) {
        if (!strcmp(op, "allreduce"))
                MPI_Allreduce(MPI_IN_PLACE, out, count, MPI_FLOAT, MPI_SUM, comm);
        else if (!strcmp(op, "broadcast"))
                MPI_Bcast(out, count, MPI_FLOAT, 0, comm);
        else if (!strcmp(op, "allgather"))
                MPI_Allgather(in, count / size, MPI_FLOAT, out, count / size, MPI_FLOAT, comm);
        else if (!strcmp(op, "reducescatter"))
                MPI_Reduce_scatter_block(in, out, count / size, MPI_FLOAT, MPI_SUM, comm);
        else if (!strcmp(op, "alltoall"))
                MPI_Alltoall(in, count / size, MPI_FLOAT, out, count / size, MPI_FLOAT, comm);
}

int main(int argc, char **argv) {
        size_t min_bytes = 8, max_bytes = 64u << 20;
        int iters = 0, warmup = 3;
        double min_time = 0.1;
        const char *op = "allreduce", *set = NULL;
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
                else if (!strcmp(argv[i], "--min-time"))
                        min_time = atof(argv[i + 1]);
                else if (!strcmp(argv[i], "--op"))
                        op = argv[i + 1];
                else if (!strcmp(argv[i], "--set"))
                        set = argv[i + 1];
        }
        int rank, size, wrank;
        MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
        comm = MPI_COMM_WORLD;
        if (set) {
                /* the set's ranks in the order given: its first is rank 0 of comm */
                int ranks[1024], n = bench_set_ranks(set, ranks, 1024), key = -1;
                if (n < 0) {
                        if (wrank == 0)
                                fprintf(stderr,
                                        "mpi_collective: --set %s: not a list of at most 1024 ranks (R,R,...)\n", set);
                        MPI_Finalize();
                        return 2;
                }
                for (int k = 0; k < n; k++)
                        if (ranks[k] == wrank)
                                key = k;
                MPI_Comm_split(MPI_COMM_WORLD, key >= 0 ? 0 : MPI_UNDEFINED, key, &comm);
        }
        if (comm == MPI_COMM_NULL) { /* not in the set */
                MPI_Barrier(MPI_COMM_WORLD);
                MPI_Finalize();
                return 0;
        }
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &size);
        float *in = malloc(max_bytes), *out = malloc(max_bytes);
        for (size_t i = 0; i < max_bytes / 4; i++)
                in[i] = out[i] = (float) (i % 7);
        for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
                int count = (int) (bytes / 4);
                if (count < size)
                        continue;
                double last = 0;
                for (int i = 0; i < (warmup < 1 && !iters ? 1 : warmup); i++) {
                        double w0 = MPI_Wtime();
                        run_once(op, in, out, count, size);
                        last = MPI_Wtime() - w0;
                }
                int n = iters;
                if (!n) {
                        /* bench_collective's rule: rank 0's count, broadcast, then warm again */
                        n = bench_iters(min_time, last);
                        MPI_Bcast(&n, 1, MPI_INT, 0, comm);
                        for (int i = 0; i < warmup; i++)
                                run_once(op, in, out, count, size);
                }
                MPI_Barrier(comm);
                double t0 = MPI_Wtime();
                for (int i = 0; i < n; i++)
                        run_once(op, in, out, count, size);
                double t = (MPI_Wtime() - t0) / n;
                double algbw = (double) bytes / t / 1e9;
                double factor = !strcmp(op, "allreduce")   ? 2.0 * (size - 1) / size
                                : !strcmp(op, "broadcast") ? 1.0
                                                           : (double) (size - 1) / size;
                if (rank == 0)
                        printf("bench=%s impl=mpi bytes=%zu np=%d time_us=%.1f algbw_gbs=%.3f busbw_gbs=%.3f%s%s\n", op,
                               bytes, size, t * 1e6, algbw, algbw * factor, set ? " set=" : "", set ? set : "");
                fflush(stdout);
        }
        free(in);
        free(out);
        if (set) {
                MPI_Comm_free(&comm);
                MPI_Barrier(MPI_COMM_WORLD); /* the others wait for the set */
        }
        MPI_Finalize();
        return 0;
}
