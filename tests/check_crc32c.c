/* check_crc32c.c — unit tests of CRC-32C (common/crc32c.c): published
 * check values (RFC 3720 B.4, the "123456789" check), incremental use,
 * and every implementation the CPU has (slicing-by-8, SSE4.2, AVX-512
 * carry-less multiplies) against a bitwise reference over every length
 * and alignment up to a few hundred bytes, and around the lengths where
 * the SSE4.2 path runs three streams at once (blocks of 3 x 256 and
 * 3 x 8,192 bytes) and the carry-less one folds (256-byte blocks) up to
 * several blocks. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
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

/* n bytes from offset a: every implementation this CPU has against the
 * bitwise one, whole and continued from the first k bytes */
static void check_span(const uint8_t *buf, size_t a, size_t n, size_t k) {
        uint32_t want = bitwise(buf + a, n);
        for (int level = 0; level <= hvd_crc32c_hw(); level++) {
                uint32_t got = hvd_crc32c_at(level, 0, buf + a, n);
                if (got != want)
                        ck_abort_msg("level %d, offset %zu length %zu: %08x, bitwise %08x", level, a, n, got, want);
                uint32_t two = hvd_crc32c_at(level, hvd_crc32c_at(level, 0, buf + a, k), buf + a + k, n - k);
                if (two != want)
                        ck_abort_msg("level %d, offset %zu length %zu split at %zu: %08x, want %08x", level, a, n, k,
                                     two, want);
        }
        if (hvd_crc32c(0, buf + a, n) != want)
                ck_abort_msg("hvd_crc32c, offset %zu length %zu: not the bitwise %08x", a, n, want);
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

/* Lengths at the edges of the folding blocks (256 bytes) and of the
 * three-stream ones (3 x 256 and 3 x 8,192 bytes), each at every
 * alignment, whole and in pieces that cut through the blocks. */
START_TEST(test_three_streams) {
        enum { N = 3 * 3 * 8192 + 3 * 256 + 64 };
        uint8_t *buf = random_bytes(N, 777);
        const size_t base[] = { 256, 512, 3 * 256, 2 * 3 * 256, 3 * 8192, 2 * 3 * 8192, 3 * 8192 + 3 * 256, N - 63 };
        for (size_t b = 0; b < sizeof base / sizeof base[0]; b++)
                for (size_t n = base[b] - 1; n <= base[b] + 1; n++)
                        for (size_t a = 0; a < 8; a++)
                                check_span(buf, a, n, n / 3 + 5);
        free(buf);
}
END_TEST

int main(void) {
        printf("crc32c: implementations 0 to %d on this CPU (0 slicing-by-8, 1 SSE4.2, 2 VPCLMULQDQ)\n",
               hvd_crc32c_hw());
        fflush(stdout);
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
