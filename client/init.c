/* init.c — a worker's life cycle. hvd_init: the settings (settings.c, the
 * environment read once), the timeline, the state, then either a job of
 * one rank (a data plane of its own, no daemon) or a job with a daemon:
 * the data-plane listener, the join (hello, welcome), the topology the
 * welcome gives and the data plane on it; then the background thread.
 * hvd_shutdown: the thread stopped, goodbye said, every handle failed,
 * everything torn down. A failed hvd_init leaves nothing behind. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "conf.h"
#include "launcher_join.h"
#include "settings.h"
#include "tcp.h"
#include "thread.h"
#include "timeline.h"
#include "tune_search.h"
#include "util.h"

/* G.lock's sections are short and the script's thread and the
 * background thread take it in turns: a waiter spins a little before it
 * sleeps (glibc's adaptive mutex) */
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#define CLIENT_LOCK_INITIALIZER PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#else
#define CLIENT_LOCK_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#endif

struct hvd_client hvd_client = {
        .lock = CLIENT_LOCK_INITIALIZER,
        .cond = PTHREAD_COND_INITIALIZER,
        .runner = PTHREAD_MUTEX_INITIALIZER,
        .wake_fd = -1,
        .listen_fd = -1,
        .daemon_pidfd = -1,
};

/* Without G.lock: every submission asks, and the background thread may
 * hold the lock. state is written under it, atomically; a submission looks
 * again under the lock. */
int hvd_is_initialized(void) {
        return __atomic_load_n(&G.state, __ATOMIC_ACQUIRE) == 1;
}

static void known_free(void) {
        if (!G.known)
                return;
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(G.known, &iter, NULL, NULL, &v)) {
                hvd_known_t *k = v;
                hvd_params_free(&k->p);
                free(k->rank_rows);
                free(k->splits);
                free(k);
        }
        hvd_strmap_destroy(&G.known);
}

/* Undoes hvd_init, whatever part of it ran (the background thread is not
 * running). */
static void teardown(void) {
        hvd_timeline_stop();
        if (G.tune_log) {
                fclose(G.tune_log);
                G.tune_log = NULL;
        }
        atomic_store(&hvd_timeline_changed, false);
        G.hb_interval_usec = 0;
        if (G.daemon_pidfd >= 0) {
                close(G.daemon_pidfd);
                G.daemon_pidfd = -1;
        }
        hvd_gpu_close();
        if (G.listen_fd >= 0) {
                close(G.listen_fd);
                G.listen_fd = -1;
        }
        hvd_psets_clear();
        hvd_fastpath_destroy(&G.fp); /* before the backend: the board is in its memory */
        G.fp_node = G.fp_scribe = false;
        G.fp_node_n = 0;
        hvd_fp_free_held();
        hvd_backend_destroy(&G.backend);
        hvd_negotiator_destroy(&G.neg);
        if (G.sock) {
                zmq_close(G.sock);
                G.sock = NULL;
        }
        if (G.zctx) {
                while (zmq_ctx_term(G.zctx) < 0 && zmq_errno() == EINTR)
                        ; /* restarted after a signal, or its threads and descriptors stay behind */
                G.zctx = NULL;
        }
        if (G.wake_fd >= 0) {
                close(G.wake_fd);
                G.wake_fd = -1;
        }
        known_free();
        hvd_strmap_destroy(&G.inflight);
        hvd_schedule_forget();
        free(G.queue);
        G.queue = NULL;
        G.n_queue = G.cap_queue = 0;
        hvd_link_held_free();
}

/* ---- the state ---- */

/* Where this rank is, as its launcher said (the welcome has the last word). */
static void place_from_settings(const hvd_settings_t *s) {
        G.solo = s->solo;
        G.rank = s->rank;
        G.size = s->size;
        G.local_rank = s->local_rank;
        G.local_size = s->local_size;
        G.cross_rank = s->cross_rank;
        G.cross_size = s->cross_size;
        G.cycle_time_usec = s->cycle_time_usec;
}

