"""Process sets: subsets of the job's ranks whose collectives run among
themselves, with the interface of ``horovod.common.process_sets``.

Every rank of the job creates the same process sets in the same order
(``hvd.init(process_sets=[...])`` or ``hvd.add_process_set(...)``); a
collective given ``process_set=ps`` is run only by the members of ``ps``.
Ranks passed to collectives (``root_rank``) stay global ranks.
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

from hvd import _core

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]


class ProcessSet:
    """A set of hvd processes that run collective operations together.

    Build it from a list of global ranks, then pass it to ``hvd.init(
    process_sets=[...])`` or ``hvd.add_process_set()``. Once registered,
    ``process_set_id`` is set.
    """

    process_set_id: Optional[int] = None
    ranks: Optional[List[int]] = None
    mpi_comm = None

    def __init__(self, ranks_or_comm: Sequence[int]):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            ranks = None
        if ranks is None or any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks "
                             "(hvd has no MPI, so mpi4py communicators are not supported)")
        self.ranks = ranks

    def _invalidate(self) -> None:
        self.process_set_id = None

    def size(self) -> Optional[int]:
        """Number of processes in the set, or None if it is not registered."""
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            return _core.size()
        if self.ranks is not None:
            return len(self.ranks)
        return _core.process_set_size(self.process_set_id)

    def rank(self) -> Optional[int]:
        """This process's rank within the set, or None if it is not registered.

        Collectives still take global ranks (``root_rank``); this is for
        interpreting results such as the order of an allgather.
        """
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            return _core.rank()
        if self.ranks is not None:
            me = _core.rank()
            if me not in self.ranks:
                raise ValueError("Process is not part of provided process set.")
            return self.ranks.index(me)
        return _core.process_set_rank(self.process_set_id)

    def included(self) -> Optional[bool]:
        """Whether this process belongs to the set (None before registration)."""
        if self.ranks is None:
            return None
        return _core.rank() in self.ranks

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# Registered sets by their sorted ranks: every rank keeps the same table,
# because sets are added and removed collectively in the same order.
_registered: Dict[Tuple[int, ...], int] = {}


# Called with a set id whenever that id is (re)assigned or released: state
# kept per set id (the frontends' counters for unnamed operations) must
# start afresh, identically on every member.
_id_listeners: List = []


def _id_changed(ps_id: int) -> None:
    for listener in _id_listeners:
        listener(ps_id)


def _reset() -> None:
    """Forgets registered sets (hvd.shutdown)."""
    _registered.clear()


def _init_process_sets(process_sets: Sequence[ProcessSet]) -> None:
    """Registers the sets given to hvd.init(); called right after init."""
    global_process_set.ranks = list(range(_core.size()))
    global_process_set.process_set_id = 0
    for idx, ps in enumerate(process_sets):
        if not isinstance(ps, ProcessSet):
            raise ValueError(f"process_sets entry number {idx} is not a ProcessSet: {ps!r}")
        key = tuple(ps.ranks or ())
        if key in _registered or key == tuple(global_process_set.ranks):
            ps._invalidate()
            raise ValueError(f"Horovod could not be initialized because process_sets entry number "
                             f"{idx} is a duplicate: {ps}")
        _register(ps)


def _register(ps: ProcessSet) -> None:
    _check_ranks(ps.ranks)
    ps.process_set_id = _core.add_process_set(ps.ranks)
    _registered[tuple(ps.ranks)] = ps.process_set_id
    _id_changed(ps.process_set_id)


def _check_ranks(ranks: Sequence[int]) -> None:
    world = _core.size()
    if not ranks:
        raise ValueError("a process set needs at least one rank")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"process set ranks must be distinct: {list(ranks)}")
    bad = [r for r in ranks if r < 0 or r >= world]
    if bad:
        raise ValueError(f"process set ranks {bad} are out of range (the job has {world} ranks)")


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Adds a process set after hvd.init() and returns it, registered.

    Collective: every rank of the job must call it with the same ranks, in
    the same order of calls. A set with the same ranks must not exist yet.
    """
    if not _core.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    key = tuple(process_set.ranks)
    if key in _registered or key == tuple(range(_core.size())):
        raise ValueError(f"Attempted to add a duplicate process set: {process_set}")
    _register(process_set)
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a process set (collective); returns whether it was removed.

    The global process set and unregistered sets are never removed.
    """
    if not _core.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    ps_id = process_set.process_set_id
    if ps_id is None or ps_id == 0:
        return False
    process_set._invalidate()
    for key, value in list(_registered.items()):
        if value == ps_id:
            del _registered[key]
    try:
        _core.remove_process_set(ps_id)
    except ValueError:
        return False
    finally:
        _id_changed(ps_id)
    return True
