/* uplink.c — a host's link to its job's root daemon (and to the relay it
 * reports through): one DEALER per root endpoint shared by its jobs,
 * pings and their answers, the root's epoch (a restarted root ends the
 * job), and what the root sends: aborts, the welcome, schedules. */
#include "config.h"

#include "internal.h"

void uplink_send_root(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        if (!j->root || j->root->lost)
                return;
        int r = io_send_peer(d, j->root, env);
        if (r < 0)
                hvd_log_warning("job %s: cannot reach the root daemon at %s: %s", j->id, j->root->endpoint,
                                hvd_strerror(r));
}

/* A NodeReady on its way to the root: through the relay this host
 * reports to, if any. */
void uplink_send_up(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        if (!j->relay) {
                uplink_send_root(d, j, env);
                return;
        }
        Hvd__NodeReady *nr = env->node_ready;
        nr->relay_host = j->cross_rank;
        nr->relay_secret.data = j->secret;
        nr->relay_secret.len = j->secret_len;
        if (j->relay->lost)
                return;
        int r = io_send_peer(d, j->relay, env);
        if (r < 0)
                hvd_log_warning("job %s: cannot reach the relay daemon at %s: %s", j->id, j->relay->endpoint,
                                hvd_strerror(r));
}

peer_t *uplink_peer(hvd_daemon_t *d, const char *endpoint) {
        peer_t *p = hvd_strmap_get(d->peers, endpoint, strlen(endpoint));
        if (p && !p->lost) {
                /* idle, it was not pinged: its silence so far says nothing */
                if (!p->n_jobs) {
                        p->last_heard_usec = hvd_now_usec();
                        p->last_ping_usec = 0;
                }
                return p;
        }
        if (!p) {
                p = calloc(1, sizeof *p);
                if (!p)
                        return NULL;
                snprintf(p->endpoint, sizeof p->endpoint, "%s", endpoint);
                if (hvd_strmap_put(d->peers, endpoint, strlen(endpoint), p) < 0) {
                        free(p);
                        return NULL;
                }
        }
        if (p->sock)
                zmq_close(p->sock);
        p->sock = io_socket(d, ZMQ_DEALER, true);
        if (!p->sock)
                return NULL;
        if (hvd_zap_setup_peer_client(d->zap, p->sock, endpoint) < 0) {
                zmq_close(p->sock);
                p->sock = NULL;
                return NULL;
        }
        int r = hvd_zmq_connect(p->sock, endpoint);
        if (r < 0) {
                hvd_log_error(r, "Cannot connect to root daemon %s", endpoint);
                zmq_close(p->sock);
                p->sock = NULL;
                return NULL;
        }
        p->lost = false;
        p->last_heard_usec = hvd_now_usec();
        p->last_ping_usec = 0;
        return p;
}

/* Not root: the root daemon at p speaks with epoch. A job that already
 * knows another epoch of it was forgotten there (the daemon restarted): it
 * is aborted, and nothing from the new epoch is taken for it. */
static void root_epoch_check(hvd_daemon_t *d, peer_t *p, uint64_t epoch) {
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (j->root != p || j->state == JOB_ABORTED)
                        continue;
                if (!j->root_epoch) {
                        j->root_epoch = epoch;
                        continue;
                }
                if (j->root_epoch == epoch)
                        continue;
                char ranks[256];
                job_host_ranks(j, 0, ranks, sizeof ranks);
                job_abort_ex(d, j, true, -1, HVD_EABORTED,
                             "lost host %s (ranks [%s]): its root daemon at %s restarted (epoch %016" PRIx64
                             ", was %016" PRIx64 ") and no longer knows the job",
                             job_host(j, 0), ranks, p->endpoint, epoch, j->root_epoch);
        }
}

/* The root (or relay) daemon p aborted job j. One that no longer knows the
 * job restarted or dropped it; or it let the job go first because the job
 * is ending here too (a local rank, or one of the group this daemon relays
 * for, said goodbye), which ends it quietly. */
