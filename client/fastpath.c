/* fastpath.c — the readiness board of one node's job (see fastpath.h).
 *
 * Invariants:
 * - Order: the log (records appended under the lock, numbered by `head`)
 *   is the one order every local rank executes: fast records and the
 *   coordinator's schedules alike. A fast record holds only ids whose bit
 *   was set in every row when it was appended, and appending clears those
 *   bits in every row at once, so a tensor instance is in exactly one
 *   record. A schedule's marker is appended once (last_slow counts them),
 *   in seq order; a rank that meets a marker before the schedule reached
 *   it waits for it, and runs nothing after it meanwhile.
 * - A rank withdraws ("demotes") only its own bit, under the lock, and only
 *   while it is still set: a tensor is either in a record or sent to the
 *   coordinator, never both. A record never waits for a demoted tensor,
 *   because its bit is no longer set.
 * - Groups: a rank posts a group's bits together and withdraws them
 *   together, and the bits every row holds are appended all at once or not
 *   at all; so in every row a group's bits are all set or all clear, and a
 *   group runs whole from the board or goes whole to the coordinator (whose
 *   groups wait for all their members).
 * - Instances: the n-th submission of a cache id is instance n on every
 *   rank; demoted_inst[id] = n + 1 tells the others that instance n goes to
 *   the coordinator, so they send theirs at once instead of waiting.
 *   (Only a hint for speed: correctness rests on the two rules above.)
 * - Node mode (a job on several hosts): a schedule may come to local rank 0
 *   alone, which appends it inline (its packed bytes in the record); the
 *   others take it from there. So a rank may have received schedules with
 *   gaps: it appends the slow record of a schedule only when it has that
 *   schedule and every earlier one is in the log (`got`, in seq order).
 * - The log is a ring: a record is overwritten only after every rank's
 *   cursor has passed it; when it is full nothing is appended (bits wait,
 *   and are demoted in time if need be). */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fastpath.h"
#include "util.h"

#define WORDS       (HVD_FASTPATH_MAX_IDS / 64)
#define LOG_CAP     256
#define REC_IDS     HVD_FASTPATH_RECORD_IDS
#define LOCK_SPINS  200
#define LOCK_YIELDS 20000

enum { REC_FAST, REC_MARKER, REC_INLINE };

typedef struct rec {
        uint32_t slow, n; /* slow: REC_*; n: ids (fast) or bytes (inline) */
        uint64_t seq;     /* slow: the schedule's; fast: the local rank that appended it */
        uint32_t ids[REC_IDS];
} rec_t;
_Static_assert(sizeof(rec_t) == 256, "record layout");
_Static_assert(HVD_FASTPATH_INLINE_BYTES <= REC_IDS * sizeof(uint32_t), "an inline schedule fits a record");
_Static_assert(HVD_FASTPATH_MAX_GROUP >= REC_IDS, "a withdrawal has room for a record's ids");
_Static_assert(HVD_FASTPATH_MAX_GROUP <= HVD_FASTPATH_MAX_IDS, "a group names each id once");
_Static_assert(HVD_FASTPATH_MAX_IDS <= UINT16_MAX + 1, "links hold ids");

typedef struct row {
        _Alignas(64) _Atomic uint32_t bell; /* bumped to wake this rank */
        _Atomic uint32_t sleeping;          /* threads of this rank in hvd_fastpath_wait */
        _Atomic uint32_t joining;
        _Alignas(64) _Atomic uint64_t cursor; /* records this rank has taken */
        _Alignas(64) uint64_t bits[WORDS];    /* under the lock */
} row_t;

typedef struct board {
        _Alignas(64) _Atomic uint32_t lock;
        _Alignas(64) _Atomic uint64_t head;          /* records appended */
        _Atomic uint32_t demote_gen;                 /* bumped by every demotion */
        uint64_t last_slow;                          /* under the lock: schedule markers appended */
        uint32_t n_words;                            /* under the lock: words in use in the rows */
        uint32_t demoted_inst[HVD_FASTPATH_MAX_IDS]; /* under the lock */
        rec_t log[LOG_CAP];
        row_t rows[];
} board_t;

/* the board's first word is its lock (its unit test holds it from outside) */
_Static_assert(offsetof(board_t, lock) == 0, "board layout");

