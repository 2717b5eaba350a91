/* check_conf.c — unit tests of the configuration code (common/conf.c): the
 * size, duration and boolean parsers shared with the workers' HVD_*
 * variables (exact values, every error refused, out-parameters untouched on
 * failure), the daemon's key table, and hvd_daemon_config_load (good file;
 * unknown keys and bad values reported with the line, the key and the
 * expected form; the caller's config unchanged on any error). */
#include "config.h"

#include <check.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "util.h"

#define SENTINEL UINT64_C(0x5a5a5a5a5a5a5a5a)

static void size_is(const char *s, uint64_t want) {
        uint64_t v = SENTINEL;
        int r = hvd_parse_size(s, &v);
        ck_assert_msg(r == 0, "hvd_parse_size(\"%s\") failed: %d", s, r);
        ck_assert_msg(v == want, "hvd_parse_size(\"%s\") = %llu, expected %llu", s, (unsigned long long) v,
                      (unsigned long long) want);
}

static void size_bad(const char *s) {
        uint64_t v = SENTINEL;
        int r = hvd_parse_size(s, &v);
        ck_assert_msg(r < 0, "hvd_parse_size(\"%s\") accepted: %llu", s ? s : "(null)", (unsigned long long) v);
        ck_assert_msg(v == SENTINEL, "hvd_parse_size(\"%s\") changed its out-parameter on failure", s);
}

static void dur_is(const char *s, uint64_t unit, uint64_t want) {
        uint64_t v = SENTINEL;
        int r = hvd_parse_duration(s, unit, &v);
        ck_assert_msg(r == 0, "hvd_parse_duration(\"%s\") failed: %d", s, r);
        ck_assert_msg(v == want, "hvd_parse_duration(\"%s\") = %llu us, expected %llu", s, (unsigned long long) v,
                      (unsigned long long) want);
}

static void dur_bad(const char *s) {
        uint64_t v = SENTINEL;
        int r = hvd_parse_duration(s, USEC_PER_SEC, &v);
        ck_assert_msg(r < 0, "hvd_parse_duration(\"%s\") accepted: %llu", s ? s : "(null)", (unsigned long long) v);
        ck_assert_msg(v == SENTINEL, "hvd_parse_duration(\"%s\") changed its out-parameter on failure", s);
}

START_TEST(test_conf_parse_size) {
        size_is("0", 0);
        size_is("1", 1);
        size_is("4096", 4096);
        size_is("64M", UINT64_C(64) << 20);
        size_is("64m", UINT64_C(64) << 20);
        size_is("64MB", UINT64_C(64) << 20);
        size_is("64MiB", UINT64_C(64) << 20);
        size_is("1G", UINT64_C(1) << 30);
        size_is("16G", UINT64_C(16) << 30);
        size_is("12KiB", 12288);
        size_is("12k", 12288);
        size_is("12K", 12288);
        size_is("0M", 0);
        size_is("4 M", UINT64_C(4) << 20);
        size_is("18446744073709551615", UINT64_MAX);
        size_is("17179869183G", UINT64_C(17179869183) << 30);
}
END_TEST

START_TEST(test_conf_parse_size_errors) {
        size_bad(NULL);
        size_bad("");
        size_bad("-1");
        size_bad("-0");
        size_bad("abc");
        size_bad("M");
        size_bad("12X");
        size_bad("1.5M");
        size_bad("64MiBx");
        size_bad("64 MiB extra");
        size_bad("12KK");
        size_bad("1T");
        size_bad("18446744073709551616"); /* > UINT64_MAX */
        size_bad("17179869184G");         /* 2^64 bytes */
        size_bad("99999999999999999999999");
}
END_TEST

