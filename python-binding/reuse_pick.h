/* reuse_pick.h — the search of hvd/torch/_reuse.py's take() in C: among the
 * kept results of one dtype and shape, the first that nobody else can see
 * and that is in a new tensor's state. The rule is _reuse.py's (its module
 * comment); only the per-call cost differs, which at small sizes is what
 * an out-of-place allreduce costs more than one in place. */
#ifndef HVD_PY_REUSE_PICK_H
#define HVD_PY_REUSE_PICK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* reuse_setup(tensor_type, mode, storage_use_count, probe) -> None.
 * mode 1: the counts come from c10 (torch 1.x, c10_counts.h); mode 2:
 * from Tensor._use_count and storage_use_count(storage._cdata) (torch 2.x),
 * calibrated on probe, a new tensor nobody else holds. Only tensors of
 * exactly tensor_type are handed out. Not thread-safe: call at import. */
PyObject *hvd_py_reuse_setup(PyObject *mod, PyObject *args);

/* reuse_pick(kept, dtype, shape) -> tensor, (tensor,) or None. kept: the
 * dict (dtype, shape) -> list of kept tensors. A tensor: reuse it (a new
 * reference); (tensor,): nobody else sees it but its state changed, forget
 * it; None: none is free. Raises RuntimeError before reuse_setup. Holds
 * the GIL throughout and calls no Python code, only torch's getters. */
PyObject *hvd_py_reuse_pick(PyObject *mod, PyObject *args);

/* reuse_pick's search over one kept list (not a dict's): a free tensor in
 * a new tensor's state (a new reference), a new reference to None when
 * none is (none is free, one's state changed, kept is not a list, or
 * reuse_setup has not run), or NULL with an exception. */
PyObject *hvd_reuse_pick_list(PyObject *kept, PyObject *dtype, PyObject *shape);

/* 1: t, held by one container (a kept list), is free and in a new
 * tensor's state of dtype and shape, as pick_list's search decides; 0:
 * not (or reuse_setup has not run); -1: error. */
int hvd_reuse_free(PyObject *t, PyObject *dtype, PyObject *shape);

/* t.data_ptr() into *ptr: torch's method called from its descriptor for a
 * plain tensor, by name for anything else. 0, or -1 with an exception. */
int hvd_reuse_data_ptr(PyObject *t, void **ptr);

#endif
