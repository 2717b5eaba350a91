/* relay.c — a relay daemon of a large job: it takes its group's readiness
 * (hosts of one rank each, or relays below it), merges the cached ids
 * every host of the group posted into one entry, passes the rest on in
 * the order it came, and passes the root's schedules on to its group. */
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

/* Control plane relays: a job of many hosts has its non-root hosts in
 * groups of relay_fanout; one daemon of each group (the relay) takes its
 * group's readiness, merges the cache ids every host of the group posted
 * into one entry and passes everything on to the root in one message, and
 * passes the root's schedules on to its group. Aborts and pings still go
 * straight between each daemon and the root. */
typedef struct relay_member {
        uint32_t host;      /* cross rank */
        uint8_t id[256];    /* routing id on the peer socket */
        size_t id_len;      /* 0: not heard from yet */
        zmq_msg_t *pending; /* schedules that came before it was heard from */
        size_t n_pending;
        uint32_t *sub; /* the hosts it stands for: itself, and those it relays for */
        uint32_t n_sub;
        uint32_t n_ranks; /* the ranks of those hosts */
} relay_member_t;

#define RL_KNOWN          1 /* every rank of the job takes part: merged across the group */
#define RL_PER_HOST       2 /* went to the root host by host this round */
#define RELAY_MAX_PENDING 4096

struct relay {
        uint32_t n; /* hosts of the group; m[0] is this daemon's own */
        relay_member_t *m;
        uint32_t *all; /* every host this daemon stands for (its own and the members') */
        uint32_t n_all;
        int32_t *member_of;   /* [cross_size]: the member a host reports through here, or -1 */
        uint64_t full;        /* bit i: m[i] */
        uint64_t *bits;       /* [n_ids]: the hosts that posted the id this round */
        uint64_t *first_usec; /* [n_ids]: its first posting this round */
        uint8_t *flags;       /* [n_ids]: RL_* */
        uint32_t n_ids;
        uint64_t oldest;         /* first posting of the oldest partial id (0 = none) */
        Hvd__RelayedReady **out; /* entries of the next NodeReady to the root, owned */
        size_t n_out, cap_out;
        uint32_t *grp_ids; /* ids every host of the group posted, for the next NodeReady */
        uint64_t *grp_waited;
        size_t n_grp, cap_grp;
        uint64_t in_msgs, out_msgs; /* readiness messages taken from the group / sent to the root */
        uint64_t hold_since;        /* requests held for the rest of the group since (0 = none) */
        uint64_t *out_at;           /* [cap_out]: when each entry came */
        uint64_t out_newest;        /* when the last one came (held still or gone on) */
        uint32_t *ranks_all;        /* the ranks of every host in all, host by host */
        uint32_t n_ranks_all;
        uint8_t *seen; /* [n_seen: the job's size], all 0 between calls (relay_pool_add) */
        uint32_t n_seen;
        int32_t *rank_member; /* [n_seen]: the member whose hosts a rank is on, or -1 */
        /* a first step's names in what is held, name by name over the
         * members (relay_pool_add): rl_name_t by name; pool_off: something
         * else is held */
        hvd_strmap_t *pool;
        uint32_t pool_complete;
        bool pool_off;
};

/* A name of a first step held at a relay (relay_pool_add). */
typedef struct rl_name {
        pool_head_t head; /* first: the first member's */
        uint64_t members; /* bit i: member i sent it, for all its ranks */
        bool bad;         /* sent twice, or with other parameters: goes as it came */
} rl_name_t;

static void relay_pool_clear(relay_t *rl) {
        pool_free(&rl->pool);
        rl->pool_complete = 0;
        rl->pool_off = false;
}

static void relay_out_clear(relay_t *rl) {
        for (size_t i = 0; i < rl->n_out; i++)
                protobuf_c_message_free_unpacked(&rl->out[i]->base, NULL);
        relay_pool_clear(rl);
        rl->n_out = 0;
        rl->n_grp = 0;
}

void relay_free(relay_t *rl) {
        if (!rl)
                return;
        for (uint32_t i = 0; i < rl->n; i++) {
                for (size_t k = 0; k < rl->m[i].n_pending; k++)
                        zmq_msg_close(&rl->m[i].pending[k]);
                free(rl->m[i].pending);
                free(rl->m[i].sub);
        }
        free(rl->m);
        free(rl->all);
        free(rl->member_of);
        free(rl->bits);
        free(rl->first_usec);
        free(rl->flags);
        relay_out_clear(rl);
        free(rl->out);
        free(rl->out_at);
        free(rl->ranks_all);
        free(rl->seen);
        free(rl->rank_member);
        free(rl->grp_ids);
        free(rl->grp_waited);
        free(rl);
}

static int relay_grow(relay_t *rl, uint32_t id) {
        if (id < rl->n_ids)
                return 0;
        int64_t cap = id_capacity(rl->n_ids, id);
        if (cap < 0)
                return (int) cap;
        uint32_t n = (uint32_t) cap;
        uint64_t *b = realloc(rl->bits, n * sizeof *b);
        if (!b)
                return -ENOMEM;
        rl->bits = b;
        uint64_t *f = realloc(rl->first_usec, n * sizeof *f);
        if (!f)
                return -ENOMEM;
        rl->first_usec = f;
        uint8_t *fl = realloc(rl->flags, n);
        if (!fl)
                return -ENOMEM;
        rl->flags = fl;
        memset(rl->bits + rl->n_ids, 0, (n - rl->n_ids) * sizeof *b);
        memset(rl->first_usec + rl->n_ids, 0, (n - rl->n_ids) * sizeof *f);
        memset(rl->flags + rl->n_ids, 0, n - rl->n_ids);
        rl->n_ids = n;
        return 0;
}

static bool entry_requests(const relay_t *rl, const Hvd__RelayedReady *rr);
static int32_t entry_member(const relay_t *rl, const Hvd__RelayedReady *rr);

static bool rl_name_done(const relay_t *rl, const rl_name_t *p) {
        return p && !p->bad && p->members == rl->full;
}

