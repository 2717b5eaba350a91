/* hvdmodule.c — hvd._core, the CPython extension under the `hvd` package: a
 * thin layer over libhvd's public API (hvd.h) that takes raw data pointers,
 * dtype codes and shapes from Python, so it needs neither torch nor numpy
 * headers. The Python side keeps the arrays alive; a Handle (handle.c)
 * holds a reference to whatever it is given until the operation has
 * completed, even when the Handle itself is dropped early. The GIL is
 * released around every call that waits. This file holds the module's
 * table, submit, the calls that block every rank, process sets and the
 * pools; the prepared requests are prepared.c's. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* configure's; a build by pip (python-binding/setup.py) has none, and no NCCL */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "c10_counts.h"
#include "core.h"
#include "reuse_pick.h"

/* The NCCL version this module was built against, for hvd.nccl_built()
 * (NCCL_VERSION_CODE, as Horovod reports it; 0 without NCCL). nccl.h
 * declares f() functions without prototypes. */
#ifdef HAVE_NCCL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#define HVD_NCCL_VERSION_CODE NCCL_VERSION_CODE
#else
#define HVD_NCCL_VERSION_CODE 0
#endif

/* libhvd exports the process-set calls (libhvd.sym, version HVD_0.1).
 * They are bound weakly all the same, so that this module still imports
 * against a libhvd built before they existed, and reports that process
 * sets are not available there (has_process_sets below). */
#pragma weak hvd_add_process_set
#pragma weak hvd_remove_process_set
#pragma weak hvd_process_set_rank
#pragma weak hvd_process_set_size
#pragma weak hvd_process_set_included
#pragma weak hvd_process_set_ranks

/* ---- blocking calls that stay interruptible ----
 * hvd_join, hvd_barrier and the process-set calls block until every rank
 * has made them. They run on a helper thread while the Python thread waits
 * in slices and checks for signals, so Ctrl-C (or an alarm) still works
 * when a rank never arrives. An interrupted call is abandoned: its thread
 * finishes on its own and frees the state. */

typedef struct blocking {
        int (*fn)(struct blocking *b);
        const int *ranks; /* add_process_set: owned (free()) */
        size_t n_ranks;
        int id;
        int result;
        char error[512];
        int done, abandoned;
        pthread_mutex_t lock;
        pthread_cond_t cond;
} blocking_t;

static void blocking_free(blocking_t *b) {
        pthread_mutex_destroy(&b->lock);
        pthread_cond_destroy(&b->cond);
        free((void *) b->ranks);
        free(b);
}

static void *blocking_main(void *arg) {
        blocking_t *b = arg;
        int r = b->fn(b);

        pthread_mutex_lock(&b->lock);
        b->result = r;
        if (r < 0)
                snprintf(b->error, sizeof b->error, "%s", hvd_last_error()); /* thread-local: copy it here */
        b->done = 1;
        int abandoned = b->abandoned;
        pthread_cond_signal(&b->cond);
        pthread_mutex_unlock(&b->lock);
        if (abandoned)
                blocking_free(b);
        return NULL;
}

/* Runs b->fn on a helper thread and waits. Returns 0 with b->result set
 * (b still owned by the caller), or -1 with a Python exception when a
 * signal handler raised (b then belongs to the helper thread). */
static int run_blocking(blocking_t *b) {
        pthread_t thread;

        if (pthread_create(&thread, NULL, blocking_main, b) != 0) {
                /* no thread: wait without interruption */
                PyThreadState *gil = PyEval_SaveThread();
                blocking_main(b);
                PyEval_RestoreThread(gil);
                return 0;
        }
        pthread_detach(thread);
        for (;;) {
                int done;
                PyThreadState *gil = PyEval_SaveThread();
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += WAIT_SLICE_USEC * 1000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_mutex_lock(&b->lock);
                if (!b->done)
                        pthread_cond_timedwait(&b->cond, &b->lock, &ts);
                done = b->done;
                pthread_mutex_unlock(&b->lock);
                PyEval_RestoreThread(gil);
                if (done)
                        return 0;
                if (PyErr_CheckSignals() < 0) {
                        pthread_mutex_lock(&b->lock);
                        done = b->done;
                        b->abandoned = !done;
                        pthread_mutex_unlock(&b->lock);
                        if (done)
                                blocking_free(b);
                        return -1;
                }
        }
}

