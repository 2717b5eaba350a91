/* check_daemon.c — the daemon's message handlers without processes or
 * connections: a real hvd_daemon_t (its sockets bound in a private runtime
 * directory, never connected) is fed envelopes through hvd_daemon_feed()
 * as if they came from its workers, hvdctl, other daemons or a root
 * daemon, its clock is moved with hvd_daemon_feed_time(), and every
 * message it sends is caught by a tap (hvd_daemon_set_tap) and decoded:
 * each test asserts what the daemon says, to whom. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "coordinator.h"
#include "hvd.h"
#include "hvd.pb-c.h"
#include "log.h"
#include "negotiate.h"
#include "util.h"
#include "wire.h"

#define MAX_SENT 256

/* A message the daemon sent. */
typedef struct sent {
        hvd_daemon_source_t to;
        char id[256]; /* routing id, or a root daemon's endpoint */
        Hvd__Envelope *env;
} sent_t;

static struct {
        char dir[64];
        hvd_daemon_t *d;
        sent_t sent[MAX_SENT];
        size_t n_sent;
} T;

static void tap(void *userdata, hvd_daemon_source_t to, const void *id, size_t id_len, const void *data, size_t len) {
        (void) userdata;
        ck_assert_uint_lt(T.n_sent, MAX_SENT);
        sent_t *s = &T.sent[T.n_sent++];
        char err[256];
        s->to = to;
        snprintf(s->id, sizeof s->id, "%.*s", (int) id_len, (const char *) id);
        ck_assert_msg(hvd_wire_decode(data, len, 0, &s->env, err, sizeof err) == 0, "the daemon sent %s", err);
}

static void forget_sent(void) {
        for (size_t i = 0; i < T.n_sent; i++)
                hvd_wire_free(&T.sent[i].env);
        T.n_sent = 0;
}

