/* cpu_backend.c — the CPU data plane inside one node: a shared-memory
 * segment with one slot per local rank and a futex barrier. Fusion happens
 * in the copy into the slot; reductions read every slot's segment at once
 * and write it once; results are copied out once.
 *
 * Invariant (double buffering): each slot is two halves used alternately by
 * consecutive steps (a persistent counter, across operations). Every step is
 * copy-in → barrier → [reduce → barrier] → copy-out, so a rank that writes
 * half b at step t has passed step t-1's first barrier, which every rank
 * reached only after finishing its reads of step t-2 (the same half). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "fastpath.h"
#include "hvd.pb-c.h"
#include "cpu_internal.h"
#include "tcp.h"
#include "reduce.h"
#include "tune_search.h"
#include "util.h"

#define SHM_MAGIC           UINT64_C(0x6876645f73686d36) /* "hvd_shm6" */
#define CHECK_INTERVAL_USEC (20 * USEC_PER_MSEC)
/* How long a barrier spins before it sleeps, where it spins at all (every
 * local rank has a core, and no other member last ran on this CPU). The
 * others are inside the same operation, so they arrive within their share
 * of its work unless the scheduler took their CPU; and a rank that sleeps
 * gives its own core away: on a busy machine it then waits for the
 * scheduler's next turn (a slice, milliseconds) where spinning kept it
 * running. A bound that shrank as waits grew made every barrier of a busy
 * machine a sleep: 3-5x slower than spinning at 1-16 MiB beside one CPU
 * hog, while Open MPI, which polls, held its speed. */
#define SPIN_USEC 1000
/* The same across nodes, where a local barrier also waits for the ring's
 * network time, which a spin only burns (and, with hosts emulated on one
 * machine, takes from the ranks that do that work): 2 hosts of 2 ranks on
 * 2 cores were up to 2x slower at 64-512 KiB spinning 1 ms, and 10-35 %
 * slower spinning 50 us, than the adaptive 4-50 us before; 10 us is level
 * with it. */
#define SPIN_NET_USEC 10
#define CHUNK_BYTES   (UINT64_C(1) << 20)
/* Bytes of a chunk up to which every rank reduces the whole chunk itself
 * (one barrier per chunk) rather than its segment (two barriers, and each
 * byte touched fewer times: 4C bytes per rank for a chunk of C with 2
 * ranks against 5C, 4.5C with 4 against 7C, and each rank reduces 1/n of
 * the chunk): that saves a barrier where the data is too small for the
 * extra work to matter. Measured with 2 ranks on their own cores and 4 on
 * 2 cores: the segment path is 1.2-1.8x faster from 128 KiB to 32 MiB,
 * quiet or beside a CPU hog, once waits spin or yield rather than sleep. */
#define DIRECT_BYTES       (64 * 1024)
#define HVD_RING_MAX_STEPS 2048 /* 2(C-1) steps: up to 1025 nodes */
static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
        return syscall(SYS_futex, (uint32_t *) addr, op, val, ts, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
}

static int wait_failed(hvd_backend_t *b, const char *what, char *err, size_t err_len) {
        if (atomic_load(&b->hdr->aborted)) {
                snprintf(err, err_len, "%s", b->hdr->abort_reason[0] ? b->hdr->abort_reason : "job aborted");
                return HVD_EABORTED;
        }
        return 0;
}

/* True when another member of v last reached a barrier on the CPU this
 * rank runs on now (records that CPU for the others). */
static bool cpu_shared(hvd_backend_t *b, const view_t *v) {
        int cpu = sched_getcpu() + 1;
        if (cpu <= 0)
                return false;
        int me = v->member ? (int) v->member[v->me] : v->me;
        atomic_store_explicit(&b->hdr->cpu[me], cpu, memory_order_relaxed);
        for (int k = 0; k < v->size; k++) {
                int local = v->member ? (int) v->member[k] : k;
                if (local != me && atomic_load_explicit(&b->hdr->cpu[local], memory_order_relaxed) == cpu)
                        return true;
        }
        return false;
}

/* Generation barrier over the view's members. Spins up to b->spin_usec
 * (SPIN_USEC, or SPIN_NET_USEC across nodes; 0 where the ranks outnumber
 * the cores), yields, then sleeps on a futex; checks the abort flag, the
 * caller's check function and the deadline while it waits. */
int hvd_cpu_barrier(hvd_backend_t *b, const view_t *v, const char *what, char *err, size_t err_len) {
        shm_barrier_t *h = v->bar;
        if (v->size == 1)
                return 0;
        uint32_t gen = atomic_load_explicit(&h->gen, memory_order_acquire);
        if (atomic_fetch_add_explicit(&h->count, 1, memory_order_acq_rel) + 1 == (uint32_t) v->size) {
                atomic_store_explicit(&h->count, 0, memory_order_relaxed);
                atomic_fetch_add_explicit(&h->gen, 1, memory_order_release);
                if (atomic_load_explicit(&h->waiters, memory_order_acquire))
                        futex(&h->gen, FUTEX_WAKE, INT32_MAX, NULL);
                return 0;
        }
        /* spin for a bounded time, not a count: a pause costs 10 to 140
         * cycles depending on the CPU */
        uint64_t spin_start = b->spin_usec && !cpu_shared(b, v) ? hvd_now_usec() : 0;
        for (unsigned i = 0; spin_start; i++) {
                if (atomic_load_explicit(&h->gen, memory_order_acquire) != gen)
                        return 0;
                cpu_relax();
                if ((i & 63) == 63 && hvd_now_usec() - spin_start >= b->spin_usec)
                        break;
        }
        uint64_t start = hvd_now_usec(), last_check = start;
        for (;;) {
                for (int i = 0; i < HVD_WAIT_YIELDS; i++) {
                        if (atomic_load_explicit(&h->gen, memory_order_acquire) != gen)
                                return 0;
                        sched_yield();
                }
                atomic_fetch_add(&h->waiters, 1);
                struct timespec ts = { 0, 2 * 1000 * 1000 };
                if (atomic_load_explicit(&h->gen, memory_order_acquire) == gen)
                        futex(&h->gen, FUTEX_WAIT, gen, &ts);
                atomic_fetch_sub(&h->waiters, 1);
                if (atomic_load_explicit(&h->gen, memory_order_acquire) != gen)
                        return 0;
                int r = wait_failed(b, what, err, err_len);
                if (r < 0)
                        return r;
                uint64_t now = hvd_now_usec();
                if (now - last_check >= CHECK_INTERVAL_USEC && b->check) {
                        last_check = now;
                        r = b->check(b->userdata, err, err_len);
                        if (r < 0) {
                                hvd_backend_abort(b, err);
                                return r;
                        }
                }
                if (now - start > b->timeout_usec) {
                        snprintf(err, err_len,
                                 "%s: timed out after %.1f s waiting for the other local ranks in the data plane", what,
                                 (double) b->timeout_usec / 1e6);
                        hvd_backend_abort(b, err);
                        return HVD_ETIMEOUT;
                }
        }
}

/* The node's segment of b->map_bytes: local rank 0 creates and sizes it,
 * the others open it once it has its size (until deadline). Returns its
 * descriptor, or < 0 with the reason in err. */
static int segment_open(const hvd_backend_t *b, const char *shm_name, int rank, uint64_t deadline, char *err,
                        size_t err_len) {
        int fd = -1, r;
        if (rank == 0) {
                fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                if (fd < 0) {
                        r = -errno;
                        snprintf(err, err_len, "cannot create shared memory %s: %s", shm_name, strerror(errno));
                        return r;
                }
                if (ftruncate(fd, (off_t) b->map_bytes) < 0) {
                        r = -errno;
                        snprintf(err, err_len, "cannot size shared memory %s to %zu bytes: %s", shm_name, b->map_bytes,
                                 strerror(errno));
                        close(fd);
                        shm_unlink(shm_name);
                        return r;
                }
        } else {
                for (;;) {
                        fd = shm_open(shm_name, O_RDWR | O_CLOEXEC, 0600);
                        if (fd >= 0) {
                                struct stat st;
                                if (fstat(fd, &st) == 0 && (size_t) st.st_size >= b->map_bytes)
                                        break;
                                close(fd); /* too small yet: local rank 0 is still sizing it */
                        } else if (errno != ENOENT) {
                                r = -errno;
                                snprintf(err, err_len, "cannot open shared memory %s: %s", shm_name, strerror(errno));
                                return r;
                        }
                        if (hvd_now_usec() > deadline) {
                                r = HVD_ETIMEOUT;
                                snprintf(err, err_len, "local rank 0 did not create shared memory %s in time",
                                         shm_name);
                                return r;
                        }
                        usleep(1000);
                }
        }
        return fd;
}

static int multi_node_init(hvd_backend_t *b, const hvd_topology_t *t);

