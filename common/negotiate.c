/* negotiate.c — the negotiation table of one job (see negotiate.h).
 * Invariants: a tensor row's id is its index and never changes; a rank's
 * ready bit is set at most once between two schedules; a tensor enters the
 * ready list exactly once, when every rank that has not joined is ready;
 * the ready list order is the order every rank executes. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion.h"
#include "hvd.h"
#include "negotiate.h"
#include "reduce.h"
#include "strmap.h"
#include "util.h"

typedef struct params {
        bool valid;
        uint8_t kind, dtype, reduce_op, ndim;
        int32_t root, device;
        uint32_t process_set, group_id, group_size;
        double prescale, postscale;
        int64_t shape[HVD_MAX_NDIM];
        uint32_t n_splits;
        int64_t *splits;
        uint32_t n_set; /* process set members (sorted), when process_set != 0 */
        uint32_t *set_ranks;
} params_t;

/* One node's part of a tensor. Kept node by node (NODE()): a node's
 * message walks its ids through consecutive memory. */
typedef struct node_state {
        uint32_t valid; /* ranks of that node whose parameters are known */
        uint32_t round; /* the tensor's round marks and ready are of (older: 0 and false) */
        uint32_t marks; /* ranks of that node marked one by one this round */
        bool ready;     /* every rank of that node is ready */
        /* not 0: every rank of that node has the tensor's parameter set
         * var[var] (a request by name the whole node shared), and their
         * pref[] entries are not used; 0: each has its own (pref[]) */
        uint32_t var;
} node_state_t;

typedef struct tensor {
        char *name;
        char *key; /* name, plus the process set when not 0 */
        size_t key_len;
        bool transient; /* beyond the cache's capacity: freed once scheduled, never announced */
        uint32_t id;
        bool announced; /* its name was sent once: later schedules send only the id */
        bool queued;    /* in the ready list */
        uint32_t n_ready;
        uint32_t some_ready; /* a rank that is ready this round (valid while n_ready > 0) */
        bool some_in_set;    /* ... and it named a process set (known without its parameters) */
        uint64_t first_ready_usec;
        bool checked;         /* every rank's parameters passed check_consistent and did not change since */
        uint32_t round;       /* completed rounds + 1: node states of older rounds count as cleared */
        uint32_t n_marked;    /* ranks marked one by one this round (ready[] is all 0 without) */
        uint8_t *ready;       /* [size]: ranks marked one by one */
        uint64_t *ready_usec; /* [size], while the timeline is on: when each rank became ready */
        /* Each rank's last parameters: var[pref[rank]], or var[ns->var]
         * for every rank of a node that shared them (rank_var()). A request
         * by name that several ranks shared is one parameter set for all
         * of them, so equal indices mean equal parameters; var[0] is "none
         * yet" and a set no rank refers to any more is reused. */
        uint32_t *pref;       /* [size], or NULL while no rank has its own */
        uint32_t n_var_nodes; /* nodes whose ranks share one set (node_state_t.var) */
        params_t *var;        /* [n_var] */
        uint32_t *var_refs;   /* [n_var]: ranks that refer to each */
        uint32_t *var_free;   /* unused indices */
        uint32_t n_var, cap_var, n_var_free;
        uint32_t last_var; /* the set a request by name made or matched last (0: none) */
} tensor_t;

struct hvd_negotiator {
        uint32_t size;
        uint32_t max_tensors;
        uint64_t fusion_threshold;
        uint64_t seq;
        tensor_t **tensors; /* by id; NULL = a free transient slot */
        uint32_t n_tensors, cap_tensors;
        uint32_t *free_ids; /* free transient slots */
        uint32_t n_free;
        hvd_strmap_t *by_name;
        uint32_t n_pending;   /* tensors with a ready rank (n_ready > 0) */
        uint32_t *ready_list; /* ids, in ready order */
        uint32_t n_ready_list;
        uint32_t *held; /* complete members of incomplete groups */
        uint32_t n_held;
        uint8_t *joined; /* [size] */
        uint32_t n_joined;
        int32_t last_joined;
        bool join_done;
        bool timeline; /* record when each rank becomes ready */
        hvd_negotiator_stats_t stats;
        void (*observe)(void *userdata, uint64_t wait_usec);
        void *observe_data;
        uint32_t n_nodes;                 /* 0 = no node-level readiness */
        uint32_t *node_of;                /* [size]: each rank's node */
        uint32_t *node_size;              /* [n_nodes]: ranks per node */
        uint32_t *node_first, *node_list; /* the ranks of node c: node_list[node_first[c] .. node_first[c + 1]) */
        uint8_t *scratch;                 /* [size], all 0 between calls (node_run) */
        node_state_t *nst;                /* [n_nodes][cap_tensors], with nodes */
};

#define NODE(n, t, c) (&(n)->nst[(size_t) (c) * (n)->cap_tensors + (t)->id])

/* A node's state for t in this round: one left from an earlier round is
 * cleared when first looked at (completing a round does not touch every
 * node). */
static inline node_state_t *node_cur(const hvd_negotiator_t *n, const tensor_t *t, uint32_t c) {
        node_state_t *ns = NODE(n, t, c);
        if (ns->round != t->round) {
                ns->round = t->round;
                ns->marks = 0;
                ns->ready = false;
        }
        return ns;
}

static inline bool node_ready(const hvd_negotiator_t *n, const tensor_t *t, uint32_t c) {
        const node_state_t *ns = NODE(n, t, c);
        return ns->round == t->round && ns->ready;
}

/* The index of rank r's last parameters for t (0: none yet). */
static inline uint32_t rank_var(const hvd_negotiator_t *n, const tensor_t *t, uint32_t r) {
        if (t->n_var_nodes) {
                uint32_t v = NODE(n, t, n->node_of[r])->var;
                if (v)
                        return v;
        }
        return t->pref ? t->pref[r] : 0;
}

/* rank r's last parameters for t */
#define PR(n, t, r) (&(t)->var[rank_var((n), (t), (r))])

/* A rank is ready for t when it was marked itself or its whole node was. */
static inline bool is_ready(const hvd_negotiator_t *n, const tensor_t *t, uint32_t r) {
        return t->ready[r] || (n->nst && node_ready(n, t, n->node_of[r]));
}

static const char *op_name(uint32_t op) {
        static const char *const names[] = { "average", "sum", "min", "max", "product" };
        return op < ELEMENTSOF(names) ? names[op] : "?";
}

static const char *kind_name(uint32_t k) {
        static const char *const names[] = { "none",     "allreduce",     "broadcast", "allgather",
                                             "alltoall", "reducescatter", "barrier",   "join" };
        return k < ELEMENTSOF(names) ? names[k] : "?";
}

int hvd_negotiator_new(uint32_t size, uint32_t max_tensors, uint64_t fusion_threshold_bytes, hvd_negotiator_t **ret) {
        hvd_negotiator_t *n = calloc(1, sizeof *n);
        if (!n)
                return -ENOMEM;
        n->size = size;
        n->max_tensors = max_tensors;
        n->fusion_threshold = fusion_threshold_bytes;
        n->last_joined = -1;
        n->by_name = hvd_strmap_new();
        n->joined = calloc(size, 1);
        if (!n->by_name || !n->joined) {
                hvd_negotiator_destroy(&n);
                return -ENOMEM;
        }
        *ret = n;
        return 0;
}

