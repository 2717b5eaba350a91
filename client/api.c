/* api.c — the public entry points of hvd.h that submit work: the
 * arguments of every collective are checked here (a bad one returns an
 * error and hvd_last_error() says why; nothing is queued), then the
 * request is queued for the background thread as one handle. Also the
 * thread's last error, and the getters that need nothing but G. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "crc32c.h"
#include "reduce.h"
#include "timeline.h"
#include "util.h"

static __thread char last_error[ERRLEN];

void hvd_last_error_set(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(last_error, sizeof last_error, fmt, ap);
        va_end(ap);
}

void hvd_last_error_clear(void) {
        last_error[0] = 0;
}

const char *hvd_last_error(void) {
        return last_error;
}

const char *hvd_version(void) {
        return PACKAGE_VERSION;
}

void hvd_request_init(hvd_request_t *req) {
        *req = (hvd_request_t) HVD_REQUEST_INIT;
}

#define TOPO_GETTER(fn, field)                                                                                         \
        int fn(void) {                                                                                                 \
                return hvd_is_initialized() ? G.field : HVD_ENOTINIT;                                                  \
        }
TOPO_GETTER(hvd_rank, rank)
TOPO_GETTER(hvd_size, size)
TOPO_GETTER(hvd_local_rank, local_rank)
TOPO_GETTER(hvd_local_size, local_size)
TOPO_GETTER(hvd_cross_rank, cross_rank)
TOPO_GETTER(hvd_cross_size, cross_size)

/* ---- submission ---- */

