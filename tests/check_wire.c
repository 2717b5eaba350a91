/* check_wire.c — unit tests of the wire format (common/wire.c): every
 * message type survives pack → hvd_wire_decode; everything a peer could send
 * wrongly (version, truncation, garbage, out-of-range enums, bad names, bad
 * dims, out-of-range ranks, too many entries) is refused with a readable
 * reason; the decode budget stops amplification; the schema has no
 * recursive message type; hvd_control_call keeps its deadline. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "hvd.h"
#include "hvd.pb-c.h"
#include "util.h"
#include "wire.h"

/* ---- helpers ---- */

typedef struct packed {
        uint8_t *buf;
        size_t len;
} packed_t;

static packed_t pack_version(Hvd__Envelope *env, uint32_t version) {
        env->version = version;
        packed_t p;
        p.len = hvd__envelope__get_packed_size(env);
        p.buf = malloc(p.len ? p.len : 1);
        ck_assert_ptr_nonnull(p.buf);
        ck_assert_uint_eq(hvd__envelope__pack(env, p.buf), p.len);
        return p;
}

static packed_t pack(Hvd__Envelope *env) {
        return pack_version(env, HVD_PROTOCOL_VERSION);
}

static Hvd__Envelope *decode_ok(packed_t p) {
        Hvd__Envelope *env = NULL;
        char err[512] = "";
        int r = hvd_wire_decode(p.buf, p.len, 0, &env, err, sizeof err);
        ck_assert_msg(r == 0, "decode failed: %d (%s)", r, err);
        ck_assert_ptr_nonnull(env);
        free(p.buf);
        return env;
}

/* decode must fail with code; err must contain `needle` */
static void decode_fails(packed_t p, int code, const char *needle) {
        Hvd__Envelope *env = (Hvd__Envelope *) 0x1;
        char err[512] = "";
        int r = hvd_wire_decode(p.buf, p.len, 0, &env, err, sizeof err);
        ck_assert_msg(r == code, "decode returned %d (%s), expected %d (want \"%s\")", r, err, code, needle);
        ck_assert_msg(env == (Hvd__Envelope *) 0x1, "out-parameter changed on failure");
        ck_assert_msg(strstr(err, needle), "error \"%s\" does not mention \"%s\"", err, needle);
        free(p.buf);
}

static void validate_fails(const Hvd__Envelope *env, const char *needle) {
        char err[512] = "";
        int r = hvd_wire_validate(env, err, sizeof err);
        ck_assert_msg(r == HVD_EPROTO, "validate returned %d (%s), expected HVD_EPROTO", r, err);
        ck_assert_msg(strstr(err, needle), "error \"%s\" does not mention \"%s\"", err, needle);
}

static Hvd__Hello hello_base(void) {
        Hvd__Hello h = HVD__HELLO__INIT;
        h.job_id = "job-1";
        h.world_size = 4;
        h.local_size = 4;
        h.local_rank = 2;
        h.rank = 2;
        h.pid = 1234;
        h.host = "node1";
        h.device = HVD_DEVICE_CPU;
        h.fusion_threshold = -1;
        return h;
}

static Hvd__Envelope env_of_hello(Hvd__Hello *h) {
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_HELLO;
        env.hello = h;
        return env;
}

/* an envelope with one Ready of one request */
typedef struct one_req {
        Hvd__Envelope env;
        Hvd__Ready ready;
        Hvd__Request req;
        Hvd__Request *rp[1];
        int64_t shape[16];
        int64_t splits[4];
} one_req_t;

static void one_req_init(one_req_t *o, const char *name) {
        hvd__envelope__init(&o->env);
        hvd__ready__init(&o->ready);
        hvd__request__init(&o->req);
        o->req.name = (char *) name;
        o->req.kind = HVD__KIND__KIND_ALLREDUCE;
        o->req.dtype = HVD_FLOAT32;
        o->req.reduce_op = HVD_REDUCE_SUM;
        o->req.prescale = o->req.postscale = 1.0;
        o->req.device = HVD_DEVICE_CPU;
        o->shape[0] = 2;
        o->shape[1] = 3;
        o->req.shape = o->shape;
        o->req.n_shape = 2;
        o->rp[0] = &o->req;
        o->ready.requests = o->rp;
        o->ready.n_requests = 1;
        o->env.body_case = HVD__ENVELOPE__BODY_READY;
        o->env.ready = &o->ready;
}

/* ---- round trips ---- */

START_TEST(test_wire_roundtrip_hello) {
        Hvd__Hello h = hello_base();
        uint8_t secret[] = { 0xde, 0xad, 0x00, 0xbe, 0xef };
        h.secret.data = secret;
        h.secret.len = sizeof secret;
        h.cycle_time_usec = 2500;
        h.fusion_threshold = 4 << 20;
        Hvd__Envelope env = env_of_hello(&h);
        Hvd__Envelope *d = decode_ok(pack(&env));
        ck_assert_uint_eq(d->version, HVD_PROTOCOL_VERSION);
        ck_assert_int_eq(d->body_case, HVD__ENVELOPE__BODY_HELLO);
        const Hvd__Hello *g = d->hello;
        ck_assert_str_eq(g->job_id, "job-1");
        ck_assert_uint_eq(g->secret.len, sizeof secret);
        ck_assert_mem_eq(g->secret.data, secret, sizeof secret);
        ck_assert_uint_eq(g->world_size, 4);
        ck_assert_uint_eq(g->local_size, 4);
        ck_assert_uint_eq(g->local_rank, 2);
        ck_assert_uint_eq(g->rank, 2);
        ck_assert_uint_eq(g->pid, 1234);
        ck_assert_str_eq(g->host, "node1");
        ck_assert_int_eq(g->device, HVD_DEVICE_CPU);
        ck_assert_int_eq(g->fusion_threshold, 4 << 20);
        ck_assert_uint_eq(g->cycle_time_usec, 2500);
        hvd_wire_free(&d);
        ck_assert_ptr_null(d);
        hvd_wire_free(&d); /* NULL-safe */
        hvd_wire_free(NULL);
}
END_TEST

START_TEST(test_wire_roundtrip_welcome) {
        Hvd__RankInfo ri[2], *rp[2];
        for (int i = 0; i < 2; i++) {
                hvd__rank_info__init(&ri[i]);
                ri[i].rank = (uint32_t) i;
                ri[i].local_rank = (uint32_t) i;
                ri[i].pid = 100 + (uint32_t) i;
                ri[i].host = i ? "b" : "a";
                rp[i] = &ri[i];
        }
        Hvd__Welcome w = HVD__WELCOME__INIT;
        w.epoch = UINT64_C(0x1234567890abcdef);
        w.rank = 1;
        w.size = 2;
        w.local_rank = 1;
        w.local_size = 2;
        w.cross_rank = 0;
        w.cross_size = 1;
        w.shm_name = "/hvd-1-2-abcd";
        w.slot_bytes = 4 << 20;
        w.fusion_threshold = 64 << 20;
        w.cycle_time_usec = 1000;
        w.collective_timeout_usec = 300000000;
        w.heartbeat_interval_usec = 500000;
        w.heartbeat_timeout_usec = 3000000;
        w.ranks = rp;
        w.n_ranks = 2;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_WELCOME;
        env.welcome = &w;
        Hvd__Envelope *d = decode_ok(pack(&env));
        const Hvd__Welcome *g = d->welcome;
        ck_assert_uint_eq(g->epoch, UINT64_C(0x1234567890abcdef));
        ck_assert_uint_eq(g->rank, 1);
        ck_assert_uint_eq(g->size, 2);
        ck_assert_str_eq(g->shm_name, "/hvd-1-2-abcd");
        ck_assert_uint_eq(g->slot_bytes, 4 << 20);
        ck_assert_uint_eq(g->collective_timeout_usec, 300000000);
        ck_assert_uint_eq(g->heartbeat_interval_usec, 500000);
        ck_assert_uint_eq(g->heartbeat_timeout_usec, 3000000);
        ck_assert_uint_eq(g->n_ranks, 2);
        ck_assert_uint_eq(g->ranks[1]->pid, 101);
        ck_assert_str_eq(g->ranks[1]->host, "b");
        hvd_wire_free(&d);
        /* a heartbeat is a known body that passes validation */
        Hvd__Heartbeat hb = HVD__HEARTBEAT__INIT;
        hb.epoch = 7;
        hb.sent_usec = 42;
        Hvd__Envelope henv = HVD__ENVELOPE__INIT;
        henv.body_case = HVD__ENVELOPE__BODY_HEARTBEAT;
        henv.heartbeat = &hb;
        d = decode_ok(pack(&henv));
        ck_assert_int_eq(d->body_case, HVD__ENVELOPE__BODY_HEARTBEAT);
        ck_assert_uint_eq(d->heartbeat->epoch, 7);
        ck_assert_uint_eq(d->heartbeat->sent_usec, 42);
        hvd_wire_free(&d);
}
END_TEST

