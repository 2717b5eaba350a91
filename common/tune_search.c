/* tune_search.c — the autotuner's search (see tune_search.h). The
 * continuous knobs live in [0,1]^2: the fusion threshold on a log scale
 * (log1p of 4 KiB units, so 0 = fusion off is a point of the space), the
 * cycle time on a log scale between 1 and 100 ms. A fixed knob keeps its
 * coordinate in every point. Randomness comes from the search's own
 * xoshiro256** seeded by splitmix64, so a seed fixes every point. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tune_search.h"

#define DIMS         2
#define N_SEEDS      4    /* the start and three fixed points */
#define N_CANDIDATES 1024 /* random points EI is evaluated at */
#define N_REFINE     3    /* best candidates refined by pattern search */
#define REFINE_ITERS 24
#define EI_XI        0.01 /* EI's exploration margin, on standardised scores */
#define THRESHOLD_Q  4096.0

static const double seeds[N_SEEDS - 1][DIMS] = {
        { 1.0, 0.0 },  /* 64 MiB, 1 ms */
        { 0.6, 0.5 },  /* about 1.3 MiB, 10 ms */
        { 0.85, 0.25 } /* about 15 MiB, 3.2 ms */
};

static const double length_scales[] = { 0.08, 0.15, 0.25, 0.4, 0.6, 1.0 };

struct hvd_tune_search {
        hvd_tune_search_opts_t o;
        uint64_t rng[4];
        double (*x)[DIMS]; /* [max_samples] continuous points scored */
        double *y;         /* [max_samples] their scores */
        uint32_t n;        /* continuous points scored */
        uint32_t samples;  /* every point scored, switches included */
        bool pending;
        hvd_tune_point_t pend;
        double pend_x[DIMS];
        bool have_best;
        hvd_tune_point_t best;
        double best_score;
        uint32_t next_switch;                   /* the switch phase's next switch to try */
        uint32_t confirm[HVD_TUNE_MAX_CONFIRM]; /* indices into x, y of the points measured again */
        double confirm_y[HVD_TUNE_MAX_CONFIRM]; /* their second scores */
        uint32_t n_confirm, next_confirm;
        hvd_tune_phase_t phase;
        /* the GP's work space, [max_samples^2] and [max_samples] */
        double *chol, *alpha, *kv;
};