START_TEST(test_conf_parse_duration) {
        dur_is("1ms", USEC_PER_SEC, 1000);
        dur_is("250us", USEC_PER_SEC, 250);
        dur_is("250usec", USEC_PER_SEC, 250);
        dur_is("30s", USEC_PER_MSEC, 30 * USEC_PER_SEC);
        dur_is("2sec", USEC_PER_MSEC, 2 * USEC_PER_SEC);
        dur_is("1min", 1, 60 * USEC_PER_SEC);
        dur_is("1.5s", 1, 1500000);
        dur_is("0.5ms", 1, 500);
        dur_is("0", USEC_PER_SEC, 0);
        /* plain numbers are in the caller's default unit */
        dur_is("2", USEC_PER_SEC, 2 * USEC_PER_SEC);
        dur_is("2", USEC_PER_MSEC, 2 * USEC_PER_MSEC);
        dur_is("2.5", USEC_PER_MSEC, 2500);
        dur_is("5msec", 1, 5000);
}
END_TEST

START_TEST(test_conf_parse_duration_errors) {
        dur_bad(NULL);
        dur_bad("");
        dur_bad("-1");
        dur_bad(" -1");
        dur_bad("-1s");
        dur_bad("abc");
        dur_bad("s");
        dur_bad("5h");
        dur_bad("5 s");
        dur_bad("5sx");
        dur_bad("1e300");
        dur_bad("inf");
}
END_TEST

START_TEST(test_conf_size_leading_space_minus) {
        /* strtoull skips blanks and then negates: " -1" must not become 2^64 - 1 */
        size_bad(" -1");
        size_bad("\t-5M");
}
END_TEST

START_TEST(test_conf_duration_nan) {
        /* NaN passes both "v < 0" and "usec > 1e15"; (uint64_t) NaN is undefined */
        dur_bad("nan");
        dur_bad("nans");
        dur_bad("-nan");
}
END_TEST

START_TEST(test_conf_parse_bool) {
        const char *yes[] = { "1", "yes", "true", "on", "YES", "True" };
        const char *no[] = { "0", "no", "false", "off", "NO", "Off" };
        for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
                bool b = false;
                ck_assert_int_eq(hvd_parse_bool(yes[i], &b), 0);
                ck_assert(b);
                b = true;
                ck_assert_int_eq(hvd_parse_bool(no[i], &b), 0);
                ck_assert(!b);
        }
        const char *bad[] = { "", "2", "y", "yess", "truex" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                bool b = true;
                ck_assert_int_lt(hvd_parse_bool(bad[i], &b), 0);
                ck_assert(b);
        }
        bool b = true;
        ck_assert_int_lt(hvd_parse_bool(NULL, &b), 0);
}
END_TEST

START_TEST(test_conf_defaults_and_set) {
        hvd_daemon_config_t c;
        hvd_daemon_config_init(&c);
        ck_assert_str_eq(c.runtime_dir, HVD_DEFAULT_RUNTIME_DIR);
        ck_assert_uint_eq(c.fusion_threshold_bytes, HVD_DEFAULT_FUSION_THRESHOLD);
        ck_assert_uint_eq(c.cycle_time_usec, HVD_DEFAULT_CYCLE_TIME_USEC);
        ck_assert_uint_eq(c.socket_mode, 0660);

        const char *why = NULL;
        ck_assert_int_eq(hvd_daemon_config_set(&c, "fusion_threshold", "4M", &why), 0);
        ck_assert_uint_eq(c.fusion_threshold_bytes, UINT64_C(4) << 20);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "fusion_threshold", "0", NULL), 0);
        ck_assert_uint_eq(c.fusion_threshold_bytes, 0);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "cycle_time", "5", NULL), 0); /* milliseconds */
        ck_assert_uint_eq(c.cycle_time_usec, 5000);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "start_timeout", "2", NULL), 0); /* seconds */
        ck_assert_uint_eq(c.start_timeout_usec, 2 * USEC_PER_SEC);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "start_timeout", "1500ms", NULL), 0);
        ck_assert_uint_eq(c.start_timeout_usec, 1500 * USEC_PER_MSEC);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "socket_mode", "0600", NULL), 0);
        ck_assert_uint_eq(c.socket_mode, 0600);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "log_level", "debug", NULL), 0);
        ck_assert_int_eq(c.log_level, LOG_DEBUG);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "max_jobs", "12", NULL), 0);
        ck_assert_uint_eq(c.max_jobs, 12);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "runtime_dir", "/tmp/x", NULL), 0);
        ck_assert_str_eq(c.runtime_dir, "/tmp/x");

        hvd_daemon_config_t before = c;
        ck_assert_int_eq(hvd_daemon_config_set(&c, "no_such_key", "1", &why), -ENOENT);
        why = NULL;
        ck_assert_int_eq(hvd_daemon_config_set(&c, "fusion_threshold", "lots", &why), -EINVAL);
        ck_assert_ptr_nonnull(why);
        ck_assert_ptr_nonnull(strstr(why, "64M"));
        ck_assert_int_lt(hvd_daemon_config_set(&c, "max_jobs", "0", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "max_jobs", "-3", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "max_jobs", "4294967297", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "socket_mode", "0999", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "socket_mode", "01777", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "log_level", "loud", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "start_timeout", "0", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "cycle_time", "1h", NULL), 0);
        char longdir[PATH_MAX + 10];
        memset(longdir, 'd', sizeof longdir - 1);
        longdir[sizeof longdir - 1] = 0;
        ck_assert_int_lt(hvd_daemon_config_set(&c, "runtime_dir", longdir, NULL), 0);
        ck_assert_mem_eq(&before, &c, sizeof c);
}
END_TEST