/* The new requests of entry rr, just held: counted name by name over the
 * members, so that those every member sent alike for all its ranks go on
 * once for the whole group (relay_pool_take), whatever entries each
 * member's hosts made of them. Only for entries of a first step's kind
 * (new requests alone, all of one member's hosts and ranks); anything
 * else turns the pool off until what is held went. */
static void relay_pool_add(relay_t *rl, const Hvd__RelayedReady *rr) {
        if (rl->pool_off)
                return;
        int32_t mi = entry_requests(rl, rr) ? entry_member(rl, rr) : -1;
        bool ok = mi >= 0 && rr->n_hosts == rl->m[mi].n_sub && rl->seen;
        /* every rank of its hosts, each once, in each shared part (a rank
         * of another member's would let a name go for ranks that did not
         * ask for it) */
        for (size_t k = 0; ok && k < rr->n_shared; k++) {
                const Hvd__SharedReady *sh = rr->shared[k];
                ok = sh->n_ranks == rl->m[mi].n_ranks && sh->ready && !sh->ready->n_cached && !sh->ready->n_node_cached;
                size_t i = 0;
                for (; ok && i < sh->n_ranks; i++) {
                        uint32_t r = sh->ranks[i];
                        ok = r < rl->n_seen && !rl->seen[r] && rl->rank_member[r] == mi;
                        if (ok)
                                rl->seen[r] = 1;
                }
                while (i-- > 0)
                        if (sh->ranks[i] < rl->n_seen)
                                rl->seen[sh->ranks[i]] = 0;
                for (size_t q = 0; ok && q < sh->ready->n_requests; q++)
                        ok = !sh->ready->requests[q]->process_set &&
                             sh->ready->requests[q]->kind != HVD__KIND__KIND_JOIN;
        }
        if (ok && !rl->pool && !(rl->pool = hvd_strmap_new()))
                ok = false;
        for (size_t k = 0; ok && k < rr->n_shared; k++) {
                const Hvd__Ready *q = rr->shared[k]->ready;
                for (size_t i = 0; ok && i < q->n_requests; i++) {
                        const Hvd__Request *r = q->requests[i];
                        size_t len = strlen(r->name);
                        rl_name_t *p = hvd_strmap_get(rl->pool, r->name, len);
                        if (!p) {
                                if (!(p = calloc(1, sizeof *p)) || hvd_strmap_put(rl->pool, r->name, len, p) < 0) {
                                        free(p);
                                        ok = false;
                                        break;
                                }
                                p->head.first = r;
                        }
                        bool was = p->head.done;
                        uint64_t bit = UINT64_C(1) << mi;
                        if ((p->members & bit) || !hvd_wire_equal(&p->head.first->base, &r->base))
                                p->bad = true;
                        else
                                p->members |= bit;
                        p->head.done = rl_name_done(rl, p);
                        rl->pool_complete += p->head.done;
                        rl->pool_complete -= was;
                }
        }
        if (!ok)
                rl->pool_off = true;
}

/* Appends rr (owned by the relay when this succeeds) to what goes on. */
static int relay_push(relay_t *rl, Hvd__RelayedReady *rr) {
        if (rl->n_out == rl->cap_out) {
                size_t cap = rl->cap_out ? rl->cap_out * 2 : 16;
                Hvd__RelayedReady **o = realloc(rl->out, cap * sizeof *o);
                if (o)
                        rl->out = o;
                uint64_t *at = realloc(rl->out_at, cap * sizeof *at);
                if (at)
                        rl->out_at = at;
                if (!o || !at)
                        return -ENOMEM;
                rl->cap_out = cap;
        }
        rl->out_at[rl->n_out] = rl->out_newest = hvd_now_usec();
        rl->out[rl->n_out++] = rr;
        relay_pool_add(rl, rr);
        return 0;
}

/* The names of the held first-step requests that every member sent alike
 * for all its ranks, taken out of the members' entries into one entry for
 * every host and rank of the group, in the order they first came (the
 * other copies go). Entries left with nothing go too. NULL when there are
 * none (or no memory: then nothing changed). */
static Hvd__RelayedReady *relay_pool_take(relay_t *rl) {
        if (rl->pool_off || !rl->pool_complete)
                return NULL;
        Hvd__RelayedReady *rr = calloc(1, sizeof *rr);
        Hvd__SharedReady *sh = calloc(1, sizeof *sh);
        Hvd__SharedReady **shp = malloc(sizeof *shp);
        Hvd__Ready *q = calloc(1, sizeof *q);
        Hvd__Request **reqs = malloc(rl->pool_complete * sizeof *reqs);
        uint32_t *hosts = malloc(rl->n_all * sizeof *hosts);
        uint32_t *ranks = malloc(rl->n_ranks_all * sizeof *ranks);
        if (!rr || !sh || !shp || !q || !reqs || !hosts || !ranks) {
                free(rr);
                free(sh);
                free(shp);
                free(q);
                free(reqs);
                free(hosts);
                free(ranks);
                return NULL;
        }
        hvd__relayed_ready__init(rr);
        hvd__shared_ready__init(sh);
        hvd__ready__init(q);
        memcpy_safe(hosts, rl->all, rl->n_all * sizeof *hosts);
        memcpy_safe(ranks, rl->ranks_all, rl->n_ranks_all * sizeof *ranks);
        rr->hosts = hosts;
        rr->n_hosts = rl->n_all;
        rr->shared = shp;
        rr->shared[rr->n_shared++] = sh;
        sh->ranks = ranks;
        sh->n_ranks = rl->n_ranks_all;
        sh->ready = q;
        q->requests = reqs;
        for (size_t i = 0; i < rl->n_out; i++) {
                Hvd__RelayedReady *e = rl->out[i];
                size_t keep_sh = 0;
                for (size_t k = 0; k < e->n_shared; k++) {
                        pool_move_done(rl->pool, e->shared[k]->ready, q);
                        if (e->shared[k]->ready->n_requests)
                                e->shared[keep_sh++] = e->shared[k];
                        else
                                protobuf_c_message_free_unpacked(&e->shared[k]->base, NULL);
                }
                e->n_shared = keep_sh;
        }
        pool_forget(rl->pool, q);
        rl->pool_complete = 0;
        size_t keep = 0;
        for (size_t i = 0; i < rl->n_out; i++) {
                if (rl->out[i]->n_shared) { /* the pool holds shared requests alone */
                        rl->out_at[keep] = rl->out_at[i];
                        rl->out[keep++] = rl->out[i];
                } else
                        protobuf_c_message_free_unpacked(&rl->out[i]->base, NULL);
        }
        rl->n_out = keep;
        return rr;
}

