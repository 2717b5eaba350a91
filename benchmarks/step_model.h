/* step_model.h — the gradient list of one model for the training-step
 * benchmarks (bench_step.c, mpi_step.c): read from a tsv of
 * `name<TAB>shape<TAB>numel` rows in parameter (forward) order, '#' comments
 * and a `name` header skipped. Backward makes gradients ready in reverse
 * order, so the benchmarks walk the list from the end. Header-only, so that
 * the MPI peer (built by mpicc outside libtool) shares it. */
#ifndef HVD_BENCH_STEP_MODEL_H
#define HVD_BENCH_STEP_MODEL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEP_MAX_NDIM 8

typedef struct step_tensor {
        char *name;
        int ndim;
        int64_t shape[STEP_MAX_NDIM];
        size_t numel;
} step_tensor_t;

typedef struct step_model {
        step_tensor_t *t;
        size_t n;
        size_t total_numel;
} step_model_t;

static inline void step_model_free(step_model_t *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n; i++)
                free(m->t[i].name);
        free(m->t);
        m->t = NULL;
        m->n = m->total_numel = 0;
}

/* 0 on success; -errno with a message on stderr otherwise. */
static inline int step_model_load(const char *path, step_model_t *m) {
        FILE *f = fopen(path, "r");
        if (!f) {
                int e = errno;
                fprintf(stderr, "bench: cannot open %s: %s\n", path, strerror(e));
                return -e;
        }
        memset(m, 0, sizeof *m);
        size_t cap = 0;
        char line[4096];
        int lineno = 0;
        while (fgets(line, sizeof line, f)) {
                lineno++;
                line[strcspn(line, "\r\n")] = 0;
                if (!line[0] || line[0] == '#' || !strncmp(line, "name\t", 5))
                        continue;
                char *name = strtok(line, "\t"), *shape = strtok(NULL, "\t"), *numel = strtok(NULL, "\t");
                if (!name || !shape || !numel)
                        goto bad;
                if (m->n == cap) {
                        cap = cap ? cap * 2 : 64;
                        step_tensor_t *t = realloc(m->t, cap * sizeof *t);
                        if (!t) {
                                fclose(f);
                                step_model_free(m);
                                return -ENOMEM;
                        }
                        m->t = t;
                }
                step_tensor_t *t = &m->t[m->n];
                memset(t, 0, sizeof *t);
                size_t prod = 1;
                for (char *s = shape; *s;) {
                        char *end;
                        long long d = strtoll(s, &end, 10);
                        if (end == s || d < 0 || t->ndim == STEP_MAX_NDIM)
                                goto bad;
                        t->shape[t->ndim++] = d;
                        prod *= (size_t) d;
                        s = *end == 'x' ? end + 1 : end;
                        if (*end && *end != 'x')
                                goto bad;
                }
                t->numel = strtoull(numel, NULL, 10);
                if (t->numel != prod)
                        goto bad;
                if (!(t->name = strdup(name))) {
                        fclose(f);
                        step_model_free(m);
                        return -ENOMEM;
                }
                m->total_numel += t->numel;
                m->n++;
        }
        fclose(f);
        if (!m->n) {
                fprintf(stderr, "bench: %s lists no tensors\n", path);
                return -EINVAL;
        }
        return 0;
bad:
        fprintf(stderr, "bench: %s:%d: expected 'name<TAB>DxDx..<TAB>numel' with numel the product\n", path, lineno);
        fclose(f);
        step_model_free(m);
        return -EINVAL;
}

/* "resnet50" from ".../resnet50.tsv", into buf. */
static inline const char *step_model_label(const char *path, char *buf, size_t len) {
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        snprintf(buf, len, "%s", b);
        char *dot = strrchr(buf, '.');
        if (dot)
                *dot = 0;
        return buf;
}

static inline double step_now_sec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static inline int step_cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

/* Median of n step times (sorts in place). */
static inline double step_median(double *v, int n) {
        qsort(v, (size_t) n, sizeof *v, step_cmp_double);
        return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
