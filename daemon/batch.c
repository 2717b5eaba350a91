/* batch.c — a host's batch of its ranks' readiness, one message to the
 * root per reactor turn (at the root itself: entered at once), and the
 * aggregation of cached ids every local rank posted into node-level ids.
 * Each rank's readiness leaves in the order it came; what waits here
 * waits at most AGG_HOLD_USEC (partial ids) or its hold (a first step). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sys/epoll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>
#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "internal.h"

/* Takes the requests of e whose names are done in pool out of e: the first
 * copy of each into q (whose requests array has room), the others freed. */
void pool_move_done(hvd_strmap_t *pool, Hvd__Ready *e, Hvd__Ready *q) {
        size_t keep = 0;
        for (size_t k = 0; k < e->n_requests; k++) {
                Hvd__Request *r = e->requests[k];
                const pool_head_t *p = hvd_strmap_get(pool, r->name, strlen(r->name));
                if (!p || !p->done)
                        e->requests[keep++] = r;
                else if (p->first == r)
                        q->requests[q->n_requests++] = r;
                else
                        protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        e->n_requests = keep;
}

/* The names now in q are done with: a name may come again (a next step's). */
void pool_forget(hvd_strmap_t *pool, const Hvd__Ready *q) {
        for (size_t k = 0; k < q->n_requests; k++)
                free(hvd_strmap_remove(pool, q->requests[k]->name, strlen(q->requests[k]->name)));
}

/* A name of a first step held on this host (pool_add). */
typedef struct pool_name {
        pool_head_t head; /* first: the first local rank's */
        uint32_t n;       /* local ranks that sent it */
        bool bad;         /* a rank sent it twice, or other parameters: it goes rank by rank */
        uint8_t have[];   /* [local_size] */
} pool_name_t;

static bool pool_done(const job_t *j, const pool_name_t *p) {
        return p && !p->bad && p->n == j->local_size;
}

/* Frees a pool's names and the pool (NULL-safe). */
void pool_free(hvd_strmap_t **pool) {
        size_t iter = 0;
        void *v;
        while (*pool && hvd_strmap_next(*pool, &iter, NULL, NULL, &v))
                free(v);
        hvd_strmap_destroy(pool);
}

static void pool_clear(job_t *j) {
        pool_free(&j->pool);
        j->pool_complete = 0;
        j->pool_off = false;
}

void fwd_clear(job_t *j) {
        for (size_t i = 0; i < j->n_fwd; i++)
                protobuf_c_message_free_unpacked(&j->fwd[i]->base, NULL);
        pool_clear(j);
        j->n_fwd = 0;
        j->n_departed = 0;
        j->n_nc = 0;
}

/* The new requests of local rank's Ready q, just held: counted name by
 * name, so that those every local rank sent alike can go on once for all
 * of them (pool_take), whatever batches each rank's client made of them.
 * Only a first step's kind of batch: new requests alone, of collectives
 * of every rank; anything else turns the pool off until the batch went. */
static void pool_add(job_t *j, uint32_t rank, const Hvd__Ready *q) {
        if (j->pool_off)
                return;
        const worker_t *w = rank < j->size ? j->ranks[rank] : NULL;
        bool ok = w && j->local_size > 1 && w->local_rank < j->local_size && !j->fwd_joined && q->n_requests &&
                  !q->n_cached && !q->n_node_cached;
        for (size_t k = 0; ok && k < q->n_requests; k++)
                ok = !q->requests[k]->process_set && q->requests[k]->kind != HVD__KIND__KIND_JOIN;
        if (ok && !j->pool && !(j->pool = hvd_strmap_new()))
                ok = false;
        for (size_t k = 0; ok && k < q->n_requests; k++) {
                const Hvd__Request *r = q->requests[k];
                size_t len = strlen(r->name);
                pool_name_t *p = hvd_strmap_get(j->pool, r->name, len);
                if (!p) {
                        if (!(p = calloc(1, sizeof *p + j->local_size)) ||
                            hvd_strmap_put(j->pool, r->name, len, p) < 0) {
                                free(p);
                                ok = false;
                                break;
                        }
                        p->head.first = r;
                }
                bool was = p->head.done;
                if (p->have[w->local_rank] || !hvd_wire_equal(&p->head.first->base, &r->base))
                        p->bad = true;
                else {
                        p->have[w->local_rank] = 1;
                        p->n++;
                }
                p->head.done = pool_done(j, p);
                j->pool_complete += p->head.done;
                j->pool_complete -= was;
        }
        if (!ok)
                j->pool_off = true;
}

/* Appends a RankReady of rank to this iteration's batch (or what is held).
 * Takes ownership of ready. */
int fwd_append(job_t *j, uint32_t rank, Hvd__Ready *ready) {
        /* a rank that joined may send nothing more: the first step's hold
         * (fwd_holds) never waits for it again */
        for (size_t k = 0; k < ready->n_requests; k++)
                j->fwd_joined |= ready->requests[k]->kind == HVD__KIND__KIND_JOIN;
        if (j->n_fwd == j->cap_fwd) {
                size_t cap = j->cap_fwd ? j->cap_fwd * 2 : 16;
                Hvd__RankReady **nf = realloc(j->fwd, cap * sizeof *nf);
                if (nf)
                        j->fwd = nf;
                uint64_t *na = realloc(j->fwd_at, cap * sizeof *na);
                if (na)
                        j->fwd_at = na;
                if (!nf || !na) {
                        protobuf_c_message_free_unpacked(&ready->base, NULL);
                        return -ENOMEM;
                }
                j->cap_fwd = cap;
        }
        Hvd__RankReady *rr = calloc(1, sizeof *rr);
        if (!rr) {
                protobuf_c_message_free_unpacked(&ready->base, NULL);
                return -ENOMEM;
        }
        hvd__rank_ready__init(rr);
        rr->rank = rank;
        rr->ready = ready;
        j->fwd_at[j->n_fwd] = j->fwd_newest = hvd_now_usec();
        j->fwd[j->n_fwd++] = rr;
        pool_add(j, rank, ready);
        return 0;
}

/* The capacity of a table by cache id that holds id, from have: doubled
 * from 64; -E2BIG past the ids a message may carry. */
int64_t id_capacity(uint32_t have, uint32_t id) {
        if (id >= HVD_WIRE_MAX_REQUESTS * 16)
                return -E2BIG;
        uint32_t n = have ? have : 64;
        while (n <= id)
                n *= 2;
        return n;
}

static int agg_grow(job_t *j, uint32_t id) {
        if (id < j->n_agg)
                return 0;
        int64_t cap = id_capacity(j->n_agg, id);
        if (cap < 0)
                return (int) cap;
        uint32_t n = (uint32_t) cap;
        agg_t *a = realloc(j->agg, n * sizeof *a);
        if (!a)
                return -ENOMEM;
        j->agg = a;
        uint8_t *b = realloc(j->agg_bits, (size_t) n * j->local_size);
        if (!b)
                return -ENOMEM;
        j->agg_bits = b;
        memset(j->agg + j->n_agg, 0, (n - j->n_agg) * sizeof *a);
        memset(j->agg_bits + (size_t) j->n_agg * j->local_size, 0, (size_t) (n - j->n_agg) * j->local_size);
        j->n_agg = n;
        return 0;
}

/* Hands every partial node-level readiness to the root rank by rank: the
 * ids stay rank by rank until their schedule passes. */
void agg_release(hvd_daemon_t *d, job_t *j) {
        if (!j->agg_oldest)
                return;
        j->agg_oldest = 0;
        uint64_t now = hvd_now_usec();
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                if (!w)
                        continue;
                Hvd__Ready *q = NULL;
                for (uint32_t id = 0; id < j->n_agg; id++) {
                        agg_t *a = &j->agg[id];
                        uint8_t *bit = &j->agg_bits[(size_t) id * j->local_size + w->local_rank];
                        if (!a->n_ready || !*bit)
                                continue;
                        if (!q) {
                                if (!(q = calloc(1, sizeof *q)))
                                        goto oom;
                                hvd__ready__init(q);
                                q->cached = malloc(j->n_agg * sizeof *q->cached);
                                q->cached_waited_usec = malloc(j->n_agg * sizeof *q->cached_waited_usec);
                                if (!q->cached || !q->cached_waited_usec) {
                                        protobuf_c_message_free_unpacked(&q->base, NULL);
                                        goto oom;
                                }
                        }
                        q->cached[q->n_cached++] = id;
                        q->cached_waited_usec[q->n_cached_waited_usec++] =
                                now > a->first_usec ? now - a->first_usec : 0;
                }
                if (q && fwd_append(j, w->rank, q) < 0)
                        goto oom;
        }
        for (uint32_t id = 0; id < j->n_agg; id++)
                if (j->agg[id].n_ready) {
                        j->agg[id].n_ready = 0;
                        j->agg[id].per_rank = true;
                        memset(&j->agg_bits[(size_t) id * j->local_size], 0, j->local_size);
                }
        return;
oom:
        job_abort(d, j, -1, -ENOMEM, "out of memory");
}

