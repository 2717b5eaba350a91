"""The names hvd.tensorflow.keras and hvd.keras share (Horovod's Keras
API less what depends on the Keras package: callbacks, load_model). Each
frontend star-imports this module after checking its Keras."""

from hvd import allgather_object, broadcast_object
from hvd._keras.api import (allgather, allreduce, alltoall, barrier, broadcast, broadcast_global_variables,
                            broadcast_variables, join, reducescatter)
from hvd._keras.optimizer import DistributedOptimizer
from hvd.common.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, cross_rank, cross_size,
                               cuda_built, ddl_built, gloo_built, gloo_enabled, init, is_homogeneous, is_initialized,
                               local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
                               rocm_built, shutdown, size, start_timeline, stop_timeline)
from hvd.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from hvd.tensorflow.compression import Compression

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "is_homogeneous", "start_timeline", "stop_timeline", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "Average",
    "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "Compression", "allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
    "join", "barrier", "broadcast_variables", "broadcast_global_variables", "broadcast_object",
    "allgather_object", "DistributedOptimizer",
]
