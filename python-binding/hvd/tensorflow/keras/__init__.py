"""hvd.tensorflow.keras: tf.keras with the API of ``horovod.tensorflow.keras``.

    import tensorflow as tf
    import hvd.tensorflow.keras as hvd

    hvd.init()
    opt = tf.keras.optimizers.SGD(0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt)
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

tf.keras is Keras 3 (with TensorFlow as its backend), or Keras 2 from the
package tf_keras when TF_USE_LEGACY_KERAS=1; both work. hvd.keras is the
same API for the standalone ``keras`` package. See docs/KERAS.md.
"""

import tensorflow as tf

from hvd._keras import compat as _compat

_keras = _compat.checked_keras(tf.keras, "hvd.tensorflow.keras")

from hvd import allgather_object, broadcast_object  # noqa: E402
from hvd.common.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, cross_rank,  # noqa: E402
                               cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init, is_homogeneous,
                               is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                               mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline,
                               stop_timeline)
from hvd.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: E402
                                     remove_process_set)
from hvd.tensorflow.compression import Compression  # noqa: E402
from hvd._keras import api as _api  # noqa: E402
from hvd.tensorflow.keras import callbacks  # noqa: E402,F401
from hvd._keras.api import (allgather, allreduce, alltoall, barrier, broadcast,  # noqa: E402
                                      broadcast_global_variables, broadcast_variables, join, reducescatter)
from hvd._keras.optimizer import DistributedOptimizer  # noqa: E402


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """tf.keras.models.load_model(filepath) with its optimizer (its state
    restored) made a DistributedOptimizer; custom_optimizers: the optimizer
    classes of the file that are not Keras's own."""
    return _api.load_model(_keras, filepath, custom_optimizers, custom_objects, compression)


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "is_homogeneous", "start_timeline", "stop_timeline", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "Average",
    "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "Compression", "allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
    "join", "barrier", "broadcast_variables", "broadcast_global_variables", "broadcast_object",
    "allgather_object", "DistributedOptimizer", "load_model", "callbacks",
]
