"""PyTorch collectives with the interface of ``horovod.torch.mpi_ops``.

Every operation has an ``*_async`` form that returns an integer handle for
``poll()`` / ``synchronize()``, and a blocking form that goes through an
autograd function, so gradients flow back through the collective. In-place
forms end in ``_``. Tensors must be contiguous; CPU tensors of every dtype
hvd knows are supported (uint8, int8, int16, int32, int64, float16,
bfloat16, float32, float64, bool).

The input (and output) tensors are kept alive by the handle until the
operation has completed, even if the caller drops them.

CUDA tensors (with the NCCL backend; one GPU per process) are submitted
with the current stream of their device, which hvd's stream waits for:
nothing is synchronized. Results are ready for any stream when
``synchronize()`` returns; allgather, alltoall and reducescatter results
are CUDA tensors over memory hvd allocated (DLPack, no copy).
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.utils.dlpack

from hvd import _core
from hvd.common import basics as _basics
from hvd.common import ops as _ops
from hvd.common.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, cross_rank, cross_size,
                               cuda_built, ddl_built, gloo_built, gloo_enabled,
                               handle_average_backwards_compatibility, init, is_homogeneous, is_initialized,
                               local_rank, local_size, rank_source, mpi_built, mpi_enabled, mpi_threads_supported,
                               nccl_built, rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from hvd.common.exceptions import HorovodInternalError
from hvd.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from hvd.torch import _library, _reuse
from hvd.torch.compression import Compression

__all__ = [
    "init", "shutdown", "is_initialized", "rank_source", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "is_homogeneous", "start_timeline", "stop_timeline", "mpi_threads_supported",
    "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built",
    "cuda_built", "rocm_built", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "HorovodInternalError",
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_", "grouped_allreduce_async_",
    "sparse_allreduce_async", "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "broadcast_", "broadcast_async_", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "join", "barrier", "poll", "synchronize",
]

_DTYPES = {
    torch.uint8: _core.UINT8,
    torch.int8: _core.INT8,
    torch.int16: _core.INT16,
    torch.int32: _core.INT32,
    torch.int64: _core.INT64,
    torch.float16: _core.FLOAT16,
    torch.bfloat16: _core.BFLOAT16,
    torch.float32: _core.FLOAT32,
    torch.float64: _core.FLOAT64,
    torch.bool: _core.BOOL,
}

_KEPT_MIN_BYTES = _core.KEPT_MIN_BYTES

poll = _ops.poll
synchronize = _ops.synchronize

# constants of a graph torch.compile makes (_library.py)
size, rank, local_size, local_rank, cross_size, cross_rank = (
    _library.constant(f) for f in (size, rank, local_size, local_rank, cross_size, cross_rank))


# ---- tensors -> requests ----------------------------------------------------

def _device_id(tensor: torch.Tensor) -> int:
    if tensor.is_cpu:
        return _core.DEVICE_CPU
    if tensor.device.type == "cuda":
        if not _core.NCCL_BUILT:
            raise ValueError(f"CUDA tensors are not supported: this hvd was built without a GPU backend "
                             f"(hvd.torch.nccl_built() is 0). Move the tensor to the CPU with .cpu() "
                             f"(got a {tensor.type()} on {tensor.device}).")
        return tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
    raise ValueError(f"tensors on device '{tensor.device}' are not supported by hvd")


def _stream(tensor: torch.Tensor) -> Optional[int]:
    """The cudaStream_t (as an int) a CUDA tensor is ready on: the current
    stream of its device. hvd's stream waits for it with an event, so
    nothing here synchronizes the stream or the device. None on the CPU."""
    if not tensor.is_cuda:
        return None
    return torch.cuda.current_stream(tensor.device).cuda_stream


def _check(tensor: Any, what: str = "tensor") -> Tuple[int, int]:
    """(dtype code, device id) of a tensor hvd can send; ValueError otherwise."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what} must be a torch.Tensor, not {type(tensor).__name__}")
    if tensor.is_sparse:
        raise ValueError(f"sparse tensors are not supported here ({tensor.type()}); use "
                         f"sparse_allreduce_async or convert with .to_dense()")
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise ValueError(f"Tensor type {tensor.type()} is not supported.")
    if tensor.dim() > _core.MAX_NDIM:
        raise ValueError(f"tensors of more than {_core.MAX_NDIM} dimensions are not supported "
                         f"(got {tensor.dim()})")
    device = _device_id(tensor)
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    return code, device


def _check_output(tensor: torch.Tensor, output: torch.Tensor) -> None:
    if output is tensor:
        return
    if output.dtype != tensor.dtype or output.shape != tensor.shape or not output.is_contiguous():
        raise ValueError("output must be a contiguous tensor of the input's dtype and shape")


def _from_buffer(buf: Any, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor over memory hvd allocated, without a copy. On a GPU, buf is
    a DLPack capsule over device memory hvd allocated on the tensor's
    device; the tensor frees it when it dies. The operation has finished
    writing it when its handle completes, so it is ready for any stream."""
    if device.type == "cuda":
        out = torch.utils.dlpack.from_dlpack(buf)
        return out.view(torch.bool) if dtype == torch.bool else out  # DLPack 0.x has no bool: uint8
    if len(buf) == 0:
        out = torch.empty(tuple(shape), dtype=dtype)
    else:
        out = torch.frombuffer(buf, dtype=dtype).reshape(tuple(shape))
    return out if device.type == "cpu" else out.to(device)


def _new_output(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor of tensor's dtype and shape (contiguous) that nobody else
    holds, contents undefined, for an operation's result. For a CPU tensor
    that needs no gradient: one of this module's earlier results that its
    caller has dropped (_reuse.py), else a new one, kept for later calls.
    A new CPU tensor of at least _core.KEPT_MIN_BYTES lies over a buffer hvd
    keeps for reuse (_core.kept_buffer): a fresh allocation that large
    comes from mmap, and faulting its pages in as the result is written
    cost more than the reduction. The buffer serves a later output of its
    size once this tensor and every view of its storage are gone."""
    if isinstance(tensor, torch.Tensor) and tensor.is_cpu and tensor.layout == torch.strided:
        # autograd makes the result part of a graph; Dynamo traces no reuse
        if tensor.requires_grad or _library.tracing():
            return _fresh_output(tensor)
        out = _reuse.take(tensor)
        if out is None:
            out = _fresh_output(tensor)
            _reuse.keep(out)
        return out
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)


