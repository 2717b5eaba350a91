/* check_strmap.c — unit tests of the string map (common/strmap.c): put,
 * get, replace, remove and iterate with thousands of keys; binary keys
 * (embedded NUL, high bytes, the empty key) are distinct by their bytes; the
 * map copies keys; long insert/remove churn (tombstones) keeps working. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "strmap.h"

#define N 20000

static void *val(size_t i) {
        return (void *) (uintptr_t) (i + 1);
}

static size_t key_of(char *buf, size_t len, size_t i) {
        return (size_t) snprintf(buf, len, "grad.layer%zu.weight", i);
}

START_TEST(test_strmap_many_keys) {
        hvd_strmap_t *m = hvd_strmap_new();
        ck_assert_ptr_nonnull(m);
        ck_assert_uint_eq(hvd_strmap_size(m), 0);
        char k[64];
        for (size_t i = 0; i < N; i++) {
                size_t kl = key_of(k, sizeof k, i);
                ck_assert_ptr_null(hvd_strmap_get(m, k, kl));
                ck_assert_int_eq(hvd_strmap_put(m, k, kl, val(i)), 0);
                ck_assert_uint_eq(hvd_strmap_size(m), i + 1);
        }
        for (size_t i = 0; i < N; i++) {
                size_t kl = key_of(k, sizeof k, i);
                ck_assert_ptr_eq(hvd_strmap_get(m, k, kl), val(i));
        }
        /* a prefix of a key is a different key */
        ck_assert_ptr_null(hvd_strmap_get(m, "grad.layer1", 11));
        ck_assert_ptr_null(hvd_strmap_get(m, "grad.layer1.weight", 17));

        /* remove the even ones */
        for (size_t i = 0; i < N; i += 2) {
                size_t kl = key_of(k, sizeof k, i);
                ck_assert_ptr_eq(hvd_strmap_remove(m, k, kl), val(i));
                ck_assert_ptr_null(hvd_strmap_remove(m, k, kl));
        }
        ck_assert_uint_eq(hvd_strmap_size(m), N / 2);
        for (size_t i = 0; i < N; i++) {
                size_t kl = key_of(k, sizeof k, i);
                ck_assert_ptr_eq(hvd_strmap_get(m, k, kl), i % 2 ? val(i) : NULL);
        }

        /* iteration visits every live entry exactly once */
        unsigned char *seen = calloc(N, 1);
        size_t iter = 0, count = 0, klen;
        const void *key;
        void *v;
        while (hvd_strmap_next(m, &iter, &key, &klen, &v)) {
                size_t i = (size_t) (uintptr_t) v - 1;
                ck_assert_uint_lt(i, N);
                ck_assert(i % 2 == 1);
                ck_assert_int_eq(seen[i], 0);
                seen[i] = 1;
                size_t kl = key_of(k, sizeof k, i);
                ck_assert_uint_eq(klen, kl);
                ck_assert_mem_eq(key, k, kl);
                count++;
        }
        ck_assert_uint_eq(count, N / 2);
        ck_assert_int_eq(hvd_strmap_next(m, &iter, NULL, NULL, NULL), 0); /* stays at the end */
        free(seen);

        /* put them back */
        for (size_t i = 0; i < N; i += 2) {
                size_t kl = key_of(k, sizeof k, i);
                ck_assert_int_eq(hvd_strmap_put(m, k, kl, val(i)), 0);
        }
        ck_assert_uint_eq(hvd_strmap_size(m), N);
        for (size_t i = 0; i < N; i++) {
                size_t kl = key_of(k, sizeof k, i);
                ck_assert_ptr_eq(hvd_strmap_get(m, k, kl), val(i));
        }
        hvd_strmap_destroy(&m);
        ck_assert_ptr_null(m);
        hvd_strmap_destroy(&m);
        hvd_strmap_destroy(NULL);
}
END_TEST

