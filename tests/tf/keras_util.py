"""Helpers of the Keras tests: the Keras under test (tf.keras: Keras 3, or
Keras 2 from tf_keras under TF_USE_LEGACY_KERAS=1), small float64 models
with given weights, every rank's data, and the weights of all ranks."""

import os

import numpy as np
import tensorflow as tf

import hvd.tensorflow as hvd_tf

K = tf.keras
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS", "0").lower() in ("1", "true", "yes")


def make_model(seed, keras=K, units=3):
    """A 4 -> units (tanh) -> 1 float64 network whose weights come from seed."""
    model = keras.Sequential([keras.Input((4,), dtype="float64"),
                              keras.layers.Dense(units, activation="tanh", dtype="float64"),
                              keras.layers.Dense(1, dtype="float64")])
    rng = np.random.default_rng(seed)
    model.set_weights([rng.standard_normal(w.shape) for w in model.get_weights()])
    return model


def mse(keras=K):
    """The mean squared error in float64: Keras 3 computes a loss in floatx
    (float32) unless told otherwise; Keras 2 in the predictions' dtype."""
    if LEGACY and keras is K:
        return keras.losses.MeanSquaredError()
    return keras.losses.MeanSquaredError(dtype="float64")


def rank_data(rank, n):
    """Rank's n samples: different on every rank, known to all. float64
    values that float32 holds exactly: Keras 3's fit casts float64 arrays
    to floatx (float32) before they reach a float64 model."""
    rng = np.random.default_rng(70 + rank)
    x = rng.standard_normal([n, 4])
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * rng.standard_normal([n, 1])
    return x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)


def global_batches(size, n, batch):
    """The single-process view: global batch i is every rank's batch i, in rank order."""
    parts = [rank_data(r, n) for r in range(size)]
    xs, ys = [], []
    for i in range(0, n, batch):
        for x, y in parts:
            xs.append(x[i:i + batch])
            ys.append(y[i:i + batch])
    return np.concatenate(xs), np.concatenate(ys)


def value(v):
    """A variable's (or tensor's) value in numpy: Keras 3 Variables warn in np.asarray."""
    return tf.convert_to_tensor(v).numpy()


def flat(arrays):
    return np.concatenate([np.asarray(value(a) if tf.is_tensor(a) or hasattr(a, 'assign') else a,
                                      np.float64).reshape(-1) for a in arrays])


def gathered(arrays):
    """Every rank's arrays, flattened: one row per rank."""
    return hvd_tf.allgather(tf.constant(flat(arrays)[None, :])).numpy()


def assert_same_on_every_rank(arrays):
    rows = gathered(arrays)
    for r in range(1, rows.shape[0]):
        assert rows[r].tobytes() == rows[0].tobytes(), f"rank {r} differs from rank 0"


class Recorder(K.callbacks.Callback):
    """Records what fn(model) gives at the named hooks (batch begin/end, epoch end)."""

    def __init__(self, fn, when=("batch_end",)):
        super().__init__()
        self.fn = fn
        self.when = when
        self.seen = {w: [] for w in when}

    def _record(self, what, logs):
        if what in self.when:
            self.seen[what].append(self.fn(self.model, logs))

    def on_train_batch_begin(self, batch, logs=None):
        self._record("batch_begin", logs)

    def on_train_batch_end(self, batch, logs=None):
        self._record("batch_end", logs)

    def on_epoch_end(self, epoch, logs=None):
        self._record("epoch_end", logs)