def _fresh_output(tensor: torch.Tensor) -> torch.Tensor:
    """A new CPU tensor for _new_output (no torch.device made: ~1 us a call).
    One over a kept buffer takes its shape in place (resize_ to as many
    elements): a view would share its storage with the flat tensor, and
    _reuse.py reuses only a tensor whose storage is its own."""
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes >= _KEPT_MIN_BYTES:
        return torch.frombuffer(_core.kept_buffer(nbytes), dtype=tensor.dtype).resize_(tensor.shape)
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)


def _needs_grad(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether autograd records an operation on tensors: else the blocking
    collectives skip their autograd function (whose result would be the
    same, without a graph node) and its cost per call."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _needs_grad1(tensor: Any) -> bool:
    """_needs_grad([tensor]), without making a list."""
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()


def _scale_args(prescale_factor: float, postscale_factor: float) -> Tuple[float, float]:
    try:
        return float(prescale_factor), float(postscale_factor)
    except (TypeError, ValueError):
        raise ValueError("prescale_factor and postscale_factor must be numbers") from None


def _not_empty(tensors: Sequence[Any], what: str) -> List[Any]:
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what} needs at least one tensor")
    return tensors


def _member_names(base: str, n: int) -> List[str]:
    return [f"{base}.{i}of{n}" for i in range(n)]


# ---- allreduce ----------------------------------------------------------------

def _allreduce_async(tensor: torch.Tensor, output: torch.Tensor, name: Optional[str], op: int,
                     prescale_factor: float, postscale_factor: float, process_set: ProcessSet) -> int:
    if op == Adasum:
        from hvd.torch import adasum
        return adasum.allreduce_async([tensor], [output], name, prescale_factor, postscale_factor, process_set,
                                      grouped=False)
    _check_output(tensor, output)
    return _submit_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set)


def _submit_allreduce(tensor: torch.Tensor, output: torch.Tensor, name: Optional[str], op: int,
                      prescale_factor: float, postscale_factor: float, process_set: ProcessSet) -> int:
    """_allreduce_async for an output of tensor's dtype and shape (in place,
    or one _new_output made), not Adasum."""
    core_op = _basics.core_reduce_op(op)
    code, device = _check(tensor)
    pre, post = _scale_args(prescale_factor, postscale_factor)
    ps_id = _ops.check_process_set(process_set)
    req = _ops.request(_ops.op_name("allreduce", name, ps_id), tensor.data_ptr(), output.data_ptr(), code,
                       tensor.shape, reduce_op=core_op, prescale=pre, postscale=post, process_set_id=ps_id,
                       device=device, stream=_stream(tensor))
    return _ops.submit(_ops.KIND_ALLREDUCE, [req], (tensor, output), lambda h: output)


def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                    op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing tensor over all processes (of process_set); the input is
    not modified. Returns a handle for poll()/synchronize(), whose result is
    a new tensor. op defaults to Average."""
    op = handle_average_backwards_compatibility(op, average)
    output = _new_output(tensor)
    if op == Adasum:
        return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set)
    return _submit_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                     op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing tensor in place; returns a handle."""
    if (type(name) is str and process_set is _GLOBAL and isinstance(tensor, torch.Tensor) and tensor.is_cpu
            and tensor.layout is _STRIDED and tensor.is_contiguous()):
        op = handle_average_backwards_compatibility(op, average)
        if op != Adasum and type(op) is int and type(prescale_factor) is float and type(postscale_factor) is float:
            # a DistributedOptimizer's call for each gradient: the request
            # parsed once, as allreduce_'s (_sync_requests)
            key = (name, tensor.dtype, tensor.shape, op, prescale_factor, postscale_factor)
            hit = _sync_requests.get(key)
            if hit is None:
                hit = _sync_request(key, tensor)
            return _register_result(_submit_prepared(hit[2], tensor), tensor)
        average = None
    op = handle_average_backwards_compatibility(op, average)
    if op == Adasum:
        return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)
    return _submit_allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces tensor in place and returns it."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("allreduce", process_set, lambda n: allreduce_(
            tensor, average, n, op, prescale_factor, postscale_factor, process_set))
    if (process_set is _GLOBAL and isinstance(tensor, torch.Tensor) and tensor.is_cpu
            and tensor.layout is _STRIDED and tensor.is_contiguous()):
        op = handle_average_backwards_compatibility(op, average)
        if op != Adasum and type(op) is int and type(prescale_factor) is float and type(postscale_factor) is float \
                and (name is None or type(name) is str):
            return _allreduce_now(tensor, tensor, name, op, prescale_factor, postscale_factor)
        average = None
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


# ---- the blocking allreduce of a plain CPU tensor ------------------------------
# The call a training loop makes again and again: the same named tensor, the
# global process set, no autograd, no compression. Its request less the
# data pointers is made once per (name, dtype, shape, op, scale factors), and
# the call waits on hvd._core's handle itself, without an integer handle of
# the registry (hvd.common.ops) or a closure: a few Python operations a call.

_GLOBAL = global_process_set
_STRIDED = torch.strided
_NO_COMPRESSION = Compression.none
_KIND_ALLREDUCE = _core.KIND_ALLREDUCE
_PICK = _reuse._pick
_COMPILING = _library._compiling  # _library.tracing(), a Python call less
_KEPT = _reuse._kept
_run_prepared = _core.run_prepared
_submit_prepared = _core.submit_prepared
_register_result = _ops.register_result
_run_kept = _core.run_kept
_bind_kept = _core.bind_kept
_SYNC_MAX = 4096  # requests remembered; a bound for callers whose names never repeat
_sync_requests: Dict[tuple, Tuple[Optional[str], tuple, Optional["_core.Prepared"]]] = {}


