/* fastpath_turn.c — the worker's side of the fast path (fastpath.c, the
 * board): one node, tensors with a cache id. A turn moves queued tensors
 * onto the board, runs the board's records, sends withdrawn tensors to the
 * coordinator and reports counters; it is the runner's (G.runner held, by
 * the background thread or by a user thread waiting for a cached
 * collective; in node mode the background thread alone takes turns).
 *
 * Order invariant: on a job with a fast path, a rank runs nothing when it
 * arrives; it runs the board's log in order. The log holds the fast
 * records (cache ids every local rank posted: allreduces, broadcasts,
 * allgathers, reducescatters and, on one host, alltoalls on the CPU;
 * fused below by the same rules as the coordinator's, from the same
 * sorted ids and the same threshold, so every rank builds the same
 * operations) and a marker per coordinator
 * schedule (appended by the first rank that received it; a rank that meets
 * a marker first waits for its schedule). So cached and uncached tensors of
 * one cycle run in one order on every rank, whichever path each took.
 * A tensor takes the fast path only with parameters a schedule confirmed
 * (fast_ok: every rank agreed on them); anything else — a new name, new
 * parameters, process sets, GPUs, a join — goes to the coordinator. A
 * group goes onto the board whole, when each member may, or whole to the
 * coordinator (fastpath.c keeps it whole from there). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "client.h"
#include "fusion.h"
#include "timeline.h"
#include "util.h"

#define FP_REPORT_USEC (50 * USEC_PER_MSEC)

void hvd_fp_hold_schedule(Hvd__Envelope *env) {
        hvd_held_schedule_t *h = calloc(1, sizeof *h);
        if (!h) {
                hvd_job_abort(-ENOMEM, "out of memory");
                return;
        }
        h->s = env->schedule;
        env->schedule = NULL;
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        /* in seq order, whatever order the waits kept them in */
        hvd_held_schedule_t **pp = &G.sched_head;
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
                hvd_job_abort(-ENOMEM, "out of memory");
}

void hvd_fp_free_held(void) {
        while (G.sched_head) {
                hvd_held_schedule_t *h = G.sched_head;
                G.sched_head = h->next;
                hvd_negotiator_schedule_free(&h->s);
                free(h);
        }
        G.sched_tail = NULL;
}

/* *dst (of *n entries, owned) becomes a copy of src's n_src: 0, or -ENOMEM
 * with *dst unchanged. */
static int keep_copy(int64_t **dst, uint32_t *n, const int64_t *src, size_t n_src) {
        if (*n != n_src) {
                int64_t *p = realloc(*dst, n_src * sizeof *p);
                if (!p)
                        return -ENOMEM;
                *dst = p;
                *n = (uint32_t) n_src;
        }
        if (*dst != src) /* a fast run's entry holds the kept values */
                memcpy(*dst, src, n_src * sizeof *src);
        return 0;
}

/* A schedule ran e (ok) or refused it: its parameters are (not) known to
 * be every rank's. An allgather's rows and an alltoall's splits, every
 * rank's, are kept from en: while every rank posts the parameters it last
 * sent, they are those. */
void hvd_fp_confirm(const hvd_entry_t *e, bool ok, const Hvd__Entry *en) {
        if (!G.fp)
                return;
        hvd_known_t *k = hvd_strmap_get(G.known, e->name, strlen(e->name));
        if (!k)
                return;
        if (!ok || !k->has_id || k->p.process_set != 0 || !hvd_params_equal(&k->p, &e->p)) {
                k->fast_ok = k->fast_ok && ok;
                return;
        }
        size_t n = (size_t) G.size;
        if (e->p.kind == HVD__KIND__KIND_ALLGATHER &&
            (!en || en->n_rank_rows != n || keep_copy(&k->rank_rows, &k->n_rank_rows, en->rank_rows, n) < 0)) {
                k->fast_ok = false;
                return;
        }
        if (e->p.kind == HVD__KIND__KIND_ALLTOALL &&
            (!en || en->n_splits != n * n || keep_copy(&k->splits, &k->n_splits, en->splits, n * n) < 0)) {
                k->fast_ok = false;
                return;
        }
        k->fast_ok = true;
}

