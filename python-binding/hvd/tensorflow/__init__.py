"""hvd.tensorflow: TensorFlow 2 with the API of ``horovod.tensorflow``.

    import tensorflow as tf
    import hvd.tensorflow as hvd

    hvd.init()
    ...
    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

The collectives are ops of hvd's op library: they run eagerly, inside
tf.function and in graphs, on CPU tensors (see docs/TENSORFLOW.md). hvd is
initialised once per process: hvd.torch and the numpy frontend share it.
"""

from hvd.common.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, cross_rank, cross_size,
                               cuda_built, ddl_built, gloo_built, gloo_enabled, init, is_homogeneous, is_initialized,
                               local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
                               rocm_built, shutdown, size, start_timeline, stop_timeline)
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from hvd.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from hvd.tensorflow.compression import Compression
from hvd.tensorflow.functions import (allgather_object, allreduce, broadcast_, broadcast_object, broadcast_object_fn,
                                     broadcast_variables, grouped_allreduce)
from hvd.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from hvd.tensorflow.hooks import BroadcastGlobalVariablesHook, broadcast_global_variables
from hvd.tensorflow.mpi_ops import (allgather, alltoall, barrier, broadcast, grouped_allgather,
                                    grouped_reducescatter, join, local_rank_op, local_size_op, process_set_included_op,
                                    rank_op, reducescatter, size_op)
from hvd.tensorflow.optimizer import DistributedOptimizer
from hvd.tensorflow.sync_batch_norm import SyncBatchNormalization
from hvd.tensorflow import elastic

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "is_homogeneous", "start_timeline", "stop_timeline", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "Average",
    "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "HorovodInternalError", "HostsUpdatedInterrupt", "Compression", "allreduce",
    "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "alltoall", "reducescatter",
    "grouped_reducescatter", "join", "barrier", "size_op", "rank_op", "local_size_op", "local_rank_op",
    "process_set_included_op",
    "broadcast_variables", "DistributedGradientTape", "broadcast_object", "allgather_object",
    "DistributedOptimizer", "BroadcastGlobalVariablesHook", "broadcast_global_variables", "broadcast_",
    "broadcast_object_fn", "PartialDistributedGradientTape", "SyncBatchNormalization", "elastic",
]
