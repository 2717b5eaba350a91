/* hvdmodule.c — hvd._core, the CPython extension under the `hvd` package: a
 * thin layer over libhvd's public API (hvd.h) that takes raw data pointers,
 * dtype codes and shapes from Python, so it needs neither torch nor numpy
 * headers. The Python side keeps the arrays alive; a Handle holds a
 * reference to whatever it is given until the operation has completed, even
 * when the Handle itself is dropped early. The GIL is released around every
 * call that waits. */

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
#include "hvd.h"
#include "kept.h"
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

/* Operation kinds as the Python side names them. */
enum { KIND_ALLREDUCE, KIND_BROADCAST, KIND_ALLGATHER, KIND_ALLTOALL, KIND_REDUCESCATTER, _KIND_COUNT };

/* How long one GIL-free wait lasts before Python signals are checked. */
#define WAIT_SLICE_USEC 100000

static PyObject *HorovodInternalError;

/* ---- errors ---- */

/* Raises the Python exception that fits a libhvd error code: argument
 * problems are ValueError, everything that happened to the job (mismatch,
 * abort, shutdown, lost daemon) is HorovodInternalError. Returns NULL. */
static PyObject *raise_hvd_error(int code, const char *msg) {
        PyObject *type;

        if (!msg || !*msg)
                msg = hvd_strerror(code);
        switch (code) {
        case -EINVAL:
        case -ERANGE:
        case -E2BIG:
        case -ENOENT:
        case HVD_EDUPLICATE:
        case HVD_ENODEVICE: type = PyExc_ValueError; break;
        case HVD_ENOTINIT:
                /* Horovod's wording, which scripts may look for */
                PyErr_SetString(PyExc_ValueError, "Horovod has not been initialized; use hvd.init().");
                return NULL;
        case -EOPNOTSUPP: type = PyExc_NotImplementedError; break;
        case -ENOMEM: type = PyExc_MemoryError; break;
        default: type = HorovodInternalError; break;
        }
        if (type != HorovodInternalError) {
                PyErr_SetString(type, msg);
                return NULL;
        }
        /* e.code tells an elastic reset (ERESET) from the job's end */
        PyObject *exc = PyObject_CallFunction(type, "s", msg), *c = PyLong_FromLong(code);
        if (exc && c && PyObject_SetAttrString(exc, "code", c) == 0)
                PyErr_SetObject(type, exc);
        else if (!PyErr_Occurred())
                PyErr_SetString(type, msg);
        Py_XDECREF(exc);
        Py_XDECREF(c);
        return NULL;
}

static PyObject *raise_last_error(int code) {
        return raise_hvd_error(code, hvd_last_error());
}

/* ---- Buffer: memory allocated by libhvd, or a kept buffer (kept.h) for an
 * output the frontend allocates, exposed through the buffer protocol ---- */

typedef struct {
        PyObject ob_base; /* PyObject_HEAD */
        void *data;       /* owned: kept->data, shared memory, or an output taken from libhvd */
        Py_ssize_t bytes;
        hvd_kept_t *kept; /* owned: back to the pool at dealloc */
        bool shared;      /* data is from hvd_shared_alloc */
} BufferObject;

static void buffer_dealloc(BufferObject *self) {
        if (self->kept)
                hvd_kept_give(self->kept);
        else if (self->shared)
                hvd_shared_free(self->data);
        else /* a host output libhvd allocated: back to its pool (NULL-safe) */
                hvd_recycle_output(self->data, (size_t) self->bytes);
        Py_TYPE(self)->tp_free((PyObject *) self);
}

static int buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags) {
        return PyBuffer_FillInfo(view, (PyObject *) self, self->data, self->bytes, 0, flags);
}

static Py_ssize_t buffer_length(BufferObject *self) {
        return self->bytes;
}

static PyBufferProcs buffer_as_buffer = {
        .bf_getbuffer = (getbufferproc) buffer_getbuffer,
};

static PySequenceMethods buffer_as_sequence = {
        .sq_length = (lenfunc) buffer_length,
};

/* PyVarObject_HEAD_INIT ends in a comma, which clang-format misreads */
/* clang-format off */
static PyTypeObject BufferType = {
        PyVarObject_HEAD_INIT(NULL, 0)
        .tp_name = "hvd._core.Buffer",
        .tp_doc = "Writable bytes allocated by libhvd for an operation's output.",
        .tp_basicsize = sizeof(BufferObject),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_dealloc = (destructor) buffer_dealloc,
        .tp_as_buffer = &buffer_as_buffer,
        .tp_as_sequence = &buffer_as_sequence,
};
/* clang-format on */

