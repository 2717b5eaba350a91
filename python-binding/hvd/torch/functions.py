"""Helpers built on the collectives, as in ``horovod.torch.functions``:
broadcasting model parameters, optimizer state and arbitrary picklable
objects, and gathering objects from every process."""

import collections
import io
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple, Union

import torch

try:  # cloudpickle handles lambdas and local classes; pickle is enough otherwise
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the installation
    import pickle as _pickle

from hvd.torch.mpi_ops import (ProcessSet, allgather, broadcast_, broadcast_async_, global_process_set, rank,
                               synchronize)

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object"]


def broadcast_parameters(params: Union[Dict[str, torch.Tensor], Iterable[Any]], root_rank: int,
                         prefix: str = "Parameter.") -> None:
    """Overwrites the parameters of every process with root_rank's, in place.

    params is ``model.state_dict()``, ``model.named_parameters()`` or
    ``model.parameters()`` (a dict, or a list of tensors or (name, tensor)
    pairs). Every process must pass the same structure.
    """
    if isinstance(params, dict):
        items: List[Tuple[Any, torch.Tensor]] = sorted(params.items(), key=lambda kv: str(kv[0]))
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))

    handles = []
    for index, (name, p) in enumerate(items):
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"broadcast_parameters: entry {name if name is not None else index} is a "
                             f"{type(p).__name__}, not a tensor")
        key = f"{prefix}{name}" if name is not None else f"{prefix}noname.{index}"
        # parameters that require grad are leaves: broadcast into their data
        handles.append(broadcast_async_(p.data if p.requires_grad else p, root_rank, name=key))
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              model: Optional[torch.nn.Module] = None, prefix: str = "Parameter.") -> None:
    """Overwrites the optimizer state (tensors and options such as the
    learning rate) of every process with root_rank's, in place.

    An optimizer that has not taken a step yet has no state: it is created
    with a step on zero gradients (which does not reduce anything, even for
    a DistributedOptimizer, and leaves parameters and gradients as they
    were) so that every process has the same structure. Parameters that do
    not require a gradient get no state and keep their .grad. model (as in
    Horovod) names the sparse Embeddings, whose parameters get sparse zero
    gradients for that step.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")

    sparse = _sparse_parameters(model)
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        _create_state(optimizer, sparse)
        state_dict = optimizer.state_dict()

    # An optimizer without state (plain SGD) only has its options.
    tensors: List[Tuple[str, torch.Tensor]] = []
    scalars: Dict[str, Any] = {}
    setters: Dict[str, Any] = {}

    def set_option(index: int, key: str):
        def apply(value: Any) -> None:
            optimizer.param_groups[index][key] = value
        return apply

    def set_state(pid: Any, key: str):
        def apply(value: Any) -> None:
            state_dict["state"][pid][key] = value
        return apply

    seen: Dict[str, int] = collections.defaultdict(int)
    for index, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key == "params":
                continue
            skey = f"{key}.{index}"
            scalars[skey] = value
            setters[skey] = set_option(index, key)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue  # no gradient, no state
            for key, value in state_dict["state"][pid].items():
                seen[key] += 1
                skey = f"{key}.{seen[key]}"
                if torch.is_tensor(value) and not value.is_sparse:
                    tensors.append((skey, value))
                else:  # a sparse tensor (SGD's momentum of a sparse Embedding) goes pickled
                    scalars[skey] = value
                    setters[skey] = set_state(pid, key)

    broadcast_parameters(tensors, root_rank, prefix=prefix + "optimizer.")
    scalars = broadcast_object(scalars, root_rank, name=prefix + "optimizer.scalars")
    for key, value in scalars.items():
        setters[key](value)
    # (state_dict() shares each parameter's state dict with the optimizer,
    # so the tensors were updated in place and the setters took effect.)


def _sparse_parameters(model: Optional[torch.nn.Module]) -> Set[int]:
    """The ids of the parameters of model's sparse Embeddings."""
    if model is None:
        return set()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"broadcast_optimizer_state: model must be a torch.nn.Module, not "
                         f"{type(model).__name__}")
    return {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse
            for p in m.parameters()}


def _create_state(optimizer: torch.optim.Optimizer, sparse: Set[int]) -> None:
    """Runs the wrapped optimizer's step once on zero gradients to create its
    state, then puts parameters and gradients back. The gradients are
    sparse for SparseAdam, and for SGD on the parameters in sparse."""
    saved = []
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                saved.append((p, p.detach().clone(), p.grad))
                zero = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or \
                        (isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    zero = zero.to_sparse()
                p.grad = zero
    try:
        local_step = getattr(optimizer, "_hvd_local_step", None)
        (local_step or optimizer.step)()
    finally:
        with torch.no_grad():
            for p, data, grad in saved:
                p.copy_(data)
                p.grad = grad


def _dumps(obj: Any) -> torch.Tensor:
    buf = io.BytesIO()
    _pickle.dump(obj, buf)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _loads(t: torch.Tensor) -> Any:
    return _pickle.loads(t.numpy().tobytes())


def broadcast_object(obj: Any, root_rank: int = 0, name: str = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Pickles obj on root_rank and returns a copy of it on every process."""
    if name is None:
        name = type(obj).__name__
    if rank() == root_rank:
        payload = _dumps(obj)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=name + ".sz", process_set=process_set)
    if rank() != root_rank:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=name + ".t", process_set=process_set)
    return obj if rank() == root_rank else _loads(payload)


def allgather_object(obj: Any, name: str = None, process_set: ProcessSet = global_process_set) -> List[Any]:
    """Pickles obj on every process and returns the list of all processes'
    objects, in rank order (of the process set)."""
    if name is None:
        name = type(obj).__name__
    payload = _dumps(obj)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=name + ".sz",
                        process_set=process_set).tolist()
    data = allgather(payload, name=name + ".t", process_set=process_set)
    out, start = [], 0
    for n in lengths:
        out.append(_loads(data[start:start + n]))
        start += n
    return out
