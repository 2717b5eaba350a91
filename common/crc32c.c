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
#include <immintrin.h>

/* The instruction takes 3 cycles and starts one a cycle: three streams
 * over the three thirds of a block run at once, and their CRCs are joined
 * by appending a third's length of zero bytes to the first, which
 * multiplies a CRC register by x^(8 x third) mod P (as zlib's
 * crc32_combine does): shift tables, one for each byte of the register. */
#define LONG  8192
#define SHORT 256

static uint32_t long_shift[4][256], short_shift[4][256];

/* Folding with carry-less multiplies (the Intel white paper "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ"): 256 bytes at a
 * time in four 512-bit registers, 16 lanes of 128 bits, each carried d
 * bits forward by multiplying its two halves by x^(d+32) and x^(d-32)
 * mod P (shifted by one); the registers and lanes folded into one, whose
 * 16 bytes the crc32 instruction finishes. fold_k: d = 2048 (the loop),
 * 512 (register onto register), 128 (lane onto lane). */
static uint64_t fold_k[3][2];
static pthread_once_t constants_once = PTHREAD_ONCE_INIT;

/* a times b mod P, both bit-reflected as the CRC register is (x^0 is the
 * top bit) */
static uint32_t mul_mod(uint32_t a, uint32_t b) {
        uint32_t p = 0;
        for (uint32_t m = UINT32_C(1) << 31; m; m >>= 1) {
                if (a & m)
                        p ^= b;
                b = (b >> 1) ^ (POLY & (0u - (b & 1))); /* b times x */
        }
        return p;
}

/* x^n mod P, bit-reflected */
static uint32_t x_pow(uint64_t n) {
        uint32_t r = UINT32_C(1) << 31, sq = UINT32_C(1) << 30; /* x^0, x^1 */
        for (; n; n >>= 1, sq = mul_mod(sq, sq))
                if (n & 1)
                        r = mul_mod(r, sq);
        return r;
}

/* the tables of the register times x^(8 x len) */
static void shift_tables(uint32_t t[4][256], uint64_t len) {
        uint32_t op = x_pow(8 * len);
        for (uint32_t n = 0; n < 256; n++)
                for (int k = 0; k < 4; k++)
                        t[k][n] = mul_mod(n << (8 * k), op);
}

static void build_constants(void) {
        shift_tables(long_shift, LONG);
        shift_tables(short_shift, SHORT);
        static const unsigned d[3] = { 2048, 512, 128 };
        for (int i = 0; i < 3; i++) {
                fold_k[i][0] = (uint64_t) x_pow(d[i] - 32) << 1;
                fold_k[i][1] = (uint64_t) x_pow(d[i] + 32) << 1;
        }
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
                pthread_once(&constants_once, build_constants);
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

#define VPCLMUL_TARGET "sse4.2,pclmul,avx512f,vpclmulqdq"

__attribute__((target("sse4.2,pclmul"))) static inline __m128i fold128(__m128i x, __m128i k, __m128i next) {
        return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x01), _mm_clmulepi64_si128(x, k, 0x10)), next);
}

__attribute__((target(VPCLMUL_TARGET))) static inline __m512i fold512(__m512i x, __m512i k, __m512i next) {
        return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x01), _mm512_clmulepi64_epi128(x, k, 0x10),
                                         next, 0x96);
}

__attribute__((target(VPCLMUL_TARGET))) static inline __m512i fold_k512(int i) {
        return _mm512_broadcast_i32x4(_mm_set_epi64x((long long) fold_k[i][1], (long long) fold_k[i][0]));
}

__attribute__((target(VPCLMUL_TARGET))) static uint32_t crc32c_vpclmul(uint32_t crc, const void *buf, size_t len) {
        if (len < 256)
                return crc32c_sse42(crc, buf, len);
        pthread_once(&constants_once, build_constants);
        const uint8_t *p = buf;
        /* the register's start value goes into the first bytes */
        __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int) ~crc)));
        __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
        p += 256;
        len -= 256;
        __m512i k = fold_k512(0);
        for (; len >= 256; p += 256, len -= 256) {
                x0 = fold512(x0, k, _mm512_loadu_si512(p));
                x1 = fold512(x1, k, _mm512_loadu_si512(p + 64));
                x2 = fold512(x2, k, _mm512_loadu_si512(p + 128));
                x3 = fold512(x3, k, _mm512_loadu_si512(p + 192));
        }
        k = fold_k512(1);
        x0 = fold512(fold512(fold512(x0, k, x1), k, x2), k, x3);
        __m128i k1 = _mm_set_epi64x((long long) fold_k[2][1], (long long) fold_k[2][0]);
        __m128i y = _mm512_extracti32x4_epi32(x0, 0);
        y = fold128(y, k1, _mm512_extracti32x4_epi32(x0, 1));
        y = fold128(y, k1, _mm512_extracti32x4_epi32(x0, 2));
        y = fold128(y, k1, _mm512_extracti32x4_epi32(x0, 3));
        for (; len >= 16; p += 16, len -= 16)
                y = fold128(y, k1, _mm_loadu_si128((const __m128i *) p));
        uint64_t c = _mm_crc32_u64(0, (uint64_t) _mm_cvtsi128_si64(y));
        c = _mm_crc32_u64(c, (uint64_t) _mm_extract_epi64(y, 1));
        return crc32c_sse42(~(uint32_t) c, p, len);
}

int hvd_crc32c_hw(void) {
        static int hw = -1;
        if (hw < 0) {
                __builtin_cpu_init();
                hw = !__builtin_cpu_supports("sse4.2") ? 0
                     : __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
                                     __builtin_cpu_supports("vpclmulqdq")
                             ? 2
                             : 1;
        }
        return hw;
}

uint32_t hvd_crc32c_at(int level, uint32_t crc, const void *buf, size_t len) {
        int hw = hvd_crc32c_hw();
        switch (level < hw ? level : hw) {
        case 2: return crc32c_vpclmul(crc, buf, len);
        case 1: return crc32c_sse42(crc, buf, len);
        default: return hvd_crc32c_portable(crc, buf, len);
        }
}

uint32_t hvd_crc32c(uint32_t crc, const void *buf, size_t len) {
        return hvd_crc32c_at(2, crc, buf, len);
}
#else
int hvd_crc32c_hw(void) {
        return 0;
}

uint32_t hvd_crc32c_at(int level, uint32_t crc, const void *buf, size_t len) {
        (void) level;
        return hvd_crc32c_portable(crc, buf, len);
}

uint32_t hvd_crc32c(uint32_t crc, const void *buf, size_t len) {
        return hvd_crc32c_portable(crc, buf, len);
}
#endif
