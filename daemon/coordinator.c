/* coordinator.c — hvd-coordinatord's reactor: one thread, one zmq_poll over
 * the worker socket, the control socket, the peer socket (other daemons
 * reach this one there), one socket per root daemon this one reports to, a
 * stop eventfd, a signalfd and one epoll set holding a pidfd per local
 * worker (one poll item however many workers: a wakeup costs the same with
 * 2 or 256 local ranks). Order of one
 * iteration: before_sleep() (send the schedules that became ready, forward
 * this node's readiness to remote roots) → poll → handle every readable
 * source → housekeeping when its timer is due. Nothing blocks but the poll;
 * an idle daemon with no multi-node job has no timer armed and uses no CPU.
 *
 * A job's root is the daemon of its first host (cross rank 0): it alone
 * holds the negotiation table, checks consistency and plans schedules. Every
 * other daemon of the job forwards its ranks' readiness (batched, one
 * message per reactor iteration) and passes schedules to its workers. In
 * the steady state it aggregates: a cached tensor every local rank takes
 * part in goes up once, as a node-level id, when the last local rank posted
 * it (a partial one held past AGG_HOLD_USEC, or met by new requests, a join
 * or a goodbye, goes rank by rank); new requests several local ranks sent
 * alike go up once. The root sends a schedule that repeats one it keeps by
 * key as the key and seq alone. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sys/epoll.h>
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
#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "coordinator.h"
#include "hvd.h"
#include "log.h"
#include "metrics.h"
#include "negotiate.h"
#include "strmap.h"
#include "util.h"
#include "wire.h"
#include "zap.h"

#define HOUSEKEEPING_USEC       (100 * USEC_PER_MSEC)
#define ABORTED_JOB_LINGER_USEC (30 * USEC_PER_SEC)
/* A local worker's exit seen without its goodbye ends its job only this
 * long after: its pidfd can turn readable while the last message it sent
 * (a failure report saying why) is still in libzmq's I/O thread, on its
 * way to the worker socket. */
#define EXIT_GRACE_USEC (100 * USEC_PER_MSEC)
#define BOARD_KEEP      64 /* schedules kept for the other ranks should local rank 0 leave */
#define RECV_BATCH      512
/* requests a host's ranks sent lately, kept by their bytes so that the
 * same request from the next rank is copied, not parsed (hvd_wire_memo) */
#define MEMO_ENTRIES     4096
#define MEMO_MIN_WORKERS 3
/* A connection that has not finished its ZMTP (and ZAP, CURVE) handshake
 * within this is closed; libzmq's default is 30 s. */
#define HANDSHAKE_MSEC 5000

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
        uint64_t rtt_usec; /* as the node measured it (Ping.rtt_usec) */
        uint32_t n_ranks;
        char *endpoint; /* its peer socket, as it said (NULL = it cannot relay) */
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
        uint64_t exit_seen_usec;      /* its pidfd said it exited (0: not yet); gone after EXIT_GRACE_USEC */
        char exit_why[128];           /* how it ended, read while it was a zombie */
        bool lost;                    /* silent past the heartbeat timeout: what it sends now is stale */
        bool stale_logged;            /* its first stale message was logged */
        uint64_t last_heard_usec;     /* anything from it (heartbeats, readiness), since its welcome */
        uint64_t done_seq, busy_usec; /* as it reported with its readiness */
        bool board;                   /* reads its host's board (Hello.board) */
} worker_t;

/* Per rank, for status: when its readiness last came (root: every rank;
 * otherwise: the local ones). */
typedef struct rstat {
        uint64_t last_seen_usec, readies;
} rstat_t;

/* Not root: one cache id in this node's aggregation. A cached id every
 * local rank takes part in goes to the root once for the node, when the
 * last local rank posted it; anything else goes rank by rank. */
typedef struct agg {
        uint32_t n_ready;    /* local ranks that posted it this round */
        bool known;          /* a schedule showed it, for every local rank */
        bool per_rank;       /* this round was handed to the root rank by rank */
        uint64_t first_usec; /* the first local readiness this round */
} agg_t;

/* A partial node-level readiness older than this goes to the root rank by
 * rank, so that its stall inspector sees which ranks are missing. */
#define AGG_HOLD_USEC (500 * USEC_PER_MSEC)

/* Control plane relays: a job of many hosts has its non-root hosts in
 * groups of relay_fanout; one daemon of each group (the relay) takes its
 * group's readiness, merges the cache ids every host of the group posted
 * into one entry and passes everything on to the root in one message, and
 * passes the root's schedules on to its group. Aborts and pings still go
 * straight between each daemon and the root. */
typedef struct relay_member {
        uint32_t host;      /* cross rank */
        uint8_t id[256];    /* routing id on the peer socket */
        size_t id_len;      /* 0: not heard from yet */
        zmq_msg_t *pending; /* schedules that came before it was heard from */
        size_t n_pending;
        uint32_t *sub; /* the hosts it stands for: itself, and those it relays for */
        uint32_t n_sub;
        uint32_t n_ranks; /* the ranks of those hosts */
} relay_member_t;

typedef struct early_msg {
        uint8_t id[256];
        size_t id_len;
        Hvd__NodeReady *nr; /* owned */
} early_msg_t;

#define RL_KNOWN          1 /* every rank of the job takes part: merged across the group */
#define RL_PER_HOST       2 /* went to the root host by host this round */
#define RELAY_MAX_PENDING 4096

typedef struct relay {
        uint32_t n; /* hosts of the group; m[0] is this daemon's own */
        relay_member_t *m;
        uint32_t *all; /* every host this daemon stands for (its own and the members') */
        uint32_t n_all;
        int32_t *member_of;   /* [cross_size]: the member a host reports through here, or -1 */
        uint64_t full;        /* bit i: m[i] */
        uint64_t *bits;       /* [n_ids]: the hosts that posted the id this round */
        uint64_t *first_usec; /* [n_ids]: its first posting this round */
        uint8_t *flags;       /* [n_ids]: RL_* */
        uint32_t n_ids;
        uint64_t oldest;         /* first posting of the oldest partial id (0 = none) */
        Hvd__RelayedReady **out; /* entries of the next NodeReady to the root, owned */
        size_t n_out, cap_out;
        uint32_t *grp_ids; /* ids every host of the group posted, for the next NodeReady */
        uint64_t *grp_waited;
        size_t n_grp, cap_grp;
        uint64_t in_msgs, out_msgs; /* readiness messages taken from the group / sent to the root */
        uint64_t hold_since;        /* requests held for the rest of the group since (0 = none) */
        uint64_t *out_at;           /* [cap_out]: when each entry came */
        uint64_t out_newest;        /* when the last one came (held still or gone on) */
        uint32_t *ranks_all;        /* the ranks of every host in all, host by host */
        uint32_t n_ranks_all;
        uint8_t *seen; /* [n_seen: the job's size], all 0 between calls (relay_pool_add) */
        uint32_t n_seen;
        int32_t *rank_member; /* [n_seen]: the member whose hosts a rank is on, or -1 */
        /* a first step's names in what is held, name by name over the
         * members (relay_pool_add): rl_name_t by name; pool_off: something
         * else is held */
        hvd_strmap_t *pool;
        uint32_t pool_complete;
        bool pool_off;
} relay_t;

/* Bytes scheduled per second over the last THROUGHPUT_SECS seconds: one
 * slot per second, reused round robin. */
#define THROUGHPUT_SECS 10

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
        uint64_t hb_interval_usec, hb_timeout_usec; /* as its workers were told at welcome */
        uint64_t cycles;
        char abort_reason[1024];
        int32_t departed_rank; /* a rank that said goodbye while others run */
        /* several nodes */
        uint32_t cross_rank, cross_size;
        bool is_root;
        char **hosts;   /* [cross_size] */
        rinfo_t *table; /* [size] */
        node_t *nodes;  /* root: [cross_size] */
        uint32_t n_nodes_joined;
        peer_t *root;             /* not root: where the root is */
        uint64_t root_epoch;      /* not root: the root daemon's epoch (0 = not heard yet) */
        uint64_t last_probe_usec; /* root: when the nodes were last probed */
        bool joined_root;         /* not root: NodeJoin sent */
        Hvd__RankReady **fwd;     /* readiness to forward (at the root: to enter), owned */
        uint64_t *fwd_at;         /* [cap_fwd]: when each came */
        uint64_t fwd_newest;      /* when the last one came (held still or gone on) */
        size_t n_fwd, cap_fwd;
        uint64_t fwd_hold_since; /* new requests held for the other local ranks' since (0 = none) */
        bool fwd_joined;         /* a local rank joined once: no more first-step holds in this job */
        /* a first step's names in what is held, name by name (pool_add):
         * pool_name_t by name; pool_off: the batch holds something else */
        hvd_strmap_t *pool;
        uint32_t pool_complete; /* names every local rank sent, alike */
        bool pool_off;
        uint32_t *departed; /* not root: goodbyes to forward */
        size_t n_departed;
        uint8_t nccl_id[128]; /* from the rank that has a GPU backend (rank 0) */
        size_t nccl_id_len;
        uint64_t stall_check_usec, stall_shutdown_usec;
        bool ring_checksum; /* CRC-32C on the TCP ring: the daemon's key or any rank's request */
        bool stall_warned;
        char stalled[1024];     /* last stall report, for status */
        uint8_t tl_req_id[256]; /* hvdctl waiting for rank 0's timeline answer */
        size_t tl_req_len;
        uint64_t tl_req_deadline;
        rstat_t *rstat; /* [size] */
        uint64_t tp_sec[THROUGHPUT_SECS + 1], tp_bytes[THROUGHPUT_SECS + 1];
        hvd_negotiator_stats_t fast; /* reported by the workers' fast path (Done) */
        /* control plane aggregation */
        uint32_t *node_first, *node_list; /* root: node c's ranks are node_list[node_first[c] .. node_first[c+1]) */
        agg_t *agg;                       /* not root: [n_agg], by cache id */
        uint8_t *agg_bits;                /* not root: [n_agg * local_size], which local ranks posted each id */
        uint32_t n_agg;
        bool agg_off;        /* not root: a local rank left; rank by rank from now on */
        uint32_t agg_joined; /* not root: local ranks waiting in hvd_join */
        uint64_t agg_oldest; /* not root: first readiness of the oldest partial id (0 = none) */
        uint32_t *nc_ids;    /* not root: node-level ids for the next NodeReady */
        uint64_t *nc_waited;
        size_t n_nc, cap_nc;
        /* schedules kept by key (1..HVD_WIRE_SCHEDULE_KEYS): root: the packed
         * body, to recognise a repeat; not root: the cache ids in it */
        uint8_t *key_body[HVD_WIRE_SCHEDULE_KEYS + 1];
        size_t key_len[HVD_WIRE_SCHEDULE_KEYS + 1];
        uint32_t *key_ids[HVD_WIRE_SCHEDULE_KEYS + 1];
        uint32_t key_n[HVD_WIRE_SCHEDULE_KEYS + 1];
        uint32_t next_key;
        /* small schedules through the workers' board (Schedule.board): every
         * local rank reads it and the job spans several hosts; which kept
         * schedules every op of includes local rank 0 (their repeats may go) */
        bool board_sched;
        bool key_board[HVD_WIRE_SCHEDULE_KEYS + 1];
        /* the last BOARD_KEEP of them, packed for the other local ranks: if
         * local rank 0 leaves, what it may not have posted goes to them */
        struct board_sent {
                uint64_t seq;
                size_t len;
                uint8_t bytes[HVD_WIRE_BOARD_SCHEDULE_BYTES];
        } * board_sent;
        uint64_t n_board_sent;
        /* control plane relays */
        uint32_t *relay_via;  /* [cross_size] or NULL: the host relaying each host (0 = none, the root) */
        uint32_t relay_depth; /* root: levels of relays below it */
        peer_t *relay;        /* a host of a relay group: the relay daemon it reports to */
        relay_t *rl;          /* a relay: its group */
        char relay_desc[HVD_WIRE_MAX_TEXT + 128]; /* this daemon's part in the relays, for status ("" = none) */
        early_msg_t *early;                       /* a relay: its group's messages that came before its own welcome */
        size_t n_early;
};

/* A job aborted before all its ranks joined, kept after its removal so that
 * a rank arriving late learns why instead of starting the job anew. */
#define N_TOMBS 32
typedef struct tomb {
        char id[HVD_WIRE_MAX_JOB_ID + 1];
        uint8_t secret[HVD_WIRE_MAX_SECRET];
        size_t secret_len;
        uint64_t usec;
        uint32_t size;
        uint8_t *joined; /* [size]: it had said hello */
        char reason[1024];
} tomb_t;

struct hvd_daemon {
        hvd_daemon_config_t cfg;
        void *zctx;
        void *worker_sock, *control_sock;
        int stop_fd, sig_fd, lock_fd;
        int pid_epfd; /* epoll set of the live local workers' pidfds */
        char worker_ep[PATH_MAX + 16], control_ep[PATH_MAX + 16];
        char lock_path[PATH_MAX + 32];
        hvd_strmap_t *jobs;    /* job id → job_t */
        hvd_strmap_t *workers; /* routing id → worker_t */
        hvd_strmap_t *peers;   /* root endpoint → peer_t */
        hvd_wire_memo_t *memo; /* the workers' requests decoded lately, by their bytes */
        void *peer_sock;       /* ROUTER on cfg.peer_listen, or NULL */
        hvd_zap_t *zap;        /* ZAP handler, CURVE keys */
        char peer_ep[256];
        uint64_t start_usec, epoch, job_seq;
        uint64_t next_housekeeping;
        bool stopping;
        hvd_daemon_load_fn reload_fn; /* SIGHUP */
        void *reload_userdata;
        uint64_t watchdog_usec, next_watchdog; /* half of WATCHDOG_USEC; 0 = off */
        size_t status_jobs, status_workers;    /* last STATUS= sent */
        zmq_pollitem_t *items;
        worker_t **item_workers;
        peer_t **item_peers;
        uint8_t *item_kind;
        size_t n_items, cap_items, cap_kind;
        char host[HVD_WIRE_MAX_HOST + 1];
        hvd_metrics_t metrics;
        hvd_http_t *http;        /* GET /metrics, when metrics_listen is set */
        size_t http_first;       /* its poll items: [http_first, n_items) */
        uint64_t wake_usec;      /* when the reactor last woke with work */
        uint64_t stale_log_usec; /* last log of a stale message on a connection of no job */
        tomb_t tombs[N_TOMBS];   /* round robin */
        size_t next_tomb;
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

static void send_error(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, int code, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
static void send_error(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, int code, const char *fmt, ...) {
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

/* A send to w failed with r (quiet once it said goodbye or its job ended). */
static void send_failed(const worker_t *w, int r) {
        hvd_log_full(w->goodbye || w->job->state == JOB_ABORTED ? LOG_DEBUG : LOG_WARNING, 0,
                     "job %s: cannot send to rank %u (pid %d): %s", w->job->id, w->rank, (int) w->pid, hvd_strerror(r));
}

static void send_to_worker(hvd_daemon_t *d, worker_t *w, Hvd__Envelope *env) {
        if (w->exited)
                return;
        int r = hvd_wire_send_to(d->worker_sock, w->id, w->id_len, env, ZMQ_DONTWAIT);
        if (r < 0)
                send_failed(w, r);
}

/* An envelope packed already, to w. */
static void send_packed_to_worker(hvd_daemon_t *d, const worker_t *w, const void *bytes, size_t len) {
        if (w->exited)
                return;
        if (zmq_send(d->worker_sock, w->id, w->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_send(d->worker_sock, bytes, len, ZMQ_DONTWAIT) < 0)
                send_failed(w, -zmq_errno());
}

/* Sends one packed message to the peer `id` of a ROUTER socket, sharing the
 * packed buffer (zmq_msg_copy counts references, nothing is copied). */
static int send_shared(void *sock, const void *id, size_t id_len, zmq_msg_t *packed) {
        zmq_msg_t m;
        int e = 0;
        zmq_msg_init(&m);
        if (zmq_msg_copy(&m, packed) < 0 || zmq_send(sock, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
            zmq_msg_send(&m, sock, ZMQ_DONTWAIT) < 0)
                e = -zmq_errno();
        zmq_msg_close(&m);
        return e;
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
                                send_packed_to_worker(d, w, k->bytes, k->len);
                }
        }
}

/* Packs env once and sends the same bytes to each local worker (a schedule
 * goes to every rank here: packing it per rank cost as much as the rest),
 * or a small schedule to local rank 0 alone, for the board (board_scribe). */
static void send_to_local_workers(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env, bool skip_goodbye) {
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
                        send_packed_to_worker(d, scribe, flagged, len);
                        return;
                }
        }
        size_t len = protobuf_c_message_get_packed_size(&env->base);
        zmq_msg_t packed;
        if (zmq_msg_init_size(&packed, len) < 0) {
                hvd_log_warning("job %s: cannot send to its ranks: %s", j->id, hvd_strerror(-zmq_errno()));
                return;
        }
        protobuf_c_message_pack(&env->base, zmq_msg_data(&packed));
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                if (!w || w->exited || (skip_goodbye && w->goodbye))
                        continue;
                int e = send_shared(d->worker_sock, w->id, w->id_len, &packed);
                if (e < 0)
                        send_failed(w, e);
        }
        zmq_msg_close(&packed);
}

/* Root: to every remote node that joined; packed once, the same bytes to
 * each. A schedule goes to the hosts of a relay group through their relay
 * only (so that it comes after what the relay passed on before it). */
static void send_to_nodes_ex(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env, bool schedule) {
        if (!j->is_root || !j->nodes)
                return;
        env->version = HVD_PROTOCOL_VERSION;
        zmq_msg_t packed;
        if (zmq_msg_init_size(&packed, protobuf_c_message_get_packed_size(&env->base)) < 0) {
                hvd_log_warning("job %s: cannot send to its nodes: %s", j->id, hvd_strerror(-zmq_errno()));
                return;
        }
        protobuf_c_message_pack(&env->base, zmq_msg_data(&packed));
        for (uint32_t c = 0; c < j->cross_size; c++) {
                node_t *n = &j->nodes[c];
                if (!n->joined || n->local || (schedule && j->relay_via && j->relay_via[c] && j->relay_via[c] != c))
                        continue;
                int r = send_shared(d->peer_sock, n->id, n->id_len, &packed);
                if (r < 0)
                        hvd_log_warning("job %s: cannot reach node %u (%s): %s", j->id, c, j->hosts ? j->hosts[c] : "?",
                                        hvd_strerror(r));
        }
        zmq_msg_close(&packed);
}

#define send_to_nodes(d, j, env) send_to_nodes_ex((d), (j), (env), false)

static void send_to_root(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        if (!j->root || j->root->lost)
                return;
        int r = hvd_wire_send(j->root->sock, env, ZMQ_DONTWAIT);
        if (r < 0)
                hvd_log_warning("job %s: cannot reach the root daemon at %s: %s", j->id, j->root->endpoint,
                                hvd_strerror(r));
}

/* A NodeReady on its way to the root: through the relay this host
 * reports to, if any. */
static void send_up(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        if (!j->relay) {
                send_to_root(d, j, env);
                return;
        }
        Hvd__NodeReady *nr = env->node_ready;
        nr->relay_host = j->cross_rank;
        nr->relay_secret.data = j->secret;
        nr->relay_secret.len = j->secret_len;
        if (j->relay->lost)
                return;
        int r = hvd_wire_send(j->relay->sock, env, ZMQ_DONTWAIT);
        if (r < 0)
                hvd_log_warning("job %s: cannot reach the relay daemon at %s: %s", j->id, j->relay->endpoint,
                                hvd_strerror(r));
}

static const char *host_of(const job_t *j, uint32_t cross_rank) {
        return j->hosts && cross_rank < j->cross_size ? j->hosts[cross_rank] : "?";
}

/* The ranks of host cross_rank as "0, 1, 2" (known once the job runs). */
static void ranks_of_host(const job_t *j, uint32_t cross_rank, char *buf, size_t len) {
        size_t o = 0;
        buf[0] = 0;
        for (uint32_t r = 0; j->table && r < j->size && o + 12 < len; r++)
                if (j->table[r].known && j->table[r].cross_rank == cross_rank)
                        o += (size_t) snprintf(buf + o, len - o, "%s%u", o ? ", " : "", r);
}

