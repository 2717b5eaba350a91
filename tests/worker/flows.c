/* flows.c — what "all" leaves out, for the test scripts that start it on
 * their own: long runs that a test kills or aborts (longrun,
 * longrun-detached), a rank that shuts down early, the steady state over
 * several nodes, a rank that stalls; and the flows that main runs before or
 * instead of a successful hvd_init (notinit, reinit, expect-init-error). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

/* ---- a long run, for the kill test ---- */

void scenario_longrun(void) {
        char path[512];
        snprintf(path, sizeof path, "%s/pid.%d", tmpdir(), rank);
        FILE *f = fopen(path, "w");
        if (f) {
                fprintf(f, "%d\n", (int) getpid());
                fclose(f);
        }
        enum { LN = 1000 };
        float *x = xmalloc(LN * sizeof *x), *y = xmalloc(LN * sizeof *y);
        uint64_t t0 = now_usec();
        for (long it = 0;; it++) {
                for (int i = 0; i < LN; i++)
                        x[i] = (float) (rank + i % 10);
                hvd_request_t q = HVD_REQUEST_INIT;
                int64_t shape[1] = { LN };
                q.name = "longrun";
                q.input = x;
                q.output = y;
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h = NULL;
                int r = hvd_allreduce_async(&q, &h);
                if (r >= 0) {
                        r = hvd_handle_wait_timeout(h, 20 * 1000000ull);
                        if (r == HVD_ETIMEOUT) {
                                printf("rank %d: longrun: HUNG: iteration %ld still pending after 20 s\n", rank, it);
                                exit(4);
                        }
                }
                if (r < 0) {
                        const char *msg = h ? hvd_handle_error(h) : hvd_last_error();
                        printf("rank %d: longrun: %s after %ld iterations: %s\n", rank, errname(r), it, msg);
                        /* later calls fail at once with the same cause */
                        float z = 0;
                        int r2 = hvd_allreduce("longrun.after", &z, &z, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
                        printf("rank %d: longrun: next call: %s: %s\n", rank, errname(r2), hvd_last_error());
                        hvd_handle_release(&h);
                        hvd_shutdown();
                        exit(3);
                }
                for (int i = 0; i < LN; i++)
                        if (y[i] != (float) (size * (i % 10) + size * (size - 1) / 2)) {
                                printf("rank %d: FAIL [longrun] wrong sum at iteration %ld\n", rank, it);
                                exit(1);
                        }
                hvd_handle_release(&h);
                if (it == 20) {
                        snprintf(path, sizeof path, "%s/running.%d", tmpdir(), rank);
                        if ((f = fopen(path, "w")))
                                fclose(f);
                }
                if (now_usec() - t0 > 60 * 1000000ull) {
                        printf("rank %d: longrun: 60 s without an error\n", rank);
                        return;
                }
        }
}

/* ---- misuse of the job as a whole ---- */

void scenario_early_shutdown(void) {
        /* rank 0 leaves; the others then submit a collective it will never
         * join: they must get an error naming rank 0, not hang */
        MUST(hvd_barrier());
        if (rank == 0) {
                MUST(hvd_shutdown());
                printf("rank 0: early-shutdown: left the job\n");
                return;
        }
        usleep(300 * 1000);
        float x = 1, y;
        uint64_t t0 = now_usec();
        int r = hvd_allreduce("early.after", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
        double ms = (double) (now_usec() - t0) / 1000.0;
        printf("rank %d: early-shutdown: %s after %.0f ms: %s\n", rank, errname(r), ms, hvd_last_error());
        CHECK(r == HVD_EABORTED, "an allreduce after rank 0 shut down: %s, expected HVD_EABORTED", errname(r));
        CHECK(strstr(hvd_last_error(), "rank 0") != NULL, "the error \"%s\" does not name rank 0", hvd_last_error());
        CHECK(ms < 5000, "the error took %.0f ms", ms);
}

/* longrun with handles released at once (detached operations): when the
 * job is aborted under them, nothing may touch the freed handles. */
void scenario_longrun_detached(void) {
        char path[512];
        snprintf(path, sizeof path, "%s/pid.%d", tmpdir(), rank);
        FILE *f = fopen(path, "w");
        if (f) {
                fprintf(f, "%d\n", (int) getpid());
                fclose(f);
        }
        enum { LN = 4096, SLOTS = 16 };
        static float x[SLOTS][LN], y[SLOTS][LN];
        uint64_t t0 = now_usec();
        for (long it = 0;; it++) {
                int k = (int) (it % SLOTS);
                char name[32];
                snprintf(name, sizeof name, "detached.%d", k);
                for (int i = 0; i < LN; i++)
                        x[k][i] = (float) (rank + i % 10);
                int64_t shape[1] = { LN };
                hvd_request_t q = HVD_REQUEST_INIT;
                q.name = name;
                q.input = x[k];
                q.output = y[k];
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h = NULL;
                int r = hvd_allreduce_async(&q, &h);
                hvd_handle_release(&h);
                /* every SLOTS operations, a barrier: the ones before it are done
                 * (schedules run in order), so the names can be reused */
                if (r >= 0 && k == SLOTS - 1)
                        r = hvd_barrier();
                if (r < 0) {
                        printf("rank %d: longrun: %s after %ld iterations: %s\n", rank, errname(r), it,
                               hvd_last_error());
                        float z = 0;
                        int r2 = hvd_allreduce("longrun.after", &z, &z, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
                        printf("rank %d: longrun: next call: %s: %s\n", rank, errname(r2), hvd_last_error());
                        hvd_shutdown();
                        exit(3);
                }
                if (it == 3 * SLOTS) {
                        snprintf(path, sizeof path, "%s/running.%d", tmpdir(), rank);
                        if ((f = fopen(path, "w")))
                                fclose(f);
                }
                if (now_usec() - t0 > 60 * 1000000ull) {
                        printf("rank %d: longrun: 60 s without an error\n", rank);
                        return;
                }
        }
}

/* ---- flows that run without (or before) a successful hvd_init ---- */

static int code_of(const char *name) {
#define ERRCODE(n, value, text)                                                                                        \
        if (!strcmp(name, #n))                                                                                         \
                return value;
        HVD_ERRORS(ERRCODE)
#undef ERRCODE
        return atoi(name);
}

/* expect-init-error CODE MAX_MS NEEDLE...: hvd_init fails with CODE within
 * MAX_MS and hvd_last_error() contains every needle. */
int flow_expect_init_error(int argc, char **argv) {
        scenario = "expect-init-error";
        if (argc < 2) {
                fprintf(stderr, "usage: expect-init-error CODE MAX_MS [NEEDLE...]\n");
                return 2;
        }
        int want = code_of(argv[0]);
        double max_ms = atof(argv[1]);
        const char *r_env = getenv("HVD_RANK");
        rank = r_env ? atoi(r_env) : 0;
        uint64_t t0 = now_usec();
        int r = hvd_init();
        double ms = (double) (now_usec() - t0) / 1000.0;
        const char *msg = hvd_last_error();
        if (r == 0) {
                printf("rank %d: FAIL [expect-init-error] hvd_init succeeded after %.0f ms\n", rank, ms);
                hvd_shutdown();
                return 1;
        }
        printf("rank %d: hvd_init failed after %.0f ms: %s: %s\n", rank, ms, errname(r), msg);
        CHECK(r == want, "hvd_init returned %s, expected %s", errname(r), argv[0]);
        CHECK(ms <= max_ms, "hvd_init took %.0f ms to fail, expected at most %.0f", ms, max_ms);
        for (int i = 2; i < argc; i++)
                CHECK(strstr(msg, argv[i]) != NULL, "message \"%s\" does not mention \"%s\"", msg, argv[i]);
        CHECK(!hvd_is_initialized(), "hvd_is_initialized() after a failed hvd_init");
        CHECK(hvd_rank() == HVD_ENOTINIT, "hvd_rank() after a failed hvd_init: %d", hvd_rank());
        return failures ? 1 : 0;
}

static void expect_notinit(const char *when) {
        float x = 1, y;
        hvd_handle_t *h = (hvd_handle_t *) 0x1;
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[1] = { 1 };
        q.name = "ni";
        q.input = &x;
        q.output = &y;
        q.ndim = 1;
        q.shape = shape;
        CHECK(!hvd_is_initialized(), "%s: hvd_is_initialized() is true", when);
        CHECK(hvd_rank() == HVD_ENOTINIT, "%s: hvd_rank() = %d", when, hvd_rank());
        CHECK(hvd_size() == HVD_ENOTINIT, "%s: hvd_size() = %d", when, hvd_size());
        CHECK(hvd_local_rank() == HVD_ENOTINIT, "%s: hvd_local_rank() = %d", when, hvd_local_rank());
        CHECK(hvd_local_size() == HVD_ENOTINIT, "%s: hvd_local_size() = %d", when, hvd_local_size());
        CHECK(hvd_cross_rank() == HVD_ENOTINIT, "%s: hvd_cross_rank() = %d", when, hvd_cross_rank());
        int r = hvd_allreduce_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_allreduce_async: %s", when, errname(r));
        CHECK(h == (hvd_handle_t *) 0x1, "%s: the handle out-parameter was written on failure", when);
        CHECK(strstr(hvd_last_error(), "hvd_init") != NULL, "%s: last error \"%s\" does not say to call hvd_init", when,
              hvd_last_error());
        r = hvd_allreduce("ni", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_allreduce: %s", when, errname(r));
        r = hvd_broadcast("ni", &x, 1, HVD_FLOAT32, 0);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_broadcast: %s", when, errname(r));
        r = hvd_allgather_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_allgather_async: %s", when, errname(r));
        r = hvd_alltoall_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_alltoall_async: %s", when, errname(r));
        r = hvd_reducescatter_async(&q, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_reducescatter_async: %s", when, errname(r));
        r = hvd_grouped_allreduce_async(&q, 1, &h);
        CHECK(r == HVD_ENOTINIT, "%s: hvd_grouped_allreduce_async: %s", when, errname(r));
        r = hvd_barrier();
        CHECK(r == HVD_ENOTINIT, "%s: hvd_barrier: %s", when, errname(r));
        r = hvd_join();
        CHECK(r == HVD_ENOTINIT, "%s: hvd_join: %s", when, errname(r));
        CHECK(hvd_shutdown() == 0, "%s: hvd_shutdown of an uninitialised hvd is not a no-op", when);
}

int flow_notinit(void) {
        scenario = "notinit";
        const char *r_env = getenv("HVD_RANK");
        rank = r_env ? atoi(r_env) : 0;
        expect_notinit("before hvd_init");
        MUST(hvd_init());
        MUST(hvd_init()); /* again: 0 */
        CHECK(hvd_is_initialized() == 1, "hvd_is_initialized() is not 1");
        rank = hvd_rank();
        size = hvd_size();
        CHECK(rank >= 0 && size >= 1 && rank < size, "rank %d of size %d", rank, size);
        const char *s_env = getenv("HVD_SIZE");
        if (s_env && getenv("HVD_JOB_ID"))
                CHECK(size == atoi(s_env), "hvd_size() = %d, HVD_SIZE = %s", size, s_env);
        float x = 1, y = 0;
        MUST(hvd_allreduce("ni.ok", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
        CHECK(y == (float) size, "ni.ok = %g", y);
        MUST(hvd_barrier());
        hvd_handle_t *pending = NULL;
        if (size >= 2 && rank == 1) {
                /* only this rank submits it: still pending at shutdown */
                hvd_request_t q = HVD_REQUEST_INIT;
                int64_t shape[1] = { 1 };
                q.name = "ni.pending";
                q.input = &x;
                q.output = &y;
                q.ndim = 1;
                q.shape = shape;
                MUST(hvd_allreduce_async(&q, &pending));
        } else if (size >= 2)
                usleep(500 * 1000); /* let rank 1 shut down first */
        MUST(hvd_shutdown());
        if (pending) {
                int r = hvd_handle_wait_timeout(pending, 5 * 1000000ull);
                CHECK(r == HVD_ESHUTDOWN,
                      "a handle pending at hvd_shutdown completed with %s, expected "
                      "HVD_ESHUTDOWN",
                      errname(r));
                hvd_handle_release(&pending);
        }
        expect_notinit("after hvd_shutdown");
        if (!failures)
                printf("rank %d: notinit ok\n", rank);
        return failures ? 1 : 0;
}

/* reinit: hvd_init → work → hvd_shutdown, twice in one process (as a
 * Horovod script that shuts down and initialises again does) */
int flow_reinit(void) {
        scenario = "reinit";
        const char *r_env = getenv("HVD_RANK");
        rank = r_env ? atoi(r_env) : 0;
        for (int round = 0; round < 2; round++) {
                int r = hvd_init();
                if (r < 0) {
                        printf("rank %d: FAIL [reinit] hvd_init of round %d: %s: %s\n", rank, round, errname(r),
                               hvd_last_error());
                        return 1;
                }
                rank = hvd_rank();
                size = hvd_size();
                float x = (float) (rank + round), y = -1;
                MUST(hvd_allreduce("reinit.x", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
                CHECK(y == (float) (size * round + size * (size - 1) / 2), "round %d: reinit.x = %g", round, y);
                MUST(hvd_barrier());
                MUST(hvd_shutdown());
        }
        if (!failures)
                printf("rank %d: reinit ok\n", rank);
        return failures ? 1 : 0;
}

/* ---- the steady state over several nodes ---- */

/* HVD_TEST_STEPS steps (default 60) of the same 15 tensors (cached ids
 * after the first: node-level readiness, repeated schedules), every
 * element exact: rank r contributes (r + 1) * (step + 1) + i % 7. */
void scenario_steady(void) {
        enum { T = 15 };
        static const size_t ns[T] = { 1, 3, 10, 33, 100, 257, 1000, 4096, 5, 64, 999, 2048, 7, 128, 3000 };
        const char *e = getenv("HVD_TEST_STEPS");
        int steps = e && atoi(e) > 0 ? atoi(e) : 60;
        for (int st = 0; st < steps; st++) {
                void *in[T], *out[T];
                hvd_handle_t *h[T];
                char names[T][32];
                for (int k = 0; k < T; k++) {
                        hvd_dtype_t dt = k % 3 == 0 ? HVD_FLOAT32 : k % 3 == 1 ? HVD_INT32 : HVD_FLOAT64;
                        size_t es = dt == HVD_FLOAT64 ? 8 : 4;
                        in[k] = xmalloc(ns[k] * es);
                        out[k] = xmalloc(ns[k] * es);
                        for (size_t i = 0; i < ns[k]; i++) {
                                long v = (long) (rank + 1) * (st + 1) + (long) (i % 7);
                                if (dt == HVD_FLOAT32)
                                        ((float *) in[k])[i] = (float) v;
                                else if (dt == HVD_INT32)
                                        ((int32_t *) in[k])[i] = (int32_t) v;
                                else
                                        ((double *) in[k])[i] = (double) v;
                        }
                        snprintf(names[k], sizeof names[k], "steady.%d", k);
                        int64_t shape[1] = { (int64_t) ns[k] };
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = names[k];
                        q.input = in[k];
                        q.output = out[k];
                        q.dtype = dt;
                        q.ndim = 1;
                        q.shape = shape;
                        q.reduce_op = k % 3 == 2 ? HVD_REDUCE_MAX : HVD_REDUCE_SUM;
                        MUST(hvd_allreduce_async(&q, &h[k]));
                }
                for (int k = 0; k < T; k++) {
                        wait_ok(h[k], names[k]);
                        hvd_handle_release(&h[k]);
                        long base = (long) (st + 1) * size * (size + 1) / 2;
                        for (size_t i = 0; i < ns[k]; i++) {
                                double got, want;
                                if (k % 3 == 0) {
                                        got = ((float *) out[k])[i];
                                        want = (double) (base + (long) size * (long) (i % 7));
                                } else if (k % 3 == 1) {
                                        got = ((int32_t *) out[k])[i];
                                        want = (double) (base + (long) size * (long) (i % 7));
                                } else {
                                        got = ((double *) out[k])[i];
                                        want = (double) ((long) size * (st + 1) + (long) (i % 7));
                                }
                                if (got != want) {
                                        CHECK(false, "step %d: %s[%zu] = %g, expected %g", st, names[k], i, got, want);
                                        break;
                                }
                        }
                        free(in[k]);
                        free(out[k]);
                }
        }
        if (rank == 0)
                printf("rank 0: steady: %d steps of %d tensors exact\n", steps, (int) T);
}

/* One allreduce submitted for a waiter (hvd_allreduce_async_waiting),
 * n floats of rank + 1 + i % 5: its handle, the buffers in *in, *out. */
static hvd_handle_t *waiting_submit(const char *name, size_t n, float **in, float **out) {
        *in = xmalloc(n * sizeof **in);
        *out = xmalloc(n * sizeof **out);
        for (size_t i = 0; i < n; i++)
                (*in)[i] = (float) (rank + 1 + (int) (i % 5));
        int64_t shape[1] = { (int64_t) n };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = *in;
        q.output = *out;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_SUM;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async_waiting(&q, &h));
        return h;
}

static void waiting_check(const char *what, const float *out, size_t n) {
        for (size_t i = 0; i < n; i++) {
                float want = (float) (size * (size + 1) / 2 + size * (int) (i % 5));
                if (out[i] != want) {
                        CHECK(false, "%s[%zu] = %g, expected %g", what, i, (double) out[i], (double) want);
                        return;
                }
        }
}

/* got: what every rank r sent, in rank order: grow * r + fixed elements,
 * element i of them r * scale + off + i. */
static void check_from_ranks(const char *what, const float *got, int grow, int fixed, int scale, int off) {
        for (int r = 0, at = 0; r < size; r++)
                for (int i = 0; i < grow * r + fixed; i++, at++)
                        if (got[at] != (float) (r * scale + off + i)) {
                                CHECK(false, "%s[%d] = %g, expected rank %d's %d", what, at, (double) got[at], r,
                                      r * scale + off + i);
                                return;
                        }
}

/* A request for name of a 2-D input of shape[0] x shape[1] elements
 * (output allocated by hvd). */
static hvd_request_t rows_request(const char *name, const float *input, const int64_t *shape) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = input;
        q.ndim = 2;
        q.shape = shape;
        return q;
}

/* A broadcast (root changing with st), an allgather of rank + 1 rows, a
 * reducescatter and an alltoall, each submitted for a waiter and checked
 * exactly. */
static void waiting_others(int st) {
        enum { BN = 1000, COLS = 2 };
        int root = st % size;
        float *b = xmalloc(BN * sizeof *b);
        for (int i = 0; i < BN; i++)
                b[i] = (float) (rank * 1000 + i);
        int64_t bshape[1] = { BN };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = "waiting.bcast";
        q.input = b;
        q.output = b;
        q.ndim = 1;
        q.shape = bshape;
        q.root = root;
        hvd_handle_t *h = NULL;
        MUST(hvd_broadcast_async_waiting(&q, &h));
        wait_ok(h, "waiting.bcast");
        hvd_handle_release(&h);
        for (int i = 0; i < BN; i++)
                if (b[i] != (float) (root * 1000 + i)) {
                        CHECK(false, "waiting.bcast[%d] = %g, expected root %d's %d", i, (double) b[i], root,
                              root * 1000 + i);
                        break;
                }
        free(b);
        float g[64 * COLS];
        int64_t gshape[2] = { rank + 1, COLS };
        for (int i = 0; i < (rank + 1) * COLS; i++)
                g[i] = (float) (rank * 100 + i);
        q = rows_request("waiting.gather", g, gshape);
        MUST(hvd_allgather_async_waiting(&q, &h));
        wait_ok(h, "waiting.gather");
        const void *data;
        size_t bytes;
        int ndim;
        const int64_t *shape;
        MUST(hvd_handle_output(h, 0, &data, &bytes, &ndim, &shape));
        CHECK(ndim == 2 && shape[0] == (int64_t) size * (size + 1) / 2 && shape[1] == COLS,
              "waiting.gather: output of %d dims, %" PRId64 " rows", ndim, ndim ? shape[0] : 0);
        if (ndim == 2)
                check_from_ranks("waiting.gather", data, COLS, COLS, 100, 0);
        hvd_handle_release(&h);
        int64_t rows = 2 * size + 1, rshape[2] = { rows, COLS };
        float *rin = xmalloc((size_t) rows * COLS * sizeof *rin);
        for (int64_t i = 0; i < rows * COLS; i++)
                rin[i] = (float) (rank + i);
        q = rows_request("waiting.rscat", rin, rshape);
        q.reduce_op = HVD_REDUCE_SUM;
        MUST(hvd_reducescatter_async_waiting(&q, &h));
        wait_ok(h, "waiting.rscat");
        MUST(hvd_handle_output(h, 0, &data, &bytes, &ndim, &shape));
        /* rank r keeps rows [r0, r1): the first rows % size ranks one more */
        int64_t base = rows / size, rem = rows % size;
        int64_t r0 = rank * base + (rank < rem ? rank : rem), mine = base + (rank < rem);
        CHECK(ndim == 2 && shape[0] == mine, "waiting.rscat: %" PRId64 " rows, expected %" PRId64, ndim ? shape[0] : 0,
              mine);
        const float *ro = data;
        for (int64_t i = 0; i < mine * COLS && ndim == 2 && shape[0] == mine; i++) {
                float want = (float) (size * (size - 1) / 2 + size * (r0 * COLS + i));
                if (ro[i] != want) {
                        CHECK(false, "waiting.rscat[%" PRId64 "] = %g, expected %g", i, (double) ro[i], (double) want);
                        break;
                }
        }
        hvd_handle_release(&h);
        free(rin);
        /* alltoall in equal parts: 2 rows to each rank, [rank, d, i] */
        int64_t arows = 2 * size, ashape[2] = { arows, COLS };
        float *ain = xmalloc((size_t) arows * COLS * sizeof *ain);
        for (int64_t i = 0; i < arows * COLS; i++)
                ain[i] = (float) (rank * 10000 + i);
        q = rows_request("waiting.a2a", ain, ashape);
        MUST(hvd_alltoall_async_waiting(&q, &h));
        wait_ok(h, "waiting.a2a");
        MUST(hvd_handle_output(h, 0, &data, &bytes, &ndim, &shape));
        CHECK(ndim == 2 && shape[0] == arows, "waiting.a2a: %" PRId64 " rows, expected %" PRId64, ndim ? shape[0] : 0,
              arows);
        /* from rank r: its rows 2 * rank, 2 * rank + 1 */
        if (ndim == 2 && shape[0] == arows)
                check_from_ranks("waiting.a2a", data, 0, 2 * COLS, 10000, 2 * rank * COLS);
        hvd_handle_release(&h);
        free(ain);
}

/* Allreduces submitted for a waiter: waited on at once, at sizes either
 * side of the segment path, until the fast path runs them in the waiting
 * thread, with a broadcast, an allgather, a reducescatter and an alltoall
 * submitted alike each step; then one that rank 0 leaves after a wait that timed out (it
 * must complete with nobody waiting), and one every rank releases at
 * once (the next allreduce must still run). */
void scenario_waiting(void) {
        static const size_t ns[] = { 1, 1000, 20000, 300001 };
        const char *e = getenv("HVD_TEST_STEPS");
        int steps = e && atoi(e) > 0 ? atoi(e) : 100;
        for (int st = 0; st < steps; st++)
                for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                        char name[32];
                        snprintf(name, sizeof name, "waiting.%zu", k);
                        float *in, *out;
                        hvd_handle_t *h = waiting_submit(name, ns[k], &in, &out);
                        wait_ok(h, name);
                        hvd_handle_release(&h);
                        waiting_check(name, out, ns[k]);
                        free(in);
                        free(out);
                        if (k == 0)
                                waiting_others(st);
                }
        float *in, *out;
        hvd_handle_t *h = waiting_submit("waiting.left", 1000, &in, &out);
        if (rank == 0) {
                int r = hvd_handle_wait_timeout(h, 1);
                CHECK(r == 0 || r == HVD_ETIMEOUT, "waiting.left: wait_timeout returned %d", r);
                for (int i = 0; i < 10000 && hvd_handle_poll(h) == 0; i++)
                        usleep(1000);
                CHECK(hvd_handle_poll(h) == 1, "waiting.left: not complete 10 s after its wait timed out");
        }
        wait_ok(h, "waiting.left");
        hvd_handle_release(&h);
        waiting_check("waiting.left", out, 1000);
        free(in);
        free(out);
        h = waiting_submit("waiting.released", 1000, &in, &out);
        hvd_handle_release(&h);
        float *in2, *out2;
        h = waiting_submit("waiting.after", 1000, &in2, &out2);
        wait_ok(h, "waiting.after");
        hvd_handle_release(&h);
        waiting_check("waiting.after", out2, 1000);
        /* the released one ran before the one after it */
        waiting_check("waiting.released", out, 1000);
        free(in);
        free(out);
        free(in2);
        free(out2);
        if (rank == 0)
                printf("rank 0: waiting: %d steps exact (with broadcasts, allgathers and reducescatters), one left "
                       "after a timed-out wait, one released\n",
                       steps);
}

/* Five rounds of "stall.t" on every rank, then rank HVD_TEST_STALL_RANK
 * (default the last) stays away: the job's stall shutdown ends the
 * others' wait, with the message that names who is missing. */
void scenario_stall_one(void) {
        const char *e = getenv("HVD_TEST_STALL_RANK");
        int victim = e ? atoi(e) : size - 1;
        for (int it = 0; it < 6; it++) {
                if (it == 5 && rank == victim)
                        for (int k = 0; k < 160; k++)
                                usleep(50 * 1000);
                float x[4] = { 1, 1, 1, 1 }, y[4] = { 0 };
                int64_t shape[1] = { 4 };
                hvd_request_t q = HVD_REQUEST_INIT;
                q.name = "stall.t";
                q.input = x;
                q.output = y;
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                hvd_handle_t *h = NULL;
                int r = hvd_allreduce_async(&q, &h);
                if (r >= 0)
                        r = hvd_handle_wait_timeout(h, 30 * 1000000ull);
                if (it < 5)
                        CHECK(r == 0 && y[0] == (float) size, "round %d: %s, %g", it, errname(r), y[0]);
                else {
                        const char *msg = h ? hvd_handle_error(h) : hvd_last_error();
                        printf("rank %d: stall-one: %s: %s\n", rank, errname(r), msg ? msg : "");
                        CHECK(r < 0, "the stalled round completed");
                }
                hvd_handle_release(&h);
                if (r < 0)
                        return;
        }
}
