/* settings.c — reads a worker's settings (settings.h) in one pass, in the
 * order their errors are reported. Every name, default and message of the
 * configuration table (README.md, libhvd(3)) is here and nowhere else;
 * this module only parses: resolving names and opening files is
 * hvd_init's. A cluster launcher's variables (Open MPI's
 * OMPI_COMM_WORLD_*, Slurm's SLURM_*, torchrun's RANK/WORLD_SIZE) are
 * the next source after HVD_* and HOROVOD_*: launcher_env.c reads them
 * when neither names the job or a rank. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "launcher_env.h"
#include "settings.h"
#include "tcp.h"
#include "util.h"

typedef struct env {
        hvd_settings_lookup_fn lookup;
        void *userdata;
} env_t;

static const char *env_raw(const env_t *env, const char *name) {
        if (!env->lookup)
                return getenv(name);
        return env->lookup(name, env->userdata);
}

/* HVD_<name>, else (horovod_too) HOROVOD_<name>; empty counts as unset. */
static const char *env_get(const env_t *env, const char *name, bool horovod_too) {
        char key[128];
        snprintf(key, sizeof key, "HVD_%s", name);
        const char *v = env_raw(env, key);
        if ((!v || !*v) && horovod_too) {
                snprintf(key, sizeof key, "HOROVOD_%s", name);
                v = env_raw(env, key);
        }
        return v && *v ? v : NULL;
}

/* A count or index: def when unset, -1 when not 0..INT32_MAX (which the
 * consistency checks then refuse). */
static int env_int(const env_t *env, const char *name, int def, bool horovod_too) {
        const char *v = env_get(env, name, horovod_too);
        if (!v)
                return def;
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || *end || x < 0 || x > INT32_MAX)
                return -1;
        return (int) x;
}

static int fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static int hex_decode(const char *s, uint8_t *out, size_t max) {
        size_t n = strlen(s);
        if (n % 2 || n / 2 > max)
                return -EINVAL;
        for (size_t i = 0; i < n / 2; i++) {
                unsigned v;
                if (sscanf(s + 2 * i, "%2x", &v) != 1)
                        return -EINVAL;
                out[i] = (uint8_t) v;
        }
        return (int) (n / 2);
}

/* HVD_* or HOROVOD_* name a rank: hvdrun (or horovodrun's names) placed
 * it, and no launcher's variables are looked at. HVD_JOB_ID alone does
 * not: it names a launcher's job that gives no id of its own. */
static bool hvd_named(const env_t *env) {
        return env_get(env, "RANK", true) || env_get(env, "SIZE", true);
}

static int read_topology_hvd(hvd_settings_t *s, const env_t *env, char *err, size_t err_len) {
        s->job_id = env_get(env, "JOB_ID", false);
        s->solo = !s->job_id;
        s->rank_source = s->solo                       ? "none"
                         : env_get(env, "RANK", false) ? "hvdrun"
                         : env_get(env, "RANK", true)  ? "Horovod"
                                                       : "hvdrun";
        s->size = env_int(env, "SIZE", 1, true);
        s->rank = env_int(env, "RANK", 0, true);
        s->local_size = env_int(env, "LOCAL_SIZE", s->size, true);
        s->local_rank = env_int(env, "LOCAL_RANK", s->rank, true);
        s->cross_rank = env_int(env, "CROSS_RANK", 0, true);
        s->cross_size = env_int(env, "CROSS_SIZE", 1, true);
        if (s->cross_size < 1 || s->cross_rank < 0 || s->cross_rank >= s->cross_size)
                return fail(err, err_len, "HVD_CROSS_RANK/HVD_CROSS_SIZE are inconsistent");
        if (s->solo) {
                s->cross_rank = 0;
                s->cross_size = 1;
                s->size = s->local_size = 1;
                s->rank = s->local_rank = 0;
        }
        if (s->size < 1 || s->rank < 0 || s->rank >= s->size || s->local_size < 1 || s->local_rank < 0 ||
            s->local_rank >= s->local_size)
                return fail(err, err_len, "HVD_RANK/HVD_SIZE/HVD_LOCAL_RANK/HVD_LOCAL_SIZE are inconsistent");
        return 0;
}