static int state_open(void) {
        G.inflight = hvd_strmap_new();
        G.known = hvd_strmap_new();
        G.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        G.zctx = zmq_ctx_new();
        G.abort_code = 0;
        G.abort_reason[0] = 0;
        G.failure_told = false;
        G.stop = false;
        G.next_seq = 1;
        atomic_store(&G.done_seq, 0);
        atomic_store(&G.busy_usec, 0);
        G.last_send_usec = 0;
        G.fp_done = G.fp_sent = (hvd_fp_counters_t){ 0 };
        if (!G.inflight || !G.known || G.wake_fd < 0 || !G.zctx)
                return hvd_error(-ENOMEM, "out of memory");
        return 0;
}

/* ---- a job of one rank ---- */

/* The same negotiation table as a daemon's runs in the worker, and its
 * schedules go straight to the data plane. */
/* One host: the fast path (a job of one rank too, on a board of its own);
 * several: node mode, the host's readiness aggregated on the board. */
static int fastpath_open(char *err, size_t err_len) {
        const void *aborted = NULL;
        void *board = hvd_backend_board(G.backend, &aborted);
        if (board && hvd_fastpath_new(board, G.local_rank, G.local_size, aborted, &G.fp) < 0) {
                snprintf(err, err_len, "out of memory");
                return -ENOMEM;
        }
        if (G.fp)
                hvd_fastpath_set_spin_gate(G.fp, &G.app_waiting);
        G.fp_node = G.fp && G.cross_size > 1;
        G.fp_scribe = G.fp_node && G.local_rank == 0;
        return 0;
}

static int solo_open(const hvd_settings_t *s) {
        char err[ERRLEN];
        hvd_topology_t topo = { .rank = 0,
                                .size = 1,
                                .local_rank = 0,
                                .local_size = 1,
                                .cross_rank = 0,
                                .cross_size = 1,
                                .listen_fd = -1,
                                .shm_chunk_bytes = s->shm_chunk_bytes,
                                .shm_direct_bytes = s->shm_direct_bytes,
                                .shm_zero_copy_bytes = s->shm_zero_copy_bytes,
                                .shm_slot_stream = s->shm_slot_stream };
        int r = hvd_cpu_backend_new("", &topo, 4096, 0, NULL, NULL, &G.backend, err, sizeof err);
        if (r >= 0 && s->fast_path)
                r = fastpath_open(err, sizeof err);
        if (r < 0)
                return hvd_error(r, "%s", err);
        r = hvd_negotiator_new(1, 1u << 20, HVD_DEFAULT_FUSION_THRESHOLD, &G.neg);
        if (r < 0)
                return hvd_error(r, "out of memory");
        /* a job of one rank uses its GPU too: a communicator of one */
        hvd_gpu_load(s);
        if (G.gpu.devices > 0) {
                int zero = 0;
                topo.rank_cross = &zero;
                topo.rank_local = &zero;
                hvd_gpu_open(&topo, NULL, s->has_gpu_device ? s->gpu_device : 0, s->fusion_threshold);
        }
        return 0;
}

/* ---- a job with a daemon: the join ---- */

/* An elastic rank keeps its data-plane listener from one generation to
 * the next, so the next generation's ring neighbours connect to the same
 * address again: a copy of it stays here while the backend owns and
 * closes its own. Whatever the last generation left queued on it is
 * dropped before this rank enrols again (nobody of the next generation
 * has its address yet), and a stray connection of an earlier generation
 * that comes later is refused by its job hash (tcp.c). */
static struct {
        int fd;
        char key[256]; /* what it was opened for: a change opens another */
        char addr[sizeof G.data_addr];
} kept_listener = { .fd = -1 };

