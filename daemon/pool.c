/* pool.c — a first step's new requests, held on a host until every local
 * rank has sent them: the names all of them sent alike go on once for all
 * (one SharedReady), whatever batches each rank's client made of them, so
 * that the root decodes and enters a host's first step once instead of
 * once a rank. None of those requests can complete before every rank sent
 * its own, so holding them costs no time; POOL_HOLD_USEC only bounds how
 * long the root cannot name the ranks that did send, should one never
 * come. A name that cannot complete alike (an allgather of other first
 * dimensions, an alltoall of other splits: parameters that differ by
 * rank) releases everything at once, since nothing is gained by waiting.
 * A name that some local ranks sent and others not when the pool was
 * released (held too long, or ahead of another message) is likewise
 * remembered until every local rank has sent it, so that the ranks that
 * send it after the release are not held waiting for the copies already
 * gone: a rank late by more than POOL_HOLD_USEC would otherwise wait that
 * long again.
 * Only Readys of new requests alone, of collectives of every rank, are
 * pooled (pool_wants); anything else a local rank sends releases what is
 * held first (batch.c), so that no rank's order changes. */
#include "config.h"

#include "internal.h"

/* A name held: its first copy, and who sent it alike. */
typedef struct pool_name {
        const Hvd__Request *first; /* in its held Ready; NULL once released, when bad */
        uint32_t n;                /* local ranks that sent it alike; when bad, that sent it */
        bool bad;                  /* a rank sent it twice, or other parameters: it goes rank by rank */
        uint8_t have[];            /* [local_size] */
} pool_name_t;

/* Bad names remembered across releases at most (names that some local
 * rank never sends would otherwise pile up). */
#define POOL_MAX_BAD 4096

struct pool {
        uint32_t local_size;
        hvd_strmap_t *names;   /* name → pool_name_t, owned */
        Hvd__RankReady **held; /* the pooled Readys in the order they came, owned */
        size_t n_held, cap_held;
        size_t n_complete; /* names every local rank sent alike */
        uint64_t since;    /* when the oldest held Ready came (0: none held) */
        bool off;          /* a local rank joined or left: nothing is pooled in this job */
};

pool_t *pool_new(uint32_t local_size) {
        hvd_assert(local_size > 1);
        pool_t *p = calloc(1, sizeof *p);
        if (!p)
                return NULL;
        p->local_size = local_size;
        if (!(p->names = hvd_strmap_new())) {
                free(p);
                return NULL;
        }
        return p;
}

/* Forgets the names held, all but those some local rank has not sent yet:
 * they stay, marked bad (they can no longer complete alike) and with
 * first cleared (its Ready is gone). NULL names: out of memory. */
static void names_release(pool_t *p) {
        hvd_strmap_t *keep = hvd_strmap_new();
        size_t iter = 0, n_kept = 0;
        const void *key;
        size_t len;
        void *v;
        while (hvd_strmap_next(p->names, &iter, &key, &len, &v)) {
                pool_name_t *n = v;
                if (keep && n->n < p->local_size && n_kept < POOL_MAX_BAD && hvd_strmap_put(keep, key, len, n) == 0) {
                        n->bad = true;
                        n->first = NULL;
                        n_kept++;
                } else {
                        free(n);
                }
        }
        hvd_strmap_destroy(&p->names);
        p->names = keep;
        p->n_complete = 0;
}

void pool_free(pool_t *p) {
        if (!p)
                return;
        for (size_t i = 0; i < p->n_held; i++)
                protobuf_c_message_free_unpacked(&p->held[i]->base, NULL);
        free(p->held);
        size_t iter = 0;
        void *v;
        while (p->names && hvd_strmap_next(p->names, &iter, NULL, NULL, &v))
                free(v);
        hvd_strmap_destroy(&p->names);
        free(p);
}

bool pool_holds(const pool_t *p) {
        return p && p->n_held;
}

bool pool_wants(const pool_t *p, const Hvd__Ready *q) {
        if (!p || p->off || !p->names || !q->n_requests || q->n_cached || q->n_node_cached)
                return false;
        for (size_t k = 0; k < q->n_requests; k++)
                if (q->requests[k]->process_set || q->requests[k]->kind == HVD__KIND__KIND_JOIN)
                        return false;
        return true;
}

void pool_stop(pool_t *p) {
        if (p)
                p->off = true;
}

/* Counts request r of local rank lr. Returns 0, 1 when r's name can no
 * longer complete alike (sent twice, or with other parameters), or
 * -ENOMEM. */