/* 1: e may take the fast path with cache id *id; 0: it has an id but goes
 * to the coordinator; -1: the fast path does not apply. Counts e as an
 * instance of its id once. */
static int fp_classify(hvd_entry_t *e, uint32_t *id) {
        if (e->p.process_set != 0)
                return -1;
        /* node mode runs nothing from the board: any collective of every
         * rank whose schedule names its ranks' parts by cache id alone; on
         * one host the board runs those collectives on the CPU, whose
         * operation every rank builds alike from its own entry (and an
         * allgather's rows or an alltoall's splits, kept from its last
         * schedule) */
        if (e->p.kind != HVD__KIND__KIND_ALLREDUCE && e->p.kind != HVD__KIND__KIND_BROADCAST &&
            e->p.kind != HVD__KIND__KIND_ALLGATHER && e->p.kind != HVD__KIND__KIND_REDUCESCATTER &&
            e->p.kind != HVD__KIND__KIND_ALLTOALL)
                return -1;
        /* an alltoall's schedule carries every rank's splits, which only
         * the board of one host keeps (hvd_fp_confirm) */
        if (G.fp_node && e->p.kind == HVD__KIND__KIND_ALLTOALL)
                return -1;
        if (!G.fp_node && e->p.device != HVD_DEVICE_CPU)
                return -1;
        /* rank 0's timeline marks each rank's readiness as the coordinator
         * sees it: while it records, rank 0 sends everything there (the
         * other ranks follow at once, as for any tensor sent the normal way) */
        if (hvd_timeline_on())
                return -1;
        hvd_known_t *k = hvd_strmap_get(G.known, e->name, strlen(e->name));
        if (!k || !k->has_id || k->id >= HVD_FASTPATH_MAX_IDS || k->p.process_set != 0)
                return -1;
        if (!e->fp_counted) {
                e->fp_counted = true;
                hvd_fastpath_instance(G.fp, k->id);
        }
        *id = k->id;
        if (!G.fp_node && e->p.kind == HVD__KIND__KIND_ALLGATHER && k->n_rank_rows != (uint32_t) G.size)
                return 0;
        if (e->p.kind == HVD__KIND__KIND_ALLTOALL && k->n_splits != (uint32_t) G.size * (uint32_t) G.size)
                return 0;
        return k->fast_ok && hvd_params_equal(&k->p, &e->p) ? 1 : 0;
}

/* Elements of one first-dimension row of e. */
static uint64_t fp_row_elems(const hvd_entry_t *e) {
        uint64_t n = 1;
        for (int d = 1; d < e->p.ndim; d++)
                n *= (uint64_t) e->p.shape[d];
        return n;
}

/* Bytes an entry takes in a fused operation, the same on every rank: an
 * allgather's are every rank's rows, an alltoall's every rank's sends
 * (from its last schedule). */
static uint64_t fp_entry_bytes(const hvd_entry_t *e, const hvd_known_t *k) {
        uint64_t es = hvd_dtype_size(e->p.dtype);
        const int64_t *rows_of = NULL;
        uint32_t n = 0;
        if (e->p.kind == HVD__KIND__KIND_ALLGATHER)
                rows_of = k->rank_rows, n = k->n_rank_rows;
        else if (e->p.kind == HVD__KIND__KIND_ALLTOALL)
                rows_of = k->splits, n = k->n_splits;
        else
                return hvd_entry_count(e) * es;
        uint64_t rows = 0;
        for (uint32_t r = 0; r < n; r++)
                rows += (uint64_t) rows_of[r];
        return rows * fp_row_elems(e) * es;
}

/* One fused broadcast, allgather or reducescatter, or one alltoall, of a
 * record, run as the coordinator's schedule would run it: its entries made
 * from this rank's own (an allgather's rows and an alltoall's splits kept
 * from its last schedule). */
