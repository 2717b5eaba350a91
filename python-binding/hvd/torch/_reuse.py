"""Out-of-place results that their caller has dropped, handed out again.

Making a tensor, even a view, costs more than a small allreduce's own
Python work: about 10 us a call in a loop on two busy cores, where an
allreduce of 1 KiB in place takes some 30. So the out-of-place forms keep
the CPU tensors they returned (up to 16 MiB each, two per dtype and
shape, 64 MiB and 64 shapes in all) and return one again, overwritten by the new result, once
nothing else can see it:

- no Python reference but this module's, and no weak reference;
- no other owner of its TensorImpl (a view's base, a tensor autograd saved);
- no other owner of its storage (views, ``.data``, ``.detach()``, numpy
  arrays, storage objects);
- the state of a new tensor: the right dtype, shape and layout, no
  ``requires_grad``, ``.grad``, hooks, names or attributes.

A kept tensor that fails only the first three stays for a later call; one
whose state changed is forgotten. The C++ use counts are read from c10's
objects by hvd._core.c10_use_counts, once probes at import have found where
a TensorImpl keeps its storage and shown that it counts views, aliases and
storages as expected. Where they do not, torch 2.x's ``Tensor._use_count``
and ``torch._C._storage_Use_Count`` are asked (some 0.2 us more a check;
they make the tensor's storage object). Where neither works nothing is
reused. Reading the counts never makes a storage object, so one that its
caller made (``untyped_storage()``), which torch 2.x keeps as long as the
tensor, counts as another owner for good: that tensor is not reused.
Thread-safe: a tensor that one thread is looking at has one more
reference, which every other thread's check sees. A blocking allreduce
keeps its shape's list beside its parsed request (hvd._core.bind_kept) and
searches it in C with the run itself; a list dropped here is emptied, so
such a binding hands out nothing that is no longer kept.
"""

import sys
import threading
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import torch

from hvd import _core
from hvd.common import basics as _basics

PER_SHAPE = 2
MAX_BYTES = 64 << 20
MAX_SHAPES = 64

_lock = threading.Lock()
_kept: Dict[Tuple[torch.dtype, torch.Size], List[torch.Tensor]] = {}
_bytes = 0
_getrefcount = sys.getrefcount
_weakrefs = weakref.getweakrefcount
_has_names = getattr(torch.Tensor, "has_names", None)  # named tensors: gone from recent torch


def _official_counts() -> Optional[Callable[[torch.Tensor], Tuple[int, int]]]:
    storage_count = getattr(torch._C, "_storage_Use_Count", None)
    if storage_count is None or not hasattr(torch.Tensor, "_use_count"):
        return None

    # A storage has one Python object at most, which counts once however
    # many references it has: the Python references count as another owner.
    def raw(t: torch.Tensor) -> Tuple[int, int, int]:
        s = t.untyped_storage()
        return t._use_count(), storage_count(s._cdata), _getrefcount(s)

    _, one_owner, free_refs = raw(torch.empty(1))

    def counts(t: torch.Tensor) -> Tuple[int, int]:
        s = t.untyped_storage()
        return t._use_count(), storage_count(s._cdata) - one_owner + 1 + (_getrefcount(s) != free_refs)

    def sole(t: torch.Tensor) -> bool:  # counts(t) == (1, 1), in fewer steps
        if t._use_count() != 1:
            return False
        s = t.untyped_storage()
        return storage_count(s._cdata) == one_owner and _getrefcount(s) == free_refs

    counts.sole = sole
    return counts


def _c10_counts(t: torch.Tensor) -> Tuple[int, int]:
    return _core.c10_use_counts(t._cdata)


def _storage_of(t: torch.Tensor):
    """t's storage object (untyped_storage in torch 2.x, storage in 1.x)."""
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def _autograd_probes() -> List[torch.Tensor]:
    """Tensors with autograd state of each kind a result's user can give
    it: c10 makes their AutogradMeta, and keeps it when it is undone."""
    grad = torch.empty(8)
    grad.grad = torch.zeros(8)
    undone = torch.empty(8).requires_grad_()
    undone.requires_grad_(False)
    hooked = torch.empty(8).requires_grad_()
    hooked.register_hook(lambda g: g)
    return [torch.empty(8).requires_grad_(), grad, undone, hooked]


