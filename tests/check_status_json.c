/* check_status_json.c — unit tests of hvdctl's JSON documents
 * (tools/status_json.c): every field of status, job, rank, rank status and
 * peer under its hvd.proto name, in order; strings with quotes,
 * backslashes, control characters, valid multi-byte UTF-8 kept, invalid
 * UTF-8 (stray bytes, overlong forms, surrogates, beyond U+10FFFF, cut
 * sequences) as U+FFFD per byte; 64-bit values up to UINT64_MAX written
 * exactly, also where a string holds what looks like a negative number;
 * NaN and infinities as 0; empty lists as []. */
#include "config.h"

#include <check.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status_json.h"

/* The text hvd_json_write() makes of doc (taken). */
static char *written(json_t *doc) {
        ck_assert_ptr_nonnull(doc);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(hvd_json_write(doc, f), 0);
        fclose(f);
        json_decref(doc);
        ck_assert_uint_gt(len, 0);
        ck_assert_int_eq(buf[len - 1], '\n');
        return buf;
}

/* Parses text back (integers as reals: jansson stops at INT64_MAX). */
static json_t *parsed(const char *text) {
        json_error_t e;
        json_t *v = json_loads(text, JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES, &e);
        ck_assert_msg(v != NULL, "does not parse: %s at line %d: %s", e.text, e.line, text);
        return v;
}

static void assert_keys(json_t *o, const char *const *keys, size_t n) {
        ck_assert_uint_eq(json_object_size(o), n);
        size_t i = 0;
        for (void *it = json_object_iter(o); it; it = json_object_iter_next(o, it), i++)
                ck_assert_str_eq(json_object_iter_key(it), keys[i]);
}

static const char *str(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        ck_assert_msg(json_is_string(v), "%s is not a string", key);
        return json_string_value(v);
}

static double num(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        ck_assert_msg(json_is_number(v), "%s is not a number", key);
        return json_number_value(v);
}