/* A launcher's place: a job of one rank when it started one. */
static int apply_launcher(hvd_settings_t *s, const env_t *env, const hvd_launcher_t *l, char *err, size_t err_len) {
        s->rank_source = l->source;
        s->rank = l->rank;
        s->size = l->size;
        s->local_rank = l->local_rank;
        s->local_size = l->local_size;
        s->cross_rank = l->cross_rank;
        s->cross_size = l->cross_size;
        s->solo = l->size == 1;
        s->from_launcher = !s->solo;
        if (s->solo)
                return 0;
        const char *id = env_get(env, "JOB_ID", false);
        if (!id && !l->job_id[0])
                return fail(err, err_len,
                            "%s started this rank but gives no job id: set HVD_JOB_ID to one value for all ranks",
                            l->source);
        memcpy(s->launcher_job_id, l->job_id, sizeof s->launcher_job_id);
        s->job_id = id ? id : s->launcher_job_id; /* read_job checks its length */
        snprintf(s->root_host, sizeof s->root_host, "%s", l->root_host);
        s->secret_file = env_get(env, "JOB_SECRET_FILE", false);
        s->home = env_raw(env, "HOME");
        s->tmp_dir = env_raw(env, "TMPDIR");
        int port = env_int(env, "ROOT_PORT", 7100, false);
        if (port < 1 || port > 65535)
                return fail(err, err_len, "HVD_ROOT_PORT='%s' is not a port 1-65535", env_get(env, "ROOT_PORT", false));
        s->root_port = (unsigned) port;
        /* Slurm's node names are the hosts by cross rank */
        size_t at = 0;
        for (size_t i = 0; i < l->n_hosts; i++) {
                size_t n = strlen(l->hosts + at) + 1;
                s->host_at[i] = (uint16_t) at;
                at += n;
        }
        memcpy(s->hosts_buf, l->hosts, at);
        s->n_hosts = l->n_hosts;
        return 0;
}

static int read_topology(hvd_settings_t *s, const env_t *env, char *err, size_t err_len) {
        if (hvd_named(env))
                return read_topology_hvd(s, env, err, err_len);
        hvd_launcher_t l;
        int r = hvd_launcher_read(&l, env->lookup, env->userdata, err, err_len);
        if (r < 0)
                return r;
        if (r > 0)
                return apply_launcher(s, env, &l, err, err_len);
        return read_topology_hvd(s, env, err, err_len);
}

