/* worker_fastpath.c — scenarios for the one-node fast path (client/fastpath.c):
 * many repeated named allreduces whose results are checked exactly, with
 * new names appearing mid-run, a rank killed while the others wait on the
 * board, and a rank that never submits a cached tensor (the stall inspector).
 *
 *   worker_fastpath exact ROUNDS   int32 sums and maxima of 8 cached tensors
 *                                  per round, fused and not, a new name every
 *                                  7th round, a grouped (of 2 and of
 *                                  BIG_GROUP members) and a process-set
 *                                  allreduce now and then; a cached
 *                                  broadcast (its root changing each round),
 *                                  allgather (uneven rows that change every
 *                                  17 rounds), reducescatter and alltoall
 *                                  (uneven splits that change every 19
 *                                  rounds) per round;
 *                                  exits 1 on any wrong element
 *   worker_fastpath kill           cached allreduces until killed; writes
 *                                  $HVD_TEST_TMPDIR/running.RANK after 50
 *                                  rounds; prints the error it ends with
 *   worker_fastpath stall          20 rounds of 'fp.stall', then rank 0
 *                                  submits it once more and the others wait
 *                                  in a barrier; prints what each gets
 * With HVD_TEST_TMPDIR, `exact` holds the job alive at its end until
 * $HVD_TEST_TMPDIR/hold.go exists (rank 0 writes hold.ready), so the
 * daemon's status of the live job can be read. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hvd.h"

static int rank, size;

#define FAIL(...)                                                                                                      \
        do {                                                                                                           \
                printf("rank %d: FAIL: ", rank);                                                                       \
                printf(__VA_ARGS__);                                                                                   \
                printf("\n");                                                                                          \
                exit(1);                                                                                               \
        } while (0)

#define NT        8
#define BIG_GROUP 100 /* members of the big group (a board record holds 60 ids) */
static const int64_t lens[NT] = { 1, 3, 17, 256, 1000, 4096, 5, 70000 };

static int32_t val(int r, int round, int t, int64_t i) {
        return (int32_t) (r * 1000 + round * 7 + t * 13 + (int32_t) (i % 101));
}

static hvd_handle_t *submit(const char *name, const int32_t *in, int32_t *out, int64_t n, hvd_reduce_op_t op,
                            int process_set) {
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[1] = { n };
        q.name = name;
        q.input = in;
        q.output = out;
        q.dtype = HVD_INT32;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = op;
        q.process_set = process_set;
        hvd_handle_t *h = NULL;
        if (hvd_allreduce_async(&q, &h) < 0)
                FAIL("allreduce '%s': %s", name, hvd_last_error());
        return h;
}

static void wait_ok(hvd_handle_t **h, const char *what) {
        int r = hvd_handle_wait(*h);
        if (r < 0)
                FAIL("%s: %s: %s", what, hvd_strerror(r), hvd_handle_error(*h));
        hvd_handle_release(h);
}

static void check(const char *name, const int32_t *out, int64_t n, int round, int t, bool max, int nranks,
                  const int *ranks) {
        for (int64_t i = 0; i < n; i++) {
                int64_t want = max ? INT64_MIN : 0;
                for (int k = 0; k < nranks; k++) {
                        int32_t v = val(ranks ? ranks[k] : k, round, t, i);
                        want = max ? (v > want ? v : want) : want + v;
                }
                if (out[i] != want)
                        FAIL("round %d: '%s'[%" PRId64 "] = %" PRId32 ", expected %" PRId64, round, name, i, out[i],
                             want);
        }
}

/* One broadcast, allgather or reducescatter of int32 (async, then wait). */
static hvd_handle_t *submit_kind(int (*fn)(const hvd_request_t *, hvd_handle_t **), const char *name, const int32_t *in,
                                 int32_t *out, int ndim, const int64_t *shape, int root) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = in;
        q.output = out;
        q.dtype = HVD_INT32;
        q.ndim = ndim;
        q.shape = shape;
        q.root = root;
        q.reduce_op = HVD_REDUCE_SUM;
        hvd_handle_t *h = NULL;
        if (fn(&q, &h) < 0)
                FAIL("'%s': %s", name, hvd_last_error());
        return h;
}

