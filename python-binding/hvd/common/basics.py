"""Life cycle, topology, capability queries and reduce operators: the part of
the Horovod API that does not depend on a framework.

Reduce operators keep Horovod's numbering (Average=0, Sum=1, Adasum=2,
Min=3, Max=4, Product=5) so scripts that store them keep working; they are
translated to libhvd's codes when an operation is submitted.
"""

import array
import atexit
import warnings
from typing import Optional, Sequence, Union

from hvd import _core
from hvd.common import process_sets as _ps

__all__ = [
    "init", "shutdown", "is_initialized", "rank_source", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "is_homogeneous", "start_timeline", "stop_timeline",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
]

Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_CORE_OPS = {
    Average: _core.REDUCE_AVERAGE,
    Sum: _core.REDUCE_SUM,
    Min: _core.REDUCE_MIN,
    Max: _core.REDUCE_MAX,
    Product: _core.REDUCE_PRODUCT,
}
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

_NOT_INIT = "Horovod has not been initialized; use hvd.init()."

_atexit_registered = False
_homogeneous = True
# Hooks run at init and shutdown (the frontends reset their handle tables).
_init_hooks = []


def core_reduce_op(op: int) -> int:
    """libhvd's code for a Horovod reduce op; clear errors for the others."""
    if op == Adasum:
        raise NotImplementedError("Adasum is implemented for torch tensors only (hvd.torch): use "
                                  "op=hvd.Average or op=hvd.Sum")
    try:
        return _CORE_OPS[op]
    except (KeyError, TypeError):
        raise ValueError(f"unknown reduce op {op!r}: use hvd.Average, hvd.Sum, hvd.Min, hvd.Max "
                         f"or hvd.Product") from None


def op_name(op: int) -> str:
    return _OP_NAMES.get(op, repr(op))


def handle_average_backwards_compatibility(op: Optional[int], average: Optional[bool]) -> int:
    """Resolves the deprecated ``average=`` argument against ``op=``."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average


def init(comm: Optional[Sequence[int]] = None,
         process_sets: Optional[Union[Sequence["_ps.ProcessSet"], str]] = None) -> None:
    """Initializes hvd: joins the job started by hvdrun (or, started alone,
    runs as a job of one rank).

    Arguments:
        comm: Horovod accepts a list of ranks or an MPI communicator; hvd has
              no MPI, and its job is always all ranks hvdrun started, so only
              None (or an empty list) is accepted.
        process_sets: None, a list of ProcessSet objects to register now
              (every rank must pass the same list), or "dynamic" (accepted for
              compatibility: hvd always allows hvd.add_process_set()).
    """
    global _atexit_registered, _homogeneous
    if comm is not None and not (isinstance(comm, (list, tuple)) and len(comm) == 0):
        if isinstance(comm, (list, tuple)):
            raise NotImplementedError("hvd.init(comm=[...]) is not supported: the job's ranks are "
                                      "the processes hvdrun started")
        raise ValueError("Horovod has not been built with MPI support: hvd.init() takes no MPI "
                         "communicator")
    if process_sets is None or (isinstance(process_sets, str) and process_sets.lower() == "dynamic"):
        process_sets = []
    elif isinstance(process_sets, str):
        raise ValueError(f"process_sets must be a list of ProcessSet or 'dynamic', not {process_sets!r}")
    was_initialized = _core.is_initialized()
    _core.init()
    if not _atexit_registered:
        atexit.register(_shutdown_at_exit)
        _atexit_registered = True
    if was_initialized:
        return
    for hook in _init_hooks:
        hook()
    _homogeneous = _compute_homogeneous()
    _ps._init_process_sets(list(process_sets))


def _compute_homogeneous() -> bool:
    """Whether every node runs the same number of ranks: one allgather of
    local_size() while the job starts (every rank takes part)."""
    n = _core.size()
    if n == 1:
        return True
    mine = array.array("i", [_core.local_size()])
    h = _core.submit(_core.KIND_ALLGATHER,
                     [("hvd.init.local_size", mine.buffer_info()[0], None, _core.INT32, (1,),
                       _core.REDUCE_SUM, 1.0, 1.0, 0, None, 0, _core.DEVICE_CPU)], mine)
    h.wait()
    buf, _ = h.output(0)
    sizes = memoryview(buf).cast("i").tolist()
    return len(set(sizes)) == 1


def _shutdown_at_exit() -> None:
    try:
        if _core.is_initialized():
            _core.shutdown()
    except Exception:  # interpreter teardown: nothing useful to report
        pass


def shutdown() -> None:
    """Leaves the job. Operations still pending fail with HorovodInternalError."""
    _core.shutdown()
    for hook in _init_hooks:
        hook()
    _ps._reset()


def is_initialized() -> bool:
    """True between init() and shutdown()."""
    return _core.is_initialized()


def rank_source() -> str:
    """Who placed this rank at init(): "hvdrun", "Horovod", "Open MPI", "MPICH",
    "torchrun", "Slurm", or "none" (a job of one rank)."""
    return _core.rank_source()


def size() -> int:
    """Number of hvd processes in the job."""
    return _core.size()


def rank() -> int:
    """This process's rank, 0 .. size() - 1."""
    return _core.rank()


def local_size() -> int:
    """Number of hvd processes on this node."""
    return _core.local_size()


def local_rank() -> int:
    """This process's rank among the processes on this node."""
    return _core.local_rank()


def cross_size() -> int:
    """Number of nodes that have a process with this process's local rank."""
    return _core.cross_size()


def cross_rank() -> int:
    """Rank of this node among the nodes (for this local rank)."""
    return _core.cross_rank()


def is_homogeneous() -> bool:
    """True when every node runs the same number of processes."""
    if not _core.is_initialized():
        raise ValueError(_NOT_INIT)
    return _homogeneous


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Records a timeline of the job into file_path (Chrome trace-event JSON:
    open it in https://ui.perfetto.dev or chrome://tracing), as Horovod does.
    Call it on every rank; rank 0 writes the file (relative to its working
    directory). mark_cycles adds a marker per negotiation cycle. A timeline
    already on is closed first. Raises OSError when the file cannot be
    created. See docs/TIMELINE.md."""
    if not _core.is_initialized():
        raise ValueError(_NOT_INIT)
    if not isinstance(file_path, str) or not file_path:
        raise ValueError("start_timeline: file_path must be a non-empty string")
    _core.start_timeline(file_path, bool(mark_cycles))


def stop_timeline() -> None:
    """Ends the timeline: when it returns, rank 0's file is complete JSON."""
    if not _core.is_initialized():
        raise ValueError(_NOT_INIT)
    _core.stop_timeline()


def mpi_threads_supported() -> bool:
    raise ValueError("Horovod MPI is not enabled; hvd does not use MPI.")


def mpi_enabled() -> bool:
    return False


def mpi_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def gloo_built() -> bool:
    return False


def nccl_built() -> int:
    """The version of the NCCL this build's GPU backend was compiled against,
    as NCCL_VERSION_CODE (e.g. 22809 for 2.28.9); 0 without the NCCL backend.
    An int, as Horovod's, so that ``hvd.nccl_built() >= 2700`` works."""
    return int(_core.NCCL_VERSION_CODE)


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    return bool(_core.NCCL_BUILT)


def rocm_built() -> bool:
    return False
