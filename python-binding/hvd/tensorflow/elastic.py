"""Elastic training for TensorFlow 2, as ``horovod.tensorflow.elastic``:
``@hvd.elastic.run``, ``TensorFlowState`` (variables), ``TensorFlowKerasState``
(a Keras model and its optimizer) and ``ObjectState``. The state is kept in
memory at each commit (numpy copies of the variables), written back by
restore() and broadcast from rank 0 by sync(). See docs/ELASTIC.md."""

import tensorflow as tf

from hvd.common.elastic import ObjectState as _ObjectState
from hvd.common.elastic import PlainAttributes, State, generation, run_fn, sync_needed
from hvd.common.exceptions import HorovodInternalError

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState", "generation", "sync_needed"]

# the text hvd's op library gives a reset (kernels.c: HVD_ERESET)
_RESET_TEXT = "The elastic job's membership changed"


def _bcast_object(obj, root_rank=0):
    from hvd.tensorflow import broadcast_object
    return broadcast_object(obj, root_rank=root_rank, name="elastic.state")


def _agree_max(value):
    import numpy as np

    import hvd
    return int(hvd.allreduce(np.array([int(value)], dtype=np.int64), op=hvd.Max,
                             name="elastic.check_host_updates")[0])


def _reset():
    from hvd.tensorflow import init, shutdown
    shutdown()
    init()


def run(func):
    """Decorator for the training function ``func(state, ...)``: a lost rank
    (HorovodInternalError, or the op library's AbortedError of a reset)
    restores the state to its last commit; workers waiting to join
    (HostsUpdatedInterrupt) keep it; either way hvd is re-initialised into
    the next generation, the state synced from rank 0 when the root daemon
    says so, and func called again."""
    from hvd import _core

    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.AbortedError as e:
            if _RESET_TEXT not in (e.message or ""):
                raise
            err = HorovodInternalError(e.message)
            err.code = _core.ERESET
            raise err from e

    import functools
    return run_fn(functools.wraps(func)(translated), _reset)


class ObjectState(_ObjectState):
    """Plain Python attributes, given as keyword arguments."""

    def __init__(self, **kwargs):
        super().__init__(_bcast_object, _agree_max, **kwargs)


class _VariablesState(PlainAttributes, State):
    """Variables (from variables_fn(), asked at each use, as an optimizer's
    appear late) and plain attributes (kwargs) committed together."""

    def __init__(self, variables_fn, **kwargs):
        self._variables_fn = variables_fn
        self._plain = _ObjectState(_bcast_object, _agree_max, **kwargs)
        super().__init__(_bcast_object, _agree_max)
        self._values = None
        self.save()

    def save(self):
        self._values = [v.numpy().copy() for v in self._variables_fn()]
        self._plain.save()

    def restore(self):
        variables = self._variables_fn()
        if len(variables) != len(self._values):
            raise RuntimeError(f"elastic state: {len(variables)} variables now, {len(self._values)} committed")
        for v, value in zip(variables, self._values):
            v.assign(value)
        self._plain.restore()

    def sync(self):
        from hvd._keras.compat import tf_variable
        from hvd.tensorflow import broadcast_variables
        variables = [tf_variable(v) for v in self._variables_fn()]
        if variables:
            broadcast_variables(variables, root_rank=0)
        self._plain.sync()
        self.save()


class TensorFlowState(_VariablesState):
    """``TensorFlowState(variables=None, session=None, **kwargs)``: the
    variables (TensorFlow 2, eager; session is accepted for Horovod's
    signature and not used; None: tf.compat.v1.global_variables()) and
    plain attributes."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = list(variables) if variables is not None else None
        self.session = session
        super().__init__(lambda: self.variables if self.variables is not None
                         else tf.compat.v1.global_variables(), **kwargs)


class TensorFlowKerasState(_VariablesState):
    """``TensorFlowKerasState(model, optimizer=None, backend=None, **kwargs)``:
    the model's variables and its optimizer's (model.optimizer when none is
    given; built on the model's trainable variables if it is not yet, so
    the committed set does not change at the first step)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        super().__init__(self._keras_variables, **kwargs)

    def _keras_variables(self):
        from hvd._keras.api import model_variables
        if self.optimizer is None:
            return list(self.model.variables)
        return model_variables(self.model, self.optimizer)
