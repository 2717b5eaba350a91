/* wire.c — envelope packing, budgeted decoding and validation, and the
 * control request/reply helper. protobuf-c accepts out-of-range enums,
 * embedded NULs, bad UTF-8 and amplifying repeated fields, so nothing
 * decoded here is handed on before hvd_wire_validate() accepted it. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "hvd.h"
#include "reduce.h"
#include "strmap.h"
#include "util.h"
#include "wire.h"

int hvd_zmq_bind(void *sock, const char *endpoint) {
        int rc;
        while ((rc = zmq_bind(sock, endpoint)) < 0 && zmq_errno() == EINTR)
                ;
        return rc < 0 ? -zmq_errno() : 0;
}

int hvd_zmq_connect(void *sock, const char *endpoint) {
        int rc;
        while ((rc = zmq_connect(sock, endpoint)) < 0 && zmq_errno() == EINTR)
                ;
        return rc < 0 ? -zmq_errno() : 0;
}

int hvd_zmq_send(void *sock, const void *buf, size_t len, int flags) {
        int rc;
        while ((rc = zmq_send(sock, buf, len, flags)) < 0 && zmq_errno() == EINTR)
                ;
        return rc < 0 ? -zmq_errno() : 0;
}

int hvd_zmq_msg_send(zmq_msg_t *msg, void *sock, int flags) {
        int rc;
        while ((rc = zmq_msg_send(msg, sock, flags)) < 0 && zmq_errno() == EINTR)
                ;
        return rc < 0 ? -zmq_errno() : 0;
}

int hvd_wire_send(void *sock, Hvd__Envelope *env, int flags) {
        env->version = HVD_PROTOCOL_VERSION;
        size_t len = protobuf_c_message_get_packed_size(&env->base);
        zmq_msg_t msg;
        if (zmq_msg_init_size(&msg, len) < 0)
                return -zmq_errno();
        protobuf_c_message_pack(&env->base, zmq_msg_data(&msg));
        int r = hvd_zmq_msg_send(&msg, sock, flags);
        if (r < 0)
                zmq_msg_close(&msg);
        return r;
}

int hvd_wire_send_to(void *router, const void *id, size_t id_len, Hvd__Envelope *env, int flags) {
        int r = hvd_zmq_send(router, id, id_len, ZMQ_SNDMORE | flags);
        if (r < 0)
                return r;
        return hvd_wire_send(router, env, flags);
}

/* ---- equality without packing ---- */

static size_t elem_size(ProtobufCType t) {
        switch (t) {
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
        case PROTOBUF_C_TYPE_DOUBLE: return 8;
        case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
        case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
        case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
        case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
        default: /* 32-bit integers, enums, float */ return 4;
        }
}

static bool value_equal(ProtobufCType t, const void *a, const void *b) {
        switch (t) {
        case PROTOBUF_C_TYPE_STRING: {
                const char *x = *(char *const *) a, *y = *(char *const *) b;
                return strcmp(x ? x : "", y ? y : "") == 0;
        }
        case PROTOBUF_C_TYPE_BYTES: {
                const ProtobufCBinaryData *x = a, *y = b;
                return x->len == y->len && (!x->len || memcmp(x->data, y->data, x->len) == 0);
        }
        case PROTOBUF_C_TYPE_MESSAGE:
                return hvd_wire_equal(*(ProtobufCMessage *const *) a, *(ProtobufCMessage *const *) b);
        default: return memcmp(a, b, elem_size(t)) == 0;
        }
}

bool hvd_wire_equal(const ProtobufCMessage *a, const ProtobufCMessage *b) {
        if (a == b)
                return true;
        if (!a || !b || a->descriptor != b->descriptor || a->n_unknown_fields || b->n_unknown_fields)
                return false;
        const ProtobufCMessageDescriptor *d = a->descriptor;
        const char *ma = (const char *) a, *mb = (const char *) b;
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                const char *pa = ma + f->offset, *pb = mb + f->offset;
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t na = *(const size_t *) (ma + f->quantifier_offset);
                        size_t nb = *(const size_t *) (mb + f->quantifier_offset);
                        if (na != nb)
                                return false;
                        const char *xa = *(char *const *) pa, *xb = *(char *const *) pb;
                        size_t es = elem_size(f->type);
                        for (size_t k = 0; k < na; k++)
                                if (!value_equal(f->type, xa + k * es, xb + k * es))
                                        return false;
                        continue;
                }
                if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                        uint32_t ca = *(const uint32_t *) (ma + f->quantifier_offset);
                        uint32_t cb = *(const uint32_t *) (mb + f->quantifier_offset);
                        if (ca != cb)
                                return false;
                        if (ca != f->id)
                                continue;
                } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
                           f->type != PROTOBUF_C_TYPE_MESSAGE) {
                        protobuf_c_boolean ha = *(const protobuf_c_boolean *) (ma + f->quantifier_offset);
                        protobuf_c_boolean hb = *(const protobuf_c_boolean *) (mb + f->quantifier_offset);
                        if (ha != hb)
                                return false;
                        if (!ha)
                                continue;
                }
                if (!value_equal(f->type, pa, pb))
                        return false;
        }
        return true;
}