/* ---- files ---- */

static char path[64];

static void write_conf(const char *text) {
        snprintf(path, sizeof path, "/tmp/hvd-check-conf-XXXXXX");
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        size_t n = strlen(text);
        ck_assert_int_eq(write(fd, text, n), (ssize_t) n);
        close(fd);
}

START_TEST(test_conf_load_good) {
        write_conf("# hvd-coordinatord.conf\n"
                   "\n"
                   "runtime_dir = /tmp/hvd-rt\n"
                   "  log_level=info  \n"
                   "fusion_threshold = 32M\n"
                   "; another comment\n"
                   "cycle_time = 2ms\n"
                   "start_timeout = 45\n"
                   "collective_timeout = 10min\n"
                   "max_jobs = 8\n"
                   "max_ranks_per_job = 64\n"
                   "max_tensors_per_job = 1000\n"
                   "max_message_size = 16M\n"
                   "socket_mode = 0640\n"
                   "first_step_hold = 100ms\n" /* an obsolete key: accepted, ignored */
                   "fusion_threshold = 48M\n" /* a later line wins */);
        hvd_daemon_config_t c;
        hvd_daemon_config_init(&c);
        unsigned line = 777;
        char msg[512] = "";
        int r = hvd_daemon_config_load(&c, path, &line, msg, sizeof msg);
        ck_assert_msg(r == 0, "load failed: %d %s", r, msg);
        ck_assert_str_eq(c.runtime_dir, "/tmp/hvd-rt");
        ck_assert_int_eq(c.log_level, LOG_INFO);
        ck_assert_uint_eq(c.fusion_threshold_bytes, UINT64_C(48) << 20);
        ck_assert_uint_eq(c.cycle_time_usec, 2000);
        ck_assert_uint_eq(c.start_timeout_usec, 45 * USEC_PER_SEC);
        ck_assert_uint_eq(c.collective_timeout_usec, 600 * USEC_PER_SEC);
        ck_assert_uint_eq(c.max_jobs, 8);
        ck_assert_uint_eq(c.max_ranks_per_job, 64);
        ck_assert_uint_eq(c.max_tensors_per_job, 1000);
        ck_assert_uint_eq(c.max_message_bytes, UINT64_C(16) << 20);
        ck_assert_uint_eq(c.socket_mode, 0640);
        unlink(path);

        /* an empty file changes nothing */
        write_conf("");
        hvd_daemon_config_t d, e;
        hvd_daemon_config_init(&d);
        e = d;
        ck_assert_int_eq(hvd_daemon_config_load(&d, path, NULL, msg, sizeof msg), 0);
        ck_assert_mem_eq(&d, &e, sizeof d);
        unlink(path);
}
END_TEST