static bool listener_reuse(const char *key) {
        if (kept_listener.fd < 0 || strcmp(kept_listener.key, key) != 0)
                return false;
        int fd;
        fcntl(kept_listener.fd, F_SETFL, fcntl(kept_listener.fd, F_GETFL) | O_NONBLOCK);
        while ((fd = accept4(kept_listener.fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
                close(fd);
        G.listen_fd = fcntl(kept_listener.fd, F_DUPFD_CLOEXEC, 0);
        if (G.listen_fd < 0)
                return false;
        snprintf(G.data_addr, sizeof G.data_addr, "%s", kept_listener.addr);
        return true;
}

static void listener_keep(const char *key) {
        if (kept_listener.fd >= 0)
                close(kept_listener.fd);
        kept_listener.fd = fcntl(G.listen_fd, F_DUPFD_CLOEXEC, 0);
        snprintf(kept_listener.key, sizeof kept_listener.key, "%s", key);
        snprintf(kept_listener.addr, sizeof kept_listener.addr, "%s", G.data_addr);
}

/* The address other hosts reach this rank at: HVD_DATA_ADDR, else the
 * local address of the route to the root daemon, else this host's name
 * resolved, else loopback (hosts emulated on one machine); and the
 * listener there, on a port of HVD_DATA_PORT (an elastic rank's of the
 * generation before, where it was opened alike). */
static int listener_open(const hvd_settings_t *s) {
        const char *ip = s->data_addr;
        char resolved[64] = "127.0.0.1", adv_host[64] = "";
        unsigned adv_port = 0;
        if (s->data_addr_port) {
                /* HOST:PORT: an address a NAT, firewall or proxy forwards to
                 * this rank; the listener binds every interface (the
                 * advertised host may not be ours) */
                if (hvd_tcp_resolve(s->data_addr_host, adv_host, sizeof adv_host) < 0)
                        return hvd_error(-ENOENT, "HVD_DATA_ADDR='%s': cannot resolve '%s' to an IPv4 address", ip,
                                         s->data_addr_host);
                adv_port = s->data_addr_port;
        } else if (!ip && !(s->root_peer && hvd_tcp_route_addr(s->root_peer, resolved, sizeof resolved) == 0)) {
                if (s->hostname)
                        hvd_tcp_resolve(s->hostname, resolved, sizeof resolved);
        }
        const char *bind_ip = adv_port ? "" : ip ? ip : "";
        const char *advertised = adv_port ? adv_host : ip ? ip : resolved;
        char key[256];
        snprintf(key, sizeof key, "%s|%u|%u|%s|%u", bind_ip, (unsigned) s->data_port_lo, (unsigned) s->data_port_hi,
                 advertised, adv_port);
        if (s->elastic && listener_reuse(key))
                return 0;
        G.listen_fd = hvd_tcp_listen(bind_ip, s->data_port_lo, s->data_port_hi, advertised, adv_port, G.data_addr,
                                     sizeof G.data_addr);
        if (G.listen_fd >= 0) {
                if (s->elastic)
                        listener_keep(key);
                return 0;
        }
        int r = G.listen_fd;
        if (r == -EADDRINUSE && s->data_port)
                return hvd_error(r, "cannot open the data-plane listener: no free port in HVD_DATA_PORT=%s",
                                 s->data_port);
        return hvd_error(r, "cannot open the data-plane listener on %s: %s", *bind_ip ? bind_ip : "0.0.0.0",
                         hvd_strerror(r));
}

/* The daemon socket, connected (libzmq connects in the background: a
 * missing or forbidden ipc socket is told here, anything else by the
 * welcome's deadline). */
static int link_open(const char *endpoint) {
        if (strncmp(endpoint, "ipc://", 6) == 0) {
                struct stat st;
                if (stat(endpoint + 6, &st) < 0)
                        return hvd_error(HVD_ENODAEMON,
                                         "no hvd-coordinatord at %s: %s (start the service, or launch with hvdrun, "
                                         "which starts a private one)",
                                         endpoint, strerror(errno));
                if (access(endpoint + 6, R_OK | W_OK) < 0)
                        return hvd_error(HVD_EDENIED, "permission denied on %s (not in group hvd?)", endpoint + 6);
        }
        G.sock = zmq_socket(G.zctx, ZMQ_DEALER);
        if (!G.sock) {
                int e = zmq_errno();
                return hvd_error(-e, "cannot create a socket: %s", zmq_strerror(e));
        }
        int zero = 0;
        int64_t maxmsg = (int64_t) HVD_WIRE_MAX_MESSAGE_BYTES;
        zmq_setsockopt(G.sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(G.sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        int r = hvd_zmq_connect(G.sock, endpoint);
        if (r < 0)
                return hvd_error(r, "cannot connect to %s: %s", endpoint, zmq_strerror(-r));
        return 0;
}

/* The autotuner's settings for the root daemon. */
static void autotune_spec(const hvd_settings_t *s, Hvd__AutotuneSpec *at) {
        at->on = true;
        at->log = G.tune_log != NULL;
        at->warmup_samples = s->autotune_warmup_samples;
        at->steps_per_sample = s->autotune_steps_per_sample;
        at->max_samples = s->autotune_max_samples;
        at->has_noise = s->has_autotune_noise;
        at->noise = s->autotune_noise;
        at->fixed_threshold = s->has_fusion_threshold;
        at->fixed_cycle = s->has_cycle_time;
        at->has_start_threshold = s->has_autotune_start_threshold;
        at->start_threshold = s->autotune_start_threshold;
        at->start_cycle_time_usec = s->autotune_start_cycle_usec;
        at->switches = G.tune_switches;
        at->fixed_switches = G.tune_fixed_switches;
}

/* The data plane's switches as this rank's settings have them, and those
 * its user set (the autotuner switches only the others). */
static void tune_switches_init(const hvd_settings_t *s) {
        uint32_t sw = 0, fixed = 0;
        if (s->has_tcp_send_thread)
                fixed |= UINT32_C(1) << HVD_TUNE_SWITCH_SEND_THREAD;
        if (s->tcp_send_thread)
                sw |= UINT32_C(1) << HVD_TUNE_SWITCH_SEND_THREAD;
        if (s->ring_chunk_bytes)
                fixed |= UINT32_C(1) << HVD_TUNE_SWITCH_SMALL_CHUNKS;
        if (s->ring_chunk_bytes == HVD_TUNE_SMALL_CHUNK_BYTES)
                sw |= UINT32_C(1) << HVD_TUNE_SWITCH_SMALL_CHUNKS;
        if (s->shm_chunk_bytes)
                fixed |= UINT32_C(1) << HVD_TUNE_SWITCH_SHM_CHUNKS;
        if (s->shm_chunk_bytes == HVD_TUNE_SHM_CHUNK_BYTES)
                sw |= UINT32_C(1) << HVD_TUNE_SWITCH_SHM_CHUNKS;
        G.tune_switches = sw;
        G.tune_fixed_switches = fixed;
}

/* Rank 0's CSV of the autotuner (HVD_AUTOTUNE_LOG), created or truncated
 * now, with its header: the root daemon sends the rows as it goes. A later
 * elastic generation appends: its tuner goes on with the same log. */
static int tune_log_open(const char *path, char *err, size_t len) {
        bool go_on = hvd_elastic_placed_generation() > 1;
        G.tune_log = fopen(path, go_on ? "ae" : "we");
        if (!G.tune_log) {
                int r = -errno;
                snprintf(err, len, "HVD_AUTOTUNE_LOG='%s': cannot create it: %s", path, strerror(errno));
                return r;
        }
        if (!go_on || ftell(G.tune_log) == 0)
                fputs(HVD_TUNE_CSV_HEADER "\n", G.tune_log);
        fflush(G.tune_log);
        return 0;
}

/* Says hello: who this rank is, and the job's settings it brings.
 * *bytes: the hello's size. */
static int hello_send(const hvd_settings_t *s, const char *endpoint, size_t *bytes) {
        char host[HVD_WIRE_MAX_HOST + 1] = "";
        if (s->hostname)
                snprintf(host, sizeof host, "%s", s->hostname);
        else if (gethostname(host, sizeof host - 1) < 0)
                host[0] = 0;
        Hvd__Hello hello = HVD__HELLO__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        hello.job_id = (char *) s->job_id;
        hello.secret.data = (uint8_t *) s->secret;
        hello.secret.len = s->secret_len;
        hello.world_size = (uint32_t) G.size;
        hello.rank = (uint32_t) G.rank;
        hello.local_rank = (uint32_t) G.local_rank;
        hello.local_size = (uint32_t) G.local_size;
        hello.pid = (uint32_t) getpid();
        hello.host = host;
        hello.device = HVD_DEVICE_CPU;
        hello.fusion_threshold = s->has_fusion_threshold ? (int64_t) s->fusion_threshold : -1;
        hello.cycle_time_usec = G.cycle_time_usec;
        hello.data_addr = G.data_addr;
        hello.stall_check_usec = s->stall_check_usec;
        hello.stall_shutdown_usec = s->stall_shutdown_usec;
        hello.timeline = hvd_timeline_on();
        hello.ring_checksum = s->ring_checksum;
        hello.board = s->fast_path;
        hello.launcher = (char *) s->rank_source;
        Hvd__AutotuneSpec at = HVD__AUTOTUNE_SPEC__INIT;
        tune_switches_init(s);
        if (s->autotune) {
                autotune_spec(s, &at);
                hello.autotune = &at;
        }
        uint8_t nccl_id[HVD_NCCL_ID_BYTES];
        if (G.rank == 0 && G.gpu.devices > 0 && hvd_gpu_unique_id(nccl_id)) {
                hello.nccl_id.data = nccl_id;
                hello.nccl_id.len = sizeof nccl_id;
        }
        hello.cross_rank = (uint32_t) G.cross_rank;
        hello.cross_size = (uint32_t) G.cross_size;
        hello.root_peer = (char *) (s->root_peer ? s->root_peer : "");
        char *hostv[HVD_MAX_HOSTS];
        for (size_t i = 0; i < s->n_hosts; i++)
                hostv[i] = (char *) hvd_settings_host(s, i);
        if (s->n_hosts) {
                hello.n_hosts = s->n_hosts;
                hello.hosts = hostv;
        }
        env.body_case = HVD__ENVELOPE__BODY_HELLO;
        env.hello = &hello;
        int r = hvd_wire_send(G.sock, &env, 0);
        if (r < 0)
                return hvd_error(r, "cannot send hello to %s: %s", endpoint, hvd_strerror(r));
        *bytes = hvd__envelope__get_packed_size(&env);
        return 0;
}

/* Waits for the welcome (*welcome, the caller frees it); an error or an
 * abort from the coordinator, or the deadline, fails the join. */
static int welcome_wait(const char *endpoint, const char *job_id, uint64_t timeout_usec, const char *hint,
                        Hvd__Envelope **welcome) {
        uint64_t deadline = hvd_now_usec() + timeout_usec;
        for (;;) {
                uint64_t now = hvd_now_usec();
                if (now >= deadline)
                        return hvd_error(HVD_ETIMEOUT,
                                         "rank %d: no welcome from the coordinator at %s within %.1f s (job %s; "
                                         "are all %d ranks started?%s)",
                                         G.rank, endpoint, (double) timeout_usec / 1e6, job_id, G.size, hint);
                zmq_pollitem_t it = { .socket = G.sock, .events = ZMQ_POLLIN };
                int n = zmq_poll(&it, 1, (long) ((deadline - now + 999) / 1000));
                if (n < 0 && zmq_errno() == EINTR)
                        continue;
                if (n <= 0)
                        continue;
                Hvd__Envelope *reply = NULL;
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, G.sock, 0) < 0) {
                        zmq_msg_close(&msg);
                        continue;
                }
                char err[512];
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &reply, err, sizeof err);
                zmq_msg_close(&msg);
                if (r < 0)
                        return hvd_error(r, "invalid reply from the coordinator: %s", err);
                if (reply->body_case == HVD__ENVELOPE__BODY_WELCOME) {
                        *welcome = reply;
                        return 0;
                }
                if (reply->body_case == HVD__ENVELOPE__BODY_ERROR) {
                        r = reply->error->code < 0 ? reply->error->code : HVD_EPROTO;
                        hvd_last_error_set("%s", reply->error->message);
                } else if (reply->body_case == HVD__ENVELOPE__BODY_ABORT) {
                        r = reply->abort->code < 0 ? reply->abort->code : HVD_EABORTED;
                        hvd_last_error_set("job %s aborted: %s", job_id, reply->abort->reason);
                } else
                        r = hvd_error(HVD_EPROTO, "unexpected reply from the coordinator");
                hvd_wire_free(&reply);
                return r;
        }
}

static int join(const hvd_settings_t *s, Hvd__Envelope **welcome) {
        char ep[PATH_MAX + 32];
        const char *endpoint = hvd_settings_coordinator(s, ep, sizeof ep);
        int r = link_open(endpoint);
        size_t hello_bytes = 0;
        if (r >= 0)
                r = hello_send(s, endpoint, &hello_bytes);
        if (r < 0)
                return r;
        /* the limit is only known from the welcome; a daemon configured
         * below this hello's size drops it without a word (4K is the least
         * max_message_size allows) */
        char hint[160] = "";
        if (hello_bytes > 4096)
                snprintf(hint, sizeof hint,
                         "; or its max_message_size is below this hello's %zu bytes (the host list), and it "
                         "dropped the connection",
                         hello_bytes);
        return welcome_wait(endpoint, s->job_id, s->start_timeout_usec + 3 * USEC_PER_SEC, hint, welcome);
}

/* Where this rank is in the job, and what the daemons decided. */
static void welcome_apply(const Hvd__Welcome *w) {
        G.rank = (int) w->rank;
        G.size = (int) w->size;
        G.local_rank = (int) w->local_rank;
        G.local_size = (int) w->local_size;
        G.cross_rank = (int) w->cross_rank;
        G.cross_size = (int) w->cross_size;
        if (w->cycle_time_usec)
                G.cycle_time_usec = w->cycle_time_usec;
        G.epoch = w->epoch;
        G.hb_interval_usec = w->heartbeat_interval_usec;
        G.last_hb_usec = hvd_now_usec();
        G.peer_timeout_usec = w->peer_timeout_usec;
        G.max_message_bytes = w->max_message_bytes;
#ifdef SYS_pidfd_open
        if (w->daemon_pid) {
                G.daemon_pid = (pid_t) w->daemon_pid;
                G.daemon_pidfd = (int) syscall(SYS_pidfd_open, G.daemon_pid, 0);
        }
#endif
}

/* ---- a job with a daemon: the topology and the data plane ---- */

/* The welcome's rank table, by rank. */
typedef struct rank_table {
        int *cross, *local;
        char **addrs;
} rank_table_t;

static void rank_table_free(rank_table_t *t) {
        free(t->cross);
        free(t->local);
        free(t->addrs);
}

static int rank_table_new(const Hvd__Welcome *w, rank_table_t *t) {
        t->cross = calloc((size_t) G.size, sizeof(int));
        t->local = calloc((size_t) G.size, sizeof(int));
        t->addrs = calloc((size_t) G.size, sizeof(char *));
        if (!t->cross || !t->local || !t->addrs || w->n_ranks != (size_t) G.size) {
                rank_table_free(t);
                return hvd_error(w->n_ranks != (size_t) G.size ? HVD_EPROTO : -ENOMEM,
                                 "the coordinator's rank table does not match the job");
        }
        for (size_t i = 0; i < w->n_ranks; i++) {
                uint32_t q = w->ranks[i]->rank;
                if (q < (uint32_t) G.size) {
                        t->cross[q] = (int) w->ranks[i]->cross_rank;
                        t->local[q] = (int) w->ranks[i]->local_rank;
                        t->addrs[q] = w->ranks[i]->data_addr;
                }
        }
        return 0;
}

/* FNV-1a of the job id: tells the TCP ring's connections of two jobs apart. */
static uint64_t job_hash(const char *job_id) {
        uint64_t h = UINT64_C(1469598103934665603);
        for (const char *c = job_id; *c; c++)
                h = (h ^ (uint8_t) *c) * UINT64_C(1099511628211);
        return h;
}

static int data_plane_open(const hvd_settings_t *s, const Hvd__Welcome *w) {
        rank_table_t t;
        int r = rank_table_new(w, &t);
        if (r < 0)
                return r;
        hvd_topology_t topo = {
                .rank = G.rank,
                .size = G.size,
                .local_rank = G.local_rank,
                .local_size = G.local_size,
                .cross_rank = G.cross_rank,
                .cross_size = G.cross_size,
                .rank_cross = t.cross,
                .rank_local = t.local,
                .addrs = t.addrs,
                .listen_fd = G.listen_fd,
                .job_hash = job_hash(s->job_id),
                .ring_checksum = w->ring_checksum,
                .shm_chunk_bytes = s->shm_chunk_bytes,
                .shm_direct_bytes = s->shm_direct_bytes,
                .shm_zero_copy_bytes = s->shm_zero_copy_bytes,
                .shm_slot_stream = s->shm_slot_stream,
                .tcp_send_thread = s->tcp_send_thread,
                .tcp_frame_bytes = s->tcp_frame_bytes,
                .ring_chunk_bytes = s->ring_chunk_bytes,
                .spin_gate = &G.app_waiting,
        };
        G.listen_fd = -1; /* the backend owns it now */
        char err[ERRLEN];
        r = hvd_cpu_backend_new(w->shm_name, &topo, w->slot_bytes, w->collective_timeout_usec, hvd_link_wait_check,
                                NULL, &G.backend, err, sizeof err);
        G.fusion_threshold = w->fusion_threshold;
        if (r >= 0 && (G.local_size > 1 || G.size == 1) && s->fast_path)
                r = fastpath_open(err, sizeof err);
        /* one host with the fast path: the daemon sees no steady-state
         * schedules, so local rank 0 measures the steps for the autotuner */
        hvd_tune_meter_reset(&G.tune_meter, s->autotune && G.fp && !G.fp_node && G.local_rank == 0);
        if (r >= 0 && G.gpu.devices > 0) {
                if (w->nccl_id.len != HVD_NCCL_ID_BYTES)
                        snprintf(G.gpu.why, sizeof G.gpu.why, "rank 0 has no GPU backend: no NCCL communicator");
                else
                        hvd_gpu_open(&topo, w->nccl_id.data,
                                     s->has_gpu_device ? s->gpu_device : G.local_rank % G.gpu.devices,
                                     w->fusion_threshold);
        }
        rank_table_free(&t);
        if (r < 0)
                return hvd_error(r, "rank %d: data plane: %s", G.rank, err);
        return 0;
}

static int job_open(const hvd_settings_t *s) {
        snprintf(G.job_id, sizeof G.job_id, "%s", s->job_id);
        hvd_gpu_load(s);
        G.data_addr[0] = 0;
        int r;
        if (G.cross_size > 1 && (r = listener_open(s)) < 0)
                return r;
        Hvd__Envelope *wenv = NULL;
        if ((r = join(s, &wenv)) < 0)
                return r;
        hvd_assert(wenv && wenv->body_case == HVD__ENVELOPE__BODY_WELCOME);
        welcome_apply(wenv->welcome);
        r = data_plane_open(s, wenv->welcome);
        hvd_wire_free(&wenv);
        return r;
}

/* ---- the life cycle ---- */

/* Who placed this rank (settings.h: rank_source); set by hvd_init. */
static const char *rank_source = "none";

const char *hvd_rank_source(void) {
        return rank_source;
}

int hvd_init(void) {
        if (hvd_is_initialized())
                return 0;
        hvd_last_error_clear();
        hvd_settings_t s;
        char err[ERRLEN];
        int r = hvd_settings_read(&s, NULL, NULL, err, sizeof err);
        if (r < 0)
                return hvd_error(r, "%s", err);
        if (s.from_launcher && (r = hvd_launcher_join_open(&s, err, sizeof err)) < 0)
                return hvd_error(r, "%s", err);
        if ((r = hvd_elastic_enroll(&s)) < 0) {
                hvd_launcher_join_close(false);
                return r;
        }
        rank_source = s.rank_source;
        place_from_settings(&s);
        /* a later elastic generation's rank 0 goes on with the file of the
         * one before (the launcher's rank 0 stays rank 0 while it lives) */
        if (s.timeline_file && s.rank == 0 &&
            (r = hvd_elastic_placed_generation() > 1
                         ? hvd_timeline_continue(s.timeline_file, s.timeline_mark_cycles, err, sizeof err)
                         : hvd_timeline_start(s.timeline_file, s.timeline_mark_cycles, false, err, sizeof err)) < 0) {
                hvd_launcher_join_close(false);
                return hvd_error(r, "HVD_TIMELINE: %s", err);
        }
        if (s.autotune_log && (r = tune_log_open(s.autotune_log, err, sizeof err)) < 0) {
                teardown();
                hvd_launcher_join_close(false);
                return hvd_error(r, "%s", err);
        }
        if ((r = state_open()) < 0 || (r = G.solo ? solo_open(&s) : job_open(&s)) < 0)
                goto fail;
        hvd_elastic_draw_reset(); /* before the generation's first operation */
        if ((r = hvd_thread_start(&G.thread, hvd_bg_main, NULL)) < 0) {
                hvd_last_error_set("cannot start the background thread");
                goto fail;
        }
        pthread_setname_np(G.thread, "hvd-bg"); /* for top -H, perf and the tests */
        pthread_mutex_lock(&G.lock);
        __atomic_store_n(&G.state, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&G.lock);
        hvd_outbuf_set_open(true);
        return 0;
fail:
        teardown();
        hvd_launcher_join_close(false);
        return r;
}

int hvd_shutdown(void) {
        pthread_mutex_lock(&G.lock);
        if (G.state != 1) {
                pthread_mutex_unlock(&G.lock);
                return 0;
        }
        G.stop = true;
        __atomic_store_n(&G.state, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&G.lock);
        hvd_elastic_generation_ended(NULL);
        hvd_link_wake();
        pthread_join(G.thread, NULL);
        if (!G.abort_code)
                hvd_fp_report(true);
        /* a user thread still in a wait may be taking a turn */
        pthread_mutex_lock(&G.runner);
        hvd_fastpath_t *fp = TAKE_PTR(G.fp);
        pthread_mutex_unlock(&G.runner);
        hvd_fastpath_destroy(&fp);
        hvd_link_goodbye();
        pthread_mutex_lock(&G.lock);
        hvd_inflight_fail(HVD_ESHUTDOWN, "hvd has been shut down");
        pthread_mutex_unlock(&G.lock);
        teardown();
        /* a private daemon in this process serves the node's other ranks
         * until they have left */
        hvd_launcher_join_close(true);
        hvd_outbuf_set_open(false);
        return 0;
}
