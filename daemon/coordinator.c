/* coordinator.c — hvd-coordinatord's reactor: one thread, one zmq_poll over
 * the worker socket, the control socket, the peer socket (other daemons
 * reach this one there), one socket per root daemon this one reports to, a
 * stop eventfd, a signalfd and one pidfd per local worker. Order of one
 * iteration: before_sleep() (send the schedules that became ready, forward
 * this node's readiness to remote roots) → poll → handle every readable
 * source → housekeeping when its timer is due. Nothing blocks but the poll;
 * an idle daemon with no multi-node job has no timer armed and uses no CPU.
 *
 * A job's root is the daemon of its first host (cross rank 0): it alone
 * holds the negotiation table, checks consistency and plans schedules. Every
 * other daemon of the job forwards its ranks' readiness (batched, one
 * message per reactor iteration) and passes schedules to its workers. */
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
#include "zap.h"

#define HOUSEKEEPING_USEC (100 * USEC_PER_MSEC)
#define ABORTED_JOB_LINGER_USEC (30 * USEC_PER_SEC)
#define RECV_BATCH 512

typedef enum { JOB_JOINING, JOB_RUNNING, JOB_ABORTED } job_state_t;
static const char *const job_state_names[] = { "joining", "running", "aborted" };

typedef struct job job_t;

/* A connection to a remote root daemon (this daemon is not the root). */
typedef struct peer {
        char endpoint[HVD_WIRE_MAX_TEXT + 1];
        void *sock; /* DEALER */
        uint64_t last_heard_usec, last_ping_usec, rtt_usec;
        uint32_t n_jobs;
        bool lost;
} peer_t;

/* What the job's rank table says about one rank. */
typedef struct rinfo {
        bool known;
        uint32_t local_rank, pid, cross_rank;
        char host[HVD_WIRE_MAX_HOST + 1];
        char data_addr[HVD_WIRE_MAX_HOST + 9];
} rinfo_t;

/* Root only: one node of a job. */
typedef struct node {
        bool joined, local;
        uint8_t id[256]; /* routing id on the peer socket */
        size_t id_len;
        uint64_t last_heard_usec;
        uint32_t n_ranks;
} node_t;

typedef struct worker {
        uint8_t id[256]; /* zmq routing id */
        size_t id_len;
        job_t *job;
        uint32_t rank, local_rank;
        pid_t pid;
        int pidfd;
        char host[HVD_WIRE_MAX_HOST + 1];
        char data_addr[HVD_WIRE_MAX_HOST + 9];
        bool goodbye; /* said goodbye: its exit is expected */
        bool exited;
} worker_t;

struct job {
        char id[HVD_WIRE_MAX_JOB_ID + 1];
        uint8_t secret[HVD_WIRE_MAX_SECRET];
        size_t secret_len;
        uid_t owner_uid; /* the uid of the first local worker (ZAP over ipc); only it may join */
        bool owned;
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
        /* several nodes */
        uint32_t cross_rank, cross_size;
        bool is_root;
        char **hosts;      /* [cross_size] */
        rinfo_t *table;    /* [size] */
        node_t *nodes;     /* root: [cross_size] */
        uint32_t n_nodes_joined;
        peer_t *root;      /* not root: where the root is */
        bool joined_root;  /* not root: NodeJoin sent */
        Hvd__RankReady **fwd; /* not root: readiness to forward, owned */
        size_t n_fwd, cap_fwd;
        uint32_t *departed; /* not root: goodbyes to forward */
        size_t n_departed;
        uint8_t nccl_id[128]; /* from the rank that has a GPU backend (rank 0) */
        size_t nccl_id_len;
        uint64_t stall_check_usec, stall_shutdown_usec;
        bool stall_warned;
        char stalled[1024]; /* last stall report, for status */
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
        hvd_strmap_t *peers;   /* root endpoint → peer_t */
        void *peer_sock;       /* ROUTER on cfg.peer_listen, or NULL */
        hvd_zap_t *zap;        /* ZAP handler, CURVE keys */
        char peer_ep[256];
        uint64_t start_usec, epoch, job_seq;
        uint64_t next_housekeeping;
        bool stopping;
        zmq_pollitem_t *items;
        worker_t **item_workers;
        peer_t **item_peers;
        uint8_t *item_kind;
        size_t n_items, cap_items, cap_kind;
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

static void send_to_local_workers(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env, bool skip_goodbye) {
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && !(skip_goodbye && j->ranks[r]->goodbye))
                        send_to_worker(d, j->ranks[r], env);
}

/* Root: to every remote node that joined. */
static void send_to_nodes(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        if (!j->is_root || !j->nodes)
                return;
        for (uint32_t c = 0; c < j->cross_size; c++) {
                node_t *n = &j->nodes[c];
                if (!n->joined || n->local)
                        continue;
                int r = hvd_wire_send_to(d->peer_sock, n->id, n->id_len, env, ZMQ_DONTWAIT);
                if (r < 0)
                        hvd_log_warning("job %s: cannot reach node %u (%s): %s", j->id, c,
                                        j->hosts ? j->hosts[c] : "?", hvd_strerror(r));
        }
}

static void send_to_root(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        if (!j->root || j->root->lost)
                return;
        int r = hvd_wire_send(j->root->sock, env, ZMQ_DONTWAIT);
        if (r < 0)
                hvd_log_warning("job %s: cannot reach the root daemon at %s: %s", j->id, j->root->endpoint,
                                hvd_strerror(r));
}

static const char *host_of(const job_t *j, uint32_t cross_rank) {
        return j->hosts && cross_rank < j->cross_size ? j->hosts[cross_rank] : "?";
}

/* Aborts the job here and tells everyone who has to know: the local
 * workers, and the other daemons (root: every node; otherwise: the root,
 * unless the abort came from it). */
