/* join.c — how a job comes together: local hellos, then a host's join to
 * its root, the root's welcome of every host (with the relay tree), the
 * welcome of the local workers, and the start timeout naming what never
 * came. A job leaves JOB_JOINING only through join_welcome_local. */
#include "config.h"

#include "internal.h"

/* The heartbeat settings a job starts with: the timeout is at least two
 * intervals (0 = workers are never declared lost for silence). */
static void heartbeat_settings(const hvd_daemon_t *d, uint64_t *interval, uint64_t *timeout) {
        *interval = d->cfg.heartbeat_interval_usec;
        *timeout = d->cfg.heartbeat_timeout_usec;
        if (*timeout && *timeout < 2 * *interval)
                *timeout = 2 * *interval;
        if (!*timeout)
                *interval = 0;
}

static size_t list_missing(const job_t *j, char *buf, size_t len) {
        size_t o = 0;
        buf[0] = 0;
        for (uint32_t r = 0; r < j->size && o + 16 < len; r++) {
                bool have = j->table[r].known || j->ranks[r];
                if (!have)
                        o += (size_t) snprintf(buf + o, len - o, "%s%u", o ? ", " : "", r);
        }
        return o;
}

/* Welcomes this node's workers: the job is complete everywhere. */
void join_welcome_local(hvd_daemon_t *d, job_t *j) {
        hvd_assert(j->state == JOB_JOINING);
        rank_infos_t ri;
        if (job_rank_infos(j, false, &ri) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory while welcoming job %s", j->id);
                return;
        }
        uint64_t slot = j->fusion_threshold;
        if (slot < (UINT64_C(4) << 20))
                slot = UINT64_C(4) << 20;
        if (slot > (UINT64_C(256) << 20))
                slot = UINT64_C(256) << 20;
        heartbeat_settings(d, &j->hb_interval_usec, &j->hb_timeout_usec);
        uint64_t now = hvd_now_usec();
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                if (!w)
                        continue;
                Hvd__Welcome wel = HVD__WELCOME__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                wel.epoch = d->epoch;
                wel.rank = r;
                wel.size = j->size;
                wel.local_rank = w->local_rank;
                wel.local_size = j->local_size;
                wel.cross_rank = j->cross_rank;
                wel.cross_size = j->cross_size;
                wel.shm_name = j->shm_name;
                wel.slot_bytes = slot;
                wel.fusion_threshold = j->fusion_threshold;
                wel.cycle_time_usec = j->cycle_time_usec;
                wel.collective_timeout_usec = d->cfg.collective_timeout_usec;
                wel.n_ranks = ri.n;
                wel.ranks = ri.ptrs;
                wel.nccl_id.data = j->nccl_id;
                wel.nccl_id.len = j->nccl_id_len;
                wel.daemon_pid = (uint32_t) getpid();
                wel.heartbeat_interval_usec = j->hb_interval_usec;
                wel.heartbeat_timeout_usec = j->hb_timeout_usec;
                w->last_heard_usec = now;
                wel.peer_timeout_usec = j->cross_size > 1 ? d->cfg.peer_timeout_usec : 0;
                wel.ring_checksum = j->ring_checksum;
                wel.max_message_bytes = d->cfg.max_message_bytes;
                env.body_case = HVD__ENVELOPE__BODY_WELCOME;
                env.welcome = &wel;
                io_send_worker(d, w, &env);
        }
        rank_infos_free(&ri);
        d->next_housekeeping = 0; /* arms the heartbeat check */
        j->state = JOB_RUNNING;
        hvd_log_notice("job %s running: %u ranks on %u host%s, %u here%s%s", j->id, j->size, j->cross_size,
                       j->cross_size == 1 ? "" : "s", j->local_size, j->launcher[0] ? ", placed by " : "", j->launcher);
}