static void start(const char *peer_listen) {
        hvd_log_max_level = getenv("HVD_TEST_LOG") ? LOG_DEBUG : -1;
        snprintf(T.dir, sizeof T.dir, "/tmp/hvd-check-daemon.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(T.dir));
        hvd_daemon_config_t cfg;
        hvd_daemon_config_init(&cfg);
        snprintf(cfg.runtime_dir, sizeof cfg.runtime_dir, "%s", T.dir);
        if (peer_listen)
                snprintf(cfg.peer_listen, sizeof cfg.peer_listen, "%s", peer_listen);
        ck_assert_int_eq(hvd_daemon_new(&cfg, &T.d), 0);
        hvd_daemon_set_tap(T.d, tap, NULL);
}

static void stop(void) {
        hvd_daemon_destroy(&T.d);
        ck_assert_ptr_null(T.d);
        forget_sent();
        char path[128];
        snprintf(path, sizeof path, "%s/peer.endpoint", T.dir);
        unlink(path);
        rmdir(T.dir);
}

/* Feeds env as if it came from src over connection id. */
static void feed(hvd_daemon_source_t src, const char *id, Hvd__Envelope *env) {
        env->version = HVD_PROTOCOL_VERSION;
        size_t len = protobuf_c_message_get_packed_size(&env->base);
        uint8_t *buf = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(buf);
        protobuf_c_message_pack(&env->base, buf);
        ck_assert_int_eq(hvd_daemon_feed(T.d, src, id, strlen(id), getuid(), buf, len), 0);
        free(buf);
}

/* The n-th message (0: the first) of kind body sent to id, or NULL. */
static const Hvd__Envelope *sent_to(const char *id, Hvd__Envelope__BodyCase body, size_t n) {
        for (size_t i = 0; i < T.n_sent; i++)
                if (strcmp(T.sent[i].id, id) == 0 && T.sent[i].env->body_case == body && n-- == 0)
                        return T.sent[i].env;
        return NULL;
}

static size_t count_sent(const char *id, Hvd__Envelope__BodyCase body) {
        size_t n = 0;
        while (sent_to(id, body, n))
                n++;
        return n;
}

/* A job's settings for hello(): one host unless hosts is set. */
typedef struct job_spec {
        const char *job;
        uint32_t size, local_size, cross_rank, cross_size;
        char **hosts;
        const char *root_peer;
        uint64_t stall_check_usec, stall_shutdown_usec;
} job_spec_t;

/* Rank rank (local rank local_rank) of the job says hello on connection id. */
static void hello(const job_spec_t *js, const char *id, uint32_t rank, uint32_t local_rank) {
        Hvd__Hello h = HVD__HELLO__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        static uint8_t secret[] = { 1, 2, 3, 4 };
        h.job_id = (char *) js->job;
        h.secret.data = secret;
        h.secret.len = sizeof secret;
        h.world_size = js->size;
        h.local_size = js->local_size ? js->local_size : js->size;
        h.rank = rank;
        h.local_rank = local_rank;
        h.pid = (uint32_t) getpid();
        h.host = (char *) "testhost";
        h.fusion_threshold = -1;
        h.cross_rank = js->cross_rank;
        h.cross_size = js->cross_size;
        h.hosts = js->hosts;
        h.n_hosts = js->hosts ? js->cross_size : 0;
        h.root_peer = (char *) (js->root_peer ? js->root_peer : "");
        h.stall_check_usec = js->stall_check_usec;
        h.stall_shutdown_usec = js->stall_shutdown_usec;
        env.body_case = HVD__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        feed(HVD_DAEMON_FROM_WORKER, id, &env);
}

/* Connection id's rank asks for a collective of kind of float32 tensor
 * name of n_dims dimensions (a sum, where it reduces). */
static void ready_kind(const char *id, const char *name, Hvd__Kind kind, const int64_t *shape, size_t n_dims) {
        Hvd__Request q = HVD__REQUEST__INIT;
        Hvd__Request *qs[] = { &q };
        Hvd__Ready r = HVD__READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        q.name = (char *) name;
        q.kind = kind;
        q.dtype = HVD_FLOAT32;
        q.shape = (int64_t *) shape;
        q.n_shape = n_dims;
        q.reduce_op = HVD_REDUCE_SUM;
        q.prescale = q.postscale = 1.0;
        q.device = -1;
        r.requests = qs;
        r.n_requests = 1;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &r;
        feed(HVD_DAEMON_FROM_WORKER, id, &env);
}

static void ready_allreduce(const char *id, const char *name, const int64_t *shape, size_t n_dims) {
        ready_kind(id, name, HVD__KIND__KIND_ALLREDUCE, shape, n_dims);
}

/* hvdctl's status of one job (its first), as the daemon answers. */
static const Hvd__JobStatus *status_of(void) {
        Hvd__StatusRequest q = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        q.job_id = (char *) "";
        env.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        env.status_request = &q;
        size_t before = count_sent("ctl", HVD__ENVELOPE__BODY_STATUS);
        feed(HVD_DAEMON_FROM_CONTROL, "ctl", &env);
        const Hvd__Envelope *st = sent_to("ctl", HVD__ENVELOPE__BODY_STATUS, before);
        ck_assert_ptr_nonnull(st);
        ck_assert_uint_eq(st->status->n_jobs, 1);
        return st->status->jobs[0];
}

START_TEST(test_join_welcomes_every_rank_once_all_said_hello) {
        /* a job of 3 ranks on one host: nothing until the third hello,
         * then a welcome to each with its rank and the whole table */
        start(NULL);
        job_spec_t js = { .job = "join", .size = 3 };
        hello(&js, "w0", 0, 0);
        hello(&js, "w2", 2, 2);
        ck_assert_uint_eq(count_sent("w0", HVD__ENVELOPE__BODY_WELCOME), 0);
        hello(&js, "w1", 1, 1);
        const char *ids[] = { "w0", "w1", "w2" };
        for (uint32_t r = 0; r < 3; r++) {
                const Hvd__Envelope *e = sent_to(ids[r], HVD__ENVELOPE__BODY_WELCOME, 0);
                ck_assert_ptr_nonnull(e);
                ck_assert_uint_eq(e->welcome->rank, r);
                ck_assert_uint_eq(e->welcome->local_rank, r);
                ck_assert_uint_eq(e->welcome->size, 3);
                ck_assert_uint_eq(e->welcome->local_size, 3);
                ck_assert_uint_eq(e->welcome->n_ranks, 3);
                for (uint32_t k = 0; k < 3; k++) {
                        ck_assert_uint_eq(e->welcome->ranks[k]->rank, k);
                        ck_assert_uint_eq(e->welcome->ranks[k]->pid, (uint32_t) getpid());
                        ck_assert_str_eq(e->welcome->ranks[k]->host, "testhost");
                }
                ck_assert_uint_eq(count_sent(ids[r], HVD__ENVELOPE__BODY_WELCOME), 1);
        }
        /* a second hello on a connection, and a rank taken twice, are refused */
        hello(&js, "w1", 1, 1);
        const Hvd__Envelope *e = sent_to("w1", HVD__ENVELOPE__BODY_ERROR, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e->error->message, "hello sent twice on one connection");
        hello(&js, "w9", 1, 1);
        e = sent_to("w9", HVD__ENVELOPE__BODY_ERROR, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e->error->message, "job join is running: rank 1 cannot join any more");
        stop();
}
END_TEST

START_TEST(test_mismatched_shapes_are_an_error_for_every_rank) {
        start(NULL);
        job_spec_t js = { .job = "mismatch", .size = 2 };
        hello(&js, "w0", 0, 0);
        hello(&js, "w1", 1, 1);
        forget_sent();
        ready_allreduce("w0", "grad.fc1", (int64_t[]){ 4 }, 1);
        ready_allreduce("w1", "grad.fc1", (int64_t[]){ 8, 2 }, 2);
        /* at once: nothing waits for parameters that cannot agree */
        for (int r = 0; r < 2; r++) {
                const Hvd__Envelope *e = sent_to(r ? "w1" : "w0", HVD__ENVELOPE__BODY_SCHEDULE, 0);
                ck_assert_ptr_nonnull(e);
                ck_assert_uint_eq(e->schedule->n_ops, 0);
                ck_assert_uint_eq(e->schedule->n_errors, 1);
                ck_assert_str_eq(e->schedule->errors[0]->name, "grad.fc1");
                ck_assert_int_eq(e->schedule->errors[0]->code, HVD_EMISMATCH);
                ck_assert_str_eq(e->schedule->errors[0]->message,
                                 "allreduce 'grad.fc1': rank 1 sent shape [8, 2], rank 0 sent [4]");
        }
        /* the job goes on: the same tensor alike on both ranks is scheduled
         * (by the id its error named, its name known to the ranks) */
        uint32_t id = sent_to("w0", HVD__ENVELOPE__BODY_SCHEDULE, 0)->schedule->errors[0]->id;
        ready_allreduce("w0", "grad.fc1", (int64_t[]){ 4 }, 1);
        ready_allreduce("w1", "grad.fc1", (int64_t[]){ 4 }, 1);
        const Hvd__Envelope *e = sent_to("w1", HVD__ENVELOPE__BODY_SCHEDULE, 1);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->schedule->n_errors, 0);
        ck_assert_uint_eq(e->schedule->n_ops, 1);
        ck_assert_uint_eq(e->schedule->ops[0]->n_entries, 1);
        ck_assert_uint_eq(e->schedule->ops[0]->entries[0]->id, id);
        ck_assert_uint_eq(e->schedule->ops[0]->entries[0]->count, 4);
        stop();
}
END_TEST