/* A schedule passing through: its ids are done with this round (whatever
 * went rank by rank aggregates again) and show which ids every local rank
 * takes part in. */
void agg_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s) {
        if (s->repeat_key) {
                for (uint32_t i = 0; i < j->key_n[s->repeat_key]; i++)
                        j->agg[j->key_ids[s->repeat_key][i]].per_rank = false;
                return;
        }
        uint32_t *kids = NULL, nk = 0;
        if (s->keep_key) {
                size_t total = 0;
                for (size_t o = 0; o < s->n_ops; o++)
                        total += s->ops[o]->n_entries;
                if (!(kids = malloc((total ? total : 1) * sizeof *kids)))
                        goto oom;
        }
        for (size_t o = 0; o < s->n_ops; o++) {
                const Hvd__Op *op = s->ops[o];
                bool all_local = op->process_set == 0;
                if (!all_local) {
                        uint32_t here = 0;
                        for (size_t k = 0; k < op->n_set_ranks; k++)
                                here += op->set_ranks[k] < j->size && j->ranks[op->set_ranks[k]];
                        all_local = here == j->local_size;
                }
                for (size_t e = 0; e < op->n_entries; e++) {
                        uint32_t id = op->entries[e]->id;
                        if (id == HVD_NEGOTIATOR_NO_ID)
                                continue;
                        if (agg_grow(j, id) < 0)
                                goto oom;
                        j->agg[id].known = all_local;
                        j->agg[id].per_rank = false;
                        if (kids)
                                kids[nk++] = id;
                }
        }
        for (size_t i = 0; i < s->n_errors; i++) {
                uint32_t id = s->errors[i]->id;
                if (id != HVD_NEGOTIATOR_NO_ID && id < j->n_agg)
                        j->agg[id].per_rank = false;
        }
        if (s->join_done_last_rank >= 0)
                j->agg_joined = 0;
        if (s->keep_key) {
                free(j->key_ids[s->keep_key]);
                j->key_ids[s->keep_key] = kids;
                j->key_n[s->keep_key] = nk;
        }
        return;
oom:
        free(kids);
        job_abort(d, j, -1, -ENOMEM, "out of memory");
}