static uint64_t splitmix64(uint64_t *s) {
        uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
        return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro(uint64_t s[4]) {
        uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return r;
}

/* Uniform in [0, 1). */
static double uniform(hvd_tune_search_t *s) {
        return (double) (xoshiro(s->rng) >> 11) * 0x1.0p-53;
}

static double threshold_norm(uint64_t t) {
        return log1p((double) t / THRESHOLD_Q) / log1p((double) HVD_TUNE_THRESHOLD_MAX_BYTES / THRESHOLD_Q);
}

static uint64_t threshold_denorm(double x) {
        double t = THRESHOLD_Q * expm1(x * log1p((double) HVD_TUNE_THRESHOLD_MAX_BYTES / THRESHOLD_Q));
        if (t < THRESHOLD_Q / 2)
                return 0;
        if (t > (double) HVD_TUNE_THRESHOLD_MAX_BYTES)
                return HVD_TUNE_THRESHOLD_MAX_BYTES;
        return (uint64_t) llround(t / 1024.0) * 1024; /* whole KiB */
}

static double cycle_norm(uint64_t c) {
        return log((double) c / (double) HVD_TUNE_CYCLE_MIN_USEC) /
               log((double) HVD_TUNE_CYCLE_MAX_USEC / (double) HVD_TUNE_CYCLE_MIN_USEC);
}

static uint64_t cycle_denorm(double x) {
        double c = (double) HVD_TUNE_CYCLE_MIN_USEC *
                   exp(x * log((double) HVD_TUNE_CYCLE_MAX_USEC / (double) HVD_TUNE_CYCLE_MIN_USEC));
        uint64_t u = (uint64_t) llround(c / 100.0) * 100; /* 0.1 ms steps */
        return u < HVD_TUNE_CYCLE_MIN_USEC   ? HVD_TUNE_CYCLE_MIN_USEC
               : u > HVD_TUNE_CYCLE_MAX_USEC ? HVD_TUNE_CYCLE_MAX_USEC
                                             : u;
}

static double clamp01(double v) {
        return v < 0 ? 0 : v > 1 ? 1 : v;
}

/* x with the fixed knobs' coordinates put back, inside [0,1]. */
static void pin(const hvd_tune_search_t *s, double x[DIMS]) {
        x[0] = s->o.fix_threshold ? threshold_norm(s->o.start.threshold_bytes) : clamp01(x[0]);
        x[1] = s->o.fix_cycle ? cycle_norm(s->o.start.cycle_usec) : clamp01(x[1]);
}

static hvd_tune_point_t point_of(const hvd_tune_search_t *s, const double x[DIMS]) {
        return (hvd_tune_point_t){
                .threshold_bytes = s->o.fix_threshold ? s->o.start.threshold_bytes : threshold_denorm(x[0]),
                .cycle_usec = s->o.fix_cycle ? s->o.start.cycle_usec : cycle_denorm(x[1]),
                .switches = s->o.start.switches,
        };
}

void hvd_tune_search_opts_init(hvd_tune_search_opts_t *o) {
        *o = (hvd_tune_search_opts_t){
                .start = { .threshold_bytes = HVD_TUNE_THRESHOLD_MAX_BYTES, .cycle_usec = HVD_TUNE_CYCLE_MIN_USEC },
                .max_samples = 20,
                .noise = 0.8,
                .seed = 1,
        };
}

int hvd_tune_search_new(const hvd_tune_search_opts_t *o, hvd_tune_search_t **ret, char *err, size_t err_len) {
        if (o->max_samples == 0 || o->max_samples > HVD_TUNE_MAX_SAMPLES) {
                snprintf(err, err_len, "the search's sample budget must be 1 to %d, not %u", HVD_TUNE_MAX_SAMPLES,
                         o->max_samples);
                return -EINVAL;
        }
        if (!isfinite(o->noise) || o->noise < 0) {
                snprintf(err, err_len, "the Gaussian process noise must be a finite number >= 0, not %g", o->noise);
                return -EINVAL;
        }
        if (o->confirm > HVD_TUNE_MAX_CONFIRM) {
                snprintf(err, err_len, "at most %d points to confirm, not %u", HVD_TUNE_MAX_CONFIRM, o->confirm);
                return -EINVAL;
        }
        if (o->n_switches > HVD_TUNE_MAX_SWITCHES) {
                snprintf(err, err_len, "at most %d switches, not %u", HVD_TUNE_MAX_SWITCHES, o->n_switches);
                return -EINVAL;
        }
        if (o->start.threshold_bytes > HVD_TUNE_THRESHOLD_MAX_BYTES && !o->fix_threshold) {
                snprintf(err, err_len, "a tuned fusion threshold starts within 0-64 MiB, not %llu bytes",
                         (unsigned long long) o->start.threshold_bytes);
                return -EINVAL;
        }
        if ((o->start.cycle_usec < HVD_TUNE_CYCLE_MIN_USEC || o->start.cycle_usec > HVD_TUNE_CYCLE_MAX_USEC) &&
            !o->fix_cycle) {
                snprintf(err, err_len, "a tuned cycle time starts within 1-100 ms, not %.3f ms",
                         (double) o->start.cycle_usec / 1e3);
                return -EINVAL;
        }
        hvd_tune_search_t *s = calloc(1, sizeof *s);
        size_t m = o->max_samples;
        if (!s || !(s->x = calloc(m, sizeof *s->x)) || !(s->y = calloc(m, sizeof *s->y)) ||
            !(s->chol = calloc(m * m, sizeof *s->chol)) || !(s->alpha = calloc(m, sizeof *s->alpha)) ||
            !(s->kv = calloc(m, sizeof *s->kv))) {
                hvd_tune_search_destroy(&s);
                snprintf(err, err_len, "out of memory");
                return -ENOMEM;
        }
        s->o = *o;
        s->o.fixed_switches &= o->n_switches >= 32 ? UINT32_MAX : (UINT32_C(1) << o->n_switches) - 1;
        uint64_t sm = o->seed;
        for (int i = 0; i < 4; i++)
                s->rng[i] = splitmix64(&sm);
        s->phase = o->fix_threshold && o->fix_cycle ? HVD_TUNE_SWITCHES : HVD_TUNE_SEARCHING;
        if (s->phase == HVD_TUNE_SWITCHES) {
                /* nothing continuous to search: the start is measured once */
                s->o.max_samples = 1;
        }
        *ret = s;
        return 0;
}

void hvd_tune_search_destroy(hvd_tune_search_t **sp) {
        hvd_tune_search_t *s = *sp;
        if (!s)
                return;
        free(s->x);
        free(s->y);
        free(s->chol);
        free(s->alpha);
        free(s->kv);
        free(s);
        *sp = NULL;
}

static double matern52(const double *a, const double *b, double l) {
        double d2 = 0;
        for (int k = 0; k < DIMS; k++)
                d2 += (a[k] - b[k]) * (a[k] - b[k]);
        double r = sqrt(5.0 * d2) / l;
        return (1 + r + r * r / 3) * exp(-r);
}

/* The GP over the scored points, standardised (mean 0, sd 1; equal scores
 * have sd 1), with length scale l: the Cholesky factor of K + noise I in
 * s->chol, K^-1 y in s->alpha. Returns the log marginal likelihood, or
 * -INFINITY when the factorisation fails. */
static double gp_fit(hvd_tune_search_t *s, const double *ys, double l) {
        uint32_t n = s->n;
        double *L = s->chol;
        for (uint32_t i = 0; i < n; i++)
                for (uint32_t k = 0; k <= i; k++) {
                        double v = matern52(s->x[i], s->x[k], l) + (i == k ? s->o.noise + 1e-8 : 0);
                        for (uint32_t p = 0; p < k; p++)
                                v -= L[i * n + p] * L[k * n + p];
                        if (i == k) {
                                if (!(v > 0))
                                        return -INFINITY;
                                L[i * n + i] = sqrt(v);
                        } else
                                L[i * n + k] = v / L[k * n + k];
                }
        /* alpha = L^-T L^-1 y */
        for (uint32_t i = 0; i < n; i++) {
                double v = ys[i];
                for (uint32_t p = 0; p < i; p++)
                        v -= L[i * n + p] * s->alpha[p];
                s->alpha[i] = v / L[i * n + i];
        }
        double fit = 0, logdet = 0;
        for (uint32_t i = 0; i < n; i++)
                fit += s->alpha[i] * s->alpha[i];
        for (uint32_t i = n; i-- > 0;) {
                double v = s->alpha[i];
                for (uint32_t p = i + 1; p < n; p++)
                        v -= L[p * n + i] * s->alpha[p];
                s->alpha[i] = v / L[i * n + i];
                logdet += log(L[i * n + i]);
        }
        return -0.5 * fit - logdet - 0.5 * n * log(2 * M_PI);
}

/* The posterior mean and standard deviation of the latent score at x. */
static void gp_predict(hvd_tune_search_t *s, const double *x, double l, double *mu, double *sd) {
        uint32_t n = s->n;
        const double *L = s->chol;
        double m = 0, vv = 0;
        for (uint32_t i = 0; i < n; i++) {
                double k = matern52(x, s->x[i], l);
                m += k * s->alpha[i];
                double v = k;
                for (uint32_t p = 0; p < i; p++)
                        v -= L[i * n + p] * s->kv[p];
                s->kv[i] = v / L[i * n + i];
                vv += s->kv[i] * s->kv[i];
        }
        *mu = m;
        *sd = 1 - vv > 1e-12 ? sqrt(1 - vv) : 1e-6;
}

static double expected_improvement(hvd_tune_search_t *s, const double *x, double l, double best) {
        double mu, sd;
        gp_predict(s, x, l, &mu, &sd);
        double imp = mu - best - EI_XI, z = imp / sd;
        return imp * 0.5 * erfc(-z / M_SQRT2) + sd * exp(-0.5 * z * z) / sqrt(2 * M_PI);
}

/* The next continuous point: a seed while there are seeds, then where
 * the expected improvement is highest (random candidates, the best of
 * them refined by a shrinking pattern search). */
static void propose(hvd_tune_search_t *s, double out[DIMS]) {
        if (s->n == 0) {
                out[0] = threshold_norm(s->o.start.threshold_bytes);
                out[1] = cycle_norm(s->o.start.cycle_usec);
                pin(s, out);
                return;
        }
        if (s->n < N_SEEDS) {
                memcpy(out, seeds[s->n - 1], sizeof seeds[0]);
                pin(s, out);
                return;
        }
        double ys[HVD_TUNE_MAX_SAMPLES], mean = 0, var = 0, best = -INFINITY;
        for (uint32_t i = 0; i < s->n; i++)
                mean += s->y[i] / s->n;
        for (uint32_t i = 0; i < s->n; i++)
                var += (s->y[i] - mean) * (s->y[i] - mean) / s->n;
        double sd = var > 0 && sqrt(var) > 1e-12 * fabs(mean) ? sqrt(var) : 1;
        for (uint32_t i = 0; i < s->n; i++) {
                ys[i] = (s->y[i] - mean) / sd;
                best = ys[i] > best ? ys[i] : best;
        }
        /* the length scale of the highest marginal likelihood */
        double l = length_scales[0], lml = -INFINITY;
        for (size_t k = 0; k < sizeof length_scales / sizeof length_scales[0]; k++) {
                double v = gp_fit(s, ys, length_scales[k]);
                if (v > lml) {
                        lml = v;
                        l = length_scales[k];
                }
        }
        if (gp_fit(s, ys, l) == -INFINITY) {
                out[0] = uniform(s);
                out[1] = uniform(s);
                pin(s, out);
                return;
        }
        double top[N_REFINE][DIMS], top_ei[N_REFINE];
        for (int k = 0; k < N_REFINE; k++)
                top_ei[k] = -INFINITY;
        for (int c = 0; c < N_CANDIDATES; c++) {
                double x[DIMS] = { uniform(s), uniform(s) };
                pin(s, x);
                double ei = expected_improvement(s, x, l, best);
                for (int k = 0; k < N_REFINE; k++)
                        if (ei > top_ei[k]) {
                                memmove(&top[k + 1], &top[k], (size_t) (N_REFINE - 1 - k) * sizeof top[0]);
                                memmove(&top_ei[k + 1], &top_ei[k], (size_t) (N_REFINE - 1 - k) * sizeof top_ei[0]);
                                memcpy(top[k], x, sizeof x);
                                top_ei[k] = ei;
                                break;
                        }
        }
        double bx[DIMS] = { top[0][0], top[0][1] }, bei = -INFINITY;
        for (int k = 0; k < N_REFINE; k++) {
                double x[DIMS], ei = top_ei[k], step = 0.05;
                memcpy(x, top[k], sizeof x);
                for (int it = 0; it < REFINE_ITERS; it++) {
                        bool moved = false;
                        for (int dim = 0; dim < DIMS; dim++)
                                for (int sign = -1; sign <= 1; sign += 2) {
                                        double y[DIMS];
                                        memcpy(y, x, sizeof y);
                                        y[dim] += sign * step;
                                        pin(s, y);
                                        double e = expected_improvement(s, y, l, best);
                                        if (e > ei) {
                                                ei = e;
                                                memcpy(x, y, sizeof y);
                                                moved = true;
                                        }
                                }
                        if (!moved)
                                step /= 2;
                }
                if (ei > bei) {
                        bei = ei;
                        memcpy(bx, x, sizeof bx);
                }
        }
        memcpy(out, bx, sizeof bx);
}

/* Whether a switch the user did not fix is still to be tried. */
static bool switches_left(const hvd_tune_search_t *s) {
        for (uint32_t k = s->next_switch; k < s->o.n_switches; k++)
                if (!(s->o.fixed_switches >> k & 1))
                        return true;
        return false;
}

/* The switch phase's next point: the best so far with the next switch the
 * user did not fix flipped; false when none is left. */
static bool next_switch_point(hvd_tune_search_t *s, hvd_tune_point_t *p) {
        while (s->next_switch < s->o.n_switches && (s->o.fixed_switches >> s->next_switch & 1))
                s->next_switch++;
        if (s->next_switch >= s->o.n_switches)
                return false;
        *p = s->best;
        p->switches ^= UINT32_C(1) << s->next_switch;
        return true;
}

/* The confirmation's points: the o.confirm best scored points of the
 * search that are distinct settings, best first. A single sample's score is
 * noisy (a loaded machine, a shared network), so the highest one is as
 * much luck as merit; measuring the few best again in a row, under the same
 * conditions, and ranking them by their mean takes most of the luck out.
 * Returns how many (fewer than 2: nothing to compare). */
static uint32_t pick_confirm(hvd_tune_search_t *s) {
        uint32_t k = 0;
        while (k < s->o.confirm) {
                int64_t pick = -1;
                for (uint32_t i = 0; i < s->n; i++) {
                        hvd_tune_point_t p = point_of(s, s->x[i]);
                        bool taken = false;
                        for (uint32_t j = 0; j < k && !taken; j++) {
                                hvd_tune_point_t q = point_of(s, s->x[s->confirm[j]]);
                                taken = p.threshold_bytes == q.threshold_bytes && p.cycle_usec == q.cycle_usec;
                        }
                        if (!taken && (pick < 0 || s->y[i] > s->y[pick]))
                                pick = i;
                }
                if (pick < 0)
                        break;
                s->confirm[k++] = (uint32_t) pick;
        }
        return k;
}

/* After the confirmation: the best is the point whose two scores have the
 * highest mean, and that mean is its score, the bar a switch must pass. */
static void settle_confirm(hvd_tune_search_t *s) {
        uint32_t win = 0;
        double win_score = -INFINITY;
        for (uint32_t k = 0; k < s->n_confirm; k++) {
                double mean = (s->y[s->confirm[k]] + s->confirm_y[k]) / 2;
                if (mean > win_score) {
                        win_score = mean;
                        win = k;
                }
        }
        s->best = point_of(s, s->x[s->confirm[win]]);
        s->best_score = win_score;
        s->have_best = true;
}

/* The phase after the continuous search: the confirmation when it has two
 * points or more, else the switches (or the end). */
static void end_search(hvd_tune_search_t *s) {
        s->n_confirm = pick_confirm(s);
        s->next_confirm = 0;
        s->phase = s->n_confirm >= 2 ? HVD_TUNE_CONFIRMING : HVD_TUNE_SWITCHES;
}

int hvd_tune_search_next(hvd_tune_search_t *s, hvd_tune_point_t *p) {
        if (s->pending) {
                *p = s->pend;
                return 0;
        }
        if (s->phase == HVD_TUNE_SEARCHING || (s->phase == HVD_TUNE_SWITCHES && s->n == 0)) {
                propose(s, s->pend_x);
                s->pend = point_of(s, s->pend_x);
        } else if (s->phase == HVD_TUNE_CONFIRMING) {
                memcpy(s->pend_x, s->x[s->confirm[s->next_confirm]], sizeof s->pend_x);
                s->pend = point_of(s, s->pend_x);
        } else if (s->phase != HVD_TUNE_SWITCHES || !next_switch_point(s, &s->pend)) {
                s->phase = HVD_TUNE_DONE;
                return -ENOENT;
        }
        s->pending = true;
        *p = s->pend;
        return 0;
}

int hvd_tune_search_report(hvd_tune_search_t *s, double score) {
        if (!s->pending || !isfinite(score))
                return -EINVAL;
        s->pending = false;
        s->samples++;
        if (s->phase == HVD_TUNE_CONFIRMING) {
                s->confirm_y[s->next_confirm++] = score;
                if (s->next_confirm == s->n_confirm) {
                        settle_confirm(s);
                        s->phase = switches_left(s) ? HVD_TUNE_SWITCHES : HVD_TUNE_DONE;
                }
                return 0;
        }
        bool continuous = s->n < s->o.max_samples && (s->phase == HVD_TUNE_SEARCHING || s->n == 0);
        if (continuous) {
                memcpy(s->x[s->n], s->pend_x, sizeof s->pend_x);
                s->y[s->n++] = score;
        } else
                s->next_switch++;
        if (!s->have_best || score > s->best_score) {
                s->have_best = true;
                s->best = s->pend;
                s->best_score = score;
        }
        if (continuous && s->n >= s->o.max_samples)
                end_search(s);
        if (s->phase == HVD_TUNE_SWITCHES && !switches_left(s))
                s->phase = HVD_TUNE_DONE;
        return 0;
}

hvd_tune_phase_t hvd_tune_search_phase(const hvd_tune_search_t *s) {
        return s->phase;
}

uint32_t hvd_tune_search_samples(const hvd_tune_search_t *s) {
        return s->samples;
}

int hvd_tune_search_best(const hvd_tune_search_t *s, hvd_tune_point_t *p, double *score) {
        if (!s->have_best)
                return -ENOENT;
        *p = s->best;
        *score = s->best_score;
        return 0;
}