int hvd_cpu_backend_new(const char *shm_name, const hvd_topology_t *topo, uint64_t slot_bytes, uint64_t timeout_usec,
                        hvd_wait_check_fn check, void *userdata, hvd_backend_t **ret, char *err, size_t err_len) {
        int rank = topo->local_rank, size = topo->local_size;
        hvd_backend_t *b = calloc(1, sizeof *b);
        if (!b) {
                if (topo->listen_fd >= 0)
                        close(topo->listen_fd);
                return -ENOMEM;
        }
        b->rank = rank;
        b->size = size;
        b->g_rank = topo->rank;
        b->g_size = topo->size;
        b->cross_rank = topo->cross_rank;
        b->cross_size = topo->cross_size;
        b->timeout_usec = timeout_usec ? timeout_usec : 300 * USEC_PER_SEC;
        b->check = check;
        b->userdata = userdata;
        b->slot_bytes = (slot_bytes + 8191) & ~UINT64_C(8191);
        b->half_bytes = b->slot_bytes / 2;
        b->stride_bytes = b->slot_bytes + b->half_bytes; /* two halves + the process-set region */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        b->spin_usec = size > ncpu ? 0 : topo->cross_size > 1 ? SPIN_NET_USEC : SPIN_USEC;
        /* cache-sized chunks */
        b->chunk_bytes = CHUNK_BYTES;
        b->direct_bytes = DIRECT_BYTES;
        /* HVD_SHM_CHUNK_BYTES (local rank 0's, published in the header):
         * for tuning, and for tests of many chunks */
        if (topo->shm_chunk_bytes >= 4096)
                b->chunk_bytes = topo->shm_chunk_bytes;
        /* HVD_SHM_DIRECT_BYTES, likewise: for tuning, and for tests of
         * both reduction steps in small chunks */
        if (topo->shm_direct_bytes)
                b->direct_bytes = topo->shm_direct_bytes;
        b->ring_chunk_bytes = topo->ring_chunk_bytes;
        b->slot_stream = topo->shm_slot_stream;
        b->chunk_default = b->chunk_bytes; /* local rank 0's, for the others, below */
        /* HVD_SHM_ZERO_COPY_BYTES, likewise (0 there: off) */
        if (size > 1 && size <= ZC_MAX_LOCAL)
                b->zc_bytes = topo->shm_zero_copy_bytes == UINT64_MAX ? 0
                              : topo->shm_zero_copy_bytes             ? topo->shm_zero_copy_bytes
                                                                      : ZC_BYTES;
        b->srcs = calloc((size_t) size, sizeof *b->srcs);
        if (size > 1 && size <= ZC_MAX_LOCAL)
                b->peers = calloc((size_t) size, sizeof *b->peers);
        if (!b->srcs || (size > 1 && size <= ZC_MAX_LOCAL && !b->peers)) {
                free(b->peers);
                free(b->srcs);
                free(b);
                if (topo->listen_fd >= 0)
                        close(topo->listen_fd);
                return -ENOMEM;
        }
        int r = multi_node_init(b, topo);
        if (r < 0) {
                snprintf(err, err_len, "cannot set up the data plane between nodes: %s", hvd_strerror(r));
                hvd_backend_destroy(&b);
                return r;
        }
        if (size == 1) {
                /* one rank here: no segment; a private slot when the data
                 * goes to other nodes through it, else a private board: a
                 * job of one rank takes the fast path like one of several
                 * on one host, without a round trip to the daemon per
                 * operation */
                b->hdr = calloc(1, sizeof *b->hdr);
                if (b->hdr && b->cross_size > 1) {
                        b->private_base = aligned_alloc(4096, b->stride_bytes);
                        b->base = b->private_base;
                } else if (b->hdr) {
                        size_t board_bytes = hvd_fastpath_board_bytes(1);
                        b->private_board = aligned_alloc(4096, board_bytes);
                        if (b->private_board)
                                memset(b->private_board, 0, board_bytes);
                        b->board = b->private_board;
                }
                if (!b->hdr || (b->cross_size > 1 ? !b->base : !b->board)) {
                        hvd_backend_destroy(&b);
                        return -ENOMEM;
                }
                *ret = b;
                return 0;
        }
        size_t board_bytes = hvd_fastpath_board_bytes(size);
        b->map_bytes = HEADER_BYTES + board_bytes + (size_t) size * b->stride_bytes;
        uint64_t deadline = hvd_now_usec() + b->timeout_usec;
        int fd = segment_open(b, shm_name, rank, deadline, err, err_len);
        if (fd < 0) {
                r = fd;
                goto fail;
        }
        void *p = mmap(NULL, b->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
                r = -errno;
                snprintf(err, err_len, "cannot map shared memory %s: %s", shm_name, strerror(errno));
                goto fail;
        }
        b->hdr = p;
        b->board = (uint8_t *) p + HEADER_BYTES;
        b->base = (uint8_t *) p + HEADER_BYTES + board_bytes;
        if (rank == 0) {
                b->hdr->local_size = (uint32_t) size;
                b->hdr->slot_bytes = b->slot_bytes;
                b->hdr->chunk_bytes = b->chunk_bytes;
                b->hdr->direct_bytes = b->direct_bytes;
                b->hdr->zc_bytes = b->zc_bytes;
                atomic_store_explicit(&b->hdr->magic, SHM_MAGIC, memory_order_release);
        } else {
                while (atomic_load_explicit(&b->hdr->magic, memory_order_acquire) != SHM_MAGIC) {
                        if (hvd_now_usec() > deadline) {
                                r = HVD_ETIMEOUT;
                                snprintf(err, err_len, "shared memory %s was never initialised", shm_name);
                                goto fail;
                        }
                        usleep(1000);
                }
                if (b->hdr->local_size != (uint32_t) size || b->hdr->slot_bytes != b->slot_bytes) {
                        r = HVD_EPROTO;
                        snprintf(err, err_len, "shared memory %s has a different layout", shm_name);
                        goto fail;
                }
                b->chunk_bytes = b->hdr->chunk_bytes;
                b->direct_bytes = b->hdr->direct_bytes;
                b->zc_bytes = b->hdr->zc_bytes;
        }
        b->chunk_default = b->chunk_bytes;
        /* the last rank to attach removes the name: nothing is left behind
         * in /dev/shm whatever happens to the processes later */
        if (atomic_fetch_add(&b->hdr->attached, 1) + 1 == (uint32_t) size)
                shm_unlink(shm_name);
        *ret = b;
        return 0;
fail:
        hvd_backend_destroy(&b);
        return r;
}

void *hvd_backend_board(hvd_backend_t *b, const void **aborted) {
        if (!b || !b->board)
                return NULL;
        *aborted = &b->hdr->aborted;
        return b->board;
}

void hvd_backend_set_switches(hvd_backend_t *b, uint32_t switches, uint32_t fixed) {
        if (!b)
                return;
        uint32_t tuned = ~fixed;
        if (tuned >> HVD_TUNE_SWITCH_SEND_THREAD & 1)
                hvd_tcp_set_send_thread(b->tcp, switches >> HVD_TUNE_SWITCH_SEND_THREAD & 1);
        if (tuned >> HVD_TUNE_SWITCH_SMALL_CHUNKS & 1)
                b->ring_chunk_bytes = switches >> HVD_TUNE_SWITCH_SMALL_CHUNKS & 1 ? HVD_TUNE_SMALL_CHUNK_BYTES : 0;
        /* every local rank switches at the same schedule, between two
         * operations: all chunk the next one alike */
        if (tuned >> HVD_TUNE_SWITCH_SHM_CHUNKS & 1)
                b->chunk_bytes =
                        switches >> HVD_TUNE_SWITCH_SHM_CHUNKS & 1 ? HVD_TUNE_SHM_CHUNK_BYTES : b->chunk_default;
}

void hvd_backend_abort(hvd_backend_t *b, const char *reason) {
        if (!b || !b->hdr)
                return;
        hvd_tcp_abort(b->tcp);
        if (atomic_exchange(&b->hdr->aborted, 1) == 0) {
                snprintf(b->hdr->abort_reason, sizeof b->hdr->abort_reason, "%s", reason);
        }
        futex(&b->hdr->bar.gen, FUTEX_WAKE, INT32_MAX, NULL);
        for (int i = 0; i < HVD_MAX_PROCESS_SETS; i++)
                futex(&b->hdr->set_bar[i].gen, FUTEX_WAKE, INT32_MAX, NULL);
}

