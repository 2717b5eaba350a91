/* autotune.c — the root daemon's autotuner of a job (HVD_AUTOTUNE=1):
 * scores the job's steps from the schedules it makes, asks the search
 * (common/tune_search.c) for the next fusion threshold and cycle time,
 * then for the data plane's switches across nodes (the ring's send
 * thread, the chunk size, tried one by one), and puts each change
 * in one schedule, from which every rank applies it (the negotiator fuses
 * that schedule and the later ones with the new threshold; the workers
 * take the cycle time and the switches from it). Sends the CSV's rows to
 * rank 0 as it goes. See docs/AUTOTUNE.md.
 *
 * A step: the job's first recurring tensor (the lowest cache id scheduled
 * twice) comes round again;
 * a step's score is the bytes scheduled between two of its schedules per
 * second between them; a sample's score is the median of steps_per_sample
 * steps. The step during which a change applies is not scored.
 *
 * A job of one host with the fast path fuses its steady state on the
 * workers, without schedules: there local rank 0 measures the steps by
 * the same rule in the board's order (client/tune_meter.c) and reports
 * them with the generation each ran under; only steps of the generation
 * in force count. A change then goes out in a schedule of its own when no
 * other is going out; it is a marker in the board's log like any
 * schedule, so every rank applies it at the same place in the log. */
#include "config.h"

#include <math.h>

#include "conf.h"
#include "internal.h"
#include "tune_search.h"

#define DEFAULT_WARMUP      3
#define DEFAULT_STEPS       10
#define DEFAULT_MAX_SAMPLES 20
#define DEFAULT_NOISE       0.8
#define CONFIRM_POINTS      3 /* the search's best points measured again before settling */
/* Continuous mode: once settled, the median of the first RETUNE_SAMPLES
 * samples is the reference (not the search's best, a maximum of noisy
 * samples); samples this far below it RETUNE_SAMPLES times in a row start
 * a new search from the settled values. */
#define RETUNE_DROP    0.25
#define RETUNE_SAMPLES 3
#define MARK_IDS       4096 /* the cache ids that may mark a step */

typedef enum { AT_OFF, AT_WARMUP, AT_SEARCHING, AT_SETTLED, AT_RETUNING } at_state_t;
static const char *const at_state_names[] = { "off", "warming up", "searching", "settled", "re-tuning" };
static const char *const at_state_csv[] = { "off", "warmup", "searching", "settled", "retuning" };

struct autotune {
        at_state_t state;
        char off_why[300];
        bool checked; /* the fast-path check of the first schedule was done */
        bool fed;     /* one host with the fast path: local rank 0 measures the steps */
        uint32_t warmup, steps_per_sample, max_samples;
        double noise;
        bool fix_threshold, fix_cycle;
        uint32_t fix_switches; /* set by the user, or all on one host (nothing crosses a node) */
        hvd_tune_search_t *search;
        uint32_t retunes;
        hvd_tune_point_t cur; /* in force since applied_seq */
        uint64_t generation, applied_seq;
        bool pending; /* msg goes in the next schedule */
        Hvd__Tuning msg;
        bool have_best;
        hvd_tune_point_t best;
        double best_score;
        double ref;                   /* settled: the score a drop is measured from (0: not yet) */
        double first[RETUNE_SAMPLES]; /* settled: the samples that make ref */
        uint32_t n_first, low;
        /* steps */
        bool have_marker, in_step, mixed;
        uint32_t marker;
        uint64_t seen[MARK_IDS / 64]; /* the cache ids scheduled so far */
        uint64_t step_start_usec, step_bytes;
        double *step_scores; /* [steps_per_sample] */
        uint32_t n_steps, samples;
        bool log;             /* rank 0 keeps the CSV */
        uint64_t elastic_gen; /* the elastic generation of the job tuned now (0: not elastic) */
        Hvd__AutotuneStatus st;
        char state_text[320];
};

void autotune_free(autotune_t **tp) {
        autotune_t *t = *tp;
        if (!t)
                return;
        hvd_tune_search_destroy(&t->search);
        free(t->step_scores);
        free(t);
        *tp = NULL;
}

