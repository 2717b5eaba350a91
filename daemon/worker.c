/* worker.c — the local workers: a worker per connection of the worker
 * socket, its exit seen through a pidfd (or asked, without one), its
 * heartbeats, its messages dispatched, and schedules to the job's local
 * ranks (packed once; small ones through local rank 0 for the board).
 * A worker is freed only with its job, so pointers to it stay valid. */
#include "config.h"

#include <sys/epoll.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/file.h>

#include "internal.h"

static int pidfd_open_compat(pid_t pid) {
#ifdef SYS_pidfd_open
        return (int) syscall(SYS_pidfd_open, pid, 0);
#else
        errno = ENOSYS;
        return -1;
#endif
}

/* True when every op of s includes rank (so that the rank runs it). */
static bool schedule_has(const Hvd__Schedule *s, uint32_t rank) {
        if (s->n_errors || s->join_done_last_rank >= 0 || !s->n_ops)
                return false;
        for (size_t o = 0; o < s->n_ops; o++) {
                const Hvd__Op *op = s->ops[o];
                bool in = op->process_set == 0;
                for (size_t k = 0; !in && k < op->n_set_ranks; k++)
                        in = op->set_ranks[k] == rank;
                if (!in)
                        return false;
        }
        return true;
}

/* A schedule that may go through the workers' board: local rank 0's
 * worker, which posts it there for the other local ranks (NULL: it goes
 * to every local rank). Only while rank 0 is here to post it, and only a
 * schedule it runs itself: it cannot leave before that one reached it. */
static worker_t *board_scribe(job_t *j, const Hvd__Envelope *env) {
        if (env->body_case != HVD__ENVELOPE__BODY_SCHEDULE || !j->board_sched)
                return NULL;
        const Hvd__Schedule *s = env->schedule;
        worker_t *scribe = NULL;
        for (uint32_t r = 0; r < j->size && !scribe; r++)
                if (j->ranks[r] && j->ranks[r]->local_rank == 0)
                        scribe = j->ranks[r];
        if (!scribe)
                return NULL;
        bool ok = s->repeat_key ? j->key_board[s->repeat_key] : schedule_has(s, scribe->rank);
        if (s->keep_key)
                j->key_board[s->keep_key] = ok;
        if (!ok || scribe->exited || scribe->goodbye || scribe->exit_seen_usec)
                return NULL;
        return scribe;
}

/* Local rank 0 said goodbye: the schedules it took for the board after the
 * last one it said it ran go to the other local ranks (those it posted
 * already, they drop). From now on they get every schedule (board_scribe). */
static void board_resend(hvd_daemon_t *d, job_t *j, const worker_t *scribe) {
        uint64_t n = j->n_board_sent < BOARD_KEEP ? j->n_board_sent : BOARD_KEEP;
        for (uint64_t i = j->n_board_sent - n; j->board_sent && i < j->n_board_sent; i++) {
                const struct board_sent *k = &j->board_sent[i % BOARD_KEEP];
                if (k->seq <= scribe->done_seq)
                        continue;
                for (uint32_t r = 0; r < j->size; r++) {
                        worker_t *w = j->ranks[r];
                        if (w && w != scribe && !w->goodbye)
                                io_send_worker_bytes(d, w, k->bytes, k->len);
                }
        }
}

/* Packs env once and sends the same bytes to each local worker (a schedule
 * goes to every rank here: packing it per rank cost as much as the rest),
 * or a small schedule to local rank 0 alone, for the board (board_scribe). */
