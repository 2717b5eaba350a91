/* hvdrun_options.c — hvdrun's command line: --help, the options (horovodrun's names among
 * them), the hosts listed by -H, --hostfile or a Slurm allocation, and which of them get ranks.
 * Invariant: a usage error is one message on stderr and -EINVAL, never an exit from here. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hvd.h"
#include "hvdrun.h"
#include "invariant.h"

/* ---- small helpers ---- */

static void help(void) {
        printf("Usage: hvdrun -np N [OPTIONS] PROGRAM [ARGS...]\n"
               "       hvdrun [-np N] -H HOST:SLOTS,... [OPTIONS] PROGRAM [ARGS...]\n"
               "\n"
               "Starts N worker processes of one hvd training job: on this host, against the\n"
               "local hvd-coordinatord or, when none is running, a private one; on other hosts\n"
               "over ssh; or on hosts emulated on this machine. Inside a Slurm allocation\n"
               "without -H or --hostfile: on the allocation's nodes, every rank with srun.\n"
               "\n"
               "Job:\n"
               "  -n, -np, --num-proc N      Number of workers (ranks) to start (1..%d; default\n"
               "                             with -H: every slot)\n"
               "  -x NAME[=VALUE]            Set NAME=VALUE (or pass NAME on) in the\n"
               "                             workers' environment; may be repeated\n"
               "      --fusion-threshold-mb N  Fusion buffer size in MiB (HVD_FUSION_THRESHOLD)\n"
               "      --cycle-time-ms T      Negotiation cycle in ms (HVD_CYCLE_TIME)\n"
               "      --start-timeout SEC    All ranks must join within SEC seconds\n"
               "                             (HVD_START_TIMEOUT; default 30)\n"
               "      --timeline-filename FILE  Rank 0 records the job's timeline (HVD_TIMELINE)\n"
               "      --timeline-mark-cycles With it, mark each negotiation cycle\n"
               "      --autotune             The root daemon tunes fusion and cycle time as the\n"
               "                             job runs (HVD_AUTOTUNE; docs/AUTOTUNE.md)\n"
               "      --autotune-log-file F  Its CSV log, a row a sample (HVD_AUTOTUNE_LOG)\n"
               "      --autotune-warmup-samples N, --autotune-steps-per-sample N,\n"
               "      --autotune-bayes-opt-max-samples N,\n"
               "      --autotune-gaussian-process-noise X  Horovod's settings of it\n"
               "      --grace-period SEC     After the first failure, the other workers get\n"
               "                             SEC seconds to finish before SIGTERM (default 5)\n"
               "\n"
               "Elastic jobs (docs/ELASTIC.md; any of the first three, or --discover-daemons,\n"
               "makes the job elastic):\n"
               "      --min-np N             The fewest ranks a generation may have (default -np)\n"
               "      --max-np M             The most ranks (default -np); further workers wait\n"
               "      --host-discovery-script SCRIPT  Prints 'host:slots' lines; run every\n"
               "                             --discovery-interval SEC (default 1)\n"
               "      --discover-daemons     Daemons that offer their host to the job's root\n"
               "                             daemon (their elastic_root) are discovered hosts\n"
               "      --ssh-offered-hosts    --discover-daemons, and hosts offered by daemons of\n"
               "                             other machines get workers over ssh\n"
               "      --slots N              Slots of a discovered host without a count (default 1)\n"
               "      --elastic-timeout SEC  How long to wait for --min-np ranks (default 600)\n"
               "      --reset-limit N        Resets before the job stops (default 0: no limit)\n"
               "      --blacklist-cooldown SEC  No new workers on a host where one failed\n"
               "                             for SEC seconds (default 60)\n"
               "      --elastic-warm-start auto|on|off  Workers on discovered hosts start from\n"
               "                             standby interpreters that imported the\n"
               "                             framework already (default auto: for a\n"
               "                             command `python SCRIPT ...`)\n"
               "\n"
               "Hosts:\n"
               "  -H, --hosts LIST           Hosts and slots, e.g. nodeA:4,nodeB:4; ranks are\n"
               "                             given out in host order, SLOTS per host\n"
               "      --hostfile FILE        Hosts and slots, one per line: 'host slots=N',\n"
               "                             'host:N' or 'host' (1 slot); '#' comments\n"
               "      --emulate-hosts        Emulate every listed host on this machine, each with\n"
               "                             a private hvd-coordinatord of its own\n"
               "      --node-daemon HOST=DIR Start HOST's ranks on this machine, against the\n"
               "                             running hvd-coordinatord in DIR; repeatable\n"
               "      --root-peer ENDPOINT   Where the other hosts' daemons reach the first\n"
               "                             host's (default: from its DIR/peer.endpoint, or\n"
               "                             tcp://FIRSTHOST:%d for a remote first host)\n"
               "      --launcher ssh|srun    How ranks start: fork here and ssh to other hosts,\n"
               "                             or each as a step of the Slurm allocation (srun;\n"
               "                             the default in an allocation without -H)\n"
               "      --ssh COMMAND          Command that reaches a remote host (default 'ssh';\n"
               "                             words split at blanks, e.g. 'ssh -o Foo=bar')\n"
               "  -p, --ssh-port PORT        ssh's port on the remote hosts\n"
               "  -i, --ssh-identity-file F  ssh's key\n"
               "      --dry-run              Print each rank's command line and exit\n"
               "\n"
               "Coordinator:\n"
               "      --runtime-dir DIR      Where the node's daemon listens, here and on remote\n"
               "                             hosts (default $HVD_RUNTIME_DIR, else %s)\n"
               "      --embedded             Always start a private daemon for this host's ranks\n"
               "      --no-embedded          Require the node's daemon; fail if none answers\n"
               "      --heartbeat-timeout SEC  The private daemons declare a worker lost (a hung\n"
               "                             or stopped one) after SEC s without its heartbeat\n"
               "                             (heartbeat_timeout; default 30; 0: never)\n"
               "\n"
               "Placement:\n"
               "      --cpu-bind share|none  share (default): each rank forked on this machine\n"
               "                             runs on its own equal share of hvdrun's CPUs, when\n"
               "                             there are at least as many CPUs as such ranks;\n"
               "                             none: every rank may run on every CPU\n"
               "\n"
               "Output:\n"
               "      --no-prefix            Pass the workers' output through unprefixed\n"
               "                             (default: every line starts with '[RANK] ')\n"
               "      --prefix-host          Start every line with '[RANK@HOST] '\n"
               "  -v, --verbose              Say which daemons are used; log more\n"
               "  -h, --help                 Show this help\n"
               "  -V, --version              Show the version\n"
               "\n"
               "horovodrun's --gloo, --disable-cache and --cache-capacity N are accepted and\n"
               "change nothing; its other options hvdrun lacks are refused, saying why.\n"
               "\n"
               "Exit status: 0 when every worker exits 0; else the status of the first worker\n"
               "that failed (128+N for signal N); 126/127 when PROGRAM cannot be run; 130/143\n"
               "after SIGINT/SIGTERM; 2 for usage errors; 1 for other errors.\n",
               MAX_NP, DEFAULT_PEER_PORT, HVD_DEFAULT_RUNTIME_DIR);
}

