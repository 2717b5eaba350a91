/* coordinator.c — hvd-coordinatord's reactor: one thread, one zmq_poll over
 * the worker socket, the control socket, a stop eventfd, a signalfd and one
 * pidfd per local worker. Order of one iteration: before_sleep() (send the
 * schedules that became ready, free finished jobs) → poll → handle every
 * readable source → housekeeping when its timer is due. Nothing blocks but
 * the poll; an idle daemon has no timer armed and uses no CPU. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
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

#include "coordinator.h"
#include "hvd.h"
#include "log.h"
#include "negotiate.h"
#include "strmap.h"
#include "util.h"
#include "wire.h"

#define HOUSEKEEPING_USEC (100 * USEC_PER_MSEC)
#define ABORTED_JOB_LINGER_USEC (30 * USEC_PER_SEC)
#define RECV_BATCH 512

typedef enum { JOB_JOINING, JOB_RUNNING, JOB_ABORTED } job_state_t;
static const char *const job_state_names[] = { "joining", "running", "aborted" };

typedef struct job job_t;

typedef struct worker {
        uint8_t id[256]; /* zmq routing id */
        size_t id_len;
        job_t *job;
        uint32_t rank, local_rank;
        pid_t pid;
        int pidfd;
        char host[HVD_WIRE_MAX_HOST + 1];
        bool goodbye; /* said goodbye: its exit is expected */
        bool exited;
} worker_t;

struct job {
        char id[HVD_WIRE_MAX_JOB_ID + 1];
        uint8_t secret[HVD_WIRE_MAX_SECRET];
        size_t secret_len;
        uint32_t size, local_size;
        job_state_t state;
        worker_t **ranks; /* [size], NULL until hello */
        uint32_t n_hello, n_live;
        hvd_negotiator_t *neg;
        char shm_name[96];
        uint64_t created_usec, aborted_usec;
        uint64_t fusion_threshold, cycle_time_usec;
        uint64_t cycles;
        char abort_reason[1024];
        int32_t departed_rank; /* a rank that said goodbye while others run */
};

struct hvd_daemon {
        hvd_daemon_config_t cfg;
        void *zctx;
        void *worker_sock, *control_sock;
        int stop_fd, sig_fd, lock_fd;
        char worker_ep[PATH_MAX + 16], control_ep[PATH_MAX + 16];
        char lock_path[PATH_MAX + 32];
        hvd_strmap_t *jobs;    /* job id → job_t */
        hvd_strmap_t *workers; /* routing id → worker_t */
        uint64_t start_usec, epoch, job_seq;
        uint64_t next_housekeeping;
        bool stopping;
        zmq_pollitem_t *items;
        worker_t **item_workers;
        size_t n_items, cap_items;
        char host[HVD_WIRE_MAX_HOST + 1];
};

/* ---- helpers ---- */

static int pidfd_open_compat(pid_t pid) {
#ifdef SYS_pidfd_open
        return (int) syscall(SYS_pidfd_open, pid, 0);
#else
        errno = ENOSYS;
        return -1;
#endif
}

static void send_error(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, int code,
                       const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void send_error(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, int code,
                       const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        Hvd__ErrorReply er = HVD__ERROR_REPLY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        er.code = code;
        er.message = msg;
        env.body_case = HVD__ENVELOPE__BODY_ERROR;
        env.error = &er;
        (void) hvd_wire_send_to(sock, id, id_len, &env, ZMQ_DONTWAIT);
}

static void send_to_worker(hvd_daemon_t *d, worker_t *w, Hvd__Envelope *env) {
        if (w->exited)
                return;
        int r = hvd_wire_send_to(d->worker_sock, w->id, w->id_len, env, ZMQ_DONTWAIT);
        if (r < 0)
                hvd_log_full(w->goodbye || w->job->state == JOB_ABORTED ? LOG_DEBUG : LOG_WARNING, 0,
                             "job %s: cannot send to rank %u (pid %d): %s", w->job->id, w->rank, (int) w->pid,
                             hvd_strerror(r));
}

static void job_abort(hvd_daemon_t *d, job_t *j, int lost_rank, int code, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static void job_abort(hvd_daemon_t *d, job_t *j, int lost_rank, int code, const char *fmt, ...) {
        if (j->state == JOB_ABORTED)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->abort_reason, sizeof j->abort_reason, fmt, ap);
        va_end(ap);
        j->state = JOB_ABORTED;
        j->aborted_usec = hvd_now_usec();
        hvd_log_error(0, "job %s aborted: %s", j->id, j->abort_reason);
        Hvd__Abort ab = HVD__ABORT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ab.job_id = j->id;
        ab.reason = j->abort_reason;
        ab.lost_rank = lost_rank;
        ab.code = code;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r])
                        send_to_worker(d, j->ranks[r], &env);
        d->next_housekeeping = 0;
}

