"""Elastic training for PyTorch, as ``horovod.torch.elastic``:
``@hvd.elastic.run``, ``hvd.elastic.TorchState``, ``ObjectState`` and
``ElasticSampler``. See docs/ELASTIC.md."""

from hvd.common.elastic import State, generation, run_fn, sync_needed
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.elastic.state import ObjectState, TorchState

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "generation", "sync_needed"]


def _reset():
    from hvd.torch import init, shutdown
    shutdown()
    init()


def run(func):
    """Decorator for the training function ``func(state, ...)``: on a lost
    rank (HorovodInternalError) the state is restored to its last commit;
    on workers waiting to join (HostsUpdatedInterrupt) it is kept; either
    way hvd is re-initialised into the next generation, the state synced
    from rank 0 when the root daemon says so, and func called again."""
    return run_fn(func, _reset)