START_TEST(test_status_fields_and_numbers) {
        Hvd__RankInfo ri[2] = { HVD__RANK_INFO__INIT, HVD__RANK_INFO__INIT };
        Hvd__RankInfo *rip[2] = { &ri[0], &ri[1] };
        ri[0].rank = 0, ri[0].pid = 100, ri[0].host = "h0", ri[0].data_addr = "10.0.0.1:5000";
        ri[1].rank = 1, ri[1].local_rank = 1, ri[1].pid = UINT32_MAX, ri[1].host = "h1", ri[1].data_addr = "";
        ri[1].cross_rank = 3;
        Hvd__RankStatus rs = HVD__RANK_STATUS__INIT, *rsp = &rs;
        rs.rank = 1, rs.local = 1, rs.host = "h1", rs.pid = 7, rs.state = "running", rs.seen = 1;
        rs.last_seen_usec = UINT64_MAX, rs.tensors_pending = 2, rs.readies = 9, rs.done_seq = 8, rs.busy_usec = 5;
        rs.local_rank = 1, rs.cross_rank = 0;
        Hvd__JobStatus j = HVD__JOB_STATUS__INIT, *jp = &j;
        j.job_id = "job-1", j.size = 2, j.state = "running", j.n_ranks = 2, j.ranks = rip;
        j.cycles = 1, j.tensors_negotiated = 2, j.fused_ops = 3, j.bytes_reduced = UINT64_C(1) << 63;
        j.age_usec = 4, j.schedules = 5, j.cache_hits = 6, j.tensors_in_fused_ops = 7, j.joined_ranks = 1;
        j.abort_reason = "", j.stalled = "", j.relay = "", j.negotiation_usec = 8, j.data_usec = 9;
        j.throughput_bytes_per_sec = NAN, j.cache_hit_rate = 0.25, j.mean_fused_bytes = 10, j.root = 1;
        j.cross_size = 1, j.ranks_here = 2, j.fast_path_tensors = 11, j.n_rank_status = 1, j.rank_status = &rsp;
        Hvd__PeerStatus p = HVD__PEER_STATUS__INIT, *pp = &p;
        p.endpoint = "tcp://10.0.0.2:7100", p.state = "connected", p.last_heard_usec = 12, p.rtt_usec = 13;
        p.direction = "out", p.host = "", p.jobs = 1;
        Hvd__HostOffer of = HVD__HOST_OFFER__INIT, *ofp = &of;
        of.host = "c", of.slots = 2, of.runtime_dir = "/run/hvd-c", of.machine = "m1", of.pid = 9, of.age_usec = 14;
        Hvd__ConfigItem ci[2] = { HVD__CONFIG_ITEM__INIT, HVD__CONFIG_ITEM__INIT };
        Hvd__ConfigItem *cip[2] = { &ci[0], &ci[1] };
        ci[0].key = "log_level", ci[0].value = "info", ci[1].key = "metrics_listen", ci[1].value = "";
        Hvd__Status s = HVD__STATUS__INIT;
        s.version = "0.1.0", s.uptime_usec = INT64_MAX, s.pid = 42, s.runtime_dir = "/run/hvd";
        s.epoch = UINT64_MAX, s.n_jobs = 1, s.jobs = &jp, s.fusion_threshold = 67108864, s.cycle_time_usec = 1000;
        s.host = "node1", s.peer_endpoint = "tcp://0.0.0.0:7100", s.n_peers = 1, s.peers = &pp;
        s.n_config = 2, s.config = cip, s.log_level = "info", s.metrics_listen = "127.0.0.1:9464";
        s.n_offers = 1, s.offers = &ofp;

        char *t = written(hvd_status_to_json(&s));
        /* exact beyond 2^53 and beyond INT64_MAX */
        ck_assert_ptr_nonnull(strstr(t, "\"epoch\": 18446744073709551615,"));
        ck_assert_ptr_nonnull(strstr(t, "\"uptime_usec\": 9223372036854775807,"));
        ck_assert_ptr_nonnull(strstr(t, "\"bytes_reduced\": 9223372036854775808,"));
        ck_assert_ptr_nonnull(strstr(t, "\"last_seen_usec\": 18446744073709551615,"));
        ck_assert_ptr_nonnull(strstr(t, "\"pid\": 4294967295,"));
        ck_assert_ptr_null(strstr(t, ": -"));
        json_t *v = parsed(t);
        static const char *const status_keys[] = { "version",          "uptime_usec",     "pid",
                                                   "runtime_dir",      "epoch",           "jobs",
                                                   "fusion_threshold", "cycle_time_usec", "host",
                                                   "peer_endpoint",    "peers",           "config",
                                                   "log_level",        "metrics_listen",  "offered_hosts" };
        assert_keys(v, status_keys, sizeof status_keys / sizeof *status_keys);
        ck_assert_str_eq(str(v, "version"), "0.1.0");
        ck_assert_double_eq(num(v, "pid"), 42);
        ck_assert_double_eq(num(v, "fusion_threshold"), 67108864);
        ck_assert_str_eq(str(v, "metrics_listen"), "127.0.0.1:9464");
        json_t *config = json_object_get(v, "config");
        static const char *const config_keys[] = { "log_level", "metrics_listen" };
        assert_keys(config, config_keys, 2);
        ck_assert_str_eq(str(config, "log_level"), "info");
        ck_assert_str_eq(str(config, "metrics_listen"), "");
        json_t *ov = json_array_get(json_object_get(v, "offered_hosts"), 0);
        static const char *const offer_keys[] = { "host", "slots", "runtime_dir", "machine", "pid", "last_heard_usec" };
        assert_keys(ov, offer_keys, 6);
        ck_assert_str_eq(str(ov, "host"), "c");
        ck_assert_double_eq(num(ov, "slots"), 2);
        ck_assert_str_eq(str(ov, "runtime_dir"), "/run/hvd-c");
        ck_assert_double_eq(num(ov, "last_heard_usec"), 14);

        json_t *jv = json_array_get(json_object_get(v, "jobs"), 0);
        static const char *const job_keys[] = {
                "job_id",
                "size",
                "state",
                "ranks",
                "cycles",
                "tensors_negotiated",
                "fused_ops",
                "bytes_reduced",
                "age_usec",
                "schedules",
                "cache_hits",
                "tensors_in_fused_ops",
                "fast_path_tensors",
                "joined_ranks",
                "abort_reason",
                "stalled",
                "relay",
                "negotiation_usec",
                "data_usec",
                "throughput_bytes_per_sec",
                "cache_hit_rate",
                "mean_fused_bytes",
                "root",
                "cross_size",
                "ranks_here",
                "launcher",
                "rank_status",
        };
        assert_keys(jv, job_keys, sizeof job_keys / sizeof *job_keys);
        ck_assert_double_eq(num(jv, "throughput_bytes_per_sec"), 0); /* NaN */
        ck_assert_double_eq(num(jv, "cache_hit_rate"), 0.25);
        ck_assert(json_is_true(json_object_get(jv, "root")));
        json_t *r1 = json_array_get(json_object_get(jv, "ranks"), 1);
        static const char *const rank_keys[] = { "rank", "local_rank", "pid", "host", "data_addr", "cross_rank" };
        assert_keys(r1, rank_keys, 6);
        ck_assert_double_eq(num(r1, "cross_rank"), 3);
        ck_assert_str_eq(str(r1, "data_addr"), "");
        json_t *rsv = json_array_get(json_object_get(jv, "rank_status"), 0);
        static const char *const rs_keys[] = { "rank",      "local",    "host",           "pid",
                                               "state",     "seen",     "last_seen_usec", "tensors_pending",
                                               "readies",   "done_seq", "busy_usec",      "local_rank",
                                               "cross_rank" };
        assert_keys(rsv, rs_keys, sizeof rs_keys / sizeof *rs_keys);
        ck_assert(json_is_true(json_object_get(rsv, "local")));
        ck_assert_str_eq(str(rsv, "state"), "running");
        json_t *pv = json_array_get(json_object_get(v, "peers"), 0);
        static const char *const peer_keys[] = { "endpoint", "state", "last_heard_usec", "rtt_usec", "direction",
                                                 "host",     "jobs" };
        assert_keys(pv, peer_keys, 7);
        ck_assert_double_eq(num(pv, "rtt_usec"), 13);
        json_decref(v);
        free(t);

        /* job ID --json: the job alone; jobs --json: the list */
        t = written(hvd_job_to_json(&j));
        v = parsed(t);
        assert_keys(v, job_keys, sizeof job_keys / sizeof *job_keys);
        json_decref(v);
        free(t);
        t = written(hvd_jobs_to_json(&s));
        v = parsed(t);
        ck_assert(json_is_array(v) && json_array_size(v) == 1);
        json_decref(v);
        free(t);
}
END_TEST

