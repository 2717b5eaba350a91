/* root.c — the negotiating daemon of a job (its only host, or its root):
 * readiness entered into the negotiation table rank by rank or host by
 * host, consistency checked there, schedules planned and sent (a repeat
 * as its key), the stall inspector, and the hosts' liveness. */
#include "config.h"

#include "internal.h"

/* Root: the table knows every rank's node; the negotiator takes the
 * other nodes' readiness node by node from now on. */
int root_set_nodes(job_t *j) {
        uint32_t *of = malloc(j->size * sizeof *of), *fill = calloc(j->cross_size, sizeof *fill);
        j->node_first = calloc(j->cross_size + 1, sizeof *j->node_first);
        j->node_list = malloc(j->size * sizeof *j->node_list);
        if (!of || !fill || !j->node_first || !j->node_list) {
                free(of);
                free(fill);
                return -ENOMEM;
        }
        for (uint32_t r = 0; r < j->size; r++) {
                of[r] = j->table[r].cross_rank < j->cross_size ? j->table[r].cross_rank : 0;
                j->node_first[of[r] + 1]++;
        }
        for (uint32_t c = 0; c < j->cross_size; c++)
                j->node_first[c + 1] += j->node_first[c];
        for (uint32_t r = 0; r < j->size; r++)
                j->node_list[j->node_first[of[r]] + fill[of[r]]++] = r;
        int r = hvd_negotiator_set_nodes(j->neg, j->cross_size, of);
        free(of);
        free(fill);
        return r;
}

void root_ready(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Envelope *env) {
        Hvd__Ready *q = env->ready;
        if (q->n_node_cached) {
                batch_flush_all(d, j); /* what was held goes first */
                if (!batch_node_ready(d, j, w, q))
                        return;
                if (!q->n_requests && !q->n_cached)
                        return;
        }
        batch_note_join(j, q);
        if (!batch_holds(j, q)) {
                root_submit(d, j, &w->rank, 1, q, true);
                return;
        }
        /* held; a readiness message from it all the same */
        j->rstat[w->rank].last_seen_usec = hvd_now_usec();
        j->rstat[w->rank].readies++;
        env->ready = NULL;
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        batch_add(d, j, w, q);
}

/* Tensors wait once something was submitted: the stall inspector looks
 * within a second (root_check_stalls), and every tick while they wait. */
static void arm_stall_check(hvd_daemon_t *d, const job_t *j, uint64_t now) {
        if (j->stall_check_usec)
                d->next_housekeeping = earliest(d->next_housekeeping, now + USEC_PER_SEC);
}

/* Root: the same readiness of each rank in ranks, from a local worker or
 * a remote node (one Ready its ranks shared: entered once). seen: count it
 * as a readiness message from each, for status (a local rank's held one
 * was counted when it came). */
void root_submit(hvd_daemon_t *d, job_t *j, const uint32_t *ranks, size_t n_ranks, const Hvd__Ready *q, bool seen) {
        hvd_assert(job_negotiates(j) && n_ranks > 0);
        if (j->departed_rank >= 0) {
                job_abort(d, j, j->departed_rank, HVD_EABORTED,
                          "rank %d has shut down, but rank %u still submits collectives; the job cannot go on",
                          j->departed_rank, ranks[0]);
                return;
        }
        char err[1024];
        hvd_negotiator_stats_t before, after;
        hvd_negotiator_get_stats(j->neg, &before);
        int r = hvd_negotiator_submit_ranks(j->neg, ranks, n_ranks, q, err, sizeof err);
        hvd_negotiator_get_stats(j->neg, &after);
        d->metrics.cache_hits += after.cache_hits - before.cache_hits;
        d->metrics.requests += after.requests - before.requests;
        uint64_t now = hvd_now_usec();
        for (size_t k = 0; seen && k < n_ranks; k++)
                if (ranks[k] < j->size) {
                        j->rstat[ranks[k]].last_seen_usec = now;
                        j->rstat[ranks[k]].readies++;
                }
        if (r < 0 && n_ranks == 1)
                job_abort(d, j, -1, r, "rank %u: %s", ranks[0], err);
        else if (r < 0) /* err names the rank */
                job_abort(d, j, -1, r, "host %s: %s", job_host(j, j->table[ranks[0]].cross_rank), err);
        arm_stall_check(d, j, now);
}

