/* elastic_driver.h — hvdrun's elastic mode: its options, the variables it
 * gives the workers, the host discovery script and the blacklist of hosts
 * whose workers failed. The membership itself is the root daemon's. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hvd_elastic_opts {
        long min_np, max_np;   /* 0: not given */
        const char *discovery; /* --host-discovery-script, borrowed from argv */
        long slots;            /* --slots: per discovered host that gives no count (default 1) */
        double timeout_sec;    /* --elastic-timeout (default 600) */
        long reset_limit;      /* --reset-limit (0: none) */
        double cooldown_sec;   /* --blacklist-cooldown (default 60) */
        double interval_sec;   /* --discovery-interval (default 1) */
        bool daemons;          /* --discover-daemons: hosts offered to the root daemon join */
        bool ssh_offered;      /* --ssh-offered-hosts: offered hosts of other machines get workers over ssh */
} hvd_elastic_opts_t;

/* hvdrun's long options of elastic mode, in this order. */
enum {
        HVD_ELASTIC_OPT_MIN_NP,
        HVD_ELASTIC_OPT_MAX_NP,
        HVD_ELASTIC_OPT_DISCOVERY,
        HVD_ELASTIC_OPT_SLOTS,
        HVD_ELASTIC_OPT_TIMEOUT,
        HVD_ELASTIC_OPT_RESET_LIMIT,
        HVD_ELASTIC_OPT_COOLDOWN,
        HVD_ELASTIC_OPT_INTERVAL,
        HVD_ELASTIC_OPT_DAEMONS,     /* no argument */
        HVD_ELASTIC_OPT_SSH_OFFERED, /* no argument; implies --discover-daemons */
        HVD_ELASTIC_N_OPTS
};
extern const char *const hvd_elastic_opt_names[HVD_ELASTIC_N_OPTS];

/* Sets the defaults. */
void hvd_elastic_opts_init(hvd_elastic_opts_t *eo);
/* Parses option which's argument (NULL for one that takes none); 0, or
 * -EINVAL with a message in err. */
int hvd_elastic_opt_parse(hvd_elastic_opts_t *eo, int which, const char *arg, char *err, size_t len);
/* Whether the job is elastic (--min-np, --max-np, a discovery script or
 * --discover-daemons). */
bool hvd_elastic_on(const hvd_elastic_opts_t *eo);
/* Completes the options once -np is known (np: the workers started);
 * 0, or -EINVAL with a message. */
int hvd_elastic_opts_check(hvd_elastic_opts_t *eo, long np, char *err, size_t len);
/* The variables every worker gets, "NAME=VALUE", into out[max]; the
 * number written. */
size_t hvd_elastic_env(const hvd_elastic_opts_t *eo, char out[][64], size_t max);

/* ---- host discovery ---- */
typedef struct hvd_discovered {
        char name[256];
        long slots;
} hvd_discovered_t;

typedef struct hvd_discovery hvd_discovery_t;

/* NULL-safe destroy; sets *d = NULL. */
int hvd_discovery_new(const hvd_elastic_opts_t *eo, hvd_discovery_t **ret);
void hvd_discovery_destroy(hvd_discovery_t **d);
/* When the script is due next (UINT64_MAX: never). */
uint64_t hvd_discovery_deadline(const hvd_discovery_t *d);
/* Runs the script when due (at most 10 s): 1 and the hosts it printed
 * (*hosts borrowed until the next call, blacklisted ones left out; none
 * without a script, with --discover-daemons), 0 when not due, < 0 when it
 * failed or printed garbage (a message is printed once per distinct
 * failure; the caller keeps its hosts). */
int hvd_discovery_poll(hvd_discovery_t *d, uint64_t now, const hvd_discovered_t **hosts, size_t *n);
/* Adds a host found otherwise (a daemon offered it) to those of the last
 * poll, with slots (0: --slots), unless it is there already or
 * blacklisted; *hosts and *n as the poll's, updated. Returns 1 when added,
 * 0 when not, -E2BIG when the list is full. */
int hvd_discovery_add(hvd_discovery_t *d, const char *name, long slots, uint64_t now, const hvd_discovered_t **hosts,
                      size_t *n);
/* A worker on host failed: the host is left out for the cool-down. */
void hvd_discovery_blacklist(hvd_discovery_t *d, const char *host, uint64_t now);
bool hvd_discovery_blacklisted(const hvd_discovery_t *d, const char *host, uint64_t now);
/* Parses the script's output (exposed for the unit test): 0, or -EINVAL
 * with the offending line in err. */
int hvd_discovery_parse(const char *text, long default_slots, hvd_discovered_t *out, size_t max, size_t *n, char *err,
                        size_t len);