def _allreduce_now(tensor: torch.Tensor, output: Optional[torch.Tensor], name: Optional[str], op: int,
                   prescale_factor: float, postscale_factor: float) -> torch.Tensor:
    """Reduces a contiguous CPU tensor (not Adasum, the global process set)
    into output, or into a new result (_new_output's) when output is None;
    waits and returns the result. name: a str or None, the factors floats."""
    dtype, shape = tensor.dtype, tensor.shape
    key = (name, dtype, shape, op, prescale_factor, postscale_factor)
    hit = _sync_requests.get(key)
    if hit is None:
        hit = _sync_request(key, tensor)
    submitted, tail, prepared = hit
    if submitted is None:
        submitted = _ops.op_name("allreduce", None, 0)
    if output is None:
        if prepared is not None and _PICK is not None:
            # the search of the list bound to prepared, both data pointers
            # and the run in one call; None: nothing was run
            output = _run_kept(prepared, tensor)
            if output is not None:
                return output
        # _reuse.take_of's search in C, called here (a Python call less);
        # take_of itself where it has more to do
        output = _PICK(_KEPT, dtype, shape) if _PICK is not None else _reuse.take_of(dtype, shape)
        if type(output) is tuple:  # its state changed: take_of forgets it
            output = _reuse.take_of(dtype, shape)
        if output is None:
            output = _fresh_output(tensor)
            _reuse.keep(output)
        if prepared is not None and _PICK is not None:  # the list may be new, or gone
            _bind_kept(prepared, _KEPT.get((dtype, shape)), dtype, shape)
    if prepared is not None:  # the request parsed once: this thread runs it and waits
        _run_prepared(prepared, tensor.data_ptr(), output.data_ptr(), (tensor, output))
        return output
    # (grouped=False, waits=True) by position, which parses faster than
    # keywords: this thread waits at once and runs the operation itself
    _core.submit(_KIND_ALLREDUCE, [(submitted, tensor.data_ptr(), output.data_ptr()) + tail],
                 (tensor, output), False, True).wait()
    return output


def _sync_request(key: tuple, tensor: torch.Tensor) -> Tuple[Optional[str], tuple, Optional["_core.Prepared"]]:
    """(the submitted name, or None for an unnamed call, which takes the next
    one each call; the request's fields after the pointers; for a named
    call, the request parsed once by hvd._core.prepare) for _allreduce_now,
    checked as _submit_allreduce checks them."""
    name, _, _, op, prescale_factor, postscale_factor = key
    core_op = _basics.core_reduce_op(op)
    code, device = _check(tensor)
    pre, post = _scale_args(prescale_factor, postscale_factor)
    submitted = None if name is None else _ops.op_name("allreduce", name, 0)
    req = _ops.request("", 0, 0, code, tensor.shape, reduce_op=core_op, prescale=pre, postscale=post,
                       process_set_id=0, device=device, stream=None)
    prepared = None if submitted is None else _core.prepare((submitted, 0, 0) + req[3:])
    if len(_sync_requests) >= _SYNC_MAX:
        _sync_requests.clear()
    hit = _sync_requests[key] = (submitted, req[3:], prepared)
    return hit


def _forget_requests() -> None:
    _sync_requests.clear()
    _now_requests.clear()
    _forget_groups()


_basics._init_hooks.append(_forget_requests)


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce with a gradient: the gradient is reduced the same way."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                           process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), average=ctx.average, op=ctx.op,
                         prescale_factor=ctx.prescale_factor, postscale_factor=ctx.postscale_factor,
                         process_set=ctx.process_set)
        return grad, None, None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression=Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces tensor over all processes (of process_set) and returns the
    result as a new tensor; differentiable. op defaults to Average."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("allreduce", process_set, lambda n: allreduce(
            tensor, average, n, compression, op, prescale_factor, postscale_factor, process_set))
    if (compression is _NO_COMPRESSION and process_set is _GLOBAL and isinstance(tensor, torch.Tensor)
            and not tensor.requires_grad and tensor.is_cpu and tensor.layout is _STRIDED
            and tensor.is_contiguous() and not _COMPILING()):
        # the call most scripts make, on the CPU: a kept result, no handle
        op = handle_average_backwards_compatibility(op, average)
        if op != Adasum and type(op) is int and type(prescale_factor) is float and type(postscale_factor) is float \
                and (name is None or type(name) is str):
            return _allreduce_now(tensor, None, name, op, prescale_factor, postscale_factor)
        average = None
    if compression is Compression.none and not _library.tracing() and not _needs_grad1(tensor):
        # no compression, no graph
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                           process_set))
    compressed, cctx = compression.compress(tensor)
    if _library.tracing() and _library.set_id(process_set) is not None:
        reduced = _library.allreduce(compressed, name, handle_average_backwards_compatibility(op, average),
                                          prescale_factor, postscale_factor, _library.set_id(process_set))
        return compression.decompress(reduced, cctx)
    if _needs_grad([compressed]):
        reduced = HorovodAllreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor,
                                         process_set)
    else:
        reduced = synchronize(allreduce_async(compressed, average, name, op, prescale_factor, postscale_factor,
                                              process_set))
    return compression.decompress(reduced, cctx)


def _grouped_allreduce_parts(tensors: List[torch.Tensor], outputs: List[torch.Tensor], name: Optional[str],
                             op: int, prescale_factor: float, postscale_factor: float,
                             process_set: ProcessSet) -> tuple:
    """The arguments of _ops.submit / _ops.run for a grouped allreduce (not
    Adasum)."""
    core_op = _basics.core_reduce_op(op)
    pre, post = _scale_args(prescale_factor, postscale_factor)
    ps_id = _ops.check_process_set(process_set)
    names = _member_names(_ops.op_name("grouped_allreduce", name, ps_id), len(tensors))
    reqs = []
    for t, out, n in zip(tensors, outputs, names):
        code, device = _check(t)
        _check_output(t, out)
        reqs.append(_ops.request(n, t.data_ptr(), out.data_ptr(), code, t.shape, reduce_op=core_op,
                                 prescale=pre, postscale=post, process_set_id=ps_id, device=device,
                                 stream=_stream(t)))
    return _ops.KIND_ALLREDUCE, reqs, (tuple(tensors), tuple(outputs)), lambda h: list(outputs), True


