/* link.c — the worker's conversation with its daemon over the socket
 * (the background thread's, see client.h): what it receives and acts on,
 * heartbeats, the coordinator's end, the Ready messages it sends, the
 * timeline's control; and the job's verdicts: an abort is sticky, fails
 * every entry and stops the data planes, and the error a failed
 * collective reports is the coordinator's cause when one comes. A job of
 * one rank has no socket: its Ready goes to a negotiator here. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "timeline.h"
#include "util.h"

static void await_abort(uint64_t usec);
static void timeline_remote(const Hvd__TimelineControl *tc);

void hvd_link_wake(void) {
        uint64_t one = 1;
        if (G.wake_fd >= 0 && write(G.wake_fd, &one, sizeof one) < 0)
                (void) 0;
}

/* Sends a heartbeat when one is due (background thread: the socket's
 * owner). Goes on after an abort: a rank the coordinator gave up on learns
 * it from the refusal of its heartbeat as much as from the abort. */
void hvd_link_heartbeat(void) {
        if (!G.sock || !G.hb_interval_usec)
                return;
        uint64_t now = hvd_now_usec();
        if (now - G.last_hb_usec < G.hb_interval_usec)
                return;
        G.last_hb_usec = now;
        Hvd__Heartbeat hb = HVD__HEARTBEAT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        hb.epoch = G.epoch;
        hb.sent_usec = now;
        env.body_case = HVD__ENVELOPE__BODY_HEARTBEAT;
        env.heartbeat = &hb;
        (void) hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT); /* a full pipe: the next one, or the timeout, tells */
}

/* Milliseconds until the next heartbeat is due (-1: none), for a poll. */
long hvd_link_heartbeat_timeout_ms(void) {
        if (!G.sock || !G.hb_interval_usec)
                return -1;
        uint64_t now = hvd_now_usec(), due = G.last_hb_usec + G.hb_interval_usec;
        return now >= due ? 0 : (long) ((due - now + 999) / 1000);
}

int hvd_link_recv(int flags, Hvd__Envelope **ret) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, G.sock, flags) < 0) {
                int r = -zmq_errno();
                zmq_msg_close(&msg);
                return r < 0 ? r : -EIO; /* never "success" without a message in *ret */
        }
        char err[512];
        int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, ret, err, sizeof err);
        if (r >= 0 && (*ret)->body_case == HVD__ENVELOPE__BODY_SCHEDULE) {
                const Hvd__Schedule *s = (*ret)->schedule;
                if (s->board && !G.fp_scribe) {
                        snprintf(err, sizeof err,
                                 "schedule %" PRIu64 " came for the board, but this rank does not post "
                                 "schedules there",
                                 s->seq);
                        hvd_wire_free(ret);
                        r = HVD_EPROTO;
                } else if (s->board && G.fp) {
                        /* for the others: its record carries these bytes */
                        r = hvd_fastpath_schedule_inline(G.fp, s->seq, zmq_msg_data(&msg), zmq_msg_size(&msg));
                        if (r < 0) {
                                snprintf(err, sizeof err, "schedule %" PRIu64 ": cannot post it on the board: %s",
                                         s->seq, hvd_strerror(r));
                                hvd_wire_free(ret);
                        }
                }
                /* node mode: kept and repeated schedules resolve in seq order,
                 * when they run (fp_run): some come through the board */
                if (r >= 0 && !G.fp_node)
                        r = hvd_schedule_by_key(zmq_msg_data(&msg), zmq_msg_size(&msg), ret, err, sizeof err);
        }
        zmq_msg_close(&msg);
        if (r < 0) {
                char reason[700];
                snprintf(reason, sizeof reason, "invalid message from the coordinator: %s", err);
                hvd_job_abort(HVD_EPROTO, reason);
        }
        return r;
}