/* The output hvd allocated for h: its elements, after its shape is checked. */
static const int32_t *output_of(hvd_handle_t *h, const char *name, int64_t rows, int64_t cols) {
        const void *data;
        size_t bytes;
        int ndim;
        const int64_t *shape;
        if (hvd_handle_output(h, 0, &data, &bytes, &ndim, &shape) < 0)
                FAIL("'%s': no output: %s", name, hvd_last_error());
        if (ndim != 2 || shape[0] != rows || shape[1] != cols || bytes != (size_t) (rows * cols) * sizeof(int32_t))
                FAIL("'%s': output of %d dims, %" PRId64 " x %" PRId64 ", expected %" PRId64 " x %" PRId64, name, ndim,
                     ndim > 0 ? shape[0] : 0, ndim > 1 ? shape[1] : 0, rows, cols);
        return data;
}

/* Rows rank src sends rank dst in an alltoall of the given round: uneven,
 * and another pattern every other 19 rounds (new splits go through the
 * coordinator again). */
static int64_t a2a_rows(int src, int dst, int round) {
        return (src + 2 * dst + (round / 19) % 2) % 3 + (dst == src);
}

/* An alltoall of those splits, its output and received splits exactly. */
static void alltoall_round(int round) {
        enum { COLS = 2, MAXR = 64 * 4 };
        static int32_t ain[MAXR * COLS];
        int64_t splits[64], rows = 0;
        for (int d = 0; d < size; d++)
                rows += splits[d] = a2a_rows(rank, d, round);
        for (int64_t i = 0; i < rows * COLS; i++)
                ain[i] = val(rank, round, 100, i);
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[2] = { rows, COLS };
        q.name = "fp.a2a";
        q.input = ain;
        q.dtype = HVD_INT32;
        q.ndim = 2;
        q.shape = shape;
        q.splits = splits;
        hvd_handle_t *h = NULL;
        if (hvd_alltoall_async(&q, &h) < 0)
                FAIL("'fp.a2a': %s", hvd_last_error());
        if (hvd_handle_wait(h) < 0)
                FAIL("fp.a2a: %s", hvd_handle_error(h));
        int64_t total = 0;
        for (int j = 0; j < size; j++)
                total += a2a_rows(j, rank, round);
        const int32_t *out = output_of(h, "fp.a2a", total, COLS);
        const int64_t *recv = NULL;
        if (hvd_handle_recv_splits(h, &recv) < 0)
                FAIL("fp.a2a: no received splits: %s", hvd_last_error());
        int64_t at = 0;
        for (int j = 0; j < size; j++) {
                if (recv[j] != a2a_rows(j, rank, round))
                        FAIL("round %d: 'fp.a2a' received %" PRId64 " rows from rank %d, expected %" PRId64, round,
                             recv[j], j, a2a_rows(j, rank, round));
                int64_t from = 0; /* the first row j sends me */
                for (int d = 0; d < rank; d++)
                        from += a2a_rows(j, d, round);
                for (int64_t i = 0; i < recv[j] * COLS; i++, at++)
                        if (out[at] != val(j, round, 100, from * COLS + i))
                                FAIL("round %d: 'fp.a2a'[%" PRId64 "] = %" PRId32 ", expected rank %d's %" PRId32,
                                     round, at, out[at], j, val(j, round, 100, from * COLS + i));
        }
        hvd_handle_release(&h);
}

/* A broadcast from a root that changes each round, an allgather of uneven
 * rows (rank r: r + 1 rows, one more every other 17 rounds: a new shape
 * goes through the coordinator again) and a reducescatter, exactly. */