static int fp_run_as_scheduled(hvd_entry_t *const *opm, hvd_known_t *const *km, size_t m) {
        Hvd__Entry ents[64], *ep[64];
        for (size_t i = 0; i < m; i++) {
                const hvd_entry_t *e = opm[i];
                hvd__entry__init(&ents[i]);
                ents[i].id = km[i]->id;
                ents[i].count = hvd_entry_count(e);
                ents[i].row_elems = fp_row_elems(e);
                ents[i].n_shape = (size_t) e->p.ndim;
                ents[i].shape = (int64_t *) e->p.shape;
                if (e->p.kind == HVD__KIND__KIND_ALLGATHER) {
                        ents[i].n_rank_rows = km[i]->n_rank_rows;
                        ents[i].rank_rows = km[i]->rank_rows;
                } else if (e->p.kind == HVD__KIND__KIND_ALLTOALL) {
                        ents[i].n_splits = km[i]->n_splits;
                        ents[i].splits = km[i]->splits;
                }
                ep[i] = &ents[i];
        }
        Hvd__Op op = HVD__OP__INIT;
        op.kind = opm[0]->p.kind;
        op.dtype = opm[0]->p.dtype;
        op.reduce_op = opm[0]->p.reduce_op;
        op.prescale = opm[0]->p.prescale;
        op.postscale = opm[0]->p.postscale;
        op.root = opm[0]->p.root;
        op.device = -1;
        op.n_entries = m;
        op.entries = ep;
        return hvd_schedule_op_execute(&op, pthread_equal(pthread_self(), G.thread));
}

_Static_assert(HVD_FASTPATH_RECORD_IDS <= 64, "a record's tensors fit fp_execute's arrays");

/* Runs one fast record: ids ascending, every one of them in flight here. */
static int fp_execute(const uint32_t *ids, uint32_t n) {
        hvd_assert(G.fp && G.backend);
        char err[ERRLEN];
        hvd_entry_t *em[64];
        hvd_known_t *km[64];
        hvd_fusion_item_t items[64];
        uint32_t op_of[64];
        hvd_fusion_op_t ops[64];
        hvd_xmember_t xm[64];
        hvd_entry_t *opm[64];
        hvd_known_t *opk[64];
        int r = 0;
        if (n > ELEMENTSOF(em)) {
                hvd_job_abort(HVD_EPROTO, "fast path: record too long");
                return HVD_EPROTO;
        }
        pthread_mutex_lock(&G.lock);
        for (uint32_t i = 0; i < n; i++) {
                const char *name = hvd_id_name(ids[i]);
                em[i] = name ? hvd_strmap_get(G.inflight, name, strlen(name)) : NULL;
                /* the known entry: an allreduce needs nothing of it */
                km[i] = em[i] && em[i]->p.kind != HVD__KIND__KIND_ALLREDUCE
                                ? hvd_strmap_get(G.known, name, strlen(name))
                                : NULL;
                if (!em[i] || (em[i]->p.kind != HVD__KIND__KIND_ALLREDUCE && !km[i])) {
                        for (uint32_t k = 0; k < i; k++)
                                hvd_handle_unref(em[k]->h);
                        pthread_mutex_unlock(&G.lock);
                        snprintf(err, sizeof err, "fast path: tensor id %u is not in flight on rank %d", ids[i],
                                 G.rank);
                        hvd_job_abort(HVD_EPROTO, err);
                        return HVD_EPROTO;
                }
                em[i]->h->refs++; /* the op holds its handles, as in hvd_schedule_execute */
        }
        pthread_mutex_unlock(&G.lock);
        for (uint32_t i = 0; i < n; i++) {
                const hvd_entry_t *e = em[i];
                items[i] = (hvd_fusion_item_t){
                        .kind = e->p.kind,
                        .dtype = e->p.dtype,
                        .reduce_op = e->p.reduce_op,
                        .root = e->p.kind == HVD__KIND__KIND_BROADCAST ? e->p.root : 0,
                        .device = -1,
                        .process_set = 0,
                        .prescale = e->p.prescale,
                        .postscale = e->p.postscale,
                        .bytes = fp_entry_bytes(e, km[i]),
                };
        }
        if (G.tune_meter.on) {
                uint64_t bytes = 0;
                for (uint32_t i = 0; i < n; i++) {
                        hvd_tune_meter_see(&G.tune_meter, ids[i]);
                        bytes += items[i].bytes;
                }
                hvd_tune_meter_record(&G.tune_meter, bytes, G.tune_generation, hvd_now_usec());
        }
        size_t n_ops = hvd_fusion_plan(items, n, G.fusion_threshold, op_of, ops);
        hvd_assert(n_ops <= n);
        for (size_t k = 0; k < n_ops && r >= 0; k++) {
                size_t m = 0;
                for (uint32_t i = 0; i < n; i++) {
                        if (op_of[i] != k)
                                continue;
                        hvd_entry_t *e = em[i];
                        xm[m] = (hvd_xmember_t){
                                .in = e->in, .out = e->out, .count = hvd_entry_count(e), .row_elems = hvd_entry_count(e)
                        };
                        opk[m] = km[i];
                        opm[m++] = e;
                }
                hvd_assert(m > 0); /* the planner gives every op a member */
                if (opm[0]->p.kind != HVD__KIND__KIND_ALLREDUCE) {
                        /* completes its entries itself */
                        r = fp_run_as_scheduled(opm, opk, m);
                } else {
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
                                r = hvd_job_verdict(r, err, pthread_equal(pthread_self(), G.thread));
                        pthread_mutex_lock(&G.lock);
                        for (size_t i = 0; i < m; i++)
                                hvd_entry_complete(opm[i], r < 0 ? r : 0, r < 0 ? err : NULL);
                        pthread_mutex_unlock(&G.lock);
                }
                if (G.local_rank == 0) {
                        G.fp_done.ops++;
                        G.fp_done.tensors += m;
                        G.fp_done.fused += m > 1 ? m : 0;
                        G.fp_done.bytes += ops[k].bytes;
                }
                G.fp_done.hits += m;
                /* a user thread may be waiting on the board for these */
                hvd_fastpath_kick(G.fp);
        }
        pthread_mutex_lock(&G.lock);
        for (uint32_t i = 0; i < n; i++)
                hvd_handle_unref(em[i]->h);
        pthread_mutex_unlock(&G.lock);
        if (r < 0 && !G.abort_code)
                hvd_job_abort(r, err);
        return r;
}