/* Settings of every job, a job of one rank too. */
static int read_common(hvd_settings_t *s, const env_t *env, char *err, size_t err_len) {
        s->cycle_time_usec = HVD_DEFAULT_CYCLE_TIME_USEC;
        const char *ct = env_get(env, "CYCLE_TIME", true);
        s->has_cycle_time = ct != NULL;
        if (ct && hvd_parse_duration(ct, USEC_PER_MSEC, &s->cycle_time_usec) < 0)
                return fail(err, err_len, "HVD_CYCLE_TIME/HOROVOD_CYCLE_TIME='%s' is not a duration in ms", ct);
        s->start_timeout_usec = 30 * USEC_PER_SEC;
        const char *st = env_get(env, "START_TIMEOUT", true);
        if (st && hvd_parse_duration(st, USEC_PER_SEC, &s->start_timeout_usec) < 0)
                return fail(err, err_len, "HVD_START_TIMEOUT='%s' is not a duration in seconds", st);
        /* rank 0 alone records the job's timeline: the others look at
         * neither variable */
        const char *tl = env_get(env, "TIMELINE", true);
        s->timeline_file = tl && s->rank == 0 ? tl : NULL;
        s->timeline_mark_cycles = false;
        if (s->timeline_file) {
                const char *mc = env_get(env, "TIMELINE_MARK_CYCLES", true);
                if (mc && hvd_parse_bool(mc, &s->timeline_mark_cycles) < 0)
                        return fail(err, err_len, "HVD_TIMELINE_MARK_CYCLES='%s' is not a boolean", mc);
        }
        /* every rank of a job should see the same value (a rank without it
         * sends every tensor to the coordinator, which the others then
         * follow after HVD_FASTPATH_DEMOTE_USEC: correct, but slow) */
        const char *fp = env_get(env, "FAST_PATH", false);
        s->fast_path = true;
        if (fp && hvd_parse_bool(fp, &s->fast_path) < 0)
                s->fast_path = true;
        /* local rank 0's value is published in the segment's header */
        const char *cb = env_get(env, "SHM_CHUNK_BYTES", false);
        s->shm_chunk_bytes = 0;
        if (cb) {
                char *end;
                unsigned long long x = strtoull(cb, &end, 10);
                if (!*end && x >= 4096)
                        s->shm_chunk_bytes = x;
        }
        const char *db = env_get(env, "SHM_DIRECT_BYTES", false);
        s->shm_direct_bytes = 0;
        if (db) {
                char *end;
                unsigned long long x = strtoull(db, &end, 10);
                if (*db && !*end && x >= 1)
                        s->shm_direct_bytes = x;
        }
        /* 0 turns the zero-copy path off */
        const char *zb = env_get(env, "SHM_ZERO_COPY_BYTES", false);
        s->shm_zero_copy_bytes = 0;
        if (zb) {
                char *end;
                unsigned long long x = strtoull(zb, &end, 10);
                if (*zb && !*end)
                        s->shm_zero_copy_bytes = x ? x : UINT64_MAX;
        }
        /* this rank's alone, like the next: "auto" (or unset) measures */
        const char *ss = env_get(env, "SHM_SLOT_STREAM", false);
        bool ss_on;
        s->shm_slot_stream = ss && strcmp(ss, "auto") && hvd_parse_bool(ss, &ss_on) == 0 ? (ss_on ? 1 : 2) : 0;
        /* this rank's alone: the bytes on the wire are the same either way.
         * Off by default: with more ranks than cores (emulated hosts) the
         * second thread cost more than it overlapped */
        const char *sth = env_get(env, "TCP_SEND_THREAD", false);
        s->tcp_send_thread = false;
        s->has_tcp_send_thread = sth != NULL;
        if (sth && hvd_parse_bool(sth, &s->tcp_send_thread) < 0)
                s->tcp_send_thread = false;
        /* the ring's framing and chunking across nodes: every rank must cut
         * alike, so a value that cannot be used fails rather than falls back */
        const char *fb = env_get(env, "TCP_FRAME_BYTES", false);
        s->tcp_frame_bytes = 0;
        if (fb && (hvd_parse_size(fb, &s->tcp_frame_bytes) < 0 || s->tcp_frame_bytes < HVD_TCP_FRAME_MIN_BYTES ||
                   s->tcp_frame_bytes > HVD_TCP_FRAME_MAX_BYTES))
                return fail(err, err_len,
                            "HVD_TCP_FRAME_BYTES='%s' is not a size from %" PRIu64 " to %" PRIu64 " bytes", fb,
                            HVD_TCP_FRAME_MIN_BYTES, HVD_TCP_FRAME_MAX_BYTES);
        const char *rc = env_get(env, "RING_CHUNK_BYTES", false);
        s->ring_chunk_bytes = 0;
        if (rc && (hvd_parse_size(rc, &s->ring_chunk_bytes) < 0 || s->ring_chunk_bytes < 4096))
                return fail(err, err_len, "HVD_RING_CHUNK_BYTES='%s' is not a size of at least 4096 bytes", rc);
        const char *dev = env_get(env, "GPU_DEVICE", false);
        s->has_gpu_device = dev != NULL;
        s->gpu_device = dev ? atoi(dev) : 0;
        s->gpu_module = env_raw(env, "HVD_GPU_MODULE");
        if (!s->gpu_module)
                s->gpu_module = env_raw(env, "HVD_NCCL_MODULE");
        return 0;
}

/* HVD_FUSION_THRESHOLD; -EINVAL when it is not a size (a job of one rank
 * then takes the default, any other reports it, in read_job). */
static int read_fusion(hvd_settings_t *s, const env_t *env) {
        const char *ft = env_get(env, "FUSION_THRESHOLD", true);
        s->has_fusion_threshold = ft != NULL;
        s->fusion_threshold = HVD_DEFAULT_FUSION_THRESHOLD;
        if (ft && hvd_parse_size(ft, &s->fusion_threshold) < 0) {
                s->fusion_threshold = HVD_DEFAULT_FUSION_THRESHOLD;
                return -EINVAL;
        }
        return 0;
}

