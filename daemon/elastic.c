/* elastic.c — membership of elastic jobs. The root daemon of an elastic job
 * decides each numbered generation: who is in it, their dense ranks
 * (survivors in their order, new ranks after, grouped by host with the
 * root's host first) and whether the state is synced, one decision for all.
 * A generation is an ordinary job "ID.gN"; its abort starts the next one.
 * A member daemon only forwards its workers' enrolments and the answers. */
#include "config.h"

#include "internal.h"

#define ELASTIC_LINGER_USEC (30 * USEC_PER_SEC) /* a finished job's set is kept this long */
#define ELASTIC_MAX_FWD     4096                /* enrolments a member daemon forwards at once */
#define ELASTIC_MAX_WAITING 65536
#define ELASTIC_MAX_HOSTS   4096 /* hosts of one generation */
/* joiners arriving together are admitted together: the running generation
 * is told once none has enrolled for this long, or at once when every
 * joiner's host has all the workers its launcher started there (Enroll's
 * host_starting) */
#define ELASTIC_JOIN_QUIET (500 * USEC_PER_MSEC)

/* A worker that asked for its place and has no answer yet. */
typedef struct enrollee {
        char host[HVD_WIRE_MAX_HOST + 1];
        uint32_t pid;
        bool local;  /* on the worker socket (else the peer socket, forwarded) */
        bool member; /* of the current generation */
        uint32_t rank;
        uint32_t starting; /* Enroll.host_starting */
        uint8_t id[256];
        size_t id_len;
        uint64_t request;
} enrollee_t;

typedef struct member {
        char host[HVD_WIRE_MAX_HOST + 1];
        uint32_t pid;
        bool lost, enrolled;
} member_t;

typedef struct ejob {
        char id[HVD_WIRE_MAX_JOB_ID + 1];
        uint8_t secret[HVD_WIRE_MAX_SECRET];
        size_t secret_len;
        uint32_t min_size, max_size, initial_size, reset_limit;
        uint64_t timeout_usec, settle_usec;
        uint64_t generation; /* the last formed, 0: none yet */
        char gen_job[HVD_WIRE_MAX_JOB_ID + 1];
        bool forming, failure, announced;
        uint64_t forming_since, gone_since, last_join_usec;
        member_t *members; /* the current generation, by rank */
        uint32_t n_members;
        enrollee_t *waiting;
        size_t n_waiting, cap_waiting;
        uint32_t resets;
        uint64_t last_reset_usec;
        char left[512], joined[512]; /* the last change, for the log and hvdctl */
        autotune_t *tune;            /* the last generation's tuner, for the next (autotune.c) */
        struct ejob *next;
} ejob_t;

typedef struct fwd {
        uint64_t request;
        uint8_t id[256];
        size_t id_len;
} fwd_t;

struct hvd_elastic {
        ejob_t *jobs;
        fwd_t fwd[ELASTIC_MAX_FWD];
        uint64_t next_request;
};

static hvd_elastic_t *state(hvd_daemon_t *d) {
        if (!d->elastic)
                d->elastic = calloc(1, sizeof *d->elastic);
        return d->elastic;
}

static void ejob_free(ejob_t *ej) {
        if (!ej)
                return;
        free(ej->members);
        free(ej->waiting);
        autotune_free(&ej->tune);
        free(ej);
}

void elastic_free(hvd_daemon_t *d) {
        if (!d->elastic)
                return;
        for (ejob_t *ej = d->elastic->jobs, *next; ej; ej = next) {
                next = ej->next;
                ejob_free(ej);
        }
        free(d->elastic);
        d->elastic = NULL;
}

static ejob_t *find(hvd_daemon_t *d, const char *id, bool by_generation) {
        for (ejob_t *ej = d->elastic ? d->elastic->jobs : NULL; ej; ej = ej->next)
                if (strcmp(by_generation ? ej->gen_job : ej->id, id) == 0)
                        return ej;
        return NULL;
}

