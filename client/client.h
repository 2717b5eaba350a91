/* client.h — libhvd's private state and the interfaces between its modules
 * (not installed; nothing here is exported: libhvd.sym lists the API).
 *
 * One worker is one struct hvd_client, G. Three kinds of thread touch it:
 * user threads (the API), the background thread (bg.c: it alone owns the
 * daemon socket while it runs), and "the runner": whoever holds G.runner
 * with a fast path (the background thread, or a user thread waiting for a
 * cached tensor), else the background thread. Each group of fields below
 * says which of them owns it and which mutex guards it. Lock order: runner
 * before lock; lock is never held across I/O or a wait of the data plane. */
#ifndef HVD_CLIENT_H
#define HVD_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "backend.h"
#include "fastpath.h"
#include "gpu_module.h"
#include "hvd.h"
#include "invariant.h"
#include "negotiate.h"
#include "strmap.h"
#include "tune_meter.h"
#include "wire.h"

#define ERRLEN 1024

/* ---- requests, entries and handles ---- */

/* What a rank asks for one tensor: what the coordinator checks every rank
 * agrees on. */
typedef struct hvd_params {
        uint32_t kind;
        hvd_dtype_t dtype;
        int ndim;
        int64_t shape[HVD_MAX_NDIM];
        hvd_reduce_op_t reduce_op;
        double prescale, postscale;
        int root;
        int process_set;
        int device;
        uint32_t group_id, group_size;
        int64_t *splits; /* [n_splits], owned */
        uint32_t n_splits;
        uint32_t *set_ranks; /* process set members, owned */
        uint32_t n_set;
} hvd_params_t;

typedef struct hvd_pset {
        uint32_t *ranks; /* sorted */
        int n;
        int me; /* my index, -1 if not a member */
        int *ranks_int;
} hvd_pset_t;

/* Device memory hvd allocated for an output, waiting to be freed outside
 * G.lock (freeing waits for the GPU to be idle). */
typedef struct hvd_devmem {
        struct hvd_devmem *next;
        void *p;
        int device;
} hvd_devmem_t;

/* One tensor of a handle. Guarded by G.lock, like its handle; in, out,
 * stream and p do not change after submission. */
typedef struct hvd_entry {
        hvd_handle_t *h;
        char *name;
        hvd_params_t p;
        const void *in;
        void *out;
        void *stream; /* GPU: where the input is ready */
        /* outputs allocated by hvd: host memory, or device memory of
         * alloc_device (then alloc_node is ready to carry it to the module's
         * mem_free when the handle is freed) */
        void *alloc;
        size_t alloc_bytes;
        size_t alloc_cap; /* host: the buffer's capacity (see hvd_outbuf_get) */
        int alloc_device;
        hvd_devmem_t *alloc_node;
        int out_ndim;
        int64_t out_shape[HVD_MAX_NDIM];
        int64_t *recv_splits;
        bool done;
        bool fp_counted;         /* counted as an instance of its cache id */
        bool fp_routed;          /* the fast path has looked at it */
        bool fp_boarded;         /* a group's member, posted with the group */
        uint64_t fp_posted_usec; /* when it went onto the board (0: never) */
} hvd_entry_t;

struct hvd_handle {
        int refs; /* the user's reference + one while in flight + one per op running it */
        size_t n, n_pending;
        int status;
        int result; /* join: last rank */
        char *error;
        void (*notify)(void *arg); /* hvd_handle_notify: called once at completion */
        void *notify_arg;
        bool waited; /* in app_waiting until it completes: its caller waits (a *_waiting submission, a notify) */
        hvd_entry_t m[];
};

/* A tensor name this rank has sent: its cache id once a schedule gave one. */
typedef struct hvd_known {
        uint32_t id;
        bool has_id;
        bool fast_ok;   /* scheduled without error with p: every rank agrees on p */
        hvd_params_t p; /* last parameters sent */
        /* an allgather's: every rank's rows in the schedule that set fast_ok
         * (owned; [n_rank_rows], the job's size) */
        int64_t *rank_rows;
        uint32_t n_rank_rows;
        /* an alltoall's: every rank's rows to every rank in that schedule
         * (owned; [n_splits], size x size, [source][destination]) */
        int64_t *splits;
        uint32_t n_splits;
} hvd_known_t;

