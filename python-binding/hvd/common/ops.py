"""The handle registry and request helpers shared by the numpy (``hvd``) and
PyTorch (``hvd.torch``) frontends.

A frontend turns its arrays into request tuples (raw data pointer, dtype
code, shape, ...) for ``hvd._core.submit`` and gives a ``finish`` callable
that builds the operation's result once it has completed. Users get integer
handles, as in Horovod, to pass to ``poll()`` and ``synchronize()``.

Tensor names: an operation named ``x`` is submitted as ``<kind>.x``
(Horovod's convention, so an allreduce and a broadcast may share a name),
or ``<kind>.ps<id>.x`` in process set ``id`` (names are scoped by process
set, as in Horovod). Unnamed asynchronous operations get
``<kind>.noname.<n>``, where ``n`` counts unnamed operations per process
set, so ranks that are not members of a set do not fall out of step with
those that are. An unnamed blocking call (``unnamed_blocking``) is named
``noname.sync`` instead, the same name every call: a name new each call is
negotiated through the coordinator each time (hundreds of microseconds),
where a name seen before runs from the readiness board (microseconds).
Another thread's unnamed blocking call of the same kind and set, in flight
meanwhile, takes ``noname.sync.<k>`` (the lowest k free).
"""

import itertools
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Set, Tuple

from hvd import _core
from hvd.common import basics
from hvd.common import process_sets
from hvd.common.exceptions import HorovodInternalError

KIND_ALLREDUCE = _core.KIND_ALLREDUCE
KIND_BROADCAST = _core.KIND_BROADCAST
KIND_ALLGATHER = _core.KIND_ALLGATHER
KIND_ALLTOALL = _core.KIND_ALLTOALL
KIND_REDUCESCATTER = _core.KIND_REDUCESCATTER

Request = Tuple[Any, ...]


class _Pending:
    """An operation behind an integer handle: its result is finish(core),
    or result where finish is None."""
    __slots__ = ("core", "finish", "result")

    def __init__(self, core: "_core.Handle", finish: Optional[Callable[["_core.Handle"], Any]], result: Any = None):
        self.core = core
        self.finish = finish
        self.result = result


_lock = threading.Lock()
_handles: Dict[int, _Pending] = {}
_handle_ids = itertools.count(1)
_noname: Dict[int, int] = {}
_first_slot: Dict[Tuple[str, int], threading.Lock] = {}  # (kind, set): held while slot 0 is in use
_blocking: Dict[Tuple[str, int], Set[int]] = {}  # (kind, set): the other slots in use


def _reset() -> None:
    with _lock:
        _handles.clear()
        _noname.clear()


def _forget_set(process_set_id: int) -> None:
    with _lock:
        _noname.pop(process_set_id, None)


basics._init_hooks.append(_reset)
process_sets._id_listeners.append(_forget_set)


def op_name(prefix: str, name: Optional[str], process_set_id: int) -> str:
    """The tensor name submitted to libhvd for one operation."""
    if name is not None:
        if not isinstance(name, str):
            raise ValueError(f"name must be a string, not {type(name).__name__}")
        # names are scoped by process set, as in Horovod
        return f"{prefix}.ps{process_set_id}.{name}" if process_set_id else f"{prefix}.{name}"
    with _lock:
        n = _noname.get(process_set_id, 0)
        _noname[process_set_id] = n + 1
    if process_set_id:
        return f"{prefix}.noname.ps{process_set_id}.{n}"
    return f"{prefix}.noname.{n}"


def unnamed_blocking(kind: str, process_set: Any, call: Callable[[str], Any]) -> Any:
    """call(name) for a blocking collective of kind called without a name,
    under the name that repeats (see the module's docstring); returns what
    call returns. kind keys the slots: the name's prefix, and a
    framework's own prefix where two frameworks' calls may overlap."""
    key = (kind, check_process_set(process_set))
    # slot 0, the only one a thread calling alone ever takes, is a lock of
    # its own: taken without the shared lock, a set or a formatted name
    first = _first_slot.get(key)
    if first is None:
        with _lock:
            first = _first_slot.setdefault(key, threading.Lock())
    if first.acquire(False):
        try:
            return call("noname.sync")
        finally:
            first.release()
    with _lock:
        busy = _blocking.setdefault(key, set())
        slot = 1
        while slot in busy:
            slot += 1
        busy.add(slot)
    try:
        return call(f"noname.sync.{slot}")
    finally:
        with _lock:
            busy.discard(slot)


def request(name: str, input_ptr: int, output_ptr: Optional[int], dtype: int, shape: Sequence[int], *,
            reduce_op: int = _core.REDUCE_SUM, prescale: float = 1.0, postscale: float = 1.0,
            root: int = 0, splits: Optional[Sequence[int]] = None, process_set_id: int = 0,
            device: int = _core.DEVICE_CPU, stream: Optional[int] = None) -> Request:
    """One request tuple in the layout hvd._core.submit expects. stream: for
    a GPU input, the cudaStream_t (an int) it is produced on; None or 0 is
    the legacy default stream."""
    return (name, input_ptr, output_ptr, dtype, tuple(int(d) for d in shape), reduce_op, float(prescale),
            float(postscale), int(root), None if splits is None else tuple(int(s) for s in splits),
            int(process_set_id), int(device), None if not stream else int(stream))