/* Runs fn; returns its result (>= 0) or raises and returns -1. */
static int call_blocking(int (*fn)(blocking_t *b), const int *ranks, size_t n_ranks, int id) {
        blocking_t *b = calloc(1, sizeof *b);

        if (!b) {
                free((void *) ranks);
                PyErr_NoMemory();
                return -1;
        }
        b->fn = fn;
        b->ranks = ranks;
        b->n_ranks = n_ranks;
        b->id = id;
        if (pthread_mutex_init(&b->lock, NULL) != 0 || pthread_cond_init(&b->cond, NULL) != 0) {
                free((void *) ranks);
                free(b);
                PyErr_SetString(PyExc_RuntimeError, "cannot create a mutex");
                return -1;
        }
        if (run_blocking(b) < 0)
                return -1;
        int r = b->result;
        if (r < 0)
                hvd_py_raise_error(r, b->error);
        blocking_free(b);
        return r < 0 ? -1 : r;
}

static int do_join(blocking_t *b) {
        return hvd_join();
}
static int do_barrier(blocking_t *b) {
        return hvd_barrier();
}
static int do_add_process_set(blocking_t *b) {
        return hvd_add_process_set(b->ranks, b->n_ranks);
}
static int do_remove_process_set(blocking_t *b) {
        return hvd_remove_process_set(b->id);
}

/* ---- module functions ---- */

static PyObject *core_init(PyObject *mod, PyObject *unused) {
        int r;

        /* hvd_init waits for every rank of the job to join. */
        PyThreadState *gil = PyEval_SaveThread();
        r = hvd_init();
        PyEval_RestoreThread(gil);
        if (r < 0)
                return hvd_py_raise_last_error(r);
        Py_RETURN_NONE;
}

static PyObject *core_shutdown(PyObject *mod, PyObject *unused) {
        int r;

        PyThreadState *gil = PyEval_SaveThread();
        r = hvd_shutdown();
        PyEval_RestoreThread(gil);
        hvd_py_reap_orphans();
        if (r < 0 && r != HVD_ENOTINIT)
                return hvd_py_raise_last_error(r);
        Py_RETURN_NONE;
}

static PyObject *core_rank_source(PyObject *mod, PyObject *unused) {
        return PyUnicode_FromString(hvd_rank_source());
}

static PyObject *core_is_initialized(PyObject *mod, PyObject *unused) {
        return PyBool_FromLong(hvd_is_initialized() > 0);
}

static PyObject *topology(int v) {
        if (v < 0)
                return hvd_py_raise_error(v, "");
        return PyLong_FromLong(v);
}

static PyObject *core_rank(PyObject *mod, PyObject *unused) {
        return topology(hvd_rank());
}
static PyObject *core_size(PyObject *mod, PyObject *unused) {
        return topology(hvd_size());
}
static PyObject *core_local_rank(PyObject *mod, PyObject *unused) {
        return topology(hvd_local_rank());
}
static PyObject *core_local_size(PyObject *mod, PyObject *unused) {
        return topology(hvd_local_size());
}
static PyObject *core_cross_rank(PyObject *mod, PyObject *unused) {
        return topology(hvd_cross_rank());
}
static PyObject *core_cross_size(PyObject *mod, PyObject *unused) {
        return topology(hvd_cross_size());
}

/* (generation, sync needed, workers waiting) of this rank's elastic job. */
static PyObject *core_elastic_info(PyObject *mod, PyObject *unused) {
        return Py_BuildValue("(KOi)", (unsigned long long) hvd_elastic_generation(),
                             hvd_elastic_sync_needed() ? Py_True : Py_False, hvd_elastic_waiting());
}

static int has_process_sets(void) {
        return hvd_add_process_set && hvd_remove_process_set && hvd_process_set_rank && hvd_process_set_size &&
               hvd_process_set_included && hvd_process_set_ranks;
}

static PyObject *no_process_sets(void) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "process sets are not available: this libhvd does not provide hvd_add_process_set()");
        return NULL;
}

int hvd_py_set_size(int ps) {
        if (ps == 0)
                return hvd_size();
        if (!has_process_sets())
                return -EOPNOTSUPP;
        return hvd_process_set_size(ps);
}

