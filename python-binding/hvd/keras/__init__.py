"""hvd.keras: the standalone ``keras`` package (Keras 3, TensorFlow
backend) with the API of ``horovod.keras``: the same functions, optimizer
and callbacks as hvd.tensorflow.keras, for ``import keras``. Other Keras
backends (KERAS_BACKEND=jax, torch) raise ImportError: hvd's ops are
TensorFlow ops. See docs/KERAS.md."""

import keras as _keras_pkg

from hvd._keras import compat as _compat

_keras = _compat.checked_keras(_keras_pkg, "hvd.keras")

from hvd import allgather_object, broadcast_object  # noqa: E402
from hvd.common.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, cross_rank,  # noqa: E402
                               cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init, is_homogeneous,
                               is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                               mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline,
                               stop_timeline)
from hvd.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: E402
                                     remove_process_set)
from hvd.keras import callbacks  # noqa: E402,F401
from hvd.tensorflow.compression import Compression  # noqa: E402
from hvd._keras import api as _api  # noqa: E402
from hvd._keras.api import (allgather, allreduce, alltoall, barrier, broadcast,  # noqa: E402
                                      broadcast_global_variables, broadcast_variables, join, reducescatter)
from hvd._keras.optimizer import DistributedOptimizer  # noqa: E402


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """keras.models.load_model(filepath) with its optimizer (its state
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
