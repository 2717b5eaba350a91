/* check_fastpath.c — unit tests of the fast path's readiness board
 * (client/fastpath.c), with several ranks' views of one board in one
 * process: a record holds only ids every rank posted, ascending, and every
 * rank runs the same records in the same order, whoever appended them; schedule markers sit in the
 * same log and wait for their schedule; a bit that waits too long is
 * withdrawn, and the others then send that instance to the coordinator too;
 * a joining rank keeps everyone off the board; fast_only stops at markers;
 * in node mode local rank 0 posts some schedules inline, and every rank
 * still takes every schedule in seq order, whichever way it came; a job of
 * one rank has a board of its own; a group's members are posted, appended
 * and withdrawn together, or not at all. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastpath.h"

#define N    3
#define MS   UINT64_C(1000)
#define RECS 320 /* more than the board's log holds */

typedef struct log {
        int n;
        bool slow[RECS];
        uint64_t seq[RECS];
        uint32_t ids[RECS][64];
        uint32_t n_ids[RECS];
        uint32_t demoted[HVD_FASTPATH_MAX_GROUP];
        int n_demoted;
        int appender[RECS];
        uint8_t bytes[RECS][HVD_FASTPATH_INLINE_BYTES];
        size_t n_bytes[RECS];
} log_t;

static void *board;
static hvd_fastpath_t *fp[N];
static log_t logs[N];
static _Atomic uint32_t aborted;

static int run(void *u, const hvd_fastpath_record_t *rec) {
        log_t *l = u;
        ck_assert_int_lt(l->n, RECS);
        l->slow[l->n] = rec->slow;
        l->seq[l->n] = rec->seq;
        l->n_ids[l->n] = rec->n;
        memcpy(l->ids[l->n], rec->ids, rec->n * sizeof *rec->ids);
        l->appender[l->n] = rec->appender;
        l->n_bytes[l->n] = rec->n_bytes;
        if (rec->n_bytes)
                memcpy(l->bytes[l->n], rec->bytes, rec->n_bytes);
        l->n++;
        return 0;
}

static void demote(void *u, uint32_t id) {
        log_t *l = u;
        l->demoted[l->n_demoted++] = id;
}

static const hvd_fastpath_ops_t ops = { .run = run, .demote = demote };

static void setup(void) {
        size_t bytes = hvd_fastpath_board_bytes(N);
        ck_assert_int_eq(bytes % 4096, 0);
        board = aligned_alloc(4096, bytes);
        ck_assert_ptr_nonnull(board);
        memset(board, 0, bytes);
        memset(logs, 0, sizeof logs);
        for (int r = 0; r < N; r++)
                ck_assert_int_eq(hvd_fastpath_new(board, r, N, &aborted, &fp[r]), 0);
}

static void teardown(void) {
        for (int r = 0; r < N; r++) {
                hvd_fastpath_destroy(&fp[r]);
                ck_assert_ptr_null(fp[r]);
        }
        hvd_fastpath_destroy(NULL);
        free(board);
}

static void post(int r, uint32_t id, uint64_t now) {
        hvd_fastpath_instance(fp[r], id);
        ck_assert_int_eq(hvd_fastpath_post(fp[r], id, now), 0);
}

static void step(int r, uint64_t now) {
        ck_assert_int_eq(hvd_fastpath_step(fp[r], now, false, &ops, &logs[r]), 0);
}

START_TEST(test_fastpath_record_needs_every_rank) {
        /* the ranks post in different orders; nothing runs until the last */
        post(0, 130, 0);
        post(0, 5, 0);
        post(0, 1, 0);
        post(1, 1, 0);
        post(1, 130, 0);
        post(1, 5, 0);
        step(0, 1);
        step(1, 1);
        ck_assert_int_eq(logs[0].n + logs[1].n, 0);
        ck_assert(hvd_fastpath_busy(fp[0]));
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 3);
        post(2, 5, 0);
        post(2, 130, 0);
        step(2, 1);
        /* 5 and 130 are ready everywhere: one record; 1 waits for rank 2 */
        ck_assert_int_eq(logs[2].n, 1);
        ck_assert_int_eq(logs[2].n_ids[0], 2);
        ck_assert(hvd_fastpath_busy(fp[0]));
        post(2, 1, 0);
        for (int r = N - 1; r >= 0; r--)
                step(r, 2);
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, 2);
                ck_assert(!logs[r].slow[0] && !logs[r].slow[1]);
                ck_assert_int_eq(logs[r].n_ids[0], 2);
                ck_assert_uint_eq(logs[r].ids[0][0], 5);
                ck_assert_uint_eq(logs[r].ids[0][1], 130);
                ck_assert_int_eq(logs[r].n_ids[1], 1);
                ck_assert_uint_eq(logs[r].ids[1][0], 1);
                ck_assert(!hvd_fastpath_busy(fp[r]));
                ck_assert_int_eq(hvd_fastpath_pending(fp[r]), 0);
        }
        /* the same ids again: a second record, same on every rank */
        for (int r = 0; r < N; r++)
                post(r, 5, 10);
        for (int r = 0; r < N; r++)
                step(r, 11);
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, 3);
                ck_assert_int_eq(logs[r].n_ids[2], 1);
                ck_assert_uint_eq(logs[r].ids[2][0], 5);
        }
}
END_TEST

