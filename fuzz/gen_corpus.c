/* gen_corpus.c — writes the fuzzers' seed corpus: one valid encoded
 * Envelope of every body type (and a few variants), plus malformed ones,
 * and checks on the way that every valid message passes hvd_wire_decode
 * and every malformed one is refused.
 *   gen_corpus            check only (a test in make check)
 *   gen_corpus DIR        also write DIR/envelope/, DIR/negotiate/ and DIR/dispatch/ */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hvd.h"
#include "hvd.pb-c.h"
#include "wire.h"

static const char *out_dir;
static int failures;

static void write_file(const char *sub, const char *name, const void *buf, size_t len) {
        if (!out_dir)
                return;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", out_dir, sub);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/%s/%s", out_dir, sub, name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
                fprintf(stderr, "gen_corpus: cannot write %s: %s\n", path, strerror(errno));
                exit(1);
        }
}

/* Packs env, checks the decoder's verdict, writes it as envelope/NAME. */
static void emit(const char *name, Hvd__Envelope *env, bool valid) {
        if (!env->version)
                env->version = HVD_PROTOCOL_VERSION;
        size_t len = hvd__envelope__get_packed_size(env);
        uint8_t *buf = malloc(len + 1);
        hvd__envelope__pack(env, buf);
        Hvd__Envelope *dec = NULL;
        char err[512] = "";
        int r = hvd_wire_decode(buf, len, 0, &dec, err, sizeof err);
        if ((r == 0) != valid) {
                fprintf(stderr, "gen_corpus: %s: expected %s, decode returned %d (%s)\n", name,
                        valid ? "accepted" : "refused", r, err);
                failures++;
        }
        hvd_wire_free(&dec);
        write_file("envelope", name, buf, len);
        free(buf);
}

static void emit_raw(const char *name, const void *buf, size_t len) {
        Hvd__Envelope *dec = NULL;
        char err[512] = "";
        if (hvd_wire_decode(buf, len, 0, &dec, err, sizeof err) == 0) {
                fprintf(stderr, "gen_corpus: %s: malformed input was accepted\n", name);
                failures++;
        }
        hvd_wire_free(&dec);
        write_file("envelope", name, buf, len);
}

static Hvd__Request request(const char *name, Hvd__Kind kind, int64_t *shape, size_t n_shape) {
        Hvd__Request q = HVD__REQUEST__INIT;
        q.name = (char *) name;
        q.kind = kind;
        q.dtype = HVD_FLOAT32;
        q.reduce_op = HVD_REDUCE_SUM;
        q.shape = shape;
        q.n_shape = n_shape;
        q.prescale = 1.0;
        q.postscale = 1.0;
        q.device = -1;
        return q;
}

/* The negotiate harness reads: 1 byte world size selector, then frames of
 * [1 byte ranks][2 bytes little-endian length][Envelope with a Ready]
 * (ranks: bits 0-3 a rank; bit 7: shared by bits 4-6 + 1 ranks from it). */
static void neg_frame(uint8_t **buf, size_t *len, uint8_t rank, Hvd__Envelope *env) {
        env->version = HVD_PROTOCOL_VERSION;
        size_t n = hvd__envelope__get_packed_size(env);
        *buf = realloc(*buf, *len + 3 + n);
        (*buf)[*len] = rank;
        (*buf)[*len + 1] = (uint8_t) (n & 0xff);
        (*buf)[*len + 2] = (uint8_t) (n >> 8);
        hvd__envelope__pack(env, *buf + *len + 3);
        *len += 3 + n;
}

static void negotiate_seeds(void) {
        int64_t shape[] = { 4, 3 }, shape2[] = { 3, 4 };
        int64_t splits[] = { 1, 3 };
        struct {
                const char *name;
                Hvd__Kind kind;
                int64_t *shape;
                uint32_t reduce_op;
                int64_t *splits;
                size_t n_splits;
        } kinds[] = {
                { "allreduce", HVD__KIND__KIND_ALLREDUCE, shape, HVD_REDUCE_SUM, NULL, 0 },
                { "average", HVD__KIND__KIND_ALLREDUCE, shape, HVD_REDUCE_AVERAGE, NULL, 0 },
                { "broadcast", HVD__KIND__KIND_BROADCAST, shape, HVD_REDUCE_SUM, NULL, 0 },
                { "allgather", HVD__KIND__KIND_ALLGATHER, shape, HVD_REDUCE_SUM, NULL, 0 },
                { "alltoall", HVD__KIND__KIND_ALLTOALL, shape, HVD_REDUCE_SUM, splits, 2 },
                { "reducescatter", HVD__KIND__KIND_REDUCESCATTER, shape, HVD_REDUCE_SUM, NULL, 0 },
                { "barrier", HVD__KIND__KIND_BARRIER, NULL, HVD_REDUCE_SUM, NULL, 0 },
                { "join", HVD__KIND__KIND_JOIN, NULL, HVD_REDUCE_SUM, NULL, 0 },
        };
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                uint8_t *buf = malloc(1);
                size_t len = 1;
                buf[0] = 2; /* world size 2 */
                for (uint8_t rank = 0; rank < 2; rank++) {
                        const char *name = kinds[k].kind == HVD__KIND__KIND_BARRIER ? "__hvd.barrier"
                                           : kinds[k].kind == HVD__KIND__KIND_JOIN  ? "__hvd.join"
                                                                                    : "grad.w";
                        Hvd__Request q = request(name, kinds[k].kind, kinds[k].shape, kinds[k].shape ? 2 : 0);
                        q.reduce_op = kinds[k].reduce_op;
                        q.splits = kinds[k].splits;
                        q.n_splits = kinds[k].n_splits;
                        Hvd__Request *qs[] = { &q };
                        Hvd__Ready ready = HVD__READY__INIT;
                        ready.requests = qs;
                        ready.n_requests = 1;
                        Hvd__Envelope env = HVD__ENVELOPE__INIT;
                        env.body_case = HVD__ENVELOPE__BODY_READY;
                        env.ready = &ready;
                        neg_frame(&buf, &len, rank, &env);
                }
                /* a second round from cached ids 0 */
                for (uint8_t rank = 0; rank < 2; rank++) {
                        uint32_t cached[] = { 0 };
                        Hvd__Ready ready = HVD__READY__INIT;
                        ready.cached = cached;
                        ready.n_cached = 1;
                        Hvd__Envelope env = HVD__ENVELOPE__INIT;
                        env.body_case = HVD__ENVELOPE__BODY_READY;
                        env.ready = &ready;
                        neg_frame(&buf, &len, rank, &env);
                }
                write_file("negotiate", kinds[k].name, buf, len);
                free(buf);
        }
        /* a mismatch: rank 0 and rank 1 disagree on the shape; and a fused pair */
        uint8_t *buf = malloc(1);
        size_t len = 1;
        buf[0] = 3;
        for (uint8_t rank = 0; rank < 3; rank++) {
                Hvd__Request a = request("grad.a", HVD__KIND__KIND_ALLREDUCE, rank == 1 ? shape2 : shape, 2);
                Hvd__Request b = request("grad.b", HVD__KIND__KIND_ALLREDUCE, shape, 2);
                Hvd__Request c = request("grad.c", HVD__KIND__KIND_ALLREDUCE, shape, 1);
                c.group_id = 1;
                c.group_size = 1;
                Hvd__Request *qs[] = { &a, &b, &c };
                Hvd__Ready ready = HVD__READY__INIT;
                ready.requests = qs;
                ready.n_requests = 3;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_READY;
                env.ready = &ready;
                neg_frame(&buf, &len, rank, &env);
        }
        write_file("negotiate", "mismatch-and-fusion", buf, len);
        free(buf);
        /* shared: ranks 0-2 send one Ready together (a node's forwarded
         * requests), rank 3 alone with another shape, then all by id */
        buf = malloc(1);
        len = 1;
        buf[0] = 3; /* world size 4 */
        for (int round = 0; round < 2; round++) {
                Hvd__Request a = request("grad.a", HVD__KIND__KIND_ALLREDUCE, round ? shape2 : shape, 2);
                Hvd__Request *qs[] = { &a };
                Hvd__Ready ready = HVD__READY__INIT;
                ready.requests = qs;
                ready.n_requests = 1;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_READY;
                env.ready = &ready;
                neg_frame(&buf, &len, round ? 3 : 0x80 | (2 << 4), &env);
        }
        for (int round = 0; round < 2; round++) {
                uint32_t cached[] = { 0 };
                Hvd__Ready ready = HVD__READY__INIT;
                ready.cached = cached;
                ready.n_cached = 1;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_READY;
                env.ready = &ready;
                neg_frame(&buf, &len, round ? 3 : 0x80 | (2 << 4), &env);
        }
        write_file("negotiate", "shared", buf, len);
        free(buf);
}