/* Converts a sequence of Python ints to n int64 values. */
static int int64_seq(PyObject *seq, const char *what, int64_t *out, Py_ssize_t max, Py_ssize_t *n) {
        PyObject *fast = PySequence_Fast(seq, what);
        if (!fast)
                return -1;
        Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
        if (len > max) {
                PyErr_Format(PyExc_ValueError, "%s has %zd entries, at most %zd are allowed", what, len, max);
                Py_DECREF(fast);
                return -1;
        }
        for (Py_ssize_t i = 0; i < len; i++) {
                long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
                if (v == -1 && PyErr_Occurred()) {
                        Py_DECREF(fast);
                        return -1;
                }
                out[i] = v;
        }
        Py_DECREF(fast);
        *n = len;
        return 0;
}

/* One request tuple: (name, input, output, dtype, shape, reduce_op,
 * prescale, postscale, root, splits, process_set, device[, stream]).
 * stream: the cudaStream_t (an int, 0 = the legacy default stream) the
 * input of a GPU request is produced on. shape and splits point into the
 * caller-provided storage. */
int hvd_py_parse_request(PyObject *t, hvd_request_t *q, int64_t *shape, int64_t *splits, Py_ssize_t max_splits,
                         int *n_splits) {
        PyObject *name, *in_obj, *out_obj, *shape_obj, *splits_obj, *stream_obj = Py_None;
        int dtype, reduce_op, root, process_set, device;
        double prescale, postscale;
        Py_ssize_t ndim = 0, ns = 0;

        if (!PyTuple_Check(t)) {
                PyErr_SetString(PyExc_TypeError, "a request is a tuple");
                return -1;
        }
        if (!PyArg_ParseTuple(t, "UOOiOiddiOii|O:request", &name, &in_obj, &out_obj, &dtype, &shape_obj, &reduce_op,
                              &prescale, &postscale, &root, &splits_obj, &process_set, &device, &stream_obj))
                return -1;
        hvd_request_init(q);
        q->name = PyUnicode_AsUTF8(name);
        if (!q->name)
                return -1;
        q->input = in_obj == Py_None ? NULL : PyLong_AsVoidPtr(in_obj);
        q->output = out_obj == Py_None ? NULL : PyLong_AsVoidPtr(out_obj);
        q->stream = stream_obj == Py_None ? NULL : PyLong_AsVoidPtr(stream_obj);
        if (PyErr_Occurred())
                return -1;
        q->dtype = (hvd_dtype_t) dtype;
        if (int64_seq(shape_obj, "shape", shape, HVD_MAX_NDIM, &ndim) < 0)
                return -1;
        q->ndim = (int) ndim;
        q->shape = shape;
        q->reduce_op = (hvd_reduce_op_t) reduce_op;
        q->prescale = prescale;
        q->postscale = postscale;
        q->root = root;
        q->process_set = process_set;
        q->device = device;
        *n_splits = 0;
        if (splits_obj != Py_None) {
                if (int64_seq(splits_obj, "splits", splits, max_splits, &ns) < 0)
                        return -1;
                q->splits = splits;
                *n_splits = (int) ns;
        }
        return 0;
}

typedef int (*group_fn)(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);

const submit_fn hvd_py_submit_waiting[_KIND_COUNT] = {
        [KIND_ALLREDUCE] = hvd_allreduce_async_waiting,         [KIND_BROADCAST] = hvd_broadcast_async_waiting,
        [KIND_ALLGATHER] = hvd_allgather_async_waiting,         [KIND_ALLTOALL] = hvd_alltoall_async_waiting,
        [KIND_REDUCESCATTER] = hvd_reducescatter_async_waiting,
};

const submit_fn hvd_py_submit_async[_KIND_COUNT] = {
        [KIND_ALLREDUCE] = hvd_allreduce_async,         [KIND_BROADCAST] = hvd_broadcast_async,
        [KIND_ALLGATHER] = hvd_allgather_async,         [KIND_ALLTOALL] = hvd_alltoall_async,
        [KIND_REDUCESCATTER] = hvd_reducescatter_async,
};