static void root_aborted(hvd_daemon_t *d, job_t *j, peer_t *p, const Hvd__Abort *ab) {
        const char *role = p == j->root ? "root" : "relay";
        char unknown[HVD_WIRE_MAX_JOB_ID + 64];
        snprintf(unknown, sizeof unknown, "job %s is unknown to the root daemon", j->id);
        if (strcmp(ab->reason, unknown) != 0) {
                job_abort_ex(d, j, p == j->root, ab->lost_rank, ab->code ? ab->code : HVD_EABORTED, "%s", ab->reason);
                return;
        }
        bool ending = relay_group_departing(j);
        for (uint32_t r = 0; !ending && r < j->size; r++)
                ending = j->ranks[r] && j->ranks[r]->goodbye;
        if (ending) {
                job_end_quietly(d, j, true, "its %s daemon at %s has finished it (its ranks were done first)", role,
                                p->endpoint);
                return;
        }
        char ranks[256];
        job_host_ranks(j, 0, ranks, sizeof ranks);
        job_abort_ex(
                d, j, p == j->root, -1, HVD_EABORTED,
                "lost host %s (ranks [%s]): its %s daemon at %s no longer knows the job (restarted, or dropped it)",
                job_host(j, 0), ranks, role, p->endpoint);
}

/* A schedule the root keeps under a key (keep_key): its cache ids, kept
 * too, are what a repeat of it (repeat_key) stands for. */
static void schedule_keep_ids(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s) {
        if (!s->keep_key)
                return;
        size_t total = 0;
        for (size_t o = 0; o < s->n_ops; o++)
                total += s->ops[o]->n_entries;
        uint32_t *ids = malloc((total ? total : 1) * sizeof *ids), n = 0;
        if (!ids) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        for (size_t o = 0; o < s->n_ops; o++)
                for (size_t e = 0; e < s->ops[o]->n_entries; e++)
                        if (s->ops[o]->entries[e]->id != HVD_NEGOTIATOR_NO_ID)
                                ids[n++] = s->ops[o]->entries[e]->id;
        free(j->key_ids[s->keep_key]);
        j->key_ids[s->keep_key] = ids;
        j->key_n[s->keep_key] = n;
}

/* A schedule of the root on its way to this host's ranks (and, at a
 * relay, to its group). */
static void root_schedule(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        if (j->state != JOB_RUNNING)
                return;
        const Hvd__Schedule *sc = env->job_schedule->schedule;
        if (sc->repeat_key && !j->key_ids[sc->repeat_key]) {
                job_abort(d, j, -1, HVD_EPROTO, "root daemon repeated schedule key %u, which it never sent",
                          sc->repeat_key);
                return;
        }
        schedule_keep_ids(d, j, sc);
        batch_learn(d, j, sc);
        /* the group first: its ranks are a daemon's hand-off further away
         * than this host's */
        if (j->rl) {
                relay_learn(d, j, sc);
                relay_forward(d, j, env);
                if (j->state != JOB_RUNNING)
                        return;
        }
        Hvd__Envelope out = HVD__ENVELOPE__INIT;
        out.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        out.schedule = env->job_schedule->schedule;
        worker_send_all(d, j, &out, true);
}

/* Not root: a message from a root daemon (or the relay this host reports
 * through): a ping's answer, an error, an abort, the job's welcome or a
 * schedule. */
static void handle_root_message(hvd_daemon_t *d, peer_t *p, Hvd__Envelope *env) {
        p->last_heard_usec = hvd_now_usec();
        if (env->body_case == HVD__ENVELOPE__BODY_PING) {
                if (env->ping->reply)
                        p->rtt_usec = hvd_now_usec() - env->ping->sent_usec;
                if (env->ping->epoch)
                        root_epoch_check(d, p, env->ping->epoch);
                return;
        }
        if (env->body_case == HVD__ENVELOPE__BODY_ERROR) {
                hvd_log_warning("root daemon %s: %s", p->endpoint, env->error->message);
                return;
        }
        if (env->body_case == HVD__ENVELOPE__BODY_PLACEMENT || env->body_case == HVD__ENVELOPE__BODY_HOSTS_UPDATED) {
                (env->body_case == HVD__ENVELOPE__BODY_PLACEMENT ? elastic_placement : elastic_hosts_updated)(d, env);
                return;
        }
        const char *job_id = env->body_case == HVD__ENVELOPE__BODY_NODE_WELCOME   ? env->node_welcome->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_JOB_SCHEDULE ? env->job_schedule->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_ABORT        ? env->abort->job_id
                                                                                  : NULL;
        job_t *j = job_id ? hvd_strmap_get(d->jobs, job_id, strlen(job_id)) : NULL;
        if (!j || (j->root != p && (j->relay != p || env->body_case == HVD__ENVELOPE__BODY_NODE_WELCOME)))
                return; /* a job we no longer have, or not from its root (or relay) */
        if (env->body_case == HVD__ENVELOPE__BODY_ABORT)
                root_aborted(d, j, p, env->abort);
        else if (env->body_case == HVD__ENVELOPE__BODY_NODE_WELCOME)
                join_node_welcome(d, j, p, env->node_welcome);
        else
                root_schedule(d, j, env);
}

