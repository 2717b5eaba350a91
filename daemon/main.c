/* main.c — hvd-coordinatord: arguments → config → sockets → READY=1 →
 * loop → STOPPING=1 → cleanup. The daemon itself is a library (coordinator.h),
 * its modules in this folder (docs/ARCHITECTURE.md). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "coordinator.h"
#include "hvd.h"
#include "log.h"
#include "util.h"

static void help(void) {
        printf("Usage: hvd-coordinatord [OPTIONS]\n"
               "\n"
               "Per-node coordinator of hvd training jobs: workers on this host join\n"
               "through it, and it negotiates, fuses and orders their collectives.\n"
               "\n"
               "  -f, --foreground          Run in the foreground (the only mode; systemd\n"
               "                            and hvdrun both expect it)\n"
               "  -c, --config FILE         Configuration file (default %s;\n"
               "                            a missing default file is not an error)\n"
               "      --check-config        Validate the configuration and exit\n"
               "  -r, --runtime-dir DIR     Sockets and lock file (default %s)\n"
               "  -l, --log-level LEVEL     err, warning, notice, info or debug\n"
               "      --fusion-threshold N  Default fusion buffer size, e.g. 64M\n"
               "      --cycle-time T        Default negotiation cycle, e.g. 1ms\n"
               "      --start-timeout T     Jobs must join within T (default 30s)\n"
               "      --peer-listen EP      Endpoint other daemons reach this one at, for\n"
               "                            jobs that span hosts (e.g. tcp://10.0.0.1:7100;\n"
               "                            tcp://IP:* picks a free port, written to\n"
               "                            RUNTIME_DIR/peer.endpoint)\n"
               "      --peer-timeout T      A silent peer daemon is lost after T (default 10s)\n"
               "      --relay-fanout N      As the root of a job of more than N+1 hosts,\n"
               "                            place its other hosts in a tree of relay\n"
               "                            daemons that carry readiness up and schedules\n"
               "                            down, no relay hearing from more than N hosts\n"
               "                            and the root from at most N/4, at least 2\n"
               "                            (default 8; 0 = every host speaks to the root)\n"
               "      --elastic-root EP     Offer this host to the root daemon at EP for its\n"
               "                            elastic jobs (hvdrun --discover-daemons)\n"
               "      --elastic-host NAME   The host name of the offer (default this machine's)\n"
               "      --elastic-slots N     Its slots (default 0: the job's --slots)\n"
               "  -h, --help                Show this help\n"
               "  -V, --version             Show the version\n"
               "\n"
               "SIGHUP reads the configuration file again and applies what can change\n"
               "while running; SIGTERM stops gracefully. See hvd-coordinatord(8) and\n"
               "hvd.conf(5).\n",
               HVD_DEFAULT_CONFIG_FILE, HVD_DEFAULT_RUNTIME_DIR);
}

/* What the settings come from: the configuration file, then the flags.
 * Kept for SIGHUP, which reads them again. */
typedef struct {
        const char *config_path; /* NULL: the default file, if it exists */
        struct {
                const char *key, *value, *flag;
        } overrides[64];
        size_t n_over;
} settings_t;

static int load_settings(hvd_daemon_config_t *ret, char *msg, size_t msg_len, void *userdata) {
        const settings_t *st = userdata;
        hvd_daemon_config_t cfg;
        hvd_daemon_config_init(&cfg);
        const char *path = st->config_path ? st->config_path : HVD_DEFAULT_CONFIG_FILE;
        if (st->config_path || access(path, F_OK) == 0) {
                int r = hvd_daemon_config_load(&cfg, path, NULL, msg, msg_len);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < st->n_over; i++) {
                const char *why = NULL;
                int r = hvd_daemon_config_set(&cfg, st->overrides[i].key, st->overrides[i].value, &why);
                if (r < 0) {
                        snprintf(msg, msg_len, "invalid value '%s' for --%s: expected %s", st->overrides[i].value,
                                 st->overrides[i].flag, why ? why : "a valid value");
                        return -EINVAL;
                }
        }
        *ret = cfg;
        return 0;
}