static void job_abort_ex(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
static void job_abort_ex(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, const char *fmt, ...) {
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
        send_to_local_workers(d, j, &env, false);
        if (j->is_root)
                send_to_nodes(d, j, &env);
        else if (!from_root)
                send_to_root(d, j, &env);
        d->next_housekeeping = 0;
}

#define job_abort(d, j, lost, code, ...) job_abort_ex((d), (j), false, (lost), (code), __VA_ARGS__)

static void worker_free(hvd_daemon_t *d, worker_t *w) {
        if (!w)
                return;
        hvd_strmap_remove(d->workers, w->id, w->id_len);
        if (w->pidfd >= 0)
                close(w->pidfd);
        free(w);
}

static void fwd_clear(job_t *j) {
        for (size_t i = 0; i < j->n_fwd; i++)
                protobuf_c_message_free_unpacked(&j->fwd[i]->base, NULL);
        j->n_fwd = 0;
        j->n_departed = 0;
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
        if (j->hosts)
                for (uint32_t c = 0; c < j->cross_size; c++)
                        free(j->hosts[c]);
        free(j->hosts);
        free(j->table);
        free(j->nodes);
        fwd_clear(j);
        free(j->fwd);
        free(j->departed);
        if (j->root)
                j->root->n_jobs--;
        free(j);
}

static void job_set_nccl_id(job_t *j, const ProtobufCBinaryData *id) {
        if (id->len && id->len <= sizeof j->nccl_id && !j->nccl_id_len) {
                memcpy(j->nccl_id, id->data, id->len);
                j->nccl_id_len = id->len;
        }
}

static void job_remove(hvd_daemon_t *d, job_t *j) {
        hvd_log_info("job %s removed (%s)", j->id, job_state_names[j->state]);
        hvd_strmap_remove(d->jobs, j->id, strlen(j->id));
        job_free(d, j);
}

/* ---- peers (connections to remote root daemons) ---- */

static peer_t *peer_get(hvd_daemon_t *d, const char *endpoint) {
        peer_t *p = hvd_strmap_get(d->peers, endpoint, strlen(endpoint));
        if (p && !p->lost)
                return p;
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
        p->sock = zmq_socket(d->zctx, ZMQ_DEALER);
        if (!p->sock)
                return NULL;
        int zero = 0, hwm = 100000, ivl = 1000, tmo = (int) (d->cfg.peer_timeout_usec / 1000);
        int64_t maxmsg = (int64_t) d->cfg.max_message_bytes;
        zmq_setsockopt(p->sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(p->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        zmq_setsockopt(p->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(p->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
        zmq_setsockopt(p->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
        zmq_setsockopt(p->sock, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo);
        if (hvd_zap_setup_peer_client(d->zap, p->sock, endpoint) < 0) {
                zmq_close(p->sock);
                p->sock = NULL;
                return NULL;
        }
        if (zmq_connect(p->sock, endpoint) < 0) {
                hvd_log_error(-zmq_errno(), "Cannot connect to root daemon %s", endpoint);
                zmq_close(p->sock);
                p->sock = NULL;
                return NULL;
        }
        p->lost = false;
        p->last_heard_usec = hvd_now_usec();
        p->last_ping_usec = 0;
        return p;
}

/* ---- welcome ---- */

static void fill_rank_infos(const job_t *j, Hvd__RankInfo *infos, Hvd__RankInfo **ptrs) {
        for (uint32_t r = 0; r < j->size; r++) {
                hvd__rank_info__init(&infos[r]);
                infos[r].rank = r;
                infos[r].local_rank = j->table[r].local_rank;
                infos[r].pid = j->table[r].pid;
                infos[r].host = (char *) j->table[r].host;
                infos[r].data_addr = (char *) j->table[r].data_addr;
                infos[r].cross_rank = j->table[r].cross_rank;
                ptrs[r] = &infos[r];
        }
}

/* Welcomes this node's workers: the job is complete everywhere. */
static void welcome_local(hvd_daemon_t *d, job_t *j) {
        Hvd__RankInfo *infos = calloc(j->size, sizeof *infos);
        Hvd__RankInfo **ptrs = calloc(j->size, sizeof *ptrs);
        if (!infos || !ptrs) {
                free(infos);
                free(ptrs);
                job_abort(d, j, -1, -ENOMEM, "out of memory while welcoming job %s", j->id);
                return;
        }
        fill_rank_infos(j, infos, ptrs);
        uint64_t slot = j->fusion_threshold;
        if (slot < (UINT64_C(4) << 20))
                slot = UINT64_C(4) << 20;
        if (slot > (UINT64_C(256) << 20))
                slot = UINT64_C(256) << 20;
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
                wel.n_ranks = j->size;
                wel.ranks = ptrs;
                wel.nccl_id.data = j->nccl_id;
                wel.nccl_id.len = j->nccl_id_len;
                wel.daemon_pid = (uint32_t) getpid();
                env.body_case = HVD__ENVELOPE__BODY_WELCOME;
                env.welcome = &wel;
                send_to_worker(d, w, &env);
        }
        free(infos);
        free(ptrs);
        j->state = JOB_RUNNING;
        hvd_log_notice("job %s running: %u ranks on %u host%s, %u here", j->id, j->size, j->cross_size,
                       j->cross_size == 1 ? "" : "s", j->local_size);
}

/* Root: every node joined; tell them, then our own workers. */
static void root_complete(hvd_daemon_t *d, job_t *j) {
        Hvd__RankInfo *infos = calloc(j->size, sizeof *infos);
        Hvd__RankInfo **ptrs = calloc(j->size, sizeof *ptrs);
        if (!infos || !ptrs) {
                free(infos);
                free(ptrs);
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        fill_rank_infos(j, infos, ptrs);
        Hvd__NodeWelcome nw = HVD__NODE_WELCOME__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nw.job_id = j->id;
        nw.n_ranks = j->size;
        nw.ranks = ptrs;
        nw.epoch = d->epoch;
        nw.fusion_threshold = j->fusion_threshold;
        nw.cycle_time_usec = j->cycle_time_usec;
        nw.nccl_id.data = j->nccl_id;
        nw.nccl_id.len = j->nccl_id_len;
        env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
        env.node_welcome = &nw;
        send_to_nodes(d, j, &env);
        free(infos);
        free(ptrs);
        welcome_local(d, j);
}

/* Records a node's ranks in the rank table. Returns < 0 with a message if
 * they clash with what is known. */
static int table_add(job_t *j, uint32_t cross_rank, Hvd__RankInfo *const *ri, size_t n, char *err, size_t len) {
        for (size_t i = 0; i < n; i++) {
                uint32_t r = ri[i]->rank;
                if (r >= j->size || j->table[r].known) {
                        snprintf(err, len, "rank %u is claimed twice (hosts %s and %s)", r,
                                 r < j->size ? host_of(j, j->table[r].cross_rank) : "?", host_of(j, cross_rank));
                        return HVD_EDUPLICATE;
                }
        }
        for (size_t i = 0; i < n; i++) {
                rinfo_t *t = &j->table[ri[i]->rank];
                t->known = true;
                t->local_rank = ri[i]->local_rank;
                t->pid = ri[i]->pid;
                t->cross_rank = cross_rank;
                snprintf(t->host, sizeof t->host, "%s", ri[i]->host);
                snprintf(t->data_addr, sizeof t->data_addr, "%s", ri[i]->data_addr);
        }
        return 0;
}

static int root_node_joined(hvd_daemon_t *d, job_t *j, uint32_t cross_rank, bool local, const uint8_t *id,
                            size_t id_len, Hvd__RankInfo *const *ri, size_t n) {
        node_t *nd = &j->nodes[cross_rank];
        char err[512];
        if (nd->joined) {
                snprintf(err, sizeof err, "host %u (%s) joined twice", cross_rank, host_of(j, cross_rank));
                job_abort(d, j, -1, HVD_EDUPLICATE, "%s", err);
                return HVD_EDUPLICATE;
        }
        int r = table_add(j, cross_rank, ri, n, err, sizeof err);
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
        }
        j->n_nodes_joined++;
        hvd_log_info("job %s: host %u (%s) joined with %zu ranks, %u of %u hosts", j->id, cross_rank,
                     host_of(j, cross_rank), n, j->n_nodes_joined, j->cross_size);
        if (j->n_nodes_joined == j->cross_size)
                root_complete(d, j);
        return 0;
}

/* All local ranks said hello. */
static void local_complete(hvd_daemon_t *d, job_t *j) {
        Hvd__RankInfo *infos = calloc(j->local_size, sizeof *infos);
        Hvd__RankInfo **ptrs = calloc(j->local_size, sizeof *ptrs);
        if (!infos || !ptrs) {
                free(infos);
                free(ptrs);
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        size_t n = 0;
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                if (!w)
                        continue;
                hvd__rank_info__init(&infos[n]);
                infos[n].rank = r;
                infos[n].local_rank = w->local_rank;
                infos[n].pid = (uint32_t) w->pid;
                infos[n].host = w->host;
                infos[n].data_addr = w->data_addr;
                infos[n].cross_rank = j->cross_rank;
                ptrs[n] = &infos[n];
                n++;
        }
        if (j->cross_size <= 1) {
                char err[512];
                if (table_add(j, 0, ptrs, n, err, sizeof err) < 0)
                        job_abort(d, j, -1, HVD_EDUPLICATE, "%s", err);
                else
                        welcome_local(d, j);
        } else if (j->is_root)
                root_node_joined(d, j, j->cross_rank, true, NULL, 0, ptrs, n);
        else {
                Hvd__NodeJoin nj = HVD__NODE_JOIN__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                nj.job_id = j->id;
                nj.secret.data = j->secret;
                nj.secret.len = j->secret_len;
                nj.host = (char *) host_of(j, j->cross_rank);
                nj.cross_rank = j->cross_rank;
                nj.cross_size = j->cross_size;
                nj.world_size = j->size;
                nj.n_ranks = n;
                nj.ranks = ptrs;
                nj.fusion_threshold = (int64_t) j->fusion_threshold;
                nj.cycle_time_usec = j->cycle_time_usec;
                nj.n_hosts = j->cross_size;
                nj.hosts = j->hosts;
                nj.nccl_id.data = j->nccl_id;
                nj.nccl_id.len = j->nccl_id_len;
                nj.stall_check_usec = j->stall_check_usec;
                nj.stall_shutdown_usec = j->stall_shutdown_usec;
                env.body_case = HVD__ENVELOPE__BODY_NODE_JOIN;
                env.node_join = &nj;
                send_to_root(d, j, &env);
                j->joined_root = true;
                hvd_log_info("job %s: all %u local ranks joined; told the root daemon at %s", j->id, j->local_size,
                             j->root->endpoint);
        }
        free(infos);
        free(ptrs);
}

/* ---- jobs ---- */

typedef struct job_params {
        uint64_t stall_check_usec, stall_shutdown_usec;
        const char *job_id;
        const uint8_t *secret;
        size_t secret_len;
        uint32_t world_size, local_size, cross_rank, cross_size;
        int64_t fusion_threshold;
        uint64_t cycle_time_usec;
        char *const *hosts;
        size_t n_hosts;
        const char *root_peer;
} job_params_t;

static job_t *job_create(hvd_daemon_t *d, const job_params_t *jp, char *err, size_t len) {
        if (hvd_strmap_size(d->jobs) >= d->cfg.max_jobs) {
                snprintf(err, len, "job %s refused: this daemon already serves max_jobs (%u) jobs", jp->job_id,
                         d->cfg.max_jobs);
                return NULL;
        }
        uint32_t cross_size = jp->cross_size ? jp->cross_size : 1;
        bool root = cross_size > 1 && jp->cross_rank == 0;
        if (cross_size > 1 && root && !d->peer_sock) {
                snprintf(err, len, "job %s spans %u hosts and this daemon is its root, but it has no peer_listen "
                         "address configured for the other daemons to reach it", jp->job_id, cross_size);
                return NULL;
        }
        if (cross_size > 1 && !root && (!jp->root_peer || !jp->root_peer[0])) {
                snprintf(err, len, "job %s spans %u hosts but names no root daemon endpoint (HVD_ROOT_PEER)",
                         jp->job_id, cross_size);
                return NULL;
        }
        job_t *j = calloc(1, sizeof *j);
        if (!j) {
                snprintf(err, len, "out of memory");
                return NULL;
        }
        snprintf(j->id, sizeof j->id, "%s", jp->job_id);
        memcpy(j->secret, jp->secret, jp->secret_len);
        j->secret_len = jp->secret_len;
        j->size = jp->world_size;
        j->local_size = jp->local_size;
        j->cross_rank = cross_size > 1 ? jp->cross_rank : 0;
        j->cross_size = cross_size;
        j->is_root = root;
        j->state = JOB_JOINING;
        j->created_usec = hvd_now_usec();
        j->departed_rank = -1;
        j->fusion_threshold = jp->fusion_threshold >= 0 ? (uint64_t) jp->fusion_threshold : d->cfg.fusion_threshold_bytes;
        j->cycle_time_usec = jp->cycle_time_usec ? jp->cycle_time_usec : d->cfg.cycle_time_usec;
        j->stall_check_usec = jp->stall_check_usec;
        j->stall_shutdown_usec = jp->stall_shutdown_usec;
        unsigned rnd = 0;
        int ufd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (ufd >= 0) {
                if (read(ufd, &rnd, sizeof rnd) < 0)
                        rnd = 0;
                close(ufd);
        }
        snprintf(j->shm_name, sizeof j->shm_name, "/hvd-%d-%" PRIu64 "-%08x", (int) getpid(), ++d->job_seq, rnd);
        j->ranks = calloc(j->size, sizeof *j->ranks);
        j->table = calloc(j->size, sizeof *j->table);
        j->hosts = calloc(cross_size, sizeof *j->hosts);
        bool ok = j->ranks && j->table && j->hosts;
        for (uint32_t c = 0; c < cross_size && ok; c++) {
                char fallback[32];
                snprintf(fallback, sizeof fallback, "host%u", c);
                ok = (j->hosts[c] = strdup(c < jp->n_hosts ? jp->hosts[c] : fallback)) != NULL;
        }
        if (ok && (cross_size == 1 || root))
                ok = hvd_negotiator_new(j->size, d->cfg.max_tensors_per_job, j->fusion_threshold, &j->neg) >= 0;
        if (ok && root)
                ok = (j->nodes = calloc(cross_size, sizeof *j->nodes)) != NULL;
        if (ok && cross_size > 1 && !root) {
                j->root = peer_get(d, jp->root_peer);
                ok = j->root != NULL;
                if (j->root)
                        j->root->n_jobs++;
        }
        if (!ok || hvd_strmap_put(d->jobs, j->id, strlen(j->id), j) < 0) {
                j->shm_name[0] = 0;
                job_free(d, j);
                snprintf(err, len,
                         "job %s: cannot set up (out of memory, root daemon endpoint '%s' invalid, or no CURVE key "
                         "for it: see the daemon's log)",
                         jp->job_id, jp->root_peer ? jp->root_peer : "");
                return NULL;
        }
        d->next_housekeeping = 0;
        hvd_log_info("job %s created: %u ranks, %u here, host %u of %u%s", j->id, j->size, j->local_size,
                     j->cross_rank, cross_size, root ? " (root)" : "");
        return j;
}

/* ---- worker messages ---- */

static void handle_hello(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__Hello *h, uid_t uid) {
        if (hvd_strmap_get(d->workers, id, id_len)) {
                send_error(d, d->worker_sock, id, id_len, HVD_EPROTO, "hello sent twice on one connection");
                return;
        }
        uint32_t cross_size = h->cross_size ? h->cross_size : 1;
        if (cross_size == 1 && h->local_size != h->world_size) {
                send_error(d, d->worker_sock, id, id_len, HVD_EPROTO,
                           "job %s: world size %u but %u ranks on this host, and no host list (HVD_CROSS_SIZE)",
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
        if (j && j->state != JOB_JOINING && h->rank < j->size && j->ranks[h->rank] &&
            (j->ranks[h->rank]->goodbye || j->ranks[h->rank]->exited) && j->secret_len == h->secret.len &&
            (!j->owned || j->owner_uid == uid) &&
            memcmp(j->secret, h->secret.data, j->secret_len) == 0) {
                /* the job's ranks start over (hvd_shutdown, then hvd_init): the
                 * old incarnation lingers under another name until its workers
                 * are gone, and this hello starts a new one */
                char old[HVD_WIRE_MAX_JOB_ID + 1];
                snprintf(old, sizeof old, "%s", j->id);
                hvd_strmap_remove(d->jobs, old, strlen(old));
                snprintf(j->id, sizeof j->id, "%.100s~%" PRIu64, old, ++d->job_seq);
                if (hvd_strmap_put(d->jobs, j->id, strlen(j->id), j) < 0) {
                        job_free(d, j);
                        send_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                        return;
                }
                hvd_log_info("job %s starts over; the previous run is now %s", old, j->id);
                j = NULL;
        }
        if (!j) {
                char err[512];
                job_params_t jp = {
                        .job_id = h->job_id, .secret = h->secret.data, .secret_len = h->secret.len,
                        .world_size = h->world_size, .local_size = h->local_size, .cross_rank = h->cross_rank,
                        .cross_size = h->cross_size, .fusion_threshold = h->fusion_threshold,
                        .cycle_time_usec = h->cycle_time_usec, .hosts = h->hosts, .n_hosts = h->n_hosts,
                        .root_peer = h->root_peer, .stall_check_usec = h->stall_check_usec,
                        .stall_shutdown_usec = h->stall_shutdown_usec,
                };
                j = job_create(d, &jp, err, sizeof err);
                if (!j) {
                        send_error(d, d->worker_sock, id, id_len, -EINVAL, "%s", err);
                        return;
                }
        } else {
                if (j->local_size == UINT32_MAX && j->n_hello == 0 && h->local_size <= j->size)
                        j->local_size = h->local_size; /* root job started by a remote node's join */
                if (j->secret_len != h->secret.len || memcmp(j->secret, h->secret.data, j->secret_len) != 0) {
                        hvd_log_warning("job %s: rank %u (pid %u) presented a wrong job secret", j->id, h->rank,
                                        h->pid);
                        send_error(d, d->worker_sock, id, id_len, HVD_EDENIED,
                                   "job %s: wrong job secret (HVD_JOB_SECRET does not match the job's)", j->id);
                        return;
                }
                if (j->owned && uid != j->owner_uid) {
                        hvd_log_warning("job %s: rank %u (pid %u) of uid %u refused: the job belongs to uid %u", j->id,
                                        h->rank, h->pid, (unsigned) uid, (unsigned) j->owner_uid);
                        send_error(d, d->worker_sock, id, id_len, HVD_EDENIED,
                                   "job %s belongs to uid %u: a process of uid %u cannot join it", j->id,
                                   (unsigned) j->owner_uid, (unsigned) uid);
                        return;
                }
                if (j->state != JOB_JOINING || j->n_hello >= j->local_size) {
                        send_error(d, d->worker_sock, id, id_len, HVD_EDENIED,
                                   "job %s is %s: rank %u cannot join any more", j->id, job_state_names[j->state],
                                   h->rank);
                        return;
                }
                if (h->world_size != j->size || h->local_size != j->local_size || cross_size != j->cross_size ||
                    (cross_size > 1 && h->cross_rank != j->cross_rank)) {
                        send_error(d, d->worker_sock, id, id_len, HVD_EMISMATCH,
                                   "job %s: rank %u says world size %u, %u local ranks, host %u of %u; the job has "
                                   "%u, %u, host %u of %u",
                                   j->id, h->rank, h->world_size, h->local_size, h->cross_rank, cross_size, j->size,
                                   j->local_size, j->cross_rank, j->cross_size);
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
        snprintf(w->data_addr, sizeof w->data_addr, "%s", h->data_addr);
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
        job_set_nccl_id(j, &h->nccl_id);
        if (!j->owned && uid != (uid_t) -1) {
                j->owner_uid = uid;
                j->owned = true;
        }
        j->ranks[h->rank] = w;
        j->n_hello++;
        j->n_live++;
        hvd_log_info("job %s: rank %u joined (pid %d, uid %d), %u of %u here", j->id, w->rank, (int) w->pid, (int) uid, j->n_hello,
                     j->local_size);
        if (j->n_hello == j->local_size)
                local_complete(d, j);
}

/* Root: one rank's readiness, from a local worker or a remote node. */
static void root_submit(hvd_daemon_t *d, job_t *j, uint32_t rank, const Hvd__Ready *q) {
        if (j->departed_rank >= 0) {
                job_abort(d, j, j->departed_rank, HVD_EABORTED,
                          "rank %d has shut down, but rank %u still submits collectives; the job cannot go on",
                          j->departed_rank, rank);
                return;
        }
        char err[1024];
        int r = hvd_negotiator_submit(j->neg, rank, q, err, sizeof err);
        if (r < 0)
                job_abort(d, j, -1, r, "rank %u: %s", rank, err);
        /* the stall inspector looks while tensors wait */
        if (j->stall_check_usec && d->next_housekeeping == UINT64_MAX)
                d->next_housekeeping = hvd_now_usec() + USEC_PER_SEC;
}

/* Root: tensors some ranks submitted and others not, for long: warn once,
 * and abort the job after the shutdown time when one is set. */
static bool stall_inspect(hvd_daemon_t *d, job_t *j, uint64_t now) {
        if (!j->neg || j->state != JOB_RUNNING || !j->stall_check_usec)
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
                if (!j->stall_warned)
                        hvd_log_warning("job %s: stalled for more than %.0f s: %s", j->id,
                                        (double) j->stall_check_usec / 1e6, buf);
                j->stall_warned = true;
        } else {
                j->stall_warned = false;
                j->stalled[0] = 0;
        }
        return true;
}

/* Takes ownership of env when it returns true. */
static bool handle_ready(hvd_daemon_t *d, worker_t *w, Hvd__Envelope *env) {
        job_t *j = w->job;
        if (j->state != JOB_RUNNING)
                return false; /* joining: cannot happen (no welcome yet); aborted: dropped */
        if (w->goodbye) {
                job_abort(d, j, (int) w->rank, HVD_EPROTO, "rank %u sent tensors after it shut down", w->rank);
                return false;
        }
        j->cycles++;
        if (j->neg) {
                root_submit(d, j, w->rank, env->ready);
                return false;
        }
        /* forward to the root with this iteration's batch */
        if (j->n_fwd == j->cap_fwd) {
                size_t cap = j->cap_fwd ? j->cap_fwd * 2 : 16;
                Hvd__RankReady **nf = realloc(j->fwd, cap * sizeof *nf);
                if (!nf) {
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return false;
                }
                j->fwd = nf;
                j->cap_fwd = cap;
        }
        Hvd__RankReady *rr = calloc(1, sizeof *rr);
        if (!rr) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return false;
        }
        hvd__rank_ready__init(rr);
        rr->rank = w->rank;
        rr->ready = TAKE_PTR(env->ready);
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        j->fwd[j->n_fwd++] = rr;
        return false;
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

/* Root: rank said goodbye. A goodbye while collectives wait for it means
 * they never can complete. */
static void root_departed(hvd_daemon_t *d, job_t *j, uint32_t rank) {
        if (j->state != JOB_RUNNING)
                return;
        if (hvd_negotiator_any_pending(j->neg)) {
                char pend[1024];
                hvd_negotiator_describe_pending(j->neg, hvd_now_usec(), 0, pend, sizeof pend);
                job_abort(d, j, (int) rank, HVD_EABORTED, "rank %u shut down while collectives were pending: %s",
                          rank, pend);
        } else if (j->departed_rank < 0)
                j->departed_rank = (int32_t) rank;
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
        if (j->neg)
                root_departed(d, j, w->rank);
        else if (j->state == JOB_RUNNING) {
                uint32_t *nd = realloc(j->departed, (j->n_departed + 1) * sizeof *nd);
                if (nd) {
                        j->departed = nd;
                        j->departed[j->n_departed++] = w->rank;
                }
        }
        /* without a pidfd the goodbye is the last we hear of it */
        if (w->pidfd < 0)
                worker_gone(d, w, "said goodbye");
}

/* Takes one message off a ROUTER socket without blocking: its routing id
 * and its decoded, validated envelope (owned by the caller). Extra frames
 * are dropped: one envelope per message. Returns 1 with *env set, 0 when
 * the socket is drained, or < 0 (the message was refused; err says why and
 * the id is filled, so the sender can be told). */
static int router_recv(void *sock, uint8_t id[static 256], size_t *id_len, Hvd__Envelope **env, uid_t *uid,
                       char *err, size_t err_len) {
        for (;;) {
                int n = zmq_recv(sock, id, 256, ZMQ_DONTWAIT);
                if (n < 0)
                        return 0; /* EAGAIN: drained */
                int more = 0;
                size_t ml = sizeof more;
                zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
                if (!more || n > 256)
                        continue;
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&msg);
                        continue;
                }
                while (zmq_msg_more(&msg)) {
                        zmq_msg_t extra;
                        zmq_msg_init(&extra);
                        zmq_msg_recv(&extra, sock, ZMQ_DONTWAIT);
                        more = zmq_msg_more(&extra);
                        zmq_msg_close(&extra);
                        if (!more)
                                break;
                }
                *id_len = (size_t) n;
                if (uid && hvd_zap_msg_uid(&msg, uid) < 0)
                        *uid = (uid_t) -1;
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, env, err, err_len);
                zmq_msg_close(&msg);
                return r < 0 ? r : 1;
        }
}

static void handle_worker_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512];
                uid_t uid = (uid_t) -1;
                int r = router_recv(d->worker_sock, id, &id_len, &env, &uid, err, sizeof err);
                if (r == 0)
                        return;
                worker_t *w = hvd_strmap_get(d->workers, id, id_len);
                if (r < 0) {
                        hvd_log_warning("worker socket: rejected message%s%s: %s", w ? " from job " : "",
                                        w ? w->job->id : "", err);
                        send_error(d, d->worker_sock, id, id_len, r, "message rejected: %s", err);
                        continue;
                }
                if (env->body_case == HVD__ENVELOPE__BODY_HELLO)
                        handle_hello(d, id, id_len, env->hello, uid);
                else if (!w)
                        send_error(d, d->worker_sock, id, id_len, HVD_EPROTO,
                                   "say hello first: this connection has not joined a job");
                else if (env->body_case == HVD__ENVELOPE__BODY_READY)
                        handle_ready(d, w, env);
                else if (env->body_case == HVD__ENVELOPE__BODY_GOODBYE)
                        handle_goodbye(d, w);
                else if (env->body_case == HVD__ENVELOPE__BODY_DONE)
                        ; /* counters only */
                else
                        send_error(d, d->worker_sock, id, id_len, HVD_EPROTO,
                                   "unexpected message on the worker socket");
                hvd_wire_free(&env);
        }
}

/* ---- peer messages ---- */

/* Root side: a message from another daemon on the peer socket. */
static void handle_node_message(hvd_daemon_t *d, const uint8_t *id, size_t id_len, Hvd__Envelope *env) {
        const char *job_id = env->body_case == HVD__ENVELOPE__BODY_NODE_JOIN    ? env->node_join->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_NODE_READY ? env->node_ready->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_ABORT      ? env->abort->job_id
                                                                                : NULL;
        if (env->body_case == HVD__ENVELOPE__BODY_PING) {
                Hvd__Ping pong = HVD__PING__INIT;
                Hvd__Envelope reply = HVD__ENVELOPE__INIT;
                pong.sent_usec = env->ping->sent_usec;
                pong.reply = true;
                reply.body_case = HVD__ENVELOPE__BODY_PING;
                reply.ping = &pong;
                (void) hvd_wire_send_to(d->peer_sock, id, id_len, &reply, ZMQ_DONTWAIT);
                /* a ping is news from every job of that node */
                size_t iter = 0;
                void *v;
                uint64_t now = hvd_now_usec();
                while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                        job_t *j = v;
                        for (uint32_t c = 0; j->nodes && c < j->cross_size; c++)
                                if (j->nodes[c].joined && j->nodes[c].id_len == id_len &&
                                    memcmp(j->nodes[c].id, id, id_len) == 0)
                                        j->nodes[c].last_heard_usec = now;
                }
                return;
        }
        if (!job_id) {
                send_error(d, d->peer_sock, id, id_len, HVD_EPROTO, "unexpected message on the peer socket");
                return;
        }
        job_t *j = hvd_strmap_get(d->jobs, job_id, strlen(job_id));
        Hvd__Abort ab = HVD__ABORT__INIT;
        Hvd__Envelope reply = HVD__ENVELOPE__INIT;
        char reason[1024];
        ab.job_id = (char *) job_id;
        ab.reason = reason;
        ab.code = HVD_EDENIED;
        ab.lost_rank = -1;
        reply.body_case = HVD__ENVELOPE__BODY_ABORT;
        reply.abort = &ab;

        if (env->body_case == HVD__ENVELOPE__BODY_NODE_JOIN) {
                const Hvd__NodeJoin *nj = env->node_join;
                if (!j) {
                        job_params_t jp = {
                                .job_id = nj->job_id, .secret = nj->secret.data, .secret_len = nj->secret.len,
                                .world_size = nj->world_size, .local_size = 0, .cross_rank = 0,
                                .cross_size = nj->cross_size, .fusion_threshold = nj->fusion_threshold,
                                .cycle_time_usec = nj->cycle_time_usec, .hosts = nj->hosts, .n_hosts = nj->n_hosts,
                                .stall_check_usec = nj->stall_check_usec, .stall_shutdown_usec = nj->stall_shutdown_usec,
                        };
                        /* the root's own ranks have not said hello yet: the
                         * job starts here with its local size unknown */
                        j = job_create(d, &jp, reason, sizeof reason);
                        if (!j) {
                                (void) hvd_wire_send_to(d->peer_sock, id, id_len, &reply, ZMQ_DONTWAIT);
                                return;
                        }
                        j->local_size = UINT32_MAX; /* set by the first local hello */
                }
                if (j->secret_len != nj->secret.len || memcmp(j->secret, nj->secret.data, j->secret_len) != 0) {
                        hvd_log_warning("job %s: host %s presented a wrong job secret", j->id, nj->host);
                        snprintf(reason, sizeof reason, "job %s: host %s: wrong job secret", j->id, nj->host);
                        (void) hvd_wire_send_to(d->peer_sock, id, id_len, &reply, ZMQ_DONTWAIT);
                        return;
                }
                if (!j->is_root || nj->world_size != j->size || nj->cross_size != j->cross_size ||
                    nj->cross_rank == 0 || j->state != JOB_JOINING) {
                        snprintf(reason, sizeof reason,
                                 "job %s: host %s (host %u of %u, %u ranks) does not fit the job here (%s, root: %s, "
                                 "%u ranks on %u hosts)",
                                 j->id, nj->host, nj->cross_rank, nj->cross_size, nj->world_size,
                                 job_state_names[j->state], j->is_root ? "yes" : "no", j->size, j->cross_size);
                        (void) hvd_wire_send_to(d->peer_sock, id, id_len, &reply, ZMQ_DONTWAIT);
                        return;
                }
                job_set_nccl_id(j, &nj->nccl_id);
                root_node_joined(d, j, nj->cross_rank, false, id, id_len, nj->ranks, nj->n_ranks);
                return;
        }
        if (!j || !j->is_root) {
                /* unknown or finished job: tell the sender so it stops */
                snprintf(reason, sizeof reason, "job %s is unknown to the root daemon", job_id);
                ab.code = HVD_EABORTED;
                if (env->body_case != HVD__ENVELOPE__BODY_ABORT)
                        (void) hvd_wire_send_to(d->peer_sock, id, id_len, &reply, ZMQ_DONTWAIT);
                return;
        }
        /* the sender must be a node of this job */
        node_t *nd = NULL;
        uint32_t cross = 0;
        for (uint32_t c = 0; c < j->cross_size; c++)
                if (j->nodes[c].joined && !j->nodes[c].local && j->nodes[c].id_len == id_len &&
                    memcmp(j->nodes[c].id, id, id_len) == 0) {
                        nd = &j->nodes[c];
                        cross = c;
                }
        if (!nd) {
                hvd_log_warning("job %s: message from a daemon that is not one of its nodes", j->id);
                return;
        }
        nd->last_heard_usec = hvd_now_usec();
        if (env->body_case == HVD__ENVELOPE__BODY_ABORT) {
                job_abort(d, j, env->abort->lost_rank, env->abort->code ? env->abort->code : HVD_EABORTED,
                          "host %s: %s", host_of(j, cross), env->abort->reason);
                return;
        }
        const Hvd__NodeReady *nr = env->node_ready;
        if (j->state != JOB_RUNNING)
                return;
        for (size_t i = 0; i < nr->n_ranks; i++) {
                uint32_t r = nr->ranks[i]->rank;
                if (r >= j->size || !j->table[r].known || j->table[r].cross_rank != cross) {
                        job_abort(d, j, -1, HVD_EPROTO, "host %s sent readiness for rank %u, which is not on it",
                                  host_of(j, cross), r);
                        return;
                }
                j->cycles++;
                root_submit(d, j, r, nr->ranks[i]->ready);
                if (j->state != JOB_RUNNING)
                        return;
        }
        for (size_t i = 0; i < nr->n_departed; i++)
                if (nr->departed[i] < j->size && j->table[nr->departed[i]].cross_rank == cross)
                        root_departed(d, j, nr->departed[i]);
}

static void handle_peer_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = router_recv(d->peer_sock, id, &id_len, &env, NULL, err, sizeof err);
                if (r == 0)
                        return;
                if (r < 0) {
                        hvd_log_warning("peer socket: rejected message: %s", err);
                        send_error(d, d->peer_sock, id, id_len, r, "message rejected: %s", err);
                        continue;
                }
                handle_node_message(d, id, id_len, env);
                hvd_wire_free(&env);
        }
}