/* A message that came during a data-plane wait, kept for after it. */
typedef struct hvd_held_msg {
        struct hvd_held_msg *next;
        Hvd__Envelope *env;
} hvd_held_msg_t;

/* A schedule waiting for its marker in the fast path's log. */
typedef struct hvd_held_schedule {
        struct hvd_held_schedule *next;
        Hvd__Schedule *s;
} hvd_held_schedule_t;

typedef struct hvd_fp_counters {
        uint64_t tensors, ops, fused, bytes, hits;
} hvd_fp_counters_t;

/* GPU operations enqueued, waiting for their events. */
typedef struct hvd_gpu_pending {
        hvd_gpu_op_t *op;
        hvd_entry_t **entries;
        size_t n;
} hvd_gpu_pending_t;

/* ---- the worker ---- */

struct hvd_client {
        /* life cycle and hand-over between user threads and the background
         * thread: all under lock. cond is broadcast when a handle completes
         * and when the job aborts. */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int state;           /* 0 = not initialised, 1 = running (stored atomically) */
        bool stop;           /* hvd_shutdown asks the background thread to end */
        hvd_entry_t **queue; /* submitted, not yet sent or posted */
        size_t n_queue, cap_queue;
        hvd_strmap_t *inflight;    /* name → hvd_entry_t (submitted, not complete) */
        hvd_devmem_t *dev_garbage; /* freed handles' device outputs */
        /* process sets, by id (0 = all ranks, implicit): written under lock
         * by hvd_add/remove_process_set, which every member calls alike;
         * the hvd_process_set_* getters read them without it */
        hvd_pset_t *psets[HVD_MAX_PROCESS_SETS];
        uint32_t pset_seq; /* the thread making process-set calls */
        /* the job's abort, sticky until shutdown: written once under lock
         * (hvd_job_abort); read without it as a flag by the runner and the
         * background thread, which only ever see it go from 0 to set */
        int abort_code;
        char abort_reason[ERRLEN];

        /* where this rank is and what the daemon said: written by hvd_init
         * before the background thread starts, read-only until
         * hvd_shutdown, by any thread */
        bool solo; /* no daemon: a job of one rank */
        int rank, size, local_rank, local_size, cross_rank, cross_size;
        char job_id[HVD_WIRE_MAX_JOB_ID + 1]; /* for the abort messages */
        /* the job's (Welcome), then the autotuner's (Schedule.tuning,
         * client/schedule.c: written by the runner, read by any thread,
         * hence atomic loads and stores) */
        uint64_t cycle_time_usec;
        uint64_t fusion_threshold;
        uint64_t tune_generation, tune_seq; /* the last change applied, and its schedule */
        uint32_t tune_switches;             /* in force (HVD_TUNE_SWITCH_* bits, tune_search.h) */
        uint32_t tune_fixed_switches;       /* set by this rank's user: never switched */
        FILE *tune_log;                     /* rank 0: the autotuner's CSV (HVD_AUTOTUNE_LOG), or NULL */
        uint64_t peer_timeout_usec;         /* the daemons' (Welcome), 0 on one host */
        uint64_t max_message_bytes;         /* the coordinator's limit (Welcome; 0: the protocol's) */
        uint64_t epoch;
        pthread_t thread;
        int wake_fd; /* eventfd: any thread writes it to wake the background thread */
        /* a submission writes wake_fd only while the background thread may
         * sleep on the socket (poll_armed, which the first writer clears);
         * `submitted` counts the submissions that would wake it, so that
         * one made after its last look and before it armed is not missed.
         * Both are seq_cst on both sides (the store-load pairing) */
        _Atomic uint32_t poll_armed;
        _Atomic uint64_t submitted;

