/* dataset.c — loads scikit-learn's handwritten digits through zlib, or makes
 * a synthetic data set of the same shape, and shuffles either with a seed.
 * Every rank calls these with the same arguments and gets the same rows in
 * the same order: the split into training and held-out sets agrees. */

#include "config.h"

#include "dataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_ZLIB
#include <zlib.h>
#endif

#include "rng.h"

enum { DIGITS_MAX_PIXEL = 16, LINE_BYTES = 1024 };

static int alloc_rows(dataset_t *ds, int n) {
        ds->x = calloc((size_t) n, sizeof *ds->x);
        ds->y = calloc((size_t) n, sizeof *ds->y);
        if (!ds->x || !ds->y) {
                dataset_free(ds);
                return -1;
        }
        ds->n = n;
        return 0;
}

#ifdef HAVE_ZLIB
/* Appends room for at least one more row; returns 0 or -1 (out of memory). */
static int grow(dataset_t *ds, int *cap) {
        int new_cap = *cap ? *cap * 2 : 2048;
        if (new_cap > DATASET_MAX_SAMPLES)
                new_cap = DATASET_MAX_SAMPLES;
        float(*x)[DATASET_FEATURES] = realloc(ds->x, (size_t) new_cap * sizeof *x);
        if (!x)
                return -1;
        ds->x = x;
        int *y = realloc(ds->y, (size_t) new_cap * sizeof *y);
        if (!y)
                return -1;
        ds->y = y;
        *cap = new_cap;
        return 0;
}

/* Parses one line "p0,...,p63,label" into row n. Returns 0, or -1 with a
 * message (without the file and line, which the caller adds). */
static int parse_row(char *line, dataset_t *ds, int n, char *err, size_t err_bytes) {
        char *s = line, *end;

        for (int f = 0; f <= DATASET_FEATURES; f++) {
                int max = f < DATASET_FEATURES ? DIGITS_MAX_PIXEL : DATASET_CLASSES - 1;
                errno = 0;
                long v = strtol(s, &end, 10);
                if (end == s || errno || v < 0 || v > max) {
                        snprintf(err, err_bytes, "field %d: expected %s from 0 to %d", f + 1,
                                 f < DATASET_FEATURES ? "a pixel value" : "a label", max);
                        return -1;
                }
                char want = f < DATASET_FEATURES ? ',' : '\0';
                if (want == '\0' && (*end == '\n' || *end == '\r'))
                        *end = '\0';
                if (*end != want) {
                        snprintf(err, err_bytes, "after field %d: expected %s", f + 1,
                                 want ? "',' (65 fields a line)" : "the end of the line (65 fields a line)");
                        return -1;
                }
                if (f < DATASET_FEATURES)
                        ds->x[n][f] = (float) v / DIGITS_MAX_PIXEL;
                else
                        ds->y[n] = (int) v;
                s = end + 1;
        }
        return 0;
}

/* 1 with a message in err if reading f failed (an I/O error, corrupt or truncated data), else 0. */
static int gz_failed(gzFile f, const char *path, char *err, size_t err_bytes) {
        int zerr;
        const char *msg = gzerror(f, &zerr);

        if (zerr == Z_OK || zerr == Z_STREAM_END)
                return 0;
        if (zerr == Z_ERRNO)
                snprintf(err, err_bytes, "%s: %s", path, strerror(errno));
        else
                snprintf(err, err_bytes, "%s", msg); /* zlib's message names the file */
        return 1;
}