static void root_complete(hvd_daemon_t *d, job_t *j) {
        rank_infos_t ri = { 0 };
        char **eps = NULL;
        if (root_set_nodes(j) < 0 || tree_assign(d, j) < 0 ||
            (j->relay_via && !(eps = calloc(j->cross_size, sizeof *eps))) || job_rank_infos(j, false, &ri) < 0) {
                free(eps);
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        Hvd__NodeWelcome nw = HVD__NODE_WELCOME__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        if (j->relay_via) {
                for (uint32_t c = 0; c < j->cross_size; c++)
                        eps[c] = "";
                for (uint32_t c = 1; c < j->cross_size; c++)
                        if (j->relay_via[c]) /* c's relay, or c itself relaying under the root */
                                eps[j->relay_via[c]] = j->nodes[j->relay_via[c]].endpoint;
                nw.n_relay_via = nw.n_relay_endpoint = j->cross_size;
                nw.relay_via = j->relay_via;
                nw.relay_endpoint = eps;
        }
        nw.job_id = j->id;
        nw.n_ranks = ri.n;
        nw.ranks = ri.ptrs;
        nw.epoch = d->epoch;
        nw.fusion_threshold = j->fusion_threshold;
        nw.cycle_time_usec = j->cycle_time_usec;
        nw.ring_checksum = j->ring_checksum;
        nw.nccl_id.data = j->nccl_id;
        nw.nccl_id.len = j->nccl_id_len;
        env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
        env.node_welcome = &nw;
        io_send_nodes(d, j, &env, false);
        rank_infos_free(&ri);
        free(eps);
        join_welcome_local(d, j);
}

int join_node_joined(hvd_daemon_t *d, job_t *j, uint32_t cross_rank, bool local, const uint8_t *id, size_t id_len,
                     Hvd__RankInfo *const *ri, size_t n, const char *endpoint) {
        node_t *nd = &j->nodes[cross_rank];
        char err[512];
        if (nd->joined) {
                snprintf(err, sizeof err, "host %u (%s) joined twice", cross_rank, job_host(j, cross_rank));
                job_abort(d, j, -1, HVD_EDUPLICATE, "%s", err);
                return HVD_EDUPLICATE;
        }
        int r = job_table_add(j, cross_rank, ri, n, err, sizeof err);
        if (r < 0) {
                job_abort(d, j, -1, r, "%s", err);
                return r;
        }
        nd->joined = true;
        nd->local = local;
        nd->n_ranks = (uint32_t) n;
        nd->last_heard_usec = hvd_now_usec();
        if (!local) {
                memcpy(nd->id, id, id_len);
                nd->id_len = id_len;
                if (endpoint && endpoint[0] && !(nd->endpoint = strdup(endpoint))) {
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return -ENOMEM;
                }
        }
        j->n_nodes_joined++;
        hvd_log_info("job %s: host %u (%s) joined with %zu ranks, %u of %u hosts", j->id, cross_rank,
                     job_host(j, cross_rank), n, j->n_nodes_joined, j->cross_size);
        if (j->n_nodes_joined == j->cross_size)
                root_complete(d, j);
        return 0;
}

/* Where the other daemons of job j reach this one's peer socket, for a
 * relay: the bound endpoint, with a wildcard address replaced by this
 * host's name in the job; "" when there is none (or with CURVE, whose
 * server keys are listed for root endpoints only). */
static char *advertised_endpoint(hvd_daemon_t *d, const job_t *j, char *buf, size_t len) {
        buf[0] = 0;
        if (!d->peer_sock || hvd_zap_curve(d->zap) || strncmp(d->peer_ep, "tcp://", 6) != 0)
                return buf;
        const char *hostpart = d->peer_ep + 6, *port = strrchr(hostpart, ':');
        if (!port)
                return buf;
        size_t hl = (size_t) (port - hostpart);
        bool wild = (hl == 1 && hostpart[0] == '*') || (hl == 7 && memcmp(hostpart, "0.0.0.0", 7) == 0) ||
                    (hl == 4 && memcmp(hostpart, "[::]", 4) == 0);
        if (!wild)
                snprintf(buf, len, "%s", d->peer_ep);
        else if (strcmp(port + 1, "*") != 0)
                snprintf(buf, len, "tcp://%s%s", job_host(j, j->cross_rank), port);
        return buf;
}

/* All local ranks said hello. */
static void local_complete(hvd_daemon_t *d, job_t *j) {
        rank_infos_t ri;
        if (job_rank_infos(j, true, &ri) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        /* small schedules through the board when every local rank reads it */
        j->board_sched = j->local_size > 1 && j->cross_size > 1;
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && !j->ranks[r]->board)
                        j->board_sched = false;
        if (j->cross_size <= 1) {
                char err[512];
                if (job_table_add(j, 0, ri.ptrs, ri.n, err, sizeof err) < 0)
                        job_abort(d, j, -1, HVD_EDUPLICATE, "%s", err);
                else
                        join_welcome_local(d, j);
        } else if (j->role == JOB_ROOT)
                join_node_joined(d, j, j->cross_rank, true, NULL, 0, ri.ptrs, ri.n, NULL);
        else {
                Hvd__NodeJoin nj = HVD__NODE_JOIN__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                nj.job_id = j->id;
                nj.secret.data = j->secret;
                nj.secret.len = j->secret_len;
                nj.host = (char *) job_host(j, j->cross_rank);
                nj.cross_rank = j->cross_rank;
                nj.cross_size = j->cross_size;
                nj.world_size = j->size;
                nj.n_ranks = ri.n;
                nj.ranks = ri.ptrs;
                nj.fusion_threshold = (int64_t) j->fusion_threshold;
                nj.cycle_time_usec = j->cycle_time_usec;
                nj.n_hosts = j->cross_size;
                nj.hosts = j->hosts;
                nj.nccl_id.data = j->nccl_id;
                nj.nccl_id.len = j->nccl_id_len;
                nj.stall_check_usec = j->stall_check_usec;
                nj.stall_shutdown_usec = j->stall_shutdown_usec;
                nj.ring_checksum = j->ring_checksum;
                char ep[sizeof d->peer_ep + HVD_WIRE_MAX_HOST];
                nj.peer_endpoint = advertised_endpoint(d, j, ep, sizeof ep);
                env.body_case = HVD__ENVELOPE__BODY_NODE_JOIN;
                env.node_join = &nj;
                uplink_send_root(d, j, &env);
                j->joined_root = true;
                hvd_log_info("job %s: all %u local ranks joined; told the root daemon at %s", j->id, j->local_size,
                             j->root->endpoint);
        }
        rank_infos_free(&ri);
}

/* A hello for job j, which ran and whose rank h->rank has left: the job's
 * ranks start over (hvd_shutdown, then hvd_init). The old incarnation
 * lingers under another name until its workers are gone. Returns false
 * when out of memory (j is freed). */
static bool job_start_over(hvd_daemon_t *d, job_t *j) {
        char old[HVD_WIRE_MAX_JOB_ID + 1];
        snprintf(old, sizeof old, "%s", j->id);
        hvd_strmap_remove(d->jobs, old, strlen(old));
        snprintf(j->id, sizeof j->id, "%.100s~%" PRIu64, old, ++d->job_seq);
        if (hvd_strmap_put(d->jobs, j->id, strlen(j->id), j) < 0) {
                job_free(d, j);
                return false;
        }
        hvd_log_info("job %s starts over; the previous run is now %s", old, j->id);
        return true;
}

/* Whether the hello of a rank of existing job j may join it: the right
 * secret and uid, a job still joining and not full, the same shape, a
 * rank not taken. Else the worker is told why. */
static bool hello_fits(hvd_daemon_t *d, job_t *j, const uint8_t *id, size_t id_len, const Hvd__Hello *h, uid_t uid) {
        uint32_t cross_size = h->cross_size ? h->cross_size : 1;
        if (j->local_size == UINT32_MAX && j->n_hello == 0 && h->local_size <= j->size)
                j->local_size = h->local_size; /* root job started by a remote node's join */
        if (!job_secret_is(j, h->secret.data, h->secret.len)) {
                hvd_log_warning("job %s: rank %u (pid %u) presented a wrong job secret", j->id, h->rank, h->pid);
                io_error(d, d->worker_sock, id, id_len, HVD_EDENIED,
                         "job %s: wrong job secret (HVD_JOB_SECRET does not match the job's)", j->id);
                return false;
        }
        if (j->owned && uid != j->owner_uid) {
                hvd_log_warning("job %s: rank %u (pid %u) of uid %u refused: the job belongs to uid %u", j->id, h->rank,
                                h->pid, (unsigned) uid, (unsigned) j->owner_uid);
                io_error(d, d->worker_sock, id, id_len, HVD_EDENIED,
                         "job %s belongs to uid %u: a process of uid %u cannot join it", j->id, (unsigned) j->owner_uid,
                         (unsigned) uid);
                return false;
        }
        if (j->state == JOB_ABORTED) {
                io_error(d, d->worker_sock, id, id_len, HVD_EABORTED, "job %s was aborted before rank %u joined: %s",
                         j->id, h->rank, j->abort_reason);
                return false;
        }
        if (j->state != JOB_JOINING || j->n_hello >= j->local_size) {
                io_error(d, d->worker_sock, id, id_len, HVD_EDENIED, "job %s is %s: rank %u cannot join any more",
                         j->id, job_state_names[j->state], h->rank);
                return false;
        }
        if (h->world_size != j->size || h->local_size != j->local_size || cross_size != j->cross_size ||
            (cross_size > 1 && h->cross_rank != j->cross_rank)) {
                io_error(d, d->worker_sock, id, id_len, HVD_EMISMATCH,
                         "job %s: rank %u says world size %u, %u local ranks, host %u of %u; the job has "
                         "%u, %u, host %u of %u",
                         j->id, h->rank, h->world_size, h->local_size, h->cross_rank, cross_size, j->size,
                         j->local_size, j->cross_rank, j->cross_size);
                return false;
        }
        if (j->ranks[h->rank]) {
                io_error(d, d->worker_sock, id, id_len, HVD_EDUPLICATE, "job %s: rank %u has already joined (pid %d)",
                         j->id, h->rank, (int) j->ranks[h->rank]->pid);
                return false;
        }
        return true;
}

/* A local worker's hello: it joins its job (created by the first hello of
 * this host, or by a remote host's join at the root), and the job's join
 * goes on once every local rank said hello. */
void join_hello(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__Hello *h, uid_t uid) {
        if (hvd_strmap_get(d->workers, id, id_len)) {
                io_error(d, d->worker_sock, id, id_len, HVD_EPROTO, "hello sent twice on one connection");
                return;
        }
        uint32_t cross_size = h->cross_size ? h->cross_size : 1;
        if (cross_size == 1 && h->local_size != h->world_size) {
                io_error(d, d->worker_sock, id, id_len, HVD_EPROTO,
                         "job %s: world size %u but %u ranks on this host, and no host list (HVD_CROSS_SIZE)",
                         h->job_id, h->world_size, h->local_size);
                return;
        }
        if (h->world_size > d->cfg.max_ranks_per_job) {
                io_error(d, d->worker_sock, id, id_len, -E2BIG,
                         "job %s: world size %u exceeds this daemon's max_ranks_per_job (%u)", h->job_id, h->world_size,
                         d->cfg.max_ranks_per_job);
                return;
        }
        job_t *j = hvd_strmap_get(d->jobs, h->job_id, strlen(h->job_id));
        if (j && j->state != JOB_JOINING && h->rank < j->size && j->ranks[h->rank] &&
            (j->ranks[h->rank]->goodbye || j->ranks[h->rank]->exited) && (!j->owned || j->owner_uid == uid) &&
            job_secret_is(j, h->secret.data, h->secret.len)) {
                if (!job_start_over(d, j)) {
                        io_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                        return;
                }
                j = NULL;
        }
        const tomb_t *t = j ? NULL : job_tomb_find(d, h);
        if (t) {
                io_error(d, d->worker_sock, id, id_len, HVD_EABORTED, "job %s was aborted before rank %u joined: %s",
                         t->id, h->rank, t->reason);
                return;
        }
        if (!j) {
                char err[512];
                job_params_t jp = {
                        .job_id = h->job_id,
                        .secret = h->secret.data,
                        .secret_len = h->secret.len,
                        .world_size = h->world_size,
                        .local_size = h->local_size,
                        .cross_rank = h->cross_rank,
                        .cross_size = h->cross_size,
                        .fusion_threshold = h->fusion_threshold,
                        .cycle_time_usec = h->cycle_time_usec,
                        .hosts = h->hosts,
                        .n_hosts = h->n_hosts,
                        .root_peer = h->root_peer,
                        .launcher = h->launcher,
                        .stall_check_usec = h->stall_check_usec,
                        .stall_shutdown_usec = h->stall_shutdown_usec,
                };
                j = job_create(d, &jp, err, sizeof err);
                if (!j) {
                        io_error(d, d->worker_sock, id, id_len, -EINVAL, "%s", err);
                        return;
                }
        } else if (!hello_fits(d, j, id, id_len, h, uid))
                return;
        worker_t *w = worker_new(d, j, id, id_len, h);
        if (!w) {
                io_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                return;
        }
        job_set_nccl_id(j, &h->nccl_id);
        if (!j->owned && uid != (uid_t) -1) {
                j->owner_uid = uid;
                j->owned = true;
        }
        j->ranks[h->rank] = w;
        if (h->timeline)
                hvd_negotiator_set_timeline(j->neg, true);
        if (h->ring_checksum)
                j->ring_checksum = true;
        if (h->autotune)
                autotune_hello(d, j, h->autotune, h->rank);
        j->n_hello++;
        j->n_live++;
        d->metrics.workers_connected++;
        hvd_log_info("job %s: rank %u joined (pid %d, uid %d), %u of %u here", j->id, w->rank, (int) w->pid, (int) uid,
                     j->n_hello, j->local_size);
        if (j->n_hello == j->local_size)
                local_complete(d, j);
}

static void start_timeout(hvd_daemon_t *d, job_t *j) {
        char missing[512], hosts[512] = "";
        list_missing(j, missing, sizeof missing);
        if (j->role == JOB_ROOT) {
                size_t o = 0;
                for (uint32_t c = 0; c < j->cross_size && o + 16 < sizeof hosts; c++)
                        if (!j->nodes[c].joined)
                                o += (size_t) snprintf(hosts + o, sizeof hosts - o, "%s%s", o ? ", " : "",
                                                       job_host(j, c));
                job_abort(d, j, -1, HVD_ETIMEOUT,
                          "start timeout: %u of %u hosts joined within %.1f s; missing hosts [%s], missing ranks [%s]",
                          j->n_nodes_joined, j->cross_size, (double) d->cfg.start_timeout_usec / 1e6, hosts, missing);
        } else if (j->cross_size > 1 && j->n_hello == j->local_size)
                job_abort_ex(
                        d, j, true, -1, HVD_ETIMEOUT,
                        "start timeout: the root daemon at %s (host %s) did not complete the job's join within "
                        "%.1f s%s",
                        j->root ? j->root->endpoint : "?", job_host(j, 0), (double) d->cfg.start_timeout_usec / 1e6,
                        hvd_zap_curve(d->zap) && j->root && !j->root->rtt_usec
                                ? " (it never answered: is the CURVE key listed for it its public key, and does it "
                                  "list ours?)"
                                : "");
        else
                job_abort(d, j, -1, HVD_ETIMEOUT,
                          "start timeout: %u of %u ranks of host %s joined within %.1f s; missing ranks [%s]",
                          j->n_hello, j->local_size, job_host(j, j->cross_rank),
                          (double) d->cfg.start_timeout_usec / 1e6, missing);
}

/* Housekeeping: a job still joining past start_timeout (a host's daemon
 * waits 2 s more, so that the root's fuller message comes first) is
 * aborted, naming what is missing. */
uint64_t join_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        if (j->state != JOB_JOINING)
                return UINT64_MAX;
        uint64_t limit = d->cfg.start_timeout_usec + (j->role == JOB_MEMBER ? 2 * USEC_PER_SEC : 0);
        if (now - j->created_usec <= limit)
                return tick;
        start_timeout(d, j);
        return UINT64_MAX;
}

