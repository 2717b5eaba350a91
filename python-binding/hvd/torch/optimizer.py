"""DistributedOptimizer: wraps a torch optimizer so that gradients are
averaged over all processes before each step, as ``horovod.torch``'s.

A hook on every parameter's gradient accumulator submits that gradient's
allreduce as soon as backward has produced it, so communication overlaps
the rest of the backward pass; ``step()`` (or ``synchronize()``) waits for
the reductions and writes the results into ``p.grad``.
"""

import os
import warnings
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from hvd.common import ops as _ops
from hvd.torch import _library
from hvd.torch._named import named_parameters_of
from hvd.torch import adasum
from hvd.torch.compression import Compression
from hvd.torch.functions import broadcast_object
from hvd.torch.mpi_ops import (Adasum, Average, ProcessSet, allreduce_async_, global_process_set,
                               grouped_allreduce_async_, local_size, rank, size, sparse_allreduce_async,
                               synchronize)
from hvd.torch.shared import shared_zeros

__all__ = ["DistributedOptimizer"]


def _split_list(items: List[Any], n: int) -> List[List[Any]]:
    """n nearly equal consecutive chunks (fewer when there are fewer items)."""
    n = max(1, min(n, len(items)))
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


class _DistributedOptimizer:
    """Mixin placed in front of the wrapped optimizer's class (see
    DistributedOptimizer); its methods override the optimizer's."""

    _hvd_base: type  # the wrapped optimizer class, set on the generated class

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set, shared_gradients=False):
        self._hvd_base.__init__(self, params)
        self._compression = compression

        named_parameters = named_parameters_of(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        self._handles: Dict[Any, Tuple[Any, Any]] = {}
        self._grad_accs: List[Any] = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        if groups is not None:
            if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
                raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
            if isinstance(groups, list):
                seen = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in seen:
                            raise ValueError("A parameter can only appear once in groups.")
                        seen.add(id(p))
        self._groups = groups
        self._p_to_group: Dict[Any, Tuple[Any, ...]] = {}
        self._group_counts: Dict[Tuple[Any, ...], int] = {}

        if self.process_set.included() is not False and size() > 1:
            self._register_hooks()
        self._hvd_key = _library.optimizer_key(self)
        # gradients in shared tensor memory, which the other local ranks read
        # in place; zero_grad then zeroes them where they are
        self._hvd_shared_grads = bool(shared_gradients) and self.process_set is global_process_set \
            and local_size() > 1
        if self._hvd_shared_grads:
            for p in self._hvd_update_params():
                if p.device.type == "cpu" and p.layout == torch.strided:
                    g = shared_zeros(p.shape, dtype=p.dtype)
                    if p.grad is not None:
                        g.copy_(p.grad)
                    p.grad = g

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        return self._hvd_base.load_state_dict(self, *args, **kwargs)

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self) -> None:
        if self._groups is not None:
            params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
            # Every process must form the same groups in the same order: take
            # rank 0's order of parameter names.
            names = broadcast_object([self._parameter_names.get(p) for p in params], root_rank=0,
                                     name="DistributedOptimizer.groups", process_set=self.process_set)
            order = {n: i for i, n in enumerate(names)}
            params.sort(key=lambda p: order.get(self._parameter_names.get(p), len(order)))
            if isinstance(self._groups, list):
                ids = {id(p) for p in params}
                p_groups, grouped = [], set()
                for group in self._groups:
                    members = [p for p in group if id(p) in ids]
                    if members:
                        p_groups.append(members)
                        grouped.update(id(p) for p in members)
                p_groups += [[p] for p in params if id(p) not in grouped]
            else:
                p_groups = _split_list(params, self._groups)
            for group in p_groups:
                group = tuple(group)
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    # the AccumulateGrad node of p: its hook runs once p.grad is final
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)

    def _scale_factors(self) -> Tuple[float, float]:
        if self.op == Average:
            # libhvd divides by the number of processes after the sum.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # This process computed no gradient for p (a branch of the model
            # was not used), but the others may have: take part with zeros.
            p.grad = torch.zeros_like(p)
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if self.sparse_as_dense:
                tensor = tensor.to_dense()
            else:
                return sparse_allreduce_async(tensor, name=name, op=self.op,
                                              process_set=self.process_set), None
        compressed, ctx = self._compression.compress(tensor)
        pre, post = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, params):
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        name = self._parameter_names.get(params[0])
        compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in params])
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async_(list(compressed), name=name, op=self.op, prescale_factor=pre,
                                          postscale_factor=post, process_set=self.process_set)
        return handle, ctxs

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times before call "
                        "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        handle, ctxs = self._grouped_allreduce_grad_async(group)
                        self._handles[group] = (handle, ctxs)
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return _library.eager(hook)

    def synchronize(self) -> None:
        """Waits for all gradient reductions and writes the results to p.grad.
        Submits the ones backward did not produce (unused parameters, or
        fewer backward passes than backward_passes_per_step)."""
        if self.process_set.included() is False:
            self._synchronized = True
            return
        completed = set()
        for key in self._handles:
            completed.update(key) if isinstance(key, tuple) else completed.add(key)
        for p in self._requires_update - completed:
            if self._groups is not None and p in self._p_to_group:
                continue  # handled with its group below
            self._handles[p] = self._allreduce_grad_async(p)
        if self._groups is not None:
            for group in {g for p, g in self._p_to_group.items() if p not in completed}:
                if group not in self._handles:
                    for gp in group:
                        self._handles.pop(gp, None)
                    self._handles[group] = self._grouped_allreduce_grad_async(group)
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._allreduce_grad_async(key)

        for key, (handle, ctx) in self._handles.items():
            if isinstance(key, tuple):
                outputs = synchronize(handle)
                for gp, out, gctx in zip(key, outputs, ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    gp.grad.set_(self._compression.decompress(out, gctx))
                if self._group_counts.get(key):
                    self._group_counts[key] = 0
            else:
                out = synchronize(handle)
                self._allreduce_delay[key] = self.backward_passes_per_step
                if self._groups is not None and key in self._p_to_group:
                    self._group_counts[self._p_to_group[key]] = 0
                if key.grad.is_sparse:
                    reduced = self._compression.decompress(out, ctx)
                    if not reduced.is_sparse:
                        reduced = reduced.to_sparse()
                    key.grad.zero_().add_(reduced)
                else:
                    key.grad.set_(self._compression.decompress(out, ctx))
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """Makes step() skip synchronize(), for code that called it already
        (e.g. to clip gradients):

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            if _library.tracing():
                self._hvd_traced_synchronize()
            else:
                self.synchronize()
        self._synchronized = False
        return self._hvd_base.step(self, closure)

    def _hvd_update_params(self) -> List[Any]:
        """The parameters whose gradients are reduced, in order."""
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad]

    def _hvd_traced_synchronize(self) -> None:
        """synchronize() where torch.compile traces step(): one operator
        waits for the reductions the gradient hooks started and leaves the
        results in the gradients, which the rest of the graph reads after it
        (_library.py)."""
        params = self._hvd_update_params()
        if rank() not in self.process_set.ranks:
            params = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        torch.ops.hvd.optimizer_synchronize([p.grad for p in params], self._hvd_key)

    def _hvd_local_step(self, closure=None):
        """The wrapped optimizer's step, without any reduction."""
        return self._hvd_base.step(self, closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it "
                                 "can cause a race condition.")
        if self._hvd_shared_grads:
            # zeroed in place: a gradient set to None would come back from
            # the next backward in memory of its own
            return self._hvd_base.zero_grad(self, set_to_none=False)
        return self._hvd_base.zero_grad(self, *args, **kwargs)


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters=None,
                         compression=Compression.none, backward_passes_per_step: int = 1, op: int = Average,
                         gradient_predivide_factor: float = 1.0, num_groups: int = 0, groups=None,
                         sparse_as_dense: bool = False, process_set: ProcessSet = global_process_set,
                         shared_gradients: Optional[bool] = None):
    """Wraps optimizer so that gradients are reduced over all processes (of
    process_set) before each step.

    Arguments:
        optimizer: the torch optimizer to wrap; the result is an instance of
            a subclass of its class, sharing its parameter groups.
        named_parameters: (name, parameter) pairs, usually
            ``model.named_parameters()``; names key the reductions.
        compression: Compression.none or Compression.fp16.
        backward_passes_per_step: backward passes whose gradients are
            accumulated locally before they are reduced.
        op: Average (default), Sum, or Adasum: then step() takes the local
            step and reduces the change of the weights with Adasum
            (hvd.torch.adasum); groups and sparse_as_dense do not apply.
        gradient_predivide_factor: with Average, gradients are scaled by
            1 / factor before the sum and by factor / size after it.
        num_groups: deprecated, use groups.
        groups: reduce gradients in explicit groups: a number of groups, or
            a list of lists of parameters (the others form groups of one).
        sparse_as_dense: reduce sparse gradients as dense tensors.
        process_set: reduce over the members of this process set only.
        shared_gradients: keep the CPU gradients in shared tensor memory
            (hvd.shared_zeros), which the other local ranks read in place
            when a job's ranks share a node, and make zero_grad() zero them
            there (never setting them to None). Default: HVD_SHARED_GRADIENTS
            (off). Only with the global process set and several local ranks.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum:
        return adasum.distributed_optimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                                            process_set)
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    base = optimizer.__class__
    cls = type(base.__name__, (base,), {
        k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")
    })
    cls._hvd_base = base
    if shared_gradients is None:
        shared_gradients = os.environ.get("HVD_SHARED_GRADIENTS", "").strip().lower() in ("1", "true", "yes", "on")
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set, shared_gradients)