void uplink_handle_socket(hvd_daemon_t *d, peer_t *p) {
        for (int n = 0; n < RECV_BATCH; n++) {
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (io_recv_msg(&msg, p->sock) < 0) {
                        zmq_msg_close(&msg);
                        return;
                }
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &env, err, sizeof err);
                zmq_msg_close(&msg);
                io_count(d, HVD_METRICS_SOCK_ROOT, r, env);
                if (r < 0) {
                        hvd_log_warning("root daemon %s: rejected message: %s", p->endpoint, err);
                        continue;
                }
                handle_root_message(d, p, env);
                hvd_wire_free(&env);
        }
}

/* What peer p is to this daemon's jobs, for messages: "root" or "relay". */
static const char *peer_role(hvd_daemon_t *d, const peer_t *p) {
        size_t iter = 0;
        void *v;
        bool relay = false;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                const job_t *j = v;
                if (j->root == p)
                        return "root";
                relay |= j->relay == p;
        }
        return relay ? "relay" : "root";
}

/* Housekeeping: a ping to each root (or relay) daemon this one reports to,
 * every heartbeat interval; the jobs of one silent past peer_timeout are
 * aborted. Returns when to look again (UINT64_MAX: no peer to watch). */
uint64_t uplink_housekeeping(hvd_daemon_t *d, uint64_t now, uint64_t tick) {
        uint64_t hb = daemon_ping_usec(d), next = UINT64_MAX;
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->peers, &iter, NULL, NULL, &v)) {
                peer_t *p = v;
                if (p->lost || !p->n_jobs)
                        continue;
                next = tick;
                if (now - p->last_ping_usec >= hb) {
                        Hvd__Ping ping = HVD__PING__INIT;
                        Hvd__Envelope env = HVD__ENVELOPE__INIT;
                        ping.sent_usec = now;
                        ping.rtt_usec = p->rtt_usec;
                        ping.epoch = d->epoch;
                        env.body_case = HVD__ENVELOPE__BODY_PING;
                        env.ping = &ping;
                        (void) io_send_peer(d, p, &env);
                        p->last_ping_usec = now;
                }
                if (now - p->last_heard_usec > d->cfg.peer_timeout_usec) {
                        p->lost = true;
                        const char *hint = hvd_zap_curve(d->zap) && !p->rtt_usec
                                                   ? "; it never answered: is the CURVE key listed for it its public "
                                                     "key, and does it list ours?"
                                                   : "";
                        hvd_log_error(0, "lost contact with the %s daemon at %s (silent for %.1f s)%s", peer_role(d, p),
                                      p->endpoint, (double) (now - p->last_heard_usec) / 1e6, hint);
                        size_t it2 = 0;
                        void *v2;
                        while (hvd_strmap_next(d->jobs, &it2, NULL, NULL, &v2)) {
                                job_t *j = v2;
                                if (j->relay == p && j->relay_via) {
                                        uint32_t via = j->relay_via[j->cross_rank];
                                        char ranks[256];
                                        job_host_ranks(j, via, ranks, sizeof ranks);
                                        job_abort(d, j, -1, HVD_EABORTED,
                                                  "lost contact with the relay daemon of host %s at %s (ranks [%s]): "
                                                  "silent for %.1f s",
                                                  job_host(j, via), p->endpoint, ranks,
                                                  (double) (now - p->last_heard_usec) / 1e6);
                                        continue;
                                }
                                if (j->root != p)
                                        continue;
                                char ranks[256];
                                job_host_ranks(j, 0, ranks, sizeof ranks);
                                job_abort_ex(d, j, true, -1, HVD_EABORTED,
                                             "lost contact with the root daemon at %s (host %s, ranks [%s]): "
                                             "silent for %.1f s%s",
                                             p->endpoint, job_host(j, 0), ranks,
                                             (double) (now - p->last_heard_usec) / 1e6, hint);
                        }
                }
        }
        return next;
}
