/* check_notify.c — unit tests of hvd_handle_notify (client/handle.c) on a
 * job of one rank (no daemon): the callback runs exactly once per handle,
 * after completion, for pending and already complete handles, also for a
 * handle released while pending; results are then readable from another
 * thread; bad arguments and a second callback are refused. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"

#define N_HANDLES 200

/* What a callback records, read by the test's thread under lock. */
static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int calls[N_HANDLES];
        int total;
} seen = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void on_done(void *arg) {
        int i = (int) (intptr_t) arg;
        pthread_mutex_lock(&seen.lock);
        seen.calls[i]++;
        seen.total++;
        pthread_cond_broadcast(&seen.cond);
        pthread_mutex_unlock(&seen.lock);
}

static void wait_total(int n) {
        pthread_mutex_lock(&seen.lock);
        while (seen.total < n)
                pthread_cond_wait(&seen.cond, &seen.lock);
        pthread_mutex_unlock(&seen.lock);
}

static void setup(void) {
        unsetenv("HVD_JOB_ID");
        unsetenv("HOROVOD_RANK");
        ck_assert_int_eq(hvd_init(), 0);
        ck_assert_int_eq(hvd_size(), 1);
        memset(seen.calls, 0, sizeof seen.calls);
        seen.total = 0;
}

static void teardown(void) {
        hvd_shutdown();
}

static hvd_handle_t *submit_allreduce(const char *name, const float *in, float *out, int64_t *shape) {
        hvd_request_t req = HVD_REQUEST_INIT;
        req.name = name;
        req.input = in;
        req.output = out;
        req.ndim = 1;
        req.shape = shape;
        req.reduce_op = HVD_REDUCE_SUM;
        req.postscale = 3.0;
        hvd_handle_t *h = NULL;
        ck_assert_int_eq(hvd_allreduce_async(&req, &h), 0);
        ck_assert_ptr_nonnull(h);
        return h;
}

START_TEST(test_notify_once_per_handle) {
        /* 200 allreduces notified as submitted: each callback once, and by
         * then every output is written */
        static float in[N_HANDLES][4], out[N_HANDLES][4];
        int64_t shape[1] = { 4 };
        hvd_handle_t *h[N_HANDLES];
        char name[64];
        for (int i = 0; i < N_HANDLES; i++) {
                for (int k = 0; k < 4; k++)
                        in[i][k] = (float) (i + k);
                snprintf(name, sizeof name, "notify.%d", i);
                h[i] = submit_allreduce(name, in[i], out[i], shape);
                ck_assert_int_eq(hvd_handle_notify(h[i], on_done, (void *) (intptr_t) i), 0);
        }
        wait_total(N_HANDLES);
        for (int i = 0; i < N_HANDLES; i++) {
                ck_assert_int_eq(seen.calls[i], 1);
                ck_assert_int_eq(hvd_handle_poll(h[i]), 1);
                ck_assert_int_eq(hvd_handle_wait(h[i]), 0);
                for (int k = 0; k < 4; k++)
                        ck_assert_float_eq(out[i][k], 3.0f * (float) (i + k));
                hvd_handle_release(&h[i]);
        }
        ck_assert_int_eq(seen.total, N_HANDLES);
}
END_TEST

START_TEST(test_notify_complete_handle_runs_at_once) {
        float in[2] = { 1.5f, -2.0f }, out[2] = { 0 };
        int64_t shape[1] = { 2 };
        hvd_handle_t *h = submit_allreduce("notify.done", in, out, shape);
        ck_assert_int_eq(hvd_handle_wait(h), 0);
        ck_assert_int_eq(hvd_handle_notify(h, on_done, (void *) (intptr_t) 7), 0);
        /* no waiting: it ran before hvd_handle_notify returned */
        ck_assert_int_eq(seen.calls[7], 1);
        ck_assert_int_eq(seen.total, 1);
        ck_assert_float_eq(out[0], 4.5f);
        ck_assert_float_eq(out[1], -6.0f);
        /* a second callback is refused and not called */
        ck_assert_int_eq(hvd_handle_notify(h, on_done, (void *) (intptr_t) 8), -EBUSY);
        ck_assert_int_eq(seen.calls[8], 0);
        hvd_handle_release(&h);
}
END_TEST

START_TEST(test_notify_released_pending_handle) {
        /* released at once, perhaps still pending: the callback still runs */
        static float in[64], out[64];
        int64_t shape[1] = { 64 };
        for (int i = 0; i < 64; i++)
                in[i] = (float) i;
        hvd_handle_t *h = submit_allreduce("notify.released", in, out, shape);
        ck_assert_int_eq(hvd_handle_notify(h, on_done, (void *) (intptr_t) 3), 0);
        hvd_handle_release(&h);
        ck_assert_ptr_null(h);
        wait_total(1);
        ck_assert_int_eq(seen.calls[3], 1);
        ck_assert_float_eq(out[63], 189.0f);
}
END_TEST

START_TEST(test_notify_allgather_output_after_callback) {
        /* the callback hands over; the output is read on this thread */
        int32_t in[3] = { 5, 6, 7 };
        int64_t shape[1] = { 3 };
        hvd_request_t req = HVD_REQUEST_INIT;
        req.name = "notify.gather";
        req.input = in;
        req.dtype = HVD_INT32;
        req.ndim = 1;
        req.shape = shape;
        hvd_handle_t *h = NULL;
        ck_assert_int_eq(hvd_allgather_async(&req, &h), 0);
        ck_assert_int_eq(hvd_handle_notify(h, on_done, (void *) (intptr_t) 0), 0);
        wait_total(1);
        const void *data = NULL;
        size_t bytes = 0;
        int ndim = 0;
        const int64_t *oshape = NULL;
        ck_assert_int_eq(hvd_handle_output(h, 0, &data, &bytes, &ndim, &oshape), 0);
        ck_assert_uint_eq(bytes, sizeof in);
        ck_assert_int_eq(ndim, 1);
        ck_assert_int_eq(oshape[0], 3);
        ck_assert_int_eq(memcmp(data, in, sizeof in), 0);
        hvd_handle_release(&h);
}
END_TEST

START_TEST(test_notify_bad_arguments) {
        ck_assert_int_eq(hvd_handle_notify(NULL, on_done, NULL), -EINVAL);
        float in[1] = { 1 }, out[1];
        int64_t shape[1] = { 1 };
        hvd_handle_t *h = submit_allreduce("notify.bad", in, out, shape);
        ck_assert_int_eq(hvd_handle_notify(h, NULL, NULL), -EINVAL);
        ck_assert_int_eq(hvd_handle_wait(h), 0);
        hvd_handle_release(&h);
        ck_assert_int_eq(seen.total, 0);
}
END_TEST

static Suite *notify_suite(void) {
        Suite *s = suite_create("notify");
        TCase *tc = tcase_create("notify");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_notify_once_per_handle);
        tcase_add_test(tc, test_notify_complete_handle_runs_at_once);
        tcase_add_test(tc, test_notify_released_pending_handle);
        tcase_add_test(tc, test_notify_allgather_output_after_callback);
        tcase_add_test(tc, test_notify_bad_arguments);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(notify_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