START_TEST(test_fastpath_markers_share_the_order) {
        /* rank 0 receives schedule 1 first; fast id 9 is published after its
         * marker; rank 2 meets the marker before its schedule and waits */
        hvd_fastpath_schedule_arrived(fp[0], 1);
        step(0, 0);
        ck_assert_int_eq(logs[0].n, 1);
        ck_assert(logs[0].slow[0]);
        ck_assert_uint_eq(logs[0].seq[0], 1);
        for (int r = 0; r < N; r++)
                post(r, 9, 0);
        step(0, 1);
        hvd_fastpath_schedule_arrived(fp[1], 1);
        step(1, 1);
        step(2, 1);
        ck_assert_int_eq(logs[2].n, 0);
        ck_assert(hvd_fastpath_awaits_schedule(fp[2]));
        ck_assert(hvd_fastpath_busy(fp[2]));
        /* its schedule arrives: the marker, then the record */
        hvd_fastpath_schedule_arrived(fp[2], 1);
        step(2, 2);
        ck_assert(!hvd_fastpath_awaits_schedule(fp[2]));
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, 2);
                ck_assert(logs[r].slow[0]);
                ck_assert_uint_eq(logs[r].seq[0], 1);
                ck_assert(!logs[r].slow[1]);
                ck_assert_uint_eq(logs[r].ids[1][0], 9);
        }
}
END_TEST

START_TEST(test_fastpath_node_mode_inline) {
        /* schedule 1 comes to every rank, 2 to rank 0 alone (inline), 3 to
         * every rank; rank 2 has not yet received 3 */
        const char body[] = "schedule two, packed";
        for (int r = 0; r < N; r++)
                ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[r], 1), 0);
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[1], 3), 0);
        /* rank 1 appends 1, but not 3: it lacks 2 */
        step(1, 0);
        ck_assert_int_eq(logs[1].n, 1);
        ck_assert(logs[1].slow[0]);
        ck_assert_uint_eq(logs[1].seq[0], 1);
        ck_assert_uint_eq(logs[1].n_bytes[0], 0);
        ck_assert(hvd_fastpath_busy(fp[1])); /* 3 arrived, not run */
        /* rank 0: 2 inline, then 3 */
        ck_assert_int_eq(hvd_fastpath_schedule_inline(fp[0], 2, body, sizeof body), 0);
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[0], 2), 0); /* the same one, held: no second record */
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[0], 3), 0);
        ck_assert_int_eq(hvd_fastpath_schedule_inline(fp[0], 4, body, HVD_FASTPATH_INLINE_BYTES + 1), -EINVAL);
        step(0, 1);
        step(1, 1);
        step(2, 1);
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, r == 2 ? 2 : 3);
                for (int k = 0; k < logs[r].n; k++) {
                        ck_assert(logs[r].slow[k]);
                        ck_assert_uint_eq(logs[r].seq[k], (uint64_t) k + 1);
                        ck_assert_int_eq(logs[r].appender[k], -1);
                }
                ck_assert_uint_eq(logs[r].n_bytes[1], sizeof body);
                ck_assert_mem_eq(logs[r].bytes[1], body, sizeof body);
        }
        /* rank 2 waits at 3's marker until 3 reaches it */
        ck_assert(hvd_fastpath_awaits_schedule(fp[2]));
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[2], 3), 0);
        step(2, 2);
        ck_assert_int_eq(logs[2].n, 3);
        ck_assert_uint_eq(logs[2].n_bytes[2], 0);
        /* a fast record names the rank that appended it */
        for (int r = 0; r < N; r++)
                post(r, 7, 3);
        step(1, 4);
        step(0, 4);
        step(2, 4);
        for (int r = 0; r < N; r++) {
                ck_assert(!logs[r].slow[logs[r].n - 1]);
                ck_assert_int_eq(logs[r].appender[logs[r].n - 1], 1);
        }
}
END_TEST