START_TEST(test_join_fails_the_others_allgather_at_once) {
        /* 3 ranks on one host; rank 0 joins before anything is held, then
         * ranks 1 and 2 submit a first step's allgather: no rank waits on
         * another's copy of it (the joined one never sends it), and the
         * error reaches every rank in that turn, the clock not moved; an
         * allreduce runs with rank 0 joined; the last join is rank 2 */
        start(NULL);
        job_spec_t js = { .job = "joined", .size = 3 };
        const char *ids[] = { "w0", "w1", "w2" };
        for (uint32_t r = 0; r < 3; r++)
                hello(&js, ids[r], r, r);
        forget_sent();
        ready_kind("w0", HVD_JOIN_NAME, HVD__KIND__KIND_JOIN, NULL, 0);
        ready_kind("w1", "g", HVD__KIND__KIND_ALLGATHER, (int64_t[]){ 2, 3 }, 2);
        ck_assert_uint_eq(count_sent("w1", HVD__ENVELOPE__BODY_SCHEDULE), 0);
        ready_kind("w2", "g", HVD__KIND__KIND_ALLGATHER, (int64_t[]){ 2, 3 }, 2);
        for (uint32_t r = 0; r < 3; r++) {
                ck_assert_uint_eq(count_sent(ids[r], HVD__ENVELOPE__BODY_SCHEDULE), 1);
                const Hvd__Schedule *s = sent_to(ids[r], HVD__ENVELOPE__BODY_SCHEDULE, 0)->schedule;
                ck_assert_uint_eq(s->n_ops, 0);
                ck_assert_uint_eq(s->n_errors, 1);
                ck_assert_str_eq(s->errors[0]->name, "g");
                ck_assert_int_eq(s->errors[0]->code, HVD_EJOINED);
                ck_assert_str_eq(s->errors[0]->message,
                                 "allgather 'g' is not supported while rank 0 has joined: only allreduce runs until "
                                 "every rank has joined (specify sparse_to_dense=True if using DistributedOptimizer)");
                ck_assert_int_eq(s->join_done_last_rank, -1);
        }
        ready_allreduce("w1", "a", (int64_t[]){ 4 }, 1);
        ready_allreduce("w2", "a", (int64_t[]){ 4 }, 1);
        const Hvd__Schedule *s = sent_to("w0", HVD__ENVELOPE__BODY_SCHEDULE, 1)->schedule;
        ck_assert_uint_eq(s->n_errors, 0);
        ck_assert_uint_eq(s->n_ops, 1);
        ck_assert_uint_eq(s->ops[0]->n_joined, 1);
        ck_assert_uint_eq(s->ops[0]->joined[0], 0);
        ready_kind("w1", HVD_JOIN_NAME, HVD__KIND__KIND_JOIN, NULL, 0);
        ck_assert_uint_eq(count_sent("w1", HVD__ENVELOPE__BODY_SCHEDULE), 2);
        ready_kind("w2", HVD_JOIN_NAME, HVD__KIND__KIND_JOIN, NULL, 0);
        for (uint32_t r = 0; r < 3; r++) {
                ck_assert_uint_eq(count_sent(ids[r], HVD__ENVELOPE__BODY_SCHEDULE), 3);
                ck_assert_int_eq(sent_to(ids[r], HVD__ENVELOPE__BODY_SCHEDULE, 2)->schedule->join_done_last_rank, 2);
        }
        ck_assert_uint_eq(count_sent("w0", HVD__ENVELOPE__BODY_ABORT), 0);
        stop();
}
END_TEST

