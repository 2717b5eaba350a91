/* conf.c — the daemon's configuration table (key = value file and flags)
 * and the parsers shared with the worker's HVD_* / HOROVOD_* environment.
 * Invariant: a failed load leaves the caller's config untouched. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf.h"
#include "log.h"
#include "util.h"

void hvd_daemon_config_init(hvd_daemon_config_t *cfg) {
        *cfg = (hvd_daemon_config_t){
                .log_level = LOG_NOTICE,
                .fusion_threshold_bytes = HVD_DEFAULT_FUSION_THRESHOLD,
                .cycle_time_usec = HVD_DEFAULT_CYCLE_TIME_USEC,
                .start_timeout_usec = 30 * USEC_PER_SEC,
                .collective_timeout_usec = 300 * USEC_PER_SEC,
                .heartbeat_interval_usec = USEC_PER_SEC,
                .heartbeat_timeout_usec = 30 * USEC_PER_SEC,
                .max_jobs = 256,
                .max_ranks_per_job = 4096,
                .max_tensors_per_job = 65536,
                .max_message_bytes = UINT64_C(64) << 20,
                .socket_group = "",
                .socket_mode = 0660,
                .peer_listen = "",
                .peer_timeout_usec = 10 * USEC_PER_SEC,
                .relay_fanout = 8,
                .metrics_listen = "",
                .handle_signals = false,
                .notify = false,
        };
        snprintf(cfg->runtime_dir, sizeof cfg->runtime_dir, "%s", HVD_DEFAULT_RUNTIME_DIR);
}

int hvd_parse_size(const char *s, uint64_t *ret) {
        char *end;
        if (!s)
                return -EINVAL;
        while (isspace((unsigned char) *s))
                s++;
        if (!isdigit((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s)
                return -EINVAL;
        while (*end == ' ')
                end++;
        unsigned shift = 0;
        switch (toupper((unsigned char) *end)) {
        case 0: break;
        case 'K':
                shift = 10;
                end++;
                break;
        case 'M':
                shift = 20;
                end++;
                break;
        case 'G':
                shift = 30;
                end++;
                break;
        default: return -EINVAL;
        }
        if (*end == 'i' || *end == 'I')
                end++;
        if (*end == 'B' || *end == 'b')
                end++;
        if (*end)
                return -EINVAL;
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret = (uint64_t) v << shift;
        return 0;
}

int hvd_parse_duration(const char *s, uint64_t default_unit_usec, uint64_t *ret_usec) {
        char *end;
        if (!s)
                return -EINVAL;
        while (isspace((unsigned char) *s))
                s++;
        if (!isdigit((unsigned char) *s) && *s != '.')
                return -EINVAL;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || !isfinite(v) || v < 0)
                return -EINVAL;
        uint64_t unit = default_unit_usec;
        if (strcmp(end, "us") == 0 || strcmp(end, "usec") == 0)
                unit = 1;
        else if (strcmp(end, "ms") == 0 || strcmp(end, "msec") == 0)
                unit = USEC_PER_MSEC;
        else if (strcmp(end, "s") == 0 || strcmp(end, "sec") == 0)
                unit = USEC_PER_SEC;
        else if (strcmp(end, "min") == 0)
                unit = 60 * USEC_PER_SEC;
        else if (*end)
                return -EINVAL;
        double usec = v * (double) unit;
        if (usec > 1e15)
                return -ERANGE;
        *ret_usec = (uint64_t) (usec + 0.5);
        return 0;
}

int hvd_parse_bool(const char *s, bool *ret) {
        if (!s)
                return -EINVAL;
        if (!strcasecmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcasecmp(s, "on"))
                *ret = true;
        else if (!strcasecmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcasecmp(s, "off"))
                *ret = false;
        else
                return -EINVAL;
        return 0;
}

const char *hvd_getenv(const char *name, bool horovod_too) {
        char key[128];
        snprintf(key, sizeof key, "HVD_%s", name);
        const char *v = getenv(key);
        if ((!v || !*v) && horovod_too) {
                snprintf(key, sizeof key, "HOROVOD_%s", name);
                v = getenv(key);
        }
        return v && *v ? v : NULL;
}

/* ---- the key table ---- */