int main(int argc, char **argv) {
        enum {
                OPT_CHECK = 0x100,
                OPT_FUSION,
                OPT_CYCLE,
                OPT_START,
                OPT_PEER,
                OPT_PEER_TIMEOUT,
                OPT_RELAY,
                OPT_ELASTIC_ROOT,
                OPT_ELASTIC_HOST,
                OPT_ELASTIC_SLOTS
        };
        static const struct option opts[] = {
                { "foreground", no_argument, NULL, 'f' },
                { "config", required_argument, NULL, 'c' },
                { "check-config", no_argument, NULL, OPT_CHECK },
                { "runtime-dir", required_argument, NULL, 'r' },
                { "log-level", required_argument, NULL, 'l' },
                { "fusion-threshold", required_argument, NULL, OPT_FUSION },
                { "cycle-time", required_argument, NULL, OPT_CYCLE },
                { "start-timeout", required_argument, NULL, OPT_START },
                { "peer-listen", required_argument, NULL, OPT_PEER },
                { "peer-timeout", required_argument, NULL, OPT_PEER_TIMEOUT },
                { "relay-fanout", required_argument, NULL, OPT_RELAY },
                { "elastic-root", required_argument, NULL, OPT_ELASTIC_ROOT },
                { "elastic-host", required_argument, NULL, OPT_ELASTIC_HOST },
                { "elastic-slots", required_argument, NULL, OPT_ELASTIC_SLOTS },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        static settings_t st;
        bool check_only = false;
        int c, opt_index = 0;

        hvd_log_set_ident("hvd-coordinatord");
        while ((c = getopt_long(argc, argv, "fc:r:l:hV", opts, &opt_index)) >= 0) {
                const char *key = NULL;
                switch (c) {
                case 'f': break;
                case 'c': st.config_path = optarg; break;
                case OPT_CHECK: check_only = true; break;
                case 'r': key = "runtime_dir"; break;
                case 'l': key = "log_level"; break;
                case OPT_FUSION: key = "fusion_threshold"; break;
                case OPT_CYCLE: key = "cycle_time"; break;
                case OPT_START: key = "start_timeout"; break;
                case OPT_PEER: key = "peer_listen"; break;
                case OPT_PEER_TIMEOUT: key = "peer_timeout"; break;
                case OPT_RELAY: key = "relay_fanout"; break;
                case OPT_ELASTIC_ROOT: key = "elastic_root"; break;
                case OPT_ELASTIC_HOST: key = "elastic_host"; break;
                case OPT_ELASTIC_SLOTS: key = "elastic_slots"; break;
                case 'h': help(); return 0;
                case 'V': printf("hvd-coordinatord %s\n", PACKAGE_VERSION); return 0;
                default: fprintf(stderr, "Try 'hvd-coordinatord --help'.\n"); return 2;
                }
                if (!key)
                        continue;
                if (st.n_over >= ELEMENTSOF(st.overrides)) {
                        fprintf(stderr, "hvd-coordinatord: too many options\n");
                        return 2;
                }
                st.overrides[st.n_over].key = key;
                st.overrides[st.n_over].value = optarg;
                /* the flag's long name, for messages */
                for (const struct option *o = opts; o->name; o++)
                        if (o->val == c)
                                st.overrides[st.n_over].flag = o->name;
                st.n_over++;
        }
        if (optind < argc) {
                fprintf(stderr, "hvd-coordinatord: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }

        hvd_daemon_config_t cfg;
        char msg[1024] = "";
        int r = load_settings(&cfg, msg, sizeof msg, &st);
        if (r < 0) {
                fprintf(stderr, "hvd-coordinatord: %s\n", msg);
                return strncmp(msg, "invalid value", 13) == 0 ? 2 : 1;
        }
        if (check_only) {
                printf("%s: configuration OK\n", st.config_path ? st.config_path : HVD_DEFAULT_CONFIG_FILE);
                return 0;
        }
        hvd_log_max_level = cfg.log_level;
        cfg.handle_signals = true;
        cfg.notify = true;

        hvd_daemon_t *d = NULL;
        r = hvd_daemon_new(&cfg, &d);
        if (r < 0)
                return 1;
        hvd_daemon_set_reload(d, load_settings, &st);
        r = hvd_daemon_run(d);
        hvd_daemon_destroy(&d);
        return r < 0 ? 1 : 0;
}
