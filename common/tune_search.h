/* tune_search.h — the autotuner's search, pure and deterministic: which
 * setting to try next and which was best. Continuous knobs (the fusion
 * threshold, the cycle time) are searched jointly by Bayesian optimisation
 * (a Gaussian process with a Matern 5/2 kernel and expected improvement,
 * seeded with fixed points, as Horovod's autotuner does); then categorical
 * switches are tried one by one. No I/O, no clock, no global state: the
 * same options and scores give the same points on every run. */
#ifndef HVD_TUNE_SEARCH_H
#define HVD_TUNE_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The search space's bounds (Horovod's: 0-64 MiB, 1-100 ms). */
#define HVD_TUNE_THRESHOLD_MAX_BYTES (UINT64_C(64) << 20)
#define HVD_TUNE_CYCLE_MIN_USEC      UINT64_C(1000)
#define HVD_TUNE_CYCLE_MAX_USEC      UINT64_C(100000)
#define HVD_TUNE_MAX_SWITCHES        8
#define HVD_TUNE_MAX_SAMPLES         1000
#define HVD_TUNE_MAX_CONFIRM         8

/* hvd's categorical switches, bit k of hvd_tune_point_t.switches: knobs
 * of the data plane, tried one by one after the continuous search (docs/
 * AUTOTUNE.md): the first two between nodes, on a job of several hosts;
 * the third inside a node, on a job with a host of several ranks. Off is
 * the default; each is fixed when its variable is set. */
#define HVD_TUNE_SWITCH_SEND_THREAD  0 /* HVD_TCP_SEND_THREAD: the ring sends on a thread of its own */
#define HVD_TUNE_SWITCH_SMALL_CHUNKS 1 /* HVD_RING_CHUNK_BYTES: chunks across nodes of HVD_TUNE_SMALL_CHUNK_BYTES */
#define HVD_TUNE_SWITCH_SHM_CHUNKS   2 /* HVD_SHM_CHUNK_BYTES: shared-memory chunks of HVD_TUNE_SHM_CHUNK_BYTES */
#define HVD_TUNE_N_SWITCHES          3
#define HVD_TUNE_SMALL_CHUNK_BYTES   (UINT64_C(2) << 20)
#define HVD_TUNE_SHM_CHUNK_BYTES     (UINT64_C(2) << 20)
/* the switches that act between nodes, and inside one */
#define HVD_TUNE_SWITCHES_ACROSS                                                                                       \
        ((UINT32_C(1) << HVD_TUNE_SWITCH_SEND_THREAD) | (UINT32_C(1) << HVD_TUNE_SWITCH_SMALL_CHUNKS))
#define HVD_TUNE_SWITCHES_INSIDE (UINT32_C(1) << HVD_TUNE_SWITCH_SHM_CHUNKS)

/* The autotuner's CSV: Horovod's columns, then hvd's (docs/AUTOTUNE.md);
 * rank 0 writes the header, the root daemon the rows (daemon/autotune.c).
 * The last three are hvd's switches, 0 or 1. */
#define HVD_TUNE_CSV_HEADER                                                                                            \
        "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"                   \
        "tensor_fusion_threshold,score,sample,state,best,applied_seq,generation,elastic_generation,"                   \
        "tcp_send_thread,small_ring_chunks,large_shm_chunks"

typedef struct hvd_tune_point {
        uint64_t threshold_bytes;
        uint64_t cycle_usec;
        uint32_t switches; /* bit k: switch k on */
} hvd_tune_point_t;

typedef struct hvd_tune_search_opts {
        hvd_tune_point_t start;  /* the settings in force now (the search's first point) */
        bool fix_threshold;      /* the user set it: never changed (start's value) */
        bool fix_cycle;          /* likewise */
        uint32_t n_switches;     /* categorical switches, <= HVD_TUNE_MAX_SWITCHES */
        uint32_t fixed_switches; /* bit k: switch k was set by the user */
        uint32_t max_samples;    /* points of the continuous search, the seeds included (Horovod: 20) */
        double noise;            /* the GP's noise term on standardised scores (Horovod: 0.8) */
        uint32_t confirm;        /* the best distinct points of the search measured once more, side by side,
                                  * before the switches; the best is then the highest mean of a point's
                                  * two scores (0: the highest single score, as Horovod; <= HVD_TUNE_MAX_CONFIRM) */
        uint64_t seed;           /* of the search's own PRNG */
} hvd_tune_search_opts_t;

typedef enum {
        HVD_TUNE_SEARCHING,  /* the continuous knobs */
        HVD_TUNE_CONFIRMING, /* the search's best points measured again */
        HVD_TUNE_SWITCHES,   /* the categorical switches, one by one */
        HVD_TUNE_DONE,       /* every point tried: best() is the answer */
} hvd_tune_phase_t;

typedef struct hvd_tune_search hvd_tune_search_t;

/* Defaults: Horovod's budget and noise, seed 1, start from the daemon's
 * defaults (64 MiB, 1 ms). */
void hvd_tune_search_opts_init(hvd_tune_search_opts_t *o);
/* A search over o. Returns 0 (*ret: free with hvd_tune_search_destroy),
 * -EINVAL with err saying which option is wrong (max_samples 0 or above
 * HVD_TUNE_MAX_SAMPLES, noise not finite or negative, too many switches
 * or points to confirm,
 * a start outside the bounds), or -ENOMEM. */
int hvd_tune_search_new(const hvd_tune_search_opts_t *o, hvd_tune_search_t **ret, char *err, size_t err_len);
void hvd_tune_search_destroy(hvd_tune_search_t **s);
/* The next point to measure, in *p: the same one until a score for it is
 * reported. Returns 0, or -ENOENT when the search is done (*p untouched). */
int hvd_tune_search_next(hvd_tune_search_t *s, hvd_tune_point_t *p);
/* The score of the point next() gave (higher is better). Returns 0, or
 * -EINVAL when score is not finite or no point is pending (nothing changes). */
int hvd_tune_search_report(hvd_tune_search_t *s, double score);
hvd_tune_phase_t hvd_tune_search_phase(const hvd_tune_search_t *s);
/* Points scored so far. */
uint32_t hvd_tune_search_samples(const hvd_tune_search_t *s);
/* The best point scored so far and its score. Returns 0, or -ENOENT when
 * nothing was scored yet (outputs untouched). */
int hvd_tune_search_best(const hvd_tune_search_t *s, hvd_tune_point_t *p, double *score);

#endif