static int check_request(const hvd_request_t *q, uint32_t kind) {
        if (!q)
                return hvd_error(-EINVAL, "request is NULL");
        if (!q->name || !*q->name)
                return hvd_error(-EINVAL, "every collective needs a non-empty tensor name");
        if (strnlen(q->name, HVD_MAX_NAME_BYTES + 1) > HVD_MAX_NAME_BYTES)
                return hvd_error(-EINVAL, "tensor name longer than %d bytes", HVD_MAX_NAME_BYTES);
        char err[256];
        if (hvd_wire_validate_name(q->name, HVD_MAX_NAME_BYTES, "tensor name", err, sizeof err) < 0)
                return hvd_error(-EINVAL, "'%s': %s", q->name, err);
        if (strncmp(q->name, "__hvd.", 6) == 0)
                return hvd_error(-EINVAL, "tensor names starting with '__hvd.' are reserved ('%s')", q->name);
        if (!hvd_dtype_valid((uint32_t) q->dtype))
                return hvd_error(-EINVAL, "'%s': invalid dtype %d", q->name, (int) q->dtype);
        if (!hvd_reduce_op_valid((uint32_t) q->reduce_op))
                return hvd_error(-EINVAL, "'%s': invalid reduce op %d", q->name, (int) q->reduce_op);
        if (q->ndim < 0 || q->ndim > HVD_MAX_NDIM || (q->ndim && !q->shape))
                return hvd_error(-EINVAL, "'%s': ndim must be 0..%d with a shape", q->name, HVD_MAX_NDIM);
        uint64_t e = 1;
        for (int d = 0; d < q->ndim; d++) {
                if (q->shape[d] < 0)
                        return hvd_error(-EINVAL, "'%s': negative dimension %" PRId64, q->name, q->shape[d]);
                if (q->shape[d] && e > (UINT64_C(1) << 50) / (uint64_t) q->shape[d])
                        return hvd_error(-EINVAL, "'%s': too many elements", q->name);
                e *= (uint64_t) q->shape[d];
        }
        const hvd_pset_t *ps = hvd_pset_get(q->process_set);
        int me = ps ? ps->me : G.rank; /* within the process set */
        if (e && !q->input && !(kind == HVD__KIND__KIND_BROADCAST && q->root != me))
                return hvd_error(-EINVAL, "'%s': input is NULL", q->name);
        if (e && !q->output && (kind == HVD__KIND__KIND_ALLREDUCE || kind == HVD__KIND__KIND_BROADCAST))
                return hvd_error(-EINVAL, "'%s': output is NULL", q->name);
        if ((kind == HVD__KIND__KIND_ALLGATHER || kind == HVD__KIND__KIND_ALLTOALL ||
             kind == HVD__KIND__KIND_REDUCESCATTER) &&
            q->ndim < 1)
                return hvd_error(-EINVAL, "'%s': needs at least one dimension", q->name);
        if (q->device < HVD_DEVICE_CPU)
                return hvd_error(-EINVAL, "'%s': invalid device %d", q->name, q->device);
        if (q->device != HVD_DEVICE_CPU && !G.gpu.g)
                return hvd_error(HVD_ENODEVICE, "'%s': device %d: %s", q->name, q->device,
                                 G.gpu.why[0] ? G.gpu.why : "no GPU data plane");
        if (q->device != HVD_DEVICE_CPU && q->device != G.gpu.device)
                return hvd_error(-EINVAL,
                                 "'%s': tensor on GPU %d, but this rank uses GPU %d (one GPU per rank: its local "
                                 "rank, or HVD_GPU_DEVICE)",
                                 q->name, q->device, G.gpu.device);
        int ss = G.size;
        if (q->process_set != 0) {
                if (!ps)
                        return hvd_error(-EINVAL, "'%s': process set %d does not exist", q->name, q->process_set);
                if (ps->me < 0)
                        return hvd_error(-EINVAL, "'%s': rank %d is not a member of process set %d", q->name, G.rank,
                                         q->process_set);
                ss = ps->n;
        }
        if (kind == HVD__KIND__KIND_BROADCAST && (q->root < 0 || q->root >= ss))
                return hvd_error(-EINVAL, "'%s': root rank %d out of range (size %d)", q->name, q->root, ss);
        if (kind == HVD__KIND__KIND_ALLTOALL && q->splits) {
                int64_t sum = 0;
                for (int r = 0; r < ss; r++) {
                        if (q->splits[r] < 0)
                                return hvd_error(-EINVAL, "'%s': negative split", q->name);
                        sum += q->splits[r];
                }
                if (sum != q->shape[0])
                        return hvd_error(-EINVAL, "'%s': splits sum to %" PRId64 ", the first dimension is %" PRId64,
                                         q->name, sum, q->shape[0]);
        }
        return 0;
}

static int fill_entry(hvd_entry_t *e, hvd_handle_t *h, const hvd_request_t *q, uint32_t kind, uint32_t gid,
                      uint32_t gsize) {
        e->h = h;
        e->name = strdup(q->name);
        if (!e->name)
                return -ENOMEM;
        e->in = q->input;
        e->out = q->output;
        e->stream = q->stream;
        e->p = (hvd_params_t){
                .kind = kind,
                .dtype = q->dtype,
                .ndim = q->ndim,
                .reduce_op = q->reduce_op,
                .prescale = q->prescale,
                .postscale = q->postscale,
                .root = q->root,
                .process_set = q->process_set,
                .device = q->device,
                .group_id = gid,
                .group_size = gsize,
        };
        if (q->ndim)
                memcpy(e->p.shape, q->shape, (size_t) q->ndim * sizeof(int64_t));
        const hvd_pset_t *ps = hvd_pset_get(q->process_set);
        int ss = ps ? ps->n : G.size;
        if (kind == HVD__KIND__KIND_ALLTOALL && q->splits) {
                e->p.splits = malloc((size_t) ss * sizeof(int64_t));
                if (!e->p.splits)
                        return -ENOMEM;
                memcpy(e->p.splits, q->splits, (size_t) ss * sizeof(int64_t));
                e->p.n_splits = (uint32_t) ss;
        }
        if (ps) {
                e->p.set_ranks = malloc((size_t) ps->n * sizeof(uint32_t));
                if (!e->p.set_ranks)
                        return -ENOMEM;
                memcpy(e->p.set_ranks, ps->ranks, (size_t) ps->n * sizeof(uint32_t));
                e->p.n_set = (uint32_t) ps->n;
        }
        return 0;
}