static void tensor_free(tensor_t *t, uint32_t size) {
        if (!t)
                return;
        (void) size;
        for (uint32_t v = 0; v < t->n_var; v++) {
                free(t->var[v].splits);
                free(t->var[v].set_ranks);
        }
        free(t->pref);
        free(t->var);
        free(t->var_refs);
        free(t->var_free);
        free(t->ready);
        free(t->ready_usec);
        free(t->name);
        free(t->key);
        free(t);
}

void hvd_negotiator_destroy(hvd_negotiator_t **np) {
        if (!np || !*np)
                return;
        hvd_negotiator_t *n = *np;
        for (uint32_t i = 0; i < n->n_tensors; i++)
                tensor_free(n->tensors[i], n->size);
        free(n->tensors);
        free(n->free_ids);
        hvd_strmap_destroy(&n->by_name);
        free(n->ready_list);
        free(n->held);
        free(n->joined);
        free(n->node_of);
        free(n->node_size);
        free(n->node_first);
        free(n->node_list);
        free(n->scratch);
        free(n->nst);
        free(n);
        *np = NULL;
}

static size_t tensor_key(char *key, const char *name, uint32_t process_set) {
        size_t len = strlen(name);
        memcpy(key, name, len);
        if (process_set == 0)
                return len;
        key[len] = 0; /* names never contain NUL: no clash with a plain name */
        memcpy(key + len + 1, &process_set, sizeof process_set);
        return len + 1 + sizeof process_set;
}

/* Rows below max_tensors are the cache: kept, and their ids announced so
 * ranks resubmit by id. Past it, rows are transient: they live until their
 * schedule, their ids are never announced (clients never cache them), and
 * their slots are reused. At most max_tensors more may wait at once. */
static tensor_t *tensor_add(hvd_negotiator_t *n, const char *name, const char *key, size_t key_len) {
        bool transient = n->n_tensors >= n->max_tensors;
        if (transient && !n->n_free && n->n_tensors >= 2 * n->max_tensors)
                return NULL;
        if (transient && !n->free_ids && !(n->free_ids = calloc(n->max_tensors, sizeof *n->free_ids)))
                return NULL;
        if (!(transient && n->n_free) && n->n_tensors == n->cap_tensors) {
                uint32_t cap = n->cap_tensors ? n->cap_tensors * 2 : 64;
                tensor_t **nt = realloc(n->tensors, cap * sizeof *nt);
                uint32_t *rl = realloc(n->ready_list, cap * sizeof *rl);
                if (nt)
                        n->tensors = nt;
                if (rl)
                        n->ready_list = rl;
                uint32_t *hl = realloc(n->held, cap * sizeof *hl);
                if (hl)
                        n->held = hl;
                if (!nt || !rl || !hl)
                        return NULL;
                if (n->n_nodes) {
                        node_state_t *ns = calloc((size_t) n->n_nodes * cap, sizeof *ns);
                        if (!ns)
                                return NULL;
                        for (uint32_t c = 0; n->nst && c < n->n_nodes; c++)
                                memcpy(ns + (size_t) c * cap, n->nst + (size_t) c * n->cap_tensors,
                                       n->cap_tensors * sizeof *ns);
                        free(n->nst);
                        n->nst = ns;
                }
                n->cap_tensors = cap;
        }
        tensor_t *t = calloc(1, sizeof *t);
        if (!t)
                return NULL;
        t->name = strdup(name);
        t->key = malloc(key_len ? key_len : 1);
        t->key_len = key_len;
        t->ready = calloc(n->size, 1);
        t->cap_var = 4;
        t->var = calloc(t->cap_var, sizeof *t->var);
        t->var_refs = calloc(t->cap_var, sizeof *t->var_refs);
        t->var_free = calloc(t->cap_var, sizeof *t->var_free);
        t->n_var = 1;
        t->round = 1;
        t->transient = transient;
        t->id = transient && n->n_free ? n->free_ids[n->n_free - 1] : n->n_tensors;
        if (t->key)
                memcpy(t->key, key, key_len);
        if (!t->name || !t->key || !t->ready || !t->var || !t->var_refs || !t->var_free ||
            hvd_strmap_put(n->by_name, key, key_len, t) < 0) {
                tensor_free(t, n->size);
                return NULL;
        }
        for (uint32_t c = 0; n->nst && c < n->n_nodes; c++) /* a reused slot starts afresh */
                *NODE(n, t, c) = (node_state_t){ 0 };
        if (t->id == n->n_tensors)
                n->n_tensors++;
        else
                n->n_free--;
        n->tensors[t->id] = t;
        return t;
}

static int params_set(params_t *p, const Hvd__Request *q) {
        int64_t *splits = NULL;
        uint32_t *set = NULL;
        if (q->n_splits) {
                splits = malloc(q->n_splits * sizeof *splits);
                if (!splits)
                        return -ENOMEM;
                memcpy(splits, q->splits, q->n_splits * sizeof *splits);
        }
        if (q->process_set && q->n_set_ranks) {
                set = malloc(q->n_set_ranks * sizeof *set);
                if (!set) {
                        free(splits);
                        return -ENOMEM;
                }
                memcpy(set, q->set_ranks, q->n_set_ranks * sizeof *set);
        }
        free(p->splits);
        free(p->set_ranks);
        *p = (params_t){
                .valid = true,
                .kind = (uint8_t) q->kind,
                .dtype = (uint8_t) q->dtype,
                .reduce_op = (uint8_t) q->reduce_op,
                .ndim = (uint8_t) q->n_shape,
                .root = q->root,
                /* where, not which: each rank drives its own GPU */
                .device = q->device >= 0 ? 0 : -1,
                .process_set = q->process_set,
                .group_id = q->group_id,
                .group_size = q->group_size,
                .prescale = q->prescale,
                .postscale = q->postscale,
                .n_splits = (uint32_t) q->n_splits,
                .splits = splits,
                .n_set = set ? (uint32_t) q->n_set_ranks : 0,
                .set_ranks = set,
        };
        if (q->n_shape)
                memcpy(p->shape, q->shape, q->n_shape * sizeof(int64_t));
        return 0;
}

/* Whether p is what params_set(p, q) would make of q. */
static bool params_match(const params_t *p, const Hvd__Request *q) {
        uint32_t n_set = q->process_set && q->n_set_ranks ? (uint32_t) q->n_set_ranks : 0;
        return p->valid && p->kind == (uint8_t) q->kind && p->dtype == (uint8_t) q->dtype &&
               p->reduce_op == (uint8_t) q->reduce_op && p->ndim == (uint8_t) q->n_shape && p->root == q->root &&
               p->device == (q->device >= 0 ? 0 : -1) && p->process_set == q->process_set &&
               p->group_id == q->group_id && p->group_size == q->group_size && p->prescale == q->prescale &&
               p->postscale == q->postscale && p->n_splits == q->n_splits && p->n_set == n_set &&
               (!q->n_shape || memcmp(p->shape, q->shape, q->n_shape * sizeof(int64_t)) == 0) &&
               (!q->n_splits || memcmp(p->splits, q->splits, q->n_splits * sizeof(int64_t)) == 0) &&
               (!n_set || memcmp(p->set_ranks, q->set_ranks, n_set * sizeof(uint32_t)) == 0);
}

static uint32_t first_ready_rank(const hvd_negotiator_t *n, const tensor_t *t);