/* Appends id and its wait to a pair of growing arrays (n of cap used).
 * Returns 0 or -ENOMEM (nothing appended). */
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
static bool nc_push(hvd_daemon_t *d, job_t *j, uint32_t id, uint64_t waited) {
        if (ids_push(&j->nc_ids, &j->nc_waited, &j->n_nc, &j->cap_nc, id, waited) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return false;
        }
        return true;
}

/* A local rank's cached ids: those every local rank takes part in are
 * counted here and leave for the root as one node-level id once the last
 * local rank posted them; the others stay in q, for the root rank by rank.
 * Returns false when the job was aborted. */
bool agg_ready(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Ready *q) {
        for (size_t i = 0; i < q->n_requests; i++)
                if (q->requests[i]->kind == HVD__KIND__KIND_JOIN)
                        j->agg_joined++;
        /* new or changed parameters, or a join: what waits here would wait
         * for ranks that will not post it cached; it goes rank by rank */
        if (q->n_requests)
                agg_release(d, j);
        if (j->agg_off || j->agg_joined || j->state != JOB_RUNNING)
                return j->state == JOB_RUNNING;
        uint64_t now = hvd_now_usec();
        size_t keep = 0;
        bool waited = q->n_cached_waited_usec == q->n_cached;
        for (size_t i = 0; i < q->n_cached; i++) {
                uint32_t id = q->cached[i];
                uint64_t wt = waited ? q->cached_waited_usec[i] : 0;
                agg_t *a = id < j->n_agg ? &j->agg[id] : NULL;
                if (!a || !a->known || a->per_rank) {
                        q->cached[keep] = id;
                        if (waited)
                                q->cached_waited_usec[keep] = wt;
                        keep++;
                        continue;
                }
                uint8_t *bit = &j->agg_bits[(size_t) id * j->local_size + w->local_rank];
                if (*bit) {
                        job_abort(d, j, (int) w->rank, HVD_EDUPLICATE,
                                  "rank %u submitted the tensor of cache id %u twice before it completed", w->rank, id);
                        return false;
                }
                uint64_t at = wt < now ? now - wt : now;
                if (!a->n_ready || at < a->first_usec)
                        a->first_usec = at;
                if (!j->agg_oldest || a->first_usec < j->agg_oldest)
                        j->agg_oldest = a->first_usec;
                *bit = 1;
                if (++a->n_ready < j->local_size)
                        continue;
                if (!nc_push(d, j, id, now > a->first_usec ? now - a->first_usec : 0))
                        return false;
                a->n_ready = 0;
                memset(&j->agg_bits[(size_t) id * j->local_size], 0, j->local_size);
        }
        q->n_cached = keep;
        if (waited)
                q->n_cached_waited_usec = keep;
        return true;
}

