"""hvd: Horovod-style data-parallel training over libhvd.

This top-level module works on numpy arrays (and anything ``numpy.asarray``
accepts); ``hvd.torch`` is the PyTorch binding with the API of
``horovod.torch``:

    import numpy as np
    import hvd

    hvd.init()
    total = hvd.allreduce(np.ones(4, dtype=np.float32), op=hvd.Sum)
    rows = hvd.allgather(np.full((hvd.rank() + 1, 2), hvd.rank()))

Collectives come in the same forms as in hvd.torch: blocking, ``*_async``
(returning a handle for ``poll()``/``synchronize()``) and in-place (``_``).
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple

from hvd import _core
from hvd.common import ops as _ops
from hvd.common.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, core_reduce_op, cross_rank,
                               cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled,
                               handle_average_backwards_compatibility, init, is_homogeneous, is_initialized,
                               local_rank, local_size, rank_source, mpi_built, mpi_enabled, mpi_threads_supported,
                               nccl_built, rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from hvd.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is optional for the basics
    _np = None

__version__ = _core.version()

poll = _ops.poll
synchronize = _ops.synchronize

__all__ = [
    "init", "shutdown", "is_initialized", "rank_source", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "is_homogeneous", "start_timeline", "stop_timeline", "mpi_threads_supported",
    "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built",
    "cuda_built", "rocm_built", "Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set", "HorovodInternalError",
    "HostsUpdatedInterrupt", "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_", "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async", "broadcast",
    "broadcast_async", "broadcast_", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async", "join", "barrier",
    "poll", "synchronize", "broadcast_object", "allgather_object",
]


# ---- arrays -> requests ---------------------------------------------------------

def _numpy():
    if _np is None:
        raise ImportError("hvd's array collectives need numpy")
    return _np


def _dtype_code(dtype) -> int:
    np = _numpy()
    dtype = np.dtype(dtype)
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian and dtype.itemsize > 1):
        raise ValueError(f"arrays must be in native byte order (got {dtype})")
    codes = {
        np.dtype(np.bool_): _core.BOOL, np.dtype(np.uint8): _core.UINT8, np.dtype(np.int8): _core.INT8,
        np.dtype(np.int16): _core.INT16, np.dtype(np.int32): _core.INT32, np.dtype(np.int64): _core.INT64,
        np.dtype(np.float16): _core.FLOAT16, np.dtype(np.float32): _core.FLOAT32,
        np.dtype(np.float64): _core.FLOAT64,
    }
    code = codes.get(dtype.newbyteorder("="))
    if code is None and dtype.name == "bfloat16":  # ml_dtypes
        code = _core.BFLOAT16
    if code is None:
        raise ValueError(f"arrays of dtype {dtype} are not supported (use bool, (u)int8, int16, int32, "
                         f"int64, float16, float32 or float64)")
    return code


def _as_input(array: Any):
    """A C-contiguous ndarray with the data of array, and its dtype code."""
    np = _numpy()
    a = np.ascontiguousarray(array)
    if a.ndim > _core.MAX_NDIM:
        raise ValueError(f"arrays of more than {_core.MAX_NDIM} dimensions are not supported (got {a.ndim})")
    return a, _dtype_code(a.dtype)


def _as_inplace(array: Any):
    np = _numpy()
    if not isinstance(array, np.ndarray):
        raise ValueError(f"in-place operations need a numpy.ndarray, not {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise ValueError("Tensor is required to be contiguous.")
    if not array.flags.writeable:
        raise ValueError("in-place operations need a writeable array")
    return _as_input(array)


def _ptr(a) -> int:
    return a.__array_interface__["data"][0]


def _from_buffer(buf: Any, shape: Sequence[int], dtype):
    np = _numpy()
    if len(buf) == 0:
        return np.empty(tuple(shape), dtype=dtype)
    return np.frombuffer(buf, dtype=dtype).reshape(tuple(shape))


def _names(prefix: str, name: Optional[str], ps_id: int, n: int, grouped: bool) -> List[str]:
    base = _ops.op_name(prefix, name, ps_id)
    return [f"{base}.{i}of{n}" for i in range(n)] if grouped else [base]


def _nonempty(arrays: Sequence[Any], what: str) -> List[Any]:
    arrays = list(arrays)
    if not arrays:
        raise ValueError(f"{what} needs at least one array")
    return arrays


# ---- allreduce ------------------------------------------------------------------

def _allreduce(arrays: List[Any], outputs: Optional[List[Any]], name, op, prescale_factor, postscale_factor,
               process_set, grouped: bool) -> int:
    core_op = core_reduce_op(op)
    ps_id = _ops.check_process_set(process_set)
    names = _names("grouped_allreduce" if grouped else "allreduce", name, ps_id, len(arrays), grouped)
    inputs, outs, reqs = [], [], []
    np = _numpy()
    for i, (array, n) in enumerate(zip(arrays, names)):
        if outputs is None:
            a, code = _as_input(array)
            out = np.empty_like(a)
        else:
            a, code = _as_inplace(array)
            out = a
        inputs.append(a)
        outs.append(out)
        reqs.append(_ops.request(n, _ptr(a), _ptr(out), code, a.shape, reduce_op=core_op,
                                 prescale=prescale_factor, postscale=postscale_factor, process_set_id=ps_id))
    result = outs if grouped else outs[0]
    return _ops.submit(_ops.KIND_ALLREDUCE, reqs, (inputs, outs), lambda h: result, grouped=grouped)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """Starts reducing an array over all processes; the result is a new array."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce([tensor], None, name, op, prescale_factor, postscale_factor, process_set, False)