/* Appends an entry for the root: nr (owned from here on) is the readiness
 * of the n hosts. */
static int relay_append(relay_t *rl, const uint32_t *hosts, size_t n, Hvd__NodeReady *nr) {
        Hvd__RelayedReady *rr = NULL;
        if (!(rr = calloc(1, sizeof *rr)))
                goto oom;
        hvd__relayed_ready__init(rr);
        if (!(rr->hosts = malloc(n * sizeof *rr->hosts)))
                goto oom;
        memcpy_safe(rr->hosts, hosts, n * sizeof *hosts);
        rr->n_hosts = n;
        /* nr's readiness moves over; its shell goes */
        rr->n_ranks = nr->n_ranks;
        rr->ranks = TAKE_PTR(nr->ranks);
        rr->n_node_cached = nr->n_node_cached;
        rr->node_cached = TAKE_PTR(nr->node_cached);
        rr->n_node_cached_waited_usec = nr->n_node_cached_waited_usec;
        rr->node_cached_waited_usec = TAKE_PTR(nr->node_cached_waited_usec);
        rr->n_departed = nr->n_departed;
        rr->departed = TAKE_PTR(nr->departed);
        rr->n_shared = nr->n_shared;
        rr->shared = TAKE_PTR(nr->shared);
        nr->n_ranks = nr->n_node_cached = nr->n_node_cached_waited_usec = nr->n_departed = nr->n_shared = 0;
        protobuf_c_message_free_unpacked(&nr->base, NULL);
        /* one rank's new requests (a host of one rank) as a shared entry of
         * one rank, which relay_share can merge with other hosts' */
        Hvd__SharedReady *sh = NULL;
        if (rr->n_ranks == 1 && !rr->n_shared && !rr->ranks[0]->ready->n_cached && rr->ranks[0]->ready->n_requests &&
            (sh = calloc(1, sizeof *sh)) && (rr->shared = malloc(sizeof *rr->shared))) {
                hvd__shared_ready__init(sh);
                if ((sh->ranks = malloc(sizeof *sh->ranks))) {
                        sh->ranks[0] = rr->ranks[0]->rank;
                        sh->n_ranks = 1;
                        sh->ready = TAKE_PTR(rr->ranks[0]->ready);
                        protobuf_c_message_free_unpacked(&rr->ranks[0]->base, NULL);
                        free(rr->ranks);
                        rr->ranks = NULL;
                        rr->n_ranks = 0;
                        rr->shared[0] = TAKE_PTR(sh);
                        rr->n_shared = 1;
                } else {
                        free(rr->shared);
                        rr->shared = NULL;
                }
        }
        free(sh);
        if (relay_push(rl, rr) < 0) {
                protobuf_c_message_free_unpacked(&rr->base, NULL);
                return -ENOMEM;
        }
        return 0;
oom:
        if (rr)
                free(rr->hosts);
        free(rr);
        protobuf_c_message_free_unpacked(&nr->base, NULL);
        return -ENOMEM;
}

static Hvd__NodeReady *node_ready_new(size_t n_ids) {
        Hvd__NodeReady *nr = calloc(1, sizeof *nr);
        if (!nr)
                return NULL;
        hvd__node_ready__init(nr);
        if (n_ids && (!(nr->node_cached = malloc(n_ids * sizeof *nr->node_cached)) ||
                      !(nr->node_cached_waited_usec = malloc(n_ids * sizeof *nr->node_cached_waited_usec)))) {
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                return NULL;
        }
        return nr;
}

/* The ids every host of the group posted become one entry, for all of them. */
static int relay_grp_out(hvd_daemon_t *d, relay_t *rl) {
        if (!rl->n_grp)
                return 0;
        Hvd__NodeReady *nr = node_ready_new(rl->n_grp);
        if (!nr)
                return -ENOMEM;
        memcpy_safe(nr->node_cached, rl->grp_ids, rl->n_grp * sizeof *rl->grp_ids);
        memcpy_safe(nr->node_cached_waited_usec, rl->grp_waited, rl->n_grp * sizeof *rl->grp_waited);
        nr->n_node_cached = nr->n_node_cached_waited_usec = rl->n_grp;
        d->metrics.relay_group_ids += rl->n_grp;
        rl->n_grp = 0;
        return relay_append(rl, rl->all, rl->n_all, nr);
}

/* Whatever the group posted in part goes on host by host, after the ids
 * every host posted: what comes next from a host must not overtake it. */
static int relay_release(hvd_daemon_t *d, relay_t *rl) {
        int r = relay_grp_out(d, rl);
        if (r < 0 || !rl->oldest)
                return r;
        rl->oldest = 0;
        uint64_t now = hvd_now_usec();
        for (uint32_t i = 0; i < rl->n; i++) {
                size_t n = 0;
                for (uint32_t id = 0; id < rl->n_ids; id++)
                        n += (rl->bits[id] >> i) & 1;
                if (!n)
                        continue;
                Hvd__NodeReady *nr = node_ready_new(n);
                if (!nr)
                        return -ENOMEM;
                for (uint32_t id = 0; id < rl->n_ids; id++)
                        if ((rl->bits[id] >> i) & 1) {
                                nr->node_cached[nr->n_node_cached++] = id;
                                nr->node_cached_waited_usec[nr->n_node_cached_waited_usec++] =
                                        now > rl->first_usec[id] ? now - rl->first_usec[id] : 0;
                        }
                if ((r = relay_append(rl, rl->m[i].sub, rl->m[i].n_sub, nr)) < 0)
                        return r;
        }
        for (uint32_t id = 0; id < rl->n_ids; id++)
                if (rl->bits[id]) {
                        rl->bits[id] = 0;
                        rl->flags[id] |= RL_PER_HOST;
                }
        return 0;
}

