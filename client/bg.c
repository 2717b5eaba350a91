/* bg.c — the worker's background thread. One iteration: a heartbeat if
 * due; the runner's turn when the runner is free (held messages, the
 * timeline's news, a fast-path turn); a look at the queue under G.lock;
 * the queue sent when the cycle is due, else how long to sleep worked out;
 * the runner given back (in one place: before any wait); a wait on the
 * board's futex or on the socket, the wake eventfd and the daemon's pidfd;
 * and what came on the socket handled. It never holds G.lock across I/O,
 * nor the runner across a wait. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "timeline.h"
#include "util.h"

/* What the loop saw of the shared state, under G.lock. */
typedef struct bg_look {
        bool stop;
        bool garbage;  /* handles released while their op ran */
        bool unrouted; /* queued since the fast path's turn looked */
        size_t nq;
        uint64_t submitted; /* G.submitted then */
        /* sent, not yet scheduled: while some are, new requests wait for
         * the cycle so they can be fused; when none are, there is nothing
         * to batch with and waiting would only add latency */
        size_t outstanding;
} bg_look_t;

/* The queue taken for one Ready (background thread). */
typedef struct bg_batch {
        hvd_entry_t **e;
        size_t cap;
} bg_batch_t;

/* How long the background thread polls the coordinator's socket (giving
 * its CPU away between polls) before it sleeps on it, while an application
 * thread waits for a tensor whose schedule comes from the coordinator. A
 * schedule across hosts is several hand-offs between threads (rank,
 * daemons, their I/O threads), each of which costs a wakeup of an idle
 * CPU where every CPU sleeps: 25-35 us on the Intel virtual machine measured,
 * on top of the hand-off itself. A rank whose CPU keeps running keeps
 * that CPU out of its idle state for the hand-offs that land on it; the
 * application thread that waits does not need the CPU meanwhile. Lone
 * allreduces of 8 B-1 MiB between 2 emulated hosts took 1.2-2.0x less
 * time (docs/PERFORMANCE.md). */
#define SCHEDULE_SPIN_USEC 1000

/* What the loop does once it has given the runner back. */
enum { BG_WAIT, BG_AGAIN, BG_STOP };

/* With a fast path, a user thread waiting for its tensor may hold the
 * runner and take the turn itself: then the loop only looks at the
 * socket (aborts at once, the rest kept for later). */
static bool runner_take(void) {
        return !G.fp || pthread_mutex_trylock(&G.runner) == 0;
}

static void runner_give(bool runner) {
        if (runner && G.fp)
                pthread_mutex_unlock(&G.runner);
}

static void turn(void) {
        hvd_link_process_held();
        if (atomic_load_explicit(&hvd_timeline_changed, memory_order_relaxed))
                hvd_link_timeline_sync(); /* before this cycle's readiness goes out */
        /* while user threads take the turns, the background thread takes
         * one a millisecond (withdrawals, markers) */
        uint64_t t = hvd_now_usec();
        if (G.fp && !G.abort_code && (!atomic_load(&G.fp_waiters) || t - G.fp_bg_turn_usec >= USEC_PER_MSEC)) {
                G.fp_bg_turn_usec = t;
                hvd_fp_cycle(false);
        }
}

static void look(bg_look_t *l) {
        pthread_mutex_lock(&G.lock);
        l->stop = G.stop;
        l->garbage = G.dev_garbage != NULL;
        l->nq = G.n_queue;
        l->submitted = atomic_load(&G.submitted);
        l->outstanding = hvd_strmap_size(G.inflight) - G.n_queue;
        l->unrouted = G.fp && !G.abort_code && l->nq && !G.queue[l->nq - 1]->fp_routed;
        pthread_mutex_unlock(&G.lock);
}

/* Takes the queue and sends it: one message per cycle. */
static void send_queue(bg_batch_t *batch, uint64_t now) {
        pthread_mutex_lock(&G.lock);
        if (G.n_queue > batch->cap) {
                hvd_entry_t **nb = realloc(batch->e, G.n_queue * sizeof *nb);
                if (nb) {
                        batch->e = nb;
                        batch->cap = G.n_queue;
                }
        }
        size_t n = HVD_MIN(G.n_queue, batch->cap);
        if (n) {
                memcpy(batch->e, G.queue, n * sizeof *batch->e);
                memmove(G.queue, G.queue + n, (G.n_queue - n) * sizeof *G.queue);
                G.n_queue -= n;
        }
        pthread_mutex_unlock(&G.lock);
        if (n) {
                if (hvd_timeline_on())
                        hvd_timeline_cycle();
                int r = hvd_link_send_ready(batch->e, n);
                if (r < 0)
                        hvd_job_abort(r, "cannot send to the coordinator");
        }
        G.last_send_usec = now;
}

static long at_most(long timeout, long ms) {
        return timeout < 0 || timeout > ms ? ms : timeout;
}

/* How long to wait on the board's futex before the socket: up to a
 * millisecond at a time, then a look at the socket without blocking. */
