/* kept.h — buffers for the outputs of the Python frontends' collectives,
 * kept for reuse (kept.c). A large fresh allocation comes from mmap as
 * pages that fault in, zeroed, as the data plane writes them: a 64 MiB
 * out-of-place allreduce spent most of its time so. Training loops and
 * benchmarks ask for the same sizes call after call, so a buffer whose
 * tensor has died serves the next output of its size. Each extension
 * (hvd._core, the TensorFlow op library) has a pool of its own. */
#ifndef HVD_PY_KEPT_H
#define HVD_PY_KEPT_H

#include <stddef.h>

/* Outputs of at least this many bytes use kept buffers: below it malloc
 * reuses its heap and the bookkeeping would cost more than it saves. */
#define HVD_KEPT_MIN_BYTES ((size_t) 256 << 10)

typedef struct hvd_kept {
        struct hvd_kept *next; /* the pool's list; NULL while taken */
        void *data;            /* bytes of memory, page-aligned */
        size_t bytes;
} hvd_kept_t;

/* A kept buffer of exactly bytes (> 0), else a new one; NULL when out of
 * memory. The caller owns it until it passes it to hvd_kept_give. The
 * memory's contents are whatever its last user left. Thread-safe. */
hvd_kept_t *hvd_kept_take(size_t bytes);

/* Gives k back to the pool (NULL: nothing), which keeps up to 1 GiB and
 * 512 buffers, freeing the oldest first. Thread-safe; never calls back
 * into Python or a framework. */
void hvd_kept_give(hvd_kept_t *k);

/* Frees every buffer the pool keeps (tests; process exit needs nothing). */
void hvd_kept_drain(void);

/* Bytes and buffers the pool keeps now. Thread-safe. */
void hvd_kept_stats(size_t *bytes, size_t *count);

#endif