/* The autotuner's step meter (local rank 0, one host): a schedule's
 * tensors and the bytes they reduce (an allgather's: all its rows). */
static void meter_schedule(const Hvd__Schedule *s) {
        if (!G.tune_meter.on)
                return;
        uint64_t bytes = 0;
        for (size_t o = 0; o < s->n_ops; o++) {
                const Hvd__Op *op = s->ops[o];
                for (size_t k = 0; k < op->n_entries; k++) {
                        const Hvd__Entry *e = op->entries[k];
                        uint64_t count = e->count;
                        if (!count)
                                for (size_t q = 0; q < e->n_rank_rows; q++)
                                        count += (uint64_t) e->rank_rows[q] * e->row_elems;
                        hvd_tune_meter_see(&G.tune_meter, e->id);
                        bytes += count * hvd_dtype_size((hvd_dtype_t) op->dtype);
                }
        }
        hvd_tune_meter_record(&G.tune_meter, bytes, G.tune_generation, hvd_now_usec());
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
                        const char *name = hvd_id_name(rec->ids[i]);
                        const hvd_entry_t *e = name ? hvd_strmap_get(G.inflight, name, strlen(name)) : NULL;
                        G.fp_node_posted[G.fp_node_n] = e ? e->fp_posted_usec : 0;
                        G.fp_node_ids[G.fp_node_n++] = rec->ids[i];
                }
                pthread_mutex_unlock(&G.lock);
                return 0;
        }
        if (!rec->slow)
                return fp_execute(rec->ids, rec->n);
        if (!G.sched_head || G.sched_head->s->seq != rec->seq)
                hvd_link_process_held(); /* a wait may have kept it */
        /* node mode: copies of schedules this rank ran from the board */
        while (G.fp_node && G.sched_head && G.sched_head->s->seq < rec->seq) {
                hvd_held_schedule_t *old = G.sched_head;
                G.sched_head = old->next;
                if (!G.sched_head)
                        G.sched_tail = NULL;
                hvd_negotiator_schedule_free(&old->s);
                free(old);
        }
        hvd_held_schedule_t *h = G.sched_head;
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
                        hvd_job_abort(r, err);
                        return r;
                }
        } else {
                if (!h)
                        snprintf(err, sizeof err, "fast path: a schedule's marker came before the schedule");
                else
                        snprintf(err, sizeof err, "fast path: schedule %" PRIu64 " arrived, expected %" PRIu64,
                                 h->s->seq, rec->seq);
                hvd_job_abort(HVD_EPROTO, err);
                return HVD_EPROTO;
        }
        if (G.fp_node && (r = hvd_schedule_keys_resolve(&s, err, sizeof err)) < 0)
                hvd_job_abort(r, err);
        else {
                meter_schedule(s);
                r = hvd_schedule_execute(s);
        }
        hvd_negotiator_schedule_free(&s);
        return r < 0 ? r : G.abort_code;
}

