/* relay.c — a relay daemon of a large job: it takes its group's readiness
 * (hosts, or relays below it), tallies the cached ids every host of the
 * group posted into one entry for all of them, passes the rest on in the
 * order it came, one message to the root (or the relay above) a reactor
 * turn, and passes the root's schedules on to its group. Aborts and pings
 * still go straight between each daemon and the root. */
#include "config.h"

#include "internal.h"

/* A host of the group, as its relay knows it. */
typedef struct relay_member {
        uint32_t host;      /* cross rank */
        uint8_t id[256];    /* routing id on the peer socket */
        size_t id_len;      /* 0: not heard from yet */
        zmq_msg_t *pending; /* schedules that came before it was heard from */
        size_t n_pending;
        uint32_t *sub; /* the hosts it stands for: itself, and those it relays for */
        uint32_t n_sub;
} relay_member_t;

#define RELAY_MAX_PENDING 4096

struct relay {
        uint32_t n; /* hosts of the group; m[0] is this daemon's own */
        relay_member_t *m;
        uint32_t *all; /* every host this daemon stands for (its own and the members') */
        uint32_t n_all;
        int32_t *member_of;      /* [cross_size]: the member a host reports through here, or -1 */
        tally_t tally;           /* the members' cached ids */
        Hvd__RelayedReady **out; /* entries of the next NodeReady to the root, owned */
        size_t n_out, cap_out;
        uint32_t *grp_ids; /* ids every host of the group posted, for the next NodeReady */
        uint64_t *grp_waited;
        size_t n_grp, cap_grp;
        uint64_t in_msgs, out_msgs; /* readiness messages taken from the group / sent to the root */
        bool departures;            /* a rank of the group said goodbye: the job is ending */
};

static void relay_out_clear(relay_t *rl) {
        for (size_t i = 0; i < rl->n_out; i++)
                protobuf_c_message_free_unpacked(&rl->out[i]->base, NULL);
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
        tally_free(&rl->tally);
        relay_out_clear(rl);
        free(rl->out);
        free(rl->grp_ids);
        free(rl->grp_waited);
        free(rl);
}