/* Not root: a message from a root daemon. */
static void handle_root_message(hvd_daemon_t *d, peer_t *p, Hvd__Envelope *env) {
        p->last_heard_usec = hvd_now_usec();
        if (env->body_case == HVD__ENVELOPE__BODY_PING) {
                if (env->ping->reply)
                        p->rtt_usec = hvd_now_usec() - env->ping->sent_usec;
                return;
        }
        if (env->body_case == HVD__ENVELOPE__BODY_ERROR) {
                hvd_log_warning("root daemon %s: %s", p->endpoint, env->error->message);
                return;
        }
        const char *job_id = env->body_case == HVD__ENVELOPE__BODY_NODE_WELCOME    ? env->node_welcome->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_JOB_SCHEDULE ? env->job_schedule->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_ABORT        ? env->abort->job_id
                                                                                  : NULL;
        job_t *j = job_id ? hvd_strmap_get(d->jobs, job_id, strlen(job_id)) : NULL;
        if (!j || j->root != p)
                return; /* a job we no longer have, or not from its root */
        switch (env->body_case) {
        case HVD__ENVELOPE__BODY_ABORT:
                job_abort_ex(d, j, true, env->abort->lost_rank, env->abort->code ? env->abort->code : HVD_EABORTED,
                             "%s", env->abort->reason);
                break;
        case HVD__ENVELOPE__BODY_NODE_WELCOME: {
                const Hvd__NodeWelcome *nw = env->node_welcome;
                if (j->state != JOB_JOINING || nw->n_ranks != j->size) {
                        job_abort(d, j, -1, HVD_EPROTO, "root daemon sent a rank table of %zu ranks for %u", nw->n_ranks,
                                  j->size);
                        break;
                }
                for (size_t i = 0; i < nw->n_ranks; i++) {
                        rinfo_t *t = &j->table[nw->ranks[i]->rank];
                        t->known = true;
                        t->local_rank = nw->ranks[i]->local_rank;
                        t->pid = nw->ranks[i]->pid;
                        t->cross_rank = nw->ranks[i]->cross_rank;
                        snprintf(t->host, sizeof t->host, "%s", nw->ranks[i]->host);
                        snprintf(t->data_addr, sizeof t->data_addr, "%s", nw->ranks[i]->data_addr);
                }
                for (uint32_t r = 0; r < j->size; r++)
                        if (!j->table[r].known) {
                                job_abort(d, j, -1, HVD_EPROTO, "root daemon's rank table lacks rank %u", r);
                                return;
                        }
                j->fusion_threshold = nw->fusion_threshold;
                j->cycle_time_usec = nw->cycle_time_usec;
                job_set_nccl_id(j, &nw->nccl_id);
                welcome_local(d, j);
                break;
        }
        case HVD__ENVELOPE__BODY_JOB_SCHEDULE: {
                if (j->state != JOB_RUNNING)
                        break;
                Hvd__Envelope out = HVD__ENVELOPE__INIT;
                out.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
                out.schedule = env->job_schedule->schedule;
                send_to_local_workers(d, j, &out, true);
                break;
        }
        default:
                break;
        }
}

