/* control.c — what hvdctl asks on the control socket: status (peers,
 * configuration, jobs, ranks), metrics, the log level, a job's timeline.
 * Replies are built from the daemon's state and sent at once; an action on
 * a job is its owner's, root's or the daemon user's. */
#include "config.h"

#include "internal.h"

/* Rank 0 started or stopped its timeline (on its own, or answering
 * timeline_request): the root records readiness times only while it is on,
 * and a waiting hvdctl gets the answer. */
void control_timeline_answer(hvd_daemon_t *d, worker_t *w, const Hvd__TimelineControl *tc) {
        job_t *j = w->job;
        if (w->rank != 0)
                return;
        hvd_negotiator_set_timeline(j->neg, tc->start);
        if (!j->tl_req_len)
                return;
        Hvd__TimelineControl r = *tc;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        r.job_id = j->id;
        env.body_case = HVD__ENVELOPE__BODY_TIMELINE_CONTROL;
        env.timeline_control = &r;
        (void) io_send(d, d->control_sock, j->tl_req_id, j->tl_req_len, &env);
        j->tl_req_len = 0;
}

/* hvdctl timeline JOB start FILE / stop: forwarded to the job's rank 0,
 * which must run on this node. One request per job at a time. */
static void timeline_request(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__TimelineControl *q,
                             uid_t caller) {
        job_t *j = q->job_id[0] ? hvd_strmap_get(d->jobs, q->job_id, strlen(q->job_id)) : NULL;
        if (!j) {
                io_error(d, d->control_sock, id, id_len, -ENOENT, "no job '%s' here (see hvdctl jobs)", q->job_id);
                return;
        }
        /* an action on a job: its owner (the uid of its workers), root or the
         * daemon's own user; a caller whose uid is unknown is refused */
        if (caller == (uid_t) -1 || (caller != 0 && caller != getuid() && !(j->owned && caller == j->owner_uid))) {
                char who[32] = "an unknown uid";
                if (caller != (uid_t) -1)
                        snprintf(who, sizeof who, "uid %u", (unsigned) caller);
                if (j->owned)
                        io_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                 "permission denied: job %s belongs to uid %u; only its owner or root may start or "
                                 "stop its timeline (the request came from %s)",
                                 j->id, (unsigned) j->owner_uid, who);
                else
                        io_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                 "permission denied: job %s has no worker here yet; only root may start or stop its "
                                 "timeline (the request came from %s)",
                                 j->id, who);
                return;
        }
        worker_t *w = j->ranks[0];
        if (j->state != JOB_RUNNING || (w && (w->goodbye || w->exited))) {
                io_error(d, d->control_sock, id, id_len, -EAGAIN, "job %s is %s: no timeline can start or stop", j->id,
                         w && (w->goodbye || w->exited) ? "ending" : job_state_names[j->state]);
                return;
        }
        if (!w) {
                io_error(d, d->control_sock, id, id_len, -EREMOTE,
                         "job %s: rank 0 runs on host %s, which records the timeline; send the command to the "
                         "hvd-coordinatord there",
                         j->id, job_host(j, 0));
                return;
        }
        uint64_t now = hvd_now_usec();
        if (j->tl_req_len && now < j->tl_req_deadline) {
                io_error(d, d->control_sock, id, id_len, -EBUSY,
                         "job %s: another timeline request is waiting for rank 0", j->id);
                return;
        }
        memcpy(j->tl_req_id, id, id_len);
        j->tl_req_len = id_len;
        j->tl_req_deadline = now + 30 * USEC_PER_SEC;
        Hvd__TimelineControl f = *q;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        f.reply = false;
        env.body_case = HVD__ENVELOPE__BODY_TIMELINE_CONTROL;
        env.timeline_control = &f;
        io_send_worker(d, w, &env);
}

/* Bytes per second over the last THROUGHPUT_SECS whole seconds and the
 * current one, or over the job's life when it is younger. */
static double job_throughput(const job_t *j, uint64_t now) {
        uint64_t sec = now / USEC_PER_SEC, sum = 0;
        for (size_t i = 0; i < ELEMENTSOF(j->tp_sec); i++)
                if (j->tp_sec[i] + THROUGHPUT_SECS >= sec && j->tp_sec[i] <= sec)
                        sum += j->tp_bytes[i];
        double window = (double) (now % USEC_PER_SEC) / 1e6 + THROUGHPUT_SECS;
        double age = (double) (now - j->created_usec) / 1e6;
        if (age < window)
                window = age;
        return window > 0 ? (double) sum / window : 0;
}

