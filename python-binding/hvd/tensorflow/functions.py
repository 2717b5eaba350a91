"""Operations on many tensors or variables at once: allreduce of dense
tensors and of tf.IndexedSlices, grouped allreduce, and broadcast_variables,
which runs its broadcasts in one tf.function so that they are in flight
together and hvd fuses them."""

import contextlib
from typing import Any, List, Optional, Sequence

import tensorflow as tf

import hvd as _hvd
from hvd.common import ops as _common_ops
from hvd.common.basics import Average, Sum, handle_average_backwards_compatibility, op_name, rank
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.tensorflow import mpi_ops
from hvd.tensorflow.compression import Compression


def _device(device: str):
    """tf.device(device), or no scope for "" (the ops' kernels are the
    CPU's wherever they would be placed, and entering a scope costs about
    2 us an eager call)."""
    return tf.device(device) if device else contextlib.nullcontext()


def _sparse_allreduce(tensor: tf.IndexedSlices, name: Optional[str], op: int, prescale_factor: float,
                      postscale_factor: float, process_set: ProcessSet) -> tf.IndexedSlices:
    """Two allgathers, of the values and of the indices, as Horovod does."""
    if op not in (Average, Sum):
        raise NotImplementedError(f"allreduce of tf.IndexedSlices supports op=Average and op=Sum "
                                  f"(got {op_name(op)})")
    values = mpi_ops.allgather(tensor.values, name=None if name is None else f"{name}.values",
                               process_set=process_set)
    indices = mpi_ops.allgather(tensor.indices, name=None if name is None else f"{name}.indices",
                                process_set=process_set)
    scale = prescale_factor * postscale_factor
    if op == Average:
        scale /= _common_ops.set_size(process_set)
    if scale != 1.0:
        values = values * tf.cast(scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)


def allreduce(tensor, average: Optional[bool] = None, device_dense: str = "", device_sparse: str = "",
              compression=Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set, ignore_name_scope: bool = False):
    """The reduction of the ranks' tensors (op: Average by default, Sum,
    Min, Max, Product), each multiplied by prescale_factor before and the
    result by postscale_factor after. A tf.IndexedSlices is allgathered
    (values and indices) instead."""
    op = handle_average_backwards_compatibility(op, average)
    if compression is Compression.none and not device_dense and isinstance(tensor, tf.Tensor):
        # the common call: no scope to enter, nothing to compress (3-5 us
        # less an eager call)
        return mpi_ops._allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set)
    if isinstance(tensor, tf.IndexedSlices):
        with _device(device_sparse):
            return _sparse_allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set)
    with _device(device_dense):
        compressed, ctx = compression.compress(mpi_ops._as_tensor(tensor))
        reduced = mpi_ops._allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, process_set=process_set)
        return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors: Sequence[Any], average: Optional[bool] = None, device_dense: str = "",
                      device_sparse: str = "", compression=Compression.none, op: Optional[int] = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set, name: Optional[str] = None) -> List[Any]:
    """allreduce of several tensors as one group: hvd runs none before all
    are ready on every rank. tf.IndexedSlices members are allgathered on
    their own."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    out: List[Any] = [None] * len(tensors)
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            with _device(device_sparse):
                out[i] = _sparse_allreduce(t, None if name is None else f"{name}.{i}", op, prescale_factor,
                                           postscale_factor, process_set)
    if dense:
        with _device(device_dense):
            pairs = [compression.compress(mpi_ops._as_tensor(tensors[i])) for i in dense]
            reduced = mpi_ops._grouped_allreduce([c for c, _ in pairs], name=name, op=op,
                                                 prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor, process_set=process_set)
            for i, r, (_, ctx) in zip(dense, reduced, pairs):
                out[i] = compression.decompress(r, ctx)
    return out


def _broadcast_assign(variables, root_rank: int, process_set: ProcessSet):
    return tf.group(*[v.assign(mpi_ops.broadcast(v, root_rank, process_set=process_set)) for v in variables])


def _broadcast_assign_eager(variables, root_rank: int, process_set: ProcessSet) -> None:
    for v in variables:
        v.assign(mpi_ops.broadcast(v, root_rank, process_set=process_set))


_broadcast_group_fn = None


def broadcast_variables(variables, root_rank: int, process_set: ProcessSet = global_process_set,
                        inplace: bool = False):
    """Assigns root_rank's values to the variables on every rank (call it
    after the variables are created, before training)."""
    global _broadcast_group_fn
    variables = list(variables)
    if not tf.executing_eagerly():
        return _broadcast_assign(variables, root_rank, process_set)
    if not variables:
        return None
    if _broadcast_group_fn is None:
        _broadcast_group_fn = tf.function(_broadcast_assign_eager, reduce_retracing=True)
    _broadcast_group_fn(variables, root_rank, process_set)
    return None


def broadcast_(variables, root_rank: int, name=None, process_set: ProcessSet = global_process_set):
    """Assigns root_rank's value to each variable (a tf.Variable or a list
    of them), in place; returns what the assignments return (in a graph:
    ops to run)."""
    single = isinstance(variables, tf.Variable)
    items = [variables] if single else list(variables)
    out = []
    for i, v in enumerate(items):
        vname = None if name is None else (name if single else f"{name}.{i}")
        out.append(v.assign(mpi_ops.broadcast(v, root_rank, name=vname, process_set=process_set)))
    return out[0] if single else out


def broadcast_object_fn(root_rank: int = 0, session=None, name: Optional[str] = None,
                        process_set: ProcessSet = global_process_set):
    """A function obj -> root_rank's obj for TF1 graphs run by a session (the
    default session, else session): the broadcast ops are built once, here,
    and the function feeds them. Executing eagerly it is broadcast_object."""
    if tf.executing_eagerly():
        return lambda obj: _hvd.broadcast_object(obj, root_rank, name=name, process_set=process_set)
    import pickle

    import numpy as np
    name = name or "broadcast_object_fn"
    size_in = tf.compat.v1.placeholder(tf.int64, [1], name="bcast_object_size")
    size_out = mpi_ops.broadcast(size_in, root_rank, name=f"{name}.sz", process_set=process_set)
    data_in = tf.compat.v1.placeholder(tf.uint8, [None], name="bcast_object_data")
    data_out = mpi_ops.broadcast(data_in, root_rank, name=f"{name}.t", process_set=process_set)
    is_root = rank() == root_rank  # root_rank is a rank of the job, as for broadcast

    def bcast(obj):
        sess = session or tf.compat.v1.get_default_session()
        if sess is None:
            raise ValueError("broadcast_object_fn: no session: pass session= or call it inside `with sess:`")
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if is_root else None
        n = sess.run(size_out, feed_dict={size_in: [0 if data is None else data.size]})
        got = sess.run(data_out, feed_dict={data_in: data if is_root else np.zeros(int(n[0]), np.uint8)})
        return obj if is_root else pickle.loads(got.tobytes())

    return bcast


def broadcast_object(obj: Any, root_rank: int = 0, session=None, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """root_rank's obj (pickled) on every rank. It goes through hvd's numpy
    frontend, outside any graph, so it needs no session (Horovod's session=
    is accepted and not used)."""
    return _hvd.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj: Any, session=None, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> List[Any]:
    """Every rank's obj (pickled), in rank order; session= as for
    broadcast_object."""
    return _hvd.allgather_object(obj, name=name, process_set=process_set)
