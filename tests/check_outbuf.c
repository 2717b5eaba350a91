/* check_outbuf.c — unit tests of the pool of host outputs libhvd keeps for
 * reuse (client/outbuf.c): a buffer that comes back (a released handle's,
 * or one the caller stole and recycled) serves a later output of at least
 * half its capacity, the smallest that fits first and of equals the
 * newest; small buffers and a
 * closed pool keep nothing; the pool holds at most 64 buffers and 1 GiB,
 * forgetting the oldest first. Each test runs in its own process (Check's
 * fork mode), so each starts with an empty, closed pool. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "client.h"

enum { KIB = 1 << 10, MIB = 1 << 20 };

static void expect(size_t bytes, size_t count) {
        size_t b, c;
        hvd_outbuf_stats(&b, &c);
        ck_assert_uint_eq(b, bytes);
        ck_assert_uint_eq(c, count);
}

START_TEST(test_closed_keeps_nothing) {
        size_t cap = 0;
        void *p = hvd_outbuf_get(MIB, &cap);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(cap, MIB);
        ck_assert_uint_eq((uintptr_t) p % 4096, 0);
        hvd_outbuf_put(p, cap);
        expect(0, 0);
        hvd_outbuf_put(NULL, MIB);
        expect(0, 0);
}
END_TEST

START_TEST(test_reused_when_it_fits) {
        size_t cap = 0;
        hvd_outbuf_set_open(true);
        void *p = hvd_outbuf_get(4 * MIB, &cap);
        hvd_outbuf_put(p, cap);
        expect(4 * MIB, 1);
        /* under half its capacity: a new buffer, the kept one stays */
        void *q = hvd_outbuf_get(2 * MIB - 1, &cap);
        ck_assert_ptr_ne(q, p);
        ck_assert_uint_eq(cap, 2 * MIB - 1);
        expect(4 * MIB, 1);
        /* more than its capacity: new too */
        void *r = hvd_outbuf_get(4 * MIB + 1, &cap);
        ck_assert_ptr_ne(r, p);
        free(q);
        free(r);
        /* half of it, and all of it, fit */
        ck_assert_ptr_eq(hvd_outbuf_get(2 * MIB, &cap), p);
        ck_assert_uint_eq(cap, 4 * MIB);
        expect(0, 0);
        hvd_outbuf_put(p, cap);
        ck_assert_ptr_eq(hvd_outbuf_get(4 * MIB, &cap), p);
        free(p);
}
END_TEST

START_TEST(test_smallest_fit_first) {
        size_t cap = 0;
        hvd_outbuf_set_open(true);
        void *big = hvd_outbuf_get(8 * MIB, &cap);
        void *mid = hvd_outbuf_get(5 * MIB, &cap);
        hvd_outbuf_put(big, 8 * MIB);
        hvd_outbuf_put(mid, 5 * MIB);
        ck_assert_ptr_eq(hvd_outbuf_get(4 * MIB + 1, &cap), mid);
        ck_assert_ptr_eq(hvd_outbuf_get(4 * MIB + 1, &cap), big);
        free(mid);
        free(big);
}
END_TEST

/* Of equal buffers, the last to come back goes first */
START_TEST(test_newest_of_equals_first) {
        size_t cap = 0;
        void *p[3];
        hvd_outbuf_set_open(true);
        for (int i = 0; i < 3; i++)
                p[i] = hvd_outbuf_get(MIB, &cap);
        hvd_outbuf_put(p[1], MIB);
        hvd_outbuf_put(p[0], MIB);
        hvd_outbuf_put(p[2], MIB);
        ck_assert_ptr_eq(hvd_outbuf_get(MIB, &cap), p[2]);
        ck_assert_ptr_eq(hvd_outbuf_get(MIB, &cap), p[0]);
        ck_assert_ptr_eq(hvd_outbuf_get(MIB, &cap), p[1]);
        for (int i = 0; i < 3; i++)
                free(p[i]);
}
END_TEST

