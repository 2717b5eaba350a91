/* check_shellquote.c — unit tests of hvdrun's shell quoting
 * (tools/shellquote.c): every word, with every byte a shell treats
 * specially (quotes, $, `, globs, ~, #, blanks, newlines, control
 * characters, every byte 1..255), read back exactly by /bin/sh; plain words
 * left unquoted; the words shown to users read back exactly by bash and
 * hold no control character; the string's take() on empty and failed
 * buffers. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shellquote.h"

/* What SHELL -c COMMAND writes on its stdout (free it). */
static char *run(const char *shell, const char *command) {
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                dup2(p[1], 1);
                close(p[0]);
                close(p[1]);
                execl(shell, shell, "-c", command, (char *) NULL);
                _exit(127);
        }
        close(p[1]);
        size_t cap = 1024, len = 0;
        char *out = malloc(cap);
        ssize_t k;
        while ((k = read(p[0], out + len, cap - len - 1)) > 0) {
                len += (size_t) k;
                if (len + 1 == cap)
                        out = realloc(out, cap *= 2);
        }
        close(p[0]);
        out[len] = 0;
        int st;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s -c '%s' failed", shell, command);
        return out;
}

static char *quoted(const char *word, bool shown) {
        hvd_strbuf_t b = { 0 };
        hvd_strbuf_puts(&b, "printf %s ");
        (shown ? hvd_strbuf_quoted_shown : hvd_strbuf_quoted)(&b, word);
        char *s = hvd_strbuf_take(&b);
        ck_assert_ptr_nonnull(s);
        return s;
}

static const char *const words[] = {
        "plain",   "a b",         "it's",
        "\"dq\"",  "back\\slash", "$HOME",
        "${HOME}", "`id`",        "$(id)",
        "a;b",     "a&&b",        "a|b",
        "a>b",     "<a",          "*",
        "?",       "[ab]",        "{a,b}",
        "~",       "~root",       "#x",
        "!x",      "a\nb",        "tab\there",
        "cr\r",    "\x01\x7f",    "caf\xc3\xa9 \xe2\x82\xac",
        "-n",      "--",          "=",
        "A=b",     "a'b'c",       "'",
        "''",      "%",           "a\\'b",
        "   ",     "trailing\\",  "$'x'",
        "\\n",
};

START_TEST(test_shellquote_round_trip) {
        for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
                char *cmd = quoted(words[i], false), *out = run("/bin/sh", cmd);
                ck_assert_msg(strcmp(out, words[i]) == 0, "/bin/sh read '%s' back as '%s' from %s", words[i], out, cmd);
                free(out);
                free(cmd);
        }
        /* every byte but NUL, in one word */
        char all[256];
        for (int c = 1; c < 256; c++)
                all[c - 1] = (char) c;
        all[255] = 0;
        char *cmd = quoted(all, false), *out = run("/bin/sh", cmd);
        ck_assert_mem_eq(out, all, 256);
        free(out);
        free(cmd);
}
END_TEST

START_TEST(test_shellquote_plain_words) {
        /* words a shell reads as they are stay unquoted */
        static const char *const plain[] = {
                "python3", "/usr/bin/x", "HVD_RANK=3", "a-b_c.d", "host:7100", "a,b", "@x%"
        };
        for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
                hvd_strbuf_t b = { 0 };
                hvd_strbuf_quoted(&b, plain[i]);
                char *s = hvd_strbuf_take(&b);
                ck_assert_str_eq(s, plain[i]);
                free(s);
        }
        hvd_strbuf_t b = { 0 };
        hvd_strbuf_quoted(&b, "");
        hvd_strbuf_puts(&b, " ");
        hvd_strbuf_quoted(&b, "it's");
        char *s = hvd_strbuf_take(&b);
        ck_assert_str_eq(s, "'' 'it'\\''s'");
        free(s);
}
END_TEST

START_TEST(test_shellquote_shown) {
        if (access("/bin/bash", X_OK) != 0)
                return; /* $'...' is bash's (and zsh's, ksh's) */
        for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
                char *cmd = quoted(words[i], true), *out = run("/bin/bash", cmd);
                ck_assert_msg(strcmp(out, words[i]) == 0, "bash read '%s' back as '%s' from %s", words[i], out, cmd);
                for (const char *p = cmd; *p; p++)
                        ck_assert_msg((unsigned char) *p >= 0x20 && *p != 0x7f, "a control byte shown in %s", cmd);
                free(out);
                free(cmd);
        }
        hvd_strbuf_t b = { 0 };
        hvd_strbuf_quoted_shown(&b, "a\nb'\\\x01");
        char *s = hvd_strbuf_take(&b);
        ck_assert_str_eq(s, "$'a\\nb\\'\\\\\\001'");
        free(s);
}
END_TEST

START_TEST(test_strbuf_take) {
        hvd_strbuf_t b = { 0 };
        char *s = hvd_strbuf_take(&b);
        ck_assert_str_eq(s, "");
        free(s);
        for (int i = 0; i < 1000; i++)
                hvd_strbuf_add(&b, "0123456789", i % 10);
        s = hvd_strbuf_take(&b);
        ck_assert_uint_eq(strlen(s), 4500);
        ck_assert_ptr_null(b.s);
        free(s);
        /* a failed allocation is reported once, by take */
        hvd_strbuf_puts(&b, "x");
        b.oom = true;
        hvd_strbuf_puts(&b, "y");
        ck_assert_ptr_null(hvd_strbuf_take(&b));
        ck_assert(!b.oom);
        s = hvd_strbuf_take(&b);
        ck_assert_str_eq(s, "");
        free(s);
}
END_TEST

static Suite *shellquote_suite(void) {
        Suite *s = suite_create("shellquote");
        TCase *tc = tcase_create("quote");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_shellquote_round_trip);
        tcase_add_test(tc, test_shellquote_plain_words);
        tcase_add_test(tc, test_shellquote_shown);
        tcase_add_test(tc, test_strbuf_take);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(shellquote_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
