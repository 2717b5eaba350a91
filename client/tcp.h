/* tcp.h — the data plane between nodes: one TCP connection per pair of
 * ranks that exchange data, opened on first use (the lower rank connects,
 * the higher accepts), TCP_NODELAY and large socket buffers, and one
 * primitive — a full-duplex send-and-receive with a deadline — that the
 * ring algorithms are built from. Background thread only. */
#ifndef HVD_TCP_H
#define HVD_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct hvd_tcp hvd_tcp_t;

/* Opens the listener of this rank: bind_ip "" = 0.0.0.0 (advertised as
 * advertise_ip). Writes "ip:port" to addr. Returns the listening fd or < 0. */
int hvd_tcp_listen(const char *bind_ip, const char *advertise_ip, char *addr, size_t addr_len);

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
int hvd_tcp_sendrecv(hvd_tcp_t *t, int to, const void *sbuf, size_t slen, int from, void *rbuf, size_t rlen,
                     char *err, size_t err_len);

/* Fails every later call at once (the job was aborted). */
void hvd_tcp_abort(hvd_tcp_t *t);

#endif