/* The id of a group of n requests in process set ps: derived from its
 * members' names, in any order, so that every rank gives the same group the
 * same id, and the same group the same id at every call (its members keep
 * their cache ids and may run from the fast path's board). Never 0 (no
 * group). Two groups in flight at once have different names, and so (but
 * for a 32-bit collision) different ids. */
static uint32_t group_id(const hvd_request_t *reqs, size_t n, int ps) {
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++) {
                /* CRC-32C: the same on every rank whatever its machine */
                uint64_t h = hvd_crc32c(0, reqs[i].name, strlen(reqs[i].name));
                h *= UINT64_C(0x9e3779b97f4a7c15); /* spreads it before the sum */
                sum += h ^ (h >> 29);
        }
        sum ^= ((uint64_t) (uint32_t) ps << 32) | (uint32_t) n;
        sum = (sum ^ (sum >> 33)) * UINT64_C(0xff51afd7ed558ccd);
        sum ^= sum >> 33;
        uint32_t id = (uint32_t) (sum ^ (sum >> 32));
        return id ? id : 1;
}

/* Queues n requests as one handle; G.lock is taken here. internal
 * requests (barrier, join, process-set agreement) skip the user-name
 * checks; waits: the caller waits for the handle at once. */
static int submit_ex(const hvd_request_t *reqs, size_t n, uint32_t kind, bool internal, bool waits,
                     hvd_handle_t **ret) {
        if (!ret)
                return hvd_error(-EINVAL, "handle pointer is NULL");
        if (!hvd_is_initialized())
                return hvd_error_not_initialized();
        if (!reqs)
                return hvd_error(-EINVAL, "request is NULL");
        if (n == 0 || n > HVD_WIRE_MAX_REQUESTS)
                return hvd_error(-EINVAL, "a group needs 1..%d requests", HVD_WIRE_MAX_REQUESTS);
        internal = internal || kind == HVD__KIND__KIND_BARRIER || kind == HVD__KIND__KIND_JOIN;
        hvd_handle_t *h = calloc(1, sizeof *h + n * sizeof(hvd_entry_t));
        if (!h)
                return hvd_error(-ENOMEM, "out of memory");
        h->n = n;
        h->refs = 1;
        pthread_mutex_lock(&G.lock);
        int ps = reqs[0].process_set > 0 && reqs[0].process_set < HVD_MAX_PROCESS_SETS ? reqs[0].process_set : 0;
        /* hvd_shutdown may have run since the check above: a late
         * submission fails here, before it touches the queue */
        int r = G.state == 1 ? 0 : hvd_error_not_initialized();
        for (size_t i = 0; i < n && r >= 0 && !internal; i++)
                r = check_request(&reqs[i], kind); /* under the lock: process sets may change */
        uint32_t gid = n > 1 && r >= 0 ? group_id(reqs, n, ps) : 0;
        for (size_t i = 0; i < n && r >= 0; i++)
                if (fill_entry(&h->m[i], h, &reqs[i], kind, gid, n > 1 ? (uint32_t) n : 0) < 0)
                        r = hvd_error(-ENOMEM, "out of memory");
        if (r >= 0 && G.abort_code)
                r = hvd_error(G.abort_code, "%s", G.abort_reason);
        /* each name enters the in-flight map as it is checked, so a name
         * the group repeats is found there too: one lookup a member */
        size_t entered = 0;
        for (; entered < n && r >= 0; entered++) {
                const char *nm = h->m[entered].name;
                size_t len = strlen(nm);
                if (hvd_strmap_get(G.inflight, nm, len)) {
                        r = hvd_error(HVD_EDUPLICATE, "'%s': a tensor with this name is already in flight on rank %d",
                                      nm, G.rank);
                        break;
                }
                if (hvd_strmap_put(G.inflight, nm, len, &h->m[entered]) < 0) {
                        r = hvd_error(-ENOMEM, "out of memory");
                        break;
                }
        }
        if (r >= 0 && G.n_queue + n > G.cap_queue) {
                size_t cap = HVD_MAX(G.cap_queue * 2, G.n_queue + n + 64);
                hvd_entry_t **nq = realloc(G.queue, cap * sizeof *nq);
                if (!nq)
                        r = hvd_error(-ENOMEM, "out of memory");
                else {
                        G.queue = nq;
                        G.cap_queue = cap;
                }
        }
        if (r < 0) {
                for (size_t i = 0; i < entered; i++)
                        hvd_strmap_remove(G.inflight, h->m[i].name, strlen(h->m[i].name));
                pthread_mutex_unlock(&G.lock);
                hvd_handle_free(h);
                return r;
        }
        for (size_t i = 0; i < n; i++)
                G.queue[G.n_queue++] = &h->m[i];
        h->n_pending = n;
        h->refs++; /* the in-flight reference */
        if (waits) /* the spin gate opens before the caller reaches its wait */
                hvd_handle_mark_waited(h);
        /* a caller about to wait takes the fast path's turn itself: no need
         * to wake the background thread for it (it is woken if need be) */
        bool quiet = waits && hvd_fp_user_may_run(h);
        if (!quiet)
                atomic_fetch_add(&G.submitted, 1);
        pthread_mutex_unlock(&G.lock);
        if (!quiet) {
                /* a background thread that is awake looks at the queue
                 * before it sleeps: no system call for it */
                if (atomic_exchange(&G.poll_armed, 0))
                        hvd_link_wake();
                hvd_fastpath_kick(G.fp);
        }
        *ret = h;
        return 0;
}

