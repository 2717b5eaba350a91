/* crc32c.c — CRC-32C (see crc32c.h). */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "crc32c.h"

#define POLY UINT32_C(0x82F63B78) /* 0x1EDC6F41 reflected */

static uint32_t table[8][256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build_table(void) {
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;
                for (int k = 0; k < 8; k++)
                        c = (c >> 1) ^ (POLY & (0u - (c & 1)));
                table[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++)
                for (int t = 1; t < 8; t++)
                        table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t hvd_crc32c_portable(uint32_t crc, const void *buf, size_t len) {
        pthread_once(&once, build_table);
        const uint8_t *p = buf;
        crc = ~crc;
        while (len && ((uintptr_t) p & 7)) {
                crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
                len--;
        }
        while (len >= 8) {
                uint32_t lo, hi;
                memcpy(&lo, p, 4);
                memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
                lo = __builtin_bswap32(lo);
                hi = __builtin_bswap32(hi);
#endif
                lo ^= crc;
                crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
                      table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
                      table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
                p += 8;
                len -= 8;
        }
        while (len--)
                crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
        return ~crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* The instruction takes 3 cycles and starts one a cycle: three streams
 * over the three thirds of a block run at once, and their CRCs are joined
 * with the operator that appends a third's length of zero bytes (as zlib's
 * crc32_combine does). LONG and SHORT are powers of two (zeros_op). */
#define LONG  8192
#define SHORT 256

static uint32_t long_shift[4][256], short_shift[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

/* mat (32 columns over GF(2)) times vec */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
        uint32_t sum = 0;
        for (; vec; vec >>= 1, mat++)
                if (vec & 1)
                        sum ^= *mat;
        return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
        for (int n = 0; n < 32; n++)
                square[n] = gf2_times(mat, mat[n]);
}

/* op: the operator that runs a CRC register over len zero bytes, len a
 * power of two */
static void zeros_op(uint32_t *op, size_t len) {
        uint32_t odd[32], even[32];
        odd[0] = POLY; /* one zero bit */
        for (int n = 1; n < 32; n++)
                odd[n] = UINT32_C(1) << (n - 1);
        gf2_square(even, odd); /* two bits */
        gf2_square(odd, even); /* four bits */
        for (;;) {
                gf2_square(even, odd); /* one byte, then four, sixteen... */
                if ((len >>= 1) == 0) {
                        memcpy(op, even, sizeof even);
                        return;
                }
                gf2_square(odd, even); /* two bytes, then eight... */
                if ((len >>= 1) == 0) {
                        memcpy(op, odd, sizeof odd);
                        return;
                }
        }
}

/* zeros_op(len) as four tables, one for each byte of the register */
static void zeros_tables(uint32_t t[4][256], size_t len) {
        uint32_t op[32];
        zeros_op(op, len);
        for (uint32_t n = 0; n < 256; n++)
                for (int k = 0; k < 4; k++)
                        t[k][n] = gf2_times(op, n << (8 * k));
}

static void build_shifts(void) {
        zeros_tables(long_shift, LONG);
        zeros_tables(short_shift, SHORT);
}

static inline uint64_t shift(uint32_t t[4][256], uint64_t crc) {
        return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][(crc >> 24) & 0xff];
}

static inline uint64_t load64(const uint8_t *p) {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
}

/* blocks of three times `third` bytes (LONG or SHORT) while len allows */
__attribute__((target("sse4.2"))) static inline uint64_t three_ways(uint64_t c0, const uint8_t **pp, size_t *lenp,
                                                                    size_t third, uint32_t t[4][256]) {
        const uint8_t *p = *pp;
        size_t len = *lenp;
        while (len >= 3 * third) {
                uint64_t c1 = 0, c2 = 0;
                for (const uint8_t *end = p + third; p < end; p += 8) {
                        c0 = _mm_crc32_u64(c0, load64(p));
                        c1 = _mm_crc32_u64(c1, load64(p + third));
                        c2 = _mm_crc32_u64(c2, load64(p + 2 * third));
                }
                c0 = shift(t, c0) ^ c1;
                c0 = shift(t, c0) ^ c2;
                p += 2 * third;
                len -= 3 * third;
        }
        *pp = p;
        *lenp = len;
        return c0;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len) {
        const uint8_t *p = buf;
        uint64_t c = ~crc;
        while (len && ((uintptr_t) p & 7)) {
                c = _mm_crc32_u8((uint32_t) c, *p++);
                len--;
        }
        if (len >= 3 * SHORT) {
                pthread_once(&shift_once, build_shifts);
                c = three_ways(c, &p, &len, LONG, long_shift);
                c = three_ways(c, &p, &len, SHORT, short_shift);
        }
        while (len >= 8) {
                c = _mm_crc32_u64(c, load64(p));
                p += 8;
                len -= 8;
        }
        while (len--)
                c = _mm_crc32_u8((uint32_t) c, *p++);
        return ~(uint32_t) c;
}

int hvd_crc32c_hw(void) {
        static int hw = -1;
        if (hw < 0) {
                __builtin_cpu_init();
                hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        }
        return hw;
}

uint32_t hvd_crc32c(uint32_t crc, const void *buf, size_t len) {
        return hvd_crc32c_hw() ? crc32c_sse42(crc, buf, len) : hvd_crc32c_portable(crc, buf, len);
}
#else
int hvd_crc32c_hw(void) {
        return 0;
}

uint32_t hvd_crc32c(uint32_t crc, const void *buf, size_t len) {
        return hvd_crc32c_portable(crc, buf, len);
}
#endif
