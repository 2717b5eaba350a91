/* settings.h — a worker's settings, read once at hvd_init from its
 * environment: the HVD_* variables, and Horovod's HOROVOD_* names where
 * they exist (an HVD_ name that is set wins; an empty value is unset).
 * Nothing else in libhvd reads the environment for a setting. */
#ifndef HVD_SETTINGS_H
#define HVD_SETTINGS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define HVD_MAX_HOSTS 1024

/* Where the settings come from: the value of variable name, or NULL. The
 * strings it returns must stay valid while the settings are used. */
typedef const char *(*hvd_settings_lookup_fn)(const char *name, void *userdata);

typedef struct hvd_settings {
        /* the job: HVD_JOB_ID (none: a job of one rank, with no daemon;
         * then nothing below "a job with a daemon" is read), HVD_JOB_SECRET */
        bool solo;
        const char *job_id;
        uint8_t secret[HVD_WIRE_MAX_SECRET];
        size_t secret_len;
        /* where this rank is: HVD_RANK, HVD_SIZE, HVD_LOCAL_RANK,
         * HVD_LOCAL_SIZE, HVD_CROSS_RANK, HVD_CROSS_SIZE (HOROVOD_* too);
         * a job of one rank is rank 0 of 1 whatever they say. The daemon's
         * welcome has the last word. */
        int rank, size, local_rank, local_size, cross_rank, cross_size;
        /* who placed this rank: "hvdrun" (HVD_*), "Horovod" (HOROVOD_*),
         * "Open MPI", "MPICH", "torchrun", "Slurm" (launcher_env.h), or
         * "none" (a job of one rank); static */
        const char *rank_source;
        /* the ranks come from a launcher's variables: the job id is the
         * launcher's (unless HVD_JOB_ID), the secret and the daemon are
         * found by hvd_init (launcher_join.h) */
        bool from_launcher;
        char launcher_job_id[HVD_WIRE_MAX_JOB_ID + 1];
        /* from a launcher: HVD_JOB_SECRET_FILE (NULL: ~/.hvd/secret, with
         * HOME), TMPDIR (where the job's directory goes), the first
         * node's host (Slurm's first node, MASTER_ADDR; "" unknown),
         * HVD_ROOT_PORT (7100 when unset) */
        const char *secret_file, *home, *tmp_dir;
        char root_host[256];
        unsigned root_port;
        /* HVD_CYCLE_TIME (ms by default), HVD_START_TIMEOUT (s) */
        uint64_t cycle_time_usec, start_timeout_usec;
        /* HVD_TIMELINE (rank 0 only: NULL on the others), with
         * HVD_TIMELINE_MARK_CYCLES */
        const char *timeline_file;
        bool timeline_mark_cycles;
        /* HVD_FAST_PATH (a value that is not a boolean: on) */
        bool fast_path;
        /* HVD_SHM_CHUNK_BYTES (0: the data plane's choice; below 4096 or
         * not a number: ignored) */
        uint64_t shm_chunk_bytes;
        /* HVD_SHM_DIRECT_BYTES (0: the data plane's choice; 0 or not a
         * number: ignored) */
        uint64_t shm_direct_bytes;
        /* HVD_SHM_ZERO_COPY_BYTES: the smallest allreduce of shared tensors
         * read in place (0: the backend's choice, UINT64_MAX: never) */
        uint64_t shm_zero_copy_bytes;
        /* HVD_SHM_SLOT_STREAM: this rank's slot writes on the segment path
         * (0: auto, measured; 1: always around the caches; 2: never) */
        int shm_slot_stream;
        /* HVD_TCP_SEND_THREAD (a value that is not a boolean: off; set:
         * the autotuner leaves it alone) */
        bool has_tcp_send_thread, tcp_send_thread;
        /* HVD_TCP_FRAME_BYTES, HVD_RING_CHUNK_BYTES (0: the data plane's
         * choice; a value out of range fails); every rank must set them alike */
        uint64_t tcp_frame_bytes;
        uint64_t ring_chunk_bytes;
        /* HVD_GPU_DEVICE (atoi), HVD_GPU_MODULE, else HVD_NCCL_MODULE (NULL:
         * the installed module; these two count also when empty) */
        bool has_gpu_device;
        int gpu_device;
        const char *gpu_module;
        /* HVD_FUSION_THRESHOLD (the default when unset): has_ false leaves
         * it to the daemon. A job of one rank uses it for its GPU buffer
         * alone and takes the default for a value that is not a size. */
        bool has_fusion_threshold;
        uint64_t fusion_threshold;

        /* a job with a daemon */
        const char *coordinator; /* HVD_COORDINATOR, or NULL: the runtime directory's */
        const char *runtime_dir; /* HVD_RUNTIME_DIR, or the default */
        const char *hostname;    /* HVD_HOSTNAME, or NULL */
        const char *root_peer;   /* HVD_ROOT_PEER, or NULL */
        /* the stall inspector: HVD_STALL_CHECK_TIME_SECONDS (60),
         * HVD_STALL_SHUTDOWN_TIME_SECONDS (0 = never); both 0 with
         * HVD_STALL_CHECK_DISABLE */
        uint64_t stall_check_usec, stall_shutdown_usec;
        bool ring_checksum; /* HVD_RING_CHECKSUM */
        /* on several hosts (cross_size > 1): HVD_HOSTS ("a:2,b:2" or
         * "a,b"), the names by cross rank (hvd_settings_host) */
        size_t n_hosts;
        char hosts_buf[4096];
        uint16_t host_at[HVD_MAX_HOSTS];
        /* on several hosts: HVD_DATA_ADDR as given; HOST:PORT splits into
         * data_addr_host and data_addr_port (0: no port given) */
        /* elastic mode (HVD_ELASTIC, set by hvdrun --min-np/--max-np):
         * HVD_ELASTIC_MIN_NP/MAX_NP (default: HVD_SIZE), HVD_ELASTIC_TIMEOUT
         * (s, default 600), HVD_ELASTIC_RESET_LIMIT (0: none),
         * HVD_ELASTIC_SETTLE (s, default 5). The root daemon places the
         * rank (client/elastic.c). */
        bool elastic;
        uint32_t elastic_min, elastic_max, elastic_reset_limit;
        uint64_t elastic_timeout_usec, elastic_settle_usec;
        const char *data_addr;
        char data_addr_host[256];
        unsigned data_addr_port;
        /* on several hosts: HVD_DATA_PORT, PORT or LO-HI (0-0: any) */
        const char *data_port;
        unsigned data_port_lo, data_port_hi;
        /* HVD_CYCLE_TIME or HOROVOD_CYCLE_TIME was set (the autotuner
         * leaves it alone) */
        bool has_cycle_time;
        /* HVD_AUTOTUNE (HOROVOD_AUTOTUNE) and HVD_AUTOTUNE_LOG,
         * _WARMUP_SAMPLES, _STEPS_PER_SAMPLE, _BAYES_OPT_MAX_SAMPLES,
         * _GAUSSIAN_PROCESS_NOISE (HOROVOD_ names too); 0: the daemon's
         * default; the log path (rank 0 only, with HVD_AUTOTUNE; else NULL) */
        bool autotune;
        const char *autotune_log;
        uint32_t autotune_warmup_samples, autotune_steps_per_sample, autotune_max_samples;
        bool has_autotune_noise;
        double autotune_noise;
        /* HVD_AUTOTUNE_START_FUSION_THRESHOLD (a size), _START_CYCLE_TIME
         * (ms): where the search starts, not fixed (0: as the job has it) */
        bool has_autotune_start_threshold;
        uint64_t autotune_start_threshold, autotune_start_cycle_usec;
} hvd_settings_t;

/* Fills s from lookup (NULL: the process environment). Returns 0, or
 * -EINVAL with the error for the user in err (it names the variable and
 * its value); s is then partly filled. */
int hvd_settings_read(hvd_settings_t *s, hvd_settings_lookup_fn lookup, void *userdata, char *err, size_t err_len);

/* The daemon's endpoint (borrowed from s, or written into buf). */
const char *hvd_settings_coordinator(const hvd_settings_t *s, char *buf, size_t len);

/* Host i (< n_hosts) of HVD_HOSTS; borrowed from s. */
static inline const char *hvd_settings_host(const hvd_settings_t *s, size_t i) {
        return s->hosts_buf + s->host_at[i];
}

#endif