int dataset_load_digits(const char *path, dataset_t *ds, char *err, size_t err_bytes) {
        dataset_t d = { 0 };
        char line[LINE_BYTES], why[128];
        int cap = 0, lineno = 0, r = -1;
        gzFile f;

        errno = 0;
        f = gzopen(path, "rb");
        if (!f) {
                snprintf(err, err_bytes,
                         "cannot open '%s': %s (Debian: apt-get install python3-sklearn, or --synthetic)", path,
                         errno ? strerror(errno) : "out of memory");
                return -1;
        }
        while (gzgets(f, line, sizeof line)) {
                lineno++;
                if (line[0] == '\n' || line[0] == '\r')
                        continue; /* an empty line, at the end of a file for instance */
                if (!strchr(line, '\n') && !gzeof(f)) {
                        snprintf(err, err_bytes, "%s:%d: line longer than %d bytes", path, lineno, LINE_BYTES - 1);
                        goto out;
                }
                if (!strchr(line, '\n') && gz_failed(f, path, err, err_bytes))
                        goto out; /* a last line cut short by a truncated file */
                if (d.n == DATASET_MAX_SAMPLES) {
                        snprintf(err, err_bytes, "%s: more than %d samples", path, DATASET_MAX_SAMPLES);
                        goto out;
                }
                if (d.n == cap && grow(&d, &cap) < 0) {
                        snprintf(err, err_bytes, "%s: out of memory at line %d", path, lineno);
                        goto out;
                }
                if (parse_row(line, &d, d.n, why, sizeof why) < 0) {
                        snprintf(err, err_bytes, "%s:%d: %s", path, lineno, why);
                        goto out;
                }
                d.n++;
        }
        if (gz_failed(f, path, err, err_bytes))
                goto out;
        if (d.n == 0) {
                snprintf(err, err_bytes, "%s: no samples", path);
                goto out;
        }
        *ds = d;
        d = (dataset_t){ 0 };
        r = 0;
out:
        gzclose(f);
        dataset_free(&d);
        return r;
}
#else
int dataset_load_digits(const char *path, dataset_t *ds, char *err, size_t err_bytes) {
        (void) ds;
        snprintf(err, err_bytes,
                 "reading '%s' needs zlib, and this program was built without it "
                 "(Debian: apt-get install zlib1g-dev, then configure and build again); "
                 "--synthetic trains on generated data instead",
                 path);
        return -1;
}
#endif

static void fill_normal(float *v, size_t n, double stddev, uint64_t *r) {
        for (size_t i = 0; i < n; i++)
                v[i] = (float) (rng_normal(r) * stddev);
}

int dataset_synthetic(dataset_t *ds, int n, uint64_t seed) {
        enum { HIDDEN = 16 };
        uint64_t r = seed ^ 0xda7a5e7da7a5e7ULL;
        float a[HIDDEN][DATASET_FEATURES], b[DATASET_CLASSES][HIDDEN], h[HIDDEN];
        dataset_t d = { 0 };

        if (alloc_rows(&d, n) < 0)
                return -1;
        fill_normal(&a[0][0], HIDDEN * DATASET_FEATURES, 1.0 / sqrt(DATASET_FEATURES), &r); /* tanh unsaturated */
        fill_normal(&b[0][0], DATASET_CLASSES * HIDDEN, 1.0, &r);
        fill_normal(&d.x[0][0], (size_t) n * DATASET_FEATURES, 1.0, &r);
        for (int s = 0; s < n; s++) {
                for (int i = 0; i < HIDDEN; i++) {
                        h[i] = 0;
                        for (int j = 0; j < DATASET_FEATURES; j++)
                                h[i] += a[i][j] * d.x[s][j];
                        h[i] = tanhf(h[i]);
                }
                int best = 0;
                float best_logit = -INFINITY;
                for (int c = 0; c < DATASET_CLASSES; c++) {
                        float logit = 0;
                        for (int i = 0; i < HIDDEN; i++)
                                logit += b[c][i] * h[i];
                        if (logit > best_logit) {
                                best_logit = logit;
                                best = c;
                        }
                }
                d.y[s] = best;
        }
        *ds = d;
        return 0;
}

void dataset_shuffle(dataset_t *ds, uint64_t seed) {
        uint64_t r = seed ^ 0x5b11757b11757bULL;
        float row[DATASET_FEATURES];

        for (int i = ds->n - 1; i > 0; i--) {
                int j = (int) rng_below(&r, (uint32_t) i + 1), label = ds->y[i];
                memcpy(row, ds->x[i], sizeof row);
                memcpy(ds->x[i], ds->x[j], sizeof row);
                memcpy(ds->x[j], row, sizeof row);
                ds->y[i] = ds->y[j];
                ds->y[j] = label;
        }
}

void dataset_free(dataset_t *ds) {
        if (!ds)
                return;
        free(ds->x);
        free(ds->y);
        *ds = (dataset_t){ 0 };
}