START_TEST(test_wire_roundtrip_ready) {
        one_req_t o;
        one_req_init(&o, "grad.fc1.weight");
        o.req.kind = HVD__KIND__KIND_ALLTOALL;
        o.req.dtype = HVD_BFLOAT16;
        o.req.reduce_op = HVD_REDUCE_PRODUCT;
        o.req.prescale = 0.5;
        o.req.postscale = 3.0;
        o.req.root = 1;
        o.splits[0] = 0;
        o.splits[1] = 2;
        o.req.splits = o.splits;
        o.req.n_splits = 2;
        o.req.group_id = 9;
        o.req.group_size = 2;
        uint32_t cached[] = { 3, 7, 65535 };
        o.ready.cached = cached;
        o.ready.n_cached = 3;
        o.ready.epoch = 42;
        Hvd__Envelope *d = decode_ok(pack(&o.env));
        const Hvd__Ready *g = d->ready;
        ck_assert_uint_eq(g->epoch, 42);
        ck_assert_uint_eq(g->n_requests, 1);
        const Hvd__Request *q = g->requests[0];
        ck_assert_str_eq(q->name, "grad.fc1.weight");
        ck_assert_int_eq(q->kind, HVD__KIND__KIND_ALLTOALL);
        ck_assert_uint_eq(q->dtype, HVD_BFLOAT16);
        ck_assert_uint_eq(q->reduce_op, HVD_REDUCE_PRODUCT);
        ck_assert(q->prescale == 0.5 && q->postscale == 3.0);
        ck_assert_int_eq(q->root, 1);
        ck_assert_uint_eq(q->n_shape, 2);
        ck_assert_int_eq(q->shape[0], 2);
        ck_assert_int_eq(q->shape[1], 3);
        ck_assert_uint_eq(q->n_splits, 2);
        ck_assert_int_eq(q->splits[1], 2);
        ck_assert_int_eq(q->device, HVD_DEVICE_CPU);
        ck_assert_uint_eq(q->group_id, 9);
        ck_assert_uint_eq(q->group_size, 2);
        ck_assert_uint_eq(g->n_cached, 3);
        ck_assert_uint_eq(g->cached[2], 65535);
        hvd_wire_free(&d);
        /* a host's ids from its board (node mode), with their waits */
        uint32_t host[] = { 4, 9 };
        uint64_t waited[] = { 10, 20 };
        o.ready.node_cached = host;
        o.ready.n_node_cached = 2;
        o.ready.node_cached_waited_usec = waited;
        o.ready.n_node_cached_waited_usec = 2;
        d = decode_ok(pack(&o.env));
        ck_assert_uint_eq(d->ready->n_node_cached, 2);
        ck_assert_uint_eq(d->ready->node_cached[1], 9);
        ck_assert_uint_eq(d->ready->node_cached_waited_usec[1], 20);
        hvd_wire_free(&d);
        o.ready.n_node_cached_waited_usec = 1;
        validate_fails(&o.env, "do not match the host-level ids");
}
END_TEST

/* hvd_wire_equal says what comparing the packed bytes would: a and b
 * are equal exactly when they pack alike. */
static void equal_as_packed(const ProtobufCMessage *a, const ProtobufCMessage *b, bool want) {
        size_t la = protobuf_c_message_get_packed_size(a), lb = protobuf_c_message_get_packed_size(b);
        uint8_t *pa = malloc(la + 1), *pb = malloc(lb + 1);
        ck_assert(pa && pb);
        protobuf_c_message_pack(a, pa);
        protobuf_c_message_pack(b, pb);
        bool packed = la == lb && memcmp(pa, pb, la) == 0;
        free(pa);
        free(pb);
        ck_assert_msg(packed == want, "the packed bytes %s", packed ? "are equal" : "differ");
        ck_assert_msg(hvd_wire_equal(a, b) == want, "hvd_wire_equal says %s", want ? "not equal" : "equal");
        ck_assert(hvd_wire_equal(b, a) == want);
}

/* one_req_init() with splits [1, 5] */
static void one_req_split(one_req_t *o, const char *name) {
        one_req_init(o, name);
        o->req.splits = o->splits;
        o->req.n_splits = 2;
        o->splits[0] = 1;
        o->splits[1] = 5;
}

START_TEST(test_wire_equal) {
        one_req_t o;
        one_req_split(&o, "grad.fc1.weight");
        o.ready.epoch = 7;
        packed_t p = pack(&o.env);
        Hvd__Envelope *d = decode_ok(p), *c = decode_ok(pack(&o.env));
        ck_assert(hvd_wire_equal(NULL, NULL));
        ck_assert(!hvd_wire_equal(&d->base, NULL));
        ck_assert(hvd_wire_equal(&d->base, &d->base));
        equal_as_packed(&d->base, &c->base, true);
        equal_as_packed(&d->base, &o.env.base, true);
        Hvd__Request *q = c->ready->requests[0];
        /* one field at a time, in the message and the one inside it */
        q->name[0] = 'G';
        equal_as_packed(&d->base, &c->base, false);
        q->name[0] = 'g';
        q->shape[1] = 4;
        equal_as_packed(&d->base, &c->base, false);
        q->shape[1] = 3;
        q->n_shape = 1;
        equal_as_packed(&d->base, &c->base, false);
        q->n_shape = 2;
        q->splits[0] = 2;
        equal_as_packed(&d->base, &c->base, false);
        q->splits[0] = 1;
        q->postscale = 0.5;
        equal_as_packed(&d->base, &c->base, false);
        q->postscale = 1.0;
        q->group_size = 3;
        equal_as_packed(&d->base, &c->base, false);
        q->group_size = 0;
        c->ready->epoch = 8;
        equal_as_packed(&d->base, &c->base, false);
        c->ready->epoch = 7;
        c->ready->n_requests = 0;
        equal_as_packed(&d->base, &c->base, false);
        c->ready->n_requests = 1;
        equal_as_packed(&d->base, &c->base, true);
        /* another body of the envelope (its oneof) */
        Hvd__Goodbye g = HVD__GOODBYE__INIT;
        Hvd__Envelope e = HVD__ENVELOPE__INIT;
        e.version = d->version;
        e.body_case = HVD__ENVELOPE__BODY_GOODBYE;
        e.goodbye = &g;
        equal_as_packed(&d->base, &e.base, false);
        /* a field this build does not know: never equal */
        p = pack(&o.env);
        uint8_t *more = malloc(p.len + 3);
        ck_assert_ptr_nonnull(more);
        memcpy(more, p.buf, p.len);
        more[p.len] = 0xb8; /* field 999, varint */
        more[p.len + 1] = 0x3e;
        more[p.len + 2] = 0x01;
        Hvd__Envelope *u = hvd__envelope__unpack(NULL, p.len + 3, more);
        ck_assert_ptr_nonnull(u);
        ck_assert_uint_eq(u->base.n_unknown_fields, 1);
        ck_assert(!hvd_wire_equal(&d->base, &u->base));
        protobuf_c_message_free_unpacked(&u->base, NULL);
        free(more);
        free(p.buf);
        hvd_wire_free(&d);
        hvd_wire_free(&c);
}
END_TEST

/* a deep copy packs alike and shares no memory with the original */
START_TEST(test_wire_dup) {
        one_req_t o;
        one_req_split(&o, "grad.fc1.weight");
        uint32_t set[] = { 0, 2, 5 };
        o.req.process_set = 3;
        o.req.set_ranks = set;
        o.req.n_set_ranks = 3;
        o.req.group_id = 4;
        o.req.group_size = 2;
        uint32_t cached[] = { 7, 9 };
        o.ready.cached = cached;
        o.ready.n_cached = 2;
        o.ready.epoch = 11;
        Hvd__Envelope *d = decode_ok(pack(&o.env));
        Hvd__Request *q = (Hvd__Request *) hvd_wire_dup(&d->ready->requests[0]->base);
        ck_assert_ptr_nonnull(q);
        equal_as_packed(&q->base, &d->ready->requests[0]->base, true);
        ck_assert_ptr_ne(q->name, d->ready->requests[0]->name);
        ck_assert_ptr_ne(q->shape, d->ready->requests[0]->shape);
        q->shape[0] = 99;
        q->set_ranks[1] = 1;
        ck_assert_int_eq(d->ready->requests[0]->shape[0], 2);
        ck_assert_uint_eq(d->ready->requests[0]->set_ranks[1], 2);
        protobuf_c_message_free_unpacked(&q->base, NULL);
        /* the whole envelope: a oneof, a message inside, repeated ids */
        Hvd__Envelope *e = (Hvd__Envelope *) hvd_wire_dup(&d->base);
        ck_assert_ptr_nonnull(e);
        equal_as_packed(&e->base, &d->base, true);
        ck_assert_ptr_ne(e->ready, d->ready);
        hvd_wire_free(&e);
        /* fields left at their defaults: an empty name stays the default */
        Hvd__Request empty = HVD__REQUEST__INIT;
        q = (Hvd__Request *) hvd_wire_dup(&empty.base);
        ck_assert_ptr_nonnull(q);
        equal_as_packed(&q->base, &empty.base, true);
        protobuf_c_message_free_unpacked(&q->base, NULL);
        ck_assert_ptr_null(hvd_wire_dup(NULL));
        hvd_wire_free(&d);
}
END_TEST

