/* launcher_env.h — where a rank is, as a cluster launcher that started it
 * says: Open MPI's mpirun, MPICH/Hydra, torchrun, Slurm's srun (and PMIx,
 * checked against them). Parsing only, from the lookup settings.c gives;
 * settings.c reads HVD_* and HOROVOD_* first and comes here only when
 * neither names a rank. */
#ifndef HVD_LAUNCHER_ENV_H
#define HVD_LAUNCHER_ENV_H

#include <stddef.h>

#include "settings.h"
#include "wire.h"

typedef struct hvd_launcher {
        const char *source; /* "Open MPI", "MPICH", "torchrun", "Slurm" (static) */
        int rank, size, local_rank, local_size, cross_rank, cross_size;
        /* the engine's own name of this job, the same on every rank of it
         * ("ompi-JOBID", "slurm-JOB.STEP", "torchrun-RUNID@ADDR:PORT"); ""
         * when the engine gives none */
        char job_id[HVD_WIRE_MAX_JOB_ID + 1];
        /* the host of the job's first node (Slurm's first node, torchrun's
         * MASTER_ADDR); "" when the engine does not say */
        char root_host[256];
        /* Slurm: the node names by node id, each NUL-terminated */
        size_t n_hosts;
        char hosts[4096];
} hvd_launcher_t;

/* Fills l from the launcher variables lookup finds (lookup as for
 * hvd_settings_read). Returns 1 when a launcher started this process, 0
 * when none did (l untouched), or -EINVAL with the error in err: a
 * half-set or contradictory environment, named by its variables. */
int hvd_launcher_read(hvd_launcher_t *l, hvd_settings_lookup_fn lookup, void *userdata, char *err, size_t err_len);

#endif
