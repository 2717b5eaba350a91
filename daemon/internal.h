/* internal.h — hvd-coordinatord's modules: the daemon's state and what
 * each module offers the others. Private to daemon/. */
#ifndef HVD_DAEMON_INTERNAL_H
#define HVD_DAEMON_INTERNAL_H

#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>
#include <zmq.h>

#include "coordinator.h"
#include "hvd.h"
#include "hvd.pb-c.h"
#include "invariant.h"
#include "log.h"
#include "metrics.h"
#include "negotiate.h"
#include "strmap.h"
#include "util.h"
#include "wire.h"
#include "zap.h"

typedef struct relay relay_t;
typedef struct pool pool_t;
typedef struct autotune autotune_t;
typedef struct hvd_offers hvd_offers_t;

#define HOUSEKEEPING_USEC       (100 * USEC_PER_MSEC)
#define ABORTED_JOB_LINGER_USEC (30 * USEC_PER_SEC)
/* A local worker's exit seen without its goodbye ends its job only this
 * long after: its pidfd can turn readable while the last message it sent
 * (a failure report saying why) is still in libzmq's I/O thread, on its
 * way to the worker socket. */
#define EXIT_GRACE_USEC (100 * USEC_PER_MSEC)
#define BOARD_KEEP      64 /* schedules kept for the other ranks should local rank 0 leave */
#define RECV_BATCH      512
/* A connection that has not finished its ZMTP (and ZAP, CURVE) handshake
 * within this is closed; libzmq's default is 30 s. */
#define HANDSHAKE_MSEC 5000
/* A TCP connect to another daemon not done within this starts afresh. */
#define CONNECT_MSEC 2000

typedef enum { JOB_JOINING, JOB_RUNNING, JOB_ABORTED } job_state_t;
static const char *const job_state_names[] = { "joining", "running", "aborted" };

typedef struct job job_t;

/* What this daemon is to a job. A member may also relay for other
 * members (job.rl), and reports through a relay when the root says so
 * (job.relay). */
typedef enum {
        JOB_SINGLE, /* the job's only host: it negotiates, and no other daemon takes part */
        JOB_ROOT,   /* the first of several hosts: it negotiates for all, and hears every host */
        JOB_MEMBER, /* another host: it reports to the root and passes schedules to its ranks */
} job_role_t;

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

/* RankInfos for a message, over borrowed strings (job_rank_infos). */
typedef struct rank_infos {
        Hvd__RankInfo *infos;
        Hvd__RankInfo **ptrs;
        size_t n;
} rank_infos_t;

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

/* Which contributors (a host's local ranks, or a relay's members) posted
 * each cached id this round (tally.c). */
typedef struct tally {
        uint32_t n_parts, words; /* contributors; uint64 words of one id's bits */
        uint32_t n_ids;          /* ids with room */
        uint64_t *bits;          /* [n_ids * words]: who posted it this round */
        uint32_t *count;         /* [n_ids]: how many */
        uint64_t *first_usec;    /* [n_ids]: its earliest readiness this round */
        uint8_t *flags;          /* [n_ids]: whether it is tallied */
        uint64_t oldest;         /* the earliest first_usec of a partial id (0: none) */
} tally_t;

/* Partial ids older than this are released, contributor by contributor,
 * so that the root's stall inspector can name who is missing. */
#define TALLY_HOLD_USEC (500 * USEC_PER_MSEC)
/* A first step's requests held longer than this for the local ranks that
 * have not sent them go on rank by rank (pool.c), for the same reason. */
#define POOL_HOLD_USEC TALLY_HOLD_USEC

/* A host's readiness of this reactor turn (batch.c), flushed when the
 * turn ends: one message to the root (at the root: entered). */
typedef struct batch {
        Hvd__RankReady **fwd; /* each rank's readiness in the order it came, owned */
        size_t n_fwd, cap_fwd;
        uint32_t *ids;        /* node-level ids: every local rank posted them (not root) */
        uint64_t *ids_waited; /* how long each waited here */
        size_t n_ids, cap_ids;
        uint32_t *departed; /* local ranks that said goodbye (not root) */
        size_t n_departed;
        tally_t tally;   /* the local ranks' cached ids (not root) */
        pool_t *pool;    /* a first step's new requests, held for the other local ranks' (several local ranks) */
        bool off;        /* a local rank left: no more tallying in this job */
        uint32_t joined; /* local ranks waiting in hvd_join: no tallying meanwhile */
} batch_t;

