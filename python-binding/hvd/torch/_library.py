"""hvd's collectives as PyTorch operators, for torch.compile.

Dynamo cannot trace into hvd._core (a C extension), so a collective called
in a compiled function would break the graph. On torch >= 2.4 the blocking
collectives are operators of the ``hvd`` namespace (torch.library):
allreduce, grouped_allreduce, allgather, grouped_allgather and broadcast,
the allgathers' gradients, and DistributedOptimizer's wait. Each has a
fake implementation (register_fake) that gives the result's shape and
dtype for tracing; the real one runs the eager collective, so names,
checks and error messages are the same. Their gradients are autograd
functions with the eager formulas (those of mpi_ops.py), which Dynamo
traces into the graph with the operators.

mpi_ops.py routes a call here only while Dynamo traces it (``tracing()``);
eager calls keep the autograd functions of mpi_ops.py. On older torch
nothing is registered and ``tracing()`` is always False.

In a compiled graph, process sets travel as their id; rank(), size() and
the rest of the topology are constants (``constant``); an allgather takes
every process's first dimension to be this one's (``same_rows``);
DistributedOptimizer's gradient hooks stay eager (``eager``), and its
step() waits for their reductions in one operator
(``optimizer_synchronize``).
"""

import functools
import weakref
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
    """fn, never traced by Dynamo, for what Python code runs below a
    compiled function: a gradient hook the autograd engine calls in its
    backward, an operator's implementation. Dynamo would otherwise trace it
    as a frame of its own and break at hvd._core. Costs about 2 us a call.
    torch._disable_dynamo (what torch.library.custom_op uses) imports Dynamo
    at the first call, not here."""
    if not SUPPORTED:
        return fn
    lazy = getattr(torch, "_disable_dynamo", None)
    return lazy(fn) if lazy is not None else torch.compiler.disable(fn)


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


# ---- DistributedOptimizer.step() in compiled graphs -------------------------------

_optimizers: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


def optimizer_key(optimizer: Any) -> int:
    """The number the optimizer_synchronize operator takes for optimizer
    (which it does not keep alive)."""
    key = id(optimizer)
    _optimizers[key] = optimizer
    return key