typedef enum { T_STRING, T_LEVEL, T_SIZE, T_USEC_SEC, T_USEC_MS, T_U32, T_BOOL, T_MODE } key_type_t;

typedef struct {
        const char *key;
        key_type_t type;
        size_t offset;
        size_t len; /* strings */
        uint64_t min, max;
        const char *help;
        bool live; /* a reload (SIGHUP) applies it to the running daemon */
} key_def_t;

#define OFF(f) offsetof(hvd_daemon_config_t, f)
static const key_def_t keys[] = {
        { "runtime_dir", T_STRING, OFF(runtime_dir), PATH_MAX, 0, 0, "a directory path", false },
        { "log_level", T_LEVEL, OFF(log_level), 0, 0, 7, "err, warning, notice, info or debug", true },
        { "fusion_threshold", T_SIZE, OFF(fusion_threshold_bytes), 0, 0, UINT64_C(1) << 34,
          "a size such as 64M (0 disables fusion)", true },
        { "cycle_time", T_USEC_MS, OFF(cycle_time_usec), 0, 0, 10 * USEC_PER_SEC,
          "a duration such as 1ms (plain numbers are milliseconds)", true },
        { "start_timeout", T_USEC_SEC, OFF(start_timeout_usec), 0, USEC_PER_MSEC, 86400 * USEC_PER_SEC,
          "a duration such as 30s (plain numbers are seconds)", true },
        { "collective_timeout", T_USEC_SEC, OFF(collective_timeout_usec), 0, USEC_PER_MSEC, 86400 * USEC_PER_SEC,
          "a duration such as 300s (plain numbers are seconds)", true },
        { "heartbeat_interval", T_USEC_SEC, OFF(heartbeat_interval_usec), 0, 10 * USEC_PER_MSEC, 3600 * USEC_PER_SEC,
          "a duration such as 1s (plain numbers are seconds)", true },
        { "heartbeat_timeout", T_USEC_SEC, OFF(heartbeat_timeout_usec), 0, 0, 86400 * USEC_PER_SEC,
          "a duration such as 30s (plain numbers are seconds; 0 = never)", true },
        { "max_jobs", T_U32, OFF(max_jobs), 0, 1, 65536, "an integer 1..65536", true },
        { "max_ranks_per_job", T_U32, OFF(max_ranks_per_job), 0, 1, 65536, "an integer 1..65536", true },
        { "max_tensors_per_job", T_U32, OFF(max_tensors_per_job), 0, 16, 1u << 24, "an integer 16..16777216", true },
        { "max_message_size", T_SIZE, OFF(max_message_bytes), 0, 4096, UINT64_C(1) << 32, "a size such as 64M", false },
        { "socket_group", T_STRING, OFF(socket_group), 64, 0, 0, "a group name", false },
        { "socket_mode", T_MODE, OFF(socket_mode), 0, 0, 0777, "an octal mode such as 0660", false },
        { "peer_listen", T_STRING, OFF(peer_listen), 256, 0, 0, "a ZeroMQ endpoint such as tcp://10.0.0.1:7100",
          false },
        { "ring_checksum", T_BOOL, OFF(ring_checksum), 0, 0, 0, "yes or no", true },
        { "peer_timeout", T_USEC_SEC, OFF(peer_timeout_usec), 0, 500 * USEC_PER_MSEC, 3600 * USEC_PER_SEC,
          "a duration such as 10s (plain numbers are seconds)", true },
        { "relay_fanout", T_U32, OFF(relay_fanout), 0, 0, 64,
          "an integer 0..64 (hosts per relay group; 0 or 1 = every host speaks to the root)", true },
        { "metrics_listen", T_STRING, OFF(metrics_listen), 256, 0, 0,
          "ADDRESS:PORT such as 127.0.0.1:9464 (empty = no HTTP listener)", false },
        { "curve_secret_key_file", T_STRING, OFF(curve_secret_key_file), PATH_MAX, 0, 0,
          "the path of a secret key file written by 'hvdctl keygen'", false },
        { "peer_public_keys", T_STRING, OFF(peer_public_keys), PATH_MAX, 0, 0,
          "a directory of NAME.key files or a file of 'KEY [NAME]' lines", false },
        { "elastic_root", T_STRING, OFF(elastic_root), 256, 0, 0,
          "the peer endpoint of a root daemon, such as tcp://10.0.0.1:7100 (empty = none)", false },
        { "elastic_host", T_STRING, OFF(elastic_host), 256, 0, 0, "a host name (empty = this machine's)", false },
        { "elastic_slots", T_U32, OFF(elastic_slots), 0, 0, 4096, "an integer 0..4096 (0 = the job's default)", false },
};