/* Everything a Status reply points to, freed together after the send. */
typedef struct status_mem {
        Hvd__PeerStatus *ps;
        Hvd__PeerStatus **pp;
        Hvd__JobStatus *js;
        Hvd__JobStatus **jp;
        Hvd__ElasticStatus *es; /* [job] */
        rank_infos_t *ri;       /* [job]: its local ranks */
        Hvd__RankStatus **rs;   /* [job] */
        Hvd__RankStatus ***rsp; /* [job] */
        Hvd__ConfigItem *ci;
        Hvd__ConfigItem **cp;
        Hvd__HostOffer **offers;
        char (*values)[PATH_MAX + 16];
        size_t n_jobs;
} status_mem_t;

static void status_mem_free(status_mem_t *m) {
        for (size_t i = 0; i < m->n_jobs; i++) {
                if (m->ri)
                        rank_infos_free(&m->ri[i]);
                free(m->rs ? m->rs[i] : NULL);
                free(m->rsp ? m->rsp[i] : NULL);
        }
        free(m->ps);
        free(m->pp);
        free(m->js);
        free(m->jp);
        free(m->es);
        free(m->ri);
        free(m->rs);
        free(m->rsp);
        free(m->ci);
        free(m->cp);
        free(m->values);
        free(m->offers);
}

/* Peers: the roots this daemon reports to ("out"), and the nodes that
 * report to it as the root of their jobs ("in", one per connection). */
static int status_peers(hvd_daemon_t *d, uint64_t now, Hvd__Status *st, status_mem_t *m) {
        size_t cap = hvd_strmap_size(d->peers), iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (j->role == JOB_ROOT && j->nodes)
                        cap += j->cross_size;
        }
        m->ps = calloc(cap ? cap : 1, sizeof *m->ps);
        m->pp = calloc(cap ? cap : 1, sizeof *m->pp);
        if (!m->ps || !m->pp)
                return -ENOMEM;
        size_t k = 0;
        iter = 0;
        while (hvd_strmap_next(d->peers, &iter, NULL, NULL, &v)) {
                peer_t *p = v;
                Hvd__PeerStatus *ps = &m->ps[k];
                hvd__peer_status__init(ps);
                ps->endpoint = p->endpoint;
                ps->state = (char *) (p->lost ? "lost" : p->n_jobs ? "connected" : "idle");
                ps->last_heard_usec = now - p->last_heard_usec;
                ps->rtt_usec = p->rtt_usec;
                ps->direction = (char *) "out";
                ps->host = (char *) "";
                ps->jobs = p->n_jobs;
                m->pp[k] = ps;
                k++;
        }
        size_t n_out = k;
        iter = 0;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                for (uint32_t c = 0; j->role == JOB_ROOT && j->nodes && c < j->cross_size; c++) {
                        node_t *nd = &j->nodes[c];
                        if (!nd->joined || nd->local)
                                continue;
                        /* one entry per node connection, shared by its jobs */
                        Hvd__PeerStatus *ps = NULL;
                        for (size_t i = n_out; i < k && !ps; i++)
                                if (strcmp(m->ps[i].host, job_host(j, c)) == 0)
                                        ps = &m->ps[i];
                        uint64_t age = now - nd->last_heard_usec;
                        if (ps) {
                                ps->jobs++;
                                if (age < ps->last_heard_usec) {
                                        ps->last_heard_usec = age;
                                        ps->rtt_usec = nd->rtt_usec;
                                }
                                continue;
                        }
                        ps = &m->ps[k];
                        hvd__peer_status__init(ps);
                        ps->endpoint = (char *) "";
                        ps->host = (char *) job_host(j, c);
                        ps->direction = (char *) "in";
                        ps->last_heard_usec = age;
                        ps->rtt_usec = nd->rtt_usec;
                        ps->jobs = 1;
                        m->pp[k] = ps;
                        k++;
                }
        }
        for (size_t i = n_out; i < k; i++)
                m->ps[i].state =
                        (char *) (m->ps[i].last_heard_usec > d->cfg.peer_timeout_usec ? "silent" : "connected");
        st->n_peers = k;
        st->peers = m->pp;
        return 0;
}

