/* launcher_env.c — reads a rank's place from the variables a cluster
 * launcher sets (launcher_env.h). Each engine has one reader; the first
 * engine present in the order Open MPI, MPICH, torchrun, Slurm gives the
 * place, and every other one of the first three that is present must
 * agree with it on rank and size (Slurm may differ: it is the allocation
 * that mpirun or torchrun runs inside). Every error names the variables
 * and their values. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher_env.h"
#include "slurm_hostlist.h"

typedef struct env {
        hvd_settings_lookup_fn lookup;
        void *userdata;
} env_t;

/* A variable's value, NULL when unset or empty. */
static const char *get(const env_t *env, const char *name) {
        const char *v = env->lookup ? env->lookup(name, env->userdata) : getenv(name);
        return v && *v ? v : NULL;
}

static int fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* The four variables that place a rank, in the order rank, size, local
 * rank, local size. */
typedef struct quad {
        const char *source;
        const char *names[4];
} place_vars_t;

static int read_number(const env_t *env, const char *source, const char *name, int *v, char *err, size_t err_len) {
        const char *s = get(env, name);
        char *end;
        errno = 0;
        long x = s ? strtol(s, &end, 10) : -1;
        if (!s || errno || *end || x < 0 || x > INT32_MAX)
                return fail(err, err_len, "%s: %s='%s' is not a number 0..%d", source, name, s ? s : "", INT32_MAX);
        *v = (int) x;
        return 0;
}

/* All four set and sensible, or an error naming what is missing or wrong. */
static int read_quad(const env_t *env, const place_vars_t *q, hvd_launcher_t *l, char *err, size_t err_len) {
        int *dst[4] = { &l->rank, &l->size, &l->local_rank, &l->local_size };
        const char *set = NULL;
        for (int i = 0; i < 4; i++)
                if (get(env, q->names[i]))
                        set = q->names[i];
        for (int i = 0; i < 4; i++) {
                if (!get(env, q->names[i]))
                        return fail(err, err_len, "%s: %s is set but %s is not; set all of %s, %s, %s, %s", q->source,
                                    set, q->names[i], q->names[0], q->names[1], q->names[2], q->names[3]);
                int r = read_number(env, q->source, q->names[i], dst[i], err, err_len);
                if (r < 0)
                        return r;
        }
        l->source = q->source;
        if (l->size < 1 || l->rank >= l->size)
                return fail(err, err_len, "%s: %s=%d is not below %s=%d", q->source, q->names[0], l->rank, q->names[1],
                            l->size);
        if (l->local_size < 1 || l->local_rank >= l->local_size || l->local_size > l->size || l->local_rank > l->rank)
                return fail(err, err_len, "%s: %s=%d and %s=%d do not fit %s=%d of %s=%d", q->source, q->names[2],
                            l->local_rank, q->names[3], l->local_size, q->names[0], l->rank, q->names[1], l->size);
        return 0;
}

/* The node of a rank when every node has local_size ranks, numbered node
 * by node (the only placement hvd's cross ranks describe); nodes 0:
 * size / local_size. */
static int cross_by_node(hvd_launcher_t *l, int nodes, const char *nodes_var, const place_vars_t *q, char *err,
                         size_t err_len) {
        if (nodes == 0)
                nodes = l->size / l->local_size;
        if (nodes < 1 || (long) nodes * l->local_size != l->size || (l->rank - l->local_rank) % l->local_size)
                return fail(err, err_len,
                            "%s: %s=%d ranks with %s=%d here%s%s%.0d do not make the same number of ranks on "
                            "every node, numbered node by node (%s=%d, %s=%d); hvd needs that placement "
                            "(mpirun --map-by slot)",
                            q->source, q->names[1], l->size, q->names[3], l->local_size, nodes_var ? " on " : "",
                            nodes_var ? nodes_var : "", nodes_var ? nodes : 0, q->names[0], l->rank, q->names[2],
                            l->local_rank);
        l->cross_size = nodes;
        l->cross_rank = (l->rank - l->local_rank) / l->local_size;
        return 0;
}