START_TEST(test_wire_roundtrip_schedule) {
        int64_t rows[] = { 2, 0, 3 }, shape[] = { 2, 5 }, splits[] = { 1, 2, 2, 2 };
        uint32_t joined[] = { 1 };
        Hvd__Entry e = HVD__ENTRY__INIT, *ep[1] = { &e };
        e.id = 17;
        e.name = "g";
        e.count = 10;
        e.row_elems = 5;
        e.rank_rows = rows;
        e.n_rank_rows = 3;
        e.splits = splits;
        e.n_splits = 4;
        e.shape = shape;
        e.n_shape = 2;
        Hvd__Op op = HVD__OP__INIT, *opp[1] = { &op };
        op.kind = HVD__KIND__KIND_ALLGATHER;
        op.dtype = HVD_INT64;
        op.reduce_op = HVD_REDUCE_MAX;
        op.prescale = 1.0;
        op.postscale = 0.25;
        op.root = 2;
        op.entries = ep;
        op.n_entries = 1;
        op.joined = joined;
        op.n_joined = 1;
        Hvd__TensorError te = HVD__TENSOR_ERROR__INIT, *tep[1] = { &te };
        te.name = "w";
        te.id = 4;
        te.code = HVD_EMISMATCH;
        te.message = "allreduce 'w': rank 1 sent shape [3, 2], rank 0 sent [2, 3]";
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        s.seq = 12345;
        s.ops = opp;
        s.n_ops = 1;
        s.errors = tep;
        s.n_errors = 1;
        s.join_done_last_rank = 2;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = &s;
        Hvd__Envelope *d = decode_ok(pack(&env));
        const Hvd__Schedule *g = d->schedule;
        ck_assert_uint_eq(g->seq, 12345);
        ck_assert_int_eq(g->join_done_last_rank, 2);
        ck_assert_uint_eq(g->n_ops, 1);
        const Hvd__Op *go = g->ops[0];
        ck_assert_int_eq(go->kind, HVD__KIND__KIND_ALLGATHER);
        ck_assert_uint_eq(go->dtype, HVD_INT64);
        ck_assert_uint_eq(go->reduce_op, HVD_REDUCE_MAX);
        ck_assert(go->postscale == 0.25);
        ck_assert_int_eq(go->root, 2);
        ck_assert_uint_eq(go->n_joined, 1);
        ck_assert_uint_eq(go->joined[0], 1);
        const Hvd__Entry *ge = go->entries[0];
        ck_assert_uint_eq(ge->id, 17);
        ck_assert_str_eq(ge->name, "g");
        ck_assert_uint_eq(ge->count, 10);
        ck_assert_uint_eq(ge->row_elems, 5);
        ck_assert_uint_eq(ge->n_rank_rows, 3);
        ck_assert_int_eq(ge->rank_rows[2], 3);
        ck_assert_uint_eq(ge->n_splits, 4);
        ck_assert_int_eq(ge->splits[1], 2);
        ck_assert_uint_eq(ge->n_shape, 2);
        ck_assert_uint_eq(g->n_errors, 1);
        ck_assert_str_eq(g->errors[0]->name, "w");
        ck_assert_uint_eq(g->errors[0]->id, 4);
        ck_assert_int_eq(g->errors[0]->code, HVD_EMISMATCH);
        ck_assert_str_eq(g->errors[0]->message, te.message);
        hvd_wire_free(&d);
}
END_TEST

START_TEST(test_wire_roundtrip_small_messages) {
        Hvd__Envelope env = HVD__ENVELOPE__INIT, *d;

        Hvd__Done done = HVD__DONE__INIT;
        done.seq = 7;
        done.bytes = 1 << 20;
        done.busy_usec = 99;
        env.body_case = HVD__ENVELOPE__BODY_DONE;
        env.done = &done;
        d = decode_ok(pack(&env));
        ck_assert_uint_eq(d->done->seq, 7);
        ck_assert_uint_eq(d->done->bytes, 1 << 20);
        ck_assert_uint_eq(d->done->busy_usec, 99);
        hvd_wire_free(&d);

        Hvd__Goodbye bye = HVD__GOODBYE__INIT;
        bye.rank = 3;
        env.body_case = HVD__ENVELOPE__BODY_GOODBYE;
        env.goodbye = &bye;
        d = decode_ok(pack(&env));
        ck_assert_uint_eq(d->goodbye->rank, 3);
        hvd_wire_free(&d);

        Hvd__Abort ab = HVD__ABORT__INIT;
        ab.job_id = "j";
        ab.reason = "rank 1 (pid 5 on h) exited without calling hvd_shutdown";
        ab.lost_rank = 1;
        ab.code = HVD_EABORTED;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        d = decode_ok(pack(&env));
        ck_assert_str_eq(d->abort->job_id, "j");
        ck_assert_str_eq(d->abort->reason, ab.reason);
        ck_assert_int_eq(d->abort->lost_rank, 1);
        ck_assert_int_eq(d->abort->code, HVD_EABORTED);
        hvd_wire_free(&d);

        Hvd__StatusRequest sr = HVD__STATUS_REQUEST__INIT;
        sr.job_id = "job-9";
        env.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        env.status_request = &sr;
        d = decode_ok(pack(&env));
        ck_assert_str_eq(d->status_request->job_id, "job-9");
        hvd_wire_free(&d);

        Hvd__ErrorReply er = HVD__ERROR_REPLY__INIT;
        er.code = HVD_EDENIED;
        er.message = "job j: wrong job secret";
        env.body_case = HVD__ENVELOPE__BODY_ERROR;
        env.error = &er;
        d = decode_ok(pack(&env));
        ck_assert_int_eq(d->error->code, HVD_EDENIED);
        ck_assert_str_eq(d->error->message, er.message);
        hvd_wire_free(&d);
}
END_TEST

START_TEST(test_wire_roundtrip_status) {
        Hvd__JobStatus js = HVD__JOB_STATUS__INIT, *jp[1] = { &js };
        js.job_id = "job-1";
        js.size = 4;
        js.state = "running";
        js.tensors_negotiated = 300;
        js.fused_ops = 12;
        js.tensors_in_fused_ops = 290;
        js.cache_hits = 5;
        js.joined_ranks = 1;
        Hvd__Status st = HVD__STATUS__INIT;
        st.version = "0.1.0";
        st.uptime_usec = 5000000;
        st.pid = 77;
        st.runtime_dir = "/run/hvd";
        st.jobs = jp;
        st.n_jobs = 1;
        st.fusion_threshold = 64 << 20;
        st.host = "h";
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_STATUS;
        env.status = &st;
        Hvd__Envelope *d = decode_ok(pack(&env));
        ck_assert_str_eq(d->status->version, "0.1.0");
        ck_assert_uint_eq(d->status->pid, 77);
        ck_assert_uint_eq(d->status->n_jobs, 1);
        ck_assert_str_eq(d->status->jobs[0]->job_id, "job-1");
        ck_assert_str_eq(d->status->jobs[0]->state, "running");
        ck_assert_uint_eq(d->status->jobs[0]->tensors_negotiated, 300);
        ck_assert_uint_eq(d->status->jobs[0]->fused_ops, 12);
        ck_assert_uint_eq(d->status->jobs[0]->tensors_in_fused_ops, 290);
        hvd_wire_free(&d);
}
END_TEST

/* ---- rejection ---- */

START_TEST(test_wire_reject_version) {
        Hvd__Hello h = hello_base();
        Hvd__Envelope env = env_of_hello(&h);
        decode_fails(pack_version(&env, 2), HVD_EPROTO, "protocol version 2");
        decode_fails(pack_version(&env, 0), HVD_EPROTO, "protocol version 0");
        /* validate alone says the same */
        env.version = 99;
        validate_fails(&env, "protocol version 99");
}
END_TEST