/* loading `text` fails at `want_line`; msg contains each needle */
static void load_fails(const char *text, unsigned want_line, const char *n1, const char *n2, const char *n3) {
        write_conf(text);
        hvd_daemon_config_t c, before;
        hvd_daemon_config_init(&c);
        c.max_jobs = 3; /* something not default, to see it survive */
        before = c;
        unsigned line = 0;
        char msg[512] = "";
        int r = hvd_daemon_config_load(&c, path, &line, msg, sizeof msg);
        ck_assert_msg(r < 0, "loading accepted:\n%s", text);
        ck_assert_uint_eq(line, want_line);
        char where[128];
        snprintf(where, sizeof where, "%s:%u:", path, want_line);
        ck_assert_msg(strstr(msg, where), "message \"%s\" does not say where (%s)", msg, where);
        const char *needles[] = { n1, n2, n3 };
        for (int i = 0; i < 3; i++)
                if (needles[i])
                        ck_assert_msg(strstr(msg, needles[i]), "message \"%s\" lacks \"%s\"", msg, needles[i]);
        ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "config changed by a failed load");
        unlink(path);
}

START_TEST(test_conf_load_errors) {
        load_fails("fusion_threshold = 8M\n"
                   "max_jobs = 5\n"
                   "bogus_key = 1\n",
                   3, "unknown key 'bogus_key'", NULL, NULL);
        load_fails("# ok\n"
                   "fusion_threshold = 8M\n"
                   "fusion_threshold = lots\n",
                   3, "'fusion_threshold'", "'lots'", "64M");
        load_fails("cycle_time = fast\n", 1, "'cycle_time'", "'fast'", "1ms");
        load_fails("max_jobs = 0\n", 1, "'max_jobs'", "'0'", "1..65536");
        load_fails("log_level = shouty\n", 1, "'log_level'", "'shouty'", "debug");
        load_fails("socket_mode = rw\n", 1, "'socket_mode'", "0660", NULL);
        load_fails("max_jobs = 5\n"
                   "this line has no equals sign\n",
                   2, "key = value", NULL, NULL);

        /* a missing file */
        hvd_daemon_config_t c, before;
        hvd_daemon_config_init(&c);
        before = c;
        char msg[512] = "";
        int r = hvd_daemon_config_load(&c, "/nonexistent/hvd/coordinatord.conf", NULL, msg, sizeof msg);
        ck_assert_int_eq(r, -ENOENT);
        ck_assert_ptr_nonnull(strstr(msg, "/nonexistent/hvd/coordinatord.conf"));
        ck_assert_mem_eq(&c, &before, sizeof c);
}
END_TEST

START_TEST(test_conf_getenv) {
        unsetenv("HVD_CHECKCONF_X");
        unsetenv("HOROVOD_CHECKCONF_X");
        ck_assert_ptr_null(hvd_getenv("CHECKCONF_X", true));
        setenv("HOROVOD_CHECKCONF_X", "7", 1);
        ck_assert_ptr_null(hvd_getenv("CHECKCONF_X", false));
        ck_assert_str_eq(hvd_getenv("CHECKCONF_X", true), "7");
        setenv("HVD_CHECKCONF_X", "8", 1);
        ck_assert_str_eq(hvd_getenv("CHECKCONF_X", true), "8");
        ck_assert_str_eq(hvd_getenv("CHECKCONF_X", false), "8");
        setenv("HVD_CHECKCONF_X", "", 1); /* empty counts as unset */
        ck_assert_str_eq(hvd_getenv("CHECKCONF_X", true), "7");
        ck_assert_ptr_null(hvd_getenv("CHECKCONF_X", false));
}
END_TEST

typedef struct {
        char seen[512];
        unsigned n_live, n_fixed;
} changes_t;

static void record_change(const char *key, bool live, const hvd_daemon_config_t *cur, const hvd_daemon_config_t *next,
                          void *userdata) {
        changes_t *c = userdata;
        char was[64], now[64];
        ck_assert_int_eq(hvd_daemon_config_format(cur, key, was, sizeof was), 0);
        ck_assert_int_eq(hvd_daemon_config_format(next, key, now, sizeof now), 0);
        size_t o = strlen(c->seen);
        snprintf(c->seen + o, sizeof c->seen - o, "%s%s:%s->%s:%s", o ? " " : "", key, was, now,
                 live ? "live" : "restart");
        live ? c->n_live++ : c->n_fixed++;
}