def _c10_layout_found() -> bool:
    """Whether hvd._core.c10_layout finds where a TensorImpl keeps its
    storage (probed on a tensor of its own: its storage object lives on)
    and its autograd state."""
    if not hasattr(_core, "c10_layout"):
        return False
    t = torch.empty(8)
    probes = _autograd_probes()
    try:
        _core.c10_layout(t._cdata, _storage_of(t)._cdata, [p._cdata for p in probes])
    except (AttributeError, TypeError, ValueError):
        return False
    return True


def _counts_work(counts: Callable[[torch.Tensor], Tuple[int, int]]) -> bool:
    """Whether counts(t) gives (1, 1) for a tensor nobody else owns and sees
    each kind of owner that would make reusing it wrong. A storage object is
    looked at last, on a tensor of its own: torch 2.x keeps it as long as
    the tensor, so the counts read from c10 see it for good."""
    t = torch.empty(8)
    if counts(t) != (1, 1):
        return False
    for make, want in ((lambda: t.view(-1), (2, 2)), (lambda: t[2:], (2, 2)), (lambda: t.data, None),
                       (lambda: t.detach(), None), (lambda: t.numpy(), None)):
        other = make()
        got = counts(t)
        if got == (1, 1) or (want is not None and got != want):
            return False
        del other
        if counts(t) != (1, 1):
            return False
    u = torch.empty(8)
    if counts(u) != (1, 1):
        return False
    storage = _storage_of(u)
    return counts(u) != (1, 1) and storage is not None


def _pick_counts() -> Optional[Callable[[torch.Tensor], Tuple[int, int]]]:
    if _c10_layout_found() and _counts_work(_c10_counts):
        return _c10_counts
    official = _official_counts()
    if official is not None:
        return official if _counts_work(official) else None
    return None


_counts = _pick_counts()
_sole = getattr(_counts, "sole", None) or (lambda t: _counts(t) == (1, 1))


def _refs_when_free() -> int:
    """sys.getrefcount of a kept tensor nobody else holds, as take() sees
    it in its loop (interpreters differ in what the call itself adds)."""
    probe = [torch.empty(1)]
    return _refs_in_loop(probe)


def _refs_in_loop(kept: List[torch.Tensor]) -> int:
    for c in kept:
        return _getrefcount(c)
    return 0


_FREE_REFS = _refs_when_free()


def _setup_pick() -> Optional[Callable[..., object]]:
    """hvd._core.reuse_pick, the loop of take_of in C (a few hundred
    nanoseconds less a call), once it has given take_of's answers on
    probes: a free tensor, one seen by each kind of owner, one whose state
    changed; None where it cannot be used (take_of's own loop runs)."""
    if _counts is None or not hasattr(_core, "reuse_pick"):
        return None
    if _counts is _c10_counts:
        mode, storage_count = 1, None
    else:
        mode, storage_count = 2, torch._C._storage_Use_Count
    try:
        _core.reuse_setup(torch.Tensor, mode, storage_count, torch.empty(1))
        return _core.reuse_pick if _pick_works(_core.reuse_pick) else None
    except Exception:  # a torch whose getters differ: take_of's loop
        return None


