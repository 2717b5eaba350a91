"""The Keras callbacks of hvd.keras (the keras package), as in
``horovod.keras.callbacks``. Put MetricAverageCallback before
the callbacks that read the logs (checkpoints, early stopping)."""

import keras as _keras

from hvd._keras import callbacks_impl as _impl


class BroadcastGlobalVariablesCallback(_impl.BroadcastGlobalVariablesCallbackImpl, _keras.callbacks.Callback):
    """Makes every rank start from root_rank's model and optimizer variables."""

    def __init__(self, root_rank, device=""):
        super().__init__(root_rank, device)


class MetricAverageCallback(_impl.MetricAverageCallbackImpl, _keras.callbacks.Callback):
    """Averages the epoch's logs (metrics, validation metrics) over the ranks."""

    def __init__(self, device=""):
        super().__init__(device)


class LearningRateScheduleCallback(_impl.LearningRateScheduleCallbackImpl, _keras.callbacks.Callback):
    """learning rate = initial_lr * multiplier(epoch) in [start_epoch, end_epoch)."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__(initial_lr, multiplier, start_epoch, end_epoch, staircase, momentum_correction,
                         steps_per_epoch)


class LearningRateWarmupCallback(_impl.LearningRateWarmupCallbackImpl, _keras.callbacks.Callback):
    """From initial_lr / size to initial_lr over warmup_epochs."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__(initial_lr, warmup_epochs, momentum_correction, steps_per_epoch, verbose)


class BestModelCheckpoint(_impl.BestModelCheckpointImpl, _keras.callbacks.ModelCheckpoint):
    """Saves the model of the best epoch so far (monitor, mode) to filepath, on rank 0 only."""

    def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch", filepath=None):
        super().__init__(filepath=self._hvd_init(filepath), monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=False, mode=mode, save_freq=save_freq)