static PyObject *core_submit(PyObject *mod, PyObject *args, PyObject *kwds) {
        static char *kwlist[] = { "kind", "requests", "keepalive", "grouped", "waits", NULL };
        static const group_fn grouped_fns[_KIND_COUNT] = {
                [KIND_ALLREDUCE] = hvd_grouped_allreduce_async,
                [KIND_ALLGATHER] = hvd_grouped_allgather_async,
                [KIND_REDUCESCATTER] = hvd_grouped_reducescatter_async,
        };
        static const group_fn grouped_waiting[_KIND_COUNT] = {
                [KIND_ALLREDUCE] = hvd_grouped_allreduce_async_waiting,
                [KIND_ALLGATHER] = hvd_grouped_allgather_async_waiting,
                [KIND_REDUCESCATTER] = hvd_grouped_reducescatter_async_waiting,
        };
        int kind, grouped = 0, waits = 0;
        PyObject *requests, *keepalive = Py_None, *fast = NULL;
        HandleObject *self = NULL;

        if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO|Opp:submit", kwlist, &kind, &requests, &keepalive, &grouped,
                                         &waits))
                return NULL;
        if (kind < 0 || kind >= _KIND_COUNT || (grouped && !grouped_fns[kind])) {
                PyErr_Format(PyExc_ValueError, "unknown operation kind %d%s", kind, grouped ? " (grouped)" : "");
                return NULL;
        }
        hvd_py_reap_orphans();
        fast = PySequence_Fast(requests, "requests must be a sequence");
        if (!fast)
                return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
        if (n < 1 || (n > 1 && !grouped)) {
                PyErr_SetString(PyExc_ValueError,
                                grouped ? "a group needs at least one tensor" : "one request unless grouped");
                goto fail;
        }
        /* Splits are sized for the whole job: libhvd may read size() entries. */
        int world = hvd_size();
        Py_ssize_t max_splits = world > 0 ? world : 1;
        size_t per_req = sizeof(hvd_request_t) + (HVD_MAX_NDIM + (size_t) max_splits) * sizeof(int64_t);
        if ((size_t) n > SIZE_MAX / per_req) {
                PyErr_NoMemory();
                goto fail;
        }
        self = hvd_py_handle_new((size_t) n);
        if (!self)
                goto fail;
        self->mem = calloc((size_t) n, per_req);
        if (!self->mem) {
                PyErr_NoMemory();
                goto fail;
        }
        hvd_request_t *reqs = self->mem;
        int64_t *dims = (int64_t *) (reqs + n);
        for (Py_ssize_t i = 0; i < n; i++) {
                int64_t *shape = dims + (size_t) i * (HVD_MAX_NDIM + (size_t) max_splits);
                int n_splits;
                if (hvd_py_parse_request(PySequence_Fast_GET_ITEM(fast, i), &reqs[i], shape, shape + HVD_MAX_NDIM,
                                         max_splits, &n_splits) < 0)
                        goto fail;
        }
        if (kind == KIND_ALLTOALL) {
                int ss = hvd_py_set_size(reqs[0].process_set);
                self->n_ranks = ss > 0 ? ss : 0;
        }
        int r;
        hvd_handle_t *h = NULL;
        if (grouped)
                r = (waits ? grouped_waiting : grouped_fns)[kind](reqs, (size_t) n, &h);
        else
                r = (waits ? hvd_py_submit_waiting : hvd_py_submit_async)[kind](&reqs[0], &h);
        if (r < 0) {
                hvd_py_raise_last_error(r);
                goto fail;
        }
        self->h = h;
        Py_INCREF(keepalive);
        self->keepalive = keepalive;
        Py_DECREF(fast);
        return (PyObject *) self;
fail:
        Py_XDECREF(fast);
        Py_XDECREF(self);
        return NULL;
}

static PyObject *core_join(PyObject *mod, PyObject *unused) {
        hvd_py_reap_orphans();
        int r = call_blocking(do_join, NULL, 0, 0);
        return r < 0 ? NULL : PyLong_FromLong(r);
}

/* start_timeline(path, mark_cycles): rank 0 records (see hvd.h); the
 * others return at once. Waits briefly for the coordinator: no GIL. */
static PyObject *core_start_timeline(PyObject *mod, PyObject *args) {
        const char *path;
        int marks = 0, r;

        if (!PyArg_ParseTuple(args, "s|p", &path, &marks))
                return NULL;
        Py_BEGIN_ALLOW_THREADS r = hvd_start_timeline(path, marks);
        Py_END_ALLOW_THREADS if (r < 0) return r == -EINVAL || r == HVD_ENOTINIT
                ? hvd_py_raise_last_error(r)
                : PyErr_Format(PyExc_OSError, "%s", hvd_last_error());
        Py_RETURN_NONE;
}

