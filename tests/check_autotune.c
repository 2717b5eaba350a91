/* check_autotune.c — unit tests of the autotuner's search
 * (common/tune_search.c) on synthetic score surfaces whose optimum is
 * known: a smooth bowl, a narrow ridge, a noisy bowl; fixed knobs never
 * move; the best few points are measured again and ranked by their mean,
 * which picks better than the single highest score on a very noisy
 * surface; hvd's switches are tried one by one after the search; a seed
 * fixes the sequence; degenerate input gets an error. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tune_search.h"

#define MIB (UINT64_C(1) << 20)

/* A point's coordinates as the search sees them: log-scaled to [0, 1]. */
static double tx(uint64_t t) {
        return log1p((double) t / 4096.0) / log1p((double) (64 * MIB) / 4096.0);
}

static double cx(uint64_t c) {
        return log((double) c / 1000.0) / log(100.0);
}

/* A bowl peaking at 8 MiB, 5 ms (score 100 there). */
static double bowl(const hvd_tune_point_t *p) {
        double a = tx(p->threshold_bytes) - tx(8 * MIB), b = cx(p->cycle_usec) - cx(5000);
        return 100.0 * exp(-(a * a + b * b) / 0.08);
}

/* A narrow diagonal ridge whose height grows towards small cycle times. */
static double ridge(const hvd_tune_point_t *p) {
        double a = tx(p->threshold_bytes), b = cx(p->cycle_usec);
        double off = a - (0.5 + 0.5 * b); /* the crest: a = 0.5 + b / 2 */
        return 100.0 * exp(-off * off / 0.005) * (1.0 - 0.5 * b);
}

static uint64_t noise_state = 12345;

/* The bowl with +-40 % multiplicative noise: a 10-step sample's spread at
 * one setting on a loaded machine (docs/AUTOTUNE.md). */
static double very_noisy_bowl(const hvd_tune_point_t *p) {
        noise_state = noise_state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        double u = (double) (noise_state >> 11) * 0x1.0p-53;
        return bowl(p) * (0.6 + 0.8 * u);
}

/* The bowl with +-5 % multiplicative noise of the test's own generator. */
static double noisy_bowl(const hvd_tune_point_t *p) {
        noise_state = noise_state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        double u = (double) (noise_state >> 11) * 0x1.0p-53;
        return bowl(p) * (0.95 + 0.1 * u);
}

/* Runs a search to its end over f; returns the best point's true score
 * (bowl or ridge), and the number of points scored in *n. */
static double run(hvd_tune_search_opts_t *o, double (*f)(const hvd_tune_point_t *),
                  double (*truth)(const hvd_tune_point_t *), uint32_t *n, hvd_tune_point_t *bestp) {
        hvd_tune_search_t *s = NULL;
        char err[256];
        ck_assert_int_eq(hvd_tune_search_new(o, &s, err, sizeof err), 0);
        hvd_tune_point_t p;
        uint32_t k = 0;
        while (hvd_tune_search_next(s, &p) == 0) {
                ck_assert_uint_le(p.threshold_bytes, 64 * MIB);
                ck_assert_uint_ge(p.cycle_usec, 1000);
                ck_assert_uint_le(p.cycle_usec, 100000);
                ck_assert_int_eq(hvd_tune_search_report(s, f(&p)), 0);
                k++;
                ck_assert_uint_le(k, o->max_samples + o->confirm + o->n_switches);
        }
        ck_assert_int_eq(hvd_tune_search_phase(s), HVD_TUNE_DONE);
        ck_assert_uint_eq(hvd_tune_search_samples(s), k);
        double score;
        ck_assert_int_eq(hvd_tune_search_best(s, bestp, &score), 0);
        hvd_tune_search_destroy(&s);
        ck_assert_ptr_null(s);
        *n = k;
        return truth(bestp);
}

/* From fusion off and a 10 ms cycle, Horovod's 20 samples reach 95 % of
 * the bowl's peak, whatever the seed. */