static bool tensor_complete(const hvd_negotiator_t *n, const tensor_t *t) {
        if (t->n_ready == 0)
                return false;
        /* O(1): which set, from any ready rank (consistency is checked later) */
        if (t->some_in_set) {
                const params_t *a = PR(n, t, t->some_ready);
                /* a process set: its members; one that joined never comes,
                 * so the tensor completes to fail (check_join) */
                for (uint32_t i = 0; i < a->n_set; i++)
                        if (!is_ready(n, t, a->set_ranks[i]) && !n->joined[a->set_ranks[i]])
                                return false;
                return true;
        }
        if (n->n_joined == 0)
                return t->n_ready == n->size;
        for (uint32_t r = 0; r < n->size; r++)
                if (!n->joined[r] && !is_ready(n, t, r))
                        return false;
        return true;
}

static void maybe_queue(hvd_negotiator_t *n, tensor_t *t) {
        if (!t->queued && tensor_complete(n, t)) {
                t->queued = true;
                n->ready_list[n->n_ready_list++] = t->id;
        }
}

/* rank is ready for t (not yet, the caller made sure); ns: its node's
 * state for t, or NULL without nodes */
static void mark_one(hvd_negotiator_t *n, uint32_t rank, tensor_t *t, node_state_t *ns, uint64_t when) {
        if (t->n_ready == 0 || when < t->first_ready_usec)
                t->first_ready_usec = when;
        if (t->n_ready == 0) {
                n->n_pending++;
                t->some_ready = rank;
                if (!t->checked) /* else every rank's parameters are alike and unchanged since the last round */
                        t->some_in_set = PR(n, t, rank)->process_set != 0;
        }
        t->ready[rank] = 1;
        t->n_marked++;
        t->n_ready++;
        if (ns)
                ns->marks++;
        if (n->timeline && (t->ready_usec || (t->ready_usec = calloc(n->size, sizeof *t->ready_usec))))
                t->ready_usec[rank] = when;
}

/* queue: look whether t is complete now (the caller does once after
 * marking several ranks otherwise) */
static int mark_ready(hvd_negotiator_t *n, uint32_t rank, tensor_t *t, uint64_t when, bool queue, char *err,
                      size_t err_len) {
        if (is_ready(n, t, rank)) {
                snprintf(err, err_len, "tensor '%s' submitted twice by rank %u before it completed", t->name, rank);
                return HVD_EDUPLICATE;
        }
        mark_one(n, rank, t, n->nst ? node_cur(n, t, n->node_of[rank]) : NULL, when);
        if (queue)
                maybe_queue(n, t);
        return 0;
}

static void rank_join(hvd_negotiator_t *n, uint32_t rank) {
        if (n->joined[rank])
                return;
        n->joined[rank] = 1;
        n->n_joined++;
        n->last_joined = (int32_t) rank;
        if (n->n_joined == n->size) {
                n->join_done = true;
                return;
        }
        /* tensors that waited only for this rank are complete now */
        for (uint32_t i = 0; i < n->n_tensors; i++)
                if (n->tensors[i])
                        maybe_queue(n, n->tensors[i]);
}

/* A new parameter set (refs 0) for t: its index, or 0 without memory. */
static uint32_t var_new(tensor_t *t) {
        if (t->n_var_free)
                return t->var_free[--t->n_var_free];
        if (t->n_var == t->cap_var) {
                uint32_t cap = t->cap_var * 2;
                params_t *v = realloc(t->var, cap * sizeof *v);
                if (v)
                        t->var = v;
                uint32_t *rf = realloc(t->var_refs, cap * sizeof *rf);
                if (rf)
                        t->var_refs = rf;
                uint32_t *fr = realloc(t->var_free, cap * sizeof *fr);
                if (fr)
                        t->var_free = fr;
                if (!v || !rf || !fr)
                        return 0;
                t->cap_var = cap;
        }
        t->var[t->n_var] = (params_t){ 0 };
        t->var_refs[t->n_var] = 0;
        return t->n_var++;
}

/* k ranks no longer refer to var[v] */
static void var_unref_n(tensor_t *t, uint32_t v, uint32_t k) {
        if (v == 0 || (t->var_refs[v] -= k) > 0)
                return;
        free(t->var[v].splits);
        free(t->var[v].set_ranks);
        t->var[v] = (params_t){ 0 };
        t->var_free[t->n_var_free++] = v;
}

static void var_unref(tensor_t *t, uint32_t v) {
        var_unref_n(t, v, 1);
}

/* rank's parameters become var[v] (ns: the state of its node c, or NULL
 * without nodes); -ENOMEM without memory for pref[] */
static int rank_set_var(hvd_negotiator_t *n, tensor_t *t, uint32_t rank, uint32_t v, node_state_t *ns, uint32_t c) {
        if (!t->pref && !(t->pref = calloc(n->size, sizeof *t->pref)))
                return -ENOMEM;
        if (ns && ns->var) { /* its node's ranks each keep the set they shared */
                for (uint32_t k = n->node_first[c]; k < n->node_first[c + 1]; k++)
                        t->pref[n->node_list[k]] = ns->var;
                ns->var = 0;
                t->n_var_nodes--;
        }
        uint32_t old = t->pref[rank];
        t->var_refs[v]++;
        t->pref[rank] = v;
        var_unref(t, old);
        return 0;
}

/* Every rank of node c (ns: its state) has the parameters var[v] now. */
static void node_set_var(hvd_negotiator_t *n, tensor_t *t, uint32_t c, node_state_t *ns, uint32_t v) {
        uint32_t size_c = n->node_size[c];
        if (ns->var == v)
                return;
        t->var_refs[v] += size_c; /* first: a rank may have had var[v] itself */
        if (ns->var)
                var_unref_n(t, ns->var, size_c);
        else {
                t->n_var_nodes++;
                for (uint32_t k = n->node_first[c]; t->pref && k < n->node_first[c + 1]; k++) {
                        uint32_t r = n->node_list[k];
                        var_unref(t, t->pref[r]);
                        t->pref[r] = 0;
                }
        }
        ns->var = v;
        ns->valid = size_c;
}

/* Whether the len ranks are every rank of node c, each once (in any order). */
static bool node_run(hvd_negotiator_t *n, const uint32_t *ranks, uint32_t len, uint32_t c) {
        /* most often in the node's own order */
        if (memcmp(ranks, n->node_list + n->node_first[c], len * sizeof *ranks) == 0)
                return true;
        uint32_t i = 0;
        for (; i < len; i++) {
                uint32_t r = ranks[i];
                if (r >= n->size || n->node_of[r] != c || n->scratch[r])
                        break;
                n->scratch[r] = 1;
        }
        bool all = i == len;
        while (i-- > 0)
                n->scratch[ranks[i]] = 0;
        return all;
}

/* One request by name, sent alike by every rank in ranks: looked up,
 * checked and parsed once, then recorded for each rank in order. */
