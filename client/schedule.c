/* schedule.c — executing the coordinator's schedules, the runner's job:
 * every rank runs every schedule, in seq order (G.next_seq), and each op
 * of it in the schedule's order, so that the collectives meet. Errors of
 * a schedule complete their tensors before any op runs; an op holds a
 * reference on each of its handles while it runs. Also the cache ids
 * schedules hand out, and the schedules kept to be repeated by key. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "timeline.h"
#include "util.h"

/* Records that tensor `name` of process set `ps` has cache id `id` (every
 * rank sees every schedule: an entry of another set's row with the same
 * name must not change this rank's cached id). */
int hvd_id_learn(uint32_t id, const char *name, int ps) {
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
        hvd_known_t *k = hvd_strmap_get(G.known, name, strlen(name));
        if (k && k->p.process_set == ps) {
                k->id = id;
                k->has_id = true;
        }
        return 0;
}

/* An output hvd owns for e, of out_elems elements (rows0 rows): host
 * memory, or memory on the op's GPU from the module. */
static int output_alloc(const Hvd__Op *op, const Hvd__Entry *en, hvd_entry_t *e, const char *name, uint64_t out_elems,
                        int64_t rows0, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        /* one byte at least, so an empty result still has a valid pointer */
        size_t bytes = out_elems * es > 0 ? out_elems * es : 1;
        if (op->device >= 0) {
                /* on the GPU of the op, from the module: the schedule has fixed the size */
                if (!G.gpu.g) {
                        snprintf(err, err_len, "'%s': %s", name, G.gpu.why[0] ? G.gpu.why : "no GPU data plane");
                        return HVD_ENODEVICE;
                }
                if (!(e->alloc_node = calloc(1, sizeof *e->alloc_node)))
                        return -ENOMEM;
                char merr[512] = "";
                int r = G.gpu.mod->mem_alloc(G.gpu.g, bytes, &e->alloc, merr, sizeof merr);
                if (r < 0) {
                        e->alloc = NULL;
                        snprintf(err, err_len, "'%s': output of %zu bytes: %s", name, bytes, merr);
                        return r;
                }
                e->alloc_device = G.gpu.device; /* op->device only says "a GPU" */
        } else if (!(e->alloc = hvd_outbuf_get(bytes, &e->alloc_cap)))
                return -ENOMEM;
        e->alloc_bytes = out_elems * es;
        e->out_ndim = (int) (en->n_shape ? en->n_shape : 1);
        memcpy(e->out_shape, en->shape, en->n_shape * sizeof(int64_t));
        e->out_shape[0] = rows0;
        return 0;
}

/* Prepares one member of a scheduled op: finds this rank's entry (or
 * contributes as a joined rank) and allocates outputs hvd owns. */
static int prepare_member(const Hvd__Op *op, const Hvd__Entry *en, hvd_xmember_t *x, hvd_entry_t **ret, bool joined,
                          char *err, size_t err_len) {
        const char *name = en->name[0] ? en->name : hvd_id_name(en->id);
        if (!name) {
                snprintf(err, err_len, "schedule names unknown tensor id %u", en->id);
                return HVD_EPROTO;
        }
        if (en->name[0] && hvd_id_learn(en->id, en->name, (int) op->process_set) < 0)
                return -ENOMEM;
        pthread_mutex_lock(&G.lock);
        hvd_entry_t *e = hvd_strmap_get(G.inflight, name, strlen(name));
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
        hvd_assert(me >= 0 && me < ss);
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
        int r = output_alloc(op, en, e, name, out_elems, rows0, err, err_len);
        if (r >= 0)
                x->out = e->alloc;
        return r;
}

