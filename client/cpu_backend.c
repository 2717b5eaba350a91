/* cpu_backend.c — the CPU data plane inside one node: a shared-memory
 * segment with one slot per local rank and a futex barrier, the
 * allreduce and reducescatter through it, and the dispatch of every
 * operation (byte streams: cpu_stream.c; across nodes: cpu_multi.c).
 * Fusion happens in the copy into the slot; reductions read every slot's
 * segment at once and write it once; results are copied out once.
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

#define SHM_MAGIC           UINT64_C(0x6876645f73686d37) /* "hvd_shm7" */
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
/* How long a barrier spins while the application does not wait (the spin
 * gate is closed): an application that submits and then waits at once
 * opens it within a few microseconds, and one that computes meanwhile
 * loses no more of its core. */
#define SPIN_GATE_GRACE_USEC 3
/* The shared-memory data plane's chunk: small enough that a chunk's slots
 * and the inputs it reads stay in a core's caches between the copy in, the
 * reduction and the copy out. On a 2-vCPU Intel Xeon (2 MiB of L2 a core,
 * 2026-12-07), in-place allreduces against 1 MiB chunks, alternating:
 * 256 KiB 1.06-1.15x faster at 64-256 MiB with 2 ranks and 1.06-1.23x
 * from 1 MiB with 4 on the 2 cores, but 0.93-0.96x at 1 MiB and 0.8-1.0x
 * at 32 MiB with 2; 512 KiB 1.04-1.08x faster from 1 to 32 MiB with 2
 * ranks (where both ranks' data stays in that machine's L3), 1.05-1.11x
 * beyond; broadcast with 256 KiB windows 1.18-1.71x faster at 512 KiB-4
 * MiB. So there: 256 KiB, and 512 KiB (CHUNK_CACHED) for an allreduce of
 * up to STREAM_BYTES where every local rank has a core. Elsewhere 1 MiB:
 * on an AMD EPYC machine it was the fastest or within the noise of it with
 * a core per rank (out-of-place allreduces under load, where 256 KiB read
 * 0.75x; docs/PERFORMANCE.md, "Shared-memory chunk size on one node"),
 * and no AMD machine has run the in-place comparison. */
#define CHUNK_BYTES       (UINT64_C(1) << 20)
#define CHUNK_BYTES_INTEL (UINT64_C(256) << 10)
#define CHUNK_CACHED      (UINT64_C(512) << 10)
/* Bytes of a chunk up to which every rank reduces the whole chunk itself
 * (one barrier per chunk) rather than its segment (two barriers, and each
 * byte touched fewer times: 4C bytes per rank for a chunk of C with 2
 * ranks against 5C, 4.5C with 4 against 7C, and each rank reduces 1/n of
 * the chunk): that saves a barrier where the data is too small for the
 * extra work to matter. Measured with 2 ranks on their own cores and 4 on
 * 2 cores: the segment path is 1.2-1.8x faster from 128 KiB to 32 MiB,
 * quiet or beside a CPU hog, once waits spin or yield rather than sleep. */
#define DIRECT_BYTES (64 * 1024)
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
 * the cores) while the spin gate is open, yields, then sleeps on a futex;
 * checks the abort flag, the caller's check function and the deadline
 * while it waits. */
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
        /* spin for a bounded time, not a count (a pause costs 10 to 140
         * cycles depending on the CPU), and the whole of it only while the
         * application waits: otherwise its threads compute, on the cores
         * a spin takes. A waiter that yields spins when the application
         * starts waiting. */
        bool may_spin = b->spin_usec && !cpu_shared(b, v);
        uint64_t start = hvd_now_usec(), last_check = start;
        for (;;) {
                if (may_spin) {
                        uint64_t spin_start = hvd_now_usec(), limit = HVD_MIN(SPIN_GATE_GRACE_USEC, b->spin_usec);
                        for (unsigned i = 0;; i++) {
                                if (atomic_load_explicit(&h->gen, memory_order_acquire) != gen)
                                        return 0;
                                cpu_relax();
                                if ((i & 63) == 63 && hvd_now_usec() - spin_start >= limit) {
                                        if (limit == b->spin_usec || !hvd_spin_gate_open(b->spin_gate))
                                                break;
                                        limit = b->spin_usec;
                                }
                        }
                        may_spin = limit < b->spin_usec; /* spun in full: not again */
                }
                int i = 0;
                for (; i < HVD_WAIT_YIELDS && !(may_spin && hvd_spin_gate_open(b->spin_gate)); i++) {
                        if (atomic_load_explicit(&h->gen, memory_order_acquire) != gen)
                                return 0;
                        sched_yield();
                }
                if (i < HVD_WAIT_YIELDS)
                        continue; /* the application waits now: spin */
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
        b->spin_gate = (const _Atomic uint32_t *) topo->spin_gate;
        /* cache-sized chunks (see CHUNK_BYTES) */
        bool intel = hvd_cpu_vendor() == HVD_CPU_INTEL;
        b->chunk_bytes = intel ? CHUNK_BYTES_INTEL : CHUNK_BYTES;
        b->chunk_cached = intel && size <= ncpu ? CHUNK_CACHED : 0;
        b->direct_bytes = DIRECT_BYTES;
        /* HVD_SHM_CHUNK_BYTES (local rank 0's, published in the header):
         * for tuning, and for tests of many chunks */
        if (topo->shm_chunk_bytes >= 4096) {
                b->chunk_bytes = topo->shm_chunk_bytes;
                b->chunk_cached = 0;
        }
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
        int r = hvd_cpu_multi_init(b, topo);
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
                b->hdr->chunk_cached = b->chunk_cached;
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
                b->chunk_cached = b->hdr->chunk_cached;
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
        free(b->set_rank);
        free(b->scratch);
        free(b->rs_full);
        free(b->rs_m);
        hvd_cpu_rsring_free(b->rsring);
        free(b->ring);
        free(b->mend);
        free(b);
        *bp = NULL;
}