/* Root: a host's NodeJoin. The first one of a job creates it here, its
 * local size unknown until the root's own ranks say hello. A wrong secret,
 * or a host that does not fit the job, is refused with an abort. */
void join_node(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__NodeJoin *nj) {
        char reason[1024];
        job_t *j = hvd_strmap_get(d->jobs, nj->job_id, strlen(nj->job_id));
        if (!j) {
                job_params_t jp = {
                        .job_id = nj->job_id,
                        .secret = nj->secret.data,
                        .secret_len = nj->secret.len,
                        .world_size = nj->world_size,
                        .local_size = 0,
                        .cross_rank = 0,
                        .cross_size = nj->cross_size,
                        .fusion_threshold = nj->fusion_threshold,
                        .cycle_time_usec = nj->cycle_time_usec,
                        .hosts = nj->hosts,
                        .n_hosts = nj->n_hosts,
                        .stall_check_usec = nj->stall_check_usec,
                        .stall_shutdown_usec = nj->stall_shutdown_usec,
                };
                j = job_create(d, &jp, reason, sizeof reason);
                if (!j) {
                        io_refuse_peer(d, id, id_len, nj->job_id, HVD_EDENIED, "%s", reason);
                        return;
                }
                j->local_size = UINT32_MAX; /* set by the first local hello */
        }
        if (!job_secret_is(j, nj->secret.data, nj->secret.len)) {
                hvd_log_warning("job %s: host %s presented a wrong job secret", j->id, nj->host);
                io_refuse_peer(d, id, id_len, nj->job_id, HVD_EDENIED, "job %s: host %s: wrong job secret", j->id,
                               nj->host);
                return;
        }
        if (j->role != JOB_ROOT || nj->world_size != j->size || nj->cross_size != j->cross_size ||
            nj->cross_rank == 0 || j->state != JOB_JOINING) {
                io_refuse_peer(d, id, id_len, nj->job_id, HVD_EDENIED,
                               "job %s: host %s (host %u of %u, %u ranks) does not fit the job here (%s, root: %s, "
                               "%u ranks on %u hosts)",
                               j->id, nj->host, nj->cross_rank, nj->cross_size, nj->world_size,
                               job_state_names[j->state], j->role == JOB_ROOT ? "yes" : "no", j->size, j->cross_size);
                return;
        }
        job_set_nccl_id(j, &nj->nccl_id);
        if (nj->ring_checksum)
                j->ring_checksum = true;
        join_node_joined(d, j, nj->cross_rank, false, id, id_len, nj->ranks, nj->n_ranks, nj->peer_endpoint);
}