typedef struct early_msg {
        uint8_t id[256];
        size_t id_len;
        Hvd__NodeReady *nr; /* owned */
} early_msg_t;

/* Bytes scheduled per second over the last THROUGHPUT_SECS seconds: one
 * slot per second, reused round robin. */
#define THROUGHPUT_SECS 10

/* A job as this daemon holds it. Fields are grouped by the roles that use
 * them: every daemon, the negotiating one (single host or root), the root,
 * a member (any other host), a relay. */
struct job {
        /* ---- every daemon ---- */
        char id[HVD_WIRE_MAX_JOB_ID + 1];
        char launcher[HVD_WIRE_MAX_LAUNCHER + 1]; /* who placed its ranks, "" = not said */
        uint8_t secret[HVD_WIRE_MAX_SECRET];
        size_t secret_len;
        uid_t owner_uid; /* the uid of the first local worker (ZAP over ipc); only it may join */
        bool owned;
        job_role_t role;
        job_state_t state;
        uint32_t size, local_size;       /* ranks in all, and on this host */
        uint32_t cross_rank, cross_size; /* this host's index, and the job's hosts */
        char **hosts;                    /* [cross_size] */
        worker_t **ranks;                /* [size]: the local workers, NULL for the others */
        rinfo_t *table;                  /* [size]: every rank, as the job's join made it known */
        uint32_t n_hello, n_live;
        char shm_name[96]; /* the host's data-plane segment */
        uint64_t created_usec, aborted_usec;
        uint64_t fusion_threshold, cycle_time_usec;
        uint64_t hb_interval_usec, hb_timeout_usec; /* as its workers were told at welcome */
        uint64_t stall_check_usec, stall_shutdown_usec;
        bool ring_checksum;   /* CRC-32C on the TCP ring: the daemon's key or any rank's request */
        uint8_t nccl_id[128]; /* from the rank that has a GPU backend (rank 0) */
        size_t nccl_id_len;
        char abort_reason[1024];
        int32_t departed_rank; /* a rank that said goodbye while others run */
        uint64_t cycles;
        rstat_t *rstat;         /* [size], for status */
        uint8_t tl_req_id[256]; /* hvdctl waiting for rank 0's timeline answer */
        size_t tl_req_len;
        uint64_t tl_req_deadline;
        batch_t batch; /* this turn's readiness of the local ranks */
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
        /* schedules kept by key (1..HVD_WIRE_SCHEDULE_KEYS): where this
         * daemon negotiates, the packed body, to recognise a repeat; on a
         * member, the cache ids in it, which a repeat stands for */
        uint8_t *key_body[HVD_WIRE_SCHEDULE_KEYS + 1];
        size_t key_len[HVD_WIRE_SCHEDULE_KEYS + 1];
        uint32_t *key_ids[HVD_WIRE_SCHEDULE_KEYS + 1];
        uint32_t key_n[HVD_WIRE_SCHEDULE_KEYS + 1];
        uint32_t next_key;
        uint32_t *relay_via;                      /* [cross_size] or NULL: the host relaying each host (0: the root) */
        char relay_desc[HVD_WIRE_MAX_TEXT + 128]; /* this daemon's part in the relays, for status ("" = none) */

        /* ---- negotiating (single host or root) ---- */
        hvd_negotiator_t *neg;
        bool stall_warned;
        char stalled[1024]; /* last stall report, for status */
        uint64_t tp_sec[THROUGHPUT_SECS + 1], tp_bytes[THROUGHPUT_SECS + 1];
        hvd_negotiator_stats_t fast; /* reported by the workers' fast path (Done) */
        autotune_t *tune;            /* HVD_AUTOTUNE: the job's autotuner (autotune.c), or NULL */

        /* ---- root ---- */
        node_t *nodes; /* [cross_size] */
        uint32_t n_nodes_joined;
        uint32_t *node_first, *node_list; /* host c's ranks are node_list[node_first[c] .. node_first[c+1]) */
        uint64_t last_probe_usec;         /* when the hosts were last probed */
        uint32_t relay_depth;             /* levels of relays below it */

