/* complete.c — the completion thread of hvd's TensorFlow ops: libhvd calls
 * notify() under its lock when a handle completes, which only queues the
 * op; this thread then copies results into TensorFlow's outputs and runs
 * the op's done callback, so that neither libhvd's threads nor
 * TensorFlow's wait for each other. One thread, started with the first op
 * and kept for the life of the process. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

#include "tf_ops.h"

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        hvd_tf_op_t *head, *tail; /* completed, not yet finished */
        bool started;
} q = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void *complete_main(void *arg) {
        (void) arg;
        for (;;) {
                pthread_mutex_lock(&q.lock);
                while (!q.head)
                        pthread_cond_wait(&q.cond, &q.lock);
                hvd_tf_op_t *op = q.head;
                q.head = op->next;
                if (!q.head)
                        q.tail = NULL;
                pthread_mutex_unlock(&q.lock);
                op->next = NULL;
                hvd_tf_op_finish(op);
        }
        return NULL;
}

/* Called by libhvd with its lock held: queue, nothing else. */
static void notify(void *arg) {
        hvd_tf_op_t *op = arg;
        pthread_mutex_lock(&q.lock);
        if (q.tail)
                q.tail->next = op;
        else
                q.head = op;
        q.tail = op;
        pthread_cond_signal(&q.cond);
        pthread_mutex_unlock(&q.lock);
}

static int start_thread(void) {
        pthread_mutex_lock(&q.lock);
        int r = 0;
        if (!q.started) {
                pthread_attr_t attr;
                pthread_t t;
                r = pthread_attr_init(&attr);
                if (r == 0) {
                        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                        r = pthread_create(&t, &attr, complete_main, NULL);
                        pthread_attr_destroy(&attr);
                        if (r == 0)
                                pthread_setname_np(t, "hvd-tf-done"); /* for top -H and perf */
                }
                q.started = r == 0;
        }
        pthread_mutex_unlock(&q.lock);
        return -r;
}

int hvd_tf_complete_when_done(hvd_tf_op_t *op) {
        int r = start_thread();
        if (r < 0)
                return r;
        return hvd_handle_notify(op->handle, notify, op);
}