START_TEST(test_status_empty) {
        Hvd__Status s = HVD__STATUS__INIT; /* every string NULL or "" */
        char *t = written(hvd_jobs_to_json(&s));
        ck_assert_str_eq(t, "[]\n");
        free(t);
        t = written(hvd_status_to_json(&s));
        ck_assert_ptr_nonnull(strstr(t, "\"jobs\": [],"));
        ck_assert_ptr_nonnull(strstr(t, "\"peers\": [],"));
        ck_assert_ptr_nonnull(strstr(t, "\"config\": {},"));
        json_t *v = parsed(t);
        ck_assert_str_eq(str(v, "version"), "");
        ck_assert_double_eq(num(v, "epoch"), 0);
        json_decref(v);
        free(t);
        /* no rank_status unless the daemon sent some */
        Hvd__JobStatus j = HVD__JOB_STATUS__INIT;
        t = written(hvd_job_to_json(&j));
        v = parsed(t);
        ck_assert_ptr_null(json_object_get(v, "rank_status"));
        ck_assert(json_is_array(json_object_get(v, "ranks")));
        json_decref(v);
        free(t);
}
END_TEST

START_TEST(test_status_strings) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { "plain", "plain" },
                { "q\"uote \\ back/slash", "q\"uote \\ back/slash" },
                { "nl\n cr\r tab\t bs\b ff\f one\x01 us\x1f del\x7f",
                  "nl\n cr\r tab\t bs\b ff\f one\x01 us\x1f del\x7f" },
                { "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbf",
                  "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbf" },
                { "stray \xff\xfe end", "stray \xef\xbf\xbd\xef\xbf\xbd end" },
                { "cont \x80 first", "cont \xef\xbf\xbd first" },
                { "overlong \xc0\xaf \xe0\x80\xaf",
                  "overlong \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
                { "surrogate \xed\xa0\x80", "surrogate \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
                { "big \xf4\x90\x80\x80", "big \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
                { "cut \xe2\x82", "cut \xef\xbf\xbd\xef\xbf\xbd" },
                { "cut at end \xf0\x9f\x98", "cut at end \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
                /* what looks like JSON, and negative numbers, inside a string */
                { "a\": -12, \"b\": [-3]", "a\": -12, \"b\": [-3]" },
                { "-5", "-5" },
                { "\\\"-7\\", "\\\"-7\\" },
                { "", "" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                Hvd__JobStatus j = HVD__JOB_STATUS__INIT;
                j.job_id = (char *) cases[i].in;
                j.stalled = (char *) cases[i].in;
                j.size = 3;
                char *t = written(hvd_job_to_json(&j));
                json_t *v = parsed(t);
                ck_assert_msg(strcmp(str(v, "job_id"), cases[i].out) == 0, "case %zu: %s", i, t);
                ck_assert_str_eq(str(v, "stalled"), cases[i].out);
                ck_assert_double_eq(num(v, "size"), 3);
                /* only whole UTF-8 leaves the writer; control characters escaped */
                for (const char *p = t; *p; p++)
                        ck_assert_msg((unsigned char) *p >= 0x20 || *p == '\n', "case %zu: raw control byte", i);
                json_decref(v);
                free(t);
        }
}
END_TEST

START_TEST(test_status_reals) {
        Hvd__JobStatus j = HVD__JOB_STATUS__INIT;
        /* a negative exponent is no negative integer to write back as unsigned */
        static const double in[] = {
                INFINITY, -INFINITY, NAN, -2.5, 1e300, 0.1, -3.2186508178710938e-5, 1e-300, -1e-7
        };
        static const double out[] = { 0, 0, 0, -2.5, 1e300, 0.1, -3.2186508178710938e-5, 1e-300, -1e-7 };
        for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
                j.cache_hit_rate = in[i];
                char *t = written(hvd_job_to_json(&j));
                json_t *v = parsed(t);
                ck_assert_double_eq(num(v, "cache_hit_rate"), out[i]);
                json_decref(v);
                free(t);
        }
}
END_TEST

static Suite *status_json_suite(void) {
        Suite *s = suite_create("status_json");
        TCase *tc = tcase_create("json");
        tcase_add_test(tc, test_status_fields_and_numbers);
        tcase_add_test(tc, test_status_empty);
        tcase_add_test(tc, test_status_strings);
        tcase_add_test(tc, test_status_reals);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(status_json_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
