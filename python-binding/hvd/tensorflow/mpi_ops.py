"""The collectives of hvd.tensorflow over hvd's op library (hvd_tf_ops.so,
built from python-binding/tf/), and the gradients of the differentiable ones.

The ops are asynchronous CPU kernels: independent collectives run at once
(inside tf.function, or a graph), so hvd fuses them. Tensor names: a
``name=`` given by the caller; else, in a graph, the node's name (unique in
its graph, alike on every rank); else, executing eagerly and synchronously
(TensorFlow's default), ``tf.noname.sync``, the same name every call, so a
loop of them runs from hvd's readiness board (hvd.common.ops's
unnamed_blocking); else (asynchronous eager execution, where calls overlap)
a number counted by the op library in the order of the calls.
"""

import ctypes
import os
import re
from typing import Any, List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python import pywrap_tfe as _pywrap_tfe
from tensorflow.python.eager import context as _eager_context

from hvd.common import basics as _basics
from hvd.common import ops as _common_ops
from hvd.common.basics import Average, Sum
from hvd.common import process_sets as _process_sets
from hvd.common.process_sets import ProcessSet, global_process_set

_LIB_NAME = "hvd_tf_ops.so"


_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)
if not os.path.exists(_LIB_PATH):
    raise ImportError(f"hvd.tensorflow: its op library {_LIB_PATH} is missing: hvd was configured without "
                      f"TensorFlow, or installed with pip, which does not build it (configure "
                      f"--with-tensorflow=PYTHON and make install, see docs/TENSORFLOW.md)")
_lib = tf.load_op_library(_LIB_PATH)

# Eager executions are numbered per process set by the op library; like the
# other frontends' counters, they start afresh at init and whenever a set's
# id is given anew, identically on every member.
_names = ctypes.CDLL(_LIB_PATH)
_names.hvd_tf_names_reset.argtypes = [ctypes.c_int]
_names.hvd_tf_names_reset.restype = None
_basics._init_hooks.append(lambda: _names.hvd_tf_names_reset(-1))
_process_sets._id_listeners.append(_names.hvd_tf_names_reset)
_names.hvd_tf_output_counts.argtypes = [ctypes.POINTER(ctypes.c_uint64)] * 2
_names.hvd_tf_output_counts.restype = None


def _output_counts() -> Tuple[int, int]:
    """How many outputs of allreduce and broadcast in this process took
    their input's buffer (reduced in place: TensorFlow hands it over when
    nothing else holds the input, as for a gradient made in the same graph),
    and how many were buffers kept for reuse."""
    forwarded, kept = ctypes.c_uint64(), ctypes.c_uint64()
    _names.hvd_tf_output_counts(ctypes.byref(forwarded), ctypes.byref(kept))
    return forwarded.value, kept.value

# libhvd's reduce codes, which the ops take (hvd.common.basics translates)
_CORE_SUM = _basics.core_reduce_op(Sum)
_CORE_AVERAGE = _basics.core_reduce_op(Average)


def _normalize_name(name: str) -> str:
    """A tensor's name as a node name may hold it."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _node_name(prefix: str, tensor: Any) -> Optional[str]:
    """The node's name in a graph (from the tensor's, as Horovod does); None
    when executing eagerly, where names are numbered by the op library."""
    if tf.executing_eagerly():
        return None
    return f"{prefix}_{_normalize_name(tensor.name)}"


_EXECUTOR_CALLS = all(hasattr(_pywrap_tfe, f) for f in ("TFE_ContextGetExecutorForThread", "TFE_ExecutorIsAsync",
                                                        "TFE_DeleteExecutor"))


def _thread_executor_is_async(ctx) -> bool:
    """ctx.is_async(), without the executor object it makes each call,
    whose finalizer waits for the executor's pending ops: an eager op
    called right after that took 5-7 us more."""
    handle = getattr(ctx, "_context_handle", None) if _EXECUTOR_CALLS else None
    if handle is None:
        return ctx.is_async()
    executor = _pywrap_tfe.TFE_ContextGetExecutorForThread(handle)
    try:
        return _pywrap_tfe.TFE_ExecutorIsAsync(executor)
    finally:
        _pywrap_tfe.TFE_DeleteExecutor(executor)


def _sync_eager() -> bool:
    """Whether an op called now runs to its end before the call returns."""
    return tf.executing_eagerly() and not _thread_executor_is_async(_eager_context.context())


def _unnamed(kind: str, process_set: ProcessSet, call) -> Any:
    """call(name) under the name that repeats, for an unnamed eager call.
    Its slots are TensorFlow's own: a torch call in another thread of the
    same process never moves a TensorFlow call's name."""
    return _common_ops.unnamed_blocking("tf." + kind, process_set, lambda n: call("tf." + n))


