/* slurm_hostlist.c — expands Slurm's compressed host lists and task
 * counts (slurm_hostlist.h). A list is split on the commas outside
 * brackets; each name expands its bracket groups left to right, one level
 * of recursion per group (at most MAX_GROUPS). Every name written is
 * checked against the limits before it is written, so a huge range fails
 * after max_hosts names, not after counting them all. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slurm_hostlist.h"

#define NAME_BYTES 256 /* a host name, expanded, is shorter */
#define MAX_GROUPS 8   /* bracket groups in one name */
#define MAX_DIGITS 9   /* a bound of a range: fits an int */

typedef struct expand {
        size_t max_hosts, out_len, used, n;
        char *out;
        char *err;
        size_t err_len;
} expand_t;

static int fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t err_len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static bool name_char(char c) {
        return isalnum((unsigned char) c) || c == '-' || c == '.' || c == '_';
}

static int emit(expand_t *x, const char *name, size_t len) {
        if (len == 0)
                return fail(x->err, x->err_len, "an empty host name");
        if (x->n == x->max_hosts)
                return fail(x->err, x->err_len, "more than %zu hosts", x->max_hosts);
        if (x->used + len + 1 > x->out_len)
                return fail(x->err, x->err_len, "the expanded host names exceed %zu bytes", x->out_len);
        memcpy(x->out + x->used, name, len);
        x->out[x->used + len] = 0;
        x->used += len + 1;
        x->n++;
        return 0;
}

/* A bound of a range at *p: digits, at most MAX_DIGITS; *width their count. */
static int parse_bound(const char **p, const char *end, long *v, int *width) {
        const char *s = *p;
        int w = 0;
        long x = 0;
        while (s < end && isdigit((unsigned char) *s) && w <= MAX_DIGITS) {
                x = x * 10 + (*s - '0');
                s++;
                w++;
        }
        if (w == 0 || w > MAX_DIGITS)
                return -EINVAL;
        *p = s;
        *v = x;
        *width = w;
        return 0;
}

static int expand_name(expand_t *x, char *name, size_t len, const char *rest, int depth);

/* One group "[a-b,c]" of the name: for each value, name + value, then the
 * rest expanded. rest points after the group's ']'. */