static void send_to(hvd_daemon_t *d, const enrollee_t *en, Hvd__Envelope *env) {
        if (env->body_case == HVD__ENVELOPE__BODY_PLACEMENT)
                env->placement->request = en->request;
        io_send(d, en->local ? d->worker_sock : d->peer_sock, en->id, en->id_len, env);
}

static void refuse(hvd_daemon_t *d, const enrollee_t *en, int code, const char *reason) {
        Hvd__Placement p = HVD__PLACEMENT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        p.code = code;
        p.reason = (char *) reason;
        p.job_id = (char *) "";
        env.body_case = HVD__ENVELOPE__BODY_PLACEMENT;
        env.placement = &p;
        send_to(d, en, &env);
}

static void refuse_all(hvd_daemon_t *d, ejob_t *ej, int code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void refuse_all(hvd_daemon_t *d, ejob_t *ej, int code, const char *fmt, ...) {
        char reason[1024];
        va_list ap;
        va_start(ap, fmt);
        int o = snprintf(reason, sizeof reason, "elastic job %s: ", ej->id);
        vsnprintf(reason + o, sizeof reason - (size_t) o, fmt, ap);
        va_end(ap);
        hvd_log_full(LOG_ERR, 0, "%s", reason);
        for (size_t i = 0; i < ej->n_waiting; i++)
                refuse(d, &ej->waiting[i], code, reason);
        ej->n_waiting = 0;
        ej->forming = false;
}

/* Tells the running generation's ranks that workers wait to join. */
static void announce(hvd_daemon_t *d, ejob_t *ej) {
        job_t *j = hvd_strmap_get(d->jobs, ej->gen_job, strlen(ej->gen_job));
        if (ej->announced || ej->forming || !j || j->state != JOB_RUNNING)
                return;
        Hvd__HostsUpdated hu = HVD__HOSTS_UPDATED__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        hu.job_id = j->id;
        hu.waiting = (uint32_t) ej->n_waiting;
        env.body_case = HVD__ENVELOPE__BODY_HOSTS_UPDATED;
        env.hosts_updated = &hu;
        worker_send_all(d, j, &env, true);
        if (j->role == JOB_ROOT)
                io_send_nodes(d, j, &env, false);
        ej->announced = true;
        hvd_log_notice("elastic job %s: %zu worker%s wait to join; generation %" PRIu64 " is told", ej->id,
                       ej->n_waiting, ej->n_waiting == 1 ? "" : "s", ej->generation);
}

static void start_reset(ejob_t *ej, bool failure) {
        if (!ej->forming) {
                ej->forming = true;
                ej->forming_since = hvd_now_usec();
        }
        ej->failure |= failure;
}

static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
        size_t o = strlen(buf);
        if (o + 4 >= len)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf + o, len - o, fmt, ap);
        va_end(ap);
}

/* The next generation from the waiting workers: chosen[] are indexes into
 * ej->waiting, members first in their old rank order, then the others. */