def _ps_id(process_set: ProcessSet) -> int:
    return _common_ops.check_process_set(process_set)


def _as_tensor(value) -> Any:
    """value as a tf.Tensor: itself when it is one (tf.convert_to_tensor
    costs about 1 us an eager call even then)."""
    return value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(value)


def _tensor_name(name: Optional[str]) -> str:
    if name is None:
        return ""
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, not {type(name).__name__}")
    return name


# ---- the ops --------------------------------------------------------------------

def _allreduce(tensor, name: Optional[str] = None, op: int = Sum, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set):
    """An allreduce of a dense tensor: the op itself, no compression."""
    reduce_op, prescale, postscale = _basics.core_reduce_op(op), float(prescale_factor), float(postscale_factor)
    ps_id = _ps_id(process_set)
    if name is None and _sync_eager():
        return _unnamed("allreduce", process_set, lambda n: _lib.hvd_allreduce(
            tensor, reduce_op=reduce_op, prescale=prescale, postscale=postscale, process_set=ps_id, tensor_name=n))
    return _lib.hvd_allreduce(tensor, reduce_op=reduce_op, prescale=prescale, postscale=postscale, process_set=ps_id,
                              tensor_name=_tensor_name(name), name=_node_name("HvdAllreduce", tensor))


def _grouped_allreduce(tensors: Sequence[Any], name: Optional[str] = None, op: int = Sum,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> List[Any]:
    if name is None and _sync_eager():
        return _unnamed("grouped_allreduce", process_set, lambda n: _grouped_allreduce(
            tensors, n, op, prescale_factor, postscale_factor, process_set))
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    return _lib.hvd_grouped_allreduce(tensors, reduce_op=_basics.core_reduce_op(op),
                                      prescale=float(prescale_factor), postscale=float(postscale_factor),
                                      process_set=_ps_id(process_set), tensor_name=_tensor_name(name),
                                      name=_node_name("HvdGroupedAllreduce", tensors[0]))


def _with_rows(out, tensor):
    """Static shape of a result whose first dimension varies by rank."""
    if tensor.shape.rank is not None:
        out.set_shape([None] + tensor.shape.as_list()[1:])
    return out


def allgather(tensor, name: Optional[str] = None, process_set: ProcessSet = global_process_set,
              ignore_name_scope: bool = False):
    """The ranks' tensors concatenated along the first dimension, which may
    differ by rank (the other dimensions may not)."""
    if name is None and _sync_eager():
        return _unnamed("allgather", process_set, lambda n: allgather(tensor, n, process_set))
    tensor = _as_tensor(tensor)
    out = _lib.hvd_allgather(tensor, process_set=_ps_id(process_set), tensor_name=_tensor_name(name),
                             name=_node_name("HvdAllgather", tensor))
    return _with_rows(out, tensor)


def broadcast(tensor, root_rank: int, name: Optional[str] = None, process_set: ProcessSet = global_process_set,
              ignore_name_scope: bool = False):
    """root_rank's tensor on every rank."""
    if name is None and _sync_eager():
        return _unnamed("broadcast", process_set, lambda n: broadcast(tensor, root_rank, n, process_set))
    tensor = _as_tensor(tensor)
    ps_id = _ps_id(process_set)
    root = _common_ops.check_root(root_rank, process_set)  # libhvd's root: a position in the set
    return _lib.hvd_broadcast(tensor, root_rank=root, process_set=ps_id,
                              tensor_name=_tensor_name(name), name=_node_name("HvdBroadcast", tensor))


def alltoall(tensor, splits=None, name: Optional[str] = None, process_set: ProcessSet = global_process_set,
             ignore_name_scope: bool = False):
    """Sends splits[r] rows (first dimension) to rank r; splits None: equal
    parts. Returns (the rows received, concatenated in rank order; the number
    received from each rank)."""
    if name is None and _sync_eager():
        return _unnamed("alltoall", process_set, lambda n: alltoall(tensor, splits, n, process_set))
    tensor = _as_tensor(tensor)
    if splits is None:
        splits = tf.constant([], dtype=tf.int32)
    else:
        splits = tf.cast(tf.convert_to_tensor(splits), tf.int32)
    out, received = _lib.hvd_alltoall(tensor, splits, process_set=_ps_id(process_set),
                                      tensor_name=_tensor_name(name), name=_node_name("HvdAlltoall", tensor))
    return _with_rows(out, tensor), received


def reducescatter(tensor, name: Optional[str] = None, op: int = Average,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0, ignore_name_scope: bool = False):
    """Reduces the ranks' tensors, then rank r keeps its share of the first
    dimension (the first d0 % size ranks one row more)."""
    if name is None and _sync_eager():
        return _unnamed("reducescatter", process_set, lambda n: reducescatter(
            tensor, n, op, process_set, prescale_factor, postscale_factor))
    tensor = _as_tensor(tensor)
    out = _lib.hvd_reducescatter(tensor, reduce_op=_basics.core_reduce_op(op), prescale=float(prescale_factor),
                                 postscale=float(postscale_factor), process_set=_ps_id(process_set),
                                 tensor_name=_tensor_name(name), name=_node_name("HvdReducescatter", tensor))
    return _with_rows(out, tensor)


def grouped_allgather(tensors: Sequence[Any], name: Optional[str] = None,
                      process_set: ProcessSet = global_process_set) -> List[Any]:
    """allgather of several tensors as one group: none starts before all are
    ready on every rank."""
    if name is None and _sync_eager():
        return _unnamed("grouped_allgather", process_set, lambda n: grouped_allgather(tensors, n, process_set))
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("grouped_allgather needs at least one tensor")
    outs = _lib.hvd_grouped_allgather(tensors, process_set=_ps_id(process_set), tensor_name=_tensor_name(name),
                                      name=_node_name("HvdGroupedAllgather", tensors[0]))
    return [_with_rows(o, t) for o, t in zip(outs, tensors)]


def grouped_reducescatter(tensors: Sequence[Any], name: Optional[str] = None, op: int = Average,
                          process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[Any]:
    """reducescatter of several tensors as one group."""
    if name is None and _sync_eager():
        return _unnamed("grouped_reducescatter", process_set, lambda n: grouped_reducescatter(
            tensors, n, op, process_set, prescale_factor, postscale_factor))
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("grouped_reducescatter needs at least one tensor")
    outs = _lib.hvd_grouped_reducescatter(tensors, reduce_op=_basics.core_reduce_op(op),
                                          prescale=float(prescale_factor), postscale=float(postscale_factor),
                                          process_set=_ps_id(process_set), tensor_name=_tensor_name(name),
                                          name=_node_name("HvdGroupedReducescatter", tensors[0]))
    return [_with_rows(o, t) for o, t in zip(outs, tensors)]


def join() -> int:
    """This rank has no more data: it takes part in the other ranks'
    allreduces with zeros until every rank joined. Returns the last rank to
    join (a tensor)."""
    return _lib.hvd_join()


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Waits until every rank called it."""
    if _ps_id(process_set) != 0:
        raise NotImplementedError("hvd.tensorflow.barrier: only the global process set is supported")
    return _lib.hvd_barrier()


def _set_id(process_set_id, process_set: Optional[ProcessSet]) -> int:
    """The id of the process set: Horovod's process_set_id (an id or a
    ProcessSet), or hvd's process_set= (a ProcessSet). Non-members may ask."""
    ps = process_set if process_set is not None else process_set_id
    if not isinstance(ps, ProcessSet):
        return int(ps)
    if ps.process_set_id is None:
        raise ValueError(f"{ps} has not been registered: pass it to hvd.init(process_sets=...) "
                         f"or hvd.add_process_set() first")
    return ps.process_set_id


def size_op(process_set_id: int = 0, name: Optional[str] = None, process_set: Optional[ProcessSet] = None):
    """The number of ranks (in the process set), as a tensor computed when
    the graph runs."""
    return _lib.hvd_size(process_set=_set_id(process_set_id, process_set), name=name)


def rank_op(process_set_id: int = 0, name: Optional[str] = None, process_set: Optional[ProcessSet] = None):
    """This rank (its position in the process set; a rank outside the set
    gets FailedPreconditionError), as a tensor computed when the graph runs."""
    return _lib.hvd_rank(process_set=_set_id(process_set_id, process_set), name=name)


def process_set_included_op(process_set_id: int = 0, name: Optional[str] = None,
                            process_set: Optional[ProcessSet] = None):
    """1 if this rank is a member of the process set, else 0 (a tensor)."""
    return _lib.hvd_process_set_included(process_set=_set_id(process_set_id, process_set), name=name)


def _global_only(process_set: Optional[ProcessSet], what: str) -> None:
    if process_set is not None and _set_id(0, process_set) != 0:
        raise NotImplementedError(f"hvd.tensorflow.{what}: hvd knows no host of another rank, so only the "
                                  f"global process set is supported")


def local_size_op(name: Optional[str] = None, process_set: Optional[ProcessSet] = None):
    """The number of ranks on this host (a tensor)."""
    _global_only(process_set, "local_size_op")
    return _lib.hvd_local_size(name=name)


def local_rank_op(name: Optional[str] = None, process_set: Optional[ProcessSet] = None):
    """This rank's position among the ranks on this host (a tensor)."""
    _global_only(process_set, "local_rank_op")
    return _lib.hvd_local_rank(name=name)


# ---- gradients (Horovod's formulas) ---------------------------------------------

def _op_process_set(op) -> ProcessSet:
    """The registered set of an op's process_set attribute."""
    ps_id = op.get_attr("process_set")
    if ps_id == 0:
        return global_process_set
    from hvd.common import process_sets
    for ranks, registered_id in process_sets._registered.items():
        if registered_id == ps_id:
            ps = ProcessSet(list(ranks))
            ps.process_set_id = ps_id
            return ps
    raise ValueError(f"process set {ps_id} is no longer registered")


_FROM_CORE = {_basics.core_reduce_op(o): o for o in (Average, Sum, _basics.Min, _basics.Max, _basics.Product)}


@tf.RegisterGradient("HvdAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the allreduce of the gradient."""
    return _allreduce(grad, op=_FROM_CORE[op.get_attr("reduce_op")], prescale_factor=op.get_attr("prescale"),
                      postscale_factor=op.get_attr("postscale"), process_set=_op_process_set(op))


@tf.RegisterGradient("HvdGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), op=_FROM_CORE[op.get_attr("reduce_op")],
                              prescale_factor=op.get_attr("prescale"), postscale_factor=op.get_attr("postscale"),
                              process_set=_op_process_set(op))


def _my_rows_of_sum(x, grad, ps: ProcessSet):
    """This rank's rows (those x had) of grad summed over the ranks."""
    grad = _allreduce(grad, op=Sum, process_set=ps)
    with tf.device("/cpu:0"):
        rows = tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1])
        rows = tf.reshape(allgather(rows, process_set=ps), [_common_ops.set_size(ps)])
    return tf.split(grad, num_or_size_splits=rows, axis=0)[ps.rank()]


