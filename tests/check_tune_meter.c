/* check_tune_meter.c — unit tests of local rank 0's step meter for the
 * autotuner (client/tune_meter.c): steps start at the lowest cache id that
 * came round again (an id seen once marks nothing), a step's bytes are its
 * records', a step a change of generation cut through is dropped, a lower
 * recurring id takes over as the marker, a full report drops steps rather
 * than overflow, and a meter that is off records nothing. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "negotiate.h"
#include "tune_meter.h"

static hvd_tune_meter_t m;

/* One record of ids [first, first + n) of bytes each, at time now. */
static void record(uint32_t first, uint32_t n, uint64_t bytes, uint64_t gen, uint64_t now) {
        for (uint32_t i = 0; i < n; i++)
                hvd_tune_meter_see(&m, first + i);
        hvd_tune_meter_record(&m, (uint64_t) n * bytes, gen, now);
}

/* Steps of two records each (ids 10-19 at t, 20-29 at t + 100), every
 * 1000 us from start. */
static void steps(int count, uint64_t gen, uint64_t start) {
        for (int s = 0; s < count; s++) {
                uint64_t t = start + (uint64_t) s * 1000;
                record(10, 10, 4, gen, t);
                record(20, 10, 4, gen, t + 100);
        }
}

START_TEST(test_meter_steps) {
        hvd_tune_meter_reset(&m, true);
        /* a sync negotiated once, then 4 steps: the first step's ids are
         * new, so the steps are counted from the second on */
        record(1, 3, 1000, 0, 0);
        hvd_tune_meter_see(&m, HVD_NEGOTIATOR_NO_ID);
        hvd_tune_meter_record(&m, 0, 0, 1);
        steps(4, 0, 1000);
        /* the marker (id 10) came round at steps 2, 3, 4: two whole steps */
        ck_assert_uint_eq(m.n, 2);
        for (size_t i = 0; i < m.n; i++) {
                ck_assert_uint_eq(m.usec[i], 1000);
                ck_assert_uint_eq(m.step_bytes[i], 80);
                ck_assert_uint_eq(m.step_generation[i], 0);
        }
}
END_TEST

START_TEST(test_meter_generation_change) {
        hvd_tune_meter_reset(&m, true);
        steps(3, 0, 0); /* the step from 1000 to 2000 */
        ck_assert_uint_eq(m.n, 1);
        /* a change applied during the step begun at 2000 (the next record
         * runs under generation 1): that step is dropped, the next count */
        record(10, 10, 4, 1, 3000);
        record(20, 10, 4, 1, 3100);
        steps(3, 1, 4000);
        ck_assert_uint_eq(m.n, 1 + 3);
        ck_assert_uint_eq(m.step_generation[0], 0);
        for (size_t i = 1; i < m.n; i++) {
                ck_assert_uint_eq(m.usec[i], 1000);
                ck_assert_uint_eq(m.step_generation[i], 1);
        }
}
END_TEST

START_TEST(test_meter_lower_marker) {
        hvd_tune_meter_reset(&m, true);
        steps(3, 0, 0);
        ck_assert_uint_eq(m.n, 1);
        /* a lower id now recurs (a new first tensor): it marks the steps */
        for (int s = 0; s < 4; s++) {
                uint64_t t = 10000 + (uint64_t) s * 2000;
                record(5, 1, 8, 0, t);
                record(10, 10, 4, 0, t + 500);
                record(20, 10, 4, 0, t + 600);
        }
        /* id 10 still ends the step begun before id 5 came (id 5 is new
         * there); id 5 recurs at the second round and marks from then on:
         * two steps of all three records */
        ck_assert_uint_eq(m.n, 2 + 2);
        ck_assert_uint_eq(m.usec[1], 10500 - 2000);
        for (size_t i = 2; i < 4; i++) {
                ck_assert_uint_eq(m.usec[i], 2000);
                ck_assert_uint_eq(m.step_bytes[i], 88);
        }
}
END_TEST

START_TEST(test_meter_full_and_off) {
        hvd_tune_meter_reset(&m, true);
        steps(HVD_WIRE_MAX_TUNE_STEPS + 10, 0, 0);
        ck_assert_uint_eq(m.n, HVD_WIRE_MAX_TUNE_STEPS);
        m.n = 0; /* reported */
        steps(3, 0, 10000000);
        ck_assert_uint_eq(m.n, 3);
        hvd_tune_meter_reset(&m, false);
        steps(5, 0, 0);
        ck_assert_uint_eq(m.n, 0);
        /* ids beyond the marking range are counted, never mark */
        hvd_tune_meter_reset(&m, true);
        for (int s = 0; s < 5; s++) {
                hvd_tune_meter_see(&m, HVD_TUNE_METER_IDS + 1);
                hvd_tune_meter_record(&m, 100, 0, (uint64_t) s * 1000);
        }
        ck_assert_uint_eq(m.n, 0);
}
END_TEST

static Suite *tune_meter_suite(void) {
        Suite *s = suite_create("tune_meter");
        TCase *tc = tcase_create("meter");
        tcase_add_test(tc, test_meter_steps);
        tcase_add_test(tc, test_meter_generation_change);
        tcase_add_test(tc, test_meter_lower_marker);
        tcase_add_test(tc, test_meter_full_and_off);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(tune_meter_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