void hvd_backend_destroy(hvd_backend_t **bp) {
        if (!bp || !*bp)
                return;
        hvd_backend_t *b = *bp;
        if (b->private_base || b->private_board) {
                free(b->private_base);
                free(b->private_board);
                free(b->hdr);
        } else if (b->base)
                munmap(b->hdr, b->map_bytes);
        else
                free(b->hdr);
        free(b->srcs);
        for (int k = 0; b->peers && k < b->size; k++)
                if (b->peers[k].base)
                        munmap((void *) b->peers[k].base, b->peers[k].id.bytes);
        free(b->peers);
        hvd_tcp_destroy(&b->tcp);
        free(b->rank_cross);
        free(b->rank_local);
        free(b->node_peer);
        free(b->scratch);
        free(b->rs_full);
        free(b->rs_m);
        free(b->ring);
        free(b->mend);
        free(b);
        *bp = NULL;
}

/* ---- operations ---- */

/* Ends a step: the global view alternates halves (see the invariant at the
 * top); a process set has one region and fences it. */
static int end_step(hvd_backend_t *b, const view_t *v, const char *what, char *err, size_t err_len) {
        if (v->set)
                return hvd_cpu_barrier(b, v, what, err, err_len);
        b->step++;
        return 0;
}

static double reduce_scale(const hvd_xop_t *op, int size) {
        double s = op->postscale;
        if (op->reduce_op == HVD_REDUCE_AVERAGE)
                s /= size;
        return s;
}

/* One rank: no other contributions; results straight from the inputs. */
static int execute_solo(const hvd_xop_t *op) {
        size_t es = hvd_dtype_size(op->dtype);
        for (size_t i = 0; i < op->n; i++) {
                const hvd_xmember_t *m = &op->m[i];
                if (!m->out)
                        continue;
                switch (op->kind) {
                case HVD__KIND__KIND_ALLREDUCE:
                case HVD__KIND__KIND_REDUCESCATTER:
                        if (!m->in)
                                memset(m->out, 0, m->count * es);
                        else if (op->dtype != HVD_BOOL && !hvd_dtype_is_float(op->dtype)) {
                                /* integers: scale in two steps, as the multi-rank path does */
                                hvd_scale_copy(op->dtype, m->out, m->in, m->count, op->prescale);
                                hvd_scale_copy(op->dtype, m->out, m->out, m->count, reduce_scale(op, 1));
                        } else
                                hvd_scale_copy(op->dtype, m->out, m->in, m->count, op->prescale * reduce_scale(op, 1));
                        break;
                case HVD__KIND__KIND_BROADCAST:
                        if (m->in && m->in != m->out)
                                memmove(m->out, m->in, m->count * es);
                        break;
                case HVD__KIND__KIND_ALLGATHER:
                        if (m->in && m->rank_rows[0])
                                memmove(m->out, m->in, (size_t) m->rank_rows[0] * m->row_elems * es);
                        break;
                case HVD__KIND__KIND_ALLTOALL:
                        if (m->in && m->splits[0])
                                memmove(m->out, m->in, (size_t) m->splits[0] * m->row_elems * es);
                        break;
                default: break;
                }
        }
        return 0;
}

/* The fused element space of an op, chunk [c0, c0 + cl): copy the members'
 * inputs into slot (scaled by prescale; zeros for a joined rank), around
 * the caches where around (slot_mode.c). This copy is the fusion. */
static void chunk_copy_in(const hvd_xop_t *op, uint8_t *slot, uint64_t c0, uint64_t cl, bool around, size_t es) {
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t a = HVD_MAX(off, c0), e = HVD_MIN(off + m->count, c0 + cl);
                if (a >= e)
                        continue;
                if (m->in && around && op->prescale == 1.0)
                        hvd_copy_stream(slot + (a - c0) * es, (const uint8_t *) m->in + (a - off) * es, (e - a) * es);
                else if (m->in)
                        hvd_scale_copy(op->dtype, slot + (a - c0) * es, (const uint8_t *) m->in + (a - off) * es, e - a,
                                       op->prescale);
                else
                        memset(slot + (a - c0) * es, 0, (e - a) * es);
        }
}

/* The reduced chunk lives in pieces of seg elements, piece k in member k's
 * slot: copy it out to the members' outputs, but piece `skip` (-1: none),
 * which is there already. stream: outputs that are not also the inputs
 * (not in the caches) are written around the caches. */
static void chunk_copy_out(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t c0, uint64_t cl,
                           uint64_t seg, size_t es, int skip, bool stream) {
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t a = HVD_MAX(off, c0), e = HVD_MIN(off + m->count, c0 + cl);
                if (a >= e || !m->out)
                        continue;
                bool around = stream && m->out != m->in;
                for (uint64_t x = a; x < e;) {
                        uint64_t rel = x - c0, k = rel / seg;
                        uint64_t y = HVD_MIN(e, c0 + (k + 1) * seg);
                        uint8_t *to = (uint8_t *) m->out + (x - off) * es;
                        const uint8_t *from = slot_of(b, v, (int) k) + rel * es;
                        if ((int) k != skip) {
                                if (around)
                                        hvd_copy_stream(to, from, (y - x) * es);
                                else
                                        hvd_copy(to, from, (y - x) * es);
                        }
                        x = y;
                }
        }
}

/* The reduced chunk [c0, c0 + cl) of the fused element space, reduced
 * from every member's slot straight into the members' outputs (no copy
 * out): each rank reduces the whole chunk itself. Sources in member order on
 * every rank, so every rank computes the same bits. */
static void chunk_reduce_out(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t c0, uint64_t cl,
                             size_t es, double post, bool stream) {
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t a = HVD_MAX(off, c0), e = HVD_MIN(off + m->count, c0 + cl);
                if (a >= e || !m->out)
                        continue;
                for (int k = 0; k < v->size; k++)
                        b->srcs[k] = slot_of(b, v, k) + (a - c0) * es;
                (stream ? hvd_reduce_n_stream : hvd_reduce_n)(op->dtype, op->reduce_op,
                                                              (uint8_t *) m->out + (a - off) * es, b->srcs,
                                                              (size_t) v->size, e - a, post);
        }
}

/* This rank's segment [s0, s1) of chunk [c0, c0 + cl), which it alone
 * reduces: its own contribution straight from its inputs (it copied the
 * rest of the chunk into its slot, not this), the others' from their
 * slots, in member order as everywhere; the result into the outputs and
 * into its slot, where the others copy it from. A piece whose input must
 * be scaled or is missing (a joined rank) goes through the slot first.
 * stream: an output that is not also the input is written around the
 * caches, so the result goes into the slot and is copied out from there
 * (an in-place output was just read: its lines are in the caches, and
 * non-temporal stores there were 1.1-1.6x slower). slot_nt: the result's
 * copy into the slot goes around the caches (slot_mode.c). */
static void segment_reduce(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t c0, uint64_t s0,
                           uint64_t s1, size_t es, double post, bool stream, bool slot_nt) {
        uint8_t *mine = slot_of(b, v, v->me);
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t a = HVD_MAX(off, c0 + s0), e = HVD_MIN(off + m->count, c0 + s1);
                if (a >= e)
                        continue;
                uint64_t rel = a - c0;
                for (int k = 0; k < v->size; k++)
                        b->srcs[k] = slot_of(b, v, k) + rel * es;
                if (m->in && op->prescale == 1.0)
                        b->srcs[v->me] = (const uint8_t *) m->in + (a - off) * es;
                else if (m->in)
                        hvd_scale_copy(op->dtype, mine + rel * es, (const uint8_t *) m->in + (a - off) * es, e - a,
                                       op->prescale);
                else
                        memset(mine + rel * es, 0, (e - a) * es);
                uint8_t *out = m->out ? (uint8_t *) m->out + (a - off) * es : NULL;
                bool around = out && stream && m->out != m->in;
                uint8_t *dst = out && !around ? out : mine + rel * es;
                hvd_reduce_n(op->dtype, op->reduce_op, dst, b->srcs, (size_t) v->size, e - a, post);
                if (around)
                        hvd_copy_stream(out, mine + rel * es, (e - a) * es);
                else if (out && slot_nt)
                        hvd_copy_stream(mine + rel * es, out, (e - a) * es);
                else if (out)
                        hvd_copy(mine + rel * es, out, (e - a) * es);
        }
}

/* Chunk [c0, c0 + cl) of the inputs into my slot: the whole chunk, or, on
 * the segment path, all but my segment [s0, s1), which goes straight from
 * my inputs. */
void hvd_cpu_copy_in(const hvd_xop_t *op, uint8_t *mine, uint64_t c0, uint64_t cl, uint64_t s0, uint64_t s1,
                     bool direct, bool around, size_t es) {
        hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
        if (direct)
                chunk_copy_in(op, mine, c0, cl, false, es);
        else {
                chunk_copy_in(op, mine, c0, s0, around, es);
                chunk_copy_in(op, mine + s1 * es, c0 + s1, cl - s1, around, es);
        }
        hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
}

/* Operations from this size on write their outputs with non-temporal
 * stores (on the segment path only outputs that are not also the inputs):
 * they do not fit the caches anyway, and a normal store reads each line of
 * the output in before overwriting it. */
