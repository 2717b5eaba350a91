/* fastpath.h — the steady-state fast path of a job whose ranks are all on
 * one node: a readiness board in the job's shared memory from which every
 * local rank derives the same schedule for tensors with a cache id (CPU
 * allreduces, broadcasts, allgathers, reducescatters), with
 * no message to the coordinator.
 *
 * Each rank sets the bits of the cached ids it is ready for in its own row.
 * Under the board's lock, whoever sees a bit set in every row clears it
 * everywhere and appends a record to the board's log; the coordinator's
 * schedules are appended to the same log as markers (by whichever rank
 * receives one first). Every rank executes the log in order, so every rank
 * runs the same operations in the same order whichever path they took.
 * A bit that waits too long, or that another rank gave up on, is withdrawn
 * ("demoted") and its tensor goes to the coordinator like any other: the
 * coordinator then sees every tensor that waits, for status and stalls.
 *
 * Node mode (a job on several hosts): the same board aggregates one host's
 * readiness. A record then runs nothing here: its appender sends its ids
 * to the coordinator once for the whole host, and every rank waits for the
 * coordinator's schedule as for any tensor; schedules are not markers.
 *
 * Called from the worker's background thread only, except
 * hvd_fastpath_kick (any thread). */
#ifndef HVD_FASTPATH_H
#define HVD_FASTPATH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Cache ids below this go through the board; larger ones never do. */
#define HVD_FASTPATH_MAX_IDS 8192
/* A bit waits this long on the board before its tensor goes to the
 * coordinator (then a stall, a dead rank or a join is the coordinator's). */
#define HVD_FASTPATH_DEMOTE_USEC (200 * UINT64_C(1000))
/* The ids one record of the board's log holds: a fast record runs at most
 * this many tensors; more that are ready at once (a large group) take
 * several records in a row. */
#define HVD_FASTPATH_RECORD_IDS 60
/* The longest schedule a record carries inline (node mode). */
#define HVD_FASTPATH_INLINE_BYTES 240
/* How many times a rank waiting for the other local ranks (on the board,
 * and at the data plane's barriers) gives its CPU away with sched_yield
 * before it sleeps. Where the ranks outnumber the cores, the others on its
 * CPU are the ranks it waits for, and a rank that yields runs again as soon
 * as they stop, where a sleeping one needs a futex wake and a switch on
 * top (4 ranks on 2 cores: 1.3-2x faster at 64 KiB-4 MiB than 4 yields). */
#define HVD_WAIT_YIELDS 50

typedef struct hvd_fastpath hvd_fastpath_t;

/* Bytes of shared memory the board takes for local_size ranks (a multiple
 * of 4096). The memory starts zeroed; no other initialisation. */
size_t hvd_fastpath_board_bytes(int local_size);

/* Attaches to a board (borrowed: it must outlive the object). aborted is
 * the data plane's abort flag (borrowed), checked while waiting. A job of
 * one rank (local_size 1) has a board in private memory: each post is a
 * record at its next step. */
int hvd_fastpath_new(void *board, int local_rank, int local_size, const _Atomic uint32_t *aborted,
                     hvd_fastpath_t **ret);
void hvd_fastpath_destroy(hvd_fastpath_t **fp);

/* Counts one submission of the tensor with cache id `id` (fast or not): the
 * n-th submissions of a tensor on every rank are the same instance. */
uint32_t hvd_fastpath_instance(hvd_fastpath_t *fp, uint32_t id);

/* Sets this rank's bit for id. Returns 0, or -EAGAIN when the tensor must
 * go to the coordinator instead (another rank gave up on this instance,
 * some rank is joining, the bit is set already, or the board is busy). */
int hvd_fastpath_post(hvd_fastpath_t *fp, uint32_t id, uint64_t now_usec);

/* The most members of a group on the board; a larger one goes to the
 * coordinator. Room for a whole model's gradients in one group (a
 * DistributedOptimizer with num_groups=1: ResNet-50 has 161, BERT-large
 * about 390); its ids span several records of the log. */
#define HVD_FASTPATH_MAX_GROUP 1024

/* Sets this rank's bits for the n ids of one group at once, or none of
 * them (-EAGAIN, as hvd_fastpath_post). The group's members go into the
 * log together, and a withdrawal withdraws them all: it runs whole from
 * the board or goes whole to the coordinator. n is at most
 * HVD_FASTPATH_MAX_GROUP. */
int hvd_fastpath_post_group(hvd_fastpath_t *fp, const uint32_t *ids, size_t n, uint64_t now_usec);

/* This rank sends the current instance of id to the coordinator (its
 * parameters changed, or are not confirmed yet): tells the others, so
 * they send theirs at once rather than after HVD_FASTPATH_DEMOTE_USEC. */
void hvd_fastpath_forgo(hvd_fastpath_t *fp, uint32_t id);

