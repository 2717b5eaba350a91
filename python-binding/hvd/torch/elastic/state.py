"""TorchState: a model, an optimizer and any other values (an
ElasticSampler, plain attributes) committed, restored and synced together."""

import copy

from hvd.common.elastic import ObjectState as _ObjectState
from hvd.common.elastic import PlainAttributes, State
from hvd.torch.elastic.sampler import ElasticSampler

__all__ = ["TorchState", "ObjectState"]


def _bcast_object(obj, root_rank=0):
    from hvd.torch import broadcast_object
    return broadcast_object(obj, root_rank=root_rank, name="elastic.state")


def _agree_max(value):
    import torch
    from hvd.torch import Max, allreduce
    return int(allreduce(torch.tensor([int(value)], dtype=torch.int64), op=Max,
                         name="elastic.check_host_updates").item())


class ObjectState(_ObjectState):
    """Plain Python attributes, given as keyword arguments."""

    def __init__(self, **kwargs):
        super().__init__(_bcast_object, _agree_max, **kwargs)


class _SamplerHandler:
    """An ElasticSampler: every rank's processed indices are gathered at
    each commit, so a rank lost later does not take its part with it."""

    def __init__(self, sampler):
        self.value = sampler
        self._saved = copy.deepcopy(sampler.state_dict())

    def save(self, collective):
        state = self.value.state_dict()
        if collective:
            from hvd.torch import allgather_object, size
            if size() > 1:
                union = set()
                for part in allgather_object(state["processed_indices"], name="elastic.sampler"):
                    union |= part
                state["processed_indices"] = union
                self.value.processed_indices = set(union)
        self._saved = copy.deepcopy(state)

    def restore(self):
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self):
        from hvd.torch import allgather_object
        state = self.value.state_dict()
        # rank 0's epoch is the one synced: a rank that comes back with the
        # state of an earlier epoch (a hung worker resumed) adds nothing
        parts = allgather_object((state["epoch"], state["processed_indices"]), name="elastic.sampler")
        union = set()
        for epoch, part in parts:
            if epoch == parts[0][0]:
                union |= part
        state["processed_indices"] = union
        self.value.load_state_dict(_bcast_object(state))
        self._saved = copy.deepcopy(self.value.state_dict())


class TorchState(PlainAttributes, State):
    """``TorchState(model=, optimizer=, **kwargs)``: the model's and the
    optimizer's state dicts are copied at each commit and broadcast from
    rank 0 at each sync; an ElasticSampler among kwargs keeps the epoch's
    processed samples; other kwargs are plain attributes (state.epoch)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._samplers = {k: _SamplerHandler(v) for k, v in kwargs.items() if isinstance(v, ElasticSampler)}
        for k, h in self._samplers.items():
            setattr(self, k, h.value)
        self._plain = _ObjectState(_bcast_object, _agree_max,
                                   **{k: v for k, v in kwargs.items() if k not in self._samplers})
        super().__init__(_bcast_object, _agree_max)
        self._save(collective=False)

    def _save(self, collective):
        self._model_state = copy.deepcopy(self.model.state_dict()) if self.model is not None else None
        self._opt_state = copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None
        for h in self._samplers.values():
            h.save(collective)
        self._plain.save()

    def save(self):
        self._save(collective=True)

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._model_state)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._opt_state)
        for h in self._samplers.values():
            h.restore()
        self._plain.restore()

    def sync(self):
        from hvd.torch import broadcast_optimizer_state, broadcast_parameters
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        for h in self._samplers.values():
            h.sync()
        self._plain.sync()
        self._save(collective=False)