static void other_kinds(int round) {
        enum { BN = 300, COLS = 3, RCOLS = 5 };
        static int32_t bin[BN], bout[BN], gin[(64 + 2) * COLS], rin[(2 * 64 + 1) * RCOLS];
        int root = round % size;
        for (int i = 0; i < BN; i++) {
                bin[i] = val(rank, round, 70, i);
                bout[i] = -1;
        }
        int64_t bshape[1] = { BN };
        hvd_handle_t *hb = submit_kind(hvd_broadcast_async, "fp.bcast", bin, bout, 1, bshape, root);
        int extra = (round / 17) % 2;
        int64_t grows = rank + 1 + extra, gshape[2] = { grows, COLS };
        for (int64_t i = 0; i < grows * COLS; i++)
                gin[i] = val(rank, round, 80, i);
        hvd_handle_t *hg = submit_kind(hvd_allgather_async, "fp.gather", gin, NULL, 2, gshape, 0);
        int64_t rrows = 2 * size + 1, rshape[2] = { rrows, RCOLS };
        for (int64_t i = 0; i < rrows * RCOLS; i++)
                rin[i] = val(rank, round, 90, i);
        hvd_handle_t *hr = submit_kind(hvd_reducescatter_async, "fp.rscat", rin, NULL, 2, rshape, 0);
        wait_ok(&hb, "fp.bcast");
        for (int i = 0; i < BN; i++)
                if (bout[i] != val(root, round, 70, i))
                        FAIL("round %d: 'fp.bcast'[%d] = %" PRId32 " from root %d, expected %" PRId32, round, i,
                             bout[i], root, val(root, round, 70, i));
        if (hvd_handle_wait(hg) < 0)
                FAIL("fp.gather: %s", hvd_handle_error(hg));
        int64_t total = 0;
        for (int q = 0; q < size; q++)
                total += q + 1 + extra;
        const int32_t *g = output_of(hg, "fp.gather", total, COLS);
        for (int q = 0, at = 0; q < size; q++)
                for (int64_t i = 0; i < (q + 1 + extra) * COLS; i++, at++)
                        if (g[at] != val(q, round, 80, i))
                                FAIL("round %d: 'fp.gather'[%d] = %" PRId32 ", expected rank %d's %" PRId32, round, at,
                                     g[at], q, val(q, round, 80, i));
        hvd_handle_release(&hg);
        if (hvd_handle_wait(hr) < 0)
                FAIL("fp.rscat: %s", hvd_handle_error(hr));
        /* rank r keeps rows [r0, r1): the first rrows % size ranks one more */
        int64_t base = rrows / size, rem = rrows % size;
        int64_t r0 = rank * base + (rank < rem ? rank : rem), mine = base + (rank < rem);
        const int32_t *rs = output_of(hr, "fp.rscat", mine, RCOLS);
        for (int64_t i = 0; i < mine * RCOLS; i++) {
                int64_t want = 0;
                for (int q = 0; q < size; q++)
                        want += val(q, round, 90, r0 * RCOLS + i);
                if (rs[i] != want)
                        FAIL("round %d: 'fp.rscat'[%" PRId64 "] = %" PRId32 ", expected %" PRId64, round, i, rs[i],
                             want);
        }
        hvd_handle_release(&hr);
        alltoall_round(round);
}

static void hold(void) {
        const char *dir = getenv("HVD_TEST_TMPDIR");
        if (!dir)
                return;
        if (hvd_barrier() < 0)
                FAIL("barrier: %s", hvd_last_error());
        char path[1024];
        if (rank == 0) {
                snprintf(path, sizeof path, "%s/hold.ready", dir);
                FILE *f = fopen(path, "w");
                if (f)
                        fclose(f);
        }
        snprintf(path, sizeof path, "%s/hold.go", dir);
        for (int i = 0; i < 600 && access(path, F_OK) != 0; i++)
                usleep(50 * 1000);
        if (hvd_barrier() < 0)
                FAIL("barrier: %s", hvd_last_error());
}

