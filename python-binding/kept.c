/* kept.c — the pool of kept output buffers (kept.h): a list, newest first,
 * of buffers whose tensors have died, bounded in bytes and count; a buffer
 * is reused only for an output of exactly its size, and the oldest are
 * freed first when the bounds are passed. One mutex; nothing here calls
 * out while holding it. */
#include <pthread.h>
#include <stdlib.h>

#include "kept.h"

#define KEEP_MAX_BYTES ((size_t) 1 << 30)
#define KEEP_MAX_COUNT 512
#define ALIGN_BYTES    4096 /* a page: more than any framework's alignment */

static struct {
        pthread_mutex_t lock;
        hvd_kept_t *head; /* newest first */
        size_t bytes, count;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void kept_free(hvd_kept_t *k) {
        free(k->data);
        free(k);
}

static void free_list(hvd_kept_t *k) {
        while (k) {
                hvd_kept_t *next = k->next;
                kept_free(k);
                k = next;
        }
}

/* pool.lock held: the oldest kept buffer out of the pool, or NULL */
static hvd_kept_t *take_oldest(void) {
        hvd_kept_t **p = &pool.head;
        if (!*p)
                return NULL;
        while ((*p)->next)
                p = &(*p)->next;
        hvd_kept_t *k = *p;
        *p = NULL;
        pool.bytes -= k->bytes;
        pool.count--;
        return k;
}

void hvd_kept_give(hvd_kept_t *k) {
        hvd_kept_t *old = NULL;
        if (!k)
                return;
        if (k->bytes > KEEP_MAX_BYTES) {
                kept_free(k);
                return;
        }
        pthread_mutex_lock(&pool.lock);
        k->next = pool.head;
        pool.head = k;
        pool.bytes += k->bytes;
        pool.count++;
        while (pool.bytes > KEEP_MAX_BYTES || pool.count > KEEP_MAX_COUNT) {
                hvd_kept_t *o = take_oldest();
                o->next = old;
                old = o;
        }
        pthread_mutex_unlock(&pool.lock);
        free_list(old);
}

hvd_kept_t *hvd_kept_take(size_t bytes) {
        hvd_kept_t *k = NULL;
        pthread_mutex_lock(&pool.lock);
        for (hvd_kept_t **p = &pool.head; *p; p = &(*p)->next)
                if ((*p)->bytes == bytes) {
                        k = *p;
                        *p = k->next;
                        k->next = NULL;
                        pool.bytes -= bytes;
                        pool.count--;
                        break;
                }
        pthread_mutex_unlock(&pool.lock);
        if (k)
                return k;
        k = calloc(1, sizeof *k);
        if (!k || posix_memalign(&k->data, ALIGN_BYTES, bytes ? bytes : 1) != 0) {
                free(k);
                return NULL;
        }
        k->bytes = bytes;
        return k;
}

void hvd_kept_drain(void) {
        pthread_mutex_lock(&pool.lock);
        hvd_kept_t *all = pool.head;
        pool.head = NULL;
        pool.bytes = pool.count = 0;
        pthread_mutex_unlock(&pool.lock);
        free_list(all);
}

void hvd_kept_stats(size_t *bytes, size_t *count) {
        pthread_mutex_lock(&pool.lock);
        *bytes = pool.bytes;
        *count = pool.count;
        pthread_mutex_unlock(&pool.lock);
}