/* ---- dispatch seeds: sequences of frames fed to a daemon (fuzz/dispatch.c) ---- */

enum { FROM_WORKER = 0, FROM_CONTROL = 1, FROM_PEER = 2, FROM_ROOT = 3, WORKER_EXIT = 4, TIME_PASSES = 5 };

typedef struct seq {
        uint8_t *buf;
        size_t len;
} seq_t;

static void seq_start(seq_t *q, uint8_t settings) {
        q->buf = malloc(1);
        q->buf[0] = settings;
        q->len = 1;
}

static void seq_raw(seq_t *q, uint8_t op, const void *p, size_t n) {
        q->buf = realloc(q->buf, q->len + 3 + n);
        q->buf[q->len] = op;
        q->buf[q->len + 1] = (uint8_t) (n & 0xff);
        q->buf[q->len + 2] = (uint8_t) (n >> 8);
        if (n)
                memcpy(q->buf + q->len + 3, p, n);
        q->len += 3 + n;
}

/* source | connection << 3 (| 0x40 another uid, | 0x80 unknown uid) */
static void seq_msg(seq_t *q, uint8_t op, Hvd__Envelope *env) {
        env->version = HVD_PROTOCOL_VERSION;
        size_t n = hvd__envelope__get_packed_size(env);
        uint8_t *b = malloc(n + 1);
        hvd__envelope__pack(env, b);
        seq_raw(q, op, b, n);
        free(b);
}

static void seq_write(seq_t *q, const char *name) {
        write_file("dispatch", name, q->buf, q->len);
        free(q->buf);
}

static uint8_t dsecret[16] = "fedcba9876543210";
static char *dhosts[] = { "node-a", "node-b", "node-c", "node-d", "node-e" };

static void seq_hello(seq_t *q, uint8_t op, const char *job, uint32_t rank, uint32_t world, uint32_t local_rank,
                      uint32_t local_size, uint32_t cross_rank, uint32_t cross_size) {
        Hvd__Hello h = HVD__HELLO__INIT;
        h.job_id = (char *) job;
        h.secret = (ProtobufCBinaryData){ sizeof dsecret, dsecret };
        h.world_size = world, h.local_size = local_size, h.local_rank = local_rank, h.rank = rank;
        h.pid = 999999; /* no such process: no pidfd */
        h.host = cross_size > 1 ? dhosts[cross_rank] : "";
        h.device = -1;
        h.fusion_threshold = -1;
        h.data_addr = "127.0.0.1:4000";
        if (cross_size > 1) {
                h.cross_rank = cross_rank, h.cross_size = cross_size;
                h.root_peer = "tcp://127.0.0.1:7100";
                h.hosts = dhosts, h.n_hosts = cross_size;
        }
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        seq_msg(q, op, &env);
}

static void seq_ready(seq_t *q, uint8_t op, const char *name, bool cached) {
        int64_t shape[] = { 4, 3 };
        Hvd__Request r = request(name, HVD__KIND__KIND_ALLREDUCE, shape, 2);
        Hvd__Request *rs[] = { &r };
        uint32_t ids[] = { 0 };
        Hvd__Ready ready = HVD__READY__INIT;
        if (cached)
                ready.cached = ids, ready.n_cached = 1;
        else
                ready.requests = rs, ready.n_requests = 1;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        seq_msg(q, op, &env);
}

/* new requests for names[0..n) in one Ready; shape[0] of the last is last0 */
static void seq_ready_names(seq_t *q, uint8_t op, const char *const *names, size_t n, int64_t last0) {
        int64_t shape[8][2];
        Hvd__Request r[8], *rs[8];
        for (size_t i = 0; i < n && i < 8; i++) {
                shape[i][0] = i + 1 == n ? last0 : 4;
                shape[i][1] = 3;
                r[i] = request(names[i], HVD__KIND__KIND_ALLREDUCE, shape[i], 2);
                rs[i] = &r[i];
        }
        Hvd__Ready ready = HVD__READY__INIT;
        ready.requests = rs, ready.n_requests = n < 8 ? n : 8;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        seq_msg(q, op, &env);
}