void hvd_link_handle(Hvd__Envelope *env) {
        char reason[ERRLEN + 64 + HVD_WIRE_MAX_JOB_ID];
        switch (env->body_case) {
        case HVD__ENVELOPE__BODY_SCHEDULE:
                if (G.fp)
                        hvd_fp_hold_schedule(env); /* runs at its record in the board's log */
                else if (!G.abort_code)
                        hvd_schedule_execute(env->schedule);
                break;
        case HVD__ENVELOPE__BODY_ABORT:
                snprintf(reason, sizeof reason, "job %s aborted: %s%s", G.job_id, env->abort->reason,
                         env->abort->lost_rank >= 0 && env->abort->lost_rank == G.rank
                                 ? " (this rank: the coordinator gave up on it)"
                                 : "");
                hvd_job_abort(env->abort->code < 0 ? env->abort->code : HVD_EABORTED, reason);
                break;
        case HVD__ENVELOPE__BODY_ERROR:
                /* from a coordinator that replaced the one this rank joined */
                if (hvd_link_daemon_lost())
                        break;
                snprintf(reason, sizeof reason, "coordinator: %s", env->error->message);
                hvd_job_abort(env->error->code < 0 ? env->error->code : HVD_EPROTO, reason);
                break;
        case HVD__ENVELOPE__BODY_TIMELINE_CONTROL: timeline_remote(env->timeline_control); break;
        case HVD__ENVELOPE__BODY_AUTOTUNE_ROW:
                /* flushed row by row: a job that ends early keeps what it took */
                if (G.tune_log) {
                        fprintf(G.tune_log, "%s\n", env->autotune_row->row);
                        fflush(G.tune_log);
                }
                break;
        case HVD__ENVELOPE__BODY_HOSTS_UPDATED: hvd_elastic_hosts_updated(env->hosts_updated); break;
        default: hvd_job_abort(HVD_EPROTO, "unexpected message from the coordinator"); break;
        }
}

/* The coordinator's process ended: nothing more will be scheduled. */
bool hvd_link_daemon_lost(void) {
        if (G.daemon_pidfd < 0)
                return false;
        struct pollfd p = { .fd = G.daemon_pidfd, .events = POLLIN };
        if (poll(&p, 1, 0) <= 0)
                return false;
        close(G.daemon_pidfd);
        G.daemon_pidfd = -1;
        /* its last words (an abort saying why) may still be on the way */
        uint64_t until = hvd_now_usec() + 200 * USEC_PER_MSEC;
        for (uint64_t now; !G.abort_code && (now = hvd_now_usec()) < until;) {
                zmq_pollitem_t it = { .socket = G.sock, .events = ZMQ_POLLIN };
                if (zmq_poll(&it, 1, (long) ((until - now) / 1000 + 1)) <= 0)
                        break;
                Hvd__Envelope *env = NULL;
                if (hvd_link_recv(ZMQ_DONTWAIT, &env) < 0)
                        break;
                /* an error now is a new coordinator's answer (restarted on
                 * the same socket, it refuses this connection): the lost one
                 * is the verdict */
                if (env->body_case == HVD__ENVELOPE__BODY_ABORT)
                        hvd_link_handle(env);
                hvd_wire_free(&env); /* anything else cannot run without the coordinator anyway */
        }
        if (!G.abort_code) {
                char reason[128 + HVD_WIRE_MAX_JOB_ID];
                snprintf(reason, sizeof reason, "job %s: coordinator lost: hvd-coordinatord (pid %d) exited", G.job_id,
                         (int) G.daemon_pid);
                hvd_job_abort(HVD_EABORTED, reason);
        }
        return true;
}

/* Keeps a message for after the operation in progress (takes env). */
void hvd_link_hold(Hvd__Envelope *env) {
        hvd_held_msg_t *p = calloc(1, sizeof *p);
        if (!p) {
                hvd_wire_free(&env);
                hvd_job_abort(-ENOMEM, "out of memory");
                return;
        }
        p->env = env;
        if (G.held_tail)
                G.held_tail->next = p;
        else
                G.held_head = p;
        G.held_tail = p;
}

void hvd_link_process_held(void) {
        while (G.held_head) {
                hvd_held_msg_t *p = G.held_head;
                G.held_head = p->next;
                if (!G.held_head)
                        G.held_tail = NULL;
                hvd_link_handle(p->env);
                hvd_wire_free(&p->env);
                free(p);
        }
}

/* Waits up to usec for an abort from the coordinator; other messages are
 * kept for later. */
static void await_abort(uint64_t usec) {
        uint64_t until = hvd_now_usec() + usec;
        for (uint64_t now; !G.abort_code && (now = hvd_now_usec()) < until;) {
                /* the coordinator's own end is a verdict too */
                zmq_pollitem_t it[2] = { { .socket = G.sock, .events = ZMQ_POLLIN },
                                         { .fd = G.daemon_pidfd, .events = ZMQ_POLLIN } };
                if (zmq_poll(it, G.daemon_pidfd >= 0 ? 2 : 1, (long) ((until - now) / 1000 + 1)) <= 0)
                        continue;
                if (G.daemon_pidfd >= 0 && (it[1].revents & ZMQ_POLLIN)) {
                        hvd_link_daemon_lost();
                        continue;
                }
                Hvd__Envelope *env = NULL;
                if (hvd_link_recv(ZMQ_DONTWAIT, &env) < 0)
                        return;
                if (env->body_case == HVD__ENVELOPE__BODY_ABORT || env->body_case == HVD__ENVELOPE__BODY_ERROR) {
                        hvd_link_handle(env);
                        hvd_wire_free(&env);
                } else
                        hvd_link_hold(env);
        }
}

