/* util.h — small helpers shared by every part of hvd: monotonic time in
 * microseconds, cleanup attributes, array sizes. Header-only. */
#ifndef HVD_UTIL_H
#define HVD_UTIL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define _cleanup_(f)  __attribute__((cleanup(f)))
#define _unused_      __attribute__((unused))
#define _likely_(x)   __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)
#define USEC_PER_SEC  UINT64_C(1000000)
#define USEC_PER_MSEC UINT64_C(1000)
#define HVD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HVD_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline uint64_t hvd_now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* The CLOCK_REALTIME time usec from now, as pthread_cond_timedwait wants it. */
static inline struct timespec hvd_realtime_after(uint64_t usec) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t) ts.tv_nsec + (usec % USEC_PER_SEC) * 1000;
        ts.tv_sec += (time_t) (usec / USEC_PER_SEC + ns / 1000000000);
        ts.tv_nsec = (long) (ns % 1000000000);
        return ts;
}

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

/* memcpy and memcmp for buffers that may be empty: a decoded bytes field
 * of length 0 has a NULL pointer, which memcpy and memcmp must not see
 * even with a size of 0. */
static inline void *memcpy_safe(void *dst, const void *src, size_t n) {
        return n ? memcpy(dst, src, n) : dst;
}

static inline bool memeq_safe(const void *a, size_t a_len, const void *b, size_t b_len) {
        return a_len == b_len && (!a_len || memcmp(a, b, a_len) == 0);
}

/* Returns the pointer and sets *p = NULL: for handing ownership on. */
#define TAKE_PTR(p)                                                                                                    \
        ({                                                                                                             \
                __typeof__(p) _p_ = (p);                                                                               \
                (p) = NULL;                                                                                            \
                _p_;                                                                                                   \
        })

#endif
