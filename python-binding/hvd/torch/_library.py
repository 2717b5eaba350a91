"""hvd's collectives as PyTorch custom operators, for torch.compile.

Dynamo cannot trace into hvd._core (a C extension), so a collective called
in a compiled function would break the graph. On torch >= 2.4 the blocking
collectives are operators of the ``hvd`` namespace
(``torch.library.custom_op``): allreduce, grouped_allreduce, allgather,
grouped_allgather and broadcast, and the allgathers' gradients. Each has a
fake implementation that gives the result's shape and dtype for tracing,
and an autograd formula equal to the eager one (the autograd functions of
mpi_ops.py). The real implementation runs the eager collective, so names,
checks and error messages are the same.

mpi_ops.py routes a call here only while Dynamo traces it (``tracing()``);
eager calls keep the autograd functions of mpi_ops.py. On older torch
nothing is registered and ``tracing()`` is always False.

In a compiled graph, process sets travel as their id; rank(), size() and
the rest of the topology are constants (``constant``); an allgather takes
every process's first dimension to be this one's (``same_rows``);
DistributedOptimizer's gradient hooks stay eager (``eager``).
"""

import functools
from typing import Any, Callable, Dict, List, Optional

import torch

from hvd import _core
from hvd.common import basics as _basics
from hvd.common import process_sets as _process_sets

NAMESPACE = "hvd"


def _version() -> tuple:
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


# torch.library.custom_op, register_fake and register_autograd came with 2.4.
SUPPORTED = _version() >= (2, 4) and hasattr(torch.library, "custom_op")


def _never() -> bool:
    return False


_compiling = torch.compiler.is_compiling if SUPPORTED else _never


def tracing() -> bool:
    """True while Dynamo traces the caller and the operators are registered:
    the collectives go through torch.ops.hvd."""
    return _compiling()


# ---- rank(), size() ... in compiled graphs ------------------------------------------

# The topology since hvd.init(): read by traced code as constants, which
# Dynamo guards (a new job's values recompile).
_topology: Dict[str, int] = {}
_TOPOLOGY = ("size", "rank", "local_size", "local_rank", "cross_size", "cross_rank")


def _remember_topology() -> None:
    _topology.clear()
    if _core.is_initialized():
        _topology.update((name, getattr(_core, name)()) for name in _TOPOLOGY)


_basics._init_hooks.append(_remember_topology)
_remember_topology()


def constant(fn: Callable[[], int]) -> Callable[[], int]:
    """fn (one of hvd's rank(), size() ...) for graphs torch.compile makes:
    while Dynamo traces, its value since hvd.init(); otherwise fn()."""
    if not SUPPORTED:
        return fn
    name = fn.__name__

    @functools.wraps(fn)
    def value() -> int:
        if _compiling() and name in _topology:
            return _topology[name]
        return fn()

    return value


def eager(fn: Callable) -> Callable:
    """fn, never traced by Dynamo: a gradient hook runs eagerly even where
    the autograd engine calls it from the backward of a compiled function
    (Dynamo would otherwise trace it as a frame of its own and break at
    hvd._core). Costs a few microseconds a call."""
    return torch.compiler.disable(fn) if SUPPORTED else fn


# ---- process sets by id -------------------------------------------------------

def set_id(process_set: Any) -> Optional[int]:
    """The id of a registered process set; None for anything else (the eager
    path then raises its error)."""
    ps_id = getattr(process_set, "process_set_id", None)
    return ps_id if isinstance(ps_id, int) and not isinstance(ps_id, bool) and ps_id >= 0 else None


def _process_set(ps_id: int) -> _process_sets.ProcessSet:
    if ps_id == 0:
        return _process_sets.global_process_set
    for ranks, registered in _process_sets._registered.items():
        if registered == ps_id:
            ps = _process_sets.ProcessSet(list(ranks))
            ps.process_set_id = ps_id
            return ps
    raise ValueError(f"process set {ps_id} is not registered (it was removed?)")