if SUPPORTED:
    from hvd.torch import mpi_ops as _m

    _lib = torch.library.Library(NAMESPACE, "DEF")  # lives as long as the module: the operators too

    def _define(schema: str, impl: Callable, fake: Callable) -> None:
        """One operator: its real implementation on the CPU and CUDA keys
        (not CompositeExplicitAutograd, so that tracing takes the fake one)."""
        name = schema.split("(", 1)[0]
        _lib.define(schema)
        impl = eager(impl)
        for key in ("CPU", "CUDA"):
            _lib.impl(name, impl, key)
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_lib)

    # ---- allreduce ----

    def _allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set_id):
        ps = _process_set(process_set_id)
        return _m.synchronize(_m.allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor, process_set=ps))

    def _allreduce_fake(tensor, name, op, prescale_factor, postscale_factor, process_set_id):
        return torch.empty_like(tensor, memory_format=torch.contiguous_format)

    _define("allreduce(Tensor tensor, str? name, int op, float prescale_factor, float postscale_factor, "
            "int process_set_id) -> Tensor", _allreduce, _allreduce_fake)

    def _grouped_allreduce(tensors, name, op, prescale_factor, postscale_factor, process_set_id):
        ps = _process_set(process_set_id)
        return _m.synchronize(_m.grouped_allreduce_async(tensors, name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor, process_set=ps))

    def _grouped_allreduce_fake(tensors, name, op, prescale_factor, postscale_factor, process_set_id):
        return [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]

    _define("grouped_allreduce(Tensor[] tensors, str? name, int op, float prescale_factor, "
            "float postscale_factor, int process_set_id) -> Tensor[]", _grouped_allreduce, _grouped_allreduce_fake)

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

    def _check_gatherable(tensors: List[torch.Tensor]) -> None:
        if any(t.dim() == 0 for t in tensors):
            raise ValueError("allgather needs a tensor with at least one dimension (got a scalar); "
                             "use tensor.reshape(1)")

    def _allgather(tensor, name, process_set_id, same_rows):
        ps = _process_set(process_set_id)
        out = _m.synchronize(_m.allgather_async(tensor, name=name, process_set=ps))
        _check_rows(out, tensor.shape[0] if tensor.dim() else 0, same_rows, ps)
        return out

    def _allgather_fake(tensor, name, process_set_id, same_rows):
        _check_gatherable([tensor])
        return tensor.new_empty((_gathered_rows(tensor.shape[0], same_rows, process_set_id), *tensor.shape[1:]))

    _define("allgather(Tensor tensor, str? name, int process_set_id, bool same_rows) -> Tensor",
            _allgather, _allgather_fake)

    def _allgather_grad(grad, rows, process_set_id):
        """The gradient of allgather: this rank's rows of the averaged
        gradient (HorovodAllgather.backward)."""
        ps = _process_set(process_set_id)
        reduced = _m.allreduce(grad.contiguous(), op=_m.Average, process_set=ps)
        dims = _m.allgather(torch.tensor([rows], dtype=torch.int64), process_set=ps)
        offset = int(dims[:ps.rank()].sum().item())
        return reduced.narrow(0, offset, rows).clone()

    def _allgather_grad_fake(grad, rows, process_set_id):
        return grad.new_empty((rows, *grad.shape[1:]))

    _define("allgather_grad(Tensor grad, SymInt rows, int process_set_id) -> Tensor",
            _allgather_grad, _allgather_grad_fake)

    def _grouped_allgather(tensors, name, process_set_id, same_rows):
        ps = _process_set(process_set_id)
        outs = _m.synchronize(_m.grouped_allgather_async(tensors, name=name, process_set=ps))
        for t, out in zip(tensors, outs):
            _check_rows(out, t.shape[0] if t.dim() else 0, same_rows, ps)
        return outs

    def _grouped_allgather_fake(tensors, name, process_set_id, same_rows):
        _check_gatherable(tensors)
        return [t.new_empty((_gathered_rows(t.shape[0], same_rows, process_set_id), *t.shape[1:]))
                for t in tensors]

    _define("grouped_allgather(Tensor[] tensors, str? name, int process_set_id, bool same_rows) -> Tensor[]",
            _grouped_allgather, _grouped_allgather_fake)

    def _grouped_allgather_grad(grads, rows, process_set_id):
        """The gradients of grouped_allgather (HorovodGroupedAllgather.backward)."""
        ps = _process_set(process_set_id)
        reduced = _m.grouped_allreduce([g.contiguous() for g in grads], op=_m.Average, process_set=ps)
        dims = _m.allgather(torch.tensor([rows], dtype=torch.int64), process_set=ps)
        offsets = dims[:ps.rank()].sum(dim=0).tolist() if ps.rank() else [0] * len(rows)
        return [g.narrow(0, int(o), d).clone() for g, o, d in zip(reduced, offsets, rows)]

    def _grouped_allgather_grad_fake(grads, rows, process_set_id):
        return [g.new_empty((d, *g.shape[1:])) for g, d in zip(grads, rows)]

    _define("grouped_allgather_grad(Tensor[] grads, SymInt[] rows, int process_set_id) -> Tensor[]",
            _grouped_allgather_grad, _grouped_allgather_grad_fake)

    # ---- broadcast ----

    def _broadcast(tensor, root_rank, name, process_set_id):
        return _m.synchronize(_m.broadcast_async(tensor, root_rank, name=name,
                                                 process_set=_process_set(process_set_id)))

    def _broadcast_fake(tensor, root_rank, name, process_set_id):
        return torch.empty_like(tensor, memory_format=torch.contiguous_format)

    _define("broadcast(Tensor tensor, int root_rank, str? name, int process_set_id) -> Tensor",
            _broadcast, _broadcast_fake)

    # ---- DistributedOptimizer.step() ----

    def _optimizer_synchronize(grads, key):
        """Runs synchronize() of the DistributedOptimizer behind key (it waits
        for the reductions its hooks started) and leaves the results in
        grads, its parameters' gradients in the order of
        _hvd_update_params(). They may be copies of p.grad that the graph
        writes back afterwards: hence the copy."""
        opt = _optimizers.get(key)
        if opt is None:
            raise ValueError("the DistributedOptimizer this compiled step was traced with no longer exists")
        opt.synchronize()
        for g, p in zip(grads, opt._hvd_update_params()):
            if g.data_ptr() != p.grad.data_ptr():
                g.copy_(p.grad)

    def _optimizer_synchronize_fake(grads, key):
        return None

    _define("optimizer_synchronize(Tensor(a!)[] grads, int key) -> ()", _optimizer_synchronize,
            _optimizer_synchronize_fake)

    # ---- the autograd formulas, traced by Dynamo with the operators ----
    #
    # Autograd functions rather than torch.library.register_autograd: that
    # puts a Python kernel on the Autograd key of every call, 10-15 us, where
    # these cost nothing once AOTAutograd has made the forward and backward
    # graphs. The operators themselves have no gradient.

    class _Allreduce(torch.autograd.Function):
        @staticmethod
        def forward(ctx, tensor, name, op, pre, post, ps_id):
            ctx.args = (op, pre, post, ps_id)
            return torch.ops.hvd.allreduce(tensor, name, op, pre, post, ps_id)

        @staticmethod
        def backward(ctx, grad):
            return torch.ops.hvd.allreduce(grad.contiguous(), None, *ctx.args), None, None, None, None, None

    class _GroupedAllreduce(torch.autograd.Function):
        @staticmethod
        def forward(ctx, name, op, pre, post, ps_id, *tensors):
            ctx.args = (op, pre, post, ps_id)
            return tuple(torch.ops.hvd.grouped_allreduce(list(tensors), name, op, pre, post, ps_id))

        @staticmethod
        def backward(ctx, *grads):
            reduced = torch.ops.hvd.grouped_allreduce([g.contiguous() for g in grads], None, *ctx.args)
            return (None, None, None, None, None, *reduced)

    class _Allgather(torch.autograd.Function):
        @staticmethod
        def forward(ctx, tensor, name, ps_id, same):
            ctx.rows, ctx.ps_id = tensor.shape[0] if tensor.dim() else 0, ps_id
            return torch.ops.hvd.allgather(tensor, name, ps_id, same)

        @staticmethod
        def backward(ctx, grad):
            return torch.ops.hvd.allgather_grad(grad, ctx.rows, ctx.ps_id), None, None, None

    class _GroupedAllgather(torch.autograd.Function):
        @staticmethod
        def forward(ctx, name, ps_id, same, *tensors):
            ctx.rows, ctx.ps_id = [t.shape[0] if t.dim() else 0 for t in tensors], ps_id
            return tuple(torch.ops.hvd.grouped_allgather(list(tensors), name, ps_id, same))

        @staticmethod
        def backward(ctx, *grads):
            return (None, None, None, *torch.ops.hvd.grouped_allgather_grad(list(grads), ctx.rows, ctx.ps_id))

    class _Broadcast(torch.autograd.Function):
        @staticmethod
        def forward(ctx, tensor, root_rank, name, ps_id):
            ctx.root_rank, ctx.ps_id = root_rank, ps_id
            return torch.ops.hvd.broadcast(tensor, root_rank, name, ps_id)

        @staticmethod
        def backward(ctx, grad):
            # the averaged gradient on the root, zeros elsewhere (HorovodBroadcast)
            grad = torch.ops.hvd.allreduce(grad.contiguous(), None, _m.Average, 1.0, 1.0, ctx.ps_id)
            if _m.rank() != ctx.root_rank:
                grad = grad * 0
            return grad, None, None, None

    def same_rows() -> bool:
        """Whether compiled allgathers take every process's first dimension
        to be this one's (so the result's is static): unless Dynamo is told
        to capture operators whose output shape depends on data."""
        return not torch._dynamo.config.capture_dynamic_output_shape_ops

    # What mpi_ops.py calls while Dynamo traces: the arguments as the
    # operators take them (an op code, a process set id).

    def allreduce(tensor, name, op, pre, post, ps_id):
        return _Allreduce.apply(tensor, name, op, *_m._scale_args(pre, post), ps_id)

    def grouped_allreduce(tensors, name, op, pre, post, ps_id):
        return list(_GroupedAllreduce.apply(name, op, *_m._scale_args(pre, post), ps_id, *tensors))

    def allgather(tensor, name, ps_id):
        return _Allgather.apply(tensor, name, ps_id, same_rows())

    def grouped_allgather(tensors, name, ps_id):
        return list(_GroupedAllgather.apply(name, ps_id, same_rows(), *tensors))

    def broadcast(tensor, root_rank, name, ps_id):
        return _Broadcast.apply(tensor, root_rank, name, ps_id)


__all__ = ["SUPPORTED", "tracing", "constant", "eager", "set_id", "optimizer_key"]