START_TEST(test_finds_bowl_optimum) {
        for (uint64_t seed = 1; seed <= 5; seed++) {
                hvd_tune_search_opts_t o;
                hvd_tune_search_opts_init(&o);
                o.start = (hvd_tune_point_t){ .threshold_bytes = 0, .cycle_usec = 10000 };
                o.seed = seed;
                uint32_t n;
                hvd_tune_point_t b;
                double got = run(&o, bowl, bowl, &n, &b);
                ck_assert_uint_eq(n, 20);
                ck_assert_msg(got >= 95.0, "seed %llu: best %.1f at %llu bytes, %llu us", (unsigned long long) seed,
                              got, (unsigned long long) b.threshold_bytes, (unsigned long long) b.cycle_usec);
        }
}
END_TEST

/* The ridge is narrow (a twentieth of the space wide) and falls from 100
 * to 50 along its crest: 30 samples find the crest, in its upper part. */
START_TEST(test_finds_ridge) {
        for (uint64_t seed = 1; seed <= 5; seed++) {
                hvd_tune_search_opts_t o;
                hvd_tune_search_opts_init(&o);
                o.start = (hvd_tune_point_t){ .threshold_bytes = 0, .cycle_usec = 10000 };
                o.max_samples = 30;
                o.seed = seed;
                uint32_t n;
                hvd_tune_point_t b;
                double got = run(&o, ridge, ridge, &n, &b);
                double off = tx(b.threshold_bytes) - (0.5 + 0.5 * cx(b.cycle_usec));
                ck_assert_msg(got >= 65.0 && fabs(off) < 0.1, "seed %llu: best %.1f, %.3f off the crest",
                              (unsigned long long) seed, got, off);
        }
}
END_TEST

/* Noisy scores: the point the search calls best is truly within 90 % of
 * the peak. */
START_TEST(test_noisy_bowl) {
        for (uint64_t seed = 1; seed <= 5; seed++) {
                hvd_tune_search_opts_t o;
                hvd_tune_search_opts_init(&o);
                o.start = (hvd_tune_point_t){ .threshold_bytes = 0, .cycle_usec = 10000 };
                o.seed = seed;
                uint32_t n;
                hvd_tune_point_t b;
                double got = run(&o, noisy_bowl, bowl, &n, &b);
                ck_assert_msg(got >= 90.0, "seed %llu: best %.1f", (unsigned long long) seed, got);
        }
}
END_TEST

static hvd_tune_point_t seen[64];
static size_t n_seen;

static double bowl_record(const hvd_tune_point_t *p) {
        if (n_seen < 64)
                seen[n_seen++] = *p;
        return bowl(p);
}

/* The confirmation: after the search's 20 points the 3 best distinct ones
 * are measured again, best first, and the best is the highest mean of a
 * point's two scores. Over 40 seeds on the very noisy bowl that choice is
 * truly better on average than the single highest score's, from the same
 * search (the same seeds and the same noise). */
START_TEST(test_confirm_beats_luck) {
        double sum_plain = 0, sum_confirm = 0;
        for (uint64_t seed = 1; seed <= 40; seed++) {
                for (int confirm = 0; confirm <= 3; confirm += 3) {
                        hvd_tune_search_opts_t o;
                        hvd_tune_search_opts_init(&o);
                        o.start = (hvd_tune_point_t){ .threshold_bytes = 0, .cycle_usec = 10000 };
                        o.seed = seed;
                        o.confirm = (uint32_t) confirm;
                        noise_state = seed * 7919;
                        hvd_tune_search_t *s = NULL;
                        char err[256];
                        ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), 0);
                        hvd_tune_point_t pts[32], p;
                        double score[32];
                        uint32_t k = 0;
                        while (hvd_tune_search_next(s, &p) == 0) {
                                ck_assert_uint_lt(k, 32);
                                if (k == 20)
                                        ck_assert_int_eq(hvd_tune_search_phase(s),
                                                         confirm ? HVD_TUNE_CONFIRMING : HVD_TUNE_DONE);
                                pts[k] = p;
                                score[k] = very_noisy_bowl(&p);
                                ck_assert_int_eq(hvd_tune_search_report(s, score[k]), 0);
                                k++;
                        }
                        ck_assert_uint_eq(k, 20 + (uint32_t) confirm);
                        hvd_tune_point_t b;
                        double bs;
                        ck_assert_int_eq(hvd_tune_search_best(s, &b, &bs), 0);
                        if (confirm) {
                                /* the first point measured again is the search's best scored */
                                double first = -1;
                                for (uint32_t i = 0; i < 20; i++)
                                        first = score[i] > first ? score[i] : first;
                                bool found = false;
                                for (uint32_t i = 0; i < 20; i++)
                                        found |= score[i] == first &&
                                                 pts[i].threshold_bytes == pts[20].threshold_bytes &&
                                                 pts[i].cycle_usec == pts[20].cycle_usec;
                                ck_assert_msg(found, "seed %llu: the first point confirmed is not the best scored",
                                              (unsigned long long) seed);
                                /* the best is one of them, scored by its mean */
                                bool mean_ok = false;
                                for (uint32_t c = 20; c < 23; c++)
                                        for (uint32_t i = 0; i < 20; i++)
                                                mean_ok |= pts[i].threshold_bytes == pts[c].threshold_bytes &&
                                                           pts[i].cycle_usec == pts[c].cycle_usec &&
                                                           b.threshold_bytes == pts[c].threshold_bytes &&
                                                           b.cycle_usec == pts[c].cycle_usec &&
                                                           fabs(bs - (score[i] + score[c]) / 2) < 1e-9;
                                ck_assert_msg(mean_ok, "seed %llu: the best is not a confirmed point's mean",
                                              (unsigned long long) seed);
                                sum_confirm += bowl(&b);
                        } else
                                sum_plain += bowl(&b);
                        hvd_tune_search_destroy(&s);
                }
        }
        ck_assert_msg(sum_confirm > sum_plain, "confirmed %.2f, single highest %.2f (true scores, mean of 40)",
                      sum_confirm / 40, sum_plain / 40);
}
END_TEST