START_TEST(test_wire_reject_no_body) {
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        decode_fails(pack(&env), HVD_EPROTO, "no known body");
}
END_TEST

START_TEST(test_wire_reject_truncated_and_garbage) {
        Hvd__Hello h = hello_base();
        h.job_id = "a-rather-long-job-identifier";
        Hvd__Envelope env = env_of_hello(&h);
        packed_t p = pack(&env);
        /* cut inside the hello sub-message */
        packed_t t = { malloc(p.len), p.len - 5 };
        memcpy(t.buf, p.buf, t.len);
        decode_fails(t, HVD_EPROTO, "malformed");
        free(p.buf);

        uint8_t *g = malloc(64);
        memset(g, 0xff, 64);
        decode_fails((packed_t){ g, 64 }, HVD_EPROTO, "malformed");

        /* a field of a wrong wire type for the envelope's body */
        uint8_t bad[] = { 0x08, 0x01, 0x55, 0x01 };
        g = malloc(sizeof bad);
        memcpy(g, bad, sizeof bad);
        decode_fails((packed_t){ g, sizeof bad }, HVD_EPROTO, "");
}
END_TEST

START_TEST(test_wire_no_crash_on_prefixes_and_flips) {
        /* every prefix and many single-byte corruptions of a rich message:
         * either a clean error or a valid message, never a crash or leak */
        int64_t rows[] = { 2, 0, 3 }, shape[] = { 2, 5 };
        Hvd__Entry e = HVD__ENTRY__INIT, *ep[1] = { &e };
        e.name = "g";
        e.rank_rows = rows;
        e.n_rank_rows = 3;
        e.shape = shape;
        e.n_shape = 2;
        Hvd__Op op = HVD__OP__INIT, *opp[1] = { &op };
        op.kind = HVD__KIND__KIND_ALLGATHER;
        op.entries = ep;
        op.n_entries = 1;
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        s.seq = 1;
        s.ops = opp;
        s.n_ops = 1;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = &s;
        packed_t p = pack(&env);
        char err[512];
        for (size_t len = 0; len <= p.len; len++) {
                Hvd__Envelope *d = NULL;
                int r = hvd_wire_decode(p.buf, len, 0, &d, err, sizeof err);
                ck_assert(r == 0 || r == HVD_EPROTO || r == -ENOMEM);
                ck_assert(r == 0 ? d != NULL : d == NULL);
                if (r < 0)
                        ck_assert_msg(err[0], "no reason for a refused prefix of %zu bytes", len);
                hvd_wire_free(&d);
        }
        uint8_t *c = malloc(p.len);
        unsigned seed = 12345;
        for (int i = 0; i < 20000; i++) {
                memcpy(c, p.buf, p.len);
                seed = seed * 1103515245u + 12345u;
                c[(seed >> 8) % p.len] ^= (uint8_t) (1u << ((seed >> 4) & 7));
                seed = seed * 1103515245u + 12345u;
                if (seed & 1)
                        c[(seed >> 8) % p.len] = (uint8_t) (seed >> 16);
                Hvd__Envelope *d = NULL;
                int r = hvd_wire_decode(c, p.len, 0, &d, err, sizeof err);
                ck_assert(r == 0 || r == HVD_EPROTO || r == -ENOMEM);
                hvd_wire_free(&d);
        }
        free(c);
        free(p.buf);
}
END_TEST

START_TEST(test_wire_reject_enums) {
        one_req_t o;
        one_req_init(&o, "x");
        o.req.kind = (Hvd__Kind) 99;
        decode_fails(pack(&o.env), HVD_EPROTO, "tensor 'x': unknown operation 99");
        o.req.kind = HVD__KIND__KIND_NONE;
        decode_fails(pack(&o.env), HVD_EPROTO, "tensor 'x': unknown operation 0");
        o.req.kind = HVD__KIND__KIND_ALLREDUCE;
        o.req.dtype = _HVD_DTYPE_COUNT;
        decode_fails(pack(&o.env), HVD_EPROTO, "tensor 'x': unknown dtype 10");
        o.req.dtype = 0xffffffffu;
        decode_fails(pack(&o.env), HVD_EPROTO, "unknown dtype");
        o.req.dtype = HVD_FLOAT32;
        o.req.reduce_op = _HVD_REDUCE_COUNT;
        decode_fails(pack(&o.env), HVD_EPROTO, "tensor 'x': unknown reduce op 5");
        o.req.reduce_op = HVD_REDUCE_SUM;
        /* the last valid values pass */
        o.req.kind = HVD__KIND__KIND_JOIN;
        o.req.dtype = _HVD_DTYPE_COUNT - 1;
        o.req.reduce_op = _HVD_REDUCE_COUNT - 1;
        Hvd__Envelope *d = decode_ok(pack(&o.env));
        hvd_wire_free(&d);

        /* the same ranges in a schedule's ops */
        Hvd__Op op = HVD__OP__INIT, *opp[1] = { &op };
        op.kind = (Hvd__Kind) 8;
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        s.ops = opp;
        s.n_ops = 1;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = &s;
        decode_fails(pack(&env), HVD_EPROTO, "invalid operation");
        op.kind = HVD__KIND__KIND_ALLREDUCE;
        op.dtype = 10;
        decode_fails(pack(&env), HVD_EPROTO, "invalid operation");
        op.dtype = 0;
        op.reduce_op = 5;
        decode_fails(pack(&env), HVD_EPROTO, "invalid operation");
}
END_TEST

START_TEST(test_wire_reject_names) {
        one_req_t o;
        one_req_init(&o, "a\tb");
        decode_fails(pack(&o.env), HVD_EPROTO, "control characters");
        one_req_init(&o, "line\nbreak");
        decode_fails(pack(&o.env), HVD_EPROTO, "control characters");
        one_req_init(&o, "\xff\xfe");
        decode_fails(pack(&o.env), HVD_EPROTO, "UTF-8");
        one_req_init(&o, "over\xc0\xaflong");
        decode_fails(pack(&o.env), HVD_EPROTO, "UTF-8");
        one_req_init(&o, "surrogate\xed\xa0\x80");
        decode_fails(pack(&o.env), HVD_EPROTO, "UTF-8");
        one_req_init(&o, "cut\xc3");
        decode_fails(pack(&o.env), HVD_EPROTO, "UTF-8");
        one_req_init(&o, "");
        decode_fails(pack(&o.env), HVD_EPROTO, "empty tensor name");
        char *longname = malloc(HVD_MAX_NAME_BYTES + 2);
        memset(longname, 'n', HVD_MAX_NAME_BYTES + 1);
        longname[HVD_MAX_NAME_BYTES + 1] = 0;
        one_req_init(&o, longname);
        decode_fails(pack(&o.env), HVD_EPROTO, "longer than 1024 bytes");
        longname[HVD_MAX_NAME_BYTES] = 0; /* exactly the limit is fine */
        one_req_init(&o, longname);
        Hvd__Envelope *d = decode_ok(pack(&o.env));
        ck_assert_uint_eq(strlen(d->ready->requests[0]->name), HVD_MAX_NAME_BYTES);
        hvd_wire_free(&d);
        free(longname);
        /* valid UTF-8 of every length passes */
        one_req_init(&o, "gr\xc3\xb6\xc3\x9f"
                         "e.\xe6\x97\xa5\xe6\x9c\xac.\xf0\x9f\x98\x80");
        d = decode_ok(pack(&o.env));
        hvd_wire_free(&d);

        /* host and job id in a hello */
        Hvd__Hello h = hello_base();
        h.job_id = "job\x01";
        Hvd__Envelope env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "job id contains control characters");
        h = hello_base();
        h.host = "h\xff";
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "host name is not valid UTF-8");
        char job[HVD_WIRE_MAX_JOB_ID + 2];
        memset(job, 'j', sizeof job - 1);
        job[sizeof job - 1] = 0;
        h = hello_base();
        h.job_id = job;
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "job id longer than 128 bytes");
        h = hello_base();
        h.job_id = "";
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "empty job id");
}
END_TEST

START_TEST(test_wire_reject_embedded_nul) {
        /* "ab\0cd" on the wire must not turn into the tensor "ab" */
        one_req_t o;
        one_req_init(&o, "abXcd");
        packed_t p = pack(&o.env);
        uint8_t *x = memmem(p.buf, p.len, "abXcd", 5);
        ck_assert_ptr_nonnull(x);
        x[2] = 0;
        decode_fails(p, HVD_EPROTO, "NUL");

        Hvd__Hello h = hello_base();
        h.job_id = "jobXevil";
        Hvd__Envelope env = env_of_hello(&h);
        p = pack(&env);
        x = memmem(p.buf, p.len, "jobXevil", 8);
        ck_assert_ptr_nonnull(x);
        x[3] = 0;
        decode_fails(p, HVD_EPROTO, "NUL");
}
END_TEST