static void worker_free(hvd_daemon_t *d, worker_t *w) {
        if (!w)
                return;
        hvd_strmap_remove(d->workers, w->id, w->id_len);
        if (w->pidfd >= 0)
                close(w->pidfd);
        free(w);
}

static void job_free(hvd_daemon_t *d, job_t *j) {
        if (!j)
                return;
        for (uint32_t r = 0; r < j->size; r++)
                worker_free(d, j->ranks[r]);
        free(j->ranks);
        hvd_negotiator_destroy(&j->neg);
        /* the workers unlink the segment once all are attached; this catches a
         * job that died before that */
        if (j->shm_name[0])
                shm_unlink(j->shm_name);
        free(j);
}

static void job_remove(hvd_daemon_t *d, job_t *j) {
        hvd_log_info("job %s removed (%s)", j->id, job_state_names[j->state]);
        hvd_strmap_remove(d->jobs, j->id, strlen(j->id));
        job_free(d, j);
}

/* ---- worker messages ---- */

static void send_welcome(hvd_daemon_t *d, job_t *j) {
        Hvd__RankInfo *infos = calloc(j->size, sizeof *infos);
        Hvd__RankInfo **ptrs = calloc(j->size, sizeof *ptrs);
        if (!infos || !ptrs) {
                free(infos);
                free(ptrs);
                job_abort(d, j, -1, -ENOMEM, "out of memory while welcoming job %s", j->id);
                return;
        }
        for (uint32_t r = 0; r < j->size; r++) {
                hvd__rank_info__init(&infos[r]);
                infos[r].rank = r;
                infos[r].local_rank = j->ranks[r]->local_rank;
                infos[r].pid = (uint32_t) j->ranks[r]->pid;
                infos[r].host = j->ranks[r]->host;
                ptrs[r] = &infos[r];
        }
        uint64_t slot = j->fusion_threshold;
        if (slot < (UINT64_C(4) << 20))
                slot = UINT64_C(4) << 20;
        if (slot > (UINT64_C(256) << 20))
                slot = UINT64_C(256) << 20;
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                Hvd__Welcome wel = HVD__WELCOME__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                wel.epoch = d->epoch;
                wel.rank = r;
                wel.size = j->size;
                wel.local_rank = w->local_rank;
                wel.local_size = j->local_size;
                wel.cross_rank = 0;
                wel.cross_size = 1;
                wel.shm_name = j->shm_name;
                wel.slot_bytes = slot;
                wel.fusion_threshold = j->fusion_threshold;
                wel.cycle_time_usec = j->cycle_time_usec;
                wel.collective_timeout_usec = d->cfg.collective_timeout_usec;
                wel.n_ranks = j->size;
                wel.ranks = ptrs;
                env.body_case = HVD__ENVELOPE__BODY_WELCOME;
                env.welcome = &wel;
                send_to_worker(d, w, &env);
        }
        free(infos);
        free(ptrs);
        j->state = JOB_RUNNING;
        hvd_log_notice("job %s running: %u ranks", j->id, j->size);
}