/* A row of the CSV to rank 0, which writes it (a local worker of the
 * root: rank 0's host is the root's). */
static void log_row(hvd_daemon_t *d, job_t *j, autotune_t *t, double score, bool best) {
        worker_t *w = j->ranks[0];
        if (!t->log || !w || w->goodbye || w->exited)
                return;
        char row[256];
        uint32_t sw = t->cur.switches;
        snprintf(row, sizeof row, "0,0,0,1,%.3f,%.4f,%.6g,%u,%s,%d,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%u,%u,%u",
                 (double) t->cur.cycle_usec / 1e3, (double) t->cur.threshold_bytes / (1024.0 * 1024.0), score,
                 t->samples, at_state_csv[t->state], best ? 1 : 0, t->applied_seq, t->generation, t->elastic_gen,
                 sw >> HVD_TUNE_SWITCH_SEND_THREAD & 1, sw >> HVD_TUNE_SWITCH_SMALL_CHUNKS & 1,
                 sw >> HVD_TUNE_SWITCH_SHM_CHUNKS & 1);
        Hvd__AutotuneRow ar = HVD__AUTOTUNE_ROW__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ar.row = row;
        env.body_case = HVD__ENVELOPE__BODY_AUTOTUNE_ROW;
        env.autotune_row = &ar;
        (void) io_send(d, d->worker_sock, w->id, w->id_len, &env);
}

/* p in force from the next schedule on (nothing when it is in force). */
static void apply(job_t *j, autotune_t *t, const hvd_tune_point_t *p) {
        if (p->threshold_bytes == t->cur.threshold_bytes && p->cycle_usec == t->cur.cycle_usec &&
            p->switches == t->cur.switches)
                return;
        t->cur = *p;
        t->generation++;
        hvd__tuning__init(&t->msg);
        t->msg.generation = t->generation;
        t->msg.fusion_threshold = p->threshold_bytes;
        t->msg.cycle_time_usec = p->cycle_usec;
        t->msg.switches = p->switches;
        t->pending = true;
        hvd_negotiator_set_fusion_threshold(j->neg, p->threshold_bytes);
}

/* The tuner of the elastic generation before j's goes on in j: its state,
 * samples and best values stay; what belongs to the old job's schedules
 * (its step marker, the step in progress, the settled reference, measured
 * at the old size) starts again; the values in force apply from j's first
 * schedule on every rank. */
static void adopt(job_t *j, autotune_t *t, uint64_t elastic_gen, bool log) {
        j->tune = t;
        t->elastic_gen = elastic_gen;
        t->log = log;
        t->checked = t->fed = t->have_marker = t->in_step = t->mixed = false;
        memset(t->seen, 0, sizeof t->seen);
        t->n_steps = 0;
        t->step_bytes = 0;
        t->applied_seq = 0;
        t->ref = 0;
        t->n_first = t->low = 0;
        hvd_tune_point_t p = t->cur;
        t->cur.cycle_usec = UINT64_MAX; /* one change even when p is the job's own: every rank, old or new, says so */
        apply(j, t, &p);
        hvd_log_info("job %s: autotune goes on from the last elastic generation: %s, %u samples, fusion threshold "
                     "%" PRIu64 " bytes, cycle time %.1f ms",
                     j->id, at_state_names[t->state], t->samples, p.threshold_bytes, (double) p.cycle_usec / 1e3);
}