/* Sets (or clears) this rank's "joining" flag: while any rank joins, no
 * tensor takes the fast path. */
void hvd_fastpath_set_joining(hvd_fastpath_t *fp, bool joining);

/* The coordinator's schedule `seq` has arrived here: it will be run when
 * the log reaches its marker. They arrive in seq order, except in node
 * mode: there the ones local rank 0 posts inline never come here, and
 * those it took and left without posting come again, late (a copy of one
 * received or run already is ignored). Returns 0 or -ENOMEM. */
int hvd_fastpath_schedule_arrived(hvd_fastpath_t *fp, uint64_t seq);

/* Node mode, local rank 0: schedule `seq` came here alone (Schedule.board),
 * len bytes packed: its record carries them to the other ranks. Call it
 * before hvd_fastpath_schedule_arrived for the same seq. Returns 0, -EINVAL
 * (too long) or -ENOMEM. */
int hvd_fastpath_schedule_inline(hvd_fastpath_t *fp, uint64_t seq, const void *bytes, size_t len);

/* One record of the log, as this rank runs it. */
typedef struct hvd_fastpath_record {
        bool slow; /* the coordinator's schedule `seq` */
        uint64_t seq;
        uint32_t n; /* fast: cache ids, ascending */
        const uint32_t *ids;
        int appender;         /* fast: the local rank that appended it (node mode: it speaks for the host) */
        const uint8_t *bytes; /* slow, posted inline (node mode): the schedule's packed envelope */
        size_t n_bytes;
} hvd_fastpath_record_t;

typedef struct hvd_fastpath_ops {
        /* runs one record (a marker only once its schedule arrived here);
         * returns 0 or < 0 (the job failed) */
        int (*run)(void *userdata, const hvd_fastpath_record_t *rec);
        /* this rank's bit for id was withdrawn: send the tensor to the
         * coordinator */
        void (*demote)(void *userdata, uint32_t id);
} hvd_fastpath_ops_t;

/* Publishes what can be published (markers, records of ids every rank is
 * ready for), withdraws bits that waited too long, and runs the log's
 * records this rank has not run (with fast_only, up to the next schedule
 * marker, and withdrawing nothing). Returns 0 or the first failure of run.
 * One thread at a time calls the functions of fp but hvd_fastpath_kick and
 * hvd_fastpath_wait, which any thread may call at any time. */
int hvd_fastpath_step(hvd_fastpath_t *fp, uint64_t now_usec, bool fast_only, const hvd_fastpath_ops_t *ops,
                      void *userdata);

/* True while this rank has bits on the board, records to run, or a
 * schedule that arrived here and has not run (its marker may not be in the
 * log yet: the last step may have missed the board's lock): the caller should then wait with hvd_fastpath_wait (at
 * most a millisecond at a time) and step again rather than block
 * elsewhere. */
bool hvd_fastpath_busy(const hvd_fastpath_t *fp);
/* True when a step with fast_only false would withdraw some of this
 * rank's bits now (one waited too long, another rank gave up on one, or a
 * rank joins): a caller that steps with fast_only must then make sure the
 * thread that withdraws takes its turn. */
bool hvd_fastpath_demote_due(hvd_fastpath_t *fp, uint64_t now_usec);
/* The last schedule this rank ran from the log (0: none). */
uint64_t hvd_fastpath_ran_seq(const hvd_fastpath_t *fp);
/* When this rank's oldest bit times out, or earlier (UINT64_MAX: none on
 * the board). */
uint64_t hvd_fastpath_next_due(const hvd_fastpath_t *fp);
/* Tensors this rank has on the board or in records not yet run. */
size_t hvd_fastpath_pending(const hvd_fastpath_t *fp);
/* True when the last step stopped at a schedule's marker: wait on the
 * coordinator's socket (or for the thread that runs schedules), not on the
 * board. */
bool hvd_fastpath_awaits_schedule(const hvd_fastpath_t *fp);

/* The spin gate (hvd_topology_t.spin_gate): spin while *gate is not 0,
 * i.e. while an application thread waits; NULL: always. The board's wait
 * and the data plane's barrier both ask it. */
static inline bool hvd_spin_gate_open(const _Atomic uint32_t *gate) {
        return !gate || atomic_load_explicit(gate, memory_order_relaxed);
}

/* hvd_fastpath_wait spins (HVD_WAIT_YIELDS' spin) only while the gate is
 * open (borrowed; NULL, the default: always). */
void hvd_fastpath_set_spin_gate(hvd_fastpath_t *fp, const _Atomic uint32_t *gate);

/* Waits (spinning briefly while the spin gate is open, then on a futex) up
 * to max_usec for the board to change or for a kick. */
void hvd_fastpath_wait(hvd_fastpath_t *fp, uint64_t max_usec);

/* Wakes this rank's hvd_fastpath_wait (any thread; fp may be NULL). */
void hvd_fastpath_kick(hvd_fastpath_t *fp);

#endif
