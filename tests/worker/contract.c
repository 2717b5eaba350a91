/* contract.c — the scenarios of the API's contract inside a running job:
 * topology and the small calls (dtype sizes and names, error strings, the
 * version, request defaults), a broadcast without input on the other ranks,
 * the edge cases of a request (the longest name, UTF-8, eight dimensions,
 * refused arguments, empty tensors, a wait with a deadline), the errors of a
 * mismatch or a duplicate name and the job going on after them, and a new
 * tensor name on every step. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"

/* ---- bad input inside a running job ---- */

/* submits one allreduce/broadcast with per-rank parameters and expects
 * HVD_EMISMATCH with `want` (exact when the message is deterministic) */
static void expect_mismatch(const char *name, hvd_dtype_t dt, int ndim, const int64_t *shape, hvd_reduce_op_t op,
                            int root, bool bcast, const char *want, const char *n1, const char *n2) {
        double in[64] = { 0 }, out[64];
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = in;
        q.output = out;
        q.dtype = dt;
        q.ndim = ndim;
        q.shape = shape;
        q.reduce_op = op;
        q.root = root;
        hvd_handle_t *h = NULL;
        MUST(bcast ? hvd_broadcast_async(&q, &h) : hvd_allreduce_async(&q, &h));
        int r = wait_h(h, name);
        const char *msg = hvd_handle_error(h);
        CHECK(r == HVD_EMISMATCH, "%s: completed with %s (\"%s\"), expected HVD_EMISMATCH", name, errname(r), msg);
        if (want)
                CHECK(strcmp(msg, want) == 0, "%s: error \"%s\", expected \"%s\"", name, msg, want);
        if (n1)
                CHECK(strstr(msg, n1) != NULL, "%s: error \"%s\" does not mention \"%s\"", name, msg, n1);
        if (n2)
                CHECK(strstr(msg, n2) != NULL, "%s: error \"%s\" does not mention \"%s\"", name, msg, n2);
        hvd_handle_release(&h);
}

void scenario_mismatch(void) {
        if (size < 2) {
                printf("rank %d: SKIP [mismatch] needs at least 2 ranks\n", rank);
                return;
        }
        int64_t s4[1] = { 4 }, s23[2] = { 2, 3 }, s32[2] = { 3, 2 };
        expect_mismatch("mm.dtype", rank == 0 ? HVD_FLOAT32 : HVD_FLOAT64, 1, s4, HVD_REDUCE_SUM, 0, false,
                        "allreduce 'mm.dtype': rank 1 sent dtype float64, rank 0 sent float32", NULL, NULL);
        expect_mismatch("mm.shape", HVD_FLOAT32, 2, rank == 0 ? s23 : s32, HVD_REDUCE_SUM, 0, false,
                        "allreduce 'mm.shape': rank 1 sent shape [3, 2], rank 0 sent [2, 3]", NULL, NULL);
        expect_mismatch("mm.op", HVD_FLOAT32, 1, s4, rank == 0 ? HVD_REDUCE_SUM : HVD_REDUCE_MIN, 0, false, NULL,
                        "rank 1", "rank 0");
        expect_mismatch("mm.root", HVD_FLOAT32, 1, s4, HVD_REDUCE_SUM, rank == 0 ? 0 : 1, true,
                        "broadcast 'mm.root': rank 1 sent root 1, rank 0 sent root 0", NULL, NULL);
        /* the job goes on: a following allreduce works */
        float x[3] = { 1, 2, 3 }, y[3];
        MUST(hvd_allreduce("mm.after", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM));
        for (int i = 0; i < 3; i++)
                CHECK(y[i] == (float) ((i + 1) * size), "mm.after[%d] = %g, expected %d", i, y[i], (i + 1) * size);
}

void scenario_mismatch_retry(void) {
        if (size < 2) {
                printf("rank %d: SKIP [mismatch-retry] needs at least 2 ranks\n", rank);
                return;
        }
        /* a tensor that failed with a mismatch is submitted again, now
         * consistently, under the same name: it must simply work */
        int64_t s4[1] = { 4 };
        expect_mismatch("mm.retry", rank == 0 ? HVD_FLOAT32 : HVD_INT32, 1, s4, HVD_REDUCE_SUM, 0, false,
                        "allreduce 'mm.retry': rank 1 sent dtype int32, rank 0 sent float32", NULL, NULL);
        for (int round = 0; round < 3; round++) {
                float x[4] = { 1, 2, 3, 4 }, y[4];
                int r = hvd_allreduce("mm.retry", x, y, 4, HVD_FLOAT32, HVD_REDUCE_SUM);
                CHECK(r == 0, "round %d: consistent 'mm.retry' after a mismatch failed: %s: %s", round, errname(r),
                      hvd_last_error());
                if (r < 0)
                        return;
                for (int i = 0; i < 4; i++)
                        CHECK(y[i] == (float) ((i + 1) * size), "mm.retry[%d] = %g", i, y[i]);
        }
}

