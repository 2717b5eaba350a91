/* conf.h — configuration of hvd-coordinatord: one typed table of keys,
 * loaded from /etc/hvd/coordinatord.conf (key = value), overridable by
 * command-line flags; and the worker-side knobs read from HVD_* and
 * Horovod's HOROVOD_* environment variables. */
#ifndef HVD_CONF_H
#define HVD_CONF_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HVD_DEFAULT_RUNTIME_DIR      "/run/hvd"
#define HVD_DEFAULT_CONFIG_FILE      SYSCONFDIR "/hvd/coordinatord.conf"
#define HVD_DEFAULT_FUSION_THRESHOLD (UINT64_C(64) << 20)
#define HVD_DEFAULT_CYCLE_TIME_USEC  UINT64_C(1000)

typedef struct hvd_daemon_config {
        char runtime_dir[PATH_MAX];
        int log_level;
        uint64_t fusion_threshold_bytes; /* default for jobs that set none */
        uint64_t cycle_time_usec;
        uint64_t start_timeout_usec;      /* a job must complete its join within this */
        uint64_t collective_timeout_usec; /* data-plane waits give up after this */
        uint64_t heartbeat_interval_usec; /* workers send a heartbeat this often */
        uint64_t heartbeat_timeout_usec;  /* a silent local worker is lost after this (0 = never) */
        uint32_t max_jobs;
        uint32_t max_ranks_per_job;
        uint32_t max_tensors_per_job;         /* negotiation table / cache capacity */
        uint64_t max_message_bytes;           /* ZMQ_MAXMSGSIZE and decode budget base */
        char socket_group[64];                /* group owning worker.sock ("" = keep) */
        uint32_t socket_mode;                 /* worker.sock / control.sock mode, 0660 */
        char peer_listen[256];                /* tcp endpoint other daemons reach ("" = none) */
        uint64_t peer_timeout_usec;           /* a silent peer daemon is lost after this */
        uint32_t relay_fanout;                /* root: hosts per relay group of a large job (0, 1 = none) */
        char metrics_listen[256];             /* HTTP /metrics listener "ADDR:PORT" ("" = off) */
        char curve_secret_key_file[PATH_MAX]; /* this daemon's CURVE key ("" = no CURVE) */
        char peer_public_keys[PATH_MAX];      /* allowed peer keys: a file or a directory */
        char elastic_root[256];               /* a root daemon this host is offered to ("" = none) */
        char elastic_host[256];               /* the name it is offered under ("" = the host name) */
        uint32_t elastic_slots;               /* its slots (0 = the job's default) */
        bool ring_checksum;                   /* jobs' TCP ring frames carry a CRC-32C */
        bool handle_signals;                  /* SIGTERM/SIGINT/SIGHUP through signalfd */
        bool notify;                          /* speak sd_notify if NOTIFY_SOCKET is set */
} hvd_daemon_config_t;

void hvd_daemon_config_init(hvd_daemon_config_t *cfg);

/* Sets one key from its string value. Returns 0, -ENOENT for an unknown
 * key, -EINVAL for a bad value (*why, if given, says what is expected). */
int hvd_daemon_config_set(hvd_daemon_config_t *cfg, const char *key, const char *value, const char **why);

/* The i-th key of the table (i from 0) and its value in cfg, written as
 * the configuration file would have it, into buf. Returns false past the
 * last key. *key is static. */
bool hvd_daemon_config_get(const hvd_daemon_config_t *cfg, size_t i, const char **key, char *buf, size_t len);

/* Loads a key = value file; '#' comments. On error returns < 0 and, when
 * err_line is given, the 1-based offending line number; err_msg (size
 * err_len) gets a readable message. cfg is changed only on success. */
int hvd_daemon_config_load(hvd_daemon_config_t *cfg, const char *path, unsigned *err_line, char *err_msg,
                           size_t err_len);

/* Writes key's value in the file's syntax (e.g. "64M", "30s", "0660") to
 * buf. Returns 0, or -ENOENT for an unknown key. */
int hvd_daemon_config_format(const hvd_daemon_config_t *cfg, const char *key, char *buf, size_t len);

/* The key table, for documentation checks and reload messages: the i-th
 * key's name (static), and in *live whether a reload applies it to a
 * running daemon. NULL past the end. */
size_t hvd_daemon_config_key_count(void);
const char *hvd_daemon_config_key(size_t i, bool *live);

/* Reload: for every key whose value differs between *cur and *next, calls
 * fn (if given; before anything changes, with both configs) and copies
 * the value into *cur when the key is live. Keys that cannot change live
 * keep their value in *cur. Returns the number of keys that differed. */
typedef void (*hvd_daemon_config_change_fn)(const char *key, bool live, const hvd_daemon_config_t *cur,
                                            const hvd_daemon_config_t *next, void *userdata);
size_t hvd_daemon_config_apply_live(hvd_daemon_config_t *cur, const hvd_daemon_config_t *next,
                                    hvd_daemon_config_change_fn fn, void *userdata);

/* Parsers shared with the worker's environment. Sizes accept K/M/G
 * suffixes (1024-based); durations accept us/ms/s suffixes (default unit
 * given by the caller). */
int hvd_parse_size(const char *s, uint64_t *ret);
int hvd_parse_duration(const char *s, uint64_t default_unit_usec, uint64_t *ret_usec);
int hvd_parse_bool(const char *s, bool *ret);

/* getenv of HVD_<name>, falling back to HOROVOD_<name> when horovod_too. */
const char *hvd_getenv(const char *name, bool horovod_too);

#endif