/* Root: ids every rank of node cross is ready for (control plane
 * aggregation): one submission for the node, as if each rank had sent them. */
void root_submit_node(hvd_daemon_t *d, job_t *j, uint32_t cross, const Hvd__NodeReady *nr, bool own) {
        hvd_assert(j->role == JOB_ROOT && j->node_first && cross < j->cross_size);
        uint32_t first = j->node_first[cross], last = j->node_first[cross + 1];
        if (j->departed_rank >= 0) {
                job_abort(d, j, j->departed_rank, HVD_EABORTED,
                          "rank %d has shut down, but the ranks of host %s still submit collectives; the job cannot go "
                          "on",
                          j->departed_rank, job_host(j, cross));
                return;
        }
        char err[1024];
        hvd_negotiator_stats_t before, after;
        hvd_negotiator_get_stats(j->neg, &before);
        int r = hvd_negotiator_submit_node(j->neg, cross, nr->node_cached, nr->n_node_cached,
                                           nr->n_node_cached_waited_usec ? nr->node_cached_waited_usec : NULL, err,
                                           sizeof err);
        hvd_negotiator_get_stats(j->neg, &after);
        d->metrics.cache_hits += after.cache_hits - before.cache_hits;
        d->metrics.requests += after.requests - before.requests;
        if (!own) { /* the root host's own board counts apart (node_level_ready) */
                d->metrics.node_ready_received++;
                d->metrics.node_cached_ids += nr->n_node_cached;
        }
        /* a readiness message from each of its ranks, for status */
        uint64_t now = hvd_now_usec();
        for (uint32_t k = first; k < last; k++) {
                j->rstat[j->node_list[k]].last_seen_usec = now;
                j->rstat[j->node_list[k]].readies++;
        }
        j->cycles += last - first;
        d->metrics.cycles += last - first;
        if (r < 0)
                job_abort(d, j, -1, r, "host %s: %s", job_host(j, cross), err);
        arm_stall_check(d, j, now);
}

/* Root: tensors some ranks submitted and others not, for long: warn once,
 * and abort the job after the shutdown time when one is set. */
static bool stall_inspect(hvd_daemon_t *d, job_t *j, uint64_t now) {
        if (!job_negotiates(j) || j->state != JOB_RUNNING || !j->stall_check_usec)
                return false;
        if (!hvd_negotiator_any_pending(j->neg)) {
                j->stall_warned = false;
                j->stalled[0] = 0;
                return false;
        }
        char buf[1024];
        if (j->stall_shutdown_usec &&
            hvd_negotiator_describe_pending(j->neg, now, j->stall_shutdown_usec, buf, sizeof buf) > 0) {
                job_abort(d, j, -1, HVD_ETIMEOUT, "stalled for more than %.0f s: %s",
                          (double) j->stall_shutdown_usec / 1e6, buf);
                return false;
        }
        if (hvd_negotiator_describe_pending(j->neg, now, j->stall_check_usec, buf, sizeof buf) > 0) {
                snprintf(j->stalled, sizeof j->stalled, "%s", buf);
                if (!j->stall_warned) {
                        d->metrics.stall_warnings++;
                        hvd_log_warning("job %s: stalled for more than %.0f s: %s", j->id,
                                        (double) j->stall_check_usec / 1e6, buf);
                }
                j->stall_warned = true;
        } else {
                j->stall_warned = false;
                j->stalled[0] = 0;
        }
        return true;
}

/* Root: rank said goodbye. A goodbye while collectives wait for it means
 * they never can complete. */
void root_departed(hvd_daemon_t *d, job_t *j, uint32_t rank) {
        if (j->state != JOB_RUNNING)
                return;
        if (hvd_negotiator_any_pending(j->neg)) {
                char pend[1024];
                hvd_negotiator_describe_pending(j->neg, hvd_now_usec(), 0, pend, sizeof pend);
                job_abort(d, j, (int) rank, HVD_EABORTED, "rank %u shut down while collectives were pending: %s", rank,
                          pend);
        } else if (j->departed_rank < 0)
                j->departed_rank = (int32_t) rank;
}