START_TEST(test_fastpath_node_mode_late_copy) {
        /* local rank 0 took schedule 1 for the board and left without
         * posting it; 2 came to every rank; the daemon then sends 1 again:
         * rank 1 gets 2 before 1, and appends both, in seq order */
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[1], 2), 0);
        step(1, 0);
        ck_assert_int_eq(logs[1].n, 0); /* 1 is missing */
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[1], 1), 0);
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[1], 1), 0); /* a duplicate: one record */
        step(1, 1);
        ck_assert_int_eq(logs[1].n, 2);
        ck_assert_uint_eq(logs[1].seq[0], 1);
        ck_assert_uint_eq(logs[1].seq[1], 2);
        ck_assert_uint_eq(hvd_fastpath_ran_seq(fp[1]), 2);
        /* a copy of one that ran: nothing more */
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[1], 1), 0);
        step(1, 2);
        ck_assert_int_eq(logs[1].n, 2);
        ck_assert(!hvd_fastpath_busy(fp[1]));
        /* rank 2 got only 2: it waits at 1's marker, which came to rank 1 */
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(fp[2], 2), 0);
        step(2, 3);
        ck_assert_int_eq(logs[2].n, 0);
        ck_assert(hvd_fastpath_awaits_schedule(fp[2]));
}
END_TEST

START_TEST(test_fastpath_fast_only_stops_at_markers) {
        hvd_fastpath_schedule_arrived(fp[0], 1);
        ck_assert_int_eq(hvd_fastpath_step(fp[0], 0, true, &ops, &logs[0]), 0);
        ck_assert_int_eq(logs[0].n, 0);
        ck_assert(hvd_fastpath_awaits_schedule(fp[0]));
        step(0, 1);
        ck_assert_int_eq(logs[0].n, 1);
        ck_assert(logs[0].slow[0]);
}
END_TEST

START_TEST(test_fastpath_demotion) {
        post(0, 7, 0);
        post(1, 7, 50 * MS);
        step(0, 100 * MS);
        step(1, 100 * MS);
        ck_assert_int_eq(logs[0].n_demoted + logs[1].n_demoted, 0);
        /* rank 0's bit waited its time: withdrawn, and rank 1's follows at
         * once (the same instance goes to the coordinator) */
        step(0, HVD_FASTPATH_DEMOTE_USEC + 1);
        ck_assert_int_eq(logs[0].n_demoted, 1);
        ck_assert_uint_eq(logs[0].demoted[0], 7);
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 0);
        step(1, HVD_FASTPATH_DEMOTE_USEC + 2);
        ck_assert_int_eq(logs[1].n_demoted, 1);
        /* rank 2 comes late with that instance: not on the board */
        hvd_fastpath_instance(fp[2], 7);
        ck_assert_int_eq(hvd_fastpath_post(fp[2], 7, HVD_FASTPATH_DEMOTE_USEC + 3), -EAGAIN);
        for (int r = 0; r < N; r++)
                ck_assert_int_eq(logs[r].n, 0);
        /* the next instance takes the fast path again */
        for (int r = 0; r < N; r++)
                post(r, 7, 1000 * MS);
        for (int r = 0; r < N; r++)
                step(r, 1000 * MS);
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, 1);
                ck_assert_uint_eq(logs[r].ids[0][0], 7);
        }
}
END_TEST

START_TEST(test_fastpath_forgo) {
        /* rank 1 sends its instance to the coordinator (parameters changed):
         * rank 0's bit is withdrawn without waiting */
        post(0, 3, 0);
        hvd_fastpath_instance(fp[1], 3);
        hvd_fastpath_forgo(fp[1], 3);
        step(0, 1);
        ck_assert_int_eq(logs[0].n_demoted, 1);
        ck_assert_uint_eq(logs[0].demoted[0], 3);
}
END_TEST