#define STREAM_BYTES (UINT64_C(32) << 20)
/* An output that is not also the input, on the segment path, from this
 * size on: with the input beside it the operation touches twice the bytes,
 * and leaves the caches at half the size (a 2-vCPU AMD EPYC machine, 2
 * ranks: 16 MiB out of place took 1.45x in place's time with ordinary
 * stores, 1.1x with non-temporal ones; at 4 MiB, still in the caches,
 * non-temporal stores were 1.5x slower). */
#define STREAM_APART_BYTES (STREAM_BYTES / 2)

/* allreduce and reducescatter over the fused element space, chunked by
 * b->chunk_bytes (cache-sized: a chunk's slots stay in the caches between
 * the copy in, the reduction and the copy out; consecutive chunks use
 * alternate halves, so a rank copies the next chunk in while the others
 * still read the last one). reducescatter reduces only this rank's rows,
 * straight into its output; an allreduce chunk of at most b->direct_bytes
 * likewise reduces every slot straight into the outputs; both need one
 * barrier per chunk. Larger
 * chunks: each rank copies in the others' segments only, and after a
 * barrier reduces its own segment from its inputs and their slots into its
 * outputs and its slot; after a second barrier it copies the others'
 * segments out. Each result element is computed by one rank, so every
 * rank has the same bits. */
static int execute_reduce(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t total = 0;
        for (size_t i = 0; i < op->n; i++)
                total += op->m[i].count;
        uint64_t chunk = (HVD_MIN(b->half_bytes, b->chunk_bytes) / 64) * 64 / es;
        double post = reduce_scale(op, v->size);
        bool rs = op->kind == HVD__KIND__KIND_REDUCESCATTER;
        /* outputs larger than the caches are written around them */
        bool stream = total * es >= STREAM_BYTES, stream_apart = total * es >= STREAM_APART_BYTES;
        bool zc = hvd_zc_eligible(b, v, op, total, es);
        /* the slot writes' mode where the segment path runs: measured
         * (slot_mode.c), or HVD_SHM_SLOT_STREAM's */
        bool segments = !rs && total * es > b->direct_bytes;
        hvd_slot_mode_t *sm = segments && !b->slot_stream ? hvd_slot_mode_of(b, total * es) : NULL;
        bool slot_nt = sm ? hvd_slot_mode_stream(sm) : segments && b->slot_stream == 1;
        uint64_t t0 = sm ? hvd_now_usec() : 0;
        int r;
        for (uint64_t c0 = 0; c0 < total; c0 += chunk) {
                uint64_t cl = HVD_MIN(chunk, total - c0);
                uint8_t *mine = slot_of(b, v, v->me);
                /* one barrier a chunk (see DIRECT_BYTES) */
                bool direct = rs || cl * es <= b->direct_bytes;
                /* my segment of the chunk, when I reduce only that */
                uint64_t seg = (cl + (uint64_t) v->size - 1) / (uint64_t) v->size;
                seg = (seg + 15) & ~UINT64_C(15);
                uint64_t s0 = HVD_MIN((uint64_t) v->me * seg, cl), s1 = HVD_MIN(s0 + seg, cl);
                if (c0 == 0 && zc) {
                        if ((r = hvd_zc_run(b, v, op, total, cl, s0, s1, direct, slot_nt, es, post, err, err_len)) != 0)
                                return r < 0 ? r : 0;
                } else {
                        hvd_cpu_copy_in(op, mine, c0, cl, s0, s1, direct, slot_nt, es);
                        if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                                return r;
                }
                if (rs) {
                        uint64_t off = 0;
                        for (size_t i = 0; i < op->n; off += op->m[i].count, i++) {
                                const hvd_xmember_t *m = &op->m[i];
                                int64_t start, nrows;
                                hvd_reducescatter_rows(m->rows, v->size, v->me, &start, &nrows);
                                uint64_t mine0 = off + (uint64_t) start * m->row_elems;
                                uint64_t mine1 = mine0 + (uint64_t) nrows * m->row_elems;
                                uint64_t a = HVD_MAX(mine0, c0), e = HVD_MIN(mine1, c0 + cl);
                                if (a >= e || !m->out)
                                        continue;
                                for (int k = 0; k < v->size; k++)
                                        b->srcs[k] = slot_of(b, v, k) + (a - c0) * es;
                                hvd_reduce_n(op->dtype, op->reduce_op, (uint8_t *) m->out + (a - mine0) * es, b->srcs,
                                             (size_t) v->size, e - a, post);
                        }
                        if ((r = end_step(b, v, op->name, err, err_len)) < 0)
                                return r;
                        continue;
                }
                if (direct) {
                        /* the copy out, reducing as it goes */
                        hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                        chunk_reduce_out(b, v, op, c0, cl, es, post, stream);
                        if ((r = end_step(b, v, op->name, err, err_len)) < 0)
                                return r;
                        continue;
                }
                /* reduce my segment (the others' slots and my inputs) into my
                 * outputs and my slot */
                segment_reduce(b, v, op, c0, s0, s1, es, post, stream_apart, slot_nt);
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                /* copy out: segment k of the result lives in slot k */
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                chunk_copy_out(b, v, op, c0, cl, seg, es, v->me, stream_apart);
                if ((r = end_step(b, v, op->name, err, err_len)) < 0)
                        return r;
        }
        if (sm)
                hvd_slot_mode_note(sm, total * es, hvd_now_usec() - t0);
        return 0;
}

/* Byte streams: every member publishes a stream (its pieces, concatenated),
 * window by window through its slot; every reader copies the ranges it
 * wants. Broadcast, allgather and alltoall are all this. An alltoall's
 * piece leaves out the rows a member sends itself, which go straight from
 * its input to its output: its stream holds only what others read. */

/* Bytes of member tensor m that member j publishes. */
static uint64_t pub_bytes(const hvd_xop_t *op, const hvd_xmember_t *m, int j, size_t es, int size) {
        switch (op->kind) {
        case HVD__KIND__KIND_BROADCAST: return j == op->root ? m->count * es : 0;
        case HVD__KIND__KIND_ALLGATHER: return (uint64_t) m->rank_rows[j] * m->row_elems * es;
        case HVD__KIND__KIND_ALLTOALL: {
                uint64_t rows = 0;
                for (int d = 0; d < size; d++)
                        if (d != j)
                                rows += (uint64_t) m->splits[(size_t) j * size + d];
                return rows * m->row_elems * es;
        }
        }
        return 0;
}

/* The rows of member tensor m that member `me` keeps itself: at byte src
 * of its input, byte dst of its output, len bytes (an allgather's own rows;
 * an alltoall's rows to itself). */
static void own_piece(const hvd_xop_t *op, const hvd_xmember_t *m, int me, int size, size_t es, uint64_t *src,
                      uint64_t *dst, uint64_t *len) {
        uint64_t row = m->row_elems * es;
        *src = *dst = 0;
        if (op->kind == HVD__KIND__KIND_ALLGATHER) {
                for (int k = 0; k < me; k++)
                        *dst += (uint64_t) m->rank_rows[k] * row;
                *len = (uint64_t) m->rank_rows[me] * row;
                return;
        }
        for (int d = 0; d < me; d++)
                *src += (uint64_t) m->splits[(size_t) me * size + d] * row;
        for (int k = 0; k < me; k++)
                *dst += (uint64_t) m->splits[(size_t) k * size + me] * row;
        *len = (uint64_t) m->splits[(size_t) me * size + me] * row;
}

/* Window [w0, w1) of my stream into my slot: the part of member m's piece,
 * stream bytes [p0, p1), that falls in it; the piece is m's input but for
 * hole bytes at offset at (an alltoall's rows to myself); around the
 * caches where `around` (slot_mode.c). */
static void publish(uint8_t *slot, const hvd_xmember_t *m, uint64_t p0, uint64_t p1, uint64_t w0, uint64_t w1,
                    uint64_t at, uint64_t hole, bool around) {
        /* stream [p0, p0 + at) is input [0, at); [p0 + at, p1) is input [at + hole, ...) */
        uint64_t part[2][3] = { { p0, HVD_MIN(p1, p0 + at), 0 }, { HVD_MIN(p1, p0 + at), p1, hole } };
        for (int k = 0; k < 2; k++) {
                uint64_t a = HVD_MAX(part[k][0], w0), e = HVD_MIN(part[k][1], w1);
                if (a >= e)
                        continue;
                if (m->in)
                        (around ? hvd_copy_stream : hvd_copy)(slot + (a - w0),
                                                              (const uint8_t *) m->in + (a - p0) + part[k][2], e - a);
                else
                        memset(slot + (a - w0), 0, e - a);
        }
}