static void handle_hello(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__Hello *h) {
        if (hvd_strmap_get(d->workers, id, id_len)) {
                send_error(d, d->worker_sock, id, id_len, HVD_EPROTO, "hello sent twice on one connection");
                return;
        }
        if (h->local_size != h->world_size) {
                send_error(d, d->worker_sock, id, id_len, -EOPNOTSUPP,
                           "job %s spans several hosts (world size %u, %u ranks on this host): "
                           "multi-node jobs need peer daemons, which this daemon does not have configured",
                           h->job_id, h->world_size, h->local_size);
                return;
        }
        if (h->world_size > d->cfg.max_ranks_per_job) {
                send_error(d, d->worker_sock, id, id_len, -E2BIG,
                           "job %s: world size %u exceeds this daemon's max_ranks_per_job (%u)", h->job_id,
                           h->world_size, d->cfg.max_ranks_per_job);
                return;
        }
        job_t *j = hvd_strmap_get(d->jobs, h->job_id, strlen(h->job_id));
        if (!j) {
                if (hvd_strmap_size(d->jobs) >= d->cfg.max_jobs) {
                        send_error(d, d->worker_sock, id, id_len, -EUSERS,
                                   "job %s refused: this daemon already serves max_jobs (%u) jobs", h->job_id,
                                   d->cfg.max_jobs);
                        return;
                }
                j = calloc(1, sizeof *j);
                if (!j || !(j->ranks = calloc(h->world_size, sizeof *j->ranks))) {
                        free(j);
                        send_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                        return;
                }
                snprintf(j->id, sizeof j->id, "%s", h->job_id);
                memcpy(j->secret, h->secret.data, h->secret.len);
                j->secret_len = h->secret.len;
                j->size = h->world_size;
                j->local_size = h->local_size;
                j->state = JOB_JOINING;
                j->created_usec = hvd_now_usec();
                j->departed_rank = -1;
                j->fusion_threshold = h->fusion_threshold >= 0 ? (uint64_t) h->fusion_threshold
                                                               : d->cfg.fusion_threshold_bytes;
                j->cycle_time_usec = h->cycle_time_usec ? h->cycle_time_usec : d->cfg.cycle_time_usec;
                unsigned rnd = 0;
                int ufd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
                if (ufd >= 0) {
                        if (read(ufd, &rnd, sizeof rnd) < 0)
                                rnd = 0;
                        close(ufd);
                }
                snprintf(j->shm_name, sizeof j->shm_name, "/hvd-%d-%" PRIu64 "-%08x", (int) getpid(),
                         ++d->job_seq, rnd);
                int r = hvd_negotiator_new(j->size, d->cfg.max_tensors_per_job, j->fusion_threshold, &j->neg);
                if (r < 0 || hvd_strmap_put(d->jobs, j->id, strlen(j->id), j) < 0) {
                        j->shm_name[0] = 0;
                        job_free(d, j);
                        send_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                        return;
                }
                d->next_housekeeping = 0;
                hvd_log_info("job %s created: %u ranks", j->id, j->size);
        } else {
                if (j->secret_len != h->secret.len || memcmp(j->secret, h->secret.data, j->secret_len) != 0) {
                        hvd_log_warning("job %s: rank %u (pid %u) presented a wrong job secret", j->id, h->rank,
                                        h->pid);
                        send_error(d, d->worker_sock, id, id_len, HVD_EDENIED,
                                   "job %s: wrong job secret (HVD_JOB_SECRET does not match the job's)", j->id);
                        return;
                }
                if (j->state != JOB_JOINING) {
                        send_error(d, d->worker_sock, id, id_len, HVD_EDENIED,
                                   "job %s is %s: rank %u cannot join any more", j->id, job_state_names[j->state],
                                   h->rank);
                        return;
                }
                if (h->world_size != j->size) {
                        send_error(d, d->worker_sock, id, id_len, HVD_EMISMATCH,
                                   "job %s: rank %u says world size %u, the job has %u", j->id, h->rank,
                                   h->world_size, j->size);
                        return;
                }
                if (j->ranks[h->rank]) {
                        send_error(d, d->worker_sock, id, id_len, HVD_EDUPLICATE,
                                   "job %s: rank %u has already joined (pid %d)", j->id, h->rank,
                                   (int) j->ranks[h->rank]->pid);
                        return;
                }
        }
        worker_t *w = calloc(1, sizeof *w);
        if (!w) {
                send_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                return;
        }
        memcpy(w->id, id, id_len);
        w->id_len = id_len;
        w->job = j;
        w->rank = h->rank;
        w->local_rank = h->local_rank;
        w->pid = (pid_t) h->pid;
        snprintf(w->host, sizeof w->host, "%s", h->host[0] ? h->host : d->host);
        w->pidfd = pidfd_open_compat(w->pid);
        if (w->pidfd < 0)
                hvd_log_debug("job %s: no pidfd for rank %u (pid %d): %m", j->id, w->rank, (int) w->pid);
        if (hvd_strmap_put(d->workers, id, id_len, w) < 0) {
                if (w->pidfd >= 0)
                        close(w->pidfd);
                free(w);
                send_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                return;
        }
        j->ranks[h->rank] = w;
        j->n_hello++;
        j->n_live++;
        hvd_log_info("job %s: rank %u joined (pid %d), %u of %u", j->id, w->rank, (int) w->pid, j->n_hello,
                     j->size);
        if (j->n_hello == j->size)
                send_welcome(d, j);
}