/* ---- DLPack: device outputs handed to a framework without a copy ----
 * The DLPack ABI of versions 0.x (what torch.utils.dlpack.from_dlpack
 * takes): a PyCapsule named "dltensor" holding a DLManagedTensor. The
 * consumer renames the capsule "used_dltensor" and calls the deleter when
 * its tensor dies (from any thread, maybe without the GIL: the deleter
 * touches no Python object); an unconsumed capsule's destructor calls it. */

typedef struct {
        int32_t device_type; /* kDLCUDA = 2 */
        int32_t device_id;
} DLDevice;

typedef struct {
        uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4 */
        uint8_t bits;
        uint16_t lanes;
} DLDataType;

typedef struct {
        void *data;
        DLDevice device;
        int32_t ndim;
        DLDataType dtype;
        int64_t *shape;
        int64_t *strides; /* in elements */
        uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
        DLTensor dl_tensor;
        void *manager_ctx;
        void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLCUDA = 2 };

typedef struct {
        DLManagedTensor t; /* first: the capsule's pointer is this struct's */
        int64_t shape[HVD_MAX_NDIM], strides[HVD_MAX_NDIM];
        int device;
} DevOutput;

static void dev_output_deleter(DLManagedTensor *t) {
        DevOutput *o = (DevOutput *) t;
        hvd_free_output(o->t.dl_tensor.data, o->device); /* cudaFree: waits until the GPU is idle */
        free(o);
}

static void dev_output_capsule_destructor(PyObject *cap) {
        if (!PyCapsule_IsValid(cap, "dltensor"))
                return; /* consumed: the framework's tensor owns it now */
        DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");
        if (t && t->deleter)
                t->deleter(t);
}

/* dtype as DLPack names it; bool travels as uint8 (DLPack 0.x has no bool;
 * the Python side views it back). */
static DLDataType dl_dtype(hvd_dtype_t dt) {
        switch (dt) {
        case HVD_INT8: return (DLDataType){ kDLInt, 8, 1 };
        case HVD_INT16: return (DLDataType){ kDLInt, 16, 1 };
        case HVD_INT32: return (DLDataType){ kDLInt, 32, 1 };
        case HVD_INT64: return (DLDataType){ kDLInt, 64, 1 };
        case HVD_FLOAT16: return (DLDataType){ kDLFloat, 16, 1 };
        case HVD_BFLOAT16: return (DLDataType){ kDLBfloat, 16, 1 };
        case HVD_FLOAT32: return (DLDataType){ kDLFloat, 32, 1 };
        case HVD_FLOAT64: return (DLDataType){ kDLFloat, 64, 1 };
        default: return (DLDataType){ kDLUInt, 8, 1 }; /* uint8, bool */
        }
}

/* A "dltensor" capsule that owns data (device memory libhvd allocated and
 * the caller stole). On failure data is freed and NULL returned. */
static PyObject *dev_output_capsule(void *data, int device, hvd_dtype_t dt, int ndim, const int64_t *shape) {
        DevOutput *o = calloc(1, sizeof *o);
        if (!o) {
                hvd_free_output(data, device);
                return PyErr_NoMemory();
        }
        o->device = device;
        for (int d = ndim - 1; d >= 0; d--) {
                o->shape[d] = shape[d];
                o->strides[d] = d == ndim - 1 ? 1 : o->strides[d + 1] * (shape[d + 1] > 0 ? shape[d + 1] : 1);
        }
        o->t.dl_tensor = (DLTensor){ .data = data,
                                     .device = { kDLCUDA, device },
                                     .ndim = ndim,
                                     .dtype = dl_dtype(dt),
                                     .shape = o->shape,
                                     .strides = o->strides,
                                     .byte_offset = 0 };
        o->t.manager_ctx = o;
        o->t.deleter = dev_output_deleter;
        PyObject *cap = PyCapsule_New(&o->t, "dltensor", dev_output_capsule_destructor);
        if (!cap)
                dev_output_deleter(&o->t);
        return cap;
}

/* ---- Handle ---- */

typedef struct {
        PyObject ob_base;    /* PyObject_HEAD */
        hvd_handle_t *h;     /* NULL once released */
        PyObject *keepalive; /* arrays the operation reads or writes */
        size_t n;            /* requests in the handle */
        int n_ranks;         /* alltoall: ranks of its process set (recv_splits entries) */
        void *mem;           /* requests, shapes and splits given to libhvd (owned) */
        int done;            /* wait() returned (successfully or not) */
        int status;          /* result of the wait */
} HandleObject;

/* Handles dropped while still pending: their buffers must live until the
 * operation completes, so they wait here and are reaped on later calls. */
