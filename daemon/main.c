/* main.c — hvd-coordinatord: arguments → config → sockets → READY=1 →
 * loop → STOPPING=1 → cleanup. All the work is in coordinator.c. */
#include "config.h"

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
               "  -h, --help                Show this help\n"
               "  -V, --version             Show the version\n",
               HVD_DEFAULT_CONFIG_FILE, HVD_DEFAULT_RUNTIME_DIR);
}

int main(int argc, char **argv) {
        enum { OPT_CHECK = 0x100, OPT_FUSION, OPT_CYCLE, OPT_START, OPT_PEER, OPT_PEER_TIMEOUT };
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
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        const char *config_path = NULL;
        bool check_only = false;
        struct {
                const char *key, *value;
        } overrides[64];
        size_t n_over = 0;
        int c;

        hvd_log_set_ident("hvd-coordinatord");
        while ((c = getopt_long(argc, argv, "fc:r:l:hV", opts, NULL)) >= 0) {
                if (n_over >= ELEMENTSOF(overrides)) {
                        fprintf(stderr, "hvd-coordinatord: too many options\n");
                        return 2;
                }
                switch (c) {
                case 'f': break;
                case 'c': config_path = optarg; break;
                case OPT_CHECK: check_only = true; break;
                case 'r': overrides[n_over].key = "runtime_dir"; overrides[n_over++].value = optarg; break;
                case 'l': overrides[n_over].key = "log_level"; overrides[n_over++].value = optarg; break;
                case OPT_FUSION: overrides[n_over].key = "fusion_threshold"; overrides[n_over++].value = optarg; break;
                case OPT_CYCLE: overrides[n_over].key = "cycle_time"; overrides[n_over++].value = optarg; break;
                case OPT_START: overrides[n_over].key = "start_timeout"; overrides[n_over++].value = optarg; break;
                case OPT_PEER: overrides[n_over].key = "peer_listen"; overrides[n_over++].value = optarg; break;
                case OPT_PEER_TIMEOUT: overrides[n_over].key = "peer_timeout"; overrides[n_over++].value = optarg; break;
                case 'h': help(); return 0;
                case 'V': printf("hvd-coordinatord %s\n", PACKAGE_VERSION); return 0;
                default: fprintf(stderr, "Try 'hvd-coordinatord --help'.\n"); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "hvd-coordinatord: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }

        hvd_daemon_config_t cfg;
        hvd_daemon_config_init(&cfg);
        const char *path = config_path ? config_path : HVD_DEFAULT_CONFIG_FILE;
        if (config_path || access(path, F_OK) == 0) {
                unsigned line = 0;
                char msg[1024];
                int r = hvd_daemon_config_load(&cfg, path, &line, msg, sizeof msg);
                if (r < 0) {
                        fprintf(stderr, "hvd-coordinatord: %s\n", msg);
                        return 1;
                }
        }
        for (size_t i = 0; i < n_over; i++) {
                const char *why = NULL;
                if (hvd_daemon_config_set(&cfg, overrides[i].key, overrides[i].value, &why) < 0) {
                        fprintf(stderr, "hvd-coordinatord: invalid value '%s' for --%s: expected %s\n",
                                overrides[i].value, overrides[i].key, why ? why : "a valid value");
                        return 2;
                }
        }
        if (check_only) {
                printf("%s: configuration OK\n", path);
                return 0;
        }
        hvd_log_max_level = cfg.log_level;
        cfg.handle_signals = true;
        cfg.notify = true;

        hvd_daemon_t *d = NULL;
        int r = hvd_daemon_new(&cfg, &d);
        if (r < 0)
                return 1;
        r = hvd_daemon_run(d);
        hvd_daemon_destroy(&d);
        return r < 0 ? 1 : 0;
}