static void handle_ready(hvd_daemon_t *d, worker_t *w, const Hvd__Ready *q) {
        job_t *j = w->job;
        if (j->state != JOB_RUNNING)
                return; /* joining: cannot happen (no welcome yet); aborted: dropped */
        if (w->goodbye) {
                job_abort(d, j, (int) w->rank, HVD_EPROTO,
                          "rank %u sent tensors after it shut down", w->rank);
                return;
        }
        if (j->departed_rank >= 0) {
                job_abort(d, j, j->departed_rank, HVD_EABORTED,
                          "rank %d has shut down, but rank %u still submits collectives; the job cannot go on",
                          j->departed_rank, w->rank);
                return;
        }
        char err[1024];
        j->cycles++;
        int r = hvd_negotiator_submit(j->neg, w->rank, q, err, sizeof err);
        if (r < 0)
                job_abort(d, j, -1, r, "rank %u: %s", w->rank, err);
}

static void worker_gone(hvd_daemon_t *d, worker_t *w, const char *why) {
        job_t *j = w->job;
        if (w->exited)
                return;
        w->exited = true;
        j->n_live--;
        if (!w->goodbye && j->state != JOB_ABORTED)
                job_abort(d, j, (int) w->rank, HVD_EABORTED,
                          "rank %u (pid %d on %s) %s without calling hvd_shutdown", w->rank, (int) w->pid,
                          w->host, why);
        d->next_housekeeping = 0;
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
        send_to_worker(d, w, &env);
        hvd_log_info("job %s: rank %u said goodbye", j->id, w->rank);
        if (j->state == JOB_RUNNING) {
                if (hvd_negotiator_any_pending(j->neg)) {
                        char pend[1024];
                        hvd_negotiator_describe_pending(j->neg, hvd_now_usec(), 0, pend, sizeof pend);
                        job_abort(d, j, (int) w->rank, HVD_EABORTED,
                                  "rank %u shut down while collectives were pending: %s", w->rank, pend);
                } else if (j->departed_rank < 0)
                        j->departed_rank = (int32_t) w->rank;
        }
        /* without a pidfd the goodbye is the last we hear of it */
        if (w->pidfd < 0)
                worker_gone(d, w, "said goodbye");
}

static void handle_worker_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                int id_len = zmq_recv(d->worker_sock, id, sizeof id, ZMQ_DONTWAIT);
                if (id_len < 0)
                        return; /* EAGAIN: drained */
                int more = 0;
                size_t ml = sizeof more;
                zmq_getsockopt(d->worker_sock, ZMQ_RCVMORE, &more, &ml);
                if (!more || id_len > (int) sizeof id)
                        continue;
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, d->worker_sock, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&msg);
                        continue;
                }
                /* drop any further frames: one envelope per message */
                while (zmq_msg_more(&msg)) {
                        zmq_msg_t extra;
                        zmq_msg_init(&extra);
                        zmq_msg_recv(&extra, d->worker_sock, ZMQ_DONTWAIT);
                        more = zmq_msg_more(&extra);
                        zmq_msg_close(&extra);
                        if (!more)
                                break;
                }
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &env, err, sizeof err);
                zmq_msg_close(&msg);
                worker_t *w = hvd_strmap_get(d->workers, id, (size_t) id_len);
                if (r < 0) {
                        hvd_log_warning("worker socket: rejected message%s%s: %s", w ? " from job " : "",
                                        w ? w->job->id : "", err);
                        send_error(d, d->worker_sock, id, (size_t) id_len, r, "message rejected: %s", err);
                        continue;
                }
                if (env->body_case == HVD__ENVELOPE__BODY_HELLO)
                        handle_hello(d, id, (size_t) id_len, env->hello);
                else if (!w)
                        send_error(d, d->worker_sock, id, (size_t) id_len, HVD_EPROTO,
                                   "say hello first: this connection has not joined a job");
                else if (env->body_case == HVD__ENVELOPE__BODY_READY)
                        handle_ready(d, w, env->ready);
                else if (env->body_case == HVD__ENVELOPE__BODY_GOODBYE)
                        handle_goodbye(d, w);
                else if (env->body_case == HVD__ENVELOPE__BODY_DONE)
                        ; /* counters only */
                else
                        send_error(d, d->worker_sock, id, (size_t) id_len, HVD_EPROTO,
                                   "unexpected message on the worker socket");
                hvd_wire_free(&env);
        }
}

/* ---- control socket ---- */