static void handle_root_socket(hvd_daemon_t *d, peer_t *p) {
        for (int n = 0; n < RECV_BATCH; n++) {
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, p->sock, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&msg);
                        return;
                }
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &env, err, sizeof err);
                zmq_msg_close(&msg);
                if (r < 0) {
                        hvd_log_warning("root daemon %s: rejected message: %s", p->endpoint, err);
                        continue;
                }
                handle_root_message(d, p, env);
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
        st.peer_endpoint = d->peer_ep;
        size_t np = hvd_strmap_size(d->peers), kp = 0, piter = 0;
        Hvd__PeerStatus *ps = calloc(np ? np : 1, sizeof *ps);
        Hvd__PeerStatus **pp = calloc(np ? np : 1, sizeof *pp);
        void *pv;
        while (ps && pp && hvd_strmap_next(d->peers, &piter, NULL, NULL, &pv)) {
                peer_t *p = pv;
                hvd__peer_status__init(&ps[kp]);
                ps[kp].endpoint = p->endpoint;
                ps[kp].state = (char *) (p->lost ? "lost" : p->n_jobs ? "connected" : "idle");
                ps[kp].last_heard_usec = now - p->last_heard_usec;
                ps[kp].rtt_usec = p->rtt_usec;
                pp[kp] = &ps[kp];
                kp++;
        }
        st.n_peers = kp;
        st.peers = pp;
        size_t nj = hvd_strmap_size(d->jobs), k = 0, iter = 0;
        Hvd__JobStatus *js = calloc(nj ? nj : 1, sizeof *js);
        Hvd__JobStatus **jp = calloc(nj ? nj : 1, sizeof *jp);
        Hvd__RankInfo **all_ri = calloc(nj ? nj : 1, sizeof *all_ri);
        void *v;
        if (!js || !jp || !all_ri) {
                send_error(d, d->control_sock, id, id_len, -ENOMEM, "out of memory while building the status");
                goto out;
        }
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
                s->stalled = j->stalled;
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
        free(ps);
        free(pp);
}

