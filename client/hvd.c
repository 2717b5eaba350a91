/* hvd.c — libhvd: the public API (hvd.h), the worker's background thread
 * and its side of the negotiation. User threads queue requests and wait on
 * handles; the background thread alone owns the daemon socket: once per
 * cycle it sends what became ready (new tensors in full, known ones as
 * cached ids), and it executes every schedule the daemon sends, in order,
 * completing the handles. On one node, tensors with a cache id take the
 * fast path instead (fastpath.c: a readiness board in shared memory, no
 * message); its turns, and the data plane, belong to whoever holds the
 * runner lock: the background thread, or a user thread waiting for such a
 * tensor. One mutex guards the queue, the in-flight table and every handle;
 * it is never held across I/O. */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zmq.h>

#include "backend.h"
#include "gpu_module.h"
#include "tcp.h"
#include "timeline.h"
#include "conf.h"
#include "fastpath.h"
#include "fusion.h"
#include "hvd.h"
#include "negotiate.h"
#include "reduce.h"
#include "strmap.h"
#include "util.h"
#include "wire.h"

#define ERRLEN        1024
#define HVD_MAX_HOSTS 1024

/* ---- handles ---- */

typedef struct params {
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
} params_t;

typedef struct pset {
        uint32_t *ranks; /* sorted */
        int n;
        int me; /* my index, -1 if not a member */
        int *ranks_int;
} pset_t;

/* Device memory hvd allocated for an output, waiting to be freed outside
 * G.lock (freeing waits for the GPU to be idle). */
typedef struct devmem {
        struct devmem *next;
        void *p;
        int device;
} devmem_t;

typedef struct entry {
        hvd_handle_t *h;
        char *name;
        params_t p;
        const void *in;
        void *out;
        void *stream; /* GPU: where the input is ready */
        /* outputs allocated by hvd: host memory, or device memory of
         * alloc_device (then alloc_node is ready to carry it to the module's
         * mem_free when the handle is freed) */
        void *alloc;
        size_t alloc_bytes;
        size_t alloc_cap; /* host: the buffer's capacity (see outbuf) */
        int alloc_device;
        devmem_t *alloc_node;
        int out_ndim;
        int64_t out_shape[HVD_MAX_NDIM];
        int64_t *recv_splits;
        bool done;
        bool fp_counted;         /* counted as an instance of its cache id */
        bool fp_routed;          /* the fast path has looked at it */
        uint64_t fp_posted_usec; /* when it went onto the board (0: never) */
} entry_t;

struct hvd_handle {
        int refs; /* the user's reference + one while in flight */
        size_t n, n_pending;
        int status;
        int result; /* join: last rank */
        char *error;
        entry_t m[];
};

/* ---- global state ---- */

typedef struct known {
        uint32_t id;
        bool has_id;
        bool fast_ok; /* scheduled without error with p: every rank agrees on p */
        params_t p;   /* last parameters sent */
} known_t;

typedef struct pending_msg {
        struct pending_msg *next;
        Hvd__Envelope *env;
} pending_msg_t;

/* A schedule waiting for its marker in the fast path's log. */
typedef struct held_schedule {
        struct held_schedule *next;
        Hvd__Schedule *s;
} held_schedule_t;

typedef struct fp_counters {
        uint64_t tensors, ops, fused, bytes, hits;
} fp_counters_t;

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int state; /* 0 = not initialised, 1 = running */
        bool solo; /* no daemon: a job of one rank */
        int rank, size, local_rank, local_size, cross_rank, cross_size;
        void *zctx, *sock;
        pthread_t thread;
        int wake_fd;
        bool stop;
        entry_t **queue;
        size_t n_queue, cap_queue;
        hvd_strmap_t *inflight;                   /* name → entry_t (submitted, not complete) */
        uint32_t group_seq[HVD_MAX_PROCESS_SETS]; /* per process set: only its members count */
        /* abort: sticky until shutdown */
        int abort_code;
        char abort_reason[ERRLEN];
        bool failure_told;                    /* this rank reported its own failure to the coordinator */
        char job_id[HVD_WIRE_MAX_JOB_ID + 1]; /* for the abort messages */
        uint64_t peer_timeout_usec;           /* the daemons' (Welcome), 0 on one host */
        /* background thread only */
        hvd_strmap_t *known; /* name → known_t */
        char **id_names;
        size_t n_id_names;
        /* schedules the coordinator may repeat by key (Schedule.keep_key):
         * the packed envelope as it came */
        uint8_t *sched_kept[HVD_WIRE_SCHEDULE_KEYS + 1];
        size_t sched_kept_len[HVD_WIRE_SCHEDULE_KEYS + 1];
        hvd_backend_t *backend;
        hvd_negotiator_t *neg; /* solo only */
        uint64_t cycle_time_usec;
        uint64_t last_send_usec;
        pending_msg_t *held_head, *held_tail;
        uint64_t next_seq;
        /* for the daemon's status, sent with readiness (schedules may run on
         * a user thread that has the fast path's turn) */
        _Atomic uint64_t done_seq, busy_usec;
        char data_addr[HVD_WIRE_MAX_HOST + 9];
        int listen_fd;
        int daemon_pidfd; /* readable when the coordinator exits */
        pid_t daemon_pid;
        /* liveness: a heartbeat to the coordinator every hb_interval_usec
         * (0 = none), sent by whoever holds the socket and keeps running —
         * the background thread's poll loop and its data-plane waits */
        uint64_t hb_interval_usec, last_hb_usec, epoch;
        uint64_t max_message_bytes; /* the coordinator's limit (Welcome; 0: the protocol's) */
        /* process sets, by id (0 = all ranks, implicit) */
        pset_t *psets[HVD_MAX_PROCESS_SETS];
        uint32_t pset_seq;
        devmem_t *dev_garbage; /* freed handles' device outputs (under lock) */
        /* the fast path (one node): schedules wait for their marker */
        hvd_fastpath_t *fp;
        held_schedule_t *sched_head, *sched_tail;
        uint64_t fusion_threshold;
        fp_counters_t fp_done, fp_sent; /* reported to the coordinator in Done */
        uint64_t fp_report_usec;
        /* held by whoever runs the fast path's turn (the background thread,
         * or a user thread waiting for its tensor): it guards the fast path,
         * the known tensors and the data plane; the socket stays the
         * background thread's */
        pthread_mutex_t runner;
        _Atomic int fp_waiters;   /* user threads taking turns */
        uint64_t fp_bg_turn_usec; /* the background thread's last turn */
        /* the board in node mode (a job on several hosts): ids this rank's
         * records completed for the host, not yet sent, and when each was
         * posted here (background thread) */
        bool fp_node;
        bool fp_scribe; /* node mode, local rank 0: small schedules come here alone, for the board */
        size_t fp_node_n;
        uint64_t fp_node_sent_usec;
        uint32_t fp_node_ids[HVD_FASTPATH_MAX_IDS];
        uint64_t fp_node_posted[HVD_FASTPATH_MAX_IDS];
} G = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .cond = PTHREAD_COND_INITIALIZER,
        .runner = PTHREAD_MUTEX_INITIALIZER,
        .wake_fd = -1,
        .listen_fd = -1,
        .daemon_pidfd = -1,
};

/* The GPU data plane: a module loaded at hvd_init when it is installed
 * (see gpu_module.h). All of it is the background thread's after init. */
typedef struct gpu_pending {
        hvd_gpu_op_t *op;
        entry_t **entries;
        size_t n;
} gpu_pending_t;

static struct {
        void *dl;
        const hvd_gpu_module_t *mod;
        int devices;
        char why[512]; /* why there is no GPU data plane */
        hvd_gpu_t *g;
        int device; /* g's GPU */
        gpu_pending_t *pending;
        size_t n_pending, cap_pending;
} GPU;

static __thread char last_error[ERRLEN];

static bool gpu_poll(void);
static void timeline_sync(void);
static void timeline_remote(const Hvd__TimelineControl *tc);
static const char *entry_name(const Hvd__Entry *en);
static void gpu_free_garbage(void);
static int gpu_enqueue(const hvd_xop_t *x, entry_t **em, char *err, size_t err_len);
static void await_abort(uint64_t usec);

static void tell_daemon_failure(int r, char *err) {
        Hvd__Abort ab = HVD__ABORT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ab.job_id = G.job_id;
        ab.reason = err;
        ab.code = r;
        ab.lost_rank = -1;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        if (hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT) == 0)
                G.failure_told = true; /* hvd_shutdown makes sure it was read */
}

/* A data-plane operation failed with r and err[ERRLEN]; returns the error
 * to report, with err rewritten. A peer's connection failing is usually the
 * symptom: the coordinator's abort, a moment later, says what happened. A
 * failure before the deadline (a connection closed or reset) waits for it as
 * long as the daemons take to notice a lost host (the peer timeout, across
 * hosts); a wait that reached its own deadline has used up the time a caller
 * may wait (deadline plus one second) and waits 200 ms more at most.
 * Without a word from the coordinator, the error names the job, and the
 * coordinator is told, so that every rank learns this cause (not only that
 * this rank went away). A user thread running the fast path does not own
 * the socket: it waits as long for the background thread to take the
 * verdict in. */
static int data_plane_verdict(int r, char *err, bool may_wait) {
        bool told = false;
        /* data that failed its integrity check (the TCP ring's checksum):
         * this rank is the one that knows why; it tells its daemon at once
         * and waits for the abort the daemons send every rank */
        if (!G.abort_code && G.sock && may_wait && r == HVD_EPROTO) {
                tell_daemon_failure(r, err);
                told = true;
        }
        uint64_t grace = r == HVD_ETIMEOUT ? 200 * USEC_PER_MSEC
                         : told            ? USEC_PER_SEC
                                           : HVD_MAX(USEC_PER_SEC, G.peer_timeout_usec + USEC_PER_SEC / 2);
        if (!G.abort_code && G.sock && may_wait)
                await_abort(grace);
        pthread_mutex_lock(&G.lock);
        if (!may_wait && G.sock) {
                /* job_aborted broadcasts G.cond */
                struct timespec until = hvd_realtime_after(grace);
                while (!G.abort_code && pthread_cond_timedwait(&G.cond, &G.lock, &until) != ETIMEDOUT)
                        ;
        }
        int code = G.abort_code;
        if (code)
                snprintf(err, ERRLEN, "%s", G.abort_reason);
        pthread_mutex_unlock(&G.lock);
        if (code)
                return code;
        if (G.sock && may_wait && !told)
                tell_daemon_failure(r, err);
        if (G.job_id[0] && strncmp(err, "job ", 4) != 0) {
                char tmp[ERRLEN];
                snprintf(tmp, sizeof tmp, "job %s: %s", G.job_id, err);
                memcpy(err, tmp, ERRLEN);
        }
        return r;
}

static int set_error(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int set_error(int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(last_error, sizeof last_error, fmt, ap);
        va_end(ap);
        return r;
}

const char *hvd_last_error(void) {
        return last_error;
}

const char *hvd_version(void) {
        return PACKAGE_VERSION;
}

void hvd_request_init(hvd_request_t *req) {
        *req = (hvd_request_t) HVD_REQUEST_INIT;
}

/* ---- handle helpers (G.lock held) ---- */

static void params_free(params_t *p) {
        free(p->splits);
        p->splits = NULL;
        p->n_splits = 0;
        free(p->set_ranks);
        p->set_ranks = NULL;
        p->n_set = 0;
}

/* Host outputs the library allocates (allgather, alltoall,
 * reducescatter), kept for reuse once their handle is released: a large
 * malloc is a fresh mapping whose every page faults and is zeroed on first
 * touch — for a 256 MiB allgather that cost more than the collective — and
 * a training loop asks for the same sizes every step. Up to OUTBUF_SLOTS
 * buffers of at least OUTBUF_MIN bytes, while hvd is initialised. */
#define OUTBUF_SLOTS 4
#define OUTBUF_MIN   ((size_t) 1 << 20)
static struct {
        pthread_mutex_t lock;
        bool open;
        void *p[OUTBUF_SLOTS];
        size_t cap[OUTBUF_SLOTS];
} outbuf = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A buffer of at least bytes (capacity in *cap): a kept one no more than
 * twice as large, or a new one. */
static void *outbuf_get(size_t bytes, size_t *cap) {
        if (bytes >= OUTBUF_MIN) {
                pthread_mutex_lock(&outbuf.lock);
                int best = -1;
                for (int i = 0; i < OUTBUF_SLOTS; i++)
                        if (outbuf.p[i] && outbuf.cap[i] >= bytes && outbuf.cap[i] / 2 <= bytes &&
                            (best < 0 || outbuf.cap[i] < outbuf.cap[best]))
                                best = i;
                void *p = NULL;
                if (best >= 0) {
                        p = outbuf.p[best];
                        *cap = outbuf.cap[best];
                        outbuf.p[best] = NULL;
                }
                pthread_mutex_unlock(&outbuf.lock);
                if (p)
                        return p;
        }
        *cap = bytes;
        return malloc(bytes);
}

static void outbuf_put(void *p, size_t cap) {
        if (!p)
                return;
        if (cap >= OUTBUF_MIN) {
                pthread_mutex_lock(&outbuf.lock);
                /* an empty slot, else the smallest kept buffer if smaller */
                int slot = -1;
                for (int i = 0; i < OUTBUF_SLOTS && outbuf.open && slot < 0; i++)
                        if (!outbuf.p[i])
                                slot = i;
                if (slot < 0 && outbuf.open) {
                        int small = 0;
                        for (int i = 1; i < OUTBUF_SLOTS; i++)
                                if (outbuf.cap[i] < outbuf.cap[small])
                                        small = i;
                        if (outbuf.cap[small] < cap)
                                slot = small;
                }
                if (slot >= 0) {
                        void *old = outbuf.p[slot];
                        outbuf.p[slot] = p;
                        outbuf.cap[slot] = cap;
                        p = old;
                }
                pthread_mutex_unlock(&outbuf.lock);
        }
        free(p);
}

/* open: keep released buffers from now on; closed: free the kept ones. */
static void outbuf_set_open(bool open) {
        pthread_mutex_lock(&outbuf.lock);
        outbuf.open = open;
        void *drop[OUTBUF_SLOTS] = { 0 };
        if (!open)
                for (int i = 0; i < OUTBUF_SLOTS; i++) {
                        drop[i] = outbuf.p[i];
                        outbuf.p[i] = NULL;
                }
        pthread_mutex_unlock(&outbuf.lock);
        for (int i = 0; i < OUTBUF_SLOTS; i++)
                free(drop[i]);
}

static void handle_free(hvd_handle_t *h) {
        for (size_t i = 0; i < h->n; i++) {
                entry_t *e = &h->m[i];
                free(e->name);
                params_free(&e->p);
                if (e->alloc_node && e->alloc) {
                        /* device memory: freed by gpu_free_garbage() */
                        e->alloc_node->p = e->alloc;
                        e->alloc_node->device = e->alloc_device;
                        e->alloc_node->next = G.dev_garbage;
                        G.dev_garbage = e->alloc_node;
                } else {
                        free(e->alloc_node);
                        outbuf_put(e->alloc, e->alloc_cap);
                }
                free(e->recv_splits);
        }
        free(h->error);
        free(h);
}

static void handle_unref(hvd_handle_t *h) {
        if (--h->refs == 0)
                handle_free(h);
}

/* Completes one member; the handle completes with its last member. */
static void entry_complete(entry_t *e, int status, const char *msg) {
        hvd_handle_t *h = e->h;
        if (e->done)
                return;
        e->done = true;
        hvd_strmap_remove(G.inflight, e->name, strlen(e->name));
        if (status < 0 && h->status >= 0) {
                h->status = status;
                free(h->error);
                h->error = strdup(msg && *msg ? msg : hvd_strerror(status));
        }
        if (--h->n_pending == 0) {
                pthread_cond_broadcast(&G.cond);
                handle_unref(h);
        }
}

static void fail_everything(int code, const char *reason) {
        /* queued and in flight */
        for (size_t i = 0; i < G.n_queue; i++)
                entry_complete(G.queue[i], code, reason);
        G.n_queue = 0;
        size_t iter = 0;
        void *v;
        entry_t *batch[256];
        for (;;) {
                size_t n = 0;
                iter = 0;
                while (n < ELEMENTSOF(batch) && hvd_strmap_next(G.inflight, &iter, NULL, NULL, &v))
                        batch[n++] = v;
                if (!n)
                        break;
                for (size_t i = 0; i < n; i++)
                        entry_complete(batch[i], code, reason);
        }
}

static void job_aborted(int code, const char *reason) {
        pthread_mutex_lock(&G.lock);
        if (!G.abort_code) {
                G.abort_code = code < 0 ? code : HVD_EABORTED;
                snprintf(G.abort_reason, sizeof G.abort_reason, "%s", reason);
                pthread_cond_broadcast(&G.cond); /* a user thread may wait for the verdict */
        }
        fail_everything(G.abort_code, G.abort_reason);
        pthread_mutex_unlock(&G.lock);
        if (G.backend)
                hvd_backend_abort(G.backend, reason);
        if (GPU.g)
                GPU.mod->abort(GPU.g);
}

/* ---- the background thread ---- */

static bool params_equal(const params_t *a, const params_t *b) {
        if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim || a->reduce_op != b->reduce_op ||
            a->prescale != b->prescale || a->postscale != b->postscale || a->root != b->root ||
            a->process_set != b->process_set || a->device != b->device || a->group_id != b->group_id ||
            a->group_size != b->group_size || a->n_splits != b->n_splits || a->n_set != b->n_set)
                return false;
        if (memcmp(a->shape, b->shape, (size_t) a->ndim * sizeof(int64_t)) != 0)
                return false;
        if (a->n_set && memcmp(a->set_ranks, b->set_ranks, a->n_set * sizeof(uint32_t)) != 0)
                return false;
        return a->n_splits == 0 || memcmp(a->splits, b->splits, a->n_splits * sizeof(int64_t)) == 0;
}