/* ---- budgeted allocator ---- */

typedef struct {
        size_t used, budget;
        bool exhausted;
} budget_t;

static void *budget_alloc(void *data, size_t size) {
        budget_t *b = data;
        if (size > b->budget - b->used) {
                b->exhausted = true;
                return NULL;
        }
        b->used += size;
        return malloc(size);
}

static void budget_free(void *data, void *p) {
        free(p);
}

int hvd_wire_decode(const void *buf, size_t len, size_t budget_bytes, Hvd__Envelope **ret, char *err, size_t err_len) {
        budget_t b = { .budget = budget_bytes ? budget_bytes : len * 8 + 65536 };
        ProtobufCAllocator alloc = { .alloc = budget_alloc, .free = budget_free, .allocator_data = &b };
        Hvd__Envelope *env = hvd__envelope__unpack(&alloc, len, buf);
        if (!env) {
                if (b.exhausted) {
                        snprintf(err, err_len, "message of %zu bytes exceeds the decode memory budget", len);
                        return -ENOMEM;
                }
                snprintf(err, err_len, "malformed message (%zu bytes)", len);
                return HVD_EPROTO;
        }
        /* protobuf-c cuts strings at an embedded NUL and keeps going; the
         * same message packs to fewer bytes then. Senders of this protocol
         * pack canonically with the same library, so any difference is a
         * message to refuse. */
        if (protobuf_c_message_get_packed_size(&env->base) != len) {
                snprintf(err, err_len, "malformed message (%zu bytes): embedded NUL bytes or non-canonical encoding",
                         len);
                hvd_wire_free(&env);
                return HVD_EPROTO;
        }
        int r = hvd_wire_validate(env, err, err_len);
        if (r < 0) {
                hvd_wire_free(&env);
                return r;
        }
        *ret = env;
        return 0;
}

/* ---- deep copies ---- */

/* Sets every pointer field of m (a byte copy of a message) to nothing, so
 * that protobuf_c_message_free_unpacked() frees only what is filled in. */
static void dup_clear(ProtobufCMessage *m) {
        const ProtobufCMessageDescriptor *d = m->descriptor;
        char *mm = (char *) m;
        m->n_unknown_fields = 0;
        m->unknown_fields = NULL;
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                void *p = mm + f->offset;
                /* a oneof's members share their place: the one set counts */
                if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                    *(const uint32_t *) (mm + f->quantifier_offset) != f->id)
                        continue;
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        *(size_t *) (mm + f->quantifier_offset) = 0;
                        *(void **) p = NULL;
                } else if (f->type == PROTOBUF_C_TYPE_STRING)
                        *(const void **) p = f->default_value;
                else if (f->type == PROTOBUF_C_TYPE_MESSAGE)
                        *(void **) p = NULL;
                else if (f->type == PROTOBUF_C_TYPE_BYTES)
                        *(ProtobufCBinaryData *) p = (ProtobufCBinaryData){ 0 };
        }
}

static bool dup_value(const ProtobufCFieldDescriptor *f, void *dst, const void *src);

ProtobufCMessage *hvd_wire_dup(const ProtobufCMessage *m) {
        if (!m || m->n_unknown_fields)
                return NULL;
        const ProtobufCMessageDescriptor *d = m->descriptor;
        ProtobufCMessage *c = malloc(d->sizeof_message);
        if (!c)
                return NULL;
        memcpy(c, m, d->sizeof_message);
        dup_clear(c);
        const char *mm = (const char *) m;
        char *cc = (char *) c;
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                    *(const uint32_t *) (mm + f->quantifier_offset) != f->id)
                        continue;
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t n = *(const size_t *) (mm + f->quantifier_offset), es = elem_size(f->type);
                        const char *from = *(char *const *) (mm + f->offset);
                        if (!n)
                                continue;
                        char *to = calloc(n, es);
                        if (!to)
                                goto fail;
                        *(void **) (cc + f->offset) = to;
                        for (size_t k = 0; k < n; k++) {
                                if (!dup_value(f, to + k * es, from + k * es))
                                        goto fail;
                                *(size_t *) (cc + f->quantifier_offset) = k + 1;
                        }
                } else if ((f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE ||
                            f->type == PROTOBUF_C_TYPE_BYTES) &&
                           !dup_value(f, cc + f->offset, mm + f->offset))
                        goto fail;
        }
        return c;