typedef struct fp_demoted {
        hvd_entry_t *e[HVD_FASTPATH_MAX_GROUP]; /* one step's withdrawals: a whole group fits */
        size_t n;
} fp_demoted_t;

static void fp_demote(void *userdata, uint32_t id) {
        fp_demoted_t *d = userdata;
        const char *name = hvd_id_name(id);
        pthread_mutex_lock(&G.lock);
        hvd_entry_t *e = name ? hvd_strmap_get(G.inflight, name, strlen(name)) : NULL;
        pthread_mutex_unlock(&G.lock);
        if (e && d->n < ELEMENTSOF(d->e))
                d->e[d->n++] = e;
}

/* Sends the fast path's counters to the coordinator (for its status). */
void hvd_fp_report(bool force) {
        if (!G.sock || (!memcmp(&G.fp_done, &G.fp_sent, sizeof G.fp_done) && !G.tune_meter.n))
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
        done.n_tune_step_usec = done.n_tune_step_bytes = done.n_tune_step_generation = G.tune_meter.n;
        done.tune_step_usec = G.tune_meter.usec;
        done.tune_step_bytes = G.tune_meter.step_bytes;
        done.tune_step_generation = G.tune_meter.step_generation;
        env.body_case = HVD__ENVELOPE__BODY_DONE;
        env.done = &done;
        if (hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT) == 0) {
                G.fp_sent = G.fp_done;
                G.tune_meter.n = 0;
        }
        G.fp_report_usec = now;
}

/* Node mode: the ids this rank's records completed for the host go to the
 * coordinator in one Ready, at most once a cycle (as ranks send theirs). */
static void fp_node_flush(bool force) {
        uint64_t now = hvd_now_usec();
        if (!G.fp_node_n || G.abort_code ||
            (!force && now < G.fp_node_sent_usec + __atomic_load_n(&G.cycle_time_usec, __ATOMIC_RELAXED)))
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
                hvd_job_abort(-EIO, "cannot send to the coordinator");
        G.fp_node_n = 0;
        G.fp_node_sent_usec = now;
}

/* A turn's look at the queue: tensors to post on the board (with their
 * ids; a group's members in a row, clen[] at the first of them), ids this
 * rank forgoes, whether a join is queued. */
typedef struct fp_route {
        hvd_entry_t *cand[HVD_FASTPATH_MAX_GROUP];
        uint32_t cid[HVD_FASTPATH_MAX_GROUP], forgo[HVD_FASTPATH_MAX_GROUP];
        uint16_t clen[HVD_FASTPATH_MAX_GROUP];
        size_t nc, nf;
        bool join;
} fp_route_t;
_Static_assert(HVD_FASTPATH_MAX_GROUP <= UINT16_MAX, "a group's length fits clen");
/* Tensors that are not a group's members looked at in one turn (a group
 * has room for all its members, up to HVD_FASTPATH_MAX_GROUP) */
#define FP_TURN_SINGLES 64