        /* ---- member ---- */
        peer_t *root;        /* where the root is */
        uint64_t root_epoch; /* the root daemon's epoch (0 = not heard yet) */
        bool joined_root;    /* NodeJoin sent */
        peer_t *relay;       /* the relay daemon it reports to, if any */

        /* ---- relay (a member relaying for others) ---- */
        relay_t *rl;        /* its group */
        early_msg_t *early; /* its group's messages that came before its own welcome */
        size_t n_early;
};

/* Whether this daemon negotiates the job (holds its table, plans its
 * schedules): the root, or the only host. */
static inline bool job_negotiates(const job_t *j) {
        return j->role != JOB_MEMBER;
}

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
        void *peer_sock;       /* ROUTER on cfg.peer_listen, or NULL */
        hvd_zap_t *zap;        /* ZAP handler, CURVE keys */
        char peer_ep[256];
        uint64_t start_usec, epoch, job_seq;
        uint64_t next_housekeeping;
        bool stopping;
        hvd_daemon_load_fn reload_fn; /* SIGHUP */
        void *reload_userdata;
        hvd_daemon_tap_fn tap; /* tests: sees every message sent */
        void *tap_userdata;
        bool feed_one_turn;                    /* tests: what is fed is one reactor turn (hvd_daemon_feed_turn) */
        uint64_t watchdog_usec, next_watchdog; /* half of WATCHDOG_USEC; 0 = off */
        size_t status_jobs, status_workers;    /* last STATUS= sent */
        zmq_pollitem_t *items;
        peer_t **item_peers;
        uint8_t *item_kind;
        size_t n_items, cap_items;
        char host[HVD_WIRE_MAX_HOST + 1];
        hvd_metrics_t metrics;
        hvd_http_t *http;            /* GET /metrics, when metrics_listen is set */
        size_t http_first;           /* its poll items: [http_first, n_items) */
        uint64_t wake_usec;          /* when the reactor last woke with work */
        uint64_t stale_log_usec;     /* last log of a stale message on a connection of no job */
        struct hvd_elastic *elastic; /* elastic jobs this daemon is the root of (elastic.c) */
        hvd_offers_t *offers;        /* hosts offered here, or this host's offer (offer.c) */
        tomb_t tombs[N_TOMBS];       /* round robin */
        size_t next_tomb;
};

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
        const char *launcher;
} job_params_t;

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

/* The earlier of two deadlines (UINT64_MAX: none); a function, so that a
 * call in either argument runs once. */
static inline uint64_t earliest(uint64_t a, uint64_t b) {
        return a < b ? a : b;
}

/* How often a daemon pings the daemons of its jobs: a fifth of
 * peer_timeout, at most every second. */
static inline uint64_t daemon_ping_usec(const hvd_daemon_t *d) {
        return HVD_MIN(d->cfg.peer_timeout_usec / 5, USEC_PER_SEC);
}

/* ---- offer.c: hosts offered to a root daemon for its elastic jobs ---- */
/* Root: a HostOffer on the peer socket (validated): kept under its host
 * name, from this connection. */
void offer_receive(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__HostOffer *m);
/* Housekeeping: this host's offer to elastic_root every heartbeat; at a
 * root, the offers whose connection closed or that are silent go.
 * Returns when to look again (UINT64_MAX: nothing to do). */
uint64_t offer_housekeeping(hvd_daemon_t *d, uint64_t now);
/* The offers held, into st (Status.offers); *mem is the array to free
 * after the reply went (NULL when none). Returns 0 or -ENOMEM. */
int offer_status(hvd_daemon_t *d, uint64_t now, Hvd__Status *st, Hvd__HostOffer ***mem);
void offer_free(hvd_daemon_t *d);

/* ---- elastic.c: membership of elastic jobs ---- */
typedef struct hvd_elastic hvd_elastic_t;
/* A worker's enrolment (from_peer: forwarded by its daemon): answered with
 * its placement once the generation is decided, or forwarded to the root. */
void elastic_enroll(hvd_daemon_t *d, const uint8_t *id, size_t id_len, Hvd__Enroll *e, bool from_peer);
/* Member daemon: the root's answer to a forwarded enrolment, or its news
 * that workers wait to join; passed to the workers. */