static int status_config(hvd_daemon_t *d, Hvd__Status *st, status_mem_t *m) {
        size_t n = 0;
        const char *key;
        char tmp[8];
        while (hvd_daemon_config_get(&d->cfg, n, &key, tmp, sizeof tmp))
                n++;
        m->ci = calloc(n ? n : 1, sizeof *m->ci);
        m->cp = calloc(n ? n : 1, sizeof *m->cp);
        m->values = calloc(n ? n : 1, sizeof *m->values);
        if (!m->ci || !m->cp || !m->values)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                hvd__config_item__init(&m->ci[i]);
                hvd_daemon_config_get(&d->cfg, i, &key, m->values[i], sizeof m->values[i]);
                if (strcmp(key, "log_level") == 0) /* hvdctl log-level may have changed it */
                        snprintf(m->values[i], sizeof m->values[i], "%s", hvd_log_level_to_string(hvd_log_max_level));
                m->ci[i].key = (char *) key;
                m->ci[i].value = m->values[i];
                m->cp[i] = &m->ci[i];
        }
        st->n_config = n;
        st->config = m->cp;
        return 0;
}

static const char *rank_state(const job_t *j, uint32_t r) {
        const worker_t *w = j->ranks[r];
        if (w)
                return w->exited ? "exited" : w->goodbye ? "departed" : job_state_names[j->state];
        return j->table[r].known ? "remote" : "unknown";
}

/* Every rank of the job, local or not, as far as this daemon knows it. */
static int status_rank_detail(const job_t *j, uint64_t now, Hvd__JobStatus *s, Hvd__RankStatus **mem,
                              Hvd__RankStatus ***ptrs) {
        Hvd__RankStatus *rs = *mem = calloc(j->size, sizeof *rs);
        Hvd__RankStatus **rp = *ptrs = calloc(j->size, sizeof *rp);
        if (!rs || !rp)
                return -ENOMEM;
        for (uint32_t r = 0; r < j->size; r++) {
                const worker_t *w = j->ranks[r];
                const rinfo_t *t = &j->table[r];
                hvd__rank_status__init(&rs[r]);
                rs[r].rank = r;
                rs[r].local = w != NULL;
                rs[r].host = (char *) (w ? w->host : t->known ? t->host : "");
                rs[r].pid = w ? (uint32_t) w->pid : t->known ? t->pid : 0;
                rs[r].local_rank = w ? w->local_rank : t->local_rank;
                rs[r].cross_rank = w ? j->cross_rank : t->cross_rank;
                rs[r].state = (char *) rank_state(j, r);
                rs[r].seen = j->rstat[r].readies > 0;
                rs[r].last_seen_usec = rs[r].seen ? now - j->rstat[r].last_seen_usec : 0;
                rs[r].readies = j->rstat[r].readies;
                rs[r].tensors_pending = j->neg ? hvd_negotiator_rank_pending(j->neg, r) : 0;
                rs[r].done_seq = w ? w->done_seq : 0;
                rs[r].busy_usec = w ? w->busy_usec : 0;
                rp[r] = &rs[r];
        }
        s->n_rank_status = j->size;
        s->rank_status = rp;
        return 0;
}

static int status_job(const job_t *j, uint64_t now, bool detail, Hvd__JobStatus *s, status_mem_t *m, size_t k) {
        hvd__job_status__init(s);
        s->job_id = (char *) j->id;
        s->size = j->size;
        s->state = (char *) job_state_names[j->state];
        s->age_usec = now - j->created_usec;
        s->cycles = j->cycles;
        s->abort_reason = (char *) j->abort_reason;
        s->stalled = (char *) j->stalled;
        s->root = j->neg != NULL;
        s->cross_size = j->cross_size;
        hvd_negotiator_stats_t ns;
        hvd_negotiator_get_stats(j->neg, &ns);
        /* with the tensors the workers' fast path ran from the board */
        const hvd_negotiator_stats_t *f = &j->fast;
        s->tensors_negotiated = ns.tensors_negotiated + f->tensors_negotiated;
        s->fused_ops = ns.fused_ops + f->fused_ops;
        s->bytes_reduced = ns.bytes_scheduled + f->bytes_scheduled;
        s->schedules = ns.schedules;
        s->cache_hits = ns.cache_hits + f->cache_hits;
        s->tensors_in_fused_ops = ns.tensors_in_fused_ops + f->tensors_in_fused_ops;
        s->fast_path_tensors = f->tensors_negotiated;
        s->relay = (char *) j->relay_desc;
        s->launcher = (char *) j->launcher;
        s->autotune = autotune_status(j);
        s->joined_ranks = ns.joined;
        s->negotiation_usec = ns.negotiation_usec;
        uint64_t requests = ns.requests + f->cache_hits;
        s->cache_hit_rate = requests ? (double) s->cache_hits / (double) requests : 0;
        s->mean_fused_bytes = s->fused_ops ? s->bytes_reduced / s->fused_ops : 0;
        s->throughput_bytes_per_sec = job_negotiates(j) ? job_throughput(j, now) : 0;
        if (job_rank_infos(j, true, &m->ri[k]) < 0)
                return -ENOMEM;
        uint64_t busy = 0;
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r])
                        busy += j->ranks[r]->busy_usec;
        s->n_ranks = m->ri[k].n;
        s->ranks = m->ri[k].ptrs;
        s->ranks_here = (uint32_t) s->n_ranks;
        s->data_usec = s->n_ranks ? busy / s->n_ranks : 0;
        if (detail)
                return status_rank_detail(j, now, s, &m->rs[k], &m->rsp[k]);
        return 0;
}