/* Errors first: those tensors never reach the data plane. */
static int complete_errors(const Hvd__Schedule *s) {
        for (size_t i = 0; i < s->n_errors; i++) {
                const Hvd__TensorError *te = s->errors[i];
                pthread_mutex_lock(&G.lock);
                hvd_entry_t *e = hvd_strmap_get(G.inflight, te->name, strlen(te->name));
                /* the tensor has an id now, like a scheduled one; a rank
                 * that did not submit it (it joined, or is not in its
                 * process set) learns the name too: later schedules give
                 * the id alone */
                int r2 = hvd_id_learn(te->id, te->name, e ? e->p.process_set : -1);
                if (e)
                        hvd_fp_confirm(e, false, NULL);
                if (e)
                        hvd_entry_complete(e, te->code < 0 ? te->code : HVD_EMISMATCH, te->message);
                pthread_mutex_unlock(&G.lock);
                if (r2 < 0) {
                        hvd_job_abort(-ENOMEM, "out of memory");
                        return -ENOMEM;
                }
        }
        return 0;
}

/* Hands one prepared op to its data plane. Consecutive GPU ops share one
 * NCCL group (*in_group; group_ends: the next op is not a GPU op); their
 * entries complete when their events fire. */
static int op_run(const Hvd__Op *op, const hvd_xmember_t *xm, hvd_entry_t **em, bool group_ends, bool *in_group,
                  char *err, size_t err_len) {
        bool gpu = op->device >= 0;
        const char *first = op->n_entries ? hvd_schedule_entry_name(op->entries[0]) : "barrier";
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
                .device = gpu ? G.gpu.device : op->device,
        };
        bool tl = hvd_timeline_on();
        if (tl) {
                hvd_timeline_op_begin(op, hvd_schedule_entry_name, gpu);
                x.phase = hvd_timeline_phase;
        }
        int r = 0;
        if (gpu) {
                if (!*in_group && G.gpu.g && (r = G.gpu.mod->group_start(G.gpu.g, err, err_len)) >= 0)
                        *in_group = true;
                if (r >= 0)
                        r = hvd_gpu_enqueue(&x, em, err, err_len);
                if (*in_group && (group_ends || r < 0)) {
                        int r2 = G.gpu.mod->group_end(G.gpu.g, err, err_len);
                        *in_group = false;
                        if (r >= 0)
                                r = r2;
                }
        } else
                r = hvd_backend_execute(G.backend, &x, err, err_len);
        if (tl)
                hvd_timeline_op_end(r);
        return r;
}

/* One op of a schedule: its members prepared, run, completed (CPU; a GPU
 * op's complete in hvd_gpu_poll). < 0: the job was aborted. */
static int op_execute(const Hvd__Op *op, bool group_ends, bool *in_group, bool may_wait) {
        char err[ERRLEN];
        int r = 0;
        bool gpu = op->device >= 0;
        bool joined = false;
        for (size_t k = 0; k < op->n_joined; k++)
                if ((int) op->joined[k] == G.rank)
                        joined = true;
        hvd_xmember_t xm_small[16];
        hvd_entry_t *em_small[16] = { NULL };
        hvd_xmember_t *xm = op->n_entries <= 16 ? xm_small : calloc(op->n_entries, sizeof *xm);
        hvd_entry_t **em = op->n_entries <= 16 ? em_small : calloc(op->n_entries, sizeof *em);
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
        if (r >= 0)
                r = op_run(op, xm, em, group_ends, in_group, err, sizeof err);
        if (r < 0)
                r = hvd_job_verdict(r, err, may_wait);
        /* rows of an allgather, or splits of an alltoall, with a joined rank
         * are not its next ones */
        bool rows_kept = op->kind == HVD__KIND__KIND_ALLGATHER || op->kind == HVD__KIND__KIND_ALLTOALL;
        for (size_t k = 0; k < op->n_entries && em && r >= 0 && !gpu && !op->process_set; k++)
                if (em[k])
                        hvd_fp_confirm(em[k], !rows_kept || !op->n_joined, op->entries[k]);
        pthread_mutex_lock(&G.lock);
        for (size_t k = 0; k < op->n_entries && xm && em && (!gpu || r < 0); k++)
                if (em[k])
                        hvd_entry_complete(em[k], r < 0 ? r : 0, r < 0 ? err : NULL);
        for (size_t k = 0; k < op->n_entries && em; k++)
                if (em[k])
                        hvd_handle_unref(em[k]->h);
        pthread_mutex_unlock(&G.lock);
        if (xm != xm_small)
                free(xm);
        if (em != em_small)
                free(em);
        if (r < 0)
                hvd_job_abort(r, err);
        return r;
}

