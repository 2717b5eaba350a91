/* batch.c — a host's readiness, one message to its root each reactor turn
 * (at the root: entered once the turn's messages are read): each rank's
 * readiness in the order it came, a first step's new requests that every
 * local rank sent alike once for all of them (pool.c), and the cached ids
 * every local rank posted as one node-level id (a tally of the local
 * ranks, tally.c). */
#include "config.h"

#include "internal.h"

void batch_clear(batch_t *b) {
        for (size_t i = 0; i < b->n_fwd; i++)
                protobuf_c_message_free_unpacked(&b->fwd[i]->base, NULL);
        b->n_fwd = 0;
        b->n_departed = 0;
        b->n_ids = 0;
}

void batch_free(batch_t *b) {
        batch_clear(b);
        free(b->fwd);
        free(b->ids);
        free(b->ids_waited);
        free(b->departed);
        tally_free(&b->tally);
        pool_free(b->pool);
        b->pool = NULL;
}

int batch_append(job_t *j, uint32_t rank, Hvd__Ready *ready) {
        hvd_assert(rank < j->size && j->ranks[rank]); /* a local rank's */
        batch_t *b = &j->batch;
        Hvd__RankReady *rr = NULL;
        if (b->n_fwd == b->cap_fwd) {
                size_t cap = b->cap_fwd ? b->cap_fwd * 2 : 16;
                Hvd__RankReady **nf = realloc(b->fwd, cap * sizeof *nf);
                if (!nf)
                        goto oom;
                b->fwd = nf;
                b->cap_fwd = cap;
        }
        if (!(rr = calloc(1, sizeof *rr)))
                goto oom;
        hvd__rank_ready__init(rr);
        rr->rank = rank;
        rr->ready = ready;
        b->fwd[b->n_fwd++] = rr;
        return 0;
oom:
        protobuf_c_message_free_unpacked(&ready->base, NULL);
        return -ENOMEM;
}

/* The job's pool, made when first needed (NULL: one local rank, or no
 * memory, which only costs the sharing). */
static pool_t *pool_of(job_t *j) {
        if (!j->batch.pool && j->local_size > 1)
                j->batch.pool = pool_new(j->local_size);
        return j->batch.pool;
}

void batch_note_join(job_t *j, const Hvd__Ready *q) {
        for (size_t k = 0; k < q->n_requests; k++)
                if (q->requests[k]->kind == HVD__KIND__KIND_JOIN)
                        pool_stop(pool_of(j));
}

bool batch_holds(job_t *j, const Hvd__Ready *q) {
        return j->batch.n_fwd || pool_holds(j->batch.pool) || pool_wants(pool_of(j), q);
}

void batch_add(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Ready *q) {
        pool_t *p = pool_of(j);
        batch_note_join(j, q);
        int r;
        uint64_t now = hvd_now_usec(), due;
        if (pool_wants(p, q)) {
                r = pool_add(p, w->rank, w->local_rank, q, now);
                if (r == 1) /* other parameters by rank: nothing to share, nothing to wait for */
                        r = pool_release(p, j);
                else if (r == 0 && !pool_expired(p, now, &due))
                        d->next_housekeeping = earliest(d->next_housekeeping, due);
        } else if ((r = pool_release(p, j)) == 0)
                r = batch_append(j, w->rank, q);
        else
                protobuf_c_message_free_unpacked(&q->base, NULL);
        if (r < 0)
                job_abort(d, j, -1, -ENOMEM, "out of memory");
}

int ids_push(uint32_t **ids, uint64_t **waited, size_t *n, size_t *cap, uint32_t id, uint64_t w) {
        if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 256;
                uint32_t *ni = realloc(*ids, c * sizeof *ni);
                if (ni)
                        *ids = ni;
                uint64_t *nw = realloc(*waited, c * sizeof *nw);
                if (nw)
                        *waited = nw;
                if (!ni || !nw)
                        return -ENOMEM;
                *cap = c;
        }
        (*ids)[*n] = id;
        (*waited)[(*n)++] = w;
        return 0;
}