/* Whether rank r is on one of hosts (as the rank table says). */
static bool on_hosts(const job_t *j, uint32_t r, const uint32_t *hosts, size_t n_hosts) {
        if (r >= j->size || !j->table[r].known)
                return false;
        for (size_t h = 0; h < n_hosts; h++)
                if (j->table[r].cross_rank == hosts[h])
                        return true;
        return false;
}

/* Root: the readiness that hosts forwarded for the ranks in ranks (one
 * rank's own, or one its ranks shared: entered once for all), each of
 * which must be on them; false when the job ended on it. */
static bool node_rank_ready(hvd_daemon_t *d, job_t *j, const uint32_t *hosts, size_t n_hosts, const uint32_t *ranks,
                            size_t n_ranks, const Hvd__Ready *ready) {
        for (size_t k = 0; k < n_ranks; k++)
                if (!on_hosts(j, ranks[k], hosts, n_hosts)) {
                        job_abort(d, j, -1, HVD_EPROTO, "host %s%s sent readiness for rank %u, which is not on it",
                                  job_host(j, hosts[0]), n_hosts > 1 ? " (for its relay group)" : "", ranks[k]);
                        return false;
                }
        j->cycles += n_ranks;
        d->metrics.cycles += n_ranks;
        d->metrics.rank_readies_received += n_ranks;
        root_submit(d, j, ranks, n_ranks, ready, true);
        return j->state == JOB_RUNNING;
}

/* Root: the readiness of hosts (a host's own message, or relayed for
 * one or more hosts of a relay group: requests the hosts' ranks sent
 * alike are entered once). Returns false when the job stopped running. */
static bool root_node_content(hvd_daemon_t *d, job_t *j, const uint32_t *hosts, size_t n_hosts,
                              const Hvd__NodeReady *nr) {
        for (size_t i = 0; i < nr->n_ranks; i++)
                if (!node_rank_ready(d, j, hosts, n_hosts, &nr->ranks[i]->rank, 1, nr->ranks[i]->ready))
                        return false;
        for (size_t i = 0; i < nr->n_shared; i++)
                if (!node_rank_ready(d, j, hosts, n_hosts, nr->shared[i]->ranks, nr->shared[i]->n_ranks,
                                     nr->shared[i]->ready))
                        return false;
        for (size_t h = 0; nr->n_node_cached && h < n_hosts; h++) {
                root_submit_node(d, j, hosts[h], nr, false);
                if (j->state != JOB_RUNNING)
                        return false;
        }
        for (size_t i = 0; i < nr->n_departed; i++)
                if (on_hosts(j, nr->departed[i], hosts, n_hosts))
                        root_departed(d, j, nr->departed[i]);
        return j->state == JOB_RUNNING;
}

/* A ping from another daemon: answered (a reply to our own probe is not),
 * and news from every job of that node. */
static void answer_ping(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__Ping *ping) {
        if (ping->reply)
                return; /* root_ping_peer() expects no answer */
        Hvd__Ping pong = HVD__PING__INIT;
        Hvd__Envelope reply = HVD__ENVELOPE__INIT;
        pong.sent_usec = ping->sent_usec;
        pong.reply = true;
        pong.epoch = d->epoch;
        reply.body_case = HVD__ENVELOPE__BODY_PING;
        reply.ping = &pong;
        (void) io_send(d, d->peer_sock, id, id_len, &reply);
        size_t iter = 0;
        void *v;
        uint64_t now = hvd_now_usec();
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                int64_t c = root_node_of(j, id, id_len);
                if (c >= 0) {
                        j->nodes[c].last_heard_usec = now;
                        if (ping->rtt_usec)
                                j->nodes[c].rtt_usec = ping->rtt_usec;
                }
        }
}

int64_t root_node_of(const job_t *j, const uint8_t *id, size_t id_len) {
        for (uint32_t c = 0; j->nodes && c < j->cross_size; c++)
                if (j->nodes[c].joined && !j->nodes[c].local && j->nodes[c].id_len == id_len &&
                    memcmp(j->nodes[c].id, id, id_len) == 0)
                        return c;
        return -1;
}

