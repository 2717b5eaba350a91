/* wire.h — the envelope on every socket: pack + send, receive + decode
 * with a memory budget + validate, and one request/reply call with a
 * deadline for the control socket. Every decoded message has been
 * validated (enum ranges, names, counts, dims) before a caller sees it. */
#ifndef HVD_WIRE_H
#define HVD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

#include "hvd.pb-c.h"

#define HVD_PROTOCOL_VERSION       1
#define HVD_WIRE_MAX_MESSAGE_BYTES (UINT64_C(64) << 20)
#define HVD_WIRE_MAX_REQUESTS      65536
#define HVD_WIRE_MAX_RANKS         65536
#define HVD_WIRE_MAX_JOB_ID        128
#define HVD_WIRE_MAX_SECRET        256
#define HVD_WIRE_MAX_LAUNCHER      32
#define HVD_WIRE_MAX_HOST          255
#define HVD_WIRE_MAX_TEXT          4096
#define HVD_WIRE_MAX_PATH          4095  /* a runtime directory */
#define HVD_WIRE_MAX_OFFER_SLOTS   4096u /* slots of a host its daemon offers (HostOffer) */
#define HVD_WIRE_MAX_TUNE_STEPS    256   /* steps in one Done */
/* schedules kept by key for repeats (Schedule.keep_key, repeat_key: 1..this) */
#define HVD_WIRE_SCHEDULE_KEYS 16
/* the largest packed envelope a Schedule.board may be (a board record) */
#define HVD_WIRE_BOARD_SCHEDULE_BYTES 240
/* ZMQ_ZAP_ENFORCE_DOMAIN lives behind the draft API in Debian's header. */
#define HVD_ZMQ_ZAP_ENFORCE_DOMAIN 93

/* zmq_bind, zmq_connect and every send first run the socket's pending
 * commands, and a signal landing in that wait (a handler installed without
 * SA_RESTART: a profiler's or a fuzzer's timer, a DataLoader's SIGCHLD)
 * fails them with EINTR although nothing was done. These make them again.
 * Return 0 or -errno. */
int hvd_zmq_bind(void *sock, const char *endpoint);
int hvd_zmq_connect(void *sock, const char *endpoint);
/* zmq_send / zmq_msg_send, made again after EINTR (the message is still
 * the caller's then). Return 0 or -errno. */
int hvd_zmq_send(void *sock, const void *buf, size_t len, int flags);
int hvd_zmq_msg_send(zmq_msg_t *msg, void *sock, int flags);

/* Packs env (its version field is set here) into one frame and sends it
 * with flags (0 or ZMQ_DONTWAIT). Returns 0 or -errno. */
int hvd_wire_send(void *sock, Hvd__Envelope *env, int flags);
/* ROUTER: routing-id frame, then the envelope. */
int hvd_wire_send_to(void *router, const void *id, size_t id_len, Hvd__Envelope *env, int flags);

/* Decodes and validates one frame. budget_bytes caps the heap the decoder
 * may use (0 = 8x the frame + 64 KiB). On success *ret is owned by the
 * caller: free with hvd_wire_free(). On failure returns HVD_EPROTO (or
 * -ENOMEM when the budget ran out) and writes a readable reason to err. */
int hvd_wire_decode(const void *buf, size_t len, size_t budget_bytes, Hvd__Envelope **ret, char *err, size_t err_len);
void hvd_wire_free(Hvd__Envelope **env);

/* A deep copy of m (malloc'd throughout: free with
 * protobuf_c_message_free_unpacked(c, NULL)); NULL without memory, or when
 * m has unknown fields. */
ProtobufCMessage *hvd_wire_dup(const ProtobufCMessage *m);

/* Whether two messages of the same type pack to the same bytes: the same
 * set fields with bitwise equal values, field by field through the
 * descriptors (no packing). Messages with unknown fields never are. */
bool hvd_wire_equal(const ProtobufCMessage *a, const ProtobufCMessage *b);

/* Field-by-field validation (also called by hvd_wire_decode). */
int hvd_wire_validate(const Hvd__Envelope *env, char *err, size_t err_len);

/* A relayed entry's fields seen as a NodeReady's (pointers into rr; the
 * job and relay fields of view stay as they were). */
void hvd_wire_relayed_view(const Hvd__RelayedReady *rr, Hvd__NodeReady *view);
int hvd_wire_validate_name(const char *s, size_t max_bytes, const char *what, char *err, size_t err_len);

/* Connects a DEALER to endpoint, sends req, waits up to timeout_usec for
 * one reply. zctx may be NULL (a private context is used). On success *reply
 * is owned by the caller (hvd_wire_free). -ECONNREFUSED when the ipc
 * socket file does not exist, HVD_ETIMEOUT when nothing answered. */
int hvd_control_call(void *zctx, const char *endpoint, Hvd__Envelope *req, uint64_t timeout_usec,
                     Hvd__Envelope **reply);

#endif