/* HVD_DATA_ADDR=HOST:PORT (the host resolved later, by hvd_init). */
static int parse_data_addr(hvd_settings_t *s, const char *v, char *err, size_t err_len) {
        const char *colon = strrchr(v, ':');
        char *end;
        errno = 0;
        unsigned long p = strtoul(colon + 1, &end, 10);
        if ((size_t) (colon - v) >= sizeof s->data_addr_host || colon == v || errno || end == colon + 1 || *end ||
            p < 1 || p > 65535)
                return fail(err, err_len, "HVD_DATA_ADDR='%s' is not HOST or HOST:PORT (PORT 1-65535)", v);
        memcpy(s->data_addr_host, v, (size_t) (colon - v));
        s->data_addr_host[colon - v] = 0;
        s->data_addr_port = (unsigned) p;
        return 0;
}

/* HVD_DATA_PORT: PORT or LO-HI (1-65535). */
static int parse_port_range(hvd_settings_t *s, const char *v, char *err, size_t err_len) {
        char *end;
        errno = 0;
        unsigned long a = strtoul(v, &end, 10), b = a;
        if (end != v && *end == '-') {
                const char *s2 = end + 1;
                b = strtoul(s2, &end, 10);
                if (end == s2)
                        end = (char *) v; /* "12-" */
        }
        if (errno || end == v || *end || a < 1 || b > 65535 || b < a)
                return fail(err, err_len, "HVD_DATA_PORT='%s' is not a port or a range LO-HI of ports 1-65535", v);
        s->data_port_lo = (unsigned) a;
        s->data_port_hi = (unsigned) b;
        return 0;
}

/* "a:2,b:2" or "a,b": names by cross rank, one per host. */
static int parse_hosts(hvd_settings_t *s, const char *v, char *err, size_t err_len) {
        snprintf(s->hosts_buf, sizeof s->hosts_buf, "%s", v);
        s->n_hosts = 0;
        for (char *save = NULL, *tok = strtok_r(s->hosts_buf, ",", &save); tok && s->n_hosts < HVD_MAX_HOSTS;
             tok = strtok_r(NULL, ",", &save)) {
                char *colon = strchr(tok, ':');
                if (colon)
                        *colon = 0;
                s->host_at[s->n_hosts++] = (uint16_t) (tok - s->hosts_buf);
        }
        if (s->n_hosts != (size_t) s->cross_size)
                return fail(err, err_len, "HVD_HOSTS lists %zu hosts, HVD_CROSS_SIZE is %d", s->n_hosts, s->cross_size);
        return 0;
}

/* Settings of a job with a daemon. bad_fusion: HVD_FUSION_THRESHOLD is
 * not a size (its error comes after those of the data plane's address). */