def _grouped_allreduce_async(tensors: List[torch.Tensor], outputs: List[torch.Tensor], name: Optional[str],
                             op: int, prescale_factor: float, postscale_factor: float,
                             process_set: ProcessSet) -> int:
    if op == Adasum:
        from hvd.torch import adasum
        return adasum.allreduce_async(tensors, outputs, name, prescale_factor, postscale_factor, process_set,
                                      grouped=True)
    return _ops.submit(*_grouped_allreduce_parts(tensors, outputs, name, op, prescale_factor, postscale_factor,
                                                 process_set))


_prepare_group = _core.prepare_group
_run_prepared_group = _core.run_prepared_group
_submit_prepared_group = _core.submit_prepared_group
_run_group_kept = _core.run_group_kept
_bind_group_outputs = _core.bind_group_outputs
_GROUPS_MAX = 256  # groups remembered; a bound for callers whose names never repeat
_GROUP_KEPT_BYTES = 16 << 20  # the largest out-of-place group whose outputs are kept (two sets)
_GROUP_KEPT_TOTAL = 64 << 20  # all groups' kept outputs; past it every group lets its outputs go
_group_requests: Dict[tuple, "_core.PreparedGroup"] = {}
_group_unkept: Set[tuple] = set()  # out-of-place groups whose outputs are not kept
_group_kept: Dict[tuple, int] = {}  # bytes of outputs each group keeps


def _forget_groups() -> None:
    _group_requests.clear()
    _group_unkept.clear()
    _group_kept.clear()


def _keep_group_outputs(key: tuple, outputs: List[torch.Tensor], nbytes: int) -> None:
    """Binds outputs (nbytes) to the group prepared under key, which keeps
    two sets; all groups together keep at most _GROUP_KEPT_TOTAL bytes."""
    prepared = _group_requests.get(key)
    if prepared is None:
        return
    held = min(_group_kept.get(key, 0) + nbytes, 2 * nbytes)
    if sum(_group_kept.values()) - _group_kept.get(key, 0) + held > _GROUP_KEPT_TOTAL:
        _forget_groups()  # names that never repeat, or many large groups
        return
    _bind_group_outputs(prepared, outputs)
    _group_kept[key] = held


def _group_key(tensors: List[torch.Tensor], name: Optional[str], op: int, prescale_factor: float,
               postscale_factor: float, process_set: ProcessSet, in_place: bool) -> Optional[tuple]:
    """The key a group is prepared under (_group_requests), or None for a
    call that is not prepared (no name, or arguments of other types)."""
    if type(name) is str and type(op) is int and type(prescale_factor) is float \
            and type(postscale_factor) is float:
        return (name, op, prescale_factor, postscale_factor, _ops.check_process_set(process_set), len(tensors),
                in_place)
    return None


def _grouped_allreduce_now(tensors: List[torch.Tensor], outputs: List[torch.Tensor], name: Optional[str],
                           op: int, prescale_factor: float, postscale_factor: float,
                           process_set: ProcessSet) -> List[torch.Tensor]:
    """Reduces a group into outputs and waits: the blocking calls' path
    (_ops.run: the group may run on this thread, from the board). A named
    group of CPU tensors is parsed once (hvd._core.prepare_group) and run
    over the same members' new tensors by one C call, which checks each
    member's dtype, size, device and layout."""
    if op == Adasum:
        return synchronize(_grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                                                    process_set))
    key = _group_key(tensors, name, op, prescale_factor, postscale_factor, process_set, outputs is tensors)
    if key is not None:
        prepared = _group_requests.get(key)
        if prepared is not None and _run_prepared_group(prepared, tensors, outputs) is not None:
            return list(outputs)
    parts = _grouped_allreduce_parts(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set)
    result = _ops.run(*parts)
    if key is not None:
        _prepare_group_of(key, tensors, parts[1])
    return result


def _prepare_group_of(key: tuple, tensors: List[torch.Tensor], requests: List[tuple]) -> None:
    """Prepares the group of requests (submitted once over tensors) under
    key, when its tensors are on the CPU."""
    if all(t.is_cpu for t in tensors):
        if len(_group_requests) >= _GROUPS_MAX:
            _forget_groups()
        _group_requests[key] = _prepare_group(tuple(requests), tuple(t.dtype for t in tensors),
                                              tuple(t.shape for t in tensors))