/* Copies window [w0, w1) of member j's stream (at `slot`) into my outputs. */
static void read_window(const view_t *v, const hvd_xop_t *op, int j, const uint8_t *slot, uint64_t w0, uint64_t w1,
                        size_t es) {
        int me = v->me, size = v->size;
        uint64_t soff = 0; /* offset of tensor i's piece in j's stream */
        for (size_t i = 0; i < op->n; i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t plen = pub_bytes(op, m, j, es, size);
                uint64_t want0 = 0, want1 = 0, dst = 0; /* in piece coordinates; dst offset in out */
                uint64_t row_bytes = m->row_elems * es;
                switch (op->kind) {
                case HVD__KIND__KIND_BROADCAST: want1 = plen; break;
                case HVD__KIND__KIND_ALLGATHER:
                        want1 = plen;
                        for (int k = 0; k < j; k++)
                                dst += (uint64_t) m->rank_rows[k] * row_bytes;
                        break;
                case HVD__KIND__KIND_ALLTOALL:
                        for (int d = 0; d < me; d++)
                                if (d != j) /* not in j's stream */
                                        want0 += (uint64_t) m->splits[(size_t) j * size + d] * row_bytes;
                        want1 = want0 + (uint64_t) m->splits[(size_t) j * size + me] * row_bytes;
                        for (int k = 0; k < j; k++)
                                dst += (uint64_t) m->splits[(size_t) k * size + me] * row_bytes;
                        break;
                }
                uint64_t a = HVD_MAX(soff + want0, w0), e = HVD_MIN(soff + want1, w1);
                if (a < e && m->out)
                        hvd_copy((uint8_t *) m->out + dst + (a - soff - want0), slot + (a - w0), e - a);
                soff += plen;
        }
}

static int execute_stream(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        int size = v->size, me = v->me, r;
        uint64_t win = HVD_MIN(b->half_bytes, b->chunk_bytes), longest = 0, mine = 0;
        for (int j = 0; j < size; j++) {
                uint64_t len = 0;
                for (size_t i = 0; i < op->n; i++)
                        len += pub_bytes(op, &op->m[i], j, es, size);
                longest = HVD_MAX(longest, len);
                if (j == me)
                        mine = len;
        }
        /* my slot writes: measured per size class (slot_mode.c), or
         * HVD_SHM_SLOT_STREAM's */
        hvd_slot_mode_t *sm = !b->slot_stream ? hvd_slot_mode_of_stream(b, mine) : NULL;
        bool pub_nt = sm ? hvd_slot_mode_stream(sm) : b->slot_stream == 1;
        uint64_t t0 = sm ? hvd_now_usec() : 0;
        /* the root's own result goes straight from input to output */
        if (op->kind == HVD__KIND__KIND_BROADCAST && me == op->root) {
                for (size_t i = 0; i < op->n; i++)
                        if (op->m[i].out && op->m[i].in != op->m[i].out)
                                memmove(op->m[i].out, op->m[i].in, op->m[i].count * es);
        }
        /* so do an allgather's own rows, and the rows an alltoall sends this
         * rank itself (which then stay out of its slot): one copy, not two
         * through the slot */
        bool own_direct = op->kind == HVD__KIND__KIND_ALLGATHER || op->kind == HVD__KIND__KIND_ALLTOALL;
        if (own_direct)
                for (size_t i = 0; i < op->n; i++) {
                        const hvd_xmember_t *m = &op->m[i];
                        uint64_t src, dst, len;
                        own_piece(op, m, me, size, es, &src, &dst, &len);
                        if (!m->out || !len)
                                continue;
                        if (m->in)
                                memmove((uint8_t *) m->out + dst, (const uint8_t *) m->in + src, len);
                        else
                                memset((uint8_t *) m->out + dst, 0, len);
                }
        for (uint64_t w0 = 0; w0 < longest; w0 += win) {
                uint64_t w1 = w0 + win;
                uint8_t *slot = slot_of(b, v, me);
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
                if (w0 < mine) {
                        uint64_t soff = 0;
                        for (size_t i = 0; i < op->n; i++) {
                                const hvd_xmember_t *m = &op->m[i];
                                uint64_t plen = pub_bytes(op, m, me, es, size);
                                /* an alltoall's rows to this rank itself are not in its stream */
                                uint64_t at = plen, hole = 0, dst;
                                if (op->kind == HVD__KIND__KIND_ALLTOALL)
                                        own_piece(op, m, me, size, es, &at, &dst, &hole);
                                publish(slot, m, soff, soff + plen, w0, w1, at, hole, pub_nt);
                                soff += plen;
                        }
                }
                hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                for (int j = 0; j < size; j++) {
                        if (op->kind == HVD__KIND__KIND_BROADCAST && (j != op->root || me == op->root))
                                continue;
                        if (own_direct && j == me)
                                continue;
                        read_window(v, op, j, slot_of(b, v, j), w0, w1, es);
                }
                if ((r = end_step(b, v, op->name, err, err_len)) < 0)
                        return r;
        }
        if (sm)
                hvd_slot_mode_note(sm, mine, hvd_now_usec() - t0);
        return 0;
}

/* ---- several nodes ---- */

static int multi_node_init(hvd_backend_t *b, const hvd_topology_t *t) {
        if (t->cross_size <= 1) {
                if (t->listen_fd >= 0)
                        close(t->listen_fd);
                return 0;
        }
        b->rank_cross = malloc((size_t) t->size * sizeof(int));
        b->rank_local = malloc((size_t) t->size * sizeof(int));
        b->node_peer = malloc((size_t) t->cross_size * sizeof(int));
        int *local_sizes = calloc((size_t) t->cross_size, sizeof(int));
        if (!b->rank_cross || !b->rank_local || !b->node_peer || !local_sizes) {
                free(local_sizes);
                if (t->listen_fd >= 0)
                        close(t->listen_fd);
                return -ENOMEM;
        }
        memcpy(b->rank_cross, t->rank_cross, (size_t) t->size * sizeof(int));
        memcpy(b->rank_local, t->rank_local, (size_t) t->size * sizeof(int));
        for (int c = 0; c < t->cross_size; c++)
                b->node_peer[c] = -1;
        for (int r = 0; r < t->size; r++) {
                local_sizes[t->rank_cross[r]]++;
                if (t->rank_local[r] == t->local_rank)
                        b->node_peer[t->rank_cross[r]] = r;
        }
        b->lmin = INT32_MAX;
        b->lmax = 0;
        for (int c = 0; c < t->cross_size; c++) {
                b->lmin = HVD_MIN(b->lmin, local_sizes[c]);
                b->lmax = HVD_MAX(b->lmax, local_sizes[c]);
        }
        free(local_sizes);
        int r = hvd_tcp_new(t->listen_fd, t->rank, t->size, t->addrs, t->job_hash, b->timeout_usec, b->check,
                            b->userdata, &b->tcp);
        if (r >= 0) {
                hvd_tcp_set_checksum(b->tcp, t->ring_checksum);
                hvd_tcp_set_send_thread(b->tcp, t->tcp_send_thread);
                if (t->tcp_frame_bytes)
                        hvd_tcp_set_frame_bytes(b->tcp, t->tcp_frame_bytes);
        }
        return r;
}

static uint8_t *scratch_get(hvd_backend_t *b, size_t bytes) {
        if (bytes > b->scratch_bytes) {
                uint8_t *p = realloc(b->scratch, bytes);
                if (!p)
                        return NULL;
                b->scratch = p;
                b->scratch_bytes = bytes;
        }
        return b->scratch;
}

/* Bandwidth-optimal ring allreduce of buf (n elements) among the ranks
 * with my local rank on every node: reduce-scatter, scale my block once,
 * allgather. Each rank sends 2(C-1)/C of the buffer. The 2(C-1) steps are
 * one stream each way (hvd_tcp_stream, a segment per step), pipelined by
 * frames: a received frame is reduced at once, and the next step sends it
 * on as soon as it is — so the wire never waits for a whole block, the
 * reduction overlaps the transfer, and the allgather starts while the
 * reduce-scatter still runs. */
typedef struct ring {
        hvd_dtype_t dt;
        hvd_reduce_op_t op;
        size_t es;
        /* the buffer: contiguous (buf), or the outputs of members m[0..nm)
         * end to end, member k ending at byte mend[k] */
        uint8_t *buf;
        const hvd_xmember_t *m;
        size_t nm;
        const uint64_t *mend;
        uint8_t *tmp;
        uint64_t n, blk;
        int C, c;
        double scale;
        uint64_t len[2 * HVD_RING_MAX_STEPS]; /* bytes of each step's blocks, send then receive */
        uint64_t done[HVD_RING_MAX_STEPS];    /* bytes of step t's received block reduced or in place */
} ring_t;

static inline uint64_t ring_b0(const ring_t *g, int i) {
        return HVD_MIN((uint64_t) i * g->blk, g->n);
}