/* Root: the readiness host cross sent, its own and (a relay) its group's,
 * in the order it came. */
static void root_node_ready(hvd_daemon_t *d, job_t *j, uint32_t cross, const Hvd__NodeReady *nr) {
        if (j->state != JOB_RUNNING || !root_node_content(d, j, &cross, 1, nr))
                return;
        for (size_t i = 0; i < nr->n_relayed; i++) {
                const Hvd__RelayedReady *rr = nr->relayed[i];
                for (size_t k = 0; k < rr->n_hosts; k++) {
                        uint32_t h = rr->hosts[k];
                        if (h >= j->cross_size || !j->relay_via || !tree_under(j, h, cross)) {
                                job_abort(d, j, -1, HVD_EPROTO,
                                          "host %s relayed readiness for host %u, which is not in its relay group",
                                          job_host(j, cross), h);
                                return;
                        }
                }
                Hvd__NodeReady view = HVD__NODE_READY__INIT;
                hvd_wire_relayed_view(rr, &view);
                if (!root_node_content(d, j, rr->hosts, rr->n_hosts, &view))
                        return;
        }
        if (nr->n_relayed)
                d->metrics.relayed_received++;
}

/* A message from another daemon on the peer socket: a ping, a host
 * offered or joining, readiness for this daemon as a job's root or as its relay, or
 * an abort. Anything for a job this daemon is not the root of is answered
 * with an abort, so that the sender stops. */
static void handle_node_message(hvd_daemon_t *d, const uint8_t *id, size_t id_len, Hvd__Envelope *env) {
        if (env->body_case == HVD__ENVELOPE__BODY_PING) {
                answer_ping(d, id, id_len, env->ping);
                return;
        }
        if (env->body_case == HVD__ENVELOPE__BODY_NODE_JOIN) {
                join_node(d, id, id_len, env->node_join);
                return;
        }
        if (env->body_case == HVD__ENVELOPE__BODY_ENROLL) {
                elastic_enroll(d, id, id_len, env->enroll, true);
                return;
        }
        if (env->body_case == HVD__ENVELOPE__BODY_HOST_OFFER) {
                offer_receive(d, id, id_len, env->host_offer);
                return;
        }
        const char *job_id = env->body_case == HVD__ENVELOPE__BODY_NODE_READY ? env->node_ready->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_ABORT    ? env->abort->job_id
                                                                              : NULL;
        if (!job_id) {
                io_error(d, d->peer_sock, id, id_len, HVD_EPROTO, "unexpected message on the peer socket");
                return;
        }
        bool is_abort = env->body_case == HVD__ENVELOPE__BODY_ABORT;
        job_t *j = hvd_strmap_get(d->jobs, job_id, strlen(job_id));
        if (j && !is_abort && env->node_ready->relay_host) {
                /* for this daemon as the relay of the sender's group */
                Hvd__NodeReady *nr = TAKE_PTR(env->node_ready);
                env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
                relay_receive(d, j, id, id_len, nr);
                return;
        }
        if (!j || j->role != JOB_ROOT) {
                if (!is_abort) /* unknown or finished job: the sender stops */
                        io_refuse_peer(d, id, id_len, job_id, HVD_EABORTED, "job %s is unknown to the root daemon",
                                       job_id);
                return;
        }
        int64_t cross = root_node_of(j, id, id_len);
        if (cross < 0) {
                /* a node's connection is its identity: a message over a new
                 * one means the old one broke, and what was on it is lost */
                hvd_log_warning("job %s: message from a daemon that is not one of its nodes", j->id);
                if (!is_abort)
                        io_refuse_peer(d, id, id_len, job_id, HVD_EABORTED,
                                       "the root daemon of host %s no longer knows this daemon's connection (it "
                                       "broke and was made again: messages may be lost)",
                                       job_host(j, 0));
                return;
        }
        j->nodes[cross].last_heard_usec = hvd_now_usec();
        if (is_abort)
                job_abort(d, j, env->abort->lost_rank, env->abort->code ? env->abort->code : HVD_EABORTED,
                          "host %s: %s", job_host(j, (uint32_t) cross), env->abort->reason);
        else
                root_node_ready(d, j, (uint32_t) cross, env->node_ready);
}