START_TEST(test_fastpath_joining) {
        hvd_fastpath_set_joining(fp[1], true);
        hvd_fastpath_instance(fp[0], 4);
        ck_assert_int_eq(hvd_fastpath_post(fp[0], 4, 0), -EAGAIN);
        hvd_fastpath_set_joining(fp[1], false);
        post(0, 4, 0);
        /* a rank starts joining while a bit waits: withdrawn */
        hvd_fastpath_set_joining(fp[2], true);
        step(0, 1);
        ck_assert_int_eq(logs[0].n_demoted, 1);
        hvd_fastpath_set_joining(fp[2], false);
}
END_TEST

START_TEST(test_fastpath_records_before_markers) {
        /* id 6 is ready everywhere when the schedule's marker is appended
         * (every rank posted it before sending what the schedule answers,
         * e.g. a tensor, then a barrier): its record comes first */
        for (int r = 0; r < N; r++)
                hvd_fastpath_instance(fp[r], 6);
        for (int r = 0; r < N; r++)
                ck_assert_int_eq(hvd_fastpath_post(fp[r], 6, 0), 0);
        for (int r = 0; r < N; r++)
                hvd_fastpath_schedule_arrived(fp[r], 1);
        for (int r = 0; r < N; r++)
                step(r, 1);
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, 2);
                ck_assert(!logs[r].slow[0]);
                ck_assert_uint_eq(logs[r].ids[0][0], 6);
                ck_assert(logs[r].slow[1]);
                ck_assert_uint_eq(logs[r].seq[1], 1);
        }
}
END_TEST

START_TEST(test_fastpath_busy_until_schedule_runs) {
        /* a schedule arrives while another rank holds the board's lock (it
         * was preempted while appending): the step cannot append its marker;
         * the rank must stay busy (step again) rather than sleep until a
         * message that will never come */
        hvd_fastpath_schedule_arrived(fp[0], 1);
        atomic_store((_Atomic uint32_t *) board, 1u);
        step(0, 1);
        ck_assert_int_eq(logs[0].n, 0);
        ck_assert(hvd_fastpath_busy(fp[0]));
        atomic_store((_Atomic uint32_t *) board, 0u);
        step(0, 2);
        ck_assert_int_eq(logs[0].n, 1);
        ck_assert(logs[0].slow[0]);
        ck_assert(!hvd_fastpath_busy(fp[0]));
        /* the same when another rank appended the marker meanwhile: busy
         * until the marker is run here */
        hvd_fastpath_schedule_arrived(fp[1], 2);
        hvd_fastpath_schedule_arrived(fp[0], 2);
        step(1, 3);
        ck_assert(hvd_fastpath_busy(fp[0]));
        step(0, 3);
        ck_assert_int_eq(logs[0].n, 2);
        ck_assert(!hvd_fastpath_busy(fp[0]));
}
END_TEST

START_TEST(test_fastpath_demote_due) {
        /* a thread stepping with fast_only withdraws nothing: demote_due
         * tells it when the withdrawing thread must take a turn */
        ck_assert(!hvd_fastpath_demote_due(fp[0], 0));
        post(0, 3, 0);
        post(1, 3, 0);
        ck_assert(!hvd_fastpath_demote_due(fp[0], 1));
        ck_assert(hvd_fastpath_demote_due(fp[0], HVD_FASTPATH_DEMOTE_USEC));
        /* rank 1 withdraws its bit: rank 0's is due at once */
        step(1, HVD_FASTPATH_DEMOTE_USEC);
        ck_assert_int_eq(logs[1].n_demoted, 1);
        ck_assert(hvd_fastpath_demote_due(fp[0], 2));
        ck_assert_int_eq(hvd_fastpath_step(fp[0], 2, true, &ops, &logs[0]), 0);
        ck_assert_int_eq(logs[0].n_demoted, 0);
        ck_assert(hvd_fastpath_demote_due(fp[0], 2));
        step(0, 2);
        ck_assert_int_eq(logs[0].n_demoted, 1);
        ck_assert(!hvd_fastpath_demote_due(fp[0], 3));
}
END_TEST