void scenario_duplicate(void) {
        /* the same name twice in one group: refused, no handle */
        float a[2] = { 1, 2 }, b[2];
        int64_t shape[1] = { 2 };
        hvd_request_t q[2];
        for (int i = 0; i < 2; i++) {
                q[i] = (hvd_request_t) HVD_REQUEST_INIT;
                q[i].name = "dup.group";
                q[i].input = a;
                q[i].output = b;
                q[i].ndim = 1;
                q[i].shape = shape;
        }
        hvd_handle_t *h = NULL;
        int r = hvd_grouped_allreduce_async(q, 2, &h);
        CHECK(r == HVD_EDUPLICATE, "a group naming 'dup.group' twice: %s, expected HVD_EDUPLICATE", errname(r));
        CHECK(h == NULL, "a refused group submission produced a handle");
        CHECK(strstr(hvd_last_error(), "dup.group") != NULL, "last error \"%s\" does not name the tensor",
              hvd_last_error());

        if (size >= 2) {
                /* rank 0's 'dup.a' cannot complete before the others submit
                 * it, which they do only after the barrier */
                float x[3] = { 1, 2, 3 }, y[3], z[3];
                int64_t s3[1] = { 3 };
                hvd_request_t qa = HVD_REQUEST_INIT;
                qa.name = "dup.a";
                qa.input = x;
                qa.output = y;
                qa.ndim = 1;
                qa.shape = s3;
                qa.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h1 = NULL, *h2 = NULL;
                if (rank == 0) {
                        MUST(hvd_allreduce_async(&qa, &h1));
                        hvd_request_t qb = qa;
                        qb.output = z;
                        r = hvd_allreduce_async(&qb, &h2);
                        CHECK(r == HVD_EDUPLICATE,
                              "'dup.a' submitted twice while in flight: %s, expected "
                              "HVD_EDUPLICATE",
                              errname(r));
                        CHECK(h2 == NULL, "a refused submission produced a handle");
                        CHECK(strstr(hvd_last_error(), "'dup.a'") != NULL, "last error \"%s\" does not name 'dup.a'",
                              hvd_last_error());
                        r = hvd_allreduce("dup.a", x, z, 3, HVD_FLOAT32, HVD_REDUCE_SUM);
                        CHECK(r == HVD_EDUPLICATE, "synchronous duplicate of 'dup.a': %s", errname(r));
                        MUST(hvd_barrier());
                } else {
                        MUST(hvd_barrier());
                        MUST(hvd_allreduce_async(&qa, &h1));
                }
                wait_ok(h1, "dup.a");
                for (int i = 0; i < 3; i++)
                        CHECK(y[i] == (float) ((i + 1) * size), "dup.a[%d] = %g after the refused duplicate", i, y[i]);
                hvd_handle_release(&h1);
        }
        /* after completion the name is free again */
        float x[3] = { 1, 2, 3 }, y[3];
        for (int round = 0; round < 2; round++) {
                MUST(hvd_allreduce("dup.a", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM));
                for (int i = 0; i < 3; i++)
                        CHECK(y[i] == (float) ((i + 1) * size), "dup.a[%d] = %g on reuse", i, y[i]);
        }
        /* releasing a pending handle detaches it: the operation still runs
         * (the buffers are written) and the name is free once it completed,
         * which the barrier after it guarantees (schedules run in order) */
        float dx[2] = { 3, 4 }, dy[2] = { 0, 0 };
        int64_t s2[1] = { 2 };
        hvd_request_t qd = HVD_REQUEST_INIT;
        qd.name = "detach.x";
        qd.input = dx;
        qd.output = dy;
        qd.ndim = 1;
        qd.shape = s2;
        qd.reduce_op = HVD_REDUCE_SUM;
        hvd_handle_t *hd = NULL;
        MUST(hvd_allreduce_async(&qd, &hd));
        hvd_handle_release(&hd);
        CHECK(hd == NULL, "release did not clear the handle pointer");
        hvd_handle_release(&hd); /* NULL-safe */
        MUST(hvd_barrier());
        CHECK(dy[0] == 3.0f * size && dy[1] == 4.0f * size, "a detached allreduce gave [%g, %g], expected [%d, %d]",
              dy[0], dy[1], 3 * size, 4 * size);
        MUST(hvd_allreduce("detach.x", dx, dy, 2, HVD_FLOAT32, HVD_REDUCE_SUM));

        /* reserved and invalid names are argument errors */
        CHECK(hvd_allreduce("__hvd.mine", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a reserved '__hvd.' name was accepted");
        CHECK(hvd_allreduce("", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL, "an empty name was accepted");
        CHECK(hvd_allreduce("bad\nname", x, y, 3, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a name with a newline was accepted");
        CHECK(hvd_allreduce("x", x, y, 3, (hvd_dtype_t) 42, HVD_REDUCE_SUM) == -EINVAL, "dtype 42 was accepted");
        CHECK(hvd_allreduce("x", x, y, 3, HVD_FLOAT32, (hvd_reduce_op_t) 9) == -EINVAL, "reduce op 9 was accepted");
}

/* ---- edge cases of the request ---- */

void scenario_edges(void) {
        /* the longest legal name, UTF-8 names, 8 dimensions */
        char longname[HVD_MAX_NAME_BYTES + 2];
        memset(longname, 'n', HVD_MAX_NAME_BYTES);
        longname[HVD_MAX_NAME_BYTES] = 0;
        float x[6] = { 1, 2, 3, 4, 5, 6 }, y[6];
        MUST(hvd_allreduce(longname, x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM));
        CHECK(y[5] == 6.0f * size, "1024-byte name: %g", y[5]);
        longname[HVD_MAX_NAME_BYTES] = 'n';
        longname[HVD_MAX_NAME_BYTES + 1] = 0;
        CHECK(hvd_allreduce(longname, x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a 1025-byte name was accepted");
        MUST(hvd_allreduce("gr\xc3\xb6\xc3\x9f"
                           "e.\xe6\x97\xa5\xe6\x9c\xac.\xf0\x9f\x98\x80",
                           x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM));
        CHECK(y[0] == (float) size, "UTF-8 name: %g", y[0]);
        CHECK(hvd_allreduce("bad\xff", x, y, 6, HVD_FLOAT32, HVD_REDUCE_SUM) == -EINVAL,
              "a name that is not UTF-8 was accepted");
        int64_t s8[8] = { 1, 1, 1, 1, 1, 1, 2, 3 }, s9[9] = { 1, 1, 1, 1, 1, 1, 1, 2, 3 };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = "edge.8d";
        q.input = x;
        q.output = y;
        q.ndim = 8;
        q.shape = s8;
        q.reduce_op = HVD_REDUCE_MAX;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        wait_ok(h, "edge.8d");
        hvd_handle_release(&h);
        CHECK(y[3] == 4.0f, "8-d max: %g", y[3]);
        q.ndim = 9;
        q.shape = s9;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "9 dimensions were accepted");
        q.ndim = 2;
        int64_t neg[2] = { 2, -3 };
        q.shape = neg;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "a negative dimension was accepted");
        q.ndim = 1;
        q.shape = s8 + 7;
        q.output = NULL;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "an allreduce without output was accepted");
        q.output = y;
        q.input = NULL;
        CHECK(hvd_allreduce_async(&q, &h) == -EINVAL && h == NULL, "an allreduce without input was accepted");
        CHECK(hvd_allreduce_async(NULL, &h) == -EINVAL, "a NULL request was accepted");
        q.input = x;
        q.device = 0;
        int r = hvd_allreduce_async(&q, &h);
        CHECK(r == HVD_ENODEVICE, "an allreduce on GPU 0 without a GPU backend: %s", errname(r));
        if (r >= 0) {
                wait_h(h, "edge.gpu");
                hvd_handle_release(&h);
        }

        /* empty tensors everywhere: alltoall, reducescatter, allgather */
        int64_t z2[2] = { 0, 3 };
        int64_t *zs = calloc((size_t) size, sizeof *zs);
        hvd_request_t qa = HVD_REQUEST_INIT;
        qa.name = "edge.a2a.empty";
        qa.ndim = 2;
        qa.shape = z2;
        qa.splits = zs;
        MUST(hvd_alltoall_async(&qa, &h));
        wait_ok(h, qa.name);
        const void *data;
        size_t bytes = 99;
        int nd = -1;
        const int64_t *os = NULL;
        MUST(hvd_handle_output(h, 0, &data, &bytes, &nd, &os));
        CHECK(bytes == 0 && nd == 2 && os[0] == 0 && os[1] == 3, "empty alltoall: %zu bytes, ndim %d", bytes, nd);
        hvd_handle_release(&h);
        free(zs);
        qa.name = "edge.rs.empty";
        qa.splits = NULL;
        qa.reduce_op = HVD_REDUCE_SUM;
        MUST(hvd_reducescatter_async(&qa, &h));
        wait_ok(h, qa.name);
        MUST(hvd_handle_output(h, 0, &data, &bytes, &nd, &os));
        CHECK(bytes == 0 && os[0] == 0, "empty reducescatter: %zu bytes, %" PRId64 " rows", bytes, os[0]);
        hvd_handle_release(&h);

        /* a handle waited with a deadline before it can complete */
        if (size >= 2) {
                float a = 1, b = 0;
                int64_t s1[1] = { 1 };
                hvd_request_t qw = HVD_REQUEST_INIT;
                qw.name = "edge.late";
                qw.input = &a;
                qw.output = &b;
                qw.ndim = 1;
                qw.shape = s1;
                qw.reduce_op = HVD_REDUCE_SUM;
                if (rank == 0) {
                        MUST(hvd_allreduce_async(&qw, &h));
                        uint64_t t0 = now_usec();
                        r = hvd_handle_wait_timeout(h, 100000);
                        uint64_t dt = now_usec() - t0;
                        CHECK(r == HVD_ETIMEOUT, "wait_timeout on a handle that cannot complete: %s", errname(r));
                        CHECK(dt >= 90000 && dt < 2000000, "wait_timeout(100 ms) took %" PRIu64 " us", dt);
                        CHECK(hvd_handle_poll(h) == 0, "poll says complete before the others submitted");
                        CHECK(hvd_handle_output(h, 0, NULL, NULL, NULL, NULL) == -ENODATA, "output before completion");
                        MUST(hvd_barrier());
                } else {
                        MUST(hvd_barrier());
                        MUST(hvd_allreduce_async(&qw, &h));
                }
                wait_ok(h, "edge.late");
                CHECK(b == (float) size, "edge.late = %g", b);
                hvd_handle_release(&h);
        }
}

/* ---- topology and the small API ---- */

void scenario_api(void) {
        const char *e;
        CHECK(hvd_is_initialized() == 1, "hvd_is_initialized() = %d", hvd_is_initialized());
        if ((e = getenv("HVD_JOB_ID")) && *e) {
                CHECK(rank == atoi(getenv("HVD_RANK")), "hvd_rank() = %d, HVD_RANK = %s", rank, getenv("HVD_RANK"));
                CHECK(size == atoi(getenv("HVD_SIZE")), "hvd_size() = %d, HVD_SIZE = %s", size, getenv("HVD_SIZE"));
                CHECK(hvd_local_rank() == atoi(getenv("HVD_LOCAL_RANK")), "hvd_local_rank() = %d", hvd_local_rank());
                CHECK(hvd_local_size() == atoi(getenv("HVD_LOCAL_SIZE")), "hvd_local_size() = %d", hvd_local_size());
        } else {
                CHECK(rank == 0 && size == 1, "without a job: rank %d of %d", rank, size);
                CHECK(hvd_local_rank() == 0 && hvd_local_size() == 1, "without a job: local rank %d of %d",
                      hvd_local_rank(), hvd_local_size());
        }
        CHECK(hvd_cross_rank() == 0 && hvd_cross_size() == 1, "one host: cross rank %d of %d", hvd_cross_rank(),
              hvd_cross_size());
        static const size_t sizes[] = {
                [HVD_UINT8] = 1,    [HVD_INT8] = 1,    [HVD_INT32] = 4,   [HVD_INT64] = 8, [HVD_FLOAT16] = 2,
                [HVD_BFLOAT16] = 2, [HVD_FLOAT32] = 4, [HVD_FLOAT64] = 8, [HVD_BOOL] = 1,  [HVD_INT16] = 2
        };
        static const char *const names[] = {
                [HVD_UINT8] = "uint8",     [HVD_INT8] = "int8",       [HVD_INT32] = "int32",
                [HVD_INT64] = "int64",     [HVD_FLOAT16] = "float16", [HVD_BFLOAT16] = "bfloat16",
                [HVD_FLOAT32] = "float32", [HVD_FLOAT64] = "float64", [HVD_BOOL] = "bool",
                [HVD_INT16] = "int16"
        };
        for (int d = 0; d < _HVD_DTYPE_COUNT; d++) {
                CHECK(hvd_dtype_size((hvd_dtype_t) d) == sizes[d], "hvd_dtype_size(%d) = %zu", d,
                      hvd_dtype_size((hvd_dtype_t) d));
                CHECK(hvd_dtype_name((hvd_dtype_t) d) && !strcmp(hvd_dtype_name((hvd_dtype_t) d), names[d]),
                      "hvd_dtype_name(%d) = %s", d, hvd_dtype_name((hvd_dtype_t) d));
        }
        CHECK(hvd_dtype_size(_HVD_DTYPE_COUNT) == 0, "hvd_dtype_size of an invalid dtype is not 0");
        CHECK(hvd_dtype_name(_HVD_DTYPE_COUNT) != NULL, "hvd_dtype_name of an invalid dtype is NULL");
#define STRERR(name, value, text)                                                                                      \
        CHECK(!strcmp(hvd_strerror(value), text), "hvd_strerror(%s) = \"%s\"", #name, hvd_strerror(value));
        HVD_ERRORS(STRERR)
#undef STRERR
        CHECK(!strcmp(hvd_strerror(-ENOENT), strerror(ENOENT)), "hvd_strerror(-ENOENT) = %s", hvd_strerror(-ENOENT));
        char v[32];
        snprintf(v, sizeof v, "%d.%d.", HVD_VERSION_MAJOR, HVD_VERSION_MINOR);
        CHECK(!strncmp(hvd_version(), v, strlen(v)), "hvd_version() = %s, the header says %d.%d", hvd_version(),
              HVD_VERSION_MAJOR, HVD_VERSION_MINOR);
        hvd_request_t q;
        memset(&q, 0xff, sizeof q);
        hvd_request_init(&q);
        hvd_request_t w = HVD_REQUEST_INIT;
        CHECK(q.name == w.name && q.dtype == w.dtype && q.reduce_op == HVD_REDUCE_AVERAGE && q.prescale == 1.0 &&
                      q.postscale == 1.0 && q.root == 0 && q.splits == NULL && q.process_set == 0 &&
                      q.device == HVD_DEVICE_CPU && q.ndim == 0,
              "hvd_request_init differs from HVD_REQUEST_INIT");
        /* the default reduce op is average, as in Horovod */
        float x = (float) (2 * rank), y = -1;
        int64_t s1[1] = { 1 };
        q.name = "api.default.op";
        q.input = &x;
        q.output = &y;
        q.ndim = 1;
        q.shape = s1;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        wait_ok(h, q.name);
        hvd_handle_release(&h);
        CHECK(y == (float) (size - 1), "default op: %g, expected the average %d", y, size - 1);
}

void scenario_bcast_null_input(void) {
        /* broadcast: "non-root input ignored" (hvd.h), so it may be NULL */
        float b[2] = { (float) rank, (float) rank };
        hvd_handle_t *h = NULL;
        int64_t s2[1] = { 2 };
        hvd_request_t qb = HVD_REQUEST_INIT;
        qb.name = "api.bcast.noinput";
        qb.input = rank == 0 ? b : NULL;
        qb.output = b;
        qb.ndim = 1;
        qb.shape = s2;
        int r = hvd_broadcast_async(&qb, &h);
        CHECK(r == 0, "broadcast with input NULL on a non-root rank: %s: %s", errname(r), hvd_last_error());
        if (r < 0) {
                /* keep the root's broadcast company, with an input */
                qb.input = b;
                MUST(hvd_broadcast_async(&qb, &h));
        }
        wait_ok(h, qb.name);
        hvd_handle_release(&h);
        CHECK(b[0] == 0 && b[1] == 0, "broadcast: [%g, %g]", b[0], b[1]);
}

/* ---- misuse of the job as a whole ---- */

void scenario_unique_names(void) {
        /* a new name on every step (like Horovod's "allreduce.noname.N"):
         * far more distinct names than the daemon's tensor table holds */
        int steps = 300;
        const char *e = getenv("HVD_TEST_UNIQUE_STEPS");
        if (e && atoi(e) > 0)
                steps = atoi(e);
        for (int i = 0; i < steps; i++) {
                char name[64];
                snprintf(name, sizeof name, "uniq.step%d", i);
                float x = (float) (rank + i), y = -1;
                int r = hvd_allreduce(name, &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
                if (r < 0) {
                        fail("step %d ('%s'): %s: %s", i, name, errname(r), hvd_last_error());
                        return;
                }
                float want = (float) (size * i + size * (size - 1) / 2);
                CHECK(y == want, "%s = %g, expected %g", name, y, want);
        }
}
