/* loop.c — hvd-coordinatord's reactor: new/run/stop/destroy, the poll
 * set, and the order of one turn: loop_before_sleep (batches go on, schedules
 * go out) → poll → every readable source, messages before exits → the
 * loop_housekeeping of each module when its earliest deadline is due. Idle
 * with no deadline, the daemon sleeps in zmq_poll and uses no CPU. */
#include "config.h"

#include <sys/epoll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

#include "internal.h"

/* Before sleep, every turn: what a host batched goes on (at the root: is
 * entered), then the negotiating daemon's schedules go out, or a relay
 * sends what its group made ready. */
void loop_before_sleep(hvd_daemon_t *d) {
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                batch_flush(d, j);
                if (job_negotiates(j))
                        root_send_schedules(d, j);
                else if (j->rl)
                        relay_flush(d, j);
        }
}

/* One job's periodic checks, in order; returns when it needs the next. */
static uint64_t job_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick) {
        uint64_t next = join_housekeeping(d, j, now, tick);
        next = earliest(next, root_check_stalls(d, j, now, tick));
        next = earliest(next, worker_check_heartbeats(d, j, now));
        next = earliest(next, batch_housekeeping(d, j, now, tick));
        if (j->rl)
                next = earliest(next, relay_housekeeping(d, j, now, tick));
        next = earliest(next, root_probe_nodes(d, j, now, tick));
        return next;
}

/* Whether a job is over and may go: its workers are gone, or it was
 * aborted ABORTED_JOB_LINGER_USEC ago (so that late ranks learn why);
 * else *next says when to look again. */
static bool job_done(const job_t *j, uint64_t now, uint64_t tick, uint64_t *next) {
        if (j->n_live == 0 && (j->state != JOB_JOINING || j->n_hello > 0))
                return true;
        if (j->state != JOB_ABORTED)
                return false;
        /* aborted_usec may be later than now: aborted by this very pass */
        if (now > j->aborted_usec && now - j->aborted_usec > ABORTED_JOB_LINGER_USEC)
                return true;
        *next = HVD_MIN(*next, tick);
        return false;
}

/* The periodic work of every module, in order, when its timer is due:
 * workers' exits, the links to root daemons, each job's checks, then the
 * removal of finished jobs. Each part returns its next deadline; the
 * earliest arms the timer (none: the daemon sleeps until a message). */
void loop_housekeeping(hvd_daemon_t *d, uint64_t now) {
        uint64_t tick = now + HVD_MIN(HOUSEKEEPING_USEC, daemon_ping_usec(d));
        uint64_t next = worker_housekeeping(d, now, tick);
        next = earliest(next, uplink_housekeeping(d, now, tick));
        next = earliest(next, elastic_housekeeping(d, now));
        next = earliest(next, offer_housekeeping(d, now));
        job_t *dead[64];
        size_t n_dead = 0, iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                next = earliest(next, job_housekeeping(d, j, now, tick));
                if (job_done(j, now, tick, &next) && n_dead < ELEMENTSOF(dead))
                        dead[n_dead++] = j;
        }
        for (size_t i = 0; i < n_dead; i++)
                job_remove(d, dead[i]);
        d->next_housekeeping = next;
}

/* The poll set of this turn: the daemon's sockets and descriptors, one
 * socket per root daemon it reports to, the workers' pidfds as one epoll
 * set, and the metrics listener's items last (http_first on). */
static int build_poll_items(hvd_daemon_t *d) {
        size_t need = 8 + hvd_strmap_size(d->peers) + (d->http ? hvd_http_max_items(d->http) : 0);
        if (need > d->cap_items) {
                size_t cap = need * 2;
                zmq_pollitem_t *it = realloc(d->items, cap * sizeof *it);
                if (it)
                        d->items = it;
                peer_t **ip = realloc(d->item_peers, cap * sizeof *ip);
                if (ip)
                        d->item_peers = ip;
                uint8_t *ik = realloc(d->item_kind, cap);
                if (ik)
                        d->item_kind = ik;
                if (!it || !ip || !ik)
                        return -ENOMEM;
                d->cap_items = cap;
        }
        size_t n = 0;
#define ADD(kind, sock_, fd_, p)                                                                                       \
        do {                                                                                                           \
                d->items[n] = (zmq_pollitem_t){ .socket = (sock_), .fd = (fd_), .events = ZMQ_POLLIN };                \
                d->item_peers[n] = (p);                                                                                \
                d->item_kind[n] = (kind);                                                                              \
                n++;                                                                                                   \
        } while (0)
        ADD(ITEM_WORKER, d->worker_sock, 0, NULL);
        ADD(ITEM_CONTROL, d->control_sock, 0, NULL);
        ADD(ITEM_STOP, NULL, d->stop_fd, NULL);
        if (d->sig_fd >= 0)
                ADD(ITEM_SIGNAL, NULL, d->sig_fd, NULL);
        if (d->peer_sock)
                ADD(ITEM_PEER, d->peer_sock, 0, NULL);
        ADD(ITEM_ZAP, hvd_zap_socket(d->zap), 0, NULL);
        if (hvd_zap_monitor_socket(d->zap))
                ADD(ITEM_ZAP_MONITOR, hvd_zap_monitor_socket(d->zap), 0, NULL);
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->peers, &iter, NULL, NULL, &v)) {
                peer_t *p = v;
                if (p->sock && !p->lost)
                        ADD(ITEM_ROOT, p->sock, 0, p);
        }
        ADD(ITEM_PIDFD, NULL, d->pid_epfd, NULL);