START_TEST(test_fastpath_demote_due_after_runs) {
        /* a bit that has run no longer sets when the next is due: with the
         * bit posted at 0 run, one posted at 150 ms is not due at 250 ms
         * (else a thread told "due" wakes the withdrawing one on every
         * operation from 200 ms on) */
        for (int r = 0; r < N; r++)
                post(r, 3, 0);
        step(0, 1);
        ck_assert_int_eq(logs[0].n, 1);
        post(0, 3, 150 * MS);
        ck_assert(!hvd_fastpath_demote_due(fp[0], 250 * MS));
        ck_assert(hvd_fastpath_demote_due(fp[0], 150 * MS + HVD_FASTPATH_DEMOTE_USEC));
        /* the same while another bit stays on the board: 4, posted at
         * 160 ms, waits on; 3, the oldest, runs */
        post(0, 4, 160 * MS);
        step(1, 165 * MS);
        step(2, 165 * MS);
        post(1, 3, 170 * MS);
        post(2, 3, 170 * MS);
        ck_assert_int_eq(hvd_fastpath_step(fp[0], 180 * MS, true, &ops, &logs[0]), 0);
        ck_assert_int_eq(logs[0].n, 2);
        ck_assert(!hvd_fastpath_demote_due(fp[0], 155 * MS + HVD_FASTPATH_DEMOTE_USEC));
        ck_assert(hvd_fastpath_demote_due(fp[0], 160 * MS + HVD_FASTPATH_DEMOTE_USEC));
        /* once nothing of this rank waits, a withdrawal elsewhere is no
         * news to it: its next bit is not due at once */
        post(1, 4, 400 * MS);
        post(2, 4, 400 * MS);
        ck_assert_int_eq(hvd_fastpath_step(fp[0], 410 * MS, true, &ops, &logs[0]), 0);
        ck_assert_int_eq(logs[0].n, 3);
        ck_assert_int_eq(logs[0].n_demoted, 0);
        post(1, 5, 420 * MS);
        step(1, 420 * MS + HVD_FASTPATH_DEMOTE_USEC);
        ck_assert_int_eq(logs[1].n_demoted, 1);
        post(0, 6, 430 * MS + HVD_FASTPATH_DEMOTE_USEC);
        ck_assert(!hvd_fastpath_demote_due(fp[0], 440 * MS + HVD_FASTPATH_DEMOTE_USEC));
        /* while one withdrawn after its post still is */
        post(0, 7, 450 * MS + HVD_FASTPATH_DEMOTE_USEC);
        post(2, 7, 450 * MS + HVD_FASTPATH_DEMOTE_USEC);
        step(2, 450 * MS + 2 * HVD_FASTPATH_DEMOTE_USEC);
        ck_assert_int_eq(logs[2].n_demoted, 1);
        ck_assert(hvd_fastpath_demote_due(fp[0], 460 * MS + HVD_FASTPATH_DEMOTE_USEC));
}
END_TEST

START_TEST(test_fastpath_limits) {
        hvd_fastpath_t *x = NULL;
        ck_assert_int_eq(hvd_fastpath_new(NULL, 0, 2, NULL, &x), -EINVAL);
        ck_assert_int_eq(hvd_fastpath_new(board, 0, 0, NULL, &x), -EINVAL);
        ck_assert_int_eq(hvd_fastpath_new(board, 1, 1, NULL, &x), -EINVAL);
        ck_assert_int_eq(hvd_fastpath_new(board, 3, 3, NULL, &x), -EINVAL);
        ck_assert_ptr_null(x);
        /* ids beyond the board never take the fast path */
        ck_assert_int_eq(hvd_fastpath_post(fp[0], HVD_FASTPATH_MAX_IDS, 0), -EAGAIN);
        /* a bit already posted is not posted twice */
        post(0, 2, 0);
        ck_assert_int_eq(hvd_fastpath_post(fp[0], 2, 0), -EAGAIN);
        /* many ids: records of at most their capacity, all ids once, in order */
        for (uint32_t id = 100; id < 300; id++)
                for (int r = 0; r < N; r++)
                        post(r, id, 0);
        for (int r = 1; r < N; r++)
                post(r, 2, 0);
        for (int r = 0; r < N; r++)
                step(r, 1);
        for (int r = 0; r < N; r++) {
                uint32_t want = 2, seen = 0;
                for (int k = 0; k < logs[r].n; k++)
                        for (uint32_t i = 0; i < logs[r].n_ids[k]; i++) {
                                ck_assert_uint_eq(logs[r].ids[k][i], want);
                                want = want == 2 ? 100 : want + 1;
                                seen++;
                        }
                ck_assert_uint_eq(seen, 201);
                ck_assert_int_eq(logs[r].n, logs[0].n);
        }
}
END_TEST

