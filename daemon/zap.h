/* zap.h — who may talk to hvd-coordinatord. The ZAP handler
 * (inproc://zeromq.zap.01 in the daemon's context, served by the reactor)
 * authenticates the peer socket's CURVE clients against the configured
 * allow-list and tells the worker/control ipc sockets the peer's uid, gid
 * and pid (SO_PEERCRED). libzmq fails open without a handler, so every
 * socket given a ZAP domain here also gets ZMQ_ZAP_ENFORCE_DOMAIN. */
#ifndef HVD_ZAP_H
#define HVD_ZAP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"

typedef struct hvd_zap hvd_zap_t;

#define HVD_ZAP_DOMAIN_PEER   "hvd-peer"
#define HVD_ZAP_DOMAIN_LOCAL  "hvd-local"
#define HVD_CURVE_KEY_Z85_LEN 40

/* Binds the ZAP handler in zctx and, when cfg names a CURVE secret key,
 * loads it and the allowed peer keys (a file with one Z85 key per line,
 * optionally followed by a name, or a directory of NAME.key files). Logs
 * and returns < 0 when a key file is missing, unreadable, malformed or too
 * open (a secret readable by others). Free with hvd_zap_destroy(). */
int hvd_zap_new(void *zctx, const hvd_daemon_config_t *cfg, hvd_zap_t **ret);
void hvd_zap_destroy(hvd_zap_t **z);

/* The handler's socket and the peer socket's monitor (NULL without
 * CURVE), for the reactor's poll set; handle_* serve what is queued
 * without blocking. */
void *hvd_zap_socket(const hvd_zap_t *z);
void *hvd_zap_monitor_socket(const hvd_zap_t *z);
void hvd_zap_handle(hvd_zap_t *z);
void hvd_zap_handle_monitor(hvd_zap_t *z);

bool hvd_zap_curve(const hvd_zap_t *z);

/* Makes sock (the peer ROUTER, before bind) a CURVE server that accepts
 * only listed keys, and watches its failed handshakes. No-op without CURVE. */
int hvd_zap_setup_peer_server(hvd_zap_t *z, void *sock);
/* Before the monitored socket closes: stops the monitor (a monitor that
 * goes away undrained blocks libzmq's I/O thread). */
void hvd_zap_stop_monitor(hvd_zap_t *z);

/* Makes sock (a DEALER to a remote root, before connect) a CURVE client
 * with this daemon's key pair, pinning the server key listed for endpoint
 * ("tcp://HOST:PORT": a key named HOST:PORT, else HOST). No-op without
 * CURVE; -ENOKEY with a logged explanation when no key is listed. */
int hvd_zap_setup_peer_client(hvd_zap_t *z, void *sock, const char *endpoint);

/* Puts an ipc ROUTER (before bind) under the handler: every message then
 * carries the sender's uid as its User-Id. */
int hvd_zap_setup_local(hvd_zap_t *z, void *sock);

/* The sender's uid from a message received on a socket set up with
 * hvd_zap_setup_local(). Returns 0, or -ENODATA when the message has none. */
int hvd_zap_msg_uid(void *msg, uid_t *ret);

#endif