static PyObject *core_stop_timeline(PyObject *mod, PyObject *unused) {
        int r;

        Py_BEGIN_ALLOW_THREADS r = hvd_stop_timeline();
        Py_END_ALLOW_THREADS if (r < 0) return r == HVD_ENOTINIT ? hvd_py_raise_last_error(r)
                                                                 : PyErr_Format(PyExc_OSError, "%s", hvd_last_error());
        Py_RETURN_NONE;
}

static PyObject *core_barrier(PyObject *mod, PyObject *unused) {
        hvd_py_reap_orphans();
        if (call_blocking(do_barrier, NULL, 0, 0) < 0)
                return NULL;
        Py_RETURN_NONE;
}

static PyObject *core_add_process_set(PyObject *mod, PyObject *arg) {
        PyObject *fast;
        int *ranks;

        if (!has_process_sets())
                return no_process_sets();
        fast = PySequence_Fast(arg, "ranks must be a sequence of ints");
        if (!fast)
                return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
        ranks = calloc(n ? (size_t) n : 1, sizeof(int));
        if (!ranks) {
                Py_DECREF(fast);
                return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < n; i++) {
                long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
                if (v == -1 && PyErr_Occurred()) {
                        free(ranks);
                        Py_DECREF(fast);
                        return NULL;
                }
                ranks[i] = v < INT_MIN || v > INT_MAX ? -1 : (int) v;
        }
        Py_DECREF(fast);
        /* collective: waits for the other ranks; the helper owns ranks now */
        int r = call_blocking(do_add_process_set, ranks, (size_t) n, 0);
        return r < 0 ? NULL : PyLong_FromLong(r);
}

static PyObject *core_remove_process_set(PyObject *mod, PyObject *arg) {
        int id;

        if (!has_process_sets())
                return no_process_sets();
        id = (int) PyLong_AsLong(arg);
        if (id == -1 && PyErr_Occurred())
                return NULL;
        if (call_blocking(do_remove_process_set, NULL, 0, id) < 0)
                return NULL;
        Py_RETURN_NONE;
}

/* Shared by process_set_rank/size/included: f(id) >= 0 or an error. */
static PyObject *process_set_query(PyObject *arg, int (*f)(int), int as_bool) {
        int id, r;

        if (!has_process_sets())
                return no_process_sets();
        id = (int) PyLong_AsLong(arg);
        if (id == -1 && PyErr_Occurred())
                return NULL;
        r = f(id);
        if (r < 0)
                return hvd_py_raise_error(r, r == -ENOENT ? "this process is not part of the process set"
                                                          : hvd_last_error());
        return as_bool ? PyBool_FromLong(r) : PyLong_FromLong(r);
}

static PyObject *core_process_set_rank(PyObject *mod, PyObject *arg) {
        return has_process_sets() ? process_set_query(arg, hvd_process_set_rank, 0) : no_process_sets();
}
static PyObject *core_process_set_size(PyObject *mod, PyObject *arg) {
        return has_process_sets() ? process_set_query(arg, hvd_process_set_size, 0) : no_process_sets();
}
static PyObject *core_process_set_included(PyObject *mod, PyObject *arg) {
        return has_process_sets() ? process_set_query(arg, hvd_process_set_included, 1) : no_process_sets();
}

static PyObject *core_process_set_ranks(PyObject *mod, PyObject *arg) {
        const int *ranks;
        size_t n;
        int id, r;

        if (!has_process_sets())
                return no_process_sets();
        id = (int) PyLong_AsLong(arg);
        if (id == -1 && PyErr_Occurred())
                return NULL;
        r = hvd_process_set_ranks(id, &ranks, &n);
        if (r < 0)
                return hvd_py_raise_error(r, hvd_last_error());
        PyObject *t = PyTuple_New((Py_ssize_t) n);
        if (!t)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                PyObject *v = PyLong_FromLong(ranks[i]);
                if (!v) {
                        Py_DECREF(t);
                        return NULL;
                }
                PyTuple_SET_ITEM(t, (Py_ssize_t) i, v);
        }
        return t;
}

static PyObject *core_has_process_sets(PyObject *mod, PyObject *unused) {
        return PyBool_FromLong(has_process_sets());
}

/* kept_buffer(nbytes) -> Buffer: writable memory for an operation's output,
 * from the pool of buffers whose earlier users have died (kept.h), or new.
 * Its contents are undefined. It goes back to the pool when the Buffer
 * dies, i.e. when the last tensor over it has. */