void root_handle_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = io_recv(d->peer_sock, id, &id_len, &env, NULL, err, sizeof err, NULL, 0);
                if (r == 0)
                        return;
                io_count(d, HVD_METRICS_SOCK_PEER, r, env);
                if (r < 0) {
                        hvd_log_warning("peer socket: rejected message: %s", err);
                        io_error(d, d->peer_sock, id, id_len, r, "message rejected: %s", err);
                        continue;
                }
                handle_node_message(d, id, id_len, env);
                hvd_wire_free(&env);
        }
}

/* Counters and the throughput window after a schedule was taken. */
static void account_schedule(hvd_daemon_t *d, job_t *j, const hvd_negotiator_stats_t *before) {
        hvd_negotiator_stats_t after;
        hvd_negotiator_get_stats(j->neg, &after);
        uint64_t bytes = after.bytes_scheduled - before->bytes_scheduled;
        d->metrics.tensors_negotiated += after.tensors_negotiated - before->tensors_negotiated;
        d->metrics.fused_ops += after.fused_ops - before->fused_ops;
        d->metrics.schedules += after.schedules - before->schedules;
        d->metrics.bytes_scheduled += bytes;
        uint64_t sec = hvd_now_usec() / USEC_PER_SEC;
        size_t slot = sec % ELEMENTSOF(j->tp_sec);
        if (j->tp_sec[slot] != sec) {
                j->tp_sec[slot] = sec;
                j->tp_bytes[slot] = 0;
        }
        j->tp_bytes[slot] += bytes;
}

/* Root: a schedule with nothing but cached ids that repeats one kept by
 * key becomes "key K, seq N" (filled into rep; returns true); a new one is
 * kept under the next key (s->keep_key) and goes out whole. */
static bool schedule_key(hvd_daemon_t *d, job_t *j, Hvd__Schedule *s, Hvd__Schedule *rep) {
        if (s->n_errors || s->join_done_last_rank >= 0 || !s->n_ops)
                return false;
        for (size_t o = 0; o < s->n_ops; o++)
                for (size_t e = 0; e < s->ops[o]->n_entries; e++) {
                        const Hvd__Entry *en = s->ops[o]->entries[e];
                        if (en->id == HVD_NEGOTIATOR_NO_ID || en->name[0] || en->n_ready_ranks)
                                return false;
                }
        uint64_t seq = s->seq;
        s->seq = 0;
        size_t len = protobuf_c_message_get_packed_size(&s->base);
        uint8_t *body = malloc(len ? len : 1);
        if (body)
                protobuf_c_message_pack(&s->base, body);
        s->seq = seq;
        if (!body)
                return false;
        for (uint32_t k = 1; k <= HVD_WIRE_SCHEDULE_KEYS; k++)
                if (j->key_len[k] == len && j->key_body[k] && memcmp(j->key_body[k], body, len) == 0) {
                        free(body);
                        rep->seq = seq;
                        rep->repeat_key = k;
                        rep->join_done_last_rank = -1;
                        d->metrics.schedule_repeats++;
                        return true;
                }
        uint32_t k = j->next_key % HVD_WIRE_SCHEDULE_KEYS + 1;
        j->next_key = k;
        free(j->key_body[k]);
        j->key_body[k] = body;
        j->key_len[k] = len;
        s->keep_key = k;
        return false;
}

/* Root: a one-way ping to a peer daemon (a node of a running job, or one
 * offering its host). The peer socket is a
 * ROUTER with ZMQ_ROUTER_MANDATORY, so a node whose connection closed (its
 * daemon died, the connection was reset, or the transport heartbeat gave
 * up) is -EHOSTUNREACH at once instead of after peer_timeout of silence. A
 * reconnection would come with a new routing id, and what was sent over the
 * old one may be lost, so that too ends the node's part in the job. */
