/* reuse_pick.c — _reuse.py's take() search in C (reuse_pick.h). A kept
 * tensor is free when the kept list holds its only reference, it has no
 * weak reference, and its TensorImpl and storage have no other owner; it is
 * handed out when it is also in a new tensor's state. Every getter is
 * torch's own, looked up by name, so nothing here depends on its layout
 * but what mode 1 reads from c10's objects (the use counts, and whether a
 * tensor has autograd state), which _reuse.py probes before use. The
 * getters and methods are looked up on the tensor type once, at setup,
 * and called straight from their descriptors: a lookup by name through
 * the type's attributes costs as much as the getter itself. */
#include <string.h>

#include "c10_counts.h"
#include "reuse_pick.h"

enum { MODE_NONE, MODE_C10, MODE_OFFICIAL };

static struct {
        int mode;
        PyTypeObject *type;           /* owned: the only type handed out */
        PyObject *storage_use_count;  /* owned, mode 2 */
        PyObject *weakref_count;      /* owned: weakref.getweakrefcount */
        Py_ssize_t one_owner;         /* mode 2: the storage count with one tensor and our storage object */
        Py_ssize_t free_storage_refs; /* mode 2: Py_REFCNT of that storage object, ours only */
        int has_names;                /* torch 1.x: Tensor.has_names() */
} cfg;

/* Py_NewRef and the vectorcall helpers are Python >= 3.9/3.10; configure
 * accepts 3.7. */
static PyObject *new_ref(PyObject *o) {
        Py_INCREF(o);
        return o;
}

/* Without a bound method or an argument tuple where the interpreter
 * allows (3.9): each is an allocation a getter does not need. */