static void handle_status(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__StatusRequest *q) {
        Hvd__Status st = HVD__STATUS__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        uint64_t now = hvd_now_usec();
        st.version = (char *) PACKAGE_VERSION;
        st.uptime_usec = now - d->start_usec;
        st.pid = (uint32_t) getpid();
        st.runtime_dir = d->cfg.runtime_dir;
        st.epoch = d->epoch;
        st.fusion_threshold = d->cfg.fusion_threshold_bytes;
        st.cycle_time_usec = d->cfg.cycle_time_usec;
        st.host = d->host;
        size_t nj = hvd_strmap_size(d->jobs), k = 0, iter = 0;
        Hvd__JobStatus *js = calloc(nj ? nj : 1, sizeof *js);
        Hvd__JobStatus **jp = calloc(nj ? nj : 1, sizeof *jp);
        Hvd__RankInfo **all_ri = calloc(nj ? nj : 1, sizeof *all_ri);
        void *v;
        if (!js || !jp || !all_ri)
                goto out;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (q->job_id[0] && strcmp(q->job_id, j->id) != 0)
                        continue;
                Hvd__JobStatus *s = &js[k];
                hvd__job_status__init(s);
                s->job_id = j->id;
                s->size = j->size;
                s->state = (char *) job_state_names[j->state];
                s->age_usec = now - j->created_usec;
                s->cycles = j->cycles;
                s->abort_reason = j->abort_reason;
                hvd_negotiator_stats_t ns;
                hvd_negotiator_get_stats(j->neg, &ns);
                s->tensors_negotiated = ns.tensors_negotiated;
                s->fused_ops = ns.fused_ops;
                s->bytes_reduced = ns.bytes_scheduled;
                s->schedules = ns.schedules;
                s->cache_hits = ns.cache_hits;
                s->tensors_in_fused_ops = ns.tensors_in_fused_ops;
                s->joined_ranks = ns.joined;
                Hvd__RankInfo *ri = calloc(j->size, sizeof *ri);
                Hvd__RankInfo **rp = calloc(j->size, sizeof *rp);
                all_ri[k] = ri;
                if (ri && rp) {
                        for (uint32_t r = 0; r < j->size; r++) {
                                if (!j->ranks[r])
                                        continue;
                                hvd__rank_info__init(&ri[s->n_ranks]);
                                ri[s->n_ranks].rank = r;
                                ri[s->n_ranks].local_rank = j->ranks[r]->local_rank;
                                ri[s->n_ranks].pid = (uint32_t) j->ranks[r]->pid;
                                ri[s->n_ranks].host = j->ranks[r]->host;
                                rp[s->n_ranks] = &ri[s->n_ranks];
                                s->n_ranks++;
                        }
                        s->ranks = rp;
                } else
                        free(rp);
                jp[k] = s;
                k++;
        }
        st.n_jobs = k;
        st.jobs = jp;
        env.body_case = HVD__ENVELOPE__BODY_STATUS;
        env.status = &st;
        (void) hvd_wire_send_to(d->control_sock, id, id_len, &env, ZMQ_DONTWAIT);
out:
        for (size_t i = 0; i < k; i++) {
                free(js[i].ranks);
                free(all_ri[i]);
        }
        free(all_ri);
        free(js);
        free(jp);
}

static void handle_control_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                int id_len = zmq_recv(d->control_sock, id, sizeof id, ZMQ_DONTWAIT);
                if (id_len < 0)
                        return;
                int more = 0;
                size_t ml = sizeof more;
                zmq_getsockopt(d->control_sock, ZMQ_RCVMORE, &more, &ml);
                if (!more || id_len > (int) sizeof id)
                        continue;
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, d->control_sock, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&msg);
                        continue;
                }
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &env, err, sizeof err);
                zmq_msg_close(&msg);
                if (r < 0) {
                        send_error(d, d->control_sock, id, (size_t) id_len, r, "request rejected: %s", err);
                        continue;
                }
                if (env->body_case == HVD__ENVELOPE__BODY_STATUS_REQUEST)
                        handle_status(d, id, (size_t) id_len, env->status_request);
                else
                        send_error(d, d->control_sock, id, (size_t) id_len, -EOPNOTSUPP,
                                   "unsupported control request");
                hvd_wire_free(&env);
        }
}

/* ---- loop ---- */

