/* bench_set.h — the rank list of --set R,R,... that bench_collective and
 * its Open MPI peer (mpi_collective) take: both read it alike and refuse
 * the same lists. */
#ifndef HVD_BENCH_SET_H
#define HVD_BENCH_SET_H

#include <stdlib.h>

/* Reads at most cap ranks of arg ("0,2,3") into ranks, in the order
 * given. Returns how many, or -1 when arg is not such a list (empty, a
 * part that is not a number, or more than cap ranks). */
static inline int bench_set_ranks(const char *arg, int *ranks, int cap) {
        int n = 0;
        for (const char *p = arg;; p++) {
                char *end;
                long r = strtol(p, &end, 10);
                if (end == p || (*end && *end != ',') || n == cap)
                        return -1;
                ranks[n++] = (int) r;
                if (!*end)
                        return n;
                p = end;
        }
}

#endif
