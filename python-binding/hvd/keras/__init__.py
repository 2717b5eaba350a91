"""hvd.keras: the standalone ``keras`` package (Keras 3, TensorFlow
backend) with the API of ``horovod.keras``: the same functions, optimizer
and callbacks as hvd.tensorflow.keras, for ``import keras``. Other Keras
backends (KERAS_BACKEND=jax, torch) raise ImportError: hvd's ops are
TensorFlow ops. See docs/KERAS.md."""

import keras as _keras_pkg

from hvd._keras import compat as _compat

_keras = _compat.checked_keras(_keras_pkg, "hvd.keras")

from hvd._keras import api as _api  # noqa: E402
from hvd._keras import exports as _exports  # noqa: E402
from hvd._keras.exports import *  # noqa: E402,F401,F403
from hvd.tensorflow.compression import Compression  # noqa: E402
from hvd.keras import callbacks  # noqa: E402,F401
from hvd.keras import elastic  # noqa: E402,F401


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """keras.models.load_model(filepath) with its optimizer (its state
    restored) made a DistributedOptimizer; custom_optimizers: the optimizer
    classes of the file that are not Keras's own."""
    return _api.load_model(_keras, filepath, custom_optimizers, custom_objects, compression)


__all__ = _exports.__all__ + ["load_model", "callbacks", "elastic"]