/* Aborts the job here and tells everyone who has to know: the local
 * workers, and the other daemons (root: every node; otherwise: the root,
 * unless the abort came from it). */
static void job_abort_ex(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
static void job_abort_v(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, int level, const char *fmt,
                        va_list ap) {
        if (j->state == JOB_ABORTED)
                return;
        vsnprintf(j->abort_reason, sizeof j->abort_reason, fmt, ap);
        j->state = JOB_ABORTED;
        j->aborted_usec = hvd_now_usec();
        d->metrics.jobs_aborted++;
        hvd_log_full(level, 0, "job %s %s: %s", j->id, level == LOG_ERR ? "aborted" : "ended", j->abort_reason);
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

static void job_abort_ex(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        job_abort_v(d, j, from_root, lost_rank, code, LOG_ERR, fmt, ap);
        va_end(ap);
}

/* The end of a job that is shutting down anyway (a local rank said
 * goodbye): the ranks still in it are told, the log says it as news. */
static void job_end_quietly(hvd_daemon_t *d, job_t *j, bool from_root, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void job_end_quietly(hvd_daemon_t *d, job_t *j, bool from_root, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        job_abort_v(d, j, from_root, -1, HVD_EABORTED, LOG_NOTICE, fmt, ap);
        va_end(ap);
}

#define job_abort(d, j, lost, code, ...) job_abort_ex((d), (j), false, (lost), (code), __VA_ARGS__)

/* control plane relays (defined with flush_forward) */
static void relay_receive(hvd_daemon_t *d, job_t *j, const uint8_t *id, size_t id_len, Hvd__NodeReady *nr);
static bool relay_setup(hvd_daemon_t *d, job_t *j, const Hvd__NodeWelcome *nw);
static void relay_replay_early(hvd_daemon_t *d, job_t *j);
static void relay_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s);
static void relay_forward(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env);
static void relay_expire(hvd_daemon_t *d, job_t *j, uint64_t now);
static void relay_flush(hvd_daemon_t *d, job_t *j, bool force);
static int root_assign_relays(hvd_daemon_t *d, job_t *j);
/* a host's batch of its ranks' readiness (at the root: entered) */
static void flush_forward(hvd_daemon_t *d, job_t *j, bool force);

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

static void worker_free(hvd_daemon_t *d, worker_t *w) {
        if (!w)
                return;
        hvd_strmap_remove(d->workers, w->id, w->id_len);
        if (w->pidfd >= 0) {
                pidfd_unwatch(d, w);
                close(w->pidfd);
        }
        free(w);
}

/* A name of a first step held (pool_add, relay_pool_add): where it first
 * came, and whether everyone it waits for sent it alike. */
typedef struct pool_head {
        const Hvd__Request *first; /* the first copy, in its held entry */
        bool done;
} pool_head_t;

/* Takes the requests of e whose names are done in pool out of e: the first
 * copy of each into q (whose requests array has room), the others freed. */
static void pool_move_done(hvd_strmap_t *pool, Hvd__Ready *e, Hvd__Ready *q) {
        size_t keep = 0;
        for (size_t k = 0; k < e->n_requests; k++) {
                Hvd__Request *r = e->requests[k];
                const pool_head_t *p = hvd_strmap_get(pool, r->name, strlen(r->name));
                if (!p || !p->done)
                        e->requests[keep++] = r;
                else if (p->first == r)
                        q->requests[q->n_requests++] = r;
                else
                        protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        e->n_requests = keep;
}

/* The names now in q are done with: a name may come again (a next step's). */
static void pool_forget(hvd_strmap_t *pool, const Hvd__Ready *q) {
        for (size_t k = 0; k < q->n_requests; k++)
                free(hvd_strmap_remove(pool, q->requests[k]->name, strlen(q->requests[k]->name)));
}

/* A name of a first step held on this host (pool_add). */
typedef struct pool_name {
        pool_head_t head; /* first: the first local rank's */
        uint32_t n;       /* local ranks that sent it */
        bool bad;         /* a rank sent it twice, or other parameters: it goes rank by rank */
        uint8_t have[];   /* [local_size] */
} pool_name_t;

static bool pool_done(const job_t *j, const pool_name_t *p) {
        return p && !p->bad && p->n == j->local_size;
}

/* Frees a pool's names and the pool (NULL-safe). */
static void pool_free(hvd_strmap_t **pool) {
        size_t iter = 0;
        void *v;
        while (*pool && hvd_strmap_next(*pool, &iter, NULL, NULL, &v))
                free(v);
        hvd_strmap_destroy(pool);
}

static void pool_clear(job_t *j) {
        pool_free(&j->pool);
        j->pool_complete = 0;
        j->pool_off = false;
}

static void fwd_clear(job_t *j) {
        for (size_t i = 0; i < j->n_fwd; i++)
                protobuf_c_message_free_unpacked(&j->fwd[i]->base, NULL);
        pool_clear(j);
        j->n_fwd = 0;
        j->n_departed = 0;
        j->n_nc = 0;
}

/* A name of a first step held at a relay (relay_pool_add). */
typedef struct rl_name {
        pool_head_t head; /* first: the first member's */
        uint64_t members; /* bit i: member i sent it, for all its ranks */
        bool bad;         /* sent twice, or with other parameters: goes as it came */
} rl_name_t;

static void relay_pool_clear(relay_t *rl) {
        pool_free(&rl->pool);
        rl->pool_complete = 0;
        rl->pool_off = false;
}

static void relay_out_clear(relay_t *rl) {
        for (size_t i = 0; i < rl->n_out; i++)
                protobuf_c_message_free_unpacked(&rl->out[i]->base, NULL);
        relay_pool_clear(rl);
        rl->n_out = 0;
        rl->n_grp = 0;
}

static void relay_free(relay_t *rl) {
        if (!rl)
                return;
        for (uint32_t i = 0; i < rl->n; i++) {
                for (size_t k = 0; k < rl->m[i].n_pending; k++)
                        zmq_msg_close(&rl->m[i].pending[k]);
                free(rl->m[i].pending);
                free(rl->m[i].sub);
        }
        free(rl->m);
        free(rl->all);
        free(rl->member_of);
        free(rl->bits);
        free(rl->first_usec);
        free(rl->flags);
        relay_out_clear(rl);
        free(rl->out);
        free(rl->out_at);
        free(rl->ranks_all);
        free(rl->seen);
        free(rl->rank_member);
        free(rl->grp_ids);
        free(rl->grp_waited);
        free(rl);
}

static void job_free(hvd_daemon_t *d, job_t *j) {
        free(j->board_sent);
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
        fwd_clear(j);
        free(j->fwd);
        free(j->fwd_at);
        free(j->departed);
        free(j->rstat);
        free(j->node_first);
        free(j->node_list);
        free(j->agg);
        free(j->agg_bits);
        free(j->nc_ids);
        free(j->nc_waited);
        for (size_t k = 0; k <= HVD_WIRE_SCHEDULE_KEYS; k++) {
                free(j->key_body[k]);
                free(j->key_ids[k]);
        }
        if (j->root)
                j->root->n_jobs--;
        if (j->relay)
                j->relay->n_jobs--;
        relay_free(j->rl);
        for (size_t i = 0; i < j->n_early; i++)
                protobuf_c_message_free_unpacked(&j->early[i].nr->base, NULL);
        free(j->early);
        free(j->relay_via);
        for (uint32_t c = 0; j->nodes && c < j->cross_size; c++)
                free(j->nodes[c].endpoint);
        free(j->nodes);
        free(j);
}

static void job_set_nccl_id(job_t *j, const ProtobufCBinaryData *id) {
        if (id->len && id->len <= sizeof j->nccl_id && !j->nccl_id_len) {
                memcpy(j->nccl_id, id->data, id->len);
                j->nccl_id_len = id->len;
        }
}

static void tomb_add(hvd_daemon_t *d, const job_t *j) {
        tomb_t *t = &d->tombs[d->next_tomb++ % N_TOMBS];
        free(t->joined);
        memset(t, 0, sizeof *t);
        if (!(t->joined = calloc(j->size, 1)))
                return;
        snprintf(t->id, sizeof t->id, "%s", j->id);
        memcpy(t->secret, j->secret, j->secret_len);
        t->secret_len = j->secret_len;
        t->usec = hvd_now_usec();
        t->size = j->size;
        for (uint32_t r = 0; r < j->size; r++)
                t->joined[r] = j->ranks[r] != NULL;
        snprintf(t->reason, sizeof t->reason, "%s", j->abort_reason);
}

/* A job recently aborted before this rank of it joined, or NULL. */
static const tomb_t *tomb_find(const hvd_daemon_t *d, const Hvd__Hello *h) {
        uint64_t now = hvd_now_usec();
        for (size_t i = 0; i < N_TOMBS; i++) {
                const tomb_t *t = &d->tombs[i];
                if (t->joined && now - t->usec < ABORTED_JOB_LINGER_USEC && strcmp(t->id, h->job_id) == 0 &&
                    h->rank < t->size && !t->joined[h->rank] && t->secret_len == h->secret.len &&
                    memcmp(t->secret, h->secret.data, t->secret_len) == 0)
                        return t;
        }
        return NULL;
}

static void job_remove(hvd_daemon_t *d, job_t *j) {
        hvd_log_info("job %s removed (%s)", j->id, job_state_names[j->state]);
        if (j->rl)
                hvd_log_info("job %s: %s: took %" PRIu64 " readiness messages from its group, sent %" PRIu64 " to %s",
                             j->id, j->relay_desc, j->rl->in_msgs, j->rl->out_msgs,
                             j->relay ? "its relay" : "the root");
        if (j->state == JOB_ABORTED && j->n_hello < j->local_size)
                tomb_add(d, j);
        if (j->state != JOB_ABORTED)
                d->metrics.jobs_finished++;
        hvd_strmap_remove(d->jobs, j->id, strlen(j->id));
        job_free(d, j);
}

/* ---- peers (connections to remote root daemons) ---- */

static peer_t *peer_get(hvd_daemon_t *d, const char *endpoint) {
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
                wel.n_ranks = j->size;
                wel.ranks = ptrs;
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
                send_to_worker(d, w, &env);
        }
        free(infos);
        free(ptrs);
        d->next_housekeeping = 0; /* arms the heartbeat check */
        j->state = JOB_RUNNING;
        hvd_log_notice("job %s running: %u ranks on %u host%s, %u here", j->id, j->size, j->cross_size,
                       j->cross_size == 1 ? "" : "s", j->local_size);
}

/* Root: every node joined; tell them, then our own workers. */
/* Root: the table knows every rank's node; the negotiator takes the
 * other nodes' readiness node by node from now on. */
static int root_set_nodes(job_t *j) {
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

static void root_complete(hvd_daemon_t *d, job_t *j) {
        Hvd__RankInfo *infos = calloc(j->size, sizeof *infos);
        Hvd__RankInfo **ptrs = calloc(j->size, sizeof *ptrs);
        if (!infos || !ptrs || root_set_nodes(j) < 0) {
                free(infos);
                free(ptrs);
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        char **eps = NULL;
        if (root_assign_relays(d, j) < 0 || (j->relay_via && !(eps = calloc(j->cross_size, sizeof *eps)))) {
                free(infos);
                free(ptrs);
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        fill_rank_infos(j, infos, ptrs);
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
        nw.n_ranks = j->size;
        nw.ranks = ptrs;
        nw.epoch = d->epoch;
        nw.fusion_threshold = j->fusion_threshold;
        nw.cycle_time_usec = j->cycle_time_usec;
        nw.ring_checksum = j->ring_checksum;
        nw.nccl_id.data = j->nccl_id;
        nw.nccl_id.len = j->nccl_id_len;
        env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
        env.node_welcome = &nw;
        send_to_nodes(d, j, &env);
        free(infos);
        free(ptrs);
        free(eps);
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
                            size_t id_len, Hvd__RankInfo *const *ri, size_t n, const char *endpoint) {
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
                if (endpoint && endpoint[0] && !(nd->endpoint = strdup(endpoint))) {
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return -ENOMEM;
                }
        }
        j->n_nodes_joined++;
        hvd_log_info("job %s: host %u (%s) joined with %zu ranks, %u of %u hosts", j->id, cross_rank,
                     host_of(j, cross_rank), n, j->n_nodes_joined, j->cross_size);
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
                snprintf(buf, len, "tcp://%s%s", host_of(j, j->cross_rank), port);
        return buf;
}

/* Root: hosts[0..n) (cross ranks, in order) report to parent (0: the
 * root), which hears from at most cap of them. More are cut into runs as
 * even as can be: ceil(n / g) runs of at most g hosts when that makes at
 * most cap of them (each run's relay hears from the rest of it), else cap
 * runs, each placed below its relay the same way (at most g a relay). A
 * run's relay is its first host that gave an endpoint; a relay whose
 * parent is the root names itself. Returns the relays made (UINT32_MAX:
 * out of memory). */
static uint32_t relay_tree(job_t *j, const uint32_t *hosts, uint32_t n, uint32_t parent, uint32_t g, uint32_t cap,
                           uint32_t depth) {
        if (n <= cap) {
                for (uint32_t k = 0; k < n; k++)
                        j->relay_via[hosts[k]] = parent;
                return 0;
        }
        uint32_t runs = (n + g - 1) / g;
        if (runs > cap)
                runs = cap;
        uint32_t made = 0;
        for (uint32_t part = 0, first = 0; part < runs; part++) {
                uint32_t len = n / runs + (part < n % runs), relay = UINT32_MAX;
                for (uint32_t k = first; k < first + len && relay == UINT32_MAX; k++)
                        if (j->nodes[hosts[k]].endpoint)
                                relay = k;
                if (relay == UINT32_MAX || len < 2) { /* no one can relay: straight to the parent */
                        for (uint32_t k = first; k < first + len; k++)
                                j->relay_via[hosts[k]] = parent;
                } else {
                        uint32_t r = hosts[relay];
                        j->relay_via[r] = parent ? parent : r;
                        if (depth + 1 > j->relay_depth)
                                j->relay_depth = depth + 1;
                        /* the run without its relay, in order */
                        uint32_t *rest = malloc((len - 1) * sizeof *rest);
                        if (!rest)
                                return UINT32_MAX;
                        for (uint32_t k = first, o = 0; k < first + len; k++)
                                if (k != relay)
                                        rest[o++] = hosts[k];
                        uint32_t sub = relay_tree(j, rest, len - 1, r, g, g, depth + 1);
                        free(rest);
                        if (sub == UINT32_MAX)
                                return UINT32_MAX;
                        made += 1 + sub;
                }
                first += len;
        }
        return made;
}

/* Root: places the other hosts of a large job in a tree of relays in which
 * no relay hears from more than relay_fanout hosts, and the root, which
 * also negotiates, from at most a quarter as many (at least 2; the first
 * host of a group
 * that gave an endpoint relays for it); fills j->relay_via. Returns 0 (no
 * relays: j->relay_via stays NULL) or -ENOMEM. */
static int root_assign_relays(hvd_daemon_t *d, job_t *j) {
        uint32_t g = d->cfg.relay_fanout;
        if (g < 2 || j->cross_size - 1 <= g || hvd_zap_curve(d->zap))
                return 0;
        uint32_t *hosts = malloc((j->cross_size - 1) * sizeof *hosts);
        if (!hosts || !(j->relay_via = calloc(j->cross_size, sizeof *j->relay_via))) {
                free(hosts);
                return -ENOMEM;
        }
        for (uint32_t c = 1; c < j->cross_size; c++)
                hosts[c - 1] = c;
        j->relay_depth = 0;
        uint32_t relays = relay_tree(j, hosts, j->cross_size - 1, 0, g, HVD_MAX(2u, g / 4), 0);
        free(hosts);
        if (relays == UINT32_MAX || !relays) {
                free(j->relay_via);
                j->relay_via = NULL;
                return relays ? -ENOMEM : 0;
        }
        uint32_t top = 0;
        for (uint32_t c = 1; c < j->cross_size; c++)
                top += j->relay_via[c] == c;
        if (j->relay_depth > 1)
                snprintf(j->relay_desc, sizeof j->relay_desc,
                         "%u hosts report through %u relay daemons in %u levels (%u under the root, at most %u hosts "
                         "a relay)",
                         j->cross_size - 1, relays, j->relay_depth, top, g);
        else
                snprintf(j->relay_desc, sizeof j->relay_desc,
                         "%u hosts report through %u relay daemons (%u hosts a group)", j->cross_size - 1, relays, g);
        hvd_log_info("job %s: %s", j->id, j->relay_desc);
        return 0;
}

/* The host that host c reports to with relays (0: the root). */
static uint32_t relay_parent(const job_t *j, uint32_t c) {
        return j->relay_via[c] == c ? 0 : j->relay_via[c];
}

/* Whether host h is relay r or reports through it, however deep. */
static bool relay_under(const job_t *j, uint32_t h, uint32_t r) {
        for (uint32_t steps = 0; h && steps < j->cross_size; steps++, h = relay_parent(j, h))
                if (h == r)
                        return true;
        return false;
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
        /* small schedules through the board when every local rank reads it */
        j->board_sched = j->local_size > 1 && j->cross_size > 1;
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && !j->ranks[r]->board)
                        j->board_sched = false;
        if (j->cross_size <= 1) {
                char err[512];
                if (table_add(j, 0, ptrs, n, err, sizeof err) < 0)
                        job_abort(d, j, -1, HVD_EDUPLICATE, "%s", err);
                else
                        welcome_local(d, j);
        } else if (j->is_root)
                root_node_joined(d, j, j->cross_rank, true, NULL, 0, ptrs, n, NULL);
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
                nj.ring_checksum = j->ring_checksum;
                char ep[sizeof d->peer_ep + HVD_WIRE_MAX_HOST];
                nj.peer_endpoint = advertised_endpoint(d, j, ep, sizeof ep);
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

static void observe_negotiation(void *userdata, uint64_t wait_usec) {
        hvd_daemon_t *d = userdata;
        hvd_histogram_observe(&d->metrics.negotiation, wait_usec);
}

static job_t *job_create(hvd_daemon_t *d, const job_params_t *jp, char *err, size_t len) {
        if (hvd_strmap_size(d->jobs) >= d->cfg.max_jobs) {
                snprintf(err, len, "job %s refused: this daemon already serves max_jobs (%u) jobs", jp->job_id,
                         d->cfg.max_jobs);
                return NULL;
        }
        uint32_t cross_size = jp->cross_size ? jp->cross_size : 1;
        bool root = cross_size > 1 && jp->cross_rank == 0;
        if (cross_size > 1 && root && !d->peer_sock) {
                snprintf(err, len,
                         "job %s spans %u hosts and this daemon is its root, but it has no peer_listen "
                         "address configured for the other daemons to reach it",
                         jp->job_id, cross_size);
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
        j->fusion_threshold =
                jp->fusion_threshold >= 0 ? (uint64_t) jp->fusion_threshold : d->cfg.fusion_threshold_bytes;
        j->cycle_time_usec = jp->cycle_time_usec ? jp->cycle_time_usec : d->cfg.cycle_time_usec;
        j->stall_check_usec = jp->stall_check_usec;
        j->stall_shutdown_usec = jp->stall_shutdown_usec;
        j->ring_checksum = d->cfg.ring_checksum;
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
        j->rstat = calloc(j->size, sizeof *j->rstat);
        bool ok = j->ranks && j->table && j->hosts && j->rstat;
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
        if (j->neg)
                hvd_negotiator_set_observer(j->neg, observe_negotiation, d);
        d->metrics.jobs_started++;
        d->next_housekeeping = 0;
        hvd_log_info("job %s created: %u ranks, %u here, host %u of %u%s", j->id, j->size, j->local_size, j->cross_rank,
                     cross_size, root ? " (root)" : "");
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
            (!j->owned || j->owner_uid == uid) && memcmp(j->secret, h->secret.data, j->secret_len) == 0) {
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
        const tomb_t *t = j ? NULL : tomb_find(d, h);
        if (t) {
                send_error(d, d->worker_sock, id, id_len, HVD_EABORTED, "job %s was aborted before rank %u joined: %s",
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
                        .stall_check_usec = h->stall_check_usec,
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
                if (j->state == JOB_ABORTED) {
                        send_error(d, d->worker_sock, id, id_len, HVD_EABORTED,
                                   "job %s was aborted before rank %u joined: %s", j->id, h->rank, j->abort_reason);
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
                send_error(d, d->worker_sock, id, id_len, -ENOMEM, "out of memory");
                return;
        }
        pidfd_watch(d, w);
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
        j->n_hello++;
        j->n_live++;
        d->metrics.workers_connected++;
        hvd_log_info("job %s: rank %u joined (pid %d, uid %d), %u of %u here", j->id, w->rank, (int) w->pid, (int) uid,
                     j->n_hello, j->local_size);
        if (j->n_hello == j->local_size)
                local_complete(d, j);
}

/* Root: the same readiness of each rank in ranks, from a local worker or
 * a remote node (one Ready its ranks shared: entered once). seen: count it
 * as a readiness message from each, for status (a local rank's held one
 * was counted when it came). */
static void root_submit(hvd_daemon_t *d, job_t *j, const uint32_t *ranks, size_t n_ranks, const Hvd__Ready *q,
                        bool seen) {
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
                job_abort(d, j, -1, r, "host %s: %s", host_of(j, j->table[ranks[0]].cross_rank), err);
        /* the stall inspector looks while tensors wait */
        if (j->stall_check_usec && d->next_housekeeping > hvd_now_usec() + USEC_PER_SEC)
                d->next_housekeeping = hvd_now_usec() + USEC_PER_SEC;
}

/* Root: ids every rank of node cross is ready for (control plane
 * aggregation): one submission for the node, as if each rank had sent them. */
static void root_submit_node(hvd_daemon_t *d, job_t *j, uint32_t cross, const Hvd__NodeReady *nr, bool own) {
        uint32_t first = j->node_first[cross], last = j->node_first[cross + 1];
        if (j->departed_rank >= 0) {
                job_abort(d, j, j->departed_rank, HVD_EABORTED,
                          "rank %d has shut down, but the ranks of host %s still submit collectives; the job cannot go "
                          "on",
                          j->departed_rank, host_of(j, cross));
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
                job_abort(d, j, -1, r, "host %s: %s", host_of(j, cross), err);
        if (j->stall_check_usec && d->next_housekeeping == UINT64_MAX)
                d->next_housekeeping = now + USEC_PER_SEC;
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

/* ---- control plane aggregation (not root) ---- */

/* The new requests of local rank's Ready q, just held: counted name by
 * name, so that those every local rank sent alike can go on once for all
 * of them (pool_take), whatever batches each rank's client made of them.
 * Only a first step's kind of batch: new requests alone, of collectives
 * of every rank; anything else turns the pool off until the batch went. */
static void pool_add(job_t *j, uint32_t rank, const Hvd__Ready *q) {
        if (j->pool_off)
                return;
        const worker_t *w = rank < j->size ? j->ranks[rank] : NULL;
        bool ok = w && j->local_size > 1 && w->local_rank < j->local_size && !j->fwd_joined && q->n_requests &&
                  !q->n_cached && !q->n_node_cached;
        for (size_t k = 0; ok && k < q->n_requests; k++)
                ok = !q->requests[k]->process_set && q->requests[k]->kind != HVD__KIND__KIND_JOIN;
        if (ok && !j->pool && !(j->pool = hvd_strmap_new()))
                ok = false;
        for (size_t k = 0; ok && k < q->n_requests; k++) {
                const Hvd__Request *r = q->requests[k];
                size_t len = strlen(r->name);
                pool_name_t *p = hvd_strmap_get(j->pool, r->name, len);
                if (!p) {
                        if (!(p = calloc(1, sizeof *p + j->local_size)) ||
                            hvd_strmap_put(j->pool, r->name, len, p) < 0) {
                                free(p);
                                ok = false;
                                break;
                        }
                        p->head.first = r;
                }
                bool was = p->head.done;
                if (p->have[w->local_rank] || !hvd_wire_equal(&p->head.first->base, &r->base))
                        p->bad = true;
                else {
                        p->have[w->local_rank] = 1;
                        p->n++;
                }
                p->head.done = pool_done(j, p);
                j->pool_complete += p->head.done;
                j->pool_complete -= was;
        }
        if (!ok)
                j->pool_off = true;
}

/* Appends a RankReady of rank to this iteration's batch (or what is held).
 * Takes ownership of ready. */
static int fwd_append(job_t *j, uint32_t rank, Hvd__Ready *ready) {
        /* a rank that joined may send nothing more: the first step's hold
         * (fwd_holds) never waits for it again */
        for (size_t k = 0; k < ready->n_requests; k++)
                j->fwd_joined |= ready->requests[k]->kind == HVD__KIND__KIND_JOIN;
        if (j->n_fwd == j->cap_fwd) {
                size_t cap = j->cap_fwd ? j->cap_fwd * 2 : 16;
                Hvd__RankReady **nf = realloc(j->fwd, cap * sizeof *nf);
                if (nf)
                        j->fwd = nf;
                uint64_t *na = realloc(j->fwd_at, cap * sizeof *na);
                if (na)
                        j->fwd_at = na;
                if (!nf || !na) {
                        protobuf_c_message_free_unpacked(&ready->base, NULL);
                        return -ENOMEM;
                }
                j->cap_fwd = cap;
        }
        Hvd__RankReady *rr = calloc(1, sizeof *rr);
        if (!rr) {
                protobuf_c_message_free_unpacked(&ready->base, NULL);
                return -ENOMEM;
        }
        hvd__rank_ready__init(rr);
        rr->rank = rank;
        rr->ready = ready;
        j->fwd_at[j->n_fwd] = j->fwd_newest = hvd_now_usec();
        j->fwd[j->n_fwd++] = rr;
        pool_add(j, rank, ready);
        return 0;
}

/* The capacity of a table by cache id that holds id, from have: doubled
 * from 64; -E2BIG past the ids a message may carry. */
static int64_t id_capacity(uint32_t have, uint32_t id) {
        if (id >= HVD_WIRE_MAX_REQUESTS * 16)
                return -E2BIG;
        uint32_t n = have ? have : 64;
        while (n <= id)
                n *= 2;
        return n;
}

static int agg_grow(job_t *j, uint32_t id) {
        if (id < j->n_agg)
                return 0;
        int64_t cap = id_capacity(j->n_agg, id);
        if (cap < 0)
                return (int) cap;
        uint32_t n = (uint32_t) cap;
        agg_t *a = realloc(j->agg, n * sizeof *a);
        if (!a)
                return -ENOMEM;
        j->agg = a;
        uint8_t *b = realloc(j->agg_bits, (size_t) n * j->local_size);
        if (!b)
                return -ENOMEM;
        j->agg_bits = b;
        memset(j->agg + j->n_agg, 0, (n - j->n_agg) * sizeof *a);
        memset(j->agg_bits + (size_t) j->n_agg * j->local_size, 0, (size_t) (n - j->n_agg) * j->local_size);
        j->n_agg = n;
        return 0;
}

/* Hands every partial node-level readiness to the root rank by rank: the
 * ids stay rank by rank until their schedule passes. */
static void agg_release(hvd_daemon_t *d, job_t *j) {
        if (!j->agg_oldest)
                return;
        j->agg_oldest = 0;
        uint64_t now = hvd_now_usec();
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *w = j->ranks[r];
                if (!w)
                        continue;
                Hvd__Ready *q = NULL;
                for (uint32_t id = 0; id < j->n_agg; id++) {
                        agg_t *a = &j->agg[id];
                        uint8_t *bit = &j->agg_bits[(size_t) id * j->local_size + w->local_rank];
                        if (!a->n_ready || !*bit)
                                continue;
                        if (!q) {
                                if (!(q = calloc(1, sizeof *q)))
                                        goto oom;
                                hvd__ready__init(q);
                                q->cached = malloc(j->n_agg * sizeof *q->cached);
                                q->cached_waited_usec = malloc(j->n_agg * sizeof *q->cached_waited_usec);
                                if (!q->cached || !q->cached_waited_usec) {
                                        protobuf_c_message_free_unpacked(&q->base, NULL);
                                        goto oom;
                                }
                        }
                        q->cached[q->n_cached++] = id;
                        q->cached_waited_usec[q->n_cached_waited_usec++] =
                                now > a->first_usec ? now - a->first_usec : 0;
                }
                if (q && fwd_append(j, w->rank, q) < 0)
                        goto oom;
        }
        for (uint32_t id = 0; id < j->n_agg; id++)
                if (j->agg[id].n_ready) {
                        j->agg[id].n_ready = 0;
                        j->agg[id].per_rank = true;
                        memset(&j->agg_bits[(size_t) id * j->local_size], 0, j->local_size);
                }
        return;
oom:
        job_abort(d, j, -1, -ENOMEM, "out of memory");
}

/* A schedule passing through: its ids are done with this round (whatever
 * went rank by rank aggregates again) and show which ids every local rank
 * takes part in. */
static void agg_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s) {
        if (s->repeat_key) {
                for (uint32_t i = 0; i < j->key_n[s->repeat_key]; i++)
                        j->agg[j->key_ids[s->repeat_key][i]].per_rank = false;
                return;
        }
        uint32_t *kids = NULL, nk = 0;
        if (s->keep_key) {
                size_t total = 0;
                for (size_t o = 0; o < s->n_ops; o++)
                        total += s->ops[o]->n_entries;
                if (!(kids = malloc((total ? total : 1) * sizeof *kids)))
                        goto oom;
        }
        for (size_t o = 0; o < s->n_ops; o++) {
                const Hvd__Op *op = s->ops[o];
                bool all_local = op->process_set == 0;
                if (!all_local) {
                        uint32_t here = 0;
                        for (size_t k = 0; k < op->n_set_ranks; k++)
                                here += op->set_ranks[k] < j->size && j->ranks[op->set_ranks[k]];
                        all_local = here == j->local_size;
                }
                for (size_t e = 0; e < op->n_entries; e++) {
                        uint32_t id = op->entries[e]->id;
                        if (id == HVD_NEGOTIATOR_NO_ID)
                                continue;
                        if (agg_grow(j, id) < 0)
                                goto oom;
                        j->agg[id].known = all_local;
                        j->agg[id].per_rank = false;
                        if (kids)
                                kids[nk++] = id;
                }
        }
        for (size_t i = 0; i < s->n_errors; i++) {
                uint32_t id = s->errors[i]->id;
                if (id != HVD_NEGOTIATOR_NO_ID && id < j->n_agg)
                        j->agg[id].per_rank = false;
        }
        if (s->join_done_last_rank >= 0)
                j->agg_joined = 0;
        if (s->keep_key) {
                free(j->key_ids[s->keep_key]);
                j->key_ids[s->keep_key] = kids;
                j->key_n[s->keep_key] = nk;
        }
        return;
oom:
        free(kids);
        job_abort(d, j, -1, -ENOMEM, "out of memory");
}

/* Appends id and its wait to a pair of growing arrays (n of cap used).
 * Returns 0 or -ENOMEM (nothing appended). */
static int ids_push(uint32_t **ids, uint64_t **waited, size_t *n, size_t *cap, uint32_t id, uint64_t w) {
        if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 256;
                uint32_t *ni = realloc(*ids, c * sizeof *ni);
                if (ni)
                        *ids = ni;
                uint64_t *nw = realloc(*waited, c * sizeof *nw);
                if (nw)
                        *waited = nw;
                if (!ni || !nw)
                        return -ENOMEM;
                *cap = c;
        }
        (*ids)[*n] = id;
        (*waited)[(*n)++] = w;
        return 0;
}

/* One node-level id for the root, with how long it waited here. Returns
 * false when the job was aborted. */
static bool nc_push(hvd_daemon_t *d, job_t *j, uint32_t id, uint64_t waited) {
        if (ids_push(&j->nc_ids, &j->nc_waited, &j->n_nc, &j->cap_nc, id, waited) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return false;
        }
        return true;
}

/* A local rank's cached ids: those every local rank takes part in are
 * counted here and leave for the root as one node-level id once the last
 * local rank posted them; the others stay in q, for the root rank by rank.
 * Returns false when the job was aborted. */
static bool agg_ready(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Ready *q) {
        for (size_t i = 0; i < q->n_requests; i++)
                if (q->requests[i]->kind == HVD__KIND__KIND_JOIN)
                        j->agg_joined++;
        /* new or changed parameters, or a join: what waits here would wait
         * for ranks that will not post it cached; it goes rank by rank */
        if (q->n_requests)
                agg_release(d, j);
        if (j->agg_off || j->agg_joined || j->state != JOB_RUNNING)
                return j->state == JOB_RUNNING;
        uint64_t now = hvd_now_usec();
        size_t keep = 0;
        bool waited = q->n_cached_waited_usec == q->n_cached;
        for (size_t i = 0; i < q->n_cached; i++) {
                uint32_t id = q->cached[i];
                uint64_t wt = waited ? q->cached_waited_usec[i] : 0;
                agg_t *a = id < j->n_agg ? &j->agg[id] : NULL;
                if (!a || !a->known || a->per_rank) {
                        q->cached[keep] = id;
                        if (waited)
                                q->cached_waited_usec[keep] = wt;
                        keep++;
                        continue;
                }
                uint8_t *bit = &j->agg_bits[(size_t) id * j->local_size + w->local_rank];
                if (*bit) {
                        job_abort(d, j, (int) w->rank, HVD_EDUPLICATE,
                                  "rank %u submitted the tensor of cache id %u twice before it completed", w->rank, id);
                        return false;
                }
                uint64_t at = wt < now ? now - wt : now;
                if (!a->n_ready || at < a->first_usec)
                        a->first_usec = at;
                if (!j->agg_oldest || a->first_usec < j->agg_oldest)
                        j->agg_oldest = a->first_usec;
                *bit = 1;
                if (++a->n_ready < j->local_size)
                        continue;
                if (!nc_push(d, j, id, now > a->first_usec ? now - a->first_usec : 0))
                        return false;
                a->n_ready = 0;
                memset(&j->agg_bits[(size_t) id * j->local_size], 0, j->local_size);
        }
        q->n_cached = keep;
        if (waited)
                q->n_cached_waited_usec = keep;
        return true;
}

/* Housekeeping: a partial node-level readiness held for long goes rank by
 * rank (the root's stall inspector names the missing ranks). */
static void agg_expire(hvd_daemon_t *d, job_t *j, uint64_t now) {
        uint64_t oldest = 0;
        for (uint32_t id = 0; id < j->n_agg; id++)
                if (j->agg[id].n_ready && (!oldest || j->agg[id].first_usec < oldest))
                        oldest = j->agg[id].first_usec;
        j->agg_oldest = oldest;
        if (oldest && now - oldest > AGG_HOLD_USEC)
                agg_release(d, j);
}

/* Ids every local rank posted on the board (its node mode, on a job of
 * several hosts), sent once for this host by the rank that completed
 * them: node-level readiness, as if the last local rank had posted them
 * here. At the root they are entered once for the host; on any other host
 * they leave with this iteration's node-level ids, or rank by rank once
 * aggregation is off here (a local rank left). Returns false when the job
 * was aborted. */
static bool node_level_ready(hvd_daemon_t *d, job_t *j, worker_t *w, const Hvd__Ready *q) {
        if (j->cross_size < 2) {
                job_abort(d, j, (int) w->rank, HVD_EPROTO,
                          "rank %u sent host-level readiness, but the job runs on one host", w->rank);
                return false;
        }
        d->metrics.board_node_ready++;
        d->metrics.board_node_ids += q->n_node_cached;
        bool waited = q->n_node_cached_waited_usec == q->n_node_cached;
        if (j->neg) {
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                nr.n_node_cached = q->n_node_cached;
                nr.node_cached = q->node_cached;
                nr.n_node_cached_waited_usec = waited ? q->n_node_cached : 0;
                nr.node_cached_waited_usec = q->node_cached_waited_usec;
                root_submit_node(d, j, j->cross_rank, &nr, true);
                return j->state == JOB_RUNNING;
        }
        /* a readiness from each local rank, for status (as the root counts
         * them; w's own is counted with its message, in handle_ready) */
        uint64_t now = hvd_now_usec();
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && r != w->rank) {
                        j->rstat[r].last_seen_usec = now;
                        j->rstat[r].readies++;
                }
        if (!j->agg_off) {
                for (size_t i = 0; i < q->n_node_cached; i++)
                        if (!nc_push(d, j, q->node_cached[i], waited ? q->node_cached_waited_usec[i] : 0))
                                return false;
                return true;
        }
        for (uint32_t r = 0; r < j->size; r++) {
                worker_t *o = j->ranks[r];
                if (!o || o->goodbye)
                        continue;
                Hvd__Ready *c = calloc(1, sizeof *c);
                if (!c)
                        goto oom;
                hvd__ready__init(c);
                c->cached = malloc(q->n_node_cached * sizeof *c->cached);
                if (!c->cached) {
                        free(c);
                        goto oom;
                }
                memcpy(c->cached, q->node_cached, q->n_node_cached * sizeof *c->cached);
                c->n_cached = q->n_node_cached;
                if (fwd_append(j, o->rank, c) < 0)
                        goto oom;
        }
        return true;
oom:
        job_abort(d, j, -1, -ENOMEM, "out of memory");
        return false;
}

/* Takes ownership of env when it returns true. */
/* Root: whether a local rank's Ready waits in this iteration's batch, as
 * a host's does before it goes to the root (flush_forward): new requests
 * of a first step, which the other local ranks send alike and which are
 * then entered once for all of them; and anything of a rank behind what
 * waits, which must not overtake it. */
static bool root_holds(const job_t *j, const Hvd__Ready *q) {
        if (j->n_fwd)
                return true;
        if (j->local_size < 2 || j->fwd_joined || !q->n_requests || q->n_cached || q->n_node_cached)
                return false;
        for (size_t k = 0; k < q->n_requests; k++)
                if (q->requests[k]->process_set)
                        return false;
        return true;
}

static bool handle_ready(hvd_daemon_t *d, worker_t *w, Hvd__Envelope *env) {
        job_t *j = w->job;
        if (j->state != JOB_RUNNING)
                return false; /* joining: cannot happen (no welcome yet); aborted: dropped */
        if (w->goodbye) {
                job_abort(d, j, (int) w->rank, HVD_EPROTO, "rank %u sent tensors after it shut down", w->rank);
                return false;
        }
        j->cycles++;
        d->metrics.cycles++;
        if (env->ready->done_seq >= w->done_seq) {
                w->done_seq = env->ready->done_seq;
                w->busy_usec = env->ready->busy_usec;
        }
        if (j->neg && j->n_fwd && env->ready->n_node_cached)
                flush_forward(d, j, true); /* what was held goes first */
        if (env->ready->n_node_cached && !node_level_ready(d, j, w, env->ready))
                return false;
        if (j->neg) {
                if (!env->ready->n_requests && !env->ready->n_cached && env->ready->n_node_cached)
                        return false;
                if (!root_holds(j, env->ready)) {
                        root_submit(d, j, &w->rank, 1, env->ready, true);
                        return false;
                }
                /* held for the other local ranks' (flush_forward), or
                 * behind what is; a readiness message from it all the same */
                j->rstat[w->rank].last_seen_usec = hvd_now_usec();
                j->rstat[w->rank].readies++;
                Hvd__Ready *q = TAKE_PTR(env->ready);
                env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
                if (fwd_append(j, w->rank, q) < 0)
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                return false;
        }
        j->rstat[w->rank].last_seen_usec = hvd_now_usec();
        j->rstat[w->rank].readies++;
        if (!agg_ready(d, j, w, env->ready))
                return false;
        if (!env->ready->n_requests && !env->ready->n_cached)
                return false; /* all of it waits here for the node-level message */
        /* the rest goes to the root rank by rank, with this iteration's batch */
        Hvd__Ready *q = TAKE_PTR(env->ready);
        env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
        if (fwd_append(j, w->rank, q) < 0)
                job_abort(d, j, -1, -ENOMEM, "out of memory");
        return false;
}

static void worker_gone(hvd_daemon_t *d, worker_t *w, const char *why) {
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

/* Root: rank said goodbye. A goodbye while collectives wait for it means
 * they never can complete. */
static void root_departed(hvd_daemon_t *d, job_t *j, uint32_t rank) {
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
        if (j->board_sched && w->local_rank == 0 && j->state == JOB_RUNNING)
                board_resend(d, j, w);
        if (j->neg) {
                flush_forward(d, j, true); /* what it sent before goes first */
                root_departed(d, j, w->rank);
        } else if (j->state == JOB_RUNNING) {
                /* the others' ids can no longer complete on this node */
                j->agg_off = true;
                agg_release(d, j);
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

/* ---- timeline ---- */

/* Rank 0 started or stopped its timeline (on its own, or answering
 * timeline_request): the root records readiness times only while it is on,
 * and a waiting hvdctl gets the answer. */
static void timeline_from_rank(hvd_daemon_t *d, worker_t *w, const Hvd__TimelineControl *tc) {
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
        (void) hvd_wire_send_to(d->control_sock, j->tl_req_id, j->tl_req_len, &env, ZMQ_DONTWAIT);
        j->tl_req_len = 0;
}

/* hvdctl timeline JOB start FILE / stop: forwarded to the job's rank 0,
 * which must run on this node. One request per job at a time. */
static void timeline_request(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__TimelineControl *q,
                             uid_t caller) {
        job_t *j = q->job_id[0] ? hvd_strmap_get(d->jobs, q->job_id, strlen(q->job_id)) : NULL;
        if (!j) {
                send_error(d, d->control_sock, id, id_len, -ENOENT, "no job '%s' here (see hvdctl jobs)", q->job_id);
                return;
        }
        /* an action on a job: its owner (the uid of its workers), root or the
         * daemon's own user; a caller whose uid is unknown is refused */
        if (caller == (uid_t) -1 || (caller != 0 && caller != getuid() && !(j->owned && caller == j->owner_uid))) {
                char who[32] = "an unknown uid";
                if (caller != (uid_t) -1)
                        snprintf(who, sizeof who, "uid %u", (unsigned) caller);
                if (j->owned)
                        send_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                   "permission denied: job %s belongs to uid %u; only its owner or root may start or "
                                   "stop its timeline (the request came from %s)",
                                   j->id, (unsigned) j->owner_uid, who);
                else
                        send_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                   "permission denied: job %s has no worker here yet; only root may start or stop its "
                                   "timeline (the request came from %s)",
                                   j->id, who);
                return;
        }
        worker_t *w = j->ranks[0];
        if (j->state != JOB_RUNNING || (w && (w->goodbye || w->exited))) {
                send_error(d, d->control_sock, id, id_len, -EAGAIN, "job %s is %s: no timeline can start or stop",
                           j->id, w && (w->goodbye || w->exited) ? "ending" : job_state_names[j->state]);
                return;
        }
        if (!w) {
                send_error(d, d->control_sock, id, id_len, -EREMOTE,
                           "job %s: rank 0 runs on host %s, which records the timeline; send the command to the "
                           "hvd-coordinatord there",
                           j->id, host_of(j, 0));
                return;
        }
        uint64_t now = hvd_now_usec();
        if (j->tl_req_len && now < j->tl_req_deadline) {
                send_error(d, d->control_sock, id, id_len, -EBUSY,
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
        send_to_worker(d, w, &env);
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
}

/* A message handed in by hvd_daemon_feed() in place of the socket's next
 * one (tests and fuzzing): while it is set, the reactor's receive paths
 * read it, once, instead of their socket. Per thread: an embedded daemon
 * runs in its own. */
typedef struct fed_frame {
        const void *id, *data;
        size_t id_len, len;
        uid_t uid;
        bool taken;
} fed_frame_t;
static __thread fed_frame_t *fed;

static int fed_recv(uint8_t id[static 256], size_t *id_len, Hvd__Envelope **env, uid_t *uid, char *err, size_t err_len,
                    char *peer, size_t peer_len, hvd_wire_memo_t *memo) {
        if (fed->taken)
                return 0;
        fed->taken = true;
        memcpy(id, fed->id, fed->id_len);
        *id_len = fed->id_len;
        if (peer) {
                if (fed->uid == (uid_t) -1)
                        snprintf(peer, peer_len, "%s", "");
                else
                        snprintf(peer, peer_len, "feed:%u:%u:%d", (unsigned) fed->uid, (unsigned) fed->uid,
                                 (int) getpid());
        }
        if (uid)
                *uid = fed->uid;
        int r = hvd_wire_decode_memo(fed->data, fed->len, 0, memo, env, err, err_len);
        return r < 0 ? r : 1;
}

/* One whole message from a DEALER (or the fed one). */
static int msg_recv(zmq_msg_t *msg, void *sock) {
        if (!fed)
                return zmq_msg_recv(msg, sock, ZMQ_DONTWAIT);
        if (fed->taken || zmq_msg_init_size(msg, fed->len) < 0)
                return -1;
        fed->taken = true;
        if (fed->len)
                memcpy(zmq_msg_data(msg), fed->data, fed->len);
        return (int) fed->len;
}

/* Takes one message off a ROUTER socket without blocking: its routing id
 * and its decoded, validated envelope (owned by the caller). Extra frames
 * are dropped: one envelope per message. Returns 1 with *env set, 0 when
 * the socket is drained, or < 0 (the message was refused; err says why and
 * the id is filled, so the sender can be told). */
static int router_recv_ex(void *sock, uint8_t id[static 256], size_t *id_len, Hvd__Envelope **env, uid_t *uid,
                          char *err, size_t err_len, char *peer, size_t peer_len, hvd_wire_memo_t *memo) {
        if (fed)
                return fed_recv(id, id_len, env, uid, err, err_len, peer, peer_len, memo);
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
                if (peer) {
                        /* over ipc, libzmq reports the peer's SO_PEERCRED as "host:uid:gid:pid" */
                        const char *pa = zmq_msg_gets(&msg, "Peer-Address");
                        snprintf(peer, peer_len, "%s", pa ? pa : "");
                }
                if (uid && hvd_zap_msg_uid(&msg, uid) < 0)
                        *uid = (uid_t) -1;
                int r = hvd_wire_decode_memo(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, memo, env, err, err_len);
                zmq_msg_close(&msg);
                return r < 0 ? r : 1;
        }
}

static int router_recv(void *sock, uint8_t id[static 256], size_t *id_len, Hvd__Envelope **env, uid_t *uid, char *err,
                       size_t err_len) {
        return router_recv_ex(sock, id, id_len, env, uid, err, err_len, NULL, 0, NULL);
}

static void count_message(hvd_daemon_t *d, int sock, int r, const Hvd__Envelope *env) {
        if (r < 0)
                d->metrics.rejected[sock]++;
        else if ((unsigned) env->body_case < HVD_METRICS_MAX_BODY)
                d->metrics.messages[env->body_case]++;
}

/* ---- worker liveness ---- */

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
        send_error(d, d->worker_sock, w->id, w->id_len, HVD_EABORTED,
                   "stale %s refused: job %s (epoch %" PRIu64 ") is no longer running for rank %u: %s%s",
                   body_name(env), j->id, d->epoch, w->rank,
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
        send_error(d, d->worker_sock, id, id_len, HVD_EABORTED,
                   "stale %s refused: this connection belongs to no job of this coordinator (epoch %" PRIu64
                   "): its job was aborted or has ended, or the coordinator restarted; call hvd_init again",
                   body_name(env), d->epoch);
}

/* A local worker silent past its job's heartbeat timeout (stopped, hung,
 * or its host stalled): the job is aborted and the worker is lost. Returns
 * when to look again (UINT64_MAX: no running job has heartbeats). */
static uint64_t heartbeat_check(hvd_daemon_t *d, job_t *j, uint64_t now) {
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
                  j->is_root ? " (host " : "", j->is_root ? host_of(j, j->cross_rank) : "", j->is_root ? ")" : "",
                  ab->reason);
}

static void handle_worker_socket(hvd_daemon_t *d) {
        /* remembering a request costs about two parsings of it, a copy a
         * quarter to a half of one (bench_decode): it pays from 3 local
         * workers on; with fewer the memo only copies what it holds */
        hvd_wire_memo_set_learning(d->memo, hvd_strmap_size(d->workers) >= MEMO_MIN_WORKERS);
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512];
                uid_t uid = (uid_t) -1;
                /* a host's ranks send a first step's requests alike: parsed once */
                int r = router_recv_ex(d->worker_sock, id, &id_len, &env, &uid, err, sizeof err, NULL, 0, d->memo);
                if (r == 0)
                        return;
                worker_t *w = hvd_strmap_get(d->workers, id, id_len);
                count_message(d, HVD_METRICS_SOCK_WORKER, r, env);
                if (r < 0) {
                        hvd_log_warning("worker socket: rejected message%s%s: %s", w ? " from job " : "",
                                        w ? w->job->id : "", err);
                        send_error(d, d->worker_sock, id, id_len, r, "message rejected: %s", err);
                        continue;
                }
                if (w)
                        w->last_heard_usec = hvd_now_usec();
                if (env->body_case == HVD__ENVELOPE__BODY_HELLO)
                        handle_hello(d, id, id_len, env->hello, uid);
                else if (!w &&
                         (env->body_case == HVD__ENVELOPE__BODY_HEARTBEAT ||
                          env->body_case == HVD__ENVELOPE__BODY_READY || env->body_case == HVD__ENVELOPE__BODY_DONE))
                        stale_unknown(d, id, id_len, env);
                else if (!w)
                        send_error(d, d->worker_sock, id, id_len, HVD_EPROTO,
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
                        timeline_from_rank(d, w, env->timeline_control);
                else if (env->body_case == HVD__ENVELOPE__BODY_ABORT)
                        worker_failed(d, w, env->abort);
                else
                        send_error(d, d->worker_sock, id, id_len, HVD_EPROTO,
                                   "unexpected message on the worker socket");
                hvd_wire_free(&env);
        }
}

/* ---- peer messages ---- */

/* Root: the readiness that node `cross` forwarded for the ranks in ranks
 * (one rank's own, or one its ranks shared: entered once for all); false
 * when the job ended on it. */
static bool on_hosts(const job_t *j, uint32_t r, const uint32_t *hosts, size_t n_hosts) {
        if (r >= j->size || !j->table[r].known)
                return false;
        for (size_t h = 0; h < n_hosts; h++)
                if (j->table[r].cross_rank == hosts[h])
                        return true;
        return false;
}

static bool node_rank_ready(hvd_daemon_t *d, job_t *j, const uint32_t *hosts, size_t n_hosts, const uint32_t *ranks,
                            size_t n_ranks, const Hvd__Ready *ready) {
        for (size_t k = 0; k < n_ranks; k++)
                if (!on_hosts(j, ranks[k], hosts, n_hosts)) {
                        job_abort(d, j, -1, HVD_EPROTO, "host %s%s sent readiness for rank %u, which is not on it",
                                  host_of(j, hosts[0]), n_hosts > 1 ? " (for its relay group)" : "", ranks[k]);
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

/* Root side: a message from another daemon on the peer socket. */
static void handle_node_message(hvd_daemon_t *d, const uint8_t *id, size_t id_len, Hvd__Envelope *env) {
        const char *job_id = env->body_case == HVD__ENVELOPE__BODY_NODE_JOIN    ? env->node_join->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_NODE_READY ? env->node_ready->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_ABORT      ? env->abort->job_id
                                                                                : NULL;
        if (env->body_case == HVD__ENVELOPE__BODY_PING) {
                Hvd__Ping pong = HVD__PING__INIT;
                Hvd__Envelope reply = HVD__ENVELOPE__INIT;
                if (env->ping->reply)
                        return; /* a reply: nothing to answer (probe_node() expects none) */
                pong.sent_usec = env->ping->sent_usec;
                pong.reply = true;
                pong.epoch = d->epoch;
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
                                    memcmp(j->nodes[c].id, id, id_len) == 0) {
                                        j->nodes[c].last_heard_usec = now;
                                        if (env->ping->rtt_usec)
                                                j->nodes[c].rtt_usec = env->ping->rtt_usec;
                                }
                }
                return;
        }
        if (!job_id) {
                send_error(d, d->peer_sock, id, id_len, HVD_EPROTO, "unexpected message on the peer socket");
                return;
        }
        job_t *j = hvd_strmap_get(d->jobs, job_id, strlen(job_id));
        if (j && env->body_case == HVD__ENVELOPE__BODY_NODE_READY && env->node_ready->relay_host) {
                /* for this daemon as the relay of the sender's group */
                Hvd__NodeReady *nr = TAKE_PTR(env->node_ready);
                env->body_case = HVD__ENVELOPE__BODY__NOT_SET;
                relay_receive(d, j, id, id_len, nr);
                return;
        }
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
                if (nj->ring_checksum)
                        j->ring_checksum = true;
                root_node_joined(d, j, nj->cross_rank, false, id, id_len, nj->ranks, nj->n_ranks, nj->peer_endpoint);
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
                /* a node's connection is its identity: a message over a new
                 * one means the old one broke, and what was on it is lost */
                hvd_log_warning("job %s: message from a daemon that is not one of its nodes", j->id);
                if (env->body_case != HVD__ENVELOPE__BODY_ABORT) {
                        snprintf(reason, sizeof reason,
                                 "the root daemon of host %s no longer knows this daemon's connection (it broke and "
                                 "was made again: messages may be lost)",
                                 host_of(j, 0));
                        ab.code = HVD_EABORTED;
                        (void) hvd_wire_send_to(d->peer_sock, id, id_len, &reply, ZMQ_DONTWAIT);
                }
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
        if (!root_node_content(d, j, &cross, 1, nr))
                return;
        /* a relay: its group's readiness, in the order it came */
        for (size_t i = 0; i < nr->n_relayed; i++) {
                const Hvd__RelayedReady *rr = nr->relayed[i];
                for (size_t k = 0; k < rr->n_hosts; k++) {
                        uint32_t h = rr->hosts[k];
                        if (h >= j->cross_size || !j->relay_via || !relay_under(j, h, cross)) {
                                job_abort(d, j, -1, HVD_EPROTO,
                                          "host %s relayed readiness for host %u, which is not in its relay group",
                                          host_of(j, cross), h);
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

static void handle_peer_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = router_recv(d->peer_sock, id, &id_len, &env, NULL, err, sizeof err);
                if (r == 0)
                        return;
                count_message(d, HVD_METRICS_SOCK_PEER, r, env);
                if (r < 0) {
                        hvd_log_warning("peer socket: rejected message: %s", err);
                        send_error(d, d->peer_sock, id, id_len, r, "message rejected: %s", err);
                        continue;
                }
                handle_node_message(d, id, id_len, env);
                hvd_wire_free(&env);
        }
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
                ranks_of_host(j, 0, ranks, sizeof ranks);
                job_abort_ex(d, j, true, -1, HVD_EABORTED,
                             "lost host %s (ranks [%s]): its root daemon at %s restarted (epoch %016" PRIx64
                             ", was %016" PRIx64 ") and no longer knows the job",
                             host_of(j, 0), ranks, p->endpoint, epoch, j->root_epoch);
        }
}

/* Not root: a message from a root daemon. */
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
        const char *job_id = env->body_case == HVD__ENVELOPE__BODY_NODE_WELCOME   ? env->node_welcome->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_JOB_SCHEDULE ? env->job_schedule->job_id
                             : env->body_case == HVD__ENVELOPE__BODY_ABORT        ? env->abort->job_id
                                                                                  : NULL;
        job_t *j = job_id ? hvd_strmap_get(d->jobs, job_id, strlen(job_id)) : NULL;
        if (!j || (j->root != p && (j->relay != p || env->body_case == HVD__ENVELOPE__BODY_NODE_WELCOME)))
                return; /* a job we no longer have, or not from its root (or relay) */
        switch (env->body_case) {
        case HVD__ENVELOPE__BODY_ABORT: {
                /* the root has no record of the job: it restarted (its new
                 * epoch may not have been heard yet) or dropped the job */
                char unknown[HVD_WIRE_MAX_JOB_ID + 64];
                snprintf(unknown, sizeof unknown, "job %s is unknown to the root daemon", j->id);
                if (strcmp(env->abort->reason, unknown) == 0) {
                        /* a local rank said goodbye: the job is ending, and
                         * the root (or relay) daemon, whose ranks were done
                         * first, has already let it go; this answers our
                         * departures */
                        bool ending = false;
                        for (uint32_t r = 0; !ending && r < j->size; r++)
                                ending = j->ranks[r] && j->ranks[r]->goodbye;
                        if (ending) {
                                job_end_quietly(d, j, true,
                                                "its %s daemon at %s has finished it (its ranks were done first)",
                                                p == j->root ? "root" : "relay", p->endpoint);
                                break;
                        }
                        char ranks[256];
                        ranks_of_host(j, 0, ranks, sizeof ranks);
                        job_abort_ex(d, j, p == j->root, -1, HVD_EABORTED,
                                     "lost host %s (ranks [%s]): its %s daemon at %s no longer knows the job "
                                     "(restarted, or dropped it)",
                                     host_of(j, 0), ranks, p == j->root ? "root" : "relay", p->endpoint);
                        break;
                }
                job_abort_ex(d, j, p == j->root, env->abort->lost_rank,
                             env->abort->code ? env->abort->code : HVD_EABORTED, "%s", env->abort->reason);
                break;
        }
        case HVD__ENVELOPE__BODY_NODE_WELCOME: {
                const Hvd__NodeWelcome *nw = env->node_welcome;
                if (j->root_epoch && nw->epoch && nw->epoch != j->root_epoch) {
                        job_abort_ex(d, j, true, -1, HVD_EABORTED,
                                     "host %s: its root daemon at %s restarted during the join (epoch %016" PRIx64
                                     ", was %016" PRIx64 ")",
                                     host_of(j, 0), p->endpoint, nw->epoch, j->root_epoch);
                        break;
                }
                if (nw->epoch)
                        j->root_epoch = nw->epoch;
                if (j->state != JOB_JOINING || nw->n_ranks != j->size) {
                        job_abort(d, j, -1, HVD_EPROTO, "root daemon sent a rank table of %zu ranks for %u",
                                  nw->n_ranks, j->size);
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
                j->ring_checksum = nw->ring_checksum;
                job_set_nccl_id(j, &nw->nccl_id);
                if (!relay_setup(d, j, nw))
                        break;
                welcome_local(d, j);
                relay_replay_early(d, j);
                break;
        }
        case HVD__ENVELOPE__BODY_JOB_SCHEDULE: {
                if (j->state != JOB_RUNNING)
                        break;
                const Hvd__Schedule *sc = env->job_schedule->schedule;
                if (sc->repeat_key && !j->key_ids[sc->repeat_key]) {
                        job_abort(d, j, -1, HVD_EPROTO, "root daemon repeated schedule key %u, which it never sent",
                                  sc->repeat_key);
                        break;
                }
                agg_learn(d, j, sc);
                Hvd__Envelope out = HVD__ENVELOPE__INIT;
                out.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
                out.schedule = env->job_schedule->schedule;
                send_to_local_workers(d, j, &out, true);
                if (j->rl && j->state == JOB_RUNNING) {
                        relay_learn(d, j, sc);
                        relay_forward(d, j, env);
                }
                break;
        }
        default: break;
        }
}

static void handle_root_socket(hvd_daemon_t *d, peer_t *p) {
        for (int n = 0; n < RECV_BATCH; n++) {
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (msg_recv(&msg, p->sock) < 0) {
                        zmq_msg_close(&msg);
                        return;
                }
                Hvd__Envelope *env = NULL;
                char err[512];
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &env, err, sizeof err);
                zmq_msg_close(&msg);
                count_message(d, HVD_METRICS_SOCK_ROOT, r, env);
                if (r < 0) {
                        hvd_log_warning("root daemon %s: rejected message: %s", p->endpoint, err);
                        continue;
                }
                handle_root_message(d, p, env);
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

/* ---- control socket ---- */

/* Everything a Status reply points to, freed together after the send. */
typedef struct status_mem {
        Hvd__PeerStatus *ps;
        Hvd__PeerStatus **pp;
        Hvd__JobStatus *js;
        Hvd__JobStatus **jp;
        Hvd__RankInfo **ri;     /* [job] */
        Hvd__RankInfo ***rp;    /* [job] */
        Hvd__RankStatus **rs;   /* [job] */
        Hvd__RankStatus ***rsp; /* [job] */
        Hvd__ConfigItem *ci;
        Hvd__ConfigItem **cp;
        char (*values)[PATH_MAX + 16];
        size_t n_jobs;
} status_mem_t;

static void status_mem_free(status_mem_t *m) {
        for (size_t i = 0; i < m->n_jobs; i++) {
                free(m->ri ? m->ri[i] : NULL);
                free(m->rp ? m->rp[i] : NULL);
                free(m->rs ? m->rs[i] : NULL);
                free(m->rsp ? m->rsp[i] : NULL);
        }
        free(m->ps);
        free(m->pp);
        free(m->js);
        free(m->jp);
        free(m->ri);
        free(m->rp);
        free(m->rs);
        free(m->rsp);
        free(m->ci);
        free(m->cp);
        free(m->values);
}

/* Peers: the roots this daemon reports to ("out"), and the nodes that
 * report to it as the root of their jobs ("in", one per connection). */
static int status_peers(hvd_daemon_t *d, uint64_t now, Hvd__Status *st, status_mem_t *m) {
        size_t cap = hvd_strmap_size(d->peers), iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (j->is_root && j->nodes)
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
                for (uint32_t c = 0; j->is_root && j->nodes && c < j->cross_size; c++) {
                        node_t *nd = &j->nodes[c];
                        if (!nd->joined || nd->local)
                                continue;
                        /* one entry per node connection, shared by its jobs */
                        Hvd__PeerStatus *ps = NULL;
                        for (size_t i = n_out; i < k && !ps; i++)
                                if (strcmp(m->ps[i].host, host_of(j, c)) == 0)
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
                        ps->host = (char *) host_of(j, c);
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
        s->joined_ranks = ns.joined;
        s->negotiation_usec = ns.negotiation_usec;
        uint64_t requests = ns.requests + f->cache_hits;
        s->cache_hit_rate = requests ? (double) s->cache_hits / (double) requests : 0;
        s->mean_fused_bytes = s->fused_ops ? s->bytes_reduced / s->fused_ops : 0;
        s->throughput_bytes_per_sec = j->neg ? job_throughput(j, now) : 0;
        Hvd__RankInfo *ri = m->ri[k] = calloc(j->size, sizeof *ri);
        Hvd__RankInfo **rp = m->rp[k] = calloc(j->size, sizeof *rp);
        if (!ri || !rp)
                return -ENOMEM;
        uint64_t busy = 0;
        for (uint32_t r = 0; r < j->size; r++) {
                const worker_t *w = j->ranks[r];
                if (!w)
                        continue;
                hvd__rank_info__init(&ri[s->n_ranks]);
                ri[s->n_ranks].rank = r;
                ri[s->n_ranks].local_rank = w->local_rank;
                ri[s->n_ranks].pid = (uint32_t) w->pid;
                ri[s->n_ranks].host = (char *) w->host;
                ri[s->n_ranks].data_addr = (char *) w->data_addr;
                ri[s->n_ranks].cross_rank = j->cross_rank;
                rp[s->n_ranks] = &ri[s->n_ranks];
                s->n_ranks++;
                busy += w->busy_usec;
        }
        s->ranks = rp;
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
        m.rp = calloc(nj ? nj : 1, sizeof *m.rp);
        m.rs = calloc(nj ? nj : 1, sizeof *m.rs);
        m.rsp = calloc(nj ? nj : 1, sizeof *m.rsp);
        int r = m.js && m.jp && m.ri && m.rp && m.rs && m.rsp ? 0 : -ENOMEM;
        if (r >= 0)
                r = status_peers(d, now, &st, &m);
        if (r >= 0)
                r = status_config(d, &st, &m);
        void *v;
        while (r >= 0 && hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (q->job_id[0] && strcmp(q->job_id, j->id) != 0)
                        continue;
                m.n_jobs = k + 1;
                r = status_job(j, now, q->rank_detail, &m.js[k], &m, k);
                m.jp[k] = &m.js[k];
                k++;
        }
        if (r < 0) {
                send_error(d, d->control_sock, id, id_len, -ENOMEM, "out of memory while building the status");
                status_mem_free(&m);
                return;
        }
        st.n_jobs = k;
        st.jobs = m.jp;
        env.body_case = HVD__ENVELOPE__BODY_STATUS;
        env.status = &st;
        (void) hvd_wire_send_to(d->control_sock, id, id_len, &env, ZMQ_DONTWAIT);
        status_mem_free(&m);
}

/* The metrics text, for hvdctl metrics and the HTTP listener. */
static int render_metrics(void *userdata, char **body, size_t *len) {
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
        hvd_wire_memo_stats_t ms;
        hvd_wire_memo_get_stats(d->memo, &ms);
        d->metrics.requests_copied = ms.copied;
        d->metrics.requests_parsed = ms.parsed;
        return hvd_metrics_render(&d->metrics, &g, body, len);
}

static void handle_metrics_request(hvd_daemon_t *d, const uint8_t *id, size_t id_len) {
        char *text = NULL;
        size_t len = 0;
        if (render_metrics(d, &text, &len) < 0) {
                send_error(d, d->control_sock, id, id_len, -ENOMEM, "out of memory while rendering the metrics");
                return;
        }
        Hvd__MetricsReply mr = HVD__METRICS_REPLY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        mr.text = text;
        env.body_case = HVD__ENVELOPE__BODY_METRICS_REPLY;
        env.metrics_reply = &mr;
        (void) hvd_wire_send_to(d->control_sock, id, id_len, &env, ZMQ_DONTWAIT);
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
                                send_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                           "cannot identify the caller on this endpoint, so the log level stays");
                        else
                                send_error(d, d->control_sock, id, id_len, HVD_EDENIED,
                                           "only root and the daemon's user (uid %u) may change the log level; "
                                           "you are uid %ld",
                                           (unsigned) geteuid(), uid);
                        return;
                }
                int lv = hvd_log_level_from_string(q->level);
                if (lv < 0) {
                        send_error(d, d->control_sock, id, id_len, -EINVAL,
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
        (void) hvd_wire_send_to(d->control_sock, id, id_len, &env, ZMQ_DONTWAIT);
}

static void handle_control_socket(hvd_daemon_t *d) {
        for (int n = 0; n < RECV_BATCH; n++) {
                uint8_t id[256];
                size_t id_len;
                Hvd__Envelope *env = NULL;
                char err[512], peer[256];
                uid_t uid = (uid_t) -1;
                int r = router_recv_ex(d->control_sock, id, &id_len, &env, &uid, err, sizeof err, peer, sizeof peer,
                                       NULL);
                if (r == 0)
                        return;
                count_message(d, HVD_METRICS_SOCK_CONTROL, r, env);
                if (r < 0) {
                        send_error(d, d->control_sock, id, id_len, r, "request rejected: %s", err);
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
                        send_error(d, d->control_sock, id, id_len, -EOPNOTSUPP, "unsupported control request");
                hvd_histogram_observe(&d->metrics.control, hvd_now_usec() - t0);
                hvd_wire_free(&env);
        }
}

/* ---- loop ---- */

/* Whether two Readys' new requests are alike (as they would pack). */
static bool requests_equal(const Hvd__Ready *a, const Hvd__Ready *b) {
        if (a->n_requests != b->n_requests)
                return false;
        for (size_t k = 0; k < a->n_requests; k++)
                if (!hvd_wire_equal(&a->requests[k]->base, &b->requests[k]->base))
                        return false;
        return true;
}

/* The new requests of this batch that several local ranks sent alike go
 * once, as SharedReady (the first step: every rank names the same
 * tensors); what stays per rank keeps its cached ids. Only when every
 * rank has one entry in the batch, so no rank's order changes. Returns
 * the number of shared entries in *ret (free each with
 * protobuf_c_message_free_unpacked, and the array). */
static size_t share_requests(job_t *j, Hvd__SharedReady ***ret) {
        *ret = NULL;
        size_t n = j->n_fwd, n_sh = 0;
        if (n < 2)
                return 0;
        size_t *group = calloc(n, sizeof *group); /* index of the group's first member + 1; 0 = alone */
        uint8_t *seen = calloc(j->size, 1);
        Hvd__SharedReady **sh = NULL;
        if (!group || !seen)
                goto out;
        for (size_t i = 0; i < n; i++) {
                uint32_t r = j->fwd[i]->rank;
                if (r >= j->size || seen[r]++)
                        goto out;
        }
        for (size_t i = 1; i < n; i++) {
                const Hvd__Ready *q = j->fwd[i]->ready;
                if (!q->n_requests)
                        continue;
                for (size_t g = 0; g < i; g++)
                        if (!group[g] && requests_equal(j->fwd[g]->ready, q)) {
                                group[i] = g + 1;
                                break;
                        }
        }
        if (!(sh = calloc(n, sizeof *sh)))
                goto out;
        for (size_t g = 0; g < n; g++) {
                if (!j->fwd[g]->ready->n_requests || group[g])
                        continue;
                size_t members = 1;
                for (size_t i = g + 1; i < n; i++)
                        members += group[i] == g + 1;
                if (members < 2)
                        continue;
                Hvd__SharedReady *s = calloc(1, sizeof *s);
                Hvd__Ready *q = calloc(1, sizeof *q);
                uint32_t *ranks = malloc(members * sizeof *ranks);
                if (!s || !q || !ranks) {
                        free(s);
                        free(q);
                        free(ranks);
                        break;
                }
                hvd__shared_ready__init(s);
                hvd__ready__init(q);
                s->ready = q;
                s->ranks = ranks;
                /* the first member's requests move over; the others' go */
                Hvd__Ready *first = j->fwd[g]->ready;
                q->requests = TAKE_PTR(first->requests);
                q->n_requests = first->n_requests;
                first->n_requests = 0;
                s->ranks[s->n_ranks++] = j->fwd[g]->rank;
                for (size_t i = g + 1; i < n; i++) {
                        if (group[i] != g + 1)
                                continue;
                        Hvd__Ready *o = j->fwd[i]->ready;
                        for (size_t k = 0; k < o->n_requests; k++)
                                protobuf_c_message_free_unpacked(&o->requests[k]->base, NULL);
                        free(o->requests);
                        o->requests = NULL;
                        o->n_requests = 0;
                        s->ranks[s->n_ranks++] = j->fwd[i]->rank;
                }
                sh[n_sh++] = s;
        }
out:
        free(group);
        free(seen);
        if (!n_sh)
                free(sh);
        else
                *ret = sh;
        return n_sh;
}

/* ---- control plane relays ---- */

static int relay_grow(relay_t *rl, uint32_t id) {
        if (id < rl->n_ids)
                return 0;
        int64_t cap = id_capacity(rl->n_ids, id);
        if (cap < 0)
                return (int) cap;
        uint32_t n = (uint32_t) cap;
        uint64_t *b = realloc(rl->bits, n * sizeof *b);
        if (!b)
                return -ENOMEM;
        rl->bits = b;
        uint64_t *f = realloc(rl->first_usec, n * sizeof *f);
        if (!f)
                return -ENOMEM;
        rl->first_usec = f;
        uint8_t *fl = realloc(rl->flags, n);
        if (!fl)
                return -ENOMEM;
        rl->flags = fl;
        memset(rl->bits + rl->n_ids, 0, (n - rl->n_ids) * sizeof *b);
        memset(rl->first_usec + rl->n_ids, 0, (n - rl->n_ids) * sizeof *f);
        memset(rl->flags + rl->n_ids, 0, n - rl->n_ids);
        rl->n_ids = n;
        return 0;
}

static bool entry_requests(const relay_t *rl, const Hvd__RelayedReady *rr);
static int32_t entry_member(const relay_t *rl, const Hvd__RelayedReady *rr);

static bool rl_name_done(const relay_t *rl, const rl_name_t *p) {
        return p && !p->bad && p->members == rl->full;
}

/* The new requests of entry rr, just held: counted name by name over the
 * members, so that those every member sent alike for all its ranks go on
 * once for the whole group (relay_pool_take), whatever entries each
 * member's hosts made of them. Only for entries of a first step's kind
 * (new requests alone, all of one member's hosts and ranks); anything
 * else turns the pool off until what is held went. */
static void relay_pool_add(relay_t *rl, const Hvd__RelayedReady *rr) {
        if (rl->pool_off)
                return;
        int32_t mi = entry_requests(rl, rr) ? entry_member(rl, rr) : -1;
        bool ok = mi >= 0 && rr->n_hosts == rl->m[mi].n_sub && rl->seen;
        /* every rank of its hosts, each once, in each shared part (a rank
         * of another member's would let a name go for ranks that did not
         * ask for it) */
        for (size_t k = 0; ok && k < rr->n_shared; k++) {
                const Hvd__SharedReady *sh = rr->shared[k];
                ok = sh->n_ranks == rl->m[mi].n_ranks && sh->ready && !sh->ready->n_cached && !sh->ready->n_node_cached;
                size_t i = 0;
                for (; ok && i < sh->n_ranks; i++) {
                        uint32_t r = sh->ranks[i];
                        ok = r < rl->n_seen && !rl->seen[r] && rl->rank_member[r] == mi;
                        if (ok)
                                rl->seen[r] = 1;
                }
                while (i-- > 0)
                        if (sh->ranks[i] < rl->n_seen)
                                rl->seen[sh->ranks[i]] = 0;
                for (size_t q = 0; ok && q < sh->ready->n_requests; q++)
                        ok = !sh->ready->requests[q]->process_set &&
                             sh->ready->requests[q]->kind != HVD__KIND__KIND_JOIN;
        }
        if (ok && !rl->pool && !(rl->pool = hvd_strmap_new()))
                ok = false;
        for (size_t k = 0; ok && k < rr->n_shared; k++) {
                const Hvd__Ready *q = rr->shared[k]->ready;
                for (size_t i = 0; ok && i < q->n_requests; i++) {
                        const Hvd__Request *r = q->requests[i];
                        size_t len = strlen(r->name);
                        rl_name_t *p = hvd_strmap_get(rl->pool, r->name, len);
                        if (!p) {
                                if (!(p = calloc(1, sizeof *p)) || hvd_strmap_put(rl->pool, r->name, len, p) < 0) {
                                        free(p);
                                        ok = false;
                                        break;
                                }
                                p->head.first = r;
                        }
                        bool was = p->head.done;
                        uint64_t bit = UINT64_C(1) << mi;
                        if ((p->members & bit) || !hvd_wire_equal(&p->head.first->base, &r->base))
                                p->bad = true;
                        else
                                p->members |= bit;
                        p->head.done = rl_name_done(rl, p);
                        rl->pool_complete += p->head.done;
                        rl->pool_complete -= was;
                }
        }
        if (!ok)
                rl->pool_off = true;
}

/* Appends rr (owned by the relay when this succeeds) to what goes on. */
static int relay_push(relay_t *rl, Hvd__RelayedReady *rr) {
        if (rl->n_out == rl->cap_out) {
                size_t cap = rl->cap_out ? rl->cap_out * 2 : 16;
                Hvd__RelayedReady **o = realloc(rl->out, cap * sizeof *o);
                if (o)
                        rl->out = o;
                uint64_t *at = realloc(rl->out_at, cap * sizeof *at);
                if (at)
                        rl->out_at = at;
                if (!o || !at)
                        return -ENOMEM;
                rl->cap_out = cap;
        }
        rl->out_at[rl->n_out] = rl->out_newest = hvd_now_usec();
        rl->out[rl->n_out++] = rr;
        relay_pool_add(rl, rr);
        return 0;
}

/* The names of the held first-step requests that every member sent alike
 * for all its ranks, taken out of the members' entries into one entry for
 * every host and rank of the group, in the order they first came (the
 * other copies go). Entries left with nothing go too. NULL when there are
 * none (or no memory: then nothing changed). */
static Hvd__RelayedReady *relay_pool_take(relay_t *rl) {
        if (rl->pool_off || !rl->pool_complete)
                return NULL;
        Hvd__RelayedReady *rr = calloc(1, sizeof *rr);
        Hvd__SharedReady *sh = calloc(1, sizeof *sh);
        Hvd__SharedReady **shp = malloc(sizeof *shp);
        Hvd__Ready *q = calloc(1, sizeof *q);
        Hvd__Request **reqs = malloc(rl->pool_complete * sizeof *reqs);
        uint32_t *hosts = malloc(rl->n_all * sizeof *hosts);
        uint32_t *ranks = malloc(rl->n_ranks_all * sizeof *ranks);
        if (!rr || !sh || !shp || !q || !reqs || !hosts || !ranks) {
                free(rr);
                free(sh);
                free(shp);
                free(q);
                free(reqs);
                free(hosts);
                free(ranks);
                return NULL;
        }
        hvd__relayed_ready__init(rr);
        hvd__shared_ready__init(sh);
        hvd__ready__init(q);
        memcpy(hosts, rl->all, rl->n_all * sizeof *hosts);
        memcpy(ranks, rl->ranks_all, rl->n_ranks_all * sizeof *ranks);
        rr->hosts = hosts;
        rr->n_hosts = rl->n_all;
        rr->shared = shp;
        rr->shared[rr->n_shared++] = sh;
        sh->ranks = ranks;
        sh->n_ranks = rl->n_ranks_all;
        sh->ready = q;
        q->requests = reqs;
        for (size_t i = 0; i < rl->n_out; i++) {
                Hvd__RelayedReady *e = rl->out[i];
                size_t keep_sh = 0;
                for (size_t k = 0; k < e->n_shared; k++) {
                        pool_move_done(rl->pool, e->shared[k]->ready, q);
                        if (e->shared[k]->ready->n_requests)
                                e->shared[keep_sh++] = e->shared[k];
                        else
                                protobuf_c_message_free_unpacked(&e->shared[k]->base, NULL);
                }
                e->n_shared = keep_sh;
        }
        pool_forget(rl->pool, q);
        rl->pool_complete = 0;
        size_t keep = 0;
        for (size_t i = 0; i < rl->n_out; i++) {
                if (rl->out[i]->n_shared) { /* the pool holds shared requests alone */
                        rl->out_at[keep] = rl->out_at[i];
                        rl->out[keep++] = rl->out[i];
                } else
                        protobuf_c_message_free_unpacked(&rl->out[i]->base, NULL);
        }
        rl->n_out = keep;
        return rr;
}

/* Appends an entry for the root: nr (owned from here on) is the readiness
 * of the n hosts. */
static int relay_append(relay_t *rl, const uint32_t *hosts, size_t n, Hvd__NodeReady *nr) {
        Hvd__RelayedReady *rr = NULL;
        if (!(rr = calloc(1, sizeof *rr)))
                goto oom;
        hvd__relayed_ready__init(rr);
        if (!(rr->hosts = malloc(n * sizeof *rr->hosts)))
                goto oom;
        memcpy(rr->hosts, hosts, n * sizeof *hosts);
        rr->n_hosts = n;
        /* nr's readiness moves over; its shell goes */
        rr->n_ranks = nr->n_ranks;
        rr->ranks = TAKE_PTR(nr->ranks);
        rr->n_node_cached = nr->n_node_cached;
        rr->node_cached = TAKE_PTR(nr->node_cached);
        rr->n_node_cached_waited_usec = nr->n_node_cached_waited_usec;
        rr->node_cached_waited_usec = TAKE_PTR(nr->node_cached_waited_usec);
        rr->n_departed = nr->n_departed;
        rr->departed = TAKE_PTR(nr->departed);
        rr->n_shared = nr->n_shared;
        rr->shared = TAKE_PTR(nr->shared);
        nr->n_ranks = nr->n_node_cached = nr->n_node_cached_waited_usec = nr->n_departed = nr->n_shared = 0;
        protobuf_c_message_free_unpacked(&nr->base, NULL);
        /* one rank's new requests (a host of one rank) as a shared entry of
         * one rank, which relay_share can merge with other hosts' */
        Hvd__SharedReady *sh = NULL;
        if (rr->n_ranks == 1 && !rr->n_shared && !rr->ranks[0]->ready->n_cached && rr->ranks[0]->ready->n_requests &&
            (sh = calloc(1, sizeof *sh)) && (rr->shared = malloc(sizeof *rr->shared))) {
                hvd__shared_ready__init(sh);
                if ((sh->ranks = malloc(sizeof *sh->ranks))) {
                        sh->ranks[0] = rr->ranks[0]->rank;
                        sh->n_ranks = 1;
                        sh->ready = TAKE_PTR(rr->ranks[0]->ready);
                        protobuf_c_message_free_unpacked(&rr->ranks[0]->base, NULL);
                        free(rr->ranks);
                        rr->ranks = NULL;
                        rr->n_ranks = 0;
                        rr->shared[0] = TAKE_PTR(sh);
                        rr->n_shared = 1;
                } else {
                        free(rr->shared);
                        rr->shared = NULL;
                }
        }
        free(sh);
        if (relay_push(rl, rr) < 0) {
                protobuf_c_message_free_unpacked(&rr->base, NULL);
                return -ENOMEM;
        }
        return 0;
oom:
        if (rr)
                free(rr->hosts);
        free(rr);
        protobuf_c_message_free_unpacked(&nr->base, NULL);
        return -ENOMEM;
}

static Hvd__NodeReady *node_ready_new(size_t n_ids) {
        Hvd__NodeReady *nr = calloc(1, sizeof *nr);
        if (!nr)
                return NULL;
        hvd__node_ready__init(nr);
        if (n_ids && (!(nr->node_cached = malloc(n_ids * sizeof *nr->node_cached)) ||
                      !(nr->node_cached_waited_usec = malloc(n_ids * sizeof *nr->node_cached_waited_usec)))) {
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                return NULL;
        }
        return nr;
}

/* The ids every host of the group posted become one entry, for all of them. */
static int relay_grp_out(hvd_daemon_t *d, relay_t *rl) {
        if (!rl->n_grp)
                return 0;
        Hvd__NodeReady *nr = node_ready_new(rl->n_grp);
        if (!nr)
                return -ENOMEM;
        memcpy(nr->node_cached, rl->grp_ids, rl->n_grp * sizeof *rl->grp_ids);
        memcpy(nr->node_cached_waited_usec, rl->grp_waited, rl->n_grp * sizeof *rl->grp_waited);
        nr->n_node_cached = nr->n_node_cached_waited_usec = rl->n_grp;
        d->metrics.relay_group_ids += rl->n_grp;
        rl->n_grp = 0;
        return relay_append(rl, rl->all, rl->n_all, nr);
}

/* Whatever the group posted in part goes on host by host, after the ids
 * every host posted: what comes next from a host must not overtake it. */
static int relay_release(hvd_daemon_t *d, relay_t *rl) {
        int r = relay_grp_out(d, rl);
        if (r < 0 || !rl->oldest)
                return r;
        rl->oldest = 0;
        uint64_t now = hvd_now_usec();
        for (uint32_t i = 0; i < rl->n; i++) {
                size_t n = 0;
                for (uint32_t id = 0; id < rl->n_ids; id++)
                        n += (rl->bits[id] >> i) & 1;
                if (!n)
                        continue;
                Hvd__NodeReady *nr = node_ready_new(n);
                if (!nr)
                        return -ENOMEM;
                for (uint32_t id = 0; id < rl->n_ids; id++)
                        if ((rl->bits[id] >> i) & 1) {
                                nr->node_cached[nr->n_node_cached++] = id;
                                nr->node_cached_waited_usec[nr->n_node_cached_waited_usec++] =
                                        now > rl->first_usec[id] ? now - rl->first_usec[id] : 0;
                        }
                if ((r = relay_append(rl, rl->m[i].sub, rl->m[i].n_sub, nr)) < 0)
                        return r;
        }
        for (uint32_t id = 0; id < rl->n_ids; id++)
                if (rl->bits[id]) {
                        rl->bits[id] = 0;
                        rl->flags[id] |= RL_PER_HOST;
                }
        return 0;
}

/* A relay: the readiness nr (owned) of member i, for every host it
 * stands for. Cache ids of collectives every rank takes part in wait here
 * until every member posted them; everything else goes on as it came. */
static void relay_take_one(hvd_daemon_t *d, job_t *j, uint32_t i, Hvd__NodeReady *nr) {
        relay_t *rl = j->rl;
        relay_member_t *mi = &rl->m[i];
        int r = 0;
        if (nr->n_ranks || nr->n_shared || nr->n_departed) {
                if ((r = relay_release(d, rl)) < 0)
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                if (r < 0 || (r = relay_append(rl, mi->sub, mi->n_sub, nr)) < 0) /* appending frees nr on failure */
                        goto fail;
                return;
        }
        uint64_t now = hvd_now_usec();
        bool waited = nr->n_node_cached_waited_usec == nr->n_node_cached;
        size_t keep = 0;
        for (size_t k = 0; k < nr->n_node_cached; k++) {
                uint32_t id = nr->node_cached[k];
                uint64_t wt = waited ? nr->node_cached_waited_usec[k] : 0;
                if (id >= rl->n_ids || !(rl->flags[id] & RL_KNOWN) || (rl->flags[id] & RL_PER_HOST)) {
                        nr->node_cached[keep] = id;
                        if (waited)
                                nr->node_cached_waited_usec[keep] = wt;
                        keep++;
                        continue;
                }
                if ((rl->bits[id] >> i) & 1) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        job_abort(d, j, -1, HVD_EDUPLICATE,
                                  "host %s posted the tensor of cache id %u twice before it completed",
                                  host_of(j, rl->m[i].host), id);
                        return;
                }
                uint64_t at = wt < now ? now - wt : now;
                if (!rl->bits[id] || at < rl->first_usec[id])
                        rl->first_usec[id] = at;
                if (!rl->oldest || rl->first_usec[id] < rl->oldest)
                        rl->oldest = rl->first_usec[id];
                rl->bits[id] |= UINT64_C(1) << i;
                if (rl->bits[id] != rl->full)
                        continue;
                if (ids_push(&rl->grp_ids, &rl->grp_waited, &rl->n_grp, &rl->cap_grp, id,
                             now > rl->first_usec[id] ? now - rl->first_usec[id] : 0) < 0) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        r = -ENOMEM;
                        goto fail;
                }
                rl->bits[id] = 0;
        }
        nr->n_node_cached = keep;
        if (waited)
                nr->n_node_cached_waited_usec = keep;
        if (keep) {
                if ((r = relay_append(rl, mi->sub, mi->n_sub, nr)) < 0)
                        goto fail;
        } else
                protobuf_c_message_free_unpacked(&nr->base, NULL);
        return;
fail:
        job_abort(d, j, -1, r, "relaying the readiness of host %s: %s", host_of(j, mi->host), hvd_strerror(r));
}

/* A relay: what member i, itself a relay, passed on (nr owned). An entry
 * for every host it stands for with cache ids alone merges as member i's
 * own would; anything else goes on as it came, in order. */
static void relay_take_relayed(hvd_daemon_t *d, job_t *j, uint32_t i, Hvd__NodeReady *nr) {
        relay_t *rl = j->rl;
        relay_member_t *mi = &rl->m[i];
        int r = 0;
        for (size_t k = 0; k < nr->n_relayed && j->state == JOB_RUNNING; k++) {
                Hvd__RelayedReady *rr = nr->relayed[k];
                bool full = rr->n_hosts == mi->n_sub && !rr->n_ranks && !rr->n_shared && !rr->n_departed;
                for (size_t h = 0; h < rr->n_hosts; h++) {
                        uint32_t x = rr->hosts[h];
                        if (x >= j->cross_size || rl->member_of[x] != (int32_t) i) {
                                char other[64];
                                if (x < j->cross_size)
                                        snprintf(other, sizeof other, "%s", host_of(j, x));
                                else
                                        snprintf(other, sizeof other, "%u (no such host)", x);
                                job_abort(d, j, -1, HVD_EPROTO,
                                          "host %s relayed readiness for host %s, which does not report through it",
                                          host_of(j, mi->host), other);
                                goto out;
                        }
                        full = full && (!h || x > rr->hosts[h - 1]); /* ascending: all of them, each once */
                }
                if (full) {
                        Hvd__NodeReady *c = node_ready_new(rr->n_node_cached);
                        if (!c) {
                                r = -ENOMEM;
                                break;
                        }
                        if (rr->n_node_cached) /* none: both may be NULL */
                                memcpy(c->node_cached, rr->node_cached, rr->n_node_cached * sizeof *c->node_cached);
                        c->n_node_cached = rr->n_node_cached;
                        if (rr->n_node_cached && rr->n_node_cached_waited_usec == rr->n_node_cached) {
                                memcpy(c->node_cached_waited_usec, rr->node_cached_waited_usec,
                                       rr->n_node_cached * sizeof *c->node_cached_waited_usec);
                                c->n_node_cached_waited_usec = rr->n_node_cached;
                        }
                        relay_take_one(d, j, i, c);
                        continue;
                }
                if ((r = relay_release(d, rl)) < 0 || (r = relay_push(rl, rr)) < 0)
                        break;
                nr->relayed[k] = NULL;
        }
        if (r < 0)
                job_abort(d, j, -1, r, "relaying the readiness of host %s: %s", host_of(j, mi->host), hvd_strerror(r));
out:
        for (size_t k = 0; k < nr->n_relayed; k++)
                if (nr->relayed[k])
                        protobuf_c_message_free_unpacked(&nr->relayed[k]->base, NULL);
        free(nr->relayed);
        nr->relayed = NULL;
        nr->n_relayed = 0;
        protobuf_c_message_free_unpacked(&nr->base, NULL);
}

static void relay_take(hvd_daemon_t *d, job_t *j, uint32_t i, Hvd__NodeReady *nr) {
        j->rl->in_msgs++;
        d->metrics.relay_in++;
        if (nr->n_relayed)
                relay_take_relayed(d, j, i, nr);
        else
                relay_take_one(d, j, i, nr);
}

/* The member whose hosts an entry is all of, or -1. */
static int32_t entry_member(const relay_t *rl, const Hvd__RelayedReady *rr) {
        int32_t m = rr->n_hosts ? rl->member_of[rr->hosts[0]] : -1;
        for (size_t h = 1; m >= 0 && h < rr->n_hosts; h++)
                if (rl->member_of[rr->hosts[h]] != m)
                        m = -1;
        return m;
}

/* Whether an entry is new requests alone, all of one member's hosts:
 * something relay_share can merge. */
static bool entry_requests(const relay_t *rl, const Hvd__RelayedReady *rr) {
        return !rr->n_ranks && !rr->n_node_cached && !rr->n_departed && rr->n_shared && entry_member(rl, rr) >= 0;
}

/* Whether two entries' shared readiness is alike, entry by entry (their
 * ranks aside). */
static bool shared_equal(const Hvd__RelayedReady *a, const Hvd__RelayedReady *b) {
        if (a->n_shared != b->n_shared)
                return false;
        for (size_t k = 0; k < a->n_shared; k++)
                if (!hvd_wire_equal(&a->shared[k]->ready->base, &b->shared[k]->ready->base))
                        return false;
        return true;
}

/* A relay, before it sends: entries of requests alone that several
 * members sent alike (each host's first step names the same tensors)
 * become one, for all of them, so that the root decodes and enters them
 * once. An entry joins an earlier one only when no entry between them is of
 * its member (each host's readiness stays in the order it came). */
static void relay_share(hvd_daemon_t *d, relay_t *rl) {
        size_t n = rl->n_out;
        if (n < 2)
                return;
        bool *req = calloc(n, sizeof *req); /* entry_requests() */
        bool *gone = calloc(n, sizeof *gone);
        if (!req || !gone)
                goto out;
        for (size_t i = 0; i < n; i++)
                req[i] = entry_requests(rl, rl->out[i]);
        for (size_t i = 1; i < n; i++) {
                if (!req[i])
                        continue;
                Hvd__RelayedReady *ri = rl->out[i];
                int32_t member = rl->member_of[ri->hosts[0]];
                /* the nearest earlier entry of this member bounds the search */
                size_t lo = 0;
                for (size_t m = i; m-- > 0;) {
                        bool mine = false;
                        for (size_t h = 0; !gone[m] && h < rl->out[m]->n_hosts; h++)
                                mine |= rl->member_of[rl->out[m]->hosts[h]] == member;
                        if (mine) {
                                lo = m + 1;
                                break;
                        }
                }
                for (size_t g = lo; g < i; g++) {
                        Hvd__RelayedReady *rg = rl->out[g];
                        if (gone[g] || !req[g] || !shared_equal(rg, ri))
                                continue;
                        uint32_t *nh = realloc(rg->hosts, (rg->n_hosts + ri->n_hosts) * sizeof *nh);
                        if (!nh)
                                break;
                        rg->hosts = nh;
                        bool ok = true;
                        for (size_t k = 0; ok && k < rg->n_shared; k++) {
                                Hvd__SharedReady *a = rg->shared[k], *b = ri->shared[k];
                                uint32_t *nr = realloc(a->ranks, (a->n_ranks + b->n_ranks) * sizeof *nr);
                                if (!nr) {
                                        ok = false;
                                        break;
                                }
                                a->ranks = nr;
                        }
                        if (!ok)
                                break; /* nothing changed but capacity */
                        memcpy(rg->hosts + rg->n_hosts, ri->hosts, ri->n_hosts * sizeof *ri->hosts);
                        rg->n_hosts += ri->n_hosts;
                        for (size_t k = 0; k < rg->n_shared; k++) {
                                Hvd__SharedReady *a = rg->shared[k], *b = ri->shared[k];
                                memcpy(a->ranks + a->n_ranks, b->ranks, b->n_ranks * sizeof *b->ranks);
                                a->n_ranks += b->n_ranks;
                        }
                        gone[i] = true;
                        for (size_t k = 0; k < ri->n_shared; k++)
                                d->metrics.relay_shared += ri->shared[k]->ready->n_requests;
                        break;
                }
        }
        size_t keep = 0;
        for (size_t i = 0; i < n; i++)
                if (gone[i])
                        protobuf_c_message_free_unpacked(&rl->out[i]->base, NULL);
                else
                        rl->out[keep++] = rl->out[i];
        rl->n_out = keep;
out:
        free(req);
        free(gone);
}

/* Whether what waits to go to the root is a first step's new requests
 * alone, each entry all of one member's hosts and ranks (relay_pool_add):
 * worth holding for the other members' (relay_pool_take). */
static bool relay_holds(const relay_t *rl) {
        return rl->n_out && !rl->pool_off;
}

/* A first step's hold lasts while its ranks are still sending: until
 * nothing new has come for the first_step_hold setting (since newest, the
 * last entry taken, held still or gone on), and at most HOLD_CAP times
 * that from the oldest entry still held. Returns the time the hold counts
 * from (hold_on). */
#define HOLD_CAP 10
static uint64_t hold_start(uint64_t oldest, uint64_t newest, uint64_t hold) {
        uint64_t cap = oldest + (HOLD_CAP - 1) * hold;
        return newest < cap ? newest : cap;
}

/* Whether what has been held since *since (now, when 0) may wait on: at
 * most usec in all, after which housekeeping lets it go. */
static bool hold_on(hvd_daemon_t *d, uint64_t *since, uint64_t usec) {
        uint64_t now = hvd_now_usec();
        if (!*since)
                *since = now;
        if (now - *since >= usec)
                return false;
        if (d->next_housekeeping > *since + usec)
                d->next_housekeeping = *since + usec;
        return true;
}

/* Housekeeping: whether what has been held since since (0: nothing) is
 * due to go now; else *due becomes no later than its deadline. */
static bool hold_expired(uint64_t since, uint64_t usec, uint64_t now, uint64_t *due) {
        if (!since)
                return false;
        if (now - since >= usec)
                return true;
        *due = HVD_MIN(*due, since + usec);
        return false;
}

/* A relay: sends what its group made ready to the root, one message. */
/* Sends n entries to the root (or the relay above). */
static void relay_send(hvd_daemon_t *d, job_t *j, Hvd__RelayedReady **out, size_t n) {
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nr.job_id = j->id;
        nr.n_relayed = n;
        nr.relayed = out;
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        send_up(d, j, &env);
        j->rl->out_msgs++;
        d->metrics.relay_out++;
}

/* The names every member sent go on now, once for the whole group. */
static void relay_pool_send(hvd_daemon_t *d, job_t *j) {
        Hvd__RelayedReady *pr = relay_pool_take(j->rl);
        if (!pr)
                return;
        d->metrics.relay_shared += pr->shared[0]->ready->n_requests * (uint64_t) (j->rl->n - 1);
        if (j->state == JOB_RUNNING)
                relay_send(d, j, &pr, 1);
        protobuf_c_message_free_unpacked(&pr->base, NULL);
}

static void relay_flush(hvd_daemon_t *d, job_t *j, bool force) {
        relay_t *rl = j->rl;
        if (!force && !rl->n_grp && relay_holds(rl)) {
                relay_pool_send(d, j);
                if (!rl->n_out) {
                        rl->hold_since = 0;
                        return;
                }
                rl->hold_since = hold_start(rl->out_at[0], rl->out_newest, d->cfg.first_step_hold_usec);
                if (hold_on(d, &rl->hold_since, d->cfg.first_step_hold_usec))
                        return;
        }
        rl->hold_since = 0;
        relay_pool_send(d, j);
        relay_pool_clear(rl);
        if (relay_grp_out(d, rl) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        if (!rl->n_out)
                return;
        relay_share(d, rl);
        if (j->state == JOB_RUNNING)
                relay_send(d, j, rl->out, rl->n_out);
        relay_out_clear(rl);
}

/* A relay, housekeeping: ids held for long go on host by host (the root's
 * stall inspector then names the hosts that are missing). */
static void relay_expire(hvd_daemon_t *d, job_t *j, uint64_t now) {
        relay_t *rl = j->rl;
        uint64_t oldest = 0;
        for (uint32_t id = 0; id < rl->n_ids; id++)
                if (rl->bits[id] && (!oldest || rl->first_usec[id] < oldest))
                        oldest = rl->first_usec[id];
        rl->oldest = oldest;
        if (oldest && now - oldest > AGG_HOLD_USEC && relay_release(d, rl) < 0)
                job_abort(d, j, -1, -ENOMEM, "out of memory");
}

/* A relay: a schedule of the root on its way to the group. Its ids are done
 * with this round; those of collectives of every rank merge across the group. */
static void relay_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s) {
        relay_t *rl = j->rl;
        if (s->repeat_key) {
                for (uint32_t i = 0; i < j->key_n[s->repeat_key]; i++) {
                        uint32_t id = j->key_ids[s->repeat_key][i];
                        if (id < rl->n_ids)
                                rl->flags[id] &= (uint8_t) ~RL_PER_HOST;
                }
                return;
        }
        for (size_t o = 0; o < s->n_ops; o++)
                for (size_t e = 0; e < s->ops[o]->n_entries; e++) {
                        uint32_t id = s->ops[o]->entries[e]->id;
                        if (id == HVD_NEGOTIATOR_NO_ID)
                                continue;
                        if (relay_grow(rl, id) < 0) {
                                job_abort(d, j, -1, -ENOMEM, "out of memory");
                                return;
                        }
                        rl->flags[id] = s->ops[o]->process_set == 0 ? RL_KNOWN : 0;
                }
        for (size_t i = 0; i < s->n_errors; i++) {
                uint32_t id = s->errors[i]->id;
                if (id != HVD_NEGOTIATOR_NO_ID && id < rl->n_ids)
                        rl->flags[id] &= (uint8_t) ~RL_PER_HOST;
        }
}

/* A relay: the root's message env (a schedule) to every host of the group,
 * packed once; a host not heard from yet gets it when it is. */
static void relay_forward(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env) {
        relay_t *rl = j->rl;
        env->version = HVD_PROTOCOL_VERSION;
        zmq_msg_t packed;
        if (zmq_msg_init_size(&packed, protobuf_c_message_get_packed_size(&env->base)) < 0) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        protobuf_c_message_pack(&env->base, zmq_msg_data(&packed));
        for (uint32_t i = 1; i < rl->n; i++) {
                relay_member_t *m = &rl->m[i];
                if (m->id_len) {
                        int r = send_shared(d->peer_sock, m->id, m->id_len, &packed);
                        if (r < 0)
                                hvd_log_warning("job %s: cannot pass a schedule on to host %s: %s", j->id,
                                                host_of(j, m->host), hvd_strerror(r));
                        continue;
                }
                if (m->n_pending == RELAY_MAX_PENDING) {
                        zmq_msg_close(&packed);
                        job_abort(d, j, -1, HVD_ETIMEOUT,
                                  "host %s never reached its relay daemon here (%d schedules wait for it)",
                                  host_of(j, m->host), RELAY_MAX_PENDING);
                        return;
                }
                zmq_msg_t *pm = realloc(m->pending, (m->n_pending + 1) * sizeof *pm);
                if (!pm) {
                        zmq_msg_close(&packed);
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return;
                }
                m->pending = pm;
                zmq_msg_init(&pm[m->n_pending]);
                zmq_msg_copy(&pm[m->n_pending], &packed);
                m->n_pending++;
        }
        zmq_msg_close(&packed);
}

/* A relay: the first message over a group host's connection names it. */
static void relay_member_heard(hvd_daemon_t *d, job_t *j, relay_member_t *m, const uint8_t *id, size_t id_len) {
        memcpy(m->id, id, id_len);
        m->id_len = id_len;
        for (size_t k = 0; k < m->n_pending; k++) {
                int r = send_shared(d->peer_sock, m->id, m->id_len, &m->pending[k]);
                if (r < 0)
                        hvd_log_warning("job %s: cannot pass a schedule on to host %s: %s", j->id, host_of(j, m->host),
                                        hvd_strerror(r));
                zmq_msg_close(&m->pending[k]);
        }
        free(m->pending);
        m->pending = NULL;
        m->n_pending = 0;
}

/* Strips what only the hop to the relay needed. */
static void relay_strip(Hvd__NodeReady *nr) {
        if (nr->job_id != protobuf_c_empty_string) {
                free(nr->job_id);
                nr->job_id = (char *) protobuf_c_empty_string;
        }
        free(nr->relay_secret.data);
        nr->relay_secret.data = NULL;
        nr->relay_secret.len = 0;
        nr->relay_host = 0;
}

/* A relay: a NodeReady of a host of its group (nr owned from here on). */
static void relay_receive(hvd_daemon_t *d, job_t *j, const uint8_t *id, size_t id_len, Hvd__NodeReady *nr) {
        char reason[512];
        reason[0] = 0;
        if (!j->rl && j->state == JOB_JOINING && !j->is_root && j->cross_size > 1) {
                /* the root's welcome to this daemon is still on its way */
                early_msg_t *e = j->n_early < 4096 ? realloc(j->early, (j->n_early + 1) * sizeof *e) : NULL;
                if (!e) {
                        protobuf_c_message_free_unpacked(&nr->base, NULL);
                        job_abort(d, j, -1, -ENOMEM, "too many relayed messages before the job's welcome");
                        return;
                }
                j->early = e;
                memcpy(e[j->n_early].id, id, id_len);
                e[j->n_early].id_len = id_len;
                e[j->n_early].nr = nr;
                j->n_early++;
                return;
        }
        relay_member_t *m = NULL;
        uint32_t i = 0;
        for (uint32_t k = 1; j->rl && k < j->rl->n; k++)
                if (j->rl->m[k].host == nr->relay_host) {
                        m = &j->rl->m[k];
                        i = k;
                }
        if (nr->relay_secret.len != j->secret_len || memcmp(nr->relay_secret.data, j->secret, j->secret_len) != 0)
                snprintf(reason, sizeof reason, "job %s: host %u presented a wrong job secret to its relay daemon",
                         j->id, nr->relay_host);
        else if (!m)
                snprintf(reason, sizeof reason, "job %s: host %u is not in the relay group of this daemon (host %s)",
                         j->id, nr->relay_host, host_of(j, j->cross_rank));
        if (reason[0]) {
                Hvd__Abort ab = HVD__ABORT__INIT;
                Hvd__Envelope reply = HVD__ENVELOPE__INIT;
                hvd_log_warning("%s", reason);
                ab.job_id = j->id;
                ab.reason = reason;
                ab.code = HVD_EDENIED;
                ab.lost_rank = -1;
                reply.body_case = HVD__ENVELOPE__BODY_ABORT;
                reply.abort = &ab;
                (void) hvd_wire_send_to(d->peer_sock, id, id_len, &reply, ZMQ_DONTWAIT);
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                return;
        }
        if (!m->id_len)
                relay_member_heard(d, j, m, id, id_len);
        else if (m->id_len != id_len || memcmp(m->id, id, id_len) != 0) {
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                job_abort(d, j, -1, HVD_EABORTED,
                          "host %s: its connection to the relay daemon of host %s broke and was made again (messages "
                          "may be lost)",
                          host_of(j, m->host), host_of(j, j->cross_rank));
                return;
        }
        relay_strip(nr);
        bool own = nr->n_ranks || nr->n_shared || nr->n_node_cached || nr->n_departed;
        if (j->state != JOB_RUNNING || (!own && !nr->n_relayed)) {
                protobuf_c_message_free_unpacked(&nr->base, NULL); /* a hello, or too late */
                return;
        }
        /* a relay below this one passes its hosts' readiness on, its own with it; any other host sends its own */
        if ((m->n_sub > 1) != (nr->n_relayed > 0) || (own && nr->n_relayed)) {
                protobuf_c_message_free_unpacked(&nr->base, NULL);
                job_abort(d, j, -1, HVD_EPROTO, "host %s sent its relay daemon on host %s %s", host_of(j, m->host),
                          host_of(j, j->cross_rank),
                          m->n_sub > 1 ? "readiness of its own, though it relays for other hosts"
                                       : "relayed readiness, though it relays for no host");
                return;
        }
        relay_take(d, j, i, nr);
}

/* A relay, once running: what its group sent before its own welcome. */
static void relay_replay_early(hvd_daemon_t *d, job_t *j) {
        early_msg_t *early = TAKE_PTR(j->early);
        size_t n_early = j->n_early;
        j->n_early = 0;
        for (size_t k = 0; k < n_early; k++)
                if (j->rl && j->state == JOB_RUNNING)
                        relay_receive(d, j, early[k].id, early[k].id_len, early[k].nr);
                else
                        protobuf_c_message_free_unpacked(&early[k].nr->base, NULL);
        free(early);
}

/* Not root: the relay table of the job's NodeWelcome: this daemon relays
 * for a group, reports through a relay, or neither. Returns false when
 * the job was aborted. */
static bool relay_setup(hvd_daemon_t *d, job_t *j, const Hvd__NodeWelcome *nw) {
        if (!nw->n_relay_via)
                return true;
        uint32_t me = j->cross_rank, n = 1;
        bool ok = nw->n_relay_via == j->cross_size && nw->relay_via[0] == 0;
        for (uint32_t c = 1; ok && c < j->cross_size; c++) {
                uint32_t v = nw->relay_via[c];
                /* a relay has an endpoint; one that is not its own names a relay */
                ok = v < j->cross_size && (!v || nw->relay_endpoint[v][0]) && (v == c || !v || nw->relay_via[v]);
                n += v == me && c != me;
        }
        if (ok) {
                /* every host reaches the root */
                if (!(j->relay_via = malloc(j->cross_size * sizeof *j->relay_via)))
                        goto oom;
                memcpy(j->relay_via, nw->relay_via, j->cross_size * sizeof *j->relay_via);
                for (uint32_t c = 1; ok && c < j->cross_size; c++) {
                        uint32_t h = c, steps = 0;
                        while (h && steps++ < j->cross_size)
                                h = relay_parent(j, h);
                        ok = h == 0;
                }
        }
        if (!ok || n > 64) {
                free(j->relay_via);
                j->relay_via = NULL;
                job_abort(d, j, -1, HVD_EPROTO, "root daemon sent an invalid relay table");
                return false;
        }
        uint32_t via = relay_parent(j, me);
        if (n > 1) {
                relay_t *rl = calloc(1, sizeof *rl);
                if (!rl)
                        goto oom;
                j->rl = rl;
                if (!(rl->m = calloc(n, sizeof *rl->m)) ||
                    !(rl->member_of = malloc(j->cross_size * sizeof *rl->member_of)) ||
                    !(rl->all = malloc(j->cross_size * sizeof *rl->all)))
                        goto oom;
                for (uint32_t c = 0; c < j->cross_size; c++)
                        rl->member_of[c] = -1;
                rl->m[rl->n++].host = me;
                char list[512];
                size_t o = 0;
                list[0] = 0;
                for (uint32_t c = 0; c < j->cross_size; c++)
                        if (c != me && j->relay_via[c] == me) {
                                rl->m[rl->n++].host = c;
                                if (o + 32 < sizeof list)
                                        o += (size_t) snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "",
                                                               host_of(j, c));
                        }
                /* what each member stands for, in host order */
                for (uint32_t k = 0; k < rl->n; k++) {
                        relay_member_t *m = &rl->m[k];
                        uint32_t cnt = 0;
                        for (uint32_t c = 1; c < j->cross_size; c++)
                                cnt += k ? relay_under(j, c, m->host) : c == me;
                        if (!(m->sub = malloc(cnt * sizeof *m->sub)))
                                goto oom;
                        for (uint32_t c = 1; c < j->cross_size; c++)
                                if (k ? relay_under(j, c, m->host) : c == me) {
                                        m->sub[m->n_sub++] = c;
                                        rl->member_of[c] = (int32_t) k;
                                }
                }
                for (uint32_t c = 1; c < j->cross_size; c++)
                        if (rl->member_of[c] >= 0)
                                rl->all[rl->n_all++] = c;
                rl->full = rl->n == 64 ? UINT64_MAX : (UINT64_C(1) << rl->n) - 1;
                /* the ranks of each member's hosts, and of them all, host by
                 * host (what a first step's names shared by the whole group
                 * name: relay_pool_take) */
                if (!(rl->ranks_all = malloc(j->size * sizeof *rl->ranks_all)) || !(rl->seen = calloc(j->size, 1)) ||
                    !(rl->rank_member = malloc(j->size * sizeof *rl->rank_member)))
                        goto oom;
                rl->n_seen = j->size;
                for (uint32_t r = 0; r < j->size; r++)
                        rl->rank_member[r] = j->table[r].known && j->table[r].cross_rank < j->cross_size
                                                     ? rl->member_of[j->table[r].cross_rank]
                                                     : -1;
                for (uint32_t h = 0; h < rl->n_all; h++)
                        for (uint32_t r = 0; r < j->size; r++)
                                if (j->table[r].known && j->table[r].cross_rank == rl->all[h]) {
                                        rl->ranks_all[rl->n_ranks_all++] = r;
                                        rl->m[rl->member_of[rl->all[h]]].n_ranks++;
                                }
                snprintf(j->relay_desc, sizeof j->relay_desc, "relays for hosts [%s]", list);
                if (rl->n_all > rl->n)
                        snprintf(j->relay_desc + strlen(j->relay_desc), sizeof j->relay_desc - strlen(j->relay_desc),
                                 " (%u hosts in all)", rl->n_all - 1);
                hvd_log_info("job %s: %s", j->id, j->relay_desc);
        }
        if (via) {
                peer_t *p = peer_get(d, nw->relay_endpoint[via]);
                if (!p) {
                        job_abort(d, j, -1, HVD_EABORTED, "cannot connect to the relay daemon of host %s at %s",
                                  host_of(j, via), nw->relay_endpoint[via]);
                        return false;
                }
                p->n_jobs++;
                j->relay = p;
                size_t o = strlen(j->relay_desc);
                snprintf(j->relay_desc + o, sizeof j->relay_desc - o,
                         "%sreports through the relay daemon of host %s at %s", o ? "; " : "", host_of(j, via),
                         p->endpoint);
                hvd_log_info("job %s: %s", j->id, j->relay_desc);
                /* a hello: the relay learns this connection */
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                nr.job_id = j->id;
                nr.relay_host = me;
                nr.relay_secret.data = j->secret;
                nr.relay_secret.len = j->secret_len;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                int r = hvd_wire_send(p->sock, &env, ZMQ_DONTWAIT);
                if (r < 0)
                        hvd_log_warning("job %s: cannot reach the relay daemon at %s: %s", j->id, p->endpoint,
                                        hvd_strerror(r));
        }
        return true;
oom:
        job_abort(d, j, -1, -ENOMEM, "out of memory");
        return false;
}

/* A relay: its own host's readiness joins the group's (ids alone are
 * taken as they are; anything else as a copy, nr stays the caller's). */
static void relay_take_own(hvd_daemon_t *d, job_t *j, const Hvd__NodeReady *nr) {
        if (!nr->n_ranks && !nr->n_shared && !nr->n_departed) {
                Hvd__NodeReady *c = node_ready_new(nr->n_node_cached);
                if (!c) {
                        job_abort(d, j, -1, -ENOMEM, "out of memory");
                        return;
                }
                if (nr->n_node_cached) { /* none: both may be NULL */
                        memcpy(c->node_cached, nr->node_cached, nr->n_node_cached * sizeof *c->node_cached);
                        if (nr->n_node_cached_waited_usec == nr->n_node_cached)
                                memcpy(c->node_cached_waited_usec, nr->node_cached_waited_usec,
                                       nr->n_node_cached * sizeof *c->node_cached_waited_usec);
                        else
                                memset(c->node_cached_waited_usec, 0,
                                       nr->n_node_cached * sizeof *c->node_cached_waited_usec);
                }
                c->n_node_cached = c->n_node_cached_waited_usec = nr->n_node_cached;
                relay_take(d, j, 0, c);
                return;
        }
        /* the cold path: a copy through the wire format */
        Hvd__NodeReady only = *nr;
        only.job_id = (char *) protobuf_c_empty_string;
        size_t len = protobuf_c_message_get_packed_size(&only.base);
        uint8_t *buf = malloc(len ? len : 1);
        Hvd__NodeReady *c = NULL;
        if (buf) {
                protobuf_c_message_pack(&only.base, buf);
                c = hvd__node_ready__unpack(NULL, len, buf);
        }
        free(buf);
        if (!c) {
                job_abort(d, j, -1, -ENOMEM, "out of memory");
                return;
        }
        relay_take(d, j, 0, c);
}

/* What is held is a first step's new requests alone, of collectives of
 * every rank (pool_add), with no departure or host-level ids to go with
 * it: worth holding for the other local ranks', so that the names all of
 * them sent alike go on once for all (pool_take). None of them can
 * complete before every rank has sent its own, so the hold costs no time;
 * its limit (hold_start: first_step_hold without anything new, ten times
 * that in all) only bounds how long the root cannot name the ranks that
 * did send, should one never come. Once a local rank joined (it may send
 * nothing more), nothing is held. */
static bool fwd_holds(const job_t *j) {
        return j->n_fwd && !j->pool_off && !j->n_departed && !j->n_nc && !j->fwd_joined;
}

/* The names of the held first-step requests that every local rank sent
 * alike, taken out of the ranks' entries into one SharedReady for all the
 * local ranks, in the order they first came (the other ranks' copies go).
 * Entries left with nothing go too. NULL when there are none (or no
 * memory: then nothing changed). */
static Hvd__SharedReady *pool_take(job_t *j) {
        if (j->pool_off || !j->pool_complete)
                return NULL;
        Hvd__SharedReady *sh = calloc(1, sizeof *sh);
        Hvd__Ready *q = calloc(1, sizeof *q);
        Hvd__Request **reqs = malloc(j->pool_complete * sizeof *reqs);
        uint32_t *ranks = malloc(j->local_size * sizeof *ranks);
        if (!sh || !q || !reqs || !ranks)
                goto fail;
        hvd__shared_ready__init(sh);
        hvd__ready__init(q);
        for (uint32_t r = 0; r < j->size && sh->n_ranks < j->local_size; r++)
                if (j->ranks[r])
                        ranks[sh->n_ranks++] = r;
        if (sh->n_ranks != j->local_size)
                goto fail;
        sh->ranks = ranks;
        sh->ready = q;
        q->requests = reqs;
        for (size_t i = 0; i < j->n_fwd; i++)
                pool_move_done(j->pool, j->fwd[i]->ready, q);
        pool_forget(j->pool, q);
        j->pool_complete = 0;
        size_t keep = 0;
        for (size_t i = 0; i < j->n_fwd; i++) {
                if (j->fwd[i]->ready->n_requests) { /* the pool holds new requests alone */
                        j->fwd_at[keep] = j->fwd_at[i];
                        j->fwd[keep++] = j->fwd[i];
                } else
                        protobuf_c_message_free_unpacked(&j->fwd[i]->base, NULL);
        }
        j->n_fwd = keep;
        return sh;
fail:
        free(sh);
        free(q);
        free(reqs);
        free(ranks);
        return NULL;
}

/* Everything the batch shares: what pool_take found, then whatever
 * share_requests finds in the rest. Returns how many, in *ret. */
static size_t take_shared(job_t *j, Hvd__SharedReady ***ret) {
        *ret = NULL;
        /* the steady state, every cycle: nothing to share, nothing to allocate */
        if (j->n_fwd < 2 && (j->pool_off || !j->pool_complete)) {
                pool_clear(j);
                return 0;
        }
        /* share_requests makes at most one of every two entries */
        Hvd__SharedReady **all = malloc((j->n_fwd + 1) * sizeof *all);
        if (!all) {
                pool_clear(j);
                return 0;
        }
        size_t n = 0;
        Hvd__SharedReady *ps = pool_take(j);
        if (ps)
                all[n++] = ps;
        pool_clear(j);
        Hvd__SharedReady **sh = NULL;
        size_t m = share_requests(j, &sh);
        for (size_t i = 0; i < m; i++)
                all[n++] = sh[i];
        free(sh);
        if (!n)
                free(all);
        else
                *ret = all;
        return n;
}

/* Sends (at the root: enters) the shared requests sh of local ranks, and
 * with them the rest of what is held when all is true. */
static void fwd_send(hvd_daemon_t *d, job_t *j, Hvd__SharedReady **sh, size_t n_sh, bool all) {
        for (size_t i = 0; i < n_sh; i++)
                d->metrics.node_shared_requests += sh[i]->ready->n_requests;
        if (j->neg) {
                for (size_t i = 0; all && i < j->n_fwd && j->state == JOB_RUNNING; i++) {
                        const Hvd__Ready *q = j->fwd[i]->ready;
                        if (q->n_requests || q->n_cached || !n_sh) /* not what went shared alone */
                                root_submit(d, j, &j->fwd[i]->rank, 1, q, false);
                }
                for (size_t i = 0; i < n_sh && j->state == JOB_RUNNING; i++)
                        root_submit(d, j, sh[i]->ranks, sh[i]->n_ranks, sh[i]->ready, false);
                return;
        }
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nr.job_id = j->id;
        nr.n_shared = n_sh;
        nr.shared = sh;
        if (all) {
                /* entries left with nothing (their requests went shared) stay home */
                size_t keep = 0;
                for (size_t i = 0; i < j->n_fwd; i++) {
                        const Hvd__Ready *q = j->fwd[i]->ready;
                        if (q->n_requests || q->n_cached || !n_sh)
                                j->fwd[keep++] = j->fwd[i];
                        else
                                protobuf_c_message_free_unpacked(&j->fwd[i]->base, NULL);
                }
                j->n_fwd = keep;
                nr.n_ranks = j->n_fwd;
                nr.ranks = j->fwd;
                nr.n_node_cached = j->n_nc;
                nr.node_cached = j->nc_ids;
                nr.n_node_cached_waited_usec = j->n_nc;
                nr.node_cached_waited_usec = j->nc_waited;
                d->metrics.node_ready_sent += j->n_nc > 0;
                nr.n_departed = j->n_departed;
                nr.departed = j->departed;
        }
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        if (j->rl)
                relay_take_own(d, j, &nr);
        else
                send_up(d, j, &env);
}

/* A host's batch of its ranks' readiness goes on to the root (the root's
 * own is entered): at the end of each iteration, unless a first step's
 * new requests wait for the other local ranks' (fwd_holds). Those every
 * local rank sent go then, once for all; the rest waits while its ranks
 * are still sending (hold_start), or until force. */
static void flush_forward(hvd_daemon_t *d, job_t *j, bool force) {
        if (!j->n_fwd && !j->n_departed && !j->n_nc)
                return;
        if (j->state == JOB_RUNNING && !force && fwd_holds(j)) {
                Hvd__SharedReady *ps = pool_take(j);
                if (ps) {
                        fwd_send(d, j, &ps, 1, false);
                        protobuf_c_message_free_unpacked(&ps->base, NULL);
                }
                if (!j->n_fwd || j->state != JOB_RUNNING) {
                        j->fwd_hold_since = 0;
                        if (j->state != JOB_RUNNING)
                                fwd_clear(j);
                        return;
                }
                j->fwd_hold_since = hold_start(j->fwd_at[0], j->fwd_newest, d->cfg.first_step_hold_usec);
                if (hold_on(d, &j->fwd_hold_since, d->cfg.first_step_hold_usec))
                        return;
        }
        j->fwd_hold_since = 0;
        if (j->state == JOB_RUNNING) {
                Hvd__SharedReady **sh = NULL;
                size_t n_sh = take_shared(j, &sh);
                fwd_send(d, j, sh, n_sh, true);
                for (size_t i = 0; i < n_sh; i++)
                        protobuf_c_message_free_unpacked(&sh[i]->base, NULL);
                free(sh);
        }
        fwd_clear(j);
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

static void before_sleep(hvd_daemon_t *d) {
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                flush_forward(d, j, false);
                if (!j->neg) {
                        if (j->rl)
                                relay_flush(d, j, false);
                        continue;
                }
                if (j->state != JOB_RUNNING || !hvd_negotiator_has_work(j->neg))
                        continue;
                Hvd__Schedule *s = NULL;
                hvd_negotiator_stats_t before;
                hvd_negotiator_get_stats(j->neg, &before);
                int r = hvd_negotiator_take_schedule(j->neg, &s);
                account_schedule(d, j, &before);
                if (r < 0) {
                        job_abort(d, j, -1, r, "cannot build a schedule: %s", hvd_strerror(r));
                        continue;
                }
                if (r == 0)
                        continue;
                Hvd__Schedule rep = HVD__SCHEDULE__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
                env.schedule = schedule_key(d, j, s, &rep) ? &rep : s;
                send_to_local_workers(d, j, &env, true);
                if (j->cross_size > 1) {
                        Hvd__JobSchedule js = HVD__JOB_SCHEDULE__INIT;
                        Hvd__Envelope jenv = HVD__ENVELOPE__INIT;
                        js.job_id = j->id;
                        js.schedule = env.schedule;
                        jenv.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                        jenv.job_schedule = &js;
                        send_to_nodes_ex(d, j, &jenv, true);
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
                job_abort_ex(
                        d, j, true, -1, HVD_ETIMEOUT,
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
                          j->n_hello, j->local_size, host_of(j, j->cross_rank),
                          (double) d->cfg.start_timeout_usec / 1e6, missing);
}

/* Root: a one-way ping to a node of a running job. The peer socket is a
 * ROUTER with ZMQ_ROUTER_MANDATORY, so a node whose connection closed (its
 * daemon died, the connection was reset, or the transport heartbeat gave
 * up) is -EHOSTUNREACH at once instead of after peer_timeout of silence. A
 * reconnection would come with a new routing id, and what was sent over the
 * old one may be lost, so that too ends the node's part in the job. */
static int probe_node(hvd_daemon_t *d, const node_t *nd, uint64_t now) {
        Hvd__Ping ping = HVD__PING__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ping.sent_usec = now;
        ping.epoch = d->epoch;
        env.body_case = HVD__ENVELOPE__BODY_PING;
        env.ping = &ping;
        return hvd_wire_send_to(d->peer_sock, nd->id, nd->id_len, &env, ZMQ_DONTWAIT);
}

/* Local workers without a pidfd (pidfd_open is missing before Linux 5.3
 * and under valgrind): whether their process still exists is asked at
 * every housekeeping. Returns whether any such worker is left to watch. */
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

static void housekeeping(hvd_daemon_t *d, uint64_t now) {
        size_t iter = 0;
        void *v;
        uint64_t exit_due = settle_exits(d, now);
        bool again = watch_pidless_workers(d);
        job_t *dead[64];
        size_t n_dead = 0;
        uint64_t hb_due = UINT64_MAX;
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
                        ping.rtt_usec = p->rtt_usec;
                        ping.epoch = d->epoch;
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
                        hvd_log_error(0, "lost contact with the %s daemon at %s (silent for %.1f s)%s", peer_role(d, p),
                                      p->endpoint, (double) (now - p->last_heard_usec) / 1e6, hint);
                        size_t it2 = 0;
                        void *v2;
                        while (hvd_strmap_next(d->jobs, &it2, NULL, NULL, &v2)) {
                                job_t *j = v2;
                                if (j->relay == p && j->relay_via) {
                                        uint32_t via = j->relay_via[j->cross_rank];
                                        char ranks[256];
                                        ranks_of_host(j, via, ranks, sizeof ranks);
                                        job_abort(d, j, -1, HVD_EABORTED,
                                                  "lost contact with the relay daemon of host %s at %s (ranks [%s]): "
                                                  "silent for %.1f s",
                                                  host_of(j, via), p->endpoint, ranks,
                                                  (double) (now - p->last_heard_usec) / 1e6);
                                        continue;
                                }
                                if (j->root != p)
                                        continue;
                                char ranks[256];
                                ranks_of_host(j, 0, ranks, sizeof ranks);
                                job_abort_ex(d, j, true, -1, HVD_EABORTED,
                                             "lost contact with the root daemon at %s (host %s, ranks [%s]): "
                                             "silent for %.1f s%s",
                                             p->endpoint, host_of(j, 0), ranks,
                                             (double) (now - p->last_heard_usec) / 1e6, hint);
                        }
                }
        }
        iter = 0;
        while (hvd_strmap_next(d->jobs, &iter, NULL, NULL, &v)) {
                job_t *j = v;
                if (j->state == JOB_JOINING) {
                        uint64_t limit =
                                d->cfg.start_timeout_usec + (j->is_root || j->cross_size == 1 ? 0 : 2 * USEC_PER_SEC);
                        if (now - j->created_usec > limit)
                                start_timeout(d, j);
                        else
                                again = true;
                }
                if (stall_inspect(d, j, now))
                        again = true;
                hb_due = HVD_MIN(hb_due, heartbeat_check(d, j, now));
                if (j->agg_oldest && j->state == JOB_RUNNING) {
                        again = true;
                        agg_expire(d, j, now);
                }
                if (j->rl && j->rl->oldest && j->state == JOB_RUNNING) {
                        again = true;
                        relay_expire(d, j, now);
                }
                if (hold_expired(j->fwd_hold_since, d->cfg.first_step_hold_usec, now, &hb_due))
                        flush_forward(d, j, true);
                if (j->rl && hold_expired(j->rl->hold_since, d->cfg.first_step_hold_usec, now, &hb_due))
                        relay_flush(d, j, true);
                if (j->state == JOB_RUNNING && j->is_root) {
                        again = true;
                        bool probe = now - j->last_probe_usec >= hb;
                        if (probe)
                                j->last_probe_usec = now;
                        for (uint32_t c = 0; c < j->cross_size; c++) {
                                node_t *nd = &j->nodes[c];
                                if (nd->local)
                                        continue;
                                if (probe && probe_node(d, nd, now) == -EHOSTUNREACH) {
                                        char ranks[256];
                                        ranks_of_host(j, c, ranks, sizeof ranks);
                                        job_abort(
                                                d, j, -1, HVD_EABORTED,
                                                "lost contact with host %s (ranks [%s]): the connection to its daemon "
                                                "closed (daemon gone or connection reset)",
                                                host_of(j, c), ranks);
                                        break;
                                }
                                if (now - nd->last_heard_usec <= d->cfg.peer_timeout_usec)
                                        continue;
                                char ranks[256];
                                ranks_of_host(j, c, ranks, sizeof ranks);
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
                        /* aborted_usec may be later than now: aborted by this very pass */
                        if (now > j->aborted_usec && now - j->aborted_usec > ABORTED_JOB_LINGER_USEC &&
                            n_dead < ELEMENTSOF(dead))
                                dead[n_dead++] = j;
                        else
                                again = true;
                }
        }
        for (size_t i = 0; i < n_dead; i++)
                job_remove(d, dead[i]);
        d->next_housekeeping = again ? now + HVD_MIN(HOUSEKEEPING_USEC, hb) : UINT64_MAX;
        if (hb_due < d->next_housekeeping)
                d->next_housekeeping = hb_due;
        if (exit_due < d->next_housekeeping)
                d->next_housekeeping = exit_due;
}

enum {
        ITEM_WORKER,
        ITEM_CONTROL,
        ITEM_STOP,
        ITEM_SIGNAL,
        ITEM_PEER,
        ITEM_ROOT,
        ITEM_PIDFD,
        ITEM_HTTP,
        ITEM_ZAP,
        ITEM_ZAP_MONITOR
};

static int build_poll_items(hvd_daemon_t *d) {
        size_t need = 8 + hvd_strmap_size(d->peers) + (d->http ? hvd_http_max_items(d->http) : 0);
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
#define ADD(kind, sock_, fd_, w, p)                                                                                    \
        do {                                                                                                           \
                d->items[n] = (zmq_pollitem_t){ .socket = (sock_), .fd = (fd_), .events = ZMQ_POLLIN };                \
                d->item_workers[n] = (w);                                                                              \
                d->item_peers[n] = (p);                                                                                \
                d->item_kind[n] = (kind);                                                                              \
                n++;                                                                                                   \
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
        ADD(ITEM_PIDFD, NULL, d->pid_epfd, NULL, NULL);
#undef ADD
        /* the metrics listener's items come last, in one block */
        d->http_first = n;
        if (d->http) {
                size_t k = hvd_http_fill_items(d->http, d->items + n);
                for (size_t i = n; i < n + k; i++) {
                        d->item_workers[i] = NULL;
                        d->item_peers[i] = NULL;
                        d->item_kind[i] = ITEM_HTTP;
                }
                n += k;
        }
        d->n_items = n;
        return 0;
}

static void log_change(const char *key, bool live, const hvd_daemon_config_t *cur, const hvd_daemon_config_t *next,
                       void *userdata) {
        char was[PATH_MAX], now[PATH_MAX];
        size_t *applied = userdata;
        (void) hvd_daemon_config_format(cur, key, was, sizeof was);
        (void) hvd_daemon_config_format(next, key, now, sizeof now);
        if (live) {
                hvd_log_notice("reload: %s = %s (was %s)", key, now, was);
                (*applied)++;
        } else
                hvd_log_warning("reload: %s changed (%s -> %s) but cannot change while running; "
                                "it keeps %s until the daemon restarts",
                                key, was, now, was);
}

int hvd_daemon_reload(hvd_daemon_t *d, const hvd_daemon_config_t *cfg) {
        size_t applied = 0;
        /* the new level first, so that its own lines follow it */
        if (cfg->log_level > hvd_log_max_level)
                hvd_log_max_level = cfg->log_level;
        size_t changed = hvd_daemon_config_apply_live(&d->cfg, cfg, log_change, &applied);
        hvd_log_max_level = d->cfg.log_level;
        hvd_log_notice("reload: %zu setting%s changed, %zu applied", changed, changed == 1 ? "" : "s", applied);
        /* timeouts may now be due sooner */
        d->next_housekeeping = hvd_now_usec();
        return (int) applied;
}

void hvd_daemon_set_reload(hvd_daemon_t *d, hvd_daemon_load_fn load, void *userdata) {
        d->reload_fn = load;
        d->reload_userdata = userdata;
}

void hvd_daemon_notify(const char *state);

static void reload(hvd_daemon_t *d) {
        if (!d->reload_fn) {
                hvd_log_notice("SIGHUP: no configuration to reload");
                return;
        }
        if (d->cfg.notify)
                hvd_daemon_notify("RELOADING=1\nSTATUS=Reloading the configuration");
        hvd_daemon_config_t next;
        char msg[1024] = "";
        int r = d->reload_fn(&next, msg, sizeof msg, d->reload_userdata);
        if (r < 0)
                hvd_log_error(0, "reload failed, the settings in force are unchanged: %s", msg);
        else
                (void) hvd_daemon_reload(d, &next);
        d->status_jobs = d->status_workers = SIZE_MAX; /* STATUS= again */
        if (d->cfg.notify)
                hvd_daemon_notify("READY=1");
}

static void handle_signal(hvd_daemon_t *d) {
        struct signalfd_siginfo si;
        if (read(d->sig_fd, &si, sizeof si) != sizeof si)
                return;
        if (si.ssi_signo == SIGHUP) {
                hvd_log_notice("SIGHUP: reloading the configuration");
                reload(d);
                return;
        }
        hvd_log_notice("received signal %u (%s), stopping", si.ssi_signo, strsignal((int) si.ssi_signo));
        d->stopping = true;
}

void hvd_daemon_notify(const char *state) {
#ifdef HAVE_LIBSYSTEMD
        (void) sd_notify(0, state);
#else
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
#endif
}

/* WATCHDOG_USEC (and WATCHDOG_PID, when set, naming this process): ping at
 * half the interval, as sd_watchdog_enabled(3) advises. */
static uint64_t watchdog_interval(void) {
        const char *s = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
        if (!s || !*s)
                return 0;
        if (pid && *pid && strtol(pid, NULL, 10) != (long) getpid())
                return 0;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end || v == 0) {
                hvd_log_warning("ignoring WATCHDOG_USEC='%s': not a positive number", s);
                return 0;
        }
        return v / 2 ? v / 2 : 1;
}

/* STATUS= for systemctl status, sent when the counts change. */
static void notify_status(hvd_daemon_t *d) {
        size_t nj = hvd_strmap_size(d->jobs), nw = hvd_strmap_size(d->workers);
        if (nj == d->status_jobs && nw == d->status_workers)
                return;
        d->status_jobs = nj;
        d->status_workers = nw;
        char st[PATH_MAX + 128];
        snprintf(st, sizeof st, "STATUS=Serving %zu job%s, %zu worker%s on %s", nj, nj == 1 ? "" : "s", nw,
                 nw == 1 ? "" : "s", d->worker_ep + 6);
        hvd_daemon_notify(st);
}

/* Every worker whose pidfd became readable (it exited). Workers are freed
 * only with their job (housekeeping), so the pointers stay valid here. */
static void workers_exited(hvd_daemon_t *d) {
        struct epoll_event ev[64];
        int n;
        do {
                n = epoll_wait(d->pid_epfd, ev, (int) ELEMENTSOF(ev), 0);
                for (int i = 0; i < n; i++)
                        worker_exited(d, ev[i].data.ptr); /* leaves the set */
        } while (n == (int) ELEMENTSOF(ev));
}

int hvd_daemon_run(hvd_daemon_t *d) {
        /* the sockets were bound (and listen) in hvd_daemon_new: workers can connect now */
        if (d->cfg.notify) {
                char st[PATH_MAX + 64];
                snprintf(st, sizeof st, "READY=1\nSTATUS=Serving 0 jobs, 0 workers on %s", d->worker_ep + 6);
                hvd_daemon_notify(st);
                d->watchdog_usec = watchdog_interval();
                if (d->watchdog_usec) {
                        hvd_daemon_notify("WATCHDOG=1");
                        d->next_watchdog = hvd_now_usec() + d->watchdog_usec;
                }
        }
        hvd_log_notice("hvd-coordinatord %s ready on %s", PACKAGE_VERSION, d->worker_ep);
        d->next_housekeeping = UINT64_MAX;
        while (!d->stopping) {
                before_sleep(d);
                if (d->cfg.notify)
                        notify_status(d);
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
                        wake = HVD_MIN(wake, hvd_http_expire(d->http, now));
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
                        case ITEM_SIGNAL: handle_signal(d); break;
                        case ITEM_PIDFD: exits = true; break;
                        case ITEM_WORKER: worker_msgs = true; break;
                        case ITEM_CONTROL: handle_control_socket(d); break;
                        case ITEM_PEER: handle_peer_socket(d); break;
                        case ITEM_ROOT: handle_root_socket(d, d->item_peers[i]); break;
                        case ITEM_HTTP: http = true; break;
                        case ITEM_ZAP: hvd_zap_handle(d->zap); break;
                        case ITEM_ZAP_MONITOR: hvd_zap_handle_monitor(d->zap); break;
                        }
                }
                if (worker_msgs || exits)
                        handle_worker_socket(d);
                if (exits)
                        workers_exited(d);
                if (http)
                        hvd_http_dispatch(d->http, d->items + d->http_first, d->n_items - d->http_first,
                                          hvd_now_usec());
                now = hvd_now_usec();
                if (now >= d->next_housekeeping)
                        housekeeping(d, now);
                if (d->watchdog_usec && now >= d->next_watchdog) {
                        hvd_daemon_notify("WATCHDOG=1");
                        d->next_watchdog = now + d->watchdog_usec;
                }
        }
        if (d->cfg.notify) {
                char st[128];
                size_t nj = hvd_strmap_size(d->jobs);
                snprintf(st, sizeof st, "STOPPING=1\nSTATUS=Stopping: telling %zu job%s, removing the sockets", nj,
                         nj == 1 ? "" : "s");
                hvd_daemon_notify(st);
        }
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
        int one = 1, zero = 0, hwm = 100000, handshake = HANDSHAKE_MSEC;
        int64_t maxmsg = (int64_t) d->cfg.max_message_bytes;
        zmq_setsockopt(*sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(*sock, ZMQ_HANDSHAKE_IVL, &handshake, sizeof handshake);
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
        d->memo = hvd_wire_memo_new(MEMO_ENTRIES);
        d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        d->pid_epfd = epoll_create1(EPOLL_CLOEXEC);
        d->zctx = zmq_ctx_new();
        if (!d->jobs || !d->workers || !d->peers || !d->memo || d->stop_fd < 0 || d->pid_epfd < 0 || !d->zctx) {
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
                int handshake = HANDSHAKE_MSEC;
                int64_t maxmsg = (int64_t) cfg->max_message_bytes;
                zmq_setsockopt(d->peer_sock, ZMQ_LINGER, &zero, sizeof zero);
                zmq_setsockopt(d->peer_sock, ZMQ_HANDSHAKE_IVL, &handshake, sizeof handshake);
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
        if (cfg->metrics_listen[0]) {
                char err[512];
                if ((r = hvd_http_new(cfg->metrics_listen, render_metrics, d, &d->metrics, &d->http, err, sizeof err)) <
                    0) {
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
        hvd_wire_memo_free(&d->memo);
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
        free(d->item_workers);
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

/* ---- feeding messages without sockets (tests, fuzzing) ---- */

int hvd_daemon_feed(hvd_daemon_t *d, hvd_daemon_source_t src, const void *id, size_t id_len, uid_t uid,
                    const void *data, size_t len) {
        peer_t *p = NULL;
        if (!d || (id_len && !id) || id_len > 255 || (len && !data))
                return -EINVAL;
        if (src == HVD_DAEMON_FROM_PEER && !d->peer_sock)
                return -ENOENT;
        if (src == HVD_DAEMON_FROM_ROOT) {
                char ep[HVD_WIRE_MAX_TEXT + 1];
                snprintf(ep, sizeof ep, "%.*s", (int) id_len, (const char *) id);
                p = hvd_strmap_get(d->peers, ep, strlen(ep));
                if (!p || !p->sock)
                        return -ENOENT;
        }
        fed_frame_t f = { .id = id, .id_len = id_len, .data = data, .len = len, .uid = uid };
        fed = &f;
        switch (src) {
        case HVD_DAEMON_FROM_WORKER: handle_worker_socket(d); break;
        case HVD_DAEMON_FROM_CONTROL: handle_control_socket(d); break;
        case HVD_DAEMON_FROM_PEER: handle_peer_socket(d); break;
        case HVD_DAEMON_FROM_ROOT: handle_root_socket(d, p); break;
        default: fed = NULL; return -EINVAL;
        }
        fed = NULL;
        before_sleep(d);
        return 0;
}

int hvd_daemon_feed_exit(hvd_daemon_t *d, const void *id, size_t id_len) {
        worker_t *w = hvd_strmap_get(d->workers, id, id_len);
        if (!w)
                return -ENOENT;
        worker_gone(d, w, "exited");
        before_sleep(d);
        return 0;
}

void hvd_daemon_feed_time(hvd_daemon_t *d, uint64_t advance_usec) {
        housekeeping(d, hvd_now_usec() + advance_usec);
        before_sleep(d);
}

void hvd_daemon_sizes(const hvd_daemon_t *d, size_t *jobs, size_t *workers, size_t *peers) {
        *jobs = hvd_strmap_size(d->jobs);
        *workers = hvd_strmap_size(d->workers);
        *peers = hvd_strmap_size(d->peers);
}
