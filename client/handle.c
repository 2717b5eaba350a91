/* handle.c — what user threads and the runner share about a request: its
 * parameters, the entries and handles that carry it until it completes.
 * A handle lives while its
 * user holds it, while it is in flight, and while an op runs it (refs);
 * every field of an entry or handle is read and written under G.lock,
 * except the entry's submitted arguments (in, out, stream, p). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "util.h"

void hvd_params_free(hvd_params_t *p) {
        free(p->splits);
        p->splits = NULL;
        p->n_splits = 0;
        free(p->set_ranks);
        p->set_ranks = NULL;
        p->n_set = 0;
}

bool hvd_params_equal(const hvd_params_t *a, const hvd_params_t *b) {
        if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim || a->reduce_op != b->reduce_op ||
            a->prescale != b->prescale || a->postscale != b->postscale || a->root != b->root ||
            a->process_set != b->process_set || a->device != b->device || a->group_id != b->group_id ||
            a->group_size != b->group_size || a->n_splits != b->n_splits || a->n_set != b->n_set)
                return false;
        if (memcmp(a->shape, b->shape, (size_t) a->ndim * sizeof(int64_t)) != 0)
                return false;
        if (a->n_set && memcmp(a->set_ranks, b->set_ranks, a->n_set * sizeof(uint32_t)) != 0)
                return false;
        return a->n_splits == 0 || memcmp(a->splits, b->splits, a->n_splits * sizeof(int64_t)) == 0;
}

int hvd_params_copy(hvd_params_t *dst, const hvd_params_t *src) {
        int64_t *s = NULL;
        uint32_t *set = NULL;
        if (src->n_splits) {
                s = malloc(src->n_splits * sizeof *s);
                if (!s)
                        return -ENOMEM;
                memcpy(s, src->splits, src->n_splits * sizeof *s);
        }
        if (src->n_set) {
                set = malloc(src->n_set * sizeof *set);
                if (!set) {
                        free(s);
                        return -ENOMEM;
                }
                memcpy(set, src->set_ranks, src->n_set * sizeof *set);
        }
        hvd_params_free(dst);
        *dst = *src;
        dst->splits = s;
        dst->set_ranks = set;
        return 0;
}

void hvd_handle_free(hvd_handle_t *h) {
        for (size_t i = 0; i < h->n; i++) {
                hvd_entry_t *e = &h->m[i];
                free(e->name);
                hvd_params_free(&e->p);
                if (e->alloc_node && e->alloc) {
                        /* device memory: freed by hvd_gpu_free_garbage() */
                        e->alloc_node->p = e->alloc;
                        e->alloc_node->device = e->alloc_device;
                        e->alloc_node->next = G.dev_garbage;
                        G.dev_garbage = e->alloc_node;
                } else {
                        free(e->alloc_node);
                        hvd_outbuf_put(e->alloc, e->alloc_cap);
                }
                free(e->recv_splits);
        }
        free(h->error);
        free(h);
}

void hvd_handle_unref(hvd_handle_t *h) {
        hvd_assert(h->refs > 0);
        if (--h->refs == 0)
                hvd_handle_free(h);
}

void hvd_handle_mark_waited(hvd_handle_t *h) {
        if (h->n_pending && !h->waited) {
                h->waited = true;
                atomic_fetch_add(&G.app_waiting, 1);
        }
}

void hvd_entry_complete(hvd_entry_t *e, int status, const char *msg) {
        hvd_handle_t *h = e->h;
        if (e->done)
                return;
        e->done = true;
        hvd_assert(h->n_pending > 0); /* each member completes once */
        hvd_strmap_remove(G.inflight, e->name, strlen(e->name));
        if (status < 0 && h->status >= 0) {
                h->status = status;
                free(h->error);
                h->error = strdup(msg && *msg ? msg : hvd_strerror(status));
        }
        if (--h->n_pending == 0) {
                pthread_cond_broadcast(&G.cond);
                if (h->waited)
                        atomic_fetch_sub(&G.app_waiting, 1);
                if (h->notify)
                        h->notify(h->notify_arg);
                hvd_handle_unref(h);
        }
}

void hvd_inflight_fail(int code, const char *reason) {
        for (size_t i = 0; i < G.n_queue; i++)
                hvd_entry_complete(G.queue[i], code, reason);
        G.n_queue = 0;
        size_t iter = 0;
        void *v;
        hvd_entry_t *batch[256];
        for (;;) {
                size_t n = 0;
                iter = 0;
                while (n < ELEMENTSOF(batch) && hvd_strmap_next(G.inflight, &iter, NULL, NULL, &v))
                        batch[n++] = v;
                if (!n)
                        break;
                for (size_t i = 0; i < n; i++)
                        hvd_entry_complete(batch[i], code, reason);
        }
}

/* ---- the API of handles ---- */