/* A turn's scratch, sized for the largest group: too large for every
 * calling thread's stack, and the runner's alone (G.runner held) */
static struct fp_turn_scratch {
        fp_route_t rt;
        hvd_entry_t *slow[HVD_FASTPATH_MAX_GROUP];
        uint32_t id[HVD_FASTPATH_MAX_GROUP];
        int c[HVD_FASTPATH_MAX_GROUP];
        fp_demoted_t d;
} scratch;

/* The members of group h, all queued and none looked at yet: onto the
 * board together when each may go (their fp_boarded set), else all to the
 * coordinator, forgoing the ids they have. false: no room left this turn
 * (they wait for the next). */
static bool route_group(hvd_handle_t *h, fp_route_t *rt) {
        size_t n = h->n;
        if (n > HVD_FASTPATH_MAX_GROUP) {
                for (size_t j = 0; j < n; j++)
                        h->m[j].fp_routed = true;
                return true;
        }
        if (rt->nc + n > ELEMENTSOF(rt->cand) || rt->nf + n > ELEMENTSOF(rt->forgo))
                return false;
        uint32_t *id = scratch.id;
        int *c = scratch.c, worst = 1;
        for (size_t j = 0; j < n; j++) {
                h->m[j].fp_routed = true;
                c[j] = fp_classify(&h->m[j], &id[j]);
                worst = HVD_MIN(worst, c[j]);
        }
        if (worst > 0) {
                rt->clen[rt->nc] = (uint16_t) n;
                for (size_t j = 0; j < n; j++) {
                        h->m[j].fp_boarded = true;
                        rt->cand[rt->nc] = &h->m[j];
                        rt->cid[rt->nc++] = id[j];
                }
                return true;
        }
        for (size_t j = 0; j < n; j++)
                if (c[j] >= 0)
                        rt->forgo[rt->nf++] = id[j];
        return true;
}

/* Looks at each queued tensor once; those that do not go onto the board
 * stay queued, for the background thread to send. Returns how many stay. */
static size_t route_queue(fp_route_t *rt) {
        pthread_mutex_lock(&G.lock);
        size_t k = 0;
        for (size_t i = 0; i < G.n_queue; i++) {
                hvd_entry_t *e = G.queue[i];
                uint32_t id;
                if (e->fp_boarded) /* a group's, with its first member */
                        continue;
                if (!e->fp_routed && e->h->n > 1) {
                        /* a group: all its members were queued at once */
                        if (!route_group(e->h, rt)) {
                                G.queue[k++] = e; /* the next turn looks at it */
                                continue;
                        }
                        if (!e->fp_boarded)
                                G.queue[k++] = e;
                        continue;
                }
                if (rt->nc >= FP_TURN_SINGLES || rt->nf >= FP_TURN_SINGLES) {
                        G.queue[k++] = e; /* the next turn looks at it */
                        continue;
                }
                int c = e->fp_routed ? -1 : fp_classify(e, &id);
                e->fp_routed = true;
                rt->join = rt->join || e->p.kind == HVD__KIND__KIND_JOIN;
                if (c > 0) {
                        rt->clen[rt->nc] = 1;
                        rt->cand[rt->nc] = e;
                        rt->cid[rt->nc++] = id;
                        continue;
                }
                if (c == 0)
                        rt->forgo[rt->nf++] = id;
                G.queue[k++] = e;
        }
        G.n_queue = k;
        pthread_mutex_unlock(&G.lock);
        return k;
}

/* One turn of the fast path: queued tensors onto the board, the board's
 * records run, withdrawn tensors to the coordinator, counters reported. */