static int count_name(pool_t *p, uint32_t lr, const Hvd__Request *r) {
        size_t len = strlen(r->name);
        pool_name_t *n = hvd_strmap_get(p->names, r->name, len);
        if (!n) {
                if (!(n = calloc(1, sizeof *n + p->local_size)) || hvd_strmap_put(p->names, r->name, len, n) < 0) {
                        free(n);
                        return -ENOMEM;
                }
                n->first = r;
        }
        if (n->bad) {
                if (!n->have[lr]) {
                        n->have[lr] = 1;
                        n->n++;
                }
                if (!n->first && n->n == p->local_size) /* released, and every rank's gone on */
                        free(hvd_strmap_remove(p->names, r->name, len));
                return 1;
        }
        bool was = n->n == p->local_size;
        if (n->have[lr] || !hvd_wire_equal(&n->first->base, &r->base)) {
                n->bad = true;
                p->n_complete -= was;
                if (!n->have[lr]) {
                        n->have[lr] = 1;
                        n->n++;
                }
                return 1;
        }
        n->have[lr] = 1;
        n->n++;
        p->n_complete += !was && n->n == p->local_size;
        return 0;
}

int pool_add(pool_t *p, uint32_t rank, uint32_t local_rank, Hvd__Ready *q, uint64_t now) {
        hvd_assert(pool_wants(p, q) && local_rank < p->local_size);
        Hvd__RankReady *rr = NULL;
        if (p->n_held == p->cap_held) {
                size_t cap = p->cap_held ? p->cap_held * 2 : 16;
                Hvd__RankReady **nh = realloc(p->held, cap * sizeof *nh);
                if (!nh)
                        goto oom;
                p->held = nh;
                p->cap_held = cap;
        }
        if (!(rr = calloc(1, sizeof *rr)))
                goto oom;
        hvd__rank_ready__init(rr);
        rr->rank = rank;
        rr->ready = q;
        p->held[p->n_held++] = rr;
        if (!p->since)
                p->since = now;
        int unlike = 0;
        for (size_t k = 0; k < q->n_requests; k++) {
                int r = count_name(p, local_rank, q->requests[k]);
                if (r < 0)
                        return r; /* q is held: it goes with the pool */
                unlike |= r;
        }
        return unlike;
oom:
        protobuf_c_message_free_unpacked(&q->base, NULL);
        return -ENOMEM;
}

int pool_release(pool_t *p, job_t *j) {
        if (!pool_holds(p))
                return 0;
        int r = 0;
        for (size_t i = 0; i < p->n_held; i++) {
                Hvd__RankReady *rr = p->held[i];
                if (r == 0 && rr->ready->n_requests)
                        r = batch_append(j, rr->rank, TAKE_PTR(rr->ready));
                protobuf_c_message_free_unpacked(&rr->base, NULL);
        }
        p->n_held = 0;
        p->since = 0;
        names_release(p);
        return r < 0 || !p->names ? -ENOMEM : 0;
}

bool pool_expired(const pool_t *p, uint64_t now, uint64_t *due) {
        if (!pool_holds(p))
                return false;
        uint64_t at = p->since + POOL_HOLD_USEC;
        if (now >= at)
                return true;
        *due = at;
        return false;
}

/* Takes the requests of q whose names are complete out of q: the first
 * copy of each into out (which has room), the others freed. */
static void move_complete(pool_t *p, Hvd__Ready *q, Hvd__Ready *out) {
        size_t keep = 0;
        for (size_t k = 0; k < q->n_requests; k++) {
                Hvd__Request *r = q->requests[k];
                const pool_name_t *n = hvd_strmap_get(p->names, r->name, strlen(r->name));
                if (!n || n->bad || n->n != p->local_size)
                        q->requests[keep++] = r;
                else if (n->first == r)
                        out->requests[out->n_requests++] = r;
                else
                        protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        q->n_requests = keep;
}

Hvd__SharedReady *pool_take(pool_t *p, const job_t *j) {
        if (!pool_holds(p) || !p->n_complete)
                return NULL;
        Hvd__SharedReady *sh = calloc(1, sizeof *sh);
        Hvd__Ready *q = calloc(1, sizeof *q);
        Hvd__Request **reqs = malloc(p->n_complete * sizeof *reqs);
        uint32_t *ranks = malloc(p->local_size * sizeof *ranks);
        if (!sh || !q || !reqs || !ranks)
                goto fail;
        hvd__shared_ready__init(sh);
        hvd__ready__init(q);
        for (uint32_t r = 0; r < j->size && sh->n_ranks < p->local_size; r++)
                if (j->ranks[r])
                        ranks[sh->n_ranks++] = r;
        if (sh->n_ranks != p->local_size)
                goto fail;
        sh->ranks = ranks;
        sh->ready = q;
        q->requests = reqs;
        for (size_t i = 0; i < p->n_held; i++)
                move_complete(p, p->held[i]->ready, q);
        /* the names taken may come again (a next step's) */
        for (size_t k = 0; k < q->n_requests; k++)
                free(hvd_strmap_remove(p->names, q->requests[k]->name, strlen(q->requests[k]->name)));
        p->n_complete = 0;
        size_t keep = 0;
        for (size_t i = 0; i < p->n_held; i++) {
                if (p->held[i]->ready->n_requests)
                        p->held[keep++] = p->held[i];
                else
                        protobuf_c_message_free_unpacked(&p->held[i]->base, NULL);
        }
        p->n_held = keep;
        if (!keep)
                p->since = 0;
        return sh;
fail:
        free(sh);
        free(q);
        free(reqs);
        free(ranks);
        return NULL;
}