static PyObject *call_method0(PyObject *o, PyObject *name) {
#if PY_VERSION_HEX >= 0x03090000
        return PyObject_VectorcallMethod(name, &o, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
#else
        return PyObject_CallMethodObjArgs(o, name, NULL);
#endif
}

static PyObject *call1(PyObject *f, PyObject *arg) {
#if PY_VERSION_HEX >= 0x03090000
        return PyObject_CallOneArg(f, arg);
#else
        return PyObject_CallFunctionObjArgs(f, arg, NULL);
#endif
}

static PyObject *s_cdata, *s_use_count, *s_untyped_storage, *s_dtype, *s_requires_grad, *s_grad, *s_hooks, *s_dict,
        *s_shape, *s_is_contiguous, *s_has_names, *s_data_ptr;

/* An attribute of the tensor type, as its descriptor gives it: a getter
 * (get) or a C method (meth); neither: looked up by name each call (a
 * Python property, or a type whose attribute is something else). */
typedef struct fast_attr {
        PyObject *name; /* borrowed: an interned name above */
        getter get;
        void *closure;
        const PyMethodDef *meth;
} fast_attr_t;

static fast_attr_t a_cdata, a_use_count, a_untyped_storage, a_dtype, a_requires_grad, a_grad, a_hooks, a_dict, a_shape,
        a_is_contiguous, a_has_names, a_data_ptr;

/* Finds name's descriptor on type: a data descriptor of C (getset) or a
 * method of C taking no arguments or a tuple of them. What is kept are
 * its C function and definition, static in torch's extension: they stay
 * valid even if the descriptor is replaced. */
static void fast_attr_find(fast_attr_t *a, PyTypeObject *type, PyObject *name) {
        *a = (fast_attr_t){ .name = name };
        PyObject *d = _PyType_Lookup(type, name); /* borrowed */
        if (!d)
                return;
        if (Py_TYPE(d) == &PyGetSetDescr_Type) {
                PyGetSetDef *g = ((PyGetSetDescrObject *) d)->d_getset;
                if (g->get && PyType_IsSubtype(type, PyDescr_TYPE(d))) {
                        a->get = g->get;
                        a->closure = g->closure;
                }
        } else if (Py_TYPE(d) == &PyMethodDescr_Type) {
                const PyMethodDef *m = ((PyMethodDescrObject *) d)->d_method;
                int kind = m->ml_flags & (METH_VARARGS | METH_FASTCALL | METH_NOARGS | METH_O | METH_KEYWORDS);
                if (PyType_IsSubtype(type, PyDescr_TYPE(d)) &&
                    (kind == METH_NOARGS || kind == METH_VARARGS || kind == (METH_VARARGS | METH_KEYWORDS)))
                        a->meth = m;
        }
}

/* t.name: the getter straight, else by name (a new reference or NULL) */
static PyObject *fast_get(PyObject *t, const fast_attr_t *a) {
        return a->get ? a->get(t, a->closure) : PyObject_GetAttr(t, a->name);
}

static PyObject *empty_args; /* owned: () for METH_VARARGS */

/* t.name(): the method's C function straight, else by name */
static PyObject *fast_call0(PyObject *t, const fast_attr_t *a) {
        if (!a->meth)
                return call_method0(t, a->name);
        if (a->meth->ml_flags & METH_NOARGS)
                return a->meth->ml_meth(t, NULL);
        if (a->meth->ml_flags & METH_KEYWORDS)
                return ((PyCFunctionWithKeywords) (void (*)(void)) a->meth->ml_meth)(t, empty_args, NULL);
        return a->meth->ml_meth(t, empty_args);
}

static int find_attrs(PyTypeObject *type) {
        if (!empty_args && !(empty_args = PyTuple_New(0)))
                return -1;
        struct {
                fast_attr_t *a;
                PyObject *name;
        } attrs[] = {
                { &a_cdata, s_cdata },
                { &a_use_count, s_use_count },
                { &a_untyped_storage, s_untyped_storage },
                { &a_dtype, s_dtype },
                { &a_requires_grad, s_requires_grad },
                { &a_grad, s_grad },
                { &a_hooks, s_hooks },
                { &a_dict, s_dict },
                { &a_shape, s_shape },
                { &a_is_contiguous, s_is_contiguous },
                { &a_has_names, s_has_names },
                { &a_data_ptr, s_data_ptr },
        };
        for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
                fast_attr_find(attrs[i].a, type, attrs[i].name);
        return 0;
}

static int intern_names(void) {
        struct {
                PyObject **p;
                const char *s;
        } names[] = {
                { &s_cdata, "_cdata" },
                { &s_use_count, "_use_count" },
                { &s_untyped_storage, "untyped_storage" },
                { &s_dtype, "dtype" },
                { &s_requires_grad, "requires_grad" },
                { &s_grad, "grad" },
                { &s_hooks, "_backward_hooks" },
                { &s_dict, "__dict__" },
                { &s_shape, "shape" },
                { &s_is_contiguous, "is_contiguous" },
                { &s_has_names, "has_names" },
                { &s_data_ptr, "data_ptr" },
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
                if (!*names[i].p && !(*names[i].p = PyUnicode_InternFromString(names[i].s)))
                        return -1;
        return 0;
}

/* An int a call or getter gave, or -1 with an exception set. */
static Py_ssize_t take_ssize(PyObject *v) {
        if (!v)
                return -1;
        Py_ssize_t n = PyLong_AsSsize_t(v);
        Py_DECREF(v);
        return n;
}

/* mode 2: (storage count, Py_REFCNT of the storage object as we hold it) */
static int storage_counts(PyObject *t, Py_ssize_t *count, Py_ssize_t *refs) {
        PyObject *s = fast_call0(t, &a_untyped_storage);
        if (!s)
                return -1;
        *refs = Py_REFCNT(s);
        PyObject *cdata = PyObject_GetAttr(s, s_cdata);
        Py_DECREF(s);
        if (!cdata)
                return -1;
        *count = take_ssize(call1(cfg.storage_use_count, cdata));
        Py_DECREF(cdata);
        return *count == -1 && PyErr_Occurred() ? -1 : 0;
}

/* 1: t's TensorImpl and storage have no other owner; 0: they have; -1:
 * error. *impl: the TensorImpl's address in mode 1, else NULL. */
static int sole_owner(PyObject *t, const void **impl) {
        *impl = NULL;
        if (cfg.mode == MODE_C10) {
                PyObject *cdata = fast_get(t, &a_cdata);
                if (!cdata)
                        return -1;
                *impl = PyLong_AsVoidPtr(cdata);
                Py_DECREF(cdata);
                if (!*impl)
                        return PyErr_Occurred() ? -1 : 0;
                size_t tensor_refs, storage_refs;
                hvd_c10_counts(*impl, &tensor_refs, &storage_refs);
                return tensor_refs == 1 && storage_refs == 1;
        }
        Py_ssize_t uses = take_ssize(fast_call0(t, &a_use_count));
        if (uses == -1 && PyErr_Occurred())
                return -1;
        if (uses != 1)
                return 0;
        Py_ssize_t count, refs;
        if (storage_counts(t, &count, &refs) < 0)
                return -1;
        return count == cfg.one_owner && refs == cfg.free_storage_refs;
}

/* 1 when getter a of t is `want` (identity), 0 if not, -1: error */
static int attr_is(PyObject *t, const fast_attr_t *a, PyObject *want) {
        PyObject *v = fast_get(t, a);
        if (!v)
                return -1;
        int r = v == want;
        Py_DECREF(v);
        return r;
}

static int call_is(PyObject *t, const fast_attr_t *a, PyObject *want) {
        PyObject *v = fast_call0(t, a);
        if (!v)
                return -1;
        int r = v == want;
        Py_DECREF(v);
        return r;
}

/* 1: t has no autograd state (requires_grad, .grad, hooks); 0: it has; -1:
 * error. Read from its TensorImpl (impl) where c10_layout found where,
 * else asked of torch's getters (three calls, some 0.1 us). */
static int autograd_free(PyObject *t, const void *impl) {
        int r = impl ? hvd_c10_autograd_free(impl) : -1;
        if (r >= 0)
                return r;
        if ((r = attr_is(t, &a_requires_grad, Py_False)) != 1 || (r = attr_is(t, &a_grad, Py_None)) != 1)
                return r;
        return attr_is(t, &a_hooks, Py_None);
}

/* 1: t is in the state of a new tensor of dtype and shape; 0: not; -1: error */
static int new_state(PyObject *t, const void *impl, PyObject *dtype, PyObject *shape) {
        int r;
        if ((r = attr_is(t, &a_dtype, dtype)) != 1 || (r = autograd_free(t, impl)) != 1)
                return r;
        PyObject *d = fast_get(t, &a_dict);
        if (!d)
                return -1;
        r = PyDict_Check(d) && PyDict_GET_SIZE(d) == 0;
        Py_DECREF(d);
        if (r != 1)
                return r;
        PyObject *sh = fast_get(t, &a_shape);
        if (!sh)
                return -1;
        r = PyObject_RichCompareBool(sh, shape, Py_EQ);
        Py_DECREF(sh);
        if (r != 1)
                return r;
        if ((r = call_is(t, &a_is_contiguous, Py_True)) != 1)
                return r;
        return cfg.has_names ? call_is(t, &a_has_names, Py_False) : 1;
}

/* 1: nothing but the kept list refers to t (the caller holds one more
 * reference for the check); 0: something does; -1: error */
static int free_of_refs(PyObject *t) {
        if (Py_TYPE(t) != cfg.type || Py_REFCNT(t) != 2)
                return 0;
        Py_ssize_t off = cfg.type->tp_weaklistoffset;
        if (off > 0) /* the list head in the object (negative: kept by the interpreter, 3.12) */
                return *(PyObject **) ((char *) t + off) == NULL;
        Py_ssize_t weak = take_ssize(call1(cfg.weakref_count, t));
        if (weak == -1 && PyErr_Occurred())
                return -1;
        return weak == 0;
}

enum { NOT_FREE, FREE_NEW, FREE_CHANGED };

/* Whether t, held by one container and by the caller, is free (nobody
 * else refers to it) and, if so, in a new tensor's state of dtype and
 * shape: NOT_FREE, FREE_NEW, FREE_CHANGED, or -1 with an exception. */
static int free_state(PyObject *t, PyObject *dtype, PyObject *shape) {
        const void *impl = NULL;
        int r = free_of_refs(t);
        if (r == 1)
                r = sole_owner(t, &impl);
        if (r != 1)
                return r < 0 ? -1 : NOT_FREE;
        r = new_state(t, impl, dtype, shape);
        return r < 0 ? -1 : r == 1 ? FREE_NEW : FREE_CHANGED;
}

/* The search over one kept list: a free tensor in a new tensor's state (a
 * new reference); NULL with *changed set (a new reference) to the first
 * free one whose state changed, or NULL with *changed NULL when none is
 * free; NULL with an exception. */
static PyObject *pick_list(PyObject *kept, PyObject *dtype, PyObject *shape, PyObject **changed) {
        *changed = NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(kept); i++) {
                PyObject *t = new_ref(PyList_GET_ITEM(kept, i));
                int r = free_state(t, dtype, shape);
                if (r == NOT_FREE) {
                        Py_DECREF(t);
                        continue;
                }
                if (r == FREE_NEW)
                        return t;
                if (r == FREE_CHANGED)
                        *changed = t;
                else
                        Py_DECREF(t);
                return NULL;
        }
        return NULL;
}

PyObject *hvd_py_reuse_pick(PyObject *mod, PyObject *args_tuple) {
        (void) mod;
        Py_ssize_t nargs = PyTuple_GET_SIZE(args_tuple);
        PyObject *const *args = &PyTuple_GET_ITEM(args_tuple, 0);
        if (nargs != 3 || !PyDict_Check(args[0])) {
                PyErr_SetString(PyExc_TypeError, "reuse_pick(kept: dict, dtype, shape)");
                return NULL;
        }
        if (cfg.mode == MODE_NONE) {
                PyErr_SetString(PyExc_RuntimeError, "reuse_pick: reuse_setup has not been called");
                return NULL;
        }
        PyObject *key = PyTuple_Pack(2, args[1], args[2]);
        if (!key)
                return NULL;
        PyObject *kept = PyDict_GetItemWithError(args[0], key); /* borrowed */
        Py_DECREF(key);
        if (!kept)
                return PyErr_Occurred() ? NULL : new_ref(Py_None);
        if (!PyList_Check(kept)) {
                PyErr_SetString(PyExc_TypeError, "reuse_pick: the kept tensors are not a list");
                return NULL;
        }
        Py_INCREF(kept); /* a getter might run code that drops it from the dict */
        PyObject *changed;
        PyObject *ret = pick_list(kept, args[1], args[2], &changed);
        Py_DECREF(kept);
        if (changed) {
                ret = PyTuple_Pack(1, changed);
                Py_DECREF(changed);
        } else if (!ret && !PyErr_Occurred()) {
                ret = new_ref(Py_None);
        }
        return ret;
}

PyObject *hvd_reuse_pick_list(PyObject *kept, PyObject *dtype, PyObject *shape) {
        if (cfg.mode == MODE_NONE || !PyList_Check(kept))
                return new_ref(Py_None);
        PyObject *changed;
        PyObject *t = pick_list(kept, dtype, shape, &changed);
        Py_XDECREF(changed); /* _reuse.take_of finds it again and forgets it */
        return t || PyErr_Occurred() ? t : new_ref(Py_None);
}

int hvd_reuse_free(PyObject *t, PyObject *dtype, PyObject *shape) {
        if (cfg.mode == MODE_NONE)
                return 0;
        Py_INCREF(t); /* the check's own reference, as pick_list holds one */
        int r = free_state(t, dtype, shape);
        Py_DECREF(t);
        return r < 0 ? -1 : r == FREE_NEW;
}

int hvd_reuse_data_ptr(PyObject *t, void **ptr) {
        static PyObject *name;
        if (!name && !(name = PyUnicode_InternFromString("data_ptr")))
                return -1;
        /* a subclass may override it, or dispatch it (__torch_function__) */
        PyObject *v =
                cfg.mode != MODE_NONE && Py_TYPE(t) == cfg.type ? fast_call0(t, &a_data_ptr) : call_method0(t, name);
        if (!v)
                return -1;
        *ptr = PyLong_AsVoidPtr(v);
        Py_DECREF(v);
        return PyErr_Occurred() ? -1 : 0;
}

PyObject *hvd_py_reuse_setup(PyObject *mod, PyObject *args) {
        (void) mod;
        PyObject *type, *storage_use_count, *probe;
        int mode;
        if (!PyArg_ParseTuple(args, "O!iOO:reuse_setup", &PyType_Type, &type, &mode, &storage_use_count, &probe))
                return NULL;
        if (mode != MODE_C10 && mode != MODE_OFFICIAL) {
                PyErr_Format(PyExc_ValueError, "reuse_setup: unknown mode %d", mode);
                return NULL;
        }
        if (mode == MODE_OFFICIAL && !PyCallable_Check(storage_use_count)) {
                PyErr_SetString(PyExc_TypeError, "reuse_setup: storage_use_count must be callable");
                return NULL;
        }
        if (intern_names() < 0 || find_attrs((PyTypeObject *) type) < 0)
                return NULL;
        PyObject *weakref = PyImport_ImportModule("weakref");
        if (!weakref)
                return NULL;
        PyObject *weakref_count = PyObject_GetAttrString(weakref, "getweakrefcount");
        Py_DECREF(weakref);
        if (!weakref_count)
                return NULL;
        Py_XDECREF(cfg.weakref_count);
        Py_XDECREF(cfg.type);
        Py_XDECREF(cfg.storage_use_count);
        cfg.weakref_count = weakref_count;
        cfg.type = (PyTypeObject *) new_ref(type);
        cfg.storage_use_count = new_ref(storage_use_count);
        cfg.mode = mode;
        if (mode == MODE_OFFICIAL && storage_counts(probe, &cfg.one_owner, &cfg.free_storage_refs) < 0) {
                cfg.mode = MODE_NONE;
                return NULL;
        }
        cfg.has_names = PyObject_HasAttr(probe, s_has_names);
        Py_RETURN_NONE;
}