static int submit_request(hvd_negotiator_t *n, const uint32_t *ranks, size_t n_ranks, const Hvd__Request *q,
                          uint64_t now, char *err, size_t err_len) {
        int ret = 0;
        if (q->kind == HVD__KIND__KIND_JOIN) {
                for (size_t k = 0; k < n_ranks; k++)
                        rank_join(n, ranks[k]);
                return 0;
        }
        /* one row per name and process set: disjoint sets may use a name
         * at the same time */
        char key[HVD_MAX_NAME_BYTES + 16];
        size_t key_len = tensor_key(key, q->name, q->process_set);
        tensor_t *t = hvd_strmap_get(n->by_name, key, key_len);
        if (!t && !(t = tensor_add(n, q->name, key, key_len))) {
                snprintf(err, err_len, "too many tensors waiting at once (%u cached and %u more pending): '%s' refused",
                         n->max_tensors, n->max_tensors, q->name);
                return -ENOSPC;
        }
        bool set_ok = q->process_set == 0 || q->n_set_ranks > 0;
        for (size_t k = 0; k < q->n_set_ranks && set_ok; k++)
                set_ok = q->set_ranks[k] < n->size && (k == 0 || q->set_ranks[k] > q->set_ranks[k - 1]);
        /* the parameter set of these ranks: the one the last request by
         * name made when it is alike (every rank's first step names the
         * same tensors alike), else a new one */
        uint32_t v = 0;
        if (set_ok && t->last_var && t->var_refs[t->last_var] && params_match(&t->var[t->last_var], q))
                v = t->last_var;
        /* a shared request lists a node's ranks together: its node state is
         * looked up once per run of them, not three times per rank */
        node_state_t *ns = NULL;
        uint32_t ns_node = UINT32_MAX;
        for (size_t k = 0; k < n_ranks; k++) {
                uint32_t rank = ranks[k];
                int r;
                if (n->nst && n->node_of[rank] != ns_node)
                        ns = node_cur(n, t, ns_node = n->node_of[rank]);
                if (t->ready[rank] || (ns && ns->ready)) { /* is_ready() */
                        snprintf(err, err_len, "tensor '%s' submitted twice by rank %u before it completed", t->name,
                                 rank);
                        ret = HVD_EDUPLICATE;
                        continue;
                }
                if (!set_ok) {
                        snprintf(err, err_len, "tensor '%s': rank %u sent an invalid member list for process set %u",
                                 q->name, rank, q->process_set);
                        ret = HVD_EPROTO;
                        continue;
                }
                if (!v) {
                        if (!(v = var_new(t)) || (r = params_set(&t->var[v], q)) < 0) {
                                if (v)
                                        t->var_free[t->n_var_free++] = v;
                                v = 0;
                                snprintf(err, err_len, "out of memory");
                                ret = -ENOMEM;
                                continue;
                        }
                        t->last_var = v;
                }
                t->checked = false;
                /* every rank of the node, in its order, none marked yet: the
                 * node is ready as one, as for its cached ids (submit_node) */
                uint32_t size_c = ns ? n->node_size[ns_node] : 0;
                if (ns && size_c > 1 && !ns->marks && n_ranks - k >= size_c &&
                    node_run(n, ranks + k, size_c, ns_node)) {
                        node_set_var(n, t, ns_node, ns, v);
                        if (t->n_ready == 0 || now < t->first_ready_usec)
                                t->first_ready_usec = now;
                        if (t->n_ready == 0) {
                                n->n_pending++;
                                t->some_ready = rank;
                                t->some_in_set = t->var[v].process_set != 0;
                        }
                        ns->ready = true;
                        t->n_ready += size_c;
                        if (n->timeline && (t->ready_usec || (t->ready_usec = calloc(n->size, sizeof *t->ready_usec))))
                                for (uint32_t i = 0; i < size_c; i++)
                                        t->ready_usec[ranks[k + i]] = now;
                        k += size_c - 1;
                        continue;
                }
                bool was_valid = (ns && ns->var) || (t->pref && t->pref[rank]);
                if (rank_set_var(n, t, rank, v, ns, ns_node) < 0) {
                        snprintf(err, err_len, "out of memory");
                        ret = -ENOMEM;
                        continue;
                }
                if (!was_valid && ns)
                        ns->valid++;
                mark_one(n, rank, t, ns, now); /* its checks made above */
        }
        maybe_queue(n, t);
        return ret;
}

int hvd_negotiator_submit_ranks(hvd_negotiator_t *n, const uint32_t *ranks, size_t n_ranks, const Hvd__Ready *ready,
                                char *err, size_t err_len) {
        int ret = 0;
        uint64_t now = hvd_now_usec();
        for (size_t k = 0; k < n_ranks; k++)
                if (ranks[k] >= n->size) {
                        snprintf(err, err_len, "rank %u out of range", ranks[k]);
                        return HVD_EPROTO;
                }
        n->stats.requests += (ready->n_requests + ready->n_cached) * n_ranks;
        for (size_t i = 0; i < ready->n_requests; i++) {
                int r = submit_request(n, ranks, n_ranks, ready->requests[i], now, err, err_len);
                if (r < 0)
                        ret = r;
        }
        for (size_t k = 0; k < n_ranks; k++) {
                uint32_t rank = ranks[k];
                for (size_t i = 0; i < ready->n_cached; i++) {
                        uint32_t id = ready->cached[i];
                        tensor_t *t = id < n->n_tensors ? n->tensors[id] : NULL;
                        if (!t || t->transient || !rank_var(n, t, rank)) {
                                snprintf(err, err_len, "unknown cached tensor id %u from rank %u", id, rank);
                                ret = HVD_EPROTO;
                                continue;
                        }
                        n->stats.cache_hits++;
                        /* it may have waited on the fast path's board before */
                        uint64_t waited =
                                ready->n_cached_waited_usec == ready->n_cached ? ready->cached_waited_usec[i] : 0;
                        int r = mark_ready(n, rank, t, waited < now ? now - waited : now, true, err, err_len);
                        if (r < 0)
                                ret = r;
                }
        }
        return ret;
}

int hvd_negotiator_submit(hvd_negotiator_t *n, uint32_t rank, const Hvd__Ready *ready, char *err, size_t err_len) {
        return hvd_negotiator_submit_ranks(n, &rank, 1, ready, err, err_len);
}

int hvd_negotiator_set_nodes(hvd_negotiator_t *n, uint32_t n_nodes, const uint32_t *node_of) {
        if (n->n_tensors || n_nodes == 0)
                return -EBUSY;
        uint32_t *of = malloc(n->size * sizeof *of), *sz = calloc(n_nodes, sizeof *sz);
        uint32_t *first = calloc(n_nodes + 1, sizeof *first), *list = malloc(n->size * sizeof *list);
        if (!of || !sz || !first || !list) {
                free(of);
                free(sz);
                free(first);
                free(list);
                return -ENOMEM;
        }
        for (uint32_t r = 0; r < n->size; r++) {
                if (node_of[r] >= n_nodes) {
                        free(of);
                        free(sz);
                        free(first);
                        free(list);
                        return -EINVAL;
                }
                of[r] = node_of[r];
                sz[of[r]]++;
        }
        for (uint32_t c = 0; c < n_nodes; c++)
                first[c + 1] = first[c] + sz[c];
        uint32_t *pos = calloc(n_nodes, sizeof *pos);
        uint8_t *scratch = calloc(n->size, 1);
        if (!pos || !scratch) {
                free(pos);
                free(scratch);
                free(of);
                free(sz);
                free(first);
                free(list);
                return -ENOMEM;
        }
        for (uint32_t r = 0; r < n->size; r++)
                list[first[of[r]] + pos[of[r]]++] = r;
        free(pos);
        n->n_nodes = n_nodes;
        n->node_of = of;
        n->node_size = sz;
        n->node_first = first;
        n->node_list = list;
        n->scratch = scratch;
        return 0;
}

