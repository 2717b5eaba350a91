/* handle.c — the objects hvd._core hands out for libhvd's operations: the
 * Handle of a submitted operation (wait, poll, outputs; a Handle dropped
 * while its operation runs becomes an orphan that keeps the buffers alive
 * until it completes), the Buffer over memory libhvd or the kept pool owns,
 * DLPack capsules over device outputs, and the Python exceptions for
 * libhvd's error codes. */
#include <errno.h>
#include <stdlib.h>

#include "core.h"

static PyObject *HorovodInternalError;

/* ---- errors ---- */

/* Raises the Python exception that fits a libhvd error code: argument
 * problems are ValueError, everything that happened to the job (mismatch,
 * abort, shutdown, lost daemon) is HorovodInternalError. Returns NULL. */
PyObject *hvd_py_raise_error(int code, const char *msg) {
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

PyObject *hvd_py_raise_last_error(int code) {
        return hvd_py_raise_error(code, hvd_last_error());
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

PyObject *hvd_py_buffer_new(void *data, Py_ssize_t bytes, hvd_kept_t *kept, bool shared) {
        BufferObject *buf = PyObject_New(BufferObject, &BufferType);
        if (!buf) {
                if (kept)
                        hvd_kept_give(kept);
                else if (shared)
                        hvd_shared_free(data);
                else
                        hvd_recycle_output(data, (size_t) bytes);
                return NULL;
        }
        buf->data = data;
        buf->bytes = bytes;
        buf->kept = kept;
        buf->shared = shared;
        return (PyObject *) buf;
}

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
void hvd_py_reap_orphans(void) {
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

/* core.h; HVD_ETIMEOUT can also be an operation's own error, so only a
 * handle still pending means "not yet". */
int hvd_py_handle_finish(HandleObject *self, double timeout) {
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
        r = hvd_py_handle_finish(self, timeout);
        if (r < 0)
                return NULL;
        if (r == 0)
                Py_RETURN_FALSE;
        if (self->status < 0)
                return hvd_py_raise_error(self->status, hvd_handle_error(self->h));
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
        r = hvd_handle_steal_output(self->h, (size_t) index, &stolen, &bytes);
        if (r < 0) {
                Py_DECREF(shape_t);
                PyErr_Format(PyExc_RuntimeError, "cannot take output %zd: %s", index, hvd_strerror(r));
                return NULL;
        }
        PyObject *buf = hvd_py_buffer_new(stolen, (Py_ssize_t) bytes, NULL, false);
        if (!buf) {
                Py_DECREF(shape_t);
                return NULL;
        }
        return Py_BuildValue("(NN)", buf, shape_t);
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

HandleObject *hvd_py_handle_new(size_t n) {
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

Py_ssize_t hvd_py_pending_orphans(void) {
        hvd_py_reap_orphans();
        return orphans ? PyList_GET_SIZE(orphans) : 0;
}

int hvd_py_handle_setup(PyObject *m) {
        if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&HandleType) < 0)
                return -1;
        HorovodInternalError = PyErr_NewExceptionWithDoc(
                "hvd.HorovodInternalError",
                "An operation failed for the job: a tensor mismatch between ranks, an aborted job "
                "(a rank was lost), or hvd shutting down. Subclass of RuntimeError.",
                PyExc_RuntimeError, NULL);
        if (!HorovodInternalError || PyModule_AddObject(m, "HorovodInternalError", HorovodInternalError) < 0)
                return -1;
        Py_INCREF(HorovodInternalError); /* the module's reference was stolen */
        orphans = PyList_New(0);
        if (!orphans)
                return -1;
        Py_INCREF(&HandleType);
        Py_INCREF(&BufferType);
        if (PyModule_AddObject(m, "Handle", (PyObject *) &HandleType) < 0 ||
            PyModule_AddObject(m, "Buffer", (PyObject *) &BufferType) < 0)
                return -1;
        return 0;
}