static inline uint64_t ring_bl(const ring_t *g, int i) {
        return HVD_MIN(ring_b0(g, i) + g->blk, g->n) - ring_b0(g, i);
}

/* blocks sent and received at step t (reduce-scatter for t < C-1) */
static inline int ring_sb(const ring_t *g, int t) {
        return t < g->C - 1 ? (g->c - t + g->C) % g->C : (g->c + 1 - (t - (g->C - 1)) + g->C) % g->C;
}

static inline int ring_rb(const ring_t *g, int t) {
        return t < g->C - 1 ? (g->c - t - 1 + 2 * g->C) % g->C : (g->c - (t - (g->C - 1)) + g->C) % g->C;
}

/* Byte `at` of the buffer, and in *contig how many bytes follow it there. */
static uint8_t *ring_ptr(const ring_t *g, uint64_t at, uint64_t *contig) {
        if (g->buf) {
                *contig = g->n * g->es - at;
                return g->buf + at;
        }
        size_t lo = 0, hi = g->nm; /* the first member ending after at */
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (g->mend[mid] > at)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        uint64_t beg = lo ? g->mend[lo - 1] : 0;
        *contig = g->mend[lo] - at;
        return (uint8_t *) g->m[lo].out + (at - beg);
}

static const uint8_t *ring_send_at(void *ud, size_t seg, uint64_t off, uint64_t *ready) {
        ring_t *g = ud;
        int t = (int) seg;
        /* step t sends what step t-1 received (done: see hvd_tcp_stream_t.concurrent) */
        uint64_t have = t == 0 ? g->len[0] : __atomic_load_n(&g->done[t - 1], __ATOMIC_ACQUIRE);
        uint64_t contig;
        const uint8_t *p = ring_ptr(g, ring_b0(g, ring_sb(g, t)) * g->es + off, &contig);
        *ready = have > off ? HVD_MIN(have - off, contig) : 0;
        return p;
}

static uint8_t *ring_recv_at(void *ud, size_t seg, uint64_t off, uint64_t *room) {
        ring_t *g = ud;
        int t = (int) seg;
        if (t < g->C - 1) {
                *room = g->len[HVD_RING_MAX_STEPS + t] - off;
                return g->tmp + off; /* reduced frame by frame before the next step reuses it */
        }
        return ring_ptr(g, ring_b0(g, ring_rb(g, t)) * g->es + off, room);
}

static int ring_received(void *ud, size_t seg, uint64_t off, uint64_t len, char *err, size_t err_len) {
        (void) err;
        (void) err_len;
        ring_t *g = ud;
        int t = (int) seg;
        if (t < g->C - 1) {
                uint64_t at = ring_b0(g, ring_rb(g, t)) * g->es + off;
                for (uint64_t k = 0; k < len;) {
                        uint64_t contig;
                        uint8_t *dst = ring_ptr(g, at + k, &contig);
                        uint64_t l = HVD_MIN(contig, len - k);
                        const void *srcs[2] = { dst, g->tmp + off + k };
                        hvd_reduce_n(g->dt, g->op, dst, srcs, 2, l / g->es, 1.0);
                        if (t == g->C - 2 && g->scale != 1.0) /* my block is complete: scale it once */
                                hvd_scale_copy(g->dt, dst, dst, l / g->es, g->scale);
                        k += l;
                }
        }
        __atomic_store_n(&g->done[t], off + len, __ATOMIC_RELEASE);
        return 0;
}

/* The ring over buf (n elements), or over the outputs of op's members
 * end to end (buf NULL; every member has an output). */
static int ring_run(hvd_backend_t *b, hvd_dtype_t dt, hvd_reduce_op_t op, uint8_t *buf, const hvd_xop_t *xop,
                    uint64_t n, double scale, char *err, size_t err_len) {
        int C = b->cross_size, c = b->cross_rank;
        if (2 * (C - 1) > HVD_RING_MAX_STEPS) {
                snprintf(err, err_len, "%d nodes: the CPU ring supports at most %d", C, HVD_RING_MAX_STEPS / 2 + 1);
                return -EINVAL;
        }
        if (!b->ring && !(b->ring = malloc(sizeof *b->ring)))
                return -ENOMEM;
        ring_t *g = b->ring;
        *g = (ring_t){
                .dt = dt, .op = op, .es = hvd_dtype_size(dt), .buf = buf, .n = n, .C = C, .c = c, .scale = scale
        };
        if (!buf) {
                if (xop->n > b->mend_cap) {
                        uint64_t *p = realloc(b->mend, xop->n * sizeof *p);
                        if (!p)
                                return -ENOMEM;
                        b->mend = p;
                        b->mend_cap = xop->n;
                }
                uint64_t at = 0;
                for (size_t i = 0; i < xop->n; i++)
                        b->mend[i] = at += xop->m[i].count * g->es;
                g->m = xop->m;
                g->nm = xop->n;
                g->mend = b->mend;
        }
        g->blk = (n + (uint64_t) C - 1) / (uint64_t) C;
        if (!(g->tmp = scratch_get(b, g->blk * g->es > 0 ? g->blk * g->es : 1)))
                return -ENOMEM;
        int steps = 2 * (C - 1);
        for (int t = 0; t < steps; t++) {
                g->len[t] = ring_bl(g, ring_sb(g, t)) * g->es;
                g->len[HVD_RING_MAX_STEPS + t] = ring_bl(g, ring_rb(g, t)) * g->es;
        }
        if (steps == 0)
                return 0;
        hvd_tcp_stream_t s = {
                .to = b->node_peer[(c + 1) % C],
                .from = b->node_peer[(c + C - 1) % C],
                .n_send = (size_t) steps,
                .n_recv = (size_t) steps,
                .send_len = g->len,
                .recv_len = g->len + HVD_RING_MAX_STEPS,
                .send_at = ring_send_at,
                .recv_at = ring_recv_at,
                .received = ring_received,
                .ud = g,
                .concurrent = true,
        };
        return hvd_tcp_stream(b->tcp, &s, err, err_len);
}

static int ring_allreduce(hvd_backend_t *b, hvd_dtype_t dt, hvd_reduce_op_t op, uint8_t *buf, uint64_t n, double scale,
                          char *err, size_t err_len) {
        return ring_run(b, dt, op, buf, NULL, n, scale, err, err_len);
}

/* Allreduce with one rank on this node: no shared memory to go through.
 * Inputs are copied (prescaled) to the outputs unless in place, and the
 * ring runs on the outputs themselves, end to end: the fused buffer is
 * never materialised, and every byte is read and written once by the ring.
 * The ring is pipelined inside (hvd_tcp_stream), so no chunking either. */
static int execute_reduce_direct(hvd_backend_t *b, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t total = 0;
        hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
        for (size_t i = 0; i < op->n; i++) {
                const hvd_xmember_t *m = &op->m[i];
                total += m->count;
                if (!m->in)
                        memset(m->out, 0, m->count * es);
                else if (m->in != m->out || op->prescale != 1.0)
                        hvd_scale_copy(op->dtype, m->out, m->in, m->count, op->prescale);
        }
        hvd_xop_phase(op, HVD_TL_PHASE_NETWORK);
        int r = ring_run(b, op->dtype, op->reduce_op, NULL, op, total, reduce_scale(op, b->g_size), err, err_len);
        hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
        if (r < 0)
                hvd_backend_abort(b, err);
        return r;
}

/* Hierarchical allreduce: shared-memory reduce inside the node (each of
 * the first lmin local ranks owns a slice), the ring across nodes per slice
 * (every such local rank drives the network at once), copy-out from shared
 * memory. */
