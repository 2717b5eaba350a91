/* check_slot_mode.c — unit tests of how a rank chooses its slot writes on
 * the one-node segment path (client/slot_mode.c), fed operation times: a
 * class keeps ordinary stores where they are faster and takes non-temporal
 * ones where those beat them by the gain (the fastest of each burst
 * counts, so a slow first operation in the new mode does not decide); it
 * measures after its warm-up, when its rate falls to
 * half, and on a schedule in either mode, so a placement that changes back
 * is found again; measuring costs few operations in the other mode; small
 * operations and size classes are told apart. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

static hvd_backend_t b;

/* slot_mode.c's SLOT_MODE_FIRST: the operations before the first measurement */
enum { MIB = 1 << 20, FIRST = 64 };

/* Runs n operations of bytes: each takes us_plain with ordinary stores and
 * us_nt with non-temporal ones, the first in a new mode first_extra more.
 * Returns how many of them ran with non-temporal stores. */
static int run(hvd_slot_mode_t *m, int n, uint64_t bytes, uint64_t us_plain, uint64_t us_nt, uint64_t first_extra) {
        int nt = 0;
        bool last = m->stream;
        for (int i = 0; i < n; i++) {
                bool s = hvd_slot_mode_stream(m);
                nt += s;
                uint64_t us = (s ? us_nt : us_plain) + (s != last ? first_extra : 0);
                last = s;
                hvd_slot_mode_note(m, bytes, us);
        }
        return nt;
}

START_TEST(test_classes) {
        memset(&b, 0, sizeof b);
        ck_assert_ptr_null(hvd_slot_mode_of(&b, 128 * 1024));
        hvd_slot_mode_t *a = hvd_slot_mode_of(&b, 256 * 1024), *c = hvd_slot_mode_of(&b, MIB);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_eq(a, &b.slot_mode[0]);
        ck_assert_ptr_eq(c, &b.slot_mode[2]);
        ck_assert_ptr_eq(hvd_slot_mode_of(&b, MIB + 5), c);
        ck_assert_ptr_eq(hvd_slot_mode_of(&b, UINT64_C(1) << 40), &b.slot_mode[HVD_SLOT_MODE_CLASSES - 1]);
        /* the byte streams' classes are their own */
        ck_assert_ptr_null(hvd_slot_mode_of_stream(&b, 0));
        ck_assert_ptr_eq(hvd_slot_mode_of_stream(&b, MIB), &b.pub_mode[2]);
        ck_assert_ptr_eq(hvd_slot_mode_of_stream(&b, 256 * 1024), &b.pub_mode[0]);
}
END_TEST

/* Ordinary stores faster (one L3): a measurement after the warm-up, a few
 * operations in the other mode, then none for thousands. */
START_TEST(test_stays_plain) {
        memset(&b, 0, sizeof b);
        hvd_slot_mode_t *m = hvd_slot_mode_of(&b, MIB);
        int nt = run(m, 4000, MIB, 80, 240, 60);
        ck_assert(!m->stream);
        ck_assert_int_eq(nt, 4);
}
END_TEST

/* Non-temporal stores twice as fast (two L3s): taken after the first
 * measurement, and kept while it stays so, measuring ordinary stores every
 * few hundred operations. */
START_TEST(test_takes_stream) {
        memset(&b, 0, sizeof b);
        hvd_slot_mode_t *m = hvd_slot_mode_of(&b, MIB);
        int nt = run(m, FIRST + 12, MIB, 360, 180, 200);
        ck_assert(m->stream);
        ck_assert_int_eq(nt, 8); /* FIRST plain, 4 measured plain, 4 measured streamed, then stream */
        nt = run(m, 2000, MIB, 360, 180, 200);
        ck_assert(m->stream);
        ck_assert_int_ge(nt, 2000 - 4 * 4);
}
END_TEST

/* The placement changes back: in stream mode the next scheduled
 * measurement finds ordinary stores faster again. */
START_TEST(test_changes_back) {
        memset(&b, 0, sizeof b);
        hvd_slot_mode_t *m = hvd_slot_mode_of(&b, MIB);
        run(m, FIRST + 12, MIB, 360, 180, 200);
        ck_assert(m->stream);
        run(m, 1000, MIB, 80, 240, 60);
        ck_assert(!m->stream);
}
END_TEST

/* With ordinary stores, a fall to under half the rate (the vCPUs moved
 * apart) is measured within a few operations, not at the next schedule;
 * a noise of 30 % is not. */
START_TEST(test_fall_measured) {
        memset(&b, 0, sizeof b);
        hvd_slot_mode_t *m = hvd_slot_mode_of(&b, MIB);
        run(m, 2 * FIRST + 20, MIB, 80, 240, 60);
        ck_assert(!m->stream);
        uint64_t since = m->since;
        run(m, 30, MIB, 104, 240, 60);
        ck_assert(!m->stream);
        ck_assert_uint_eq(m->since, since + 30);
        run(m, 40, MIB, 360, 180, 200);
        ck_assert(m->stream);
}
END_TEST

/* A gain under 1.2x is not taken; the first operation in the other mode,
 * however slow, does not decide; one fast operation in a slow burst does. */
START_TEST(test_gain_and_first) {
        memset(&b, 0, sizeof b);
        hvd_slot_mode_t *m = hvd_slot_mode_of(&b, MIB);
        run(m, FIRST + 12, MIB, 100, 90, 0);
        ck_assert(!m->stream);
        memset(&b, 0, sizeof b);
        m = hvd_slot_mode_of(&b, MIB);
        run(m, FIRST + 12, MIB, 360, 180, 100000);
        ck_assert(m->stream);
}
END_TEST

static Suite *slot_mode_suite(void) {
        Suite *s = suite_create("slot_mode");
        TCase *tc = tcase_create("mode");
        tcase_add_test(tc, test_classes);
        tcase_add_test(tc, test_stays_plain);
        tcase_add_test(tc, test_takes_stream);
        tcase_add_test(tc, test_changes_back);
        tcase_add_test(tc, test_fall_measured);
        tcase_add_test(tc, test_gain_and_first);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(slot_mode_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