START_TEST(test_wire_reject_dims) {
        one_req_t o;
        one_req_init(&o, "x");
        o.shape[1] = -3;
        decode_fails(pack(&o.env), HVD_EPROTO, "negative dimension");
        one_req_init(&o, "x");
        o.shape[0] = INT64_C(1) << 40;
        o.shape[1] = INT64_C(1) << 40;
        decode_fails(pack(&o.env), HVD_EPROTO, "overflows");
        one_req_init(&o, "x");
        o.shape[0] = INT64_MAX;
        o.req.n_shape = 1;
        decode_fails(pack(&o.env), HVD_EPROTO, "overflows");
        /* a product that wraps uint64 to a small number */
        one_req_init(&o, "x");
        o.shape[0] = INT64_C(1) << 32;
        o.shape[1] = INT64_C(1) << 32;
        decode_fails(pack(&o.env), HVD_EPROTO, "overflows");
        one_req_init(&o, "x");
        for (int i = 0; i < 9; i++)
                o.shape[i] = 1;
        o.req.n_shape = 9;
        decode_fails(pack(&o.env), HVD_EPROTO, "9 dimensions (at most 8)");
        o.req.n_shape = 8; /* 8 is allowed */
        Hvd__Envelope *d = decode_ok(pack(&o.env));
        hvd_wire_free(&d);
        /* a zero dimension makes any other dimension harmless */
        one_req_init(&o, "x");
        o.shape[0] = 0;
        o.shape[1] = INT64_MAX;
        d = decode_ok(pack(&o.env));
        hvd_wire_free(&d);
        /* negative splits */
        one_req_init(&o, "x");
        o.splits[0] = 3;
        o.splits[1] = -1;
        o.req.splits = o.splits;
        o.req.n_splits = 2;
        decode_fails(pack(&o.env), HVD_EPROTO, "negative split");

        /* schedules: negative rows, negative splits, bad shape */
        int64_t rows[] = { 1, -1 };
        Hvd__Entry e = HVD__ENTRY__INIT, *ep[1] = { &e };
        e.name = "g";
        e.rank_rows = rows;
        e.n_rank_rows = 2;
        Hvd__Op op = HVD__OP__INIT, *opp[1] = { &op };
        op.kind = HVD__KIND__KIND_ALLGATHER;
        op.entries = ep;
        op.n_entries = 1;
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        s.ops = opp;
        s.n_ops = 1;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = &s;
        decode_fails(pack(&env), HVD_EPROTO, "negative rows");
        e.n_rank_rows = 0;
        e.splits = rows;
        e.n_splits = 2;
        decode_fails(pack(&env), HVD_EPROTO, "negative split");
        e.n_splits = 0;
        int64_t bad_shape[] = { -5 };
        e.shape = bad_shape;
        e.n_shape = 1;
        decode_fails(pack(&env), HVD_EPROTO, "negative dimension");
}
END_TEST

START_TEST(test_wire_reject_ranks) {
        Hvd__Hello h = hello_base();
        h.rank = 4;
        Hvd__Envelope env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "rank 4 not below world size 4");
        h = hello_base();
        h.local_rank = 4;
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "local rank 4 not below local size 4");
        h = hello_base();
        h.world_size = 0;
        h.rank = 0;
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "world size 0");
        h = hello_base();
        h.local_size = 5;
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "local size 5");
        h = hello_base();
        h.world_size = HVD_WIRE_MAX_RANKS + 1;
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "world size");
        uint8_t secret[HVD_WIRE_MAX_SECRET + 1] = { 0 };
        h = hello_base();
        h.secret.data = secret;
        h.secret.len = sizeof secret;
        env = env_of_hello(&h);
        decode_fails(pack(&env), HVD_EPROTO, "secret too long");

        Hvd__Welcome w = HVD__WELCOME__INIT;
        w.rank = 2;
        w.size = 2;
        w.local_size = 2;
        w.cross_size = 1;
        w.shm_name = "/x";
        env = (Hvd__Envelope) HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_WELCOME;
        env.welcome = &w;
        decode_fails(pack(&env), HVD_EPROTO, "rank table out of range");
        w.rank = 1;
        w.local_rank = 2;
        decode_fails(pack(&env), HVD_EPROTO, "rank table out of range");
        w.local_rank = 1;
        w.cross_rank = 1;
        decode_fails(pack(&env), HVD_EPROTO, "rank table out of range");
        w.cross_rank = 0;
        Hvd__Envelope *d = decode_ok(pack(&env));
        hvd_wire_free(&d);
}
END_TEST

/* a host offered to a root daemon: its name, directory and slots */
START_TEST(test_wire_host_offer) {
        Hvd__HostOffer o = HVD__HOST_OFFER__INIT;
        o.host = "c";
        o.runtime_dir = "/run/hvd";
        o.machine = "0123abcd";
        o.slots = 2;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_HOST_OFFER;
        env.host_offer = &o;
        Hvd__Envelope *d = decode_ok(pack(&env));
        ck_assert_str_eq(d->host_offer->host, "c");
        ck_assert_uint_eq(d->host_offer->slots, 2);
        hvd_wire_free(&d);
        o.slots = 4097;
        decode_fails(pack(&env), HVD_EPROTO, "host offer: empty host or runtime directory, or more than 4096 slots");
        o.slots = 0;
        o.host = "";
        decode_fails(pack(&env), HVD_EPROTO, "host offer: empty host");
        o.host = "c\nd";
        decode_fails(pack(&env), HVD_EPROTO, "host name contains control characters");
        o.host = "c";
        o.runtime_dir = "";
        decode_fails(pack(&env), HVD_EPROTO, "host offer: empty host or runtime directory");
}
END_TEST

/* elastic membership: an enrolment's sizes and deadlines, a placement's ranks */
START_TEST(test_wire_elastic) {
        Hvd__Enroll e = HVD__ENROLL__INIT;
        e.job_id = "j";
        e.host = "a";
        e.root_peer = "";
        e.reason = "";
        e.min_size = 2;
        e.max_size = 4;
        e.initial_size = 4;
        e.timeout_usec = 600000000;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_ENROLL;
        env.enroll = &e;
        Hvd__Envelope *d = decode_ok(pack(&env));
        ck_assert_uint_eq(d->enroll->max_size, 4);
        hvd_wire_free(&d);
        e.min_size = 5;
        decode_fails(pack(&env), HVD_EPROTO, "elastic sizes out of range (min 5, max 4, initial 4)");
        e.min_size = 0;
        decode_fails(pack(&env), HVD_EPROTO, "elastic sizes out of range");
        e.min_size = 2;
        e.timeout_usec = UINT64_MAX;
        decode_fails(pack(&env), HVD_EPROTO, "elastic timeout or settle time out of range");
        e.timeout_usec = 1;
        e.job_id = "";
        decode_fails(pack(&env), HVD_EPROTO, "empty job id");

        char *hosts[2] = { "a", "b" };
        Hvd__Placement p = HVD__PLACEMENT__INIT;
        p.reason = "";
        p.job_id = "j.g2";
        p.rank = 2;
        p.size = 3;
        p.local_rank = 0;
        p.local_size = 2;
        p.cross_rank = 1;
        p.cross_size = 2;
        p.n_hosts = 2;
        p.hosts = hosts;
        env = (Hvd__Envelope) HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_PLACEMENT;
        env.placement = &p;
        d = decode_ok(pack(&env));
        hvd_wire_free(&d);
        p.cross_rank = 2;
        decode_fails(pack(&env), HVD_EPROTO, "placement out of range");
        p.cross_rank = 1;
        p.n_hosts = 1;
        decode_fails(pack(&env), HVD_EPROTO, "placement out of range");
        /* a refusal carries only its reason */
        p = (Hvd__Placement) HVD__PLACEMENT__INIT;
        p.code = HVD_EABORTED;
        p.reason = "elastic job j: reached the reset limit (1 resets): the job stops";
        p.job_id = "";
        d = decode_ok(pack(&env));
        ck_assert_str_eq(d->placement->reason, p.reason);
        hvd_wire_free(&d);
}
END_TEST