/* A relay: the readiness nr (owned) of member i, for every host it
 * stands for. Cache ids of collectives every rank takes part in wait here
 * until every member posted them; everything else goes on as it came. */
static void relay_take_one(hvd_daemon_t *d, job_t *j, uint32_t i, Hvd__NodeReady *nr) {
        relay_t *rl = j->rl;
        relay_member_t *mi = &rl->m[i];
        int r = 0;
        if (nr->n_ranks || nr->n_shared || nr->n_departed) {
                if ((r = relay_release(d, rl)) < 0)
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                if (r < 0 || (r = relay_append(rl, mi->sub, mi->n_sub, nr)) < 0) /* appending frees nr on failure */
                        goto fail;
                return;
        }
        uint64_t now = hvd_now_usec();
        bool waited = nr->n_node_cached_waited_usec == nr->n_node_cached;
        size_t keep = 0;
        for (size_t k = 0; k < nr->n_node_cached; k++) {
                uint32_t id = nr->node_cached[k];
                uint64_t wt = waited ? nr->node_cached_waited_usec[k] : 0;
                if (id >= rl->n_ids || !(rl->flags[id] & RL_KNOWN) || (rl->flags[id] & RL_PER_HOST)) {
                        nr->node_cached[keep] = id;
                        if (waited)
                                nr->node_cached_waited_usec[keep] = wt;
                        keep++;
                        continue;
                }
                if ((rl->bits[id] >> i) & 1) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        job_abort(d, j, -1, HVD_EDUPLICATE,
                                  "host %s posted the tensor of cache id %u twice before it completed",
                                  host_of(j, rl->m[i].host), id);
                        return;
                }
                uint64_t at = wt < now ? now - wt : now;
                if (!rl->bits[id] || at < rl->first_usec[id])
                        rl->first_usec[id] = at;
                if (!rl->oldest || rl->first_usec[id] < rl->oldest)
                        rl->oldest = rl->first_usec[id];
                rl->bits[id] |= UINT64_C(1) << i;
                if (rl->bits[id] != rl->full)
                        continue;
                if (ids_push(&rl->grp_ids, &rl->grp_waited, &rl->n_grp, &rl->cap_grp, id,
                             now > rl->first_usec[id] ? now - rl->first_usec[id] : 0) < 0) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        r = -ENOMEM;
                        goto fail;
                }
                rl->bits[id] = 0;
        }
        nr->n_node_cached = keep;
        if (waited)
                nr->n_node_cached_waited_usec = keep;
        if (keep) {
                if ((r = relay_append(rl, mi->sub, mi->n_sub, nr)) < 0)
                        goto fail;
        } else
                protobuf_c_message_free_unpacked(&nr->base, NULL);
        return;
fail:
        job_abort(d, j, -1, r, "relaying the readiness of host %s: %s", host_of(j, mi->host), hvd_strerror(r));
}

/* A relay: what member i, itself a relay, passed on (nr owned). An entry
 * for every host it stands for with cache ids alone merges as member i's
 * own would; anything else goes on as it came, in order. */
static void relay_take_relayed(hvd_daemon_t *d, job_t *j, uint32_t i, Hvd__NodeReady *nr) {
        relay_t *rl = j->rl;
        relay_member_t *mi = &rl->m[i];
        int r = 0;
        for (size_t k = 0; k < nr->n_relayed && j->state == JOB_RUNNING; k++) {
                Hvd__RelayedReady *rr = nr->relayed[k];
                bool full = rr->n_hosts == mi->n_sub && !rr->n_ranks && !rr->n_shared && !rr->n_departed;
                for (size_t h = 0; h < rr->n_hosts; h++) {
                        uint32_t x = rr->hosts[h];
                        if (x >= j->cross_size || rl->member_of[x] != (int32_t) i) {
                                char other[64];
                                if (x < j->cross_size)
                                        snprintf(other, sizeof other, "%s", host_of(j, x));
                                else
                                        snprintf(other, sizeof other, "%u (no such host)", x);
                                job_abort(d, j, -1, HVD_EPROTO,
                                          "host %s relayed readiness for host %s, which does not report through it",
                                          host_of(j, mi->host), other);
                                goto out;
                        }
                        full = full && (!h || x > rr->hosts[h - 1]); /* ascending: all of them, each once */
                }
                if (full) {
                        Hvd__NodeReady *c = node_ready_new(rr->n_node_cached);
                        if (!c) {
                                r = -ENOMEM;
                                break;
                        }
                        if (rr->n_node_cached) /* none: both may be NULL */
                                memcpy_safe(c->node_cached, rr->node_cached,
                                            rr->n_node_cached * sizeof *c->node_cached);
                        c->n_node_cached = rr->n_node_cached;
                        if (rr->n_node_cached && rr->n_node_cached_waited_usec == rr->n_node_cached) {
                                memcpy_safe(c->node_cached_waited_usec, rr->node_cached_waited_usec,
                                            rr->n_node_cached * sizeof *c->node_cached_waited_usec);
                                c->n_node_cached_waited_usec = rr->n_node_cached;
                        }
                        relay_take_one(d, j, i, c);
                        continue;
                }
                if ((r = relay_release(d, rl)) < 0 || (r = relay_push(rl, rr)) < 0)
                        break;
                nr->relayed[k] = NULL;
        }
        if (r < 0)
                job_abort(d, j, -1, r, "relaying the readiness of host %s: %s", host_of(j, mi->host), hvd_strerror(r));
out:
        for (size_t k = 0; k < nr->n_relayed; k++)
                if (nr->relayed[k])
                        protobuf_c_message_free_unpacked(&nr->relayed[k]->base, NULL);
        free(nr->relayed);
        nr->relayed = NULL;
        nr->n_relayed = 0;
        protobuf_c_message_free_unpacked(&nr->base, NULL);
}