struct hvd_fastpath {
        board_t *b;
        int me, n;
        const _Atomic uint32_t *aborted;
        int spin_usec;
        const _Atomic uint32_t *spin_gate; /* spin only while it is not 0 (NULL: always) */
        uint64_t mine[WORDS];              /* posted, not yet run or demoted */
        size_t n_mine;
        uint64_t posted_usec[HVD_FASTPATH_MAX_IDS];
        uint32_t inst[HVD_FASTPATH_MAX_IDS];        /* submissions counted */
        uint32_t posted_inst[HVD_FASTPATH_MAX_IDS]; /* instance of the bit posted */
        uint16_t link[HVD_FASTPATH_MAX_IDS];        /* posted: the next id of its group (itself alone) */
        /* no later than the earliest moment one of mine may time out:
         * exact after a post or a withdrawal, early once the bit it was
         * for has run (see hvd_fastpath_demote_due) */
        uint64_t next_timeout_usec;
        uint32_t seen_gen;
        bool was_joining;
        /* schedules received here and not yet run, in seq order, those to
         * post inline with their bytes: a marker runs only once its schedule
         * is among them; those past the log's last slow record are this
         * rank's to append when their turn comes */
        struct got {
                uint64_t seq;
                uint32_t len; /* 0: a marker */
                uint8_t bytes[HVD_FASTPATH_INLINE_BYTES];
        } * got;
        size_t n_got, cap_got;
        uint64_t ran_seq;   /* schedules run here (their markers passed) */
        uint64_t cursor;    /* records run here */
        _Atomic bool stuck; /* the last step stopped at a schedule's marker */
        rec_t cur;
        uint32_t demoted[HVD_FASTPATH_MAX_GROUP]; /* one withdrawal: a whole group fits */
        uint64_t named[WORDS];                    /* hvd_fastpath_post_group's check, left clear */
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
        return syscall(SYS_futex, (uint32_t *) addr, op, val, ts, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
}

static inline row_t *row_of(const hvd_fastpath_t *fp, int r) {
        size_t row_bytes = (sizeof(row_t) + 63) & ~(size_t) 63;
        return (row_t *) ((uint8_t *) fp->b->rows + (size_t) r * row_bytes);
}

size_t hvd_fastpath_board_bytes(int local_size) {
        size_t row_bytes = (sizeof(row_t) + 63) & ~(size_t) 63;
        size_t n = sizeof(board_t) + (size_t) local_size * row_bytes;
        return (n + 4095) & ~(size_t) 4095;
}

int hvd_fastpath_new(void *board, int local_rank, int local_size, const _Atomic uint32_t *aborted,
                     hvd_fastpath_t **ret) {
        if (!board || local_size < 1 || local_rank < 0 || local_rank >= local_size || !ret)
                return -EINVAL;
        hvd_fastpath_t *fp = calloc(1, sizeof *fp);
        if (!fp)
                return -ENOMEM;
        fp->b = board;
        fp->me = local_rank;
        fp->n = local_size;
        fp->aborted = aborted;
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        /* spinning helps only when every rank has a core of its own; where
         * the ranks outnumber the cores a waiter yields to the ones it
         * waits for (as the data plane's barrier does) before it sleeps */
        fp->spin_usec = local_size <= ncpu ? 30 : 0;
        fp->next_timeout_usec = UINT64_MAX;
        fp->cursor = atomic_load(&row_of(fp, local_rank)->cursor);
        *ret = fp;
        return 0;
}

void hvd_fastpath_destroy(hvd_fastpath_t **fpp) {
        if (!fpp || !*fpp)
                return;
        free((*fpp)->got);
        free(*fpp);
        *fpp = NULL;
}

/* Takes the board's lock: spins, then yields; gives up (-EAGAIN) after a
 * while or when the job is aborted, so the caller can look at its socket
 * (a rank that died holding it is the coordinator's to report). */
static int board_lock(hvd_fastpath_t *fp) {
        board_t *b = fp->b;
        for (int i = 0; i < LOCK_SPINS + LOCK_YIELDS; i++) {
                if (atomic_load_explicit(&b->lock, memory_order_relaxed) == 0 &&
                    atomic_exchange_explicit(&b->lock, 1, memory_order_acquire) == 0)
                        return 0;
                if (i < LOCK_SPINS)
                        cpu_relax();
                else {
                        if (fp->aborted && atomic_load_explicit(fp->aborted, memory_order_relaxed))
                                return -ECANCELED;
                        sched_yield();
                }
        }
        return -EAGAIN;
}

static void board_unlock(hvd_fastpath_t *fp) {
        atomic_store_explicit(&fp->b->lock, 0, memory_order_release);
}

static bool any_joining(const hvd_fastpath_t *fp) {
        for (int r = 0; r < fp->n; r++)
                if (atomic_load_explicit(&row_of(fp, r)->joining, memory_order_acquire))
                        return true;
        return false;
}

uint32_t hvd_fastpath_instance(hvd_fastpath_t *fp, uint32_t id) {
        if (!fp || id >= HVD_FASTPATH_MAX_IDS)
                return 0;
        return ++fp->inst[id];
}

int hvd_fastpath_post_group(hvd_fastpath_t *fp, const uint32_t *ids, size_t n, uint64_t now_usec) {
        if (!fp || !ids || n == 0 || n > HVD_FASTPATH_MAX_GROUP)
                return -EAGAIN;
        /* each id once, none of them posted already: one pass, marking
         * each in fp->named and clearing the marks again (a lone id, a
         * cached tensor's every post, has nothing to be named twice with) */
        size_t named = 0;
        while (named < n) {
                uint32_t id = ids[named];
                uint64_t bit = UINT64_C(1) << (id % 64);
                if (id >= HVD_FASTPATH_MAX_IDS || ((fp->mine[id / 64] | fp->named[id / 64]) & bit))
                        break;
                if (n > 1)
                        fp->named[id / 64] |= bit;
                named++;
        }
        for (size_t i = 0; i < named && n > 1; i++)
                fp->named[ids[i] / 64] &= ~(UINT64_C(1) << (ids[i] % 64));
        if (named < n)
                return -EAGAIN;
        int r = board_lock(fp);
        if (r < 0)
                return -EAGAIN;
        row_t *me = row_of(fp, fp->me);
        board_t *b = fp->b;
        bool ok = !any_joining(fp);
        for (size_t i = 0; i < n && ok; i++) {
                uint32_t id = ids[i];
                ok = b->demoted_inst[id] != fp->inst[id] + 1 && !(me->bits[id / 64] & (UINT64_C(1) << (id % 64)));
        }
        if (!ok) {
                board_unlock(fp);
                return -EAGAIN;
        }
        for (size_t i = 0; i < n; i++) {
                uint32_t w = ids[i] / 64;
                me->bits[w] |= UINT64_C(1) << (ids[i] % 64);
                if (w + 1 > b->n_words)
                        b->n_words = w + 1;
        }
        /* with nothing else of mine on the board, the withdrawals made so
         * far are no news: these bits' own were checked above */
        if (!fp->n_mine)
                fp->seen_gen = atomic_load_explicit(&b->demote_gen, memory_order_relaxed);
        board_unlock(fp);
        for (size_t i = 0; i < n; i++) {
                uint32_t id = ids[i];
                fp->mine[id / 64] |= UINT64_C(1) << (id % 64);
                fp->posted_usec[id] = now_usec;
                fp->posted_inst[id] = fp->inst[id];
                fp->link[id] = (uint16_t) (i + 1 < n ? ids[i + 1] : ids[0]);
        }
        fp->n_mine += n;
        if (now_usec + HVD_FASTPATH_DEMOTE_USEC < fp->next_timeout_usec)
                fp->next_timeout_usec = now_usec + HVD_FASTPATH_DEMOTE_USEC;
        return 0;
}

int hvd_fastpath_post(hvd_fastpath_t *fp, uint32_t id, uint64_t now_usec) {
        return hvd_fastpath_post_group(fp, &id, 1, now_usec);
}

void hvd_fastpath_forgo(hvd_fastpath_t *fp, uint32_t id) {
        if (!fp || id >= HVD_FASTPATH_MAX_IDS || board_lock(fp) < 0)
                return;
        board_t *b = fp->b;
        if (b->demoted_inst[id] != fp->inst[id] + 1) {
                b->demoted_inst[id] = fp->inst[id] + 1;
                atomic_fetch_add(&b->demote_gen, 1);
        }
        board_unlock(fp);
}

void hvd_fastpath_set_joining(hvd_fastpath_t *fp, bool joining) {
        if (!fp)
                return;
        atomic_store(&row_of(fp, fp->me)->joining, joining ? 1u : 0u);
}

/* Schedule seq received here (with its bytes when it is to be posted
 * inline), in seq order: a schedule local rank 0 took for the board and
 * left without posting comes again, after later ones (node mode). A copy
 * of one received or run already adds nothing. */
static int got_add(hvd_fastpath_t *fp, uint64_t seq, const void *bytes, size_t len) {
        size_t at = fp->n_got;
        while (at > 0 && fp->got[at - 1].seq > seq)
                at--;
        if (seq <= fp->ran_seq)
                return 0;
        if (at > 0 && fp->got[at - 1].seq == seq) {
                struct got *g = &fp->got[at - 1];
                if (len && !g->len) {
                        memcpy(g->bytes, bytes, len);
                        g->len = (uint32_t) len;
                }
                return 0;
        }
        if (fp->n_got == fp->cap_got) {
                size_t cap = fp->cap_got ? fp->cap_got * 2 : 16;
                struct got *g = realloc(fp->got, cap * sizeof *g);
                if (!g)
                        return -ENOMEM;
                fp->got = g;
                fp->cap_got = cap;
        }
        memmove(fp->got + at + 1, fp->got + at, (fp->n_got - at) * sizeof *fp->got);
        fp->n_got++;
        struct got *g = &fp->got[at];
        g->seq = seq;
        g->len = (uint32_t) len;
        if (len)
                memcpy(g->bytes, bytes, len);
        return 0;
}

static bool got_has(const hvd_fastpath_t *fp, uint64_t seq) {
        for (size_t i = 0; i < fp->n_got && fp->got[i].seq <= seq; i++)
                if (fp->got[i].seq == seq)
                        return true;
        return false;
}

/* schedule seq ran here: it, and any copy of an earlier one, is done */
static void got_ran(hvd_fastpath_t *fp, uint64_t seq) {
        size_t k = 0;
        while (k < fp->n_got && fp->got[k].seq <= seq)
                k++;
        if (k) {
                memmove(fp->got, fp->got + k, (fp->n_got - k) * sizeof *fp->got);
                fp->n_got -= k;
        }
        fp->ran_seq = seq;
}

int hvd_fastpath_schedule_arrived(hvd_fastpath_t *fp, uint64_t seq) {
        return fp ? got_add(fp, seq, NULL, 0) : 0;
}

int hvd_fastpath_schedule_inline(hvd_fastpath_t *fp, uint64_t seq, const void *bytes, size_t len) {
        if (!fp || !len || len > HVD_FASTPATH_INLINE_BYTES)
                return -EINVAL;
        return got_add(fp, seq, bytes, len);
}

/* Free records in the ring after head (lock held). */
static uint64_t log_free(const hvd_fastpath_t *fp, uint64_t head) {
        uint64_t low = head;
        for (int r = 0; r < fp->n; r++) {
                uint64_t c = atomic_load_explicit(&row_of(fp, r)->cursor, memory_order_acquire);
                if (c < low)
                        low = c;
        }
        return LOG_CAP - (head - low);
}

static bool log_room(const hvd_fastpath_t *fp, uint64_t head) {
        return log_free(fp, head) > 0;
}

/* The bits of word w set in every row (lock held). */
static uint64_t every_row(const hvd_fastpath_t *fp, uint32_t w) {
        uint64_t a = row_of(fp, 0)->bits[w];
        for (int r = 1; r < fp->n && a; r++)
                a &= row_of(fp, r)->bits[w];
        return a;
}

/* Appends fast records, then markers (lock held). Returns how many.
 * Records first: an id set in every row was submitted everywhere before
 * any rank ran a schedule not yet in the log (none has run it), so it may
 * come before that schedule and must when a rank submitted it before
 * something the schedule waits for (e.g. a tensor, then a barrier: the
 * barrier's marker must not pass the tensor's record). The ids set in
 * every row go into the log all together (a group's members too), or wait
 * for room there. */
static uint64_t publish(hvd_fastpath_t *fp) {
        board_t *b = fp->b;
        uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed), start = head;
        uint64_t all[WORDS], ready = 0;
        uint32_t nw = any_joining(fp) ? 0 : b->n_words;
        for (uint32_t w = 0; w < nw; w++)
                ready += (uint64_t) __builtin_popcountll(all[w] = every_row(fp, w));
        if (ready && (ready + REC_IDS - 1) / REC_IDS <= log_free(fp, head)) {
                rec_t *rc = NULL;
                for (uint32_t w = 0; w < nw; w++) {
                        uint64_t a = all[w];
                        while (a) {
                                if (!rc || rc->n == REC_IDS) {
                                        if (rc)
                                                head++;
                                        rc = &b->log[head % LOG_CAP];
                                        rc->slow = 0;
                                        rc->n = 0;
                                        rc->seq = (uint64_t) fp->me; /* fast: its appender */
                                }
                                int k = __builtin_ctzll(a);
                                uint64_t bit = UINT64_C(1) << k;
                                a &= ~bit;
                                rc->ids[rc->n++] = w * 64 + (uint32_t) k;
                                for (int r = 0; r < fp->n; r++)
                                        row_of(fp, r)->bits[w] &= ~bit;
                        }
                }
                if (rc)
                        head++;
        }
        /* the schedules received here, in seq order, as long as the next
         * one the log lacks is one of them (another rank appended the
         * earlier ones, or appends the one missing here) */
        size_t k = 0;
        while (k < fp->n_got && fp->got[k].seq <= b->last_slow)
                k++;
        while (k < fp->n_got && fp->got[k].seq == b->last_slow + 1 && log_room(fp, head)) {
                const struct got *p = &fp->got[k++];
                rec_t *rc = &b->log[head % LOG_CAP];
                rc->slow = p->len ? REC_INLINE : REC_MARKER;
                rc->n = p->len;
                rc->seq = ++b->last_slow;
                if (p->len)
                        memcpy(rc->ids, p->bytes, p->len);
                head++;
        }
        atomic_store_explicit(&b->head, head, memory_order_release);
        return head - start;
}

