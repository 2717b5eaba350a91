"""hvd.tensorflow.keras.elastic: elastic training with tf.keras, as
``horovod.tensorflow.keras.elastic``: ``run``, ``KerasState`` and the callbacks that keep
it current in model.fit. See docs/ELASTIC.md."""

import tensorflow as _tf

from hvd._keras import elastic as _impl
from hvd._keras.elastic import KerasState, ObjectState, State, run

_keras = _tf.keras

__all__ = ["run", "State", "ObjectState", "KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback"]


class CommitStateCallback(_impl.CommitStateCallbackImpl, _keras.callbacks.Callback):
    """Commits the state every batches_per_commit batches."""


class UpdateBatchStateCallback(_impl.UpdateBatchStateCallbackImpl, _keras.callbacks.Callback):
    """Keeps state.batch at the batches of the epoch done; resumes an epoch there."""


class UpdateEpochStateCallback(_impl.UpdateEpochStateCallbackImpl, _keras.callbacks.Callback):
    """Keeps state.epoch at the next epoch to run (fit's initial_epoch)."""