static int params_copy(params_t *dst, const params_t *src) {
        int64_t *s = NULL;
        uint32_t *set = NULL;
        if (src->n_splits) {
                s = malloc(src->n_splits * sizeof *s);
                if (!s)
                        return -ENOMEM;
                memcpy(s, src->splits, src->n_splits * sizeof *s);
        }
        if (src->n_set) {
                set = malloc(src->n_set * sizeof *set);
                if (!set) {
                        free(s);
                        return -ENOMEM;
                }
                memcpy(set, src->set_ranks, src->n_set * sizeof *set);
        }
        params_free(dst);
        *dst = *src;
        dst->splits = s;
        dst->set_ranks = set;
        return 0;
}

static int execute_schedule(const Hvd__Schedule *s);
static void fp_hold_schedule(Hvd__Envelope *env);
static void fp_confirm(const entry_t *e, bool ok);
static void fp_report(bool force);

/* A job of one rank has no daemon: the same negotiation table runs here,
 * and its schedules go straight to the data plane. */
static int solo_negotiate(const Hvd__Ready *ready) {
        char err[ERRLEN];
        int r = hvd_negotiator_submit(G.neg, 0, ready, err, sizeof err);
        if (r < 0) {
                job_aborted(r, err);
                return 0;
        }
        Hvd__Schedule *s = NULL;
        while ((r = hvd_negotiator_take_schedule(G.neg, &s)) > 0) {
                execute_schedule(s);
                hvd_negotiator_schedule_free(&s);
        }
        return r;
}

/* Sends the queued requests as one Ready message, or as several when one
 * would exceed the coordinator's max_message_size (libzmq would drop it by
 * closing the connection, and nobody would be told). A single request too
 * large on its own aborts the job with an error that says so. */
static int send_ready(entry_t **batch, size_t n) {
        Hvd__Request *reqs = calloc(n, sizeof *reqs);
        Hvd__Request **rp = calloc(n, sizeof *rp);
        uint32_t *cached = calloc(n, sizeof *cached);
        uint64_t *waited = calloc(n, sizeof *waited), now = hvd_now_usec();
        size_t n_req = 0, n_cached = 0;
        bool any_waited = false;
        int r = -ENOMEM;
        if (!reqs || !rp || !cached || !waited)
                goto out;
        for (size_t i = 0; i < n; i++) {
                entry_t *e = batch[i];
                known_t *k = hvd_strmap_get(G.known, e->name, strlen(e->name));
                if (k && k->has_id && params_equal(&k->p, &e->p)) {
                        waited[n_cached] = e->fp_posted_usec ? now - e->fp_posted_usec : 0;
                        any_waited = any_waited || e->fp_posted_usec;
                        cached[n_cached++] = k->id;
                        continue;
                }
                if (e->p.kind != HVD__KIND__KIND_JOIN) {
                        if (!k) {
                                k = calloc(1, sizeof *k);
                                if (!k || hvd_strmap_put(G.known, e->name, strlen(e->name), k) < 0) {
                                        free(k);
                                        goto out;
                                }
                        }
                        if (params_copy(&k->p, &e->p) < 0)
                                goto out;
                        k->fast_ok = false; /* until a schedule confirms these parameters */
                }
                Hvd__Request *q = &reqs[n_req];
                hvd__request__init(q);
                q->name = e->name;
                q->kind = e->p.kind;
                q->dtype = e->p.dtype;
                q->n_shape = (size_t) e->p.ndim;
                q->shape = e->p.shape;
                q->reduce_op = e->p.reduce_op;
                q->prescale = e->p.prescale;
                q->postscale = e->p.postscale;
                q->root = e->p.root;
                q->n_splits = e->p.n_splits;
                q->splits = e->p.splits;
                q->device = e->p.device;
                q->process_set = (uint32_t) e->p.process_set;
                q->group_id = e->p.group_id;
                q->group_size = e->p.group_size;
                q->n_set_ranks = e->p.n_set;
                q->set_ranks = e->p.set_ranks;
                rp[n_req++] = q;
        }
        Hvd__Ready ready = HVD__READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ready.n_requests = n_req;
        ready.requests = rp;
        ready.n_cached = n_cached;
        ready.cached = cached;
        ready.done_seq = atomic_load_explicit(&G.done_seq, memory_order_relaxed);
        ready.busy_usec = atomic_load_explicit(&G.busy_usec, memory_order_relaxed);
        ready.n_cached_waited_usec = any_waited ? n_cached : 0;
        ready.cached_waited_usec = waited;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        if (G.solo)
                r = solo_negotiate(&ready);
        else {
                /* the fast path's counters first: whatever this Ready leads
                 * to, the coordinator has counted what ran before it */
                fp_report(true);
                uint64_t limit = G.max_message_bytes ? G.max_message_bytes : HVD_WIRE_MAX_MESSAGE_BYTES;
                env.version = HVD_PROTOCOL_VERSION;
                size_t bytes = hvd__envelope__get_packed_size(&env);
                if (bytes <= limit)
                        r = hvd_wire_send(G.sock, &env, 0);
                else if (n > 1) {
                        r = send_ready(batch, n / 2);
                        if (r >= 0)
                                r = send_ready(batch + n / 2, n - n / 2);
                } else {
                        char reason[512];
                        snprintf(reason, sizeof reason,
                                 "tensor '%.200s': its request takes %zu bytes, more than the coordinator's "
                                 "max_message_size (%" PRIu64 " bytes; see hvd.conf(5))",
                                 batch[0]->name, bytes, limit);
                        job_aborted(-EMSGSIZE, reason);
                        r = -EMSGSIZE;
                }
        }
out:
        free(reqs);
        free(rp);
        free(cached);
        free(waited);
        return r;
}

static const char *id_name(uint32_t id) {
        return id < G.n_id_names ? G.id_names[id] : NULL;
}

/* Records that tensor `name` of process set `ps` has cache id `id` (every
 * rank sees every schedule: an entry of another set's row with the same
 * name must not change this rank's cached id). */
static int learn_id(uint32_t id, const char *name, int ps) {
        if (id == HVD_NEGOTIATOR_NO_ID)
                return 0; /* not cached: always sent by name */
        if (id >= (1u << 24))
                return HVD_EPROTO;
        if (id >= G.n_id_names) {
                size_t n = HVD_MAX((size_t) id + 1, G.n_id_names * 2);
                char **p = realloc(G.id_names, n * sizeof *p);
                if (!p)
                        return -ENOMEM;
                memset(p + G.n_id_names, 0, (n - G.n_id_names) * sizeof *p);
                G.id_names = p;
                G.n_id_names = n;
        }
        if (!G.id_names[id] && !(G.id_names[id] = strdup(name)))
                return -ENOMEM;
        known_t *k = hvd_strmap_get(G.known, name, strlen(name));
        if (k && k->p.process_set == ps) {
                k->id = id;
                k->has_id = true;
        }
        return 0;
}

/* Prepares one member of a scheduled op: finds this rank's entry (or
 * contributes as a joined rank) and allocates outputs hvd owns. */
static int prepare_member(const Hvd__Op *op, const Hvd__Entry *en, hvd_xmember_t *x, entry_t **ret, bool joined,
                          char *err, size_t err_len) {
        const char *name = en->name[0] ? en->name : id_name(en->id);
        if (!name) {
                snprintf(err, err_len, "schedule names unknown tensor id %u", en->id);
                return HVD_EPROTO;
        }
        if (en->name[0] && learn_id(en->id, en->name, (int) op->process_set) < 0)
                return -ENOMEM;
        pthread_mutex_lock(&G.lock);
        entry_t *e = hvd_strmap_get(G.inflight, name, strlen(name));
        pthread_mutex_unlock(&G.lock);
        *x = (hvd_xmember_t){
                .count = en->count,
                .row_elems = en->row_elems,
                .rank_rows = en->rank_rows,
                .rows = en->n_shape ? en->shape[0] : 0,
                .splits = en->splits,
        };
        /* ranks of the op: the job, or a process set (indexes into set_ranks) */
        int ss = op->process_set ? (int) op->n_set_ranks : G.size, me = G.rank;
        if (op->process_set) {
                me = -1;
                for (size_t k = 0; k < op->n_set_ranks; k++)
                        if ((int) op->set_ranks[k] == G.rank)
                                me = (int) k;
                if (me < 0) {
                        *ret = NULL;
                        return 0; /* not a member */
                }
        }
        if ((op->kind == HVD__KIND__KIND_ALLGATHER && en->n_rank_rows != (size_t) ss) ||
            (op->kind == HVD__KIND__KIND_ALLTOALL && en->n_splits != (size_t) ss * (size_t) ss)) {
                snprintf(err, err_len, "schedule entry '%s' has the wrong number of ranks", name);
                return HVD_EPROTO;
        }
        *ret = e;
        if (!e) {
                if (!joined) {
                        snprintf(err, err_len, "schedule names tensor '%s', which this rank did not submit", name);
                        return HVD_EPROTO;
                }
                return 0; /* in = out = NULL: zeros in, nothing out */
        }
        x->in = e->in;
        x->out = e->out;
        x->stream = e->stream;
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t out_elems = 0;
        int64_t rows0 = 0;
        switch (op->kind) {
        case HVD__KIND__KIND_ALLGATHER:
                for (int r = 0; r < ss; r++)
                        rows0 += en->rank_rows[r];
                out_elems = (uint64_t) rows0 * en->row_elems;
                break;
        case HVD__KIND__KIND_ALLTOALL:
                for (int r = 0; r < ss; r++)
                        rows0 += en->splits[(size_t) r * ss + me];
                out_elems = (uint64_t) rows0 * en->row_elems;
                free(e->recv_splits);
                e->recv_splits = calloc((size_t) ss, sizeof(int64_t));
                if (!e->recv_splits)
                        return -ENOMEM;
                for (int r = 0; r < ss; r++)
                        e->recv_splits[r] = en->splits[(size_t) r * ss + me];
                break;
        case HVD__KIND__KIND_REDUCESCATTER: {
                int64_t start;
                hvd_reducescatter_rows(en->n_shape ? en->shape[0] : 0, ss, me, &start, &rows0);
                out_elems = (uint64_t) rows0 * en->row_elems;
                break;
        }
        default: return 0;
        }
        /* one byte at least, so an empty result still has a valid pointer */
        size_t bytes = out_elems * es > 0 ? out_elems * es : 1;
        if (op->device >= 0) {
                /* on the GPU of the op, from the module: the schedule has fixed the size */
                if (!GPU.g) {
                        snprintf(err, err_len, "'%s': %s", name, GPU.why[0] ? GPU.why : "no GPU data plane");
                        return HVD_ENODEVICE;
                }
                if (!(e->alloc_node = calloc(1, sizeof *e->alloc_node)))
                        return -ENOMEM;
                char merr[512] = "";
                int r = GPU.mod->mem_alloc(GPU.g, bytes, &e->alloc, merr, sizeof merr);
                if (r < 0) {
                        e->alloc = NULL;
                        snprintf(err, err_len, "'%s': output of %zu bytes: %s", name, bytes, merr);
                        return r;
                }
                e->alloc_device = GPU.device; /* op->device only says "a GPU" */
        } else if (!(e->alloc = outbuf_get(bytes, &e->alloc_cap)))
                return -ENOMEM;
        e->alloc_bytes = out_elems * es;
        e->out_ndim = (int) (en->n_shape ? en->n_shape : 1);
        memcpy(e->out_shape, en->shape, en->n_shape * sizeof(int64_t));
        e->out_shape[0] = rows0;
        x->out = e->alloc;
        return 0;
}

static int execute_schedule_ops(const Hvd__Schedule *s);

/* Runs a schedule and keeps the counters the daemon's status shows. */
static int execute_schedule(const Hvd__Schedule *s) {
        uint64_t t0 = hvd_now_usec();
        int r = execute_schedule_ops(s);
        atomic_fetch_add_explicit(&G.busy_usec, hvd_now_usec() - t0, memory_order_relaxed);
        atomic_store_explicit(&G.done_seq, s->seq, memory_order_relaxed);
        return r;
}

static int execute_schedule_ops(const Hvd__Schedule *s) {
        char err[ERRLEN];
        int r = 0;
        if (s->seq != G.next_seq) {
                snprintf(err, sizeof err, "schedule %" PRIu64 " arrived, expected %" PRIu64, s->seq, G.next_seq);
                job_aborted(HVD_EPROTO, err);
                return HVD_EPROTO;
        }
        G.next_seq++;
        if (hvd_timeline_on())
                hvd_timeline_schedule(s, entry_name);
        /* errors first: those tensors never reach the data plane */
        for (size_t i = 0; i < s->n_errors; i++) {
                const Hvd__TensorError *te = s->errors[i];
                pthread_mutex_lock(&G.lock);
                entry_t *e = hvd_strmap_get(G.inflight, te->name, strlen(te->name));
                /* the tensor has an id now, like a scheduled one */
                int r2 = e ? learn_id(te->id, te->name, e->p.process_set) : 0;
                if (e)
                        fp_confirm(e, false);
                if (e)
                        entry_complete(e, te->code < 0 ? te->code : HVD_EMISMATCH, te->message);
                pthread_mutex_unlock(&G.lock);
                if (r2 < 0) {
                        job_aborted(-ENOMEM, "out of memory");
                        return -ENOMEM;
                }
        }
        bool in_group = false;
        for (size_t i = 0; i < s->n_ops; i++) {
                const Hvd__Op *op = s->ops[i];
                bool gpu = op->device >= 0;
                bool joined = false;
                for (size_t k = 0; k < op->n_joined; k++)
                        if ((int) op->joined[k] == G.rank)
                                joined = true;
                hvd_xmember_t xm_small[16];
                entry_t *em_small[16] = { NULL };
                hvd_xmember_t *xm = op->n_entries <= 16 ? xm_small : calloc(op->n_entries, sizeof *xm);
                entry_t **em = op->n_entries <= 16 ? em_small : calloc(op->n_entries, sizeof *em);
                if (!xm || !em) {
                        r = -ENOMEM;
                        snprintf(err, sizeof err, "out of memory executing a schedule");
                } else {
                        for (size_t k = 0; k < op->n_entries && r >= 0; k++)
                                r = prepare_member(op, op->entries[k], &xm[k], &em[k], joined, err, sizeof err);
                }
                /* the op holds its handles: an abort while it runs may complete
                 * them, and their owners may release them, before it returns */
                pthread_mutex_lock(&G.lock);
                for (size_t k = 0; k < op->n_entries && em; k++)
                        if (em[k])
                                em[k]->h->refs++;
                pthread_mutex_unlock(&G.lock);
                if (r >= 0) {
                        const char *first = op->n_entries ? (op->entries[0]->name[0] ? op->entries[0]->name
                                                                                     : id_name(op->entries[0]->id))
                                                          : "barrier";
                        hvd_xop_t x = {
                                .kind = op->kind,
                                .dtype = (hvd_dtype_t) op->dtype,
                                .reduce_op = (hvd_reduce_op_t) op->reduce_op,
                                .prescale = op->prescale,
                                .postscale = op->postscale,
                                .root = op->root,
                                .name = first ? first : "?",
                                .n = op->n_entries,
                                .m = xm,
                                .process_set = op->process_set,
                                .set_ranks = op->set_ranks,
                                .n_set = op->n_set_ranks,
                                /* the schedule says only "a GPU" (ranks use different
                                 * ones); this rank's tensors are on its own, which
                                 * check_request made sure of. Non-members of a
                                 * process set get the op too: it is theirs to take
                                 * part in the set's communicator split. */
                                .device = gpu ? GPU.device : op->device,
                        };
                        bool tl = hvd_timeline_on();
                        if (tl) {
                                hvd_timeline_op_begin(op, entry_name, gpu);
                                x.phase = hvd_timeline_phase;
                        }
                        if (gpu) {
                                /* consecutive GPU ops share one NCCL group; their
                                 * entries complete when their events fire */
                                if (!in_group && GPU.g && (r = GPU.mod->group_start(GPU.g, err, sizeof err)) >= 0)
                                        in_group = true;
                                if (r >= 0)
                                        r = gpu_enqueue(&x, em, err, sizeof err);
                                bool last = i + 1 == s->n_ops || s->ops[i + 1]->device < 0;
                                if (in_group && (last || r < 0)) {
                                        int r2 = GPU.mod->group_end(GPU.g, err, sizeof err);
                                        in_group = false;
                                        if (r >= 0)
                                                r = r2;
                                }
                        } else
                                r = hvd_backend_execute(G.backend, &x, err, sizeof err);
                        if (tl)
                                hvd_timeline_op_end(r);
                }
                if (r < 0)
                        r = data_plane_verdict(r, err, true);
                for (size_t k = 0; k < op->n_entries && em && r >= 0 && !gpu && !op->process_set; k++)
                        if (em[k])
                                fp_confirm(em[k], true);
                pthread_mutex_lock(&G.lock);
                for (size_t k = 0; k < op->n_entries && xm && em && (!gpu || r < 0); k++)
                        if (em[k])
                                entry_complete(em[k], r < 0 ? r : 0, r < 0 ? err : NULL);
                for (size_t k = 0; k < op->n_entries && em; k++)
                        if (em[k])
                                handle_unref(em[k]->h);
                pthread_mutex_unlock(&G.lock);
                if (xm != xm_small)
                        free(xm);
                if (em != em_small)
                        free(em);
                if (r < 0) {
                        job_aborted(r, err);
                        return r;
                }
        }
        if (s->join_done_last_rank >= 0) {
                hvd_fastpath_set_joining(G.fp, false);
                pthread_mutex_lock(&G.lock);
                entry_t *e = hvd_strmap_get(G.inflight, HVD_JOIN_NAME, strlen(HVD_JOIN_NAME));
                if (e) {
                        e->h->result = s->join_done_last_rank;
                        entry_complete(e, 0, NULL);
                }
                pthread_mutex_unlock(&G.lock);
        }
        return 0;
}