static PyObject *core_kept_buffer(PyObject *mod, PyObject *arg) {
        Py_ssize_t bytes = PyLong_AsSsize_t(arg);
        if (bytes == -1 && PyErr_Occurred())
                return NULL;
        if (bytes <= 0) {
                PyErr_Format(PyExc_ValueError, "kept_buffer: nbytes must be positive (got %zd)", bytes);
                return NULL;
        }
        hvd_kept_t *kept = hvd_kept_take((size_t) bytes);
        if (!kept)
                return PyErr_NoMemory();
        return hvd_py_buffer_new(kept->data, bytes, kept, false);
}

/* shared_buffer(nbytes) -> a Buffer of zero-filled shared tensor memory
 * (hvd_shared_alloc), freed when the Buffer dies */
static PyObject *core_shared_buffer(PyObject *mod, PyObject *arg) {
        Py_ssize_t bytes = PyLong_AsSsize_t(arg);
        if (bytes == -1 && PyErr_Occurred())
                return NULL;
        if (bytes < 0) {
                PyErr_Format(PyExc_ValueError, "shared_buffer: nbytes must not be negative (got %zd)", bytes);
                return NULL;
        }
        void *data = NULL;
        int r = hvd_shared_alloc((size_t) bytes, &data);
        if (r < 0) {
                if (r == -ENOMEM)
                        return PyErr_NoMemory();
                errno = -r;
                return PyErr_SetFromErrno(PyExc_OSError);
        }
        return hvd_py_buffer_new(data, bytes, NULL, true);
}

/* kept_stats() -> (bytes, count) the pool keeps; kept_drain() empties it */
static PyObject *core_kept_stats(PyObject *mod, PyObject *unused) {
        size_t bytes, count;
        hvd_kept_stats(&bytes, &count);
        return Py_BuildValue("(nn)", (Py_ssize_t) bytes, (Py_ssize_t) count);
}

static PyObject *core_kept_drain(PyObject *mod, PyObject *unused) {
        hvd_kept_drain();
        Py_RETURN_NONE;
}

static PyObject *core_dtype_size(PyObject *mod, PyObject *arg) {
        long dt = PyLong_AsLong(arg);
        if (dt == -1 && PyErr_Occurred())
                return NULL;
        return PyLong_FromSize_t(dt < 0 || dt >= _HVD_DTYPE_COUNT ? 0 : hvd_dtype_size((hvd_dtype_t) dt));
}

static PyObject *core_version(PyObject *mod, PyObject *unused) {
        return PyUnicode_FromString(hvd_version());
}

static PyObject *core_pending_orphans(PyObject *mod, PyObject *unused) {
        return PyLong_FromSsize_t(hvd_py_pending_orphans());
}