int hvd_negotiator_submit_node(hvd_negotiator_t *n, uint32_t node, const uint32_t *ids, size_t n_ids,
                               const uint64_t *waited_usec, char *err, size_t err_len) {
        int ret = 0;
        uint64_t now = hvd_now_usec();
        if (node >= n->n_nodes) {
                snprintf(err, err_len, "node %u out of range", node);
                return HVD_EPROTO;
        }
        uint32_t ns = n->node_size[node];
        if (ns == 0) {
                snprintf(err, err_len, "node %u has no ranks", node);
                return HVD_EPROTO;
        }
        for (size_t i = 0; i < n_ids; i++) {
                uint32_t id = ids[i];
                /* a message's ids are tensors and node states the caches
                 * lost since the last step: ask for those a few ids ahead */
                if (i + 16 < n_ids && ids[i + 16] < n->n_tensors) {
                        __builtin_prefetch(n->tensors[ids[i + 16]]);
                        __builtin_prefetch(&n->nst[(size_t) node * n->cap_tensors + ids[i + 16]]);
                }
                tensor_t *t = id < n->n_tensors ? n->tensors[id] : NULL;
                node_state_t *st = t ? node_cur(n, t, node) : NULL;
                if (!t || t->transient || st->valid != ns) {
                        snprintf(err, err_len, "unknown cached tensor id %u from the ranks of node %u", id, node);
                        ret = HVD_EPROTO;
                        continue;
                }
                if (st->ready || st->marks) {
                        snprintf(err, err_len, "tensor '%s' submitted twice by a rank of node %u before it completed",
                                 t->name, node);
                        ret = HVD_EDUPLICATE;
                        continue;
                }
                n->stats.requests += ns;
                n->stats.cache_hits += ns;
                uint64_t waited = waited_usec ? waited_usec[i] : 0;
                uint64_t when = waited < now ? now - waited : now;
                if (t->n_ready == 0 || when < t->first_ready_usec)
                        t->first_ready_usec = when;
                if (t->n_ready == 0) {
                        n->n_pending++;
                        t->some_ready = n->node_list[n->node_first[node]];
                        /* checked: every rank's parameters alike and unchanged since the last round */
                        if (!t->checked)
                                t->some_in_set = PR(n, t, t->some_ready)->process_set != 0;
                }
                st->ready = true;
                t->n_ready += ns;
                if (n->timeline && (t->ready_usec || (t->ready_usec = calloc(n->size, sizeof *t->ready_usec))))
                        for (uint32_t k = n->node_first[node]; k < n->node_first[node + 1]; k++)
                                t->ready_usec[n->node_list[k]] = when;
                maybe_queue(n, t);
        }
        return ret;
}

bool hvd_negotiator_has_work(const hvd_negotiator_t *n) {
        return n->n_ready_list > 0 || n->join_done;
}

/* ---- consistency ---- */

static void fmt_shape(char *buf, size_t len, const params_t *p) {
        size_t o = 0;
        o += (size_t) snprintf(buf + o, len - o, "[");
        for (unsigned d = 0; d < p->ndim && o < len; d++)
                o += (size_t) snprintf(buf + o, len - o, "%s%" PRId64, d ? ", " : "", p->shape[d]);
        if (o < len)
                snprintf(buf + o, len - o, "]");
}

static uint64_t numel(const params_t *p, unsigned from_dim) {
        uint64_t e = 1;
        for (unsigned d = from_dim; d < p->ndim; d++)
                e *= (uint64_t) p->shape[d];
        return e;
}

/* "rank 2 has" or "ranks [0, 2] have" (a long list ends in "..."): the
 * members of a's set (the job without one) that joined; with ready_too
 * false only those not ready for t. Returns how many. */
static uint32_t fmt_joined(char *buf, size_t len, const hvd_negotiator_t *n, const tensor_t *t, const params_t *a,
                           bool ready_too) {
        uint32_t ss = a->process_set ? a->n_set : n->size, cnt = 0;
#define JOINED(r) (n->joined[r] && (ready_too || !is_ready(n, t, r)))
        for (uint32_t i = 0; i < ss; i++)
                cnt += JOINED(a->process_set ? a->set_ranks[i] : i);
        size_t o = (size_t) snprintf(buf, len, cnt == 1 ? "rank " : "ranks [");
        bool first = true;
        for (uint32_t i = 0; i < ss && cnt; i++) {
                uint32_t r = a->process_set ? a->set_ranks[i] : i;
                if (!JOINED(r))
                        continue;
                if (o + 24 >= len) {
                        o += (size_t) snprintf(buf + o, len - o, ", ...");
                        break;
                }
                o += (size_t) snprintf(buf + o, len - o, "%s%u", first ? "" : ", ", r);
                first = false;
        }
#undef JOINED
        snprintf(buf + o, len - o, cnt == 1 ? " has" : "] have");
        return cnt;
}

/* Join, as Horovod has it: while ranks of the job have joined, only
 * allreduce runs on the others (the joined ranks contribute zeros);
 * anything else fails at once, so that its ranks can join in turn instead
 * of waiting for ranks that will not come. A process set's collective
 * cannot run without a member that joined (it is not one of the job's
 * allreduces a joined rank serves). */
static int check_join(const hvd_negotiator_t *n, const tensor_t *t, const params_t *a, char *msg, size_t len) {
        if (!n->n_joined || (!a->process_set && a->kind == HVD__KIND__KIND_ALLREDUCE))
                return 0;
        char who[300];
        if (!fmt_joined(who, sizeof who, n, t, a, !a->process_set))
                return 0;
#define ONLY_ALLREDUCE "only allreduce runs until every rank has joined"
        const char *k = kind_name(a->kind);
        if (a->process_set)
                snprintf(msg, len,
                         "%s '%s' of process set %u is not supported while its member %s joined: a joined rank "
                         "takes part in allreduces of the global process set only",
                         k, t->name, a->process_set, who);
        else if (a->kind == HVD__KIND__KIND_BARRIER)
                snprintf(msg, len, "barrier is not supported while %s joined: " ONLY_ALLREDUCE, who);
        else
                snprintf(msg, len, "%s '%s' is not supported while %s joined: " ONLY_ALLREDUCE "%s", k, t->name, who,
                         a->kind == HVD__KIND__KIND_ALLGATHER
                                 ? " (specify sparse_to_dense=True if using DistributedOptimizer)"
                                 : "");
#undef ONLY_ALLREDUCE
        return HVD_EJOINED;
}

/* Returns 0 if every ready rank agrees with the reference rank; otherwise
 * writes "allreduce 'x': rank 3 sent shape [..], rank 0 sent [..]". */