static void seq_done(seq_t *q, uint8_t op, uint64_t s) {
        Hvd__Done dn = HVD__DONE__INIT;
        dn.seq = s;
        dn.bytes = 48;
        dn.fast_path_tensors = 3;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_DONE;
        env.done = &dn;
        seq_msg(q, op, &env);
}

static void seq_goodbye(seq_t *q, uint8_t op, uint32_t rank) {
        Hvd__Goodbye g = HVD__GOODBYE__INIT;
        g.rank = rank;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_GOODBYE;
        env.goodbye = &g;
        seq_msg(q, op, &env);
}

static void seq_control(seq_t *q, uint8_t op, const char *job) {
        Hvd__StatusRequest sr = HVD__STATUS_REQUEST__INIT;
        sr.job_id = (char *) job;
        sr.rank_detail = true;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        env.status_request = &sr;
        seq_msg(q, op, &env);
        Hvd__MetricsRequest mr = HVD__METRICS_REQUEST__INIT;
        env.body_case = HVD__ENVELOPE__BODY_METRICS_REQUEST;
        env.metrics_request = &mr;
        seq_msg(q, op, &env);
        Hvd__LogLevel ll = HVD__LOG_LEVEL__INIT;
        ll.level = "";
        env.body_case = HVD__ENVELOPE__BODY_LOG_LEVEL;
        env.log_level = &ll;
        seq_msg(q, op, &env);
        Hvd__TimelineControl tc = HVD__TIMELINE_CONTROL__INIT;
        tc.job_id = (char *) job;
        tc.start = true;
        tc.file = "timeline.json";
        env.body_case = HVD__ENVELOPE__BODY_TIMELINE_CONTROL;
        env.timeline_control = &tc;
        seq_msg(q, op, &env);
}

static void seq_time(seq_t *q, uint8_t seconds) {
        seq_raw(q, TIME_PASSES, &seconds, 1);
}

static Hvd__RankInfo rank_info(uint32_t rank, uint32_t cross_rank) {
        Hvd__RankInfo ri = HVD__RANK_INFO__INIT;
        ri.rank = rank;
        ri.local_rank = 0;
        ri.pid = 999999;
        ri.host = dhosts[cross_rank];
        ri.data_addr = "127.0.0.1:4001";
        ri.cross_rank = cross_rank;
        return ri;
}

/* One rank's readiness for grad.w [4, 3] by name, as a host forwards it
 * (filled in place: it points into itself). */
typedef struct rank_grad {
        int64_t shape[2];
        Hvd__Request r, *rs[1];
        Hvd__Ready ready;
        Hvd__RankReady rr, *rrp[1];
} rank_grad_t;

static void rank_grad(rank_grad_t *g, uint32_t rank) {
        g->shape[0] = 4, g->shape[1] = 3;
        g->r = request("grad.w", HVD__KIND__KIND_ALLREDUCE, g->shape, 2);
        g->rs[0] = &g->r;
        hvd__ready__init(&g->ready);
        g->ready.requests = g->rs, g->ready.n_requests = 1;
        hvd__rank_ready__init(&g->rr);
        g->rr.rank = rank;
        g->rr.ready = &g->ready;
        g->rrp[0] = &g->rr;
}

/* The root's welcome of job to a host of n (at most 5), one rank a host,
 * with the relay table via / eps (filled in place: it points into itself). */
typedef struct relay_welcome {
        Hvd__RankInfo ri[5], *rip[5];
        Hvd__NodeWelcome nw;
} relay_welcome_t;

static void relay_welcome(relay_welcome_t *w, const char *job, uint32_t n, uint32_t *via, char **eps) {
        for (uint32_t c = 0; c < n; c++)
                w->ri[c] = rank_info(c, c), w->rip[c] = &w->ri[c];
        hvd__node_welcome__init(&w->nw);
        w->nw.job_id = (char *) job;
        w->nw.ranks = w->rip, w->nw.n_ranks = n;
        w->nw.epoch = 7;
        w->nw.fusion_threshold = 1 << 20;
        w->nw.cycle_time_usec = 1000;
        w->nw.relay_via = via, w->nw.n_relay_via = n;
        w->nw.relay_endpoint = eps, w->nw.n_relay_endpoint = n;
}

/* Two ranks' readiness for grad.w [4, 3] by name, shared, relayed for two
 * hosts (filled in place: it points into itself). */
typedef struct relayed_grad {
        int64_t shape[2];
        Hvd__Request r, *rs[1];
        Hvd__Ready ready;
        Hvd__SharedReady sh, *shp[1];
        Hvd__RelayedReady rel, *relp[1];
} relayed_grad_t;

static void relayed_grad(relayed_grad_t *g, uint32_t *ranks, uint32_t *hosts) {
        g->shape[0] = 4, g->shape[1] = 3;
        g->r = request("grad.w", HVD__KIND__KIND_ALLREDUCE, g->shape, 2);
        g->rs[0] = &g->r;
        hvd__ready__init(&g->ready);
        g->ready.requests = g->rs, g->ready.n_requests = 1;
        hvd__shared_ready__init(&g->sh);
        g->sh.ranks = ranks, g->sh.n_ranks = 2;
        g->sh.ready = &g->ready;
        g->shp[0] = &g->sh;
        hvd__relayed_ready__init(&g->rel);
        g->rel.hosts = hosts, g->rel.n_hosts = 2;
        g->rel.shared = g->shp, g->rel.n_shared = 1;
        g->relp[0] = &g->rel;
}

/* The root's schedule of grad.w [4, 3] (cache id 0) for job, kept under
 * key 1, and its repeat (filled in place: it points into itself). */
typedef struct kept_grad {
        int64_t shape[2];
        Hvd__Entry en, *enp[1];
        Hvd__Op op, *opp[1];
        Hvd__Schedule sc, rep;
        Hvd__JobSchedule js;
} kept_grad_t;