static void post_group(int r, const uint32_t *ids, size_t n, uint64_t now) {
        for (size_t i = 0; i < n; i++)
                hvd_fastpath_instance(fp[r], ids[i]);
        ck_assert_int_eq(hvd_fastpath_post_group(fp[r], ids, n, now), 0);
}

/* Whether rank r's log holds exactly the ids want (in any records). */
static void ck_ran(int r, const uint32_t *want, size_t n) {
        size_t seen = 0;
        for (int k = 0; k < logs[r].n; k++)
                for (uint32_t i = 0; i < logs[r].n_ids[k]; i++) {
                        bool found = false;
                        for (size_t j = 0; j < n; j++)
                                found = found || logs[r].ids[k][i] == want[j];
                        ck_assert_msg(found, "rank %d ran id %u", r, logs[r].ids[k][i]);
                        seen++;
                }
        ck_assert_uint_eq(seen, n);
}

START_TEST(test_fastpath_group) {
        /* members in two words of the rows: one record once every rank posted */
        const uint32_t g[3] = { 70, 3, 200 };
        post_group(0, g, 3, 0);
        post_group(1, g, 3, 0);
        step(0, 1);
        step(1, 1);
        ck_assert_int_eq(logs[0].n + logs[1].n, 0);
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 3);
        post_group(2, g, 3, 0);
        for (int r = 0; r < N; r++)
                step(r, 2);
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, 1);
                ck_ran(r, g, 3);
                ck_assert_int_eq(hvd_fastpath_pending(fp[r]), 0);
        }
        /* all or nothing: with one member's bit still set, nothing is posted */
        post(0, 200, 10);
        const uint32_t h[2] = { 5, 200 };
        hvd_fastpath_instance(fp[0], 5);
        ck_assert_int_eq(hvd_fastpath_post_group(fp[0], h, 2, 10), -EAGAIN);
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 1);
        /* and a group names each id once, within the size limit */
        const uint32_t dup[2] = { 6, 6 };
        ck_assert_int_eq(hvd_fastpath_post_group(fp[1], dup, 2, 10), -EAGAIN);
        ck_assert_int_eq(hvd_fastpath_post_group(fp[1], g, 0, 10), -EAGAIN);
        ck_assert_int_eq(hvd_fastpath_post_group(fp[1], g, HVD_FASTPATH_MAX_GROUP + 1, 10), -EAGAIN);
        ck_assert_int_eq(hvd_fastpath_pending(fp[1]), 0);
}
END_TEST

START_TEST(test_fastpath_group_withdrawn_whole) {
        /* rank 0's group times out: all its members are withdrawn at once,
         * beside a single id of its own that has not */
        const uint32_t g[2] = { 8, 77 };
        post_group(0, g, 2, 0);
        post(0, 9, 100 * MS);
        post_group(1, g, 2, 50 * MS);
        step(0, HVD_FASTPATH_DEMOTE_USEC + 1);
        ck_assert_int_eq(logs[0].n_demoted, 2);
        ck_assert_uint_eq(logs[0].demoted[0], 8);
        ck_assert_uint_eq(logs[0].demoted[1], 77);
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 1);
        /* rank 1 hears of it for both members */
        step(1, HVD_FASTPATH_DEMOTE_USEC + 2);
        ck_assert_int_eq(logs[1].n_demoted, 2);
        /* rank 2 comes late with the group: none of it goes on the board */
        for (int i = 0; i < 2; i++)
                hvd_fastpath_instance(fp[2], g[i]);
        ck_assert_int_eq(hvd_fastpath_post_group(fp[2], g, 2, HVD_FASTPATH_DEMOTE_USEC + 3), -EAGAIN);
        ck_assert_int_eq(hvd_fastpath_pending(fp[2]), 0);
        for (int r = 0; r < N; r++)
                ck_assert_int_eq(logs[r].n, 0);
        /* another rank forgoes one member of the next instance: rank 0
         * withdraws the whole group at once (with id 9, timed out by now) */
        post_group(0, g, 2, 1000 * MS);
        hvd_fastpath_instance(fp[1], 77);
        hvd_fastpath_forgo(fp[1], 77);
        step(0, 1000 * MS + 1);
        ck_assert_int_eq(logs[0].n_demoted, 5);
        uint32_t got = 0;
        for (int i = 2; i < 5; i++)
                got |= logs[0].demoted[i] == 8 ? 1u : logs[0].demoted[i] == 77 ? 2u : logs[0].demoted[i] == 9 ? 4u : 8u;
        ck_assert_uint_eq(got, 7);
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 0);
}
END_TEST

