/* hostlist.c — parses hvdrun's -H lists and host files (see hostlist.h).
 * Invariants: every entry appended has a non-empty name shorter than
 * HVD_HOSTLIST_NAME_BYTES that does not start with '-' (ssh would read an
 * option) and holds no ',' (HVD_HOSTS's separator), 1 or more slots,
 * and the list's slots never add up to more than HVD_HOSTLIST_MAX_SLOTS.
 * Nothing is printed: a refusal is explained in the caller's buffer. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"

static int refuse(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *err, size_t err_len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* A plain decimal number (strtod's syntax, no blanks first, nothing after)
 * in [min, max]. */
static bool parse_number(const char *s, double min, double max, double *ret) {
        char *end;
        if (!*s || isspace((unsigned char) *s))
                return false;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || *end || !isfinite(v) || v < min || v > max)
                return false;
        *ret = v;
        return true;
}

static int append(hvd_hostlist_t *l, const char *name, long slots) {
        hvd_host_entry_t *v = realloc(l->v, (l->n + 1) * sizeof *v);
        if (!v)
                return -ENOMEM;
        l->v = v;
        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        v[l->n++] = (hvd_host_entry_t){ .name = copy, .slots = slots };
        l->total_slots += slots;
        return 0;
}

/* One "host[:slots]", "[v6addr]:slots", "host slots=N" or "host" entry of
 * len bytes (blank: nothing to add); where names the list in messages. */
static int add_entry(hvd_hostlist_t *l, const char *entry, size_t len, const char *where, char *err, size_t err_len) {
        char buf[HVD_HOSTLIST_ENTRY_MAX + 1];
        while (len > 0 && isspace((unsigned char) *entry))
                entry++, len--;
        while (len > 0 && isspace((unsigned char) entry[len - 1]))
                len--;
        if (len == 0)
                return 0;
        if (len >= sizeof buf)
                return refuse(err, err_len, "host entry '%.40s...' in %s is too long", entry, where);
        memcpy(buf, entry, len);
        buf[len] = 0;

        char *host = buf, *slots = NULL, *p;
        if (buf[0] == '[') {
                p = strchr(buf, ']');
                if (!p)
                        return refuse(err, err_len, "host entry '%s' in %s: missing ']'", buf, where);
                host = buf + 1;
                *p++ = 0;
                if (*p == ':')
                        slots = p + 1;
                else if (*p)
                        return refuse(err, err_len, "host entry '[%s]%s' in %s: expected ':SLOTS' after ']'", host, p,
                                      where);
        } else if ((p = strpbrk(buf, " \t"))) {
                *p++ = 0;
                p += strspn(p, " \t");
                if (strncmp(p, "slots=", 6) == 0)
                        slots = p + 6;
                else if (strncmp(p, "slots ", 6) == 0 || strncmp(p, "slots\t", 6) == 0)
                        slots = p + 6 + strspn(p + 6, " \t=");
                else
                        return refuse(err, err_len, "host entry '%s %s' in %s: expected 'slots=N'", buf, p, where);
        } else if ((p = strrchr(buf, ':')) && strchr(buf, ':') == p) {
                /* one colon: host:slots; more are an IPv6 address without slots */
                *p = 0;
                slots = p + 1;
        }
        double v = 1;
        if (slots && !parse_number(slots, 1, HVD_HOSTLIST_MAX_SLOTS, &v))
                return refuse(err, err_len, "host '%s' in %s: slots '%s' is not a number in 1..%d", host, where, slots,
                              HVD_HOSTLIST_MAX_SLOTS);
        if (v != floor(v))
                return refuse(err, err_len, "host '%s' in %s: slots '%s' is not a whole number", host, where, slots);
        if (!*host)
                return refuse(err, err_len, "empty host name in %s", where);
        if (*host == '-')
                return refuse(err, err_len, "host '%s' in %s: a host name cannot start with '-'", host, where);
        /* HVD_HOSTS separates the hosts with commas */
        if (strchr(host, ','))
                return refuse(err, err_len, "host '%s' in %s: a host name cannot contain ','", host, where);
        if (strlen(host) >= HVD_HOSTLIST_NAME_BYTES)
                return refuse(err, err_len, "host '%.40s...' in %s: the name is too long", host, where);
        if (l->total_slots + (long) v > HVD_HOSTLIST_MAX_SLOTS)
                return refuse(err, err_len, "more than %d slots listed in %s", HVD_HOSTLIST_MAX_SLOTS, where);
        return append(l, host, (long) v);
}

int hvd_hostlist_parse(hvd_hostlist_t *l, const char *list, char *err, size_t err_len) {
        for (const char *p = list;;) {
                size_t n = strcspn(p, ",");
                int r = add_entry(l, p, n, "-H", err, err_len);
                if (r < 0)
                        return r;
                if (!p[n])
                        return 0;
                p += n + 1;
        }
}

int hvd_hostlist_parse_file(hvd_hostlist_t *l, const char *path, char *err, size_t err_len) {
        FILE *f = fopen(path, "re");
        if (!f) {
                int r = -errno;
                snprintf(err, err_len, "cannot open host file %s: %s", path, strerror(-r));
                return r;
        }
        char line[HVD_HOSTLIST_LINE_MAX + 2];
        unsigned n = 0;
        int r = 0;
        while (r == 0 && fgets(line, sizeof line, f)) {
                n++;
                if (!strchr(line, '\n') && !feof(f)) {
                        r = refuse(err, err_len, "host file %s, line %u: the line is too long", path, n);
                        break;
                }
                line[strcspn(line, "#\n")] = 0;
                r = add_entry(l, line, strlen(line), path, err, err_len);
        }
        if (r == 0 && ferror(f)) {
                /* a directory, an I/O error: not a shorter list */
                r = errno > 0 ? -errno : -EIO;
                snprintf(err, err_len, "cannot read host file %s: %s", path, strerror(-r));
        }
        fclose(f);
        return r;
}

void hvd_hostlist_clear(hvd_hostlist_t *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->v[i].name);
        free(l->v);
        *l = (hvd_hostlist_t){ 0 };
}
