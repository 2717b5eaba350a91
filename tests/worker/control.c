/* control.c — the scenarios of the job's coordination: barrier (nobody
 * passes before everybody arrived), join (ranks that run out of steps while
 * the others go on, as in Horovod), several user threads submitting at once,
 * and process sets (collectives among some of the ranks, groups inside one
 * set, two sets reducing tensors of the same name). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

/* ---- barrier ---- */

void scenario_barrier(void) {
        const char *job = getenv("HVD_JOB_ID");
        char path[512];
        /* the ordering check leaves marker files: only in a test's own
         * directory (HVD_TEST_TMPDIR), where a failure cannot litter /tmp */
        const char *d = getenv("HVD_TEST_TMPDIR");
        for (int round = 0; round < 3 && d && *d; round++) {
                snprintf(path, sizeof path, "%s/barrier.%s.%d.%d", tmpdir(), job ? job : "solo", round, rank);
                FILE *f = fopen(path, "w");
                if (!f) {
                        fail("cannot create %s: %s", path, strerror(errno));
                        return;
                }
                fclose(f);
                MUST(hvd_barrier());
                /* everybody created their file before anybody passed */
                for (int r = 0; r < size; r++) {
                        snprintf(path, sizeof path, "%s/barrier.%s.%d.%d", tmpdir(), job ? job : "solo", round, r);
                        CHECK(access(path, F_OK) == 0, "after barrier %d, rank %d's marker is missing", round, r);
                }
                MUST(hvd_barrier());
                snprintf(path, sizeof path, "%s/barrier.%s.%d.%d", tmpdir(), job ? job : "solo", round, rank);
                unlink(path);
        }
        /* barriers interleaved with async work */
        float x[4] = { 1, 2, 3, 4 }, y[4];
        hvd_request_t q = HVD_REQUEST_INIT;
        int64_t shape[1] = { 4 };
        q.name = "barrier.around";
        q.input = x;
        q.output = y;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_SUM;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        MUST(hvd_barrier());
        wait_ok(h, "barrier.around");
        for (int i = 0; i < 4; i++)
                CHECK(y[i] == (float) ((i + 1) * size), "barrier.around[%d] = %g", i, y[i]);
        hvd_handle_release(&h);
}

/* ---- join ---- */

/* "rank 0 has" / "ranks [0, 1] have": the ranks that ran out of steps
 * before step i (rank r runs (r + 1) * k steps) */
static void join_who(char *buf, size_t len, int i, int k) {
        int n = 0;
        char list[256] = "";
        size_t o = 0;
        for (int r = 0; r < size; r++)
                if ((r + 1) * k <= i) {
                        o += (size_t) snprintf(list + o, sizeof list - o, "%s%d", n ? ", " : "", r);
                        n++;
                }
        if (n == 1)
                snprintf(buf, len, "rank %s has", list);
        else
                snprintf(buf, len, "ranks [%s] have", list);
}

/* h failed at once with the join error for what ("allgather 'x'") */
static void wait_joined(hvd_handle_t *h, const char *what, const char *who, const char *hint) {
        char want[512];
        snprintf(want, sizeof want,
                 "%s is not supported while %s joined: only allreduce runs until every rank has joined%s", what, who,
                 hint);
        int r = hvd_handle_wait(h);
        CHECK(r == HVD_EJOINED, "%s returned %s, expected HVD_EJOINED", what, errname(r));
        CHECK(strcmp(hvd_handle_error(h), want) == 0, "%s: error \"%s\", expected \"%s\"", what, hvd_handle_error(h),
              want);
}

/* Rank r runs (r + 1) * k steps of an allreduce, an allgather and a
 * broadcast, then joins: the allreduces of the others go on with zeros
 * from the joined ranks; their allgathers and broadcasts (and a barrier)
 * fail as in Horovod; every join returns the last rank, size - 1; then
 * every rank takes part again. Two rounds, the same names. */