/* Called by the data plane while it waits: an abort from the daemon must
 * end the wait; anything else is kept for after the current operation. */
int hvd_link_wait_check(void *userdata, char *err, size_t err_len) {
        /* a user thread running the fast path: the background thread reads
         * the socket, and an abort reaches the data plane's shared flag */
        if (!pthread_equal(pthread_self(), G.thread))
                return 0;
        hvd_link_heartbeat(); /* the wait may be long: the coordinator must know this rank is alive */
        if (hvd_link_daemon_lost()) {
                snprintf(err, err_len, "%s", G.abort_reason);
                return HVD_EABORTED;
        }
        for (;;) {
                Hvd__Envelope *env = NULL;
                int r = hvd_link_recv(ZMQ_DONTWAIT, &env);
                if (r == -EAGAIN)
                        return 0;
                if (r < 0) {
                        snprintf(err, err_len, "%s", G.abort_reason);
                        return r;
                }
                if (env->body_case == HVD__ENVELOPE__BODY_ABORT || env->body_case == HVD__ENVELOPE__BODY_ERROR) {
                        hvd_link_handle(env);
                        hvd_wire_free(&env);
                        snprintf(err, err_len, "%s", G.abort_reason);
                        return G.abort_code ? G.abort_code : HVD_EABORTED;
                }
                hvd_link_hold(env);
        }
}

void hvd_link_held_free(void) {
        while (G.held_head) {
                hvd_held_msg_t *p = G.held_head;
                G.held_head = p->next;
                hvd_wire_free(&p->env);
                free(p);
        }
        G.held_tail = NULL;
}

/* Waits (briefly) for the ack, so the daemon has seen the goodbye before
 * it sees this process exit. After an abort the daemons know already,
 * unless this rank's failure report is what aborts the job: the daemon's
 * I/O thread may still hold it when the daemon's main loop sees this
 * process exit, which would then stand as the cause ("rank N exited
 * without calling hvd_shutdown") on every rank. The goodbye travels
 * behind the report on the same connection: its ack means the report was
 * taken in. */
void hvd_link_goodbye(void) {
        if (!G.sock)
                return;
        Hvd__Goodbye bye = HVD__GOODBYE__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        bye.rank = (uint32_t) G.rank;
        env.body_case = HVD__ENVELOPE__BODY_GOODBYE;
        env.goodbye = &bye;
        if ((G.abort_code && !G.failure_told) || hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT) != 0)
                return;
        uint64_t deadline = hvd_now_usec() + USEC_PER_SEC;
        for (uint64_t now; (now = hvd_now_usec()) < deadline;) {
                zmq_pollitem_t it = { .socket = G.sock, .events = ZMQ_POLLIN };
                if (zmq_poll(&it, 1, (long) ((deadline - now) / 1000 + 1)) <= 0)
                        continue;
                Hvd__Envelope *reply = NULL;
                if (hvd_link_recv(ZMQ_DONTWAIT, &reply) < 0)
                        break;
                bool ack = reply->body_case == HVD__ENVELOPE__BODY_GOODBYE;
                hvd_wire_free(&reply);
                if (ack)
                        break;
        }
}

/* ---- verdicts ---- */

void hvd_job_abort(int code, const char *reason) {
        pthread_mutex_lock(&G.lock);
        if (!G.abort_code) {
                G.abort_code = hvd_elastic_abort_code(code < 0 ? code : HVD_EABORTED);
                snprintf(G.abort_reason, sizeof G.abort_reason, "%s", reason);
                hvd_elastic_generation_ended(reason);
                pthread_cond_broadcast(&G.cond); /* a user thread may wait for the verdict */
        }
        hvd_inflight_fail(G.abort_code, G.abort_reason);
        pthread_mutex_unlock(&G.lock);
        if (G.backend)
                hvd_backend_abort(G.backend, reason);
        if (G.gpu.g)
                G.gpu.mod->abort(G.gpu.g);
}

static void tell_daemon_failure(int r, char *err) {
        Hvd__Abort ab = HVD__ABORT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ab.job_id = G.job_id;
        ab.reason = err;
        ab.code = r;
        ab.lost_rank = -1;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        if (hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT) == 0)
                G.failure_told = true; /* hvd_shutdown makes sure it was read */
}