#undef ADD
        d->http_first = n;
        if (d->http) {
                size_t k = hvd_http_fill_items(d->http, d->items + n);
                for (size_t i = n; i < n + k; i++) {
                        d->item_peers[i] = NULL;
                        d->item_kind[i] = ITEM_HTTP;
                }
                n += k;
        }
        hvd_assert(n <= d->cap_items);
        d->n_items = n;
        return 0;
}

int hvd_daemon_run(hvd_daemon_t *d) {
        /* the sockets were bound (and listen) in hvd_daemon_new: workers can connect now */
        if (d->cfg.notify) {
                char st[PATH_MAX + 64];
                snprintf(st, sizeof st, "READY=1\nSTATUS=Serving 0 jobs, 0 workers on %s", d->worker_ep + 6);
                service_notify(st);
                d->watchdog_usec = service_watchdog_usec();
                if (d->watchdog_usec) {
                        service_notify("WATCHDOG=1");
                        d->next_watchdog = hvd_now_usec() + d->watchdog_usec;
                }
        }
        hvd_log_notice("hvd-coordinatord %s ready on %s", PACKAGE_VERSION, d->worker_ep);
        d->next_housekeeping = d->cfg.elastic_root[0] ? 0 : UINT64_MAX; /* the first offer goes at once */
        while (!d->stopping) {
                loop_before_sleep(d);
                if (d->cfg.notify)
                        service_notify_status(d);
                if (d->wake_usec) {
                        hvd_histogram_observe(&d->metrics.iteration, hvd_now_usec() - d->wake_usec);
                        d->wake_usec = 0;
                }
                int r = build_poll_items(d);
                if (r < 0)
                        return hvd_log_error(r, "Cannot build the poll set");
                uint64_t now = hvd_now_usec();
                uint64_t wake = d->next_housekeeping;
                if (d->http)
                        wake = earliest(wake, hvd_http_expire(d->http, now));
                long timeout = -1;
                if (d->watchdog_usec && d->next_watchdog < wake)
                        wake = d->next_watchdog;
                if (wake != UINT64_MAX)
                        timeout = wake <= now ? 0 : (long) ((wake - now + 999) / 1000);
                int n = zmq_poll(d->items, (int) d->n_items, timeout);
                if (n < 0) {
                        if (zmq_errno() == EINTR)
                                continue;
                        return hvd_log_error(-zmq_errno(), "zmq_poll failed");
                }
                if (n > 0)
                        d->wake_usec = hvd_now_usec();
                /* messages first: a worker's last words arrive before its exit */
                bool exits = false, worker_msgs = false, http = false;
                for (size_t i = 0; i < d->n_items; i++) {
                        if (!(d->items[i].revents & ZMQ_POLLIN))
                                continue;
                        switch (d->item_kind[i]) {
                        case ITEM_STOP: {
                                uint64_t x;
                                if (read(d->stop_fd, &x, sizeof x) < 0)
                                        (void) 0;
                                d->stopping = true;
                                break;
                        }
                        case ITEM_SIGNAL: service_handle_signal(d); break;
                        case ITEM_PIDFD: exits = true; break;
                        case ITEM_WORKER: worker_msgs = true; break;
                        case ITEM_CONTROL: control_handle_socket(d); break;
                        case ITEM_PEER: root_handle_socket(d); break;
                        case ITEM_ROOT: uplink_handle_socket(d, d->item_peers[i]); break;
                        case ITEM_HTTP: http = true; break;
                        case ITEM_ZAP: hvd_zap_handle(d->zap); break;
                        case ITEM_ZAP_MONITOR: hvd_zap_handle_monitor(d->zap); break;
                        }
                }
                if (worker_msgs || exits)
                        worker_handle_socket(d);
                if (exits)
                        worker_reap(d);
                if (http)
                        hvd_http_dispatch(d->http, d->items + d->http_first, d->n_items - d->http_first,
                                          hvd_now_usec());
                now = hvd_now_usec();
                if (now >= d->next_housekeeping)
                        loop_housekeeping(d, now);
                if (d->watchdog_usec && now >= d->next_watchdog) {
                        service_notify("WATCHDOG=1");
                        d->next_watchdog = now + d->watchdog_usec;
                }
        }
        if (d->cfg.notify) {
                char st[128];
                size_t nj = hvd_strmap_size(d->jobs);
                snprintf(st, sizeof st, "STOPPING=1\nSTATUS=Stopping: telling %zu job%s, removing the sockets", nj,
                         nj == 1 ? "" : "s");
                service_notify(st);
        }
        return 0;
}