START_TEST(test_small_not_kept) {
        size_t cap = 0;
        hvd_outbuf_set_open(true);
        void *p = hvd_outbuf_get(256 * KIB - 1, &cap);
        ck_assert_ptr_nonnull(p);
        hvd_outbuf_put(p, cap);
        expect(0, 0);
        p = hvd_outbuf_get(256 * KIB, &cap);
        hvd_outbuf_put(p, cap);
        expect(256 * KIB, 1);
}
END_TEST

/* A stolen output handed back: kept at the size the steal reported */
START_TEST(test_recycled) {
        size_t cap = 0;
        hvd_outbuf_set_open(true);
        void *p = hvd_outbuf_get(3 * MIB, &cap);
        hvd_recycle_output(p, 3 * MIB);
        expect(3 * MIB, 1);
        ck_assert_ptr_eq(hvd_outbuf_get(3 * MIB, &cap), p);
        hvd_recycle_output(NULL, MIB);
        expect(0, 0);
        /* an empty result's one byte, and any buffer once hvd has shut down: freed */
        hvd_recycle_output(malloc(1), 0);
        hvd_outbuf_set_open(false);
        hvd_recycle_output(p, 3 * MIB);
        expect(0, 0);
}
END_TEST

/* 65 buffers: the first to come back is the one forgotten */
START_TEST(test_count_bound_oldest_first) {
        enum { N = 65 };
        void *p[N];
        size_t cap = 0;
        hvd_outbuf_set_open(true);
        for (int i = 0; i < N; i++)
                p[i] = hvd_outbuf_get(256 * KIB, &cap);
        for (int i = 0; i < N; i++)
                hvd_outbuf_put(p[i], 256 * KIB);
        expect((size_t) 64 * 256 * KIB, 64);
        for (int i = 0; i < N - 1; i++) {
                void *q = hvd_outbuf_get(256 * KIB, &cap);
                ck_assert_ptr_ne(q, p[0]);
                free(q);
        }
        expect(0, 0);
}
END_TEST

/* Over 1 GiB: the oldest go until the newest fits; one larger than the
 * bound is not kept. The memory is never touched. */
START_TEST(test_byte_bound) {
        size_t cap = 0;
        hvd_outbuf_set_open(true);
        void *a = hvd_outbuf_get(400 * MIB, &cap), *b = hvd_outbuf_get(400 * MIB, &cap),
             *c = hvd_outbuf_get(300 * MIB, &cap);
        ck_assert(a && b && c);
        hvd_outbuf_put(a, 400 * MIB);
        hvd_outbuf_put(b, 400 * MIB);
        hvd_outbuf_put(c, 300 * MIB);
        expect((size_t) 700 * MIB, 2);
        ck_assert_ptr_eq(hvd_outbuf_get(300 * MIB, &cap), c);
        ck_assert_ptr_eq(hvd_outbuf_get(400 * MIB, &cap), b);
        free(c);
        hvd_outbuf_put(b, 400 * MIB);
        void *huge = hvd_outbuf_get((size_t) 1025 * MIB, &cap);
        ck_assert_ptr_nonnull(huge);
        hvd_outbuf_put(huge, (size_t) 1025 * MIB);
        expect((size_t) 400 * MIB, 1);
        hvd_outbuf_set_open(false);
        expect(0, 0);
}
END_TEST

static Suite *outbuf_suite(void) {
        Suite *s = suite_create("outbuf");
        TCase *tc = tcase_create("pool");
        tcase_add_test(tc, test_closed_keeps_nothing);
        tcase_add_test(tc, test_reused_when_it_fits);
        tcase_add_test(tc, test_smallest_fit_first);
        tcase_add_test(tc, test_newest_of_equals_first);
        tcase_add_test(tc, test_small_not_kept);
        tcase_add_test(tc, test_recycled);
        tcase_add_test(tc, test_count_bound_oldest_first);
        tcase_add_test(tc, test_byte_bound);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(outbuf_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