static void form(hvd_daemon_t *d, ejob_t *ej, size_t *chosen, size_t n) {
        /* hosts: the root's (of a local worker) first, then as they come */
        const char *hosts[ELASTIC_MAX_HOSTS];
        uint32_t n_hosts = 0, *host_of = calloc(n, sizeof *host_of), *per_host = calloc(n + 1, sizeof *per_host);
        member_t *members = calloc(n, sizeof *members);
        if (!host_of || !per_host || !members) {
                free(host_of);
                free(per_host);
                free(members);
                refuse_all(d, ej, -ENOMEM, "out of memory");
                return;
        }
        for (size_t k = 0; k < n && !n_hosts; k++)
                if (ej->waiting[chosen[k]].local)
                        hosts[n_hosts++] = ej->waiting[chosen[k]].host;
        for (size_t k = 0; k < n; k++) {
                const char *h = ej->waiting[chosen[k]].host;
                uint32_t c = 0;
                while (c < n_hosts && strcmp(hosts[c], h) != 0)
                        c++;
                if (c == ELASTIC_MAX_HOSTS) {
                        free(host_of);
                        free(per_host);
                        free(members);
                        refuse_all(d, ej, -E2BIG, "more than %d hosts", ELASTIC_MAX_HOSTS);
                        return;
                }
                if (c == n_hosts)
                        hosts[n_hosts++] = h;
                host_of[k] = c;
                per_host[c]++;
        }
        uint64_t now = hvd_now_usec();
        bool first = ej->generation == 0;
        job_t *old = first ? NULL : hvd_strmap_get(d->jobs, ej->gen_job, strlen(ej->gen_job));
        if (old)
                elastic_keep_tune(d, old);
        ej->generation++;
        snprintf(ej->gen_job, sizeof ej->gen_job, "%.100s.g%" PRIu64, ej->id, ej->generation);
        uint32_t joined = 0;
        ej->joined[0] = 0;
        for (size_t k = 0; k < n; k++)
                if (!ej->waiting[chosen[k]].member) {
                        joined++;
                        append(ej->joined, sizeof ej->joined, "%s%s (pid %u)", joined > 1 ? ", " : "",
                               ej->waiting[chosen[k]].host, ej->waiting[chosen[k]].pid);
                }
        uint32_t left = 0;
        ej->left[0] = 0;
        for (uint32_t r = 0; r < ej->n_members; r++)
                if (!ej->members[r].enrolled)
                        append(ej->left, sizeof ej->left, "%srank %u on %s (%s)", left++ ? ", " : "", r,
                               ej->members[r].host, ej->members[r].lost ? "lost" : "did not come back");
        bool sync = first || joined > 0 || ej->failure;
        if (!first) {
                ej->resets++;
                ej->last_reset_usec = now - ej->forming_since;
                d->metrics.elastic_resets++;
                hvd_histogram_observe(&d->metrics.elastic_reset, ej->last_reset_usec);
        }
        /* ranks host by host, in the order chosen within each host */
        uint32_t *base = calloc(n_hosts + 1, sizeof *base), *next_local = calloc(n_hosts + 1, sizeof *next_local);
        if (!base || !next_local) {
                free(base);
                free(next_local);
                free(host_of);
                free(per_host);
                free(members);
                refuse_all(d, ej, -ENOMEM, "out of memory");
                return;
        }
        for (uint32_t c = 1; c < n_hosts; c++)
                base[c] = base[c - 1] + per_host[c - 1];
        Hvd__Placement p = HVD__PLACEMENT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        p.job_id = ej->gen_job;
        p.generation = ej->generation;
        p.size = (uint32_t) n;
        p.cross_size = n_hosts;
        p.n_hosts = n_hosts;
        p.hosts = (char **) hosts;
        p.sync = sync;
        p.joined = joined;
        p.left = left;
        p.joined_names = first ? (char *) "" : ej->joined;
        p.left_names = ej->left;
        p.reason = (char *) "";
        env.body_case = HVD__ENVELOPE__BODY_PLACEMENT;
        env.placement = &p;
        for (size_t k = 0; k < n; k++) {
                uint32_t c = host_of[k], lr = next_local[c]++;
                p.rank = base[c] + lr;
                p.local_rank = lr;
                p.local_size = per_host[c];
                p.cross_rank = c;
                const enrollee_t *en = &ej->waiting[chosen[k]];
                snprintf(members[p.rank].host, sizeof members[p.rank].host, "%s", en->host);
                members[p.rank].pid = en->pid;
                send_to(d, en, &env);
        }
        hvd_log_notice("elastic job %s: generation %" PRIu64 " (%s): %zu rank%s on %u host%s%s%s%s%s%s, sync %s",
                       ej->id, ej->generation, ej->gen_job, n, n == 1 ? "" : "s", n_hosts, n_hosts == 1 ? "" : "s",
                       left ? "; left: " : "", ej->left, joined && !first ? "; joined: " : "", first ? "" : ej->joined,
                       first ? "" : "", sync ? "yes" : "no");
        /* the chosen leave the waiting list; the others (beyond max) stay */
        size_t o = 0;
        for (size_t i = 0; i < ej->n_waiting; i++) {
                bool taken = false;
                for (size_t k = 0; k < n && !taken; k++)
                        taken = chosen[k] == i;
                if (!taken) {
                        ej->waiting[o] = ej->waiting[i];
                        ej->waiting[o++].member = false;
                }
        }
        ej->n_waiting = o;
        free(ej->members);
        ej->members = members;
        ej->n_members = (uint32_t) n;
        ej->forming = ej->failure = ej->announced = false;
        ej->gone_since = 0;
        free(base);
        free(next_local);
        free(host_of);
        free(per_host);
}