void hvd_daemon_stop(hvd_daemon_t *d) {
        uint64_t one = 1;
        if (write(d->stop_fd, &one, sizeof one) < 0)
                (void) 0;
}

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

int hvd_daemon_new(const hvd_daemon_config_t *cfg, hvd_daemon_t **ret) {
        hvd_daemon_t *d = calloc(1, sizeof *d);
        int r;
        if (!d)
                return -ENOMEM;
        d->cfg = *cfg;
        d->stop_fd = d->sig_fd = d->lock_fd = d->pid_epfd = -1;
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
        d->peers = hvd_strmap_new();
        d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        d->pid_epfd = epoll_create1(EPOLL_CLOEXEC);
        d->zctx = zmq_ctx_new();
        if (!d->jobs || !d->workers || !d->peers || d->stop_fd < 0 || d->pid_epfd < 0 || !d->zctx) {
                r = -ENOMEM;
                goto fail;
        }
        if ((r = hvd_zap_new(d->zctx, cfg, &d->zap)) < 0)
                goto fail;
        if ((r = io_bind_local(d, &d->worker_sock, d->worker_ep, sizeof d->worker_ep, "worker.sock")) < 0 ||
            (r = io_bind_local(d, &d->control_sock, d->control_ep, sizeof d->control_ep, "control.sock")) < 0)
                goto fail;
        if (cfg->peer_listen[0] && (r = io_bind_peer(d)) < 0)
                goto fail;
        if (cfg->metrics_listen[0]) {
                char err[512];
                if ((r = hvd_http_new(cfg->metrics_listen, control_render_metrics, d, &d->metrics, &d->http, err,
                                      sizeof err)) < 0) {
                        hvd_log_error(0, "%s", err);
                        goto fail;
                }
                hvd_log_info("metrics at http://%s/metrics", hvd_http_address(d->http));
        }
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

/* Every live worker of j has said goodbye: nobody to tell of the end (a
 * daemon embedded in a rank that waited for the others to leave). */
static bool job_departed(const hvd_daemon_t *d, const job_t *j) {
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->workers, &iter, NULL, NULL, &v)) {
                const worker_t *w = v;
                if (w->job == j && !w->exited && !w->goodbye)
                        return false;
        }
        return true;
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
                        if (j->state != JOB_ABORTED && j->n_live && !job_departed(d, j))
                                job_abort(d, j, -1, HVD_EABORTED, "the coordinator is shutting down");
                }
                iter = 0;
                while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v))
                        job_free(d, v);
        }
        hvd_strmap_destroy(&d->jobs);
        hvd_strmap_destroy(&d->workers);
        if (d->peers) {
                size_t iter = 0;
                void *v;
                while (hvd_strmap_next(d->peers, &iter, NULL, NULL, &v)) {
                        peer_t *p = v;
                        if (p->sock)
                                zmq_close(p->sock);
                        free(p);
                }
        }
        hvd_strmap_destroy(&d->peers);
        elastic_free(d);
        offer_free(d);
        hvd_http_destroy(&d->http);
        hvd_zap_stop_monitor(d->zap);
        if (d->peer_sock) {
                zmq_close(d->peer_sock);
                char path[PATH_MAX + 32];
                snprintf(path, sizeof path, "%s/peer.endpoint", d->cfg.runtime_dir);
                unlink(path);
        }
        if (d->worker_sock) {
                zmq_close(d->worker_sock);
                unlink(d->worker_ep + 6);
        }
        if (d->control_sock) {
                zmq_close(d->control_sock);
                unlink(d->control_ep + 6);
        }
        hvd_zap_destroy(&d->zap);
        /* a signal interrupts the termination; it must be restarted, or
         * the context's threads and descriptors stay behind */
        while (d->zctx && zmq_ctx_term(d->zctx) < 0 && zmq_errno() == EINTR)
                ;
        if (d->stop_fd >= 0)
                close(d->stop_fd);
        if (d->pid_epfd >= 0)
                close(d->pid_epfd);
        if (d->sig_fd >= 0)
                close(d->sig_fd);
        if (d->lock_fd >= 0) {
                unlink(d->lock_path);
                close(d->lock_fd);
        }
        free(d->items);
        free(d->item_peers);
        free(d->item_kind);
        for (size_t i = 0; i < N_TOMBS; i++)
                free(d->tombs[i].joined);
        free(d);
        *dp = NULL;
}

const char *hvd_daemon_worker_endpoint(const hvd_daemon_t *d) {
        return d->worker_ep;
}

const char *hvd_daemon_control_endpoint(const hvd_daemon_t *d) {
        return d->control_ep;
}

void hvd_daemon_sizes(const hvd_daemon_t *d, size_t *jobs, size_t *workers, size_t *peers) {
        *jobs = hvd_strmap_size(d->jobs);
        *workers = hvd_strmap_size(d->workers);
        *peers = hvd_strmap_size(d->peers);
}
