/* negotiate.h — one job's negotiation table: per tensor, which ranks are
 * ready and with what parameters; the consistency check across ranks; the
 * cache ids; join bookkeeping; and turning what became ready into one
 * numbered, fused Schedule that every rank executes in the same order.
 * Used by the daemon that is a job's root. Not thread-safe. */
#ifndef HVD_NEGOTIATE_H
#define HVD_NEGOTIATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hvd.pb-c.h"

typedef struct hvd_negotiator hvd_negotiator_t;

typedef struct hvd_negotiator_stats {
        uint64_t tensors_negotiated;   /* tensors scheduled (ok or error) */
        uint64_t fused_ops;            /* operations in schedules */
        uint64_t tensors_in_fused_ops; /* tensors that shared an op with others */
        uint64_t bytes_scheduled;      /* payload bytes per rank of scheduled ops */
        uint64_t schedules;
        uint64_t cache_hits;       /* requests that came as cached ids */
        uint64_t requests;         /* requests, by name or cached id */
        uint64_t negotiation_usec; /* summed over scheduled tensors: first readiness to schedule */
        uint32_t joined;
        uint32_t n_tensors; /* rows in the table */
} hvd_negotiator_stats_t;

int hvd_negotiator_new(uint32_t size, uint32_t max_tensors, uint64_t fusion_threshold_bytes, hvd_negotiator_t **ret);
void hvd_negotiator_destroy(hvd_negotiator_t **n);

/* Records rank's Ready message. A protocol error of that rank (unknown
 * cached id, a tensor submitted twice before it was scheduled, the table
 * full) returns < 0 with a message in err; the rest of the message is
 * still applied where it can be. */
int hvd_negotiator_submit(hvd_negotiator_t *n, uint32_t rank, const Hvd__Ready *ready, char *err, size_t err_len);

/* The same Ready from each rank in ranks (a node's ranks that sent the
 * same new requests, forwarded once): as hvd_negotiator_submit for each
 * rank in turn, but each request's name is looked up, checked and parsed
 * once, and their parameters need a single consistency check when the
 * schedule is built. Errors as hvd_negotiator_submit. */
int hvd_negotiator_submit_ranks(hvd_negotiator_t *n, const uint32_t *ranks, size_t n_ranks, const Hvd__Ready *ready,
                                char *err, size_t err_len);

/* Node-level readiness (the daemon that is a job's root, for nodes that
 * aggregate their ranks). node_of[size] gives each rank's node; call before
 * anything is submitted (-EBUSY after). Returns 0, -EINVAL or -ENOMEM. */
int hvd_negotiator_set_nodes(hvd_negotiator_t *n, uint32_t n_nodes, const uint32_t *node_of);

/* Every rank of node is ready for each cached id in ids, with the
 * parameters it last sent by name: as if each had sent the ids itself,
 * at O(1) per id. waited_usec (may be NULL) says how long before now the
 * first of them was. Errors as hvd_negotiator_submit. */
int hvd_negotiator_submit_node(hvd_negotiator_t *n, uint32_t node, const uint32_t *ids, size_t n_ids,
                               const uint64_t *waited_usec, char *err, size_t err_len);

/* True when something became ready since the last schedule. */
bool hvd_negotiator_has_work(const hvd_negotiator_t *n);

/* Builds the next schedule (seq numbers start at 1) from every tensor that
 * became ready, in ready order: errors for inconsistent tensors, fused
 * operations for the rest. Returns 1 and a new message in *ret (free with
 * hvd_negotiator_schedule_free) or 0 when there is nothing to send. */
int hvd_negotiator_take_schedule(hvd_negotiator_t *n, Hvd__Schedule **ret);
/* The next schedule with nothing in it (for a message that must reach
 * every rank at one schedule number while nothing is ready, such as the
 * autotuner's change). Returns 0 and a new message in *ret (free with
 * hvd_negotiator_schedule_free), or -ENOMEM. */
int hvd_negotiator_take_empty_schedule(hvd_negotiator_t *n, Hvd__Schedule **ret);
void hvd_negotiator_schedule_free(Hvd__Schedule **s);

/* Tensors some ranks submitted and others not: writes a readable line per
 * tensor ("'grad.w' ready on ranks [0, 2], missing ranks [1]") into buf.
 * Returns the number of such tensors whose first readiness is older than
 * min_age_usec. */
size_t hvd_negotiator_describe_pending(const hvd_negotiator_t *n, uint64_t now_usec, uint64_t min_age_usec, char *buf,
                                       size_t buf_len);

/* True if rank has submitted something not yet scheduled. */
bool hvd_negotiator_rank_has_pending(const hvd_negotiator_t *n, uint32_t rank);
bool hvd_negotiator_any_pending(const hvd_negotiator_t *n);

/* While on, schedule entries carry the ranks that were ready and how long
 * before the schedule each became ready (ready_ranks, ready_age_usec), for
 * rank 0's timeline. Off by default: the normal path records nothing. */
void hvd_negotiator_set_timeline(hvd_negotiator_t *n, bool on);

/* Tensors rank submitted that wait for other ranks. O(table size). */
uint32_t hvd_negotiator_rank_pending(const hvd_negotiator_t *n, uint32_t rank);

/* The fusion threshold of the schedules taken from now on (the autotuner's). */
void hvd_negotiator_set_fusion_threshold(hvd_negotiator_t *n, uint64_t fusion_threshold_bytes);

/* fn is called once per scheduled tensor with the time from its first
 * readiness to its schedule (for latency histograms). fn may be NULL. */
void hvd_negotiator_set_observer(hvd_negotiator_t *n, void (*fn)(void *userdata, uint64_t wait_usec), void *userdata);

/* n may be NULL (all zero). */
void hvd_negotiator_get_stats(const hvd_negotiator_t *n, hvd_negotiator_stats_t *st);

/* Entry and error id of a tensor that is not cached (sent by name only). */
#define HVD_NEGOTIATOR_NO_ID UINT32_MAX

#define HVD_JOIN_NAME    "__hvd.join"
#define HVD_BARRIER_NAME "__hvd.barrier"

#endif