static PyMethodDef core_methods[] = {
        { "init", core_init, METH_NOARGS, "init(): join the job (hvd_init)." },
        { "shutdown", core_shutdown, METH_NOARGS, "shutdown(): leave the job (hvd_shutdown)." },
        { "is_initialized", core_is_initialized, METH_NOARGS, "is_initialized() -> bool" },
        { "rank_source", core_rank_source, METH_NOARGS, "rank_source() -> str" },
        { "rank", core_rank, METH_NOARGS, "rank() -> int" },
        { "size", core_size, METH_NOARGS, "size() -> int" },
        { "local_rank", core_local_rank, METH_NOARGS, "local_rank() -> int" },
        { "local_size", core_local_size, METH_NOARGS, "local_size() -> int" },
        { "cross_rank", core_cross_rank, METH_NOARGS, "cross_rank() -> int" },
        { "cross_size", core_cross_size, METH_NOARGS, "cross_size() -> int" },
        { "elastic_info", core_elastic_info, METH_NOARGS,
          "elastic_info() -> (generation, sync_needed, waiting) of an elastic job (generation 0: none)" },
        { "submit", (PyCFunction) (void (*)(void)) core_submit, METH_VARARGS | METH_KEYWORDS,
          "submit(kind, requests, keepalive=None, grouped=False, waits=False) -> Handle; waits: the caller "
          "waits on the handle at once (a CPU allreduce, broadcast, allgather, reducescatter or alltoall, or a group "
          "of them, then runs in the waiting thread). Each request is a tuple "
          "(name, input_ptr, output_ptr, dtype, shape, reduce_op, prescale, postscale, root, splits, "
          "process_set, device[, stream]); stream is the cudaStream_t (int; 0 = legacy default stream) "
          "a GPU input is produced on, which hvd's stream waits for. keepalive is held until the operation "
          "completes." },
        { "join", core_join, METH_NOARGS, "join() -> the rank that joined last" },
        { "barrier", core_barrier, METH_NOARGS, "barrier(): wait for every rank" },
        { "start_timeline", core_start_timeline, METH_VARARGS,
          "start_timeline(path, mark_cycles=False): rank 0 records a timeline (hvd_start_timeline)" },
        { "stop_timeline", core_stop_timeline, METH_NOARGS, "stop_timeline(): end the timeline file" },
        { "add_process_set", core_add_process_set, METH_O, "add_process_set(ranks) -> id (collective)" },
        { "remove_process_set", core_remove_process_set, METH_O, "remove_process_set(id) (collective)" },
        { "process_set_rank", core_process_set_rank, METH_O, "process_set_rank(id) -> int" },
        { "process_set_size", core_process_set_size, METH_O, "process_set_size(id) -> int" },
        { "process_set_included", core_process_set_included, METH_O, "process_set_included(id) -> bool" },
        { "process_set_ranks", core_process_set_ranks, METH_O, "process_set_ranks(id) -> tuple" },
        { "has_process_sets", core_has_process_sets, METH_NOARGS,
          "has_process_sets() -> whether libhvd provides process sets" },
        { "kept_buffer", core_kept_buffer, METH_O,
          "kept_buffer(nbytes) -> Buffer: memory for an output, reused from an earlier one of that size "
          "whose tensors have died (contents undefined)" },
        { "shared_buffer", core_shared_buffer, METH_O,
          "shared_buffer(nbytes) -> Buffer: zero-filled shared tensor memory (hvd_shared_alloc), which an "
          "allreduce on one node reads in place when every local rank's tensor is shared" },
        { "kept_stats", core_kept_stats, METH_NOARGS, "kept_stats() -> (bytes, count) of buffers kept for reuse" },
        { "kept_drain", core_kept_drain, METH_NOARGS, "kept_drain(): free every buffer kept for reuse" },
        { "c10_layout", hvd_py_c10_layout, METH_VARARGS,
          "c10_layout(cdata, storage_cdata, autograd_cdatas) -> (storage offset, autograd offset or None): "
          "where a TensorImpl keeps its storage's pointer (ValueError if not where c10 keeps it) and its "
          "autograd state's" },
        { "c10_use_counts", hvd_py_c10_use_counts, METH_O,
          "c10_use_counts(cdata) -> (tensor_refs, storage_refs) of a Tensor's _cdata (TensorImpl), once "
          "c10_layout has found the layout" },
        { "reuse_setup", hvd_py_reuse_setup, METH_VARARGS,
          "reuse_setup(tensor_type, mode, storage_use_count, probe): how reuse_pick reads use counts" },
        { "reuse_pick", hvd_py_reuse_pick, METH_VARARGS,
          "reuse_pick(kept, dtype, shape) -> a free kept tensor, (tensor,) if its state changed, or None" },
        { "prepare", hvd_py_prepare, METH_VARARGS,
          "prepare(request, kind=KIND_ALLREDUCE) -> Prepared: a request tuple (as submit takes it), parsed once" },
        { "run_prepared", hvd_py_run_prepared, METH_VARARGS,
          "run_prepared(prepared, input, output, keepalive): the prepared request over these data pointers "
          "(output 0: libhvd's), run by this thread and waited for; None, or for allgather, reducescatter and "
          "alltoall the completed Handle; raises as Handle.wait does" },
        { "submit_prepared", (PyCFunction) (void (*)(void)) hvd_py_submit_prepared, METH_FASTCALL,
          "submit_prepared(prepared, tensor) -> Handle: the prepared allreduce of tensor (a contiguous CPU "
          "tensor of its dtype and shape) in place, on the background thread" },
        { "bind_kept", hvd_py_bind_kept, METH_VARARGS,
          "bind_kept(prepared, kept, dtype, shape): the list of kept results run_kept picks from (None: none)" },
        { "run_kept", (PyCFunction) (void (*)(void)) hvd_py_run_kept, METH_FASTCALL,
          "run_kept(prepared, tensor) -> a free kept result the prepared allreduce of tensor was run into, "
          "or None (nothing run): no kept result is free" },
        { "prepare_group", hvd_py_prepare_group, METH_VARARGS,
          "prepare_group(requests, dtypes, sizes) -> PreparedGroup: a group of allreduces' request tuples (data "
          "pointers ignored) and each member's torch.dtype and torch.Size, parsed once" },
        { "run_prepared_group", (PyCFunction) (void (*)(void)) hvd_py_run_prepared_group, METH_FASTCALL,
          "run_prepared_group(prepared, tensors, outputs) -> True once run and waited for, or None (nothing run): "
          "a member is not a contiguous CPU tensor of its prepared dtype and size" },
        { "submit_prepared_group", (PyCFunction) (void (*)(void)) hvd_py_submit_prepared_group, METH_FASTCALL,
          "submit_prepared_group(prepared, tensors) -> Handle, or None (nothing submitted): the prepared group "
          "over these tensors in place, on the background thread; None as run_prepared_group" },
        { "run_group_kept", (PyCFunction) (void (*)(void)) hvd_py_run_group_kept, METH_FASTCALL,
          "run_group_kept(prepared, tensors) -> the results, reduced into a set of outputs bound by "
          "bind_group_outputs that nobody holds any more, or None (nothing run)" },
        { "bind_group_outputs", hvd_py_bind_group_outputs, METH_VARARGS,
          "bind_group_outputs(prepared, outputs): new outputs run_group_kept may reduce into once they are let "
          "go (two sets are kept)" },
        { "dtype_size", core_dtype_size, METH_O, "dtype_size(code) -> bytes per element (0 if invalid)" },
        { "version", core_version, METH_NOARGS, "version() -> libhvd version string" },
        { "pending_orphans", core_pending_orphans, METH_NOARGS,
          "pending_orphans() -> dropped handles still waiting for their operation" },
        { NULL, NULL, 0, NULL },
};

