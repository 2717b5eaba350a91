/* check_slurm_hostlist.c — unit tests of Slurm's compressed lists
 * (common/slurm_hostlist.c): host lists expanded to the exact names in
 * order (ranges, zero padding, several groups, suffixes, commas inside and
 * outside brackets), task counts with repeats; every refusal with its
 * message; the limits at and one past their edge. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slurm_hostlist.h"

/* The expansion of list, the names joined by ' ' into a static buffer
 * (or "ERR: message"). */
static const char *expand(const char *list, size_t max_hosts, size_t out_len) {
        static char shown[8192];
        char out[8192], err[256] = "";
        size_t n = 0;
        ck_assert_uint_le(out_len, sizeof out);
        if (hvd_slurm_hostlist_expand(list, max_hosts, out, out_len, &n, err, sizeof err) < 0) {
                ck_assert_str_ne(err, "");
                snprintf(shown, sizeof shown, "ERR: %s", err);
                return shown;
        }
        size_t o = 0;
        shown[0] = 0;
        for (size_t i = 0, at = 0; i < n; i++) {
                o += (size_t) snprintf(shown + o, sizeof shown - o, "%s%s", i ? " " : "", out + at);
                at += strlen(out + at) + 1;
        }
        return shown;
}

START_TEST(test_hostlist_forms) {
        ck_assert_str_eq(expand("node01", 64, 4096), "node01");
        ck_assert_str_eq(expand("node[01-04,07]", 64, 4096), "node01 node02 node03 node04 node07");
        ck_assert_str_eq(expand("a,b[1-3]", 64, 4096), "a b1 b2 b3");
        ck_assert_str_eq(expand("pre[1-2]suf", 64, 4096), "pre1suf pre2suf");
        ck_assert_str_eq(expand("n[08-10],login", 64, 4096), "n08 n09 n10 login");
        ck_assert_str_eq(expand("r[1-2]n[1-2]", 64, 4096), "r1n1 r1n2 r2n1 r2n2");
        ck_assert_str_eq(expand("x[9-10]", 64, 4096), "x9 x10");
        ck_assert_str_eq(expand("c[1,3],d[5],e-1.lan", 64, 4096), "c1 c3 d5 e-1.lan");
        ck_assert_str_eq(expand("[1-2]", 64, 4096), "1 2");
}
END_TEST

START_TEST(test_hostlist_refusals) {
        ck_assert_str_eq(expand("", 64, 4096), "ERR: an empty host list");
        ck_assert_str_eq(expand("a,,b", 64, 4096), "ERR: an empty host name");
        ck_assert_str_eq(expand("a,", 64, 4096), "ERR: an empty host name");
        ck_assert_str_eq(expand("n[1-3", 64, 4096), "ERR: a '[' without its ']'");
        ck_assert_str_eq(expand("n[1-[3]]", 64, 4096), "ERR: a '[' without its ']'");
        ck_assert_str_eq(expand("n1]", 64, 4096), "ERR: ']' in a host name");
        ck_assert_str_eq(expand("n[]", 64, 4096), "ERR: an empty '[]'");
        ck_assert_str_eq(expand("n[3-1]", 64, 4096), "ERR: '[3-1]' has a range that goes backwards");
        ck_assert_str_eq(expand("n[1-]", 64, 4096), "ERR: '[1-]' has a range without its end");
        ck_assert_str_eq(expand("n[a]", 64, 4096), "ERR: '[a]' is not a list of numbers and ranges A-B");
        ck_assert_str_eq(expand("n[1,,2]", 64, 4096), "ERR: '[1,,2]' is not a list of numbers and ranges A-B");
        ck_assert_str_eq(expand("n[1234567890]", 64, 4096),
                         "ERR: '[1234567890]' is not a list of numbers and ranges A-B");
        ck_assert_str_eq(expand("a:2", 64, 4096), "ERR: ':' in a host name");
        ck_assert_str_eq(expand("a b", 64, 4096), "ERR: ' ' in a host name");
}
END_TEST