static void handle_control_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = router_recv(d->control_sock, id, &id_len, &env, NULL, err, sizeof err);
                if (r == 0)
                        return;
                if (r < 0) {
                        send_error(d, d->control_sock, id, id_len, r, "request rejected: %s", err);
                        continue;
                }
                if (env->body_case == HVD__ENVELOPE__BODY_STATUS_REQUEST)
                        handle_status(d, id, id_len, env->status_request);
                else
                        send_error(d, d->control_sock, id, id_len, -EOPNOTSUPP,
                                   "unsupported control request");
                hvd_wire_free(&env);
        }
}

/* ---- loop ---- */

static void flush_forward(hvd_daemon_t *d, job_t *j) {
        if (!j->n_fwd && !j->n_departed)
                return;
        if (j->state == JOB_RUNNING) {
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                nr.job_id = j->id;
                nr.n_ranks = j->n_fwd;
                nr.ranks = j->fwd;
                nr.n_departed = j->n_departed;
                nr.departed = j->departed;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                send_to_root(d, j, &env);
        }
        fwd_clear(j);
}

static void before_sleep(hvd_daemon_t *d) {
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (!j->neg) {
                        flush_forward(d, j);
                        continue;
                }
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
                send_to_local_workers(d, j, &env, true);
                if (j->cross_size > 1) {
                        Hvd__JobSchedule js = HVD__JOB_SCHEDULE__INIT;
                        Hvd__Envelope jenv = HVD__ENVELOPE__INIT;
                        js.job_id = j->id;
                        js.schedule = s;
                        jenv.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                        jenv.job_schedule = &js;
                        send_to_nodes(d, j, &jenv);
                }
                hvd_negotiator_schedule_free(&s);
        }
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