/* Keys of earlier releases that no longer do anything: accepted (a valid
 * file stays valid) and ignored. */
static const char *const obsolete_keys[] = {
        "first_step_hold", /* a first step's requests no longer wait for the other ranks' */
};

int hvd_daemon_config_set(hvd_daemon_config_t *cfg, const char *key, const char *value, const char **why) {
        for (size_t i = 0; i < ELEMENTSOF(obsolete_keys); i++)
                if (strcmp(obsolete_keys[i], key) == 0)
                        return 0;
        const key_def_t *k = NULL;
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (strcmp(keys[i].key, key) == 0)
                        k = &keys[i];
        if (!k)
                return -ENOENT;
        if (why)
                *why = k->help;
        char *field = (char *) cfg + k->offset;
        uint64_t v;
        int r;
        switch (k->type) {
        case T_STRING:
                if (strlen(value) >= k->len)
                        return -EINVAL;
                memcpy(field, value, strlen(value) + 1);
                return 0;
        case T_LEVEL:
                r = hvd_log_level_from_string(value);
                if (r < 0)
                        return r;
                *(int *) field = r;
                return 0;
        case T_BOOL: return hvd_parse_bool(value, (bool *) field);
        case T_SIZE: r = hvd_parse_size(value, &v); break;
        case T_USEC_SEC: r = hvd_parse_duration(value, USEC_PER_SEC, &v); break;
        case T_USEC_MS: r = hvd_parse_duration(value, USEC_PER_MSEC, &v); break;
        case T_MODE: {
                char *end;
                errno = 0;
                unsigned long m = strtoul(value, &end, 8);
                r = (errno || !*value || *end) ? -EINVAL : 0;
                v = m;
                break;
        }
        case T_U32: {
                char *end;
                errno = 0;
                unsigned long long u = strtoull(value, &end, 10);
                r = (errno || !*value || *end || *value == '-') ? -EINVAL : 0;
                v = u;
                break;
        }
        default: return -EINVAL;
        }
        if (r < 0)
                return -EINVAL;
        if (v < k->min || v > k->max)
                return -ERANGE;
        if (k->type == T_U32 || k->type == T_MODE)
                *(uint32_t *) field = (uint32_t) v;
        else
                *(uint64_t *) field = v;
        return 0;
}

static char *strip(char *s) {
        while (isspace((unsigned char) *s))
                s++;
        char *e = s + strlen(s);
        while (e > s && isspace((unsigned char) e[-1]))
                *--e = 0;
        return s;
}

int hvd_daemon_config_load(hvd_daemon_config_t *cfg, const char *path, unsigned *err_line, char *err_msg,
                           size_t err_len) {
        FILE *f = fopen(path, "re");
        if (!f) {
                int r = -errno;
                snprintf(err_msg, err_len, "cannot open '%s': %s", path, strerror(-r));
                return r;
        }
        hvd_daemon_config_t tmp = *cfg;
        char line[PATH_MAX + 128];
        unsigned n = 0;
        int r = 0;
        while (fgets(line, sizeof line, f)) {
                n++;
                char *s = strip(line);
                if (!*s || *s == '#' || *s == ';')
                        continue;
                char *eq = strchr(s, '=');
                if (!eq) {
                        snprintf(err_msg, err_len, "%s:%u: expected 'key = value', got '%s'", path, n, s);
                        r = -EINVAL;
                        break;
                }
                *eq = 0;
                char *key = strip(s), *value = strip(eq + 1);
                const char *why = NULL;
                r = hvd_daemon_config_set(&tmp, key, value, &why);
                if (r == -ENOENT) {
                        snprintf(err_msg, err_len, "%s:%u: unknown key '%s'", path, n, key);
                        break;
                }
                if (r < 0) {
                        snprintf(err_msg, err_len, "%s:%u: invalid value '%s' for '%s': expected %s", path, n, value,
                                 key, why ? why : "a valid value");
                        break;
                }
        }
        fclose(f);
        if (r < 0) {
                if (err_line)
                        *err_line = n;
                return r;
        }
        *cfg = tmp;
        return 0;
}

