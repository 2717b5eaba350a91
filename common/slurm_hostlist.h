/* slurm_hostlist.h — Slurm's compressed lists, as srun sets them in the
 * environment of every task: host lists (SLURM_STEP_NODELIST:
 * "node[01-04,07]", "a,b[1-3]", "pre[1-2]suf", "r[1-2]n[1-2]") and task
 * counts per node (SLURM_STEP_TASKS_PER_NODE: "2(x3),1"). Parsing only,
 * into caller buffers: nothing is allocated. */
#ifndef HVD_SLURM_HOSTLIST_H
#define HVD_SLURM_HOSTLIST_H

#include <stddef.h>
#include <stdint.h>

#define HVD_SLURM_MAX_HOSTS 4096 /* hosts of one expanded list */
#define HVD_SLURM_MAX_TASKS 4096 /* tasks on one node, and in all */

/* Expands list into out: the host names in order, each followed by a NUL
 * (out holds at most out_len bytes), and *n_hosts their count. A range
 * keeps the width of its first bound ("[08-10]": 08 09 10); several
 * bracket groups in one name multiply ("r[1-2]n[1-2]": r1n1 r1n2 r2n1
 * r2n2). Returns 0, or -EINVAL with what is wrong in err (a bracket not
 * closed, a range backwards, an empty name, more than max_hosts names or
 * more than out_len bytes); *n_hosts and out are then undefined. */
int hvd_slurm_hostlist_expand(const char *list, size_t max_hosts, char *out, size_t out_len, size_t *n_hosts, char *err,
                              size_t err_len);

/* Expands "2(x3),1" into counts[]: 2 2 2 1, *n_counts = 4 (at most
 * max_counts). Every count is 1..HVD_SLURM_MAX_TASKS, and so is their sum.
 * Returns 0 or -EINVAL with what is wrong in err. */
int hvd_slurm_tasks_expand(const char *list, uint32_t *counts, size_t max_counts, size_t *n_counts, char *err,
                           size_t err_len);

#endif