static void relay_take(hvd_daemon_t *d, job_t *j, uint32_t i, Hvd__NodeReady *nr) {
        j->rl->in_msgs++;
        d->metrics.relay_in++;
        if (nr->n_relayed)
                relay_take_relayed(d, j, i, nr);
        else
                relay_take_one(d, j, i, nr);
}

/* The member whose hosts an entry is all of, or -1. */
static int32_t entry_member(const relay_t *rl, const Hvd__RelayedReady *rr) {
        int32_t m = rr->n_hosts ? rl->member_of[rr->hosts[0]] : -1;
        for (size_t h = 1; m >= 0 && h < rr->n_hosts; h++)
                if (rl->member_of[rr->hosts[h]] != m)
                        m = -1;
        return m;
}

/* Whether an entry is new requests alone, all of one member's hosts:
 * something relay_share can merge. */
static bool entry_requests(const relay_t *rl, const Hvd__RelayedReady *rr) {
        return !rr->n_ranks && !rr->n_node_cached && !rr->n_departed && rr->n_shared && entry_member(rl, rr) >= 0;
}

/* Whether two entries' shared readiness is alike, entry by entry (their
 * ranks aside). */
static bool shared_equal(const Hvd__RelayedReady *a, const Hvd__RelayedReady *b) {
        if (a->n_shared != b->n_shared)
                return false;
        for (size_t k = 0; k < a->n_shared; k++)
                if (!hvd_wire_equal(&a->shared[k]->ready->base, &b->shared[k]->ready->base))
                        return false;
        return true;
}

/* A relay, before it sends: entries of requests alone that several
 * members sent alike (each host's first step names the same tensors)
 * become one, for all of them, so that the root decodes and enters them
 * once. An entry joins an earlier one only when no entry between them is of
 * its member (each host's readiness stays in the order it came). */
static void relay_share(hvd_daemon_t *d, relay_t *rl) {
        size_t n = rl->n_out;
        if (n < 2)
                return;
        bool *req = calloc(n, sizeof *req); /* entry_requests() */
        bool *gone = calloc(n, sizeof *gone);
        if (!req || !gone)
                goto out;
        for (size_t i = 0; i < n; i++)
                req[i] = entry_requests(rl, rl->out[i]);
        for (size_t i = 1; i < n; i++) {
                if (!req[i])
                        continue;
                Hvd__RelayedReady *ri = rl->out[i];
                int32_t member = rl->member_of[ri->hosts[0]];
                /* the nearest earlier entry of this member bounds the search */
                size_t lo = 0;
                for (size_t m = i; m-- > 0;) {
                        bool mine = false;
                        for (size_t h = 0; !gone[m] && h < rl->out[m]->n_hosts; h++)
                                mine |= rl->member_of[rl->out[m]->hosts[h]] == member;
                        if (mine) {
                                lo = m + 1;
                                break;
                        }
                }
                for (size_t g = lo; g < i; g++) {
                        Hvd__RelayedReady *rg = rl->out[g];
                        if (gone[g] || !req[g] || !shared_equal(rg, ri))
                                continue;
                        uint32_t *nh = realloc(rg->hosts, (rg->n_hosts + ri->n_hosts) * sizeof *nh);
                        if (!nh)
                                break;
                        rg->hosts = nh;
                        bool ok = true;
                        for (size_t k = 0; ok && k < rg->n_shared; k++) {
                                Hvd__SharedReady *a = rg->shared[k], *b = ri->shared[k];
                                uint32_t *nr = realloc(a->ranks, (a->n_ranks + b->n_ranks) * sizeof *nr);
                                if (!nr) {
                                        ok = false;
                                        break;
                                }
                                a->ranks = nr;
                        }
                        if (!ok)
                                break; /* nothing changed but capacity */
                        memcpy_safe(rg->hosts + rg->n_hosts, ri->hosts, ri->n_hosts * sizeof *ri->hosts);
                        rg->n_hosts += ri->n_hosts;
                        for (size_t k = 0; k < rg->n_shared; k++) {
                                Hvd__SharedReady *a = rg->shared[k], *b = ri->shared[k];
                                memcpy_safe(a->ranks + a->n_ranks, b->ranks, b->n_ranks * sizeof *b->ranks);
                                a->n_ranks += b->n_ranks;
                        }
                        gone[i] = true;
                        for (size_t k = 0; k < ri->n_shared; k++)
                                d->metrics.relay_shared += ri->shared[k]->ready->n_requests;
                        break;
                }
        }
        size_t keep = 0;
        for (size_t i = 0; i < n; i++)
                if (gone[i])
                        protobuf_c_message_free_unpacked(&rl->out[i]->base, NULL);
                else
                        rl->out[keep++] = rl->out[i];
        rl->n_out = keep;
out:
        free(req);
        free(gone);
}

/* Whether what waits to go to the root is a first step's new requests
 * alone, each entry all of one member's hosts and ranks (relay_pool_add):
 * worth holding for the other members' (relay_pool_take). */
static bool relay_holds(const relay_t *rl) {
        return rl->n_out && !rl->pool_off;
}

/* A relay: n entries of what its group made ready, in one message to the
 * root (or to the relay above). */
static void relay_send(hvd_daemon_t *d, job_t *j, Hvd__RelayedReady **out, size_t n) {
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nr.job_id = j->id;
        nr.n_relayed = n;
        nr.relayed = out;
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        send_up(d, j, &env);
        j->rl->out_msgs++;
        d->metrics.relay_out++;
}

/* The names every member sent go on now, once for the whole group. */
static void relay_pool_send(hvd_daemon_t *d, job_t *j) {
        Hvd__RelayedReady *pr = relay_pool_take(j->rl);
        if (!pr)
                return;
        d->metrics.relay_shared += pr->shared[0]->ready->n_requests * (uint64_t) (j->rl->n - 1);
        if (j->state == JOB_RUNNING)
                relay_send(d, j, &pr, 1);
        protobuf_c_message_free_unpacked(&pr->base, NULL);
}

