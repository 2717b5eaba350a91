"""Adasum, Horovod's adaptive summation, over hvd's collectives.

The pairwise operation of two vectors a and b is

    adasum(a, b) = (1 - a·b / (2‖a‖²))·a + (1 - a·b / (2‖b‖²))·b

(orthogonal vectors add, parallel ones average). Over 2^k processes it is
applied as Horovod 0.28.1 does (horovod/common/ops/adasum/adasum.h,
FusedAllreduce): recursive vector-halving, distance-doubling. The tensors
of one call are fused into one buffer per dtype. At level l = 0 .. k-1,
rank r and its partner r ^ 2^l hold the same range of the buffer; the
lower keeps its first floor(n/2) elements, the higher the rest; each sends
the partner the half it gives up (an alltoall of the set in which a rank
sends to its partner only), the dot product and squared norms of each
tensor's part are summed over the level's group of 2^(l+1) ranks (a small
float64 allreduce), and each rank combines the half it keeps with the
coefficients of every tensor. A final allgather of every rank's piece
assembles the result. Each element of the result is computed by one rank
and copied to the others, so every rank holds the same bits. A rank
receives n/2 + n/4 + ... + n/N elements in the levels and as many in the
gather: about twice the buffer, as in Horovod (not N buffers).

Precision as in Horovod: dot products and norms in float64; the combination
in float64 for float32 and float64, in float32 for float16 (and bfloat16,
which Horovod does not take). Only CPU tensors; the number of processes
(of the process set) must be a power of two.

The stages of a reduction are ordinary hvd operations, named after the
reduction, so ranks may start and wait for several reductions in any
order: waiting for one advances every reduction in flight.
"""

import math
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Generator, List, Optional, Sequence, Tuple

import torch

from hvd.common import basics as _basics
from hvd.common import ops as _ops
from hvd.common.exceptions import HorovodInternalError
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.torch import mpi_ops as _mpi
from hvd.torch._named import named_parameters_of
from hvd.torch.compression import Compression

__all__ = ["allreduce_async", "distributed_optimizer"]

# Horovod's guard: a vector whose squared norm is below this keeps coefficient 1.
_SQRT_DBL_MIN = math.sqrt(sys.float_info.min)
# The dtype the combination is computed in, per input dtype.
_WIDE = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
    torch.float64: torch.float64,
}
_CODES = {dtype: i for i, dtype in enumerate(_WIDE)}
_NAMES = {i: str(dtype).replace("torch.", "") for dtype, i in _CODES.items()}

Stages = Generator[List[Any], List[Any], Any]


# ---- the reduction's stages ------------------------------------------------------------


def _piece(j: int, n_ranks: int, n: int) -> Tuple[int, int]:
    """The range of the buffer that set rank j holds after the last level."""
    start, end, level = 0, n, 1
    while level < n_ranks:
        mid = start + ((end - start) >> 1)
        start, end = (mid, end) if j & level else (start, mid)
        level <<= 1
    return start, end


# Elements converted at a time: a wider copy of a whole buffer costs more
# in fresh memory than its arithmetic.
_CHUNK = 1 << 16


def _chunks(s: int, e: int):
    return ((c, min(c + _CHUNK, e)) for c in range(s, e, _CHUNK))


def _dot_and_norms(a: torch.Tensor, b: torch.Tensor, s: int, e: int, wide: torch.dtype) -> torch.Tensor:
    """[a·b, a·a, b·b] over [s, e), accumulated in float64."""
    if a.dtype == torch.float64:
        x, y = a[s:e], b[s:e]
        return torch.stack((torch.dot(x, y), torch.dot(x, x), torch.dot(y, y)))
    out = torch.zeros(3, dtype=torch.float64)
    for c0, c1 in _chunks(s, e):
        x, y = a[c0:c1].to(wide), b[c0:c1].to(wide)
        if wide == torch.float64:  # float32 values: float64 products, as Horovod's
            out += torch.stack((torch.dot(x, y), torch.dot(x, x), torch.dot(y, y)))
        else:  # float16/bfloat16 values: their products are exact in float32
            out += torch.stack([(u * v).sum(dtype=torch.float64) for u, v in ((x, y), (x, x), (y, y))])
    return out


