/* bench_window.h — how many calls bench_collective and its Open MPI peer
 * (mpi_collective) time at each size: as many as fill min_time at the pace
 * of one warm call that took last seconds, at least 5, at most a million.
 * gloo_collective.py and torch_peers.py take the same rule. */
#ifndef HVD_BENCH_WINDOW_H
#define HVD_BENCH_WINDOW_H

#include <stdint.h>

static inline int32_t bench_iters(double min_time, double last) {
        double n = last > 0 ? min_time / last : 1e6;
        return n < 5 ? 5 : n > 1e6 ? 1000000 : (int32_t) n + 1;
}

#endif
