/* c10_counts.c — reads the strong use counts of a torch TensorImpl and its
 * StorageImpl (c10_counts.h). Loads only, relaxed: a count that changes
 * while it is read changes because another owner exists, which is what the
 * caller asks about. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "c10_counts.h"

/* The strong count's 32 low bits: after the vtable pointer, the whole of
 * a size_t (1.x) or the low half of the combined count (2.x). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define REFCOUNT_OFFSET 12
#else
#define REFCOUNT_OFFSET 8
#endif

static size_t storage_offset;  /* 0: not found yet */
static size_t autograd_offset; /* 0: not found */

static size_t strong_count(const void *target) {
        return __atomic_load_n((const uint32_t *) ((const unsigned char *) target + REFCOUNT_OFFSET), __ATOMIC_RELAXED);
}

static const void *word_at(const void *base, size_t offset) {
        const void *w;
        memcpy(&w, (const unsigned char *) base + offset, sizeof w);
        return w;
}

void hvd_c10_counts(const void *impl, size_t *tensor_refs, size_t *storage_refs) {
        const void *storage = word_at(impl, storage_offset);
        *tensor_refs = strong_count(impl);
        *storage_refs = storage ? strong_count(storage) : 0;
}

int hvd_c10_autograd_free(const void *impl) {
        if (!autograd_offset)
                return -1;
        return word_at(impl, autograd_offset) == NULL;
}

/* An address from a _cdata int; NULL with an exception set when it is not one. */
static const void *cdata_ptr(PyObject *v, const char *what) {
        if (!PyLong_Check(v)) {
                PyErr_Format(PyExc_TypeError, "c10_counts: %s must be an int (a _cdata)", what);
                return NULL;
        }
        const void *p = PyLong_AsVoidPtr(v);
        if (!p && !PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "c10_counts: %s is NULL", what);
        return p;
}

/* 1: the word after the storage's pointer is NULL in impl and set in each
 * TensorImpl of cdatas; 0: not; -1: error */
static int autograd_follows(const void *impl, size_t offset, PyObject *cdatas) {
        if (word_at(impl, offset) != NULL)
                return 0;
        PyObject *seq = PySequence_Fast(cdatas, "c10_layout: autograd_cdatas must be a sequence");
        if (!seq)
                return -1;
        int r = PySequence_Fast_GET_SIZE(seq) > 0;
        for (Py_ssize_t i = 0; r == 1 && i < PySequence_Fast_GET_SIZE(seq); i++) {
                const void *other = cdata_ptr(PySequence_Fast_GET_ITEM(seq, i), "an autograd cdata");
                r = other ? word_at(other, offset) != NULL : -1;
        }
        Py_DECREF(seq);
        return r;
}

PyObject *hvd_py_c10_layout(PyObject *mod, PyObject *args) {
        (void) mod;
        PyObject *cdata, *storage_cdata, *autograd_cdatas;
        if (!PyArg_ParseTuple(args, "OOO:c10_layout", &cdata, &storage_cdata, &autograd_cdatas))
                return NULL;
        const void *impl = cdata_ptr(cdata, "cdata");
        const void *storage = impl ? cdata_ptr(storage_cdata, "storage_cdata") : NULL;
        if (!storage)
                return NULL;
        /* only compared, never followed: these words lie inside any TensorImpl */
        static const size_t candidates[] = { 16, 24 };
        size_t found = 0;
        for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && !found; i++)
                if (word_at(impl, candidates[i]) == storage)
                        found = candidates[i];
        if (!found) {
                PyErr_SetString(PyExc_ValueError, "c10_layout: the storage's pointer is not where c10 keeps it");
                return NULL;
        }
        int follows = autograd_follows(impl, found + sizeof(void *), autograd_cdatas);
        if (follows < 0)
                return NULL;
        storage_offset = found;
        autograd_offset = follows ? found + sizeof(void *) : 0;
        if (!autograd_offset)
                return Py_BuildValue("(nO)", (Py_ssize_t) storage_offset, Py_None);
        return Py_BuildValue("(nn)", (Py_ssize_t) storage_offset, (Py_ssize_t) autograd_offset);
}

PyObject *hvd_py_c10_use_counts(PyObject *mod, PyObject *arg) {
        (void) mod;
        if (!storage_offset) {
                PyErr_SetString(PyExc_RuntimeError, "c10_use_counts: c10_layout has not found the layout");
                return NULL;
        }
        const void *impl = cdata_ptr(arg, "cdata");
        if (!impl)
                return NULL;
        size_t tensor_refs, storage_refs;
        hvd_c10_counts(impl, &tensor_refs, &storage_refs);
        return Py_BuildValue("(nn)", (Py_ssize_t) tensor_refs, (Py_ssize_t) storage_refs);
}