static PyObject *orphans; /* list of HandleObject */

static void handle_drop(HandleObject *self) {
        hvd_handle_release(&self->h);
        free(self->mem);
        self->mem = NULL;
        Py_CLEAR(self->keepalive);
}

/* Frees orphaned handles whose operation has completed. */
static void reap_orphans(void) {
        if (!orphans)
                return;
        for (Py_ssize_t i = PyList_GET_SIZE(orphans) - 1; i >= 0; i--) {
                HandleObject *o = (HandleObject *) PyList_GET_ITEM(orphans, i);
                if (o->h && hvd_handle_poll(o->h) == 0)
                        continue;
                handle_drop(o);
                if (PySequence_DelItem(orphans, i) < 0)
                        PyErr_Clear();
        }
}

static void handle_dealloc(HandleObject *self) {
        if (self->h && hvd_handle_poll(self->h) == 0 && orphans) {
                /* Still running: hand buffer ownership to an orphan record. */
                HandleObject *o = PyObject_New(HandleObject, Py_TYPE(self));
                if (o) {
                        o->h = self->h;
                        o->keepalive = self->keepalive;
                        o->n = self->n;
                        o->n_ranks = self->n_ranks;
                        o->mem = self->mem;
                        self->mem = NULL;
                        o->done = 0;
                        o->status = 0;
                        self->h = NULL;
                        self->keepalive = NULL;
                        if (PyList_Append(orphans, (PyObject *) o) < 0)
                                PyErr_Clear();
                        Py_DECREF(o);
                }
                if (self->h) {
                        /* Could not record it: leaking the buffers beats a
                         * write into freed memory. */
                        PyErr_Clear();
                        self->h = NULL;
                        self->keepalive = NULL;
                }
        }
        handle_drop(self);
        Py_TYPE(self)->tp_free((PyObject *) self);
}

static int handle_check(HandleObject *self) {
        if (!self->h) {
                PyErr_SetString(PyExc_ValueError, "this hvd handle has been released");
                return -1;
        }
        return 0;
}

/* Waits for self's operation, without the GIL, in slices that let signals
 * through: 1 when it has ended (self->status says how), 0 when timeout
 * (seconds; < 0: none) passed first, -1 with an exception when a signal
 * handler raised (the operation goes on; the handle still holds it). */
static int handle_finish(HandleObject *self, double timeout) {
        if (self->done)
                return 1;
        double left_usec = timeout * 1e6;
        int r;
        for (;;) {
                uint64_t slice = WAIT_SLICE_USEC;
                if (timeout >= 0 && left_usec < slice)
                        slice = left_usec > 1 ? (uint64_t) left_usec : 1;
                PyThreadState *gil = PyEval_SaveThread();
                r = hvd_handle_wait_timeout(self->h, slice);
                /* HVD_ETIMEOUT is also a possible operation error: only a
                 * pending handle means "not yet" */
                bool ended = r != HVD_ETIMEOUT || hvd_handle_poll(self->h) == 1;
                if (ended)
                        r = hvd_handle_wait(self->h); /* complete: returns at once */
                PyEval_RestoreThread(gil);
                if (ended)
                        break;
                if (PyErr_CheckSignals() < 0)
                        return -1;
                if (timeout >= 0) {
                        left_usec -= (double) slice;
                        if (left_usec <= 0)
                                return 0;
                }
        }
        self->done = 1;
        self->status = r;
        /* The operation no longer touches the buffers. */
        Py_CLEAR(self->keepalive);
        return 1;
}

static PyObject *handle_wait(HandleObject *self, PyObject *args, PyObject *kwds) {
        static char *kwlist[] = { "timeout", NULL };
        PyObject *timeout_obj = Py_None;
        double timeout = -1;
        int r;

        if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait", kwlist, &timeout_obj))
                return NULL;
        if (timeout_obj != Py_None) {
                timeout = PyFloat_AsDouble(timeout_obj);
                if (timeout == -1 && PyErr_Occurred())
                        return NULL;
                if (timeout < 0) {
                        PyErr_SetString(PyExc_ValueError, "timeout must be >= 0");
                        return NULL;
                }
        }
        if (handle_check(self) < 0)
                return NULL;
        r = handle_finish(self, timeout);
        if (r < 0)
                return NULL;
        if (r == 0)
                Py_RETURN_FALSE;
        if (self->status < 0)
                return raise_hvd_error(self->status, hvd_handle_error(self->h));
        Py_RETURN_TRUE;
}

static PyObject *handle_poll(HandleObject *self, PyObject *unused) {
        if (handle_check(self) < 0)
                return NULL;
        return PyBool_FromLong(self->done || hvd_handle_poll(self->h) == 1);
}