/* One grouped allreduce of n members of 4 int32 named PREFIX.K, member k
 * with the values of tensor t0 + k, checked exactly. A group of more
 * members than one record of the board holds (60: a whole model's
 * gradients in one group) takes several records. */
static void grouped(int round, int n, const char *prefix, int t0) {
        static hvd_request_t g[BIG_GROUP];
        static int32_t gi[BIG_GROUP][4], go[BIG_GROUP][4];
        static char names[BIG_GROUP][32];
        static const int64_t shape[1] = { 4 };
        for (int k = 0; k < n; k++) {
                hvd_request_init(&g[k]);
                snprintf(names[k], sizeof names[k], "%s.%d", prefix, k);
                g[k].name = names[k];
                g[k].input = gi[k];
                g[k].output = go[k];
                g[k].dtype = HVD_INT32;
                g[k].ndim = 1;
                g[k].shape = shape;
                g[k].reduce_op = HVD_REDUCE_SUM;
                for (int i = 0; i < 4; i++)
                        gi[k][i] = val(rank, round, t0 + k, i);
        }
        hvd_handle_t *gh = NULL;
        if (hvd_grouped_allreduce_async(g, (size_t) n, &gh) < 0)
                FAIL("%s: %s", prefix, hvd_last_error());
        wait_ok(&gh, prefix);
        for (int k = 0; k < n; k++)
                check(names[k], go[k], 4, round, t0 + k, false, size, NULL);
}

static int exact(int rounds) {
        int32_t *in[NT], *out[NT], *in2 = malloc(64 * sizeof *in2), *out2 = malloc(64 * sizeof *out2);
        for (int t = 0; t < NT; t++) {
                in[t] = malloc((size_t) lens[t] * sizeof(int32_t));
                out[t] = malloc((size_t) lens[t] * sizeof(int32_t));
                if (!in[t] || !out[t])
                        FAIL("out of memory");
        }
        /* a process set of the even ranks, for the odd round */
        int even[64], n_even = 0;
        for (int r = 0; r < size && n_even < 64; r += 2)
                even[n_even++] = r;
        int ps = hvd_add_process_set(even, (size_t) n_even);
        if (ps < 0)
                FAIL("add_process_set: %s", hvd_last_error());
        for (int round = 0; round < rounds; round++) {
                hvd_handle_t *h[NT], *hn = NULL, *hp = NULL;
                char names[NT][32], nname[32];
                for (int t = 0; t < NT; t++) {
                        for (int64_t i = 0; i < lens[t]; i++)
                                in[t][i] = val(rank, round, t, i);
                        memset(out[t], 0xff, (size_t) lens[t] * sizeof(int32_t));
                        snprintf(names[t], sizeof names[t], "fp.t%d", t);
                }
                /* ranks submit in different orders: the board orders them */
                for (int k = 0; k < NT; k++) {
                        int t = (k + rank * 3) % NT;
                        h[t] = submit(names[t], in[t], out[t], lens[t],
                                      t == 2 || t == 6 ? HVD_REDUCE_MAX : HVD_REDUCE_SUM, 0);
                        if (k == NT / 2 && round % 7 == 3) {
                                /* a name never seen, between cached ones */
                                snprintf(nname, sizeof nname, "fp.new.%d", round);
                                for (int i = 0; i < 64; i++)
                                        in2[i] = val(rank, round, 99, i);
                                hn = submit(nname, in2, out2, 64, HVD_REDUCE_SUM, 0);
                        }
                }
                if (round % 11 == 5 && (rank % 2) == 0) {
                        static int32_t pin[9], pout[9];
                        for (int i = 0; i < 9; i++)
                                pin[i] = val(rank, round, 50, i);
                        hp = submit("fp.pset", pin, pout, 9, HVD_REDUCE_SUM, ps);
                        wait_ok(&hp, "fp.pset");
                        check("fp.pset", pout, 9, round, 50, false, n_even, even);
                }
                for (int t = 0; t < NT; t++) {
                        wait_ok(&h[t], names[t]);
                        check(names[t], out[t], lens[t], round, t, t == 2 || t == 6, size, NULL);
                }
                if (hn) {
                        wait_ok(&hn, nname);
                        check(nname, out2, 64, round, 99, false, size, NULL);
                }
                other_kinds(round);
                if (round % 13 == 9) {
                        /* a grouped pair and a group of BIG_GROUP members,
                         * from the board from their second time */
                        grouped(round, 2, "fp.group", 60);
                        grouped(round, BIG_GROUP, "fp.big", 100);
                }
        }
        printf("rank %d: exact: %d rounds ok\n", rank, rounds);
        hold();
        for (int t = 0; t < NT; t++) {
                free(in[t]);
                free(out[t]);
        }
        free(in2);
        free(out2);
        return 0;
}

