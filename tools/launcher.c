/* launcher.c — hvdrun's choice of launcher, the hosts of a Slurm allocation
 * (from the variables sbatch and salloc set, through common/slurm_hostlist.c),
 * the srun command line of one rank, the table of horovodrun's options
 * that hvdrun refuses, and the variables its autotune options set. Invariant: an allocation's host list has one entry
 * per node, in Slurm's order, with at least one slot each. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"
#include "shellquote.h"
#include "slurm_hostlist.h"
#include "util.h"

#define NODES_BYTES (HVD_SLURM_MAX_HOSTS * 64)

int hvd_launch_mode_parse(const char *s, hvd_launch_mode_t *ret, char *err, size_t err_len) {
        if (strcmp(s, "ssh") == 0)
                *ret = HVD_LAUNCH_SSH;
        else if (strcmp(s, "srun") == 0)
                *ret = HVD_LAUNCH_SRUN;
        else if (strcmp(s, "mpirun") == 0) {
                snprintf(err, err_len,
                         "--launcher mpirun: hvdrun does not start ranks through mpirun; run 'mpirun -np N "
                         "PROGRAM' itself: libhvd reads Open MPI's and MPICH's variables and joins the ranks as one "
                         "job (docs/LAUNCHERS.md)");
                return -ENOTSUP;
        } else {
                snprintf(err, err_len, "--launcher '%s': expected ssh or srun", s);
                return -EINVAL;
        }
        return 0;
}

bool hvd_slurm_in_allocation(void) {
        const char *id = getenv("SLURM_JOB_ID");
        return id && *id;
}

/* The slots of each node: tasks if Slurm gave a count, else CPUs. In a step
 * (hvdrun started by srun) the task count is the step's, hvdrun's own: then
 * the job's CPUs. */
static int alloc_counts(size_t n_hosts, uint32_t *counts, char *err, size_t err_len) {
        const char *step = getenv("SLURM_STEP_ID");
        const char *name = "SLURM_TASKS_PER_NODE", *v = step && *step ? NULL : getenv(name);
        if (!v || !*v) {
                name = "SLURM_JOB_CPUS_PER_NODE";
                v = getenv(name);
        }
        if (!v || !*v) {
                snprintf(err, err_len,
                         "in the Slurm allocation %s, neither SLURM_TASKS_PER_NODE (outside a step) nor "
                         "SLURM_JOB_CPUS_PER_NODE is set: give the hosts with -H HOST:SLOTS,...",
                         getenv("SLURM_JOB_ID"));
                return -EINVAL;
        }
        char why[256];
        size_t n = 0;
        if (hvd_slurm_tasks_expand(v, counts, HVD_SLURM_MAX_HOSTS, &n, why, sizeof why) < 0) {
                snprintf(err, err_len, "%s='%s': %s", name, v, why);
                return -EINVAL;
        }
        if (n != n_hosts) {
                snprintf(err, err_len, "%s='%s' gives %zu nodes, SLURM_JOB_NODELIST %zu", name, v, n, n_hosts);
                return -EINVAL;
        }
        return 0;
}

int hvd_slurm_alloc_hosts(hvd_hostlist_t *l, char *err, size_t err_len) {
        const char *nodes = getenv("SLURM_JOB_NODELIST");
        if (!nodes || !*nodes)
                nodes = getenv("SLURM_NODELIST");
        if (!nodes || !*nodes) {
                snprintf(err, err_len, "in the Slurm allocation %s, SLURM_JOB_NODELIST is not set: give -H HOST:SLOTS",
                         getenv("SLURM_JOB_ID"));
                return -EINVAL;
        }
        _cleanup_free_ char *buf = malloc(NODES_BYTES);
        _cleanup_free_ uint32_t *counts = calloc(HVD_SLURM_MAX_HOSTS, sizeof *counts);
        char why[256];
        size_t n = 0;
        if (!buf || !counts)
                return -ENOMEM;
        if (hvd_slurm_hostlist_expand(nodes, HVD_SLURM_MAX_HOSTS, buf, NODES_BYTES, &n, why, sizeof why) < 0) {
                snprintf(err, err_len, "SLURM_JOB_NODELIST='%s': %s", nodes, why);
                return -EINVAL;
        }
        int r = alloc_counts(n, counts, err, err_len);
        if (r < 0)
                return r;
        /* "a:4,b:4" for the -H parser, which checks names and the slot limit */
        hvd_strbuf_t b = { 0 };
        const char *p = buf;
        for (size_t i = 0; i < n; i++, p += strlen(p) + 1) {
                char slots[32];
                snprintf(slots, sizeof slots, ":%" PRIu32, counts[i]);
                if (i)
                        hvd_strbuf_puts(&b, ",");
                hvd_strbuf_puts(&b, p);
                hvd_strbuf_puts(&b, slots);
        }
        _cleanup_free_ char *list = hvd_strbuf_take(&b);
        if (!list)
                return -ENOMEM;
        r = hvd_hostlist_parse(l, list, why, sizeof why);
        if (r == -EINVAL)
                snprintf(err, err_len, "the Slurm allocation's hosts (SLURM_JOB_NODELIST='%s'): %s", nodes, why);
        return r;
}

