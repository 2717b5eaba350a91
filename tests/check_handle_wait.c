/* check_handle_wait.c — the spin gate's count of the application's waits
 * (G.app_waiting, client/handle.c): a thread in hvd_handle_wait_timeout
 * counts while it waits, timed out or not; a pending handle counts from
 * its notify callback (or its *_waiting submission, `waited`) until it
 * completes, once however it came to be waited for, and a handle that
 * is already complete never counts. Every way a handle completes (its
 * operation, the job's abort) brings the count back to 0: a count left
 * behind would keep hvd's waits spinning while the application computes.
 * handle.c is compiled in alone, with the client's state here; no job
 * runs, so the test completes the handles itself, as the runner does. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"

struct hvd_client hvd_client = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .cond = PTHREAD_COND_INITIALIZER,
        .runner = PTHREAD_MUTEX_INITIALIZER,
        .wake_fd = -1,
};

/* what handle.c calls elsewhere in libhvd: without a board (G.fp NULL)
 * nor device outputs, none of them has anything to do */
bool hvd_fp_user_may_run(const hvd_handle_t *h) {
        (void) h;
        return false;
}
int hvd_fp_user_turn(void) {
        return 0;
}
bool hvd_fastpath_awaits_schedule(const hvd_fastpath_t *fp) {
        (void) fp;
        return false;
}
void hvd_fastpath_wait(hvd_fastpath_t *fp, uint64_t max_usec) {
        (void) fp;
        (void) max_usec;
}
void hvd_gpu_free_garbage(void) {
}
void hvd_outbuf_put(void *p, size_t cap) {
        (void) cap;
        free(p);
}
void hvd_last_error_set(const char *fmt, ...) {
        (void) fmt;
}

static int calls;
static void on_done(void *arg) {
        (void) arg;
        calls++;
}

static unsigned waiting(void) {
        return atomic_load(&G.app_waiting);
}

/* A pending handle of one allreduce, held by its user and in flight, as
 * a submission leaves it. */
static hvd_handle_t *pending(const char *name) {
        hvd_handle_t *h = calloc(1, sizeof *h + sizeof(hvd_entry_t));
        ck_assert_ptr_nonnull(h);
        h->n = h->n_pending = 1;
        h->refs = 2;
        h->m[0].h = h;
        h->m[0].name = strdup(name);
        h->m[0].p.kind = HVD__KIND__KIND_ALLREDUCE;
        pthread_mutex_lock(&G.lock);
        ck_assert_int_eq(hvd_strmap_put(G.inflight, name, strlen(name), &h->m[0]), 0);
        pthread_mutex_unlock(&G.lock);
        return h;
}

static void complete(hvd_handle_t *h, int status) {
        pthread_mutex_lock(&G.lock);
        hvd_entry_complete(&h->m[0], status, status < 0 ? "failed" : NULL);
        pthread_mutex_unlock(&G.lock);
}

static void setup(void) {
        G.inflight = hvd_strmap_new();
        ck_assert_ptr_nonnull(G.inflight);
        atomic_store(&G.app_waiting, 0);
        calls = 0;
}

static void teardown(void) {
        ck_assert_uint_eq(hvd_strmap_size(G.inflight), 0);
        hvd_strmap_destroy(&G.inflight);
}

START_TEST(test_notify_counts_until_completion) {
        hvd_handle_t *h = pending("a");
        ck_assert_uint_eq(waiting(), 0); /* submitted: the application computes */
        ck_assert_int_eq(hvd_handle_notify(h, on_done, NULL), 0);
        ck_assert_uint_eq(waiting(), 1);
        ck_assert_int_eq(hvd_handle_notify(h, on_done, NULL), -EBUSY); /* refused, not counted again */
        ck_assert_uint_eq(waiting(), 1);
        complete(h, 0);
        ck_assert_int_eq(calls, 1);
        ck_assert_uint_eq(waiting(), 0);
        hvd_handle_release(&h);
}
END_TEST

START_TEST(test_waiting_submission_counted_once) {
        hvd_handle_t *h = pending("b");
        pthread_mutex_lock(&G.lock);
        hvd_handle_mark_waited(h); /* as submit_ex does for a *_waiting submission */
        pthread_mutex_unlock(&G.lock);
        ck_assert_uint_eq(waiting(), 1);
        ck_assert_int_eq(hvd_handle_notify(h, on_done, NULL), 0);
        ck_assert_uint_eq(waiting(), 1);
        complete(h, 0);
        ck_assert_uint_eq(waiting(), 0);
        hvd_handle_release(&h);
}
END_TEST

START_TEST(test_complete_handle_never_counts) {
        hvd_handle_t *h = pending("c");
        complete(h, 0);
        ck_assert_int_eq(hvd_handle_notify(h, on_done, NULL), 0); /* runs at once */
        ck_assert_int_eq(calls, 1);
        ck_assert_uint_eq(waiting(), 0);
        ck_assert_int_eq(hvd_handle_wait(h), 0);
        ck_assert_uint_eq(waiting(), 0);
        hvd_handle_release(&h);
}
END_TEST

START_TEST(test_timed_out_wait_uncounts) {
        hvd_handle_t *h = pending("d");
        ck_assert_int_eq(hvd_handle_wait_timeout(h, 2000), HVD_ETIMEOUT);
        ck_assert_uint_eq(waiting(), 0);
        complete(h, 0);
        hvd_handle_release(&h);
}
END_TEST

static void *waiter(void *arg) {
        return (void *) (intptr_t) hvd_handle_wait((hvd_handle_t *) arg);
}

START_TEST(test_thread_counts_while_it_waits) {
        hvd_handle_t *h = pending("e");
        ck_assert_int_eq(hvd_handle_notify(h, on_done, NULL), 0);
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, waiter, h), 0);
        /* the notify's count and the waiting thread's */
        for (int i = 0; i < 10000 && waiting() < 2; i++)
                usleep(100);
        ck_assert_uint_eq(waiting(), 2);
        complete(h, 0);
        void *r = NULL;
        pthread_join(t, &r);
        ck_assert_int_eq((int) (intptr_t) r, 0);
        ck_assert_uint_eq(waiting(), 0);
        hvd_handle_release(&h);
}
END_TEST

START_TEST(test_abort_uncounts_every_handle) {
        hvd_handle_t *h[3] = { pending("f0"), pending("f1"), pending("f2") };
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(hvd_handle_notify(h[i], on_done, NULL), 0);
        ck_assert_uint_eq(waiting(), 3);
        pthread_mutex_lock(&G.lock);
        hvd_inflight_fail(-ECONNRESET, "the job aborted");
        pthread_mutex_unlock(&G.lock);
        ck_assert_int_eq(calls, 3);
        ck_assert_uint_eq(waiting(), 0);
        for (int i = 0; i < 3; i++) {
                ck_assert_int_eq(hvd_handle_wait(h[i]), -ECONNRESET);
                hvd_handle_release(&h[i]);
        }
        ck_assert_uint_eq(waiting(), 0);
}
END_TEST

int main(void) {
        Suite *s = suite_create("handle_wait");
        TCase *tc = tcase_create("app_waiting");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_notify_counts_until_completion);
        tcase_add_test(tc, test_waiting_submission_counted_once);
        tcase_add_test(tc, test_complete_handle_never_counts);
        tcase_add_test(tc, test_timed_out_wait_uncounts);
        tcase_add_test(tc, test_thread_counts_while_it_waits);
        tcase_add_test(tc, test_abort_uncounts_every_handle);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
