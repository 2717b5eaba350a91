/* launcher.h — how hvdrun reaches its hosts (--launcher ssh|srun|mpirun), the
 * hosts of the Slurm allocation it runs in, the srun command line of one
 * rank, and horovodrun's flags that hvdrun does not take. Parsing and
 * building only: nothing here starts a process. */
#ifndef HVD_TOOLS_LAUNCHER_H
#define HVD_TOOLS_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>

#include "hostlist.h"

typedef enum hvd_launch_mode {
        HVD_LAUNCH_AUTO,   /* srun inside a Slurm allocation without -H/--hostfile, else ssh */
        HVD_LAUNCH_SSH,    /* fork here, ssh to other hosts */
        HVD_LAUNCH_SRUN,   /* every rank a step of the allocation: srun -N1 -n1 -w HOST */
        HVD_LAUNCH_MPIRUN, /* refused: mpirun starts the ranks itself, see hvd_launch_mode_parse */
} hvd_launch_mode_t;

/* "ssh", "srun" or "mpirun" into *ret. Returns 0, or -EINVAL with what is
 * wrong in err; -ENOTSUP for "mpirun", with in err why and what to run
 * instead. */
int hvd_launch_mode_parse(const char *s, hvd_launch_mode_t *ret, char *err, size_t err_len);

/* Whether getenv says this process runs inside a Slurm allocation
 * (SLURM_JOB_ID set). */
bool hvd_slurm_in_allocation(void);

/* Appends the allocation's hosts to l: SLURM_JOB_NODELIST, expanded, with
 * the slots of each from SLURM_TASKS_PER_NODE ("2(x3),1"), else (also
 * inside a step, SLURM_STEP_ID set, where that is the step's count)
 * SLURM_JOB_CPUS_PER_NODE. Returns 0, or -EINVAL with what is wrong (and
 * which variable) in err, or -ENOMEM. */
int hvd_slurm_alloc_hosts(hvd_hostlist_t *l, char *err, size_t err_len);

/* The srun command line that starts one rank on host, owned (free each
 * string and the array): srun --nodes=1 --ntasks=1 --nodelist=HOST --exact
 * --input=none|all [--overlap when SLURM_STEP_ID is set: hvdrun runs in a
 * step] [--cpus-per-task=$SLURM_CPUS_PER_TASK] PROG ARGS...
 * Returns NULL when out of memory. */
char **hvd_srun_argv(const char *srun, const char *host, bool with_stdin, char *const *prog_args);

/* horovodrun's option name (without "--" and any "=VALUE") that hvdrun
 * refuses: why, and what to do instead; NULL for an option horovodrun
 * does not have (or hvdrun takes). */
const char *hvd_horovodrun_refusal(const char *name);

/* horovodrun's --autotune, --autotune-log-file, --autotune-warmup-samples,
 * --autotune-steps-per-sample, --autotune-bayes-opt-max-samples and
 * --autotune-gaussian-process-noise, in that order: the workers' variable
 * option k sets (static), or NULL when k is out of range. */
#define HVD_TUNE_OPTIONS 6
const char *hvd_tune_option_var(int k);

#endif