int hvd_fp_cycle(bool user) {
        hvd_assert(G.fp);
        uint64_t now = hvd_now_usec();
        fp_route_t *rt = &scratch.rt; /* not zeroed: a turn per cached allreduce */
        rt->nc = rt->nf = 0;
        rt->join = false;
        hvd_entry_t **slow = scratch.slow;
        size_t ns = 0;
        size_t k = route_queue(rt);
        bool wake_bg = user && k > 0; /* the background thread sends those */
        if (rt->join)
                hvd_fastpath_set_joining(G.fp, true);
        for (size_t i = 0; i < rt->nf; i++)
                hvd_fastpath_forgo(G.fp, rt->forgo[i]);
        for (size_t i = 0; i < rt->nc; i += rt->clen[i]) {
                size_t n = rt->clen[i];
                bool posted = hvd_fastpath_post_group(G.fp, rt->cid + i, n, now) == 0;
                for (size_t j = i; j < i + n; j++) {
                        if (posted) {
                                rt->cand[j]->fp_posted_usec = now;
                                continue;
                        }
                        /* a group's other ranks need not wait for this one's
                         * members to time out */
                        if (n > 1)
                                hvd_fastpath_forgo(G.fp, rt->cid[j]);
                        rt->cand[j]->fp_boarded = false;
                        slow[ns++] = rt->cand[j];
                }
        }
        if (ns && user) {
                /* the background thread sends them (it alone uses the socket) */
                pthread_mutex_lock(&G.lock);
                hvd_entry_t **nq =
                        G.n_queue + ns <= G.cap_queue ? G.queue : realloc(G.queue, (G.n_queue + ns) * sizeof *nq);
                if (nq) {
                        G.queue = nq;
                        G.cap_queue = HVD_MAX(G.cap_queue, G.n_queue + ns);
                        memcpy(G.queue + G.n_queue, slow, ns * sizeof *slow);
                        G.n_queue += ns;
                }
                pthread_mutex_unlock(&G.lock);
                if (!nq)
                        hvd_job_abort(-ENOMEM, "out of memory");
                ns = 0;
                wake_bg = true;
        }
        if (ns && hvd_link_send_ready(slow, ns) < 0)
                hvd_job_abort(-EIO, "cannot send to the coordinator");
        fp_demoted_t *d = &scratch.d;
        d->n = 0;
        const hvd_fastpath_ops_t ops = { .run = fp_run, .demote = fp_demote };
        hvd_fastpath_step(G.fp, now, user, &ops, d);
        if (d->n && !G.abort_code && hvd_link_send_ready(d->e, d->n) < 0) /* the background thread's turn only */
                hvd_job_abort(-EIO, "cannot send to the coordinator");
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
                hvd_fp_report(false);
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
        if (wake_bg)
                hvd_link_wake();
        return hvd_fastpath_busy(G.fp) && !hvd_fastpath_awaits_schedule(G.fp);
}

/* A user thread waiting for h takes the background thread's turn on the
 * fast path when it can (no thread switch on either side of a cached
 * allreduce). Returns 1 when it should wait on the board, 0 when there is
 * nothing for it to do, -1 when the background thread has the turn. */
int hvd_fp_user_turn(void) {
        if (pthread_mutex_trylock(&G.runner) != 0)
                return -1;
        int r = 0;
        if (G.fp && !G.abort_code && !G.stop)
                r = hvd_fp_cycle(true);
        pthread_mutex_unlock(&G.runner);
        return r;
}

/* G.lock held: h is one cached-looking CPU collective of all ranks that
 * the board runs, on a job with a fast path; its waiter may run the fast
 * path's turn. */
bool hvd_fp_user_may_run(const hvd_handle_t *h) {
        if (!G.fp || G.fp_node || G.abort_code || G.stop || h->n > HVD_FASTPATH_MAX_GROUP)
                return false;
        /* a group is judged by its first member (its kind is all of
         * theirs): one the board cannot take goes to the coordinator anyway,
         * and the turn that finds it queued wakes the background thread */
        const hvd_entry_t *e = &h->m[0];
        uint32_t kind = e->p.kind;
        return h->n_pending > 0 &&
               (kind == HVD__KIND__KIND_ALLREDUCE || kind == HVD__KIND__KIND_BROADCAST ||
                kind == HVD__KIND__KIND_ALLGATHER || kind == HVD__KIND__KIND_REDUCESCATTER ||
                kind == HVD__KIND__KIND_ALLTOALL) &&
               e->p.device == HVD_DEVICE_CPU && e->p.process_set == 0;
}