static int killed(void) {
        int32_t x[16], y[16];
        const char *dir = getenv("HVD_TEST_TMPDIR");
        for (int round = 0;; round++) {
                for (int i = 0; i < 16; i++)
                        x[i] = val(rank, round, 0, i);
                hvd_handle_t *h = submit("fp.kill", x, y, 16, HVD_REDUCE_SUM, 0);
                int r = hvd_handle_wait(h);
                if (r < 0) {
                        printf("rank %d: kill: %s after %d rounds: %s\n", rank, hvd_strerror(r), round,
                               hvd_handle_error(h));
                        hvd_handle_release(&h);
                        return 2;
                }
                hvd_handle_release(&h);
                check("fp.kill", y, 16, round, 0, false, size, NULL);
                if (round == 50 && dir) {
                        char path[1024];
                        snprintf(path, sizeof path, "%s/running.%d", dir, rank);
                        FILE *f = fopen(path, "w");
                        if (f) {
                                fprintf(f, "%d\n", (int) getpid());
                                fclose(f);
                        }
                }
        }
}

static int stall(void) {
        int32_t x[4], y[4];
        for (int round = 0; round <= 20; round++) {
                for (int i = 0; i < 4; i++)
                        x[i] = val(rank, round, 0, i);
                if (round == 20 && rank != 0) {
                        /* everyone but rank 0 waits in a barrier rank 0 never
                         * reaches; rank 0's tensor is the older one */
                        usleep(500 * 1000);
                        int r = hvd_barrier();
                        printf("rank %d: barrier: %s: %s\n", rank, hvd_strerror(r), hvd_last_error());
                        return r < 0 ? 3 : 0;
                }
                hvd_handle_t *h = submit("fp.stall", x, y, 4, HVD_REDUCE_SUM, 0);
                int r = hvd_handle_wait(h);
                if (r < 0) {
                        printf("rank %d: fp.stall: %s: %s\n", rank, hvd_strerror(r), hvd_handle_error(h));
                        hvd_handle_release(&h);
                        return 3;
                }
                hvd_handle_release(&h);
                check("fp.stall", y, 4, round, 0, false, size, NULL);
        }
        printf("rank %d: fp.stall completed, which it must not\n", rank);
        return 1;
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc < 2) {
                fprintf(stderr, "usage: %s exact ROUNDS | kill | stall\n", argv[0]);
                return 2;
        }
        if (hvd_init() < 0) {
                printf("hvd_init: %s\n", hvd_last_error());
                return 1;
        }
        rank = hvd_rank();
        size = hvd_size();
        int r;
        if (strcmp(argv[1], "exact") == 0)
                r = exact(argc > 2 ? atoi(argv[2]) : 100);
        else if (strcmp(argv[1], "kill") == 0)
                r = killed();
        else if (strcmp(argv[1], "stall") == 0)
                r = stall();
        else {
                fprintf(stderr, "unknown scenario %s\n", argv[1]);
                r = 2;
        }
        hvd_shutdown();
        return r;
}