static void kept_grad(kept_grad_t *k, const char *job) {
        k->shape[0] = 4, k->shape[1] = 3;
        hvd__entry__init(&k->en);
        k->en.id = 0;
        k->en.name = "grad.w";
        k->en.count = 12;
        k->en.shape = k->shape, k->en.n_shape = 2;
        k->enp[0] = &k->en;
        hvd__op__init(&k->op);
        k->op.kind = HVD__KIND__KIND_ALLREDUCE;
        k->op.dtype = HVD_FLOAT32;
        k->op.reduce_op = HVD_REDUCE_SUM;
        k->op.entries = k->enp, k->op.n_entries = 1;
        k->op.prescale = k->op.postscale = 1.0;
        k->opp[0] = &k->op;
        hvd__schedule__init(&k->sc);
        k->sc.seq = 1;
        k->sc.join_done_last_rank = -1;
        k->sc.ops = k->opp, k->sc.n_ops = 1;
        k->sc.keep_key = 1;
        hvd__schedule__init(&k->rep);
        k->rep.seq = 2;
        k->rep.join_done_last_rank = -1;
        k->rep.repeat_key = 1;
        hvd__job_schedule__init(&k->js);
        k->js.job_id = (char *) job;
        k->js.schedule = &k->sc;
}

/* host's NodeReady for job j through its relay (relay fields set, nothing else) */
static Hvd__NodeReady relay_ready(const char *job, uint32_t host) {
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        nr.job_id = (char *) job;
        nr.relay_host = host;
        nr.relay_secret = (ProtobufCBinaryData){ sizeof dsecret, dsecret };
        return nr;
}