START_TEST(test_fastpath_group_waits_for_room) {
        /* rank 2 runs nothing: the log fills up to one free record */
        for (uint32_t i = 0; i < 255; i++) {
                for (int r = 0; r < N; r++)
                        post(r, 7000 + i, 0); /* above the group's ids */
                step(0, 1);
        }
        ck_assert_int_eq(logs[0].n, 255);
        /* a group of HVD_FASTPATH_MAX_GROUP and one more id need several
         * records: none is appended while one is free */
        uint32_t g[HVD_FASTPATH_MAX_GROUP + 1];
        for (uint32_t i = 0; i <= HVD_FASTPATH_MAX_GROUP; i++)
                g[i] = 2 * i;
        for (int r = 0; r < N; r++) {
                post_group(r, g, HVD_FASTPATH_MAX_GROUP, 2);
                post(r, g[HVD_FASTPATH_MAX_GROUP], 2);
        }
        step(0, 3);
        step(1, 3);
        ck_assert_int_eq(logs[0].n, 255);
        ck_assert_int_eq(logs[1].n, 255);
        /* rank 2 catches up; its next step appends all the records, with
         * every member */
        const int recs = (HVD_FASTPATH_MAX_GROUP + 1 + HVD_FASTPATH_RECORD_IDS - 1) / HVD_FASTPATH_RECORD_IDS;
        ck_assert_int_gt(recs, 1);
        step(2, 4);
        ck_assert_int_eq(logs[2].n, 255);
        step(2, 5);
        step(0, 5);
        for (int r = 0; r < N; r += 2) {
                ck_assert_int_eq(logs[r].n, 255 + recs);
                uint32_t seen = 0;
                for (int k = 255; k < 255 + recs; k++) {
                        ck_assert(!logs[r].slow[k]);
                        seen += logs[r].n_ids[k];
                }
                ck_assert_uint_eq(seen, HVD_FASTPATH_MAX_GROUP + 1);
        }
}
END_TEST

START_TEST(test_fastpath_largest_group) {
        /* a whole model's gradients in one group: HVD_FASTPATH_MAX_GROUP ids,
         * spread over the words of the rows */
        static uint32_t g[HVD_FASTPATH_MAX_GROUP];
        for (uint32_t i = 0; i < HVD_FASTPATH_MAX_GROUP; i++)
                g[i] = 3 * i + 1;
        /* an id named twice, here the last: refused, and nothing of it is
         * left behind (the same ids as a group are taken next) */
        uint32_t last = g[HVD_FASTPATH_MAX_GROUP - 1];
        g[HVD_FASTPATH_MAX_GROUP - 1] = g[0];
        ck_assert_int_eq(hvd_fastpath_post_group(fp[0], g, HVD_FASTPATH_MAX_GROUP, 0), -EAGAIN);
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 0);
        g[HVD_FASTPATH_MAX_GROUP - 1] = last;
        /* every rank posts it: it runs whole from the board, in records of
         * the log one after another, the same on every rank */
        for (int r = 0; r < N; r++)
                post_group(r, g, HVD_FASTPATH_MAX_GROUP, 0);
        for (int r = 0; r < N; r++)
                step(r, 1);
        const int recs = (HVD_FASTPATH_MAX_GROUP + HVD_FASTPATH_RECORD_IDS - 1) / HVD_FASTPATH_RECORD_IDS;
        for (int r = 0; r < N; r++) {
                ck_assert_int_eq(logs[r].n, recs);
                ck_assert_int_eq(hvd_fastpath_pending(fp[r]), 0);
                uint32_t k = 0;
                for (int j = 0; j < recs; j++) {
                        ck_assert(!logs[r].slow[j]);
                        ck_assert_mem_eq(logs[r].ids[j], logs[0].ids[j], logs[r].n_ids[j] * sizeof(uint32_t));
                        for (uint32_t q = 0; q < logs[r].n_ids[j]; q++)
                                ck_assert_uint_eq(logs[r].ids[j][q], g[k++]);
                }
                ck_assert_uint_eq(k, HVD_FASTPATH_MAX_GROUP);
        }
        /* the next instance: rank 2 never comes; rank 0's times out and is
         * withdrawn whole in one step, and rank 1 hears of every member */
        post_group(0, g, HVD_FASTPATH_MAX_GROUP, 10);
        post_group(1, g, HVD_FASTPATH_MAX_GROUP, 20);
        step(0, 10 + HVD_FASTPATH_DEMOTE_USEC);
        ck_assert_int_eq(logs[0].n_demoted, HVD_FASTPATH_MAX_GROUP);
        ck_assert_int_eq(hvd_fastpath_pending(fp[0]), 0);
        step(1, 11 + HVD_FASTPATH_DEMOTE_USEC);
        ck_assert_int_eq(logs[1].n_demoted, HVD_FASTPATH_MAX_GROUP);
        ck_assert_int_eq(hvd_fastpath_pending(fp[1]), 0);
        for (int r = 0; r < N; r++)
                ck_assert_int_eq(logs[r].n, recs);
}
END_TEST