/* output(index) -> (Buffer, shape): takes the output libhvd allocated.
 * For a GPU request: (DLPack capsule, shape) over the device memory. */
static PyObject *handle_output(HandleObject *self, PyObject *args) {
        Py_ssize_t index = 0;
        const void *data;
        size_t bytes;
        int ndim, r;
        const int64_t *shape;
        void *stolen = NULL;

        if (!PyArg_ParseTuple(args, "|n:output", &index))
                return NULL;
        if (handle_check(self) < 0)
                return NULL;
        if (!self->done || self->status < 0) {
                PyErr_SetString(PyExc_RuntimeError, "output() before a successful wait()");
                return NULL;
        }
        if (index < 0 || (size_t) index >= self->n) {
                PyErr_SetString(PyExc_IndexError, "output index out of range");
                return NULL;
        }
        r = hvd_handle_output(self->h, (size_t) index, &data, &bytes, &ndim, &shape);
        if (r < 0) {
                PyErr_Format(PyExc_RuntimeError, "no output %zd: %s (already taken?)", index, hvd_strerror(r));
                return NULL;
        }
        PyObject *shape_t = PyTuple_New(ndim);
        if (!shape_t)
                return NULL;
        for (int d = 0; d < ndim; d++) {
                PyObject *v = PyLong_FromLongLong(shape[d]);
                if (!v) {
                        Py_DECREF(shape_t);
                        return NULL;
                }
                PyTuple_SET_ITEM(shape_t, d, v);
        }
        const hvd_request_t *q = &((const hvd_request_t *) self->mem)[index];
        if (q->device >= 0) {
                r = hvd_handle_steal_output(self->h, (size_t) index, &stolen, &bytes);
                if (r < 0) {
                        Py_DECREF(shape_t);
                        PyErr_Format(PyExc_RuntimeError, "cannot take output %zd: %s", index, hvd_strerror(r));
                        return NULL;
                }
                PyObject *cap = dev_output_capsule(stolen, q->device, q->dtype, ndim, shape);
                if (!cap) {
                        Py_DECREF(shape_t);
                        return NULL;
                }
                return Py_BuildValue("(NN)", cap, shape_t);
        }
        BufferObject *buf = PyObject_New(BufferObject, &BufferType);
        if (!buf) {
                Py_DECREF(shape_t);
                return NULL;
        }
        buf->data = NULL;
        buf->bytes = 0;
        buf->kept = NULL;
        buf->shared = false;
        r = hvd_handle_steal_output(self->h, (size_t) index, &stolen, &bytes);
        if (r < 0) {
                Py_DECREF(buf);
                Py_DECREF(shape_t);
                PyErr_Format(PyExc_RuntimeError, "cannot take output %zd: %s", index, hvd_strerror(r));
                return NULL;
        }
        buf->data = stolen;
        buf->bytes = (Py_ssize_t) bytes;
        PyObject *ret = Py_BuildValue("(NN)", (PyObject *) buf, shape_t);
        return ret;
}

static PyObject *handle_recv_splits(HandleObject *self, PyObject *unused) {
        const int64_t *splits;

        if (handle_check(self) < 0)
                return NULL;
        if (!self->done || self->status < 0) {
                PyErr_SetString(PyExc_RuntimeError, "recv_splits() before a successful wait()");
                return NULL;
        }
        if (self->n_ranks <= 0 || hvd_handle_recv_splits(self->h, &splits) < 0) {
                PyErr_SetString(PyExc_RuntimeError, "this operation has no received splits");
                return NULL;
        }
        PyObject *t = PyTuple_New(self->n_ranks);
        if (!t)
                return NULL;
        for (int r = 0; r < self->n_ranks; r++) {
                PyObject *v = PyLong_FromLongLong(splits[r]);
                if (!v) {
                        Py_DECREF(t);
                        return NULL;
                }
                PyTuple_SET_ITEM(t, r, v);
        }
        return t;
}

static PyMethodDef handle_methods[] = {
        { "wait", (PyCFunction) (void (*)(void)) handle_wait, METH_VARARGS | METH_KEYWORDS,
          "wait(timeout=None) -> True when complete, False on timeout; raises the operation's error." },
        { "poll", (PyCFunction) handle_poll, METH_NOARGS, "poll() -> True when the operation has completed." },
        { "output", (PyCFunction) handle_output, METH_VARARGS,
          "output(index=0) -> (Buffer, shape): the output libhvd allocated (allgather, alltoall, "
          "reducescatter). Can be taken once. For a GPU request, (capsule, shape): a DLPack \"dltensor\" "
          "capsule over the device memory (bool as uint8), for torch.utils.dlpack.from_dlpack; the "
          "tensor's deleter frees it." },
        { "recv_splits", (PyCFunction) handle_recv_splits, METH_NOARGS,
          "recv_splits() -> tuple: alltoall rows received from each rank." },
        { NULL, NULL, 0, NULL },
};