void worker_send_all(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env, bool skip_goodbye) {
        env->version = HVD_PROTOCOL_VERSION;
        worker_t *scribe = board_scribe(j, env);
        if (scribe) {
                /* to rank 0 flagged for the board; kept unflagged for the
                 * others (board_resend) */
                uint8_t flagged[HVD_WIRE_BOARD_SCHEDULE_BYTES];
                env->schedule->board = true;
                size_t len = protobuf_c_message_get_packed_size(&env->base);
                if (len <= sizeof flagged)
                        protobuf_c_message_pack(&env->base, flagged);
                env->schedule->board = false;
                if (len <= sizeof flagged &&
                    (j->board_sent || (j->board_sent = calloc(BOARD_KEEP, sizeof *j->board_sent)))) {
                        struct board_sent *k = &j->board_sent[j->n_board_sent++ % BOARD_KEEP];
                        k->seq = env->schedule->seq;
                        k->len = protobuf_c_message_pack(&env->base, k->bytes);
                        d->metrics.board_schedules++;
                        io_send_worker_bytes(d, scribe, flagged, len);
                        return;
                }
        }
        zmq_msg_t packed;
        int e = io_pack(env, &packed);
        if (e < 0) {
                hvd_log_warning("job %s: cannot send to its ranks: %s", j->id, hvd_strerror(e));
                return;
        }
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                if (!w || w->exited || (skip_goodbye && w->goodbye))
                        continue;
                e = io_send_shared(d, d->worker_sock, w->id, w->id_len, &packed);
                if (e < 0)
                        io_send_failed(w, e);
        }
        zmq_msg_close(&packed);
}

/* A worker's pidfd joins the epoll set while it lives; it leaves when the
 * worker is gone (a pidfd stays readable after the exit). */
static void pidfd_watch(hvd_daemon_t *d, worker_t *w) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = w };
        if (w->pidfd < 0 || epoll_ctl(d->pid_epfd, EPOLL_CTL_ADD, w->pidfd, &ev) == 0)
                return;
        /* watched as workers without a pidfd are (watch_pidless_workers) */
        hvd_log_debug("job %s: cannot watch rank %u's pidfd: %m", w->job->id, w->rank);
        close(w->pidfd);
        w->pidfd = -1;
}

static void pidfd_unwatch(hvd_daemon_t *d, worker_t *w) {
        if (w->pidfd >= 0)
                (void) epoll_ctl(d->pid_epfd, EPOLL_CTL_DEL, w->pidfd, NULL);
}

void worker_free(hvd_daemon_t *d, worker_t *w) {
        if (!w)
                return;
        hvd_strmap_remove(d->workers, w->id, w->id_len);
        if (w->pidfd >= 0) {
                pidfd_unwatch(d, w);
                close(w->pidfd);
        }
        free(w);
}

/* A local rank's readiness (its Ready stays in env, or is taken from it):
 * entered at once or held in the batch where this daemon negotiates;
 * elsewhere what aggregates waits for the node-level message and the rest
 * goes up with this turn's batch. */
static void handle_ready(hvd_daemon_t *d, worker_t *w, Hvd__Envelope *env) {
        job_t *j = w->job;
        if (j->state != JOB_RUNNING)
                return; /* joining: cannot happen (no welcome yet); aborted: dropped */
        if (w->goodbye) {
                job_abort(d, j, (int) w->rank, HVD_EPROTO, "rank %u sent tensors after it shut down", w->rank);
                return;
        }
        j->cycles++;
        d->metrics.cycles++;
        if (env->ready->done_seq >= w->done_seq) {
                w->done_seq = env->ready->done_seq;
                w->busy_usec = env->ready->busy_usec;
        }
        if (job_negotiates(j)) {
                root_ready(d, j, w, env);
                return;
        }
        if (env->ready->n_node_cached && !batch_node_ready(d, j, w, env->ready))
                return;
        j->rstat[w->rank].last_seen_usec = hvd_now_usec();
        j->rstat[w->rank].readies++;
        batch_ready(d, j, w, env);
}

