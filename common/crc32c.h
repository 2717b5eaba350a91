/* crc32c.h — CRC-32C (Castagnoli, the iSCSI/ext4 polynomial 0x1EDC6F41,
 * reflected), used to check the TCP ring's chunks. Chosen at run time:
 * AVX-512 carry-less multiplies where the CPU has them, else the SSE4.2
 * instruction (three streams at once from 768 bytes), else slicing-by-8. */
#ifndef HVD_CRC32C_H
#define HVD_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc (0 to start) over len bytes: crc32c(crc32c(0, a), b) is
 * the CRC of a followed by b. crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t hvd_crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable implementation alone (for tests and comparisons). */
uint32_t hvd_crc32c_portable(uint32_t crc, const void *buf, size_t len);

/* What hvd_crc32c uses on this CPU: 0 slicing-by-8, 1 the SSE4.2
 * instruction, 2 also AVX-512 carry-less multiplies (VPCLMULQDQ) from
 * 256 bytes. */
int hvd_crc32c_hw(void);

/* The implementation of that level (at most hvd_crc32c_hw()'s), for tests
 * and comparisons. */
uint32_t hvd_crc32c_at(int level, uint32_t crc, const void *buf, size_t len);

#endif