/* Keeps a copy of a schedule's packed envelope under key. */
static int sched_keep(uint32_t key, const void *data, size_t len) {
        uint8_t *copy = malloc(len ? len : 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, data, len);
        free(G.sched_kept[key]);
        G.sched_kept[key] = copy;
        G.sched_kept_len[key] = len;
        return 0;
}

/* The schedule kept under key k, as a new envelope in *env, with seq. */
static int sched_repeat(uint32_t k, uint64_t seq, Hvd__Envelope **env, char *err, size_t err_len) {
        if (!G.sched_kept[k]) {
                snprintf(err, err_len, "schedule %" PRIu64 " repeats key %u, which this rank does not hold", seq, k);
                return HVD_EPROTO;
        }
        int r = hvd_wire_decode(G.sched_kept[k], G.sched_kept_len[k], 0, env, err, err_len);
        if (r < 0)
                return r;
        (*env)->schedule->seq = seq;
        (*env)->schedule->keep_key = 0;
        return 0;
}

/* A schedule to keep (keep_key): a copy of its bytes; a repeat
 * (repeat_key): the kept one again, with the repeat's seq, in *env. */
static int schedule_by_key(const void *data, size_t len, Hvd__Envelope **env, char *err, size_t err_len) {
        const Hvd__Schedule *s = (*env)->schedule;
        if (s->keep_key) {
                if (sched_keep(s->keep_key, data, len) < 0) {
                        hvd_wire_free(env);
                        snprintf(err, err_len, "out of memory");
                        return -ENOMEM;
                }
                return 0;
        }
        if (!s->repeat_key)
                return 0;
        uint32_t k = s->repeat_key;
        uint64_t seq = s->seq;
        hvd_wire_free(env);
        return sched_repeat(k, seq, env, err, err_len);
}

static int recv_envelope(int flags, Hvd__Envelope **ret) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, G.sock, flags) < 0) {
                int r = -zmq_errno();
                zmq_msg_close(&msg);
                return r;
        }
        char err[512];
        int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, ret, err, sizeof err);
        if (r >= 0 && (*ret)->body_case == HVD__ENVELOPE__BODY_SCHEDULE) {
                const Hvd__Schedule *s = (*ret)->schedule;
                if (s->board && !G.fp_scribe) {
                        snprintf(err, sizeof err,
                                 "schedule %" PRIu64 " came for the board, but this rank does not post "
                                 "schedules there",
                                 s->seq);
                        hvd_wire_free(ret);
                        r = HVD_EPROTO;
                } else if (s->board && G.fp) {
                        /* for the others: its record carries these bytes */
                        r = hvd_fastpath_schedule_inline(G.fp, s->seq, zmq_msg_data(&msg), zmq_msg_size(&msg));
                        if (r < 0) {
                                snprintf(err, sizeof err, "schedule %" PRIu64 ": cannot post it on the board: %s",
                                         s->seq, hvd_strerror(r));
                                hvd_wire_free(ret);
                        }
                }
                /* node mode: kept and repeated schedules resolve in seq order,
                 * when they run (fp_run): some come through the board */
                if (r >= 0 && !G.fp_node)
                        r = schedule_by_key(zmq_msg_data(&msg), zmq_msg_size(&msg), ret, err, sizeof err);
        }
        zmq_msg_close(&msg);
        if (r < 0) {
                char reason[700];
                snprintf(reason, sizeof reason, "invalid message from the coordinator: %s", err);
                job_aborted(HVD_EPROTO, reason);
        }
        return r;
}

static bool daemon_lost(void);

static void handle_message(Hvd__Envelope *env) {
        char reason[ERRLEN + 64 + HVD_WIRE_MAX_JOB_ID];
        switch (env->body_case) {
        case HVD__ENVELOPE__BODY_SCHEDULE:
                if (G.fp)
                        fp_hold_schedule(env); /* runs at its record in the board's log */
                else if (!G.abort_code)
                        execute_schedule(env->schedule);
                break;
        case HVD__ENVELOPE__BODY_ABORT:
                snprintf(reason, sizeof reason, "job %s aborted: %s%s", G.job_id, env->abort->reason,
                         env->abort->lost_rank >= 0 && env->abort->lost_rank == G.rank
                                 ? " (this rank: the coordinator gave up on it)"
                                 : "");
                job_aborted(env->abort->code < 0 ? env->abort->code : HVD_EABORTED, reason);
                break;
        case HVD__ENVELOPE__BODY_ERROR:
                /* from a coordinator that replaced the one this rank joined */
                if (daemon_lost())
                        break;
                snprintf(reason, sizeof reason, "coordinator: %s", env->error->message);
                job_aborted(env->error->code < 0 ? env->error->code : HVD_EPROTO, reason);
                break;
        case HVD__ENVELOPE__BODY_TIMELINE_CONTROL: timeline_remote(env->timeline_control); break;
        default: job_aborted(HVD_EPROTO, "unexpected message from the coordinator"); break;
        }
}

/* Sends a heartbeat when one is due (background thread: the socket's
 * owner). Goes on after an abort: a rank the coordinator gave up on learns
 * it from the refusal of its heartbeat as much as from the abort. */
static void heartbeat_maybe(void) {
        if (!G.sock || !G.hb_interval_usec)
                return;
        uint64_t now = hvd_now_usec();
        if (now - G.last_hb_usec < G.hb_interval_usec)
                return;
        G.last_hb_usec = now;
        Hvd__Heartbeat hb = HVD__HEARTBEAT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        hb.epoch = G.epoch;
        hb.sent_usec = now;
        env.body_case = HVD__ENVELOPE__BODY_HEARTBEAT;
        env.heartbeat = &hb;
        (void) hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT); /* a full pipe: the next one, or the timeout, tells */
}

/* Milliseconds until the next heartbeat is due (-1: none), for a poll. */
static long heartbeat_timeout_ms(void) {
        if (!G.sock || !G.hb_interval_usec)
                return -1;
        uint64_t now = hvd_now_usec(), due = G.last_hb_usec + G.hb_interval_usec;
        return now >= due ? 0 : (long) ((due - now + 999) / 1000);
}

/* The coordinator's process ended: nothing more will be scheduled. */
static bool daemon_lost(void) {
        if (G.daemon_pidfd < 0)
                return false;
        struct pollfd p = { .fd = G.daemon_pidfd, .events = POLLIN };
        if (poll(&p, 1, 0) <= 0)
                return false;
        close(G.daemon_pidfd);
        G.daemon_pidfd = -1;
        /* its last words (an abort saying why) may still be on the way */
        uint64_t until = hvd_now_usec() + 200 * USEC_PER_MSEC;
        for (uint64_t now; !G.abort_code && (now = hvd_now_usec()) < until;) {
                zmq_pollitem_t it = { .socket = G.sock, .events = ZMQ_POLLIN };
                if (zmq_poll(&it, 1, (long) ((until - now) / 1000 + 1)) <= 0)
                        break;
                Hvd__Envelope *env = NULL;
                if (recv_envelope(ZMQ_DONTWAIT, &env) < 0)
                        break;
                /* an error now is a new coordinator's answer (restarted on
                 * the same socket, it refuses this connection): the lost one
                 * is the verdict */
                if (env->body_case == HVD__ENVELOPE__BODY_ABORT)
                        handle_message(env);
                hvd_wire_free(&env); /* anything else cannot run without the coordinator anyway */
        }
        if (!G.abort_code) {
                char reason[128 + HVD_WIRE_MAX_JOB_ID];
                snprintf(reason, sizeof reason, "job %s: coordinator lost: hvd-coordinatord (pid %d) exited", G.job_id,
                         (int) G.daemon_pid);
                job_aborted(HVD_EABORTED, reason);
        }
        return true;
}

static void hold_message(Hvd__Envelope *env);

/* Waits up to usec for an abort from the coordinator; other messages are
 * kept for later. */
static void await_abort(uint64_t usec) {
        uint64_t until = hvd_now_usec() + usec;
        for (uint64_t now; !G.abort_code && (now = hvd_now_usec()) < until;) {
                /* the coordinator's own end is a verdict too */
                zmq_pollitem_t it[2] = { { .socket = G.sock, .events = ZMQ_POLLIN },
                                         { .fd = G.daemon_pidfd, .events = ZMQ_POLLIN } };
                if (zmq_poll(it, G.daemon_pidfd >= 0 ? 2 : 1, (long) ((until - now) / 1000 + 1)) <= 0)
                        continue;
                if (G.daemon_pidfd >= 0 && (it[1].revents & ZMQ_POLLIN)) {
                        daemon_lost();
                        continue;
                }
                Hvd__Envelope *env = NULL;
                if (recv_envelope(ZMQ_DONTWAIT, &env) < 0)
                        return;
                if (env->body_case == HVD__ENVELOPE__BODY_ABORT || env->body_case == HVD__ENVELOPE__BODY_ERROR) {
                        handle_message(env);
                        hvd_wire_free(&env);
                } else
                        hold_message(env);
        }
}

/* Called by the data plane while it waits: an abort from the daemon must
 * end the wait; anything else is kept for after the current operation. */
static int wait_check(void *userdata, char *err, size_t err_len) {
        /* a user thread running the fast path: the background thread reads
         * the socket, and an abort reaches the data plane's shared flag */
        if (!pthread_equal(pthread_self(), G.thread))
                return 0;
        heartbeat_maybe(); /* the wait may be long: the coordinator must know this rank is alive */
        if (daemon_lost()) {
                snprintf(err, err_len, "%s", G.abort_reason);
                return HVD_EABORTED;
        }
        for (;;) {
                Hvd__Envelope *env = NULL;
                int r = recv_envelope(ZMQ_DONTWAIT, &env);
                if (r == -EAGAIN)
                        return 0;
                if (r < 0) {
                        snprintf(err, err_len, "%s", G.abort_reason);
                        return r;
                }
                if (env->body_case == HVD__ENVELOPE__BODY_ABORT || env->body_case == HVD__ENVELOPE__BODY_ERROR) {
                        handle_message(env);
                        hvd_wire_free(&env);
                        snprintf(err, err_len, "%s", G.abort_reason);
                        return G.abort_code ? G.abort_code : HVD_EABORTED;
                }
                hold_message(env);
        }
}

/* Keeps a message for after the operation in progress (takes env). */
static void hold_message(Hvd__Envelope *env) {
        pending_msg_t *p = calloc(1, sizeof *p);
        if (!p) {
                hvd_wire_free(&env);
                job_aborted(-ENOMEM, "out of memory");
                return;
        }
        p->env = env;
        if (G.held_tail)
                G.held_tail->next = p;
        else
                G.held_head = p;
        G.held_tail = p;
}

static void process_held(void) {
        while (G.held_head) {
                pending_msg_t *p = G.held_head;
                G.held_head = p->next;
                if (!G.held_head)
                        G.held_tail = NULL;
                handle_message(p->env);
                hvd_wire_free(&p->env);
                free(p);
        }
}

/* ---- the fast path (fastpath.c): one node, tensors with a cache id ----
 *
 * Order invariant: on a job with a fast path, a rank runs nothing when it
 * arrives; it runs the board's log in order. The log holds the fast
 * records (cache ids every local rank posted, fused below by the same rules
 * as the coordinator's, from the same sorted ids and the same threshold, so
 * every rank builds the same operations) and a marker per coordinator
 * schedule (appended by the first rank that received it; a rank that meets
 * a marker first waits for its schedule). So cached and uncached tensors of
 * one cycle run in one order on every rank, whichever path each took.
 * A tensor takes the fast path only with parameters a schedule confirmed
 * (fast_ok: every rank agreed on them); anything else — a new name, new
 * parameters, groups, process sets, GPUs, a join — goes to the coordinator. */

#define FP_REPORT_USEC (50 * USEC_PER_MSEC)

static void fp_hold_schedule(Hvd__Envelope *env) {
        held_schedule_t *h = calloc(1, sizeof *h);
        if (!h) {
                job_aborted(-ENOMEM, "out of memory");
                return;
        }
        h->s = env->schedule;
        env->schedule = NULL;
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        /* in seq order, whatever order the waits kept them in */
        held_schedule_t **pp = &G.sched_head;
        while (*pp && (*pp)->s->seq < h->s->seq)
                pp = &(*pp)->next;
        /* node mode: one local rank 0 took for the board and left (its daemon
         * sends them again): ran from the board already, or held already */
        if (h->s->seq <= hvd_fastpath_ran_seq(G.fp) || (*pp && (*pp)->s->seq == h->s->seq)) {
                hvd_negotiator_schedule_free(&h->s);
                free(h);
                return;
        }
        h->next = *pp;
        *pp = h;
        if (!h->next)
                G.sched_tail = h;
        if (hvd_fastpath_schedule_arrived(G.fp, h->s->seq) < 0)
                job_aborted(-ENOMEM, "out of memory");
}

static void fp_free_held(void) {
        while (G.sched_head) {
                held_schedule_t *h = G.sched_head;
                G.sched_head = h->next;
                hvd_negotiator_schedule_free(&h->s);
                free(h);
        }
        G.sched_tail = NULL;
}

/* A schedule ran e (ok) or refused it: its parameters are (not) known to
 * be every rank's. */
static void fp_confirm(const entry_t *e, bool ok) {
        if (!G.fp)
                return;
        known_t *k = hvd_strmap_get(G.known, e->name, strlen(e->name));
        if (!k)
                return;
        if (!ok)
                k->fast_ok = false;
        else if (k->has_id && k->p.process_set == 0 && params_equal(&k->p, &e->p))
                k->fast_ok = true;
}

/* 1: e may take the fast path with cache id *id; 0: it has an id but goes
 * to the coordinator; -1: the fast path does not apply. Counts e as an
 * instance of its id once. */
static int fp_classify(entry_t *e, uint32_t *id) {
        if (e->p.process_set != 0 || e->p.group_size > 1)
                return -1;
        /* node mode runs nothing from the board: any collective of every
         * rank whose schedule names its ranks' parts by cache id alone */
        if (G.fp_node ? e->p.kind != HVD__KIND__KIND_ALLREDUCE && e->p.kind != HVD__KIND__KIND_BROADCAST &&
                                e->p.kind != HVD__KIND__KIND_ALLGATHER && e->p.kind != HVD__KIND__KIND_REDUCESCATTER
                      : e->p.kind != HVD__KIND__KIND_ALLREDUCE || e->p.device != HVD_DEVICE_CPU)
                return -1;
        /* rank 0's timeline marks each rank's readiness as the coordinator
         * sees it: while it records, rank 0 sends everything there (the
         * other ranks follow at once, as for any tensor sent the normal way) */
        if (hvd_timeline_on())
                return -1;
        known_t *k = hvd_strmap_get(G.known, e->name, strlen(e->name));
        if (!k || !k->has_id || k->id >= HVD_FASTPATH_MAX_IDS || k->p.process_set != 0)
                return -1;
        if (!e->fp_counted) {
                e->fp_counted = true;
                hvd_fastpath_instance(G.fp, k->id);
        }
        *id = k->id;
        return k->fast_ok && params_equal(&k->p, &e->p) ? 1 : 0;
}

static uint64_t entry_count(const entry_t *e) {
        uint64_t c = 1;
        for (int d = 0; d < e->p.ndim; d++)
                c *= (uint64_t) e->p.shape[d];
        return c;
}

