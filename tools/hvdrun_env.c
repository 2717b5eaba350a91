/* hvdrun_env.c — the environments hvdrun gives its workers: a NULL-terminated
 * list of NAME=VALUE strings, a later NAME replacing an earlier one; and the
 * lookup of PROGRAM in PATH, done before any fork, so that a missing program
 * is reported once, with the shell's exit codes (126, 127). Every string in a
 * list is owned by it. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hvdrun_run.h"

void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

void env_list_free(env_list_t *e) {
        if (!e)
                return;
        for (size_t i = 0; i < e->n; i++)
                free(e->v[i]);
        free(e->v);
        *e = (env_list_t){ 0 };
}

static int env_list_push(env_list_t *e, char *owned) {
        if (e->n + 2 > e->cap) {
                size_t cap = e->cap ? e->cap * 2 : 64;
                char **v = realloc(e->v, cap * sizeof *v);
                if (!v) {
                        free(owned);
                        return -ENOMEM;
                }
                e->v = v;
                e->cap = cap;
        }
        e->v[e->n++] = owned;
        e->v[e->n] = NULL;
        return 0;
}

static ssize_t env_list_find(const env_list_t *e, const char *name, size_t name_len) {
        for (size_t i = 0; i < e->n; i++)
                if (strncmp(e->v[i], name, name_len) == 0 && e->v[i][name_len] == '=')
                        return (ssize_t) i;
        return -1;
}

/* Sets "NAME=VALUE" (entry holds both), replacing an existing NAME. Takes entry. */
int env_list_put(env_list_t *e, char *entry) {
        if (!entry)
                return -ENOMEM;
        size_t name_len = strcspn(entry, "=");
        ssize_t i = env_list_find(e, entry, name_len);
        if (i >= 0) {
                free(e->v[i]);
                e->v[i] = entry;
                return 0;
        }
        return env_list_push(e, entry);
}

int env_list_set(env_list_t *e, const char *name, const char *fmt, ...) {
        char *value = NULL, *entry = NULL;
        va_list ap;
        va_start(ap, fmt);
        int k = vasprintf(&value, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        k = asprintf(&entry, "%s=%s", name, value);
        free(value);
        if (k < 0)
                return -ENOMEM;
        return env_list_put(e, entry);
}

int env_list_copy(env_list_t *dst, char *const *src) {
        if (!dst->v) {
                /* an empty environment is still a NULL-terminated array */
                if (!(dst->v = calloc(64, sizeof *dst->v)))
                        return -ENOMEM;
                dst->cap = 64;
        }
        for (size_t i = 0; src && src[i]; i++) {
                char *s = strdup(src[i]);
                if (!s || env_list_push(dst, s) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* PATH lookup done before fork, so a missing PROGRAM is reported once, clearly.
 * Returns 0 and a malloc'd path, or 126 / 127 (the shell's codes) after a message. */
int resolve_program(const char *prog, const char *path_env, char **ret) {
        if (strchr(prog, '/')) {
                if (access(prog, X_OK) < 0) {
                        fprintf(stderr, "hvdrun: cannot run %s: %s\n", prog, strerror(errno));
                        return errno == ENOENT ? 127 : 126;
                }
                *ret = strdup(prog);
                return *ret ? 0 : 1;
        }
        const char *p = path_env && *path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
        bool denied = false;
        for (;;) {
                size_t n = strcspn(p, ":");
                char *cand = NULL;
                /* an empty PATH entry is the current directory */
                if ((n ? asprintf(&cand, "%.*s/%s", (int) n, p, prog) : asprintf(&cand, "./%s", prog)) < 0)
                        return 1;
                struct stat st;
                if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
                        if (access(cand, X_OK) == 0) {
                                *ret = cand;
                                return 0;
                        }
                        denied = true;
                }
                free(cand);
                if (!p[n])
                        break;
                p += n + 1;
        }
        fprintf(stderr, "hvdrun: %s: %s\n", prog, denied ? "permission denied" : "command not found");
        return denied ? 126 : 127;
}
