"""The behaviour of the Keras callbacks of hvd, as in Horovod's
``horovod/_keras/callbacks.py``; hvd.tensorflow.keras.callbacks and
hvd.keras.callbacks mix these into their Keras's Callback classes."""

from typing import Any, Callable, Dict, Optional

import numpy as np
import tensorflow as tf

from hvd._keras import api, compat
from hvd.common import basics
from hvd.tensorflow import functions as _functions


class BroadcastGlobalVariablesCallbackImpl:
    """Broadcasts root_rank's model and optimizer variables when training
    begins (the optimizer built first, so that its variables exist), or,
    for a model built by its first batch, after that batch."""

    def __init__(self, root_rank: int, device: str = "", *args):
        super().__init__(*args)
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False

    def _broadcast(self) -> None:
        with tf.device(self.device):
            api.broadcast_variables(api.model_variables(self.model), self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.broadcast_done and getattr(self.model, "built", False) and self.model.variables:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallbackImpl:
    """Replaces every value in the logs at the end of an epoch by its
    average over the ranks (one allreduce, in the order of the names), for
    the callbacks after it."""

    def __init__(self, device: str = "", *args):
        super().__init__(*args)
        self.device = device

    def _average_metrics_in_place(self, logs: Optional[Dict[str, Any]]) -> None:
        if not logs:
            return
        names = sorted(logs)
        values = [np.asarray(logs[n], np.float64) for n in names]
        flat = np.concatenate([v.reshape(-1) for v in values])
        with tf.device(self.device):
            avg = _functions.allreduce(tf.constant(flat), op=basics.Average, name="keras.metric_average").numpy()
        at = 0
        for n, v in zip(names, values):
            part = avg[at:at + v.size]
            logs[n] = float(part[0]) if v.ndim == 0 else part.reshape(v.shape)
            at += v.size

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


class LearningRateScheduleCallbackImpl:
    """Sets the learning rate to initial_lr * multiplier(epoch) from
    start_epoch until before end_epoch: at each epoch's first batch
    (staircase), or every batch with the fractional epoch. With
    momentum_correction, a change of the learning rate scales the momentum
    buffers by new/old, which is Horovod's temporary scaling of the
    momentum (Goyal et al.) without changing the optimizer's configuration."""

    def __init__(self, initial_lr: float, multiplier, start_epoch: int = 0, end_epoch: Optional[int] = None,
                 staircase: bool = True, momentum_correction: bool = True, steps_per_epoch: Optional[int] = None,
                 *args):
        super().__init__(*args)
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch: Optional[int] = None
        if not callable(multiplier):
            self.staircase = True
            value = multiplier
            self.multiplier: Callable[[float], float] = lambda epoch: value
        else:
            self.multiplier = multiplier

    def _autodetect_steps_per_epoch(self) -> int:
        params = getattr(self, "params", None) or {}
        if params.get("steps"):
            return params["steps"]
        if params.get("samples") and params.get("batch_size"):
            return params["samples"] // params["batch_size"]
        raise ValueError(f"Could not autodetect the number of steps per epoch: pass steps_per_epoch to "
                         f"{type(self).__name__}()")

    def _adjust_learning_rate(self, epoch: float) -> None:
        opt = self.model.optimizer
        old_lr = compat.learning_rate(opt)
        new_lr = self.initial_lr * self.multiplier(epoch)
        compat.set_learning_rate(opt, new_lr)
        if self.momentum_correction and old_lr != 0.0 and new_lr != old_lr:
            for m in compat.momentum_buffers(opt):
                m.assign(m * tf.cast(new_lr / old_lr, m.dtype))

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or (self.end_epoch is not None and
                                                     self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = compat.learning_rate(self.model.optimizer)


class LearningRateWarmupCallbackImpl(LearningRateScheduleCallbackImpl):
    """Goes from initial_lr / size to initial_lr over warmup_epochs, every
    batch (Goyal et al.; Horovod's formula)."""

    def __init__(self, initial_lr: float, warmup_epochs: int = 5, momentum_correction: bool = True,
                 steps_per_epoch: Optional[int] = None, verbose: int = 0, *args):
        def multiplier(epoch):
            # round numbers at the end of each epoch, as Horovod has it
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / basics.size() * (epoch * (basics.size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, 0, warmup_epochs, False, momentum_correction, steps_per_epoch,
                         *args)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{compat.learning_rate(self.model.optimizer):g}.")


_UNSET_PATH = "hvd-best-model-unset.keras"


class BestModelCheckpointImpl:
    """ModelCheckpoint with save_best_only, written by rank 0 alone; the
    other ranks do nothing. filepath (hvd's addition; Horovod's callers set
    .filepath) must be set before training."""

    def _hvd_init(self, filepath):
        return _UNSET_PATH if filepath is None else filepath

    def on_train_begin(self, logs=None):
        # every rank refuses, so that none is left waiting in a collective
        if self.filepath == _UNSET_PATH:
            raise ValueError("BestModelCheckpoint needs a file to write: pass filepath= or set .filepath")
        if basics.rank() != 0:
            return
        parent = getattr(super(), "on_train_begin", None)
        if parent is not None:
            parent(logs)

    def on_train_batch_end(self, batch, logs=None):
        if basics.rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_begin(self, epoch, logs=None):
        if basics.rank() == 0:
            super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if basics.rank() == 0:
            super().on_epoch_end(epoch, logs)
