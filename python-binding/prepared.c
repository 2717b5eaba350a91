/* prepared.c — the blocking collective a training loop repeats. hvd.torch
 * parses a named tensor's request once (prepare) and runs it with new data
 * pointers on each call (run_prepared): no argument tuples, request
 * parsing or Handle method call per call, which cost about as much as a
 * small allreduce itself. An out-of-place allreduce also picks its output
 * from the kept results bound to the request (bind_kept, run_kept). A
 * group of allreduces is prepared whole (prepare_group) and run over its
 * members' tensors (run_prepared_group). The asynchronous in-place forms
 * (allreduce_async_, grouped_allreduce_async_) submit the same prepared
 * requests to the background thread (submit_prepared,
 * submit_prepared_group). */
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

/* A Handle for q (a prepared request of kind; n > 1: a group of
 * allreduces), submitted: to run on this thread while it waits at once
 * (waits), or on the background thread. It holds keepalive (the tensors)
 * until the operation ends; with want_handle, q's dtype and device too,
 * which Handle.output reads. NULL with an exception. */
static HandleObject *start_requests(const hvd_request_t *q, size_t n, int kind, PyObject *keepalive, bool want_handle,
                                    bool waits) {
        hvd_py_reap_orphans();
        HandleObject *self = hvd_py_handle_new(n); /* no mem: libhvd copied the requests */
        if (!self)
                return NULL;
        if (kind == KIND_ALLTOALL) {
                int ss = hvd_py_set_size(q->process_set);
                self->n_ranks = ss > 0 ? ss : 0;
        }
        if (want_handle) {
                hvd_request_t *copy = malloc(sizeof *copy);
                if (!copy) {
                        Py_DECREF(self);
                        PyErr_NoMemory();
                        return NULL;
                }
                *copy = *q;
                copy->name = NULL;
                copy->input = copy->output = NULL;
                copy->shape = copy->splits = NULL;
                self->mem = copy;
        }
        hvd_handle_t *h = NULL;
        int r;
        if (n == 1)
                r = (waits ? hvd_py_submit_waiting : hvd_py_submit_async)[kind](q, &h);
        else
                r = (waits ? hvd_grouped_allreduce_async_waiting : hvd_grouped_allreduce_async)(q, n, &h);
        if (r < 0) {
                Py_DECREF(self);
                hvd_py_raise_last_error(r);
                return NULL;
        }
        self->h = h;
        Py_INCREF(keepalive);
        self->keepalive = keepalive;
        return self;
}

/* Runs q (as start_requests) on this thread and waits: None, or with
 * want_handle the completed Handle (its outputs); raises as Handle.wait
 * does. keepalive is held until the operation ends, also when a signal
 * interrupts the wait: the operation then finishes as an orphan. */
static PyObject *run_requests(const hvd_request_t *q, size_t n, int kind, PyObject *keepalive, bool want_handle) {
        HandleObject *self = start_requests(q, n, kind, keepalive, want_handle, true);
        if (!self)
                return NULL;
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
        return run_requests(&q, 1, p->kind, keepalive, p->kind != KIND_ALLREDUCE && p->kind != KIND_BROADCAST);
}

/* submit_prepared(prepared, tensor) -> Handle: the prepared allreduce of
 * tensor in place (allreduce_async_), handed to the background thread;
 * the caller waits later, through the Handle. The caller has checked
 * tensor: a contiguous CPU tensor of the prepared dtype and shape. */
