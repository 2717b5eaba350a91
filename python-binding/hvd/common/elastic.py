"""Elastic training, the part every framework shares: the state a job
commits and restores, and the loop that survives a changed membership.

The root daemon decides each generation of an elastic job (which ranks,
and whether they sync their state); this module only reacts to it:

- a lost rank or host fails the collectives in flight on every survivor
  with HorovodInternalError whose ``code`` is ``hvd._core.ERESET``: the
  state is restored to its last commit, hvd is re-initialised into the
  next generation, and the training function is called again;
- workers waiting to join are announced by the daemons; every rank sees
  them at the same ``check_host_updates()`` (``commit()`` calls it), as the
  ranks agree on it with an allreduce, and raises HostsUpdatedInterrupt.

Names and behaviour follow ``horovod.common.elastic``.
"""

import copy
import functools

from hvd import _core
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["State", "ObjectState", "PlainAttributes", "run_fn", "generation", "sync_needed"]


def generation() -> int:
    """The generation this rank was placed in (0: not an elastic job)."""
    return _core.elastic_info()[0]


def sync_needed() -> bool:
    """Whether every rank of this generation takes the state from rank 0:
    one decision of the root daemon, the same on every rank."""
    return bool(_core.elastic_info()[1])


class State:
    """The state of an elastic training: ``commit()`` it at points where a
    failure may resume from, ``restore()`` goes back to the last commit,
    ``sync()`` makes every rank equal to rank 0 (the lowest surviving one).

    bcast_object(obj, root_rank=0) and agree_max(int) -> int come from the
    framework (a broadcast of a Python object, a max-allreduce of an int).
    """

    def __init__(self, bcast_object, agree_max):
        self._bcast_object = bcast_object
        self._agree_max = agree_max
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after each reset, once hvd is
        re-initialised: e.g. to scale the learning rate to the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp=None, update_res=None):
        """Horovod's notification hook; the daemons' announcement replaces it."""

    def commit(self):
        """Saves the state (restore() goes back here) and checks whether
        workers wait to join (HostsUpdatedInterrupt, on every rank alike)."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when workers wait to
        join the job: the ranks agree on it with one allreduce, so all of
        them raise it here or none does."""
        if generation() == 0:
            return
        if self._agree_max(_core.elastic_info()[2]) > 0:
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after the job was re-initialised (before the callbacks)."""


class ObjectState(State):
    """A state of plain Python attributes, given as keyword arguments:
    ``state.epoch``, ``state.batch`` …; synced with one broadcast."""

    def __init__(self, bcast_object, agree_max, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object, agree_max)

    def save(self):
        self._saved_state = {attr: copy.deepcopy(getattr(self, attr)) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


class PlainAttributes:
    """Forwards the attributes a state keeps in its ObjectState ``_plain``
    (the keyword arguments it was made with: epoch, batch, ...), so that
    ``state.epoch`` reads and writes the committed value's live copy."""

    def __getattr__(self, name):
        plain = self.__dict__.get("_plain")
        if plain is not None and name in plain._saved_state:
            return getattr(plain, name)
        raise AttributeError(name)

    def __setattr__(self, name, value):
        plain = self.__dict__.get("_plain")
        if plain is not None and name in plain._saved_state:
            setattr(plain, name, value)
        else:
            super().__setattr__(name, value)


def run_fn(func, reset):
    """Wraps func(state, *args, **kwargs) so that it survives resets (see
    the module's text). reset() re-initialises the framework's hvd."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        while True:
            try:
                if generation() == 0 or sync_needed():
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if getattr(e, "code", None) != _core.ERESET:
                    raise
                state.restore()
            except HostsUpdatedInterrupt:
                pass
            reset()
            state.on_reset()

    return wrapper