void worker_gone(hvd_daemon_t *d, worker_t *w, const char *why) {
        job_t *j = w->job;
        if (w->exited)
                return;
        w->exited = true;
        pidfd_unwatch(d, w);
        j->n_live--;
        if (!w->goodbye && j->state != JOB_ABORTED)
                job_abort(d, j, (int) w->rank, HVD_EABORTED,
                          "rank %u (pid %d on host %s) %s without calling hvd_shutdown", w->rank, (int) w->pid, w->host,
                          why);
        else if (!w->goodbye)
                elastic_rank_gone(d, j, w->rank);
        d->next_housekeeping = 0;
}

/* How a worker process ended, while it is a zombie its parent has not
 * reaped yet (field 52 of /proc/PID/stat is its wait status); "exited" when
 * that is no longer known. */
static void exit_cause(pid_t pid, char *buf, size_t len) {
        snprintf(buf, len, "exited");
        char path[64], st[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        ssize_t n = read(fd, st, sizeof st - 1);
        close(fd);
        if (n <= 0)
                return;
        st[n] = 0;
        char *p = strrchr(st, ')'); /* the command name may hold blanks */
        if (!p || p[1] != ' ' || p[2] != 'Z')
                return;
        int field = 3; /* the state, just after the name */
        long code = -1;
        for (char *tok = p + 2; *tok; field++) {
                if (field == 52) {
                        code = strtol(tok, NULL, 10);
                        break;
                }
                tok = strchr(tok, ' ');
                if (!tok)
                        break;
                tok++;
        }
        if (code < 0)
                return;
        if ((code & 0x7f) == 0)
                snprintf(buf, len, "exited with status %ld", (code >> 8) & 0xff);
        else
                snprintf(buf, len, "was killed by SIG%s (signal %ld)", sigabbrev_np((int) (code & 0x7f)) ?: "?",
                         code & 0x7f);
}

/* Its pidfd turned readable. Without its goodbye, in a job still alive, the
 * verdict waits EXIT_GRACE_USEC for the messages it sent last (the main
 * loop reads the worker socket before the pidfds, but what libzmq's I/O
 * thread has not yet passed on is not there to read): a failure report
 * among them is the job's cause, not this exit (settle_exits). */
static void worker_exited(hvd_daemon_t *d, worker_t *w) {
        if (w->exited || w->goodbye || w->job->state == JOB_ABORTED) {
                worker_gone(d, w, "exited");
                return;
        }
        pidfd_unwatch(d, w); /* a pidfd stays readable */
        if (w->exit_seen_usec)
                return;
        exit_cause(w->pid, w->exit_why, sizeof w->exit_why);
        w->exit_seen_usec = hvd_now_usec();
        d->next_housekeeping = HVD_MIN(d->next_housekeeping, w->exit_seen_usec + EXIT_GRACE_USEC);
}

/* Housekeeping: workers whose exit has waited out EXIT_GRACE_USEC are gone.
 * Returns when the next one is due (UINT64_MAX: none waits). */
static uint64_t settle_exits(hvd_daemon_t *d, uint64_t now) {
        size_t iter = 0;
        void *v;
        uint64_t next = UINT64_MAX;
        while (hvd_strmap_next(d->workers, &iter, NULL, NULL, &v)) {
                worker_t *w = v;
                if (w->exited || !w->exit_seen_usec)
                        continue;
                uint64_t due = w->exit_seen_usec + EXIT_GRACE_USEC;
                if (now >= due || w->goodbye || w->job->state == JOB_ABORTED)
                        worker_gone(d, w, w->exit_why);
                else
                        next = HVD_MIN(next, due);
        }
        return next;
}

static void handle_goodbye(hvd_daemon_t *d, worker_t *w) {
        job_t *j = w->job;
        w->goodbye = true;
        /* the ack lets the worker close only after we have seen this */
        Hvd__Goodbye ack = HVD__GOODBYE__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ack.rank = w->rank;
        env.body_case = HVD__ENVELOPE__BODY_GOODBYE;
        env.goodbye = &ack;
        io_send_worker(d, w, &env);
        hvd_log_info("job %s: rank %u said goodbye", j->id, w->rank);
        if (j->board_sched && w->local_rank == 0 && j->state == JOB_RUNNING)
                board_resend(d, j, w);
        if (job_negotiates(j)) {
                pool_stop(j->batch.pool);
                batch_flush_all(d, j); /* what it sent before goes first */
                root_departed(d, j, w->rank);
        } else if (j->state == JOB_RUNNING)
                batch_departed(d, j, w->rank);
        /* without a pidfd the goodbye is the last we hear of it */
        if (w->pidfd < 0)
                worker_gone(d, w, "said goodbye");
}

/* The counters of a worker's fast path: tensors that ran from the board
 * without a schedule, still the job's. */
static void handle_done(hvd_daemon_t *d, worker_t *w, const Hvd__Done *dn) {
        job_t *j = w->job;
        j->fast.tensors_negotiated += dn->fast_path_tensors;
        j->fast.fused_ops += dn->fast_path_ops;
        j->fast.tensors_in_fused_ops += dn->fast_path_fused_tensors;
        j->fast.bytes_scheduled += dn->fast_path_bytes;
        j->fast.cache_hits += dn->fast_path_cache_hits;
        /* the daemon's metrics count them too (no latency sample: no schedule) */
        d->metrics.fast_path_tensors += dn->fast_path_tensors;
        d->metrics.tensors_negotiated += dn->fast_path_tensors;
        d->metrics.fused_ops += dn->fast_path_ops;
        d->metrics.bytes_scheduled += dn->fast_path_bytes;
        d->metrics.cache_hits += dn->fast_path_cache_hits;
        d->metrics.requests += dn->fast_path_cache_hits;
        if (dn->n_tune_step_usec)
                autotune_worker_steps(d, j, dn);
}

static const char *body_name(const Hvd__Envelope *env) {
        switch (env->body_case) {
        case HVD__ENVELOPE__BODY_HEARTBEAT: return "heartbeat";
        case HVD__ENVELOPE__BODY_READY: return "readiness";
        case HVD__ENVELOPE__BODY_DONE: return "completion report";
        case HVD__ENVELOPE__BODY_TIMELINE_CONTROL: return "timeline message";
        default: return "message";
        }
}

/* A message that belongs to a job that is over for its sender: the sender
 * was declared lost (anything from it is late), or its job was aborted and
 * it still submits work. A goodbye is always taken: it ends the worker. */
static bool is_stale(const worker_t *w, const Hvd__Envelope *env) {
        if (env->body_case == HVD__ENVELOPE__BODY_GOODBYE)
                return false;
        if (w->lost)
                return true;
        return w->job->state == JOB_ABORTED &&
               (env->body_case == HVD__ENVELOPE__BODY_READY || env->body_case == HVD__ENVELOPE__BODY_DONE);
}

/* Refuses a stale message with an explicit error to its sender, logged once
 * per worker (a resumed process may send several before it reads the abort). */
static void reject_stale(hvd_daemon_t *d, worker_t *w, const Hvd__Envelope *env) {
        job_t *j = w->job;
        d->metrics.stale_messages++;
        if (!w->stale_logged)
                hvd_log_full(w->lost ? LOG_WARNING : LOG_INFO, 0, "job %s: stale %s from rank %u (pid %d) refused: %s",
                             j->id, body_name(env), w->rank, (int) w->pid,
                             w->lost ? "it was declared lost and the job aborted" : "the job was aborted");
        w->stale_logged = true;
        io_error(d, d->worker_sock, w->id, w->id_len, HVD_EABORTED,
                 "stale %s refused: job %s (epoch %" PRIu64 ") is no longer running for rank %u: %s%s", body_name(env),
                 j->id, d->epoch, w->rank,
                 w->lost ? "this rank was declared lost; the job was aborted: " : "the job was aborted: ",
                 j->abort_reason);
}

/* A heartbeat, readiness or report on a connection that belongs to no job
 * here: its job is gone (aborted or ended and removed), or this daemon was
 * restarted since the worker joined. */
static void stale_unknown(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__Envelope *env) {
        uint64_t now = hvd_now_usec();
        d->metrics.stale_messages++;
        if (now - d->stale_log_usec >= 10 * USEC_PER_SEC) {
                d->stale_log_usec = now;
                hvd_log_info("stale %s on a connection of no job refused (its job is gone from this daemon)",
                             body_name(env));
        }
        io_error(d, d->worker_sock, id, id_len, HVD_EABORTED,
                 "stale %s refused: this connection belongs to no job of this coordinator (epoch %" PRIu64
                 "): its job was aborted or has ended, or the coordinator restarted; call hvd_init again",
                 body_name(env), d->epoch);
}

/* A local worker silent past its job's heartbeat timeout (stopped, hung,
 * or its host stalled): the job is aborted and the worker is lost. Returns
 * when to look again (UINT64_MAX: no running job has heartbeats). */
uint64_t worker_check_heartbeats(hvd_daemon_t *d, job_t *j, uint64_t now) {
        if (j->state != JOB_RUNNING || !j->hb_timeout_usec)
                return UINT64_MAX;
        uint64_t next = UINT64_MAX;
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                if (!w || w->exited || w->goodbye || w->lost)
                        continue;
                uint64_t due = w->last_heard_usec + j->hb_timeout_usec;
                if (now < due) {
                        next = HVD_MIN(next, due);
                        continue;
                }
                w->lost = true;
                d->metrics.workers_lost++;
                job_abort(d, j, (int) r, HVD_EABORTED,
                          "rank %u (pid %d on host %s) stopped responding: no heartbeat for %.1f s", r, (int) w->pid,
                          w->host, (double) (now - w->last_heard_usec) / 1e6);
                return UINT64_MAX;
        }
        return next;
}