fail:
        protobuf_c_message_free_unpacked(c, NULL); /* c and all it holds (the analyzer cannot see it) */
        return NULL;
}

/* One value of field f (an element, for a repeated one): strings, bytes
 * and messages are copied, anything else is already. */
static bool dup_value(const ProtobufCFieldDescriptor *f, void *dst, const void *src) {
        switch (f->type) {
        case PROTOBUF_C_TYPE_STRING: {
                const char *s = *(char *const *) src;
                /* a string left at its default is the descriptor's, not the message's */
                if (!s || (f->label != PROTOBUF_C_LABEL_REPEATED && (const void *) s == f->default_value))
                        *(const char **) dst = s;
                else if (!(*(char **) dst = strdup(s)))
                        return false;
                return true;
        }
        case PROTOBUF_C_TYPE_BYTES: {
                const ProtobufCBinaryData *b = src;
                ProtobufCBinaryData *o = dst;
                *o = (ProtobufCBinaryData){ 0 };
                if (!b->len)
                        return true;
                if (!(o->data = malloc(b->len)))
                        return false;
                memcpy(o->data, b->data, b->len);
                o->len = b->len;
                return true;
        }
        case PROTOBUF_C_TYPE_MESSAGE: {
                const ProtobufCMessage *sm = *(ProtobufCMessage *const *) src;
                *(ProtobufCMessage **) dst = NULL;
                return !sm || (*(ProtobufCMessage **) dst = hvd_wire_dup(sm)) != NULL;
        }
        default: memcpy(dst, src, elem_size(f->type)); return true;
        }
}

void hvd_wire_free(Hvd__Envelope **env) {
        if (!env || !*env)
                return;
        /* budget_alloc used malloc(): the default allocator frees it. */
        protobuf_c_message_free_unpacked(&(*env)->base, NULL);
        *env = NULL;
}

/* ---- validation ---- */

static int fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
        return HVD_EPROTO;
}

static bool utf8_valid(const unsigned char *s) {
        while (*s) {
                if (*s < 0x80) {
                        s++;
                        continue;
                }
                int n = (*s & 0xe0) == 0xc0 ? 1 : (*s & 0xf0) == 0xe0 ? 2 : (*s & 0xf8) == 0xf0 ? 3 : -1;
                if (n < 0 || (n == 1 && *s < 0xc2))
                        return false;
                uint32_t cp = *s & (0x3f >> n);
                s++;
                for (int i = 0; i < n; i++, s++) {
                        if ((*s & 0xc0) != 0x80)
                                return false;
                        cp = (cp << 6) | (*s & 0x3f);
                }
                if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
                    (cp >= 0xd800 && cp <= 0xdfff))
                        return false;
        }
        return true;
}

/* protobuf-c strings are NUL-terminated copies; an embedded NUL shows up
 * only as a shorter strlen, which we cannot see here, so callers that care
 * compare with the wire length. Length and UTF-8 are checked. */
int hvd_wire_validate_name(const char *s, size_t max_bytes, const char *what, char *err, size_t err_len) {
        if (!s)
                return fail(err, err_len, "%s missing", what);
        size_t n = strnlen(s, max_bytes + 1);
        if (n > max_bytes)
                return fail(err, err_len, "%s longer than %zu bytes", what, max_bytes);
        if (!utf8_valid((const unsigned char *) s))
                return fail(err, err_len, "%s is not valid UTF-8", what);
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] < 0x20)
                        return fail(err, err_len, "%s contains control characters", what);
        return 0;
}

#define CHECK_NAME(s, max, what)                                                                                       \
        do {                                                                                                           \
                int _r = hvd_wire_validate_name((s), (max), (what), err, err_len);                                     \
                if (_r < 0)                                                                                            \
                        return _r;                                                                                     \
        } while (0)

static int validate_shape(const int64_t *dims, size_t n, const char *what, char *err, size_t err_len) {
        if (n > HVD_MAX_NDIM)
                return fail(err, err_len, "%s has %zu dimensions (at most %d)", what, n, HVD_MAX_NDIM);
        uint64_t prod = 1;
        for (size_t i = 0; i < n; i++) {
                if (dims[i] < 0)
                        return fail(err, err_len, "%s has a negative dimension", what);
                if (dims[i] && prod > (UINT64_C(1) << 50) / (uint64_t) dims[i])
                        return fail(err, err_len, "%s: element count overflows", what);
                prod *= (uint64_t) dims[i];
        }
        return 0;
}