static uint64_t board_wait_usec(long timeout) {
        return timeout < 0 || timeout > 1 ? USEC_PER_MSEC : (uint64_t) timeout * 1000;
}

/* Node mode: come back for the host's ids not yet sent, and for this
 * rank's bits that time out or that another rank gave up on (looked at
 * every 20 ms while bits wait, and the log then, so that it never fills). */
static long node_timeout(const bg_look_t *l, uint64_t now, long timeout, uint64_t *board_usec) {
        bool busy = hvd_fastpath_busy(G.fp), awaits = hvd_fastpath_awaits_schedule(G.fp);
        uint64_t wake = hvd_fastpath_next_due(G.fp);
        if (hvd_fastpath_pending(G.fp) || !G.fp_scribe)
                wake = HVD_MIN(wake, now + 20 * USEC_PER_MSEC);
        if (G.fp_node_n)
                wake = HVD_MIN(wake, G.fp_node_sent_usec + __atomic_load_n(&G.cycle_time_usec, __ATOMIC_RELAXED));
        if (wake != UINT64_MAX)
                timeout = at_most(timeout, wake > now ? (long) ((wake - now + 999) / 1000) : 0);
        /* schedules may come through the board (local rank 0 posts the
         * small ones): while this rank waits for one, wait on the board */
        if (!G.fp_scribe && (busy || l->outstanding) && !awaits && timeout != 0) {
                *board_usec = board_wait_usec(timeout);
                return 0;
        }
        return awaits ? at_most(timeout, 1) : timeout;
}

/* One node, the background thread's turn: wait on the board while bits
 * wait there; a schedule's marker waits for the socket. */
static long board_timeout(long timeout, uint64_t *board_usec) {
        bool busy = hvd_fastpath_busy(G.fp), awaits = hvd_fastpath_awaits_schedule(G.fp);
        /* counters not yet reported: come back for them */
        if (memcmp(&G.fp_done, &G.fp_sent, sizeof G.fp_done) || G.tune_meter.n)
                timeout = at_most(timeout, 50);
        if (!busy)
                return timeout;
        if (awaits)
                return at_most(timeout, 1);
        if (timeout == 0)
                return 0;
        *board_usec = board_wait_usec(timeout);
        return 0;
}

/* The loop is about to sleep: for how long (ms, -1: until woken), and
 * whether on the board first (*board_usec). The runner, if held, still is. */
static long sleep_plan(bool runner, const bg_look_t *l, uint64_t now, long timeout, uint64_t *board_usec) {
        *board_usec = 0;
        if (hvd_timeline_on())
                hvd_timeline_flush(); /* about to sleep: the file catches up */
        /* GPU work in flight: look at its events often */
        if (G.gpu.n_pending) {
                bool more = hvd_gpu_poll();
                hvd_gpu_free_garbage(); /* outputs of handles released while pending */
                if (more)
                        timeout = at_most(timeout, 1);
        }
        if (G.fp_node) /* no user thread takes turns in node mode */
                return G.abort_code ? timeout : node_timeout(l, now, timeout, board_usec);
        if (G.fp && (!runner || atomic_load(&G.fp_waiters)))
                return at_most(timeout, 1); /* a user thread has the turn: come back soon */
        if (G.fp && !G.abort_code)
                return board_timeout(timeout, board_usec);
        return timeout;
}

/* Everything up to the wait, with the runner if it was free. Returns
 * BG_STOP, BG_AGAIN (loop at once), or BG_WAIT with *timeout,
 * *board_usec and *seen (the submissions the look saw) set. */
static int prepare(bool runner, bg_batch_t *batch, long *timeout, uint64_t *board_usec, uint64_t *seen, bool *awaits) {
        if (runner)
                turn();
        bg_look_t l;
        look(&l);
        *seen = l.submitted;
        if (l.garbage)
                hvd_gpu_free_garbage();
        if (l.stop)
                return BG_STOP;
        if (runner && l.unrouted)
                return BG_AGAIN; /* the fast path's turn must see them first */
        /* the fast path's tensors are not waiting for a schedule */
        l.outstanding -= HVD_MIN(l.outstanding, hvd_fastpath_pending(G.fp));
        /* tensors wait for the coordinator's schedule: sent to it, or (node
         * mode) the host's ids on their way to it */
        *awaits = l.outstanding || (G.fp_node && hvd_fastpath_pending(G.fp));
        uint64_t now = hvd_now_usec();
        *timeout = -1;
        if (l.nq && runner) {
                uint64_t due = G.last_send_usec + __atomic_load_n(&G.cycle_time_usec, __ATOMIC_RELAXED);
                if (now >= due || G.solo || l.outstanding == 0) {
                        send_queue(batch, now);
                        return BG_AGAIN;
                }
                *timeout = (long) ((due - now + 999) / 1000);
        }
        *timeout = sleep_plan(runner, &l, now, *timeout, board_usec);
        return BG_WAIT;
}

