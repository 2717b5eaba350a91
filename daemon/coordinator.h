/* coordinator.h — hvd-coordinatord as a library: the daemon's whole state
 * machine behind new/run/stop/destroy, so hvd-coordinatord's main(), hvdrun
 * (embedded daemon) and the tests share one implementation. */
#ifndef HVD_COORDINATOR_H
#define HVD_COORDINATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"

typedef struct hvd_daemon hvd_daemon_t;

/* Creates the runtime directory if needed, takes its lock (a second daemon
 * on the same directory fails with -EBUSY and a message), binds
 * RUNTIME/worker.sock and RUNTIME/control.sock. cfg is copied.
 * Returns 0 and a new daemon in *ret (free with hvd_daemon_destroy). */
int hvd_daemon_new(const hvd_daemon_config_t *cfg, hvd_daemon_t **ret);

/* Runs the reactor until hvd_daemon_stop() or SIGTERM/SIGINT (when
 * handle_signals was set in the config). Returns 0 or a negative error.
 * Must be called from one thread only. */
int hvd_daemon_run(hvd_daemon_t *d);

/* Asks a running reactor to stop. Async-signal-safe and thread-safe. */
void hvd_daemon_stop(hvd_daemon_t *d);

/* Aborts every job (workers are told), unbinds, removes sockets and the
 * lock file. NULL-safe; sets *d = NULL. */
void hvd_daemon_destroy(hvd_daemon_t **d);

/* Reading the settings afresh on SIGHUP: load fills *cfg (initialised by
 * the caller's own defaults, file and flags) and returns 0, or < 0 with a
 * readable message naming the offending line in msg. */
typedef int (*hvd_daemon_load_fn)(hvd_daemon_config_t *cfg, char *msg, size_t msg_len, void *userdata);

/* Sets what SIGHUP reloads (without it, SIGHUP only logs). userdata is
 * borrowed and must outlive the daemon. */
void hvd_daemon_set_reload(hvd_daemon_t *d, hvd_daemon_load_fn load, void *userdata);

/* Applies the keys of cfg that can change live (log_level, the defaults
 * given to new jobs, timeouts, limits; see hvd.conf(5)) and logs each
 * change; a changed key that needs a restart (runtime_dir, peer_listen,
 * socket_group, socket_mode, max_message_size) keeps its value and gets a
 * warning naming it. Returns the number of keys applied. Reactor thread. */
int hvd_daemon_reload(hvd_daemon_t *d, const hvd_daemon_config_t *cfg);

/* The ipc endpoints, e.g. "ipc:///run/hvd/worker.sock". Borrowed. */
const char *hvd_daemon_worker_endpoint(const hvd_daemon_t *d);
const char *hvd_daemon_control_endpoint(const hvd_daemon_t *d);

/* Tests and fuzzing: where a message handed to hvd_daemon_feed() comes from. */
typedef enum {
        HVD_DAEMON_FROM_WORKER,  /* the worker socket; id: the routing id */
        HVD_DAEMON_FROM_CONTROL, /* the control socket (hvdctl); id: the routing id */
        HVD_DAEMON_FROM_PEER,    /* the peer socket (another daemon); id: the routing id */
        HVD_DAEMON_FROM_ROOT,    /* a root daemon this one reports to; id: its endpoint */
} hvd_daemon_source_t;

/* Handles data (an encoded Envelope, decoded and validated as off the
 * wire) as if it had arrived from src, without a socket, then does the
 * reactor's before-sleep step (schedules, forwarding). uid is the sender's
 * as ZAP would report it ((uid_t) -1: unknown). Replies go to the real
 * sockets, where libzmq drops them (no such peer). Returns 0, -ENOENT when
 * src has no such socket or root peer, -EINVAL. Reactor thread only. */
int hvd_daemon_feed(hvd_daemon_t *d, hvd_daemon_source_t src, const void *id, size_t id_len, uid_t uid,
                    const void *data, size_t len);

/* Tests: between begin (true) and its end (false), the messages fed are
 * read in one reactor turn, as a burst off the socket would be: the
 * before-sleep step runs once, at the end. */
void hvd_daemon_feed_turn(hvd_daemon_t *d, bool begin);

/* The worker with routing id id has exited, as its pidfd would say.
 * Returns 0 or -ENOENT (no such worker). */
int hvd_daemon_feed_exit(hvd_daemon_t *d, const void *id, size_t id_len);

/* Runs the housekeeping timer as if the clock were advance_usec ahead
 * (start, stall and peer timeouts; removal of finished jobs). */
void hvd_daemon_feed_time(hvd_daemon_t *d, uint64_t advance_usec);

/* Tests: fn sees every message the daemon sends, before it goes to its
 * socket: to (the socket: a local worker's, hvdctl's, another daemon's
 * on the peer socket, or a root or relay daemon's), its routing id (for
 * a root or relay daemon: its endpoint) and the packed Envelope. Both are
 * borrowed for the call. NULL turns it off. Reactor thread only. */
typedef void (*hvd_daemon_tap_fn)(void *userdata, hvd_daemon_source_t to, const void *id, size_t id_len,
                                  const void *data, size_t len);
void hvd_daemon_set_tap(hvd_daemon_t *d, hvd_daemon_tap_fn fn, void *userdata);

/* How many jobs, local workers and root peers the daemon holds now. */
void hvd_daemon_sizes(const hvd_daemon_t *d, size_t *jobs, size_t *workers, size_t *peers);

#endif