START_TEST(test_stall_is_shown_then_aborts_the_job) {
        /* rank 0 waits on a tensor rank 1 never submits: shown by status
         * after the check time, the job aborted after the shutdown time (a
         * first step's name waits POOL_HOLD_USEC, 500 ms, for the other
         * local rank's before the negotiator takes it rank by rank) */
        start(NULL);
        job_spec_t js = {
                .job = "stall", .size = 2, .stall_check_usec = USEC_PER_SEC, .stall_shutdown_usec = 3 * USEC_PER_SEC
        };
        hello(&js, "w0", 0, 0);
        hello(&js, "w1", 1, 1);
        ready_allreduce("w0", "stuck", (int64_t[]){ 16 }, 1);
        hvd_daemon_feed_time(T.d, 200 * USEC_PER_MSEC);
        ck_assert_str_eq(status_of()->stalled, "");
        hvd_daemon_feed_time(T.d, 600 * USEC_PER_MSEC);
        ck_assert_str_eq(status_of()->stalled, "");
        hvd_daemon_feed_time(T.d, 1700 * USEC_PER_MSEC);
        ck_assert_str_eq(status_of()->stalled, "'stuck' ready on ranks [0], missing ranks [1]");
        ck_assert_uint_eq(count_sent("w0", HVD__ENVELOPE__BODY_ABORT), 0);
        hvd_daemon_feed_time(T.d, 3500 * USEC_PER_MSEC);
        for (int r = 0; r < 2; r++) {
                const Hvd__Envelope *e = sent_to(r ? "w1" : "w0", HVD__ENVELOPE__BODY_ABORT, 0);
                ck_assert_ptr_nonnull(e);
                ck_assert_int_eq(e->abort->code, HVD_ETIMEOUT);
                ck_assert_str_eq(e->abort->reason,
                                 "stalled for more than 3 s: 'stuck' ready on ranks [0], missing ranks [1]");
        }
        stop();
}
END_TEST

START_TEST(test_dead_worker_aborts_its_job_on_the_others) {
        start(NULL);
        job_spec_t js = { .job = "dead", .size = 3 };
        hello(&js, "w0", 0, 0);
        hello(&js, "w1", 1, 1);
        hello(&js, "w2", 2, 2);
        forget_sent();
        ck_assert_int_eq(hvd_daemon_feed_exit(T.d, "w1", 2), 0);
        char want[256];
        snprintf(want, sizeof want, "rank 1 (pid %d on host testhost) exited without calling hvd_shutdown",
                 (int) getpid());
        for (int r = 0; r < 3; r += 2) {
                const Hvd__Envelope *e = sent_to(r ? "w2" : "w0", HVD__ENVELOPE__BODY_ABORT, 0);
                ck_assert_ptr_nonnull(e);
                ck_assert_int_eq(e->abort->lost_rank, 1);
                ck_assert_str_eq(e->abort->reason, want);
        }
        ck_assert_uint_eq(count_sent("w1", HVD__ENVELOPE__BODY_ABORT), 0); /* it is gone */
        ck_assert_str_eq(status_of()->state, "aborted");
        /* a survivor still submitting is told its job is over */
        ready_allreduce("w0", "x", (int64_t[]){ 1 }, 1);
        const Hvd__Envelope *e = sent_to("w0", HVD__ENVELOPE__BODY_ERROR, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->error->code, HVD_EABORTED);
        ck_assert_msg(strncmp(e->error->message, "stale readiness refused: job dead (epoch ", 41) == 0, "%s",
                      e->error->message);
        ck_assert_ptr_nonnull(strstr(e->error->message, want));
        stop();
}
END_TEST

/* ---- a relay ---- */

#define ROOT_EP "tcp://127.0.0.1:9"

/* The root's welcome of a job of 4 hosts of one rank each, in which host
 * 1 (this daemon, at ep) relays for hosts 2 and 3. */
static void relay_welcome(const char *job, char **hosts, const char *ep) {
        Hvd__RankInfo ri[4], *rp[4];
        uint32_t via[4] = { 0, 1, 1, 1 };
        char *eps[4] = { (char *) "", (char *) ep, (char *) "", (char *) "" };
        for (uint32_t r = 0; r < 4; r++) {
                hvd__rank_info__init(&ri[r]);
                ri[r].rank = r;
                ri[r].cross_rank = r;
                ri[r].host = hosts[r];
                ri[r].data_addr = (char *) "127.0.0.1:1";
                ri[r].pid = (uint32_t) getpid();
                rp[r] = &ri[r];
        }
        Hvd__NodeWelcome nw = HVD__NODE_WELCOME__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nw.job_id = (char *) job;
        nw.ranks = rp;
        nw.n_ranks = 4;
        nw.epoch = 7;
        nw.fusion_threshold = 64 << 20;
        nw.cycle_time_usec = 1000;
        nw.relay_via = via;
        nw.n_relay_via = 4;
        nw.relay_endpoint = eps;
        nw.n_relay_endpoint = 4;
        env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
        env.node_welcome = &nw;
        feed(HVD_DAEMON_FROM_ROOT, ROOT_EP, &env);
}

