/* rng.h — the examples' random numbers: splitmix64 and a normal deviate.
 * Tiny, and the same sequence on every machine for a given seed, which is
 * what lets every rank build the same data set and the same split. */
#ifndef HVD_EXAMPLES_RNG_H
#define HVD_EXAMPLES_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t rng_next(uint64_t *state) {
        uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
}

/* A draw from N(0, 1) (Box-Muller). */
static inline double rng_normal(uint64_t *r) {
        double u = ((rng_next(r) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
        double v = (rng_next(r) >> 11) * 0x1.0p-53;
        return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* A uniform integer in [0, n), n > 0. */
static inline uint32_t rng_below(uint64_t *r, uint32_t n) {
        return (uint32_t) (rng_next(r) % n);
}

#endif