        /* the daemon socket and what travels on it: the background thread's
         * while it runs, hvd_init's and hvd_shutdown's thread before and
         * after. No mutex. */
        void *zctx, *sock;
        int daemon_pidfd; /* readable when the coordinator exits */
        pid_t daemon_pid;
        /* liveness: a heartbeat to the coordinator every hb_interval_usec
         * (0 = none), sent by whoever holds the socket and keeps running —
         * the background thread's poll loop and its data-plane waits */
        uint64_t hb_interval_usec, last_hb_usec;
        uint64_t last_send_usec;
        bool failure_told; /* this rank reported its own failure to the coordinator */
        hvd_held_msg_t *held_head, *held_tail;
        /* schedules the coordinator may repeat by key (Schedule.keep_key):
         * the packed envelope as it came (node mode: as it ran) */
        uint8_t *sched_kept[HVD_WIRE_SCHEDULE_KEYS + 1];
        size_t sched_kept_len[HVD_WIRE_SCHEDULE_KEYS + 1];
        hvd_fp_counters_t fp_sent; /* fast-path counters reported in Done */
        uint64_t fp_report_usec;
        uint64_t fp_bg_turn_usec; /* the background thread's last turn */
        /* the board in node mode (a job on several hosts; the background
         * thread alone takes turns there): ids this rank's records
         * completed for the host, not yet sent, and when each was posted */
        bool fp_node;
        bool fp_scribe; /* node mode, local rank 0: small schedules come here alone, for the board */
        size_t fp_node_n;
        uint64_t fp_node_sent_usec;
        uint32_t fp_node_ids[HVD_FASTPATH_MAX_IDS];
        uint64_t fp_node_posted[HVD_FASTPATH_MAX_IDS];

        /* the runner's: held by whoever runs the fast path's turn (the
         * background thread, or a user thread waiting for its tensor), it
         * guards the fast path, the known tensors, the schedules' order and
         * the data plane. Without a fast path nobody takes it: the
         * background thread is the runner. */
        pthread_mutex_t runner;
        hvd_strmap_t *known; /* name → hvd_known_t */
        char **id_names;     /* cache id → name */
        size_t n_id_names;
        hvd_backend_t *backend;
        hvd_negotiator_t *neg; /* solo only */
        uint64_t next_seq;     /* the schedule to run next */
        hvd_fastpath_t *fp;    /* one node's board; NULL: every tensor goes to the coordinator */
        hvd_held_schedule_t *sched_head, *sched_tail;
        hvd_fp_counters_t fp_done;
        hvd_tune_meter_t tune_meter; /* local rank 0 of a tuned job of one host with the fast path */
        _Atomic int fp_waiters;      /* user threads taking turns */
        /* the spin gate of the data plane and the board: application
         * threads in hvd_handle_wait*, and pending handles their callers
         * wait for (submitted by a *_waiting call, or with a notify
         * callback, as a framework's kernel waits); while it is 0 the
         * application computes, and nothing of hvd's spins */
        _Atomic uint32_t app_waiting;
        /* for the daemon's status, sent with readiness (schedules may run on
         * a user thread that has the fast path's turn) */
        _Atomic uint64_t done_seq, busy_usec;

        /* hvd_init's alone */
        char data_addr[HVD_WIRE_MAX_HOST + 9];
        int listen_fd;

        /* the GPU data plane: a module loaded at hvd_init when it is
         * installed (gpu_module.h), kept loaded after hvd_shutdown (outputs
         * may outlive the job). g, device and pending are the background
         * thread's after init; mod and why are read by any thread. */
        struct {
                void *dl;
                const hvd_gpu_module_t *mod;
                int devices;
                char why[512]; /* why there is no GPU data plane */
                hvd_gpu_t *g;
                int device; /* g's GPU */
                hvd_gpu_pending_t *pending;
                size_t n_pending, cap_pending;
        } gpu;
};

/* The one worker of this process, defined in init.c. */
extern struct hvd_client hvd_client;
#define G hvd_client

/* ---- api.c: errors and requests ---- */

/* Sets the calling thread's hvd_last_error(). */
void hvd_last_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void hvd_last_error_clear(void);
/* Sets hvd_last_error() and evaluates to r: `return hvd_error(-EINVAL,
 * "...")`. A macro, so that r stays visible where it is returned. */
#define hvd_error(r, ...) (hvd_last_error_set(__VA_ARGS__), (r))
/* The error of a call made before hvd_init or after hvd_shutdown. */
#define hvd_error_not_initialized() hvd_error(HVD_ENOTINIT, "hvd is not initialized: call hvd_init() first")
/* Submits one request and waits for it; internal requests (barrier, join,
 * process-set agreement) skip the checks of user names. *result: the
 * handle's result (join: the last rank). */
int hvd_request_run(const hvd_request_t *req, uint32_t kind, bool internal, int *result);

/* ---- outbuf.c: host outputs hvd allocates, kept for reuse ---- */

/* A host buffer of at least bytes (> 0) for an output, its capacity in
 * *cap; NULL when out of memory. Give it back with hvd_outbuf_put (or
 * free() it). Thread-safe. */