static void dispatch_seeds(void) {
        seq_t q;
        /* one job of two ranks from start to end, with hvdctl looking */
        seq_start(&q, 0);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-a", 0, 2, 0, 2, 0, 1);
        seq_hello(&q, FROM_WORKER | 1 << 3, "job-a", 1, 2, 1, 2, 0, 1);
        seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
        seq_ready(&q, FROM_WORKER | 1 << 3, "grad.w", false);
        seq_done(&q, FROM_WORKER | 0 << 3, 1);
        seq_done(&q, FROM_WORKER | 1 << 3, 1);
        seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", true);
        seq_ready(&q, FROM_WORKER | 1 << 3, "grad.w", true);
        seq_control(&q, FROM_CONTROL, "job-a");
        seq_goodbye(&q, FROM_WORKER | 0 << 3, 0);
        seq_goodbye(&q, FROM_WORKER | 1 << 3, 1);
        seq_raw(&q, WORKER_EXIT | 0 << 3, NULL, 0);
        seq_raw(&q, WORKER_EXIT | 1 << 3, NULL, 0);
        seq_time(&q, 1);
        seq_write(&q, "job-lifecycle");

        /* a first step's names batched differently by three local ranks:
         * shared name by name as each completes; one name twice from a
         * rank, one with another shape; then the hold runs out on a name
         * one rank never asks for */
        seq_start(&q, 0);
        for (uint32_t r = 0; r < 3; r++)
                seq_hello(&q, FROM_WORKER | r << 3, "job-p", r, 3, r, 3, 0, 1);
        {
                const char *ab[] = { "grad.a", "grad.b" }, *a[] = { "grad.a" }, *b[] = { "grad.b" },
                           *ba[] = { "grad.b", "grad.a" }, *cd[] = { "grad.c", "grad.d" }, *c[] = { "grad.c" },
                           *e[] = { "grad.e" };
                seq_ready_names(&q, FROM_WORKER | 0 << 3, ab, 2, 4);
                seq_ready_names(&q, FROM_WORKER | 1 << 3, a, 1, 4);
                seq_ready_names(&q, FROM_WORKER | 2 << 3, ba, 2, 4);
                seq_ready_names(&q, FROM_WORKER | 1 << 3, b, 1, 4);
                seq_ready_names(&q, FROM_WORKER | 0 << 3, cd, 2, 4);
                seq_ready_names(&q, FROM_WORKER | 1 << 3, c, 1, 4);
                seq_ready_names(&q, FROM_WORKER | 1 << 3, c, 1, 4);
                seq_ready_names(&q, FROM_WORKER | 2 << 3, cd, 2, 5);
                seq_ready_names(&q, FROM_WORKER | 0 << 3, e, 1, 4);
                seq_ready_names(&q, FROM_WORKER | 1 << 3, e, 1, 4);
        }
        seq_time(&q, 1);
        seq_ready(&q, FROM_WORKER | 2 << 3, "grad.e", false);
        seq_control(&q, FROM_CONTROL, "job-p");
        seq_write(&q, "first-step-by-name");

        /* a rank dies with a collective pending; a second job goes on; the
         * dead one is removed after its linger time */
        seq_start(&q, 0);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-a", 0, 2, 0, 2, 0, 1);
        seq_hello(&q, FROM_WORKER | 1 << 3, "job-a", 1, 2, 1, 2, 0, 1);
        seq_hello(&q, FROM_WORKER | 2 << 3, "job-b", 0, 1, 0, 1, 0, 1);
        seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
        seq_raw(&q, WORKER_EXIT | 1 << 3, NULL, 0);
        seq_ready(&q, FROM_WORKER | 2 << 3, "grad.w", false);
        seq_ready(&q, FROM_WORKER | 0 << 3, "grad.x", false);
        seq_control(&q, FROM_CONTROL | 1 << 3, "");
        seq_time(&q, 40);
        seq_write(&q, "killed-worker");

        /* refusals: messages before hello, a second hello on one
         * connection, a wrong secret, another uid, garbage, a full rank */
        seq_start(&q, 2);
        seq_ready(&q, FROM_WORKER | 3 << 3, "grad.w", false);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-a", 0, 3, 0, 3, 0, 1);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-a", 1, 3, 1, 3, 0, 1);
        seq_hello(&q, FROM_WORKER | 1 << 3 | 0x40, "job-a", 1, 3, 1, 3, 0, 1);
        seq_hello(&q, FROM_WORKER | 2 << 3, "job-a", 0, 3, 0, 3, 0, 1);
        seq_raw(&q, FROM_WORKER | 4 << 3, "\x08\x01\x52\x05garbage", 10);
        seq_hello(&q, FROM_WORKER | 5 << 3, "job-b", 0, 1, 0, 1, 0, 1);
        seq_hello(&q, FROM_WORKER | 6 << 3, "job-c", 0, 1, 0, 1, 0, 1);
        seq_hello(&q, FROM_WORKER | 7 << 3, "job-d", 0, 9, 0, 9, 0, 1);
        seq_time(&q, 31);
        seq_write(&q, "refusals");

        /* host-level readiness (the board's node mode) on a job of one
         * host: refused with an abort */
        seq_start(&q, 0);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-o", 0, 2, 0, 2, 0, 1);
        seq_hello(&q, FROM_WORKER | 1 << 3, "job-o", 1, 2, 1, 2, 0, 1);
        seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
        seq_ready(&q, FROM_WORKER | 1 << 3, "grad.w", false);
        {
                uint32_t host[] = { 0 };
                Hvd__Ready ready = HVD__READY__INIT;
                ready.node_cached = host, ready.n_node_cached = 1;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_READY;
                env.ready = &ready;
                seq_msg(&q, FROM_WORKER | 1 << 3, &env);
        }
        seq_time(&q, 3);
        seq_write(&q, "board-one-host");

        /* this daemon is the root of a job on two hosts */
        seq_start(&q, 1);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-m", 0, 2, 0, 1, 0, 2);
        {
                Hvd__RankInfo ri = rank_info(1, 1), *rip[] = { &ri };
                Hvd__NodeJoin nj = HVD__NODE_JOIN__INIT;
                nj.job_id = "job-m";
                nj.secret = (ProtobufCBinaryData){ sizeof dsecret, dsecret };
                nj.host = "node-b";
                nj.cross_rank = 1, nj.cross_size = 2, nj.world_size = 2;
                nj.ranks = rip, nj.n_ranks = 1;
                nj.fusion_threshold = -1;
                nj.hosts = dhosts, nj.n_hosts = 2;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_NODE_JOIN;
                env.node_join = &nj;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
                rank_grad_t rg;
                rank_grad(&rg, 1);
                Hvd__RankReady **rrp = rg.rrp;
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                nr.job_id = "job-m";
                nr.ranks = rrp, nr.n_ranks = 1;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_msg(&q, FROM_PEER | 1 << 3, &env); /* not a node of the job */
                Hvd__Ping ping = HVD__PING__INIT;
                ping.sent_usec = 12345;
                ping.rtt_usec = 100;
                env.body_case = HVD__ENVELOPE__BODY_PING;
                env.ping = &ping;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_control(&q, FROM_CONTROL, "job-m");
                uint32_t departed[] = { 1 };
                Hvd__NodeReady bye = HVD__NODE_READY__INIT;
                bye.job_id = "job-m";
                bye.departed = departed, bye.n_departed = 1;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &bye;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                Hvd__Abort ab = HVD__ABORT__INIT;
                ab.job_id = "job-m";
                ab.reason = "host node-b lost rank 1";
                ab.lost_rank = 1;
                ab.code = HVD_EABORTED;
                env.body_case = HVD__ENVELOPE__BODY_ABORT;
                env.abort = &ab;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
        }
        seq_time(&q, 12);
        seq_write(&q, "root-of-two-hosts");

        /* this daemon is host 1 of 2: its root (a peer it connects to) welcomes
         * the job, sends a schedule, pings, then goes silent */
        seq_start(&q, 0);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-n", 1, 2, 0, 1, 1, 2);
        {
                Hvd__RankInfo ri0 = rank_info(0, 0), ri1 = rank_info(1, 1), *rip[] = { &ri0, &ri1 };
                Hvd__NodeWelcome nw = HVD__NODE_WELCOME__INIT;
                nw.job_id = "job-n";
                nw.ranks = rip, nw.n_ranks = 2;
                nw.epoch = 7;
                nw.fusion_threshold = 1 << 20;
                nw.cycle_time_usec = 1000;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
                env.node_welcome = &nw;
                seq_msg(&q, FROM_ROOT, &env);
                seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
                Hvd__Schedule sc = HVD__SCHEDULE__INIT;
                sc.seq = 1;
                sc.join_done_last_rank = -1;
                Hvd__JobSchedule js = HVD__JOB_SCHEDULE__INIT;
                js.job_id = "job-n";
                js.schedule = &sc;
                env.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                env.job_schedule = &js;
                seq_msg(&q, FROM_ROOT, &env);
                seq_msg(&q, FROM_ROOT | 1 << 3, &env); /* not its root */
                Hvd__Ping ping = HVD__PING__INIT;
                ping.sent_usec = 1;
                ping.reply = true;
                env.body_case = HVD__ENVELOPE__BODY_PING;
                env.ping = &ping;
                seq_msg(&q, FROM_ROOT, &env);
                seq_done(&q, FROM_WORKER | 0 << 3, 1);
                seq_goodbye(&q, FROM_WORKER | 0 << 3, 1);
                seq_control(&q, FROM_CONTROL, "job-n");
        }
        seq_time(&q, 15);
        seq_time(&q, 40);
        seq_write(&q, "node-of-two-hosts");

        /* control plane relays: this daemon is host 1 of 4 and relays for
         * host 2 (relay_via 0 1 1 3): host 2's hello, its requests, a wrong
         * secret, a host not of the group, the root's schedule passed on,
         * the group's cached ids merged, a departure */
        seq_start(&q, 1);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-r", 1, 4, 0, 1, 1, 4);
        {
                uint32_t via[] = { 0, 1, 1, 3 };
                char *eps[] = { "", "tcp://127.0.0.1:1", "", "tcp://127.0.0.1:2" };
                relay_welcome_t w;
                relay_welcome(&w, "job-r", 4, via, eps);
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
                env.node_welcome = &w.nw;
                /* host 2's hello before this daemon's own welcome: held */
                Hvd__NodeReady hello = relay_ready("job-r", 2);
                Hvd__Envelope henv = HVD__ENVELOPE__INIT;
                henv.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                henv.node_ready = &hello;
                seq_msg(&q, FROM_PEER | 0 << 3, &henv);
                seq_msg(&q, FROM_ROOT, &env);
                /* host 2's requests, then this host's own */
                rank_grad_t rg;
                rank_grad(&rg, 2);
                Hvd__RankReady **rrp = rg.rrp;
                Hvd__NodeReady nr = relay_ready("job-r", 2);
                nr.ranks = rrp, nr.n_ranks = 1;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
                /* a wrong secret; a host that is not of this group; host 2
                 * over another connection */
                static uint8_t wrong[16] = "0123456789abcdef";
                nr.relay_secret = (ProtobufCBinaryData){ sizeof wrong, wrong };
                seq_msg(&q, FROM_PEER | 1 << 3, &env);
                nr.relay_secret = (ProtobufCBinaryData){ sizeof dsecret, dsecret };
                nr.relay_host = 3;
                seq_msg(&q, FROM_PEER | 2 << 3, &env);
                /* the root's schedule of grad.w (cache id 0), kept under key 1 */
                kept_grad_t kg;
                kept_grad(&kg, "job-r");
                env.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                env.job_schedule = &kg.js;
                seq_msg(&q, FROM_ROOT, &env);
                /* the steady state: host 2's and this host's cached id 0,
                 * merged; the root repeats key 1 */
                uint32_t ids[] = { 0 };
                uint64_t waited[] = { 50 };
                Hvd__NodeReady cached = relay_ready("job-r", 2);
                cached.node_cached = ids, cached.n_node_cached = 1;
                cached.node_cached_waited_usec = waited, cached.n_node_cached_waited_usec = 1;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &cached;
                seq_done(&q, FROM_WORKER | 0 << 3, 1);
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", true);
                seq_msg(&q, FROM_PEER | 0 << 3, &env); /* twice before it completed */
                kg.js.schedule = &kg.rep;
                env.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                env.job_schedule = &kg.js;
                seq_msg(&q, FROM_ROOT, &env);
                uint32_t departed[] = { 2 };
                Hvd__NodeReady bye = relay_ready("job-r", 2);
                bye.departed = departed, bye.n_departed = 1;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &bye;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_goodbye(&q, FROM_WORKER | 0 << 3, 2);
        }
        seq_time(&q, 1);
        seq_time(&q, 40);
        seq_write(&q, "relay-of-a-group");

        /* control plane relays, the root's side: host 0 of 4 with
         * relay_fanout 2 (settings bit 2): hosts 1 and 2 report through
         * host 1, host 3 straight; a relayed entry for hosts 1 and 2 alike,
         * host 3's own, the group's cached id merged, then an entry for
         * host 3 through host 1, which does not relay for it */
        seq_start(&q, 1 | 4);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-s", 0, 4, 0, 1, 0, 4);
        {
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                for (uint32_t c = 1; c < 4; c++) {
                        Hvd__RankInfo ri = rank_info(c, c), *rip[] = { &ri };
                        Hvd__NodeJoin nj = HVD__NODE_JOIN__INIT;
                        nj.job_id = "job-s";
                        nj.secret = (ProtobufCBinaryData){ sizeof dsecret, dsecret };
                        nj.host = dhosts[c];
                        nj.cross_rank = c, nj.cross_size = 4, nj.world_size = 4;
                        nj.ranks = rip, nj.n_ranks = 1;
                        nj.fusion_threshold = -1;
                        nj.hosts = dhosts, nj.n_hosts = 4;
                        nj.peer_endpoint = c == 2 ? "" : c == 1 ? "tcp://127.0.0.1:1" : "tcp://127.0.0.1:3";
                        env.body_case = HVD__ENVELOPE__BODY_NODE_JOIN;
                        env.node_join = &nj;
                        seq_msg(&q, FROM_PEER | (uint8_t) ((c - 1) << 3), &env);
                }
                seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
                uint32_t ranks12[] = { 1, 2 }, hosts12[] = { 1, 2 }, hosts3[] = { 3 }, ranks3[] = { 3 };
                relayed_grad_t g;
                relayed_grad(&g, ranks12, hosts12);
                Hvd__NodeReady nr = HVD__NODE_READY__INIT;
                nr.job_id = "job-s";
                nr.relayed = g.relp, nr.n_relayed = 1;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                /* host 3's own, straight: grad.w is complete and scheduled */
                Hvd__RankReady rr3 = HVD__RANK_READY__INIT, *rr3p[] = { &rr3 };
                rr3.rank = 3;
                rr3.ready = &g.ready;
                Hvd__NodeReady own3 = HVD__NODE_READY__INIT;
                own3.job_id = "job-s";
                own3.ranks = rr3p, own3.n_ranks = 1;
                env.node_ready = &own3;
                seq_msg(&q, FROM_PEER | 2 << 3, &env);
                env.node_ready = &nr;
                seq_control(&q, FROM_CONTROL, "job-s");
                seq_done(&q, FROM_WORKER | 0 << 3, 1);
                /* the group's cached id 0, merged for hosts 1 and 2 */
                uint32_t ids[] = { 0 };
                Hvd__RelayedReady grp = HVD__RELAYED_READY__INIT, *grpp[] = { &grp };
                grp.hosts = hosts12, grp.n_hosts = 2;
                grp.node_cached = ids, grp.n_node_cached = 1;
                nr.relayed = grpp;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                /* host 3 through host 1: not its group */
                g.sh.ranks = ranks3, g.sh.n_ranks = 1;
                g.rel.hosts = hosts3, g.rel.n_hosts = 1;
                nr.relayed = g.relp;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
        }
        seq_time(&q, 12);
        seq_write(&q, "root-of-relays");

        /* a tree of relays: this daemon is host 1 of 5, under the root; host
         * 2 relays for host 3 and reports through host 1 (relay_via 0 1 1 2
         * 0). Host 2's requests for hosts 2 and 3 pass on as they came; its
         * cached id for both merges with this host's own; one for host 3
         * alone passes on; then an entry for host 4, which does not report
         * through it */
        seq_start(&q, 1);
        seq_hello(&q, FROM_WORKER | 0 << 3, "job-t", 1, 5, 0, 1, 1, 5);
        {
                uint32_t via[] = { 0, 1, 1, 2, 0 };
                char *eps[] = { "", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "", "" };
                relay_welcome_t w;
                relay_welcome(&w, "job-t", 5, via, eps);
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
                env.node_welcome = &w.nw;
                seq_msg(&q, FROM_ROOT, &env);
                Hvd__NodeReady hello = relay_ready("job-t", 2);
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &hello;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                /* hosts 2 and 3 name grad.w alike */
                uint32_t ranks23[] = { 2, 3 }, hosts23[] = { 2, 3 }, hosts3[] = { 3 }, hosts4[] = { 4 };
                relayed_grad_t g;
                relayed_grad(&g, ranks23, hosts23);
                Hvd__NodeReady nr = relay_ready("job-t", 2);
                nr.relayed = g.relp, nr.n_relayed = 1;
                env.node_ready = &nr;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", false);
                /* the root's schedule of grad.w (cache id 0), kept under key 1 */
                kept_grad_t kg;
                kept_grad(&kg, "job-t");
                env.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                env.job_schedule = &kg.js;
                seq_msg(&q, FROM_ROOT, &env);
                seq_done(&q, FROM_WORKER | 0 << 3, 1);
                /* the steady state: cached id 0 for hosts 2 and 3, merged
                 * with this host's own; the root repeats key 1 */
                uint32_t ids[] = { 0 };
                uint64_t waited[] = { 50 };
                Hvd__RelayedReady grp = HVD__RELAYED_READY__INIT, *grpp[] = { &grp };
                grp.hosts = hosts23, grp.n_hosts = 2;
                grp.node_cached = ids, grp.n_node_cached = 1;
                grp.node_cached_waited_usec = waited, grp.n_node_cached_waited_usec = 1;
                nr.relayed = grpp;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                seq_ready(&q, FROM_WORKER | 0 << 3, "grad.w", true);
                kg.js.schedule = &kg.rep;
                env.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
                env.job_schedule = &kg.js;
                seq_msg(&q, FROM_ROOT, &env);
                seq_done(&q, FROM_WORKER | 0 << 3, 2);
                /* host 3 alone (host 2 released it after its hold) */
                grp.hosts = hosts3, grp.n_hosts = 1;
                env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
                env.node_ready = &nr;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
                /* host 4 through host 2: not below it */
                grp.hosts = hosts4, grp.n_hosts = 1;
                seq_msg(&q, FROM_PEER | 0 << 3, &env);
        }
        seq_time(&q, 1);
        seq_time(&q, 40);
        seq_write(&q, "relay-in-a-tree");
}