/* Not root: the root's welcome, with the rank table and (large jobs) the
 * relay tree. A root that restarted meanwhile, or a table that does not
 * fit, aborts the job. */
void join_node_welcome(hvd_daemon_t *d, job_t *j, const peer_t *p, const Hvd__NodeWelcome *nw) {
        if (j->root_epoch && nw->epoch && nw->epoch != j->root_epoch) {
                job_abort_ex(d, j, true, -1, HVD_EABORTED,
                             "host %s: its root daemon at %s restarted during the join (epoch %016" PRIx64
                             ", was %016" PRIx64 ")",
                             job_host(j, 0), p->endpoint, nw->epoch, j->root_epoch);
                return;
        }
        if (nw->epoch)
                j->root_epoch = nw->epoch;
        if (j->state != JOB_JOINING || nw->n_ranks != j->size) {
                job_abort(d, j, -1, HVD_EPROTO, "root daemon sent a rank table of %zu ranks for %u", nw->n_ranks,
                          j->size);
                return;
        }
        char err[512];
        if (job_table_add(j, -1, nw->ranks, nw->n_ranks, err, sizeof err) < 0) {
                job_abort(d, j, -1, HVD_EPROTO, "root daemon's rank table: %s", err);
                return;
        }
        for (uint32_t r = 0; r < j->size; r++)
                if (!j->table[r].known) {
                        job_abort(d, j, -1, HVD_EPROTO, "root daemon's rank table lacks rank %u", r);
                        return;
                }
        j->fusion_threshold = nw->fusion_threshold;
        j->cycle_time_usec = nw->cycle_time_usec;
        j->ring_checksum = nw->ring_checksum;
        job_set_nccl_id(j, &nw->nccl_id);
        if (!relay_setup(d, j, nw))
                return;
        join_welcome_local(d, j);
        relay_replay_early(d, j);
}