/* Runs one fast record: ids ascending, every one of them in flight here. */
static int fp_execute(const uint32_t *ids, uint32_t n) {
        char err[ERRLEN];
        entry_t *em[64];
        hvd_fusion_item_t items[64];
        uint32_t op_of[64];
        hvd_fusion_op_t ops[64];
        hvd_xmember_t xm[64];
        entry_t *opm[64];
        int r = 0;
        if (n > ELEMENTSOF(em)) {
                job_aborted(HVD_EPROTO, "fast path: record too long");
                return HVD_EPROTO;
        }
        pthread_mutex_lock(&G.lock);
        for (uint32_t i = 0; i < n; i++) {
                const char *name = id_name(ids[i]);
                em[i] = name ? hvd_strmap_get(G.inflight, name, strlen(name)) : NULL;
                if (!em[i]) {
                        for (uint32_t k = 0; k < i; k++)
                                handle_unref(em[k]->h);
                        pthread_mutex_unlock(&G.lock);
                        snprintf(err, sizeof err, "fast path: tensor id %u is not in flight on rank %d", ids[i],
                                 G.rank);
                        job_aborted(HVD_EPROTO, err);
                        return HVD_EPROTO;
                }
                em[i]->h->refs++; /* the op holds its handles, as in execute_schedule */
        }
        pthread_mutex_unlock(&G.lock);
        for (uint32_t i = 0; i < n; i++) {
                const entry_t *e = em[i];
                items[i] = (hvd_fusion_item_t){
                        .kind = HVD__KIND__KIND_ALLREDUCE,
                        .dtype = e->p.dtype,
                        .reduce_op = e->p.reduce_op,
                        .root = 0,
                        .device = -1,
                        .process_set = 0,
                        .prescale = e->p.prescale,
                        .postscale = e->p.postscale,
                        .bytes = entry_count(e) * hvd_dtype_size(e->p.dtype),
                };
        }
        size_t n_ops = hvd_fusion_plan(items, n, G.fusion_threshold, op_of, ops);
        for (size_t k = 0; k < n_ops && r >= 0; k++) {
                size_t m = 0;
                for (uint32_t i = 0; i < n; i++) {
                        if (op_of[i] != k)
                                continue;
                        entry_t *e = em[i];
                        xm[m] = (hvd_xmember_t){
                                .in = e->in, .out = e->out, .count = entry_count(e), .row_elems = entry_count(e)
                        };
                        opm[m++] = e;
                }
                hvd_xop_t x = {
                        .kind = HVD__KIND__KIND_ALLREDUCE,
                        .dtype = opm[0]->p.dtype,
                        .reduce_op = opm[0]->p.reduce_op,
                        .prescale = opm[0]->p.prescale,
                        .postscale = opm[0]->p.postscale,
                        .name = opm[0]->name,
                        .n = m,
                        .m = xm,
                        .device = HVD_DEVICE_CPU,
                };
                r = hvd_backend_execute(G.backend, &x, err, sizeof err);
                if (r < 0)
                        r = data_plane_verdict(r, err, pthread_equal(pthread_self(), G.thread));
                if (G.local_rank == 0) {
                        G.fp_done.ops++;
                        G.fp_done.tensors += m;
                        G.fp_done.fused += m > 1 ? m : 0;
                        G.fp_done.bytes += ops[k].bytes;
                }
                G.fp_done.hits += m;
                pthread_mutex_lock(&G.lock);
                for (size_t i = 0; i < m; i++)
                        entry_complete(opm[i], r < 0 ? r : 0, r < 0 ? err : NULL);
                pthread_mutex_unlock(&G.lock);
                /* a user thread may be waiting on the board for these */
                hvd_fastpath_kick(G.fp);
        }
        pthread_mutex_lock(&G.lock);
        for (uint32_t i = 0; i < n; i++)
                handle_unref(em[i]->h);
        pthread_mutex_unlock(&G.lock);
        if (r < 0)
                job_aborted(r, err);
        return r;
}

/* A schedule local rank 0 posted inline: its packed envelope, decoded. */
static int fp_inline_schedule(const hvd_fastpath_record_t *rec, Hvd__Schedule **ret, char *err, size_t len) {
        Hvd__Envelope *env = NULL;
        char why[400];
        int r = hvd_wire_decode(rec->bytes, rec->n_bytes, 0, &env, why, sizeof why);
        if (r < 0) {
                snprintf(err, len, "invalid schedule on the board: %s", why);
                return HVD_EPROTO;
        }
        if (env->body_case != HVD__ENVELOPE__BODY_SCHEDULE || env->schedule->seq != rec->seq) {
                snprintf(err, len, "the board's record of schedule %" PRIu64 " holds another message", rec->seq);
                hvd_wire_free(&env);
                return HVD_EPROTO;
        }
        *ret = TAKE_PTR(env->schedule);
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        hvd_wire_free(&env);
        return 0;
}

/* Node mode: a schedule kept by key is kept, and a repeat becomes the kept
 * one, as it runs (in seq order; schedule_by_key does it on arrival where
 * every schedule comes on the socket, in that same order). */
static int node_schedule_keys(Hvd__Schedule **sp, char *err, size_t len) {
        Hvd__Schedule *s = *sp;
        if (s->keep_key) {
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.version = HVD_PROTOCOL_VERSION;
                env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
                env.schedule = s;
                size_t n = hvd__envelope__get_packed_size(&env);
                uint8_t *packed = malloc(n ? n : 1);
                int r = packed ? sched_keep(s->keep_key, packed, hvd__envelope__pack(&env, packed)) : -ENOMEM;
                free(packed);
                if (r < 0)
                        snprintf(err, len, "out of memory");
                return r;
        }
        if (!s->repeat_key)
                return 0;
        Hvd__Envelope *env = NULL;
        char why[400];
        int r = sched_repeat(s->repeat_key, s->seq, &env, why, sizeof why);
        if (r < 0) {
                snprintf(err, len, "invalid message from the coordinator: %s", why);
                return HVD_EPROTO;
        }
        hvd_negotiator_schedule_free(sp);
        *sp = TAKE_PTR(env->schedule);
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        hvd_wire_free(&env);
        return 0;
}

static int fp_run(void *userdata, const hvd_fastpath_record_t *rec) {
        (void) userdata;
        if (G.abort_code)
                return G.abort_code;
        if (G.fp_node && !rec->slow) {
                /* every local rank is ready for rec's ids: the appender tells
                 * the coordinator, once for the host; every rank's tensors
                 * wait for the schedule as if each had sent them */
                if (rec->appender != G.local_rank)
                        return 0;
                pthread_mutex_lock(&G.lock);
                for (uint32_t i = 0; i < rec->n && G.fp_node_n < HVD_FASTPATH_MAX_IDS; i++) {
                        const char *name = id_name(rec->ids[i]);
                        const entry_t *e = name ? hvd_strmap_get(G.inflight, name, strlen(name)) : NULL;
                        G.fp_node_posted[G.fp_node_n] = e ? e->fp_posted_usec : 0;
                        G.fp_node_ids[G.fp_node_n++] = rec->ids[i];
                }
                pthread_mutex_unlock(&G.lock);
                return 0;
        }
        if (!rec->slow)
                return fp_execute(rec->ids, rec->n);
        if (!G.sched_head || G.sched_head->s->seq != rec->seq)
                process_held(); /* a wait may have kept it */
        /* node mode: copies of schedules this rank ran from the board */
        while (G.fp_node && G.sched_head && G.sched_head->s->seq < rec->seq) {
                held_schedule_t *old = G.sched_head;
                G.sched_head = old->next;
                if (!G.sched_head)
                        G.sched_tail = NULL;
                hvd_negotiator_schedule_free(&old->s);
                free(old);
        }
        held_schedule_t *h = G.sched_head;
        Hvd__Schedule *s = NULL;
        char err[ERRLEN];
        int r = 0;
        if (h && h->s->seq == rec->seq) {
                G.sched_head = h->next;
                if (!G.sched_head)
                        G.sched_tail = NULL;
                s = TAKE_PTR(h->s);
                free(h);
        } else if (rec->n_bytes && (!h || h->s->seq > rec->seq)) {
                /* posted inline by local rank 0 (node mode) */
                if ((r = fp_inline_schedule(rec, &s, err, sizeof err)) < 0) {
                        job_aborted(r, err);
                        return r;
                }
        } else {
                if (!h)
                        snprintf(err, sizeof err, "fast path: a schedule's marker came before the schedule");
                else
                        snprintf(err, sizeof err, "fast path: schedule %" PRIu64 " arrived, expected %" PRIu64,
                                 h->s->seq, rec->seq);
                job_aborted(HVD_EPROTO, err);
                return HVD_EPROTO;
        }
        if (G.fp_node && (r = node_schedule_keys(&s, err, sizeof err)) < 0)
                job_aborted(r, err);
        else
                r = execute_schedule(s);
        hvd_negotiator_schedule_free(&s);
        return r < 0 ? r : G.abort_code;
}

typedef struct fp_demoted {
        entry_t *e[64];
        size_t n;
} fp_demoted_t;

static void fp_demote(void *userdata, uint32_t id) {
        fp_demoted_t *d = userdata;
        const char *name = id_name(id);
        pthread_mutex_lock(&G.lock);
        entry_t *e = name ? hvd_strmap_get(G.inflight, name, strlen(name)) : NULL;
        pthread_mutex_unlock(&G.lock);
        if (e && d->n < ELEMENTSOF(d->e))
                d->e[d->n++] = e;
}

/* Sends the fast path's counters to the coordinator (for its status). */
static void fp_report(bool force) {
        if (!G.sock || !memcmp(&G.fp_done, &G.fp_sent, sizeof G.fp_done))
                return;
        uint64_t now = hvd_now_usec();
        if (!force && now - G.fp_report_usec < FP_REPORT_USEC)
                return;
        Hvd__Done done = HVD__DONE__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        done.fast_path_tensors = G.fp_done.tensors - G.fp_sent.tensors;
        done.fast_path_ops = G.fp_done.ops - G.fp_sent.ops;
        done.fast_path_fused_tensors = G.fp_done.fused - G.fp_sent.fused;
        done.fast_path_bytes = G.fp_done.bytes - G.fp_sent.bytes;
        done.fast_path_cache_hits = G.fp_done.hits - G.fp_sent.hits;
        env.body_case = HVD__ENVELOPE__BODY_DONE;
        env.done = &done;
        if (hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT) == 0)
                G.fp_sent = G.fp_done;
        G.fp_report_usec = now;
}

/* Node mode: the ids this rank's records completed for the host go to the
 * coordinator in one Ready, at most once a cycle (as ranks send theirs). */
static void fp_node_flush(bool force) {
        uint64_t now = hvd_now_usec();
        if (!G.fp_node_n || G.abort_code || (!force && now < G.fp_node_sent_usec + G.cycle_time_usec))
                return;
        uint64_t waited[HVD_FASTPATH_MAX_IDS];
        for (size_t i = 0; i < G.fp_node_n; i++)
                waited[i] = G.fp_node_posted[i] && now > G.fp_node_posted[i] ? now - G.fp_node_posted[i] : 0;
        Hvd__Ready ready = HVD__READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ready.n_node_cached = G.fp_node_n;
        ready.node_cached = G.fp_node_ids;
        ready.n_node_cached_waited_usec = G.fp_node_n;
        ready.node_cached_waited_usec = waited;
        ready.done_seq = atomic_load_explicit(&G.done_seq, memory_order_relaxed);
        ready.busy_usec = atomic_load_explicit(&G.busy_usec, memory_order_relaxed);
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        if (hvd_wire_send(G.sock, &env, 0) < 0)
                job_aborted(-EIO, "cannot send to the coordinator");
        G.fp_node_n = 0;
        G.fp_node_sent_usec = now;
}

/* One turn of the fast path in the background loop: queued tensors onto
 * the board, the board's records run, withdrawn tensors to the
 * coordinator, counters reported. */
static int fp_cycle(bool user) {
        uint64_t now = hvd_now_usec();
        entry_t *cand[64], *slow[64];
        uint32_t cid[64], forgo[64];
        size_t nc = 0, ns = 0, nf = 0;
        bool join = false;
        pthread_mutex_lock(&G.lock);
        size_t k = 0;
        for (size_t i = 0; i < G.n_queue; i++) {
                entry_t *e = G.queue[i];
                uint32_t id;
                if (nc == ELEMENTSOF(cand) || nf == ELEMENTSOF(forgo)) {
                        G.queue[k++] = e; /* the next turn looks at it */
                        continue;
                }
                int c = e->fp_routed ? -1 : fp_classify(e, &id);
                e->fp_routed = true;
                join = join || e->p.kind == HVD__KIND__KIND_JOIN;
                if (c > 0) {
                        cand[nc] = e;
                        cid[nc++] = id;
                        continue;
                }
                if (c == 0)
                        forgo[nf++] = id;
                G.queue[k++] = e;
        }
        G.n_queue = k;
        pthread_mutex_unlock(&G.lock);
        bool wake_bg = user && k > 0; /* the background thread sends those */
        if (join)
                hvd_fastpath_set_joining(G.fp, true);
        for (size_t i = 0; i < nf; i++)
                hvd_fastpath_forgo(G.fp, forgo[i]);
        for (size_t i = 0; i < nc; i++) {
                if (hvd_fastpath_post(G.fp, cid[i], now) < 0)
                        slow[ns++] = cand[i];
                else
                        cand[i]->fp_posted_usec = now;
        }
        if (ns && user) {
                /* the background thread sends them (it alone uses the socket) */
                pthread_mutex_lock(&G.lock);
                entry_t **nq =
                        G.n_queue + ns <= G.cap_queue ? G.queue : realloc(G.queue, (G.n_queue + ns) * sizeof *nq);
                if (nq) {
                        G.queue = nq;
                        G.cap_queue = HVD_MAX(G.cap_queue, G.n_queue + ns);
                        memcpy(G.queue + G.n_queue, slow, ns * sizeof *slow);
                        G.n_queue += ns;
                }
                pthread_mutex_unlock(&G.lock);
                if (!nq)
                        job_aborted(-ENOMEM, "out of memory");
                ns = 0;
                wake_bg = true;
        }
        if (ns && send_ready(slow, ns) < 0)
                job_aborted(-EIO, "cannot send to the coordinator");
        fp_demoted_t d = { .n = 0 };
        const hvd_fastpath_ops_t ops = { .run = fp_run, .demote = fp_demote };
        hvd_fastpath_step(G.fp, now, user, &ops, &d);
        if (d.n && !G.abort_code && send_ready(d.e, d.n) < 0) /* the background thread's turn only */
                job_aborted(-EIO, "cannot send to the coordinator");
        if (G.fp_node && G.fp_node_n) {
                /* at once when nothing else of this rank awaits a schedule
                 * (nothing to batch with, as for a Ready), else once a cycle */
                pthread_mutex_lock(&G.lock);
                size_t waiting = hvd_strmap_size(G.inflight) - G.n_queue;
                pthread_mutex_unlock(&G.lock);
                waiting -= HVD_MIN(waiting, hvd_fastpath_pending(G.fp));
                fp_node_flush(waiting <= G.fp_node_n);
        }
        if (!user) {
                fp_report(false);
                return 0;
        }
        if (hvd_fastpath_awaits_schedule(G.fp))
                wake_bg = true; /* a schedule's marker: the background thread runs those */
        /* bits to withdraw: only the background thread's turn withdraws and
         * sends them, and it may be asleep on its socket (it went to sleep
         * before this thread took the turns, so it does not know it should
         * come back every millisecond): without this, a tensor another rank
         * sent to the coordinator would wait here forever */
        if (hvd_fastpath_demote_due(G.fp, hvd_now_usec()))
                wake_bg = true;
        if (wake_bg) {
                uint64_t one = 1;
                if (write(G.wake_fd, &one, sizeof one) < 0)
                        (void) 0;
        }
        return hvd_fastpath_busy(G.fp) && !hvd_fastpath_awaits_schedule(G.fp);
}

/* A user thread waiting for h takes the background thread's turn on the
 * fast path when it can (no thread switch on either side of a cached
 * allreduce). Returns 1 when it should wait on the board, 0 when there is
 * nothing for it to do, -1 when the background thread has the turn. */
static int fp_user_turn(void) {
        if (pthread_mutex_trylock(&G.runner) != 0)
                return -1;
        int r = 0;
        if (G.fp && !G.abort_code && !G.stop)
                r = fp_cycle(true);
        pthread_mutex_unlock(&G.runner);
        return r;
}