int main(int argc, char **argv) {
        out_dir = argc > 1 ? argv[1] : NULL;
        if (out_dir && mkdir(out_dir, 0755) < 0 && errno != EEXIST) {
                fprintf(stderr, "gen_corpus: cannot create %s: %s\n", out_dir, strerror(errno));
                return 1;
        }
        int64_t shape[] = { 4, 3 };
        char *hosts[] = { "node-a", "node-b" };
        uint8_t secret[16] = "0123456789abcdef";

        Hvd__Hello h = HVD__HELLO__INIT;
        h.job_id = "job-1";
        h.secret = (ProtobufCBinaryData){ sizeof secret, secret };
        h.world_size = 4, h.local_size = 2, h.local_rank = 1, h.rank = 3, h.pid = 1234;
        h.host = "node-b";
        h.device = -1;
        h.fusion_threshold = -1;
        h.data_addr = "127.0.0.1:4000";
        h.cross_rank = 1, h.cross_size = 2;
        h.root_peer = "tcp://127.0.0.1:7100";
        h.hosts = hosts, h.n_hosts = 2;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        emit("hello", &env, true);
        h.local_rank = 2;
        emit("bad-hello-local-rank", &env, false);
        h.local_rank = 1;
        h.job_id = "job\x01";
        emit("bad-hello-control-char", &env, false);
        h.job_id = "job-\xc3\x28";
        emit("bad-hello-utf8", &env, false);
        h.job_id = "job-1";
        env.version = 7;
        emit("bad-version", &env, false);
        env.version = 0;

        Hvd__RankInfo ri[2] = { HVD__RANK_INFO__INIT, HVD__RANK_INFO__INIT };
        Hvd__RankInfo *rip[2] = { &ri[0], &ri[1] };
        for (int i = 0; i < 2; i++) {
                ri[i].rank = (uint32_t) i;
                ri[i].local_rank = (uint32_t) i;
                ri[i].pid = 100 + (uint32_t) i;
                ri[i].host = "node-a";
                ri[i].data_addr = "127.0.0.1:4001";
        }
        Hvd__Welcome w = HVD__WELCOME__INIT;
        w.epoch = 1, w.rank = 1, w.size = 2, w.local_rank = 1, w.local_size = 2, w.cross_size = 1;
        w.shm_name = "/hvd-job-1";
        w.slot_bytes = 1 << 20;
        w.ranks = rip, w.n_ranks = 2;
        env.body_case = HVD__ENVELOPE__BODY_WELCOME;
        env.welcome = &w;
        emit("welcome", &env, true);
        w.rank = 2;
        emit("bad-welcome-rank", &env, false);
        w.rank = 1;

        Hvd__Request q1 = request("grad.fc1.weight", HVD__KIND__KIND_ALLREDUCE, shape, 2);
        Hvd__Request q2 = request("grad.fc1.bias", HVD__KIND__KIND_ALLGATHER, shape, 1);
        Hvd__Request *qs[] = { &q1, &q2 };
        uint32_t cached[] = { 1, 2, 3 };
        Hvd__Ready ready = HVD__READY__INIT;
        ready.epoch = 1;
        ready.requests = qs, ready.n_requests = 2;
        ready.cached = cached, ready.n_cached = 3;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        emit("ready", &env, true);
        q1.kind = 99;
        emit("bad-ready-kind", &env, false);
        q1.kind = HVD__KIND__KIND_ALLREDUCE;
        q1.dtype = 200;
        emit("bad-ready-dtype", &env, false);
        q1.dtype = HVD_FLOAT32;
        int64_t neg[] = { 4, -1 };
        q1.shape = neg;
        emit("bad-ready-negative-dim", &env, false);
        int64_t huge[] = { INT64_C(1) << 40, INT64_C(1) << 40 };
        q1.shape = huge;
        emit("bad-ready-overflow", &env, false);
        q1.shape = shape;
        q1.name = "";
        emit("bad-ready-empty-name", &env, false);
        q1.name = "grad.fc1.weight";

        Hvd__Entry e = HVD__ENTRY__INIT;
        e.id = 1, e.name = "grad.fc1.weight", e.count = 12, e.shape = shape, e.n_shape = 2;
        Hvd__Entry *ep[] = { &e };
        Hvd__Op op = HVD__OP__INIT;
        op.kind = HVD__KIND__KIND_ALLREDUCE, op.dtype = HVD_FLOAT32, op.reduce_op = HVD_REDUCE_SUM;
        op.prescale = op.postscale = 1.0, op.device = -1;
        op.entries = ep, op.n_entries = 1;
        Hvd__Op *opp[] = { &op };
        Hvd__TensorError te = HVD__TENSOR_ERROR__INIT;
        te.name = "grad.x", te.id = 5, te.code = -71, te.message = "rank 1 sent shape [3], rank 0 sent [4]";
        Hvd__TensorError *tep[] = { &te };
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        s.seq = 1, s.ops = opp, s.n_ops = 1, s.errors = tep, s.n_errors = 1, s.join_done_last_rank = -1;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = &s;
        emit("schedule", &env, true);
        op.reduce_op = 77;
        emit("bad-schedule-op", &env, false);
        op.reduce_op = HVD_REDUCE_SUM;

        Hvd__Done done = HVD__DONE__INIT;
        done.seq = 3, done.bytes = 4096, done.busy_usec = 17;
        env.body_case = HVD__ENVELOPE__BODY_DONE;
        env.done = &done;
        emit("done", &env, true);

        Hvd__Goodbye bye = HVD__GOODBYE__INIT;
        bye.rank = 1;
        env.body_case = HVD__ENVELOPE__BODY_GOODBYE;
        env.goodbye = &bye;
        emit("goodbye", &env, true);

        Hvd__Abort ab = HVD__ABORT__INIT;
        ab.job_id = "job-1", ab.reason = "rank 1 exited", ab.lost_rank = 1, ab.code = -71;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        emit("abort", &env, true);

        Hvd__StatusRequest sr = HVD__STATUS_REQUEST__INIT;
        sr.job_id = "job-1";
        env.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        env.status_request = &sr;
        emit("status-request", &env, true);

        Hvd__JobStatus js = HVD__JOB_STATUS__INIT;
        js.job_id = "job-1", js.size = 2, js.state = "running", js.ranks = rip, js.n_ranks = 2;
        js.stalled = "";
        Hvd__JobStatus *jsp[] = { &js };
        Hvd__PeerStatus ps = HVD__PEER_STATUS__INIT;
        ps.endpoint = "tcp://127.0.0.1:7100", ps.state = "connected";
        Hvd__PeerStatus *psp[] = { &ps };
        Hvd__Status st = HVD__STATUS__INIT;
        st.version = "0.1.0", st.pid = 42, st.runtime_dir = "/run/hvd", st.host = "node-a";
        st.jobs = jsp, st.n_jobs = 1, st.peers = psp, st.n_peers = 1;
        env.body_case = HVD__ENVELOPE__BODY_STATUS;
        env.status = &st;
        emit("status", &env, true);

        Hvd__ErrorReply er = HVD__ERROR_REPLY__INIT;
        er.code = -13, er.message = "job-1: wrong secret";
        env.body_case = HVD__ENVELOPE__BODY_ERROR;
        env.error = &er;
        emit("error", &env, true);

        Hvd__NodeJoin nj = HVD__NODE_JOIN__INIT;
        nj.job_id = "job-1", nj.secret = h.secret, nj.host = "node-b", nj.cross_rank = 1, nj.cross_size = 2;
        nj.world_size = 4, nj.ranks = rip, nj.n_ranks = 2, nj.fusion_threshold = -1;
        nj.hosts = hosts, nj.n_hosts = 2;
        env.body_case = HVD__ENVELOPE__BODY_NODE_JOIN;
        env.node_join = &nj;
        emit("node-join", &env, true);
        nj.world_size = 1;
        emit("bad-node-join-world", &env, false);
        nj.world_size = 4;

        Hvd__NodeWelcome nw = HVD__NODE_WELCOME__INIT;
        nw.job_id = "job-1", nw.ranks = rip, nw.n_ranks = 2, nw.epoch = 1;
        env.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
        env.node_welcome = &nw;
        emit("node-welcome", &env, true);
        ri[1].rank = 5;
        emit("bad-node-welcome-rank", &env, false);
        ri[1].rank = 1;

        Hvd__RankReady rr = HVD__RANK_READY__INIT;
        rr.rank = 1, rr.ready = &ready;
        Hvd__RankReady *rrp[] = { &rr };
        uint32_t departed[] = { 0 };
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        nr.job_id = "job-1", nr.ranks = rrp, nr.n_ranks = 1, nr.node_cached = cached, nr.n_node_cached = 3;
        nr.departed = departed, nr.n_departed = 1;
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        emit("node-ready", &env, true);
        rr.ready = NULL;
        emit("bad-node-ready-empty", &env, false);
        rr.ready = &ready;

        Hvd__JobSchedule jsch = HVD__JOB_SCHEDULE__INIT;
        jsch.job_id = "job-1", jsch.schedule = &s;
        env.body_case = HVD__ENVELOPE__BODY_JOB_SCHEDULE;
        env.job_schedule = &jsch;
        emit("job-schedule", &env, true);

        Hvd__Ping ping = HVD__PING__INIT;
        ping.sent_usec = 123456789, ping.reply = 1;
        env.body_case = HVD__ENVELOPE__BODY_PING;
        env.ping = &ping;
        emit("ping", &env, true);

        env.body_case = HVD__ENVELOPE__BODY__NOT_SET;
        emit("bad-no-body", &env, false);

        /* raw malformed bytes */
        static const uint8_t truncated[] = { 0x08, 0x01, 0x52, 0x10, 0x0a, 0x05, 'j', 'o' };
        emit_raw("bad-truncated", truncated, sizeof truncated);
        static const uint8_t embedded_nul[] = { 0x08, 0x01, 0x8a, 0x01, 0x05, 0x0a, 0x03, 'j', 0, 'b' };
        emit_raw("bad-embedded-nul", embedded_nul, sizeof embedded_nul);
        static const uint8_t bad_varint[] = { 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
        emit_raw("bad-varint", bad_varint, sizeof bad_varint);
        /* 4096 empty repeated sub-messages: the decode budget refuses the amplification */
        size_t n = 4096, amp_len = 2 + 3 + 2 * n;
        uint8_t *amp = malloc(amp_len);
        size_t k = 0;
        amp[k++] = 0x08, amp[k++] = 0x01;
        amp[k++] = 0x62; /* field 12 (ready), length-delimited */
        amp[k++] = (uint8_t) (0x80 | ((2 * n) & 0x7f));
        amp[k++] = (uint8_t) ((2 * n) >> 7);
        for (size_t i = 0; i < n; i++)
                amp[k++] = 0x12, amp[k++] = 0x00; /* requests = {} */
        emit_raw("bad-amplification", amp, k);
        free(amp);

        negotiate_seeds();
        dispatch_seeds();
        if (failures) {
                fprintf(stderr, "gen_corpus: %d message(s) judged wrongly\n", failures);
                return 1;
        }
        printf("gen_corpus: every valid message decodes, every malformed one is refused\n");
        return 0;
}
