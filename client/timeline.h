/* timeline.h — rank 0's timeline: a Chrome trace-event JSON file (opens in
 * Perfetto and chrome://tracing) with one row ("process") per tensor: the
 * negotiation phase with a mark per rank as it became ready, the operation
 * with its fusion copies and the collective, and optional cycle markers.
 *
 * One timeline per process. hvd_timeline_start/stop may be called from any
 * thread; every other function is the background thread's. When no
 * timeline is on, hvd_timeline_on() is one atomic load and the rest is
 * never called. The file is written from memory in whole events, so a
 * killed process leaves a JSON array missing only its closing "]"
 * ('hvdctl timeline-repair FILE' adds it; see docs/TIMELINE.md). */
#ifndef HVD_TIMELINE_H
#define HVD_TIMELINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "hvd.pb-c.h"

extern atomic_bool hvd_timeline_active, hvd_timeline_changed;

/* Whether a timeline is recording (hvd_timeline_changed: whether one
 * started or stopped since hvd_timeline_take_change()). One atomic load. */
static inline bool hvd_timeline_on(void) {
        return atomic_load_explicit(&hvd_timeline_active, memory_order_relaxed);
}

/* Starts writing path (created, or truncated unless exclusive: then an
 * existing file is refused with -EEXIST; mode 0644), closing a timeline
 * already on. Returns 0, or -errno with a message in err. */
int hvd_timeline_start(const char *path, bool mark_cycles, bool exclusive, char *err, size_t err_len);
/* Continues path, the file this process's last timeline wrote and
 * closed, if it still ends there: its "]" is cut off and the events go on
 * on the same clock and rows (a later elastic generation's rank 0).
 * Otherwise as hvd_timeline_start(path, mark_cycles, false, ...). */
int hvd_timeline_continue(const char *path, bool mark_cycles, char *err, size_t err_len);

/* An elastic reset, as rank 0 of the new generation draws it. The strings
 * are borrowed for the call. */
typedef struct hvd_timeline_reset {
        uint64_t generation; /* the new one */
        uint64_t start_usec; /* when this process's last generation ended (0: unknown) */
        uint32_t size, previous_size, joined, left;
        bool sync;
        const char *joined_names, *left_names, *cause;
} hvd_timeline_reset_t;
/* Draws the reset in the "hvd" row: an ELASTIC_RESET span from start_usec
 * to now and a global "GENERATION G" instant, both with r as their args.
 * Nothing when no timeline is on. */
void hvd_timeline_reset(const hvd_timeline_reset_t *r);

/* Ends the file with "]" (strict JSON) and closes it. 0 when none was on. */
int hvd_timeline_stop(void);
/* True (once) after a start or stop: the daemon must be told; *on is the
 * current state. */
bool hvd_timeline_take_change(bool *on);
/* Waits (at most timeout_usec) until the background thread has taken the
 * last start or stop with hvd_timeline_take_change (and so told the
 * daemon before anything this thread submits next). */
void hvd_timeline_wait_told(uint64_t timeout_usec);

/* Resolves an entry of a schedule to its tensor name (NULL if unknown). */
typedef const char *(*hvd_timeline_name_fn)(const Hvd__Entry *en);

/* A schedule arrived: draws every member's negotiation phase, ending now,
 * with a mark per rank from the entry's readiness times. Operations of
 * process sets without rank 0 are not drawn. */
void hvd_timeline_schedule(const Hvd__Schedule *s, hvd_timeline_name_fn name_of);
/* An operation starts / ends on this rank (status < 0: failed). */
void hvd_timeline_op_begin(const Hvd__Op *op, hvd_timeline_name_fn name_of, bool gpu);
void hvd_timeline_op_end(int status);
/* The data plane moved to another phase of the current operation. Has the
 * signature of hvd_xop_t.phase; userdata is unused. */
void hvd_timeline_phase(void *userdata, int phase);
/* A cycle sent its readiness (drawn only with mark_cycles). */
void hvd_timeline_cycle(void);
/* Writes what is buffered (called before the background thread sleeps). */
void hvd_timeline_flush(void);

#endif