/* A fixed threshold stays at its value in every point; the cycle time
 * is still tuned (to the bowl's best for that threshold, 5 ms). */
START_TEST(test_fixed_threshold) {
        hvd_tune_search_opts_t o;
        hvd_tune_search_opts_init(&o);
        o.start = (hvd_tune_point_t){ .threshold_bytes = 123 * 4096, .cycle_usec = 10000 };
        o.fix_threshold = true;
        n_seen = 0;
        uint32_t n;
        hvd_tune_point_t b;
        run(&o, bowl_record, bowl, &n, &b);
        for (size_t i = 0; i < n_seen; i++)
                ck_assert_uint_eq(seen[i].threshold_bytes, 123 * 4096);
        ck_assert_uint_ge(b.cycle_usec, 3500);
        ck_assert_uint_le(b.cycle_usec, 7000);
}
END_TEST

/* Both knobs fixed: the start is measured once, then each switch not
 * fixed is flipped once (the fixed one never); the better is kept. */
static double switch_score(const hvd_tune_point_t *p) {
        if (n_seen < 64)
                seen[n_seen++] = *p;
        return 10.0 + ((p->switches & 1) ? 5.0 : 0) - ((p->switches & 4) ? 3.0 : 0);
}

START_TEST(test_switches_one_by_one) {
        hvd_tune_search_opts_t o;
        hvd_tune_search_opts_init(&o);
        o.start = (hvd_tune_point_t){ .threshold_bytes = 4 * MIB, .cycle_usec = 2000, .switches = 2 };
        o.fix_threshold = o.fix_cycle = true;
        o.n_switches = 3;
        o.fixed_switches = 2; /* switch 1 set by the user: on, and stays on */
        n_seen = 0;
        uint32_t n;
        hvd_tune_point_t b;
        run(&o, switch_score, switch_score, &n, &b);
        ck_assert_uint_eq(n, 3); /* the start, switch 0 flipped, switch 2 flipped */
        for (size_t i = 0; i < n_seen; i++) {
                ck_assert_uint_eq(seen[i].threshold_bytes, 4 * MIB);
                ck_assert_uint_eq(seen[i].cycle_usec, 2000);
                ck_assert_uint_eq(seen[i].switches & 2, 2);
        }
        ck_assert_uint_eq(seen[1].switches, 3);
        ck_assert_uint_eq(seen[2].switches, 7); /* tried on top of the better switch 0 */
        ck_assert_uint_eq(b.switches, 3);
}
END_TEST

/* hvd's own switches after a search of both knobs: small chunks pay 20 %,
 * the send thread costs 10 %. */
static double knob_score(const hvd_tune_point_t *p) {
        if (n_seen < 64)
                seen[n_seen++] = *p;
        double f = p->switches >> HVD_TUNE_SWITCH_SMALL_CHUNKS & 1 ? 1.2 : 1.0;
        if (p->switches >> HVD_TUNE_SWITCH_SEND_THREAD & 1)
                f *= 0.9;
        return bowl(p) * f;
}