static void handle_status(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__StatusRequest *q) {
        Hvd__Status st = HVD__STATUS__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        status_mem_t m = { 0 };
        uint64_t now = hvd_now_usec();
        st.version = (char *) PACKAGE_VERSION;
        st.uptime_usec = now - d->start_usec;
        st.pid = (uint32_t) getpid();
        st.runtime_dir = d->cfg.runtime_dir;
        st.epoch = d->epoch;
        st.fusion_threshold = d->cfg.fusion_threshold_bytes;
        st.cycle_time_usec = d->cfg.cycle_time_usec;
        st.host = d->host;
        st.peer_endpoint = d->peer_ep;
        st.log_level = (char *) hvd_log_level_to_string(hvd_log_max_level);
        st.metrics_listen = (char *) (d->http ? hvd_http_address(d->http) : "");
        size_t nj = hvd_strmap_size(d->jobs), k = 0, iter = 0;
        m.js = calloc(nj ? nj : 1, sizeof *m.js);
        m.jp = calloc(nj ? nj : 1, sizeof *m.jp);
        m.ri = calloc(nj ? nj : 1, sizeof *m.ri);
        m.rs = calloc(nj ? nj : 1, sizeof *m.rs);
        m.rsp = calloc(nj ? nj : 1, sizeof *m.rsp);
        m.es = calloc(nj ? nj : 1, sizeof *m.es);
        int r = m.js && m.jp && m.ri && m.rs && m.rsp && m.es ? 0 : -ENOMEM;
        if (r >= 0)
                r = status_peers(d, now, &st, &m);
        if (r >= 0)
                r = status_config(d, &st, &m);
        if (r >= 0)
                r = offer_status(d, now, &st, &m.offers);
        void *v;
        while (r >= 0 && hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (q->job_id[0] && strcmp(q->job_id, j->id) != 0)
                        continue;
                m.n_jobs = k + 1;
                r = status_job(j, now, q->rank_detail, &m.js[k], &m, k);
                hvd__elastic_status__init(&m.es[k]);
                if (elastic_describe(d, j->id, &m.es[k]))
                        m.js[k].elastic = &m.es[k];
                m.jp[k] = &m.js[k];
                k++;
        }
        if (r < 0) {
                io_error(d, d->control_sock, id, id_len, -ENOMEM, "out of memory while building the status");
                status_mem_free(&m);
                return;
        }
        st.n_jobs = k;
        st.jobs = m.jp;
        env.body_case = HVD__ENVELOPE__BODY_STATUS;
        env.status = &st;
        (void) io_send(d, d->control_sock, id, id_len, &env);
        status_mem_free(&m);
}

/* The metrics text, for hvdctl metrics and the HTTP listener. */
int control_render_metrics(void *userdata, char **body, size_t *len) {
        hvd_daemon_t *d = userdata;
        hvd_metrics_gauges_t g = {
                .version = PACKAGE_VERSION,
                .uptime_usec = hvd_now_usec() - d->start_usec,
                .log_level = hvd_log_max_level,
        };
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                const job_t *j = v;
                if (j->state == JOB_JOINING)
                        g.jobs_joining++;
                else if (j->state == JOB_RUNNING)
                        g.jobs_running++;
                else
                        g.jobs_aborted++;
        }
        iter = 0;
        while (hvd_strmap_next(d->workers, &iter, NULL, NULL, &v))
                g.workers += !((const worker_t *) v)->exited;
        iter = 0;
        while (hvd_strmap_next(d->peers, &iter, NULL, NULL, &v)) {
                const peer_t *p = v;
                if (p->lost)
                        g.peers_lost++;
                else if (p->n_jobs)
                        g.peers_connected++;
                else
                        g.peers_idle++;
        }
        return hvd_metrics_render(&d->metrics, &g, body, len);
}