/* One node-level id for the root, with how long it waited here. Returns
 * false when the job was aborted. */
static bool node_id_push(hvd_daemon_t *d, job_t *j, uint32_t id, uint64_t waited) {
        batch_t *b = &j->batch;
        if (ids_push(&b->ids, &b->ids_waited, &b->n_ids, &b->cap_ids, id, waited) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return false;
        }
        return true;
}

/* ---- the tally of the local ranks' cached ids ---- */

/* The local worker of local rank lr, or NULL. */
static worker_t *local_worker(const job_t *j, uint32_t lr) {
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && j->ranks[r]->local_rank == lr)
                        return j->ranks[r];
        return NULL;
}

static int release_part(void *userdata, uint32_t part, const uint32_t *ids, const uint64_t *waited, size_t n) {
        job_t *j = userdata;
        worker_t *w = local_worker(j, part);
        if (!w)
                return 0;
        Hvd__Ready *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        hvd__ready__init(q);
        q->cached = malloc(n * sizeof *q->cached);
        q->cached_waited_usec = malloc(n * sizeof *q->cached_waited_usec);
        if (!q->cached || !q->cached_waited_usec) {
                protobuf_c_message_free_unpacked(&q->base, NULL);
                return -ENOMEM;
        }
        memcpy(q->cached, ids, n * sizeof *ids);
        memcpy(q->cached_waited_usec, waited, n * sizeof *waited);
        q->n_cached = q->n_cached_waited_usec = n;
        return batch_append(j, w->rank, q);
}

/* Every partial node-level readiness goes to the root rank by rank: the
 * ids stay rank by rank until their schedule passes. */
static void batch_release(hvd_daemon_t *d, job_t *j) {
        if (tally_release(&j->batch.tally, hvd_now_usec(), release_part, j) < 0)
                job_abort(d, j, -1, -ENOMEM, "out of memory");
}

/* Whether op includes every local rank (so that each of them posts it). */
static bool of_all_local(const Hvd__Op *op, void *userdata) {
        const job_t *j = userdata;
        if (op->process_set == 0)
                return true;
        uint32_t here = 0;
        for (size_t k = 0; k < op->n_set_ranks; k++)
                here += op->set_ranks[k] < j->size && j->ranks[op->set_ranks[k]];
        return here == j->local_size;
}

void batch_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s) {
        batch_t *b = &j->batch;
        if (!b->tally.n_parts)
                tally_init(&b->tally, j->local_size);
        const uint32_t *kept = s->repeat_key ? j->key_ids[s->repeat_key] : NULL;
        uint32_t n_kept = s->repeat_key ? j->key_n[s->repeat_key] : 0;
        int r = tally_learn_schedule(&b->tally, s, kept, n_kept, of_all_local, j);
        if (r < 0)
                job_abort(d, j, -1, r, "schedule %" PRIu64 ": %s", s->seq, hvd_strerror(r));
        if (s->join_done_last_rank >= 0)
                b->joined = 0;
}

/* A local rank's cached ids (q stays the caller's): those every local rank
 * takes part in are tallied and leave for the root as one node-level id
 * once the last local rank posted them; the others stay in q, for the
 * root rank by rank. Returns false when the job was aborted. */