START_TEST(test_switches_after_search) {
        hvd_tune_point_t first[64];
        size_t n_first = 0;
        uint32_t thread = UINT32_C(1) << HVD_TUNE_SWITCH_SEND_THREAD;
        uint32_t chunks = UINT32_C(1) << HVD_TUNE_SWITCH_SMALL_CHUNKS;
        for (int pass = 0; pass < 3; pass++) {
                hvd_tune_search_opts_t o;
                hvd_tune_search_opts_init(&o);
                o.start = (hvd_tune_point_t){ .threshold_bytes = 0, .cycle_usec = 10000 };
                o.n_switches = 2; /* the two across nodes: a job of several hosts, one rank each */
                o.seed = 3;
                if (pass == 2) { /* the send thread set by the user: on, and stays on */
                        o.start.switches = thread;
                        o.fixed_switches = thread;
                }
                n_seen = 0;
                uint32_t n;
                hvd_tune_point_t b;
                double truth = run(&o, knob_score, bowl, &n, &b);
                ck_assert_double_ge(truth, 90.0);
                ck_assert_uint_eq(b.switches, o.start.switches | chunks);
                /* the continuous search keeps the start's switches */
                for (size_t i = 0; i < o.max_samples; i++)
                        ck_assert_uint_eq(seen[i].switches, o.start.switches);
                if (pass < 2) {
                        /* each switch once, on top of the best so far: the
                         * thread (worse, dropped), then the chunks (kept) */
                        ck_assert_uint_eq(n, o.max_samples + 2);
                        ck_assert_uint_eq(seen[o.max_samples].switches, thread);
                        ck_assert_uint_eq(seen[o.max_samples + 1].switches, chunks);
                        ck_assert_uint_eq(seen[o.max_samples].threshold_bytes, seen[o.max_samples + 1].threshold_bytes);
                } else {
                        ck_assert_uint_eq(n, o.max_samples + 1);
                        ck_assert_uint_eq(seen[o.max_samples].switches, thread | chunks);
                }
                if (pass == 0) {
                        memcpy(first, seen, n_seen * sizeof *seen);
                        n_first = n_seen;
                } else if (pass == 1) { /* the same seed: the same points */
                        ck_assert_uint_eq(n_seen, n_first);
                        for (size_t i = 0; i < n_seen; i++) {
                                ck_assert_uint_eq(seen[i].threshold_bytes, first[i].threshold_bytes);
                                ck_assert_uint_eq(seen[i].cycle_usec, first[i].cycle_usec);
                                ck_assert_uint_eq(seen[i].switches, first[i].switches);
                        }
                }
        }
}
END_TEST

/* The same seed gives the same points; another seed other points. */
START_TEST(test_deterministic) {
        hvd_tune_point_t a[20], c[20];
        for (int pass = 0; pass < 3; pass++) {
                hvd_tune_search_opts_t o;
                hvd_tune_search_opts_init(&o);
                o.start = (hvd_tune_point_t){ .threshold_bytes = 0, .cycle_usec = 10000 };
                o.seed = pass == 2 ? 99 : 7;
                hvd_tune_search_t *s = NULL;
                char err[256];
                ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), 0);
                for (int i = 0; i < 20; i++) {
                        hvd_tune_point_t p;
                        ck_assert_int_eq(hvd_tune_search_next(s, &p), 0);
                        if (pass == 0)
                                a[i] = p;
                        else if (pass == 1) {
                                ck_assert_uint_eq(p.threshold_bytes, a[i].threshold_bytes);
                                ck_assert_uint_eq(p.cycle_usec, a[i].cycle_usec);
                        } else
                                c[i] = p;
                        ck_assert_int_eq(hvd_tune_search_report(s, bowl(&p)), 0);
                }
                hvd_tune_search_destroy(&s);
        }
        int differ = 0;
        for (int i = 4; i < 20; i++) /* past the fixed seeds */
                differ += a[i].threshold_bytes != c[i].threshold_bytes || a[i].cycle_usec != c[i].cycle_usec;
        ck_assert_int_gt(differ, 0);
}
END_TEST

/* Equal scores everywhere: the search still proposes points in bounds
 * and ends; the best is the first point (nothing beat it). */