void relay_flush(hvd_daemon_t *d, job_t *j, bool force) {
        relay_t *rl = j->rl;
        if (!force && !rl->n_grp && relay_holds(rl)) {
                relay_pool_send(d, j);
                if (!rl->n_out) {
                        rl->hold_since = 0;
                        return;
                }
                rl->hold_since = hold_start(rl->out_at[0], rl->out_newest, d->cfg.first_step_hold_usec);
                if (hold_on(d, &rl->hold_since, d->cfg.first_step_hold_usec))
                        return;
        }
        rl->hold_since = 0;
        relay_pool_send(d, j);
        relay_pool_clear(rl);
        if (relay_grp_out(d, rl) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        if (!rl->n_out)
                return;
        relay_share(d, rl);
        if (j->state == JOB_RUNNING)
                relay_send(d, j, rl->out, rl->n_out);
        relay_out_clear(rl);
}

/* A relay, housekeeping: ids held for long go on host by host (the root's
 * stall inspector then names the hosts that are missing). */
static void relay_expire(hvd_daemon_t *d, job_t *j, uint64_t now) {
        relay_t *rl = j->rl;
        uint64_t oldest = 0;
        for (uint32_t id = 0; id < rl->n_ids; id++)
                if (rl->bits[id] && (!oldest || rl->first_usec[id] < oldest))
                        oldest = rl->first_usec[id];
        rl->oldest = oldest;
        if (oldest && now - oldest > AGG_HOLD_USEC && relay_release(d, rl) < 0)
                job_abort(d, j, -1, -ENOMEM, "out of memory");
}

/* A relay: a schedule of the root on its way to the group. Its ids are done
 * with this round; those of collectives of every rank merge across the group. */
void relay_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s) {
        relay_t *rl = j->rl;
        if (s->repeat_key) {
                for (uint32_t i = 0; i < j->key_n[s->repeat_key]; i++) {
                        uint32_t id = j->key_ids[s->repeat_key][i];
                        if (id < rl->n_ids)
                                rl->flags[id] &= (uint8_t) ~RL_PER_HOST;
                }
                return;
        }
        for (size_t o = 0; o < s->n_ops; o++)
                for (size_t e = 0; e < s->ops[o]->n_entries; e++) {
                        uint32_t id = s->ops[o]->entries[e]->id;
                        if (id == HVD_NEGOTIATOR_NO_ID)
                                continue;
                        if (relay_grow(rl, id) < 0) {
                                job_abort(d, j, -1, -ENOMEM, "out of memory");
                                return;
                        }
                        rl->flags[id] = s->ops[o]->process_set == 0 ? RL_KNOWN : 0;
                }
        for (size_t i = 0; i < s->n_errors; i++) {
                uint32_t id = s->errors[i]->id;
                if (id != HVD_NEGOTIATOR_NO_ID && id < rl->n_ids)
                        rl->flags[id] &= (uint8_t) ~RL_PER_HOST;
        }
}

/* A relay: the root's message env (a schedule) to every host of the group,
 * packed once; a host not heard from yet gets it when it is. */
void relay_forward(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        relay_t *rl = j->rl;
        zmq_msg_t packed;
        if (io_pack(env, &packed) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        for (uint32_t i = 1; i < rl->n; i++) {
                relay_member_t *m = &rl->m[i];
                if (m->id_len) {
                        int r = io_send_shared(d, d->peer_sock, m->id, m->id_len, &packed);
                        if (r < 0)
                                hvd_log_warning("job %s: cannot pass a schedule on to host %s: %s", j->id,
                                                host_of(j, m->host), hvd_strerror(r));
                        continue;
                }
                if (m->n_pending == RELAY_MAX_PENDING) {
                        zmq_msg_close(&packed);
                        job_abort(d, j, -1, HVD_ETIMEOUT,
                                  "host %s never reached its relay daemon here (%d schedules wait for it)",
                                  host_of(j, m->host), RELAY_MAX_PENDING);
                        return;
                }
                zmq_msg_t *pm = realloc(m->pending, (m->n_pending + 1) * sizeof *pm);
                if (!pm) {
                        zmq_msg_close(&packed);
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return;
                }
                m->pending = pm;
                zmq_msg_init(&pm[m->n_pending]);
                zmq_msg_copy(&pm[m->n_pending], &packed);
                m->n_pending++;
        }
        zmq_msg_close(&packed);
}

/* A relay: the first message over a group host's connection names it. */
static void relay_member_heard(hvd_daemon_t *d, job_t *j, relay_member_t *m, const uint8_t *id, size_t id_len) {
        memcpy_safe(m->id, id, id_len);
        m->id_len = id_len;
        for (size_t k = 0; k < m->n_pending; k++) {
                int r = io_send_shared(d, d->peer_sock, m->id, m->id_len, &m->pending[k]);
                if (r < 0)
                        hvd_log_warning("job %s: cannot pass a schedule on to host %s: %s", j->id, host_of(j, m->host),
                                        hvd_strerror(r));
                zmq_msg_close(&m->pending[k]);
        }
        free(m->pending);
        m->pending = NULL;
        m->n_pending = 0;
}

/* Strips what only the hop to the relay needed. */
static void relay_strip(Hvd__NodeReady *nr) {
        if (nr->job_id != protobuf_c_empty_string) {
                free(nr->job_id);
                nr->job_id = (char *) protobuf_c_empty_string;
        }
        free(nr->relay_secret.data);
        nr->relay_secret.data = NULL;
        nr->relay_secret.len = 0;
        nr->relay_host = 0;
}

/* A relay: a NodeReady of a host of its group (nr owned from here on). */
void relay_receive(hvd_daemon_t *d, job_t *j, const uint8_t *id, size_t id_len, Hvd__NodeReady *nr) {
        char reason[512];
        reason[0] = 0;
        if (!j->rl && j->state == JOB_JOINING && j->role == JOB_MEMBER) {
                /* the root's welcome to this daemon is still on its way */
                early_msg_t *e = j->n_early < 4096 ? realloc(j->early, (j->n_early + 1) * sizeof *e) : NULL;
                if (!e) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        job_abort(d, j, -1, -ENOMEM, "too many relayed messages before the job's welcome");
                        return;
                }
                j->early = e;
                memcpy_safe(e[j->n_early].id, id, id_len);
                e[j->n_early].id_len = id_len;
                e[j->n_early].nr = nr;
                j->n_early++;
                return;
        }
        relay_member_t *m = NULL;
        uint32_t i = 0;
        for (uint32_t k = 1; j->rl && k < j->rl->n; k++)
                if (j->rl->m[k].host == nr->relay_host) {
                        m = &j->rl->m[k];
                        i = k;
                }
        if (!job_secret_is(j, nr->relay_secret.data, nr->relay_secret.len) || !m) {
                if (!m)
                        snprintf(reason, sizeof reason,
                                 "job %s: host %u is not in the relay group of this daemon (host %s)", j->id,
                                 nr->relay_host, host_of(j, j->cross_rank));
                else
                        snprintf(reason, sizeof reason,
                                 "job %s: host %u presented a wrong job secret to its relay daemon", j->id,
                                 nr->relay_host);
                hvd_log_warning("%s", reason);
                io_refuse_peer(d, id, id_len, j->id, HVD_EDENIED, "%s", reason);
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                return;
        }
        if (!m->id_len)
                relay_member_heard(d, j, m, id, id_len);
        else if (m->id_len != id_len || memcmp(m->id, id, id_len) != 0) {
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                job_abort(d, j, -1, HVD_EABORTED,
                          "host %s: its connection to the relay daemon of host %s broke and was made again (messages "
                          "may be lost)",
                          host_of(j, m->host), host_of(j, j->cross_rank));
                return;
        }
        relay_strip(nr);
        bool own = nr->n_ranks || nr->n_shared || nr->n_node_cached || nr->n_departed;
        if (j->state != JOB_RUNNING || (!own && !nr->n_relayed)) {
                protobuf_c_message_free_unpacked(&nr->base, NULL); /* a hello, or too late */
                return;
        }
        /* a relay below this one passes its hosts' readiness on, its own with it; any other host sends its own */
        if ((m->n_sub > 1) != (nr->n_relayed > 0) || (own && nr->n_relayed)) {
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                job_abort(d, j, -1, HVD_EPROTO, "host %s sent its relay daemon on host %s %s", host_of(j, m->host),
                          host_of(j, j->cross_rank),
                          m->n_sub > 1 ? "readiness of its own, though it relays for other hosts"
                                       : "relayed readiness, though it relays for no host");
                return;
        }
        relay_take(d, j, i, nr);
}

