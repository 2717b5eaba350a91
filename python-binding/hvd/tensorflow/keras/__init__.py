"""hvd.tensorflow.keras: tf.keras with the API of ``horovod.tensorflow.keras``.

    import tensorflow as tf
    import hvd.tensorflow.keras as hvd

    hvd.init()
    opt = tf.keras.optimizers.SGD(0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt)
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

tf.keras is Keras 3 (with TensorFlow as its backend), or Keras 2 from the
package tf_keras when TF_USE_LEGACY_KERAS=1; both work. hvd.keras is the
same API for the standalone ``keras`` package. See docs/KERAS.md.
"""

import tensorflow as tf

from hvd._keras import compat as _compat

_keras = _compat.checked_keras(tf.keras, "hvd.tensorflow.keras")

from hvd._keras import api as _api  # noqa: E402
from hvd._keras import exports as _exports  # noqa: E402
from hvd._keras.exports import *  # noqa: E402,F401,F403
from hvd.tensorflow.compression import Compression  # noqa: E402
from hvd.tensorflow.keras import callbacks  # noqa: E402,F401
from hvd.tensorflow.keras import elastic  # noqa: E402,F401


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """tf.keras.models.load_model(filepath) with its optimizer (its state
    restored) made a DistributedOptimizer; custom_optimizers: the optimizer
    classes of the file that are not Keras's own."""
    return _api.load_model(_keras, filepath, custom_optimizers, custom_objects, compression)


__all__ = _exports.__all__ + ["load_model", "callbacks", "elastic"]