def _pick_works(pick: Callable[..., object]) -> bool:
    kept = {}
    probe = torch.empty(8)
    key = (probe.dtype, probe.shape)
    kept[key] = [torch.empty(8)]
    t = kept[key][0]
    if pick(kept, *key) is not None:  # held here
        return False
    for make in (lambda: t.view(-1), lambda: t[2:], lambda: t.data, lambda: t.detach(), lambda: t.numpy(),
                 lambda: weakref.ref(t)):
        other = make()
        del t
        if pick(kept, *key) is not None:
            return False
        t = kept[key][0]
        del other
    del t
    got = pick(kept, *key)
    if got is not kept[key][0]:
        return False
    got.requires_grad_()
    del got
    changed = pick(kept, *key)
    if type(changed) is not tuple or changed[0] is not kept[key][0]:
        return False
    kept[key] = [torch.empty(8)]  # a storage object: looked at last (see _counts_work)
    storage = _storage_of(kept[key][0])
    return pick(kept, *key) is None and storage is not None


_pick = _setup_pick()


def enabled() -> bool:
    """Whether outputs are reused in this process (the torch in use has use
    counts hvd can read)."""
    return _counts is not None


def take(tensor: torch.Tensor) -> Optional[torch.Tensor]:
    """A kept tensor of tensor's dtype and shape that nobody else can see
    any more, or None. Its contents are whatever it held. No lock: a
    tensor this thread is looking at has one more reference, so no other
    thread's check passes for it at the same time."""
    return take_of(tensor.dtype, tensor.shape)


def take_of(dtype: torch.dtype, shape: torch.Size) -> Optional[torch.Tensor]:
    """take() for a tensor of this dtype and shape."""
    if _pick is not None:
        c = _pick(_kept, dtype, shape)
        if type(c) is not tuple:
            return c
        with _lock:
            kept = _kept.get((dtype, shape))
            if kept is not None:
                _forget((dtype, shape), kept, c[0])
        return None
    if _counts is None:
        return None
    kept = _kept.get((dtype, shape))
    if not kept:
        return None
    for c in kept:
        if _getrefcount(c) != _FREE_REFS or _weakrefs(c) or not _sole(c):
            continue
        if (c.dtype is dtype and not c.requires_grad and c.grad is None and c._backward_hooks is None
                and not c.__dict__ and c.shape == shape and c.is_contiguous()
                and not (_has_names and _has_names(c))):
            return c
        with _lock:
            _forget((dtype, shape), kept, c)
        return None
    return None


def keep(out: torch.Tensor) -> None:
    """Keeps out, a new CPU result just made for a caller, for later calls:
    the oldest kept tensor of its shape is let go when there are more than
    PER_SHAPE, and the least recently kept shapes when the bounds are
    passed."""
    global _bytes
    if _counts is None:
        return
    nbytes = out.numel() * out.element_size()
    if nbytes > MAX_BYTES // 4:
        return
    key = (out.dtype, out.shape)
    with _lock:
        kept = _kept.pop(key, None)  # back in as the newest shape
        if kept is None:
            kept = []
        kept.append(out)
        _bytes += nbytes
        if len(kept) > PER_SHAPE:
            _bytes -= nbytes
            del kept[0]
        _kept[key] = kept
        while (_bytes > MAX_BYTES or len(_kept) > MAX_SHAPES) and len(_kept) > 1:
            gone = _kept.pop(next(iter(_kept)))
            _bytes -= sum(c.numel() * c.element_size() for c in gone)
            gone.clear()  # a list bound to a request (hvd._core.bind_kept) holds nothing more


def _forget(key: Tuple[torch.dtype, torch.Size], kept: List[torch.Tensor], c: torch.Tensor) -> None:
    """_lock held: c is no longer reused."""
    global _bytes
    for i, k in enumerate(kept):
        if k is c:
            del kept[i]
            _bytes -= c.numel() * c.element_size()
            break
    if not kept and _kept.get(key) is kept:
        del _kept[key]


def clear() -> None:
    """Lets every kept tensor go (hvd.init, hvd.shutdown, tests)."""
    global _bytes
    with _lock:
        for kept in _kept.values():
            kept.clear()  # for a request's binding (hvd._core.bind_kept)
        _kept.clear()
        _bytes = 0


def stats() -> Tuple[int, int]:
    """(bytes, tensors) kept now."""
    with _lock:
        return _bytes, sum(len(v) for v in _kept.values())


_basics._init_hooks.append(clear)
