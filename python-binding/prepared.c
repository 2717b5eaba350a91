/* prepared.c — the blocking collective a training loop repeats. hvd.torch
 * parses a named tensor's request once (prepare) and runs it with new data
 * pointers on each call (run_prepared): no argument tuples, request
 * parsing or Handle method call per call, which cost about as much as a
 * small allreduce itself. An out-of-place allreduce also picks its output
 * from the kept results bound to the request (bind_kept, run_kept). */
#include <stdlib.h>

#include "core.h"
#include "reuse_pick.h"

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
PyObject *hvd_py_prepare(PyObject *mod, PyObject *args) {
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
        if (hvd_py_parse_request(request, &p->req, p->shape, NULL, 0, &n_splits) < 0) {
                Py_DECREF(p);
                return NULL;
        }
        p->name = PyTuple_GET_ITEM(request, 0); /* parsed: a str */
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
        hvd_py_reap_orphans();
        HandleObject *self = hvd_py_handle_new(1); /* no mem: libhvd copied the request */
        if (!self)
                return NULL;
        if (kind == KIND_ALLTOALL) {
                int ss = hvd_py_set_size(q->process_set);
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
        int r = hvd_py_submit_waiting[kind](q, &h);
        if (r < 0) {
                Py_DECREF(self);
                return hvd_py_raise_last_error(r);
        }
        self->h = h;
        Py_INCREF(keepalive);
        self->keepalive = keepalive;
        PyObject *ret = NULL;
        if (hvd_py_handle_finish(self, -1) == 1) {
                if (self->status < 0)
                        ret = hvd_py_raise_error(self->status, hvd_handle_error(self->h));
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
PyObject *hvd_py_run_prepared(PyObject *mod, PyObject *args) {
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
PyObject *hvd_py_bind_kept(PyObject *mod, PyObject *args) {
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
PyObject *hvd_py_run_kept(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
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

int hvd_py_prepared_setup(PyObject *m) {
        if (PyType_Ready(&PreparedType) < 0)
                return -1;
        Py_INCREF(&PreparedType);
        return PyModule_AddObject(m, "Prepared", (PyObject *) &PreparedType);
}
