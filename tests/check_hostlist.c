/* check_hostlist.c — unit tests of hvdrun's host list parsers
 * (tools/hostlist.c): every entry form of -H and of host files parsed to
 * the exact names and slots, in order; every refusal with its exact
 * message (a name that would break HVD_HOSTS included); the limits (slots in all, name length, entry and line length)
 * at and one past their edge; a failed parse keeps what came before. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostlist.h"

typedef struct want {
        const char *name;
        long slots;
} want_t;

static void assert_list(const hvd_hostlist_t *l, const want_t *w, size_t n) {
        long total = 0;
        ck_assert_uint_eq(l->n, n);
        for (size_t i = 0; i < n; i++) {
                ck_assert_str_eq(l->v[i].name, w[i].name);
                ck_assert_int_eq(l->v[i].slots, w[i].slots);
                total += w[i].slots;
        }
        ck_assert_int_eq(l->total_slots, total);
}

/* -H list parses to exactly w. */
static void parses(const char *list, const want_t *w, size_t n) {
        hvd_hostlist_t l = { 0 };
        char err[512] = "";
        int r = hvd_hostlist_parse(&l, list, err, sizeof err);
        ck_assert_msg(r == 0, "-H '%s': %d %s", list, r, err);
        assert_list(&l, w, n);
        hvd_hostlist_clear(&l);
}