/* Housekeeping: a partial node-level readiness held for long goes rank by
 * rank (the root's stall inspector names the missing ranks). */
static void agg_expire(hvd_daemon_t *d, job_t *j, uint64_t now) {
        uint64_t oldest = 0;
        for (uint32_t id = 0; id < j->n_agg; id++)
                if (j->agg[id].n_ready && (!oldest || j->agg[id].first_usec < oldest))
                        oldest = j->agg[id].first_usec;
        j->agg_oldest = oldest;
        if (oldest && now - oldest > AGG_HOLD_USEC)
                agg_release(d, j);
}

/* Ids every local rank posted on the board (its node mode, on a job of
 * several hosts), sent once for this host by the rank that completed
 * them: node-level readiness, as if the last local rank had posted them
 * here. At the root they are entered once for the host; on any other host
 * they leave with this iteration's node-level ids, or rank by rank once
 * aggregation is off here (a local rank left). Returns false when the job
 * was aborted. */
bool node_level_ready(hvd_daemon_t *d, job_t *j, worker_t *w, const Hvd__Ready *q) {
        if (j->cross_size < 2) {
                job_abort(d, j, (int) w->rank, HVD_EPROTO,
                          "rank %u sent host-level readiness, but the job runs on one host", w->rank);
                return false;
        }
        d->metrics.board_node_ready++;
        d->metrics.board_node_ids += q->n_node_cached;
        bool waited = q->n_node_cached_waited_usec == q->n_node_cached;
        if (job_negotiates(j)) {
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                nr.n_node_cached = q->n_node_cached;
                nr.node_cached = q->node_cached;
                nr.n_node_cached_waited_usec = waited ? q->n_node_cached : 0;
                nr.node_cached_waited_usec = q->node_cached_waited_usec;
                root_submit_node(d, j, j->cross_rank, &nr, true);
                return j->state == JOB_RUNNING;
        }
        /* a readiness from each local rank, for status (as the root counts
         * them; w's own is counted with its message, in handle_ready) */
        uint64_t now = hvd_now_usec();
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && r != w->rank) {
                        j->rstat[r].last_seen_usec = now;
                        j->rstat[r].readies++;
                }
        if (!j->agg_off) {
                for (size_t i = 0; i < q->n_node_cached; i++)
                        if (!nc_push(d, j, q->node_cached[i], waited ? q->node_cached_waited_usec[i] : 0))
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
                if (fwd_append(j, o->rank, c) < 0)
                        goto oom;
        }
        return true;