void *hvd_outbuf_get(size_t bytes, size_t *cap);
/* Keeps p (capacity cap; NULL: nothing) for a later hvd_outbuf_get, or
 * frees it (closed, too small, or over the bounds). Thread-safe. */
void hvd_outbuf_put(void *p, size_t cap);
/* open: keep buffers from now on; closed: free the kept ones. */
void hvd_outbuf_set_open(bool open);
/* Bytes and buffers kept now (tests). */
void hvd_outbuf_stats(size_t *bytes, size_t *count);

/* ---- handle.c: parameters, entries and handles ---- */

void hvd_params_free(hvd_params_t *p);
int hvd_params_copy(hvd_params_t *dst, const hvd_params_t *src);
bool hvd_params_equal(const hvd_params_t *a, const hvd_params_t *b);
/* G.lock held for these. */
void hvd_handle_free(hvd_handle_t *h);
void hvd_handle_unref(hvd_handle_t *h);
/* Its caller waits for pending h until it completes: counted once in
 * G.app_waiting, which opens the spin gate. */
void hvd_handle_mark_waited(hvd_handle_t *h);
/* Completes one member; the handle completes with its last member. */
void hvd_entry_complete(hvd_entry_t *e, int status, const char *msg);
/* Completes every queued and in-flight entry with code. */
void hvd_inflight_fail(int code, const char *reason);

static inline uint64_t hvd_entry_count(const hvd_entry_t *e) {
        uint64_t c = 1;
        for (int d = 0; d < e->p.ndim; d++)
                c *= (uint64_t) e->p.shape[d];
        return c;
}

/* ---- link.c: the daemon socket, and the job's verdicts ---- */

/* Receives one message (flags: ZMQ_DONTWAIT or 0); a schedule kept or
 * repeated by key is resolved here (but in node mode, see
 * hvd_schedule_keys_resolve). An invalid message aborts the job. */
int hvd_link_recv(int flags, Hvd__Envelope **ret);
/* Acts on a message from the coordinator (env stays the caller's). */
void hvd_link_handle(Hvd__Envelope *env);
/* Keeps a message for after the operation in progress (takes env), and
 * acts on the kept ones, in order (the socket's owner). */
void hvd_link_hold(Hvd__Envelope *env);
void hvd_link_process_held(void);
void hvd_link_held_free(void);
/* A heartbeat when one is due; milliseconds until the next (-1: none). */
void hvd_link_heartbeat(void);
long hvd_link_heartbeat_timeout_ms(void);
/* The coordinator's process ended: true, and the job is aborted. */
bool hvd_link_daemon_lost(void);
/* The data plane's hvd_wait_check_fn: an abort ends its wait. */
int hvd_link_wait_check(void *userdata, char *err, size_t err_len);
/* Sends the queued requests as Ready messages (solo: negotiates them here). */
int hvd_link_send_ready(hvd_entry_t **batch, size_t n);
/* Wakes the background thread (any thread). */
void hvd_link_wake(void);
/* Tells the coordinator a timeline started or stopped (background thread). */
void hvd_link_timeline_sync(void);
/* Says goodbye, and waits up to a second for the ack (hvd_shutdown). */
void hvd_link_goodbye(void);
/* The job is aborted with code and reason: every entry fails, the data
 * planes stop. Sticky; the first reason stays. Any thread, without locks. */
void hvd_job_abort(int code, const char *reason);
/* A data-plane operation failed with r and err[ERRLEN]: the error to
 * report, err rewritten (see link.c). may_wait: the caller owns the socket. */
int hvd_job_verdict(int r, char *err, bool may_wait);

/* ---- elastic.c: the place of a rank of an elastic job ---- */
struct hvd_settings;
/* In an elastic job, asks the root daemon for this rank's place in the
 * next generation and writes it into *s (job id, rank, sizes, hosts);
 * nothing outside one. 0 or < 0 with hvd_last_error set. hvd_init. */
int hvd_elastic_enroll(struct hvd_settings *s);
/* The generation of this process's last placement, during hvd_init too
 * (0: not elastic, or not placed yet). */
uint64_t hvd_elastic_placed_generation(void);
/* The code an abort of the job gives the user: HVD_ERESET in an elastic job. */
int hvd_elastic_abort_code(int code);
/* This process's generation ends: the first call of a generation keeps
 * the time and the cause (an abort's reason; NULL: a shutdown, after
 * workers were announced or not). Any thread. */