int root_ping_peer(hvd_daemon_t *d, const uint8_t *id, size_t id_len, uint64_t now) {
        Hvd__Ping ping = HVD__PING__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ping.sent_usec = now;
        ping.epoch = d->epoch;
        env.body_case = HVD__ENVELOPE__BODY_PING;
        env.ping = &ping;
        return io_send(d, d->peer_sock, id, id_len, &env);
}

/* Before sleep: the schedule of what became ready goes to the local ranks
 * and (root) to every other host; a repeat of a kept one goes as its key. */
void root_send_schedules(hvd_daemon_t *d, job_t *j) {
        /* the autotuner's change on one host with the fast path, where no
         * schedule may come for a long time: a schedule of its own */
        bool tune = autotune_wants_schedule(j);
        if (j->state != JOB_RUNNING || (!hvd_negotiator_has_work(j->neg) && !tune))
                return;
        Hvd__Schedule *s = NULL;
        hvd_negotiator_stats_t before;
        hvd_negotiator_get_stats(j->neg, &before);
        int r = hvd_negotiator_take_schedule(j->neg, &s);
        account_schedule(d, j, &before);
        if (r == 0 && tune)
                r = hvd_negotiator_take_empty_schedule(j->neg, &s) < 0 ? -ENOMEM : 1;
        if (r < 0) {
                job_abort(d, j, -1, r, "cannot build a schedule: %s", hvd_strerror(r));
                return;
        }
        if (r == 0)
                return;
        hvd_negotiator_stats_t after;
        hvd_negotiator_get_stats(j->neg, &after);
        bool tuned = autotune_schedule(d, j, s, after.bytes_scheduled - before.bytes_scheduled);
        Hvd__Schedule rep = HVD__SCHEDULE__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = !tuned && schedule_key(d, j, s, &rep) ? &rep : s;
        /* the other hosts first: their ranks are a daemon's hand-off
         * further away than this host's */
        if (j->cross_size > 1) {
                Hvd__JobSchedule js = HVD__JOB_SCHEDULE__INIT;
                Hvd__Envelope jenv = HVD__ENVELOPE__INIT;
                js.job_id = j->id;
                js.schedule = env.schedule;
                jenv.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                jenv.job_schedule = &js;
                io_send_nodes(d, j, &jenv, true);
        }
        worker_send_all(d, j, &env, true);
        s->tuning = NULL; /* the autotuner's */
        hvd_negotiator_schedule_free(&s);
}

/* Housekeeping: the stall inspector, while tensors wait. */
uint64_t root_check_stalls(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        return stall_inspect(d, j, now) ? tick : UINT64_MAX;
}

/* Housekeeping, root: a one-way ping to every other host each heartbeat
 * interval (a closed connection shows at once), and a host silent past
 * peer_timeout ends the job. */
uint64_t root_probe_nodes(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        if (j->state != JOB_RUNNING || j->role != JOB_ROOT)
                return UINT64_MAX;
        bool probe = now - j->last_probe_usec >= daemon_ping_usec(d);
        if (probe)
                j->last_probe_usec = now;
        for (uint32_t c = 0; c < j->cross_size; c++) {
                node_t *nd = &j->nodes[c];
                if (nd->local)
                        continue;
                if (probe && root_ping_peer(d, nd->id, nd->id_len, now) == -EHOSTUNREACH) {
                        elastic_host_lost(d, j, c);
                        char ranks[256];
                        job_host_ranks(j, c, ranks, sizeof ranks);
                        job_abort(d, j, -1, HVD_EABORTED,
                                  "lost contact with host %s (ranks [%s]): the connection to its daemon "
                                  "closed (daemon gone or connection reset)",
                                  job_host(j, c), ranks);
                        break;
                }
                if (now - nd->last_heard_usec <= d->cfg.peer_timeout_usec)
                        continue;
                char ranks[256];
                elastic_host_lost(d, j, c);
                job_host_ranks(j, c, ranks, sizeof ranks);
                job_abort(d, j, -1, HVD_EABORTED,
                          "lost contact with host %s (ranks [%s]): its daemon was silent for %.1f s", job_host(j, c),
                          ranks, (double) (now - nd->last_heard_usec) / 1e6);
                break;
        }
        return tick;
}