/* Forms the next generation when it is complete, or refuses everyone when
 * it cannot be; returns the next deadline to look again. */
static uint64_t try_form(hvd_daemon_t *d, ejob_t *ej, uint64_t now) {
        if (!ej->forming)
                return UINT64_MAX;
        uint64_t settle_at = ej->forming_since + ej->settle_usec, give_up = ej->forming_since + ej->timeout_usec;
        size_t n_joiners = 0, n_enrolled = 0;
        bool missing = false, local = false;
        for (size_t i = 0; i < ej->n_waiting; i++) {
                local |= ej->waiting[i].local;
                if (ej->waiting[i].member)
                        n_enrolled++;
                else
                        n_joiners++;
        }
        for (uint32_t r = 0; r < ej->n_members; r++)
                missing |= !ej->members[r].lost && !ej->members[r].enrolled;
        size_t n = HVD_MIN(n_enrolled + n_joiners, (size_t) ej->max_size);
        bool first = ej->generation == 0;
        bool complete = first ? n >= HVD_MIN(ej->initial_size, ej->max_size) && local : !missing;
        if (!complete && now < settle_at)
                return settle_at;
        /* the first generation waits for the root's host, up to the elastic
         * timeout: a host discovered at the start may enrol before it */
        if (first && !local && now < give_up)
                return give_up;
        if (!first && !ej->n_waiting) {
                /* nobody came back: the job ended (a member that still
                 * comes starts the reset again) */
                ej->forming = ej->failure = false;
                return UINT64_MAX;
        }
        if (ej->reset_limit && !first && ej->resets >= ej->reset_limit) {
                refuse_all(d, ej, HVD_EABORTED, "reached the reset limit (%u resets): the job stops", ej->reset_limit);
                return UINT64_MAX;
        }
        if (n < ej->min_size) {
                if (now < give_up)
                        return give_up;
                refuse_all(d, ej, HVD_ETIMEOUT, "%zu worker%s after %.0f s, fewer than the minimum of %u (--min-np)", n,
                           n == 1 ? "" : "s", (double) ej->timeout_usec / 1e6, ej->min_size);
                return UINT64_MAX;
        }
        size_t *chosen = calloc(n ? n : 1, sizeof *chosen), k = 0;
        if (!chosen) {
                refuse_all(d, ej, -ENOMEM, "out of memory");
                return UINT64_MAX;
        }
        for (uint32_t r = 0; r < ej->n_members && k < n; r++)
                for (size_t i = 0; i < ej->n_waiting; i++)
                        if (ej->waiting[i].member && ej->waiting[i].rank == r) {
                                chosen[k++] = i;
                                break;
                        }
        size_t first_joiner = k;
        /* joiners; the first generation takes the root host's first */
        for (int pass = first ? 0 : 1; pass < 2; pass++)
                for (size_t i = 0; i < ej->n_waiting && k < n; i++) {
                        const enrollee_t *en = &ej->waiting[i];
                        if (!en->member && (pass == 0 ? en->local : !(first && en->local)))
                                chosen[k++] = i;
                }
        /* the first generation keeps the launcher's order */
        for (size_t a = first_joiner + 1; first && a < k; a++)
                for (size_t b = a; b > first_joiner && ej->waiting[chosen[b - 1]].rank > ej->waiting[chosen[b]].rank;
                     b--) {
                        size_t t = chosen[b];
                        chosen[b] = chosen[b - 1];
                        chosen[b - 1] = t;
                }
        bool root_host = false;
        for (size_t i = 0; i < k; i++)
                root_host |= ej->waiting[chosen[i]].local;
        if (!root_host)
                refuse_all(d, ej, HVD_EABORTED,
                           "no worker is left on the root daemon's host: the job cannot go on (the root daemon "
                           "decides every generation, and its host holds rank 0)");
        else
                form(d, ej, chosen, k);
        free(chosen);
        return UINT64_MAX;
}