START_TEST(test_strmap_replace) {
        hvd_strmap_t *m = hvd_strmap_new();
        int a, b;
        ck_assert_int_eq(hvd_strmap_put(m, "x", 1, &a), 0);
        ck_assert_int_eq(hvd_strmap_put(m, "x", 1, &b), 0);
        ck_assert_uint_eq(hvd_strmap_size(m), 1);
        ck_assert_ptr_eq(hvd_strmap_get(m, "x", 1), &b);
        /* NULL is a storable value, but indistinguishable from absent */
        ck_assert_int_eq(hvd_strmap_put(m, "x", 1, NULL), 0);
        ck_assert_uint_eq(hvd_strmap_size(m), 1);
        ck_assert_ptr_null(hvd_strmap_get(m, "x", 1));
        hvd_strmap_destroy(&m);
}
END_TEST

START_TEST(test_strmap_binary_keys) {
        hvd_strmap_t *m = hvd_strmap_new();
        const char k1[] = { 'a', 0, 'b' }, k2[] = { 'a', 0, 'c' }, k3[] = { 'a' }, k4[] = { 'a', 0 };
        const unsigned char k5[] = { 0xff, 0xfe, 0x00, 0x80 };
        int v[6];
        ck_assert_int_eq(hvd_strmap_put(m, k1, sizeof k1, &v[0]), 0);
        ck_assert_int_eq(hvd_strmap_put(m, k2, sizeof k2, &v[1]), 0);
        ck_assert_int_eq(hvd_strmap_put(m, k3, sizeof k3, &v[2]), 0);
        ck_assert_int_eq(hvd_strmap_put(m, k4, sizeof k4, &v[3]), 0);
        ck_assert_int_eq(hvd_strmap_put(m, k5, sizeof k5, &v[4]), 0);
        ck_assert_int_eq(hvd_strmap_put(m, "", 0, &v[5]), 0);
        ck_assert_uint_eq(hvd_strmap_size(m), 6);
        ck_assert_ptr_eq(hvd_strmap_get(m, k1, sizeof k1), &v[0]);
        ck_assert_ptr_eq(hvd_strmap_get(m, k2, sizeof k2), &v[1]);
        ck_assert_ptr_eq(hvd_strmap_get(m, k3, sizeof k3), &v[2]);
        ck_assert_ptr_eq(hvd_strmap_get(m, k4, sizeof k4), &v[3]);
        ck_assert_ptr_eq(hvd_strmap_get(m, k5, sizeof k5), &v[4]);
        ck_assert_ptr_eq(hvd_strmap_get(m, "", 0), &v[5]);
        ck_assert_ptr_eq(hvd_strmap_remove(m, k4, sizeof k4), &v[3]);
        ck_assert_ptr_eq(hvd_strmap_get(m, k3, sizeof k3), &v[2]);
        ck_assert_ptr_eq(hvd_strmap_get(m, k1, sizeof k1), &v[0]);
        ck_assert_ptr_null(hvd_strmap_get(m, k4, sizeof k4));
        /* routing ids: 5-byte binary ids as ZeroMQ makes them */
        unsigned char id[5] = { 0 };
        for (unsigned i = 0; i < 5000; i++) {
                memcpy(id + 1, &i, 4);
                ck_assert_int_eq(hvd_strmap_put(m, id, sizeof id, (void *) (uintptr_t) (i + 1)), 0);
        }
        for (unsigned i = 0; i < 5000; i++) {
                memcpy(id + 1, &i, 4);
                ck_assert_ptr_eq(hvd_strmap_get(m, id, sizeof id), (void *) (uintptr_t) (i + 1));
        }
        hvd_strmap_destroy(&m);
}
END_TEST

START_TEST(test_strmap_copies_keys) {
        hvd_strmap_t *m = hvd_strmap_new();
        char k[16] = "tensor";
        int v;
        ck_assert_int_eq(hvd_strmap_put(m, k, 6, &v), 0);
        memcpy(k, "zzzzzz", 6);
        ck_assert_ptr_eq(hvd_strmap_get(m, "tensor", 6), &v);
        ck_assert_ptr_null(hvd_strmap_get(m, k, 6));
        size_t iter = 0, kl;
        const void *key;
        ck_assert_int_eq(hvd_strmap_next(m, &iter, &key, &kl, NULL), 1);
        ck_assert_uint_eq(kl, 6);
        ck_assert_mem_eq(key, "tensor", 6);
        hvd_strmap_destroy(&m);
}
END_TEST