static void before_sleep(hvd_daemon_t *d) {
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (j->state != JOB_RUNNING || !hvd_negotiator_has_work(j->neg))
                        continue;
                Hvd__Schedule *s = NULL;
                int r = hvd_negotiator_take_schedule(j->neg, &s);
                if (r < 0) {
                        job_abort(d, j, -1, r, "cannot build a schedule: %s", hvd_strerror(r));
                        continue;
                }
                if (r == 0)
                        continue;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
                env.schedule = s;
                for (uint32_t k = 0; k < j->size; k++)
                        if (j->ranks[k] && !j->ranks[k]->goodbye)
                                send_to_worker(d, j->ranks[k], &env);
                hvd_negotiator_schedule_free(&s);
        }
}

static void housekeeping(hvd_daemon_t *d, uint64_t now) {
        size_t iter = 0;
        void *v;
        bool again = false;
        job_t *dead[64];
        size_t n_dead = 0;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (j->state == JOB_JOINING) {
                        if (now - j->created_usec > d->cfg.start_timeout_usec) {
                                char missing[512] = "";
                                size_t o = 0;
                                for (uint32_t r = 0; r < j->size && o < sizeof missing - 16; r++)
                                        if (!j->ranks[r])
                                                o += (size_t) snprintf(missing + o, sizeof missing - o, "%s%u",
                                                                       o ? ", " : "", r);
                                job_abort(d, j, -1, HVD_ETIMEOUT,
                                          "start timeout: %u of %u ranks joined within %.1f s; missing ranks [%s]",
                                          j->n_hello, j->size, (double) d->cfg.start_timeout_usec / 1e6, missing);
                        } else
                                again = true;
                }
                if (j->n_live == 0 && (j->state != JOB_JOINING || j->n_hello > 0)) {
                        if (n_dead < ELEMENTSOF(dead))
                                dead[n_dead++] = j;
                } else if (j->state == JOB_ABORTED) {
                        if (now - j->aborted_usec > ABORTED_JOB_LINGER_USEC && n_dead < ELEMENTSOF(dead))
                                dead[n_dead++] = j;
                        else
                                again = true;
                }
        }
        for (size_t i = 0; i < n_dead; i++)
                job_remove(d, dead[i]);
        d->next_housekeeping = again ? now + HOUSEKEEPING_USEC : UINT64_MAX;
}

static int build_poll_items(hvd_daemon_t *d) {
        size_t need = 4 + hvd_strmap_size(d->workers);
        if (need > d->cap_items) {
                size_t cap = need * 2;
                zmq_pollitem_t *it = realloc(d->items, cap * sizeof *it);
                if (!it)
                        return -ENOMEM;
                d->items = it;
                worker_t **iw = realloc(d->item_workers, cap * sizeof *iw);
                if (!iw)
                        return -ENOMEM;
                d->item_workers = iw;
                d->cap_items = cap;
        }
        size_t n = 0;
        d->items[n++] = (zmq_pollitem_t){ .socket = d->worker_sock, .events = ZMQ_POLLIN };
        d->items[n++] = (zmq_pollitem_t){ .socket = d->control_sock, .events = ZMQ_POLLIN };
        d->items[n++] = (zmq_pollitem_t){ .fd = d->stop_fd, .events = ZMQ_POLLIN };
        if (d->sig_fd >= 0)
                d->items[n++] = (zmq_pollitem_t){ .fd = d->sig_fd, .events = ZMQ_POLLIN };
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->workers, &iter, NULL, NULL, &v)) {
                worker_t *w = v;
                if (w->pidfd < 0 || w->exited)
                        continue;
                d->item_workers[n] = w;
                d->items[n++] = (zmq_pollitem_t){ .fd = w->pidfd, .events = ZMQ_POLLIN };
        }
        d->n_items = n;
        return 0;
}

static void handle_signal(hvd_daemon_t *d) {
        struct signalfd_siginfo si;
        if (read(d->sig_fd, &si, sizeof si) != sizeof si)
                return;
        if (si.ssi_signo == SIGHUP) {
                hvd_log_notice("SIGHUP: nothing to reload in this version");
                return;
        }
        hvd_log_notice("received signal %u, stopping", si.ssi_signo);
        d->stopping = true;
}

void hvd_daemon_notify(const char *state);
void hvd_daemon_notify(const char *state) {
        const char *path = getenv("NOTIFY_SOCKET");
        if (!path || !*path)
                return;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t len = strlen(path);
        if (len >= sizeof sa.sun_path)
                return;
        memcpy(sa.sun_path, path, len);
        if (sa.sun_path[0] == '@')
                sa.sun_path[0] = 0;
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return;
        (void) sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *) &sa,
                      (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len));
        close(fd);
}