/* Withdraws this rank's bits that waited too long, that another rank gave
 * up on, or that a joining rank will never match, each with the rest of its
 * group (lock held). Fills fp->demoted; returns how many. */
static size_t demote(hvd_fastpath_t *fp, uint64_t now, bool joining) {
        board_t *b = fp->b;
        row_t *me = row_of(fp, fp->me);
        uint32_t gen = atomic_load_explicit(&b->demote_gen, memory_order_relaxed);
        if (!fp->n_mine || (!joining && gen == fp->seen_gen && now < fp->next_timeout_usec))
                return 0;
        fp->seen_gen = gen;
        size_t n = 0;
        uint64_t next = UINT64_MAX;
        bool full = false;
        for (uint32_t w = 0; w < WORDS && n < HVD_FASTPATH_MAX_GROUP && !full; w++) {
                uint64_t m = fp->mine[w] & me->bits[w];
                while (m && n < HVD_FASTPATH_MAX_GROUP) {
                        int k = __builtin_ctzll(m);
                        uint64_t bit = UINT64_C(1) << k;
                        m &= ~bit;
                        uint32_t id = w * 64 + (uint32_t) k;
                        if (!(fp->mine[w] & bit)) /* withdrawn with its group */
                                continue;
                        bool go = joining || now - fp->posted_usec[id] >= HVD_FASTPATH_DEMOTE_USEC ||
                                  b->demoted_inst[id] == fp->posted_inst[id] + 1;
                        if (!go) {
                                next = HVD_MIN(next, fp->posted_usec[id] + HVD_FASTPATH_DEMOTE_USEC);
                                continue;
                        }
                        size_t g = 1;
                        for (uint32_t x = fp->link[id]; x != id; x = fp->link[x])
                                g++;
                        if (n + g > HVD_FASTPATH_MAX_GROUP) {
                                full = true;
                                break;
                        }
                        /* the group's bits: all set here (posted, run and
                         * withdrawn together) */
                        uint32_t x = id;
                        do {
                                uint64_t xb = UINT64_C(1) << (x % 64);
                                if (fp->mine[x / 64] & me->bits[x / 64] & xb) {
                                        me->bits[x / 64] &= ~xb;
                                        fp->mine[x / 64] &= ~xb;
                                        fp->n_mine--;
                                        b->demoted_inst[x] = fp->posted_inst[x] + 1;
                                        fp->demoted[n++] = x;
                                }
                                x = fp->link[x];
                        } while (x != id);
                }
        }
        if (n) {
                fp->seen_gen = atomic_fetch_add(&b->demote_gen, 1) + 1;
                if (n == HVD_FASTPATH_MAX_GROUP || full)
                        next = now; /* more to look at next time */
        }
        fp->next_timeout_usec = next;
        return n;
}