/* Host host of the group tells its relay (this daemon) it is ready for
 * the cached ids (none: the hello that names its connection). */
static void member_ready(const char *job, const char *id, uint32_t host, const uint32_t *ids, size_t n) {
        static uint8_t secret[] = { 1, 2, 3, 4 };
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nr.job_id = (char *) job;
        nr.relay_host = host;
        nr.relay_secret.data = secret;
        nr.relay_secret.len = sizeof secret;
        nr.node_cached = (uint32_t *) ids;
        nr.n_node_cached = n;
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        feed(HVD_DAEMON_FROM_PEER, id, &env);
}

/* The root schedules cached id 0 (tensor "t", every rank), kept under key 1. */
static void root_schedules_id0(const char *job) {
        Hvd__Entry en = HVD__ENTRY__INIT, *enp[] = { &en };
        Hvd__Op op = HVD__OP__INIT, *opp[] = { &op };
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        Hvd__JobSchedule js = HVD__JOB_SCHEDULE__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        en.name = (char *) "t";
        en.id = 0;
        en.count = 4;
        en.shape = (int64_t[]){ 4 };
        en.n_shape = 1;
        op.kind = HVD__KIND__KIND_ALLREDUCE;
        op.dtype = HVD_FLOAT32;
        op.reduce_op = HVD_REDUCE_SUM;
        op.prescale = op.postscale = 1.0;
        op.entries = enp;
        op.n_entries = 1;
        s.seq = 1;
        s.ops = opp;
        s.n_ops = 1;
        s.join_done_last_rank = -1;
        s.keep_key = 1;
        js.job_id = (char *) job;
        js.schedule = &s;
        env.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
        env.job_schedule = &js;
        feed(HVD_DAEMON_FROM_ROOT, ROOT_EP, &env);
}

/* The node-level ids of what this daemon sent the root for hosts, or -1
 * when it sent none for exactly those hosts. */
static long relayed_ids(const uint32_t *hosts, size_t n_hosts, uint32_t *ids, size_t cap) {
        for (size_t i = 0; i < T.n_sent; i++) {
                const Hvd__Envelope *e = T.sent[i].env;
                if (strcmp(T.sent[i].id, ROOT_EP) != 0 || e->body_case != HVD__ENVELOPE__BODY_NODE_READY)
                        continue;
                for (size_t k = 0; k < e->node_ready->n_relayed; k++) {
                        const Hvd__RelayedReady *rr = e->node_ready->relayed[k];
                        if (rr->n_hosts != n_hosts || memcmp(rr->hosts, hosts, n_hosts * sizeof *hosts) != 0)
                                continue;
                        for (size_t m = 0; m < rr->n_node_cached && m < cap; m++)
                                ids[m] = rr->node_cached[m];
                        return (long) rr->n_node_cached;
                }
        }
        return -1;
}

START_TEST(test_relay_merges_what_every_host_of_its_group_posted) {
        /* host 1 relays for hosts 2 and 3: a cached id goes to the root
         * once, for the three of them, when the last of them posted it */
        start("tcp://127.0.0.1:*");
        char ep[256];
        FILE *f = fopen((snprintf(ep, sizeof ep, "%s/peer.endpoint", T.dir), ep), "r");
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(ep, sizeof ep, f));
        fclose(f);
        ep[strcspn(ep, "\n")] = 0;
        char *hosts[] = { "h0", "h1", "h2", "h3" };
        job_spec_t js = { .job = "relay",
                          .size = 4,
                          .local_size = 1,
                          .cross_rank = 1,
                          .cross_size = 4,
                          .hosts = hosts,
                          .root_peer = ROOT_EP };
        hello(&js, "w1", 1, 0);
        const Hvd__Envelope *e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_JOIN, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->node_join->cross_rank, 1);
        ck_assert_uint_eq(e->node_join->n_ranks, 1);
        relay_welcome("relay", hosts, ep);
        e = sent_to("w1", HVD__ENVELOPE__BODY_WELCOME, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->welcome->rank, 1);
        ck_assert_uint_eq(e->welcome->cross_size, 4);
        member_ready("relay", "p2", 2, NULL, 0);
        member_ready("relay", "p3", 3, NULL, 0);
        root_schedules_id0("relay");
        ck_assert_ptr_nonnull(sent_to("w1", HVD__ENVELOPE__BODY_SCHEDULE, 0));
        ck_assert_ptr_nonnull(sent_to("p2", HVD__ENVELOPE__BODY_JOB_SCHEDULE, 0)); /* passed on */
        ck_assert_ptr_nonnull(sent_to("p3", HVD__ENVELOPE__BODY_JOB_SCHEDULE, 0));
        forget_sent();

        uint32_t id0 = 0, got[4];
        const uint32_t all[] = { 1, 2, 3 };
        member_ready("relay", "p2", 2, &id0, 1);
        /* this host's own rank */
        Hvd__Ready r = HVD__READY__INIT;
        Hvd__Envelope renv = HVD__ENVELOPE__INIT;
        r.cached = &id0;
        r.n_cached = 1;
        renv.body_case = HVD__ENVELOPE__BODY_READY;
        renv.ready = &r;
        feed(HVD_DAEMON_FROM_WORKER, "w1", &renv);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 0);
        member_ready("relay", "p3", 3, &id0, 1);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 1);
        ck_assert_int_eq(relayed_ids(all, 3, got, 4), 1);
        ck_assert_uint_eq(got[0], 0);

        /* a partial round held past its time goes host by host, so that the
         * root's stall inspector can name who is missing */
        forget_sent();
        member_ready("relay", "p2", 2, &id0, 1);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 0);
        hvd_daemon_feed_time(T.d, 2 * USEC_PER_SEC);
        const uint32_t h2[] = { 2 };
        ck_assert_int_eq(relayed_ids(h2, 1, got, 4), 1);
        ck_assert_uint_eq(got[0], 0);

        /* a host not in the group is refused with an abort of the job */
        member_ready("relay", "p9", 7, NULL, 0);
        e = sent_to("p9", HVD__ENVELOPE__BODY_ABORT, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e->abort->reason, "job relay: host 7 is not in the relay group of this daemon (host h1)");
        stop();
}
END_TEST