void scenario_join(void) {
        const int k = 3;
        for (int round = 0; round < 2; round++) {
                int steps = (rank + 1) * k;
                for (int i = 0; i < steps; i++) {
                        /* a rank whose steps ended before step i has joined (it
                         * never submits step i's tensors, so they complete
                         * only once its join is in) */
                        bool some_joined = i >= k;
                        char who[300] = "";
                        if (some_joined)
                                join_who(who, sizeof who, i, k);
                        char an[64], gn[64], bn[64];
                        snprintf(an, sizeof an, "join.ar.%d", i);
                        snprintf(gn, sizeof gn, "join.ag.%d", i);
                        snprintf(bn, sizeof bn, "join.bc.%d", i);
                        float x[5], y[5];
                        for (int j = 0; j < 5; j++)
                                x[j] = (float) ((rank + 1) * 100 + i + j);
                        int64_t shape[1] = { 5 };
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = an;
                        q.input = x;
                        q.output = y;
                        q.ndim = 1;
                        q.shape = shape;
                        q.reduce_op = HVD_REDUCE_SUM;
                        hvd_handle_t *ha = NULL, *hg = NULL, *hb = NULL;
                        MUST(hvd_allreduce_async(&q, &ha));
                        int32_t *g = xmalloc((size_t) (rank + 1) * 2 * sizeof *g);
                        int64_t gshape[2] = { rank + 1, 2 };
                        for (int j = 0; j < (rank + 1) * 2; j++)
                                g[j] = rank * 1000 + i * 10 + j;
                        hvd_request_t qg = HVD_REQUEST_INIT;
                        qg.name = gn;
                        qg.input = g;
                        qg.dtype = HVD_INT32;
                        qg.ndim = 2;
                        qg.shape = gshape;
                        MUST(hvd_allgather_async(&qg, &hg));
                        /* from the rank that never joins early */
                        int32_t bv[3] = { rank, rank, rank };
                        int64_t bshape[1] = { 3 };
                        hvd_request_t qb = HVD_REQUEST_INIT;
                        qb.name = bn;
                        qb.input = bv;
                        qb.output = bv;
                        qb.dtype = HVD_INT32;
                        qb.ndim = 1;
                        qb.shape = bshape;
                        qb.root = size - 1;
                        MUST(hvd_broadcast_async(&qb, &hb));
                        wait_ok(ha, an);
                        /* ranks that still run step i: (r + 1) * k > i */
                        for (int j = 0; j < 5; j++) {
                                float want = 0;
                                for (int r = 0; r < size; r++)
                                        if ((r + 1) * k > i)
                                                want += (float) ((r + 1) * 100 + i + j);
                                CHECK(y[j] == want, "round %d %s[%d] = %g, expected %g (joined ranks give zeros)",
                                      round, an, j, y[j], want);
                        }
                        hvd_handle_release(&ha);
                        char what[96];
                        if (some_joined) {
                                snprintf(what, sizeof what, "broadcast '%s'", bn);
                                wait_joined(hb, what, who, "");
                                snprintf(what, sizeof what, "allgather '%s'", gn);
                                wait_joined(hg, what, who,
                                            " (specify sparse_to_dense=True if using DistributedOptimizer)");
                                int r = hvd_barrier();
                                CHECK(r == HVD_EJOINED, "round %d step %d: a barrier returned %s, expected HVD_EJOINED",
                                      round, i, errname(r));
                        } else {
                                wait_ok(hb, bn);
                                for (int j = 0; j < 3; j++)
                                        CHECK(bv[j] == size - 1, "%s[%d] = %d, expected %d", bn, j, bv[j], size - 1);
                                wait_ok(hg, gn);
                                const void *data;
                                size_t bytes;
                                int nd;
                                const int64_t *os;
                                MUST(hvd_handle_output(hg, 0, &data, &bytes, &nd, &os));
                                int64_t rows = (int64_t) size * (size + 1) / 2;
                                CHECK(os[0] == rows, "round %d %s: %" PRId64 " rows, expected %" PRId64, round, gn,
                                      os[0], rows);
                                if (os[0] == rows && bytes == (size_t) rows * 8) {
                                        const int32_t *o = data;
                                        int64_t at = 0;
                                        for (int r = 0; r < size; r++)
                                                for (int j = 0; j < (r + 1) * 2; j++, at++)
                                                        CHECK(o[at] == r * 1000 + i * 10 + j,
                                                              "%s: element %" PRId64 " is %d", gn, at, o[at]);
                                }
                        }
                        hvd_handle_release(&hb);
                        hvd_handle_release(&hg);
                        free(g);
                }
                int last = hvd_join();
                if (last < 0)
                        fail("round %d: hvd_join failed: %s: %s", round, errname(last), hvd_last_error());
                else
                        CHECK(last == size - 1, "round %d: hvd_join returned %d, expected the last rank to join, %d",
                              round, last, size - 1);
                /* after everybody joined, everybody takes part again */
                float x = (float) rank, y = -1;
                char nm[32];
                snprintf(nm, sizeof nm, "join.after.%d", round);
                MUST(hvd_allreduce(nm, &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
                CHECK(y == (float) (size * (size - 1) / 2), "%s = %g after join, expected %d", nm, y,
                      size * (size - 1) / 2);
                MUST(hvd_barrier());
                int32_t v = rank, got[64];
                int64_t vs[1] = { 1 };
                hvd_request_t qv = HVD_REQUEST_INIT;
                qv.name = "join.ag.after";
                qv.input = &v;
                qv.dtype = HVD_INT32;
                qv.ndim = 1;
                qv.shape = vs;
                hvd_handle_t *hv = NULL;
                MUST(hvd_allgather_async(&qv, &hv));
                wait_ok(hv, qv.name);
                const void *data;
                size_t bytes;
                int nd;
                const int64_t *os;
                MUST(hvd_handle_output(hv, 0, &data, &bytes, &nd, &os));
                CHECK(bytes == (size_t) size * sizeof v && size <= 64, "join.ag.after: %zu bytes", bytes);
                if (bytes == (size_t) size * sizeof v && size <= 64) {
                        memcpy(got, data, bytes);
                        for (int r = 0; r < size; r++)
                                CHECK(got[r] == r, "join.ag.after[%d] = %d after join", r, got[r]);
                }
                hvd_handle_release(&hv);
        }
}

/* ---- several user threads at once ---- */

enum { TH = 4, TH_OPS = 60 };

static void *thread_main(void *arg) {
        int t = (int) (intptr_t) arg;
        for (int round = 0; round < 3; round++) {
                float x[TH_OPS][17], y[TH_OPS][17];
                hvd_handle_t *h[TH_OPS];
                char names[TH_OPS][48];
                for (int k = 0; k < TH_OPS; k++) {
                        for (int j = 0; j < 17; j++)
                                x[k][j] = (float) (t * 1000 + k * 10 + j + rank);
                        snprintf(names[k], sizeof names[k], "thread%d.op%d", t, k);
                        int64_t shape[1] = { 17 };
                        hvd_request_t q = HVD_REQUEST_INIT;
                        q.name = names[k];
                        q.input = x[k];
                        q.output = y[k];
                        q.ndim = 1;
                        q.shape = shape;
                        q.reduce_op = HVD_REDUCE_SUM;
                        MUST(hvd_allreduce_async(&q, &h[k]));
                        if (k % 7 == 3) /* some waited at once, some later */
                                wait_ok(h[k], names[k]);
                }
                for (int k = 0; k < TH_OPS; k++) {
                        wait_ok(h[k], names[k]);
                        for (int j = 0; j < 17; j++) {
                                float want = (float) (size * (t * 1000 + k * 10 + j) + size * (size - 1) / 2);
                                CHECK(y[k][j] == want, "%s[%d] = %g, expected %g", names[k], j, y[k][j], want);
                        }
                        hvd_handle_release(&h[k]);
                }
        }
        return NULL;
}

void scenario_threads(void) {
        /* TH threads submit and wait at the same time, each its own names */
        pthread_t th[TH];
        for (int t = 0; t < TH; t++)
                if (pthread_create(&th[t], NULL, thread_main, (void *) (intptr_t) t) != 0) {
                        fail("pthread_create failed");
                        return;
                }
        for (int t = 0; t < TH; t++)
                pthread_join(th[t], NULL);
}

/* ---- process sets ---- */

static int set_of(int parity, int *members) {
        int n = 0;
        for (int r = parity; r < size; r += 2)
                members[n++] = r;
        return n;
}

/* allreduce SUM of `name` among set `id` (members given), value rank+k */
static void ps_allreduce(int id, const char *name, const int *members, int n, float base) {
        float x[3], y[3] = { -1, -1, -1 };
        for (int i = 0; i < 3; i++)
                x[i] = base + (float) (rank * 10 + i);
        int64_t shape[1] = { 3 };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = x;
        q.output = y;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_SUM;
        q.process_set = id;
        hvd_handle_t *h = NULL;
        MUST(hvd_allreduce_async(&q, &h));
        int r = wait_h(h, name);
        CHECK(r == 0, "%s in process set %d: %s: %s", name, id, errname(r), hvd_handle_error(h));
        for (int i = 0; i < 3 && r == 0; i++) {
                float want = 0;
                for (int k = 0; k < n; k++)
                        want += base + (float) (members[k] * 10 + i);
                CHECK(y[i] == want, "%s in process set %d: element %d is %g, expected %g", name, id, i, y[i], want);
        }
        hvd_handle_release(&h);
}

void scenario_process_sets(void) {
        if (size < 2) {
                printf("rank %d: SKIP [process-sets] needs at least 2 ranks\n", rank);
                return;
        }
        int even[64], odd[64];
        int ne = set_of(0, even), no = set_of(1, odd);
        int id_e = hvd_add_process_set(even, (size_t) ne);
        MUST(id_e);
        int id_o = hvd_add_process_set(odd, (size_t) no);
        MUST(id_o);
        CHECK(id_e > 0 && id_o > 0 && id_e != id_o, "process set ids %d and %d", id_e, id_o);
        bool is_even = rank % 2 == 0;
        int mine = is_even ? id_e : id_o, other = is_even ? id_o : id_e;
        const int *mem = is_even ? even : odd;
        int nm = is_even ? ne : no;
        CHECK(hvd_process_set_size(id_e) == ne, "size of the even set: %d", hvd_process_set_size(id_e));
        CHECK(hvd_process_set_size(id_o) == no, "size of the odd set: %d", hvd_process_set_size(id_o));
        CHECK(hvd_process_set_included(mine) == 1, "not included in my own set");
        CHECK(hvd_process_set_included(other) == 0, "included in the other set");
        CHECK(hvd_process_set_rank(mine) == rank / 2, "rank in my set: %d, expected %d", hvd_process_set_rank(mine),
              rank / 2);
        CHECK(hvd_process_set_rank(other) == -ENOENT, "rank in the other set: %d", hvd_process_set_rank(other));
        const int *ranks = NULL;
        size_t n = 0;
        MUST(hvd_process_set_ranks(mine, &ranks, &n));
        CHECK(n == (size_t) nm, "my set has %zu members, expected %d", n, nm);
        for (size_t i = 0; i < n && i < (size_t) nm; i++)
                CHECK(ranks[i] == mem[i], "member %zu of my set is %d, expected %d", i, ranks[i], mem[i]);
        CHECK(hvd_process_set_size(999) == -EINVAL, "an unknown set id was accepted");
        /* the same members again: refused */
        int r = hvd_add_process_set(even, (size_t) ne);
        CHECK(r == -EEXIST, "adding the even set twice: %s", errname(r));

        /* collectives inside my set only, several rounds (cached ids) */
        for (int round = 0; round < 3; round++) {
                ps_allreduce(mine, is_even ? "ps.even.w" : "ps.odd.w", mem, nm, (float) round);
                /* and one over everybody in between */
                float x = 1, y = 0;
                MUST(hvd_allreduce("ps.world", &x, &y, 1, HVD_FLOAT32, HVD_REDUCE_SUM));
                CHECK(y == (float) size, "ps.world = %g", y);
        }
        /* an empty tensor without buffers fused with another */
        {
                float x3[3] = { 1, 2, (float) rank }, y3[3] = { 0 };
                int64_t s0[1] = { 0 }, s3[1] = { 3 };
                hvd_request_t g2[2] = { HVD_REQUEST_INIT, HVD_REQUEST_INIT };
                g2[0].name = "ps.empty";
                g2[0].ndim = 1;
                g2[0].shape = s0;
                g2[1].name = "ps.empty.beside";
                g2[1].input = x3;
                g2[1].output = y3;
                g2[1].ndim = 1;
                g2[1].shape = s3;
                for (int i = 0; i < 2; i++) {
                        g2[i].reduce_op = HVD_REDUCE_SUM;
                        g2[i].process_set = mine;
                }
                hvd_handle_t *hg = NULL;
                MUST(hvd_grouped_allreduce_async(g2, 2, &hg));
                wait_ok(hg, "ps.empty");
                hvd_handle_release(&hg);
                float want = 0;
                for (int k = 0; k < nm; k++)
                        want += (float) mem[k];
                CHECK(y3[0] == (float) nm && y3[1] == 2.0f * (float) nm && y3[2] == want,
                      "an allreduce beside an empty tensor in my set: %g %g %g", y3[0], y3[1], y3[2]);
        }
        /* allgather in my set: rows = rank + 1 */
        int64_t shape[2] = { rank + 1, 2 };
        int32_t *in = xmalloc((size_t) (rank + 1) * 2 * sizeof *in);
        for (int i = 0; i < (rank + 1) * 2; i++)
                in[i] = rank * 100 + i;
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = is_even ? "ps.even.g" : "ps.odd.g";
        q.input = in;
        q.dtype = HVD_INT32;
        q.ndim = 2;
        q.shape = shape;
        q.process_set = mine;
        hvd_handle_t *h = NULL;
        MUST(hvd_allgather_async(&q, &h));
        wait_ok(h, q.name);
        const void *data;
        size_t bytes;
        int nd;
        const int64_t *os;
        MUST(hvd_handle_output(h, 0, &data, &bytes, &nd, &os));
        int64_t rows = 0;
        for (int k = 0; k < nm; k++)
                rows += mem[k] + 1;
        CHECK(os[0] == rows && bytes == (size_t) rows * 8, "%s: %" PRId64 " rows, expected %" PRId64, q.name, os[0],
              rows);
        if (os[0] == rows && bytes == (size_t) rows * 8) {
                const int32_t *o = data;
                int64_t at = 0;
                for (int k = 0; k < nm; k++)
                        for (int i = 0; i < (mem[k] + 1) * 2; i++, at++)
                                CHECK(o[at] == mem[k] * 100 + i, "%s: element %" PRId64 " is %d, expected %d", q.name,
                                      at, o[at], mem[k] * 100 + i);
        }
        hvd_handle_release(&h);
        free(in);
        /* a set this rank is not in cannot be used */
        float x = 0, y;
        hvd_request_t bad = HVD_REQUEST_INIT;
        int64_t s1[1] = { 1 };
        bad.name = "ps.notmine";
        bad.input = &x;
        bad.output = &y;
        bad.ndim = 1;
        bad.shape = s1;
        bad.process_set = other;
        r = hvd_allreduce_async(&bad, &h);
        CHECK(r < 0, "an allreduce in a process set this rank is not in was accepted");
        if (r >= 0) {
                wait_h(h, "ps.notmine");
                hvd_handle_release(&h);
        }
        MUST(hvd_remove_process_set(id_o));
        MUST(hvd_remove_process_set(id_e));
        bad.process_set = mine;
        h = NULL;
        r = hvd_allreduce_async(&bad, &h);
        CHECK(r == -EINVAL, "an allreduce in a removed process set: %s", errname(r));
        CHECK(h == NULL, "a refused submission produced a handle");
        MUST(hvd_barrier());
}

void scenario_process_sets_grouped(void) {
        /* grouped ops inside one set, then grouped ops of the whole job: the
         * set's groups must not throw the ranks' group numbering apart */
        if (size < 2) {
                printf("rank %d: SKIP [process-sets-grouped] needs at least 2 ranks\n", rank);
                return;
        }
        int even[64];
        int ne = set_of(0, even);
        int id_e = hvd_add_process_set(even, (size_t) ne);
        MUST(id_e);
        float x[2][4], y[2][4];
        int64_t s4[1] = { 4 };
        hvd_request_t q[2];
        for (int round = 0; round < 2; round++) {
                const char *nm[2][2] = { { "psg.set.a", "psg.set.b" }, { "psg.all.a", "psg.all.b" } };
                for (int which = 0; which < 2; which++) {
                        bool in_set = which == 0;
                        if (in_set && rank % 2)
                                continue;
                        for (int i = 0; i < 2; i++) {
                                for (int j = 0; j < 4; j++)
                                        x[i][j] = (float) (rank + i * 10 + j);
                                q[i] = (hvd_request_t) HVD_REQUEST_INIT;
                                q[i].name = nm[which][i];
                                q[i].input = x[i];
                                q[i].output = y[i];
                                q[i].ndim = 1;
                                q[i].shape = s4;
                                q[i].reduce_op = HVD_REDUCE_SUM;
                                q[i].process_set = in_set ? id_e : 0;
                        }
                        hvd_handle_t *h = NULL;
                        MUST(hvd_grouped_allreduce_async(q, 2, &h));
                        int r = wait_h(h, nm[which][0]);
                        CHECK(r == 0, "round %d: grouped allreduce %s: %s: %s", round,
                              in_set ? "in the even set" : "of the whole job", errname(r), hvd_handle_error(h));
                        int n = in_set ? ne : size, sum_r = 0;
                        for (int k = 0; k < n; k++)
                                sum_r += in_set ? even[k] : k;
                        for (int i = 0; i < 2 && r == 0; i++)
                                for (int j = 0; j < 4; j++)
                                        CHECK(y[i][j] == (float) (sum_r + n * (i * 10 + j)), "%s[%d] = %g",
                                              nm[which][i], j, y[i][j]);
                        hvd_handle_release(&h);
                }
        }
        MUST(hvd_remove_process_set(id_e));
}

void scenario_process_sets_same_name(void) {
        /* two disjoint sets both reducing a tensor called "ps.grad" at the
         * same time, as two data-parallel groups of one job would */
        if (size < 2) {
                printf("rank %d: SKIP [process-sets-same-name] needs at least 2 ranks\n", rank);
                return;
        }
        int even[64], odd[64];
        int ne = set_of(0, even), no = set_of(1, odd);
        int id_e = hvd_add_process_set(even, (size_t) ne);
        MUST(id_e);
        int id_o = hvd_add_process_set(odd, (size_t) no);
        MUST(id_o);
        bool is_even = rank % 2 == 0;
        for (int round = 0; round < 3; round++)
                ps_allreduce(is_even ? id_e : id_o, "ps.grad", is_even ? even : odd, is_even ? ne : no, (float) round);
        MUST(hvd_remove_process_set(id_o));
        MUST(hvd_remove_process_set(id_e));
}