if SUPPORTED:
    from hvd.torch import mpi_ops as _m

    def _op(name: str):
        return torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=())

    # ---- allreduce ----

    @_op("allreduce")
    def allreduce(tensor: torch.Tensor, name: Optional[str], op: int, prescale_factor: float,
                  postscale_factor: float, process_set_id: int) -> torch.Tensor:
        ps = _process_set(process_set_id)
        return _m.synchronize(_m.allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor, process_set=ps))

    @allreduce.register_fake
    def _(tensor, name, op, prescale_factor, postscale_factor, process_set_id):
        return torch.empty_like(tensor, memory_format=torch.contiguous_format)

    def _allreduce_setup(ctx, inputs, output):
        _, _, ctx.op, ctx.pre, ctx.post, ctx.ps_id = inputs

    def _allreduce_backward(ctx, grad):
        return (torch.ops.hvd.allreduce(grad.contiguous(), None, ctx.op, ctx.pre, ctx.post, ctx.ps_id),
                None, None, None, None, None)

    allreduce.register_autograd(_allreduce_backward, setup_context=_allreduce_setup)

    @_op("grouped_allreduce")
    def grouped_allreduce(tensors: List[torch.Tensor], name: Optional[str], op: int, prescale_factor: float,
                          postscale_factor: float, process_set_id: int) -> List[torch.Tensor]:
        ps = _process_set(process_set_id)
        return _m.synchronize(_m.grouped_allreduce_async(tensors, name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor, process_set=ps))

    @grouped_allreduce.register_fake
    def _(tensors, name, op, prescale_factor, postscale_factor, process_set_id):
        return [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]

    def _grouped_allreduce_backward(ctx, grads):
        return (torch.ops.hvd.grouped_allreduce([g.contiguous() for g in grads], None, ctx.op, ctx.pre,
                                                ctx.post, ctx.ps_id),
                None, None, None, None, None)

    grouped_allreduce.register_autograd(_grouped_allreduce_backward, setup_context=_allreduce_setup)

    # ---- allgather ----

    def _gathered_rows(rows: Any, same_rows: bool, process_set_id: int) -> Any:
        """The first dimension of an allgather's result while tracing: the sum
        of every rank's rows, unknown until it has run (an unbacked size),
        or, with same_rows, rows times the ranks."""
        if same_rows:
            return rows * _m._ops.set_size(_process_set(process_set_id))
        return torch.library.get_ctx().new_dynamic_size()

    def _check_rows(out: torch.Tensor, rows: int, same_rows: bool, ps: Any) -> None:
        n = _m._ops.set_size(ps)
        if same_rows and out.shape[0] != rows * n:
            raise ValueError(
                f"allgather in a compiled graph: this graph was traced for {rows} rows on each of the {n} "
                f"processes, but they sent {out.shape[0]} rows in all. For first dimensions that differ "
                f"between processes set torch._dynamo.config.capture_dynamic_output_shape_ops = True "
                f"before compiling")

    @_op("allgather")
    def allgather(tensor: torch.Tensor, name: Optional[str], process_set_id: int,
                  same_rows: bool) -> torch.Tensor:
        ps = _process_set(process_set_id)
        out = _m.synchronize(_m.allgather_async(tensor, name=name, process_set=ps))
        _check_rows(out, tensor.shape[0] if tensor.dim() else 0, same_rows, ps)
        return out

    @allgather.register_fake
    def _(tensor, name, process_set_id, same_rows):
        if tensor.dim() == 0:
            raise ValueError("allgather needs a tensor with at least one dimension (got a scalar); "
                             "use tensor.reshape(1)")
        rows = _gathered_rows(tensor.shape[0], same_rows, process_set_id)
        return tensor.new_empty((rows, *tensor.shape[1:]))

    @_op("allgather_grad")
    def allgather_grad(grad: torch.Tensor, rows: int, process_set_id: int) -> torch.Tensor:
        """The gradient of allgather: this rank's rows of the averaged
        gradient (HorovodAllgather.backward)."""
        ps = _process_set(process_set_id)
        reduced = _m.allreduce(grad.contiguous(), op=_m.Average, process_set=ps)
        dims = _m.allgather(torch.tensor([rows], dtype=torch.int64), process_set=ps)
        offset = int(dims[:ps.rank()].sum().item())
        return reduced.narrow(0, offset, rows).clone()

    @allgather_grad.register_fake
    def _(grad, rows, process_set_id):
        return grad.new_empty((rows, *grad.shape[1:]))

    def _allgather_setup(ctx, inputs, output):
        tensor, _, ctx.ps_id, _ = inputs
        ctx.rows = tensor.shape[0]

    def _allgather_backward(ctx, grad):
        return torch.ops.hvd.allgather_grad(grad, ctx.rows, ctx.ps_id), None, None, None

    allgather.register_autograd(_allgather_backward, setup_context=_allgather_setup)

    @_op("grouped_allgather")
    def grouped_allgather(tensors: List[torch.Tensor], name: Optional[str], process_set_id: int,
                          same_rows: bool) -> List[torch.Tensor]:
        ps = _process_set(process_set_id)
        outs = _m.synchronize(_m.grouped_allgather_async(tensors, name=name, process_set=ps))
        for t, out in zip(tensors, outs):
            _check_rows(out, t.shape[0] if t.dim() else 0, same_rows, ps)
        return outs

    @grouped_allgather.register_fake
    def _(tensors, name, process_set_id, same_rows):
        if any(t.dim() == 0 for t in tensors):
            raise ValueError("allgather needs a tensor with at least one dimension (got a scalar); "
                             "use tensor.reshape(1)")
        return [t.new_empty((_gathered_rows(t.shape[0], same_rows, process_set_id), *t.shape[1:]))
                for t in tensors]

    @_op("grouped_allgather_grad")
    def grouped_allgather_grad(grads: List[torch.Tensor], rows: List[int],
                               process_set_id: int) -> List[torch.Tensor]:
        """The gradients of grouped_allgather (HorovodGroupedAllgather.backward)."""
        ps = _process_set(process_set_id)
        reduced = _m.grouped_allreduce([g.contiguous() for g in grads], op=_m.Average, process_set=ps)
        dims = _m.allgather(torch.tensor([rows], dtype=torch.int64), process_set=ps)
        offsets = dims[:ps.rank()].sum(dim=0).tolist() if ps.rank() else [0] * len(rows)
        return [g.narrow(0, int(o), d).clone() for g, o, d in zip(reduced, offsets, rows)]

    @grouped_allgather_grad.register_fake
    def _(grads, rows, process_set_id):
        return [g.new_empty((d, *g.shape[1:])) for g, d in zip(grads, rows)]

    def _grouped_allgather_setup(ctx, inputs, output):
        tensors, _, ctx.ps_id, _ = inputs
        ctx.rows = [t.shape[0] for t in tensors]

    def _grouped_allgather_backward(ctx, grads):
        return torch.ops.hvd.grouped_allgather_grad(list(grads), ctx.rows, ctx.ps_id), None, None, None

    grouped_allgather.register_autograd(_grouped_allgather_backward, setup_context=_grouped_allgather_setup)

    def same_rows() -> bool:
        """Whether compiled allgathers take every process's first dimension
        to be this one's (so the result's is static): unless Dynamo is told
        to capture operators whose output shape depends on data."""
        return not torch._dynamo.config.capture_dynamic_output_shape_ops

    # ---- broadcast ----

    @_op("broadcast")
    def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str],
                  process_set_id: int) -> torch.Tensor:
        return _m.synchronize(_m.broadcast_async(tensor, root_rank, name=name,
                                                 process_set=_process_set(process_set_id)))

    @broadcast.register_fake
    def _(tensor, root_rank, name, process_set_id):
        return torch.empty_like(tensor, memory_format=torch.contiguous_format)

    def _broadcast_setup(ctx, inputs, output):
        _, ctx.root_rank, _, ctx.ps_id = inputs

    def _broadcast_backward(ctx, grad):
        # the averaged gradient on the root, zeros elsewhere (HorovodBroadcast)
        grad = torch.ops.hvd.allreduce(grad.contiguous(), None, _m.Average, 1.0, 1.0, ctx.ps_id)
        if _m.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None

    broadcast.register_autograd(_broadcast_backward, setup_context=_broadcast_setup)


__all__ = ["SUPPORTED", "tracing", "constant", "eager", "set_id"]
