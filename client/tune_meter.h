/* tune_meter.h — local rank 0's step meter for the autotuner on a job of
 * one host with the fast path (docs/AUTOTUNE.md). There the workers fuse
 * their steady state from the board without the daemon, so the daemon
 * cannot count the steps from its schedules: local rank 0, which runs the
 * board's log in the one order every rank runs it, finds them by the
 * daemon's rule (the lowest cache id that comes round again marks where a
 * step begins) and reports each step's wall time, the bytes its
 * collectives reduced and the tuning generation it ran under, in Done.
 *
 * A plain struct the caller owns (no allocation); used by the runner only
 * (G.runner held). */
#ifndef HVD_TUNE_METER_H
#define HVD_TUNE_METER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define HVD_TUNE_METER_IDS 4096 /* the cache ids that may mark a step (as the daemon's) */

typedef struct hvd_tune_meter {
        bool on;
        /* the record being looked at */
        uint32_t low;
        bool marked;
        /* the step in progress */
        bool have_marker, in_step;
        uint32_t marker;
        uint64_t seen[HVD_TUNE_METER_IDS / 64];
        uint64_t start_usec, bytes, generation;
        /* steps measured, not yet reported (parallel arrays, as Done's) */
        size_t n;
        uint64_t usec[HVD_WIRE_MAX_TUNE_STEPS];
        uint64_t step_bytes[HVD_WIRE_MAX_TUNE_STEPS];
        uint64_t step_generation[HVD_WIRE_MAX_TUNE_STEPS];
} hvd_tune_meter_t;

/* Empties m; on: measure (off: every call below does nothing). */
void hvd_tune_meter_reset(hvd_tune_meter_t *m, bool on);

/* A record of the board's log (a fast record or a schedule) is about to
 * run: each of its cache ids goes through hvd_tune_meter_see, then
 * hvd_tune_meter_record says what it reduces (bytes), the tuning
 * generation in force as it starts, and the time. A step that a change
 * of generation cut through is not kept: it ran partly under other
 * settings. When the report is full, a step is dropped. */
void hvd_tune_meter_see(hvd_tune_meter_t *m, uint32_t id);
void hvd_tune_meter_record(hvd_tune_meter_t *m, uint64_t bytes, uint64_t generation, uint64_t now_usec);

#endif