def _grouped_allreduce_new(tensors: Sequence[torch.Tensor], average: Optional[bool], name: Optional[str],
                           op: Optional[int], prescale_factor: float, postscale_factor: float,
                           process_set: ProcessSet, reuse: bool = False) -> List[torch.Tensor]:
    """_grouped_allreduce_now into new outputs (the blocking out-of-place
    forms, with and without autograd). reuse (no autograd): a named group
    of CPU tensors keeps two sets of its outputs (hvd._core.
    bind_group_outputs, up to _GROUP_KEPT_BYTES) and reduces into one that
    nobody holds any more (run_group_kept): the caller holds the last
    call's results during the next."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    key = _group_key(tensors, name, op, prescale_factor, postscale_factor, process_set, False) \
        if reuse and _PICK is not None else None
    if key is not None:
        prepared = _group_requests.get(key)
        if prepared is not None:
            outputs = _run_group_kept(prepared, tensors)
            if outputs is not None:
                return outputs
        nbytes = -1
        if key not in _group_unkept and all(t.is_cpu and t.layout is _STRIDED for t in tensors):
            nbytes = sum(t.numel() * t.element_size() for t in tensors)
        if 0 <= nbytes <= _GROUP_KEPT_BYTES:
            outputs = [_fresh_output(t) for t in tensors]
            result = _grouped_allreduce_now(tensors, outputs, name, op, prescale_factor, postscale_factor,
                                            process_set)
            _keep_group_outputs(key, outputs, nbytes)
            return result
        if len(_group_unkept) >= _GROUPS_MAX:
            _group_unkept.clear()
        _group_unkept.add(key)  # too large, or not on the CPU: asked once
    return _grouped_allreduce_now(tensors, [_new_output(t) for t in tensors], name, op, prescale_factor,
                                  postscale_factor, process_set)


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                            name: Optional[str] = None, op: Optional[int] = None, prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing a list of tensors as one group; the result is a list of
    new tensors."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = _not_empty(tensors, "grouped_allreduce")
    outputs = [_new_output(t) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                             name: Optional[str] = None, op: Optional[int] = None, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing a list of tensors in place, as one group."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = _not_empty(tensors, "grouped_allreduce")
    key = _group_key(tensors, name, op, prescale_factor, postscale_factor, process_set, True) \
        if op != Adasum else None
    if key is None:
        return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set)
    # a DistributedOptimizer's groups: prepared once, as the blocking groups
    prepared = _group_requests.get(key)
    if prepared is not None:
        core = _submit_prepared_group(prepared, tensors)
        if core is not None:
            return _register_result(core, tensors)
    parts = _grouped_allreduce_parts(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set)
    handle = _ops.submit(*parts)
    _prepare_group_of(key, tensors, parts[1])
    return handle


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Reduces a list of tensors in place, as one group; returns them."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("grouped_allreduce", process_set, lambda n: grouped_allreduce_(
            tensors, average, n, op, prescale_factor, postscale_factor, process_set))
    op = handle_average_backwards_compatibility(op, average)
    tensors = _not_empty(tensors, "grouped_allreduce")
    return _grouped_allreduce_now(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Grouped allreduce with gradients."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return tuple(_grouped_allreduce_new(tensors, average, name, op, prescale_factor, postscale_factor,
                                            process_set))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce([g.contiguous() for g in grad_outputs], average=ctx.average, op=ctx.op,
                                  prescale_factor=ctx.prescale_factor, postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None, None, *grads)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                      name: Optional[str] = None, compression=Compression.none, op: Optional[int] = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Reduces a list of tensors as one group; returns new tensors;
    differentiable."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("grouped_allreduce", process_set, lambda n: grouped_allreduce(
            tensors, average, n, compression, op, prescale_factor, postscale_factor, process_set))
    tensors = _not_empty(tensors, "grouped_allreduce")
    compressed, cctxs = zip(*[compression.compress(t) for t in tensors])
    if _library.tracing() and _library.set_id(process_set) is not None:
        reduced = _library.grouped_allreduce(list(compressed), name,
                                                  handle_average_backwards_compatibility(op, average),
                                                  prescale_factor, postscale_factor, _library.set_id(process_set))
        return [compression.decompress(t, c) for t, c in zip(reduced, cctxs)]
    if _needs_grad(compressed):
        reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                                *compressed)
    else:
        reduced = _grouped_allreduce_new(compressed, average, name, op, prescale_factor, postscale_factor,
                                         process_set, reuse=True)
    return [compression.decompress(t, c) for t, c in zip(reduced, cctxs)]


def sparse_allreduce_async(tensor: torch.Tensor, name: str, op: int,
                           process_set: ProcessSet = global_process_set):
    """Reduces a sparse COO tensor by allgathering its indices and values.
    Returns a callable that waits and returns the reduced sparse tensor (it
    may also be passed to synchronize())."""
    if op not in (Average, Sum):
        raise NotImplementedError("sparse allreduce supports op=Average and op=Sum only")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(), name=f"{name}.indices",
                                     process_set=process_set)
    values_handle = allgather_async(t._values().contiguous(), name=f"{name}.values", process_set=process_set)
    n = _ops.set_size(process_set)

    def finish() -> torch.Tensor:
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if op == Average:
            values = values / n
        if indices.dim() == 0 or values.dim() == 0:
            return t.new().resize_as_(t)
        return _sparse_coo_tensor(indices.transpose(0, 1), values, t.size())

    return _ops.register_callable(finish)


def _sparse_coo_tensor(indices: torch.Tensor, values: torch.Tensor, size: torch.Size) -> torch.Tensor:
    """A COO tensor of the indices and values every process sent, its
    invariants checked (indices within size: they came from elsewhere).
    torch >= 2.0 takes check_invariants (and recent versions warn when it
    is left out); torch 1.x has no such argument."""
    if hasattr(torch.sparse, "check_sparse_tensor_invariants"):
        return torch.sparse_coo_tensor(indices, values, size, check_invariants=True)
    return torch.sparse_coo_tensor(indices, values, size)


# ---- the blocking broadcast, allgather, reducescatter and alltoall of a plain CPU tensor --
# As _allreduce_now: a CPU tensor of the global process set, no autograd, no
# compression; its request less the pointers is made once per (kind, name,
# dtype, shape, and the kind's own fields), and the call waits at once on
# hvd._core's handle (libhvd then runs it on this thread, from the board).

_now_requests: Dict[tuple, Tuple[Optional[str], tuple, Optional["_core.Prepared"]]] = {}


def _plain(tensor: Any) -> bool:
    """A contiguous CPU tensor outside autograd and Dynamo's tracing."""
    return (isinstance(tensor, torch.Tensor) and tensor.is_cpu and tensor.layout is _STRIDED
            and tensor.is_contiguous() and not tensor.requires_grad and not _library.tracing())


def _run_now(kind: int, base: str, name: Optional[str], tensor: torch.Tensor, output_ptr: Optional[int],
             keepalive: Any, extra: tuple, fields: Callable[[], Dict[str, Any]]) -> Any:
    """Runs one blocking operation of a plain CPU tensor of the global set;
    returns hvd._core's completed handle (None for a broadcast of a named
    tensor). extra: the key's fields beyond (kind, name, dtype, shape);
    fields(): _ops.request's keywords for them, called only when the
    request is not made yet. A named request without splits is parsed once
    (hvd._core.prepare) and run with new pointers (run_prepared)."""
    key = (kind, name, tensor.dtype, tensor.shape) + extra
    hit = _now_requests.get(key)
    if hit is None:
        code, device = _check(tensor)
        submitted = None if name is None else _ops.op_name(base, name, 0)
        kw = fields()
        req = _ops.request("", 0, 0, code, tensor.shape, process_set_id=0, device=device, stream=None, **kw)
        prepared = None
        if submitted is not None and kw.get("splits") is None:
            prepared = _core.prepare((submitted, 0, 0) + req[3:], kind)
        if len(_now_requests) >= _SYNC_MAX:
            _now_requests.clear()
        hit = _now_requests[key] = (submitted, req[3:], prepared)
    submitted, tail, prepared = hit
    if prepared is not None:
        return _run_prepared(prepared, tensor.data_ptr(), output_ptr or 0, keepalive)
    if submitted is None:
        submitted = _ops.op_name(base, None, 0)
    h = _core.submit(kind, [(submitted, tensor.data_ptr(), output_ptr) + tail], keepalive, False, True)
    h.wait()
    return h