static int execute_reduce_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        /* one ring over the whole tensor only when every node runs it so:
         * a node of several ranks cuts it into chunks, each its own ring,
         * and the nodes' rings must cut alike */
        if (b->lmax == 1 && op->kind == HVD__KIND__KIND_ALLREDUCE) {
                bool outs = true;
                for (size_t i = 0; i < op->n; i++)
                        outs = outs && op->m[i].out;
                if (outs)
                        return execute_reduce_direct(b, op, err, err_len);
        }
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t total = 0;
        for (size_t i = 0; i < op->n; i++)
                total += op->m[i].count;
        uint64_t chunk_bytes = b->ring_chunk_bytes ? HVD_MIN(b->ring_chunk_bytes, b->half_bytes) : b->half_bytes;
        uint64_t chunk = HVD_MAX((chunk_bytes / 64) * 64 / es, 1);
        double post = reduce_scale(op, b->g_size);
        int r;
        for (uint64_t c0 = 0; c0 < total; c0 += chunk) {
                uint64_t cl = HVD_MIN(chunk, total - c0);
                uint8_t *mine = slot_of(b, v, v->me);
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_IN);
                chunk_copy_in(op, mine, c0, cl, false, es);
                hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                uint64_t sl = (cl + (uint64_t) b->lmin - 1) / (uint64_t) b->lmin;
                sl = (sl + 15) & ~UINT64_C(15);
                if (v->me < b->lmin) {
                        uint64_t s0 = HVD_MIN((uint64_t) v->me * sl, cl), s1 = HVD_MIN(s0 + sl, cl);
                        if (s1 > s0) {
                                if (v->size > 1) {
                                        for (int k = 0; k < v->size; k++)
                                                b->srcs[k] = slot_of(b, v, k) + s0 * es;
                                        hvd_reduce_n(op->dtype, op->reduce_op, mine + s0 * es, b->srcs,
                                                     (size_t) v->size, s1 - s0, 1.0);
                                }
                                hvd_xop_phase(op, HVD_TL_PHASE_NETWORK);
                                r = ring_allreduce(b, op->dtype, op->reduce_op, mine + s0 * es, s1 - s0, post, err,
                                                   err_len);
                                hvd_xop_phase(op, HVD_TL_PHASE_COLLECTIVE);
                                if (r < 0) {
                                        hvd_backend_abort(b, err);
                                        return r;
                                }
                        }
                }
                if ((r = hvd_cpu_barrier(b, v, op->name, err, err_len)) < 0)
                        return r;
                hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                chunk_copy_out(b, v, op, c0, cl, sl, es, -1, false);
                if ((r = end_step(b, v, op->name, err, err_len)) < 0)
                        return r;
        }
        return 0;
}

/* reducescatter across nodes: the hierarchical allreduce into a buffer
 * kept for the next one (no allocation per operation once warm), then
 * each rank keeps its rows. */
static int execute_reducescatter_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err,
                                       size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        uint64_t total = 0;
        for (size_t i = 0; i < op->n; i++)
                total += op->m[i].count;
        size_t full_bytes = total * es > 0 ? total * es : 1, nm = op->n ? op->n : 1;
        if (full_bytes > b->rs_full_bytes) {
                uint8_t *p = realloc(b->rs_full, full_bytes);
                if (!p)
                        return -ENOMEM;
                b->rs_full = p;
                b->rs_full_bytes = full_bytes;
        }
        if (nm > b->rs_m_cap) {
                hvd_xmember_t *p = realloc(b->rs_m, nm * sizeof *p);
                if (!p)
                        return -ENOMEM;
                b->rs_m = p;
                b->rs_m_cap = nm;
        }
        hvd_xmember_t *tm = b->rs_m;
        uint8_t *full = b->rs_full;
        uint64_t off = 0;
        for (size_t i = 0; i < op->n; i++) {
                tm[i] = op->m[i];
                tm[i].out = full + off * es;
                off += op->m[i].count;
        }
        hvd_xop_t ar = *op;
        ar.kind = HVD__KIND__KIND_ALLREDUCE;
        ar.m = tm;
        int r = execute_reduce_multi(b, v, &ar, err, err_len);
        off = 0;
        for (size_t i = 0; i < op->n && r >= 0; off += op->m[i].count, i++) {
                const hvd_xmember_t *m = &op->m[i];
                int64_t start, nrows;
                hvd_reducescatter_rows(m->rows, b->g_size, b->g_rank, &start, &nrows);
                if (m->out)
                        hvd_copy(m->out, full + (off + (uint64_t) start * m->row_elems) * es,
                                 (size_t) nrows * m->row_elems * es);
        }
        return r;
}

/* Stream helpers: the concatenation of op members seen as one byte range. */
static void stream_gather(const hvd_xop_t *op, bool from_in, const uint64_t *len, uint64_t a, uint64_t e,
                          uint8_t *dst) {
        uint64_t off = 0;
        for (size_t i = 0; i < op->n && off < e; off += len[i], i++) {
                uint64_t x = HVD_MAX(a, off), y = HVD_MIN(e, off + len[i]);
                if (x >= y)
                        continue;
                const uint8_t *src = from_in ? op->m[i].in : op->m[i].out;
                if (src)
                        hvd_copy(dst + (x - a), src + (x - off), y - x);
                else
                        memset(dst + (x - a), 0, y - x);
        }
}

static void stream_scatter(const hvd_xop_t *op, const uint64_t *len, uint64_t a, uint64_t e, const uint8_t *src) {
        uint64_t off = 0;
        for (size_t i = 0; i < op->n && off < e; off += len[i], i++) {
                uint64_t x = HVD_MAX(a, off), y = HVD_MIN(e, off + len[i]);
                if (x < y && op->m[i].out)
                        hvd_copy((uint8_t *) op->m[i].out + (x - off), src + (x - a), y - x);
        }
}

#define PIECE_BYTES (UINT64_C(1) << 20)

/* broadcast across nodes: a pipelined chain over all ranks from the root. */
static int execute_broadcast_multi(hvd_backend_t *b, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        int N = b->g_size, me = b->g_rank, root = op->root;
        int pos = (me - root + N) % N, next = (me + 1) % N, prev = (me - 1 + N) % N;
        uint64_t *len = calloc(op->n ? op->n : 1, sizeof *len), total = 0;
        if (!len)
                return -ENOMEM;
        for (size_t i = 0; i < op->n; i++)
                total += len[i] = op->m[i].count * es;
        uint8_t *buf = scratch_get(b, 2 * PIECE_BYTES);
        int r = buf ? 0 : -ENOMEM;
        if (me == root)
                for (size_t i = 0; i < op->n; i++)
                        if (op->m[i].out && op->m[i].in != op->m[i].out)
                                memmove(op->m[i].out, op->m[i].in, len[i]);
        uint64_t pieces = (total + PIECE_BYTES - 1) / PIECE_BYTES;
        /* step k: send piece k-1 on while receiving piece k */
        for (uint64_t k = 0; k <= pieces && r >= 0; k++) {
                uint8_t *rbuf = buf + (k & 1) * PIECE_BYTES, *sbuf = buf + ((k + 1) & 1) * PIECE_BYTES;
                uint64_t ra = k * PIECE_BYTES, re = HVD_MIN(ra + PIECE_BYTES, total);
                uint64_t sa = (k - 1) * PIECE_BYTES, se = HVD_MIN(sa + PIECE_BYTES, total);
                bool send = k > 0 && pos < N - 1, recv = k < pieces && pos > 0;
                if (send && pos == 0)
                        stream_gather(op, false, len, sa, se, sbuf);
                r = hvd_tcp_sendrecv(b->tcp, next, sbuf, send ? se - sa : 0, prev, rbuf, recv ? re - ra : 0, err,
                                     err_len);
                if (r >= 0 && recv)
                        stream_scatter(op, len, ra, re, rbuf);
        }
        free(len);
        return r;
}

/* The allgather ring's stream: at step s rank me sends contribution
 * me-s and receives me-s-1, which it sends on at step s+1. */
typedef struct agring {
        uint8_t *stage;
        const uint64_t *boff;
        const uint64_t *len; /* [N-1] send, then [N-1] receive */
        uint64_t *done;      /* [N-1]: bytes of step s's contribution in */
        int N, me;
} agring_t;

static inline int agring_sb(const agring_t *g, int s) {
        return (g->me - s + g->N) % g->N;
}

static inline int agring_rb(const agring_t *g, int s) {
        return (g->me - s - 1 + 2 * g->N) % g->N;
}

static const uint8_t *agring_send_at(void *ud, size_t seg, uint64_t off, uint64_t *ready) {
        agring_t *g = ud;
        int s = (int) seg;
        uint64_t have = s == 0 ? g->len[0] : __atomic_load_n(&g->done[s - 1], __ATOMIC_ACQUIRE);
        *ready = have > off ? have - off : 0;
        return g->stage + g->boff[agring_sb(g, s)] + off;
}

static uint8_t *agring_recv_at(void *ud, size_t seg, uint64_t off, uint64_t *room) {
        agring_t *g = ud;
        int s = (int) seg;
        *room = g->len[g->N - 1 + s] - off;
        return g->stage + g->boff[agring_rb(g, s)] + off;
}

static int agring_received(void *ud, size_t seg, uint64_t off, uint64_t len, char *err, size_t err_len) {
        (void) err;
        (void) err_len;
        agring_t *g = ud;
        __atomic_store_n(&g->done[seg], off + len, __ATOMIC_RELEASE);
        return 0;
}