oom:
        job_abort(d, j, -1, -ENOMEM, "out of memory");
        return false;
}

/* Root: whether a local rank's Ready waits in this iteration's batch, as
 * a host's does before it goes to the root (flush_forward): new requests
 * of a first step, which the other local ranks send alike and which are
 * then entered once for all of them; and anything of a rank behind what
 * waits, which must not overtake it. */
bool root_holds(const job_t *j, const Hvd__Ready *q) {
        if (j->n_fwd)
                return true;
        if (j->local_size < 2 || j->fwd_joined || !q->n_requests || q->n_cached || q->n_node_cached)
                return false;
        for (size_t k = 0; k < q->n_requests; k++)
                if (q->requests[k]->process_set)
                        return false;
        return true;
}

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
        size_t n = j->n_fwd, n_sh = 0;
        if (n < 2)
                return 0;
        size_t *group = calloc(n, sizeof *group); /* index of the group's first member + 1; 0 = alone */
        uint8_t *seen = calloc(j->size, 1);
        Hvd__SharedReady **sh = NULL;
        if (!group || !seen)
                goto out;
        for (size_t i = 0; i < n; i++) {
                uint32_t r = j->fwd[i]->rank;
                if (r >= j->size || seen[r]++)
                        goto out;
        }
        for (size_t i = 1; i < n; i++) {
                const Hvd__Ready *q = j->fwd[i]->ready;
                if (!q->n_requests)
                        continue;
                for (size_t g = 0; g < i; g++)
                        if (!group[g] && requests_equal(j->fwd[g]->ready, q)) {
                                group[i] = g + 1;
                                break;
                        }
        }
        if (!(sh = calloc(n, sizeof *sh)))
                goto out;
        for (size_t g = 0; g < n; g++) {
                if (!j->fwd[g]->ready->n_requests || group[g])
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
                Hvd__Ready *first = j->fwd[g]->ready;
                q->requests = TAKE_PTR(first->requests);
                q->n_requests = first->n_requests;
                first->n_requests = 0;
                s->ranks[s->n_ranks++] = j->fwd[g]->rank;
                for (size_t i = g + 1; i < n; i++) {
                        if (group[i] != g + 1)
                                continue;
                        Hvd__Ready *o = j->fwd[i]->ready;
                        for (size_t k = 0; k < o->n_requests; k++)
                                protobuf_c_message_free_unpacked(&o->requests[k]->base, NULL);
                        free(o->requests);
                        o->requests = NULL;
                        o->n_requests = 0;
                        s->ranks[s->n_ranks++] = j->fwd[i]->rank;
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

/* A first step's hold lasts while its ranks are still sending: until
 * nothing new has come for the first_step_hold setting (since newest, the
 * last entry taken, held still or gone on), and at most HOLD_CAP times
 * that from the oldest entry still held. Returns the time the hold counts
 * from (hold_on). */
#define HOLD_CAP 10
uint64_t hold_start(uint64_t oldest, uint64_t newest, uint64_t hold) {
        uint64_t cap = oldest + (HOLD_CAP - 1) * hold;
        return newest < cap ? newest : cap;
}

/* Whether what has been held since *since (now, when 0) may wait on: at
 * most usec in all, after which housekeeping lets it go. */
bool hold_on(hvd_daemon_t *d, uint64_t *since, uint64_t usec) {
        uint64_t now = hvd_now_usec();
        if (!*since)
                *since = now;
        if (now - *since >= usec)
                return false;
        if (d->next_housekeeping > *since + usec)
                d->next_housekeeping = *since + usec;
        return true;
}

/* Housekeeping: whether what has been held since since (0: nothing) is
 * due to go now; else *due becomes no later than its deadline. */
bool hold_expired(uint64_t since, uint64_t usec, uint64_t now, uint64_t *due) {
        if (!since)
                return false;
        if (now - since >= usec)
                return true;
        *due = HVD_MIN(*due, since + usec);
        return false;
}

/* What is held is a first step's new requests alone, of collectives of
 * every rank (pool_add), with no departure or host-level ids to go with
 * it: worth holding for the other local ranks', so that the names all of
 * them sent alike go on once for all (pool_take). None of them can
 * complete before every rank has sent its own, so the hold costs no time;
 * its limit (hold_start: first_step_hold without anything new, ten times
 * that in all) only bounds how long the root cannot name the ranks that
 * did send, should one never come. Once a local rank joined (it may send
 * nothing more), nothing is held. */
static bool fwd_holds(const job_t *j) {
        return j->n_fwd && !j->pool_off && !j->n_departed && !j->n_nc && !j->fwd_joined;
}

/* The names of the held first-step requests that every local rank sent
 * alike, taken out of the ranks' entries into one SharedReady for all the
 * local ranks, in the order they first came (the other ranks' copies go).
 * Entries left with nothing go too. NULL when there are none (or no
 * memory: then nothing changed). */
static Hvd__SharedReady *pool_take(job_t *j) {
        if (j->pool_off || !j->pool_complete)
                return NULL;
        Hvd__SharedReady *sh = calloc(1, sizeof *sh);
        Hvd__Ready *q = calloc(1, sizeof *q);
        Hvd__Request **reqs = malloc(j->pool_complete * sizeof *reqs);
        uint32_t *ranks = malloc(j->local_size * sizeof *ranks);
        if (!sh || !q || !reqs || !ranks)
                goto fail;
        hvd__shared_ready__init(sh);
        hvd__ready__init(q);
        for (uint32_t r = 0; r < j->size && sh->n_ranks < j->local_size; r++)
                if (j->ranks[r])
                        ranks[sh->n_ranks++] = r;
        if (sh->n_ranks != j->local_size)
                goto fail;
        sh->ranks = ranks;
        sh->ready = q;
        q->requests = reqs;
        for (size_t i = 0; i < j->n_fwd; i++)
                pool_move_done(j->pool, j->fwd[i]->ready, q);
        pool_forget(j->pool, q);
        j->pool_complete = 0;
        size_t keep = 0;
        for (size_t i = 0; i < j->n_fwd; i++) {
                if (j->fwd[i]->ready->n_requests) { /* the pool holds new requests alone */
                        j->fwd_at[keep] = j->fwd_at[i];
                        j->fwd[keep++] = j->fwd[i];
                } else
                        protobuf_c_message_free_unpacked(&j->fwd[i]->base, NULL);
        }
        j->n_fwd = keep;
        return sh;
fail:
        free(sh);
        free(q);
        free(reqs);
        free(ranks);
        return NULL;
}

/* Everything the batch shares: what pool_take found, then whatever
 * share_requests finds in the rest. Returns how many, in *ret. */
static size_t take_shared(job_t *j, Hvd__SharedReady ***ret) {
        *ret = NULL;
        /* the steady state, every cycle: nothing to share, nothing to allocate */
        if (j->n_fwd < 2 && (j->pool_off || !j->pool_complete)) {
                pool_clear(j);
                return 0;
        }
        /* share_requests makes at most one of every two entries */
        Hvd__SharedReady **all = malloc((j->n_fwd + 1) * sizeof *all);
        if (!all) {
                pool_clear(j);
                return 0;
        }
        size_t n = 0;
        Hvd__SharedReady *ps = pool_take(j);
        if (ps)
                all[n++] = ps;
        pool_clear(j);
        Hvd__SharedReady **sh = NULL;
        size_t m = share_requests(j, &sh);
        for (size_t i = 0; i < m; i++)
                all[n++] = sh[i];
        free(sh);
        if (!n)
                free(all);
        else
                *ret = all;
        return n;
}

/* Sends (at the root: enters) the shared requests sh of local ranks, and
 * with them the rest of what is held when all is true. */
static void fwd_send(hvd_daemon_t *d, job_t *j, Hvd__SharedReady **sh, size_t n_sh, bool all) {
        for (size_t i = 0; i < n_sh; i++)
                d->metrics.node_shared_requests += sh[i]->ready->n_requests;
        if (job_negotiates(j)) {
                for (size_t i = 0; all && i < j->n_fwd && j->state == JOB_RUNNING; i++) {
                        const Hvd__Ready *q = j->fwd[i]->ready;
                        if (q->n_requests || q->n_cached || !n_sh) /* not what went shared alone */
                                root_submit(d, j, &j->fwd[i]->rank, 1, q, false);
                }
                for (size_t i = 0; i < n_sh && j->state == JOB_RUNNING; i++)
                        root_submit(d, j, sh[i]->ranks, sh[i]->n_ranks, sh[i]->ready, false);
                return;
        }
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nr.job_id = j->id;
        nr.n_shared = n_sh;
        nr.shared = sh;
        if (all) {
                /* entries left with nothing (their requests went shared) stay home */
                size_t keep = 0;
                for (size_t i = 0; i < j->n_fwd; i++) {
                        const Hvd__Ready *q = j->fwd[i]->ready;
                        if (q->n_requests || q->n_cached || !n_sh)
                                j->fwd[keep++] = j->fwd[i];
                        else
                                protobuf_c_message_free_unpacked(&j->fwd[i]->base, NULL);
                }
                j->n_fwd = keep;
                nr.n_ranks = j->n_fwd;
                nr.ranks = j->fwd;
                nr.n_node_cached = j->n_nc;
                nr.node_cached = j->nc_ids;
                nr.n_node_cached_waited_usec = j->n_nc;
                nr.node_cached_waited_usec = j->nc_waited;
                d->metrics.node_ready_sent += j->n_nc > 0;
                nr.n_departed = j->n_departed;
                nr.departed = j->departed;
        }
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        if (j->rl)
                relay_take_own(d, j, &nr);
        else
                send_up(d, j, &env);
}

/* A host's batch of its ranks' readiness goes on to the root (the root's
 * own is entered): at the end of each iteration, unless a first step's
 * new requests wait for the other local ranks' (fwd_holds). Those every
 * local rank sent go then, once for all; the rest waits while its ranks
 * are still sending (hold_start), or until force. */
void flush_forward(hvd_daemon_t *d, job_t *j, bool force) {
        if (!j->n_fwd && !j->n_departed && !j->n_nc)
                return;
        if (j->state == JOB_RUNNING && !force && fwd_holds(j)) {
                Hvd__SharedReady *ps = pool_take(j);
                if (ps) {
                        fwd_send(d, j, &ps, 1, false);
                        protobuf_c_message_free_unpacked(&ps->base, NULL);
                }
                if (!j->n_fwd || j->state != JOB_RUNNING) {
                        j->fwd_hold_since = 0;
                        if (j->state != JOB_RUNNING)
                                fwd_clear(j);
                        return;
                }
                j->fwd_hold_since = hold_start(j->fwd_at[0], j->fwd_newest, d->cfg.first_step_hold_usec);
                if (hold_on(d, &j->fwd_hold_since, d->cfg.first_step_hold_usec))
                        return;
        }
        j->fwd_hold_since = 0;
        if (j->state == JOB_RUNNING) {
                Hvd__SharedReady **sh = NULL;
                size_t n_sh = take_shared(j, &sh);
                fwd_send(d, j, sh, n_sh, true);
                for (size_t i = 0; i < n_sh; i++)
                        protobuf_c_message_free_unpacked(&sh[i]->base, NULL);
                free(sh);
        }
        fwd_clear(j);
}

/* Housekeeping: partial node-level readiness held for long goes rank by
 * rank; a first step's hold that ran out lets its batch go. */
uint64_t batch_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        uint64_t next = UINT64_MAX;
        if (j->agg_oldest && j->state == JOB_RUNNING) {
                next = tick;
                agg_expire(d, j, now);
        }
        if (hold_expired(j->fwd_hold_since, d->cfg.first_step_hold_usec, now, &next))
                flush_forward(d, j, true);
        return next;
}