static int check_consistent(const hvd_negotiator_t *n, const tensor_t *t, uint32_t ref, char *msg, size_t len) {
        const params_t *a = PR(n, t, ref);
        const char *k = kind_name(a->kind);
        uint32_t set_size = a->process_set ? a->n_set : n->size;
        if (a->process_set) {
                for (uint32_t r = 0; r < n->size; r++) {
                        bool member = false;
                        for (uint32_t i = 0; i < a->n_set; i++)
                                member |= a->set_ranks[i] == r;
                        if (!member && is_ready(n, t, r)) {
                                snprintf(msg, len, "%s '%s': rank %u is not a member of process set %u", k, t->name, r,
                                         a->process_set);
                                return -EINVAL;
                        }
                }
        }
        uint32_t va = rank_var(n, t, ref), ok = va; /* parameter sets known equal to a's */
        bool all = t->n_ready == n->size;
        /* every node shared a's parameters: nothing to compare rank by rank */
        bool alike = n->nst && t->n_var_nodes == n->n_nodes;
        for (uint32_t c = 0; alike && c < n->n_nodes; c++)
                alike = NODE(n, t, c)->var == va;
        for (uint32_t r = 0; !alike && r < n->size; r++) {
                if (r == ref || (!all && !is_ready(n, t, r)))
                        continue;
                /* ranks whose requests a node forwarded once share a set */
                uint32_t vb = rank_var(n, t, r);
                if (vb == va || vb == ok)
                        continue;
                const params_t *b = &t->var[vb];
                char sa[160], sb[160];
                if (b->kind != a->kind) {
                        snprintf(msg, len, "tensor '%s': rank %u sent a %s, rank %u sent a %s", t->name, r,
                                 kind_name(b->kind), ref, k);
                        return HVD_EMISMATCH;
                }
                if (b->dtype != a->dtype) {
                        snprintf(msg, len, "%s '%s': rank %u sent dtype %s, rank %u sent %s", k, t->name, r,
                                 hvd_dtype_name(b->dtype), ref, hvd_dtype_name(a->dtype));
                        return HVD_EMISMATCH;
                }
                if (b->process_set == a->process_set && a->process_set &&
                    (b->n_set != a->n_set || memcmp(b->set_ranks, a->set_ranks, a->n_set * sizeof(uint32_t)) != 0)) {
                        snprintf(msg, len, "%s '%s': rank %u and rank %u disagree on the members of process set %u", k,
                                 t->name, r, ref, a->process_set);
                        return HVD_EMISMATCH;
                }
                if (b->process_set != a->process_set || b->device != a->device) {
                        snprintf(msg, len,
                                 "%s '%s': rank %u and rank %u use different devices (CPU and GPU) or process sets", k,
                                 t->name, r, ref);
                        return HVD_EMISMATCH;
                }
                if ((a->kind == HVD__KIND__KIND_ALLREDUCE || a->kind == HVD__KIND__KIND_REDUCESCATTER) &&
                    (b->reduce_op != a->reduce_op || b->prescale != a->prescale || b->postscale != a->postscale)) {
                        snprintf(msg, len,
                                 "%s '%s': rank %u sent reduce op %s (prescale %g, postscale %g), rank %u sent %s "
                                 "(prescale %g, postscale %g)",
                                 k, t->name, r, op_name(b->reduce_op), b->prescale, b->postscale, ref,
                                 op_name(a->reduce_op), a->prescale, a->postscale);
                        return HVD_EMISMATCH;
                }
                if (a->kind == HVD__KIND__KIND_BROADCAST && b->root != a->root) {
                        snprintf(msg, len, "broadcast '%s': rank %u sent root %d, rank %u sent root %d", t->name, r,
                                 b->root, ref, a->root);
                        return HVD_EMISMATCH;
                }
                if (b->group_id != a->group_id || b->group_size != a->group_size) {
                        snprintf(msg, len, "%s '%s': rank %u and rank %u submitted it in different groups", k, t->name,
                                 r, ref);
                        return HVD_EMISMATCH;
                }
                bool same_rest = a->ndim == b->ndim && (a->ndim == 0 || memcmp(a->shape + 1, b->shape + 1,
                                                                               (a->ndim - 1) * sizeof(int64_t)) == 0);
                bool same = same_rest && (a->ndim == 0 || a->shape[0] == b->shape[0]);
                bool variable_first = a->kind == HVD__KIND__KIND_ALLGATHER || a->kind == HVD__KIND__KIND_ALLTOALL;
                if (variable_first ? !same_rest : !same) {
                        fmt_shape(sa, sizeof sa, a);
                        fmt_shape(sb, sizeof sb, b);
                        snprintf(msg, len, "%s '%s': rank %u sent shape %s, rank %u sent %s%s", k, t->name, r, sb, ref,
                                 sa, variable_first ? " (all but the first dimension must agree)" : "");
                        return HVD_EMISMATCH;
                }
                ok = vb;
        }
        int c = check_join(n, t, a, msg, len);
        if (c < 0)
                return c;
        if (a->kind == HVD__KIND__KIND_BROADCAST && (a->root < 0 || (uint32_t) a->root >= set_size)) {
                snprintf(msg, len, "broadcast '%s': root rank %d out of range (size %u)", t->name, a->root, set_size);
                return -EINVAL;
        }
        if ((a->kind == HVD__KIND__KIND_ALLGATHER || a->kind == HVD__KIND__KIND_ALLTOALL ||
             a->kind == HVD__KIND__KIND_REDUCESCATTER) &&
            a->ndim == 0) {
                snprintf(msg, len, "%s '%s': a scalar has no first dimension to split", k, t->name);
                return -EINVAL;
        }
        if (a->kind == HVD__KIND__KIND_ALLTOALL) {
                for (uint32_t i = 0; i < set_size; i++) {
                        uint32_t r = a->process_set ? a->set_ranks[i] : i;
                        const params_t *b = PR(n, t, r); /* every member is ready: check_join */
                        if (b->n_splits == 0) {
                                if (b->shape[0] % set_size) {
                                        snprintf(msg, len,
                                                 "alltoall '%s': rank %u: first dimension %" PRId64
                                                 " does not divide by %u ranks; pass splits",
                                                 t->name, r, b->shape[0], set_size);
                                        return -EINVAL;
                                }
                                continue;
                        }
                        int64_t sum = 0;
                        for (uint32_t s = 0; s < b->n_splits; s++)
                                sum += b->splits[s];
                        if (b->n_splits != set_size || sum != b->shape[0]) {
                                snprintf(msg, len,
                                         "alltoall '%s': rank %u sent %u splits summing to %" PRId64
                                         "; expected %u splits summing to the first dimension %" PRId64,
                                         t->name, r, b->n_splits, sum, set_size, b->shape[0]);
                                return -EINVAL;
                        }
                }
        }
        return 0;
}

/* ---- schedule building ---- */

static void *zalloc(size_t n) {
        return calloc(1, n);
}

static Hvd__Entry *entry_new(const hvd_negotiator_t *n, tensor_t *t, uint32_t ref) {
        const params_t *a = PR(n, t, ref);
        Hvd__Entry *e = zalloc(sizeof *e);
        if (!e)
                return NULL;
        hvd__entry__init(e);
        e->id = t->transient ? HVD_NEGOTIATOR_NO_ID : t->id;
        e->name = (char *) protobuf_c_empty_string;
        if (!t->announced && !(e->name = strdup(t->name)))
                goto fail;
        e->count = numel(a, 0);
        e->row_elems = numel(a, 1);
        e->n_shape = a->ndim;
        if (a->ndim) {
                if (!(e->shape = malloc(a->ndim * sizeof(int64_t))))
                        goto fail;
                memcpy(e->shape, a->shape, a->ndim * sizeof(int64_t));
        }
        uint32_t ss = a->process_set ? a->n_set : n->size;
#define MEMBER(i) (a->process_set ? a->set_ranks[i] : (i))
        if (a->kind == HVD__KIND__KIND_ALLGATHER) {
                e->n_rank_rows = ss;
                if (!(e->rank_rows = calloc(ss, sizeof(int64_t))))
                        goto fail;
                for (uint32_t i = 0; i < ss; i++) {
                        uint32_t r = MEMBER(i);
                        e->rank_rows[i] = is_ready(n, t, r) ? PR(n, t, r)->shape[0] : 0;
                }
        } else if (a->kind == HVD__KIND__KIND_ALLTOALL) {
                e->n_splits = (size_t) ss * ss;
                if (!(e->splits = calloc(e->n_splits, sizeof(int64_t))))
                        goto fail;
                for (uint32_t i = 0; i < ss; i++) {
                        const params_t *b = PR(n, t, MEMBER(i));
                        for (uint32_t d = 0; d < ss; d++)
                                e->splits[(size_t) i * ss + d] = b->n_splits ? b->splits[d] : b->shape[0] / ss;
                }
        }
#undef MEMBER
        if (n->timeline) {
                uint64_t now = hvd_now_usec();
                if (!(e->ready_ranks = calloc(t->n_ready, sizeof *e->ready_ranks)) ||
                    !(e->ready_age_usec = calloc(t->n_ready, sizeof *e->ready_age_usec)))
                        goto fail;
                for (uint32_t r = 0; r < n->size; r++)
                        if (e->n_ready_ranks < t->n_ready && is_ready(n, t, r)) {
                                /* ready before the timeline started: drawn when the first rank was */
                                uint64_t at =
                                        t->ready_usec && t->ready_usec[r] ? t->ready_usec[r] : t->first_ready_usec;
                                e->ready_ranks[e->n_ready_ranks] = r;
                                e->ready_age_usec[e->n_ready_age_usec++] = now > at ? now - at : 0;
                                e->n_ready_ranks++;
                        }
        }
        return e;
fail:
        protobuf_c_message_free_unpacked(&e->base, NULL);
        return NULL;
}