/* Polls items without blocking, giving the CPU away between polls, for up
 * to SCHEDULE_SPIN_USEC (and no longer than *timeout, in ms, -1: none) or
 * until the application stops waiting; takes the time spun off *timeout.
 * Returns zmq_poll's last result (0: nothing came). */
static int poll_spinning(zmq_pollitem_t *items, int n, long *timeout) {
        uint64_t start = hvd_now_usec(), until = start + SCHEDULE_SPIN_USEC;
        if (*timeout >= 0)
                until = HVD_MIN(until, start + (uint64_t) *timeout * 1000);
        int k;
        while ((k = zmq_poll(items, n, 0)) == 0 && atomic_load_explicit(&G.app_waiting, memory_order_relaxed) &&
               hvd_now_usec() < until)
                sched_yield();
        if (k == 0 && *timeout > 0)
                *timeout = HVD_MAX(0, *timeout - (long) ((hvd_now_usec() - start) / 1000));
        return k;
}

/* Waits for the socket, the wake eventfd or the daemon's end, and handles
 * what came; spins first (poll_spinning) where spin is set and an
 * application thread waits. Submissions write the eventfd only while the
 * wait is armed; one since the look (seen) ends it at once. false: polling
 * failed and the thread ends. */
static bool wait_and_receive(long timeout, uint64_t seen, bool spin) {
        zmq_pollitem_t items[3] = {
                { .fd = G.wake_fd, .events = ZMQ_POLLIN },
                { .socket = G.sock, .events = ZMQ_POLLIN },
                { .fd = G.daemon_pidfd, .events = ZMQ_POLLIN },
        };
        long hb_ms = hvd_link_heartbeat_timeout_ms();
        if (hb_ms >= 0)
                timeout = at_most(timeout, hb_ms);
        bool armed = timeout != 0;
        if (armed) {
                atomic_store(&G.poll_armed, 1);
                if (atomic_load(&G.submitted) != seen)
                        timeout = 0;
        }
        int n_items = !G.sock ? 1 : G.daemon_pidfd >= 0 ? 3 : 2, n = 0;
        if (spin && timeout != 0 && G.sock && atomic_load_explicit(&G.app_waiting, memory_order_relaxed))
                n = poll_spinning(items, n_items, &timeout);
        if (n == 0)
                n = zmq_poll(items, n_items, timeout);
        if (armed)
                atomic_store(&G.poll_armed, 0);
        int e = n < 0 ? zmq_errno() : 0; /* the heartbeat's send may change errno */
        /* before reading: a process resumed after a stop says it is back
         * before it acts on what came meanwhile */
        hvd_link_heartbeat();
        if (n < 0) {
                if (e == EINTR)
                        return true;
                hvd_job_abort(-e, "polling the coordinator socket failed");
                return false;
        }
        if (items[0].revents & ZMQ_POLLIN) {
                uint64_t x;
                if (read(G.wake_fd, &x, sizeof x) < 0)
                        (void) 0;
        }
        if (G.daemon_pidfd >= 0 && (items[2].revents & ZMQ_POLLIN))
                hvd_link_daemon_lost();
        if (!G.sock || !(items[1].revents & ZMQ_POLLIN))
                return true;
        for (int k = 0; k < 64; k++) {
                Hvd__Envelope *env = NULL;
                if (hvd_link_recv(ZMQ_DONTWAIT, &env) < 0)
                        break;
                if (G.fp && env->body_case != HVD__ENVELOPE__BODY_ABORT &&
                    env->body_case != HVD__ENVELOPE__BODY_ERROR) {
                        hvd_link_hold(env); /* for the next turn, under the runner */
                        continue;
                }
                /* kept during a wait: they came first. With a fast path
                 * this thread does not hold the runner here, and the kept
                 * ones (schedules for the board) wait for its next turn */
                if (!G.fp)
                        hvd_link_process_held();
                hvd_link_handle(env);
                hvd_wire_free(&env);
        }
        return true;
}

void *hvd_bg_main(void *arg) {
        bg_batch_t batch = { .e = NULL, .cap = 0 };
        uint64_t spun_seen = UINT64_MAX, spun_node = UINT64_MAX;
        for (;;) {
                hvd_link_heartbeat();
                long timeout = -1;
                uint64_t board_usec = 0, seen = 0;
                bool runner = runner_take(), awaits = false;
                int next = prepare(runner, &batch, &timeout, &board_usec, &seen, &awaits);
                runner_give(runner);
                if (next == BG_STOP)
                        break;
                if (next == BG_AGAIN)
                        continue;
                /* one spin an occasion: a submission, or (node mode) the
                 * host's ids sent; not at each timed wakeup of a long wait */
                bool spin = awaits && (seen != spun_seen || G.fp_node_sent_usec != spun_node);
                if (spin) {
                        spun_seen = seen;
                        spun_node = G.fp_node_sent_usec;
                }
                if (board_usec) {
                        hvd_fastpath_wait(G.fp, board_usec);
                        timeout = 0;
                }
                if (!wait_and_receive(timeout, seen, spin))
                        break;
        }
        free(batch.e);
        return NULL;
}