@tf.RegisterGradient("HvdAllgather")
def _allgather_grad(op, grad):
    """This rank's rows of the gradient summed over the ranks."""
    return _my_rows_of_sum(op.inputs[0], grad, _op_process_set(op))


@tf.RegisterGradient("HvdGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    ps = _op_process_set(op)
    return [_my_rows_of_sum(x, g, ps) for x, g in zip(op.inputs, grads)]


@tf.RegisterGradient("HvdBroadcast")
def _broadcast_grad(op, grad):
    """The gradient summed over the ranks on the root, zeros elsewhere."""
    ps = _op_process_set(op)
    reduced = _allreduce(grad, op=Sum, process_set=ps)
    if ps.rank() != op.get_attr("root_rank"):  # both positions in the set
        return reduced * 0
    return reduced


@tf.RegisterGradient("HvdAlltoall")
def _alltoall_grad(op, grad_output, grad_received_splits):
    """The gradient's rows sent back where they came from."""
    grad, _ = alltoall(grad_output, splits=op.outputs[1], process_set=_op_process_set(op))
    return [grad, None]


def _reducescatter_grad_scale(op, ps: ProcessSet) -> float:
    """What reducescatter's gradient multiplies the gathered one by (Sum and
    Average only)."""
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (_CORE_SUM, _CORE_AVERAGE):
        raise NotImplementedError(f"the gradient of reducescatter needs op=Sum or op=Average (got "
                                  f"{_basics.op_name(_FROM_CORE[reduce_op])})")
    scale = op.get_attr("prescale") * op.get_attr("postscale")
    if reduce_op == _CORE_AVERAGE:
        scale /= _common_ops.set_size(ps)
    return scale


def _scaled(grad, scale: float):
    return grad * tf.cast(scale, grad.dtype) if scale != 1.0 else grad


@tf.RegisterGradient("HvdReducescatter")
def _reducescatter_grad(op, grad):
    """Every rank's share of the gradient gathered (Sum and Average only)."""
    ps = _op_process_set(op)
    scale = _reducescatter_grad_scale(op, ps)
    return _scaled(allgather(grad, process_set=ps), scale)


@tf.RegisterGradient("HvdGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    ps = _op_process_set(op)
    scale = _reducescatter_grad_scale(op, ps)
    return [_scaled(g, scale) for g in grouped_allgather(list(grads), process_set=ps)]