/* -H list is refused with exactly msg. */
static void refused(const char *list, const char *msg) {
        hvd_hostlist_t l = { 0 };
        char err[512] = "";
        ck_assert_int_eq(hvd_hostlist_parse(&l, list, err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, msg);
        hvd_hostlist_clear(&l);
}

static char *write_file(const char *text) {
        char *path = strdup("/tmp/hvd-check-hostlist-XXXXXX");
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        close(fd);
        return path;
}

/* A host file of text: r from the parse, the list in *l, the message in err. */
static int parse_text(const char *text, hvd_hostlist_t *l, char *err, size_t err_len, char **path) {
        *path = write_file(text);
        return hvd_hostlist_parse_file(l, *path, err, err_len);
}

START_TEST(test_hostlist_forms) {
        parses("a", (want_t[]){ { "a", 1 } }, 1);
        parses("nodeA:4,nodeB:4", (want_t[]){ { "nodeA", 4 }, { "nodeB", 4 } }, 2);
        /* blanks around entries, empty entries, a trailing comma */
        parses(" a:2 , ,b,\tc:1 ,", (want_t[]){ { "a", 2 }, { "b", 1 }, { "c", 1 } }, 3);
        /* IPv6: in brackets with slots, bare without */
        parses("[fe80::1]:3,::1,[::2]", (want_t[]){ { "fe80::1", 3 }, { "::1", 1 }, { "::2", 1 } }, 3);
        /* "host slots=N" and its spellings also work in -H */
        parses("a slots=2,b slots = 3,c\tslots\t4", (want_t[]){ { "a", 2 }, { "b", 3 }, { "c", 4 } }, 3);
        /* a repeated name stays two entries: hvdrun merges them later */
        parses("a:1,a:2,127.0.0.1:2", (want_t[]){ { "a", 1 }, { "a", 2 }, { "127.0.0.1", 2 } }, 3);
        /* strtod's syntax, as long as the number is whole */
        parses("a:2.0,b:1e1,c:+3", (want_t[]){ { "a", 2 }, { "b", 10 }, { "c", 3 } }, 3);
        parses("", NULL, 0);
        parses(",,, ,", NULL, 0);
}
END_TEST

START_TEST(test_hostlist_refusals) {
        refused("a:x", "host 'a' in -H: slots 'x' is not a number in 1..4096");
        refused("a:0", "host 'a' in -H: slots '0' is not a number in 1..4096");
        refused("a:-1", "host 'a' in -H: slots '-1' is not a number in 1..4096");
        refused("a:4097", "host 'a' in -H: slots '4097' is not a number in 1..4096");
        refused("a:", "host 'a' in -H: slots '' is not a number in 1..4096");
        refused("a: 2", "host entry 'a: 2' in -H: expected 'slots=N'");
        refused("a:1.5", "host 'a' in -H: slots '1.5' is not a whole number");
        refused("a:inf", "host 'a' in -H: slots 'inf' is not a number in 1..4096");
        refused("a:nan", "host 'a' in -H: slots 'nan' is not a number in 1..4096");
        refused("a:2x", "host 'a' in -H: slots '2x' is not a number in 1..4096");
        refused(":2", "empty host name in -H");
        refused("[]:2", "empty host name in -H");
        refused("-a:2", "host '-a' in -H: a host name cannot start with '-'");
        refused("[fe80::1", "host entry '[fe80::1' in -H: missing ']'");
        refused("[fe80::1]x", "host entry '[fe80::1]x' in -H: expected ':SLOTS' after ']'");
        refused("a b", "host entry 'a b' in -H: expected 'slots=N'");
        refused("a slots=", "host 'a' in -H: slots '' is not a number in 1..4096");
        refused("b,a:4096", "more than 4096 slots listed in -H");
        /* bare IPv6 addresses aside, a name with ':' is taken as it is */
        parses("a:b:2", (want_t[]){ { "a:b:2", 1 } }, 1);
}
END_TEST

START_TEST(test_hostlist_limits) {
        /* 4096 slots in all: at the limit, then one more */
        parses("a:4000,b:96", (want_t[]){ { "a", 4000 }, { "b", 96 } }, 2);
        refused("a:4000,b:96,c", "more than 4096 slots listed in -H");
        /* a name of 255 bytes fits, 256 do not */
        char name[300], list[600], msg[600];
        memset(name, 'n', 255);
        name[255] = 0;
        parses(name, (want_t[]){ { name, 1 } }, 1);
        snprintf(list, sizeof list, "%sn:2", name);
        snprintf(msg, sizeof msg, "host '%.40s...' in -H: the name is too long", name);
        refused(list, msg);
        /* an entry of 511 bytes is parsed (its name too long), 512 are refused unparsed */
        memset(list, 'e', 511);
        list[511] = 0;
        refused(list, "host 'eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee...' in -H: the name is too long");
        strcat(list, "e");
        refused(list, "host entry 'eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee...' in -H is too long");
        /* blanks around an entry do not count */
        char padded[2000];
        snprintf(padded, sizeof padded, "%*s%s%*s", 600, "", "a:2", 600, "");
        parses(padded, (want_t[]){ { "a", 2 } }, 1);
}
END_TEST

START_TEST(test_hostlist_failure_keeps_earlier) {
        hvd_hostlist_t l = { 0 };
        char err[512] = "";
        ck_assert_int_eq(hvd_hostlist_parse(&l, "a:2,b:3,c:x,d", err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, "host 'c' in -H: slots 'x' is not a number in 1..4096");
        assert_list(&l, (want_t[]){ { "a", 2 }, { "b", 3 } }, 2);
        /* a second list appends, and counts the slots of both */
        ck_assert_int_eq(hvd_hostlist_parse(&l, "e:4091", err, sizeof err), 0);
        assert_list(&l, (want_t[]){ { "a", 2 }, { "b", 3 }, { "e", 4091 } }, 3);
        ck_assert_int_eq(hvd_hostlist_parse(&l, "f", err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, "more than 4096 slots listed in -H");
        hvd_hostlist_clear(&l);
        ck_assert_uint_eq(l.n, 0);
        ck_assert_ptr_null(l.v);
        ck_assert_int_eq(l.total_slots, 0);
        /* a message longer than the buffer is cut, still terminated */
        char small[16];
        ck_assert_int_eq(hvd_hostlist_parse(&l, "a:x", small, sizeof small), -EINVAL);
        ck_assert_str_eq(small, "host 'a' in -H:");
        hvd_hostlist_clear(&l);
}
END_TEST

START_TEST(test_hostfile_forms) {
        hvd_hostlist_t l = { 0 };
        char err[512] = "", *path;
        int r = parse_text("# the cluster\n"
                           "nodeA slots=4\n"
                           "  nodeB:2   # two GPUs\n"
                           "\n"
                           "nodeC\n"
                           "[fe80::1]:3\n"
                           "nodeD slots = 5\r\n"
                           "\t\n"
                           "nodeE:1",
                           &l, err, sizeof err, &path);
        ck_assert_msg(r == 0, "%d %s", r, err);
        assert_list(&l,
                    (want_t[]){ { "nodeA", 4 },
                                { "nodeB", 2 },
                                { "nodeC", 1 },
                                { "fe80::1", 3 },
                                { "nodeD", 5 },
                                { "nodeE", 1 } },
                    6);
        hvd_hostlist_clear(&l);
        unlink(path);
        free(path);

        /* an empty file, and one of comments only, list nothing */
        const char *empty[] = { "", "# nothing\n\n   # here\n" };
        for (size_t i = 0; i < 2; i++) {
                ck_assert_int_eq(parse_text(empty[i], &l, err, sizeof err, &path), 0);
                ck_assert_uint_eq(l.n, 0);
                hvd_hostlist_clear(&l);
                unlink(path);
                free(path);
        }
}
END_TEST

START_TEST(test_hostfile_refusals) {
        hvd_hostlist_t l = { 0 };
        char err[1024] = "", msg[1200], *path;
        /* the bad entry names the file; the entries before it stay */
        ck_assert_int_eq(parse_text("a:2\nb slots=x\nc\n", &l, err, sizeof err, &path), -EINVAL);
        snprintf(msg, sizeof msg, "host 'b' in %s: slots 'x' is not a number in 1..4096", path);
        ck_assert_str_eq(err, msg);
        assert_list(&l, (want_t[]){ { "a", 2 } }, 1);
        hvd_hostlist_clear(&l);
        unlink(path);
        free(path);

        /* a -H list on one line is one entry here, and no host name */
        ck_assert_int_eq(parse_text("a:2,b:2\n", &l, err, sizeof err, &path), -EINVAL);
        snprintf(msg, sizeof msg, "host 'a:2,b:2' in %s: a host name cannot contain ','", path);
        ck_assert_str_eq(err, msg);
        hvd_hostlist_clear(&l);
        unlink(path);
        free(path);

        /* a line of 1022 bytes (and its newline) is read, 1023 are too long */
        char line[1100];
        memset(line, ' ', 1019);
        memcpy(line + 1019, "a:1\n", 5);
        ck_assert_int_eq(parse_text(line, &l, err, sizeof err, &path), 0);
        assert_list(&l, (want_t[]){ { "a", 1 } }, 1);
        hvd_hostlist_clear(&l);
        unlink(path);
        free(path);
        memset(line, ' ', 1020);
        memcpy(line + 1020, "a:1\n", 5);
        ck_assert_int_eq(parse_text(line, &l, err, sizeof err, &path), -EINVAL);
        snprintf(msg, sizeof msg, "host file %s, line 1: the line is too long", path);
        ck_assert_str_eq(err, msg);
        ck_assert_uint_eq(l.n, 0);
        hvd_hostlist_clear(&l);
        unlink(path);
        free(path);

        /* no such file; a directory */
        ck_assert_int_eq(hvd_hostlist_parse_file(&l, "/nonexistent/hosts", err, sizeof err), -ENOENT);
        ck_assert_str_eq(err, "cannot open host file /nonexistent/hosts: No such file or directory");
        ck_assert_int_eq(hvd_hostlist_parse_file(&l, "/tmp", err, sizeof err), -EISDIR);
        ck_assert_str_eq(err, "cannot read host file /tmp: Is a directory");
        ck_assert_uint_eq(l.n, 0);
}
END_TEST

static Suite *hostlist_suite(void) {
        Suite *s = suite_create("hostlist");
        TCase *tc = tcase_create("parse");
        tcase_add_test(tc, test_hostlist_forms);
        tcase_add_test(tc, test_hostlist_refusals);
        tcase_add_test(tc, test_hostlist_limits);
        tcase_add_test(tc, test_hostlist_failure_keeps_earlier);
        tcase_add_test(tc, test_hostfile_forms);
        tcase_add_test(tc, test_hostfile_refusals);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(hostlist_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
