/* check_crc32c.c — unit tests of CRC-32C (common/crc32c.c): published
 * check values (RFC 3720 B.4, the "123456789" check), incremental use,
 * and the SSE4.2 path against slicing-by-8 and a bitwise reference over
 * every length and alignment up to a few hundred bytes, and around the
 * lengths where it runs three streams at once (blocks of 3 x 256 and
 * 3 x 8,192 bytes) up to several blocks. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"

static uint32_t bitwise(const uint8_t *p, size_t n) {
        uint32_t c = 0xFFFFFFFFu;
        for (size_t i = 0; i < n; i++) {
                c ^= p[i];
                for (int k = 0; k < 8; k++)
                        c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        }
        return ~c;
}

START_TEST(test_vectors) {
        ck_assert_uint_eq(hvd_crc32c(0, "123456789", 9), 0xE3069283u);
        ck_assert_uint_eq(hvd_crc32c_portable(0, "123456789", 9), 0xE3069283u);
        uint8_t b[32];
        memset(b, 0, sizeof b);
        ck_assert_uint_eq(hvd_crc32c(0, b, 32), 0x8A9136AAu);
        memset(b, 0xff, sizeof b);
        ck_assert_uint_eq(hvd_crc32c(0, b, 32), 0x62A8AB43u);
        for (int i = 0; i < 32; i++)
                b[i] = (uint8_t) i;
        ck_assert_uint_eq(hvd_crc32c(0, b, 32), 0x46DD794Eu);
        for (int i = 0; i < 32; i++)
                b[i] = (uint8_t) (31 - i);
        ck_assert_uint_eq(hvd_crc32c(0, b, 32), 0x113FDB5Cu);
        ck_assert_uint_eq(hvd_crc32c(0, b, 0), 0u);
}
END_TEST

/* n + 16 pseudo-random bytes */
static uint8_t *random_bytes(size_t n, uint32_t seed) {
        uint8_t *buf = malloc(n + 16);
        ck_assert_ptr_nonnull(buf);
        for (size_t i = 0; i < n + 16; i++) {
                seed = seed * 1103515245u + 12345u;
                buf[i] = (uint8_t) (seed >> 16);
        }
        return buf;
}

/* n bytes from offset a: both implementations against the bitwise one,
 * and hvd_crc32c continued from the first k bytes */
static void check_span(const uint8_t *buf, size_t a, size_t n, size_t k) {
        uint32_t want = bitwise(buf + a, n);
        uint32_t hw = hvd_crc32c(0, buf + a, n), sw = hvd_crc32c_portable(0, buf + a, n);
        if (hw != want || sw != want)
                ck_abort_msg("offset %zu length %zu: bitwise %08x, hvd_crc32c %08x, portable %08x", a, n, want, hw, sw);
        uint32_t two = hvd_crc32c(hvd_crc32c(0, buf + a, k), buf + a + k, n - k);
        if (two != want)
                ck_abort_msg("offset %zu length %zu split at %zu: %08x, want %08x", a, n, k, two, want);
}

START_TEST(test_paths_agree) {
        enum { N = 700 };
        uint8_t *buf = random_bytes(N, 12345);
        for (size_t a = 0; a < 8; a++)
                for (size_t n = 0; n <= N; n++)
                        check_span(buf, a, n, n / 3);
        free(buf);
}
END_TEST

/* Lengths at the edges of the three-stream blocks (3 x 256 and 3 x 8,192
 * bytes), each at every alignment, whole and in pieces that cut through
 * the blocks. */
START_TEST(test_three_streams) {
        enum { N = 3 * 3 * 8192 + 3 * 256 + 64 };
        uint8_t *buf = random_bytes(N, 777);
        const size_t base[] = { 3 * 256, 2 * 3 * 256, 3 * 8192, 2 * 3 * 8192, 3 * 8192 + 3 * 256, N - 63 };
        for (size_t b = 0; b < sizeof base / sizeof base[0]; b++)
                for (size_t n = base[b] - 1; n <= base[b] + 1; n++)
                        for (size_t a = 0; a < 8; a++)
                                check_span(buf, a, n, n / 3 + 5);
        free(buf);
}
END_TEST

int main(void) {
        Suite *s = suite_create("crc32c");
        TCase *tc = tcase_create("crc32c");
        tcase_add_test(tc, test_vectors);
        tcase_add_test(tc, test_paths_agree);
        tcase_add_test(tc, test_three_streams);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
