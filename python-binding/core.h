/* core.h — what the files of the extension hvd._core share: the operation
 * kinds, the Handle and Buffer types and the error raisers (handle.c), the
 * request parsing of hvdmodule.c, and the prepared requests (prepared.c)
 * that hvdmodule.c's method table names. Internal to the extension. */
#ifndef HVD_PY_CORE_H
#define HVD_PY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include "hvd.h"
#include "kept.h"

/* Operation kinds as the Python side names them. */
enum { KIND_ALLREDUCE, KIND_BROADCAST, KIND_ALLGATHER, KIND_ALLTOALL, KIND_REDUCESCATTER, _KIND_COUNT };

/* How long one GIL-free wait lasts before Python signals are checked. */
#define WAIT_SLICE_USEC 100000

typedef int (*submit_fn)(const hvd_request_t *req, hvd_handle_t **handle);

/* ---- handle.c ---- */

/* One submitted libhvd operation (or group of them): hvd._core.Handle. */
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

/* Readies the Handle and Buffer types and HorovodInternalError and adds
 * them to the module m: 0, or -1 with an exception. */
int hvd_py_handle_setup(PyObject *m);

/* Raises the Python exception that fits a libhvd error code (msg NULL or
 * empty: the code's own text); _last_error takes hvd_last_error(). Both
 * return NULL. */
PyObject *hvd_py_raise_error(int code, const char *msg);
PyObject *hvd_py_raise_last_error(int code);

/* A Handle for n requests, nothing submitted yet; NULL when out of memory. */
HandleObject *hvd_py_handle_new(size_t n);

/* Waits for self's operation without the GIL, in slices that let signals
 * through: 1 when it has ended (self->status says how), 0 when timeout
 * (seconds; < 0: none) passed first, -1 with an exception when a signal
 * handler raised (the operation goes on; the handle still holds it). */
int hvd_py_handle_finish(HandleObject *self, double timeout);

/* Frees dropped handles whose operation has completed; the count of those
 * still pending. */
void hvd_py_reap_orphans(void);
Py_ssize_t hvd_py_pending_orphans(void);

/* A Buffer over data, which it owns from here on, also when it fails
 * (NULL): kept goes back to the pool, shared memory to hvd_shared_free,
 * anything else to libhvd's output pool. */
PyObject *hvd_py_buffer_new(void *data, Py_ssize_t bytes, hvd_kept_t *kept, bool shared);

/* ---- hvdmodule.c ---- */

/* Number of ranks in process set ps, or < 0. */
int hvd_py_set_size(int ps);

/* libhvd's submission of one request of each kind for a caller that waits
 * for it at once (hvd_allreduce_async_waiting, ...) */
extern const submit_fn hvd_py_submit_waiting[_KIND_COUNT];
/* ... and for a caller that waits later, or never (hvd_allreduce_async, ...) */
extern const submit_fn hvd_py_submit_async[_KIND_COUNT];

/* One request tuple as submit takes it into q; shape and splits point
 * into the caller's storage. 0, or -1 with an exception. */
int hvd_py_parse_request(PyObject *t, hvd_request_t *q, int64_t *shape, int64_t *splits, Py_ssize_t max_splits,
                         int *n_splits);

/* ---- prepared.c: the module's prepare, run_prepared, submit_prepared,
 * bind_kept, run_kept, prepare_group, run_prepared_group,
 * submit_prepared_group, run_group_kept and bind_group_outputs, and its
 * Prepared and PreparedGroup types ---- */

int hvd_py_prepared_setup(PyObject *m);
PyObject *hvd_py_prepare(PyObject *mod, PyObject *args);
PyObject *hvd_py_run_prepared(PyObject *mod, PyObject *args);
PyObject *hvd_py_submit_prepared(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *hvd_py_bind_kept(PyObject *mod, PyObject *args);
PyObject *hvd_py_run_kept(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *hvd_py_prepare_group(PyObject *mod, PyObject *args);
PyObject *hvd_py_run_prepared_group(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *hvd_py_submit_prepared_group(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *hvd_py_run_group_kept(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *hvd_py_bind_group_outputs(PyObject *mod, PyObject *args);

#endif