def _result(h: Any, dtype: torch.dtype) -> torch.Tensor:
    """The CPU tensor over the output libhvd allocated for h (one tensor).
    A view costs as much as the tensor (~0.8 us): none for one dimension."""
    buf, shape = h.output(0)
    if not len(buf):
        return torch.empty(shape, dtype=dtype)
    out = torch.frombuffer(buf, dtype=dtype)
    return out if len(shape) == 1 else out.view(shape)


_KIND_BROADCAST = _core.KIND_BROADCAST
_KIND_ALLGATHER = _core.KIND_ALLGATHER
_KIND_REDUCESCATTER = _core.KIND_REDUCESCATTER
_KIND_ALLTOALL = _core.KIND_ALLTOALL


def _broadcast_now(tensor: torch.Tensor, output: torch.Tensor, root_rank: int, name: Optional[str]) -> torch.Tensor:
    _run_now(_KIND_BROADCAST, "broadcast", name, tensor, output.data_ptr(), (tensor, output), (root_rank,),
             lambda: {"root": _ops.check_root(root_rank, _GLOBAL)})
    return output


def _name_ok(name: Any) -> bool:
    return name is None or type(name) is str


# ---- allgather ----------------------------------------------------------------

def _allgather_parts(tensors: List[torch.Tensor], name: Optional[str], process_set: ProcessSet,
                     grouped: bool) -> tuple:
    """The arguments of _ops.submit / _ops.run for an allgather."""
    ps_id = _ops.check_process_set(process_set)
    base = _ops.op_name("grouped_allgather" if grouped else "allgather", name, ps_id)
    names = _member_names(base, len(tensors)) if grouped else [base]
    reqs = []
    for t, n in zip(tensors, names):
        code, device = _check(t)
        if t.dim() == 0:
            raise ValueError("allgather needs a tensor with at least one dimension (got a scalar); "
                             "use tensor.reshape(1)")
        reqs.append(_ops.request(n, t.data_ptr(), None, code, t.shape, process_set_id=ps_id, device=device,
                                 stream=_stream(t)))
    meta = [(t.dtype, t.device) for t in tensors]

    def finish(h) -> Any:
        outs = []
        for i, (dtype, device) in enumerate(meta):
            buf, shape = h.output(i)
            outs.append(_from_buffer(buf, shape, dtype, device))
        return outs if grouped else outs[0]

    return _ops.KIND_ALLGATHER, reqs, tuple(tensors), finish, grouped


def _allgather_async(tensors: List[torch.Tensor], name: Optional[str], process_set: ProcessSet,
                     grouped: bool) -> int:
    return _ops.submit(*_allgather_parts(tensors, name, process_set, grouped))


def allgather_async(tensor: torch.Tensor, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts concatenating tensor from all processes along the first
    dimension (which may differ per process); returns a handle."""
    return _allgather_async([tensor], name, process_set, grouped=False)


class HorovodAllgather(torch.autograd.Function):
    """Allgather with a gradient: each process gets back its own rows of the
    averaged gradient (Horovod's convention)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out = _ops.run(*_allgather_parts([tensor], name, process_set, False))
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return out

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ps)
        offset = int(dims[:ps.rank()].sum().item())
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Concatenates tensor from all processes along the first dimension;
    differentiable."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("allgather", process_set, lambda n: allgather(tensor, n, process_set))
    if process_set is _GLOBAL and _name_ok(name) and _plain(tensor) and tensor.dim():
        return _result(_run_now(_KIND_ALLGATHER, "allgather", name, tensor, None, tensor, (), dict), tensor.dtype)
    if _library.tracing() and _library.set_id(process_set) is not None:
        return _library.allgather(tensor, name, _library.set_id(process_set))
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts allgathering a list of tensors as one group; the result is a
    list of tensors."""
    return _allgather_async(_not_empty(tensors, "grouped_allgather"), name, process_set, grouped=True)


class HorovodGroupedAllgather(torch.autograd.Function):
    """Grouped allgather with gradients."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        outs = tuple(_ops.run(*_allgather_parts(list(tensors), name, process_set, True)))
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return outs

    @staticmethod
    def backward(ctx, *grad_outputs):
        ps = ctx.process_set
        grads = grouped_allreduce([g.contiguous() for g in grad_outputs], op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dims], dtype=torch.int64), process_set=ps)
        offsets = dims[:ps.rank()].sum(dim=0).tolist() if ps.rank() else [0] * len(ctx.dims)
        return (None, None, *[g.narrow(0, int(o), d) for g, o, d in zip(grads, offsets, ctx.dims)])


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Allgathers a list of tensors as one group; differentiable."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("grouped_allgather", process_set,
                                     lambda n: grouped_allgather(tensors, n, process_set))
    tensors = _not_empty(tensors, "grouped_allgather")
    if _library.tracing() and _library.set_id(process_set) is not None:
        return _library.grouped_allgather(tensors, name, _library.set_id(process_set))
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---- broadcast ----------------------------------------------------------------

def _broadcast_parts(tensor: torch.Tensor, output: torch.Tensor, root_rank: int, name: Optional[str],
                     process_set: ProcessSet) -> tuple:
    """The arguments of _ops.submit / _ops.run for a broadcast."""
    code, device = _check(tensor)
    _check_output(tensor, output)
    ps_id = _ops.check_process_set(process_set)
    root = _ops.check_root(root_rank, process_set)
    req = _ops.request(_ops.op_name("broadcast", name, ps_id), tensor.data_ptr(), output.data_ptr(), code,
                       tensor.shape, root=root, process_set_id=ps_id, device=device, stream=_stream(tensor))
    return _ops.KIND_BROADCAST, [req], (tensor, output), lambda h: output