/* A worker's data plane failed on its own (its deadline expired, a peer's
 * connection broke) before any abort reached it: the job is over, and
 * every rank learns that cause. */
static void worker_failed(hvd_daemon_t *d, worker_t *w, const Hvd__Abort *ab) {
        job_t *j = w->job;
        if (j->state != JOB_RUNNING)
                return;
        /* its data plane failed (a peer's connection broke or timed out)
         * before the daemons noticed anything */
        job_abort(d, j, -1, ab->code < 0 ? ab->code : HVD_EABORTED, "rank %u%s%s%s: %s", w->rank,
                  j->role == JOB_ROOT ? " (host " : "", j->role == JOB_ROOT ? job_host(j, j->cross_rank) : "",
                  j->role == JOB_ROOT ? ")" : "", ab->reason);
}

void worker_handle_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512];
                uid_t uid = (uid_t) -1;
                /* a host's ranks send a first step's requests alike: parsed once */
                int r = io_recv(d->worker_sock, id, &id_len, &env, &uid, err, sizeof err, NULL, 0);
                if (r == 0)
                        return;
                worker_t *w = hvd_strmap_get(d->workers, id, id_len);
                io_count(d, HVD_METRICS_SOCK_WORKER, r, env);
                if (r < 0) {
                        hvd_log_warning("worker socket: rejected message%s%s: %s", w ? " from job " : "",
                                        w ? w->job->id : "", err);
                        io_error(d, d->worker_sock, id, id_len, r, "message rejected: %s", err);
                        continue;
                }
                if (w)
                        w->last_heard_usec = hvd_now_usec();
                if (env->body_case == HVD__ENVELOPE__BODY_HELLO)
                        join_hello(d, id, id_len, env->hello, uid);
                else if (env->body_case == HVD__ENVELOPE__BODY_ENROLL)
                        elastic_enroll(d, id, id_len, env->enroll, false);
                else if (!w &&
                         (env->body_case == HVD__ENVELOPE__BODY_HEARTBEAT ||
                          env->body_case == HVD__ENVELOPE__BODY_READY || env->body_case == HVD__ENVELOPE__BODY_DONE))
                        stale_unknown(d, id, id_len, env);
                else if (!w)
                        io_error(d, d->worker_sock, id, id_len, HVD_EPROTO,
                                 "say hello first: this connection has not joined a job");
                else if (is_stale(w, env))
                        reject_stale(d, w, env);
                else if (env->body_case == HVD__ENVELOPE__BODY_HEARTBEAT)
                        ; /* last_heard_usec is all it is for */
                else if (env->body_case == HVD__ENVELOPE__BODY_READY)
                        handle_ready(d, w, env);
                else if (env->body_case == HVD__ENVELOPE__BODY_GOODBYE)
                        handle_goodbye(d, w);
                else if (env->body_case == HVD__ENVELOPE__BODY_DONE)
                        handle_done(d, w, env->done);
                else if (env->body_case == HVD__ENVELOPE__BODY_TIMELINE_CONTROL)
                        control_timeline_answer(d, w, env->timeline_control);
                else if (env->body_case == HVD__ENVELOPE__BODY_ABORT)
                        worker_failed(d, w, env->abort);
                else
                        io_error(d, d->worker_sock, id, id_len, HVD_EPROTO, "unexpected message on the worker socket");
                hvd_wire_free(&env);
        }
}