/* control plane relays: a relay's NodeReady and the NodeWelcome relay table */
START_TEST(test_wire_relay) {
        one_req_t o;
        one_req_init(&o, "layer1.weight");
        Hvd__RankReady rr = HVD__RANK_READY__INIT, *rrp[1] = { &rr };
        rr.rank = 3;
        rr.ready = &o.ready;
        uint32_t hosts_grp[3] = { 1, 2, 3 }, host_one[1] = { 2 }, ids[2] = { 7, 9 };
        uint64_t waited[2] = { 100, 200 };
        Hvd__RelayedReady grp = HVD__RELAYED_READY__INIT, one = HVD__RELAYED_READY__INIT;
        grp.hosts = hosts_grp;
        grp.n_hosts = 3;
        grp.node_cached = ids;
        grp.n_node_cached = 2;
        grp.node_cached_waited_usec = waited;
        grp.n_node_cached_waited_usec = 2;
        one.hosts = host_one;
        one.n_hosts = 1;
        one.ranks = rrp;
        one.n_ranks = 1;
        Hvd__RelayedReady *rel[2] = { &grp, &one };
        Hvd__NodeReady nr = HVD__NODE_READY__INIT;
        nr.job_id = "job-1";
        nr.relayed = rel;
        nr.n_relayed = 2;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_NODE_READY;
        env.node_ready = &nr;
        Hvd__Envelope *d = decode_ok(pack(&env));
        ck_assert_int_eq(d->body_case, HVD__ENVELOPE__BODY_NODE_READY);
        ck_assert_uint_eq(d->node_ready->n_relayed, 2);
        ck_assert_uint_eq(d->node_ready->relayed[0]->n_hosts, 3);
        ck_assert_uint_eq(d->node_ready->relayed[0]->node_cached[1], 9);
        Hvd__NodeReady view = HVD__NODE_READY__INIT;
        hvd_wire_relayed_view(d->node_ready->relayed[1], &view);
        ck_assert_uint_eq(view.n_ranks, 1);
        ck_assert_uint_eq(view.ranks[0]->rank, 3);
        ck_assert_str_eq(view.ranks[0]->ready->requests[0]->name, "layer1.weight");
        hvd_wire_free(&d);

        env.version = HVD_PROTOCOL_VERSION;
        /* an entry for no host */
        grp.n_hosts = 0;
        validate_fails(&env, "relayed entry without hosts");
        grp.n_hosts = 3;
        /* waiting times that do not match the ids, inside an entry */
        grp.n_node_cached_waited_usec = 1;
        validate_fails(&env, "waiting times do not match");
        grp.n_node_cached_waited_usec = 2;
        /* a bad request inside an entry is caught as at the top level */
        o.req.kind = (Hvd__Kind) 99;
        validate_fails(&env, "unknown operation 99");
        o.req.kind = HVD__KIND__KIND_ALLREDUCE;
        /* an oversized relay secret */
        uint8_t big[HVD_WIRE_MAX_SECRET + 1] = { 0 };
        nr.relay_secret.data = big;
        nr.relay_secret.len = sizeof big;
        validate_fails(&env, "relay secret");
        nr.relay_secret.len = 0;
        char err[256];
        ck_assert_int_eq(hvd_wire_validate(&env, err, sizeof err), 0);

        /* NodeWelcome: a relay table of one entry per host, endpoints alike */
        Hvd__RankInfo ri = HVD__RANK_INFO__INIT, *rip[1] = { &ri };
        ri.host = "a";
        uint32_t via[4] = { 0, 1, 1, 3 };
        char *eps[4] = { "", "tcp://10.0.0.2:7100", "", "tcp://10.0.0.4:7100" };
        Hvd__NodeWelcome nw = HVD__NODE_WELCOME__INIT;
        nw.job_id = "job-1";
        nw.ranks = rip;
        nw.n_ranks = 1;
        nw.relay_via = via;
        nw.n_relay_via = 4;
        nw.relay_endpoint = eps;
        nw.n_relay_endpoint = 4;
        Hvd__Envelope wenv = HVD__ENVELOPE__INIT;
        wenv.body_case = HVD__ENVELOPE__BODY_NODE_WELCOME;
        wenv.node_welcome = &nw;
        d = decode_ok(pack(&wenv));
        ck_assert_uint_eq(d->node_welcome->n_relay_via, 4);
        ck_assert_uint_eq(d->node_welcome->relay_via[2], 1);
        ck_assert_str_eq(d->node_welcome->relay_endpoint[3], "tcp://10.0.0.4:7100");
        hvd_wire_free(&d);
        wenv.version = HVD_PROTOCOL_VERSION;
        nw.n_relay_endpoint = 3;
        validate_fails(&wenv, "relay table");
}
END_TEST

/* The autotuner's steps in a Done: equal lengths, at most
 * HVD_WIRE_MAX_TUNE_STEPS of them. */
START_TEST(test_wire_done_tune_steps) {
        static uint64_t usec[HVD_WIRE_MAX_TUNE_STEPS + 1], bytes[HVD_WIRE_MAX_TUNE_STEPS + 1],
                gen[HVD_WIRE_MAX_TUNE_STEPS + 1];
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        Hvd__Done dn = HVD__DONE__INIT;
        env.version = HVD_PROTOCOL_VERSION;
        env.body_case = HVD__ENVELOPE__BODY_DONE;
        env.done = &dn;
        dn.tune_step_usec = usec;
        dn.tune_step_bytes = bytes;
        dn.tune_step_generation = gen;
        char err[256];
        dn.n_tune_step_usec = dn.n_tune_step_bytes = dn.n_tune_step_generation = HVD_WIRE_MAX_TUNE_STEPS;
        ck_assert_int_eq(hvd_wire_validate(&env, err, sizeof err), 0);
        dn.n_tune_step_usec = dn.n_tune_step_bytes = dn.n_tune_step_generation = HVD_WIRE_MAX_TUNE_STEPS + 1;
        validate_fails(&env, "step times");
        dn.n_tune_step_usec = dn.n_tune_step_bytes = 2;
        dn.n_tune_step_generation = 1;
        validate_fails(&env, "2 step times, 2 step sizes, 1 generations");
}
END_TEST

START_TEST(test_wire_reject_too_many) {
        /* validate on a constructed message: one request shared 65537 times */
        one_req_t o;
        one_req_init(&o, "x");
        size_t n = HVD_WIRE_MAX_REQUESTS + 1;
        Hvd__Request **many = malloc(n * sizeof *many);
        for (size_t i = 0; i < n; i++)
                many[i] = &o.req;
        o.ready.requests = many;
        o.ready.n_requests = n;
        o.env.version = HVD_PROTOCOL_VERSION;
        validate_fails(&o.env, "too many requests");
        o.ready.n_requests = HVD_WIRE_MAX_REQUESTS; /* the limit itself is fine */
        char err[256];
        ck_assert_int_eq(hvd_wire_validate(&o.env, err, sizeof err), 0);

        /* and through the decoder, with a budget large enough that the count
         * check (not the budget) is what refuses it */
        o.ready.n_requests = n;
        packed_t p = pack(&o.env);
        Hvd__Envelope *d = NULL;
        ck_assert_int_eq(hvd_wire_decode(p.buf, p.len, (size_t) 512 << 20, &d, err, sizeof err), HVD_EPROTO);
        ck_assert_ptr_null(d);
        ck_assert_ptr_nonnull(strstr(err, "too many requests"));
        free(p.buf);
        free(many);

        /* too many cached ids */
        one_req_init(&o, "x");
        o.ready.n_requests = 0;
        o.ready.n_cached = (size_t) HVD_WIRE_MAX_REQUESTS * 16 + 1;
        o.ready.cached = calloc(o.ready.n_cached, sizeof(uint32_t));
        o.env.version = HVD_PROTOCOL_VERSION;
        validate_fails(&o.env, "too many requests");
        free(o.ready.cached);

        /* too many splits */
        one_req_init(&o, "x");
        o.req.n_splits = HVD_WIRE_MAX_RANKS + 1;
        o.req.splits = calloc(o.req.n_splits, sizeof(int64_t));
        o.env.version = HVD_PROTOCOL_VERSION;
        validate_fails(&o.env, "too many splits");
        free(o.req.splits);

        /* texts */
        char *big = malloc(HVD_WIRE_MAX_TEXT + 2);
        memset(big, 'r', HVD_WIRE_MAX_TEXT + 1);
        big[HVD_WIRE_MAX_TEXT + 1] = 0;
        Hvd__Abort ab = HVD__ABORT__INIT;
        ab.reason = big;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        decode_fails(pack(&env), HVD_EPROTO, "reason too long");
        Hvd__ErrorReply er = HVD__ERROR_REPLY__INIT;
        er.message = big;
        env.body_case = HVD__ENVELOPE__BODY_ERROR;
        env.error = &er;
        decode_fails(pack(&env), HVD_EPROTO, "message too long");
        Hvd__TensorError te = HVD__TENSOR_ERROR__INIT, *tep[1] = { &te };
        te.name = "w";
        te.message = big;
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        s.errors = tep;
        s.n_errors = 1;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = &s;
        decode_fails(pack(&env), HVD_EPROTO, "error text too long");
        free(big);
}
END_TEST