static void start_timeout(hvd_daemon_t *d, job_t *j) {
        char missing[512], hosts[512] = "";
        list_missing(j, missing, sizeof missing);
        if (j->is_root) {
                size_t o = 0;
                for (uint32_t c = 0; c < j->cross_size && o + 16 < sizeof hosts; c++)
                        if (!j->nodes[c].joined)
                                o += (size_t) snprintf(hosts + o, sizeof hosts - o, "%s%s", o ? ", " : "",
                                                       host_of(j, c));
                job_abort(d, j, -1, HVD_ETIMEOUT,
                          "start timeout: %u of %u hosts joined within %.1f s; missing hosts [%s], missing ranks [%s]",
                          j->n_nodes_joined, j->cross_size, (double) d->cfg.start_timeout_usec / 1e6, hosts, missing);
        } else if (j->cross_size > 1 && j->n_hello == j->local_size)
                job_abort_ex(d, j, true, -1, HVD_ETIMEOUT,
                             "start timeout: the root daemon at %s (host %s) did not complete the job's join within "
                             "%.1f s%s",
                             j->root ? j->root->endpoint : "?", host_of(j, 0), (double) d->cfg.start_timeout_usec / 1e6,
                             hvd_zap_curve(d->zap) && j->root && !j->root->rtt_usec
                                     ? " (it never answered: is the CURVE key listed for it its public key, and does it "
                                       "list ours?)"
                                     : "");
        else
                job_abort(d, j, -1, HVD_ETIMEOUT,
                          "start timeout: %u of %u ranks of host %s joined within %.1f s; missing ranks [%s]",
                          j->n_hello, j->local_size, host_of(j, j->cross_rank), (double) d->cfg.start_timeout_usec / 1e6,
                          missing);
}