def _wait(kind: str, name: Optional[str], process_set, start: Callable[[Optional[str]], int]) -> Any:
    """synchronize(start(name)), a blocking call; unnamed, under the name
    that repeats (hvd.common.ops.unnamed_blocking): a name new each call
    would be negotiated each time."""
    if name is None:
        return _ops.unnamed_blocking(kind, process_set, lambda n: synchronize(start(n)))
    return synchronize(start(name))


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Reduces an array over all processes (op defaults to Average)."""
    return _wait("allreduce", name, process_set,
                 lambda n: allreduce_async(tensor, average, n, op, prescale_factor, postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set) -> int:
    """Starts reducing a (contiguous, writeable) ndarray in place."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce([tensor], [tensor], name, op, prescale_factor, postscale_factor, process_set, False)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces an ndarray in place and returns it."""
    return _wait("allreduce", name, process_set,
                 lambda n: allreduce_async_(tensor, average, n, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set) -> int:
    """Starts reducing a list of arrays as one group."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce(_nonempty(tensors, "grouped_allreduce"), None, name, op, prescale_factor,
                      postscale_factor, process_set, True)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set) -> List[Any]:
    """Reduces a list of arrays as one group; returns new arrays."""
    return _wait("grouped_allreduce", name, process_set, lambda n: grouped_allreduce_async(
        tensors, average, n, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set) -> int:
    """Starts reducing a list of ndarrays in place, as one group."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = _nonempty(tensors, "grouped_allreduce")
    return _allreduce(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set, True)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set) -> List[Any]:
    """Reduces a list of ndarrays in place, as one group."""
    return _wait("grouped_allreduce", name, process_set, lambda n: grouped_allreduce_async_(
        tensors, average, n, op, prescale_factor, postscale_factor, process_set))


# ---- allgather, reducescatter (outputs allocated by hvd) -------------------------------

def _gather_like(kind: int, prefix: str, arrays: List[Any], name, process_set, grouped: bool,
                 reduce_op: int = _core.REDUCE_SUM, prescale: float = 1.0, postscale: float = 1.0) -> int:
    ps_id = _ops.check_process_set(process_set)
    names = _names(prefix, name, ps_id, len(arrays), grouped)
    inputs, reqs = [], []
    for array, n in zip(arrays, names):
        a, code = _as_input(array)
        if a.ndim == 0:
            raise ValueError(f"{prefix} needs an array with at least one dimension (got a scalar)")
        inputs.append(a)
        reqs.append(_ops.request(n, _ptr(a), None, code, a.shape, reduce_op=reduce_op, prescale=prescale,
                                 postscale=postscale, process_set_id=ps_id))
    dtypes = [a.dtype for a in inputs]

    def finish(h):
        outs = []
        for i, dtype in enumerate(dtypes):
            buf, shape = h.output(i)
            outs.append(_from_buffer(buf, shape, dtype))
        return outs if grouped else outs[0]

    return _ops.submit(kind, reqs, inputs, finish, grouped=grouped)


def allgather_async(tensor, name=None, process_set=global_process_set) -> int:
    """Starts concatenating an array from all processes along the first axis."""
    return _gather_like(_ops.KIND_ALLGATHER, "allgather", [tensor], name, process_set, False)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates an array from all processes along the first axis (whose
    length may differ per process)."""
    return _wait("allgather", name, process_set, lambda n: allgather_async(tensor, n, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set) -> int:
    return _gather_like(_ops.KIND_ALLGATHER, "grouped_allgather", _nonempty(tensors, "grouped_allgather"),
                        name, process_set, True)


def grouped_allgather(tensors, name=None, process_set=global_process_set) -> List[Any]:
    """Allgathers a list of arrays as one group."""
    return _wait("grouped_allgather", name, process_set, lambda n: grouped_allgather_async(tensors, n, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0) -> int:
    """Starts a reducescatter: reduce, then process r keeps part r of the
    first axis (the first d0 % size processes get one extra row)."""
    return _gather_like(_ops.KIND_REDUCESCATTER, "reducescatter", [tensor], name, process_set, False,
                        core_reduce_op(op), prescale_factor, postscale_factor)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces an array over all processes and returns this process's part."""
    return _wait("reducescatter", name, process_set,
                 lambda n: reducescatter_async(tensor, n, op, process_set, prescale_factor, postscale_factor))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0) -> int:
    return _gather_like(_ops.KIND_REDUCESCATTER, "grouped_reducescatter",
                        _nonempty(tensors, "grouped_reducescatter"), name, process_set, True,
                        core_reduce_op(op), prescale_factor, postscale_factor)