void autotune_hello(hvd_daemon_t *d, job_t *j, const Hvd__AutotuneSpec *spec, uint32_t rank) {
        if (!spec->on || !job_negotiates(j))
                return;
        if (j->tune) {
                j->tune->log |= rank == 0 && spec->log;
                return;
        }
        uint64_t elastic_gen = 0;
        autotune_t *t = elastic_take_tune(d, j->id, &elastic_gen);
        if (t) {
                adopt(j, t, elastic_gen, rank == 0 && spec->log);
                return;
        }
        t = calloc(1, sizeof *t);
        uint32_t steps = spec->steps_per_sample ? spec->steps_per_sample : DEFAULT_STEPS;
        if (!t || !(t->step_scores = calloc(steps, sizeof *t->step_scores))) {
                free(t);
                hvd_log_warning("job %s: autotune: out of memory, not tuning", j->id);
                return;
        }
        t->steps_per_sample = steps;
        t->warmup = spec->warmup_samples ? spec->warmup_samples : DEFAULT_WARMUP;
        t->max_samples = spec->max_samples ? spec->max_samples : DEFAULT_MAX_SAMPLES;
        t->noise = spec->has_noise ? spec->noise : DEFAULT_NOISE;
        /* the rank's environment, or the daemon's configuration when it is
         * not the default, fixed the value */
        t->fix_threshold = spec->fixed_threshold || d->cfg.fusion_threshold_bytes != HVD_DEFAULT_FUSION_THRESHOLD;
        t->fix_cycle = spec->fixed_cycle || d->cfg.cycle_time_usec != HVD_DEFAULT_CYCLE_TIME_USEC;
        /* the switches between nodes are tried on a job of several hosts
         * only, the one inside a node where some host has several ranks */
        uint32_t all = (UINT32_C(1) << HVD_TUNE_N_SWITCHES) - 1;
        t->fix_switches = spec->fixed_switches & all;
        if (j->cross_size <= 1)
                t->fix_switches |= HVD_TUNE_SWITCHES_ACROSS;
        if (j->size <= j->cross_size)
                t->fix_switches |= HVD_TUNE_SWITCHES_INSIDE;
        t->cur = (hvd_tune_point_t){ .threshold_bytes = j->fusion_threshold,
                                     .cycle_usec = j->cycle_time_usec,
                                     .switches = spec->switches & all };
        t->state = AT_WARMUP;
        t->elastic_gen = elastic_gen;
        j->tune = t;
        /* a start the user gave, from the first schedule on (warm-up too) */
        hvd_tune_point_t start = t->cur;
        if (spec->has_start_threshold && !t->fix_threshold)
                start.threshold_bytes = spec->start_threshold;
        if (spec->start_cycle_time_usec && !t->fix_cycle)
                start.cycle_usec = spec->start_cycle_time_usec;
        apply(j, t, &start);
        t->log = rank == 0 && spec->log;
        hvd_log_info("job %s: autotune on: %u warm-up samples, %u steps a sample, %u samples of search, noise %g%s%s",
                     j->id, t->warmup, t->steps_per_sample, t->max_samples, t->noise,
                     t->fix_threshold ? ", fusion threshold fixed" : "", t->fix_cycle ? ", cycle time fixed" : "");
}