static int read_job(hvd_settings_t *s, const env_t *env, bool bad_fusion, char *err, size_t err_len) {
        const char *sec = env_get(env, "JOB_SECRET", false);
        int secret_len = sec ? hex_decode(sec, s->secret, sizeof s->secret) : 0;
        if (secret_len < 0)
                return fail(err, err_len, "HVD_JOB_SECRET is not a hex string of at most %d bytes",
                            HVD_WIRE_MAX_SECRET);
        s->secret_len = (size_t) secret_len;
        if (strlen(s->job_id) > HVD_WIRE_MAX_JOB_ID)
                return fail(err, err_len, "HVD_JOB_ID is longer than %d bytes", HVD_WIRE_MAX_JOB_ID);
        s->coordinator = env_get(env, "COORDINATOR", false);
        s->runtime_dir = env_get(env, "RUNTIME_DIR", false);
        if (!s->runtime_dir)
                s->runtime_dir = HVD_DEFAULT_RUNTIME_DIR;
        s->hostname = env_get(env, "HOSTNAME", false);
        s->root_peer = env_get(env, "ROOT_PEER", false);
        int r;
        if (s->cross_size > 1) {
                s->data_addr = env_get(env, "DATA_ADDR", false);
                if (s->data_addr && strchr(s->data_addr, ':') &&
                    (r = parse_data_addr(s, s->data_addr, err, err_len)) < 0)
                        return r;
                s->data_port = env_get(env, "DATA_PORT", false);
                if (s->data_port && (r = parse_port_range(s, s->data_port, err, err_len)) < 0)
                        return r;
        }
        if (bad_fusion)
                return fail(err, err_len, "HVD_FUSION_THRESHOLD/HOROVOD_FUSION_THRESHOLD='%s' is not a size in bytes",
                            env_get(env, "FUSION_THRESHOLD", true));
        /* the stall inspector, as in Horovod: warn after 60 s by default */
        bool stall_off = false;
        const char *sd = env_get(env, "STALL_CHECK_DISABLE", true);
        if (sd)
                (void) hvd_parse_bool(sd, &stall_off); /* anything else: on */
        uint64_t stall = 60 * USEC_PER_SEC, stall_shutdown = 0;
        const char *sc = env_get(env, "STALL_CHECK_TIME_SECONDS", true);
        const char *ss = env_get(env, "STALL_SHUTDOWN_TIME_SECONDS", true);
        if ((sc && hvd_parse_duration(sc, USEC_PER_SEC, &stall) < 0) ||
            (ss && hvd_parse_duration(ss, USEC_PER_SEC, &stall_shutdown) < 0))
                return fail(err, err_len,
                            "HVD_STALL_CHECK_TIME_SECONDS/HVD_STALL_SHUTDOWN_TIME_SECONDS must be seconds");
        s->stall_check_usec = stall_off ? 0 : stall;
        s->stall_shutdown_usec = stall_off ? 0 : stall_shutdown;
        /* a CRC-32C on every frame of the TCP ring between nodes: on for
         * the whole job if any rank or daemon asks */
        const char *rc = env_get(env, "RING_CHECKSUM", false);
        if (rc && hvd_parse_bool(rc, &s->ring_checksum) < 0)
                return fail(err, err_len, "HVD_RING_CHECKSUM='%s' is not a boolean", rc);
        const char *hl = env_get(env, "HOSTS", false);
        if (hl && s->cross_size > 1 && !s->n_hosts && (r = parse_hosts(s, hl, err, err_len)) < 0)
                return r;
        return 0;
}

/* HVD_AUTOTUNE_<name> as a count of at most max (unset: 0). */
static int autotune_count(const env_t *env, const char *name, uint32_t max, uint32_t *ret, char *err, size_t len) {
        char key[64];
        snprintf(key, sizeof key, "AUTOTUNE_%s", name);
        const char *v = env_get(env, key, true);
        *ret = 0;
        if (!v)
                return 0;
        char *end;
        errno = 0;
        unsigned long x = strtoul(v, &end, 10);
        if (errno || *end || x < 1 || x > max || v[0] == '-')
                return fail(err, len, "HVD_%s/HOROVOD_%s='%s' is not a count of 1 to %u", key, key, v, max);
        *ret = (uint32_t) x;
        return 0;
}

/* The autotuner's settings (a job with a daemon). */
static int read_autotune(hvd_settings_t *s, const env_t *env, char *err, size_t len) {
        const char *at = env_get(env, "AUTOTUNE", true);
        s->autotune = false;
        if (at && hvd_parse_bool(at, &s->autotune) < 0)
                return fail(err, len, "HVD_AUTOTUNE/HOROVOD_AUTOTUNE='%s' is not a boolean", at);
        /* rank 0 alone writes the CSV */
        s->autotune_log = s->autotune && s->rank == 0 ? env_get(env, "AUTOTUNE_LOG", true) : NULL;
        int r;
        if ((r = autotune_count(env, "WARMUP_SAMPLES", 1000, &s->autotune_warmup_samples, err, len)) < 0 ||
            (r = autotune_count(env, "STEPS_PER_SAMPLE", 100000, &s->autotune_steps_per_sample, err, len)) < 0 ||
            (r = autotune_count(env, "BAYES_OPT_MAX_SAMPLES", 1000, &s->autotune_max_samples, err, len)) < 0)
                return r;
        const char *st = env_get(env, "AUTOTUNE_START_FUSION_THRESHOLD", false);
        s->has_autotune_start_threshold = st != NULL;
        if (st && (hvd_parse_size(st, &s->autotune_start_threshold) < 0 ||
                   s->autotune_start_threshold > (UINT64_C(64) << 20)))
                return fail(err, len, "HVD_AUTOTUNE_START_FUSION_THRESHOLD='%s' is not a size of 0 to 64 MiB", st);
        const char *sc = env_get(env, "AUTOTUNE_START_CYCLE_TIME", false);
        if (sc && (hvd_parse_duration(sc, USEC_PER_MSEC, &s->autotune_start_cycle_usec) < 0 ||
                   s->autotune_start_cycle_usec < USEC_PER_MSEC || s->autotune_start_cycle_usec > 100 * USEC_PER_MSEC))
                return fail(err, len, "HVD_AUTOTUNE_START_CYCLE_TIME='%s' is not a duration of 1 to 100 ms", sc);
        const char *gn = env_get(env, "AUTOTUNE_GAUSSIAN_PROCESS_NOISE", true);
        s->has_autotune_noise = gn != NULL;
        if (gn) {
                char *end;
                errno = 0;
                s->autotune_noise = strtod(gn, &end);
                if (errno || *end || end == gn || !(s->autotune_noise >= 0 && s->autotune_noise <= 1e6))
                        return fail(err, len,
                                    "HVD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE/HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE='%s' "
                                    "is not a number of 0 to 1e6",
                                    gn);
        }
        return 0;
}

