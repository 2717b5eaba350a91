/* outbuf.c — the outputs of hvd's TensorFlow ops over buffers kept for
 * reuse (../kept.c). TensorFlow's default CPU allocator hands a large
 * output fresh pages, each faulted in and zeroed as hvd writes it (a
 * ResNet-50 step spent 40 % of its time so); a training loop asks for the
 * same sizes every step. A buffer goes back to the pool when TensorFlow
 * drops the last reference to its tensor, on any thread. */
#include "config.h"

#include "../kept.h"
#include "tf_ops.h"

/* TensorFlow's deallocator of the tensors made here */
static void give_back(void *data, size_t len, void *arg) {
        (void) data;
        (void) len;
        hvd_kept_give(arg);
}

TF_Tensor *hvd_tf_outbuf_tensor(TF_DataType dtype, const int64_t *dims, int ndim, size_t bytes) {
        hvd_kept_t *k = hvd_kept_take(bytes);
        if (!k)
                return NULL;
        /* on failure TF_NewTensor has called give_back already */
        return TF_NewTensor(dtype, dims, ndim, k->data, bytes, give_back, k);
}