static struct PyModuleDef core_module = {
        PyModuleDef_HEAD_INIT,
        .m_name = "hvd._core",
        .m_doc = "Low-level binding of libhvd; use the hvd and hvd.torch modules instead.",
        .m_size = -1,
        .m_methods = core_methods,
};

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void) {
        static const struct {
                const char *name;
                long value;
        } constants[] = {
                { "UINT8", HVD_UINT8 },
                { "INT8", HVD_INT8 },
                { "INT16", HVD_INT16 },
                { "INT32", HVD_INT32 },
                { "INT64", HVD_INT64 },
                { "FLOAT16", HVD_FLOAT16 },
                { "BFLOAT16", HVD_BFLOAT16 },
                { "FLOAT32", HVD_FLOAT32 },
                { "FLOAT64", HVD_FLOAT64 },
                { "BOOL", HVD_BOOL },
                { "REDUCE_AVERAGE", HVD_REDUCE_AVERAGE },
                { "REDUCE_SUM", HVD_REDUCE_SUM },
                { "REDUCE_MIN", HVD_REDUCE_MIN },
                { "REDUCE_MAX", HVD_REDUCE_MAX },
                { "REDUCE_PRODUCT", HVD_REDUCE_PRODUCT },
                { "KIND_ALLREDUCE", KIND_ALLREDUCE },
                { "KIND_BROADCAST", KIND_BROADCAST },
                { "KIND_ALLGATHER", KIND_ALLGATHER },
                { "KIND_ALLTOALL", KIND_ALLTOALL },
                { "KIND_REDUCESCATTER", KIND_REDUCESCATTER },
                { "DEVICE_CPU", HVD_DEVICE_CPU },
                { "MAX_NDIM", HVD_MAX_NDIM },
                { "ERESET", HVD_ERESET },
                { "MAX_NAME_BYTES", HVD_MAX_NAME_BYTES },
                { "KEPT_MIN_BYTES", (long) HVD_KEPT_MIN_BYTES },
#ifdef HAVE_NCCL
                { "NCCL_BUILT", 1 },
#else
                { "NCCL_BUILT", 0 },
#endif
                { "NCCL_VERSION_CODE", HVD_NCCL_VERSION_CODE },
        };
        PyObject *m;

        m = PyModule_Create(&core_module);
        if (!m)
                return NULL;
        for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
                if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0)
                        goto fail;
        if (hvd_py_handle_setup(m) < 0 || hvd_py_prepared_setup(m) < 0)
                goto fail;
        return m;
fail:
        Py_DECREF(m);
        return NULL;
}
