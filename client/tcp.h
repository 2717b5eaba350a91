/* tcp.h — the data plane between nodes: one TCP connection per pair of
 * ranks that exchange data, opened on first use (the lower rank connects,
 * the higher accepts), TCP_NODELAY and large socket buffers, and one
 * primitive — a full-duplex send-and-receive with a deadline — that the
 * ring algorithms are built from. Background thread only (the module's
 * own sender thread aside, see hvd_tcp_stream_t.concurrent). */
#ifndef HVD_TCP_H
#define HVD_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct hvd_tcp hvd_tcp_t;

/* Opens the listener of this rank on bind_ip ("" = 0.0.0.0) and the first
 * free port of [port_lo, port_hi] (0, 0: any port), advertised as
 * advertise_ip:advertise_port (0: the port bound; another port when a
 * NAT, firewall rule or proxy forwards to this one). Writes "ip:port" to
 * addr. Returns the listening fd, or < 0 (-EADDRINUSE: no free port). */
int hvd_tcp_listen(const char *bind_ip, unsigned port_lo, unsigned port_hi, const char *advertise_ip,
                   unsigned advertise_port, char *addr, size_t addr_len);

/* The local IPv4 address this host would use to reach endpoint
 * ("tcp://HOST:PORT"), unless that is loopback. 0 or < 0, buf untouched. */
int hvd_tcp_route_addr(const char *endpoint, char *buf, size_t len);

/* Resolves host to an IPv4 address string (buf untouched on failure). */
int hvd_tcp_resolve(const char *host, char *buf, size_t len);

/* Takes ownership of listen_fd (also on failure). addrs: [size] "ip:port"
 * (copied). job_hash identifies the job on every connection. */
int hvd_tcp_new(int listen_fd, int rank, int size, char *const *addrs, uint64_t job_hash, uint64_t timeout_usec,
                hvd_wait_check_fn check, void *userdata, hvd_tcp_t **ret);
void hvd_tcp_destroy(hvd_tcp_t **t);

/* Sends slen bytes to rank `to` while receiving rlen bytes from rank `from`
 * (either length may be 0; to/from may be equal). Returns 0, or < 0 with a
 * message naming the peer in err. */
int hvd_tcp_sendrecv(hvd_tcp_t *t, int to, const void *sbuf, size_t slen, int from, void *rbuf, size_t rlen, char *err,
                     size_t err_len);

/* Streams are cut into frames of at most this many bytes (a frame never
 * spans two segments; hvd_tcp_set_frame_bytes changes it); with the
 * checksum on, each frame is followed by its CRC-32C, and the receiver
 * hands on only frames that match. */
#define HVD_TCP_FRAME_BYTES     (UINT64_C(256) << 10)
#define HVD_TCP_FRAME_MIN_BYTES (UINT64_C(4) << 10)
#define HVD_TCP_FRAME_MAX_BYTES (UINT64_C(64) << 20)

/* A full-duplex exchange of two byte streams, each a sequence of segments:
 * to `to` the segments send_len[0..n_send), from `from` recv_len[0..n_recv)
 * (to and from may be equal; lengths may be 0). The caller feeds the send
 * side as data becomes ready and consumes the receive side frame by frame,
 * so a ring can forward and reduce while the wire is busy. */
typedef struct hvd_tcp_stream {
        int to, from;
        size_t n_send, n_recv;
        const uint64_t *send_len, *recv_len;
        /* where bytes [off, ...) of send segment seg are, and in *ready how
         * many of them may be sent now (0: none yet; never more than the
         * segment holds; may grow on later calls) */
        const uint8_t *(*send_at)(void *ud, size_t seg, uint64_t off, uint64_t *ready);
        /* where received bytes [off, ...) of segment seg go, and in *room
         * how many fit there contiguously (> 0) */
        uint8_t *(*recv_at)(void *ud, size_t seg, uint64_t off, uint64_t *room);
        /* frame [off, off + len) of receive segment seg is complete (and
         * its checksum matched); NULL = nothing to do; < 0 ends the exchange */
        int (*received)(void *ud, size_t seg, uint64_t off, uint64_t len, char *err, size_t err_len);
        void *ud;
        /* send_at may run on another thread than recv_at and received, at
         * the same time: what received makes ready, it publishes with a
         * release store that send_at reads with an acquire load. Then an
         * exchange of at least 1 MiB each way sends on the module's sender
         * thread while the calling thread receives (hvd_tcp_set_send_thread) */
        bool concurrent;
} hvd_tcp_stream_t;

int hvd_tcp_stream(hvd_tcp_t *t, const hvd_tcp_stream_t *s, char *err, size_t err_len);

/* Per-frame CRC-32C on every later exchange (every rank of a job must
 * agree: the job's setting, from the coordinator's Welcome). A mismatch
 * fails the exchange with HVD_EPROTO and a message naming the peer and
 * the chunk. */
void hvd_tcp_set_checksum(hvd_tcp_t *t, bool on);

/* Whether exchanges that allow it (hvd_tcp_stream_t.concurrent) send on a
 * thread of their own while the caller receives: off by default; this
 * rank's HVD_TCP_SEND_THREAD. Each rank decides alone: the bytes on the
 * wire are the same either way. */
void hvd_tcp_set_send_thread(hvd_tcp_t *t, bool on);
/* Frames of `bytes` (clamped to HVD_TCP_FRAME_MIN_BYTES..MAX) on every
 * later exchange: the granularity at which a ring forwards what it
 * received. With the checksum on, both ends of a connection must use the
 * same size (every rank of a job changes it at the same schedule). */
void hvd_tcp_set_frame_bytes(hvd_tcp_t *t, uint64_t bytes);

/* Fails every later call at once (the job was aborted). */
/* A collective starts: every wait of its transfers ends with HVD_ETIMEOUT
 * once the whole collective has taken the job's timeout, not only when one
 * wait makes no progress for that long. */
void hvd_tcp_begin_op(hvd_tcp_t *t);
void hvd_tcp_abort(hvd_tcp_t *t);

#endif