def grouped_reducescatter(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0) -> List[Any]:
    """Reducescatters a list of arrays as one group."""
    return _wait("grouped_reducescatter", name, process_set,
                 lambda n: grouped_reducescatter_async(tensors, n, op, process_set, prescale_factor, postscale_factor))


# ---- broadcast ------------------------------------------------------------------

def _broadcast(tensor, inplace: bool, root_rank, name, process_set) -> int:
    np = _numpy()
    a, code = _as_inplace(tensor) if inplace else _as_input(tensor)
    out = a if inplace else np.empty_like(a)
    ps_id = _ops.check_process_set(process_set)
    root = _ops.check_root(root_rank, process_set)
    req = _ops.request(_ops.op_name("broadcast", name, ps_id), _ptr(a), _ptr(out), code, a.shape, root=root,
                       process_set_id=ps_id)
    return _ops.submit(_ops.KIND_BROADCAST, [req], (a, out), lambda h: out)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """Starts broadcasting root_rank's array; the result is a new array."""
    return _broadcast(tensor, False, root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's array on every process."""
    return _wait("broadcast", name, process_set, lambda n: broadcast_async(tensor, root_rank, n, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """Starts broadcasting root_rank's array into tensor (an ndarray)."""
    return _broadcast(tensor, True, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts root_rank's array into tensor in place; returns it."""
    return _wait("broadcast", name, process_set, lambda n: broadcast_async_(tensor, root_rank, n, process_set))


# ---- alltoall -------------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set) -> int:
    """Starts an alltoall; the result is (gathered array, rows received from
    each process)."""
    np = _numpy()
    a, code = _as_input(tensor)
    if a.ndim == 0:
        raise ValueError("alltoall needs an array with at least one dimension (got a scalar)")
    ps_id = _ops.check_process_set(process_set)
    n = _ops.set_size(process_set)
    values = None
    if splits is None:
        if a.shape[0] % n:
            raise ValueError(f"alltoall without splits needs the first dimension ({a.shape[0]}) to be "
                             f"divisible by the number of processes ({n})")
    else:
        s = np.asarray(splits)
        if s.dtype.kind not in "iu":
            raise ValueError(f"splits must hold integers, not {s.dtype}")
        values = [int(v) for v in s.reshape(-1)]
        if len(values) != n:
            raise ValueError(f"splits has {len(values)} entries, but there are {n} processes")
        if any(v < 0 for v in values):
            raise ValueError(f"splits must not be negative: {values}")
        if sum(values) != a.shape[0]:
            raise ValueError(f"splits sum to {sum(values)}, but the first dimension of the array is "
                             f"{a.shape[0]}")
    req = _ops.request(_ops.op_name("alltoall", name, ps_id), _ptr(a), None, code, a.shape, splits=values,
                       process_set_id=ps_id)
    dtype = a.dtype

    def finish(h):
        buf, shape = h.output(0)
        return _from_buffer(buf, shape, dtype), np.asarray(h.recv_splits(), dtype=np.int32)

    return _ops.submit(_ops.KIND_ALLTOALL, [req], a, finish)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[r] rows (first axis) to process r and gathers what every
    process sends here. Returns the gathered array, plus the received splits
    when splits were given."""
    out, received = _wait("alltoall", name, process_set, lambda n: alltoall_async(tensor, splits, n, process_set))
    return out if splits is None else (out, received)


# ---- join, barrier, objects -----------------------------------------------------

def join(device: int = -1) -> int:
    """This process has no more data: it serves the others' allreduces
    (contributing zeros) until every process has joined. Returns the rank
    that joined last."""
    return _core.join()


def barrier(process_set=global_process_set) -> None:
    """Blocks until every process (of process_set) reaches the barrier."""
    ps_id = _ops.check_process_set(process_set)
    if ps_id == 0:
        _core.barrier()
        return
    token = _numpy().zeros(1, dtype="int32")
    allreduce_(token, op=Sum, process_set=process_set)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set=global_process_set) -> Any:
    """Pickles obj on root_rank and returns a copy on every process."""
    import pickle
    np = _numpy()
    name = type(obj).__name__ if name is None else name
    if rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()
        length = np.array([payload.size], dtype=np.int64)
    else:
        length = np.zeros(1, dtype=np.int64)
    broadcast_(length, root_rank, name=name + ".sz", process_set=process_set)
    if rank() != root_rank:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    broadcast_(payload, root_rank, name=name + ".t", process_set=process_set)
    return obj if rank() == root_rank else pickle.loads(payload.tobytes())


def allgather_object(obj: Any, name: Optional[str] = None, process_set=global_process_set) -> List[Any]:
    """Pickles obj on every process; returns all of them in rank order."""
    import pickle
    np = _numpy()
    name = type(obj).__name__ if name is None else name
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=name + ".sz", process_set=process_set)
    data = allgather(payload, name=name + ".t", process_set=process_set)
    out, start = [], 0
    for n in lengths.tolist():
        out.append(pickle.loads(data[start:start + n].tobytes()))
        start += n
    return out