int hvd_schedule_op_execute(const Hvd__Op *op, bool may_wait) {
        bool in_group = false;
        return op_execute(op, true, &in_group, may_wait);
}

/* Every rank has joined (every rank runs this at the same schedule). */
static void join_done(int last_rank) {
        hvd_fastpath_set_joining(G.fp, false);
        pthread_mutex_lock(&G.lock);
        hvd_entry_t *e = hvd_strmap_get(G.inflight, HVD_JOIN_NAME, strlen(HVD_JOIN_NAME));
        if (e) {
                e->h->result = last_rank;
                hvd_entry_complete(e, 0, NULL);
        }
        pthread_mutex_unlock(&G.lock);
}

static int execute_schedule_ops(const Hvd__Schedule *s) {
        if (s->seq != G.next_seq) {
                char err[ERRLEN];
                snprintf(err, sizeof err, "schedule %" PRIu64 " arrived, expected %" PRIu64, s->seq, G.next_seq);
                hvd_job_abort(HVD_EPROTO, err);
                return HVD_EPROTO;
        }
        G.next_seq++;
        if (s->tuning && s->tuning->generation > G.tune_generation) {
                /* the autotuner's change, from this schedule on: every rank
                 * runs every schedule in seq order, so all apply it here */
                pthread_mutex_lock(&G.lock);
                G.tune_generation = s->tuning->generation;
                G.tune_seq = s->seq;
                G.fusion_threshold = s->tuning->fusion_threshold;
                __atomic_store_n(&G.cycle_time_usec, s->tuning->cycle_time_usec, __ATOMIC_RELAXED);
                G.tune_switches =
                        (s->tuning->switches & ~G.tune_fixed_switches) | (G.tune_switches & G.tune_fixed_switches);
                pthread_mutex_unlock(&G.lock);
                /* the runner executes every operation: none runs now */
                hvd_backend_set_switches(G.backend, G.tune_switches, G.tune_fixed_switches);
        }
        if (hvd_timeline_on())
                hvd_timeline_schedule(s, hvd_schedule_entry_name);
        int r = complete_errors(s);
        bool in_group = false;
        for (size_t i = 0; i < s->n_ops && r >= 0; i++)
                r = op_execute(s->ops[i], i + 1 == s->n_ops || s->ops[i + 1]->device < 0, &in_group, true);
        if (r < 0)
                return r;
        if (s->join_done_last_rank >= 0)
                join_done(s->join_done_last_rank);
        return 0;
}

/* Runs a schedule and keeps the counters the daemon's status shows. */
int hvd_schedule_execute(const Hvd__Schedule *s) {
        uint64_t t0 = hvd_now_usec();
        int r = execute_schedule_ops(s);
        atomic_fetch_add_explicit(&G.busy_usec, hvd_now_usec() - t0, memory_order_relaxed);
        atomic_store_explicit(&G.done_seq, s->seq, memory_order_relaxed);
        return r;
}

/* Keeps a copy of a schedule's packed envelope under key. */
static int sched_keep(uint32_t key, const void *data, size_t len) {
        hvd_assert(key > 0 && key <= HVD_WIRE_SCHEDULE_KEYS); /* hvd_wire_decode checked it */
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
        hvd_assert(k > 0 && k <= HVD_WIRE_SCHEDULE_KEYS); /* hvd_wire_decode checked it */
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
int hvd_schedule_by_key(const void *data, size_t len, Hvd__Envelope **env, char *err, size_t err_len) {
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

/* Node mode: a schedule kept by key is kept, and a repeat becomes the kept
 * one, as it runs (in seq order; hvd_schedule_by_key does it on arrival where
 * every schedule comes on the socket, in that same order). */
int hvd_schedule_keys_resolve(Hvd__Schedule **sp, char *err, size_t len) {
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

void hvd_schedule_forget(void) {
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
}