static ejob_t *ejob_new(hvd_daemon_t *d, const Hvd__Enroll *e) {
        hvd_elastic_t *es = state(d);
        size_t n = 0;
        for (const ejob_t *o = es ? es->jobs : NULL; o; o = o->next)
                n++;
        ejob_t *ej = es && n < d->cfg.max_jobs ? calloc(1, sizeof *ej) : NULL;
        if (!ej)
                return NULL;
        snprintf(ej->id, sizeof ej->id, "%s", e->job_id);
        memcpy_safe(ej->secret, e->secret.data, e->secret.len);
        ej->secret_len = e->secret.len;
        ej->min_size = e->min_size;
        ej->max_size = e->max_size;
        ej->initial_size = e->initial_size ? e->initial_size : e->min_size;
        ej->reset_limit = e->reset_limit;
        ej->timeout_usec = e->timeout_usec;
        ej->settle_usec = e->settle_usec;
        ej->forming = true;
        ej->forming_since = hvd_now_usec();
        ej->next = es->jobs;
        es->jobs = ej;
        hvd_log_info("elastic job %s: forming its first generation: %u to %u ranks, %u started", ej->id, ej->min_size,
                     ej->max_size, ej->initial_size);
        return ej;
}

/* Forwards a local worker's enrolment to the root daemon at e->root_peer. */
static void forward(hvd_daemon_t *d, const uint8_t *id, size_t id_len, Hvd__Enroll *e) {
        hvd_elastic_t *es = state(d);
        peer_t *p = es ? uplink_peer(d, e->root_peer) : NULL;
        if (!p) {
                io_error(d, d->worker_sock, id, id_len, HVD_ENODAEMON,
                         "elastic job %s: cannot reach the root daemon at %s", e->job_id, e->root_peer);
                return;
        }
        fwd_t *f = &es->fwd[es->next_request % ELASTIC_MAX_FWD];
        f->request = ++es->next_request;
        memcpy(f->id, id, id_len);
        f->id_len = id_len;
        e->request = f->request;
        char *rp = e->root_peer;
        e->root_peer = (char *) "";
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_ENROLL;
        env.enroll = e;
        io_send_peer(d, p, &env);
        e->root_peer = rp;
}

