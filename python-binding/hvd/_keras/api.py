"""The functions of hvd's Keras frontends, shared by hvd.tensorflow.keras
(tf.keras) and hvd.keras (the keras package): Horovod's Keras collectives,
which take any tensor-like value and give back a numpy value when
executing eagerly; the broadcast of a model's and its optimizer's
variables; load_model."""

from typing import Any, Optional

import tensorflow as tf

from hvd._keras import compat
from hvd._keras.optimizer import make_distributed
from hvd.common.basics import Average
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.tensorflow import functions as _functions
from hvd.tensorflow import mpi_ops as _mpi_ops
from hvd.tensorflow.compression import Compression


def _value(t: Any) -> Any:
    return t.numpy() if tf.executing_eagerly() else t


def allreduce(value, name: Optional[str] = None, average: Optional[bool] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, op: Optional[int] = None, compression=Compression.none,
              process_set: ProcessSet = global_process_set):
    """The reduction (op, Average by default) of the ranks' values."""
    return _value(_functions.allreduce(tf.convert_to_tensor(value), average=average, compression=compression,
                                       op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                       name=name, process_set=process_set))


def allgather(value, name: Optional[str] = None, process_set: ProcessSet = global_process_set):
    """The ranks' values concatenated along the first dimension."""
    return _value(_mpi_ops.allgather(tf.convert_to_tensor(value), name=name, process_set=process_set))


def broadcast(value, root_rank: int, name: Optional[str] = None, process_set: ProcessSet = global_process_set):
    """root_rank's value on every rank."""
    return _value(_mpi_ops.broadcast(tf.convert_to_tensor(value), root_rank, name=name, process_set=process_set))


def alltoall(value, splits=None, name: Optional[str] = None, process_set: ProcessSet = global_process_set):
    """splits[r] rows to rank r; returns (the rows received, how many from each rank)."""
    out, received = _mpi_ops.alltoall(tf.convert_to_tensor(value), splits=splits, name=name, process_set=process_set)
    return _value(out), _value(received)


def reducescatter(value, name: Optional[str] = None, op: int = Average,
                  process_set: ProcessSet = global_process_set):
    """The reduction of the ranks' values, of which each rank keeps its share of rows."""
    return _value(_mpi_ops.reducescatter(tf.convert_to_tensor(value), name=name, op=op, process_set=process_set))


def join() -> int:
    """This rank has no more data (see hvd.tensorflow.join); returns the last rank to join."""
    return int(_mpi_ops.join())


def barrier(process_set: ProcessSet = global_process_set) -> None:
    _mpi_ops.barrier(process_set=process_set)


def broadcast_variables(variables, root_rank: int, process_set: ProcessSet = global_process_set):
    """root_rank's values of the variables (Keras or TensorFlow ones) on every rank."""
    return _functions.broadcast_variables([compat.tf_variable(v) for v in variables], root_rank,
                                          process_set=process_set)


def model_variables(model: Any, optimizer: Any = None) -> list:
    """The variables of the model and of its optimizer (model.optimizer
    unless given), the optimizer built for the model's trainable variables
    first: Keras makes an optimizer's variables at its first update."""
    variables = list(model.variables) if model is not None else []
    if optimizer is None and model is not None:
        optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        if model is not None:
            compat.build_optimizer(optimizer, model.trainable_variables)
        variables += compat.optimizer_variables(optimizer)
    return variables


def broadcast_global_variables(root_rank: int, model: Any = None, optimizer: Any = None,
                               process_set: ProcessSet = global_process_set):
    """root_rank's model and optimizer variables on every rank. Keras 3 keeps
    no global variables: pass the model (its optimizer is model.optimizer
    unless optimizer= is given). Without either, in a TF1 graph, the op that
    broadcasts the graph's global variables."""
    if model is None and optimizer is None:
        if not tf.executing_eagerly():
            return _functions.broadcast_variables(tf.compat.v1.global_variables(), root_rank,
                                                  process_set=process_set)
        raise ValueError("broadcast_global_variables: Keras 3 and TensorFlow 2 keep no global variables: pass "
                         "model= (and optimizer= when it is not model.optimizer), or use the callback "
                         "BroadcastGlobalVariablesCallback(root_rank)")
    return broadcast_variables(model_variables(model, optimizer), root_rank, process_set=process_set)


def load_model(keras: Any, filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """keras.models.load_model(filepath), its optimizer (state restored)
    turned into a DistributedOptimizer. custom_optimizers: optimizer
    classes the file names (besides Keras's own)."""
    objects = {cls.__name__: cls for cls in (custom_optimizers or [])}
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    opt = getattr(model, "optimizer", None)
    if opt is not None and not getattr(type(opt), "_hvd_distributed", False):
        make_distributed(opt, compression=compression)
    return model
