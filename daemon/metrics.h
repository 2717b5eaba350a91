/* metrics.h — hvd-coordinatord's counters and latency histograms and their
 * rendering in the Prometheus text exposition format (version 0.0.4).
 * Counting is a few additions on fixed arrays: no allocation, no lock (the
 * reactor is one thread). Rendering allocates, once per request. GET
 * /metrics is served by http.h's listener. */
#ifndef HVD_METRICS_H
#define HVD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upper bounds of the histogram buckets, in microseconds; +Inf follows. */
#define HVD_HISTOGRAM_N_BOUNDS 19

typedef struct hvd_histogram {
        uint64_t buckets[HVD_HISTOGRAM_N_BOUNDS + 1]; /* per bucket, not cumulative; last = +Inf */
        uint64_t count;
        uint64_t sum_usec;
} hvd_histogram_t;

void hvd_histogram_observe(hvd_histogram_t *h, uint64_t usec);

/* Envelope body numbers below this are counted by type. */
#define HVD_METRICS_MAX_BODY 128

enum {
        HVD_METRICS_SOCK_WORKER,
        HVD_METRICS_SOCK_PEER,
        HVD_METRICS_SOCK_ROOT,
        HVD_METRICS_SOCK_CONTROL,
        HVD_METRICS_SOCK_HTTP,
        HVD_METRICS_N_SOCK
};

typedef struct hvd_metrics {
        uint64_t jobs_started, jobs_finished, jobs_aborted;
        uint64_t workers_connected;              /* hellos accepted */
        uint64_t workers_lost;                   /* declared lost: no heartbeat within the timeout */
        uint64_t stale_messages;                 /* refused: from a lost worker, or for an aborted or unknown job */
        uint64_t messages[HVD_METRICS_MAX_BODY]; /* received, by Envelope body number */
        uint64_t rejected[HVD_METRICS_N_SOCK];   /* refused (undecodable, invalid, malformed) */
        uint64_t control_requests;
        uint64_t cycles; /* readiness messages from ranks */
        uint64_t tensors_negotiated, cache_hits, requests, bytes_scheduled, fused_ops, schedules;
        uint64_t fast_path_tensors; /* of tensors_negotiated: run from the workers' board */
        uint64_t stall_warnings;
        /* control plane aggregation: node-level readiness messages sent to a
         * root / received as a root, the ids they carried, per-rank readiness
         * received from other nodes, schedules sent as repeats */
        uint64_t node_ready_sent, node_ready_received, node_cached_ids, rank_readies_received;
        uint64_t node_shared_requests; /* requests several local ranks sent alike, forwarded once */
        uint64_t schedule_repeats;
        /* the workers' board in node mode (jobs on several hosts): readiness
         * messages that spoke for every local rank, and the ids they carried */
        uint64_t board_node_ready, board_node_ids;
        uint64_t board_schedules; /* schedules sent to local rank 0 alone, for the board */
        /* control plane relays: readiness messages a relay took from its
         * group and sent on to the root; relayed messages a root received;
         * cache ids a relay sent on as one entry for its whole group */
        uint64_t relay_in, relay_out, relayed_received, relay_group_ids;
        uint64_t log_level_changes;
        uint64_t elastic_resets;       /* generations of elastic jobs formed after a reset (root) */
        hvd_histogram_t elastic_reset; /* from a generation's end to the next one's placement */
        hvd_histogram_t negotiation;   /* per tensor: first readiness to schedule */
        hvd_histogram_t iteration;     /* reactor: wake-up to going back to sleep */
        hvd_histogram_t control;       /* control request handling */
} hvd_metrics_t;

/* What is read off the daemon's state when rendering. */
typedef struct hvd_metrics_gauges {
        const char *version;
        uint64_t uptime_usec;
        uint32_t jobs_joining, jobs_running, jobs_aborted;
        uint32_t workers;
        uint32_t peers_connected, peers_idle, peers_lost;
        int log_level;
} hvd_metrics_gauges_t;

/* Writes the exposition text. Returns 0 and a NUL-terminated string in
 * *ret (free with free()) of *len bytes, or -ENOMEM. */
int hvd_metrics_render(const hvd_metrics_t *m, const hvd_metrics_gauges_t *g, char **ret, size_t *len);

/* The listener that serves this text over HTTP: the reactor reaches it
 * through this header too. */
#include "http.h"

#endif