static void *bg_main(void *arg) {
        entry_t **batch = NULL;
        size_t cap_batch = 0;
        for (;;) {
                heartbeat_maybe();
                /* with a fast path, a user thread waiting for its tensor may
                 * hold the runner and do the turn itself: then only look at
                 * the socket (aborts at once, the rest kept for later) */
                bool runner = !G.fp || pthread_mutex_trylock(&G.runner) == 0;
                if (runner) {
                        process_held();
                        if (atomic_load_explicit(&hvd_timeline_changed, memory_order_relaxed))
                                timeline_sync(); /* before this cycle's readiness goes out */
                        /* while user threads take the turns, the background
                         * thread takes one a millisecond (withdrawals, markers) */
                        uint64_t t = hvd_now_usec();
                        if (G.fp && !G.abort_code &&
                            (!atomic_load(&G.fp_waiters) || t - G.fp_bg_turn_usec >= USEC_PER_MSEC)) {
                                G.fp_bg_turn_usec = t;
                                fp_cycle(false);
                        }
                }
                pthread_mutex_lock(&G.lock);
                bool stop = G.stop;
                bool garbage = G.dev_garbage != NULL; /* handles released while their op ran */
                size_t nq = G.n_queue;
                /* sent, not yet scheduled: while some are, new requests wait
                 * for the cycle so they can be fused; when none are, there is
                 * nothing to batch with and waiting would only add latency */
                size_t outstanding = hvd_strmap_size(G.inflight) - G.n_queue;
                /* queued since fp_cycle looked: it must see them first */
                bool unrouted = G.fp && !G.abort_code && nq && !G.queue[nq - 1]->fp_routed;
                pthread_mutex_unlock(&G.lock);
                if (garbage)
                        gpu_free_garbage();
                if (stop || (runner && unrouted)) {
                        if (runner && G.fp)
                                pthread_mutex_unlock(&G.runner);
                        if (stop)
                                break;
                        continue;
                }
                /* the fast path's tensors are not waiting for a schedule */
                outstanding -= HVD_MIN(outstanding, hvd_fastpath_pending(G.fp));
                uint64_t now = hvd_now_usec();
                long timeout = -1;
                if (nq && runner) {
                        uint64_t due = G.last_send_usec + G.cycle_time_usec;
                        if (now >= due || G.solo || outstanding == 0) {
                                /* take the queue and send it: one message per cycle */
                                pthread_mutex_lock(&G.lock);
                                if (G.n_queue > cap_batch) {
                                        entry_t **nb = realloc(batch, G.n_queue * sizeof *nb);
                                        if (nb) {
                                                batch = nb;
                                                cap_batch = G.n_queue;
                                        }
                                }
                                size_t n = HVD_MIN(G.n_queue, cap_batch);
                                memcpy(batch, G.queue, n * sizeof *batch);
                                memmove(G.queue, G.queue + n, (G.n_queue - n) * sizeof *G.queue);
                                G.n_queue -= n;
                                pthread_mutex_unlock(&G.lock);
                                if (n) {
                                        if (hvd_timeline_on())
                                                hvd_timeline_cycle();
                                        int r = send_ready(batch, n);
                                        if (r < 0)
                                                job_aborted(r, "cannot send to the coordinator");
                                }
                                G.last_send_usec = now;
                                if (G.fp)
                                        pthread_mutex_unlock(&G.runner);
                                continue;
                        }
                        timeout = (long) ((due - now + 999) / 1000);
                }
                if (hvd_timeline_on())
                        hvd_timeline_flush(); /* about to sleep: the file catches up */
                /* GPU work in flight: look at its events often */
                if (GPU.n_pending) {
                        bool more = gpu_poll();
                        gpu_free_garbage(); /* outputs of handles released while pending */
                        if (more && (timeout < 0 || timeout > 1))
                                timeout = 1;
                }
                if (G.fp_node && !G.abort_code) {
                        /* node mode: come back for the host's ids not yet
                         * sent, and for this rank's bits that time out or that
                         * another rank gave up on (looked at every 20 ms while
                         * bits wait, and the log then, so that it never fills) */
                        bool busy = hvd_fastpath_busy(G.fp), awaits = hvd_fastpath_awaits_schedule(G.fp);
                        if (runner) /* always: no user thread takes turns in node mode */
                                pthread_mutex_unlock(&G.runner);
                        uint64_t wake = hvd_fastpath_next_due(G.fp);
                        if (hvd_fastpath_pending(G.fp) || !G.fp_scribe)
                                wake = HVD_MIN(wake, now + 20 * USEC_PER_MSEC);
                        if (G.fp_node_n)
                                wake = HVD_MIN(wake, G.fp_node_sent_usec + G.cycle_time_usec);
                        if (wake != UINT64_MAX) {
                                long ms = wake > now ? (long) ((wake - now + 999) / 1000) : 0;
                                if (timeout < 0 || timeout > ms)
                                        timeout = ms;
                        }
                        /* schedules may come through the board (local rank 0
                         * posts the small ones): while this rank waits for
                         * one, wait on the board's futex a millisecond at a
                         * time, then look at the socket without blocking */
                        if (!G.fp_scribe && (busy || outstanding) && !awaits && timeout != 0) {
                                hvd_fastpath_wait(G.fp, timeout < 0 || timeout > 1 ? USEC_PER_MSEC
                                                                                   : (uint64_t) timeout * 1000);
                                timeout = 0;
                        } else if (awaits && (timeout < 0 || timeout > 1))
                                timeout = 1;
                } else if (G.fp_node) {
                        if (runner)
                                pthread_mutex_unlock(&G.runner);
                } else if (G.fp && (!runner || atomic_load(&G.fp_waiters))) {
                        /* a user thread has the turn: come back soon */
                        if (runner)
                                pthread_mutex_unlock(&G.runner);
                        if (timeout < 0 || timeout > 1)
                                timeout = 1;
                } else if (G.fp && !G.abort_code) {
                        bool busy = hvd_fastpath_busy(G.fp), awaits = hvd_fastpath_awaits_schedule(G.fp);
                        pthread_mutex_unlock(&G.runner);
                        /* counters not yet reported: come back for them */
                        if (memcmp(&G.fp_done, &G.fp_sent, sizeof G.fp_done) && (timeout < 0 || timeout > 50))
                                timeout = 50;
                        /* the board: wait on it (its futex) up to a millisecond at a
                         * time, then look at the socket without blocking */
                        if (busy) {
                                if (awaits) {
                                        if (timeout < 0 || timeout > 1)
                                                timeout = 1;
                                } else if (timeout != 0) {
                                        hvd_fastpath_wait(G.fp, timeout < 0 || timeout > 1 ? USEC_PER_MSEC
                                                                                           : (uint64_t) timeout * 1000);
                                        timeout = 0;
                                }
                        }
                } else if (G.fp)
                        pthread_mutex_unlock(&G.runner);
                zmq_pollitem_t items[3] = {
                        { .fd = G.wake_fd, .events = ZMQ_POLLIN },
                        { .socket = G.sock, .events = ZMQ_POLLIN },
                        { .fd = G.daemon_pidfd, .events = ZMQ_POLLIN },
                };
                long hb_ms = heartbeat_timeout_ms();
                if (hb_ms >= 0 && (timeout < 0 || timeout > hb_ms))
                        timeout = hb_ms;
                int n = zmq_poll(items, !G.sock ? 1 : G.daemon_pidfd >= 0 ? 3 : 2, timeout);
                /* before reading: a process resumed after a stop says it is
                 * back before it acts on what came meanwhile */
                heartbeat_maybe();
                if (n < 0) {
                        if (zmq_errno() == EINTR)
                                continue;
                        job_aborted(-zmq_errno(), "polling the coordinator socket failed");
                        break;
                }
                if (items[0].revents & ZMQ_POLLIN) {
                        uint64_t x;
                        if (read(G.wake_fd, &x, sizeof x) < 0)
                                (void) 0;
                }
                if (G.daemon_pidfd >= 0 && (items[2].revents & ZMQ_POLLIN))
                        daemon_lost();
                if (G.sock && (items[1].revents & ZMQ_POLLIN)) {
                        for (int k = 0; k < 64; k++) {
                                Hvd__Envelope *env = NULL;
                                if (recv_envelope(ZMQ_DONTWAIT, &env) < 0)
                                        break;
                                if (G.fp && env->body_case != HVD__ENVELOPE__BODY_ABORT &&
                                    env->body_case != HVD__ENVELOPE__BODY_ERROR) {
                                        hold_message(env); /* for the next turn, under the runner */
                                        continue;
                                }
                                process_held(); /* kept during a wait: they came first */
                                handle_message(env);
                                hvd_wire_free(&env);
                        }
                }
        }
        free(batch);
        return NULL;
}

/* ---- GPU ---- */

static void gpu_load(void) {
        char buf[PATH_MAX];
        const char *path = getenv("HVD_GPU_MODULE");
        if (!path)
                path = getenv("HVD_NCCL_MODULE");
        if (GPU.mod)
                return;
        if (!path) {
                snprintf(buf, sizeof buf, "%s/libhvd-nccl.so", PKGLIBDIR);
                path = buf;
        }
        if (access(path, R_OK) < 0) {
                snprintf(GPU.why, sizeof GPU.why, "this hvd has no GPU backend (%.400s is not installed)", path);
                return;
        }
        GPU.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!GPU.dl) {
                snprintf(GPU.why, sizeof GPU.why, "cannot load the GPU backend: %s", dlerror());
                return;
        }
        const hvd_gpu_module_t *m = dlsym(GPU.dl, HVD_GPU_MODULE_SYMBOL);
        if (!m || m->abi != HVD_GPU_MODULE_ABI || !m->mem_alloc || !m->mem_free) {
                if (!m)
                        snprintf(GPU.why, sizeof GPU.why, "%.400s is not a GPU backend of hvd (no %s)", path,
                                 HVD_GPU_MODULE_SYMBOL);
                else
                        snprintf(GPU.why, sizeof GPU.why,
                                 "%.300s is a GPU backend of another hvd version (module ABI %u, this libhvd needs "
                                 "%u): install the libhvd-nccl.so built with this libhvd",
                                 path, m->abi, (unsigned) HVD_GPU_MODULE_ABI);
                dlclose(GPU.dl);
                GPU.dl = NULL;
                return;
        }
        GPU.mod = m;
        char err[400] = "";
        GPU.devices = m->probe(err, sizeof err);
        if (GPU.devices <= 0)
                snprintf(GPU.why, sizeof GPU.why, "GPU backend %s: %s", m->name, err[0] ? err : "no device");
}

/* Frees the device outputs of freed handles. Never under G.lock: the
 * module's mem_free waits until the GPU is idle. */
static void gpu_free_garbage(void) {
        pthread_mutex_lock(&G.lock);
        devmem_t *d = G.dev_garbage;
        G.dev_garbage = NULL;
        pthread_mutex_unlock(&G.lock);
        while (d) {
                devmem_t *next = d->next;
                GPU.mod->mem_free(d->device, d->p);
                free(d);
                d = next;
        }
}

static void gpu_fail_pending(int code, const char *msg) {
        for (size_t i = 0; i < GPU.n_pending; i++) {
                pthread_mutex_lock(&G.lock);
                for (size_t k = 0; k < GPU.pending[i].n; k++)
                        if (GPU.pending[i].entries[k]) {
                                entry_complete(GPU.pending[i].entries[k], code, msg);
                                handle_unref(GPU.pending[i].entries[k]->h);
                        }
                pthread_mutex_unlock(&G.lock);
                free(GPU.pending[i].entries);
        }
        GPU.n_pending = 0;
}

/* Completes the GPU operations whose events have fired. Returns whether
 * some are still pending. */
static bool gpu_poll(void) {
        char err[ERRLEN];
        size_t k = 0;
        for (size_t i = 0; i < GPU.n_pending; i++) {
                gpu_pending_t *p = &GPU.pending[i];
                int r = GPU.mod->poll(GPU.g, p->op, err, sizeof err);
                if (r == 0) {
                        GPU.pending[k++] = *p;
                        continue;
                }
                pthread_mutex_lock(&G.lock);
                for (size_t e = 0; e < p->n; e++)
                        if (p->entries[e]) {
                                entry_complete(p->entries[e], r < 0 ? r : 0, r < 0 ? err : NULL);
                                handle_unref(p->entries[e]->h);
                        }
                pthread_mutex_unlock(&G.lock);
                free(p->entries);
                if (r < 0) {
                        /* NCCL failed: the communicator is unusable for everyone */
                        GPU.n_pending = k;
                        job_aborted(r, err);
                        return false;
                }
        }
        GPU.n_pending = k;
        return k > 0;
}

static int gpu_enqueue(const hvd_xop_t *x, entry_t **em, char *err, size_t err_len) {
        if (!GPU.g) {
                snprintf(err, err_len, "%s: %s", x->name, GPU.why[0] ? GPU.why : "no GPU data plane");
                return HVD_ENODEVICE;
        }
        if (GPU.n_pending == GPU.cap_pending) {
                size_t cap = GPU.cap_pending ? GPU.cap_pending * 2 : 16;
                gpu_pending_t *np = realloc(GPU.pending, cap * sizeof *np);
                if (!np)
                        return -ENOMEM;
                GPU.pending = np;
                GPU.cap_pending = cap;
        }
        gpu_pending_t *p = &GPU.pending[GPU.n_pending];
        p->entries = calloc(x->n ? x->n : 1, sizeof *p->entries);
        if (!p->entries)
                return -ENOMEM;
        memcpy(p->entries, em, x->n * sizeof *em);
        p->n = x->n;
        int r = GPU.mod->enqueue(GPU.g, x, &p->op, err, err_len);
        if (r < 0) {
                free(p->entries);
                return r;
        }
        pthread_mutex_lock(&G.lock);
        for (size_t k = 0; k < p->n; k++)
                if (p->entries[k])
                        p->entries[k]->h->refs++;
        pthread_mutex_unlock(&G.lock);
        GPU.n_pending++;
        return 0;
}

/* ---- init / shutdown ---- */

static int env_int(const char *name, int def, bool horovod_too) {
        const char *v = hvd_getenv(name, horovod_too);
        if (!v)
                return def;
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || *end || x < 0 || x > INT32_MAX)
                return -1;
        return (int) x;
}

/* The fast path is on unless HVD_FAST_PATH=0 (or another false value);
 * every rank of a job should see the same value (a rank without it sends
 * every tensor to the coordinator, which the others then follow after
 * HVD_FASTPATH_DEMOTE_USEC: correct, but slow). */
static bool fast_path_enabled(void) {
        const char *v = hvd_getenv("FAST_PATH", false);
        bool on = true;
        if (v && hvd_parse_bool(v, &on) < 0)
                on = true;
        return on;
}

static int hex_decode(const char *s, uint8_t *out, size_t max) {
        size_t n = strlen(s);
        if (n % 2 || n / 2 > max)
                return -EINVAL;
        for (size_t i = 0; i < n / 2; i++) {
                unsigned v;
                if (sscanf(s + 2 * i, "%2x", &v) != 1)
                        return -EINVAL;
                out[i] = (uint8_t) v;
        }
        return (int) (n / 2);
}

static void pset_free(pset_t *ps);

static void teardown(void) {
        hvd_timeline_stop();
        atomic_store(&hvd_timeline_changed, false);
        G.hb_interval_usec = 0;
        if (G.daemon_pidfd >= 0) {
                close(G.daemon_pidfd);
                G.daemon_pidfd = -1;
        }
        gpu_fail_pending(HVD_ESHUTDOWN, "hvd has been shut down");
        if (GPU.g)
                GPU.mod->close(&GPU.g);
        if (GPU.mod)
                gpu_free_garbage();
        free(GPU.pending);
        GPU.pending = NULL;
        GPU.cap_pending = 0;
        if (G.listen_fd >= 0) {
                close(G.listen_fd);
                G.listen_fd = -1;
        }
        for (int k = 0; k < HVD_MAX_PROCESS_SETS; k++) {
                pset_free(G.psets[k]);
                G.psets[k] = NULL;
        }
        G.pset_seq = 0;
        hvd_fastpath_destroy(&G.fp); /* before the backend: the board is in its memory */
        G.fp_node = G.fp_scribe = false;
        G.fp_node_n = 0;
        fp_free_held();
        hvd_backend_destroy(&G.backend);
        hvd_negotiator_destroy(&G.neg);
        if (G.sock) {
                zmq_close(G.sock);
                G.sock = NULL;
        }
        if (G.zctx) {
                while (zmq_ctx_term(G.zctx) < 0 && zmq_errno() == EINTR)
                        ; /* restarted after a signal, or its threads and descriptors stay behind */
                G.zctx = NULL;
        }
        if (G.wake_fd >= 0) {
                close(G.wake_fd);
                G.wake_fd = -1;
        }
        if (G.known) {
                size_t iter = 0;
                void *v;
                while (hvd_strmap_next(G.known, &iter, NULL, NULL, &v)) {
                        known_t *k = v;
                        params_free(&k->p);
                        free(k);
                }
        }
        hvd_strmap_destroy(&G.known);
        hvd_strmap_destroy(&G.inflight);
        for (size_t i = 0; i < G.n_id_names; i++)
                free(G.id_names[i]);
        free(G.id_names);
        G.id_names = NULL;
        G.n_id_names = 0;
        for (size_t k = 0; k <= HVD_WIRE_SCHEDULE_KEYS; k++) {
                free(G.sched_kept[k]);
                G.sched_kept[k] = NULL;
                G.sched_kept_len[k] = 0;
        }
        free(G.queue);
        G.queue = NULL;
        G.n_queue = G.cap_queue = 0;
        while (G.held_head) {
                pending_msg_t *p = G.held_head;
                G.held_head = p->next;
                hvd_wire_free(&p->env);
                free(p);
        }
        G.held_tail = NULL;
}