/* v[(*k)++] = a copy of prefix and arg joined; false when out of memory. */
static bool push(char **v, size_t *k, const char *prefix, const char *arg) {
        char *p = NULL;
        if (asprintf(&p, "%s%s", prefix, arg) < 0)
                return false;
        v[(*k)++] = p;
        return true;
}

char **hvd_srun_argv(const char *srun, const char *host, bool with_stdin, char *const *prog_args) {
        const char *cpt = getenv("SLURM_CPUS_PER_TASK");
        size_t n_args = 0;
        while (prog_args[n_args])
                n_args++;
        char **v = calloc(n_args + 16, sizeof *v);
        if (!v)
                return NULL;
        size_t k = 0;
        bool ok = push(v, &k, "", srun) && push(v, &k, "", "--nodes=1") && push(v, &k, "", "--ntasks=1") &&
                  push(v, &k, "--nodelist=", host) && push(v, &k, "", "--exact") &&
                  push(v, &k, "", with_stdin ? "--input=all" : "--input=none");
        /* started by srun itself, hvdrun's own step holds the CPUs its ranks need */
        const char *step = getenv("SLURM_STEP_ID");
        if (ok && step && *step)
                ok = push(v, &k, "", "--overlap");
        /* a rank gets the CPUs a task of the allocation has */
        if (ok && cpt && *cpt && strspn(cpt, "0123456789") == strlen(cpt))
                ok = push(v, &k, "--cpus-per-task=", cpt);
        for (size_t i = 0; ok && i < n_args; i++)
                ok = push(v, &k, "", prog_args[i]);
        if (!ok) {
                for (size_t i = 0; i < k; i++)
                        free(v[i]);
                free(v);
                return NULL;
        }
        return v;
}

/* horovodrun's options that have no honest meaning here */
static const struct {
        const char *name, *why;
} refused[] = {
        { "mpi", "hvd's data plane is its own; to start the ranks with mpirun, run mpirun itself (docs/LAUNCHERS.md)" },
        { "jsrun",
          "hvdrun cannot start ranks with jsrun; run the ranks with the cluster's launcher (docs/LAUNCHERS.md)" },
        { "mpi-args", "hvdrun does not run mpirun" },
        { "tcp", "hvdrun does not run mpirun; hvd's data plane is TCP or shared memory anyway" },
        { "binding-args", "hvdrun does not run mpirun; bind with taskset or numactl in the program's command" },
        { "network-interface", "hvd takes no interface name: set the address a rank is reached at with "
                               "-x HVD_DATA_ADDR=ADDR" },
        { "network-interfaces", "hvd takes no interface name: set the address with -x HVD_DATA_ADDR=ADDR" },
        { "nics", "hvd takes no interface name: set the address a rank is reached at with -x HVD_DATA_ADDR=ADDR" },
        { "config-file", "hvdrun reads no YAML configuration: give its options on the command line" },
        { "output-filename", "hvdrun writes every rank's output to its own, prefixed with the rank: redirect it" },
        { "check-build", "run 'hvdrun --version'; hvd.mpi_built() and friends say what is built" },
        { "blacklist-cooldown-range", "give one cool-down in seconds: --blacklist-cooldown SEC" },
        { "hierarchical-allreduce", "hvd already reduces hierarchically (within a node, then across)" },
        { "hierarchical-allgather", "hvd already gathers by node where each host's ranks are consecutive (across "
                                    "nodes, then within each)" },
        { "mpi-threads-disable", "hvd does not use MPI" },
        { "num-nccl-streams", "hvd's NCCL module uses one stream per job" },
        { "thread-affinity", "hvd does not pin its threads: use taskset or numactl" },
        { "gloo-timeout-seconds", "hvd does not use Gloo: see --start-timeout and HVD_STALL_CHECK_TIME_SECONDS" },
        { "log-level", "libhvd itself never prints; hvdrun --verbose says more" },
        { "no-stall-check", "set -x HVD_STALL_CHECK_DISABLE=1" },
        { "stall-check-warning-time-seconds", "set -x HVD_STALL_CHECK_TIME_SECONDS=SEC" },
        { "stall-check-shutdown-time-seconds", "set -x HVD_STALL_SHUTDOWN_TIME_SECONDS=SEC" },
};

/* horovodrun's autotune options: each sets a variable of the workers
 * (what it takes: the variable's reader checks it, client/settings.c) */
static const char *const tune_vars[HVD_TUNE_OPTIONS] = {
        "HVD_AUTOTUNE",
        "HVD_AUTOTUNE_LOG",
        "HVD_AUTOTUNE_WARMUP_SAMPLES",
        "HVD_AUTOTUNE_STEPS_PER_SAMPLE",
        "HVD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
        "HVD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
};

const char *hvd_tune_option_var(int k) {
        return k >= 0 && k < HVD_TUNE_OPTIONS ? tune_vars[k] : NULL;
}

const char *hvd_horovodrun_refusal(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(refused); i++)
                if (strcmp(refused[i].name, name) == 0)
                        return refused[i].why;
        return NULL;
}