static void wake_others(hvd_fastpath_t *fp) {
        for (int r = 0; r < fp->n; r++) {
                if (r == fp->me)
                        continue;
                row_t *w = row_of(fp, r);
                atomic_fetch_add(&w->bell, 1);
                if (atomic_load(&w->sleeping))
                        futex(&w->bell, FUTEX_WAKE, INT32_MAX, NULL);
        }
}

int hvd_fastpath_step(hvd_fastpath_t *fp, uint64_t now, bool fast_only, const hvd_fastpath_ops_t *ops, void *userdata) {
        board_t *b = fp->b;
        bool joining = fp->n_mine && any_joining(fp);
        bool want_lock = fp->n_got > 0 || fp->n_mine > 0;
        if (want_lock && board_lock(fp) == 0) {
                uint64_t appended = publish(fp);
                size_t nd = fast_only ? 0 : demote(fp, now, joining);
                board_unlock(fp);
                if (appended)
                        wake_others(fp);
                for (size_t i = 0; i < nd; i++)
                        ops->demote(userdata, fp->demoted[i]);
        }
        row_t *me = row_of(fp, fp->me);
        fp->stuck = false;
        while (fp->cursor < atomic_load_explicit(&b->head, memory_order_acquire)) {
                fp->cur = b->log[fp->cursor % LOG_CAP];
                bool inl = fp->cur.slow == REC_INLINE;
                hvd_fastpath_record_t rec = {
                        .slow = fp->cur.slow != REC_FAST,
                        .seq = fp->cur.slow ? fp->cur.seq : 0,
                        .n = fp->cur.slow ? 0 : HVD_MIN(fp->cur.n, (uint32_t) REC_IDS),
                        .ids = fp->cur.ids,
                        .appender = fp->cur.slow ? -1 : (int) fp->cur.seq,
                        .bytes = inl ? (const uint8_t *) fp->cur.ids : NULL,
                        .n_bytes = inl ? HVD_MIN(fp->cur.n, (uint32_t) HVD_FASTPATH_INLINE_BYTES) : 0,
                };
                /* a marker waits for its schedule here; an inline one has it */
                if (rec.slow && (fast_only || (!inl && !got_has(fp, rec.seq)))) {
                        fp->stuck = true;
                        break;
                }
                /* copied: the slot may be reused once the cursor passes it */
                fp->cursor++;
                if (rec.slow)
                        got_ran(fp, rec.seq);
                atomic_store_explicit(&me->cursor, fp->cursor, memory_order_release);
                for (uint32_t i = 0; i < rec.n; i++) {
                        uint32_t id = rec.ids[i];
                        uint64_t bit = UINT64_C(1) << (id % 64);
                        if (fp->mine[id / 64] & bit) {
                                fp->mine[id / 64] &= ~bit;
                                fp->n_mine--;
                        }
                }
                if (!fp->n_mine)
                        fp->next_timeout_usec = UINT64_MAX;
                int r = ops->run(userdata, &rec);
                if (r < 0)
                        return r;
        }
        return 0;
}