static bool key_equal(const key_def_t *k, const hvd_daemon_config_t *a, const hvd_daemon_config_t *b) {
        const char *fa = (const char *) a + k->offset, *fb = (const char *) b + k->offset;
        switch (k->type) {
        case T_STRING: return strcmp(fa, fb) == 0;
        case T_LEVEL: return *(const int *) fa == *(const int *) fb;
        case T_BOOL: return *(const bool *) fa == *(const bool *) fb;
        case T_U32:
        case T_MODE: return *(const uint32_t *) fa == *(const uint32_t *) fb;
        default: return *(const uint64_t *) fa == *(const uint64_t *) fb;
        }
}

static size_t key_size(const key_def_t *k) {
        switch (k->type) {
        case T_STRING: return k->len;
        case T_LEVEL: return sizeof(int);
        case T_BOOL: return sizeof(bool);
        case T_U32:
        case T_MODE: return sizeof(uint32_t);
        default: return sizeof(uint64_t);
        }
}

static void format_scaled(char *buf, size_t len, uint64_t v, const char *const *units, const uint64_t *scale,
                          size_t n) {
        for (size_t i = 0; i < n; i++)
                if (v && v % scale[i] == 0) {
                        snprintf(buf, len, "%" PRIu64 "%s", v / scale[i], units[i]);
                        return;
                }
        snprintf(buf, len, "%" PRIu64 "%s", v, units[n]);
}

int hvd_daemon_config_format(const hvd_daemon_config_t *cfg, const char *key, char *buf, size_t len) {
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const key_def_t *k = &keys[i];
                if (strcmp(k->key, key) != 0)
                        continue;
                const char *f = (const char *) cfg + k->offset;
                static const char *const size_units[] = { "G", "M", "K", "" };
                static const uint64_t size_scale[] = { UINT64_C(1) << 30, UINT64_C(1) << 20, UINT64_C(1) << 10 };
                static const char *const dur_units[] = { "min", "s", "ms", "us" };
                static const uint64_t dur_scale[] = { 60 * USEC_PER_SEC, USEC_PER_SEC, USEC_PER_MSEC };
                switch (k->type) {
                case T_STRING: snprintf(buf, len, "%s", f); break;
                case T_LEVEL: snprintf(buf, len, "%s", hvd_log_level_to_string(*(const int *) f)); break;
                case T_BOOL: snprintf(buf, len, "%s", *(const bool *) f ? "yes" : "no"); break;
                case T_U32: snprintf(buf, len, "%" PRIu32, *(const uint32_t *) f); break;
                case T_MODE: snprintf(buf, len, "%04" PRIo32, *(const uint32_t *) f); break;
                case T_SIZE: format_scaled(buf, len, *(const uint64_t *) f, size_units, size_scale, 3); break;
                default: format_scaled(buf, len, *(const uint64_t *) f, dur_units, dur_scale, 3); break;
                }
                return 0;
        }
        return -ENOENT;
}

bool hvd_daemon_config_get(const hvd_daemon_config_t *cfg, size_t i, const char **key, char *buf, size_t len) {
        if (i >= ELEMENTSOF(keys))
                return false;
        *key = keys[i].key;
        return hvd_daemon_config_format(cfg, keys[i].key, buf, len) == 0;
}

size_t hvd_daemon_config_key_count(void) {
        return ELEMENTSOF(keys);
}

const char *hvd_daemon_config_key(size_t i, bool *live) {
        if (i >= ELEMENTSOF(keys))
                return NULL;
        if (live)
                *live = keys[i].live;
        return keys[i].key;
}

size_t hvd_daemon_config_apply_live(hvd_daemon_config_t *cur, const hvd_daemon_config_t *next,
                                    hvd_daemon_config_change_fn fn, void *userdata) {
        size_t n = 0;
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const key_def_t *k = &keys[i];
                if (key_equal(k, cur, next))
                        continue;
                n++;
                if (fn)
                        fn(k->key, k->live, cur, next, userdata);
                if (k->live)
                        memcpy((char *) cur + k->offset, (const char *) next + k->offset, key_size(k));
        }
        return n;
}