/* A relay, once running: what its group sent before its own welcome. */
void relay_replay_early(hvd_daemon_t *d, job_t *j) {
        early_msg_t *early = TAKE_PTR(j->early);
        size_t n_early = j->n_early;
        j->n_early = 0;
        for (size_t k = 0; k < n_early; k++)
                if (j->rl && j->state == JOB_RUNNING)
                        relay_receive(d, j, early[k].id, early[k].id_len, early[k].nr);
                else
                        protobuf_c_message_free_unpacked(&early[k].nr->base, NULL);
        free(early);
}

/* Not root: the relay table of the job's NodeWelcome: this daemon relays
 * for a group, reports through a relay, or neither. Returns false when
 * the job was aborted. */
bool relay_setup(hvd_daemon_t *d, job_t *j, const Hvd__NodeWelcome *nw) {
        if (!nw->n_relay_via)
                return true;
        uint32_t me = j->cross_rank, n = 1;
        bool ok = nw->n_relay_via == j->cross_size && nw->relay_via[0] == 0;
        for (uint32_t c = 1; ok && c < j->cross_size; c++) {
                uint32_t v = nw->relay_via[c];
                /* a relay has an endpoint; one that is not its own names a relay */
                ok = v < j->cross_size && (!v || nw->relay_endpoint[v][0]) && (v == c || !v || nw->relay_via[v]);
                n += v == me && c != me;
        }
        if (ok) {
                /* every host reaches the root */
                if (!(j->relay_via = malloc(j->cross_size * sizeof *j->relay_via)))
                        goto oom;
                memcpy_safe(j->relay_via, nw->relay_via, j->cross_size * sizeof *j->relay_via);
                for (uint32_t c = 1; ok && c < j->cross_size; c++) {
                        uint32_t h = c, steps = 0;
                        while (h && steps++ < j->cross_size)
                                h = tree_parent(j, h);
                        ok = h == 0;
                }
        }
        if (!ok || n > 64) {
                free(j->relay_via);
                j->relay_via = NULL;
                job_abort(d, j, -1, HVD_EPROTO, "root daemon sent an invalid relay table");
                return false;
        }
        uint32_t via = tree_parent(j, me);
        if (n > 1) {
                relay_t *rl = calloc(1, sizeof *rl);
                if (!rl)
                        goto oom;
                j->rl = rl;
                if (!(rl->m = calloc(n, sizeof *rl->m)) ||
                    !(rl->member_of = malloc(j->cross_size * sizeof *rl->member_of)) ||
                    !(rl->all = malloc(j->cross_size * sizeof *rl->all)))
                        goto oom;
                for (uint32_t c = 0; c < j->cross_size; c++)
                        rl->member_of[c] = -1;
                rl->m[rl->n++].host = me;
                char list[512];
                size_t o = 0;
                list[0] = 0;
                for (uint32_t c = 0; c < j->cross_size; c++)
                        if (c != me && j->relay_via[c] == me) {
                                rl->m[rl->n++].host = c;
                                if (o + 32 < sizeof list)
                                        o += (size_t) snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "",
                                                               host_of(j, c));
                        }
                /* what each member stands for, in host order */
                for (uint32_t k = 0; k < rl->n; k++) {
                        relay_member_t *m = &rl->m[k];
                        uint32_t cnt = 0;
                        for (uint32_t c = 1; c < j->cross_size; c++)
                                cnt += k ? tree_under(j, c, m->host) : c == me;
                        if (!(m->sub = malloc(cnt * sizeof *m->sub)))
                                goto oom;
                        for (uint32_t c = 1; c < j->cross_size; c++)
                                if (k ? tree_under(j, c, m->host) : c == me) {
                                        m->sub[m->n_sub++] = c;
                                        rl->member_of[c] = (int32_t) k;
                                }
                }
                for (uint32_t c = 1; c < j->cross_size; c++)
                        if (rl->member_of[c] >= 0)
                                rl->all[rl->n_all++] = c;
                rl->full = rl->n == 64 ? UINT64_MAX : (UINT64_C(1) << rl->n) - 1;
                /* the ranks of each member's hosts, and of them all, host by
                 * host (what a first step's names shared by the whole group
                 * name: relay_pool_take) */
                if (!(rl->ranks_all = malloc(j->size * sizeof *rl->ranks_all)) || !(rl->seen = calloc(j->size, 1)) ||
                    !(rl->rank_member = malloc(j->size * sizeof *rl->rank_member)))
                        goto oom;
                rl->n_seen = j->size;
                for (uint32_t r = 0; r < j->size; r++)
                        rl->rank_member[r] = j->table[r].known && j->table[r].cross_rank < j->cross_size
                                                     ? rl->member_of[j->table[r].cross_rank]
                                                     : -1;
                for (uint32_t h = 0; h < rl->n_all; h++)
                        for (uint32_t r = 0; r < j->size; r++)
                                if (j->table[r].known && j->table[r].cross_rank == rl->all[h]) {
                                        rl->ranks_all[rl->n_ranks_all++] = r;
                                        rl->m[rl->member_of[rl->all[h]]].n_ranks++;
                                }
                snprintf(j->relay_desc, sizeof j->relay_desc, "relays for hosts [%s]", list);
                if (rl->n_all > rl->n)
                        snprintf(j->relay_desc + strlen(j->relay_desc), sizeof j->relay_desc - strlen(j->relay_desc),
                                 " (%u hosts in all)", rl->n_all - 1);
                hvd_log_info("job %s: %s", j->id, j->relay_desc);
        }
        if (via) {
                peer_t *p = peer_get(d, nw->relay_endpoint[via]);
                if (!p) {
                        job_abort(d, j, -1, HVD_EABORTED, "cannot connect to the relay daemon of host %s at %s",
                                  host_of(j, via), nw->relay_endpoint[via]);
                        return false;
                }
                p->n_jobs++;
                j->relay = p;
                size_t o = strlen(j->relay_desc);
                snprintf(j->relay_desc + o, sizeof j->relay_desc - o,
                         "%sreports through the relay daemon of host %s at %s", o ? "; " : "", host_of(j, via),
                         p->endpoint);
                hvd_log_info("job %s: %s", j->id, j->relay_desc);
                /* a hello: the relay learns this connection */
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                nr.job_id = j->id;
                nr.relay_host = me;
                nr.relay_secret.data = j->secret;
                nr.relay_secret.len = j->secret_len;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                int r = io_send_peer(d, p, &env);
                if (r < 0)
                        hvd_log_warning("job %s: cannot reach the relay daemon at %s: %s", j->id, p->endpoint,
                                        hvd_strerror(r));
        }
        return true;