static bool tally_ready(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Ready *q) {
        batch_t *b = &j->batch;
        for (size_t i = 0; i < q->n_requests; i++)
                if (q->requests[i]->kind == HVD__KIND__KIND_JOIN)
                        b->joined++;
        /* new or changed parameters, or a join: what waits here would wait
         * for ranks that will not post it cached; it goes rank by rank */
        if (q->n_requests)
                batch_release(d, j);
        if (b->off || b->joined || j->state != JOB_RUNNING || !b->tally.n_parts)
                return j->state == JOB_RUNNING;
        uint64_t now = hvd_now_usec();
        size_t keep = 0;
        bool has_waited = q->n_cached_waited_usec == q->n_cached;
        for (size_t i = 0; i < q->n_cached; i++) {
                uint32_t id = q->cached[i];
                uint64_t wt = has_waited ? q->cached_waited_usec[i] : 0, waited;
                if (!tally_counts(&b->tally, id)) {
                        q->cached[keep] = id;
                        if (has_waited)
                                q->cached_waited_usec[keep] = wt;
                        keep++;
                        continue;
                }
                int r = tally_post(&b->tally, id, w->local_rank, wt < now ? now - wt : now, now, &waited);
                if (r == -EEXIST) {
                        job_abort(d, j, (int) w->rank, HVD_EDUPLICATE,
                                  "rank %u submitted the tensor of cache id %u twice before it completed", w->rank, id);
                        return false;
                }
                if (r == 1 && !node_id_push(d, j, id, waited))
                        return false;
        }
        q->n_cached = keep;
        if (has_waited)
                q->n_cached_waited_usec = keep;
        return true;
}

void batch_ready(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Envelope *env) {
        if (!tally_ready(d, j, w, env->ready))
                return;
        if (!env->ready->n_requests && !env->ready->n_cached)
                return; /* all of it waits here for the node-level message */
        /* the rest goes to the root rank by rank, with this turn's batch */
        Hvd__Ready *q = TAKE_PTR(env->ready);
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        batch_add(d, j, w, q);
}

void batch_departed(hvd_daemon_t *d, job_t *j, uint32_t rank) {
        batch_t *b = &j->batch;
        /* the others' ids and names can no longer complete on this host */
        b->off = true;
        batch_release(d, j);
        pool_stop(b->pool);
        if (pool_release(b->pool, j) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        uint32_t *nd = realloc(b->departed, (b->n_departed + 1) * sizeof *nd);
        if (!nd) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        b->departed = nd;
        b->departed[b->n_departed++] = rank;
}

/* Housekeeping: a partial node-level readiness or a first step's names
 * held for long go rank by rank (the root's stall inspector names the
 * missing ranks). */
uint64_t batch_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        if (j->state != JOB_RUNNING)
                return UINT64_MAX;
        uint64_t next = UINT64_MAX;
        if (pool_expired(j->batch.pool, now, &next)) {
                next = UINT64_MAX; /* it goes with this turn's batch */
                if (pool_release(j->batch.pool, j) < 0) {
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return UINT64_MAX;
                }
        }
        tally_t *t = &j->batch.tally;
        if (!t->oldest)
                return next;
        if (tally_expired(t, now, TALLY_HOLD_USEC))
                batch_release(d, j);
        return earliest(next, tick);
}

bool batch_node_ready(hvd_daemon_t *d, job_t *j, worker_t *w, const Hvd__Ready *q) {
        if (j->cross_size < 2) {
                job_abort(d, j, (int) w->rank, HVD_EPROTO,
                          "rank %u sent host-level readiness, but the job runs on one host", w->rank);
                return false;
        }
        d->metrics.board_node_ready++;
        d->metrics.board_node_ids += q->n_node_cached;
        bool has_waited = q->n_node_cached_waited_usec == q->n_node_cached;
        if (job_negotiates(j)) {
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                nr.n_node_cached = q->n_node_cached;
                nr.node_cached = q->node_cached;
                nr.n_node_cached_waited_usec = has_waited ? q->n_node_cached : 0;
                nr.node_cached_waited_usec = q->node_cached_waited_usec;
                root_submit_node(d, j, j->cross_rank, &nr, true);
                return j->state == JOB_RUNNING;
        }
        /* a readiness from each local rank, for status (as the root counts
         * them; w's own is counted with its message) */
        uint64_t now = hvd_now_usec();
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && r != w->rank) {
                        j->rstat[r].last_seen_usec = now;
                        j->rstat[r].readies++;
                }
        if (!j->batch.off) {
                for (size_t i = 0; i < q->n_node_cached; i++)
                        if (!node_id_push(d, j, q->node_cached[i], has_waited ? q->node_cached_waited_usec[i] : 0))
                                return false;
                return true;
        }
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *o = j->ranks[r];
                if (!o || o->goodbye)
                        continue;
                Hvd__Ready *c = calloc(1, sizeof *c);
                if (!c)
                        goto oom;
                hvd__ready__init(c);
                c->cached = malloc(q->n_node_cached * sizeof *c->cached);
                if (!c->cached) {
                        free(c);
                        goto oom;
                }
                memcpy_safe(c->cached, q->node_cached, q->n_node_cached * sizeof *c->cached);
                c->n_cached = q->n_node_cached;
                if (batch_append(j, o->rank, c) < 0)
                        goto oom;
        }
        return true;