static int expand_group(expand_t *x, char *name, size_t len, const char *in, const char *end, const char *rest,
                        int depth) {
        const char *p = in;
        while (p < end) {
                long lo, hi;
                int wlo, whi;
                if (parse_bound(&p, end, &lo, &wlo) < 0)
                        return fail(x->err, x->err_len, "'[%.*s]' is not a list of numbers and ranges A-B",
                                    (int) (end - in), in);
                hi = lo;
                if (p < end && *p == '-' && (++p, parse_bound(&p, end, &hi, &whi) < 0))
                        return fail(x->err, x->err_len, "'[%.*s]' has a range without its end", (int) (end - in), in);
                if (hi < lo)
                        return fail(x->err, x->err_len, "'[%.*s]' has a range that goes backwards", (int) (end - in),
                                    in);
                if (p < end && *p != ',')
                        return fail(x->err, x->err_len, "'[%.*s]' is not a list of numbers and ranges A-B",
                                    (int) (end - in), in);
                if (p < end)
                        p++;
                for (long v = lo; v <= hi; v++) {
                        int n = snprintf(name + len, NAME_BYTES - len, "%0*ld", wlo, v);
                        if (n < 0 || (size_t) n >= NAME_BYTES - len)
                                return fail(x->err, x->err_len, "a host name longer than %d bytes", NAME_BYTES - 1);
                        int r = expand_name(x, name, len + (size_t) n, rest, depth + 1);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* name[0..len) is expanded; rest (up to a ',' outside brackets or the end)
 * is not yet. */
static int expand_name(expand_t *x, char *name, size_t len, const char *rest, int depth) {
        size_t lit = 0;
        while (rest[lit] && rest[lit] != ',' && rest[lit] != '[') {
                if (!name_char(rest[lit]))
                        return fail(x->err, x->err_len, "'%c' in a host name", rest[lit]);
                lit++;
        }
        if (len + lit >= NAME_BYTES)
                return fail(x->err, x->err_len, "a host name longer than %d bytes", NAME_BYTES - 1);
        memcpy(name + len, rest, lit);
        len += lit;
        rest += lit;
        if (*rest != '[')
                return emit(x, name, len);
        if (depth == MAX_GROUPS)
                return fail(x->err, x->err_len, "a host name with more than %d bracket groups", MAX_GROUPS);
        const char *close = strpbrk(rest + 1, "[]");
        if (!close || *close != ']')
                return fail(x->err, x->err_len, "a '[' without its ']'");
        if (close == rest + 1)
                return fail(x->err, x->err_len, "an empty '[]'");
        return expand_group(x, name, len, rest + 1, close, close + 1, depth);
}

/* The end of the name at s: the next ',' outside brackets, or the end. */
static const char *name_end(const char *s) {
        bool in = false;
        for (; *s; s++) {
                if (*s == '[')
                        in = true;
                else if (*s == ']')
                        in = false;
                else if (*s == ',' && !in)
                        break;
        }
        return s;
}

int hvd_slurm_hostlist_expand(const char *list, size_t max_hosts, char *out, size_t out_len, size_t *n_hosts, char *err,
                              size_t err_len) {
        expand_t x = { .max_hosts = max_hosts, .out_len = out_len, .out = out, .err = err, .err_len = err_len };
        char name[NAME_BYTES];
        if (!*list)
                return fail(err, err_len, "an empty host list");
        for (const char *s = list;;) {
                const char *end = name_end(s);
                int r = expand_name(&x, name, 0, s, 0);
                if (r < 0)
                        return r;
                /* expand_name stops at the first ',' outside brackets,
                 * or where the name has a character it refuses */
                if (!*end)
                        break;
                s = end + 1;
        }
        *n_hosts = x.n;
        return 0;
}

/* One "N" or "N(xM)" at *p, moved past it. */
static int parse_count(const char **p, uint32_t *count, uint32_t *times) {
        char *end;
        const char *s = *p;
        if (!isdigit((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        unsigned long c = strtoul(s, &end, 10), t = 1;
        if (errno || c < 1 || c > HVD_SLURM_MAX_TASKS)
                return -EINVAL;
        if (strncmp(end, "(x", 2) == 0) {
                s = end + 2;
                if (!isdigit((unsigned char) *s))
                        return -EINVAL;
                t = strtoul(s, &end, 10);
                if (errno || *end != ')' || t < 1 || t > HVD_SLURM_MAX_HOSTS)
                        return -EINVAL;
                end++;
        }
        *p = end;
        *count = (uint32_t) c;
        *times = (uint32_t) t;
        return 0;
}

int hvd_slurm_tasks_expand(const char *list, uint32_t *counts, size_t max_counts, size_t *n_counts, char *err,
                           size_t err_len) {
        size_t n = 0;
        uint64_t sum = 0;
        for (const char *p = list;;) {
                uint32_t c, t;
                if (parse_count(&p, &c, &t) < 0 || (*p && *p != ','))
                        return fail(err, err_len, "'%s' is not a list of task counts such as 2(x3),1", list);
                if (t > max_counts - n)
                        return fail(err, err_len, "'%s' counts more than %zu nodes", list, max_counts);
                sum += (uint64_t) c * t;
                if (sum > HVD_SLURM_MAX_TASKS)
                        return fail(err, err_len, "'%s' counts more than %d tasks", list, HVD_SLURM_MAX_TASKS);
                for (uint32_t i = 0; i < t; i++)
                        counts[n++] = c;
                if (!*p)
                        break;
                p++;
        }
        *n_counts = n;
        return 0;
}