void elastic_enroll(hvd_daemon_t *d, const uint8_t *id, size_t id_len, Hvd__Enroll *e, bool from_peer) {
        if (!from_peer && e->root_peer[0]) {
                forward(d, id, id_len, e);
                return;
        }
        enrollee_t en = { .pid = e->pid,
                          .local = !from_peer,
                          .rank = e->rank,
                          .starting = e->host_starting,
                          .id_len = id_len,
                          .request = e->request };
        memcpy(en.id, id, id_len);
        snprintf(en.host, sizeof en.host, "%s", e->host);
        ejob_t *ej = find(d, e->job_id, false);
        if (ej && !memeq_safe(ej->secret, ej->secret_len, e->secret.data, e->secret.len)) {
                refuse(d, &en, HVD_EDENIED, "elastic job: wrong job secret (HVD_JOB_SECRET does not match the job's)");
                return;
        }
        if (!ej && e->generation > 0) {
                char reason[HVD_WIRE_MAX_JOB_ID + 160];
                snprintf(reason, sizeof reason,
                         "elastic job %s: its root daemon no longer knows the job (restarted, or the job ended)",
                         e->job_id);
                refuse(d, &en, HVD_EABORTED, reason);
                return;
        }
        if (!ej && !(ej = ejob_new(d, e))) {
                refuse(d, &en, -ENOMEM, "elastic job refused: out of memory, or this daemon already serves max_jobs");
                return;
        }
        if (ej->n_waiting >= ELASTIC_MAX_WAITING) {
                refuse(d, &en, -E2BIG, "elastic job: too many workers waiting");
                return;
        }
        en.member = e->generation && e->generation == ej->generation && e->rank < ej->n_members &&
                    ej->members[e->rank].pid == e->pid && strcmp(ej->members[e->rank].host, e->host) == 0;
        for (size_t i = 0; i < ej->n_waiting; i++)
                if (ej->waiting[i].pid == en.pid && strcmp(ej->waiting[i].host, en.host) == 0) {
                        ej->waiting[i] = en; /* asked again: the last connection answers */
                        return;
                }
        if (ej->n_waiting == ej->cap_waiting) {
                size_t cap = ej->cap_waiting ? 2 * ej->cap_waiting : 16;
                enrollee_t *w = realloc(ej->waiting, cap * sizeof *w);
                if (!w) {
                        refuse(d, &en, -ENOMEM, "out of memory");
                        return;
                }
                ej->waiting = w;
                ej->cap_waiting = cap;
        }
        ej->waiting[ej->n_waiting++] = en;
        if (en.member) {
                ej->members[en.rank].enrolled = true;
                start_reset(ej, false); /* a generation ends at its first member's return */
        } else if (!ej->forming) {
                hvd_log_info("elastic job %s: pid %u on %s waits for the next generation", ej->id, en.pid, en.host);
                ej->last_join_usec = hvd_now_usec();
                ej->announced = false;
        }
        try_form(d, ej, hvd_now_usec());
        d->next_housekeeping = 0;
}

void elastic_placement(hvd_daemon_t *d, Hvd__Envelope *env) {
        hvd_elastic_t *es = d->elastic;
        uint64_t rq = env->placement->request;
        fwd_t *f = es && rq ? &es->fwd[(rq - 1) % ELASTIC_MAX_FWD] : NULL;
        if (!f || f->request != rq) {
                hvd_log_warning("elastic: a placement for request %" PRIu64 " that no worker waits for", rq);
                return;
        }
        io_send(d, d->worker_sock, f->id, f->id_len, env);
        f->request = 0;
}

void elastic_hosts_updated(hvd_daemon_t *d, Hvd__Envelope *env) {
        const char *id = env->hosts_updated->job_id;
        job_t *j = hvd_strmap_get(d->jobs, id, strlen(id));
        if (j && j->state == JOB_RUNNING)
                worker_send_all(d, j, env, true);
}

void elastic_job_aborted(hvd_daemon_t *d, const job_t *j, int lost_rank) {
        ejob_t *ej = find(d, j->id, true);
        if (!ej)
                return;
        if (lost_rank >= 0 && (uint32_t) lost_rank < ej->n_members)
                ej->members[lost_rank].lost = true;
        start_reset(ej, true);
        d->next_housekeeping = 0;
}

void elastic_rank_gone(hvd_daemon_t *d, job_t *j, uint32_t rank) {
        const char *g = strrchr(j->id, '.');
        if (!g || g[1] != 'g' || !g[2] || strspn(g + 2, "0123456789") != strlen(g + 2))
                return; /* not a generation of an elastic job */
        if (j->role != JOB_MEMBER) {
                elastic_job_aborted(d, j, (int) rank);
                return;
        }
        Hvd__Abort ab = HVD__ABORT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ab.job_id = j->id;
        ab.reason = (char *) "a rank of the ended generation is gone too";
        ab.lost_rank = (int32_t) rank;
        ab.code = HVD_EABORTED;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        uplink_send_root(d, j, &env);
}

void elastic_host_lost(hvd_daemon_t *d, const job_t *j, uint32_t cross) {
        ejob_t *ej = find(d, j->id, true);
        for (uint32_t r = 0; ej && r < ej->n_members; r++)
                if (strcmp(ej->members[r].host, job_host(j, cross)) == 0)
                        ej->members[r].lost = true;
}