static int submit(const hvd_request_t *reqs, size_t n, uint32_t kind, hvd_handle_t **ret) {
        return submit_ex(reqs, n, kind, false, false, ret);
}

int hvd_allreduce_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_ALLREDUCE, handle);
}

int hvd_allreduce_async_waiting(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit_ex(req, 1, HVD__KIND__KIND_ALLREDUCE, false, true, handle);
}
int hvd_broadcast_async_waiting(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit_ex(req, 1, HVD__KIND__KIND_BROADCAST, false, true, handle);
}
int hvd_allgather_async_waiting(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit_ex(req, 1, HVD__KIND__KIND_ALLGATHER, false, true, handle);
}
int hvd_reducescatter_async_waiting(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit_ex(req, 1, HVD__KIND__KIND_REDUCESCATTER, false, true, handle);
}
int hvd_alltoall_async_waiting(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit_ex(req, 1, HVD__KIND__KIND_ALLTOALL, false, true, handle);
}
int hvd_broadcast_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_BROADCAST, handle);
}
int hvd_allgather_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_ALLGATHER, handle);
}
int hvd_alltoall_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_ALLTOALL, handle);
}
int hvd_reducescatter_async(const hvd_request_t *req, hvd_handle_t **handle) {
        return submit(req, 1, HVD__KIND__KIND_REDUCESCATTER, handle);
}
int hvd_grouped_allreduce_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit(reqs, n, HVD__KIND__KIND_ALLREDUCE, handle);
}
int hvd_grouped_allgather_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit(reqs, n, HVD__KIND__KIND_ALLGATHER, handle);
}
int hvd_grouped_reducescatter_async(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit(reqs, n, HVD__KIND__KIND_REDUCESCATTER, handle);
}
int hvd_grouped_allreduce_async_waiting(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit_ex(reqs, n, HVD__KIND__KIND_ALLREDUCE, false, true, handle);
}
int hvd_grouped_allgather_async_waiting(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit_ex(reqs, n, HVD__KIND__KIND_ALLGATHER, false, true, handle);
}
int hvd_grouped_reducescatter_async_waiting(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle) {
        return submit_ex(reqs, n, HVD__KIND__KIND_REDUCESCATTER, false, true, handle);
}