oom:
        job_abort(d, j, -1, -ENOMEM, "out of memory");
        return false;
}

/* ---- the turn's message ---- */

/* The turn's batch: entered at the root (each rank's readiness, then the
 * shared requests sh once for their ranks), or one NodeReady to the root,
 * through this host's relay or into its own relay group. */
static void batch_send(hvd_daemon_t *d, job_t *j, Hvd__SharedReady **sh, size_t n_sh) {
        batch_t *b = &j->batch;
        for (size_t i = 0; i < n_sh; i++)
                d->metrics.node_shared_requests += sh[i]->ready->n_requests;
        if (job_negotiates(j)) {
                for (size_t i = 0; i < b->n_fwd && j->state == JOB_RUNNING; i++)
                        root_submit(d, j, &b->fwd[i]->rank, 1, b->fwd[i]->ready, false);
                for (size_t i = 0; i < n_sh && j->state == JOB_RUNNING; i++)
                        root_submit(d, j, sh[i]->ranks, sh[i]->n_ranks, sh[i]->ready, false);
                return;
        }
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nr.job_id = j->id;
        nr.n_shared = n_sh;
        nr.shared = sh;
        nr.n_ranks = b->n_fwd;
        nr.ranks = b->fwd;
        nr.n_node_cached = nr.n_node_cached_waited_usec = b->n_ids;
        nr.node_cached = b->ids;
        nr.node_cached_waited_usec = b->ids_waited;
        d->metrics.node_ready_sent += b->n_ids > 0;
        nr.n_departed = b->n_departed;
        nr.departed = b->departed;
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        if (j->rl)
                relay_take_own(d, j, &nr);
        else
                uplink_send_up(d, j, &env);
}

/* The turn's end at now: what the pool completed goes shared, what it held
 * too long goes rank by rank, and the batch with them. */
static void flush_at(hvd_daemon_t *d, job_t *j, uint64_t now) {
        batch_t *b = &j->batch;
        if (!b->n_fwd && !b->n_departed && !b->n_ids && !pool_holds(b->pool))
                return;
        Hvd__SharedReady *sh = NULL;
        uint64_t due;
        if (j->state == JOB_RUNNING) {
                sh = pool_take(b->pool, j);
                if (pool_expired(b->pool, now, &due) && pool_release(b->pool, j) < 0)
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
        }
        if (j->state == JOB_RUNNING && (sh || b->n_fwd || b->n_departed || b->n_ids))
                batch_send(d, j, sh ? &sh : NULL, sh ? 1 : 0);
        if (sh)
                protobuf_c_message_free_unpacked(&sh->base, NULL);
        batch_clear(b);
}

void batch_flush(hvd_daemon_t *d, job_t *j) {
        flush_at(d, j, hvd_now_usec());
}

void batch_flush_all(hvd_daemon_t *d, job_t *j) {
        if (pool_release(j->batch.pool, j) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        batch_flush(d, j);
}