/* PyVarObject_HEAD_INIT ends in a comma, which clang-format misreads */
/* clang-format off */
static PyTypeObject HandleType = {
        PyVarObject_HEAD_INIT(NULL, 0)
        .tp_name = "hvd._core.Handle",
        .tp_doc = "One submitted libhvd operation (or group of operations).",
        .tp_basicsize = sizeof(HandleObject),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_dealloc = (destructor) handle_dealloc,
        .tp_methods = handle_methods,
};
/* clang-format on */

/* A Handle for n requests, nothing submitted yet; NULL when out of memory. */
static HandleObject *handle_new(size_t n) {
        HandleObject *self = PyObject_New(HandleObject, &HandleType);
        if (!self)
                return NULL;
        self->h = NULL;
        self->keepalive = NULL;
        self->n = n;
        self->n_ranks = 0;
        self->mem = NULL;
        self->done = 0;
        self->status = 0;
        return self;
}

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
                raise_hvd_error(r, b->error);
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
                return raise_last_error(r);
        Py_RETURN_NONE;
}

static PyObject *core_shutdown(PyObject *mod, PyObject *unused) {
        int r;

        PyThreadState *gil = PyEval_SaveThread();
        r = hvd_shutdown();
        PyEval_RestoreThread(gil);
        reap_orphans();
        if (r < 0 && r != HVD_ENOTINIT)
                return raise_last_error(r);
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
                return raise_hvd_error(v, "");
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

/* Number of ranks in process set ps, or < 0. */
static int set_size(int ps) {
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
static int parse_request(PyObject *t, hvd_request_t *q, int64_t *shape, int64_t *splits, Py_ssize_t max_splits,
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

typedef int (*submit_fn)(const hvd_request_t *req, hvd_handle_t **handle);
typedef int (*group_fn)(const hvd_request_t *reqs, size_t n, hvd_handle_t **handle);

static PyObject *core_submit(PyObject *mod, PyObject *args, PyObject *kwds) {
        static char *kwlist[] = { "kind", "requests", "keepalive", "grouped", "waits", NULL };
        static const submit_fn single[_KIND_COUNT] = {
                [KIND_ALLREDUCE] = hvd_allreduce_async,         [KIND_BROADCAST] = hvd_broadcast_async,
                [KIND_ALLGATHER] = hvd_allgather_async,         [KIND_ALLTOALL] = hvd_alltoall_async,
                [KIND_REDUCESCATTER] = hvd_reducescatter_async,
        };
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
        reap_orphans();
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
        self = handle_new((size_t) n);
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
                if (parse_request(PySequence_Fast_GET_ITEM(fast, i), &reqs[i], shape, shape + HVD_MAX_NDIM, max_splits,
                                  &n_splits) < 0)
                        goto fail;
        }
        if (kind == KIND_ALLTOALL) {
                int ss = set_size(reqs[0].process_set);
                self->n_ranks = ss > 0 ? ss : 0;
        }
        int r;
        hvd_handle_t *h = NULL;
        if (grouped)
                r = (waits ? grouped_waiting : grouped_fns)[kind](reqs, (size_t) n, &h);
        else if (waits && kind == KIND_ALLREDUCE)
                r = hvd_allreduce_async_waiting(&reqs[0], &h);
        else if (waits && kind == KIND_BROADCAST)
                r = hvd_broadcast_async_waiting(&reqs[0], &h);
        else if (waits && kind == KIND_ALLGATHER)
                r = hvd_allgather_async_waiting(&reqs[0], &h);
        else if (waits && kind == KIND_REDUCESCATTER)
                r = hvd_reducescatter_async_waiting(&reqs[0], &h);
        else if (waits && kind == KIND_ALLTOALL)
                r = hvd_alltoall_async_waiting(&reqs[0], &h);
        else
                r = single[kind](&reqs[0], &h);
        if (r < 0) {
                raise_last_error(r);
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

/* ---- the blocking allreduce a training loop repeats ----
 * hvd.torch parses a named tensor's request once (prepare) and runs it with
 * new data pointers on each call (run_prepared): no argument tuples, request
 * parsing or Handle method call per call, which cost about as much as a
 * small allreduce itself. */

typedef struct {
        PyObject ob_base;  /* PyObject_HEAD */
        hvd_request_t req; /* input and output set per call */
        int64_t shape[HVD_MAX_NDIM];
        int kind;       /* KIND_* */
        PyObject *name; /* owned: req.name is its UTF-8 */
        /* owned, NULL until bind_kept: the kept results run_kept picks
         * from, and the dtype and torch.Size they must have */
        PyObject *kept, *kept_dtype, *kept_shape;
} PreparedObject;

static void prepared_dealloc(PreparedObject *self) {
        Py_XDECREF(self->name);
        Py_XDECREF(self->kept);
        Py_XDECREF(self->kept_dtype);
        Py_XDECREF(self->kept_shape);
        Py_TYPE(self)->tp_free((PyObject *) self);
}

static PyObject *prepared_name(PreparedObject *self, void *closure) {
        (void) closure;
        Py_INCREF(self->name);
        return self->name;
}

static PyObject *prepared_kept(PreparedObject *self, void *closure) {
        (void) closure;
        PyObject *kept = self->kept ? self->kept : Py_None;
        Py_INCREF(kept);
        return kept;
}

static PyGetSetDef prepared_getset[] = {
        { "name", (getter) prepared_name, NULL, "the tensor name it submits", NULL },
        { "kept", (getter) prepared_kept, NULL, "the list run_kept picks from (bind_kept), or None", NULL },
        { NULL, NULL, NULL, NULL, NULL },
};

/* clang-format off */
static PyTypeObject PreparedType = {
        PyVarObject_HEAD_INIT(NULL, 0)
        .tp_name = "hvd._core.Prepared",
        .tp_doc = "A collective's request, parsed once (prepare), run by run_prepared.",
        .tp_basicsize = sizeof(PreparedObject),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_dealloc = (destructor) prepared_dealloc,
        .tp_getset = prepared_getset,
};
/* clang-format on */

/* prepare(request, kind=KIND_ALLREDUCE) -> Prepared: one request tuple of
 * that kind, as submit takes it (its data pointers are ignored; no
 * splits). */
static PyObject *core_prepare(PyObject *mod, PyObject *args) {
        (void) mod;
        PyObject *request;
        int kind = KIND_ALLREDUCE;
        if (!PyArg_ParseTuple(args, "O|i:prepare", &request, &kind))
                return NULL;
        if (kind < 0 || kind >= _KIND_COUNT) {
                PyErr_Format(PyExc_ValueError, "prepare: unknown operation kind %d", kind);
                return NULL;
        }
        PreparedObject *p = PyObject_New(PreparedObject, &PreparedType);
        if (!p)
                return NULL;
        p->name = p->kept = p->kept_dtype = p->kept_shape = NULL;
        p->kind = kind;
        int n_splits = 0;
        if (parse_request(request, &p->req, p->shape, NULL, 0, &n_splits) < 0) {
                Py_DECREF(p);
                return NULL;
        }
        p->name = PyTuple_GET_ITEM(request, 0); /* parse_request checked it is a str */
        Py_INCREF(p->name);
        p->req.input = p->req.output = NULL;
        return (PyObject *) p;
}

/* Runs q (a prepared request of kind) on this thread and waits: None, or
 * with want_handle the completed Handle (its outputs); raises as
 * Handle.wait does. keepalive (the tensors) is held until the operation
 * ends, also when a signal interrupts the wait: the operation then
 * finishes as an orphan. */
static PyObject *run_request(const hvd_request_t *q, int kind, PyObject *keepalive, bool want_handle) {
        static const submit_fn waiting[_KIND_COUNT] = {
                [KIND_ALLREDUCE] = hvd_allreduce_async_waiting,         [KIND_BROADCAST] = hvd_broadcast_async_waiting,
                [KIND_ALLGATHER] = hvd_allgather_async_waiting,         [KIND_ALLTOALL] = hvd_alltoall_async_waiting,
                [KIND_REDUCESCATTER] = hvd_reducescatter_async_waiting,
        };
        reap_orphans();
        HandleObject *self = handle_new(1); /* no mem: libhvd copied the request */
        if (!self)
                return NULL;
        if (kind == KIND_ALLTOALL) {
                int ss = set_size(q->process_set);
                self->n_ranks = ss > 0 ? ss : 0;
        }
        if (want_handle) { /* Handle.output reads its dtype and device */
                hvd_request_t *copy = malloc(sizeof *copy);
                if (!copy) {
                        Py_DECREF(self);
                        return PyErr_NoMemory();
                }
                *copy = *q;
                copy->name = NULL;
                copy->input = copy->output = NULL;
                copy->shape = copy->splits = NULL;
                self->mem = copy;
        }
        hvd_handle_t *h = NULL;
        int r = waiting[kind](q, &h);
        if (r < 0) {
                Py_DECREF(self);
                return raise_last_error(r);
        }
        self->h = h;
        Py_INCREF(keepalive);
        self->keepalive = keepalive;
        PyObject *ret = NULL;
        if (handle_finish(self, -1) == 1) {
                if (self->status < 0)
                        ret = raise_hvd_error(self->status, hvd_handle_error(self->h));
                else
                        ret = want_handle ? (PyObject *) self : Py_None;
                Py_XINCREF(ret);
        }
        Py_DECREF(self); /* interrupted: an orphan holds the operation */
        return ret;
}

static PreparedObject *as_prepared(PyObject *o, const char *fn) {
        if (!PyObject_TypeCheck(o, &PreparedType)) {
                PyErr_Format(PyExc_TypeError, "%s: prepared must come from prepare()", fn);
                return NULL;
        }
        return (PreparedObject *) o;
}

/* run_prepared(prepared, input, output, keepalive): the prepared request
 * over these data pointers (output 0: none, libhvd's), run by this thread,
 * waited for (run_request): None for an allreduce or a broadcast (the
 * caller's output holds the result), the completed Handle for the kinds
 * whose outputs libhvd makes (allgather, reducescatter, alltoall). */
static PyObject *core_run_prepared(PyObject *mod, PyObject *args) {
        (void) mod;
        PyObject *prepared, *in_obj, *out_obj, *keepalive;
        if (!PyArg_UnpackTuple(args, "run_prepared", 4, 4, &prepared, &in_obj, &out_obj, &keepalive))
                return NULL;
        PreparedObject *p = as_prepared(prepared, "run_prepared");
        if (!p)
                return NULL;
        hvd_request_t q = p->req;
        q.input = PyLong_AsVoidPtr(in_obj);
        if (PyErr_Occurred())
                return NULL;
        q.output = PyLong_AsVoidPtr(out_obj);
        if (PyErr_Occurred())
                return NULL;
        return run_request(&q, p->kind, keepalive, p->kind != KIND_ALLREDUCE && p->kind != KIND_BROADCAST);
}

/* bind_kept(prepared, kept, dtype, shape): run_kept picks its output from
 * the list kept (hvd/torch/_reuse.py's, of tensors of this dtype and
 * torch.Size); None unbinds. */
static PyObject *core_bind_kept(PyObject *mod, PyObject *args) {
        (void) mod;
        PyObject *prepared, *kept, *dtype, *shape;
        if (!PyArg_UnpackTuple(args, "bind_kept", 4, 4, &prepared, &kept, &dtype, &shape))
                return NULL;
        PreparedObject *p = as_prepared(prepared, "bind_kept");
        if (!p)
                return NULL;
        if (kept != Py_None && !PyList_Check(kept)) {
                PyErr_SetString(PyExc_TypeError, "bind_kept: kept must be a list or None");
                return NULL;
        }
        Py_CLEAR(p->kept);
        Py_CLEAR(p->kept_dtype);
        Py_CLEAR(p->kept_shape);
        if (kept != Py_None) {
                Py_INCREF(kept);
                Py_INCREF(dtype);
                Py_INCREF(shape);
                p->kept = kept;
                p->kept_dtype = dtype;
                p->kept_shape = shape;
        }
        Py_RETURN_NONE;
}

/* run_kept(prepared, tensor) -> the result, or None: the prepared
 * allreduce of tensor (its dtype and shape are the prepared request's)
 * into a free tensor of the list bind_kept bound, run and waited for as
 * run_prepared; None, with nothing run, when no kept tensor is free and
 * in a new tensor's state, or none is bound. The search, both data
 * pointers and the run in one call: out of place costs no more Python
 * than in place. */
static PyObject *core_run_kept(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
        (void) mod;
        if (nargs != 2) {
                PyErr_SetString(PyExc_TypeError, "run_kept(prepared, tensor)");
                return NULL;
        }
        PreparedObject *p = as_prepared(args[0], "run_kept");
        if (!p)
                return NULL;
        if (p->kind != KIND_ALLREDUCE) {
                PyErr_SetString(PyExc_ValueError, "run_kept: the prepared request is not an allreduce");
                return NULL;
        }
        if (!p->kept)
                Py_RETURN_NONE;
        PyObject *out = hvd_reuse_pick_list(p->kept, p->kept_dtype, p->kept_shape);
        if (out == Py_None || !out)
                return out;
        hvd_request_t q = p->req;
        void *in_ptr;
        PyObject *keepalive = NULL, *ret = NULL;
        if (hvd_reuse_data_ptr(args[1], &in_ptr) < 0 || hvd_reuse_data_ptr(out, &q.output) < 0 ||
            !(keepalive = PyTuple_Pack(2, args[1], out)))
                goto done;
        q.input = in_ptr;
        ret = run_request(&q, p->kind, keepalive, false);
        if (ret) {
                Py_DECREF(ret);
                ret = out;
                out = NULL;
        }
done:
        Py_XDECREF(keepalive);
        Py_XDECREF(out);
        return ret;
}

static PyObject *core_join(PyObject *mod, PyObject *unused) {
        reap_orphans();
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
                ? raise_last_error(r)
                : PyErr_Format(PyExc_OSError, "%s", hvd_last_error());
        Py_RETURN_NONE;
}

static PyObject *core_stop_timeline(PyObject *mod, PyObject *unused) {
        int r;

        Py_BEGIN_ALLOW_THREADS r = hvd_stop_timeline();
        Py_END_ALLOW_THREADS if (r < 0) return r == HVD_ENOTINIT ? raise_last_error(r)
                                                                 : PyErr_Format(PyExc_OSError, "%s", hvd_last_error());
        Py_RETURN_NONE;
}

static PyObject *core_barrier(PyObject *mod, PyObject *unused) {
        reap_orphans();
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
                return raise_hvd_error(r,
                                       r == -ENOENT ? "this process is not part of the process set" : hvd_last_error());
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
                return raise_hvd_error(r, hvd_last_error());
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
        BufferObject *buf = PyObject_New(BufferObject, &BufferType);
        if (!buf)
                return NULL;
        buf->shared = false;
        buf->kept = hvd_kept_take((size_t) bytes);
        if (!buf->kept) {
                buf->data = NULL;
                Py_DECREF(buf);
                return PyErr_NoMemory();
        }
        buf->data = buf->kept->data;
        buf->bytes = bytes;
        return (PyObject *) buf;
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
        BufferObject *buf = PyObject_New(BufferObject, &BufferType);
        if (!buf) {
                hvd_shared_free(data);
                return NULL;
        }
        buf->data = data;
        buf->bytes = bytes;
        buf->kept = NULL;
        buf->shared = true;
        return (PyObject *) buf;
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
        reap_orphans();
        return PyLong_FromSsize_t(orphans ? PyList_GET_SIZE(orphans) : 0);
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
        { "prepare", core_prepare, METH_VARARGS,
          "prepare(request, kind=KIND_ALLREDUCE) -> Prepared: a request tuple (as submit takes it), parsed once" },
        { "run_prepared", core_run_prepared, METH_VARARGS,
          "run_prepared(prepared, input, output, keepalive): the prepared request over these data pointers "
          "(output 0: libhvd's), run by this thread and waited for; None, or for allgather, reducescatter and "
          "alltoall the completed Handle; raises as Handle.wait does" },
        { "bind_kept", core_bind_kept, METH_VARARGS,
          "bind_kept(prepared, kept, dtype, shape): the list of kept results run_kept picks from (None: none)" },
        { "run_kept", (PyCFunction) (void (*)(void)) core_run_kept, METH_FASTCALL,
          "run_kept(prepared, tensor) -> a free kept result the prepared allreduce of tensor was run into, "
          "or None (nothing run): no kept result is free" },
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

        if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&HandleType) < 0 || PyType_Ready(&PreparedType) < 0)
                return NULL;
        m = PyModule_Create(&core_module);
        if (!m)
                return NULL;
        for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
                if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0)
                        goto fail;
        HorovodInternalError = PyErr_NewExceptionWithDoc(
                "hvd.HorovodInternalError",
                "An operation failed for the job: a tensor mismatch between ranks, an aborted job "
                "(a rank was lost), or hvd shutting down. Subclass of RuntimeError.",
                PyExc_RuntimeError, NULL);
        if (!HorovodInternalError || PyModule_AddObject(m, "HorovodInternalError", HorovodInternalError) < 0)
                goto fail;
        Py_INCREF(HorovodInternalError); /* the module's reference was stolen */
        orphans = PyList_New(0);
        if (!orphans)
                goto fail;
        Py_INCREF(&HandleType);
        Py_INCREF(&BufferType);
        Py_INCREF(&PreparedType);
        if (PyModule_AddObject(m, "Handle", (PyObject *) &HandleType) < 0 ||
            PyModule_AddObject(m, "Buffer", (PyObject *) &BufferType) < 0 ||
            PyModule_AddObject(m, "Prepared", (PyObject *) &PreparedType) < 0)
                goto fail;
        return m;
fail:
        Py_DECREF(m);
        return NULL;
}