/* Appends rr (owned by the relay when this succeeds) to what goes on. */
static int relay_push(relay_t *rl, Hvd__RelayedReady *rr) {
        if (rl->n_out == rl->cap_out) {
                size_t cap = rl->cap_out ? rl->cap_out * 2 : 16;
                Hvd__RelayedReady **o = realloc(rl->out, cap * sizeof *o);
                if (!o)
                        return -ENOMEM;
                rl->out = o;
                rl->cap_out = cap;
        }
        rl->out[rl->n_out++] = rr;
        return 0;
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

/* An empty NodeReady with room for n_ids node-level ids and their waits
 * (zeroed: a wait not copied in reads as none). */
static Hvd__NodeReady *node_ready_new(size_t n_ids) {
        Hvd__NodeReady *nr = calloc(1, sizeof *nr);
        if (!nr)
                return NULL;
        hvd__node_ready__init(nr);
        if (n_ids && (!(nr->node_cached = calloc(n_ids, sizeof *nr->node_cached)) ||
                      !(nr->node_cached_waited_usec = calloc(n_ids, sizeof *nr->node_cached_waited_usec)))) {
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

static int release_member(void *userdata, uint32_t part, const uint32_t *ids, const uint64_t *waited, size_t n) {
        relay_t *rl = userdata;
        Hvd__NodeReady *nr = node_ready_new(n);
        if (!nr)
                return -ENOMEM;
        memcpy(nr->node_cached, ids, n * sizeof *ids);
        memcpy(nr->node_cached_waited_usec, waited, n * sizeof *waited);
        nr->n_node_cached = nr->n_node_cached_waited_usec = n;
        return relay_append(rl, rl->m[part].sub, rl->m[part].n_sub, nr);
}

/* Whatever the group posted in part goes on host by host, after the ids
 * every host posted: what comes next from a host must not overtake it. */
static int relay_release(hvd_daemon_t *d, relay_t *rl) {
        int r = relay_grp_out(d, rl);
        return r < 0 ? r : tally_release(&rl->tally, hvd_now_usec(), release_member, rl);
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
        bool has_waited = nr->n_node_cached_waited_usec == nr->n_node_cached;
        size_t keep = 0;
        for (size_t k = 0; k < nr->n_node_cached; k++) {
                uint32_t id = nr->node_cached[k];
                uint64_t wt = has_waited ? nr->node_cached_waited_usec[k] : 0, waited;
                if (!tally_counts(&rl->tally, id)) {
                        nr->node_cached[keep] = id;
                        if (has_waited)
                                nr->node_cached_waited_usec[keep] = wt;
                        keep++;
                        continue;
                }
                r = tally_post(&rl->tally, id, i, wt < now ? now - wt : now, now, &waited);
                if (r == -EEXIST) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        job_abort(d, j, -1, HVD_EDUPLICATE,
                                  "host %s posted the tensor of cache id %u twice before it completed",
                                  job_host(j, rl->m[i].host), id);
                        return;
                }
                if (r == 1 && (r = ids_push(&rl->grp_ids, &rl->grp_waited, &rl->n_grp, &rl->cap_grp, id, waited)) < 0) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        goto fail;
                }
        }
        nr->n_node_cached = keep;
        if (has_waited)
                nr->n_node_cached_waited_usec = keep;
        if (keep) {
                if ((r = relay_append(rl, mi->sub, mi->n_sub, nr)) < 0)
                        goto fail;
        } else
                protobuf_c_message_free_unpacked(&nr->base, NULL);
        return;
fail:
        job_abort(d, j, -1, r, "relaying the readiness of host %s: %s", job_host(j, mi->host), hvd_strerror(r));
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
                                        snprintf(other, sizeof other, "%s", job_host(j, x));
                                else
                                        snprintf(other, sizeof other, "%u (no such host)", x);
                                job_abort(d, j, -1, HVD_EPROTO,
                                          "host %s relayed readiness for host %s, which does not report through it",
                                          job_host(j, mi->host), other);
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
                job_abort(d, j, -1, r, "relaying the readiness of host %s: %s", job_host(j, mi->host), hvd_strerror(r));
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
        hvd_assert(j->rl && i < j->rl->n);
        j->rl->departures = j->rl->departures || nr->n_departed;
        for (size_t k = 0; k < nr->n_relayed; k++)
                j->rl->departures = j->rl->departures || nr->relayed[k]->n_departed;
        j->rl->in_msgs++;
        d->metrics.relay_in++;
        if (nr->n_relayed)
                relay_take_relayed(d, j, i, nr);
        else
                relay_take_one(d, j, i, nr);
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
        uplink_send_up(d, j, &env);
        j->rl->out_msgs++;
        d->metrics.relay_out++;
}

void relay_flush(hvd_daemon_t *d, job_t *j) {
        relay_t *rl = j->rl;
        if (relay_grp_out(d, rl) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        if (rl->n_out && j->state == JOB_RUNNING)
                relay_send(d, j, rl->out, rl->n_out);
        relay_out_clear(rl);
}

/* Whether op is of every rank of the job (so that each host of the group
 * posts it). */
static bool of_every_rank(const Hvd__Op *op, void *userdata) {
        (void) userdata;
        return op->process_set == 0;
}

void relay_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s) {
        const uint32_t *kept = s->repeat_key ? j->key_ids[s->repeat_key] : NULL;
        uint32_t n_kept = s->repeat_key ? j->key_n[s->repeat_key] : 0;
        int r = tally_learn_schedule(&j->rl->tally, s, kept, n_kept, of_every_rank, NULL);
        if (r < 0)
                job_abort(d, j, -1, r, "schedule %" PRIu64 ": %s", s->seq, hvd_strerror(r));
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
                                                job_host(j, m->host), hvd_strerror(r));
                        continue;
                }
                if (m->n_pending == RELAY_MAX_PENDING) {
                        zmq_msg_close(&packed);
                        job_abort(d, j, -1, HVD_ETIMEOUT,
                                  "host %s never reached its relay daemon here (%d schedules wait for it)",
                                  job_host(j, m->host), RELAY_MAX_PENDING);
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
                        hvd_log_warning("job %s: cannot pass a schedule on to host %s: %s", j->id, job_host(j, m->host),
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
                                 nr->relay_host, job_host(j, j->cross_rank));
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
                          job_host(j, m->host), job_host(j, j->cross_rank));
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
                job_abort(d, j, -1, HVD_EPROTO, "host %s sent its relay daemon on host %s %s", job_host(j, m->host),
                          job_host(j, j->cross_rank),
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

/* This daemon relays for its n - 1 members (the hosts whose relay_via
 * names it), each standing for its own hosts and those below it. Returns
 * 0 or -ENOMEM (j->rl, half made, goes with the job). */
static int relay_group_new(job_t *j, uint32_t n) {
        uint32_t me = j->cross_rank;
        relay_t *rl = calloc(1, sizeof *rl);
        if (!rl)
                return -ENOMEM;
        j->rl = rl;
        if (!(rl->m = calloc(n, sizeof *rl->m)) || !(rl->member_of = malloc(j->cross_size * sizeof *rl->member_of)) ||
            !(rl->all = malloc(j->cross_size * sizeof *rl->all)))
                return -ENOMEM;
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
                                                       job_host(j, c));
                }
        /* what each member stands for, in host order */
        for (uint32_t k = 0; k < rl->n; k++) {
                relay_member_t *m = &rl->m[k];
                uint32_t cnt = 0;
                for (uint32_t c = 1; c < j->cross_size; c++)
                        cnt += k ? tree_under(j, c, m->host) : c == me;
                if (!(m->sub = malloc(cnt * sizeof *m->sub)))
                        return -ENOMEM;
                for (uint32_t c = 1; c < j->cross_size; c++)
                        if (k ? tree_under(j, c, m->host) : c == me) {
                                m->sub[m->n_sub++] = c;
                                rl->member_of[c] = (int32_t) k;
                        }
        }
        for (uint32_t c = 1; c < j->cross_size; c++)
                if (rl->member_of[c] >= 0)
                        rl->all[rl->n_all++] = c;
        tally_init(&rl->tally, rl->n);
        snprintf(j->relay_desc, sizeof j->relay_desc, "relays for hosts [%s]", list);
        if (rl->n_all > rl->n)
                snprintf(j->relay_desc + strlen(j->relay_desc), sizeof j->relay_desc - strlen(j->relay_desc),
                         " (%u hosts in all)", rl->n_all - 1);
        hvd_log_info("job %s: %s", j->id, j->relay_desc);
        return 0;
}