/* Local workers without a pidfd (pidfd_open is missing before Linux 5.3
 * and under valgrind): whether their process still exists is asked at
 * every loop_housekeeping. Returns whether any such worker is left to watch. */
static bool watch_pidless_workers(hvd_daemon_t *d) {
        size_t iter = 0;
        void *v;
        bool any = false;
        while (hvd_strmap_next(d->workers, &iter, NULL, NULL, &v)) {
                worker_t *w = v;
                if (w->pidfd >= 0 || w->exited || w->pid <= 0)
                        continue;
                if (kill(w->pid, 0) < 0 && errno == ESRCH)
                        worker_gone(d, w, "exited");
                else
                        any = true;
        }
        return any;
}

/* Every worker whose pidfd became readable (it exited). Workers are freed
 * only with their job (loop_housekeeping), so the pointers stay valid here. */
void worker_reap(hvd_daemon_t *d) {
        struct epoll_event ev[64];
        int n;
        do {
                n = epoll_wait(d->pid_epfd, ev, (int) ELEMENTSOF(ev), 0);
                for (int i = 0; i < n; i++)
                        worker_exited(d, ev[i].data.ptr); /* leaves the set */
        } while (n == (int) ELEMENTSOF(ev));
}

/* Housekeeping: exits that waited out their grace, and workers without a
 * pidfd asked whether they still exist. */
