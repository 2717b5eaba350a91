/* launcher_join.h — what a job that a cluster launcher started (its ranks
 * placed by launcher_env.c, not by hvdrun) needs before its hello: the
 * job secret, the root daemon's endpoint on several nodes, and the node's
 * daemon, or a private one that local rank 0 runs in a thread for the
 * job. docs/LAUNCHERS.md says what each mode trusts. */
#ifndef HVD_LAUNCHER_JOIN_H
#define HVD_LAUNCHER_JOIN_H

#include <stdbool.h>
#include <stddef.h>

#include "settings.h"

/* Completes s for the join: the secret (HVD_JOB_SECRET, else the file
 * HVD_JOB_SECRET_FILE, else ~/.hvd/secret, created when missing), the
 * coordinator (HVD_COORDINATOR, else the one local rank 0 chose and wrote
 * into the job's directory, TMPDIR/hvd-UID/j-HASH-NODE), the root peer (on
 * several nodes: HVD_ROOT_PEER, else tcp://FIRST-HOST:HVD_ROOT_PORT).
 * The pointers put into s stay valid until hvd_launcher_join_close.
 * Returns 0 or a negative error with the message in err. Not thread-safe
 * (hvd_init's). */
int hvd_launcher_join_open(hvd_settings_t *s, char *err, size_t err_len);

/* "node daemon", "private daemon" or "HVD_COORDINATOR": how this rank
 * found its daemon; "" before hvd_launcher_join_open. Static storage. */
const char *hvd_launcher_join_mode(void);

/* Local rank 0 with a private daemon: with linger, waits (up to the start
 * timeout) until every rank of the job has left it; stops it and removes
 * the job's directory. Any rank: forgets the join. Safe to call when
 * nothing was opened. */
void hvd_launcher_join_close(bool linger);

#endif
