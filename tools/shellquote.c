/* shellquote.c — growing strings and shell quoting for hvdrun (see
 * shellquote.h). Invariant: a word quoted by hvd_strbuf_quoted() reads
 * back as the same bytes in any POSIX shell, whatever it holds. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shellquote.h"
#include "util.h"

void hvd_strbuf_add(hvd_strbuf_t *b, const char *s, size_t n) {
        if (b->oom)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = HVD_MAX(b->cap * 2, b->len + n + 64);
                char *p = realloc(b->s, cap);
                if (!p) {
                        b->oom = true;
                        return;
                }
                b->s = p;
                b->cap = cap;
        }
        memcpy(b->s + b->len, s, n);
        b->len += n;
        b->s[b->len] = 0;
}

void hvd_strbuf_puts(hvd_strbuf_t *b, const char *s) {
        hvd_strbuf_add(b, s, strlen(s));
}

void hvd_strbuf_quoted(hvd_strbuf_t *b, const char *s) {
        bool plain = *s != 0;
        for (const char *p = s; *p && plain; p++)
                plain = isalnum((unsigned char) *p) || strchr("_@%+=:,./-", *p);
        if (plain) {
                hvd_strbuf_puts(b, s);
                return;
        }
        hvd_strbuf_add(b, "'", 1);
        for (const char *p = s; *p; p++) {
                if (*p == '\'')
                        hvd_strbuf_puts(b, "'\\''");
                else
                        hvd_strbuf_add(b, p, 1);
        }
        hvd_strbuf_add(b, "'", 1);
}

void hvd_strbuf_quoted_shown(hvd_strbuf_t *b, const char *s) {
        bool ctl = false;
        for (const char *p = s; *p && !ctl; p++)
                ctl = iscntrl((unsigned char) *p);
        if (!ctl) {
                hvd_strbuf_quoted(b, s);
                return;
        }
        hvd_strbuf_puts(b, "$'");
        for (const char *p = s; *p; p++) {
                char esc[8];
                if (*p == '\\' || *p == '\'')
                        snprintf(esc, sizeof esc, "\\%c", *p);
                else if (*p == '\n')
                        snprintf(esc, sizeof esc, "\\n");
                else if (*p == '\t')
                        snprintf(esc, sizeof esc, "\\t");
                else if (iscntrl((unsigned char) *p))
                        snprintf(esc, sizeof esc, "\\%03o", (unsigned) (unsigned char) *p);
                else
                        snprintf(esc, sizeof esc, "%c", *p);
                hvd_strbuf_puts(b, esc);
        }
        hvd_strbuf_puts(b, "'");
}

char *hvd_strbuf_take(hvd_strbuf_t *b) {
        bool oom = b->oom;
        char *s = b->s;
        *b = (hvd_strbuf_t){ 0 };
        if (oom) {
                free(s);
                return NULL;
        }
        return s ? s : strdup("");
}
