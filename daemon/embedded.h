/* embedded.h — a hvd-coordinatord run in a thread of another program
 * (hvdrun's private daemons, and libhvd's for a job a cluster launcher
 * started), and the two questions asked of a daemon by its runtime
 * directory: does one answer there, and where do its peers reach it.
 * Library code: nothing here prints; errors come back in a message. */
#ifndef HVD_EMBEDDED_H
#define HVD_EMBEDDED_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator.h"

typedef struct hvd_embedded {
        hvd_daemon_t *daemon; /* owned; NULL when not started */
        pthread_t thread;
        bool thread_started;
        int run_result; /* hvd_daemon_run's, once the thread ended */
} hvd_embedded_t;

/* Creates the daemon of cfg (which binds its sockets in cfg->runtime_dir,
 * an existing directory, before this returns) and runs it in a new
 * thread. Returns 0, or a negative error with why in msg; e is then
 * stopped (nothing left to stop). */
int hvd_embedded_start(hvd_embedded_t *e, const hvd_daemon_config_t *cfg, char *msg, size_t msg_len);

/* Asks a running daemon to stop, without waiting (NULL-safe); several can
 * be asked first, then each waited for. */
void hvd_embedded_ask_stop(hvd_embedded_t *e);

/* Stops the daemon, waits for its thread and frees it (NULL-safe, also
 * when never started). Returns what hvd_daemon_run returned (0 when it
 * never ran). */
int hvd_embedded_stop(hvd_embedded_t *e);

/* Reads DIR/peer.endpoint, which a daemon with a peer_listen writes after
 * binding. Returns 0, -errno, or -ENODATA for an empty or too long line. */
int hvd_daemon_peer_endpoint(const char *dir, char *buf, size_t len);

/* Asks the daemon of runtime directory dir (DIR/control.sock) for its
 * status, waiting up to timeout_usec. Returns 0 when one answered (its
 * version into version, its pid into *pid; either may be NULL), or < 0
 * with why in msg: -ECONNREFUSED when none runs there, -EACCES when its
 * sockets may not be used, HVD_ETIMEOUT when it does not answer. */
int hvd_daemon_probe(const char *dir, uint64_t timeout_usec, char *msg, size_t msg_len, char *version,
                     size_t version_len, uint32_t *pid);

/* How many local ranks of job_id, other than the process skip_pid, the
 * daemon of dir still serves (neither said goodbye nor exited); 0 when
 * it knows no such job, < 0 when it does not answer within
 * timeout_usec. */
int hvd_daemon_job_ranks_left(const char *dir, const char *job_id, uint32_t skip_pid, uint64_t timeout_usec);

/* A host a daemon offers to the root daemon of dir (its elastic_root). */
typedef struct hvd_daemon_offer {
        char host[256];
        uint32_t slots; /* 0: the job's default */
        char runtime_dir[PATH_MAX];
        uint32_t pid; /* the offering daemon's */
        bool here;    /* the offering daemon runs on this machine */
} hvd_daemon_offer_t;

/* The hosts offered to the daemon of dir (its status), at most max, into
 * out[0 .. *n). Returns 0, or < 0 with why in msg (no answer within
 * timeout_usec, a bad entry, too many); out and *n untouched then. */
int hvd_daemon_offers(const char *dir, uint64_t timeout_usec, hvd_daemon_offer_t *out, size_t max, size_t *n, char *msg,
                      size_t msg_len);

/* This machine's id (/etc/machine-id, else the kernel's boot id) into buf:
 * 0, or -ENOENT. */
int hvd_machine_id(char *buf, size_t len);

#endif
