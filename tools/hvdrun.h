/* hvdrun.h — what hvdrun's files share: the hosts as listed, the parsed command line, and
 * the reading of it (tools/hvdrun_options.c). Program-internal: nothing here is libhvd's. */
#ifndef HVD_TOOLS_HVDRUN_H
#define HVD_TOOLS_HVDRUN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpubind.h"
#include "elastic_driver.h"
#include "embedded.h"
#include "hostlist.h"
#include "launcher.h"
#include "util.h"

#define MAX_NP             HVD_HOSTLIST_MAX_SLOTS
#define MAX_HOSTS          1024 /* libhvd's HVD_MAX_HOSTS */
#define MAX_HOSTS_VAR      4000 /* libhvd reads HVD_HOSTS into 4 KiB */
#define HOST_NAME_BYTES    HVD_HOSTLIST_NAME_BYTES
#define ENDPOINT_BYTES     256  /* hvd_daemon_config_t.peer_listen */
#define DEFAULT_PEER_PORT  7100 /* a remote first host's daemon: tcp://HOST:7100 */
#define DEFAULT_GRACE_USEC (5 * USEC_PER_SEC)
#define KILL_AFTER_USEC    (2 * USEC_PER_SEC)
#define DRAIN_USEC         (1 * USEC_PER_SEC) /* output still open after every worker exited */
#define HELPER_WAIT_USEC   (3 * USEC_PER_SEC) /* remote clean-up commands still running at the end */
#define PROBE_TIMEOUT_USEC USEC_PER_SEC
#define MAX_OFFERS         256   /* hosts offered to the root daemon, as --discover-daemons reads them */
#define LINE_BYTES         65536 /* a longer line is passed on in pieces */
#define EXIT_USAGE         2
#define PRIVATE            "<private>" /* --dry-run: known only once a private daemon runs */

typedef struct embedded {
        hvd_embedded_t run;
        char dir[PATH_MAX];
} embedded_t;

typedef enum host_kind {
        HOST_LOCAL,    /* this machine: the node's daemon, or a private one */
        HOST_NODE,     /* --node-daemon HOST=DIR: a daemon of this machine stands in */
        HOST_EMULATED, /* --emulate-hosts: a private daemon of its own, on this machine */
        HOST_REMOTE,   /* reached over ssh; its node's daemon runs there */
} host_kind_t;

typedef struct host {
        char *name; /* as first listed */
        long slots;
        host_kind_t kind;
        const char *node_dir; /* HOST_NODE: the daemon's runtime directory, borrowed from argv */
        int n_ranks;          /* 0: not part of the job (-np was reached before it) */
        int first_rank;
        int cross_rank;      /* index among the hosts that got ranks, -1 for none */
        bool private_daemon; /* emb is used (or would be, with --dry-run) */
        embedded_t emb;
        const char *runtime_dir;      /* its ranks' daemon: borrowed from the options or emb.dir */
        char peer_ep[ENDPOINT_BYTES]; /* that daemon's peer endpoint, "" when unknown */
        bool remote_kill_sent[2];     /* SIGTERM / SIGKILL clean-up started */
        char *offered_dir;            /* owned: the runtime directory of the daemon that offered it, or NULL */
} host_t;

/* --elastic-warm-start: an elastic job's Python workers start from standby
 * interpreters (auto: when the command is `python SCRIPT ...`). */
typedef enum { HVD_WARM_AUTO, HVD_WARM_ON, HVD_WARM_OFF } hvd_warm_mode_t;

typedef struct options {
        long np;               /* 0 = not given */
        const char *hosts_arg; /* -H */
        const char *hostfile;
        host_t *hosts; /* owned: the listed hosts, merged, in order */
        size_t n_hosts;
        long total_slots;    /* listed by -H and --hostfile */
        bool hosts_listed;   /* -H or --hostfile given (else one implicit local host) */
        char **node_daemons; /* "HOST=DIR", borrowed from argv */
        size_t n_node_daemons;
        bool emulate_hosts;
        const char *root_peer;
        const char *ssh;                     /* the command that reaches a remote host */
        const char *ssh_port, *ssh_identity; /* -p, -i: added to it */
        hvd_launch_mode_t launcher;          /* SSH or SRUN once parsed */
        bool from_slurm;                     /* the hosts are the Slurm allocation's */
        const char *timeline;                /* --timeline-filename */
        bool timeline_mark_cycles;
        bool dry_run;
        char **exports; /* -x NAME[=VALUE], in order */
        size_t n_exports;
        const char *fusion_mb, *cycle_ms, *start_timeout;
        const char *tune[HVD_TUNE_OPTIONS]; /* --autotune*: the value of each variable, or NULL */
        uint64_t fusion_bytes, start_timeout_usec;
        uint64_t grace_usec;
        bool heartbeat_timeout;          /* --heartbeat-timeout given */
        uint64_t heartbeat_timeout_usec; /* for the private daemons */
        const char *runtime_dir;
        hvd_elastic_opts_t elastic; /* --min-np, --max-np, ... (tools/elastic_driver.c) */
        hvd_warm_mode_t warm_start; /* --elastic-warm-start (tools/hvdrun_warm.c) */
        int embedded;               /* -1 probe (default), 0 --no-embedded, 1 --embedded */
        bool prefix, prefix_host;
        hvd_cpu_bind_t cpu_bind;
        bool verbose;
        char **argv; /* PROGRAM ARGS..., borrowed from main's argv */
} options_t;

/* Reads the command line into *o (PROGRAM ARGS stay in argv). Returns 0, 1 after --help, or
 * a negative errno after a message on stderr (a usage error). */
int parse_options(int argc, char **argv, options_t *o);
/* Gives ranks to the listed hosts in order, slots at a time, until np; the hosts left get none. */
int plan_hosts(options_t *o, long slots);
void hosts_free(host_t *hosts, size_t n);
bool is_loopback_name(const char *host);
bool host_is_local(const char *host);
/* "hvdrun: MESSAGE" and the hint to --help on stderr; returns -EINVAL. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