static int validate_request(const Hvd__Request *q, char *err, size_t err_len) {
        CHECK_NAME(q->name, HVD_MAX_NAME_BYTES, "tensor name");
        if (!q->name[0])
                return fail(err, err_len, "empty tensor name");
        if (q->kind <= HVD__KIND__KIND_NONE || q->kind > HVD__KIND__KIND_JOIN)
                return fail(err, err_len, "tensor '%s': unknown operation %d", q->name, (int) q->kind);
        if (!hvd_dtype_valid(q->dtype))
                return fail(err, err_len, "tensor '%s': unknown dtype %u", q->name, q->dtype);
        if (!hvd_reduce_op_valid(q->reduce_op))
                return fail(err, err_len, "tensor '%s': unknown reduce op %u", q->name, q->reduce_op);
        int r = validate_shape(q->shape, q->n_shape, "tensor shape", err, err_len);
        if (r < 0)
                return r;
        if (q->n_splits > HVD_WIRE_MAX_RANKS)
                return fail(err, err_len, "tensor '%s': too many splits", q->name);
        for (size_t i = 0; i < q->n_splits; i++)
                if (q->splits[i] < 0)
                        return fail(err, err_len, "tensor '%s': negative split", q->name);
        if (q->group_size > HVD_WIRE_MAX_REQUESTS)
                return fail(err, err_len, "tensor '%s': group too large", q->name);
        return 0;
}

