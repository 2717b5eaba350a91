/* coordinator.h — hvd-coordinatord as a library: the daemon's whole state
 * machine behind new/run/stop/destroy, so hvd-coordinatord's main(), hvdrun
 * (embedded daemon) and the tests share one implementation. */
#ifndef HVD_COORDINATOR_H
#define HVD_COORDINATOR_H

#include <stdbool.h>
#include <stdint.h>

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

/* The ipc endpoints, e.g. "ipc:///run/hvd/worker.sock". Borrowed. */
const char *hvd_daemon_worker_endpoint(const hvd_daemon_t *d);
const char *hvd_daemon_control_endpoint(const hvd_daemon_t *d);

#endif