static void housekeeping(hvd_daemon_t *d, uint64_t now) {
        size_t iter = 0;
        void *v;
        bool again = false;
        job_t *dead[64];
        size_t n_dead = 0;
        uint64_t hb = d->cfg.peer_timeout_usec / 5;
        if (hb > USEC_PER_SEC)
                hb = USEC_PER_SEC;
        /* heartbeats to the roots we report to */
        iter = 0;
        while (hvd_strmap_next(d->peers, &iter, NULL, NULL, &v)) {
                peer_t *p = v;
                if (p->lost || !p->n_jobs)
                        continue;
                again = true;
                if (now - p->last_ping_usec >= hb) {
                        Hvd__Ping ping = HVD__PING__INIT;
                        Hvd__Envelope env = HVD__ENVELOPE__INIT;
                        ping.sent_usec = now;
                        env.body_case = HVD__ENVELOPE__BODY_PING;
                        env.ping = &ping;
                        (void) hvd_wire_send(p->sock, &env, ZMQ_DONTWAIT);
                        p->last_ping_usec = now;
                }
                if (now - p->last_heard_usec > d->cfg.peer_timeout_usec) {
                        p->lost = true;
                        const char *hint = hvd_zap_curve(d->zap) && !p->rtt_usec
                                                   ? "; it never answered: is the CURVE key listed for it its public "
                                                     "key, and does it list ours?"
                                                   : "";
                        hvd_log_error(0, "lost contact with the root daemon at %s (silent for %.1f s)%s", p->endpoint,
                                      (double) (now - p->last_heard_usec) / 1e6, hint);
                        size_t it2 = 0;
                        void *v2;
                        while (hvd_strmap_next(d->jobs, &it2, NULL, NULL, &v2)) {
                                job_t *j = v2;
                                if (j->root == p)
                                        job_abort_ex(d, j, true, -1, HVD_EABORTED,
                                                     "lost contact with the root daemon at %s (host %s): silent for %.1f s%s",
                                                     p->endpoint, host_of(j, 0),
                                                     (double) (now - p->last_heard_usec) / 1e6, hint);
                        }
                }
        }
        iter = 0;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (j->state == JOB_JOINING) {
                        uint64_t limit = d->cfg.start_timeout_usec + (j->is_root || j->cross_size == 1 ? 0 : 2 * USEC_PER_SEC);
                        if (now - j->created_usec > limit)
                                start_timeout(d, j);
                        else
                                again = true;
                }
                if (stall_inspect(d, j, now))
                        again = true;
                if (j->state == JOB_RUNNING && j->is_root) {
                        again = true;
                        for (uint32_t c = 0; c < j->cross_size; c++) {
                                node_t *nd = &j->nodes[c];
                                if (nd->local || now - nd->last_heard_usec <= d->cfg.peer_timeout_usec)
                                        continue;
                                char ranks[256] = "";
                                size_t o = 0;
                                for (uint32_t r = 0; r < j->size && o + 12 < sizeof ranks; r++)
                                        if (j->table[r].cross_rank == c)
                                                o += (size_t) snprintf(ranks + o, sizeof ranks - o, "%s%u", o ? ", " : "", r);
                                job_abort(d, j, -1, HVD_EABORTED,
                                          "lost contact with host %s (ranks [%s]): its daemon was silent for %.1f s",
                                          host_of(j, c), ranks, (double) (now - nd->last_heard_usec) / 1e6);
                                break;
                        }
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
        d->next_housekeeping = again ? now + HVD_MIN(HOUSEKEEPING_USEC, hb) : UINT64_MAX;
}

enum { ITEM_WORKER, ITEM_CONTROL, ITEM_STOP, ITEM_SIGNAL, ITEM_PEER, ITEM_ROOT, ITEM_PIDFD, ITEM_ZAP, ITEM_ZAP_MONITOR };

static int build_poll_items(hvd_daemon_t *d) {
        size_t need = 7 + hvd_strmap_size(d->workers) + hvd_strmap_size(d->peers);
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
                peer_t **ip = realloc(d->item_peers, cap * sizeof *ip);
                if (!ip)
                        return -ENOMEM;
                d->item_peers = ip;
                d->cap_items = cap;
        }
        size_t n = 0;
#define ADD(kind, sock_, fd_, w, p)                                                              \
        do {                                                                                 \
                d->items[n] = (zmq_pollitem_t){ .socket = (sock_), .fd = (fd_), .events = ZMQ_POLLIN }; \
                d->item_workers[n] = (w);                                                    \
                d->item_peers[n] = (p);                                                      \
                d->item_kind[n] = (kind);                                                    \
                n++;                                                                         \
        } while (0)
        if (need > d->cap_kind) {
                uint8_t *k = realloc(d->item_kind, d->cap_items);
                if (!k)
                        return -ENOMEM;
                d->item_kind = k;
                d->cap_kind = d->cap_items;
        }
        ADD(ITEM_WORKER, d->worker_sock, 0, NULL, NULL);
        ADD(ITEM_CONTROL, d->control_sock, 0, NULL, NULL);
        ADD(ITEM_STOP, NULL, d->stop_fd, NULL, NULL);
        if (d->sig_fd >= 0)
                ADD(ITEM_SIGNAL, NULL, d->sig_fd, NULL, NULL);
        if (d->peer_sock)
                ADD(ITEM_PEER, d->peer_sock, 0, NULL, NULL);
        ADD(ITEM_ZAP, hvd_zap_socket(d->zap), 0, NULL, NULL);
        if (hvd_zap_monitor_socket(d->zap))
                ADD(ITEM_ZAP_MONITOR, hvd_zap_monitor_socket(d->zap), 0, NULL, NULL);
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->peers, &iter, NULL, NULL, &v)) {
                peer_t *p = v;
                if (p->sock && !p->lost)
                        ADD(ITEM_ROOT, p->sock, 0, NULL, p);
        }
        iter = 0;
        while (hvd_strmap_next(d->workers, &iter, NULL, NULL, &v)) {
                worker_t *w = v;
                if (w->pidfd >= 0 && !w->exited)
                        ADD(ITEM_PIDFD, NULL, w->pidfd, w, NULL);
        }