START_TEST(test_strmap_churn) {
        /* a long stream of short-lived keys (in-flight tensor names): the
         * table must neither fill up with tombstones nor grow without bound */
        hvd_strmap_t *m = hvd_strmap_new();
        char k[64];
        for (size_t i = 0; i < 200000; i++) {
                size_t kl = (size_t) snprintf(k, sizeof k, "step%zu", i);
                ck_assert_int_eq(hvd_strmap_put(m, k, kl, val(i)), 0);
                if (i >= 8) {
                        size_t ol = (size_t) snprintf(k, sizeof k, "step%zu", i - 8);
                        ck_assert_ptr_eq(hvd_strmap_remove(m, k, ol), val(i - 8));
                }
                ck_assert_uint_le(hvd_strmap_size(m), 9);
        }
        ck_assert_uint_eq(hvd_strmap_size(m), 8);
        size_t iter = 0, count = 0;
        while (hvd_strmap_next(m, &iter, NULL, NULL, NULL))
                count++;
        ck_assert_uint_eq(count, 8);
        hvd_strmap_destroy(&m);
}
END_TEST

/* Keys of every length up to 100 bytes, each differing from the others in
 * one byte only (at its start, in its middle, in its last bytes), or only
 * in their length (trailing NULs), each in a buffer of its own length
 * exactly: the hash reads 16, 8 and fewer bytes at a time and must stay
 * within the key (AddressSanitizer, valgrind), and every key is found. */
START_TEST(test_strmap_every_length_and_byte) {
        hvd_strmap_t *m = hvd_strmap_new();
        ck_assert_ptr_nonnull(m);
        static unsigned char keys[101][3][101];
        static int vals[101][3];
        for (size_t len = 0; len <= 100; len++)
                for (int v = 0; v < 3; v++) {
                        memset(keys[len][v], 0, sizeof keys[len][v]);
                        size_t at = v == 0 ? 0 : v == 1 ? len / 2 : len - 1; /* the byte that differs */
                        if (len)
                                keys[len][v][at] = (unsigned char) (1 + v);
                        if (len == 0 && v > 0)
                                continue;
                        unsigned char *exact = malloc(len ? len : 1);
                        ck_assert_ptr_nonnull(exact);
                        memcpy(exact, keys[len][v], len);
                        ck_assert_int_eq(hvd_strmap_put(m, exact, len, &vals[len][v]), 0);
                        free(exact);
                }
        size_t n = 0;
        for (size_t len = 0; len <= 100; len++)
                for (int v = 0; v < 3; v++) {
                        if (len == 0 && v > 0)
                                continue;
                        /* two of the three coincide for keys of 1 or 2 bytes */
                        bool same_as_earlier = false;
                        for (int u = 0; u < v; u++)
                                same_as_earlier |= memcmp(keys[len][u], keys[len][v], len) == 0;
                        if (same_as_earlier)
                                continue;
                        n++;
                        unsigned char *exact = malloc(len ? len : 1);
                        ck_assert_ptr_nonnull(exact);
                        memcpy(exact, keys[len][v], len);
                        ck_assert_ptr_eq(hvd_strmap_get(m, exact, len), &vals[len][v]);
                        free(exact);
                }
        ck_assert_uint_eq(hvd_strmap_size(m), n);
        hvd_strmap_destroy(&m);
}
END_TEST

static Suite *strmap_suite(void) {
        Suite *s = suite_create("strmap");
        TCase *tc = tcase_create("map");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_strmap_many_keys);
        tcase_add_test(tc, test_strmap_replace);
        tcase_add_test(tc, test_strmap_binary_keys);
        tcase_add_test(tc, test_strmap_copies_keys);
        tcase_add_test(tc, test_strmap_churn);
        tcase_add_test(tc, test_strmap_every_length_and_byte);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(strmap_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