def _broadcast_async(tensor: torch.Tensor, output: torch.Tensor, root_rank: int, name: Optional[str],
                     process_set: ProcessSet) -> int:
    return _ops.submit(*_broadcast_parts(tensor, output, root_rank, name, process_set))


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts broadcasting root_rank's tensor; the result is a new tensor."""
    output = _new_output(tensor)
    return _broadcast_async(tensor, output, root_rank, name, process_set)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts broadcasting root_rank's tensor into tensor on every process."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Broadcasts root_rank's tensor into tensor on every process; returns it."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("broadcast", process_set,
                                     lambda n: broadcast_(tensor, root_rank, n, process_set))
    if (process_set is _GLOBAL and type(root_rank) is int and _name_ok(name) and isinstance(tensor, torch.Tensor)
            and tensor.is_cpu and tensor.layout is _STRIDED and tensor.is_contiguous()):
        return _broadcast_now(tensor, tensor, root_rank, name)
    return _ops.run(*_broadcast_parts(tensor, tensor, root_rank, name, process_set))


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast with a gradient: the averaged gradient goes to the root,
    zeros elsewhere (Horovod's convention)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _ops.run(*_broadcast_parts(tensor, _new_output(tensor), root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns root_rank's tensor on every process (a new tensor);
    differentiable."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("broadcast", process_set, lambda n: broadcast(tensor, root_rank, n, process_set))
    if process_set is _GLOBAL and type(root_rank) is int and _name_ok(name) and _plain(tensor):
        return _broadcast_now(tensor, _new_output(tensor), root_rank, name)
    if _library.tracing() and _library.set_id(process_set) is not None and type(root_rank) is int:
        return _library.broadcast(tensor, root_rank, name, _library.set_id(process_set))
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


# ---- alltoall -----------------------------------------------------------------

def _splits_list(splits: Any, tensor: torch.Tensor, n: int) -> Optional[List[int]]:
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension (got a scalar)")
    if splits is None:
        if tensor.shape[0] % n:
            raise ValueError(f"alltoall without splits needs the first dimension ({tensor.shape[0]}) to be "
                             f"divisible by the number of processes ({n})")
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype == torch.bool:
            raise ValueError(f"splits must hold integers, not {splits.dtype}")
        values = [int(s) for s in splits.flatten().tolist()]
    else:
        try:
            values = [int(s) for s in splits]
        except (TypeError, ValueError):
            raise ValueError(f"splits must be a sequence of ints, not {splits!r}") from None
    if len(values) != n:
        raise ValueError(f"splits has {len(values)} entries, but there are {n} processes")
    if any(v < 0 for v in values):
        raise ValueError(f"splits must not be negative: {values}")
    if sum(values) != tensor.shape[0]:
        raise ValueError(f"splits sum to {sum(values)}, but the first dimension of the tensor is "
                         f"{tensor.shape[0]}")
    return values


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Starts an alltoall: splits[r] rows of tensor (first dimension) go to
    process r (equal parts without splits). The result is a tuple
    (gathered tensor, rows received from each process)."""
    code, device = _check(tensor)
    ps_id = _ops.check_process_set(process_set)
    n = _ops.set_size(process_set)
    values = _splits_list(splits, tensor, n)
    splits_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    req = _ops.request(_ops.op_name("alltoall", name, ps_id), tensor.data_ptr(), None, code, tensor.shape,
                       splits=values, process_set_id=ps_id, device=device, stream=_stream(tensor))
    dtype, dev = tensor.dtype, tensor.device

    def finish(h) -> Tuple[torch.Tensor, torch.Tensor]:
        buf, shape = h.output(0)
        received = torch.tensor(h.recv_splits(), dtype=splits_dtype)
        return _from_buffer(buf, shape, dtype, dev), received

    return _ops.submit(_ops.KIND_ALLTOALL, [req], (tensor, splits), finish)


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall with a gradient: the gradient travels back the same way."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.received = received
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received,
                                             process_set=ctx.process_set))
        return grad, None, None, None


def alltoall(tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None,
             process_set: ProcessSet = global_process_set):
    """Scatters rows of tensor to all processes and gathers what they send;
    returns the gathered tensor, plus the received splits when splits were
    given. Differentiable."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("alltoall", process_set, lambda n: alltoall(tensor, splits, n, process_set))
    if process_set is _GLOBAL and _name_ok(name) and _plain(tensor):
        return _alltoall_now(tensor, splits, name)
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


def _alltoall_now(tensor: torch.Tensor, splits: Any, name: Optional[str]):
    """alltoall() of a plain CPU tensor of the global set, as _run_now runs
    the other blocking collectives (requests kept per splits too)."""
    values = _splits_list(splits, tensor, _core.size())
    h = _run_now(_KIND_ALLTOALL, "alltoall", name, tensor, None, (tensor, splits),
                 (None if values is None else tuple(values),), lambda: {"splits": values})
    out = _result(h, tensor.dtype)
    if splits is None:
        return out
    splits_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    return out, torch.tensor(h.recv_splits(), dtype=splits_dtype)


# ---- reducescatter --------------------------------------------------------------

def _reducescatter_parts(tensors: List[torch.Tensor], name: Optional[str], op: int, process_set: ProcessSet,
                         prescale_factor: float, postscale_factor: float, grouped: bool) -> tuple:
    """The arguments of _ops.submit / _ops.run for a reducescatter."""
    core_op = _basics.core_reduce_op(op)
    pre, post = _scale_args(prescale_factor, postscale_factor)
    ps_id = _ops.check_process_set(process_set)
    base = _ops.op_name("grouped_reducescatter" if grouped else "reducescatter", name, ps_id)
    names = _member_names(base, len(tensors)) if grouped else [base]
    reqs = []
    for t, n in zip(tensors, names):
        code, device = _check(t)
        if t.dim() == 0:
            raise ValueError("reducescatter needs a tensor with at least one dimension (got a scalar)")
        reqs.append(_ops.request(n, t.data_ptr(), None, code, t.shape, reduce_op=core_op, prescale=pre,
                                 postscale=post, process_set_id=ps_id, device=device,
                                 stream=_stream(t)))
    meta = [(t.dtype, t.device) for t in tensors]

    def finish(h) -> Any:
        outs = []
        for i, (dtype, device) in enumerate(meta):
            buf, shape = h.output(i)
            outs.append(_from_buffer(buf, shape, dtype, device))
        return outs if grouped else outs[0]

    return _ops.KIND_REDUCESCATTER, reqs, tuple(tensors), finish, grouped


def _reducescatter_async(tensors: List[torch.Tensor], name: Optional[str], op: int, process_set: ProcessSet,
                         prescale_factor: float, postscale_factor: float, grouped: bool) -> int:
    return _ops.submit(*_reducescatter_parts(tensors, name, op, process_set, prescale_factor, postscale_factor,
                                             grouped))


def reducescatter_async(tensor: torch.Tensor, name: Optional[str] = None, op: int = Average,
                        process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0) -> int:
    """Starts a reducescatter: the reduced tensor is split along the first
    dimension and process r keeps part r (the first d0 % size processes get
    one extra row)."""
    return _reducescatter_async([tensor], name, op, process_set, prescale_factor, postscale_factor, False)


def _reducescatter_grad(grads: List[torch.Tensor], op: int, process_set: ProcessSet, prescale_factor: float,
                        postscale_factor: float) -> List[torch.Tensor]:
    """Horovod's gradient of a reducescatter: the incoming gradients, times
    the set's size for op=Sum (as a Sum allreduce's gradient is the Sum of
    the gradients) and times the scale factors, allgathered back as one
    group. Horovod's reducescatter takes no other op: no other has a
    gradient."""
    if op not in (Average, Sum):
        raise NotImplementedError(f"the gradient of reducescatter is defined for op=Sum and op=Average only "
                                  f"(got {_basics.op_name(op)})")
    if op == Sum:
        grads = [g * _ops.set_size(process_set) for g in grads]
    if prescale_factor != 1.0:
        grads = [g * prescale_factor for g in grads]
    if postscale_factor != 1.0:
        grads = [g * postscale_factor for g in grads]
    return grouped_allgather([g.contiguous() for g in grads], process_set=process_set)


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter with Horovod's gradient (_reducescatter_grad)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor, ctx.postscale_factor = _scale_args(prescale_factor, postscale_factor)
        return _ops.run(*_reducescatter_parts([tensor], name, op, process_set, prescale_factor,
                                              postscale_factor, False))

    @staticmethod
    def backward(ctx, grad_output):
        grad, = _reducescatter_grad([grad_output], ctx.op, ctx.process_set, ctx.prescale_factor,
                                    ctx.postscale_factor)
        return grad, None, None, None, None, None


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None, compression=Compression.none,
                  op: int = Average, process_set: ProcessSet = global_process_set,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces tensor over all processes and returns this process's part of
    the result (split along the first dimension); differentiable."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("reducescatter", process_set, lambda n: reducescatter(
            tensor, n, compression, op, process_set, prescale_factor, postscale_factor))
    if (compression is _NO_COMPRESSION and process_set is _GLOBAL and type(op) is int and op != Adasum
            and type(prescale_factor) is float and type(postscale_factor) is float and _name_ok(name)
            and _plain(tensor) and tensor.dim()):
        def fields() -> Dict[str, Any]:
            pre, post = _scale_args(prescale_factor, postscale_factor)
            return {"reduce_op": _basics.core_reduce_op(op), "prescale": pre, "postscale": post}
        h = _run_now(_KIND_REDUCESCATTER, "reducescatter", name, tensor, None, tensor,
                     (op, prescale_factor, postscale_factor), fields)
        return _result(h, tensor.dtype)
    compressed, cctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None, op: int = Average,
                                process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Starts reducescattering a list of tensors as one group."""
    return _reducescatter_async(_not_empty(tensors, "grouped_reducescatter"), name, op, process_set,
                                prescale_factor, postscale_factor, True)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Grouped reducescatter with Horovod's gradient (_reducescatter_grad)."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor, ctx.postscale_factor = _scale_args(prescale_factor, postscale_factor)
        return tuple(_ops.run(*_reducescatter_parts(list(tensors), name, op, process_set, prescale_factor,
                                                    postscale_factor, True)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = _reducescatter_grad(list(grad_outputs), ctx.op, ctx.process_set, ctx.prescale_factor,
                                    ctx.postscale_factor)
        return (None, None, None, None, None, *grads)


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          compression=Compression.none, op: int = Average,
                          process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """Reducescatters a list of tensors as one group; differentiable."""
    if name is None and not _COMPILING():  # a name that repeats: _ops.unnamed_blocking
        return _ops.unnamed_blocking("grouped_reducescatter", process_set, lambda n: grouped_reducescatter(
            tensors, n, compression, op, process_set, prescale_factor, postscale_factor))
    tensors = _not_empty(tensors, "grouped_reducescatter")
    compressed, cctxs = zip(*[compression.compress(t) for t in tensors])
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                             *compressed)
    return [compression.decompress(t, c) for t, c in zip(outs, cctxs)]


# ---- join, barrier --------------------------------------------------------------

def join(device: int = -1) -> int:
    """Says this process has no more data. Until every process has joined it
    keeps taking part in the others' allreduces (contributing zeros; Average
    still divides by the full size), as in Horovod; any other collective on
    the others (allgather, broadcast, alltoall, reducescatter, barrier)
    raises HorovodInternalError at once, and they join in turn. Blocks until
    all processes have joined; returns the rank that joined last, the same
    on every process."""
    return _core.join()


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Blocks until every process (of process_set) has reached the barrier."""
    ps_id = _ops.check_process_set(process_set)
    if ps_id == 0:
        _core.barrier()
        return
    token = torch.zeros(1, dtype=torch.int32)
    _ops.unnamed_blocking("allreduce", process_set,
                          lambda n: synchronize(_allreduce_async(token, token, n, Sum, 1.0, 1.0, process_set)))