int usage_error(const char *fmt, ...) {
        va_list ap;
        fputs("hvdrun: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nTry 'hvdrun --help'.\n", stderr);
        return -EINVAL;
}

/* A plain decimal number in [min, max] (no suffix). */
static int parse_number(const char *s, double min, double max, double *ret) {
        char *end;
        if (!s || !*s || isspace((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || *end || !isfinite(v) || v < min || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* ---- hosts ---- */

bool is_loopback_name(const char *host) {
        return strcasecmp(host, "localhost") == 0 || strcasecmp(host, "localhost.localdomain") == 0 ||
               strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0;
}

bool host_is_local(const char *host) {
        char me[HOST_NAME_MAX + 1] = "";
        if (is_loopback_name(host))
                return true;
        if (gethostname(me, sizeof me - 1) == 0 && me[0]) {
                if (strcasecmp(host, me) == 0)
                        return true;
                size_t a = strcspn(host, "."), b = strcspn(me, ".");
                /* "node1" for "node1.cluster" and the other way round */
                if (a == b && strncasecmp(host, me, a) == 0 && (!host[a] || !me[b]))
                        return true;
        }
        struct in_addr a4;
        struct in6_addr a6;
        bool is4 = inet_pton(AF_INET, host, &a4) == 1, is6 = !is4 && inet_pton(AF_INET6, host, &a6) == 1;
        if (!is4 && !is6)
                return false;
        if (is4 && (ntohl(a4.s_addr) >> 24) == 127)
                return true;
        struct ifaddrs *ifs = NULL;
        bool found = false;
        if (getifaddrs(&ifs) < 0)
                return false;
        for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
                if (!i->ifa_addr)
                        continue;
                if (is4 && i->ifa_addr->sa_family == AF_INET)
                        found = ((struct sockaddr_in *) (void *) i->ifa_addr)->sin_addr.s_addr == a4.s_addr;
                else if (is6 && i->ifa_addr->sa_family == AF_INET6)
                        found = memcmp(&((struct sockaddr_in6 *) (void *) i->ifa_addr)->sin6_addr, &a6, sizeof a6) == 0;
        }
        freeifaddrs(ifs);
        return found;
}

void hosts_free(host_t *hosts, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(hosts[i].name);
        free(hosts);
}

/* -H and --hostfile, in that order, into o->hosts; with neither, in a Slurm
 * allocation that srun may reach, the allocation's nodes. */
static int take_hosts(options_t *o) {
        hvd_hostlist_t l = { 0 };
        char err[PATH_MAX + 512];
        int r = 0;
        if (o->hosts_arg)
                r = hvd_hostlist_parse(&l, o->hosts_arg, err, sizeof err);
        if (r == 0 && o->hostfile)
                r = hvd_hostlist_parse_file(&l, o->hostfile, err, sizeof err);
        o->from_slurm = !o->hosts_arg && !o->hostfile && o->launcher != HVD_LAUNCH_SSH && hvd_slurm_in_allocation();
        if (r == 0 && o->from_slurm)
                r = hvd_slurm_alloc_hosts(&l, err, sizeof err);
        if (r == -EINVAL)
                usage_error("%s", err);
        else if (r < 0 && r != -ENOMEM)
                fprintf(stderr, "hvdrun: %s\n", err);
        if (r == 0 && l.n > 0 && !(o->hosts = calloc(l.n, sizeof *o->hosts)))
                r = -ENOMEM;
        if (r < 0) {
                hvd_hostlist_clear(&l);
                return r;
        }
        for (size_t i = 0; i < l.n; i++)
                o->hosts[i] = (host_t){ .name = TAKE_PTR(l.v[i].name), .slots = l.v[i].slots, .cross_rank = -1 };
        o->n_hosts = l.n;
        o->total_slots = l.total_slots;
        hvd_hostlist_clear(&l);
        return 0;
}

/* Decides how each listed host is reached, merges entries that name the same host
 * (or this machine twice), and gives out the ranks in host order. */
int plan_hosts(options_t *o, long slots) {
        for (size_t i = 0; i < o->n_node_daemons; i++) {
                const char *nd = o->node_daemons[i];
                hvd_assert(nd); /* n_node_daemons counts the arguments stored */
                const char *eq = strchr(nd, '=');
                size_t hl = eq ? (size_t) (eq - nd) : 0;
                if (!eq || hl == 0 || !eq[1])
                        return usage_error("--node-daemon '%s': expected HOST=RUNTIME_DIR", nd);
                if (strlen(eq + 1) >= PATH_MAX - 32)
                        return usage_error("--node-daemon '%s': the directory name is too long", nd);
                bool listed = false;
                for (size_t k = 0; k < o->n_hosts; k++) {
                        host_t *h = &o->hosts[k];
                        if (strlen(h->name) != hl || strncasecmp(h->name, nd, hl) != 0)
                                continue;
                        if (h->node_dir && strcmp(h->node_dir, eq + 1) != 0)
                                return usage_error("--node-daemon: host '%s' is given two directories", h->name);
                        h->node_dir = eq + 1;
                        h->kind = HOST_NODE;
                        listed = true;
                }
                if (!listed)
                        return usage_error("--node-daemon '%s': host '%.*s' is not listed by -H or --hostfile", nd,
                                           (int) hl, nd);
        }
        for (size_t k = 0; k < o->n_hosts; k++) {
                host_t *h = &o->hosts[k];
                if (h->kind == HOST_NODE)
                        continue;
                h->kind = o->emulate_hosts ? HOST_EMULATED : host_is_local(h->name) ? HOST_LOCAL : HOST_REMOTE;
        }
        /* merge: a repeated name adds its slots to the first entry; so does a second
         * name of this machine (one daemon cannot be two hosts of a job) */
        size_t n = 0;
        for (size_t k = 0; k < o->n_hosts; k++) {
                host_t *h = &o->hosts[k];
                size_t j;
                for (j = 0; j < n; j++)
                        if (strcasecmp(o->hosts[j].name, h->name) == 0 ||
                            (o->hosts[j].kind == HOST_LOCAL && h->kind == HOST_LOCAL))
                                break;
                if (j < n) {
                        o->hosts[j].slots += h->slots;
                        free(h->name);
                } else
                        o->hosts[n++] = *h;
        }
        o->n_hosts = n;
        for (size_t k = 0; k < n; k++)
                for (size_t j = k + 1; j < n; j++)
                        if (o->hosts[k].node_dir && o->hosts[j].node_dir &&
                            strcmp(o->hosts[k].node_dir, o->hosts[j].node_dir) == 0)
                                return usage_error("--node-daemon: hosts '%s' and '%s' name the same daemon %s",
                                                   o->hosts[k].name, o->hosts[j].name, o->hosts[k].node_dir);
        if (o->np == 0)
                o->np = slots;
        else if (o->np > slots)
                return usage_error("-np %ld is more than the %ld slot%s listed by %s", o->np, slots,
                                   slots == 1 ? "" : "s",
                                   o->from_slurm  ? "the Slurm allocation (SLURM_TASKS_PER_NODE)"
                                   : o->hosts_arg ? "-H"
                                                  : "--hostfile");
        long left = o->np;
        int cross = 0;
        for (size_t k = 0; k < n; k++) {
                host_t *h = &o->hosts[k];
                h->first_rank = (int) (o->np - left);
                h->n_ranks = (int) HVD_MIN(h->slots, left);
                left -= h->n_ranks;
                h->cross_rank = h->n_ranks > 0 ? cross++ : -1;
        }
        if (cross > MAX_HOSTS)
                return usage_error("the job spans %d hosts; at most %d are supported", cross, MAX_HOSTS);
        return 0;
}

/* ---- options ---- */

/* An option getopt does not know: horovodrun's that hvdrun refuses say why. */
static int unknown_option(const char *word, int opt) {
        if (opt && opt < 0x100)
                return usage_error("unknown option '-%c'", opt);
        if (strncmp(word, "--", 2) == 0) {
                char name[64];
                snprintf(name, sizeof name, "%.*s", (int) strcspn(word + 2, "="), word + 2);
                const char *why = hvd_horovodrun_refusal(name);
                if (why)
                        return usage_error("horovodrun's option '--%s' is not supported: %s", name, why);
        }
        return usage_error("unknown option '%s'", word);
}

int parse_options(int argc, char **argv, options_t *o) {
        enum {
                OPT_HOSTFILE = 0x100,
                OPT_FUSION,
                OPT_CYCLE,
                OPT_START,
                OPT_GRACE,
                OPT_HEARTBEAT,
                OPT_RUNTIME,
                OPT_EMBEDDED,
                OPT_NO_EMBEDDED,
                OPT_NO_PREFIX,
                OPT_CPU_BIND,
                OPT_PREFIX_HOST,
                OPT_EMULATE,
                OPT_NODE_DAEMON,
                OPT_ROOT_PEER,
                OPT_SSH,
                OPT_DRY_RUN,
                OPT_LAUNCHER,
                OPT_TIMELINE,
                OPT_MARK_CYCLES,
                OPT_CACHE,
                OPT_NOOP,
                OPT_WARM,
                OPT_TUNE,                                  /* OPT_TUNE + k: autotune option k (launcher.h) */
                OPT_ELASTIC = OPT_TUNE + HVD_TUNE_OPTIONS, /* + HVD_ELASTIC_OPT_* */
        };
        static const struct option opts[] = {
                /* first: opts[k] is autotune option k (launcher.h) */
                { "autotune", no_argument, NULL, OPT_TUNE },
                { "autotune-log-file", required_argument, NULL, OPT_TUNE + 1 },
                { "autotune-warmup-samples", required_argument, NULL, OPT_TUNE + 2 },
                { "autotune-steps-per-sample", required_argument, NULL, OPT_TUNE + 3 },
                { "autotune-bayes-opt-max-samples", required_argument, NULL, OPT_TUNE + 4 },
                { "autotune-gaussian-process-noise", required_argument, NULL, OPT_TUNE + 5 },
                { "min-np", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_MIN_NP },
                { "min-num-proc", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_MIN_NP },
                { "max-np", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_MAX_NP },
                { "max-num-proc", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_MAX_NP },
                { "host-discovery-script", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_DISCOVERY },
                { "slots", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_SLOTS },
                { "slots-per-host", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_SLOTS },
                { "elastic-timeout", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_TIMEOUT },
                { "reset-limit", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_RESET_LIMIT },
                { "blacklist-cooldown", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_COOLDOWN },
                { "discovery-interval", required_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_INTERVAL },
                { "discover-daemons", no_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_DAEMONS },
                { "elastic-warm-start", required_argument, NULL, OPT_WARM },
                { "ssh-offered-hosts", no_argument, NULL, OPT_ELASTIC + HVD_ELASTIC_OPT_SSH_OFFERED },
                { "num-proc", required_argument, NULL, 'n' },
                { "hosts", required_argument, NULL, 'H' },
                { "hostfile", required_argument, NULL, OPT_HOSTFILE },
                { "emulate-hosts", no_argument, NULL, OPT_EMULATE },
                { "node-daemon", required_argument, NULL, OPT_NODE_DAEMON },
                { "root-peer", required_argument, NULL, OPT_ROOT_PEER },
                { "ssh", required_argument, NULL, OPT_SSH },
                { "dry-run", no_argument, NULL, OPT_DRY_RUN },
                { "launcher", required_argument, NULL, OPT_LAUNCHER },
                { "ssh-port", required_argument, NULL, 'p' },
                { "ssh-identity-file", required_argument, NULL, 'i' },
                { "timeline-filename", required_argument, NULL, OPT_TIMELINE },
                { "timeline-mark-cycles", no_argument, NULL, OPT_MARK_CYCLES },
                { "cache-capacity", required_argument, NULL, OPT_CACHE },
                /* horovodrun's, with nothing to do here: hvd's data plane is its own */
                { "gloo", no_argument, NULL, OPT_NOOP },
                { "disable-cache", no_argument, NULL, OPT_NOOP },
                { "fusion-threshold-mb", required_argument, NULL, OPT_FUSION },
                { "cycle-time-ms", required_argument, NULL, OPT_CYCLE },
                { "start-timeout", required_argument, NULL, OPT_START },
                { "grace-period", required_argument, NULL, OPT_GRACE },
                { "heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT },
                { "runtime-dir", required_argument, NULL, OPT_RUNTIME },
                { "embedded", no_argument, NULL, OPT_EMBEDDED },
                { "no-embedded", no_argument, NULL, OPT_NO_EMBEDDED },
                { "no-prefix", no_argument, NULL, OPT_NO_PREFIX },
                { "cpu-bind", required_argument, NULL, OPT_CPU_BIND },
                { "prefix-host", no_argument, NULL, OPT_PREFIX_HOST },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        double v;
        int c;

        o->embedded = -1;
        o->prefix = true;
        o->grace_usec = DEFAULT_GRACE_USEC;
        o->ssh = "ssh";
        hvd_elastic_opts_init(&o->elastic);
        o->exports = calloc((size_t) argc + 1, sizeof *o->exports);
        o->node_daemons = calloc((size_t) argc + 1, sizeof *o->node_daemons);
        if (!o->exports || !o->node_daemons)
                return -ENOMEM;
        opterr = 0;
        /* '+': stop at PROGRAM, whose own options are not ours */
        while ((c = getopt_long(argc, argv, "+:n:H:x:p:i:vhV", opts, NULL)) >= 0) {
                const char *arg = optarg;
                if (c >= OPT_ELASTIC && c < OPT_ELASTIC + HVD_ELASTIC_N_OPTS) {
                        char e[256];
                        if (hvd_elastic_opt_parse(&o->elastic, c - OPT_ELASTIC, arg, e, sizeof e) < 0)
                                return usage_error("%s", e);
                        continue;
                }
                switch (c) {
                case 'n':
                        /* getopt reads Horovod's "-np 4" as -n with argument "p" */
                        if (strncmp(argv[optind - 1], "-np", 3) == 0 && strcmp(arg, argv[optind - 1] + 2) == 0) {
                                arg += 1;
                                if (*arg == '=')
                                        arg++;
                                if (!*arg) {
                                        if (optind >= argc)
                                                return usage_error("option '-np' requires an argument");
                                        arg = argv[optind++];
                                }
                        }
                        if (parse_number(arg, 1, MAX_NP, &v) < 0 || v != floor(v))
                                return usage_error("invalid number of workers '%s': expected 1..%d", arg, MAX_NP);
                        o->np = (long) v;
                        break;
                case 'H': o->hosts_arg = arg; break;
                case OPT_HOSTFILE: o->hostfile = arg; break;
                case OPT_EMULATE: o->emulate_hosts = true; break;
                case OPT_WARM:
                        if (strcmp(arg, "auto") == 0)
                                o->warm_start = HVD_WARM_AUTO;
                        else if (strcmp(arg, "on") == 0)
                                o->warm_start = HVD_WARM_ON;
                        else if (strcmp(arg, "off") == 0)
                                o->warm_start = HVD_WARM_OFF;
                        else
                                return usage_error("--elastic-warm-start '%s': expected auto, on or off", arg);
                        break;
                case OPT_NODE_DAEMON: o->node_daemons[o->n_node_daemons++] = (char *) arg; break;
                case OPT_ROOT_PEER:
                        if (!*arg || strlen(arg) >= ENDPOINT_BYTES || !strstr(arg, "://"))
                                return usage_error("--root-peer '%s': expected an endpoint such as "
                                                   "tcp://10.0.0.1:%d",
                                                   arg, DEFAULT_PEER_PORT);
                        o->root_peer = arg;
                        break;
                case OPT_SSH:
                        if (!arg[strspn(arg, " \t")])
                                return usage_error("--ssh: expected a command");
                        o->ssh = arg;
                        break;
                case OPT_DRY_RUN: o->dry_run = true; break;
                case OPT_LAUNCHER: {
                        char why[512];
                        if (hvd_launch_mode_parse(arg, &o->launcher, why, sizeof why) < 0)
                                return usage_error("%s", why);
                        break;
                }
                case 'p':
                        if (parse_number(arg, 1, 65535, &v) < 0 || v != floor(v))
                                return usage_error("-p/--ssh-port '%s': expected a port 1..65535", arg);
                        o->ssh_port = arg;
                        break;
                case 'i':
                        if (!*arg || strchr(arg, ' ') || strchr(arg, '\t'))
                                return usage_error("-i/--ssh-identity-file '%s': expected a file name without blanks",
                                                   arg);
                        o->ssh_identity = arg;
                        break;
                case OPT_TIMELINE:
                        if (!*arg)
                                return usage_error("--timeline-filename: expected a file name");
                        o->timeline = arg;
                        break;
                case OPT_MARK_CYCLES: o->timeline_mark_cycles = true; break;
                case OPT_CACHE:
                        /* hvd keeps no response cache of a fixed size: its fast path needs none */
                        if (parse_number(arg, 0, 1e9, &v) < 0 || v != floor(v))
                                return usage_error("--cache-capacity '%s': expected a number of entries", arg);
                        break;
                case OPT_NOOP: break;
                case OPT_TUNE:
                case OPT_TUNE + 1: o->tune[c - OPT_TUNE] = arg ? arg : "1"; break;
                case OPT_TUNE + 2:
                case OPT_TUNE + 3:
                case OPT_TUNE + 4:
                        if (parse_number(arg, 1, c == OPT_TUNE + 3 ? 100000 : 1000, &v) < 0 || v != floor(v))
                                return usage_error("--%s '%s': expected a count of 1 to %d", opts[c - OPT_TUNE].name,
                                                   arg, c == OPT_TUNE + 3 ? 100000 : 1000);
                        o->tune[c - OPT_TUNE] = arg;
                        break;
                case OPT_TUNE + 5:
                        if (parse_number(arg, 0, 1e6, &v) < 0)
                                return usage_error("--autotune-gaussian-process-noise '%s': expected a number of 0 "
                                                   "to 1e6",
                                                   arg);
                        o->tune[5] = arg;
                        break;
                case 'x':
                        if (!*arg || *arg == '=' ||
                            strcspn(arg, "=") != strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "abcdefghijklmnopqrstuvwxyz"
                                                             "0123456789_") ||
                            isdigit((unsigned char) *arg))
                                return usage_error("-x '%s': expected NAME or NAME=VALUE", arg);
                        o->exports[o->n_exports++] = (char *) arg;
                        break;
                case OPT_FUSION:
                        if (parse_number(arg, 0, 1 << 20, &v) < 0)
                                return usage_error("--fusion-threshold-mb '%s': expected a number of MiB", arg);
                        o->fusion_mb = arg;
                        o->fusion_bytes = (uint64_t) llround(v * 1048576.0);
                        break;
                case OPT_CYCLE:
                        if (parse_number(arg, 0.001, 60000, &v) < 0)
                                return usage_error("--cycle-time-ms '%s': expected milliseconds in 0.001..60000", arg);
                        o->cycle_ms = arg;
                        break;
                case OPT_START:
                        if (parse_number(arg, 0.001, 86400, &v) < 0)
                                return usage_error("--start-timeout '%s': expected seconds in 0.001..86400", arg);
                        o->start_timeout = arg;
                        o->start_timeout_usec = (uint64_t) llround(v * 1e6);
                        break;
                case OPT_GRACE:
                        if (parse_number(arg, 0, 86400, &v) < 0)
                                return usage_error("--grace-period '%s': expected seconds in 0..86400", arg);
                        o->grace_usec = (uint64_t) llround(v * 1e6);
                        break;
                case OPT_HEARTBEAT:
                        if (parse_number(arg, 0, 86400, &v) < 0 || (v > 0 && v < 0.02))
                                return usage_error("--heartbeat-timeout '%s': expected 0, or seconds in 0.02..86400",
                                                   arg);
                        o->heartbeat_timeout = true;
                        o->heartbeat_timeout_usec = (uint64_t) llround(v * 1e6);
                        break;
                case OPT_RUNTIME:
                        if (!*arg || strlen(arg) >= PATH_MAX - 32)
                                return usage_error("--runtime-dir '%s': expected a directory path", arg);
                        o->runtime_dir = arg;
                        break;
                case OPT_EMBEDDED: o->embedded = 1; break;
                case OPT_NO_EMBEDDED: o->embedded = 0; break;
                case OPT_NO_PREFIX: o->prefix = false; break;
                case OPT_CPU_BIND: {
                        char why[128];
                        if (hvd_cpu_bind_parse(arg, &o->cpu_bind, why, sizeof why) < 0)
                                return usage_error("%s", why);
                        break;
                }
                case OPT_PREFIX_HOST: o->prefix_host = true; break;
                case 'v': o->verbose = true; break;
                case 'h': help(); return 1;
                case 'V': printf("hvdrun (hvd) %s\n", PACKAGE_VERSION); return 1;
                case ':': return usage_error("option '%s' requires an argument", argv[optind - 1]);
                default: return unknown_option(argv[optind - 1], optopt);
                }
        }
        if (optind >= argc)
                return usage_error("no PROGRAM given: hvdrun -np N PROGRAM [ARGS...]");
        o->argv = argv + optind;
        if (!o->prefix && o->prefix_host)
                return usage_error("--prefix-host and --no-prefix contradict each other");

        int r = take_hosts(o);
        if (r < 0)
                return r;
        long slots = o->total_slots;
        o->hosts_listed = o->hosts_arg || o->hostfile || o->from_slurm;
        if (o->hosts_listed && slots == 0)
                return usage_error("no hosts listed in %s", o->hosts_arg ? "-H" : o->hostfile);
        if (!o->hosts_listed && (o->emulate_hosts || o->n_node_daemons))
                return usage_error("%s needs the hosts: -H HOST:SLOTS,... or --hostfile FILE",
                                   o->emulate_hosts ? "--emulate-hosts" : "--node-daemon");
        if (!o->hosts_listed && o->np == 0)
                return usage_error("missing -np N: how many workers to start");
        if (o->launcher == HVD_LAUNCH_SRUN && !hvd_slurm_in_allocation())
                return usage_error("--launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not set); "
                                   "start hvdrun in an sbatch script or under salloc");
        if (o->from_slurm && o->launcher == HVD_LAUNCH_AUTO)
                o->launcher = HVD_LAUNCH_SRUN;
        if (o->launcher != HVD_LAUNCH_SRUN)
                o->launcher = HVD_LAUNCH_SSH;
        if (o->launcher == HVD_LAUNCH_SRUN && (o->emulate_hosts || o->n_node_daemons))
                return usage_error("%s and srun contradict each other: srun starts every rank on its node",
                                   o->emulate_hosts ? "--emulate-hosts" : "--node-daemon");
        if (!o->runtime_dir) {
                const char *e = getenv("HVD_RUNTIME_DIR");
                o->runtime_dir = e && *e ? e : HVD_DEFAULT_RUNTIME_DIR;
        }
        if (o->hosts_listed)
                return plan_hosts(o, slots);
        /* no host list: all ranks on this machine */
        char me[HOST_NAME_MAX + 1] = "";
        if (gethostname(me, sizeof me - 1) < 0 || !me[0])
                snprintf(me, sizeof me, "localhost");
        if (!(o->hosts = calloc(1, sizeof *o->hosts)) || !(o->hosts[0].name = strdup(me)))
                return -ENOMEM;
        o->n_hosts = 1;
        o->hosts[0].slots = o->hosts[0].n_ranks = (int) o->np;
        o->hosts[0].kind = HOST_LOCAL;
        return 0;
}