/* Whether every joiner waiting (not a member of the running generation)
 * has all the workers started on its host with it waiting too: then no
 * more are coming together with them. */
static bool joiners_complete(const ejob_t *ej) {
        for (size_t i = 0; i < ej->n_waiting; i++) {
                const enrollee_t *a = &ej->waiting[i];
                if (a->member)
                        continue;
                if (a->starting == 0)
                        return false;
                uint32_t n = 0;
                for (size_t k = 0; k < ej->n_waiting && n < a->starting; k++)
                        n += !ej->waiting[k].member && strcmp(ej->waiting[k].host, a->host) == 0;
                if (n < a->starting)
                        return false;
        }
        return true;
}

uint64_t elastic_housekeeping(hvd_daemon_t *d, uint64_t now) {
        uint64_t next = UINT64_MAX;
        for (ejob_t **pp = d->elastic ? &d->elastic->jobs : NULL; pp && *pp;) {
                ejob_t *ej = *pp;
                if (ej->forming) {
                        next = earliest(next, try_form(d, ej, now));
                        pp = &ej->next;
                        continue;
                }
                job_t *j = hvd_strmap_get(d->jobs, ej->gen_job, strlen(ej->gen_job));
                if (j) {
                        ej->gone_since = 0;
                        if (ej->n_waiting && !ej->announced) {
                                uint64_t due = joiners_complete(ej) ? now : ej->last_join_usec + ELASTIC_JOIN_QUIET;
                                if (now >= due)
                                        announce(d, ej);
                                next = earliest(next, now >= due ? now + 100 * USEC_PER_MSEC : due);
                        }
                        pp = &ej->next;
                        continue;
                }
                if (!ej->gone_since)
                        ej->gone_since = now;
                if (ej->n_waiting && now - ej->gone_since >= ej->settle_usec)
                        refuse_all(d, ej, HVD_EABORTED, "the job finished before this worker could join it");
                if (now - ej->gone_since >= ELASTIC_LINGER_USEC) {
                        hvd_log_info("elastic job %s: ended after %" PRIu64 " generation%s, %u reset%s", ej->id,
                                     ej->generation, ej->generation == 1 ? "" : "s", ej->resets,
                                     ej->resets == 1 ? "" : "s");
                        *pp = ej->next;
                        ejob_free(ej);
                        continue;
                }
                next = earliest(next, ej->gone_since + HVD_MIN(ej->settle_usec, ELASTIC_LINGER_USEC));
                next = earliest(next, ej->gone_since + ELASTIC_LINGER_USEC);
                pp = &ej->next;
        }
        return next;
}

void elastic_keep_tune(hvd_daemon_t *d, job_t *j) {
        ejob_t *ej = j->tune ? find(d, j->id, true) : NULL;
        if (!ej)
                return;
        autotune_free(&ej->tune);
        ej->tune = j->tune;
        j->tune = NULL;
}

autotune_t *elastic_take_tune(hvd_daemon_t *d, const char *job_id, uint64_t *generation) {
        ejob_t *ej = find(d, job_id, true);
        *generation = ej ? ej->generation : 0;
        autotune_t *t = ej ? ej->tune : NULL;
        if (ej)
                ej->tune = NULL;
        return t;
}

int elastic_describe(const hvd_daemon_t *d, const char *gen_job, Hvd__ElasticStatus *es) {
        const ejob_t *ej = NULL;
        for (const ejob_t *e = d->elastic ? d->elastic->jobs : NULL; e && !ej; e = e->next)
                if (strcmp(e->gen_job, gen_job) == 0)
                        ej = e;
        if (!ej)
                return 0;
        es->generation = ej->generation;
        es->resets = ej->resets;
        es->last_reset_usec = ej->last_reset_usec;
        es->waiting = (uint32_t) ej->n_waiting;
        es->min_size = ej->min_size;
        es->max_size = ej->max_size;
        es->left = (char *) ej->left;
        es->joined = (char *) ej->joined;
        return 1;
}
