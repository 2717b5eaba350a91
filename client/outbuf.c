/* outbuf.c — the host outputs libhvd allocates (allgather, alltoall,
 * reducescatter), kept for reuse. A large fresh allocation is a new
 * mapping whose every page faults and is zeroed as the data plane first
 * writes it (for a 256 MiB allgather that cost more than the collective),
 * and a training loop asks for the same sizes every step. A buffer comes
 * back when its handle is released unstolen, or when the caller that stole
 * it hands it back (hvd_recycle_output); it serves a later output of at
 * least half its capacity, the smallest that fits and of those the last
 * to come back (the likeliest to be in the caches still). The pool is
 * bounded in buffers and bytes, forgets the oldest first, and keeps
 * nothing while hvd is not initialised. One mutex; nothing here calls out
 * while holding it. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "client.h"

#define OUTBUF_MIN       ((size_t) 256 << 10) /* below: malloc reuses its heap */
#define OUTBUF_MAX_COUNT 64
#define OUTBUF_MAX_BYTES ((size_t) 1 << 30)
#define OUTBUF_ALIGN     4096 /* a page: whole vectors and no false sharing */

static struct {
        pthread_mutex_t lock;
        bool open;
        size_t count, bytes;
        struct {
                void *p;      /* NULL: an empty place */
                size_t cap;   /* bytes the buffer holds at least */
                uint64_t age; /* when it came back (pool.clock) */
        } b[OUTBUF_MAX_COUNT];
        uint64_t clock;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

void *hvd_outbuf_get(size_t bytes, size_t *cap) {
        if (bytes < OUTBUF_MIN) {
                *cap = bytes;
                return malloc(bytes);
        }
        void *p = NULL;
        pthread_mutex_lock(&pool.lock);
        int best = -1;
        for (int i = 0; i < OUTBUF_MAX_COUNT; i++)
                if (pool.b[i].p && pool.b[i].cap >= bytes && pool.b[i].cap / 2 <= bytes &&
                    (best < 0 || pool.b[i].cap < pool.b[best].cap ||
                     (pool.b[i].cap == pool.b[best].cap && pool.b[i].age > pool.b[best].age)))
                        best = i;
        if (best >= 0) {
                p = pool.b[best].p;
                *cap = pool.b[best].cap;
                pool.b[best].p = NULL;
                pool.count--;
                pool.bytes -= *cap;
        }
        pthread_mutex_unlock(&pool.lock);
        if (p)
                return p;
        if (posix_memalign(&p, OUTBUF_ALIGN, bytes) != 0)
                return NULL;
        *cap = bytes;
        return p;
}

/* pool.lock held: the place of the oldest buffer kept (count > 0) */
static int oldest(void) {
        int o = -1;
        for (int i = 0; i < OUTBUF_MAX_COUNT; i++)
                if (pool.b[i].p && (o < 0 || pool.b[i].age < pool.b[o].age))
                        o = i;
        return o;
}

void hvd_outbuf_put(void *p, size_t cap) {
        void *drop[OUTBUF_MAX_COUNT + 1];
        int n_drop = 0;
        if (!p)
                return;
        pthread_mutex_lock(&pool.lock);
        if (!pool.open || cap < OUTBUF_MIN || cap > OUTBUF_MAX_BYTES) {
                drop[n_drop++] = p;
        } else {
                while (pool.count == OUTBUF_MAX_COUNT || pool.bytes + cap > OUTBUF_MAX_BYTES) {
                        int o = oldest();
                        drop[n_drop++] = pool.b[o].p;
                        pool.bytes -= pool.b[o].cap;
                        pool.count--;
                        pool.b[o].p = NULL;
                }
                int i = 0;
                while (pool.b[i].p)
                        i++;
                pool.b[i].p = p;
                pool.b[i].cap = cap;
                pool.b[i].age = ++pool.clock;
                pool.count++;
                pool.bytes += cap;
        }
        pthread_mutex_unlock(&pool.lock);
        for (int i = 0; i < n_drop; i++)
                free(drop[i]);
}

void hvd_outbuf_set_open(bool open) {
        void *drop[OUTBUF_MAX_COUNT];
        int n_drop = 0;
        pthread_mutex_lock(&pool.lock);
        pool.open = open;
        if (!open) {
                for (int i = 0; i < OUTBUF_MAX_COUNT; i++)
                        if (pool.b[i].p) {
                                drop[n_drop++] = pool.b[i].p;
                                pool.b[i].p = NULL;
                        }
                pool.count = pool.bytes = 0;
        }
        pthread_mutex_unlock(&pool.lock);
        for (int i = 0; i < n_drop; i++)
                free(drop[i]);
}

void hvd_outbuf_stats(size_t *bytes, size_t *count) {
        pthread_mutex_lock(&pool.lock);
        *bytes = pool.bytes;
        *count = pool.count;
        pthread_mutex_unlock(&pool.lock);
}

void hvd_recycle_output(void *data, size_t bytes) {
        /* the buffer holds at least bytes: its capacity may have been more */
        hvd_outbuf_put(data, bytes);
}