def submit(kind: int, requests: Sequence[Request], keepalive: Any,
           finish: Callable[["_core.Handle"], Any], grouped: bool = False) -> int:
    """Submits requests; returns an integer handle. keepalive (the arrays the
    operation reads and writes) is held until the operation completes."""
    core = _core.submit(kind, list(requests), keepalive, grouped)
    handle = next(_handle_ids)
    with _lock:
        _handles[handle] = _Pending(core, finish)
    return handle


def register_result(core: "_core.Handle", result: Any) -> int:
    """An integer handle for an operation submitted already (core, e.g. by
    hvd._core.submit_prepared) whose result, once complete, is result."""
    handle = next(_handle_ids)
    with _lock:
        _handles[handle] = _Pending(core, None, result)
    return handle


def run(kind: int, requests: Sequence[Request], keepalive: Any,
        finish: Callable[["_core.Handle"], Any], grouped: bool = False) -> Any:
    """Submits requests and waits for them at once (a blocking call);
    returns finish(core handle) or raises as synchronize() would. No
    integer handle is made, and libhvd is told the caller waits: a single
    CPU tensor of the global set then runs on this thread, from the
    readiness board, without waking the background thread; a group of them
    too."""
    core = _core.submit(kind, list(requests), keepalive, grouped, True)
    core.wait()
    return finish(core)


class CallableHandle:
    """The handle of a composite operation (sparse allreduce): call it, or
    pass it to synchronize(), to wait for the result."""

    def __init__(self, finish: Callable[[], Any]):
        self._finish = finish

    def __call__(self) -> Any:
        with _lock:
            _handles.pop(self, None)
        return self._finish()


def register_callable(finish: Callable[[], Any]) -> CallableHandle:
    """A handle whose result is computed by finish()."""
    handle = CallableHandle(finish)
    with _lock:
        _handles[handle] = _Pending(None, lambda _core_handle: finish())
    return handle


def register(core: Any, finish: Callable[[Any], Any]) -> int:
    """A handle over an operation a frontend runs itself (Adasum): core has
    poll() and wait() as hvd._core.Handle; finish(core) gives the result."""
    handle = next(_handle_ids)
    with _lock:
        _handles[handle] = _Pending(core, finish)
    return handle


def poll(handle: int) -> bool:
    """True when the operation behind handle has completed."""
    with _lock:
        pending = _handles.get(handle)
    if pending is None:
        raise ValueError(f"unknown or already synchronized handle {handle!r}")
    return pending.core is None or pending.core.poll()


def synchronize(handle: int) -> Any:
    """Waits for handle and returns its result; raises the operation's error
    (HorovodInternalError for failures of the job, ValueError for bad
    arguments). An unknown handle returns None, as in Horovod."""
    with _lock:
        pending = _handles.get(handle)
    if pending is None:
        return None
    try:
        if pending.core is not None:
            pending.core.wait()
        result = pending.result if pending.finish is None else pending.finish(pending.core)
    finally:
        with _lock:
            _handles.pop(handle, None)
    return result


def in_flight() -> int:
    """Number of handles not synchronized yet."""
    with _lock:
        return len(_handles)


def check_process_set(process_set: Any) -> int:
    """The id of a registered process set this rank belongs to."""
    ps_id = getattr(process_set, "process_set_id", -1)
    if ps_id is None:
        raise ValueError(f"{process_set} has not been registered: pass it to hvd.init(process_sets=...) "
                         f"or hvd.add_process_set() first")
    if not isinstance(ps_id, int) or ps_id < 0:
        raise ValueError(f"process_set must be a hvd.ProcessSet, not {process_set!r}")
    if ps_id and not process_set.included():
        raise ValueError(f"this process (rank {_core.rank()}) is not part of {process_set}")
    return ps_id


def set_size(process_set: Any) -> int:
    return _core.size() if process_set.process_set_id == 0 else process_set.size()


def check_root(root_rank: Any, process_set: Any) -> int:
    """The root as libhvd takes it: Horovod's root_rank is a global rank,
    libhvd's is the rank within the operation's process set."""
    if isinstance(root_rank, bool) or not isinstance(root_rank, int):
        try:
            root_rank = int(root_rank)
        except (TypeError, ValueError):
            raise ValueError(f"root_rank must be an int, not {root_rank!r}") from None
    world = _core.size()
    if root_rank < 0 or root_rank >= world:
        raise ValueError(f"root_rank {root_rank} is out of range: the job has {world} ranks")
    if process_set.process_set_id:
        if root_rank not in process_set.ranks:
            raise ValueError(f"root_rank {root_rank} is not a member of {process_set}")
        return process_set.ranks.index(root_rank)
    return root_rank


__all__ = ["HorovodInternalError", "op_name", "request", "submit", "poll", "synchronize"]