void hvd_elastic_generation_ended(const char *cause);
/* hvd_init of a generation after the first, with a timeline on: draws the
 * reset that led to it (hvd_timeline_reset). 1 when drawn, else 0. */
int hvd_elastic_draw_reset(void);
/* The root daemon says workers wait to join the next generation. */
void hvd_elastic_hosts_updated(const Hvd__HostsUpdated *hu);

/* ---- schedule.c: executing the coordinator's schedules ---- */

static inline const char *hvd_id_name(uint32_t id) {
        return id < G.n_id_names ? G.id_names[id] : NULL;
}
/* The name of a schedule's entry: in it, or by its cache id. */
static inline const char *hvd_schedule_entry_name(const Hvd__Entry *en) {
        return en->name[0] ? en->name : hvd_id_name(en->id);
}
/* Records that tensor name of process set ps has cache id id. */
int hvd_id_learn(uint32_t id, const char *name, int ps);
/* Runs a schedule (seq must be the next); < 0: the job was aborted. */
int hvd_schedule_execute(const Hvd__Schedule *s);
/* Runs one op as a schedule's (its members prepared, run, completed);
 * may_wait: the calling thread may wait for the daemon's verdict on a
 * failure (the background thread). < 0: the job was aborted. */
int hvd_schedule_op_execute(const Hvd__Op *op, bool may_wait);
/* A schedule to keep by key is kept (its packed bytes data), a repeat
 * becomes the kept one, in *env. */
int hvd_schedule_by_key(const void *data, size_t len, Hvd__Envelope **env, char *err, size_t err_len);
/* The same in node mode, as schedules run. */
int hvd_schedule_keys_resolve(Hvd__Schedule **sp, char *err, size_t err_len);
/* Forgets the cache ids and the kept schedules (hvd_shutdown). */
void hvd_schedule_forget(void);

/* ---- fastpath_turn.c: the worker's side of the fast path ---- */

void hvd_fp_hold_schedule(Hvd__Envelope *env);
void hvd_fp_free_held(void);
/* A schedule ran e (ok, en: its entry there) or refused it. */
void hvd_fp_confirm(const hvd_entry_t *e, bool ok, const Hvd__Entry *en);
/* Sends the fast path's counters to the coordinator (background thread). */
void hvd_fp_report(bool force);
/* One turn (the runner's): user, a user thread's; returns 1 when a user
 * thread should wait on the board. */
int hvd_fp_cycle(bool user);
/* G.lock held: h's waiter may run the fast path's turn. */
bool hvd_fp_user_may_run(const hvd_handle_t *h);
/* A waiting user thread's turn: 1 wait on the board, 0 nothing to do, -1
 * the background thread has the turn. */
int hvd_fp_user_turn(void);

/* ---- gpu.c: the GPU module ---- */

struct hvd_settings;
void hvd_gpu_load(const struct hvd_settings *s);
/* Rank 0: a fresh communicator id, or false (G.gpu.why says why). */
bool hvd_gpu_unique_id(uint8_t id[HVD_NCCL_ID_BYTES]);
/* The job's communicator on device (id NULL: a job of one rank makes its
 * own); a failure leaves G.gpu.g NULL and says why in G.gpu.why. */
void hvd_gpu_open(const hvd_topology_t *topo, const uint8_t *id, int device, uint64_t fusion_bytes);
void hvd_gpu_close(void);
int hvd_gpu_enqueue(const hvd_xop_t *x, hvd_entry_t **em, char *err, size_t err_len);
/* Completes the operations whose events fired; whether some are pending. */
bool hvd_gpu_poll(void);
void hvd_gpu_fail_pending(int code, const char *msg);
/* Frees freed handles' device outputs. Never under G.lock. */
void hvd_gpu_free_garbage(void);

/* ---- pset.c ---- */

/* The process set id, or NULL (0 and unknown ids). Submission looks
 * under G.lock; the hvd_process_set_* getters without it (see psets). */
static inline const hvd_pset_t *hvd_pset_get(int id) {
        return id > 0 && id < HVD_MAX_PROCESS_SETS ? G.psets[id] : NULL;
}
void hvd_psets_clear(void);

/* ---- bg.c ---- */

void *hvd_bg_main(void *arg);

#endif