static int add_error(Hvd__Schedule *s, const tensor_t *t, int code, const char *msg) {
        Hvd__TensorError **ne = realloc(s->errors, (s->n_errors + 1) * sizeof *ne);
        if (!ne)
                return -ENOMEM;
        s->errors = ne;
        Hvd__TensorError *e = zalloc(sizeof *e);
        if (!e)
                return -ENOMEM;
        hvd__tensor_error__init(e);
        e->id = t->transient ? HVD_NEGOTIATOR_NO_ID : t->id;
        e->code = code;
        e->name = strdup(t->name);
        e->message = strdup(msg);
        s->errors[s->n_errors++] = e;
        if (!e->name || !e->message)
                return -ENOMEM;
        return 0;
}

static uint32_t first_ready_rank(const hvd_negotiator_t *n, const tensor_t *t) {
        if (t->n_ready == n->size)
                return 0;
        for (uint32_t r = 0; r < n->size; r++)
                if (is_ready(n, t, r))
                        return r;
        return 0;
}

static void tensor_reset(hvd_negotiator_t *n, tensor_t *t, uint32_t size) {
        if (t->n_marked)
                memset(t->ready, 0, size);
        t->n_marked = 0;
        if (++t->round == 0) { /* wrapped: clear them all, once in 2^32 rounds */
                t->round = 1;
                for (uint32_t c = 0; n->nst && c < n->n_nodes; c++) {
                        NODE(n, t, c)->round = 1;
                        NODE(n, t, c)->ready = false;
                        NODE(n, t, c)->marks = 0;
                }
        }
        if (t->ready_usec)
                memset(t->ready_usec, 0, size * sizeof *t->ready_usec);
        if (t->n_ready)
                n->n_pending--;
        t->n_ready = 0;
        t->queued = false;
        t->announced = true;
}

/* A completed member of a group waits in held[] until all members are. */
static bool group_complete(const hvd_negotiator_t *n, uint32_t group_id, uint32_t group_size, uint32_t rank_ref) {
        uint32_t c = 0;
        for (uint32_t i = 0; i < n->n_held; i++) {
                const tensor_t *t = n->tensors[n->held[i]];
                if (PR(n, t, first_ready_rank(n, t))->group_id == group_id)
                        c++;
        }
        return c >= group_size;
}

/* A schedule with the next sequence number and nothing in it yet. */
static Hvd__Schedule *schedule_new(hvd_negotiator_t *n) {
        Hvd__Schedule *s = zalloc(sizeof *s);
        if (!s)
                return NULL;
        hvd__schedule__init(s);
        s->seq = ++n->seq;
        s->join_done_last_rank = -1;
        return s;
}

