"""hvd.torch: data-parallel PyTorch training with the API of ``horovod.torch``.

A Horovod script runs on hvd after changing its import line only:

    import hvd.torch as hvd

    hvd.init()
    model = ...
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Start it with ``hvdrun -np N python train.py`` (or on its own, as a job of
one process). This build supports CPU tensors; CUDA tensors need a build
with the NCCL backend (``hvd.torch.nccl_built()``).
"""

from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from hvd.torch.compression import Compression
from hvd.torch.functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters
from hvd.torch.mpi_ops import (Adasum, Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather,
                               allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                               alltoall_async, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_,
                               ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set,
                               gloo_built, gloo_enabled, grouped_allgather, grouped_allgather_async,
                               grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                               grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async, init,
                               is_homogeneous, is_initialized, join, local_rank, local_size, mpi_built,
                               mpi_enabled, mpi_threads_supported, nccl_built, poll, rank, rank_source, reducescatter,
                               reducescatter_async, remove_process_set, rocm_built, shutdown, size,
                               sparse_allreduce_async, start_timeline, stop_timeline, synchronize)
from hvd.torch.optimizer import DistributedOptimizer
from hvd.torch.shared import shared_like, shared_zeros
from hvd.torch.sync_batch_norm import SyncBatchNorm
from hvd.torch import elastic  # noqa: E402  (hvd.elastic.run, TorchState, ElasticSampler)

__all__ = [
    "Compression", "allgather_object", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters",
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_", "grouped_allreduce_async_",
    "sparse_allreduce_async", "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "broadcast_", "broadcast_async_", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "join", "barrier", "poll", "synchronize", "init", "shutdown", "is_initialized", "rank_source", "start_timeline",
    "stop_timeline", "size", "local_size", "cross_size", "rank", "local_rank", "cross_rank", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "DistributedOptimizer", "SyncBatchNorm", "shared_zeros", "shared_like", "HorovodInternalError", "HostsUpdatedInterrupt", "elastic",
]