/* ---- operations ---- */

/* Ends a step: the global view alternates halves (see the invariant at the
 * top); a process set has one region and fences it. */
int hvd_cpu_end_step(hvd_backend_t *b, const view_t *v, const char *what, char *err, size_t err_len) {
        if (v->set)
                return hvd_cpu_barrier(b, v, what, err, err_len);
        b->step++;
        return 0;
}

int hvd_cpu_unsupported(const hvd_xop_t *op, char *err, size_t err_len) {
        snprintf(err, err_len, "%s: operation kind %u not supported by the CPU backend", op->name, op->kind);
        return -EOPNOTSUPP;
}

double hvd_cpu_reduce_scale(const hvd_xop_t *op, int size) {
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
                                hvd_scale_copy(op->dtype, m->out, m->out, m->count, hvd_cpu_reduce_scale(op, 1));
                        } else
                                hvd_scale_copy(op->dtype, m->out, m->in, m->count,
                                               op->prescale * hvd_cpu_reduce_scale(op, 1));
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
void hvd_cpu_chunk_copy_in(const hvd_xop_t *op, uint8_t *slot, uint64_t c0, uint64_t cl, bool around, size_t es) {
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
void hvd_cpu_chunk_copy_out(hvd_backend_t *b, const view_t *v, const hvd_xop_t *op, uint64_t c0, uint64_t cl,
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
                hvd_cpu_chunk_copy_in(op, mine, c0, cl, false, es);
        else {
                hvd_cpu_chunk_copy_in(op, mine, c0, s0, around, es);
                hvd_cpu_chunk_copy_in(op, mine + s1 * es, c0 + s1, cl - s1, around, es);
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
        /* the chunk: while the data fits the caches, chunk_cached's where
         * there is one (the default chunk in use, not the autotuner's) */
        uint64_t chunk_bytes = b->chunk_cached && b->chunk_bytes == b->chunk_default && total * es <= STREAM_BYTES
                                       ? b->chunk_cached
                                       : b->chunk_bytes;
        uint64_t chunk = (HVD_MIN(b->half_bytes, chunk_bytes) / 64) * 64 / es;
        double post = hvd_cpu_reduce_scale(op, v->size);
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
                                uint64_t mine0, mine1;
                                hvd_reducescatter_elems(m, v->size, v->me, &mine0, &mine1);
                                mine0 += off;
                                mine1 += off;
                                uint64_t a = HVD_MAX(mine0, c0), e = HVD_MIN(mine1, c0 + cl);
                                if (a >= e || !m->out)
                                        continue;
                                for (int k = 0; k < v->size; k++)
                                        b->srcs[k] = slot_of(b, v, k) + (a - c0) * es;
                                hvd_reduce_n(op->dtype, op->reduce_op, (uint8_t *) m->out + (a - mine0) * es, b->srcs,
                                             (size_t) v->size, e - a, post);
                        }
                        if ((r = hvd_cpu_end_step(b, v, op->name, err, err_len)) < 0)
                                return r;
                        continue;
                }
                if (direct) {
                        /* the copy out, reducing as it goes */
                        hvd_xop_phase(op, HVD_TL_PHASE_COPY_OUT);
                        chunk_reduce_out(b, v, op, c0, cl, es, post, stream);
                        if ((r = hvd_cpu_end_step(b, v, op->name, err, err_len)) < 0)
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
                hvd_cpu_chunk_copy_out(b, v, op, c0, cl, seg, es, v->me, stream_apart);
                if ((r = hvd_cpu_end_step(b, v, op->name, err, err_len)) < 0)
                        return r;
        }
        if (sm)
                hvd_slot_mode_note(sm, total * es, hvd_now_usec() - t0);
        return 0;
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
                v.me = -1;
                for (size_t i = 0; i < op->n_set; i++)
                        if ((int) op->set_ranks[i] == b->g_rank)
                                v.me = (int) i;
                if (v.me < 0)
                        return 0; /* not a member (on any host): nothing to do */
                if (b->cross_size > 1) {
                        for (size_t i = 0; i < op->n_set; i++)
                                if (b->rank_cross[op->set_ranks[i]] != b->cross_rank)
                                        return hvd_cpu_execute_set(b, op, v.me, err, err_len);
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
        }
        if (b->cross_size > 1 && !v.set)
                return hvd_cpu_execute_multi(b, &v, op, err, err_len);
        if (op->kind == HVD__KIND__KIND_BARRIER)
                return hvd_cpu_barrier(b, &v, "barrier", err, err_len);
        if (v.size == 1)
                return execute_solo(op);
        switch (op->kind) {
        case HVD__KIND__KIND_ALLREDUCE:
        case HVD__KIND__KIND_REDUCESCATTER: return execute_reduce(b, &v, op, err, err_len);
        case HVD__KIND__KIND_BROADCAST:
        case HVD__KIND__KIND_ALLGATHER:
        case HVD__KIND__KIND_ALLTOALL: return hvd_cpu_execute_stream(b, &v, op, err, err_len);
        default: return hvd_cpu_unsupported(op, err, err_len);
        }
}