/* A data-plane operation failed with r and err[ERRLEN]; returns the error
 * to report, with err rewritten. A peer's connection failing is usually the
 * symptom: the coordinator's abort, a moment later, says what happened. A
 * failure before the deadline (a connection closed or reset) waits for it as
 * long as the daemons take to notice a lost host (the peer timeout, across
 * hosts); a wait that reached its own deadline has used up the time a caller
 * may wait (deadline plus one second) and waits 200 ms more at most.
 * Without a word from the coordinator, the error names the job, and the
 * coordinator is told, so that every rank learns this cause (not only that
 * this rank went away). A user thread running the fast path does not own
 * the socket: it waits as long for the background thread to take the
 * verdict in. */
int hvd_job_verdict(int r, char *err, bool may_wait) {
        bool told = false;
        /* data that failed its integrity check (the TCP ring's checksum):
         * this rank is the one that knows why; it tells its daemon at once
         * and waits for the abort the daemons send every rank */
        if (!G.abort_code && G.sock && may_wait && r == HVD_EPROTO) {
                tell_daemon_failure(r, err);
                told = true;
        }
        uint64_t grace = r == HVD_ETIMEOUT ? 200 * USEC_PER_MSEC
                         : told            ? USEC_PER_SEC
                                           : HVD_MAX(USEC_PER_SEC, G.peer_timeout_usec + USEC_PER_SEC / 2);
        if (!G.abort_code && G.sock && may_wait)
                await_abort(grace);
        pthread_mutex_lock(&G.lock);
        if (!may_wait && G.sock) {
                /* hvd_job_abort broadcasts G.cond */
                struct timespec until = hvd_realtime_after(grace);
                while (!G.abort_code && pthread_cond_timedwait(&G.cond, &G.lock, &until) != ETIMEDOUT)
                        ;
        }
        int code = G.abort_code;
        if (code)
                snprintf(err, ERRLEN, "%s", G.abort_reason);
        pthread_mutex_unlock(&G.lock);
        if (code)
                return code;
        if (G.sock && may_wait && !told)
                tell_daemon_failure(r, err);
        if (G.job_id[0] && strncmp(err, "job ", 4) != 0) {
                char tmp[ERRLEN];
                snprintf(tmp, sizeof tmp, "job %s: %s", G.job_id, err);
                memcpy(err, tmp, ERRLEN);
        }
        return r;
}

/* ---- readiness ---- */

/* A job of one rank has no daemon: the same negotiation table runs here,
 * and its schedules go straight to the data plane. */
static int solo_negotiate(const Hvd__Ready *ready) {
        hvd_assert(G.neg);
        char err[ERRLEN];
        int r = hvd_negotiator_submit(G.neg, 0, ready, err, sizeof err);
        if (r < 0) {
                hvd_job_abort(r, err);
                return 0;
        }
        Hvd__Schedule *s = NULL;
        while ((r = hvd_negotiator_take_schedule(G.neg, &s)) > 0) {
                hvd_schedule_execute(s);
                hvd_negotiator_schedule_free(&s);
        }
        return r;
}

/* Sends the queued requests as one Ready message, or as several when one
 * would exceed the coordinator's max_message_size (libzmq would drop it by
 * closing the connection, and nobody would be told). A single request too
 * large on its own aborts the job with an error that says so. */