int hvd_daemon_run(hvd_daemon_t *d) {
        if (d->cfg.notify) {
                char st[PATH_MAX + 64];
                snprintf(st, sizeof st, "READY=1\nSTATUS=Serving workers on %s", d->worker_ep);
                hvd_daemon_notify(st);
        }
        hvd_log_notice("hvd-coordinatord %s ready on %s", PACKAGE_VERSION, d->worker_ep);
        d->next_housekeeping = UINT64_MAX;
        while (!d->stopping) {
                before_sleep(d);
                int r = build_poll_items(d);
                if (r < 0)
                        return hvd_log_error(r, "Cannot build the poll set");
                uint64_t now = hvd_now_usec();
                long timeout = -1;
                if (d->next_housekeeping != UINT64_MAX)
                        timeout = d->next_housekeeping <= now ? 0 : (long) ((d->next_housekeeping - now + 999) / 1000);
                int n = zmq_poll(d->items, (int) d->n_items, timeout);
                if (n < 0) {
                        if (zmq_errno() == EINTR)
                                continue;
                        return hvd_log_error(-zmq_errno(), "zmq_poll failed");
                }
                if (d->items[2].revents & ZMQ_POLLIN) {
                        uint64_t x;
                        if (read(d->stop_fd, &x, sizeof x) < 0)
                                (void) 0;
                        d->stopping = true;
                }
                if (d->sig_fd >= 0 && (d->items[3].revents & ZMQ_POLLIN))
                        handle_signal(d);
                /* messages first: a worker's last words arrive before its exit */
                bool exits = false;
                for (size_t i = 3; i < d->n_items; i++)
                        if (d->items[i].fd != d->sig_fd && (d->items[i].revents & ZMQ_POLLIN))
                                exits = true;
                if ((d->items[0].revents & ZMQ_POLLIN) || exits)
                        handle_worker_socket(d);
                for (size_t i = 3; i < d->n_items; i++)
                        if (d->items[i].fd != d->sig_fd && (d->items[i].revents & ZMQ_POLLIN))
                                worker_gone(d, d->item_workers[i], "exited");
                if (d->items[1].revents & ZMQ_POLLIN)
                        handle_control_socket(d);
                now = hvd_now_usec();
                if (now >= d->next_housekeeping)
                        housekeeping(d, now);
        }
        if (d->cfg.notify)
                hvd_daemon_notify("STOPPING=1\nSTATUS=Stopping");
        return 0;
}

void hvd_daemon_stop(hvd_daemon_t *d) {
        uint64_t one = 1;
        if (write(d->stop_fd, &one, sizeof one) < 0)
                (void) 0;
}

/* ---- setup ---- */