PyObject *hvd_py_submit_prepared(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
        (void) mod;
        if (nargs != 2) {
                PyErr_SetString(PyExc_TypeError, "submit_prepared(prepared, tensor)");
                return NULL;
        }
        PreparedObject *p = as_prepared(args[0], "submit_prepared");
        if (!p)
                return NULL;
        if (p->kind != KIND_ALLREDUCE) {
                PyErr_SetString(PyExc_ValueError, "submit_prepared: the prepared request is not an allreduce");
                return NULL;
        }
        hvd_request_t q = p->req;
        void *ptr;
        if (hvd_reuse_data_ptr(args[1], &ptr) < 0)
                return NULL;
        q.input = q.output = ptr;
        return (PyObject *) start_requests(&q, 1, KIND_ALLREDUCE, args[1], false, false);
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
        ret = run_requests(&q, 1, p->kind, keepalive, false);
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

/* ---- a group of allreduces ---- */

typedef struct {
        PyObject ob_base;   /* PyObject_HEAD */
        Py_ssize_t n;       /* members */
        hvd_request_t *req; /* n: input and output set per call */
        int64_t *shapes;    /* n * HVD_MAX_NDIM */
        /* owned tuples of n: the request tuples (req[i].name is the UTF-8
         * of the first's str), each member's torch.dtype and torch.Size */
        PyObject *requests, *dtypes, *sizes;
        /* owned lists of n outputs, or NULL (bind_group_outputs): what
         * run_group_kept reduces into once nobody else holds them; two,
         * as the caller holds the last call's results during the next */
        PyObject *kept[2];
        int newest; /* the index of the one bound last */
} PreparedGroupObject;

static void prepared_group_dealloc(PreparedGroupObject *self) {
        free(self->req);
        free(self->shapes);
        Py_XDECREF(self->requests);
        Py_XDECREF(self->dtypes);
        Py_XDECREF(self->sizes);
        Py_XDECREF(self->kept[0]);
        Py_XDECREF(self->kept[1]);
        Py_TYPE(self)->tp_free((PyObject *) self);
}

/* clang-format off */
static PyTypeObject PreparedGroupType = {
        PyVarObject_HEAD_INIT(NULL, 0)
        .tp_name = "hvd._core.PreparedGroup",
        .tp_doc = "A group of allreduces, parsed once (prepare_group), run by run_prepared_group.",
        .tp_basicsize = sizeof(PreparedGroupObject),
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_dealloc = (destructor) prepared_group_dealloc,
};
/* clang-format on */

/* prepare_group(requests, dtypes, sizes) -> PreparedGroup: the request
 * tuples of a group of allreduces, as submit takes them (their data
 * pointers are ignored), and the torch.dtype and torch.Size each member's
 * tensors must have. */
PyObject *hvd_py_prepare_group(PyObject *mod, PyObject *args) {
        (void) mod;
        PyObject *requests, *dtypes, *sizes;
        if (!PyArg_ParseTuple(args, "O!O!O!:prepare_group", &PyTuple_Type, &requests, &PyTuple_Type, &dtypes,
                              &PyTuple_Type, &sizes))
                return NULL;
        Py_ssize_t n = PyTuple_GET_SIZE(requests);
        if (n < 1 || PyTuple_GET_SIZE(dtypes) != n || PyTuple_GET_SIZE(sizes) != n) {
                PyErr_SetString(PyExc_ValueError, "prepare_group: one or more requests, a dtype and a size each");
                return NULL;
        }
        PreparedGroupObject *p = PyObject_New(PreparedGroupObject, &PreparedGroupType);
        if (!p)
                return NULL;
        p->n = n;
        p->kept[0] = p->kept[1] = NULL;
        p->newest = 1;
        p->req = calloc((size_t) n, sizeof *p->req);
        p->shapes = calloc((size_t) n * HVD_MAX_NDIM, sizeof *p->shapes);
        Py_INCREF(requests);
        Py_INCREF(dtypes);
        Py_INCREF(sizes);
        p->requests = requests;
        p->dtypes = dtypes;
        p->sizes = sizes;
        if (!p->req || !p->shapes) {
                Py_DECREF(p);
                return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < n; i++) {
                int n_splits = 0;
                if (hvd_py_parse_request(PyTuple_GET_ITEM(requests, i), &p->req[i], p->shapes + i * HVD_MAX_NDIM, NULL,
                                         0, &n_splits) < 0) {
                        Py_DECREF(p);
                        return NULL;
                }
                p->req[i].input = p->req[i].output = NULL;
        }
        return (PyObject *) p;
}

static PreparedGroupObject *as_group(PyObject *o, const char *fn) {
        if (!PyObject_TypeCheck(o, &PreparedGroupType)) {
                PyErr_Format(PyExc_TypeError, "%s: prepared must come from prepare_group()", fn);
                return NULL;
        }
        return (PreparedGroupObject *) o;
}

/* 1: t is a contiguous CPU tensor of this dtype and torch.Size, and *ptr
 * its data pointer; 0: it is not, or a getter raised (cleared: the full
 * path says what is wrong). */
static int member_matches(PyObject *t, PyObject *dtype, PyObject *size, void **ptr) {
        static PyObject *s_dtype, *s_is_cpu, *s_shape, *s_is_contiguous;
        if (!s_is_contiguous && /* the last one made: all are there */
            (!(s_dtype = PyUnicode_InternFromString("dtype")) || !(s_is_cpu = PyUnicode_InternFromString("is_cpu")) ||
             !(s_shape = PyUnicode_InternFromString("shape")) ||
             !(s_is_contiguous = PyUnicode_InternFromString("is_contiguous"))))
                return -1;
        PyObject *v = PyObject_GetAttr(t, s_dtype);
        int ok = v == dtype;
        Py_XDECREF(v);
        if (ok) {
                v = PyObject_GetAttr(t, s_is_cpu);
                ok = v == Py_True;
                Py_XDECREF(v);
        }
        if (ok) {
                v = PyObject_GetAttr(t, s_shape);
                ok = v && PyObject_RichCompareBool(v, size, Py_EQ) == 1;
                Py_XDECREF(v);
        }
        if (ok) {
                v = PyObject_CallMethodNoArgs(t, s_is_contiguous);
                ok = v == Py_True;
                Py_XDECREF(v);
        }
        if (ok)
                ok = hvd_reuse_data_ptr(t, ptr) == 0;
        PyErr_Clear();
        return ok;
}

/* Sets each member's input (with outs, its output too; outs == ins: in
 * place) from the group's tensors, each checked by member_matches: 1; 0:
 * one does not match, or a count differs (nothing raised); -1: error. */
static int set_members(PreparedGroupObject *p, PyObject *ins, PyObject *outs) {
        if (PyTuple_GET_SIZE(ins) != p->n || (outs && PyTuple_GET_SIZE(outs) != p->n))
                return 0;
        for (Py_ssize_t i = 0; i < p->n; i++) {
                PyObject *dtype = PyTuple_GET_ITEM(p->dtypes, i), *size = PyTuple_GET_ITEM(p->sizes, i);
                PyObject *in = PyTuple_GET_ITEM(ins, i);
                void *in_ptr = NULL;
                int ok = member_matches(in, dtype, size, &in_ptr);
                p->req[i].input = in_ptr;
                if (outs) {
                        PyObject *out = PyTuple_GET_ITEM(outs, i);
                        p->req[i].output = in_ptr;
                        if (ok == 1 && out != in)
                                ok = member_matches(out, dtype, size, &p->req[i].output);
                }
                if (ok != 1)
                        return ok;
        }
        return 1;
}

/* run_prepared_group(prepared, tensors, outputs) -> True, or None: the
 * prepared group over these tensors (outputs may be tensors itself: in
 * place), run by this thread and waited for as run_prepared; None, with
 * nothing run, when a member's tensor or output is not a contiguous CPU
 * tensor of the prepared dtype and size. The members' checks and data
 * pointers in one call: a few hundred members cost no Python each. */
PyObject *hvd_py_run_prepared_group(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
        (void) mod;
        if (nargs != 3) {
                PyErr_SetString(PyExc_TypeError, "run_prepared_group(prepared, tensors, outputs)");
                return NULL;
        }
        PreparedGroupObject *p = as_group(args[0], "run_prepared_group");
        if (!p)
                return NULL;
        PyObject *ins = PySequence_Tuple(args[1]);
        PyObject *outs = args[2] == args[1] ? ins : PySequence_Tuple(args[2]);
        PyObject *keepalive = NULL, *ret = NULL;
        if (!ins || !outs)
                goto done;
        int ok = set_members(p, ins, outs);
        if (ok <= 0) {
                ret = ok == 0 ? Py_NewRef(Py_None) : NULL;
                goto done;
        }
        if (!(keepalive = PyTuple_Pack(2, ins, outs)))
                goto done;
        ret = run_requests(p->req, (size_t) p->n, KIND_ALLREDUCE, keepalive, false);
        if (ret) {
                Py_DECREF(ret);
                ret = Py_NewRef(Py_True);
        }
done:
        Py_XDECREF(keepalive);
        if (outs != ins)
                Py_XDECREF(outs);
        Py_XDECREF(ins);
        return ret;
}

/* submit_prepared_group(prepared, tensors) -> Handle, or None: the
 * prepared group over these tensors in place (grouped_allreduce_async_),
 * each checked as run_prepared_group checks it, handed to the background
 * thread; None, with nothing submitted, when a member does not match. */
PyObject *hvd_py_submit_prepared_group(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
        (void) mod;
        if (nargs != 2) {
                PyErr_SetString(PyExc_TypeError, "submit_prepared_group(prepared, tensors)");
                return NULL;
        }
        PreparedGroupObject *p = as_group(args[0], "submit_prepared_group");
        if (!p)
                return NULL;
        PyObject *ins = PySequence_Tuple(args[1]);
        if (!ins)
                return NULL;
        PyObject *ret = NULL;
        int ok = set_members(p, ins, ins);
        if (ok == 0)
                ret = Py_NewRef(Py_None);
        else if (ok == 1)
                ret = (PyObject *) start_requests(p->req, (size_t) p->n, KIND_ALLREDUCE, ins, false, false);
        Py_DECREF(ins);
        return ret;
}

/* 1: every output of kept (a list of the group's size) is free and in a
 * new tensor's state of its member's dtype and size, and its data pointer
 * is set; 0: not; -1: error. */
static int kept_free(PreparedGroupObject *p, PyObject *kept) {
        if (!kept || PyList_GET_SIZE(kept) != p->n)
                return 0;
        for (Py_ssize_t i = 0; i < p->n; i++) {
                PyObject *out = PyList_GET_ITEM(kept, i);
                int r = hvd_reuse_free(out, PyTuple_GET_ITEM(p->dtypes, i), PyTuple_GET_ITEM(p->sizes, i));
                if (r == 1)
                        r = hvd_reuse_data_ptr(out, &p->req[i].output) == 0 ? 1 : -1;
                if (r != 1)
                        return r;
        }
        return 1;
}

/* run_group_kept(prepared, tensors) -> a list of results, or None: the
 * prepared group of tensors (checked as run_prepared_group checks them)
 * into the outputs bound by bind_group_outputs that nobody holds any
 * more, run and waited for; None, with nothing run, when a member does
 * not match or no bound set is free. */
PyObject *hvd_py_run_group_kept(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
        (void) mod;
        if (nargs != 2) {
                PyErr_SetString(PyExc_TypeError, "run_group_kept(prepared, tensors)");
                return NULL;
        }
        PreparedGroupObject *p = as_group(args[0], "run_group_kept");
        if (!p)
                return NULL;
        PyObject *ins = PySequence_Tuple(args[1]);
        if (!ins)
                return NULL;
        PyObject *kept = NULL, *keepalive = NULL, *ret = NULL;
        if (!p->kept[0] && !p->kept[1])
                goto none;
        int ok = set_members(p, ins, NULL);
        if (ok < 0)
                goto done;
        if (ok == 0)
                goto none;
        for (int k = 0; k < 2 && !kept; k++) {
                PyObject *set = p->kept[(p->newest + 1 + k) % 2]; /* the older first */
                int r = kept_free(p, set);
                if (r < 0)
                        goto done;
                if (r == 1)
                        kept = PyList_GetSlice(set, 0, p->n);
        }
        if (!kept)
                goto none;
        if (!(keepalive = PyTuple_Pack(2, ins, kept)))
                goto done;
        ret = run_requests(p->req, (size_t) p->n, KIND_ALLREDUCE, keepalive, false);
        if (ret) {
                Py_DECREF(ret);
                ret = kept;
                kept = NULL;
        }
        goto done;
none:
        ret = Py_NewRef(Py_None);
done:
        Py_XDECREF(keepalive);
        Py_XDECREF(kept);
        Py_DECREF(ins);
        return ret;
}

/* bind_group_outputs(prepared, outputs): run_group_kept may reduce into
 * these outputs (one per member, new tensors nobody else keeps) once
 * their holders let them go; the older of the two sets bound before is
 * let go. */
PyObject *hvd_py_bind_group_outputs(PyObject *mod, PyObject *args) {
        (void) mod;
        PyObject *prepared, *outputs;
        if (!PyArg_UnpackTuple(args, "bind_group_outputs", 2, 2, &prepared, &outputs))
                return NULL;
        PreparedGroupObject *p = as_group(prepared, "bind_group_outputs");
        if (!p)
                return NULL;
        PyObject *set = PySequence_List(outputs);
        if (!set)
                return NULL;
        if (PyList_GET_SIZE(set) != p->n) {
                Py_DECREF(set);
                PyErr_Format(PyExc_ValueError, "bind_group_outputs: %zd outputs for a group of %zd",
                             PyList_GET_SIZE(set), p->n);
                return NULL;
        }
        p->newest = (p->newest + 1) % 2;
        Py_XSETREF(p->kept[p->newest], set);
        Py_RETURN_NONE;
}

int hvd_py_prepared_setup(PyObject *m) {
        if (PyType_Ready(&PreparedType) < 0 || PyType_Ready(&PreparedGroupType) < 0)
                return -1;
        Py_INCREF(&PreparedType);
        if (PyModule_AddObject(m, "Prepared", (PyObject *) &PreparedType) < 0)
                return -1;
        Py_INCREF(&PreparedGroupType);
        return PyModule_AddObject(m, "PreparedGroup", (PyObject *) &PreparedGroupType);
}