START_TEST(test_hostlist_limits) {
        ck_assert_str_eq(expand("n[1-4]", 4, 4096), "n1 n2 n3 n4");
        ck_assert_str_eq(expand("n[1-5]", 4, 4096), "ERR: more than 4 hosts");
        /* a huge range stops at the limit */
        ck_assert_str_eq(expand("n[1-999999999]", 4096, 8192), "ERR: the expanded host names exceed 8192 bytes");
        ck_assert_str_eq(expand("n[1-999999999]", 100, 8192), "ERR: more than 100 hosts");
        /* "n1\0n2\0" is 6 bytes */
        ck_assert_str_eq(expand("n[1-2]", 4, 6), "n1 n2");
        ck_assert_str_eq(expand("n[1-2]", 4, 5), "ERR: the expanded host names exceed 5 bytes");
        char long_name[300];
        memset(long_name, 'a', 255);
        long_name[255] = 0;
        ck_assert_str_eq(expand(long_name, 4, 4096), long_name);
        long_name[255] = 'a';
        long_name[256] = 0;
        ck_assert_str_eq(expand(long_name, 4, 4096), "ERR: a host name longer than 255 bytes");
        ck_assert_str_eq(expand("a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]", 4, 4096), "a1b1c1d1e1f1g1h1");
        ck_assert_str_eq(expand("a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]i[1]", 4, 4096),
                         "ERR: a host name with more than 8 bracket groups");
}
END_TEST

/* The counts of list joined by ' ', or "ERR: message". */
static const char *tasks(const char *list, size_t max) {
        static char shown[4096];
        uint32_t c[64];
        size_t n = 0;
        char err[256] = "";
        ck_assert_uint_le(max, 64);
        if (hvd_slurm_tasks_expand(list, c, max, &n, err, sizeof err) < 0) {
                snprintf(shown, sizeof shown, "ERR: %s", err);
                return shown;
        }
        size_t o = 0;
        shown[0] = 0;
        for (size_t i = 0; i < n; i++)
                o += (size_t) snprintf(shown + o, sizeof shown - o, "%s%u", i ? " " : "", c[i]);
        return shown;
}

START_TEST(test_tasks_per_node) {
        ck_assert_str_eq(tasks("4", 64), "4");
        ck_assert_str_eq(tasks("2(x3),1", 64), "2 2 2 1");
        ck_assert_str_eq(tasks("1,3(x2)", 64), "1 3 3");
        ck_assert_str_eq(tasks("2(x3),1", 4), "2 2 2 1");
        ck_assert_str_eq(tasks("2(x3),1", 3), "ERR: '2(x3),1' counts more than 3 nodes");
        ck_assert_str_eq(tasks("4096", 64), "4096");
        ck_assert_str_eq(tasks("4097", 64), "ERR: '4097' is not a list of task counts such as 2(x3),1");
        ck_assert_str_eq(tasks("2048(x3)", 64), "ERR: '2048(x3)' counts more than 4096 tasks");
        static const char *const bad[] = { "", "0", "x", "2(x)", "2(x3", "2(3)", "2,", ",2", "2(x0)", "-1", "2 " };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                char want[128];
                snprintf(want, sizeof want, "ERR: '%s' is not a list of task counts such as 2(x3),1", bad[i]);
                ck_assert_str_eq(tasks(bad[i], 64), want);
        }
}
END_TEST

static Suite *slurm_suite(void) {
        Suite *s = suite_create("slurm_hostlist");
        TCase *tc = tcase_create("expand");
        tcase_add_test(tc, test_hostlist_forms);
        tcase_add_test(tc, test_hostlist_refusals);
        tcase_add_test(tc, test_hostlist_limits);
        tcase_add_test(tc, test_tasks_per_node);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(slurm_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