static int connect_and_join(const char *endpoint, const char *job_id, const uint8_t *secret, size_t secret_len,
                            uint64_t timeout_usec, Hvd__Envelope **welcome) {
        if (strncmp(endpoint, "ipc://", 6) == 0) {
                struct stat st;
                if (stat(endpoint + 6, &st) < 0)
                        return set_error(HVD_ENODAEMON,
                                         "no hvd-coordinatord at %s: %s (start the service, or launch with hvdrun, "
                                         "which starts a private one)",
                                         endpoint, strerror(errno));
                if (access(endpoint + 6, R_OK | W_OK) < 0)
                        return set_error(HVD_EDENIED, "permission denied on %s (not in group hvd?)", endpoint + 6);
        }
        G.sock = zmq_socket(G.zctx, ZMQ_DEALER);
        if (!G.sock)
                return set_error(-zmq_errno(), "cannot create a socket: %s", zmq_strerror(zmq_errno()));
        int zero = 0;
        int64_t maxmsg = (int64_t) HVD_WIRE_MAX_MESSAGE_BYTES;
        zmq_setsockopt(G.sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(G.sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        if (zmq_connect(G.sock, endpoint) < 0)
                return set_error(-zmq_errno(), "cannot connect to %s: %s", endpoint, zmq_strerror(zmq_errno()));

        char host[HVD_WIRE_MAX_HOST + 1] = "";
        const char *h = hvd_getenv("HOSTNAME", false);
        if (h)
                snprintf(host, sizeof host, "%s", h);
        else if (gethostname(host, sizeof host - 1) < 0)
                host[0] = 0;
        const char *ft = hvd_getenv("FUSION_THRESHOLD", true);
        uint64_t fusion = 0;
        if (ft && hvd_parse_size(ft, &fusion) < 0)
                return set_error(-EINVAL, "HVD_FUSION_THRESHOLD/HOROVOD_FUSION_THRESHOLD='%s' is not a size in bytes",
                                 ft);
        Hvd__Hello hello = HVD__HELLO__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        hello.job_id = (char *) job_id;
        hello.secret.data = (uint8_t *) secret;
        hello.secret.len = secret_len;
        hello.world_size = (uint32_t) G.size;
        hello.rank = (uint32_t) G.rank;
        hello.local_rank = (uint32_t) G.local_rank;
        hello.local_size = (uint32_t) G.local_size;
        hello.pid = (uint32_t) getpid();
        hello.host = host;
        hello.device = HVD_DEVICE_CPU;
        hello.fusion_threshold = ft ? (int64_t) fusion : -1;
        hello.cycle_time_usec = G.cycle_time_usec;
        hello.data_addr = G.data_addr;
        /* the stall inspector, as in Horovod: warn after 60 s by default */
        bool stall_off = false;
        const char *sd = hvd_getenv("STALL_CHECK_DISABLE", true);
        if (sd)
                hvd_parse_bool(sd, &stall_off);
        uint64_t stall = 60 * USEC_PER_SEC, stall_shutdown = 0;
        const char *sc = hvd_getenv("STALL_CHECK_TIME_SECONDS", true);
        const char *ss = hvd_getenv("STALL_SHUTDOWN_TIME_SECONDS", true);
        if ((sc && hvd_parse_duration(sc, USEC_PER_SEC, &stall) < 0) ||
            (ss && hvd_parse_duration(ss, USEC_PER_SEC, &stall_shutdown) < 0))
                return set_error(-EINVAL,
                                 "HVD_STALL_CHECK_TIME_SECONDS/HVD_STALL_SHUTDOWN_TIME_SECONDS must be seconds");
        hello.stall_check_usec = stall_off ? 0 : stall;
        hello.stall_shutdown_usec = stall_off ? 0 : stall_shutdown;
        hello.timeline = hvd_timeline_on();
        /* a CRC-32C on every frame of the TCP ring between nodes: on for
         * the whole job if any rank or daemon asks */
        const char *rc = hvd_getenv("RING_CHECKSUM", false);
        bool ring_ck = false;
        if (rc && hvd_parse_bool(rc, &ring_ck) < 0)
                return set_error(-EINVAL, "HVD_RING_CHECKSUM='%s' is not a boolean", rc);
        hello.ring_checksum = ring_ck;
        hello.board = fast_path_enabled();
        uint8_t nccl_id[HVD_NCCL_ID_BYTES];
        char gerr[400] = "";
        if (G.rank == 0 && GPU.devices > 0) {
                if (GPU.mod->unique_id(nccl_id, gerr, sizeof gerr) >= 0) {
                        hello.nccl_id.data = nccl_id;
                        hello.nccl_id.len = sizeof nccl_id;
                } else
                        snprintf(GPU.why, sizeof GPU.why, "GPU backend: %s", gerr);
        }
        hello.cross_rank = (uint32_t) G.cross_rank;
        hello.cross_size = (uint32_t) G.cross_size;
        const char *root_peer = hvd_getenv("ROOT_PEER", false);
        hello.root_peer = (char *) (root_peer ? root_peer : "");
        char *hostv[HVD_MAX_HOSTS];
        char hostbuf[4096];
        size_t n_hosts = 0;
        const char *hl = hvd_getenv("HOSTS", false);
        if (hl && G.cross_size > 1) {
                /* "a:2,b:2" or "a,b": names by cross rank */
                snprintf(hostbuf, sizeof hostbuf, "%s", hl);
                for (char *save = NULL, *tok = strtok_r(hostbuf, ",", &save); tok && n_hosts < HVD_MAX_HOSTS;
                     tok = strtok_r(NULL, ",", &save)) {
                        char *colon = strchr(tok, ':');
                        if (colon)
                                *colon = 0;
                        hostv[n_hosts++] = tok;
                }
                if (n_hosts != (size_t) G.cross_size)
                        return set_error(-EINVAL, "HVD_HOSTS lists %zu hosts, HVD_CROSS_SIZE is %d", n_hosts,
                                         G.cross_size);
                hello.n_hosts = n_hosts;
                hello.hosts = hostv;
        }
        env.body_case = HVD__ENVELOPE__BODY_HELLO;
        env.hello = &hello;
        int r = hvd_wire_send(G.sock, &env, 0);
        if (r < 0)
                return set_error(r, "cannot send hello to %s: %s", endpoint, hvd_strerror(r));
        /* the limit is only known from the welcome; a daemon configured
         * below this hello's size drops it without a word (4K is the least
         * max_message_size allows) */
        size_t hello_bytes = hvd__envelope__get_packed_size(&env);
        char hint[160] = "";
        if (hello_bytes > 4096)
                snprintf(hint, sizeof hint,
                         "; or its max_message_size is below this hello's %zu bytes (the host list), and it "
                         "dropped the connection",
                         hello_bytes);

        uint64_t deadline = hvd_now_usec() + timeout_usec;
        for (;;) {
                uint64_t now = hvd_now_usec();
                if (now >= deadline)
                        return set_error(HVD_ETIMEOUT,
                                         "rank %d: no welcome from the coordinator at %s within %.1f s (job %s; "
                                         "are all %d ranks started?%s)",
                                         G.rank, endpoint, (double) timeout_usec / 1e6, job_id, G.size, hint);
                zmq_pollitem_t it = { .socket = G.sock, .events = ZMQ_POLLIN };
                int n = zmq_poll(&it, 1, (long) ((deadline - now + 999) / 1000));
                if (n < 0 && zmq_errno() == EINTR)
                        continue;
                if (n <= 0)
                        continue;
                Hvd__Envelope *reply = NULL;
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, G.sock, 0) < 0) {
                        zmq_msg_close(&msg);
                        continue;
                }
                char err[512];
                r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &reply, err, sizeof err);
                zmq_msg_close(&msg);
                if (r < 0)
                        return set_error(r, "invalid reply from the coordinator: %s", err);
                if (reply->body_case == HVD__ENVELOPE__BODY_WELCOME) {
                        *welcome = reply;
                        return 0;
                }
                if (reply->body_case == HVD__ENVELOPE__BODY_ERROR) {
                        r = reply->error->code < 0 ? reply->error->code : HVD_EPROTO;
                        set_error(r, "%s", reply->error->message);
                } else if (reply->body_case == HVD__ENVELOPE__BODY_ABORT) {
                        r = reply->abort->code < 0 ? reply->abort->code : HVD_EABORTED;
                        set_error(r, "job %s aborted: %s", job_id, reply->abort->reason);
                } else
                        r = set_error(HVD_EPROTO, "unexpected reply from the coordinator");
                hvd_wire_free(&reply);
                return r;
        }
}

/* HVD_DATA_PORT: PORT or LO-HI (1-65535). */
static int parse_port_range(const char *v, unsigned *lo, unsigned *hi) {
        char *end;
        errno = 0;
        unsigned long a = strtoul(v, &end, 10), b = a;
        if (end != v && *end == '-') {
                const char *s2 = end + 1;
                b = strtoul(s2, &end, 10);
                if (end == s2)
                        end = (char *) v; /* "12-" */
        }
        if (errno || end == v || *end || a < 1 || b > 65535 || b < a)
                return set_error(-EINVAL, "HVD_DATA_PORT='%s' is not a port or a range LO-HI of ports 1-65535", v);
        *lo = (unsigned) a;
        *hi = (unsigned) b;
        return 0;
}

/* HVD_DATA_ADDR=HOST:PORT, the host resolved to an IPv4 address. */
static int parse_data_addr(const char *v, char *host, size_t host_len, unsigned *port) {
        char h[256];
        const char *colon = strrchr(v, ':');
        char *end;
        errno = 0;
        unsigned long p = strtoul(colon + 1, &end, 10);
        if ((size_t) (colon - v) >= sizeof h || colon == v || errno || end == colon + 1 || *end || p < 1 || p > 65535)
                return set_error(-EINVAL, "HVD_DATA_ADDR='%s' is not HOST or HOST:PORT (PORT 1-65535)", v);
        memcpy(h, v, (size_t) (colon - v));
        h[colon - v] = 0;
        if (hvd_tcp_resolve(h, host, host_len) < 0)
                return set_error(-ENOENT, "HVD_DATA_ADDR='%s': cannot resolve '%s' to an IPv4 address", v, h);
        *port = (unsigned) p;
        return 0;
}

int hvd_init(void) {
        pthread_mutex_lock(&G.lock);
        if (G.state == 1) {
                pthread_mutex_unlock(&G.lock);
                return 0;
        }
        pthread_mutex_unlock(&G.lock);
        last_error[0] = 0;

        const char *job_id = hvd_getenv("JOB_ID", false);
        G.solo = !job_id;
        G.size = env_int("SIZE", 1, true);
        G.rank = env_int("RANK", 0, true);
        G.local_size = env_int("LOCAL_SIZE", G.size, true);
        G.local_rank = env_int("LOCAL_RANK", G.rank, true);
        G.cross_rank = env_int("CROSS_RANK", 0, true);
        G.cross_size = env_int("CROSS_SIZE", 1, true);
        if (G.cross_size < 1 || G.cross_rank < 0 || G.cross_rank >= G.cross_size)
                return set_error(-EINVAL, "HVD_CROSS_RANK/HVD_CROSS_SIZE are inconsistent");
        if (G.solo) {
                G.cross_rank = 0;
                G.cross_size = 1;
                G.size = G.local_size = 1;
                G.rank = G.local_rank = 0;
        }
        if (G.size < 1 || G.rank < 0 || G.rank >= G.size || G.local_size < 1 || G.local_rank < 0 ||
            G.local_rank >= G.local_size)
                return set_error(-EINVAL, "HVD_RANK/HVD_SIZE/HVD_LOCAL_RANK/HVD_LOCAL_SIZE are inconsistent");
        G.cycle_time_usec = HVD_DEFAULT_CYCLE_TIME_USEC;
        const char *ct = hvd_getenv("CYCLE_TIME", true);
        if (ct && hvd_parse_duration(ct, USEC_PER_MSEC, &G.cycle_time_usec) < 0)
                return set_error(-EINVAL, "HVD_CYCLE_TIME/HOROVOD_CYCLE_TIME='%s' is not a duration in ms", ct);
        uint64_t start_timeout = 30 * USEC_PER_SEC;
        const char *st = hvd_getenv("START_TIMEOUT", true);
        if (st && hvd_parse_duration(st, USEC_PER_SEC, &start_timeout) < 0)
                return set_error(-EINVAL, "HVD_START_TIMEOUT='%s' is not a duration in seconds", st);

        const char *tl_file = hvd_getenv("TIMELINE", true);
        if (tl_file && *tl_file && G.rank == 0) {
                bool marks = false;
                const char *mc = hvd_getenv("TIMELINE_MARK_CYCLES", true);
                if (mc && hvd_parse_bool(mc, &marks) < 0)
                        return set_error(-EINVAL, "HVD_TIMELINE_MARK_CYCLES='%s' is not a boolean", mc);
                char err[ERRLEN];
                int r = hvd_timeline_start(tl_file, marks, false, err, sizeof err);
                if (r < 0)
                        return set_error(r, "HVD_TIMELINE: %s", err);
        }
        G.inflight = hvd_strmap_new();
        G.known = hvd_strmap_new();
        G.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        G.zctx = zmq_ctx_new();
        G.abort_code = 0;
        G.abort_reason[0] = 0;
        G.failure_told = false;
        G.stop = false;
        G.next_seq = 1;
        atomic_store(&G.done_seq, 0);
        atomic_store(&G.busy_usec, 0);
        G.last_send_usec = 0;
        G.fp_done = G.fp_sent = (fp_counters_t){ 0 };
        int r;
        if (!G.inflight || !G.known || G.wake_fd < 0 || !G.zctx) {
                r = set_error(-ENOMEM, "out of memory");
                goto fail;
        }
        char err[ERRLEN];
        if (G.solo) {
                hvd_topology_t topo = { .rank = 0,
                                        .size = 1,
                                        .local_rank = 0,
                                        .local_size = 1,
                                        .cross_rank = 0,
                                        .cross_size = 1,
                                        .listen_fd = -1 };
                r = hvd_cpu_backend_new("", &topo, 4096, 0, NULL, NULL, &G.backend, err, sizeof err);
                if (r < 0) {
                        set_error(r, "%s", err);
                        goto fail;
                }
                r = hvd_negotiator_new(1, 1u << 20, HVD_DEFAULT_FUSION_THRESHOLD, &G.neg);
                if (r < 0) {
                        set_error(r, "out of memory");
                        goto fail;
                }
                /* a job of one rank uses its GPU too: a communicator of one */
                gpu_load();
                if (GPU.devices > 0) {
                        int zero = 0;
                        topo.rank_cross = &zero;
                        topo.rank_local = &zero;
                        uint8_t nccl_id[HVD_NCCL_ID_BYTES];
                        char gerr[400] = "";
                        const char *dev = hvd_getenv("GPU_DEVICE", false);
                        const char *ft = hvd_getenv("FUSION_THRESHOLD", true);
                        uint64_t fusion = HVD_DEFAULT_FUSION_THRESHOLD;
                        if (ft && hvd_parse_size(ft, &fusion) < 0)
                                fusion = HVD_DEFAULT_FUSION_THRESHOLD;
                        GPU.device = dev ? atoi(dev) : 0;
                        if (GPU.mod->unique_id(nccl_id, gerr, sizeof gerr) < 0 ||
                            GPU.mod->open(&topo, nccl_id, GPU.device, fusion, &GPU.g, gerr, sizeof gerr) < 0)
                                snprintf(GPU.why, sizeof GPU.why, "GPU backend: %s", gerr);
                }
        } else {
                const char *endpoint = hvd_getenv("COORDINATOR", false);
                char ep[PATH_MAX + 32];
                if (!endpoint) {
                        const char *dir = hvd_getenv("RUNTIME_DIR", false);
                        snprintf(ep, sizeof ep, "ipc://%s/worker.sock", dir ? dir : HVD_DEFAULT_RUNTIME_DIR);
                        endpoint = ep;
                }
                uint8_t secret[HVD_WIRE_MAX_SECRET];
                const char *sec = hvd_getenv("JOB_SECRET", false);
                int secret_len = sec ? hex_decode(sec, secret, sizeof secret) : 0;
                if (secret_len < 0) {
                        r = set_error(-EINVAL, "HVD_JOB_SECRET is not a hex string of at most %d bytes",
                                      HVD_WIRE_MAX_SECRET);
                        goto fail;
                }
                if (strlen(job_id) > HVD_WIRE_MAX_JOB_ID) {
                        r = set_error(-EINVAL, "HVD_JOB_ID is longer than %d bytes", HVD_WIRE_MAX_JOB_ID);
                        goto fail;
                }
                snprintf(G.job_id, sizeof G.job_id, "%s", job_id);
                gpu_load();
                G.data_addr[0] = 0;
                if (G.cross_size > 1) {
                        /* the address other hosts reach this rank at: HVD_DATA_ADDR,
                         * else the local address of the route to the root daemon,
                         * else this host's name resolved, else loopback (hosts
                         * emulated on one machine) */
                        const char *ip = hvd_getenv("DATA_ADDR", false);
                        char resolved[64] = "127.0.0.1", adv_host[64] = "";
                        unsigned adv_port = 0, port_lo = 0, port_hi = 0;
                        const char *rp = hvd_getenv("ROOT_PEER", false);
                        if (ip && strchr(ip, ':')) {
                                /* HOST:PORT: an address a NAT, firewall or proxy
                                 * forwards to this rank; the listener binds every
                                 * interface (the advertised host may not be ours) */
                                r = parse_data_addr(ip, adv_host, sizeof adv_host, &adv_port);
                                if (r < 0)
                                        goto fail;
                        } else if (!ip && !(rp && hvd_tcp_route_addr(rp, resolved, sizeof resolved) == 0)) {
                                const char *hn = hvd_getenv("HOSTNAME", false);
                                if (hn)
                                        hvd_tcp_resolve(hn, resolved, sizeof resolved);
                        }
                        const char *dp = hvd_getenv("DATA_PORT", false);
                        if (dp && (r = parse_port_range(dp, &port_lo, &port_hi)) < 0)
                                goto fail;
                        const char *bind_ip = adv_port ? "" : ip ? ip : "";
                        G.listen_fd = hvd_tcp_listen(bind_ip, port_lo, port_hi,
                                                     adv_port ? adv_host
                                                     : ip     ? ip
                                                              : resolved,
                                                     adv_port, G.data_addr, sizeof G.data_addr);
                        if (G.listen_fd < 0) {
                                if (G.listen_fd == -EADDRINUSE && dp)
                                        r = set_error(G.listen_fd,
                                                      "cannot open the data-plane listener: no free port in "
                                                      "HVD_DATA_PORT=%s",
                                                      dp);
                                else
                                        r = set_error(G.listen_fd, "cannot open the data-plane listener on %s: %s",
                                                      *bind_ip ? bind_ip : "0.0.0.0", hvd_strerror(G.listen_fd));
                                goto fail;
                        }
                }
                Hvd__Envelope *wenv = NULL;
                r = connect_and_join(endpoint, job_id, secret, (size_t) secret_len, start_timeout + 3 * USEC_PER_SEC,
                                     &wenv);
                if (r < 0)
                        goto fail;
                const Hvd__Welcome *w = wenv->welcome;
                G.rank = (int) w->rank;
                G.size = (int) w->size;
                G.local_rank = (int) w->local_rank;
                G.local_size = (int) w->local_size;
                G.cross_rank = (int) w->cross_rank;
                G.cross_size = (int) w->cross_size;
                if (w->cycle_time_usec)
                        G.cycle_time_usec = w->cycle_time_usec;
                G.epoch = w->epoch;
                G.hb_interval_usec = w->heartbeat_interval_usec;
                G.last_hb_usec = hvd_now_usec();
                G.peer_timeout_usec = w->peer_timeout_usec;
                G.max_message_bytes = w->max_message_bytes;
#ifdef SYS_pidfd_open
                if (w->daemon_pid) {
                        G.daemon_pid = (pid_t) w->daemon_pid;
                        G.daemon_pidfd = (int) syscall(SYS_pidfd_open, G.daemon_pid, 0);
                }
#endif
                int *rank_cross = calloc((size_t) G.size, sizeof(int));
                int *rank_local = calloc((size_t) G.size, sizeof(int));
                char **addrs = calloc((size_t) G.size, sizeof(char *));
                if (!rank_cross || !rank_local || !addrs || w->n_ranks != (size_t) G.size) {
                        free(rank_cross);
                        free(rank_local);
                        free(addrs);
                        hvd_wire_free(&wenv);
                        r = set_error(w->n_ranks != (size_t) G.size ? HVD_EPROTO : -ENOMEM,
                                      "the coordinator's rank table does not match the job");
                        goto fail;
                }
                for (size_t i = 0; i < w->n_ranks; i++) {
                        uint32_t q = w->ranks[i]->rank;
                        if (q < (uint32_t) G.size) {
                                rank_cross[q] = (int) w->ranks[i]->cross_rank;
                                rank_local[q] = (int) w->ranks[i]->local_rank;
                                addrs[q] = w->ranks[i]->data_addr;
                        }
                }
                uint64_t job_hash = UINT64_C(1469598103934665603);
                for (const char *c = job_id; *c; c++)
                        job_hash = (job_hash ^ (uint8_t) *c) * UINT64_C(1099511628211);
                hvd_topology_t topo = {
                        .rank = G.rank,
                        .size = G.size,
                        .local_rank = G.local_rank,
                        .local_size = G.local_size,
                        .cross_rank = G.cross_rank,
                        .cross_size = G.cross_size,
                        .rank_cross = rank_cross,
                        .rank_local = rank_local,
                        .addrs = addrs,
                        .listen_fd = G.listen_fd,
                        .job_hash = job_hash,
                        .ring_checksum = w->ring_checksum,
                };
                G.listen_fd = -1; /* the backend owns it now */
                r = hvd_cpu_backend_new(w->shm_name, &topo, w->slot_bytes, w->collective_timeout_usec, wait_check, NULL,
                                        &G.backend, err, sizeof err);
                G.fusion_threshold = w->fusion_threshold;
                if (r >= 0 && G.local_size > 1 && fast_path_enabled()) {
                        /* one host: the fast path; several: node mode, the
                         * host's readiness aggregated on the board */
                        const void *aborted = NULL;
                        void *board = hvd_backend_board(G.backend, &aborted);
                        if (board && hvd_fastpath_new(board, G.local_rank, G.local_size, aborted, &G.fp) < 0) {
                                r = -ENOMEM;
                                snprintf(err, sizeof err, "out of memory");
                        }
                        G.fp_node = G.fp && G.cross_size > 1;
                        G.fp_scribe = G.fp_node && G.local_rank == 0;
                }
                if (r >= 0 && GPU.devices > 0) {
                        if (w->nccl_id.len != HVD_NCCL_ID_BYTES)
                                snprintf(GPU.why, sizeof GPU.why, "rank 0 has no GPU backend: no NCCL communicator");
                        else {
                                const char *dev = hvd_getenv("GPU_DEVICE", false);
                                int device = dev ? atoi(dev) : G.local_rank % GPU.devices;
                                char gerr[400] = "";
                                GPU.device = device;
                                if (GPU.mod->open(&topo, w->nccl_id.data, device, w->fusion_threshold, &GPU.g, gerr,
                                                  sizeof gerr) < 0)
                                        snprintf(GPU.why, sizeof GPU.why, "GPU backend: %s", gerr);
                        }
                }
                free(rank_cross);
                free(rank_local);
                free(addrs);
                hvd_wire_free(&wenv);
                if (r < 0) {
                        set_error(r, "rank %d: data plane: %s", G.rank, err);
                        goto fail;
                }
        }
        if ((r = -pthread_create(&G.thread, NULL, bg_main, NULL)) < 0) {
                set_error(r, "cannot start the background thread");
                goto fail;
        }
        pthread_mutex_lock(&G.lock);
        G.state = 1;
        pthread_mutex_unlock(&G.lock);
        outbuf_set_open(true);
        return 0;
fail:
        teardown();
        return r;
}