oom:
        job_abort(d, j, -1, -ENOMEM, "out of memory");
        return false;
}

/* A relay: its own host's readiness joins the group's (ids alone are
 * taken as they are; anything else as a copy, nr stays the caller's). */
void relay_take_own(hvd_daemon_t *d, job_t *j, const Hvd__NodeReady *nr) {
        if (!nr->n_ranks && !nr->n_shared && !nr->n_departed) {
                Hvd__NodeReady *c = node_ready_new(nr->n_node_cached);
                if (!c) {
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return;
                }
                if (nr->n_node_cached) { /* none: both may be NULL */
                        memcpy_safe(c->node_cached, nr->node_cached, nr->n_node_cached * sizeof *c->node_cached);
                        if (nr->n_node_cached_waited_usec == nr->n_node_cached)
                                memcpy_safe(c->node_cached_waited_usec, nr->node_cached_waited_usec,
                                            nr->n_node_cached * sizeof *c->node_cached_waited_usec);
                        else
                                memset(c->node_cached_waited_usec, 0,
                                       nr->n_node_cached * sizeof *c->node_cached_waited_usec);
                }
                c->n_node_cached = c->n_node_cached_waited_usec = nr->n_node_cached;
                relay_take(d, j, 0, c);
                return;
        }
        /* the cold path: a copy through the wire format */
        Hvd__NodeReady only = *nr;
        only.job_id = (char *) protobuf_c_empty_string;
        size_t len = protobuf_c_message_get_packed_size(&only.base);
        uint8_t *buf = malloc(len ? len : 1);
        Hvd__NodeReady *c = NULL;
        if (buf) {
                protobuf_c_message_pack(&only.base, buf);
                c = hvd__node_ready__unpack(NULL, len, buf);
        }
        free(buf);
        if (!c) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        relay_take(d, j, 0, c);
}

/* Housekeeping, a relay: ids held for long go on host by host; a first
 * step's hold that ran out lets what is held go. */
uint64_t relay_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        uint64_t next = UINT64_MAX;
        if (j->rl->oldest && j->state == JOB_RUNNING) {
                next = tick;
                relay_expire(d, j, now);
        }
        if (hold_expired(j->rl->hold_since, d->cfg.first_step_hold_usec, now, &next))
                relay_flush(d, j, true);
        return next;
}

/* The relay's totals, logged as its job goes. */
void relay_log_totals(const job_t *j) {
        hvd_log_info("job %s: %s: took %" PRIu64 " readiness messages from its group, sent %" PRIu64 " to %s", j->id,
                     j->relay_desc, j->rl->in_msgs, j->rl->out_msgs, j->relay ? "its relay" : "the root");
}
