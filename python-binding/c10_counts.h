/* c10_counts.h — the use counts of a torch 1.x tensor's TensorImpl and of
 * its storage, for hvd.torch's reuse of dropped outputs (hvd/torch/_reuse.py),
 * which torch 1.x does not give to Python (2.x has Tensor._use_count and
 * torch._C._storage_Use_Count, used instead). */
#ifndef HVD_PY_C10_COUNTS_H
#define HVD_PY_C10_COUNTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* c10_use_counts(cdata) -> (tensor_refs, storage_refs), cdata being a
 * torch 1.x Tensor's _cdata (its TensorImpl's address). The layout read is
 * c10's of torch 1.x: an intrusive_ptr_target starts with its vtable, then
 * its strong count; a TensorImpl's first member is its storage's pointer.
 * Nothing checks the layout here: _reuse.py uses this only after a probe
 * of known tensors has given the counts it expects. */
PyObject *hvd_py_c10_use_counts(PyObject *mod, PyObject *arg);

/* The same counts of the TensorImpl at impl, for C callers (reuse_pick.c). */
void hvd_c10_counts(const void *impl, size_t *tensor_refs, size_t *storage_refs);

#endif