int hvd_negotiator_take_schedule(hvd_negotiator_t *n, Hvd__Schedule **ret) {
        if (!hvd_negotiator_has_work(n))
                return 0;

        /* move group members aside until their group is complete */
        uint32_t n_go = 0;
        for (uint32_t i = 0; i < n->n_ready_list; i++) {
                tensor_t *t = n->tensors[n->ready_list[i]];
                const params_t *a = PR(n, t, first_ready_rank(n, t));
                if (a->group_size > 1)
                        n->held[n->n_held++] = t->id;
                else
                        n->ready_list[n_go++] = t->id;
        }
        n->n_ready_list = n_go;
        for (uint32_t i = 0; i < n->n_held;) {
                tensor_t *t = n->tensors[n->held[i]];
                const params_t *a = PR(n, t, first_ready_rank(n, t));
                if (!group_complete(n, a->group_id, a->group_size, 0)) {
                        i++;
                        continue;
                }
                /* release every member of this group, in held order */
                uint32_t gid = a->group_id, k = 0;
                for (uint32_t j = 0; j < n->n_held; j++) {
                        tensor_t *u = n->tensors[n->held[j]];
                        if (PR(n, u, first_ready_rank(n, u))->group_id == gid)
                                n->ready_list[n->n_ready_list++] = u->id;
                        else
                                n->held[k++] = n->held[j];
                }
                n->n_held = k;
                i = 0;
        }
        if (n->n_ready_list == 0 && !n->join_done)
                return 0;

        Hvd__Schedule *s = schedule_new(n);
        if (!s)
                return -ENOMEM;

        uint32_t cnt = n->n_ready_list;
        uint64_t now = hvd_now_usec();
        hvd_fusion_item_t *items = calloc(cnt ? cnt : 1, sizeof *items);
        uint32_t *ok_ids = calloc(cnt ? cnt : 1, sizeof *ok_ids);
        uint32_t *op_of = calloc(cnt ? cnt : 1, sizeof *op_of);
        hvd_fusion_op_t *ops = calloc(cnt ? cnt : 1, sizeof *ops);
        uint32_t n_ok = 0;
        int r = -ENOMEM;
        if (!items || !ok_ids || !op_of || !ops)
                goto out;

        for (uint32_t i = 0; i < cnt; i++) {
                tensor_t *t = n->tensors[n->ready_list[i]];
                uint32_t ref = first_ready_rank(n, t);
                char msg[1024];
                /* cached resubmissions of parameters that passed once need
                 * no second look (with every rank taking part: no joins) */
                int c = t->checked && !n->n_joined ? 0 : check_consistent(n, t, ref, msg, sizeof msg);
                if (c == 0 && !n->n_joined)
                        t->checked = true;
                n->stats.tensors_negotiated++;
                uint64_t wait = now > t->first_ready_usec ? now - t->first_ready_usec : 0;
                n->stats.negotiation_usec += wait;
                if (n->observe)
                        n->observe(n->observe_data, wait);
                if (c < 0) {
                        if (add_error(s, t, c, msg) < 0)
                                goto out;
                        continue;
                }
                const params_t *a = PR(n, t, ref);
                uint64_t bytes = numel(a, 0) * hvd_dtype_size(a->dtype);
                if (a->kind == HVD__KIND__KIND_ALLGATHER) {
                        uint64_t rows = 0;
                        for (uint32_t q = 0; q < n->size; q++)
                                rows += is_ready(n, t, q) ? (uint64_t) PR(n, t, q)->shape[0] : 0;
                        bytes = rows * numel(a, 1) * hvd_dtype_size(a->dtype);
                }
                items[n_ok] = (hvd_fusion_item_t){
                        .kind = a->kind,
                        .dtype = a->dtype,
                        .reduce_op = a->reduce_op,
                        .root = a->root,
                        .device = a->device,
                        .process_set = a->process_set,
                        .prescale = a->prescale,
                        .postscale = a->postscale,
                        .bytes = bytes,
                };
                ok_ids[n_ok++] = t->id;
        }

        size_t n_ops = hvd_fusion_plan(items, n_ok, n->fusion_threshold, op_of, ops);
        if (n_ops) {
                s->ops = calloc(n_ops, sizeof *s->ops);
                if (!s->ops)
                        goto out;
        }
        for (size_t k = 0; k < n_ops; k++) {
                Hvd__Op *op = zalloc(sizeof *op);
                if (!op)
                        goto out;
                hvd__op__init(op);
                s->ops[s->n_ops++] = op;
                const hvd_fusion_item_t *f = &items[ops[k].first];
                op->kind = f->kind;
                op->dtype = f->dtype;
                op->reduce_op = f->reduce_op;
                op->prescale = f->prescale;
                op->postscale = f->postscale;
                op->root = f->root;
                op->device = f->device;
                op->process_set = f->process_set;
                if (f->process_set) {
                        const tensor_t *ft = n->tensors[ok_ids[ops[k].first]];
                        const params_t *a = PR(n, ft, first_ready_rank(n, ft));
                        if (!(op->set_ranks = malloc(a->n_set * sizeof *op->set_ranks)))
                                goto out;
                        memcpy(op->set_ranks, a->set_ranks, a->n_set * sizeof *op->set_ranks);
                        op->n_set_ranks = a->n_set;
                }
                if (!(op->entries = calloc(ops[k].n_items, sizeof *op->entries)))
                        goto out;
                if (n->n_joined && !f->process_set) {
                        if (!(op->joined = calloc(n->n_joined, sizeof *op->joined)))
                                goto out;
                        for (uint32_t q = 0; q < n->size; q++)
                                if (n->joined[q])
                                        op->joined[op->n_joined++] = q;
                }
                n->stats.fused_ops++;
                n->stats.bytes_scheduled += ops[k].bytes;
                if (ops[k].n_items > 1)
                        n->stats.tensors_in_fused_ops += ops[k].n_items;
        }
        for (uint32_t i = 0; i < n_ok; i++) {
                tensor_t *t = n->tensors[ok_ids[i]];
                Hvd__Op *op = s->ops[op_of[i]];
                Hvd__Entry *e = entry_new(n, t, first_ready_rank(n, t));
                if (!e)
                        goto out;
                op->entries[op->n_entries++] = e;
        }
        if (n->join_done) {
                s->join_done_last_rank = n->last_joined;
                n->join_done = false;
                memset(n->joined, 0, n->size);
                n->n_joined = 0;
        }
        for (uint32_t i = 0; i < cnt; i++) {
                tensor_t *t = n->tensors[n->ready_list[i]];
                if (t->transient) {
                        n->n_pending -= t->n_ready > 0;
                        hvd_strmap_remove(n->by_name, t->key, t->key_len);
                        n->tensors[t->id] = NULL;
                        n->free_ids[n->n_free++] = t->id;
                        tensor_free(t, n->size);
                } else
                        tensor_reset(n, t, n->size);
        }
        n->n_ready_list = 0;
        n->stats.schedules++;
        r = 1;
        *ret = TAKE_PTR(s);
out:
        free(items);
        free(ok_ids);
        free(op_of);
        free(ops);
        hvd_negotiator_schedule_free(&s);
        return r;
}

int hvd_negotiator_take_empty_schedule(hvd_negotiator_t *n, Hvd__Schedule **ret) {
        Hvd__Schedule *s = schedule_new(n);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

void hvd_negotiator_schedule_free(Hvd__Schedule **s) {
        if (!s || !*s)
                return;
        protobuf_c_message_free_unpacked(&(*s)->base, NULL);
        *s = NULL;
}

static size_t fmt_ranks(char *buf, size_t len, const hvd_negotiator_t *n, const tensor_t *t, bool want) {
        size_t o = 0;
        bool first = true;
        o += (size_t) snprintf(buf, len, "[");
        for (uint32_t r = 0; r < n->size && o < len; r++) {
                bool is = is_ready(n, t, r) || (!want && n->joined[r]);
                if (is != want)
                        continue;
                o += (size_t) snprintf(buf + o, len - o, "%s%u", first ? "" : ", ", r);
                first = false;
        }
        if (o < len)
                o += (size_t) snprintf(buf + o, len - o, "]");
        return o;
}

size_t hvd_negotiator_describe_pending(const hvd_negotiator_t *n, uint64_t now_usec, uint64_t min_age_usec, char *buf,
                                       size_t buf_len) {
        size_t count = 0, o = 0;
        if (buf_len)
                buf[0] = 0;
        for (uint32_t i = 0; i < n->n_tensors; i++) {
                const tensor_t *t = n->tensors[i];
                /* a tensor marked ready after now_usec was read is young, not old */
                if (!t || t->n_ready == 0 || t->queued || now_usec < t->first_ready_usec ||
                    now_usec - t->first_ready_usec < min_age_usec)
                        continue;
                count++;
                if (o + 64 >= buf_len)
                        continue;
                char have[256], miss[256];
                fmt_ranks(have, sizeof have, n, t, true);
                fmt_ranks(miss, sizeof miss, n, t, false);
                o += (size_t) snprintf(buf + o, buf_len - o, "%s'%s' ready on ranks %s, missing ranks %s",
                                       o ? "; " : "", t->name, have, miss);
                if (o >= buf_len)
                        o = buf_len - 1;
        }
        return count;
}

bool hvd_negotiator_rank_has_pending(const hvd_negotiator_t *n, uint32_t rank) {
        for (uint32_t i = 0; i < n->n_tensors; i++)
                if (n->tensors[i] && is_ready(n, n->tensors[i], rank))
                        return true;
        return false;
}

uint32_t hvd_negotiator_rank_pending(const hvd_negotiator_t *n, uint32_t rank) {
        uint32_t c = 0;
        for (uint32_t i = 0; n && rank < n->size && i < n->n_tensors; i++)
                if (n->tensors[i] && !n->tensors[i]->queued && is_ready(n, n->tensors[i], rank))
                        c++;
        return c;
}

void hvd_negotiator_set_fusion_threshold(hvd_negotiator_t *n, uint64_t fusion_threshold_bytes) {
        n->fusion_threshold = fusion_threshold_bytes;
}

void hvd_negotiator_set_observer(hvd_negotiator_t *n, void (*fn)(void *userdata, uint64_t wait_usec), void *userdata) {
        n->observe = fn;
        n->observe_data = userdata;
}

bool hvd_negotiator_any_pending(const hvd_negotiator_t *n) {
        return n->n_pending > 0 || n->n_joined > 0;
}

void hvd_negotiator_set_timeline(hvd_negotiator_t *n, bool on) {
        if (n)
                n->timeline = on;
}

void hvd_negotiator_get_stats(const hvd_negotiator_t *n, hvd_negotiator_stats_t *st) {
        if (!n) {
                *st = (hvd_negotiator_stats_t){ 0 };
                return;
        }
        *st = n->stats;
        st->joined = n->n_joined;
        st->n_tensors = n->n_tensors - n->n_free;
}