def _combine(a: torch.Tensor, b: torch.Tensor, s: int, e: int, ac: float, bc: float, wide: torch.dtype) -> None:
    """a[s:e] = ac·a[s:e] + bc·b[s:e], computed in wide (float32
    coefficients for float16, as Horovod's), in place."""
    if a.dtype == wide:
        a[s:e].mul_(ac).add_(b[s:e], alpha=bc)
        return
    for c0, c1 in _chunks(s, e):
        a[c0:c1] = a[c0:c1].to(wide).mul_(ac).add_(b[c0:c1].to(wide), alpha=bc)


def _vhdd(flat: torch.Tensor, counts: List[int], name: str, me: int, n_ranks: int, process_set: ProcessSet,
          checks: List[Tuple[int, Callable[[Any], None]]]) -> Stages:
    """Reduces flat (the fused tensors of counts elements each) over the set;
    returns the result, the same on every rank. checks: a (handle, check)
    to wait for and run once the first exchange is on its way."""
    n = flat.numel()
    wide = _WIDE[flat.dtype]
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    n_tensors = len(counts)
    start, end, level = 0, n, 1
    while level < n_ranks:
        mid = start + ((end - start) >> 1)
        left = not me & level
        keep0, keep1 = (start, mid) if left else (mid, end)
        send0, send1 = (mid, end) if left else (start, mid)
        splits = [0] * n_ranks
        splits[me ^ level] = send1 - send0
        exchange = _mpi.alltoall_async(flat[send0 - start:send1 - start], splits, name=f"{name}.{level}",
                                       process_set=process_set)
        if checks:
            handle, check = checks.pop()
            check((yield [handle])[0])
        (received, _), = yield [exchange]
        assert received.numel() == keep1 - keep0
        a, b = flat[keep0 - start:keep1 - start], received  # own and partner's values of the kept range
        # each tensor's part of the kept range: (tensor, first, end) in a's coordinates
        parts = [(i, max(t0, keep0) - keep0, min(t1, keep1) - keep0)
                 for i, (t0, t1) in enumerate(zip(bounds, bounds[1:])) if t0 < keep1 and t1 > keep0]
        group, n_groups = me // (2 * level), n_ranks // (2 * level)
        sums = torch.zeros(n_groups, 3, n_tensors, dtype=torch.float64)
        if parts:
            vals = [_dot_and_norms(a, b, s, e, wide) for _, s, e in parts]
            # [dot, ‖left's‖², ‖right's‖²], whichever side this rank is on
            sums[group][:, [i for i, _, _ in parts]] = torch.stack(vals, dim=1)[[0, 1, 2] if left else [0, 2, 1]]
        (sums,) = yield [_mpi.allreduce_async_(sums, name=f"{name}.{level}.dots", op=_basics.Sum,
                                               process_set=process_set)]
        dots, n_left, n_right = sums[group].tolist()
        na, nb = (n_left, n_right) if left else (n_right, n_left)
        for i, s, e in parts:
            ac = 1.0 - dots[i] / na[i] * 0.5 if na[i] >= _SQRT_DBL_MIN else 1.0
            bc = 1.0 - dots[i] / nb[i] * 0.5 if nb[i] >= _SQRT_DBL_MIN else 1.0
            _combine(a, b, s, e, ac, bc, wide)
        flat = a
        start, end = keep0, keep1
        level <<= 1

    (pieces,) = yield [_mpi.allgather_async(flat, name=f"{name}.gather", process_set=process_set)]
    ranges = [_piece(j, n_ranks, n) for j in range(n_ranks)]
    if all(ranges[j][1] == ranges[j + 1][0] for j in range(n_ranks - 1)):
        return pieces  # already in the buffer's order (two processes)
    out = torch.empty(n, dtype=flat.dtype)
    offset = 0
    for s, e in ranges:
        out[s:e] = pieces[offset:offset + e - s]
        offset += e - s
    return out


def _describe(row: torch.Tensor) -> str:
    pairs = row.view(-1, 2).tolist()
    return "[" + ", ".join(f"{_NAMES.get(code, code)} x {count}" for code, count in pairs) + "]"


