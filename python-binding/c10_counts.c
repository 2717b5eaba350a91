/* c10_counts.c — reads the strong use counts of a torch 1.x TensorImpl and
 * its StorageImpl (c10_counts.h). Loads only, relaxed: the counts are
 * std::atomic<size_t>, and a count that changes while it is read changes
 * because another owner exists, which is what the caller asks about. */
#include <stddef.h>
#include <string.h>

#include "c10_counts.h"

#define REFCOUNT_OFFSET 8  /* after the vtable pointer */
#define STORAGE_OFFSET  24 /* after the strong and weak counts */

static size_t strong_count(const void *target) {
        return __atomic_load_n((const size_t *) ((const unsigned char *) target + REFCOUNT_OFFSET), __ATOMIC_RELAXED);
}

void hvd_c10_counts(const void *impl, size_t *tensor_refs, size_t *storage_refs) {
        const unsigned char *storage;
        memcpy(&storage, (const unsigned char *) impl + STORAGE_OFFSET, sizeof storage);
        *tensor_refs = strong_count(impl);
        *storage_refs = storage ? strong_count(storage) : 0;
}

PyObject *hvd_py_c10_use_counts(PyObject *mod, PyObject *arg) {
        (void) mod;
        if (!PyLong_Check(arg)) {
                PyErr_SetString(PyExc_TypeError, "c10_use_counts: cdata must be an int (Tensor._cdata)");
                return NULL;
        }
        const void *impl = PyLong_AsVoidPtr(arg);
        if (!impl) {
                if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_ValueError, "c10_use_counts: cdata is NULL");
                return NULL;
        }
        size_t tensor_refs, storage_refs;
        hvd_c10_counts(impl, &tensor_refs, &storage_refs);
        return Py_BuildValue("(nn)", (Py_ssize_t) tensor_refs, (Py_ssize_t) storage_refs);
}