/* An envelope (version 1) whose body field `field` holds `count` copies
 * of `unit` as its content. */
static size_t put_varint(uint8_t *b, uint64_t v) {
        size_t o = 0;
        for (;; v >>= 7) {
                b[o++] = (uint8_t) ((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
                if (v < 0x80)
                        return o;
        }
}

static packed_t amplifier(uint32_t field, const uint8_t *unit, size_t unit_len, size_t count) {
        size_t inner = unit_len * count;
        packed_t p;
        p.buf = malloc(inner + 32);
        size_t o = 0;
        o += put_varint(p.buf + o, (1 << 3) | 0); /* version */
        o += put_varint(p.buf + o, HVD_PROTOCOL_VERSION);
        o += put_varint(p.buf + o, ((uint64_t) field << 3) | 2);
        o += put_varint(p.buf + o, inner);
        for (size_t i = 0; i < count; i++, o += unit_len)
                memcpy(p.buf + o, unit, unit_len);
        p.len = o;
        return p;
}

START_TEST(test_wire_decode_budget) {
        /* 1 MB of empty repeated sub-messages: refused, not amplified */
        const uint8_t empty_request[] = { 0x12, 0x00 }; /* Ready.requests = {} */
        packed_t p = amplifier(12, empty_request, sizeof empty_request, 512 * 1024);
        ck_assert_uint_ge(p.len, 1 << 20);
        uint64_t t0 = hvd_now_usec();
        decode_fails(p, -ENOMEM, "budget");
        ck_assert_uint_lt(hvd_now_usec() - t0, 2 * USEC_PER_SEC);

        const uint8_t empty_op[] = { 0x12, 0x00 }; /* Schedule.ops = {} */
        p = amplifier(13, empty_op, sizeof empty_op, 512 * 1024);
        decode_fails(p, -ENOMEM, "budget");

        const uint8_t empty_job[] = { 0x32, 0x00 }; /* Status.jobs = {} */
        p = amplifier(18, empty_job, sizeof empty_job, 512 * 1024);
        decode_fails(p, -ENOMEM, "budget");

        /* an explicit small budget refuses a message the default allows */
        one_req_t o;
        one_req_init(&o, "x");
        p = pack(&o.env);
        Hvd__Envelope *d = NULL;
        char err[256] = "";
        ck_assert_int_eq(hvd_wire_decode(p.buf, p.len, 64, &d, err, sizeof err), -ENOMEM);
        ck_assert_ptr_null(d);
        ck_assert_int_eq(hvd_wire_decode(p.buf, p.len, 1 << 20, &d, err, sizeof err), 0);
        hvd_wire_free(&d);
        free(p.buf);
}
END_TEST

/* The timeline's messages: a start names a file; a schedule entry's
 * readiness times match its ranks. */
START_TEST(test_wire_timeline) {
        Hvd__TimelineControl tc = HVD__TIMELINE_CONTROL__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT, *d;
        tc.job_id = "job-1";
        tc.start = true;
        tc.file = "t.json";
        tc.mark_cycles = true;
        env.body_case = HVD__ENVELOPE__BODY_TIMELINE_CONTROL;
        env.timeline_control = &tc;
        d = decode_ok(pack(&env));
        ck_assert_str_eq(d->timeline_control->file, "t.json");
        ck_assert(d->timeline_control->mark_cycles);
        hvd_wire_free(&d);
        tc.file = "";
        validate_fails(&env, "without a file");
        tc.reply = true; /* an answer names no file */
        char err[256];
        ck_assert_int_eq(hvd_wire_validate(&env, err, sizeof err), 0);
        tc.file = "a\nb";
        validate_fails(&env, "timeline file");

        Hvd__Entry e = HVD__ENTRY__INIT, *ep = &e;
        Hvd__Op op = HVD__OP__INIT, *opp = &op;
        Hvd__Schedule s = HVD__SCHEDULE__INIT;
        uint32_t ranks[2] = { 0, 1 };
        uint64_t ages[2] = { 5, 0 };
        e.name = "g";
        e.n_ready_ranks = 2;
        e.ready_ranks = ranks;
        e.n_ready_age_usec = 1;
        e.ready_age_usec = ages;
        op.kind = HVD__KIND__KIND_ALLREDUCE;
        op.dtype = HVD_FLOAT32;
        op.n_entries = 1;
        op.entries = &ep;
        s.n_ops = 1;
        s.ops = &opp;
        env.body_case = HVD__ENVELOPE__BODY_SCHEDULE;
        env.schedule = &s;
        validate_fails(&env, "readiness times");
        e.n_ready_age_usec = 2;
        d = decode_ok(pack(&env));
        ck_assert_uint_eq(d->schedule->ops[0]->entries[0]->ready_age_usec[0], 5);
        hvd_wire_free(&d);
}
END_TEST

START_TEST(test_wire_validate_name) {
        char err[256];
        ck_assert_int_eq(hvd_wire_validate_name("grad.fc1.weight", 1024, "tensor name", err, sizeof err), 0);
        ck_assert_int_eq(hvd_wire_validate_name("\xc3\xa9t\xc3\xa9", 1024, "tensor name", err, sizeof err), 0);
        ck_assert_int_eq(hvd_wire_validate_name("\xf4\x8f\xbf\xbf", 1024, "x", err, sizeof err), 0); /* U+10FFFF */
        ck_assert_int_eq(hvd_wire_validate_name("\xf4\x90\x80\x80", 1024, "x", err, sizeof err), HVD_EPROTO);
        ck_assert_int_eq(hvd_wire_validate_name("\xe0\x80\xaf", 1024, "x", err, sizeof err), HVD_EPROTO);
        ck_assert_int_eq(hvd_wire_validate_name("\xf0\x80\x80\xaf", 1024, "x", err, sizeof err), HVD_EPROTO);
        ck_assert_int_eq(hvd_wire_validate_name("\x80", 1024, "x", err, sizeof err), HVD_EPROTO);
        ck_assert_int_eq(hvd_wire_validate_name("\xf8\x88\x80\x80\x80", 1024, "x", err, sizeof err), HVD_EPROTO);
        ck_assert_int_eq(hvd_wire_validate_name("abc", 2, "job id", err, sizeof err), HVD_EPROTO);
        ck_assert_str_eq(err, "job id longer than 2 bytes");
        ck_assert_int_eq(hvd_wire_validate_name("a\x1f", 10, "host name", err, sizeof err), HVD_EPROTO);
        ck_assert_str_eq(err, "host name contains control characters");
        ck_assert_int_eq(hvd_wire_validate_name(NULL, 10, "host name", err, sizeof err), HVD_EPROTO);
}
END_TEST

/* ---- the schema has no recursion ---- */

/* Depth-first over message-typed fields; returns 1 and the path in `why`
 * when a message type can (transitively) contain itself. */
static int find_cycle(const ProtobufCMessageDescriptor *d, const ProtobufCMessageDescriptor **path, size_t depth,
                      const ProtobufCMessageDescriptor **seen, size_t *n_seen, char *why, size_t why_len) {
        ck_assert_uint_eq(d->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
        for (size_t i = 0; i < depth; i++)
                if (path[i] == d) {
                        size_t o = 0;
                        for (size_t k = i; k < depth && o < why_len; k++)
                                o += (size_t) snprintf(why + o, why_len - o, "%s -> ", path[k]->name);
                        if (o < why_len)
                                snprintf(why + o, why_len - o, "%s", d->name);
                        return 1;
                }
        ck_assert_uint_lt(depth, 64);
        bool known = false;
        for (size_t i = 0; i < *n_seen; i++)
                known |= seen[i] == d;
        if (!known)
                seen[(*n_seen)++] = d;
        path[depth] = d;
        for (unsigned f = 0; f < d->n_fields; f++) {
                const ProtobufCFieldDescriptor *fd = &d->fields[f];
                if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
                        continue;
                if (find_cycle(fd->descriptor, path, depth + 1, seen, n_seen, why, why_len))
                        return 1;
        }
        return 0;
}

START_TEST(test_wire_schema_has_no_recursion) {
        const ProtobufCMessageDescriptor *path[64], *seen[256];
        size_t n_seen = 0;
        char why[1024] = "";
        int cyc = find_cycle(&hvd__envelope__descriptor, path, 0, seen, &n_seen, why, sizeof why);
        ck_assert_msg(!cyc, "recursive message type: %s", why);
        /* every message type of the core protocol is reachable from the
         * envelope (so the walk above covered it) */
        const ProtobufCMessageDescriptor *core[] = {
                &hvd__hello__descriptor,
                &hvd__rank_info__descriptor,
                &hvd__welcome__descriptor,
                &hvd__request__descriptor,
                &hvd__ready__descriptor,
                &hvd__entry__descriptor,
                &hvd__op__descriptor,
                &hvd__tensor_error__descriptor,
                &hvd__schedule__descriptor,
                &hvd__done__descriptor,
                &hvd__goodbye__descriptor,
                &hvd__abort__descriptor,
                &hvd__status_request__descriptor,
                &hvd__job_status__descriptor,
                &hvd__status__descriptor,
                &hvd__error_reply__descriptor,
        };
        for (size_t i = 0; i < ELEMENTSOF(core); i++) {
                bool found = false;
                for (size_t k = 0; k < n_seen; k++)
                        found |= seen[k] == core[i];
                ck_assert_msg(found, "%s is not reachable from hvd.Envelope", core[i]->name);
                /* and walked from itself as a root, too */
                size_t n2 = 0;
                const ProtobufCMessageDescriptor *seen2[256];
                ck_assert_msg(!find_cycle(core[i], path, 0, seen2, &n2, why, sizeof why), "recursive message type: %s",
                              why);
        }
        ck_assert_uint_ge(n_seen, ELEMENTSOF(core) + 1);
}
END_TEST

START_TEST(test_wire_cycle_finder_finds_cycles) {
        /* the walker itself: a fake A -> B -> A is reported */
        static ProtobufCFieldDescriptor fa[1], fb[1];
        static ProtobufCMessageDescriptor a, b;
        a.magic = b.magic = PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC;
        a.name = "fake.A";
        b.name = "fake.B";
        fa[0].type = PROTOBUF_C_TYPE_MESSAGE;
        fa[0].descriptor = &b;
        fb[0].type = PROTOBUF_C_TYPE_MESSAGE;
        fb[0].descriptor = &a;
        a.n_fields = b.n_fields = 1;
        a.fields = fa;
        b.fields = fb;
        const ProtobufCMessageDescriptor *path[64], *seen[8];
        size_t n_seen = 0;
        char why[256] = "";
        ck_assert_int_eq(find_cycle(&a, path, 0, seen, &n_seen, why, sizeof why), 1);
        ck_assert_str_eq(why, "fake.A -> fake.B -> fake.A");
}
END_TEST

/* ---- hvd_control_call ---- */

static char sock_path[128];
static char endpoint[160];

static void make_endpoint(const char *tag) {
        snprintf(sock_path, sizeof sock_path, "/tmp/hvd-check-wire-%d-%s.sock", (int) getpid(), tag);
        snprintf(endpoint, sizeof endpoint, "ipc://%s", sock_path);
}

START_TEST(test_wire_control_call_no_socket) {
        make_endpoint("none");
        unlink(sock_path);
        Hvd__StatusRequest sr = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT, *reply = (Hvd__Envelope *) 0x1;
        req.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        req.status_request = &sr;
        uint64_t t0 = hvd_now_usec();
        ck_assert_int_eq(hvd_control_call(NULL, endpoint, &req, USEC_PER_SEC, &reply), -ECONNREFUSED);
        ck_assert_uint_lt(hvd_now_usec() - t0, USEC_PER_SEC / 2);
        ck_assert_ptr_eq(reply, (Hvd__Envelope *) 0x1);
}
END_TEST

typedef struct server {
        void *ctx, *sock;
        bool answer;
} server_t;

static void *serve_one(void *arg) {
        server_t *s = arg;
        uint8_t id[256];
        int id_len = zmq_recv(s->sock, id, sizeof id, 0);
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        zmq_msg_recv(&msg, s->sock, 0);
        Hvd__Envelope *in = NULL;
        char err[256];
        int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &in, err, sizeof err);
        zmq_msg_close(&msg);
        if (r == 0 && s->answer && id_len > 0) {
                Hvd__Status st = HVD__STATUS__INIT;
                st.version = "9.9.9";
                st.pid = 4242;
                Hvd__Envelope out = HVD__ENVELOPE__INIT;
                out.body_case = HVD__ENVELOPE__BODY_STATUS;
                out.status = &st;
                hvd_wire_send_to(s->sock, id, (size_t) id_len, &out, 0);
        }
        hvd_wire_free(&in);
        return NULL;
}

static void call_server(bool answer, uint64_t timeout_usec, int want, uint64_t *elapsed) {
        server_t s = { .answer = answer };
        make_endpoint(answer ? "answer" : "silent");
        s.ctx = zmq_ctx_new();
        s.sock = zmq_socket(s.ctx, ZMQ_ROUTER);
        int zero = 0;
        zmq_setsockopt(s.sock, ZMQ_LINGER, &zero, sizeof zero);
        ck_assert_int_eq(zmq_bind(s.sock, endpoint), 0);
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, serve_one, &s), 0);
        Hvd__StatusRequest sr = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT, *reply = NULL;
        req.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        req.status_request = &sr;
        uint64_t t0 = hvd_now_usec();
        int r = hvd_control_call(NULL, endpoint, &req, timeout_usec, &reply);
        *elapsed = hvd_now_usec() - t0;
        ck_assert_int_eq(r, want);
        if (want == 0) {
                ck_assert_ptr_nonnull(reply);
                ck_assert_int_eq(reply->body_case, HVD__ENVELOPE__BODY_STATUS);
                ck_assert_str_eq(reply->status->version, "9.9.9");
                ck_assert_uint_eq(reply->status->pid, 4242);
                hvd_wire_free(&reply);
        } else
                ck_assert_ptr_null(reply);
        pthread_join(th, NULL);
        zmq_close(s.sock);
        zmq_ctx_term(s.ctx);
        unlink(sock_path);
}