int hvd_request_run(const hvd_request_t *req, uint32_t kind, bool internal, int *result) {
        hvd_handle_t *h = NULL;
        int r = submit_ex(req, 1, kind, internal, true, &h);
        if (r < 0)
                return r;
        r = hvd_handle_wait(h);
        if (result)
                *result = h->result;
        hvd_handle_release(&h);
        return r;
}

static int run_sync(const hvd_request_t *req, uint32_t kind, int *result) {
        return hvd_request_run(req, kind, false, result);
}

int hvd_allreduce(const char *name, const void *input, void *output, size_t count, hvd_dtype_t dtype,
                  hvd_reduce_op_t op) {
        int64_t shape[1] = { (int64_t) count };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = input;
        q.output = output;
        q.dtype = dtype;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = op;
        return run_sync(&q, HVD__KIND__KIND_ALLREDUCE, NULL);
}

int hvd_broadcast(const char *name, void *buffer, size_t count, hvd_dtype_t dtype, int root) {
        int64_t shape[1] = { (int64_t) count };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = buffer;
        q.output = buffer;
        q.dtype = dtype;
        q.ndim = 1;
        q.shape = shape;
        q.root = root;
        return run_sync(&q, HVD__KIND__KIND_BROADCAST, NULL);
}

int hvd_barrier(void) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = HVD_BARRIER_NAME;
        return run_sync(&q, HVD__KIND__KIND_BARRIER, NULL);
}

int hvd_join(void) {
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = HVD_JOIN_NAME;
        int last = -1;
        int r = run_sync(&q, HVD__KIND__KIND_JOIN, &last);
        return r < 0 ? r : last;
}

/* ---- the timeline ---- */

int hvd_start_timeline(const char *file, int mark_cycles) {
        if (!hvd_is_initialized())
                return hvd_error(HVD_ENOTINIT, "hvd_start_timeline: call hvd_init first");
        if (!file || !*file)
                return hvd_error(-EINVAL, "hvd_start_timeline: no file name given");
        if (G.rank != 0)
                return 0; /* rank 0 alone writes the job's timeline */
        char err[ERRLEN];
        int r = hvd_timeline_start(file, mark_cycles != 0, false, err, sizeof err);
        if (r < 0)
                return hvd_error(r, "%s", err);
        hvd_link_wake();
        /* the coordinator hears of it before this rank's next tensors, so
         * their readiness times are recorded */
        hvd_timeline_wait_told(2 * USEC_PER_SEC);
        return 0;
}

int hvd_tuning_get(hvd_tuning_t *out) {
        if (!out)
                return hvd_error(-EINVAL, "hvd_tuning_get: out is NULL");
        if (!hvd_is_initialized())
                return hvd_error(HVD_ENOTINIT, "hvd_tuning_get: call hvd_init first");
        pthread_mutex_lock(&G.lock);
        *out = (hvd_tuning_t){
                .generation = G.tune_generation,
                .schedule_seq = G.tune_seq,
                .fusion_threshold_bytes = G.fusion_threshold,
                .cycle_time_usec = __atomic_load_n(&G.cycle_time_usec, __ATOMIC_RELAXED),
                .switches = G.tune_switches,
        };
        pthread_mutex_unlock(&G.lock);
        return 0;
}

int hvd_stop_timeline(void) {
        if (!hvd_is_initialized())
                return hvd_error(HVD_ENOTINIT, "hvd_stop_timeline: call hvd_init first");
        int r = hvd_timeline_stop();
        hvd_link_wake();
        if (r < 0)
                return hvd_error(r, "hvd_stop_timeline: writing the timeline failed: %s", hvd_strerror(r));
        return 0;
}