/* A Ready of new requests of allreduces of the float32 tensors named. */
static void ready_names(const char *id, const char *const *names, size_t n) {
        Hvd__Request q[8], *qs[8];
        ck_assert_uint_le(n, 8);
        for (size_t i = 0; i < n; i++) {
                hvd__request__init(&q[i]);
                q[i].name = (char *) names[i];
                q[i].kind = HVD__KIND__KIND_ALLREDUCE;
                q[i].dtype = HVD_FLOAT32;
                q[i].shape = (int64_t[]){ 3 };
                q[i].n_shape = 1;
                q[i].reduce_op = HVD_REDUCE_SUM;
                q[i].prescale = q[i].postscale = 1.0;
                q[i].device = -1;
                qs[i] = &q[i];
        }
        Hvd__Ready r = HVD__READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        r.requests = qs;
        r.n_requests = n;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &r;
        feed(HVD_DAEMON_FROM_WORKER, id, &env);
}

/* This daemon is host 1 of a job of 2 hosts of local ranks each (at
 * most 4): its ranks local..2*local-1 say hello on connections "w<rank>"
 * and the root welcomes the job. */
static void second_host(const char *job, uint32_t local) {
        ck_assert_uint_le(local, 4);
        char *hosts[] = { "h0", "h1" };
        job_spec_t js = { .job = job,
                          .size = 2 * local,
                          .local_size = local,
                          .cross_rank = 1,
                          .cross_size = 2,
                          .hosts = hosts,
                          .root_peer = ROOT_EP };
        char id[8];
        for (uint32_t l = 0; l < local; l++) {
                snprintf(id, sizeof id, "w%u", local + l);
                hello(&js, id, local + l, l);
        }
        Hvd__RankInfo ri[8], *rp[8];
        for (uint32_t r = 0; r < 2 * local; r++) {
                hvd__rank_info__init(&ri[r]);
                ri[r].rank = r;
                ri[r].local_rank = r % local;
                ri[r].cross_rank = r / local;
                ri[r].host = hosts[r / local];
                ri[r].data_addr = (char *) "127.0.0.1:1";
                rp[r] = &ri[r];
        }
        Hvd__NodeWelcome nw = HVD__NODE_WELCOME__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nw.job_id = (char *) job;
        nw.ranks = rp;
        nw.n_ranks = 2 * local;
        nw.epoch = 7;
        nw.fusion_threshold = 64 << 20;
        nw.cycle_time_usec = 1000;
        env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
        env.node_welcome = &nw;
        feed(HVD_DAEMON_FROM_ROOT, ROOT_EP, &env);
        snprintf(id, sizeof id, "w%u", 2 * local - 1);
        ck_assert_ptr_nonnull(sent_to(id, HVD__ENVELOPE__BODY_WELCOME, 0));
        forget_sent();
}

/* The n-th NodeReady sent to the root: one SharedReady of n_ranks ranks
 * holding n_requests requests, and nothing rank by rank. */
static const Hvd__SharedReady *shared_once(size_t n, size_t n_ranks, size_t n_requests) {
        const Hvd__Envelope *e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY, n);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->node_ready->n_ranks, 0);
        ck_assert_uint_eq(e->node_ready->n_shared, 1);
        ck_assert_uint_eq(e->node_ready->shared[0]->n_ranks, n_ranks);
        ck_assert_uint_eq(e->node_ready->shared[0]->ready->n_requests, n_requests);
        return e->node_ready->shared[0];
}