/* A new search from the current best (or the start), over what is not fixed. */
static int search_start(job_t *j, autotune_t *t) {
        hvd_tune_search_opts_t o;
        hvd_tune_search_opts_init(&o);
        o.start = t->have_best ? t->best : t->cur;
        o.fix_threshold = t->fix_threshold;
        o.fix_cycle = t->fix_cycle;
        o.n_switches = HVD_TUNE_N_SWITCHES;
        o.fixed_switches = t->fix_switches;
        if (!o.fix_threshold && o.start.threshold_bytes > HVD_TUNE_THRESHOLD_MAX_BYTES)
                o.start.threshold_bytes = HVD_TUNE_THRESHOLD_MAX_BYTES;
        if (!o.fix_cycle)
                o.start.cycle_usec =
                        HVD_MAX(HVD_TUNE_CYCLE_MIN_USEC, HVD_MIN(o.start.cycle_usec, HVD_TUNE_CYCLE_MAX_USEC));
        o.max_samples = t->max_samples;
        o.noise = t->noise;
        o.confirm = CONFIRM_POINTS;
        o.seed = 1 + t->retunes;
        char err[256];
        hvd_tune_search_destroy(&t->search);
        int r = hvd_tune_search_new(&o, &t->search, err, sizeof err);
        if (r < 0) {
                t->state = AT_OFF;
                snprintf(t->off_why, sizeof t->off_why, "%s", err);
                hvd_log_warning("job %s: autotune off: %s", j->id, err);
                return r;
        }
        t->have_best = false;
        hvd_tune_point_t p;
        if (hvd_tune_search_next(t->search, &p) == 0)
                apply(j, t, &p);
        return 0;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static void sample_done(hvd_daemon_t *d, job_t *j, autotune_t *t, double score) {
        t->samples++;
        switch (t->state) {
        case AT_WARMUP:
                log_row(d, j, t, score, false);
                if (t->samples >= t->warmup) {
                        t->state = AT_SEARCHING;
                        search_start(j, t);
                }
                return;
        case AT_SEARCHING:
        case AT_RETUNING: {
                bool best = !t->have_best || score > t->best_score;
                if (best) {
                        t->have_best = true;
                        t->best = t->cur;
                        t->best_score = score;
                }
                log_row(d, j, t, score, best);
                (void) hvd_tune_search_report(t->search, score); /* score is finite: checked by the caller */
                hvd_tune_point_t p;
                if (hvd_tune_search_next(t->search, &p) == 0) {
                        apply(j, t, &p);
                        return;
                }
                double s;
                if (hvd_tune_search_best(t->search, &p, &s) == 0) {
                        t->best = p;
                        t->best_score = s;
                }
                apply(j, t, &t->best);
                t->state = AT_SETTLED;
                t->ref = 0;
                t->n_first = t->low = 0;
                hvd_log_info("job %s: autotune settled after %u samples: fusion threshold %" PRIu64
                             " bytes, cycle time %.1f ms, switches 0x%x (%.3g bytes/s)",
                             j->id, t->samples, t->best.threshold_bytes, (double) t->best.cycle_usec / 1e3,
                             t->best.switches, t->best_score);
                return;
        }
        case AT_SETTLED:
                log_row(d, j, t, score, false);
                if (!t->ref) {
                        t->first[t->n_first++] = score;
                        if (t->n_first == RETUNE_SAMPLES) {
                                qsort(t->first, RETUNE_SAMPLES, sizeof *t->first, cmp_double);
                                t->ref = t->first[RETUNE_SAMPLES / 2];
                        }
                        return;
                }
                if (score < t->ref * (1 - RETUNE_DROP)) {
                        if (++t->low >= RETUNE_SAMPLES) {
                                hvd_log_info("job %s: autotune: the score fell to %.3g bytes/s from %.3g for %u "
                                             "samples: tuning again",
                                             j->id, score, t->ref, t->low);
                                t->retunes++;
                                t->state = AT_RETUNING;
                                search_start(j, t);
                        }
                } else
                        t->low = 0;
                return;
        case AT_OFF: return;
        }
}

/* A step of dur microseconds that moved bytes ended. */
static void step_done(hvd_daemon_t *d, job_t *j, autotune_t *t, uint64_t dur, uint64_t bytes) {
        if (!dur || !bytes)
                return;
        double score = (double) bytes * 1e6 / (double) dur;
        if (!isfinite(score))
                return;
        t->step_scores[t->n_steps++] = score;
        if (t->n_steps < t->steps_per_sample)
                return;
        qsort(t->step_scores, t->n_steps, sizeof *t->step_scores, cmp_double);
        double med = t->n_steps % 2 ? t->step_scores[t->n_steps / 2]
                                    : (t->step_scores[t->n_steps / 2 - 1] + t->step_scores[t->n_steps / 2]) / 2;
        t->n_steps = 0;
        sample_done(d, j, t, med);
}

/* The first schedule: a job of one host whose ranks share the board fuses
 * its steady state on the workers, where the daemon sees no schedules:
 * its local rank 0 measures the steps. */
static void check_fast_path(job_t *j, autotune_t *t) {
        t->checked = true;
        if (j->role != JOB_SINGLE || j->local_size < 2)
                return;
        for (uint32_t r = 0; r < j->size; r++)
                if (j->ranks[r] && !j->ranks[r]->board)
                        return;
        t->fed = true;
        hvd_log_info("job %s: autotune: one host with the fast path: rank 0 measures the steps", j->id);
}

bool autotune_wants_schedule(const job_t *j) {
        const autotune_t *t = j->tune;
        return t && t->fed && t->pending && t->state != AT_OFF;
}

void autotune_worker_steps(hvd_daemon_t *d, job_t *j, const Hvd__Done *dn) {
        autotune_t *t = j->tune;
        if (!t || !t->fed || t->state == AT_OFF)
                return;
        /* a step of an earlier generation ran under other settings; once a
         * sample ends and a change is made, the rest of the report is */
        for (size_t i = 0; i < dn->n_tune_step_usec && t->state != AT_OFF; i++)
                if (!t->pending && dn->tune_step_generation[i] == t->generation)
                        step_done(d, j, t, dn->tune_step_usec[i], dn->tune_step_bytes[i]);
}

/* Schedule s, of bytes, counts for the steps the root measures. */
static void schedule_steps(hvd_daemon_t *d, job_t *j, autotune_t *t, const Hvd__Schedule *s, uint64_t bytes) {
        /* the step: the job's lowest cache id that came round again marks
         * where one begins (a tensor negotiated once, as a state's sync
         * before training, marks nothing) */
        uint32_t low = UINT32_MAX;
        bool marked = false;
        for (size_t o = 0; o < s->n_ops; o++)
                for (size_t e = 0; e < s->ops[o]->n_entries; e++) {
                        uint32_t id = s->ops[o]->entries[e]->id;
                        if (id == HVD_NEGOTIATOR_NO_ID)
                                continue;
                        marked |= t->have_marker && id == t->marker;
                        if (id >= MARK_IDS)
                                continue;
                        if (t->seen[id / 64] & (UINT64_C(1) << id % 64))
                                low = HVD_MIN(low, id);
                        t->seen[id / 64] |= UINT64_C(1) << id % 64;
                }
        if (low != UINT32_MAX && (!t->have_marker || low < t->marker)) {
                t->have_marker = true;
                t->marker = low;
                t->in_step = false;
                marked = true;
        }
        uint64_t now = hvd_now_usec();
        if (marked) {
                if (t->in_step && !t->mixed)
                        step_done(d, j, t, now - t->step_start_usec, t->step_bytes);
                t->mixed = false;
                t->in_step = true;
                t->step_start_usec = now;
                t->step_bytes = 0;
        }
        t->step_bytes += bytes;
}

bool autotune_schedule(hvd_daemon_t *d, job_t *j, Hvd__Schedule *s, uint64_t bytes) {
        autotune_t *t = j->tune;
        if (!t)
                return false;
        if (!t->checked)
                check_fast_path(j, t);
        if (t->state == AT_OFF)
                return false;
        if (!t->fed)
                schedule_steps(d, j, t, s, bytes);
        if (!t->pending)
                return false;
        t->pending = false;
        t->mixed = true; /* the step in progress ran partly under the old settings */
        t->applied_seq = s->seq;
        s->tuning = &t->msg;
        hvd_log_info("job %s: autotune: change %" PRIu64 " from schedule %" PRIu64 ": fusion threshold %" PRIu64
                     " bytes, cycle time %.1f ms, switches 0x%x",
                     j->id, t->generation, s->seq, t->cur.threshold_bytes, (double) t->cur.cycle_usec / 1e3,
                     t->cur.switches);
        return true;
}

Hvd__AutotuneStatus *autotune_status(const job_t *j) {
        autotune_t *t = j->tune;
        if (!t)
                return NULL;
        Hvd__AutotuneStatus *st = &t->st;
        hvd__autotune_status__init(st);
        if (t->state == AT_OFF)
                snprintf(t->state_text, sizeof t->state_text, "off: %s", t->off_why);
        else
                snprintf(t->state_text, sizeof t->state_text, "%s", at_state_names[t->state]);
        st->state = t->state_text;
        st->samples = t->samples;
        st->fusion_threshold = t->cur.threshold_bytes;
        st->cycle_time_usec = t->cur.cycle_usec;
        st->switches = t->cur.switches;
        st->fixed_switches = t->fix_switches;
        if (t->have_best) {
                st->best_fusion_threshold = t->best.threshold_bytes;
                st->best_cycle_time_usec = t->best.cycle_usec;
                st->best_switches = t->best.switches;
                st->best_score = t->best_score;
        }
        st->generation = t->generation;
        st->applied_seq = t->applied_seq;
        return st;
}