static int validate_ready(const Hvd__Ready *q, char *err, size_t err_len) {
        if (q->n_requests > HVD_WIRE_MAX_REQUESTS || q->n_cached > HVD_WIRE_MAX_REQUESTS * 16)
                return fail(err, err_len, "ready: too many requests");
        if (q->n_cached_waited_usec && q->n_cached_waited_usec != q->n_cached)
                return fail(err, err_len, "ready: waiting times do not match the cached ids");
        if (q->n_node_cached > HVD_WIRE_MAX_REQUESTS * 16)
                return fail(err, err_len, "ready: too many host-level ids");
        if (q->n_node_cached_waited_usec && q->n_node_cached_waited_usec != q->n_node_cached)
                return fail(err, err_len, "ready: waiting times do not match the host-level ids");
        for (size_t i = 0; i < q->n_requests; i++) {
                int r = validate_request(q->requests[i], err, err_len);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int validate_schedule(const Hvd__Schedule *s, char *err, size_t err_len) {
        if (s->keep_key > HVD_WIRE_SCHEDULE_KEYS || s->repeat_key > HVD_WIRE_SCHEDULE_KEYS)
                return fail(err, err_len, "schedule: key out of range");
        if (s->repeat_key && (s->keep_key || s->n_ops || s->n_errors))
                return fail(err, err_len, "schedule: a repeat carries nothing but its key and seq");
        for (size_t i = 0; i < s->n_ops; i++) {
                const Hvd__Op *op = s->ops[i];
                if (op->kind <= HVD__KIND__KIND_NONE || op->kind > HVD__KIND__KIND_JOIN ||
                    !hvd_dtype_valid(op->dtype) || !hvd_reduce_op_valid(op->reduce_op))
                        return fail(err, err_len, "schedule: invalid operation");
                for (size_t j = 0; j < op->n_entries; j++) {
                        const Hvd__Entry *e = op->entries[j];
                        CHECK_NAME(e->name, HVD_MAX_NAME_BYTES, "tensor name");
                        int r = validate_shape(e->shape, e->n_shape, "tensor shape", err, err_len);
                        if (r < 0)
                                return r;
                        for (size_t k = 0; k < e->n_rank_rows; k++)
                                if (e->rank_rows[k] < 0)
                                        return fail(err, err_len, "schedule: negative rows");
                        for (size_t k = 0; k < e->n_splits; k++)
                                if (e->splits[k] < 0)
                                        return fail(err, err_len, "schedule: negative split");
                        if (e->n_ready_ranks != e->n_ready_age_usec || e->n_ready_ranks > HVD_WIRE_MAX_RANKS)
                                return fail(err, err_len, "schedule: readiness times do not match their ranks");
                }
        }
        if (s->tuning && (s->repeat_key || !s->tuning->generation || s->tuning->cycle_time_usec > 10 * USEC_PER_SEC ||
                          s->tuning->fusion_threshold > (UINT64_C(1) << 34)))
                return fail(err, err_len, "schedule: tuning out of range");
        for (size_t i = 0; i < s->n_errors; i++) {
                CHECK_NAME(s->errors[i]->name, HVD_MAX_NAME_BYTES, "tensor name");
                if (strnlen(s->errors[i]->message, HVD_WIRE_MAX_TEXT + 1) > HVD_WIRE_MAX_TEXT)
                        return fail(err, err_len, "schedule: error text too long");
        }
        return 0;
}

static int validate_ranks(Hvd__RankInfo *const *ri, size_t n, uint32_t world, char *err, size_t err_len) {
        for (size_t i = 0; i < n; i++) {
                if (ri[i]->rank >= world)
                        return fail(err, err_len, "rank %u out of range (world size %u)", ri[i]->rank, world);
                CHECK_NAME(ri[i]->host, HVD_WIRE_MAX_HOST, "host name");
                CHECK_NAME(ri[i]->data_addr, HVD_WIRE_MAX_HOST + 8, "data-plane address");
        }
        return 0;
}

void hvd_wire_relayed_view(const Hvd__RelayedReady *rr, Hvd__NodeReady *view) {
        view->n_ranks = rr->n_ranks;
        view->ranks = rr->ranks;
        view->n_node_cached = rr->n_node_cached;
        view->node_cached = rr->node_cached;
        view->n_node_cached_waited_usec = rr->n_node_cached_waited_usec;
        view->node_cached_waited_usec = rr->node_cached_waited_usec;
        view->n_departed = rr->n_departed;
        view->departed = rr->departed;
        view->n_shared = rr->n_shared;
        view->shared = rr->shared;
}

/* A node's readiness; relayed: a view of an entry of a relay's. */
static int validate_node_ready(const Hvd__NodeReady *nr, char *err, size_t err_len) {
        if (nr->n_ranks > HVD_WIRE_MAX_RANKS || nr->n_node_cached > HVD_WIRE_MAX_REQUESTS * 16)
                return fail(err, err_len, "node ready: too many entries");
        if (nr->n_node_cached_waited_usec && nr->n_node_cached_waited_usec != nr->n_node_cached)
                return fail(err, err_len, "node ready: waiting times do not match the cached ids");
        if (nr->n_shared > HVD_WIRE_MAX_RANKS)
                return fail(err, err_len, "node ready: too many shared entries");
        for (size_t i = 0; i < nr->n_shared; i++) {
                if (!nr->shared[i]->ready || !nr->shared[i]->n_ranks || nr->shared[i]->n_ranks > HVD_WIRE_MAX_RANKS)
                        return fail(err, err_len, "node ready: shared entry without requests or ranks");
                int r = validate_ready(nr->shared[i]->ready, err, err_len);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < nr->n_ranks; i++) {
                if (!nr->ranks[i]->ready)
                        return fail(err, err_len, "node ready: rank entry without requests");
                int r = validate_ready(nr->ranks[i]->ready, err, err_len);
                if (r < 0)
                        return r;
        }
        if (nr->n_departed > HVD_WIRE_MAX_RANKS)
                return fail(err, err_len, "node ready: too many departed ranks");
        if (nr->relay_secret.len > HVD_WIRE_MAX_SECRET || nr->n_relayed > HVD_WIRE_MAX_RANKS)
                return fail(err, err_len, "node ready: relay secret too long or too many relayed entries");
        for (size_t i = 0; i < nr->n_relayed; i++) {
                Hvd__NodeReady view = HVD__NODE_READY__INIT;
                hvd_wire_relayed_view(nr->relayed[i], &view);
                if (!nr->relayed[i]->n_hosts || nr->relayed[i]->n_hosts > HVD_WIRE_MAX_RANKS)
                        return fail(err, err_len, "node ready: relayed entry without hosts");
                int r = validate_node_ready(&view, err, err_len);
                if (r < 0)
                        return r;
        }
        return 0;
}

int hvd_wire_validate(const Hvd__Envelope *env, char *err, size_t err_len) {
        if (env->version != HVD_PROTOCOL_VERSION)
                return fail(err, err_len, "protocol version %u not supported (this side speaks %u)", env->version,
                            HVD_PROTOCOL_VERSION);
        switch (env->body_case) {
        case HVD__ENVELOPE__BODY_HELLO: {
                const Hvd__Hello *h = env->hello;
                CHECK_NAME(h->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                if (!h->job_id[0])
                        return fail(err, err_len, "empty job id");
                if (h->secret.len > HVD_WIRE_MAX_SECRET)
                        return fail(err, err_len, "job secret too long");
                CHECK_NAME(h->host, HVD_WIRE_MAX_HOST, "host name");
                if (h->world_size == 0 || h->world_size > HVD_WIRE_MAX_RANKS)
                        return fail(err, err_len, "world size %u out of range", h->world_size);
                if (h->local_size == 0 || h->local_size > h->world_size)
                        return fail(err, err_len, "local size %u out of range", h->local_size);
                if (h->local_rank >= h->local_size)
                        return fail(err, err_len, "local rank %u not below local size %u", h->local_rank,
                                    h->local_size);
                if (h->rank >= h->world_size)
                        return fail(err, err_len, "rank %u not below world size %u", h->rank, h->world_size);
                if (h->cross_size > h->world_size || (h->cross_size && h->cross_rank >= h->cross_size))
                        return fail(err, err_len, "cross rank %u not below cross size %u", h->cross_rank,
                                    h->cross_size);
                CHECK_NAME(h->data_addr, HVD_WIRE_MAX_HOST + 8, "data-plane address");
                CHECK_NAME(h->root_peer, HVD_WIRE_MAX_TEXT, "root peer endpoint");
                CHECK_NAME(h->launcher, HVD_WIRE_MAX_LAUNCHER, "launcher");
                if (h->nccl_id.len > 128)
                        return fail(err, err_len, "NCCL id longer than 128 bytes");
                if (h->n_hosts > HVD_WIRE_MAX_RANKS || (h->n_hosts && h->n_hosts != h->cross_size))
                        return fail(err, err_len, "host list does not match the cross size");
                for (size_t i = 0; i < h->n_hosts; i++)
                        CHECK_NAME(h->hosts[i], HVD_WIRE_MAX_HOST, "host name");
                if (h->autotune) {
                        const Hvd__AutotuneSpec *a = h->autotune;
                        if (a->warmup_samples > 1000 || a->steps_per_sample > 100000 || a->max_samples > 1000)
                                return fail(err, err_len, "autotune sample counts out of range");
                        if (a->has_noise && !(a->noise >= 0 && a->noise <= 1e6))
                                return fail(err, err_len, "autotune noise out of range");
                        if (a->start_threshold > (UINT64_C(64) << 20) ||
                            (a->start_cycle_time_usec &&
                             (a->start_cycle_time_usec < 1000 || a->start_cycle_time_usec > 100000)))
                                return fail(err, err_len, "autotune start out of range");
                }
                return 0;
        }
        case HVD__ENVELOPE__BODY_WELCOME: {
                const Hvd__Welcome *w = env->welcome;
                if (w->size == 0 || w->size > HVD_WIRE_MAX_RANKS || w->rank >= w->size || w->local_size == 0 ||
                    w->local_rank >= w->local_size || w->cross_size == 0 || w->cross_rank >= w->cross_size)
                        return fail(err, err_len, "welcome: rank table out of range");
                CHECK_NAME(w->shm_name, 255, "shared-memory name");
                if (w->nccl_id.len > 128)
                        return fail(err, err_len, "welcome: NCCL id longer than 128 bytes");
                if (w->n_ranks > HVD_WIRE_MAX_RANKS)
                        return fail(err, err_len, "welcome: too many ranks");
                for (size_t i = 0; i < w->n_ranks; i++)
                        CHECK_NAME(w->ranks[i]->host, HVD_WIRE_MAX_HOST, "host name");
                return 0;
        }
        case HVD__ENVELOPE__BODY_READY: return validate_ready(env->ready, err, err_len);
        case HVD__ENVELOPE__BODY_SCHEDULE: return validate_schedule(env->schedule, err, err_len);
        case HVD__ENVELOPE__BODY_JOB_SCHEDULE:
                CHECK_NAME(env->job_schedule->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                if (!env->job_schedule->schedule)
                        return fail(err, err_len, "job schedule without a schedule");
                return validate_schedule(env->job_schedule->schedule, err, err_len);
        case HVD__ENVELOPE__BODY_NODE_JOIN: {
                const Hvd__NodeJoin *nj = env->node_join;
                CHECK_NAME(nj->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                CHECK_NAME(nj->host, HVD_WIRE_MAX_HOST, "host name");
                if (!nj->job_id[0] || nj->secret.len > HVD_WIRE_MAX_SECRET)
                        return fail(err, err_len, "node join: bad job id or secret");
                if (nj->world_size == 0 || nj->world_size > HVD_WIRE_MAX_RANKS || nj->cross_size == 0 ||
                    nj->cross_size > nj->world_size || nj->cross_rank >= nj->cross_size || nj->n_ranks == 0 ||
                    nj->n_ranks > nj->world_size)
                        return fail(err, err_len, "node join: rank table out of range");
                if (nj->nccl_id.len > 128)
                        return fail(err, err_len, "node join: NCCL id longer than 128 bytes");
                if (nj->n_hosts > HVD_WIRE_MAX_RANKS)
                        return fail(err, err_len, "node join: too many hosts");
                for (size_t i = 0; i < nj->n_hosts; i++)
                        CHECK_NAME(nj->hosts[i], HVD_WIRE_MAX_HOST, "host name");
                CHECK_NAME(nj->peer_endpoint, HVD_WIRE_MAX_TEXT, "peer endpoint");
                return validate_ranks(nj->ranks, nj->n_ranks, nj->world_size, err, err_len);
        }
        case HVD__ENVELOPE__BODY_NODE_WELCOME: {
                const Hvd__NodeWelcome *nw = env->node_welcome;
                CHECK_NAME(nw->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                if (nw->nccl_id.len > 128)
                        return fail(err, err_len, "node welcome: NCCL id longer than 128 bytes");
                if (nw->n_ranks == 0 || nw->n_ranks > HVD_WIRE_MAX_RANKS)
                        return fail(err, err_len, "node welcome: rank table out of range");
                if (nw->n_relay_via > HVD_WIRE_MAX_RANKS || nw->n_relay_endpoint != nw->n_relay_via)
                        return fail(err, err_len, "node welcome: relay table out of range");
                for (size_t i = 0; i < nw->n_relay_endpoint; i++)
                        CHECK_NAME(nw->relay_endpoint[i], HVD_WIRE_MAX_TEXT, "relay endpoint");
                return validate_ranks(nw->ranks, nw->n_ranks, (uint32_t) nw->n_ranks, err, err_len);
        }
        case HVD__ENVELOPE__BODY_NODE_READY:
                CHECK_NAME(env->node_ready->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                return validate_node_ready(env->node_ready, err, err_len);
        case HVD__ENVELOPE__BODY_PING: return 0;
        case HVD__ENVELOPE__BODY_ABORT:
                if (strnlen(env->abort->reason, HVD_WIRE_MAX_TEXT + 1) > HVD_WIRE_MAX_TEXT)
                        return fail(err, err_len, "abort: reason too long");
                return 0;
        case HVD__ENVELOPE__BODY_ERROR:
                if (strnlen(env->error->message, HVD_WIRE_MAX_TEXT + 1) > HVD_WIRE_MAX_TEXT)
                        return fail(err, err_len, "error: message too long");
                return 0;
        case HVD__ENVELOPE__BODY_STATUS_REQUEST:
                CHECK_NAME(env->status_request->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                return 0;
        case HVD__ENVELOPE__BODY_TIMELINE_CONTROL: {
                const Hvd__TimelineControl *t = env->timeline_control;
                CHECK_NAME(t->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                CHECK_NAME(t->file, HVD_WIRE_MAX_TEXT, "timeline file");
                if (strnlen(t->message, HVD_WIRE_MAX_TEXT + 1) > HVD_WIRE_MAX_TEXT)
                        return fail(err, err_len, "timeline: message too long");
                if (t->start && !t->reply && !t->file[0])
                        return fail(err, err_len, "timeline: start without a file");
                return 0;
        }
        case HVD__ENVELOPE__BODY_LOG_LEVEL: CHECK_NAME(env->log_level->level, 32, "log level"); return 0;
        case HVD__ENVELOPE__BODY_AUTOTUNE_ROW:
                CHECK_NAME(env->autotune_row->row, HVD_WIRE_MAX_TEXT, "autotune row");
                return 0;
        case HVD__ENVELOPE__BODY_METRICS_REPLY:
                /* lines of text: newlines allowed */
                if (!utf8_valid((const unsigned char *) env->metrics_reply->text))
                        return fail(err, err_len, "metrics text is not valid UTF-8");
                return 0;
        case HVD__ENVELOPE__BODY_ENROLL: {
                const Hvd__Enroll *e = env->enroll;
                CHECK_NAME(e->job_id, HVD_WIRE_MAX_JOB_ID - 24, "job id");
                if (!e->job_id[0])
                        return fail(err, err_len, "empty job id");
                if (e->secret.len > HVD_WIRE_MAX_SECRET)
                        return fail(err, err_len, "job secret too long");
                CHECK_NAME(e->host, HVD_WIRE_MAX_HOST, "host name");
                CHECK_NAME(e->root_peer, HVD_WIRE_MAX_TEXT, "root peer endpoint");
                CHECK_NAME(e->reason, HVD_WIRE_MAX_TEXT, "reason");
                if (e->timeout_usec > UINT64_C(7) * 86400 * 1000000 || e->settle_usec > UINT64_C(86400) * 1000000)
                        return fail(err, err_len, "elastic timeout or settle time out of range");
                if (e->min_size == 0 || e->min_size > e->max_size || e->max_size > HVD_WIRE_MAX_RANKS ||
                    e->initial_size > HVD_WIRE_MAX_RANKS)
                        return fail(err, err_len, "elastic sizes out of range (min %u, max %u, initial %u)",
                                    e->min_size, e->max_size, e->initial_size);
                return 0;
        }
        case HVD__ENVELOPE__BODY_PLACEMENT: {
                const Hvd__Placement *p = env->placement;
                CHECK_NAME(p->reason, HVD_WIRE_MAX_TEXT, "reason");
                CHECK_NAME(p->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                CHECK_NAME(p->joined_names, HVD_WIRE_MAX_TEXT, "joined names");
                CHECK_NAME(p->left_names, HVD_WIRE_MAX_TEXT, "left names");
                if (p->code < 0)
                        return 0;
                if (p->size == 0 || p->size > HVD_WIRE_MAX_RANKS || p->rank >= p->size || p->local_size == 0 ||
                    p->local_rank >= p->local_size || p->cross_size == 0 || p->cross_rank >= p->cross_size ||
                    p->n_hosts != p->cross_size || !p->job_id[0])
                        return fail(err, err_len, "placement out of range");
                for (size_t i = 0; i < p->n_hosts; i++)
                        CHECK_NAME(p->hosts[i], HVD_WIRE_MAX_HOST, "host name");
                return 0;
        }
        case HVD__ENVELOPE__BODY_HOSTS_UPDATED:
                CHECK_NAME(env->hosts_updated->job_id, HVD_WIRE_MAX_JOB_ID, "job id");
                return 0;
        case HVD__ENVELOPE__BODY_HOST_OFFER: {
                const Hvd__HostOffer *o = env->host_offer;
                CHECK_NAME(o->host, HVD_WIRE_MAX_HOST, "host name");
                CHECK_NAME(o->runtime_dir, HVD_WIRE_MAX_PATH, "runtime directory");
                CHECK_NAME(o->machine, 64, "machine id");
                if (!o->host[0] || !o->runtime_dir[0] || o->slots > HVD_WIRE_MAX_OFFER_SLOTS)
                        return fail(err, err_len, "host offer: empty host or runtime directory, or more than %u slots",
                                    HVD_WIRE_MAX_OFFER_SLOTS);
                return 0;
        }
        case HVD__ENVELOPE__BODY_DONE: {
                const Hvd__Done *dn = env->done;
                if (dn->n_tune_step_usec != dn->n_tune_step_bytes ||
                    dn->n_tune_step_usec != dn->n_tune_step_generation ||
                    dn->n_tune_step_usec > HVD_WIRE_MAX_TUNE_STEPS)
                        return fail(err, err_len, "done: %zu step times, %zu step sizes, %zu generations",
                                    dn->n_tune_step_usec, dn->n_tune_step_bytes, dn->n_tune_step_generation);
                return 0;
        }
        case HVD__ENVELOPE__BODY_METRICS_REQUEST:
        case HVD__ENVELOPE__BODY_HEARTBEAT:
        case HVD__ENVELOPE__BODY_GOODBYE:
        case HVD__ENVELOPE__BODY_STATUS: return 0;
        default: return fail(err, err_len, "message with no known body");
        }
}

int hvd_control_call(void *zctx, const char *endpoint, Hvd__Envelope *req, uint64_t timeout_usec,
                     Hvd__Envelope **reply) {
        void *ctx = zctx;
        int r;
        if (strncmp(endpoint, "ipc://", 6) == 0) {
                /* zmq retries silently forever: find out ourselves whether
                 * anyone listens and whether we may talk to it */
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                if (strlen(endpoint + 6) >= sizeof sa.sun_path)
                        return -ENAMETOOLONG;
                strcpy(sa.sun_path, endpoint + 6);
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return -errno;
                r = connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0 ? -errno : 0;
                close(fd);
                if (r == -ENOENT)
                        return -ECONNREFUSED;
                if (r < 0)
                        return r; /* -ECONNREFUSED (stale socket), -EACCES, ... */
        }
        if (!ctx && !(ctx = zmq_ctx_new()))
                return -zmq_errno();
        void *s = zmq_socket(ctx, ZMQ_DEALER);
        if (!s) {
                r = -zmq_errno();
                goto out_ctx;
        }
        int zero = 0;
        int64_t maxmsg = (int64_t) HVD_WIRE_MAX_MESSAGE_BYTES;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        if ((r = hvd_zmq_connect(s, endpoint)) < 0)
                goto out;
        r = hvd_wire_send(s, req, 0);
        if (r < 0)
                goto out;
        uint64_t deadline = hvd_now_usec() + timeout_usec;
        for (;;) {
                uint64_t now = hvd_now_usec();
                if (now >= deadline) {
                        r = HVD_ETIMEOUT;
                        goto out;
                }
                zmq_pollitem_t it = { .socket = s, .events = ZMQ_POLLIN };
                int n = zmq_poll(&it, 1, (long) ((deadline - now + 999) / 1000));
                if (n < 0) {
                        if (zmq_errno() == EINTR)
                                continue;
                        r = -zmq_errno();
                        goto out;
                }
                if (n == 0)
                        continue;
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, s, 0) < 0) {
                        int e = zmq_errno();
                        zmq_msg_close(&msg);
                        if (e == EINTR)
                                continue;
                        r = -e;
                        goto out;
                }
                char err[256];
                r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, reply, err, sizeof err);
                zmq_msg_close(&msg);
                goto out;
        }
out:
        zmq_close(s);
out_ctx:
        if (!zctx)
                while (zmq_ctx_term(ctx) < 0 && zmq_errno() == EINTR)
                        ; /* restarted after a signal, or the context stays behind */
        return r;
}