/* The n-th NodeReady sent to the root, which must have gone at once: one
 * rank's own Ready, nothing shared. why: what its absence means. */
static const Hvd__Ready *alone_sent(size_t n, uint32_t rank, const char *why) {
        const Hvd__Envelope *e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY, n);
        ck_assert_msg(e != NULL, "%s", why);
        ck_assert_uint_eq(e->node_ready->n_shared, 0);
        ck_assert_uint_eq(e->node_ready->n_ranks, 1);
        ck_assert_uint_eq(e->node_ready->ranks[0]->rank, rank);
        return e->node_ready->ranks[0]->ready;
}

START_TEST(test_host_sends_a_first_steps_names_once) {
        /* host 1 of 2 (ranks 2 and 3): the new requests both ranks sent
         * alike go to the root once, for both, whatever turns they came
         * in; the others wait for the other rank's, then after
         * POOL_HOLD_USEC go as each rank's own */
        start(NULL);
        second_host("share", 2);

        const char *ab[] = { "a", "b" }, *ac[] = { "a", "c" };
        hvd_daemon_feed_turn(T.d, true);
        ready_names("w2", ab, 2);
        ready_names("w3", ab, 2);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 0); /* the turn goes on */
        hvd_daemon_feed_turn(T.d, false);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 1);
        const Hvd__SharedReady *sh = shared_once(0, 2, 2);
        ck_assert_uint_eq(sh->ranks[0], 2);
        ck_assert_uint_eq(sh->ranks[1], 3);
        ck_assert_str_eq(sh->ready->requests[0]->name, "a");
        ck_assert_str_eq(sh->ready->requests[1]->name, "b");

        /* over two turns: "a" goes shared once both sent it; "b" and "c",
         * each of one rank, wait, then go rank by rank */
        forget_sent();
        ready_names("w2", ab, 2);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 0); /* held for w3's */
        ready_names("w3", ac, 2);
        ck_assert_str_eq(shared_once(0, 2, 1)->ready->requests[0]->name, "a");
        hvd_daemon_feed_time(T.d, 100 * USEC_PER_MSEC);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 1);
        hvd_daemon_feed_time(T.d, 600 * USEC_PER_MSEC);
        const Hvd__Envelope *e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY, 1);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->node_ready->n_shared, 0);
        ck_assert_uint_eq(e->node_ready->n_ranks, 2);
        ck_assert_uint_eq(e->node_ready->ranks[0]->rank, 2);
        ck_assert_uint_eq(e->node_ready->ranks[0]->ready->n_requests, 1);
        ck_assert_str_eq(e->node_ready->ranks[0]->ready->requests[0]->name, "b");
        ck_assert_uint_eq(e->node_ready->ranks[1]->rank, 3);
        ck_assert_str_eq(e->node_ready->ranks[1]->ready->requests[0]->name, "c");

        /* a rank late for a name released without it goes on at once, not
         * POOL_HOLD_USEC later: the other's copy is gone */
        forget_sent();
        const char *only_b[] = { "b" }, *only_c[] = { "c" };
        ready_names("w3", only_b, 1);
        ck_assert_str_eq(alone_sent(0, 3, "rank 3's late \"b\" was held for a copy already gone")->requests[0]->name,
                         "b");
        ready_names("w2", only_c, 1);
        ck_assert_str_eq(alone_sent(1, 2, "rank 2's late \"c\" was held for a copy already gone")->requests[0]->name,
                         "c");
        /* both sent both: a next step's "b" and "c" alike go shared again */
        forget_sent();
        const char *bc[] = { "b", "c" };
        ready_names("w2", bc, 2);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 0); /* held for w3's */
        ready_names("w3", bc, 2);
        shared_once(0, 2, 2);

        /* a rank's cached readiness does not overtake its held names */
        forget_sent();
        ready_names("w2", ab, 2);
        Hvd__Ready c = HVD__READY__INIT;
        uint32_t ids[] = { 1 };
        c.cached = ids;
        c.n_cached = 1;
        Hvd__Envelope ce = HVD__ENVELOPE__INIT;
        ce.body_case = HVD__ENVELOPE__BODY_READY;
        ce.ready = &c;
        feed(HVD_DAEMON_FROM_WORKER, "w2", &ce);
        e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->node_ready->n_ranks, 2);
        ck_assert_uint_eq(e->node_ready->ranks[0]->ready->n_requests, 2);
        ck_assert_uint_eq(e->node_ready->ranks[1]->ready->n_cached, 1);
        /* ... and the other rank's copies of the names that went ahead of
         * it go on at once, not POOL_HOLD_USEC later */
        ready_names("w3", ab, 2);
        ck_assert_uint_eq(alone_sent(1, 3, "rank 3's \"a\" and \"b\" were held for copies already gone")->n_requests,
                          2);

        /* a name sent with other parameters by each rank (as an allgather's
         * first dimensions are) cannot go shared: nothing waits for it */
        forget_sent();
        ready_allreduce("w2", "g", (int64_t[]){ 4 }, 1);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 0);
        ready_allreduce("w3", "g", (int64_t[]){ 8 }, 1);
        e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->node_ready->n_shared, 0);
        ck_assert_uint_eq(e->node_ready->n_ranks, 2);
        ck_assert_int_eq(e->node_ready->ranks[0]->ready->requests[0]->shape[0], 4);
        ck_assert_int_eq(e->node_ready->ranks[1]->ready->requests[0]->shape[0], 8);
        stop();
}
END_TEST