bool hvd_fastpath_busy(const hvd_fastpath_t *fp) {
        /* a schedule that arrived here and has not run: its marker may not
         * be in the log yet (the last step missed the board's lock while
         * another rank held it, e.g. preempted while appending that very
         * marker): only a later step appends or runs it, and nothing else
         * wakes the caller for that */
        return fp && (fp->n_mine > 0 || fp->n_got > 0 ||
                      fp->cursor < atomic_load_explicit(&fp->b->head, memory_order_acquire));
}

/* The earliest moment one of mine times out (UINT64_MAX: none waits). */
static uint64_t mine_deadline(const hvd_fastpath_t *fp) {
        uint64_t next = UINT64_MAX;
        for (uint32_t w = 0; w < WORDS; w++)
                for (uint64_t m = fp->mine[w]; m; m &= m - 1) {
                        uint32_t id = w * 64 + (uint32_t) __builtin_ctzll(m);
                        next = HVD_MIN(next, fp->posted_usec[id] + HVD_FASTPATH_DEMOTE_USEC);
                }
        return next;
}

bool hvd_fastpath_demote_due(hvd_fastpath_t *fp, uint64_t now) {
        if (!fp || !fp->n_mine)
                return false;
        /* the deadline may be that of a bit that has run since: a caller
         * told "due" wakes the withdrawing thread, on every operation until
         * that thread's next turn (on a rank's own CPU, one switch each) */
        if (now >= fp->next_timeout_usec)
                fp->next_timeout_usec = mine_deadline(fp);
        return now >= fp->next_timeout_usec ||
               atomic_load_explicit(&fp->b->demote_gen, memory_order_relaxed) != fp->seen_gen || any_joining(fp);
}