/* A job of one rank: its own board, where a post is a record at the next
 * step and a schedule's marker still waits for its schedule. */
START_TEST(test_fastpath_one_rank) {
        size_t bytes = hvd_fastpath_board_bytes(1);
        void *own = aligned_alloc(4096, bytes);
        ck_assert_ptr_nonnull(own);
        memset(own, 0, bytes);
        hvd_fastpath_t *one = NULL;
        ck_assert_int_eq(hvd_fastpath_new(own, 0, 1, &aborted, &one), 0);
        log_t l = { 0 };
        hvd_fastpath_instance(one, 5);
        ck_assert_int_eq(hvd_fastpath_post(one, 5, 0), 0);
        hvd_fastpath_instance(one, 9);
        ck_assert_int_eq(hvd_fastpath_post(one, 9, 0), 0);
        ck_assert(hvd_fastpath_busy(one));
        ck_assert_int_eq(hvd_fastpath_step(one, 1, false, &ops, &l), 0);
        ck_assert_int_eq(l.n, 1);
        ck_assert(!l.slow[0]);
        ck_assert_uint_eq(l.n_ids[0], 2);
        ck_assert_uint_eq(l.ids[0][0], 5);
        ck_assert_uint_eq(l.ids[0][1], 9);
        ck_assert_int_eq(l.appender[0], 0);
        ck_assert_uint_eq(hvd_fastpath_pending(one), 0);
        ck_assert(!hvd_fastpath_busy(one));
        /* the next instance of the same id is a record of its own */
        hvd_fastpath_instance(one, 5);
        ck_assert_int_eq(hvd_fastpath_post(one, 5, 2), 0);
        ck_assert_int_eq(hvd_fastpath_schedule_arrived(one, 1), 0);
        ck_assert_int_eq(hvd_fastpath_step(one, 3, false, &ops, &l), 0);
        ck_assert_int_eq(l.n, 3);
        ck_assert(!l.slow[1]);
        ck_assert_uint_eq(l.ids[1][0], 5);
        ck_assert(l.slow[2]);
        ck_assert_uint_eq(l.seq[2], 1);
        ck_assert_uint_eq(hvd_fastpath_ran_seq(one), 1);
        ck_assert_int_eq(l.n_demoted, 0);
        hvd_fastpath_destroy(&one);
        free(own);
}
END_TEST

static Suite *fastpath_suite(void) {
        Suite *s = suite_create("fastpath");
        TCase *tc = tcase_create("board");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_fastpath_record_needs_every_rank);
        tcase_add_test(tc, test_fastpath_markers_share_the_order);
        tcase_add_test(tc, test_fastpath_fast_only_stops_at_markers);
        tcase_add_test(tc, test_fastpath_demotion);
        tcase_add_test(tc, test_fastpath_forgo);
        tcase_add_test(tc, test_fastpath_joining);
        tcase_add_test(tc, test_fastpath_records_before_markers);
        tcase_add_test(tc, test_fastpath_busy_until_schedule_runs);
        tcase_add_test(tc, test_fastpath_demote_due);
        tcase_add_test(tc, test_fastpath_demote_due_after_runs);
        tcase_add_test(tc, test_fastpath_limits);
        tcase_add_test(tc, test_fastpath_group);
        tcase_add_test(tc, test_fastpath_group_withdrawn_whole);
        tcase_add_test(tc, test_fastpath_group_waits_for_room);
        tcase_add_test(tc, test_fastpath_largest_group);
        tcase_add_test(tc, test_fastpath_one_rank);
        tcase_add_test(tc, test_fastpath_node_mode_inline);
        tcase_add_test(tc, test_fastpath_node_mode_late_copy);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(fastpath_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