void elastic_placement(hvd_daemon_t *d, Hvd__Envelope *env);
void elastic_hosts_updated(hvd_daemon_t *d, Hvd__Envelope *env);
/* Root: a generation ended (lost_rank: -1 unknown), or lost a host. */
void elastic_job_aborted(hvd_daemon_t *d, const job_t *j, int lost_rank);
void elastic_host_lost(hvd_daemon_t *d, const job_t *j, uint32_t cross);
/* A local rank of an aborted generation died too: the root learns it. */
void elastic_rank_gone(hvd_daemon_t *d, job_t *j, uint32_t rank);
uint64_t elastic_housekeeping(hvd_daemon_t *d, uint64_t now);
/* Fills es (strings borrowed until the next reactor turn) when job_id is a
 * generation of an elastic job here; returns 1, else 0. */
int elastic_describe(const hvd_daemon_t *d, const char *job_id, Hvd__ElasticStatus *es);
void elastic_free(hvd_daemon_t *d);
/* Job j, a generation of an elastic job, ends (job_free) or gives way to
 * the next (its tuner then moves into the elastic job, for the next). */
void elastic_keep_tune(hvd_daemon_t *d, job_t *j);
/* The tuner kept for the generation job_id (taken: NULL when none), and
 * *generation: its elastic generation (0: job_id is not one). */
autotune_t *elastic_take_tune(hvd_daemon_t *d, const char *job_id, uint64_t *generation);

/* ---- io.c: sockets and messages ---- */
/* A socket of type with the daemon's options: no linger, the message size
 * limit, deep queues; a ROUTER also a handshake deadline and unroutable
 * sends as errors; a peer socket ZMTP heartbeats (peer_timeout). NULL on
 * failure (zmq_errno). */
void *io_socket(hvd_daemon_t *d, int type, bool peer);
/* Binds RUNTIME_DIR/name (mode socket_mode, group socket_group) into *sock
 * and its endpoint into ep. Returns 0 or < 0 (logged). */
int io_bind_local(hvd_daemon_t *d, void **sock, char *ep, size_t ep_len, const char *name);
/* Binds the peer socket on peer_listen and writes the endpoint it got to
 * RUNTIME_DIR/peer.endpoint. Returns 0 or < 0 (logged). */
int io_bind_peer(hvd_daemon_t *d);
/* Every message the daemon sends goes through these (a tap set by
 * hvd_daemon_set_tap() sees each): env packed, to the peer id of the
 * ROUTER sock; to the root or relay daemon p (a DEALER); or the packed
 * message, shared. They return 0 or a negative error. */