uint64_t hvd_fastpath_ran_seq(const hvd_fastpath_t *fp) {
        return fp ? fp->ran_seq : 0;
}

uint64_t hvd_fastpath_next_due(const hvd_fastpath_t *fp) {
        return fp && fp->n_mine ? fp->next_timeout_usec : UINT64_MAX;
}

bool hvd_fastpath_awaits_schedule(const hvd_fastpath_t *fp) {
        return fp && fp->stuck;
}

size_t hvd_fastpath_pending(const hvd_fastpath_t *fp) {
        return fp ? fp->n_mine : 0;
}

void hvd_fastpath_wait(hvd_fastpath_t *fp, uint64_t max_usec) {
        row_t *me = row_of(fp, fp->me);
        board_t *b = fp->b;
        uint32_t bell = atomic_load(&me->bell);
        uint64_t cursor = atomic_load_explicit(&me->cursor, memory_order_acquire);
        /* a schedule's marker: the socket, not the board, will change */
        if (atomic_load(&fp->stuck))
                return;
        /* spin while the application waits (the spin gate), else yield,
         * and spin once it starts waiting */
        bool spun = !fp->spin_usec;
        for (int i = 0; i < HVD_WAIT_YIELDS; i++) {
                if (!spun && hvd_spin_gate_open(fp->spin_gate)) {
                        spun = true;
                        uint64_t start = hvd_now_usec();
                        do {
                                for (int k = 0; k < 64; k++) {
                                        if (atomic_load_explicit(&b->head, memory_order_acquire) != cursor ||
                                            atomic_load_explicit(&me->bell, memory_order_acquire) != bell)
                                                return;
                                        cpu_relax();
                                }
                        } while (hvd_now_usec() - start < (uint64_t) fp->spin_usec);
                        break;
                }
                if (atomic_load_explicit(&b->head, memory_order_acquire) != cursor ||
                    atomic_load_explicit(&me->bell, memory_order_acquire) != bell)
                        return;
                sched_yield();
        }
        atomic_fetch_add(&me->sleeping, 1);
        if (atomic_load(&b->head) == cursor && atomic_load(&me->bell) == bell &&
            !(fp->aborted && atomic_load(fp->aborted))) {
                struct timespec ts = { .tv_sec = (time_t) (max_usec / USEC_PER_SEC),
                                       .tv_nsec = (long) (max_usec % USEC_PER_SEC) * 1000 };
                futex(&me->bell, FUTEX_WAIT, bell, &ts);
        }
        atomic_fetch_sub(&me->sleeping, 1);
}

void hvd_fastpath_set_spin_gate(hvd_fastpath_t *fp, const _Atomic uint32_t *gate) {
        fp->spin_gate = gate;
}

void hvd_fastpath_kick(hvd_fastpath_t *fp) {
        if (!fp)
                return;
        row_t *me = row_of(fp, fp->me);
        atomic_fetch_add(&me->bell, 1);
        if (atomic_load(&me->sleeping))
                futex(&me->bell, FUTEX_WAKE, INT32_MAX, NULL);
}