uint64_t worker_housekeeping(hvd_daemon_t *d, uint64_t now, uint64_t tick) {
        uint64_t next = settle_exits(d, now);
        if (watch_pidless_workers(d))
                next = earliest(next, tick);
        return next;
}

worker_t *worker_new(hvd_daemon_t *d, job_t *j, const uint8_t *id, size_t id_len, const Hvd__Hello *h) {
        worker_t *w = calloc(1, sizeof *w);
        if (!w)
                return NULL;
        memcpy(w->id, id, id_len);
        w->id_len = id_len;
        w->job = j;
        w->rank = h->rank;
        w->local_rank = h->local_rank;
        w->board = h->board;
        w->pid = (pid_t) h->pid;
        snprintf(w->host, sizeof w->host, "%s", h->host[0] ? h->host : d->host);
        snprintf(w->data_addr, sizeof w->data_addr, "%s", h->data_addr);
        w->pidfd = pidfd_open_compat(w->pid);
        if (w->pidfd < 0)
                hvd_log_debug("job %s: no pidfd for rank %u (pid %d): %m", j->id, w->rank, (int) w->pid);
        if (hvd_strmap_put(d->workers, id, id_len, w) < 0) {
                if (w->pidfd >= 0)
                        close(w->pidfd);
                free(w);
                return NULL;
        }
        pidfd_watch(d, w);
        return w;
}