START_TEST(test_conf_apply_live) {
        /* the live keys change, the others keep their value and are reported */
        hvd_daemon_config_t cur, next, before;
        hvd_daemon_config_init(&cur);
        before = next = cur;
        ck_assert_int_eq(hvd_daemon_config_set(&next, "log_level", "debug", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&next, "fusion_threshold", "8M", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&next, "start_timeout", "90s", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&next, "runtime_dir", "/tmp/elsewhere", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&next, "socket_mode", "0600", NULL), 0);
        changes_t c = { "", 0, 0 };
        ck_assert_uint_eq(hvd_daemon_config_apply_live(&cur, &next, record_change, &c), 5);
        ck_assert_str_eq(c.seen, "runtime_dir:/run/hvd->/tmp/elsewhere:restart log_level:notice->debug:live "
                                 "fusion_threshold:64M->8M:live start_timeout:30s->90s:live "
                                 "socket_mode:0660->0600:restart");
        ck_assert_uint_eq(c.n_live, 3);
        ck_assert_uint_eq(c.n_fixed, 2);
        ck_assert_int_eq(cur.log_level, LOG_DEBUG);
        ck_assert_uint_eq(cur.fusion_threshold_bytes, 8u << 20);
        ck_assert_uint_eq(cur.start_timeout_usec, 90 * USEC_PER_SEC);
        ck_assert_str_eq(cur.runtime_dir, before.runtime_dir);
        ck_assert_uint_eq(cur.socket_mode, 0660);
        /* nothing differs the second time but the restart-only keys */
        memset(&c, 0, sizeof c);
        ck_assert_uint_eq(hvd_daemon_config_apply_live(&cur, &next, NULL, NULL), 2);
        /* every key has a name, and the table knows which are live */
        size_t n = hvd_daemon_config_key_count(), live = 0;
        ck_assert_uint_ge(n, 14);
        for (size_t i = 0; i < n; i++) {
                bool l = false;
                const char *k = hvd_daemon_config_key(i, &l);
                ck_assert_ptr_nonnull(k);
                char buf[PATH_MAX];
                ck_assert_int_eq(hvd_daemon_config_format(&cur, k, buf, sizeof buf), 0);
                live += l;
        }
        ck_assert_ptr_null(hvd_daemon_config_key(n, NULL));
        ck_assert_uint_gt(live, 0);
        ck_assert_uint_lt(live, n);
        char buf[32];
        ck_assert_int_eq(hvd_daemon_config_format(&cur, "no_such_key", buf, sizeof buf), -ENOENT);
        /* formatting round-trips through the parser */
        ck_assert_int_eq(hvd_daemon_config_set(&next, "cycle_time", "2500us", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_format(&next, "cycle_time", buf, sizeof buf), 0);
        ck_assert_str_eq(buf, "2500us");
        ck_assert_int_eq(hvd_daemon_config_set(&next, "collective_timeout", "2min", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_format(&next, "collective_timeout", buf, sizeof buf), 0);
        ck_assert_str_eq(buf, "2min");
}
END_TEST

/* Heartbeats: defaults, units, bounds (interval 10ms..1h, timeout 0 = off). */
START_TEST(test_conf_heartbeat) {
        hvd_daemon_config_t c;
        char buf[32];
        hvd_daemon_config_init(&c);
        ck_assert_uint_eq(c.heartbeat_interval_usec, USEC_PER_SEC);
        ck_assert_uint_eq(c.heartbeat_timeout_usec, 30 * USEC_PER_SEC);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "heartbeat_interval", "500ms", NULL), 0);
        ck_assert_uint_eq(c.heartbeat_interval_usec, 500 * USEC_PER_MSEC);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "heartbeat_timeout", "3", NULL), 0);
        ck_assert_uint_eq(c.heartbeat_timeout_usec, 3 * USEC_PER_SEC);
        ck_assert_int_eq(hvd_daemon_config_format(&c, "heartbeat_timeout", buf, sizeof buf), 0);
        ck_assert_str_eq(buf, "3s");
        ck_assert_int_eq(hvd_daemon_config_set(&c, "heartbeat_timeout", "0", NULL), 0);
        ck_assert_uint_eq(c.heartbeat_timeout_usec, 0);
        const char *why = NULL;
        ck_assert_int_eq(hvd_daemon_config_set(&c, "heartbeat_interval", "5ms", &why), -ERANGE);
        ck_assert_ptr_nonnull(why);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "heartbeat_interval", "2h", NULL), 0);
        ck_assert_int_lt(hvd_daemon_config_set(&c, "heartbeat_timeout", "-1", NULL), 0);
        ck_assert_uint_eq(c.heartbeat_interval_usec, 500 * USEC_PER_MSEC); /* unchanged by the failures */
}
END_TEST

