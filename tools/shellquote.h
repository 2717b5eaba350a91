/* shellquote.h — hvdrun's command lines: a growing string, and words quoted
 * for a POSIX shell (what ssh hands the remote login shell) or for showing
 * (--dry-run). An allocation failure is remembered and reported once, by
 * hvd_strbuf_take(). */
#ifndef HVD_SHELLQUOTE_H
#define HVD_SHELLQUOTE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct hvd_strbuf {
        char *s; /* owned; NUL-terminated once anything was added */
        size_t len, cap;
        bool oom;
} hvd_strbuf_t;

/* Append n bytes of s / the string s. */
void hvd_strbuf_add(hvd_strbuf_t *b, const char *s, size_t n);
void hvd_strbuf_puts(hvd_strbuf_t *b, const char *s);

/* Appends s as one word of a POSIX shell command line: as it is when it
 * holds only characters no shell treats specially, else in single quotes
 * ('\'' for a quote). The shell reads back exactly s. */
void hvd_strbuf_quoted(hvd_strbuf_t *b, const char *s);

/* As hvd_strbuf_quoted(), for a command line shown to a user: a word with
 * control characters (a newline) goes in $'...' (bash, zsh, ksh), so the
 * command stays on one line. */
void hvd_strbuf_quoted_shown(hvd_strbuf_t *b, const char *s);

/* Returns the string ("" when nothing was added; free it), or NULL when an
 * allocation failed. b is empty after, and may be reused. */
char *hvd_strbuf_take(hvd_strbuf_t *b);

#endif
