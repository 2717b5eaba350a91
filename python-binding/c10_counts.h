/* c10_counts.h — the strong use counts of a torch tensor's TensorImpl and
 * of its storage, read from c10's objects, for hvd.torch's reuse of dropped
 * outputs (hvd/torch/_reuse.py). torch 1.x gives neither to Python; 2.x
 * gives both (Tensor._use_count, torch._C._storage_Use_Count), but asking
 * makes a storage object and costs some 0.2 us a check, where reading them
 * costs nanoseconds. */
#ifndef HVD_PY_C10_COUNTS_H
#define HVD_PY_C10_COUNTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* c10_layout(cdata, storage_cdata, autograd_cdatas) -> (storage offset,
 * autograd offset or None): finds where a TensorImpl holds its storage's
 * pointer, given a new tensor's _cdata (its TensorImpl's address) and its
 * storage's _cdata (the StorageImpl's), and whether the pointer to its
 * autograd state follows it: NULL in that tensor and set in each tensor of
 * autograd_cdatas (a sequence of _cdata). The layout assumed otherwise is
 * c10's since torch 1.x: an intrusive_ptr_target starts with its vtable,
 * then its strong count, alone (1.x) or as the low half of a word shared
 * with the weak count (2.x); the storage's pointer follows the counts, 16
 * or 24 bytes in, then the AutogradMeta's. ValueError when the storage is
 * at neither place. Nothing else checks the layout here: _reuse.py uses
 * what is read only after probes of known tensors have given what it
 * expects. */
PyObject *hvd_py_c10_layout(PyObject *mod, PyObject *args);

/* c10_use_counts(cdata) -> (tensor_refs, storage_refs); RuntimeError
 * before c10_layout has found the layout. */
PyObject *hvd_py_c10_use_counts(PyObject *mod, PyObject *arg);

/* The same counts of the TensorImpl at impl, for C callers (reuse_pick.c),
 * once c10_layout has succeeded. */
void hvd_c10_counts(const void *impl, size_t *tensor_refs, size_t *storage_refs);

/* 1: the TensorImpl at impl has no autograd state: requires_grad off, no
 * .grad, no hooks (c10 makes a tensor's AutogradMeta for any of them, and
 * keeps it); 0: it has; -1: c10_layout did not find where it is kept. */
int hvd_c10_autograd_free(const void *impl);

#endif