/* This host reports through the relay of host via, at endpoint: a hello
 * makes its connection known there. False when the job was aborted. */
static bool report_through(hvd_daemon_t *d, job_t *j, uint32_t via, const char *endpoint) {
        uint32_t me = j->cross_rank;
        peer_t *p = uplink_peer(d, endpoint);
        if (!p) {
                job_abort(d, j, -1, HVD_EABORTED, "cannot connect to the relay daemon of host %s at %s",
                          job_host(j, via), endpoint);
                return false;
        }
        p->n_jobs++;
        j->relay = p;
        size_t o = strlen(j->relay_desc);
        snprintf(j->relay_desc + o, sizeof j->relay_desc - o, "%sreports through the relay daemon of host %s at %s",
                 o ? "; " : "", job_host(j, via), p->endpoint);
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
                hvd_log_warning("job %s: cannot reach the relay daemon at %s: %s", j->id, p->endpoint, hvd_strerror(r));
        return true;
}

/* Not root: the relay table of the job's NodeWelcome: this daemon relays
 * for a group, reports through a relay, or neither. Returns false when
 * the job was aborted. */
bool relay_setup(hvd_daemon_t *d, job_t *j, const Hvd__NodeWelcome *nw) {
        if (!nw->n_relay_via)
                return true;
        uint32_t n;
        int r = tree_take(j, nw, &n);
        if (r == 0 && n > 1)
                r = relay_group_new(j, n);
        if (r < 0) {
                job_abort(d, j, -1, r == -ENOMEM ? r : HVD_EPROTO, "%s",
                          r == -ENOMEM ? "out of memory" : "root daemon sent an invalid relay table");
                return false;
        }
        uint32_t via = tree_parent(j, j->cross_rank);
        return !via || report_through(d, j, via, nw->relay_endpoint[via]);
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
        /* the cold path: a deep copy (nr holds nothing unknown: it was built here) */
        Hvd__NodeReady only = *nr;
        only.job_id = (char *) protobuf_c_empty_string;
        Hvd__NodeReady *c = (Hvd__NodeReady *) hvd_wire_dup(&only.base);
        if (!c) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        relay_take(d, j, 0, c);
}

/* Housekeeping, a relay: ids held for long go on host by host. */
uint64_t relay_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        tally_t *t = &j->rl->tally;
        if (!t->oldest || j->state != JOB_RUNNING)
                return UINT64_MAX;
        if (tally_expired(t, now, TALLY_HOLD_USEC) && relay_release(d, j->rl) < 0)
                job_abort(d, j, -1, -ENOMEM, "out of memory");
        return tick;
}

/* The relay's totals, logged as its job goes. */
bool relay_group_departing(const job_t *j) {
        return j->rl && j->rl->departures;
}

void relay_log_totals(const job_t *j) {
        hvd_log_info("job %s: %s: took %" PRIu64 " readiness messages from its group, sent %" PRIu64 " to %s", j->id,
                     j->relay_desc, j->rl->in_msgs, j->rl->out_msgs, j->relay ? "its relay" : "the root");
}
