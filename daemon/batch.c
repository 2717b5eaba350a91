/* batch.c — a host's readiness, one message to its root each reactor turn
 * (at the root: entered once the turn's messages are read): each rank's
 * readiness in the order it came, new requests that several local ranks
 * sent alike once for all of them, and the cached ids every local rank
 * posted as one node-level id (a tally of the local ranks). */
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
        if (batch_append(j, w->rank, q) < 0)
                job_abort(d, j, -1, -ENOMEM, "out of memory");
}

void batch_departed(hvd_daemon_t *d, job_t *j, uint32_t rank) {
        batch_t *b = &j->batch;
        /* the others' ids can no longer complete on this host */
        b->off = true;
        batch_release(d, j);
        uint32_t *nd = realloc(b->departed, (b->n_departed + 1) * sizeof *nd);
        if (!nd) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        b->departed = nd;
        b->departed[b->n_departed++] = rank;
}

/* Housekeeping: a partial node-level readiness held for long goes rank by
 * rank (the root's stall inspector names the missing ranks). */
uint64_t batch_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        tally_t *t = &j->batch.tally;
        if (!t->oldest || j->state != JOB_RUNNING)
                return UINT64_MAX;
        if (tally_expired(t, now, TALLY_HOLD_USEC))
                batch_release(d, j);
        return tick;
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

/* Whether two Readys' new requests are alike (as they would pack). */
static bool requests_equal(const Hvd__Ready *a, const Hvd__Ready *b) {
        if (a->n_requests != b->n_requests)
                return false;
        for (size_t k = 0; k < a->n_requests; k++)
                if (!hvd_wire_equal(&a->requests[k]->base, &b->requests[k]->base))
                        return false;
        return true;
}

/* The new requests of this batch that several local ranks sent alike go
 * once, as SharedReady (the first step: every rank names the same
 * tensors); what stays per rank keeps its cached ids. Only when every
 * rank has one entry in the batch, so no rank's order changes. Returns
 * the number of shared entries in *ret (free each with
 * protobuf_c_message_free_unpacked, and the array). */
static size_t share_requests(job_t *j, Hvd__SharedReady ***ret) {
        *ret = NULL;
        size_t n = j->batch.n_fwd, n_sh = 0;
        if (n < 2)
                return 0;
        size_t *group = calloc(n, sizeof *group); /* index of the group's first member + 1; 0 = alone */
        uint8_t *seen = calloc(j->size, 1);
        Hvd__SharedReady **sh = NULL;
        if (!group || !seen)
                goto out;
        for (size_t i = 0; i < n; i++) {
                uint32_t r = j->batch.fwd[i]->rank;
                if (r >= j->size || seen[r]++)
                        goto out;
        }
        for (size_t i = 1; i < n; i++) {
                const Hvd__Ready *q = j->batch.fwd[i]->ready;
                if (!q->n_requests)
                        continue;
                for (size_t g = 0; g < i; g++)
                        if (!group[g] && requests_equal(j->batch.fwd[g]->ready, q)) {
                                group[i] = g + 1;
                                break;
                        }
        }
        if (!(sh = calloc(n, sizeof *sh)))
                goto out;
        for (size_t g = 0; g < n; g++) {
                if (!j->batch.fwd[g]->ready->n_requests || group[g])
                        continue;
                size_t members = 1;
                for (size_t i = g + 1; i < n; i++)
                        members += group[i] == g + 1;
                if (members < 2)
                        continue;
                Hvd__SharedReady *s = calloc(1, sizeof *s);
                Hvd__Ready *q = calloc(1, sizeof *q);
                uint32_t *ranks = malloc(members * sizeof *ranks);
                if (!s || !q || !ranks) {
                        free(s);
                        free(q);
                        free(ranks);
                        break;
                }
                hvd__shared_ready__init(s);
                hvd__ready__init(q);
                s->ready = q;
                s->ranks = ranks;
                /* the first member's requests move over; the others' go */
                Hvd__Ready *first = j->batch.fwd[g]->ready;
                q->requests = TAKE_PTR(first->requests);
                q->n_requests = first->n_requests;
                first->n_requests = 0;
                s->ranks[s->n_ranks++] = j->batch.fwd[g]->rank;
                for (size_t i = g + 1; i < n; i++) {
                        if (group[i] != g + 1)
                                continue;
                        Hvd__Ready *o = j->batch.fwd[i]->ready;
                        for (size_t k = 0; k < o->n_requests; k++)
                                protobuf_c_message_free_unpacked(&o->requests[k]->base, NULL);
                        free(o->requests);
                        o->requests = NULL;
                        o->n_requests = 0;
                        s->ranks[s->n_ranks++] = j->batch.fwd[i]->rank;
                }
                sh[n_sh++] = s;
        }
out:
        free(group);
        free(seen);
        if (!n_sh)
                free(sh);
        else
                *ret = sh;
        return n_sh;
}

/* The turn's batch: entered at the root (the shared requests sh once for
 * their ranks, then each rank's readiness left), or one NodeReady to the
 * root, through this host's relay or into its own relay group. */
static void batch_send(hvd_daemon_t *d, job_t *j, Hvd__SharedReady **sh, size_t n_sh) {
        batch_t *b = &j->batch;
        for (size_t i = 0; i < n_sh; i++)
                d->metrics.node_shared_requests += sh[i]->ready->n_requests;
        /* entries left with nothing (their requests went shared) stay home */
        size_t keep = 0;
        for (size_t i = 0; i < b->n_fwd; i++) {
                const Hvd__Ready *q = b->fwd[i]->ready;
                if (q->n_requests || q->n_cached || !n_sh)
                        b->fwd[keep++] = b->fwd[i];
                else
                        protobuf_c_message_free_unpacked(&b->fwd[i]->base, NULL);
        }
        b->n_fwd = keep;
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

void batch_flush(hvd_daemon_t *d, job_t *j) {
        batch_t *b = &j->batch;
        if (!b->n_fwd && !b->n_departed && !b->n_ids)
                return;
        if (j->state == JOB_RUNNING) {
                Hvd__SharedReady **sh = NULL;
                size_t n_sh = share_requests(j, &sh);
                batch_send(d, j, sh, n_sh);
                for (size_t i = 0; i < n_sh; i++)
                        protobuf_c_message_free_unpacked(&sh[i]->base, NULL);
                free(sh);
        }
        batch_clear(b);
}
