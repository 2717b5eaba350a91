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
    """Commits the state every batches_per_commit batches."""

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
    """Keeps state.batch at the batch of the epoch last ended (0 at an
    epoch's end)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallbackImpl:
    """Keeps state.epoch at the next epoch to run (for fit's initial_epoch)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1