int hvd_link_send_ready(hvd_entry_t **batch, size_t n) {
        hvd_assert(n > 0);
        Hvd__Request *reqs = calloc(n, sizeof *reqs);
        Hvd__Request **rp = calloc(n, sizeof *rp);
        uint32_t *cached = calloc(n, sizeof *cached);
        uint64_t *waited = calloc(n, sizeof *waited), now = hvd_now_usec();
        size_t n_req = 0, n_cached = 0;
        bool any_waited = false;
        int r = -ENOMEM;
        if (!reqs || !rp || !cached || !waited)
                goto out;
        for (size_t i = 0; i < n; i++) {
                hvd_entry_t *e = batch[i];
                hvd_known_t *k = hvd_strmap_get(G.known, e->name, strlen(e->name));
                if (k && k->has_id && hvd_params_equal(&k->p, &e->p)) {
                        waited[n_cached] = e->fp_posted_usec ? now - e->fp_posted_usec : 0;
                        any_waited = any_waited || e->fp_posted_usec;
                        cached[n_cached++] = k->id;
                        continue;
                }
                if (e->p.kind != HVD__KIND__KIND_JOIN) {
                        if (!k) {
                                k = calloc(1, sizeof *k);
                                if (!k || hvd_strmap_put(G.known, e->name, strlen(e->name), k) < 0) {
                                        free(k);
                                        goto out;
                                }
                        }
                        if (hvd_params_copy(&k->p, &e->p) < 0)
                                goto out;
                        k->fast_ok = false; /* until a schedule confirms these parameters */
                }
                Hvd__Request *q = &reqs[n_req];
                hvd__request__init(q);
                q->name = e->name;
                q->kind = e->p.kind;
                q->dtype = e->p.dtype;
                q->n_shape = (size_t) e->p.ndim;
                q->shape = e->p.shape;
                q->reduce_op = e->p.reduce_op;
                q->prescale = e->p.prescale;
                q->postscale = e->p.postscale;
                q->root = e->p.root;
                q->n_splits = e->p.n_splits;
                q->splits = e->p.splits;
                q->device = e->p.device;
                q->process_set = (uint32_t) e->p.process_set;
                q->group_id = e->p.group_id;
                q->group_size = e->p.group_size;
                q->n_set_ranks = e->p.n_set;
                q->set_ranks = e->p.set_ranks;
                rp[n_req++] = q;
        }
        Hvd__Ready ready = HVD__READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ready.n_requests = n_req;
        ready.requests = rp;
        ready.n_cached = n_cached;
        ready.cached = cached;
        ready.done_seq = atomic_load_explicit(&G.done_seq, memory_order_relaxed);
        ready.busy_usec = atomic_load_explicit(&G.busy_usec, memory_order_relaxed);
        ready.n_cached_waited_usec = any_waited ? n_cached : 0;
        ready.cached_waited_usec = waited;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        if (G.solo)
                r = solo_negotiate(&ready);
        else {
                /* the fast path's counters first: whatever this Ready leads
                 * to, the coordinator has counted what ran before it */
                hvd_fp_report(true);
                uint64_t limit = G.max_message_bytes ? G.max_message_bytes : HVD_WIRE_MAX_MESSAGE_BYTES;
                env.version = HVD_PROTOCOL_VERSION;
                size_t bytes = hvd__envelope__get_packed_size(&env);
                if (bytes <= limit)
                        r = hvd_wire_send(G.sock, &env, 0);
                else if (n > 1) {
                        r = hvd_link_send_ready(batch, n / 2);
                        if (r >= 0)
                                r = hvd_link_send_ready(batch + n / 2, n - n / 2);
                } else {
                        char reason[512];
                        snprintf(reason, sizeof reason,
                                 "tensor '%.200s': its request takes %zu bytes, more than the coordinator's "
                                 "max_message_size (%" PRIu64 " bytes; see hvd.conf(5))",
                                 batch[0]->name, bytes, limit);
                        hvd_job_abort(-EMSGSIZE, reason);
                        r = -EMSGSIZE;
                }
        }
out:
        free(reqs);
        free(rp);
        free(cached);
        free(waited);
        return r;
}

/* ---- the timeline ---- */

/* Tells the coordinator whether rank 0 records (it then adds readiness
 * times to schedules), or answers its request. Background thread. */
static void send_timeline_state(bool on, int code, const char *msg) {
        if (G.solo) {
                hvd_negotiator_set_timeline(G.neg, on);
                return;
        }
        Hvd__TimelineControl tc = HVD__TIMELINE_CONTROL__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        tc.start = on;
        tc.reply = true;
        tc.code = code;
        tc.message = (char *) msg;
        env.body_case = HVD__ENVELOPE__BODY_TIMELINE_CONTROL;
        env.timeline_control = &tc;
        (void) hvd_wire_send(G.sock, &env, ZMQ_DONTWAIT);
}

void hvd_link_timeline_sync(void) {
        bool on;
        if (hvd_timeline_take_change(&on))
                send_timeline_state(on, 0, "");
}

/* hvdctl timeline JOB start/stop, through the coordinator. */
static void timeline_remote(const Hvd__TimelineControl *tc) {
        char err[ERRLEN] = "", path[PATH_MAX];
        int r;
        if (G.rank != 0) {
                r = -EINVAL;
                snprintf(err, sizeof err, "rank %d records no timeline; rank 0 does", G.rank);
        } else if (tc->start)
                /* whoever may talk to the daemon must not make the job
                 * overwrite its files: a new file only */
                r = hvd_timeline_start(tc->file, tc->mark_cycles, true, err, sizeof err);
        else
                r = hvd_timeline_stop();
        bool on;
        hvd_timeline_take_change(&on);
        if (r >= 0 && tc->start && !realpath(tc->file, path))
                snprintf(path, sizeof path, "%s", tc->file);
        if (r < 0 && !err[0])
                snprintf(err, sizeof err, "%s", hvd_strerror(r));
        send_timeline_state(on, r, r < 0 ? err : tc->start ? path : "");
}