static void handle_metrics_request(hvd_daemon_t *d, const uint8_t *id, size_t id_len) {
        char *text = NULL;
        size_t len = 0;
        if (control_render_metrics(d, &text, &len) < 0) {
                io_error(d, d->control_sock, id, id_len, -ENOMEM, "out of memory while rendering the metrics");
                return;
        }
        Hvd__MetricsReply mr = HVD__METRICS_REPLY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        mr.text = text;
        env.body_case = HVD__ENVELOPE__BODY_METRICS_REPLY;
        env.metrics_reply = &mr;
        (void) io_send(d, d->control_sock, id, id_len, &env);
        free(text);
}

/* The caller's uid from libzmq's "host:uid:gid:pid" peer address (ipc), or
 * -1 when it cannot be told. */
static long peer_uid(const char *peer, long *pid) {
        const char *f[3] = { NULL };
        const char *p = peer + strlen(peer);
        for (int i = 2; i >= 0; i--) {
                while (p > peer && p[-1] != ':')
                        p--;
                if (p == peer)
                        return -1;
                f[i] = p;
                p--;
        }
        char *end;
        errno = 0;
        long uid = strtol(f[0], &end, 10);
        if (errno || end == f[0] || *end != ':' || uid < 0)
                return -1;
        *pid = strtol(f[2], NULL, 10);
        return uid;
}

/* Only root and the daemon's own user may change the level: the control
 * socket is open to group hvd, whose members may read the status but
 * should not be able to flood the journal with debug output. */
static void handle_log_level(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__LogLevel *q,
                             const char *peer) {
        if (q->level[0]) {
                long pid = 0, uid = peer_uid(peer, &pid);
                if (uid < 0 || (uid != 0 && (uid_t) uid != geteuid())) {
                        hvd_log_warning("log level change to '%s' refused: %s", q->level,
                                        uid < 0 ? "cannot identify the caller"
                                                : "caller is neither root nor the daemon's user");
                        if (uid < 0)
                                io_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                         "cannot identify the caller on this endpoint, so the log level stays");
                        else
                                io_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                         "only root and the daemon's user (uid %u) may change the log level; "
                                         "you are uid %ld",
                                         (unsigned) geteuid(), uid);
                        return;
                }
                int lv = hvd_log_level_from_string(q->level);
                if (lv < 0) {
                        io_error(d, d->control_sock, id, id_len, -EINVAL,
                                 "unknown log level '%s': expected err, warning, notice, info or debug", q->level);
                        return;
                }
                int old = hvd_log_max_level;
                hvd_log_max_level = LOG_NOTICE > lv ? LOG_NOTICE : lv; /* the change itself is logged */
                hvd_log_notice("log level changed from %s to %s by uid %ld (pid %ld)", hvd_log_level_to_string(old),
                               hvd_log_level_to_string(lv), uid, pid);
                hvd_log_max_level = lv;
                d->metrics.log_level_changes++;
        }
        Hvd__LogLevel reply = HVD__LOG_LEVEL__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        reply.level = (char *) hvd_log_level_to_string(hvd_log_max_level);
        env.body_case = HVD__ENVELOPE__BODY_LOG_LEVEL;
        env.log_level = &reply;
        (void) io_send(d, d->control_sock, id, id_len, &env);
}

void control_handle_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512], peer[256];
                uid_t uid = (uid_t) -1;
                int r = io_recv(d->control_sock, id, &id_len, &env, &uid, err, sizeof err, peer, sizeof peer);
                if (r == 0)
                        return;
                io_count(d, HVD_METRICS_SOCK_CONTROL, r, env);
                if (r < 0) {
                        io_error(d, d->control_sock, id, id_len, r, "request rejected: %s", err);
                        continue;
                }
                uint64_t t0 = hvd_now_usec();
                d->metrics.control_requests++;
                if (env->body_case == HVD__ENVELOPE__BODY_STATUS_REQUEST)
                        handle_status(d, id, id_len, env->status_request);
                else if (env->body_case == HVD__ENVELOPE__BODY_TIMELINE_CONTROL)
                        timeline_request(d, id, id_len, env->timeline_control, uid);
                else if (env->body_case == HVD__ENVELOPE__BODY_METRICS_REQUEST)
                        handle_metrics_request(d, id, id_len);
                else if (env->body_case == HVD__ENVELOPE__BODY_LOG_LEVEL)
                        handle_log_level(d, id, id_len, env->log_level, peer);
                else
                        io_error(d, d->control_sock, id, id_len, -EOPNOTSUPP, "unsupported control request");
                hvd_histogram_observe(&d->metrics.control, hvd_now_usec() - t0);
                hvd_wire_free(&env);
        }
}