static double flat(const hvd_tune_point_t *p) {
        (void) p;
        return 42.0;
}

START_TEST(test_flat_scores) {
        hvd_tune_search_opts_t o;
        hvd_tune_search_opts_init(&o);
        o.start = (hvd_tune_point_t){ .threshold_bytes = 0, .cycle_usec = 10000 };
        uint32_t n;
        hvd_tune_point_t b;
        ck_assert_double_eq(run(&o, flat, flat, &n, &b), 42.0);
        ck_assert_uint_eq(b.threshold_bytes, 0);
        ck_assert_uint_eq(b.cycle_usec, 10000);
}
END_TEST

START_TEST(test_bad_input) {
        hvd_tune_search_opts_t o;
        hvd_tune_search_t *s = NULL;
        char err[256] = "";
        hvd_tune_search_opts_init(&o);
        o.max_samples = 0;
        ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), -EINVAL);
        ck_assert_ptr_null(s);
        ck_assert_ptr_nonnull(strstr(err, "budget"));
        hvd_tune_search_opts_init(&o);
        o.noise = NAN;
        ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "noise"));
        hvd_tune_search_opts_init(&o);
        o.noise = -1;
        ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), -EINVAL);
        hvd_tune_search_opts_init(&o);
        o.n_switches = HVD_TUNE_MAX_SWITCHES + 1;
        ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), -EINVAL);
        hvd_tune_search_opts_init(&o);
        o.start.cycle_usec = 500;
        ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "cycle"));
        o.fix_cycle = true; /* a fixed value may be anything */
        ck_assert_int_eq(hvd_tune_search_new(&o, &s, err, sizeof err), 0);
        /* a score before any point, NaN and infinity: refused, nothing changes */
        ck_assert_int_eq(hvd_tune_search_report(s, 1.0), -EINVAL);
        hvd_tune_point_t p, q, b;
        double score;
        ck_assert_int_eq(hvd_tune_search_best(s, &b, &score), -ENOENT);
        ck_assert_int_eq(hvd_tune_search_next(s, &p), 0);
        ck_assert_uint_eq(p.cycle_usec, 500);
        ck_assert_int_eq(hvd_tune_search_report(s, NAN), -EINVAL);
        ck_assert_int_eq(hvd_tune_search_report(s, INFINITY), -EINVAL);
        ck_assert_uint_eq(hvd_tune_search_samples(s), 0);
        ck_assert_int_eq(hvd_tune_search_next(s, &q), 0); /* still the same point */
        ck_assert_uint_eq(q.threshold_bytes, p.threshold_bytes);
        ck_assert_uint_eq(q.cycle_usec, p.cycle_usec);
        ck_assert_int_eq(hvd_tune_search_report(s, 3.0), 0);
        ck_assert_int_eq(hvd_tune_search_best(s, &b, &score), 0);
        ck_assert_double_eq(score, 3.0);
        hvd_tune_search_destroy(&s);
        hvd_tune_search_destroy(&s); /* NULL-safe */
}
END_TEST

/* A budget of one: the start alone, then done. */
START_TEST(test_budget_of_one) {
        hvd_tune_search_opts_t o;
        hvd_tune_search_opts_init(&o);
        o.max_samples = 1;
        uint32_t n;
        hvd_tune_point_t b;
        run(&o, bowl, bowl, &n, &b);
        ck_assert_uint_eq(n, 1);
        ck_assert_uint_eq(b.threshold_bytes, 64 * MIB);
        ck_assert_uint_eq(b.cycle_usec, 1000);
}
END_TEST

static Suite *autotune_suite(void) {
        Suite *s = suite_create("autotune");
        TCase *tc = tcase_create("search");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_finds_bowl_optimum);
        tcase_add_test(tc, test_finds_ridge);
        tcase_add_test(tc, test_noisy_bowl);
        tcase_add_test(tc, test_confirm_beats_luck);
        tcase_add_test(tc, test_fixed_threshold);
        tcase_add_test(tc, test_switches_one_by_one);
        tcase_add_test(tc, test_switches_after_search);
        tcase_add_test(tc, test_deterministic);
        tcase_add_test(tc, test_flat_scores);
        tcase_add_test(tc, test_bad_input);
        tcase_add_test(tc, test_budget_of_one);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(autotune_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