START_TEST(test_wire_control_call_reply_and_timeout) {
        uint64_t elapsed;
        call_server(true, 5 * USEC_PER_SEC, 0, &elapsed);
        ck_assert_uint_lt(elapsed, 2 * USEC_PER_SEC);
        call_server(false, 300 * USEC_PER_MSEC, HVD_ETIMEOUT, &elapsed);
        ck_assert_uint_ge(elapsed, 250 * USEC_PER_MSEC);
        ck_assert_uint_lt(elapsed, 2 * USEC_PER_SEC);
}
END_TEST

static Suite *wire_suite(void) {
        Suite *s = suite_create("wire");
        TCase *tc = tcase_create("roundtrip");
        tcase_add_test(tc, test_wire_roundtrip_hello);
        tcase_add_test(tc, test_wire_roundtrip_welcome);
        tcase_add_test(tc, test_wire_roundtrip_ready);
        tcase_add_test(tc, test_wire_equal);
        tcase_add_test(tc, test_wire_dup);
        tcase_add_test(tc, test_wire_roundtrip_schedule);
        tcase_add_test(tc, test_wire_roundtrip_small_messages);
        tcase_add_test(tc, test_wire_relay);
        tcase_add_test(tc, test_wire_roundtrip_status);
        suite_add_tcase(s, tc);
        tc = tcase_create("reject");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_wire_reject_version);
        tcase_add_test(tc, test_wire_reject_no_body);
        tcase_add_test(tc, test_wire_reject_truncated_and_garbage);
        tcase_add_test(tc, test_wire_no_crash_on_prefixes_and_flips);
        tcase_add_test(tc, test_wire_reject_enums);
        tcase_add_test(tc, test_wire_reject_names);
        tcase_add_test(tc, test_wire_reject_embedded_nul);
        tcase_add_test(tc, test_wire_reject_dims);
        tcase_add_test(tc, test_wire_reject_ranks);
        tcase_add_test(tc, test_wire_reject_too_many);
        tcase_add_test(tc, test_wire_done_tune_steps);
        tcase_add_test(tc, test_wire_decode_budget);
        tcase_add_test(tc, test_wire_validate_name);
        tcase_add_test(tc, test_wire_timeline);
        suite_add_tcase(s, tc);
        tc = tcase_create("schema");
        tcase_add_test(tc, test_wire_schema_has_no_recursion);
        tcase_add_test(tc, test_wire_cycle_finder_finds_cycles);
        suite_add_tcase(s, tc);
        tc = tcase_create("control");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_wire_control_call_no_socket);
        tcase_add_test(tc, test_wire_control_call_reply_and_timeout);
        tcase_add_test(tc, test_wire_elastic);
        tcase_add_test(tc, test_wire_host_offer);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(wire_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