START_TEST(test_a_name_unlike_by_rank_holds_no_later_rank) {
        /* 3 local ranks: the second's copy of "g" with another first
         * dimension releases the first's and its own; the third's, sent
         * after, goes on at once, not POOL_HOLD_USEC later; once all three
         * sent it, a next step's "g" alike goes shared again */
        start(NULL);
        second_host("unlike", 3);
        ready_allreduce("w3", "g", (int64_t[]){ 4 }, 1);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 0);
        ready_allreduce("w4", "g", (int64_t[]){ 8 }, 1);
        const Hvd__Envelope *e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->node_ready->n_ranks, 2);
        ready_allreduce("w5", "g", (int64_t[]){ 12 }, 1);
        e = sent_to(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY, 1);
        ck_assert_msg(e != NULL, "rank 5's \"g\" was held for copies already gone");
        ck_assert_uint_eq(e->node_ready->n_shared, 0);
        ck_assert_uint_eq(e->node_ready->n_ranks, 1);
        ck_assert_uint_eq(e->node_ready->ranks[0]->rank, 5);
        ck_assert_int_eq(e->node_ready->ranks[0]->ready->requests[0]->shape[0], 12);

        forget_sent();
        for (uint32_t r = 3; r < 6; r++)
                ready_allreduce(r == 3 ? "w3" : r == 4 ? "w4" : "w5", "g", (int64_t[]){ 4 }, 1);
        ck_assert_uint_eq(count_sent(ROOT_EP, HVD__ENVELOPE__BODY_NODE_READY), 1);
        ck_assert_str_eq(shared_once(0, 3, 1)->ready->requests[0]->name, "g");
        stop();
}
END_TEST

START_TEST(test_readiness_for_an_unknown_job_is_refused) {
        start("tcp://127.0.0.1:*");
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        nr.job_id = (char *) "nosuch";
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        feed(HVD_DAEMON_FROM_PEER, "p1", &env);
        const Hvd__Envelope *e = sent_to("p1", HVD__ENVELOPE__BODY_ABORT, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e->abort->job_id, "nosuch");
        ck_assert_int_eq(e->abort->code, HVD_EABORTED);
        ck_assert_str_eq(e->abort->reason, "job nosuch is unknown to the root daemon");
        stop();
}
END_TEST

static volatile sig_atomic_t alarms;

static void on_alarm(int sig) {
        (void) sig;
        alarms++;
}

/* zmq_bind and zmq_connect first wait on the socket's command pipe, and a
 * signal landing there (a profiler's or a fuzzer's timer, a DataLoader's
 * SIGCHLD: handlers installed without SA_RESTART) makes them fail with
 * EINTR although nothing went wrong. A daemon must start anyway. */
START_TEST(test_daemon_starts_while_signals_land) {
        struct sigaction sa = { 0 }, old;
        sa.sa_handler = on_alarm;
        sigemptyset(&sa.sa_mask);
        ck_assert_int_eq(sigaction(SIGALRM, &sa, &old), 0);
        struct itimerval every = { { 0, 20 }, { 0, 20 } }, off = { { 0, 0 }, { 0, 0 } };
        ck_assert_int_eq(setitimer(ITIMER_REAL, &every, NULL), 0);
        for (int i = 0; i < 200; i++) {
                start("tcp://127.0.0.1:*");
                stop();
        }
        setitimer(ITIMER_REAL, &off, NULL);
        sigaction(SIGALRM, &old, NULL);
        ck_assert_int_gt(alarms, 200);
}
END_TEST

int main(void) {
        Suite *s = suite_create("daemon");
        TCase *tc = tcase_create("handlers");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_join_welcomes_every_rank_once_all_said_hello);
        tcase_add_test(tc, test_mismatched_shapes_are_an_error_for_every_rank);
        tcase_add_test(tc, test_join_fails_the_others_allgather_at_once);
        tcase_add_test(tc, test_stall_is_shown_then_aborts_the_job);
        tcase_add_test(tc, test_dead_worker_aborts_its_job_on_the_others);
        tcase_add_test(tc, test_relay_merges_what_every_host_of_its_group_posted);
        tcase_add_test(tc, test_host_sends_a_first_steps_names_once);
        tcase_add_test(tc, test_a_name_unlike_by_rank_holds_no_later_rank);
        tcase_add_test(tc, test_readiness_for_an_unknown_job_is_refused);
        tcase_add_test(tc, test_daemon_starts_while_signals_land);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
