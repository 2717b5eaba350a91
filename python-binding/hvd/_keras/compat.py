"""What differs between the Keras versions hvd's Keras frontends run on:
Keras 3 (the ``keras`` package, also ``tf.keras`` by default) and Keras 2
(``tf_keras``, ``tf.keras`` under TF_USE_LEGACY_KERAS=1, whose optimizers
are the new ``tf_keras.optimizers`` or the legacy OptimizerV2). Only the
TensorFlow backend of Keras 3 runs hvd's ops."""

from typing import Any, List

import numpy as np
import tensorflow as tf


def checked_keras(keras: Any, frontend: str) -> Any:
    """keras itself when its backend is TensorFlow; else an ImportError
    saying what to do."""
    backend = getattr(getattr(keras, "backend", None), "backend", None)
    name = backend() if callable(backend) else "tensorflow"
    if name != "tensorflow":
        raise ImportError(f"{frontend} needs Keras with the TensorFlow backend, but this Keras "
                          f"{getattr(keras, '__version__', '')} runs on '{name}' (KERAS_BACKEND={name}): run with "
                          f"KERAS_BACKEND=tensorflow, or train a torch model with hvd.torch (docs/KERAS.md)")
    return keras


def is_keras3(cls: type) -> bool:
    """Whether an optimizer class is Keras 3's (module keras.*, not tf_keras.*)."""
    return any(c.__module__.startswith("keras.") for c in cls.__mro__)


def is_legacy_v2(opt: Any) -> bool:
    """Whether opt is a Keras 2 OptimizerV2 (tf_keras.optimizers.legacy)."""
    return hasattr(opt, "_create_all_weights")


def tf_variable(v: Any) -> tf.Variable:
    """The tf.Variable behind a Keras 3 Variable (a tf.Variable as it is)."""
    if isinstance(v, tf.Variable):
        return v
    inner = getattr(v, "value", None)
    return inner if isinstance(inner, tf.Variable) else v


def build_optimizer(opt: Any, variables: List[Any]) -> None:
    """Creates the optimizer's variables for these model variables now
    (Keras makes them at the first update otherwise)."""
    variables = list(variables)
    if is_keras3(type(opt)):
        if not opt.built:
            import keras
            with keras.name_scope(opt.name, caller=opt):
                opt.build(variables)
            opt.built = True
    elif is_legacy_v2(opt):
        with tf.init_scope():
            opt._create_all_weights(variables)
    else:
        with tf.init_scope():
            opt.build(variables)


def optimizer_variables(opt: Any) -> List[Any]:
    """opt.variables: a list in Keras 3, a method (or a callable list) in Keras 2."""
    v = opt.variables
    return list(v() if callable(v) else v)


def learning_rate(opt: Any) -> float:
    return float(np.asarray(tf.convert_to_tensor(opt.learning_rate)))


def set_learning_rate(opt: Any, value: float) -> None:
    """Assigns the learning rate (a variable in every version; not a schedule)."""
    opt.learning_rate = value


def momentum_buffers(opt: Any) -> List[Any]:
    """The optimizer's momentum slots (SGD, RMSprop with momentum > 0); none
    for other optimizers."""
    inner = getattr(opt, "inner_optimizer", None)  # a LossScaleOptimizer's
    if inner is not None:
        return momentum_buffers(inner)
    try:
        momentum = float(np.asarray(tf.convert_to_tensor(getattr(opt, "momentum", 0.0))))
    except (TypeError, ValueError):
        return []
    if momentum == 0.0:
        return []
    for attr in ("momentums", "_momentums"):
        buffers = getattr(opt, attr, None)
        if buffers:
            return [b for b in buffers if b is not None]
    slots = getattr(opt, "_slots", None)  # OptimizerV2
    if isinstance(slots, dict):
        return [s["momentum"] for s in slots.values() if "momentum" in s]
    return []
