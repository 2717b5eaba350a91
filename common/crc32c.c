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

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len) {
        const uint8_t *p = buf;
        uint64_t c = ~crc;
        while (len && ((uintptr_t) p & 7)) {
                c = _mm_crc32_u8((uint32_t) c, *p++);
                len--;
        }
        /* three independent streams hide the instruction's latency would be
         * faster still; one stream already runs at several GB/s, far above
         * any link this checks */
        while (len >= 32) {
                uint64_t a, b2, d, e;
                memcpy(&a, p, 8);
                memcpy(&b2, p + 8, 8);
                memcpy(&d, p + 16, 8);
                memcpy(&e, p + 24, 8);
                c = _mm_crc32_u64(c, a);
                c = _mm_crc32_u64(c, b2);
                c = _mm_crc32_u64(c, d);
                c = _mm_crc32_u64(c, e);
                p += 32;
                len -= 32;
        }
        while (len >= 8) {
                uint64_t a;
                memcpy(&a, p, 8);
                c = _mm_crc32_u64(c, a);
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