static int wait_timeout(hvd_handle_t *h, uint64_t timeout_usec) {
        struct timespec ts = hvd_realtime_after(timeout_usec);
        pthread_mutex_lock(&G.lock);
        while (h->n_pending) {
                if (hvd_fp_user_may_run(h)) {
                        /* the fast path, run by this thread (see hvd_fp_user_turn) */
                        pthread_mutex_unlock(&G.lock);
                        hvd_fastpath_t *fp = G.fp;
                        atomic_fetch_add(&G.fp_waiters, 1);
                        int t = hvd_fp_user_turn();
                        /* our bits wait on the board for the other ranks: wait
                         * for it to change; the background thread has the turn:
                         * wait for the completion (below) */
                        bool board = t > 0 && fp && !hvd_fastpath_awaits_schedule(fp);
                        if (board && h->n_pending)
                                hvd_fastpath_wait(fp, USEC_PER_MSEC);
                        atomic_fetch_sub(&G.fp_waiters, 1);
                        pthread_mutex_lock(&G.lock);
                        if (!h->n_pending)
                                break;
                        if (t != 0) {
                                /* the background thread has the turn, or the board
                                 * has yet to fill: look again soon */
                                struct timespec soon;
                                clock_gettime(CLOCK_REALTIME, &soon);
                                soon.tv_nsec += t < 0 ? 1000000 : 0;
                                if (soon.tv_nsec >= 1000000000) {
                                        soon.tv_sec++;
                                        soon.tv_nsec -= 1000000000;
                                }
                                if (t < 0 && !board)
                                        pthread_cond_timedwait(&G.cond, &G.lock, &soon);
                                if (timeout_usec &&
                                    (soon.tv_sec > ts.tv_sec ||
                                     (soon.tv_sec == ts.tv_sec && soon.tv_nsec >= ts.tv_nsec)) &&
                                    h->n_pending) {
                                        pthread_mutex_unlock(&G.lock);
                                        return HVD_ETIMEOUT;
                                }
                                continue;
                        }
                }
                if (timeout_usec == 0)
                        pthread_cond_wait(&G.cond, &G.lock);
                else if (pthread_cond_timedwait(&G.cond, &G.lock, &ts) == ETIMEDOUT && h->n_pending) {
                        pthread_mutex_unlock(&G.lock);
                        return HVD_ETIMEOUT;
                }
        }
        int r = h->status;
        if (r < 0)
                hvd_last_error_set("%s", h->error ? h->error : hvd_strerror(r));
        pthread_mutex_unlock(&G.lock);
        return r;
}

int hvd_handle_wait_timeout(hvd_handle_t *h, uint64_t timeout_usec) {
        if (!h)
                return -EINVAL;
        atomic_fetch_add(&G.app_waiting, 1); /* hvd's waits may spin meanwhile */
        int r = wait_timeout(h, timeout_usec);
        atomic_fetch_sub(&G.app_waiting, 1);
        return r;
}

int hvd_handle_wait(hvd_handle_t *h) {
        return hvd_handle_wait_timeout(h, 0);
}

int hvd_handle_notify(hvd_handle_t *h, void (*fn)(void *arg), void *arg) {
        if (!h || !fn)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        int r = h->notify ? -EBUSY : 0;
        bool done = h->n_pending == 0;
        if (r == 0) {
                /* kept also when done, so that a second callback is refused */
                h->notify = fn;
                h->notify_arg = arg;
                hvd_handle_mark_waited(h); /* its caller waits for it */
        }
        pthread_mutex_unlock(&G.lock);
        if (r == 0 && done)
                fn(arg);
        return r;
}

int hvd_handle_poll(hvd_handle_t *h) {
        if (!h)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        int done = h->n_pending == 0;
        pthread_mutex_unlock(&G.lock);
        return done;
}

const char *hvd_handle_error(const hvd_handle_t *h) {
        if (!h)
                return "";
        pthread_mutex_lock(&G.lock);
        const char *e = h->n_pending == 0 && h->error ? h->error : "";
        pthread_mutex_unlock(&G.lock);
        return e;
}

int hvd_handle_output(const hvd_handle_t *h, size_t index, const void **data, size_t *bytes, int *ndim,
                      const int64_t **shape) {
        if (!h || index >= h->n)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        const hvd_entry_t *e = &h->m[index];
        int r = 0;
        if (h->n_pending || h->status < 0 || !e->alloc)
                r = -ENODATA;
        pthread_mutex_unlock(&G.lock);
        if (r < 0)
                return r;
        if (data)
                *data = e->alloc;
        if (bytes)
                *bytes = e->alloc_bytes;
        if (ndim)
                *ndim = e->out_ndim;
        if (shape)
                *shape = e->out_shape;
        return 0;
}

int hvd_handle_recv_splits(const hvd_handle_t *h, const int64_t **splits) {
        if (!h || !splits)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        int r = h->n_pending || !h->m[0].recv_splits ? -ENODATA : 0;
        pthread_mutex_unlock(&G.lock);
        if (r == 0)
                *splits = h->m[0].recv_splits;
        return r;
}

int hvd_handle_steal_output(hvd_handle_t *h, size_t index, void **data, size_t *bytes) {
        if (!h || index >= h->n || !data)
                return -EINVAL;
        pthread_mutex_lock(&G.lock);
        hvd_entry_t *e = &h->m[index];
        int r = 0;
        if (h->n_pending || h->status < 0 || !e->alloc)
                r = -ENODATA;
        else {
                *data = TAKE_PTR(e->alloc);
                if (bytes)
                        *bytes = e->alloc_bytes;
        }
        pthread_mutex_unlock(&G.lock);
        return r;
}

void hvd_handle_release(hvd_handle_t **hp) {
        if (!hp || !*hp)
                return;
        pthread_mutex_lock(&G.lock);
        hvd_handle_unref(*hp);
        bool garbage = G.dev_garbage != NULL;
        pthread_mutex_unlock(&G.lock);
        *hp = NULL;
        if (garbage)
                hvd_gpu_free_garbage();
}