def _reduction(tensors: List[torch.Tensor], outputs: List[torch.Tensor], name: str, pre: float,
               post: float, process_set: ProcessSet) -> Stages:
    """The whole reduction of tensors into outputs: a check that every rank
    reduces the same tensors, then one VHDD per dtype."""
    n_ranks, me = _ops.set_size(process_set), process_set.rank()
    # the fused buffers are taken now: the inputs may change once this returns
    buckets: List[Tuple[List[int], torch.Tensor]] = []
    for dtype in dict.fromkeys(t.dtype for t in tensors):
        idx = [i for i, t in enumerate(tensors) if t.dtype == dtype]
        flat = torch.cat([tensors[i].reshape(-1) for i in idx])
        if pre != 1.0:
            flat.mul_(pre)
        buckets.append((idx, flat))

    # that every rank reduces the same tensors is checked while the first
    # exchange is on its way (should it fail, that exchange is left behind)
    checks: List[Tuple[int, Callable[[Any], None]]] = []
    if n_ranks > 1:
        meta = torch.tensor([[_CODES[t.dtype], t.numel()] for t in tensors], dtype=torch.int64).view(1, -1)

        def check(rows: torch.Tensor) -> None:
            for j in range(n_ranks):
                if not torch.equal(rows[j], rows[me]):
                    ranks = process_set.ranks if process_set.process_set_id else list(range(n_ranks))
                    raise HorovodInternalError(
                        f"Adasum '{name}': rank {ranks[j]} sent {_describe(rows[j])}, rank {ranks[me]} sent "
                        f"{_describe(rows[me])}: every process must reduce tensors of the same dtypes and sizes")

        checks.append((_mpi.allgather_async(meta, name=f"{name}.meta", process_set=process_set), check))

    results: List[Optional[torch.Tensor]] = [None] * len(tensors)
    for b, (idx, flat) in enumerate(buckets):
        counts = [tensors[i].numel() for i in idx]
        if n_ranks > 1 and flat.numel():
            flat = yield from _vhdd(flat, counts, f"{name}.{b}", me, n_ranks, process_set, checks)
        if post != 1.0:
            flat.mul_(post)
        for i, part in zip(idx, flat.split(counts)):
            results[i] = part
    if checks:  # nothing was exchanged
        handle, check = checks.pop()
        check((yield [handle])[0])
    for out, part in zip(outputs, results):
        out.copy_(part.view(out.shape))
    return outputs


# ---- reductions in flight ---------------------------------------------------------------


class _Run:
    """One reduction in flight: its stages and the hvd handles of the
    current stage. Presents poll() and wait(), as hvd._core.Handle."""

    def __init__(self, stages: Stages):
        self._stages = stages
        self.waiting: List[Any] = []
        self.done = False
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self._resume(None, first=True)

    def _resume(self, results: Optional[List[Any]], first: bool = False) -> None:
        try:
            self.waiting = next(self._stages) if first else self._stages.send(results)
        except StopIteration as stop:
            self.done, self.result, self.waiting = True, stop.value, []
        except BaseException as e:  # the error goes to whoever synchronizes
            if first:
                raise
            self.done, self.error, self.waiting = True, e, []

    def ready(self) -> bool:
        return all(_ops.poll(h) for h in self.waiting)

    def advance(self) -> None:
        """Takes the current stage's results (waiting for them) and starts the next stage."""
        results, error = [], None
        for h in self.waiting:
            try:
                results.append(_ops.synchronize(h))
            except BaseException as e:  # every handle is synchronized, the first error kept
                error = error or e
        if error is not None:
            self._stages.close()
            self.done, self.error, self.waiting = True, error, []
            return
        self._resume(results)

    def poll(self) -> bool:
        _progress()
        return self.done

    def wait(self) -> None:
        _wait(self)


_lock = threading.Lock()
_in_flight: List[_Run] = []  # in the order they started


def _reset() -> None:
    with _lock:
        _in_flight.clear()


_basics._init_hooks.append(_reset)


def _progress_locked() -> None:
    for run in _in_flight:
        while not run.done and run.ready():
            run.advance()
    _in_flight[:] = [run for run in _in_flight if not run.done]


def _progress() -> None:
    """Advances every reduction whose current stage has completed; does not block."""
    with _lock:
        _progress_locked()


def _wait(run: _Run) -> None:
    """Waits until run is done. While it is the only reduction in flight it
    blocks on its stages; with others in flight they all advance in turns
    (short sleeps between polls), since the other ranks may be waiting for
    any of them."""
    delay = 20e-6
    while True:
        with _lock:
            _progress_locked()
            if run.done:
                return
            if _in_flight == [run]:
                run.advance()
                continue
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


# ---- the entry points ------------------------------------------------------------------