int io_send(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, Hvd__Envelope *env);
int io_send_peer(hvd_daemon_t *d, const peer_t *p, Hvd__Envelope *env);
int io_send_shared(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, zmq_msg_t *packed);
/* env packed (with the protocol version) into a new message. */
int io_pack(Hvd__Envelope *env, zmq_msg_t *packed);
/* An ErrorReply to the peer id of sock. */
void io_error(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, int code, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
/* Refuses another daemon's message with an Abort of job_id it will act on. */
void io_refuse_peer(hvd_daemon_t *d, const void *id, size_t id_len, const char *job_id, int code, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
/* To a local worker (nothing once it exited); a failure is logged. */
void io_send_worker(hvd_daemon_t *d, worker_t *w, Hvd__Envelope *env);
void io_send_worker_bytes(hvd_daemon_t *d, const worker_t *w, const void *bytes, size_t len);
void io_send_failed(const worker_t *w, int r);
/* Root: env to every other host that joined, packed once; a schedule goes
 * to the hosts under a relay through their relay only. */
void io_send_nodes(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env, bool schedule);
/* One message off a ROUTER socket (or the fed one): 1 with its routing id
 * and its decoded, validated envelope (the caller's), 0 when drained, < 0
 * when refused (err says why; id is filled). peer: libzmq's peer address. */
int io_recv(void *sock, uint8_t id[static 256], size_t *id_len, Hvd__Envelope **env, uid_t *uid, char *err,
            size_t err_len, char *peer, size_t peer_len);
/* One whole message off a DEALER (or the fed one). */
int io_recv_msg(zmq_msg_t *msg, void *sock);
/* Counts a message taken (r >= 0, by body) or refused (r < 0) on sock. */
void io_count(hvd_daemon_t *d, int sock, int r, const Hvd__Envelope *env);

/* ---- job.c: a job ---- */
job_t *job_create(hvd_daemon_t *d, const job_params_t *jp, char *err, size_t len);
void job_free(hvd_daemon_t *d, job_t *j);
/* Takes a finished job out of the table and frees it (a job aborted while
 * ranks were joining leaves a tomb). */
void job_remove(hvd_daemon_t *d, job_t *j);
/* Aborts the job here and tells everyone who must know: its local ranks,
 * and the other daemons (root: every host; else the root, unless the abort
 * came from it). Once; the reason is kept for status and late ranks. */
void job_abort_ex(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
#define job_abort(d, j, lost, code, ...) job_abort_ex((d), (j), false, (lost), (code), __VA_ARGS__)
/* The end of a job that is ending anyway (a local rank said goodbye). */
void job_end_quietly(hvd_daemon_t *d, job_t *j, bool from_root, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* The name of host cross_rank ("?" when unknown); its ranks as "0, 1, 2". */
const char *job_host(const job_t *j, uint32_t cross_rank);
void job_host_ranks(const job_t *j, uint32_t cross_rank, char *buf, size_t len);
void job_set_nccl_id(job_t *j, const ProtobufCBinaryData *id);
/* Whether secret is the job's (an empty one matches a job without). */
bool job_secret_is(const job_t *j, const void *secret, size_t len);
/* A job aborted lately before this hello's rank joined it, or NULL. */
const tomb_t *job_tomb_find(const hvd_daemon_t *d, const Hvd__Hello *h);
/* The RankInfo of every rank of the job's table, or (local) of each local
 * worker, over borrowed strings valid while the job is unchanged; free
 * with rank_infos_free(). Returns 0 or -ENOMEM. */
int job_rank_infos(const job_t *j, bool local, rank_infos_t *out);
void rank_infos_free(rank_infos_t *ri);
/* Records ranks in the job's table, on host cross_rank (< 0: the host each
 * RankInfo names). Returns 0, or HVD_EDUPLICATE with err saying which rank
 * is claimed twice (the table unchanged). */
int job_table_add(job_t *j, int64_t cross_rank, Hvd__RankInfo *const *ri, size_t n, char *err, size_t len);

/* ---- join.c: how a job comes together ---- */
void join_hello(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__Hello *h, uid_t uid);
/* Root: a host's NodeJoin on the peer socket. */
void join_node(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__NodeJoin *nj);
/* Root: host cross_rank (this one's own: local) joined with ranks ri. */
int join_node_joined(hvd_daemon_t *d, job_t *j, uint32_t cross_rank, bool local, const uint8_t *id, size_t id_len,
                     Hvd__RankInfo *const *ri, size_t n, const char *endpoint);
/* Member: the root's welcome (p: the root daemon it came from). */
void join_node_welcome(hvd_daemon_t *d, job_t *j, const peer_t *p, const Hvd__NodeWelcome *nw);
/* The job is complete everywhere: the local workers are welcomed and the
 * job runs. */
void join_welcome_local(hvd_daemon_t *d, job_t *j);
uint64_t join_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick);

/* ---- worker.c: the local workers ---- */
/* A local worker of job j, as its hello says, its exit watched through a
 * pidfd; NULL when out of memory. Freed with its job (worker_free). */
worker_t *worker_new(hvd_daemon_t *d, job_t *j, const uint8_t *id, size_t id_len, const Hvd__Hello *h);
void worker_free(hvd_daemon_t *d, worker_t *w);
/* The worker's process is gone (why: how); without its goodbye its job is
 * aborted. */
void worker_gone(hvd_daemon_t *d, worker_t *w, const char *why);
/* Every message on the worker socket this turn, dispatched by body. */
void worker_handle_socket(hvd_daemon_t *d);
/* Every worker whose pidfd said it exited. */
void worker_reap(hvd_daemon_t *d);
/* env to every local rank of j, packed once (skip_goodbye: not to those
 * that said goodbye); a small schedule to local rank 0 for the board. */
void worker_send_all(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env, bool skip_goodbye);
uint64_t worker_check_heartbeats(hvd_daemon_t *d, job_t *j, uint64_t now);
uint64_t worker_housekeeping(hvd_daemon_t *d, uint64_t now, uint64_t tick);

/* ---- root.c: the negotiating daemon (single host or root) ---- */
/* A local rank's readiness where this daemon negotiates: entered, or
 * held in the batch to be shared with the other local ranks' (batch.c). */
void root_ready(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Envelope *env);
/* The same readiness q of each rank in ranks, entered once (seen: count it
 * as a readiness message from each, for status). */
void root_submit(hvd_daemon_t *d, job_t *j, const uint32_t *ranks, size_t n_ranks, const Hvd__Ready *q, bool seen);
/* Ids every rank of host cross is ready for, entered once for the host
 * (own: from this host's board, not another daemon). */
void root_submit_node(hvd_daemon_t *d, job_t *j, uint32_t cross, const Hvd__NodeReady *nr, bool own);
/* Rank said goodbye: collectives waiting for it can never complete. */
void root_departed(hvd_daemon_t *d, job_t *j, uint32_t rank);
/* Every message on the peer socket this turn (other daemons'). */
void root_handle_socket(hvd_daemon_t *d);
/* The host whose connection (routing id) this is, or -1. */
int64_t root_node_of(const job_t *j, const uint8_t *id, size_t id_len);
/* The table knows every rank's host: the negotiator takes the hosts'
 * readiness host by host from now on. Returns 0 or -ENOMEM. */
int root_set_nodes(job_t *j);
/* Before sleep: the schedule of what became ready, to every rank. */
void root_send_schedules(hvd_daemon_t *d, job_t *j);
uint64_t root_check_stalls(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick);
uint64_t root_probe_nodes(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick);
/* A Ping to the peer daemon at routing id ID (no answer expected); -EHOSTUNREACH once its connection closed */
int root_ping_peer(hvd_daemon_t *d, const uint8_t *id, size_t id_len, uint64_t now);

/* ---- autotune.c: the job's autotuner, where this daemon negotiates ---- */
/* Local rank's hello asks for autotuning (the first one's settings count;
 * rank 0's says whether it keeps the CSV). */
void autotune_hello(hvd_daemon_t *d, job_t *j, const Hvd__AutotuneSpec *spec, uint32_t rank);
/* Schedule s (bytes of it scheduled) is about to go out: it counts for
 * the step being measured; it carries the pending change (s->tuning,
 * borrowed: the caller clears it before freeing s). Returns whether it
 * carries one (it must then go whole, not as a repeat). */
bool autotune_schedule(hvd_daemon_t *d, job_t *j, Hvd__Schedule *s, uint64_t bytes);
/* A job of one host with the fast path: a change waits and no schedule
 * may come to carry it, so the root sends one of its own. */
bool autotune_wants_schedule(const job_t *j);
/* The steps local rank 0 measured on the fast path (Done.tune_step_*). */
void autotune_worker_steps(hvd_daemon_t *d, job_t *j, const Hvd__Done *dn);
/* For status, valid while the job is unchanged (NULL: not tuned here). */
Hvd__AutotuneStatus *autotune_status(const job_t *j);
void autotune_free(autotune_t **t);

/* ---- batch.c: a host's readiness of one turn ---- */
/* Appends rank's readiness (taken, freed on failure) to this turn's batch.
 * Returns 0 or -ENOMEM. */
int batch_append(job_t *j, uint32_t rank, Hvd__Ready *ready);
/* A join in local rank readiness q stops the pool for good: a rank that
 * joined sends nothing more, and the others' first-step names would wait
 * POOL_HOLD_USEC for its. Wherever q goes next (held or entered at once). */
void batch_note_join(job_t *j, const Hvd__Ready *q);
/* Whether local rank readiness q waits in the batch (at the root, which
 * otherwise enters it at once): a first step's kind, for the pool, or
 * anything behind what waits, which must not overtake it. */
bool batch_holds(job_t *j, const Hvd__Ready *q);
/* w's readiness q (taken) into the batch: to the pool when it is a first
 * step's kind, else after what the pool holds. */
void batch_add(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Ready *q);
/* A member's local rank's readiness: its cached ids of every local rank
 * are tallied, the rest joins the batch (taken from env). */
void batch_ready(hvd_daemon_t *d, job_t *j, worker_t *w, Hvd__Envelope *env);
/* Ids every local rank posted on the board, sent by the rank that
 * completed them: node-level readiness. Returns false when the job ended. */
bool batch_node_ready(hvd_daemon_t *d, job_t *j, worker_t *w, const Hvd__Ready *q);
/* A member's local rank said goodbye: no more tallying; the root is told. */
void batch_departed(hvd_daemon_t *d, job_t *j, uint32_t rank);
/* A schedule on its way to the local ranks: which ids are of every local
 * rank; what was released is tallied again. */
void batch_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s);
/* The end of a turn: the batch goes to the root (at the root: entered),
 * with the names every local rank sent alike; the pool holds the rest. */
void batch_flush(hvd_daemon_t *d, job_t *j);
/* Everything now, what the pool holds too (something must not overtake it). */
void batch_flush_all(hvd_daemon_t *d, job_t *j);
void batch_clear(batch_t *b);
void batch_free(batch_t *b);
uint64_t batch_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick);
/* Appends id and its wait to a pair of growing arrays (n of cap used).
 * Returns 0 or -ENOMEM (nothing appended). */
int ids_push(uint32_t **ids, uint64_t **waited, size_t *n, size_t *cap, uint32_t id, uint64_t w);

/* ---- pool.c: a first step's new requests, held for every local rank's ---- */
pool_t *pool_new(uint32_t local_size);
void pool_free(pool_t *p);
/* Whether q is a first step's kind (new requests alone, of collectives of
 * every rank) and the pool takes such (p may be NULL: no). */
bool pool_wants(const pool_t *p, const Hvd__Ready *q);
/* A local rank joined or left: nothing more is pooled (p may be NULL). */
void pool_stop(pool_t *p);
bool pool_holds(const pool_t *p);
/* Holds q (taken; pool_wants said yes) of rank, local rank local_rank.
 * Returns 0, 1 when a name of q can no longer complete alike (what is
 * held should go: pool_release), or -ENOMEM. */
int pool_add(pool_t *p, uint32_t rank, uint32_t local_rank, Hvd__Ready *q, uint64_t now);
/* The names every local rank sent alike, out of what is held, as one
 * SharedReady for all the local ranks of j (NULL: none, or no memory). */
Hvd__SharedReady *pool_take(pool_t *p, const job_t *j);
/* Everything held into j's batch, in the order it came (p may be NULL).
 * Returns 0 or -ENOMEM. */
int pool_release(pool_t *p, job_t *j);
/* Whether what is held waited POOL_HOLD_USEC; else *due says when it will
 * have (untouched when nothing is held). */
bool pool_expired(const pool_t *p, uint64_t now, uint64_t *due);

/* ---- tally.c: who posted each cached id ---- */
int tally_init(tally_t *t, uint32_t n_parts);
void tally_free(tally_t *t);
/* id is of every contributor (of_all) or not, as a schedule showed; a
 * released id is tallied again. Returns 0, -ENOMEM or -E2BIG. */
int tally_learn(tally_t *t, uint32_t id, bool of_all);
/* tally_learn over a schedule's ids (a repeat: those kept under its key),
 * of_all telling whether an op is of every contributor. */
int tally_learn_schedule(tally_t *t, const Hvd__Schedule *s, const uint32_t *kept, uint32_t n_kept,
                         bool (*of_all)(const Hvd__Op *op, void *userdata), void *userdata);
void tally_unsplit(tally_t *t, uint32_t id);
/* Whether id is tallied (else it goes on contributor by contributor). */
bool tally_counts(const tally_t *t, uint32_t id);
bool tally_posted(const tally_t *t, uint32_t id, uint32_t part);
/* part posted id (tallied), ready since at. Returns 1 when that completed
 * it (*waited: since its first readiness; the round starts anew), 0 while
 * others are missing, -EEXIST when part posted it already this round. */
int tally_post(tally_t *t, uint32_t id, uint32_t part, uint64_t at, uint64_t now, uint64_t *waited);
/* Every partial id goes contributor by contributor: fn gets each one's
 * ids, which are released (not tallied) until their schedule passes.
 * Returns 0 or fn's first error. */
typedef int (*tally_release_fn)(void *userdata, uint32_t part, const uint32_t *ids, const uint64_t *waited, size_t n);
int tally_release(tally_t *t, uint64_t now, tally_release_fn fn, void *userdata);
/* Whether the oldest partial id waited past hold_usec (oldest refreshed). */
bool tally_expired(tally_t *t, uint64_t now, uint64_t hold_usec);

/* ---- tree.c: the relay tree ---- */
/* Root: places the other hosts of a large job under relays (relay_via).
 * Returns 0 (no relays: relay_via stays NULL) or -ENOMEM. */
int tree_assign(hvd_daemon_t *d, job_t *j);
/* The host c reports to (0: the root); whether host h is under relay r. */
uint32_t tree_parent(const job_t *j, uint32_t c);
bool tree_under(const job_t *j, uint32_t h, uint32_t r);
/* Member: the tree of the root's welcome, checked (every host reaches the
 * root, every relay has an endpoint) into relay_via; *n_members: the hosts
 * this one relays for, itself included. Returns 0, -EPROTO or -ENOMEM. */
int tree_take(job_t *j, const Hvd__NodeWelcome *nw, uint32_t *n_members);

/* ---- uplink.c: a member's link to its root ---- */
/* The DEALER to the root daemon at endpoint, shared by its jobs (made, or
 * made again after it was lost); NULL on failure (logged). */
peer_t *uplink_peer(hvd_daemon_t *d, const char *endpoint);
void uplink_send_root(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env);
/* A NodeReady on its way to the root: through this host's relay, if any. */
void uplink_send_up(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env);
/* Every message from root daemon p this turn. */
void uplink_handle_socket(hvd_daemon_t *d, peer_t *p);
uint64_t uplink_housekeeping(hvd_daemon_t *d, uint64_t now, uint64_t tick);

/* ---- relay.c: a relay daemon of a large job ---- */
/* Member: the relay tree of the root's welcome: this daemon relays for a
 * group, reports through a relay, or neither. False when the job ended. */
bool relay_setup(hvd_daemon_t *d, job_t *j, const Hvd__NodeWelcome *nw);
void relay_free(relay_t *rl);
/* A NodeReady of a host of the group (nr taken). */
void relay_receive(hvd_daemon_t *d, job_t *j, const uint8_t *id, size_t id_len, Hvd__NodeReady *nr);
/* What the group sent before this daemon's own welcome, now. */
void relay_replay_early(hvd_daemon_t *d, job_t *j);
/* This host's own readiness of the turn joins the group's (nr the caller's). */
void relay_take_own(hvd_daemon_t *d, job_t *j, const Hvd__NodeReady *nr);
/* A schedule of the root on its way: what the group tallies, and the
 * schedule to every host of the group. */
void relay_learn(hvd_daemon_t *d, job_t *j, const Hvd__Schedule *s);
void relay_forward(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env);
/* The end of a turn: what the group made ready, one message up. */
void relay_flush(hvd_daemon_t *d, job_t *j);
uint64_t relay_housekeeping(hvd_daemon_t *d, job_t *j, uint64_t now, uint64_t tick);
/* A rank of the group this daemon relays for said goodbye. */
bool relay_group_departing(const job_t *j);
void relay_log_totals(const job_t *j);

/* ---- control.c: hvdctl ---- */
/* Every request on the control socket this turn. */
void control_handle_socket(hvd_daemon_t *d);
/* Rank 0's timeline started or stopped: a waiting hvdctl is answered. */
void control_timeline_answer(hvd_daemon_t *d, worker_t *w, const Hvd__TimelineControl *tc);
/* The metrics text (hvdctl metrics, GET /metrics); *body is the caller's. */
int control_render_metrics(void *userdata, char **body, size_t *len);

/* ---- loop.c: the reactor ---- */
/* End of a turn: batches go on, schedules go out. */
void loop_before_sleep(hvd_daemon_t *d);
/* Every module's periodic work, as due; arms the next deadline. */
void loop_housekeeping(hvd_daemon_t *d, uint64_t now);

/* ---- service.c: systemd ---- */
/* sd_notify(state), spoken directly without libsystemd. */
void service_notify(const char *state);
/* Half of WATCHDOG_USEC when the watchdog is for this process, else 0. */
uint64_t service_watchdog_usec(void);
/* STATUS= when the counts of jobs or workers changed. */
void service_notify_status(hvd_daemon_t *d);
/* A signal off the signalfd: SIGHUP reloads, SIGTERM/SIGINT stop. */
void service_handle_signal(hvd_daemon_t *d);

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
extern __thread fed_frame_t *fed;

#endif
