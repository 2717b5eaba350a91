/* outbuf.c — buffers for the outputs of hvd's TensorFlow ops, kept for
 * reuse. TensorFlow's default CPU allocator hands a large output fresh
 * pages, each faulted in and zeroed as hvd writes it (a ResNet-50 step
 * spent 40 % of its time so); a training loop asks for the same sizes
 * every step. A buffer comes back here when TensorFlow drops the last reference
 * to its tensor (on any thread); up to KEEP_MAX_BYTES of them are kept,
 * the oldest freed first. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

#include "tf_ops.h"

#define KEEP_MAX_BYTES ((size_t) 1 << 30)
#define KEEP_MAX_COUNT 512
#define ALIGN_BYTES    4096 /* a page: more than TensorFlow's alignment */

typedef struct kept {
        struct kept *next;
        void *data;
        size_t bytes;
} kept_t;

static struct {
        pthread_mutex_t lock;
        kept_t *head; /* newest first */
        size_t bytes, count;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void kept_free(kept_t *k) {
        free(k->data);
        free(k);
}

/* pool.lock held: the oldest kept buffer out of the pool, or NULL */
static kept_t *take_oldest(void) {
        kept_t **p = &pool.head;
        if (!*p)
                return NULL;
        while ((*p)->next)
                p = &(*p)->next;
        kept_t *k = *p;
        *p = NULL;
        pool.bytes -= k->bytes;
        pool.count--;
        return k;
}

/* TensorFlow's deallocator of the tensors made here */
static void give_back(void *data, size_t len, void *arg) {
        kept_t *k = arg, *old = NULL;
        (void) data;
        (void) len;
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
                kept_t *o = take_oldest();
                o->next = old;
                old = o;
        }
        pthread_mutex_unlock(&pool.lock);
        while (old) {
                kept_t *next = old->next;
                kept_free(old);
                old = next;
        }
}

/* A kept buffer of exactly bytes, else a new one; NULL when out of memory */
static kept_t *take(size_t bytes) {
        kept_t *k = NULL;
        pthread_mutex_lock(&pool.lock);
        for (kept_t **p = &pool.head; *p; p = &(*p)->next)
                if ((*p)->bytes == bytes) {
                        k = *p;
                        *p = k->next;
                        pool.bytes -= bytes;
                        pool.count--;
                        break;
                }
        pthread_mutex_unlock(&pool.lock);
        if (k)
                return k;
        k = calloc(1, sizeof *k);
        if (!k || posix_memalign(&k->data, ALIGN_BYTES, bytes) != 0) {
                free(k);
                return NULL;
        }
        k->bytes = bytes;
        return k;
}

TF_Tensor *hvd_tf_outbuf_tensor(TF_DataType dtype, const int64_t *dims, int ndim, size_t bytes) {
        kept_t *k = take(bytes);
        if (!k)
                return NULL;
        /* on failure TF_NewTensor has called give_back already */
        return TF_NewTensor(dtype, dims, ndim, k->data, bytes, give_back, k);
}