#undef ADD
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
                /* messages first: a worker's last words arrive before its exit */
                bool exits = false, worker_msgs = false;
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
                        case ITEM_SIGNAL: handle_signal(d); break;
                        case ITEM_PIDFD: exits = true; break;
                        case ITEM_WORKER: worker_msgs = true; break;
                        case ITEM_CONTROL: handle_control_socket(d); break;
                        case ITEM_PEER: handle_peer_socket(d); break;
                        case ITEM_ROOT: handle_root_socket(d, d->item_peers[i]); break;
                        case ITEM_ZAP: hvd_zap_handle(d->zap); break;
                        case ITEM_ZAP_MONITOR: hvd_zap_handle_monitor(d->zap); break;
                        }
                }
                if (worker_msgs || exits)
                        handle_worker_socket(d);
                for (size_t i = 0; exits && i < d->n_items; i++)
                        if (d->item_kind[i] == ITEM_PIDFD && (d->items[i].revents & ZMQ_POLLIN))
                                worker_gone(d, d->item_workers[i], "exited");
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
        int r = hvd_zap_setup_local(d->zap, *sock);
        if (r < 0)
                return r;
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
        d->peers = hvd_strmap_new();
        d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        d->zctx = zmq_ctx_new();
        if (!d->jobs || !d->workers || !d->peers || d->stop_fd < 0 || !d->zctx) {
                r = -ENOMEM;
                goto fail;
        }
        if ((r = hvd_zap_new(d->zctx, cfg, &d->zap)) < 0)
                goto fail;
        if ((r = bind_socket(d, &d->worker_sock, d->worker_ep, sizeof d->worker_ep, "worker.sock")) < 0 ||
            (r = bind_socket(d, &d->control_sock, d->control_ep, sizeof d->control_ep, "control.sock")) < 0)
                goto fail;
        if (cfg->peer_listen[0]) {
                d->peer_sock = zmq_socket(d->zctx, ZMQ_ROUTER);
                if (!d->peer_sock) {
                        r = -zmq_errno();
                        goto fail;
                }
                int one = 1, zero = 0, hwm = 100000, ivl = 1000, tmo = (int) (cfg->peer_timeout_usec / 1000);
                int64_t maxmsg = (int64_t) cfg->max_message_bytes;
                zmq_setsockopt(d->peer_sock, ZMQ_LINGER, &zero, sizeof zero);
                zmq_setsockopt(d->peer_sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
                zmq_setsockopt(d->peer_sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
                zmq_setsockopt(d->peer_sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
                zmq_setsockopt(d->peer_sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
                zmq_setsockopt(d->peer_sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
                zmq_setsockopt(d->peer_sock, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo);
                if ((r = hvd_zap_setup_peer_server(d->zap, d->peer_sock)) < 0)
                        goto fail;
                if (zmq_bind(d->peer_sock, cfg->peer_listen) < 0) {
                        r = hvd_log_error(-zmq_errno(), "Cannot bind the peer socket %s", cfg->peer_listen);
                        goto fail;
                }
                size_t len = sizeof d->peer_ep;
                if (zmq_getsockopt(d->peer_sock, ZMQ_LAST_ENDPOINT, d->peer_ep, &len) < 0)
                        snprintf(d->peer_ep, sizeof d->peer_ep, "%s", cfg->peer_listen);
                /* for launchers: which endpoint this daemon's peers use */
                char path[PATH_MAX + 32], tmp[PATH_MAX + 40];
                snprintf(path, sizeof path, "%s/peer.endpoint", cfg->runtime_dir);
                snprintf(tmp, sizeof tmp, "%s.tmp", path);
                FILE *f = fopen(tmp, "we");
                /* written whole, then renamed: a reader never sees half a line */
                if (!f || fprintf(f, "%s\n", d->peer_ep) < 0 || fclose(f) != 0 || rename(tmp, path) < 0)
                        hvd_log_warning("cannot write %s: %m", path);
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
        free(d->item_peers);
        free(d->item_kind);
        free(d);
        *dp = NULL;
}

const char *hvd_daemon_worker_endpoint(const hvd_daemon_t *d) {
        return d->worker_ep;
}

const char *hvd_daemon_control_endpoint(const hvd_daemon_t *d) {
        return d->control_ep;
}