def _check(tensor: Any, output: torch.Tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"tensor must be a torch.Tensor, not {type(tensor).__name__}")
    if tensor.is_sparse:
        raise ValueError(f"Adasum does not reduce sparse tensors ({tensor.type()}): convert with .to_dense()")
    if tensor.dtype not in _WIDE:
        raise ValueError(f"Adasum reduces float16, bfloat16, float32 and float64 tensors, not {tensor.dtype}")
    if tensor.device.type != "cpu":
        raise ValueError(f"Adasum runs on CPU tensors only (got a tensor on {tensor.device}): "
                         f"move it with .cpu()")
    _mpi._check_output(tensor, output)


def allreduce_async(tensors: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], name: Optional[str],
                    prescale_factor: float, postscale_factor: float, process_set: ProcessSet,
                    grouped: bool) -> int:
    """Starts the Adasum of tensors (each its own coefficients) over the
    processes of process_set into outputs (which may be the tensors);
    returns a handle for hvd's poll()/synchronize(), whose result is
    outputs[0] (grouped: the list of outputs). Raises ValueError for bad
    arguments and NotImplementedError when the set's size is not a power
    of two."""
    tensors, outputs = list(tensors), list(outputs)
    for t, out in zip(tensors, outputs):
        _check(t, out)
    pre, post = _mpi._scale_args(prescale_factor, postscale_factor)
    ps_id = _ops.check_process_set(process_set)
    n_ranks = _ops.set_size(process_set)
    if n_ranks & (n_ranks - 1):
        what = "the job has" if ps_id == 0 else f"{process_set} has"
        raise NotImplementedError(f"Adasum needs a power-of-two number of processes, but {what} {n_ranks}: "
                                  f"run 2, 4, 8 ... processes, or reduce over a process set of such a size")
    base = _ops.op_name("grouped_adasum" if grouped else "adasum", name, ps_id)
    run = _Run(_reduction(tensors, outputs, base, pre, post, process_set))
    if not run.done:
        with _lock:
            _in_flight.append(run)

    def finish(core: _Run) -> Any:
        if core.error is not None:
            raise core.error
        return core.result if grouped else core.result[0]

    return _ops.register(run, finish)


# ---- the optimizer ----------------------------------------------------------------------


class _DistributedAdasumOptimizer:
    """Mixin placed in front of the wrapped optimizer's class: step() takes
    the local step, then replaces every parameter's change by the Adasum of
    the changes of all processes (Horovod's _DistributedAdasumOptimizer)."""

    _hvd_base: type  # the wrapped optimizer class, set on the generated class

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, process_set):
        self._hvd_base.__init__(self, params)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.process_set = process_set
        named_parameters = named_parameters_of(self.param_groups, named_parameters)
        # every process reduces the changes in the same order: by name
        ids = {id(v) for group in self.param_groups for v in group["params"]}
        self._adasum_params = [v for _, v in sorted(named_parameters, key=lambda kv: kv[0])
                               if id(v) in ids and v.requires_grad]

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.backward_passes_per_step = passes

    def synchronize(self) -> None:
        """Nothing to do: the changes are reduced in step()."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # a generator, for contextmanager

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        params = self._adasum_params
        if not params or self.process_set.included() is False or _ops.set_size(self.process_set) == 1:
            self._hvd_base.step(self)  # nothing to reduce: the local step, exactly
            return loss
        with torch.no_grad():
            starts = [p.detach().clone() for p in params]
            self._hvd_base.step(self)
            deltas, ctxs = [], []
            for p, start in zip(params, starts):
                compressed, ctx = self._compression.compress(p.detach() - start)
                deltas.append(compressed.contiguous())
                ctxs.append(ctx)
            handle = allreduce_async(deltas, deltas, "DistributedAdasumOptimizer", 1.0, 1.0, self.process_set,
                                     grouped=True)
            for p, start, delta, ctx in zip(params, starts, _ops.synchronize(handle), ctxs):
                p.copy_(start.add_(self._compression.decompress(delta, ctx)))
        return loss


def distributed_optimizer(optimizer: torch.optim.Optimizer, named_parameters=None,
                          compression=Compression.none, backward_passes_per_step: int = 1,
                          process_set: ProcessSet = global_process_set):
    """DistributedOptimizer(op=Adasum): optimizer's class with step()
    reducing the change of the weights (see _DistributedAdasumOptimizer).
    Gradients of several backward passes accumulate in p.grad as usual;
    the reduction happens in step()."""
    base = optimizer.__class__
    cls = type(base.__name__, (base,), {
        k: v for k, v in _DistributedAdasumOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")
    })
    cls._hvd_base = base
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, process_set)