int hvd_shutdown(void) {
        pthread_mutex_lock(&G.lock);
        if (G.state != 1) {
                pthread_mutex_unlock(&G.lock);
                return 0;
        }
        G.stop = true;
        G.state = 0;
        pthread_mutex_unlock(&G.lock);
        uint64_t one = 1;
        if (write(G.wake_fd, &one, sizeof one) < 0)
                (void) 0;
        pthread_join(G.thread, NULL);
        if (!G.abort_code)
                fp_report(true);
        /* a user thread still in a wait may be taking a turn */
        pthread_mutex_lock(&G.runner);
        hvd_fastpath_t *fp = TAKE_PTR(G.fp);
        pthread_mutex_unlock(&G.runner);
        hvd_fastpath_destroy(&fp);
        if (G.sock) {
                Hvd__Goodbye bye = HVD__GOODBYE__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                bye.rank = (uint32_t) G.rank;
                env.body_case = HVD__ENVELOPE__BODY_GOODBYE;
                env.goodbye = &bye;
                /* wait (briefly) for the ack, so the daemon has seen the
                 * goodbye before it sees this process exit. After an abort
                 * the daemons know already, unless this rank's failure
                 * report is what aborts the job: the daemon's I/O thread
                 * may still hold it when the daemon's main loop sees this
                 * process exit, which would then stand as the cause ("rank
                 * N exited without calling hvd_shutdown") on every rank.
                 * The goodbye travels behind the report on the same
                 * connection: its ack means the report was taken in. */
                if ((!G.abort_code || G.failure_told) && hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT) == 0) {
                        uint64_t deadline = hvd_now_usec() + USEC_PER_SEC;
                        for (uint64_t now; (now = hvd_now_usec()) < deadline;) {
                                zmq_pollitem_t it = { .socket = G.sock, .events = ZMQ_POLLIN };
                                if (zmq_poll(&it, 1, (long) ((deadline - now) / 1000 + 1)) <= 0)
                                        continue;
                                Hvd__Envelope *reply = NULL;
                                if (recv_envelope(ZMQ_DONTWAIT, &reply) < 0)
                                        break;
                                bool ack = reply->body_case == HVD__ENVELOPE__BODY_GOODBYE;
                                hvd_wire_free(&reply);
                                if (ack)
                                        break;
                        }
                }
        }
        pthread_mutex_lock(&G.lock);
        fail_everything(HVD_ESHUTDOWN, "hvd has been shut down");
        pthread_mutex_unlock(&G.lock);
        teardown();
        outbuf_set_open(false);
        return 0;
}

int hvd_is_initialized(void) {
        pthread_mutex_lock(&G.lock);
        int s = G.state == 1;
        pthread_mutex_unlock(&G.lock);
        return s;
}

#define TOPO_GETTER(fn, field)                                                                                         \
        int fn(void) {                                                                                                 \
                return hvd_is_initialized() ? G.field : HVD_ENOTINIT;                                                  \
        }
TOPO_GETTER(hvd_rank, rank)
TOPO_GETTER(hvd_size, size)
TOPO_GETTER(hvd_local_rank, local_rank)
TOPO_GETTER(hvd_local_size, local_size)
TOPO_GETTER(hvd_cross_rank, cross_rank)
TOPO_GETTER(hvd_cross_size, cross_size)

/* ---- submission ---- */

static int check_request(const hvd_request_t *q, uint32_t kind) {
        if (!q)
                return set_error(-EINVAL, "request is NULL");
        if (!q->name || !*q->name)
                return set_error(-EINVAL, "every collective needs a non-empty tensor name");
        if (strnlen(q->name, HVD_MAX_NAME_BYTES + 1) > HVD_MAX_NAME_BYTES)
                return set_error(-EINVAL, "tensor name longer than %d bytes", HVD_MAX_NAME_BYTES);
        char err[256];
        if (hvd_wire_validate_name(q->name, HVD_MAX_NAME_BYTES, "tensor name", err, sizeof err) < 0)
                return set_error(-EINVAL, "'%s': %s", q->name, err);
        if (strncmp(q->name, "__hvd.", 6) == 0)
                return set_error(-EINVAL, "tensor names starting with '__hvd.' are reserved ('%s')", q->name);
        if (!hvd_dtype_valid((uint32_t) q->dtype))
                return set_error(-EINVAL, "'%s': invalid dtype %d", q->name, (int) q->dtype);
        if (!hvd_reduce_op_valid((uint32_t) q->reduce_op))
                return set_error(-EINVAL, "'%s': invalid reduce op %d", q->name, (int) q->reduce_op);
        if (q->ndim < 0 || q->ndim > HVD_MAX_NDIM || (q->ndim && !q->shape))
                return set_error(-EINVAL, "'%s': ndim must be 0..%d with a shape", q->name, HVD_MAX_NDIM);
        uint64_t e = 1;
        for (int d = 0; d < q->ndim; d++) {
                if (q->shape[d] < 0)
                        return set_error(-EINVAL, "'%s': negative dimension %" PRId64, q->name, q->shape[d]);
                if (q->shape[d] && e > (UINT64_C(1) << 50) / (uint64_t) q->shape[d])
                        return set_error(-EINVAL, "'%s': too many elements", q->name);
                e *= (uint64_t) q->shape[d];
        }
        int me = G.rank; /* within the process set */
        if (q->process_set > 0 && q->process_set < HVD_MAX_PROCESS_SETS && G.psets[q->process_set])
                me = G.psets[q->process_set]->me;
        if (e && !q->input && !(kind == HVD__KIND__KIND_BROADCAST && q->root != me))
                return set_error(-EINVAL, "'%s': input is NULL", q->name);
        if (e && !q->output && (kind == HVD__KIND__KIND_ALLREDUCE || kind == HVD__KIND__KIND_BROADCAST))
                return set_error(-EINVAL, "'%s': output is NULL", q->name);
        if ((kind == HVD__KIND__KIND_ALLGATHER || kind == HVD__KIND__KIND_ALLTOALL ||
             kind == HVD__KIND__KIND_REDUCESCATTER) &&
            q->ndim < 1)
                return set_error(-EINVAL, "'%s': needs at least one dimension", q->name);
        if (q->device < HVD_DEVICE_CPU)
                return set_error(-EINVAL, "'%s': invalid device %d", q->name, q->device);
        if (q->device != HVD_DEVICE_CPU && !GPU.g)
                return set_error(HVD_ENODEVICE, "'%s': device %d: %s", q->name, q->device,
                                 GPU.why[0] ? GPU.why : "no GPU data plane");
        if (q->device != HVD_DEVICE_CPU && q->device != GPU.device)
                return set_error(-EINVAL,
                                 "'%s': tensor on GPU %d, but this rank uses GPU %d (one GPU per rank: its local "
                                 "rank, or HVD_GPU_DEVICE)",
                                 q->name, q->device, GPU.device);
        int ss = G.size;
        if (q->process_set != 0) {
                const pset_t *ps =
                        q->process_set > 0 && q->process_set < HVD_MAX_PROCESS_SETS ? G.psets[q->process_set] : NULL;
                if (!ps)
                        return set_error(-EINVAL, "'%s': process set %d does not exist", q->name, q->process_set);
                if (ps->me < 0)
                        return set_error(-EINVAL, "'%s': rank %d is not a member of process set %d", q->name, G.rank,
                                         q->process_set);
                ss = ps->n;
        }
        if (kind == HVD__KIND__KIND_BROADCAST && (q->root < 0 || q->root >= ss))
                return set_error(-EINVAL, "'%s': root rank %d out of range (size %d)", q->name, q->root, ss);
        if (kind == HVD__KIND__KIND_ALLTOALL && q->splits) {
                int64_t sum = 0;
                for (int r = 0; r < ss; r++) {
                        if (q->splits[r] < 0)
                                return set_error(-EINVAL, "'%s': negative split", q->name);
                        sum += q->splits[r];
                }
                if (sum != q->shape[0])
                        return set_error(-EINVAL, "'%s': splits sum to %" PRId64 ", the first dimension is %" PRId64,
                                         q->name, sum, q->shape[0]);
        }
        return 0;
}

static int fill_entry(entry_t *e, hvd_handle_t *h, const hvd_request_t *q, uint32_t kind, uint32_t gid,
                      uint32_t gsize) {
        e->h = h;
        e->name = strdup(q->name);
        if (!e->name)
                return -ENOMEM;
        e->in = q->input;
        e->out = q->output;
        e->stream = q->stream;
        e->p = (params_t){
                .kind = kind,
                .dtype = q->dtype,
                .ndim = q->ndim,
                .reduce_op = q->reduce_op,
                .prescale = q->prescale,
                .postscale = q->postscale,
                .root = q->root,
                .process_set = q->process_set,
                .device = q->device,
                .group_id = gid,
                .group_size = gsize,
        };
        if (q->ndim)
                memcpy(e->p.shape, q->shape, (size_t) q->ndim * sizeof(int64_t));
        const pset_t *ps = q->process_set > 0 && q->process_set < HVD_MAX_PROCESS_SETS ? G.psets[q->process_set] : NULL;
        int ss = ps ? ps->n : G.size;
        if (kind == HVD__KIND__KIND_ALLTOALL && q->splits) {
                e->p.splits = malloc((size_t) ss * sizeof(int64_t));
                if (!e->p.splits)
                        return -ENOMEM;
                memcpy(e->p.splits, q->splits, (size_t) ss * sizeof(int64_t));
                e->p.n_splits = (uint32_t) ss;
        }
        if (ps) {
                e->p.set_ranks = malloc((size_t) ps->n * sizeof(uint32_t));
                if (!e->p.set_ranks)
                        return -ENOMEM;
                memcpy(e->p.set_ranks, ps->ranks, (size_t) ps->n * sizeof(uint32_t));
                e->p.n_set = (uint32_t) ps->n;
        }
        return 0;
}

/* Queues n requests as one handle. G.lock is taken here. internal requests
 * (barrier, join, process-set agreement) skip the user-name checks. */
static bool fp_user_may_run(const hvd_handle_t *h);

static int submit_ex(const hvd_request_t *reqs, size_t n, uint32_t kind, bool internal, bool waits,
                     hvd_handle_t **ret) {
        if (!ret)
                return set_error(-EINVAL, "handle pointer is NULL");
        if (!hvd_is_initialized())
                return set_error(HVD_ENOTINIT, "hvd is not initialized: call hvd_init() first");
        if (!reqs)
                return set_error(-EINVAL, "request is NULL");
        if (n == 0 || n > HVD_WIRE_MAX_REQUESTS)
                return set_error(-EINVAL, "a group needs 1..%d requests", HVD_WIRE_MAX_REQUESTS);
        internal = internal || kind == HVD__KIND__KIND_BARRIER || kind == HVD__KIND__KIND_JOIN;
        hvd_handle_t *h = calloc(1, sizeof *h + n * sizeof(entry_t));
        if (!h)
                return set_error(-ENOMEM, "out of memory");
        h->n = n;
        h->refs = 1;
        pthread_mutex_lock(&G.lock);
        int ps = reqs[0].process_set > 0 && reqs[0].process_set < HVD_MAX_PROCESS_SETS ? reqs[0].process_set : 0;
        uint32_t gid = n > 1 ? ++G.group_seq[ps] : 0;
        int r = 0;
        for (size_t i = 0; i < n && r >= 0 && !internal; i++)
                r = check_request(&reqs[i], kind); /* under the lock: process sets may change */
        for (size_t i = 0; i < n && r >= 0; i++)
                if (fill_entry(&h->m[i], h, &reqs[i], kind, gid, n > 1 ? (uint32_t) n : 0) < 0)
                        r = set_error(-ENOMEM, "out of memory");
        if (r >= 0 && G.abort_code)
                r = set_error(G.abort_code, "%s", G.abort_reason);
        for (size_t i = 0; i < n && r >= 0; i++) {
                const char *nm = h->m[i].name;
                bool dup = hvd_strmap_get(G.inflight, nm, strlen(nm)) != NULL;
                for (size_t k = 0; k < i && !dup; k++)
                        dup = strcmp(h->m[k].name, nm) == 0;
                if (dup)
                        r = set_error(HVD_EDUPLICATE, "'%s': a tensor with this name is already in flight on rank %d",
                                      nm, G.rank);
        }
        if (r >= 0 && G.n_queue + n > G.cap_queue) {
                size_t cap = HVD_MAX(G.cap_queue * 2, G.n_queue + n + 64);
                entry_t **nq = realloc(G.queue, cap * sizeof *nq);
                if (!nq)
                        r = set_error(-ENOMEM, "out of memory");
                else {
                        G.queue = nq;
                        G.cap_queue = cap;
                }
        }
        if (r < 0) {
                pthread_mutex_unlock(&G.lock);
                handle_free(h);
                return r;
        }
        for (size_t i = 0; i < n; i++) {
                hvd_strmap_put(G.inflight, h->m[i].name, strlen(h->m[i].name), &h->m[i]);
                G.queue[G.n_queue++] = &h->m[i];
        }
        h->n_pending = n;
        h->refs++; /* the in-flight reference */
        /* a caller about to wait takes the fast path's turn itself: no need
         * to wake the background thread for it (it is woken if need be) */
        bool quiet = waits && fp_user_may_run(h);
        pthread_mutex_unlock(&G.lock);
        if (!quiet) {
                uint64_t one = 1;
                if (write(G.wake_fd, &one, sizeof one) < 0)
                        (void) 0;
                hvd_fastpath_kick(G.fp);
        }
        *ret = h;
        return 0;
}

static int submit(const hvd_request_t *reqs, size_t n, uint32_t kind, hvd_handle_t **ret) {
        return submit_ex(reqs, n, kind, false, false, ret);
}