/* Every key reads back as the file would have it, and setting what was
 * read gives the same configuration. */
START_TEST(test_conf_get_round_trip) {
        hvd_daemon_config_t c, d;
        hvd_daemon_config_init(&c);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "fusion_threshold", "3M", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "cycle_time", "2.5", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "metrics_listen", "127.0.0.1:9464", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "log_level", "debug", NULL), 0);
        ck_assert_int_eq(hvd_daemon_config_set(&c, "socket_mode", "0640", NULL), 0);
        hvd_daemon_config_init(&d);
        const char *key;
        char v[PATH_MAX + 16];
        size_t n = 0;
        bool seen_metrics = false;
        for (; hvd_daemon_config_get(&c, n, &key, v, sizeof v); n++) {
                if (!strcmp(key, "fusion_threshold"))
                        ck_assert_str_eq(v, "3M");
                if (!strcmp(key, "cycle_time"))
                        ck_assert_str_eq(v, "2500us");
                if (!strcmp(key, "start_timeout"))
                        ck_assert_str_eq(v, "30s");
                if (!strcmp(key, "log_level"))
                        ck_assert_str_eq(v, "debug");
                if (!strcmp(key, "socket_mode"))
                        ck_assert_str_eq(v, "0640");
                if (!strcmp(key, "metrics_listen")) {
                        ck_assert_str_eq(v, "127.0.0.1:9464");
                        seen_metrics = true;
                }
                ck_assert_int_eq(hvd_daemon_config_set(&d, key, v, NULL), 0);
        }
        ck_assert(seen_metrics);
        ck_assert_uint_ge(n, 15);
        ck_assert(!hvd_daemon_config_get(&c, n, &key, v, sizeof v));
        for (size_t i = 0; i < n; i++) {
                char w[PATH_MAX + 16];
                const char *k2;
                hvd_daemon_config_get(&c, i, &key, v, sizeof v);
                hvd_daemon_config_get(&d, i, &k2, w, sizeof w);
                ck_assert_str_eq(v, w);
        }
        ck_assert_uint_eq(c.cycle_time_usec, d.cycle_time_usec);
        ck_assert_uint_eq(c.fusion_threshold_bytes, d.fusion_threshold_bytes);
}
END_TEST

static Suite *conf_suite(void) {
        Suite *s = suite_create("conf");
        TCase *tc = tcase_create("parse");
        tcase_add_test(tc, test_conf_parse_size);
        tcase_add_test(tc, test_conf_parse_size_errors);
        tcase_add_test(tc, test_conf_parse_duration);
        tcase_add_test(tc, test_conf_parse_duration_errors);
        tcase_add_test(tc, test_conf_size_leading_space_minus);
        tcase_add_test(tc, test_conf_duration_nan);
        tcase_add_test(tc, test_conf_parse_bool);
        tcase_add_test(tc, test_conf_defaults_and_set);
        tcase_add_test(tc, test_conf_getenv);
        tcase_add_test(tc, test_conf_get_round_trip);
        suite_add_tcase(s, tc);
        tc = tcase_create("file");
        tcase_add_test(tc, test_conf_load_good);
        tcase_add_test(tc, test_conf_load_errors);
        tcase_add_test(tc, test_conf_apply_live);
        tcase_add_test(tc, test_conf_heartbeat);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(conf_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