static int take_lock(hvd_daemon_t *d) {
        snprintf(d->lock_path, sizeof d->lock_path, "%s/coordinatord.lock", d->cfg.runtime_dir);
        d->lock_fd = open(d->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (d->lock_fd < 0)
                return hvd_log_error(-errno, "Cannot open lock file %s", d->lock_path);
        if (flock(d->lock_fd, LOCK_EX | LOCK_NB) < 0) {
                int r = -errno;
                char pid[32] = "";
                ssize_t k = pread(d->lock_fd, pid, sizeof pid - 1, 0);
                if (k > 0)
                        pid[k] = 0;
                pid[strcspn(pid, "\n")] = 0;
                if (r == -EWOULDBLOCK)
                        r = -EBUSY;
                close(d->lock_fd);
                d->lock_fd = -1;
                return hvd_log_error(r, "Another hvd-coordinatord (pid %s) already serves %s", pid[0] ? pid : "?",
                                     d->cfg.runtime_dir);
        }
        char buf[32];
        int len = snprintf(buf, sizeof buf, "%d\n", (int) getpid());
        if (ftruncate(d->lock_fd, 0) < 0 || pwrite(d->lock_fd, buf, (size_t) len, 0) < 0)
                (void) 0;
        return 0;
}

static int bind_socket(hvd_daemon_t *d, void **sock, char *ep, size_t ep_len, const char *name) {
        snprintf(ep, ep_len, "ipc://%s/%s", d->cfg.runtime_dir, name);
        *sock = zmq_socket(d->zctx, ZMQ_ROUTER);
        if (!*sock)
                return hvd_log_error(-zmq_errno(), "Cannot create socket");
        int one = 1, zero = 0, hwm = 100000;
        int64_t maxmsg = (int64_t) d->cfg.max_message_bytes;
        zmq_setsockopt(*sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(*sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
        zmq_setsockopt(*sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        zmq_setsockopt(*sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(*sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
        if (zmq_bind(*sock, ep) < 0)
                return hvd_log_error(-zmq_errno(), "Cannot bind %s", ep);
        const char *path = ep + 6;
        if (chmod(path, d->cfg.socket_mode) < 0)
                return hvd_log_error(-errno, "Cannot chmod %s", path);
        if (d->cfg.socket_group[0]) {
                struct group *g = getgrnam(d->cfg.socket_group);
                if (!g)
                        return hvd_log_error(-ENOENT, "Socket group '%s' does not exist", d->cfg.socket_group);
                if (chown(path, (uid_t) -1, g->gr_gid) < 0)
                        return hvd_log_error(-errno, "Cannot give %s to group %s", path, d->cfg.socket_group);
        }
        return 0;
}

int hvd_daemon_new(const hvd_daemon_config_t *cfg, hvd_daemon_t **ret) {
        hvd_daemon_t *d = calloc(1, sizeof *d);
        int r;
        if (!d)
                return -ENOMEM;
        d->cfg = *cfg;
        d->stop_fd = d->sig_fd = d->lock_fd = -1;
        d->start_usec = hvd_now_usec();
        if (gethostname(d->host, sizeof d->host - 1) < 0)
                snprintf(d->host, sizeof d->host, "localhost");
        int ufd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (ufd < 0 || read(ufd, &d->epoch, sizeof d->epoch) != sizeof d->epoch)
                d->epoch = d->start_usec ^ ((uint64_t) getpid() << 32);
        if (ufd >= 0)
                close(ufd);
        if (mkdir(cfg->runtime_dir, 0755) < 0 && errno != EEXIST) {
                r = hvd_log_error(-errno, "Cannot create runtime directory %s", cfg->runtime_dir);
                goto fail;
        }
        if ((r = take_lock(d)) < 0)
                goto fail;
        d->jobs = hvd_strmap_new();
        d->workers = hvd_strmap_new();
        d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        d->zctx = zmq_ctx_new();
        if (!d->jobs || !d->workers || d->stop_fd < 0 || !d->zctx) {
                r = -ENOMEM;
                goto fail;
        }
        if ((r = bind_socket(d, &d->worker_sock, d->worker_ep, sizeof d->worker_ep, "worker.sock")) < 0 ||
            (r = bind_socket(d, &d->control_sock, d->control_ep, sizeof d->control_ep, "control.sock")) < 0)
                goto fail;
        if (cfg->handle_signals) {
                sigset_t mask;
                sigemptyset(&mask);
                sigaddset(&mask, SIGTERM);
                sigaddset(&mask, SIGINT);
                sigaddset(&mask, SIGHUP);
                pthread_sigmask(SIG_BLOCK, &mask, NULL);
                d->sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
                if (d->sig_fd < 0) {
                        r = hvd_log_error(-errno, "signalfd failed");
                        goto fail;
                }
        }
        *ret = d;
        return 0;
fail:
        hvd_daemon_destroy(&d);
        return r;
}

void hvd_daemon_destroy(hvd_daemon_t **dp) {
        if (!dp || !*dp)
                return;
        hvd_daemon_t *d = *dp;
        if (d->jobs) {
                size_t iter = 0;
                void *v;
                while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                        job_t *j = v;
                        if (j->state != JOB_ABORTED && j->n_live)
                                job_abort(d, j, -1, HVD_EABORTED, "the coordinator is shutting down");
                }
                iter = 0;
                while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v))
                        job_free(d, v);
        }
        hvd_strmap_destroy(&d->jobs);
        hvd_strmap_destroy(&d->workers);
        if (d->worker_sock) {
                zmq_close(d->worker_sock);
                unlink(d->worker_ep + 6);
        }
        if (d->control_sock) {
                zmq_close(d->control_sock);
                unlink(d->control_ep + 6);
        }
        if (d->zctx)
                zmq_ctx_term(d->zctx);
        if (d->stop_fd >= 0)
                close(d->stop_fd);
        if (d->sig_fd >= 0)
                close(d->sig_fd);
        if (d->lock_fd >= 0) {
                unlink(d->lock_path);
                close(d->lock_fd);
        }
        free(d->items);
        free(d->item_workers);
        free(d);
        *dp = NULL;
}

const char *hvd_daemon_worker_endpoint(const hvd_daemon_t *d) {
        return d->worker_ep;
}

const char *hvd_daemon_control_endpoint(const hvd_daemon_t *d) {
        return d->control_ep;
}