int hvd_allreduce_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_ALLREDUCE, handle);
}
int hvd_broadcast_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_BROADCAST, handle);
}
int hvd_allgather_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_ALLGATHER, handle);
}
int hvd_alltoall_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_ALLTOALL, handle);
}
int hvd_reducescatter_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_REDUCESCATTER, handle);
}
int hvd_grouped_allreduce_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit(reqs, n, HVD__KIND__KIND_ALLREDUCE, handle);
}
int hvd_grouped_allgather_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit(reqs, n, HVD__KIND__KIND_ALLGATHER, handle);
}
int hvd_grouped_reducescatter_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit(reqs, n, HVD__KIND__KIND_REDUCESCATTER, handle);
}

/* ---- handles ---- */

/* G.lock held: h is one cached-looking CPU allreduce of all ranks, on a
 * job with a fast path; its waiter may run the fast path's turn. */
static bool fp_user_may_run(const hvd_handle_t *h) {
        if (!G.fp || G.fp_node || G.abort_code || G.stop || h->n != 1)
                return false;
        const entry_t *e = &h->m[0];
        return !e->done && e->p.kind == HVD__KIND__KIND_ALLREDUCE && e->p.device == HVD_DEVICE_CPU &&
               e->p.process_set == 0 && e->p.group_size <= 1;
}

int hvd_handle_wait_timeout(hvd_handle_t *h, uint64_t timeout_usec) {
        if (!h)
                return -EINVAL;
        struct timespec ts = hvd_realtime_after(timeout_usec);
        pthread_mutex_lock(&G.lock);
        while (h->n_pending) {
                if (fp_user_may_run(h)) {
                        /* the fast path, run by this thread (see fp_user_turn) */
                        pthread_mutex_unlock(&G.lock);
                        hvd_fastpath_t *fp = G.fp;
                        atomic_fetch_add(&G.fp_waiters, 1);
                        int t = fp_user_turn();
                        /* our bits wait on the board for the other ranks: wait
                         * for it to change; the background thread has the turn:
                         * wait for the completion (below) */
                        bool board = t > 0 && fp && !hvd_fastpath_awaits_schedule(fp);
                        if (board && h->n_pending)
                                hvd_fastpath_wait(fp, USEC_PER_MSEC);
                        atomic_fetch_sub(&G.fp_waiters, 1);
                        pthread_mutex_lock(&G.lock);
                        if (!h->n_pending)
                                break;
                        if (t != 0) {
                                /* the background thread has the turn, or the board
                                 * has yet to fill: look again soon */
                                struct timespec soon;
                                clock_gettime(CLOCK_REALTIME, &soon);
                                soon.tv_nsec += t < 0 ? 1000000 : 0;
                                if (soon.tv_nsec >= 1000000000) {
                                        soon.tv_sec++;
                                        soon.tv_nsec -= 1000000000;
                                }
                                if (t < 0 && !board)
                                        pthread_cond_timedwait(&G.cond, &G.lock, &soon);
                                if (timeout_usec &&
                                    (soon.tv_sec > ts.tv_sec ||
                                     (soon.tv_sec == ts.tv_sec && soon.tv_nsec >= ts.tv_nsec)) &&
                                    h->n_pending) {
                                        pthread_mutex_unlock(&G.lock);
                                        return HVD_ETIMEOUT;
                                }
                                continue;
                        }
                }
                if (timeout_usec == 0)
                        pthread_cond_wait(&G.cond, &G.lock);
                else if (pthread_cond_timedwait(&G.cond, &G.lock, &ts) == ETIMEDOUT && h->n_pending) {
                        pthread_mutex_unlock(&G.lock);
                        return HVD_ETIMEOUT;
                }
        }
        int r = h->status;
        if (r < 0)
                set_error(r, "%s", h->error ? h->error : hvd_strerror(r));
        pthread_mutex_unlock(&G.lock);
        return r;
}

int hvd_handle_wait(hvd_handle_t *h) {
        return hvd_handle_wait_timeout(h, 0);
}

int hvd_handle_poll(hvd_handle_t *h) {
        if (!h)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        int done = h->n_pending == 0;
        pthread_mutex_unlock(&G.lock);
        return done;
}

const char *hvd_handle_error(const hvd_handle_t *h) {
        if (!h)
                return "";
        pthread_mutex_lock(&G.lock);
        const char *e = h->n_pending == 0 && h->error ? h->error : "";
        pthread_mutex_unlock(&G.lock);
        return e;
}

int hvd_handle_output(const hvd_handle_t *h, size_t index, const void **data, size_t *bytes, int *ndim,
                      const int64_t **shape) {
        if (!h || index >= h->n)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        const entry_t *e = &h->m[index];
        int r = 0;
        if (h->n_pending || h->status < 0 || !e->alloc)
                r = -ENODATA;
        pthread_mutex_unlock(&G.lock);
        if (r < 0)
                return r;
        if (data)
                *data = e->alloc;
        if (bytes)
                *bytes = e->alloc_bytes;
        if (ndim)
                *ndim = e->out_ndim;
        if (shape)
                *shape = e->out_shape;
        return 0;
}

int hvd_handle_recv_splits(const hvd_handle_t *h, const int64_t **splits) {
        if (!h || !splits)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        int r = h->n_pending || !h->m[0].recv_splits ? -ENODATA : 0;
        pthread_mutex_unlock(&G.lock);
        if (r == 0)
                *splits = h->m[0].recv_splits;
        return r;
}

int hvd_handle_steal_output(hvd_handle_t *h, size_t index, void **data, size_t *bytes) {
        if (!h || index >= h->n || !data)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        entry_t *e = &h->m[index];
        int r = 0;
        if (h->n_pending || h->status < 0 || !e->alloc)
                r = -ENODATA;
        else {
                *data = TAKE_PTR(e->alloc);
                if (bytes)
                        *bytes = e->alloc_bytes;
        }
        pthread_mutex_unlock(&G.lock);
        return r;
}

void hvd_handle_release(hvd_handle_t **hp) {
        if (!hp || !*hp)
                return;
        pthread_mutex_lock(&G.lock);
        handle_unref(*hp);
        bool garbage = G.dev_garbage != NULL;
        pthread_mutex_unlock(&G.lock);
        *hp = NULL;
        if (garbage)
                gpu_free_garbage();
}

int hvd_free_output(void *data, int device) {
        if (!data)
                return 0;
        if (device == HVD_DEVICE_CPU) {
                free(data);
                return 0;
        }
        if (device < 0)
                return set_error(-EINVAL, "hvd_free_output: invalid device %d", device);
        /* the module stays loaded after hvd_shutdown(): outputs may outlive the job */
        if (!GPU.mod)
                return set_error(HVD_ENODEVICE,
                                 "hvd_free_output: no GPU backend is loaded, so %p on device %d "
                                 "cannot be memory hvd allocated",
                                 data, device);
        GPU.mod->mem_free(device, data);
        return 0;
}

/* ---- synchronous helpers ---- */

static int run_sync_ex(const hvd_request_t *req, uint32_t kind, bool internal, int *result) {
        hvd_handle_t *h = NULL;
        int r = submit_ex(req, 1, kind, internal, true, &h);
        if (r < 0)
                return r;
        r = hvd_handle_wait(h);
        if (result)
                *result = h->result;
        hvd_handle_release(&h);
        return r;
}

static int run_sync(const hvd_request_t *req, uint32_t kind, int *result) {
        return run_sync_ex(req, kind, false, result);
}

int hvd_allreduce(const char *name, const void *input, void *output, size_t count, hvd_dtype_t dtype,
                  hvd_reduce_op_t op) {
        int64_t shape[1] = { (int64_t) count };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = input;
        q.output = output;
        q.dtype = dtype;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = op;
        return run_sync(&q, HVD__KIND__KIND_ALLREDUCE, NULL);
}

int hvd_broadcast(const char *name, void *buffer, size_t count, hvd_dtype_t dtype, int root) {
        int64_t shape[1] = { (int64_t) count };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = buffer;
        q.output = buffer;
        q.dtype = dtype;
        q.ndim = 1;
        q.shape = shape;
        q.root = root;
        return run_sync(&q, HVD__KIND__KIND_BROADCAST, NULL);
}

int hvd_barrier(void) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = HVD_BARRIER_NAME;
        return run_sync(&q, HVD__KIND__KIND_BARRIER, NULL);
}

int hvd_join(void) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = HVD_JOIN_NAME;
        int last = -1;
        int r = run_sync(&q, HVD__KIND__KIND_JOIN, &last);
        return r < 0 ? r : last;
}

/* ---- process sets ---- */

static void pset_free(pset_t *ps) {
        if (!ps)
                return;
        free(ps->ranks);
        free(ps->ranks_int);
        free(ps);
}

static int cmp_int(const void *a, const void *b) {
        int x = *(const int *) a, y = *(const int *) b;
        return (x > y) - (x < y);
}

/* Every rank passes the same values: checked with one MIN allreduce of
 * [v, -v], which yields min(v) and -max(v) together. */
static int agree(const char *what, const int32_t *v, size_t n) {
        int32_t *buf = malloc(2 * n * sizeof *buf);
        if (!buf)
                return set_error(-ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                buf[i] = v[i];
                buf[n + i] = -v[i];
        }
        char name[64];
        snprintf(name, sizeof name, "__hvd.pset.%u", ++G.pset_seq);
        int64_t shape[1] = { (int64_t) (2 * n) };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = buf;
        q.output = buf;
        q.dtype = HVD_INT32;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_MIN;
        int r = run_sync_ex(&q, HVD__KIND__KIND_ALLREDUCE, true, NULL);
        for (size_t i = 0; i < n && r >= 0; i++)
                if (buf[i] != v[i] || -buf[n + i] != v[i])
                        r = set_error(-EINVAL, "%s: the ranks passed different arguments", what);
        free(buf);
        return r;
}

int hvd_add_process_set(const int *ranks, size_t n) {
        if (!hvd_is_initialized())
                return set_error(HVD_ENOTINIT, "hvd is not initialized: call hvd_init() first");
        if (!ranks || n == 0 || n > (size_t) G.size)
                return set_error(-EINVAL, "add_process_set: between 1 and %d ranks are needed", G.size);
        int *sorted = malloc(n * sizeof *sorted);
        int32_t *v = calloc((size_t) G.size + 1, sizeof *v);
        pset_t *ps = calloc(1, sizeof *ps);
        int r = 0;
        if (!sorted || !v || !ps) {
                r = set_error(-ENOMEM, "out of memory");
                goto out;
        }
        memcpy(sorted, ranks, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_int);
        for (size_t i = 0; i < n && r >= 0; i++) {
                if (sorted[i] < 0 || sorted[i] >= G.size)
                        r = set_error(-EINVAL, "add_process_set: rank %d out of range (size %d)", sorted[i], G.size);
                else if (i && sorted[i] == sorted[i - 1])
                        r = set_error(-EINVAL, "add_process_set: rank %d listed twice", sorted[i]);
        }
        if (r < 0)
                goto out;
        /* the set's members, padded: all ranks must agree */
        v[0] = (int32_t) n;
        for (size_t i = 0; i < n; i++)
                v[i + 1] = sorted[i];
        if ((r = agree("add_process_set", v, (size_t) G.size + 1)) < 0)
                goto out;
        pthread_mutex_lock(&G.lock);
        int id = 0;
        for (int k = 1; k < HVD_MAX_PROCESS_SETS && !id; k++)
                if (!G.psets[k])
                        id = k;
        /* an existing set with the same members is returned as it is (Horovod
         * refuses duplicates; the same members under one id keeps ids stable) */
        for (int k = 1; k < HVD_MAX_PROCESS_SETS; k++)
                if (G.psets[k] && G.psets[k]->n == (int) n &&
                    memcmp(G.psets[k]->ranks_int, sorted, n * sizeof(int)) == 0) {
                        pthread_mutex_unlock(&G.lock);
                        r = set_error(-EEXIST, "add_process_set: a process set with these ranks exists (id %d)", k);
                        goto out;
                }
        if (!id) {
                pthread_mutex_unlock(&G.lock);
                r = set_error(-ENOSPC, "add_process_set: at most %d process sets", HVD_MAX_PROCESS_SETS - 1);
                goto out;
        }
        ps->n = (int) n;
        ps->me = -1;
        ps->ranks = malloc(n * sizeof *ps->ranks);
        if (!ps->ranks) {
                pthread_mutex_unlock(&G.lock);
                r = set_error(-ENOMEM, "out of memory");
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                ps->ranks[i] = (uint32_t) sorted[i];
                if (sorted[i] == G.rank)
                        ps->me = (int) i;
        }
        ps->ranks_int = TAKE_PTR(sorted);
        G.psets[id] = TAKE_PTR(ps);
        G.group_seq[id] = 0; /* a reused id starts its groups afresh on every rank */
        pthread_mutex_unlock(&G.lock);
        r = id;
out:
        free(sorted);
        free(v);
        pset_free(ps);
        return r;
}

int hvd_remove_process_set(int id) {
        if (!hvd_is_initialized())
                return set_error(HVD_ENOTINIT, "hvd is not initialized: call hvd_init() first");
        if (id <= 0 || id >= HVD_MAX_PROCESS_SETS || !G.psets[id])
                return set_error(-EINVAL, "remove_process_set: process set %d does not exist", id);
        int32_t v = id;
        int r = agree("remove_process_set", &v, 1);
        if (r < 0)
                return r;
        pthread_mutex_lock(&G.lock);
        pset_free(G.psets[id]);
        G.psets[id] = NULL;
        G.group_seq[id] = 0;
        pthread_mutex_unlock(&G.lock);
        return 0;
}

static const pset_t *pset_get(int id) {
        return id > 0 && id < HVD_MAX_PROCESS_SETS ? G.psets[id] : NULL;
}

int hvd_process_set_rank(int id) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (id == 0)
                return G.rank;
        const pset_t *ps = pset_get(id);
        if (!ps)
                return -EINVAL;
        return ps->me >= 0 ? ps->me : -ENOENT;
}

int hvd_process_set_size(int id) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (id == 0)
                return G.size;
        const pset_t *ps = pset_get(id);
        return ps ? ps->n : -EINVAL;
}

int hvd_process_set_included(int id) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (id == 0)
                return 1;
        const pset_t *ps = pset_get(id);
        return ps ? ps->me >= 0 : -EINVAL;
}

int hvd_process_set_ranks(int id, const int **ranks, size_t *n) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (!ranks || !n)
                return -EINVAL;
        const pset_t *ps = pset_get(id);
        if (!ps)
                return -EINVAL;
        *ranks = ps->ranks_int;
        *n = (size_t) ps->n;
        return 0;
}

/* ---- timeline ---- */

static const char *entry_name(const Hvd__Entry *en) {
        return en->name[0] ? en->name : id_name(en->id);
}

static void wake_bg(void) {
        uint64_t one = 1;
        if (G.wake_fd >= 0 && write(G.wake_fd, &one, sizeof one) < 0)
                (void) 0;
}

/* Tells the coordinator whether rank 0 records (it then adds readiness
 * times to schedules), or answers its request. Background thread. */
static void send_timeline_state(bool on, int code, const char *msg) {
        if (G.solo) {
                hvd_negotiator_set_timeline(G.neg, on);
                return;
        }
        Hvd__TimelineControl tc = HVD__TIMELINE_CONTROL__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        tc.start = on;
        tc.reply = true;
        tc.code = code;
        tc.message = (char *) msg;
        env.body_case = HVD__ENVELOPE__BODY_TIMELINE_CONTROL;
        env.timeline_control = &tc;
        (void) hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT);
}

static void timeline_sync(void) {
        bool on;
        if (hvd_timeline_take_change(&on))
                send_timeline_state(on, 0, "");
}

/* hvdctl timeline JOB start/stop, through the coordinator. */
static void timeline_remote(const Hvd__TimelineControl *tc) {
        char err[ERRLEN] = "", path[PATH_MAX];
        int r;
        if (G.rank != 0) {
                r = -EINVAL;
                snprintf(err, sizeof err, "rank %d records no timeline; rank 0 does", G.rank);
        } else if (tc->start)
                /* whoever may talk to the daemon must not make the job
                 * overwrite its files: a new file only */
                r = hvd_timeline_start(tc->file, tc->mark_cycles, true, err, sizeof err);
        else
                r = hvd_timeline_stop();
        bool on;
        hvd_timeline_take_change(&on);
        if (r >= 0 && tc->start && !realpath(tc->file, path))
                snprintf(path, sizeof path, "%s", tc->file);
        if (r < 0 && !err[0])
                snprintf(err, sizeof err, "%s", hvd_strerror(r));
        send_timeline_state(on, r, r < 0 ? err : tc->start ? path : "");
}

int hvd_start_timeline(const char *file, int mark_cycles) {
        if (!hvd_is_initialized())
                return set_error(HVD_ENOTINIT, "hvd_start_timeline: call hvd_init first");
        if (!file || !*file)
                return set_error(-EINVAL, "hvd_start_timeline: no file name given");
        if (G.rank != 0)
                return 0; /* rank 0 alone writes the job's timeline */
        char err[ERRLEN];
        int r = hvd_timeline_start(file, mark_cycles != 0, false, err, sizeof err);
        if (r < 0)
                return set_error(r, "%s", err);
        wake_bg();
        /* the coordinator hears of it before this rank's next tensors, so
         * their readiness times are recorded */
        hvd_timeline_wait_told(2 * USEC_PER_SEC);
        return 0;
}

int hvd_stop_timeline(void) {
        if (!hvd_is_initialized())
                return set_error(HVD_ENOTINIT, "hvd_stop_timeline: call hvd_init first");
        int r = hvd_timeline_stop();
        wake_bg();
        if (r < 0)
                return set_error(r, "hvd_stop_timeline: writing the timeline failed: %s", hvd_strerror(r));
        return 0;
}