static const place_vars_t ompi_quad = { "Open MPI",
                                        { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE" } };
static const place_vars_t mpich_quad = { "MPICH", { "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS" } };
static const place_vars_t torch_quad = { "torchrun", { "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE" } };

static bool quad_present(const env_t *env, const place_vars_t *q) {
        for (int i = 0; i < 4; i++)
                if (get(env, q->names[i]))
                        return true;
        return false;
}

static int read_ompi(const env_t *env, hvd_launcher_t *l, char *err, size_t err_len) {
        int r = read_quad(env, &ompi_quad, l, err, err_len), nodes = 0;
        const char *nv = "OMPI_MCA_orte_num_nodes";
        if (r >= 0 && get(env, nv))
                r = read_number(env, "Open MPI", nv, &nodes, err, err_len);
        if (r >= 0)
                r = cross_by_node(l, nodes, get(env, nv) ? nv : NULL, &ompi_quad, err, err_len);
        const char *id = get(env, "OMPI_MCA_ess_base_jobid");
        if (!id)
                id = get(env, "PMIX_NAMESPACE");
        if (id)
                snprintf(l->job_id, sizeof l->job_id, "ompi-%s", id);
        return r;
}

static int read_mpich(const env_t *env, hvd_launcher_t *l, char *err, size_t err_len) {
        int r = read_quad(env, &mpich_quad, l, err, err_len);
        if (r >= 0)
                r = cross_by_node(l, 0, NULL, &mpich_quad, err, err_len);
        const char *id = get(env, "PMI_KVSNAME");
        if (id)
                snprintf(l->job_id, sizeof l->job_id, "mpich-%s", id);
        return r;
}

static int read_torchrun(const env_t *env, hvd_launcher_t *l, char *err, size_t err_len) {
        int r = read_quad(env, &torch_quad, l, err, err_len), group = -1;
        if (r >= 0)
                r = cross_by_node(l, 0, NULL, &torch_quad, err, err_len);
        if (r >= 0 && get(env, "GROUP_RANK") &&
            (r = read_number(env, "torchrun", "GROUP_RANK", &group, err, err_len)) >= 0 && group != l->cross_rank)
                return fail(err, err_len,
                            "torchrun: GROUP_RANK=%d, but RANK=%d with LOCAL_RANK=%d of "
                            "LOCAL_WORLD_SIZE=%d is on node %d",
                            group, l->rank, l->local_rank, l->local_size, l->cross_rank);
        const char *addr = get(env, "MASTER_ADDR"), *port = get(env, "MASTER_PORT");
        const char *run = get(env, "TORCHELASTIC_RUN_ID");
        if (addr)
                snprintf(l->root_host, sizeof l->root_host, "%s", addr);
        if (addr && port)
                snprintf(l->job_id, sizeof l->job_id, "torchrun-%s@%s:%s", run ? run : "none", addr, port);
        return r;
}

/* Slurm's node list and tasks per node: this rank's node, its local size,
 * the host names. */
static int read_slurm_nodes(const env_t *env, hvd_launcher_t *l, int node, char *err, size_t err_len) {
        const char *nl_var = get(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
        const char *tp_var =
                get(env, "SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
        const char *nl = get(env, nl_var), *tp = get(env, tp_var);
        char why[256];
        uint32_t counts[HVD_MAX_HOSTS];
        size_t n_counts = 0;
        if (!nl || !tp)
                return fail(err, err_len, "Slurm: SLURM_PROCID is set but %s is not", nl ? tp_var : nl_var);
        if (hvd_slurm_hostlist_expand(nl, HVD_MAX_HOSTS, l->hosts, sizeof l->hosts, &l->n_hosts, why, sizeof why) < 0)
                return fail(err, err_len, "Slurm: %s='%s': %s", nl_var, nl, why);
        if (hvd_slurm_tasks_expand(tp, counts, HVD_MAX_HOSTS, &n_counts, why, sizeof why) < 0)
                return fail(err, err_len, "Slurm: %s: %s", tp_var, why);
        uint64_t sum = 0;
        for (size_t i = 0; i < n_counts; i++)
                sum += counts[i];
        if (n_counts != l->n_hosts || sum != (uint64_t) l->size || (size_t) node >= n_counts)
                return fail(err, err_len,
                            "Slurm: %s='%s' (%zu nodes, %llu tasks) does not fit %s='%s' (%zu nodes), "
                            "SLURM_NODEID=%d and %d tasks",
                            tp_var, tp, n_counts, (unsigned long long) sum, nl_var, nl, l->n_hosts, node, l->size);
        l->local_size = (int) counts[node];
        l->cross_rank = node;
        l->cross_size = (int) n_counts;
        /* names are shorter than 256 bytes (slurm_hostlist.h) */
        memcpy(l->root_host, l->hosts, strlen(l->hosts) + 1);
        return 0;
}

static int read_slurm(const env_t *env, hvd_launcher_t *l, char *err, size_t err_len) {
        const char *size_var = get(env, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        int node = 0, r;
        l->source = "Slurm";
        if ((r = read_number(env, "Slurm", "SLURM_PROCID", &l->rank, err, err_len)) < 0 ||
            (r = read_number(env, "Slurm", size_var, &l->size, err, err_len)) < 0 ||
            (r = read_number(env, "Slurm", "SLURM_LOCALID", &l->local_rank, err, err_len)) < 0 ||
            (r = read_number(env, "Slurm", "SLURM_NODEID", &node, err, err_len)) < 0)
                return r;
        if (l->size < 1 || l->rank >= l->size)
                return fail(err, err_len, "Slurm: SLURM_PROCID=%d is not below %s=%d", l->rank, size_var, l->size);
        if ((r = read_slurm_nodes(env, l, node, err, err_len)) < 0)
                return r;
        if (l->local_rank >= l->local_size)
                return fail(err, err_len, "Slurm: SLURM_LOCALID=%d is not below the %d tasks of node %d", l->local_rank,
                            l->local_size, node);
        const char *job = get(env, "SLURM_JOB_ID"), *step = get(env, "SLURM_STEP_ID");
        if (job && step)
                snprintf(l->job_id, sizeof l->job_id, "slurm-%s.%s", job, step);
        return 0;
}

/* The engines that place ranks themselves, in precedence order. */
typedef struct engine {
        const place_vars_t *quad; /* present when one of its variables is set */
        int (*read)(const env_t *env, hvd_launcher_t *l, char *err, size_t err_len);
} engine_t;

static const engine_t engines[] = {
        { &ompi_quad, read_ompi },
        { &mpich_quad, read_mpich },
        { &torch_quad, read_torchrun },
};

/* PMIx's rank, where mpirun or srun set it, is this rank (torchrun's
 * ranks differ from those of an srun step that started the agents). */
static int check_pmix(const env_t *env, const hvd_launcher_t *l, char *err, size_t err_len) {
        const char *pr = get(env, "PMIX_RANK");
        if (pr && l->source != torch_quad.source && strtol(pr, NULL, 10) != l->rank)
                return fail(err, err_len, "two launchers disagree: %s says rank %d, PMIX_RANK=%s", l->source, l->rank,
                            pr);
        return 0;
}

/* Every later engine present agrees with the chosen one on rank and size. */
static int check_agree(const env_t *env, const hvd_launcher_t *l, size_t chosen, char *err, size_t err_len) {
        for (size_t i = chosen + 1; i < sizeof engines / sizeof *engines; i++) {
                const place_vars_t *q = engines[i].quad;
                if (!quad_present(env, q))
                        continue;
                hvd_launcher_t o = { 0 };
                int r = engines[i].read(env, &o, err, err_len);
                if (r < 0)
                        return r;
                if (o.rank != l->rank || o.size != l->size)
                        return fail(err, err_len,
                                    "two launchers disagree: %s says rank %d of %d (%s, %s), %s says rank %d of %d "
                                    "(%s, %s); unset one, or set HVD_RANK and HVD_SIZE",
                                    l->source, l->rank, l->size, engines[chosen].quad->names[0],
                                    engines[chosen].quad->names[1], o.source, o.rank, o.size, q->names[0], q->names[1]);
        }
        return check_pmix(env, l, err, err_len);
}

int hvd_launcher_read(hvd_launcher_t *l, hvd_settings_lookup_fn lookup, void *userdata, char *err, size_t err_len) {
        const env_t env = { .lookup = lookup, .userdata = userdata };
        hvd_launcher_t t = { 0 };
        int r;
        for (size_t i = 0; i < sizeof engines / sizeof *engines; i++) {
                if (!quad_present(&env, engines[i].quad))
                        continue;
                if ((r = engines[i].read(&env, &t, err, err_len)) < 0 ||
                    (r = check_agree(&env, &t, i, err, err_len)) < 0)
                        return r;
                *l = t;
                return 1;
        }
        /* srun's tasks have a step; a batch script alone (SLURM_JOB_ID
         * without SLURM_STEP_ID) is one process, not a rank of a job */
        if (get(&env, "SLURM_PROCID") && get(&env, "SLURM_STEP_ID")) {
                if ((r = read_slurm(&env, &t, err, err_len)) < 0 || (r = check_pmix(&env, &t, err, err_len)) < 0)
                        return r;
                *l = t;
                return 1;
        }
        if (get(&env, "PMIX_RANK"))
                return fail(err, err_len,
                            "PMIx: PMIX_RANK is set, but no launcher variable gives the job's size "
                            "(OMPI_COMM_WORLD_SIZE, SLURM_NTASKS); set HVD_RANK and HVD_SIZE");
        return 0;
}
