"""The elastic names hvd.tensorflow.keras.elastic and hvd.keras.elastic
share, as ``horovod.keras.elastic``: KerasState and the callbacks' bodies
(each frontend mixes them with its Keras's Callback)."""

from hvd.tensorflow.elastic import ObjectState, State, TensorFlowKerasState, run

__all__ = ["run", "State", "ObjectState", "KerasState"]


class KerasState(TensorFlowKerasState):
    """``KerasState(model, optimizer=None, **kwargs)``: the model's and its
    optimizer's variables and plain attributes (state.epoch, state.batch)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=backend, **kwargs)


class CommitStateCallbackImpl:
    """Commits the state every batches_per_commit batches. It overrides
    on_batch_end, which Keras 3 and Keras 2 call from on_train_batch_end:
    a callback that does keeps Keras 3 from running it on another thread,
    so the commit and the interrupts it raises stay in model.fit's."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be at least 1, not {batches_per_commit}")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallbackImpl:
    """Keeps state.batch at the number of batches of the epoch done (0 at
    an epoch's start), so that a commit records where to resume; the
    epoch's last batch (of fit's steps per epoch) sets state.epoch to the
    next epoch and state.batch to 0 at once, so a commit after it resumes
    there. An epoch that begins at state.batch > 0 (fit called again after
    a reset) counts on from it and ends after the rest of its steps: the
    callback stops the epoch's loop (model.stop_training) and lets the next
    epoch run. Feed fit the data from (state.epoch, state.batch) on."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._epoch = 0
        self._done_before = 0
        self._stopped = False

    def _steps(self):
        return (getattr(self, "params", None) or {}).get("steps")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._done_before = int(self.state.batch)
        self._stopped = False

    def on_batch_end(self, batch, logs=None):
        done = self._done_before + batch + 1
        steps = self._steps()
        if steps and done >= steps:
            self.state.epoch = self._epoch + 1
            self.state.batch = 0
            if self._done_before and not self.model.stop_training:
                self.model.stop_training = True
                self._stopped = True
        else:
            self.state.batch = done

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        self._done_before = 0
        if self._stopped:
            self.model.stop_training = False
            self._stopped = False


class UpdateEpochStateCallbackImpl:
    """Keeps state.epoch at the next epoch to run (for fit's initial_epoch)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1