/* Elastic mode: the sizes and deadlines every enrolment carries. */
static int read_elastic(hvd_settings_t *s, const env_t *env, char *err, size_t err_len) {
        const char *el = env_get(env, "ELASTIC", false);
        if (!el || hvd_parse_bool(el, &s->elastic) < 0 || !s->elastic)
                return el && hvd_parse_bool(el, &s->elastic) < 0
                               ? fail(err, err_len, "HVD_ELASTIC='%s' is not a boolean", el)
                               : 0;
        int lo = env_int(env, "ELASTIC_MIN_NP", s->size, false), hi = env_int(env, "ELASTIC_MAX_NP", s->size, false);
        int rl = env_int(env, "ELASTIC_RESET_LIMIT", 0, false);
        if (lo < 1 || hi < lo || hi > 65536 || rl < 0)
                return fail(err, err_len,
                            "HVD_ELASTIC_MIN_NP=%d/HVD_ELASTIC_MAX_NP=%d/HVD_ELASTIC_RESET_LIMIT=%d: need 1 <= min <= "
                            "max <= 65536 and a limit >= 0",
                            lo, hi, rl);
        s->elastic_min = (uint32_t) lo;
        s->elastic_max = (uint32_t) hi;
        s->elastic_reset_limit = (uint32_t) rl;
        s->elastic_timeout_usec = 600 * USEC_PER_SEC;
        s->elastic_settle_usec = 5 * USEC_PER_SEC;
        const char *t = env_get(env, "ELASTIC_TIMEOUT", false), *st = env_get(env, "ELASTIC_SETTLE", false);
        if ((t && hvd_parse_duration(t, USEC_PER_SEC, &s->elastic_timeout_usec) < 0) ||
            (st && hvd_parse_duration(st, USEC_PER_SEC, &s->elastic_settle_usec) < 0))
                return fail(err, err_len, "HVD_ELASTIC_TIMEOUT/HVD_ELASTIC_SETTLE must be durations in seconds");
        return 0;
}

int hvd_settings_read(hvd_settings_t *s, hvd_settings_lookup_fn lookup, void *userdata, char *err, size_t err_len) {
        const env_t env = { .lookup = lookup, .userdata = userdata };
        memset(s, 0, sizeof *s);
        int r = read_topology(s, &env, err, err_len);
        if (r < 0)
                return r;
        r = read_common(s, &env, err, err_len);
        if (r < 0)
                return r;
        bool bad_fusion = read_fusion(s, &env) < 0;
        if (s->solo)
                return 0;
        r = read_job(s, &env, bad_fusion, err, err_len);
        if (r < 0 || (r = read_autotune(s, &env, err, err_len)) < 0)
                return r;
        return read_elastic(s, &env, err, err_len);
}

const char *hvd_settings_coordinator(const hvd_settings_t *s, char *buf, size_t len) {
        if (s->coordinator)
                return s->coordinator;
        snprintf(buf, len, "ipc://%s/worker.sock", s->runtime_dir ? s->runtime_dir : HVD_DEFAULT_RUNTIME_DIR);
        return buf;
}