/* allgather across nodes: a ring over all ranks of whole contributions. */
static int execute_allgather_multi(hvd_backend_t *b, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        int N = b->g_size, me = b->g_rank, next = (me + 1) % N, prev = (me - 1 + N) % N;
        /* staging: rank j's contribution (its rows of every member) at boff[j] */
        uint64_t *boff = calloc((size_t) N + 1, sizeof *boff);
        if (!boff)
                return -ENOMEM;
        for (int j = 0; j < N; j++) {
                uint64_t l = 0;
                for (size_t i = 0; i < op->n; i++)
                        l += (uint64_t) op->m[i].rank_rows[j] * op->m[i].row_elems * es;
                boff[j + 1] = boff[j] + l;
        }
        /* one tensor: its output is laid out as the staging, so the ring
         * runs in it and nothing is copied but this rank's own rows */
        bool direct = op->n == 1 && op->m[0].out;
        uint8_t *stage = direct ? op->m[0].out : scratch_get(b, boff[N] ? boff[N] : 1);
        int r = stage ? 0 : -ENOMEM;
        if (r >= 0 && direct) {
                uint64_t l = boff[me + 1] - boff[me];
                if (op->m[0].in)
                        memmove(stage + boff[me], op->m[0].in, l);
                else
                        memset(stage + boff[me], 0, l);
        } else if (r >= 0) {
                uint64_t o = boff[me];
                for (size_t i = 0; i < op->n; i++) {
                        uint64_t l = (uint64_t) op->m[i].rank_rows[me] * op->m[i].row_elems * es;
                        if (op->m[i].in)
                                hvd_copy(stage + o, op->m[i].in, l);
                        o += l;
                }
        }
        /* the N-1 steps as one pipelined stream: step s+1 forwards each
         * frame of what step s received as soon as it is in */
        uint64_t *lens = r >= 0 ? calloc(3 * (size_t) (N - 1) + 1, sizeof *lens) : NULL;
        if (r >= 0 && !lens)
                r = -ENOMEM;
        if (r >= 0) {
                agring_t g = { .stage = stage, .boff = boff, .N = N, .me = me, .done = lens + 2 * (N - 1) };
                for (int s = 0; s < N - 1; s++) {
                        lens[s] = boff[agring_sb(&g, s) + 1] - boff[agring_sb(&g, s)];
                        lens[N - 1 + s] = boff[agring_rb(&g, s) + 1] - boff[agring_rb(&g, s)];
                }
                hvd_tcp_stream_t st = {
                        .to = next,
                        .from = prev,
                        .n_send = (size_t) (N - 1),
                        .n_recv = (size_t) (N - 1),
                        .send_len = lens,
                        .recv_len = lens + (N - 1),
                        .send_at = agring_send_at,
                        .recv_at = agring_recv_at,
                        .received = agring_received,
                        .ud = &g,
                        .concurrent = true,
                };
                g.len = lens;
                r = hvd_tcp_stream(b->tcp, &st, err, err_len);
        }
        free(lens);
        for (size_t i = 0; i < op->n && r >= 0 && !direct; i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t row = m->row_elems * es, dst = 0;
                for (int j = 0; j < N; j++) {
                        uint64_t src = boff[j];
                        for (size_t k = 0; k < i; k++)
                                src += (uint64_t) op->m[k].rank_rows[j] * op->m[k].row_elems * es;
                        uint64_t l = (uint64_t) m->rank_rows[j] * row;
                        if (m->out)
                                hvd_copy((uint8_t *) m->out + dst, stage + src, l);
                        dst += l;
                }
        }
        free(boff);
        return r;
}

/* alltoall across nodes: pairwise exchanges, step s with rank me±s. */
static int execute_alltoall_multi(hvd_backend_t *b, const hvd_xop_t *op, char *err, size_t err_len) {
        size_t es = hvd_dtype_size(op->dtype);
        int N = b->g_size, me = b->g_rank, r = 0;
        for (size_t i = 0; i < op->n && r >= 0; i++) {
                const hvd_xmember_t *m = &op->m[i];
                uint64_t row = m->row_elems * es;
#define SPL(src, dst) ((uint64_t) m->splits[(size_t) (src) *N + (dst)])
                for (int s = 0; s < N && r >= 0; s++) {
                        int to = (me + s) % N, from = (me - s + N) % N;
                        uint64_t soff = 0, roff = 0;
                        for (int d = 0; d < to; d++)
                                soff += SPL(me, d) * row;
                        for (int k = 0; k < from; k++)
                                roff += SPL(k, me) * row;
                        if (s == 0) {
                                hvd_copy((uint8_t *) m->out + roff, (const uint8_t *) m->in + soff, SPL(me, me) * row);
                                continue;
                        }
                        r = hvd_tcp_sendrecv(b->tcp, to, (const uint8_t *) m->in + soff, SPL(me, to) * row, from,
                                             (uint8_t *) m->out + roff, SPL(from, me) * row, err, err_len);
                }
#undef SPL
        }
        return r;
}

/* barrier across nodes: local barrier, a ring allreduce of one element per
 * node among the first local ranks (every node hears from every other),
 * local barrier. */
static int barrier_multi(hvd_backend_t *b, const view_t *v, char *err, size_t err_len) {
        int r = hvd_cpu_barrier(b, v, "barrier", err, err_len);
        if (r < 0)
                return r;
        if (v->me == 0) {
                uint8_t token[64] = { 0 };
                r = ring_allreduce(b, HVD_UINT8, HVD_REDUCE_SUM, token, (uint64_t) b->cross_size, 1.0, err, err_len);
                if (r < 0) {
                        hvd_backend_abort(b, err);
                        return r;
                }
        }
        return hvd_cpu_barrier(b, v, "barrier", err, err_len);
}

static int execute_multi(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, char *err, size_t err_len) {
        int r;
        switch (op->kind) {
        case HVD__KIND__KIND_BARRIER: return barrier_multi(b, v, err, err_len);
        case HVD__KIND__KIND_ALLREDUCE: return execute_reduce_multi(b, v, op, err, err_len);
        case HVD__KIND__KIND_REDUCESCATTER: return execute_reducescatter_multi(b, v, op, err, err_len);
        case HVD__KIND__KIND_BROADCAST: r = execute_broadcast_multi(b, op, err, err_len); break;
        case HVD__KIND__KIND_ALLGATHER: r = execute_allgather_multi(b, op, err, err_len); break;
        case HVD__KIND__KIND_ALLTOALL: r = execute_alltoall_multi(b, op, err, err_len); break;
        default:
                snprintf(err, err_len, "%s: operation kind %u not supported by the CPU backend", op->name, op->kind);
                return -EOPNOTSUPP;
        }
        if (r < 0)
                hvd_backend_abort(b, err);
        return r;
}

int hvd_backend_execute(hvd_backend_t *b, const hvd_xop_t *op, char *err, size_t err_len) {
        int r = wait_failed(b, op->name, err, err_len);
        if (r < 0)
                return r;
        hvd_tcp_begin_op(b->tcp);
        view_t v = { .me = b->rank, .size = b->size, .bar = &b->hdr->bar };
        if (op->process_set) {
                if (op->process_set >= HVD_MAX_PROCESS_SETS) {
                        snprintf(err, err_len, "%s: process set id %u out of range", op->name, op->process_set);
                        return -EINVAL;
                }
                if (b->cross_size > 1) {
                        for (size_t i = 0; i < op->n_set; i++)
                                if (b->rank_cross[op->set_ranks[i]] != b->cross_rank) {
                                        snprintf(err, err_len,
                                                 "%s: process set %u spans several hosts, which this version's CPU "
                                                 "data plane does not support",
                                                 op->name, op->process_set);
                                        return -EOPNOTSUPP;
                                }
                        /* members are all here: index them by local rank */
                        if (op->n_set > HVD_MAX_SET_LOCAL) {
                                snprintf(err, err_len, "%s: process set too large", op->name);
                                return -EINVAL;
                        }
                        for (size_t i = 0; i < op->n_set; i++)
                                b->set_local[i] = (uint32_t) b->rank_local[op->set_ranks[i]];
                        v.member = b->set_local;
                } else
                        v.member = op->set_ranks;
                v.set = true;
                v.size = (int) op->n_set;
                v.bar = &b->hdr->set_bar[op->process_set];
                v.me = -1;
                for (size_t i = 0; i < op->n_set; i++)
                        if ((int) op->set_ranks[i] == b->g_rank)
                                v.me = (int) i;
                if (v.me < 0)
                        return 0; /* not a member: nothing to do */
        }
        if (b->cross_size > 1 && !v.set)
                return execute_multi(b, &v, op, err, err_len);
        if (op->kind == HVD__KIND__KIND_BARRIER)
                return hvd_cpu_barrier(b, &v, "barrier", err, err_len);
        if (v.size == 1)
                return execute_solo(op);
        switch (op->kind) {
        case HVD__KIND__KIND_ALLREDUCE:
        case HVD__KIND__KIND_REDUCESCATTER: return execute_reduce(b, &v, op, err, err_len);
        case HVD__KIND__KIND_BROADCAST:
        case HVD__KIND__KIND_ALLGATHER:
        case HVD__KIND__KIND_ALLTOALL: return execute_stream(b, &v, op, err, err_len);
        default:
                snprintf(err, err_len, "%s: operation kind %u not supported by the CPU backend", op->name, op->kind);
                return -EOPNOTSUPP;
        }
}
