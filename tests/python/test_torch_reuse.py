"""hvd.torch hands out again the out-of-place results that their caller has
dropped (hvd/torch/_reuse.py). The rule under test: a result that anything
still holds (a name, a container, a view, an alias, a numpy array, a
storage object, a weak reference, autograd) is never overwritten by a
later call, and a result whose state its user changed is never handed
out; a result nobody holds is."""

import gc
import weakref

import pytest
import torch

import hvd._core as hvd_core
import hvd.torch as hvd
from hvd.torch import _reuse, mpi_ops

COUNT = 1000  # small: the sizes where making a tensor costs the most
BIG = 20 * 4000  # float32: over a kept buffer (hvd._core.KEPT_MIN_BYTES)


def rank_values(i, count=COUNT):
    """Values different on every rank and call, exact in float32."""
    return (torch.arange(count, dtype=torch.float32) % 7 + hvd.rank() + 3 * i).reshape(20, -1)


def summed(i, count=COUNT):
    return sum((torch.arange(count, dtype=torch.float32) % 7 + r + 3 * i) for r in range(hvd.size())).reshape(20, -1)


def forms():
    return [
        ("allreduce", lambda t, n: hvd.allreduce(t, op=hvd.Sum, name=n)),
        ("async", lambda t, n: hvd.synchronize(hvd.allreduce_async(t, op=hvd.Sum, name=n))),
        ("grouped", lambda t, n: hvd.grouped_allreduce([t], op=hvd.Sum, name=n)[0]),
    ]


@pytest.fixture(autouse=True)
def fresh_pool():
    _reuse.clear()
    gc.collect()
    yield
    _reuse.clear()


@pytest.fixture(params=["c", "python"])
def take_impl(request, monkeypatch):
    """take_of's search: hvd._core.reuse_pick, or its own loop (the
    fallback for a torch whose getters the probe rejects)."""
    if request.param == "c" and _reuse._pick is None:
        pytest.skip("hvd._core.reuse_pick is not used with this torch")
    if request.param == "python":
        monkeypatch.setattr(_reuse, "_pick", None)
        monkeypatch.setattr(mpi_ops, "_PICK", None)  # the blocking allreduce's own binding
    return request.param


def test_enabled_on_known_torch():
    """Torch with Python use counts, and torch 1.x through hvd._core, reuse."""
    if hasattr(torch.Tensor, "_use_count") or torch.__version__.startswith("1."):
        assert _reuse.enabled()
    else:
        pytest.skip(f"torch {torch.__version__} has no use counts hvd can read")


def test_pick_in_c_on_known_torch():
    """Where outputs are reused, the search runs in hvd._core."""
    if not _reuse.enabled():
        pytest.skip(f"torch {torch.__version__} has no use counts hvd can read")
    assert _reuse._pick is hvd_core.reuse_pick


def test_counts_read_from_c10_on_known_torch():
    """On torch 1.13 and 2.x the use counts are read from c10's objects
    (found where hvd._core.c10_layout looks), not asked of torch."""
    if not _reuse.enabled():
        pytest.skip(f"torch {torch.__version__} has no use counts hvd can read")
    assert _reuse._counts is _reuse._c10_counts


def owners():
    """(name, make(t) -> something that owns t's TensorImpl or storage)."""
    return [
        ("none", lambda t: None),
        ("view", lambda t: t.view(-1)),
        ("slice", lambda t: t[2:]),
        ("data", lambda t: t.data),
        ("detach", lambda t: t.detach()),
        ("numpy", lambda t: t.numpy()),
        ("two views", lambda t: (t.view(-1), t[1:])),
        ("autograd", lambda t: (t.requires_grad_(), t * torch.ones(8, requires_grad=True))),
    ]


@pytest.mark.parametrize("owner", owners(), ids=lambda o: o[0])
def test_c10_counts_agree_with_torch(owner):
    """hvd._core.c10_use_counts gives torch 2.x's own counts: the
    TensorImpl's as Tensor._use_count has it, the storage's one less than
    torch._C._storage_Use_Count, whose storage object is one more owner."""
    if not hasattr(torch.Tensor, "_use_count") or _reuse._counts is not _reuse._c10_counts:
        pytest.skip(f"torch {torch.__version__} does not give its use counts, or hvd does not read them")
    t = torch.empty(8)
    held = owner[1](t)
    tensor_refs, storage_refs = hvd_core.c10_use_counts(t._cdata)
    s = t.untyped_storage()
    assert (tensor_refs, storage_refs + 1) == (t._use_count(), torch._C._storage_Use_Count(s._cdata))
    assert (tensor_refs, storage_refs) != (1, 1) or held is None


def test_c10_layout_finds_autograd_state():
    """On torch 1.13 and 2.x the pointer to a tensor's autograd state
    follows its storage's, and a result's requires_grad, .grad and hooks
    are read there; with autograd probes that have none, it is not used."""
    if _reuse._counts is not _reuse._c10_counts:
        pytest.skip(f"hvd does not read torch {torch.__version__}'s counts")
    # c10_layout reads the tensors behind the addresses: they must live
    t, plain = torch.empty(8), torch.empty(8)
    probes = _reuse._autograd_probes()
    storage = _reuse._storage_of(t)._cdata
    offset, autograd = hvd_core.c10_layout(t._cdata, storage, [p._cdata for p in probes])
    assert offset in (16, 24) and autograd == offset + 8
    try:
        assert hvd_core.c10_layout(t._cdata, storage, [plain._cdata]) == (offset, None)
        assert hvd_core.c10_layout(t._cdata, storage, []) == (offset, None)
    finally:
        assert _reuse._c10_layout_found()


def test_c10_layout_rejects_what_is_not_a_tensor():
    """c10_layout says what is wrong and leaves the layout it found as it was."""
    t, other = torch.empty(8), torch.empty(8)
    with pytest.raises(TypeError, match="cdata must be an int"):
        hvd_core.c10_layout("t", 1, [])
    with pytest.raises(ValueError, match="cdata is NULL"):
        hvd_core.c10_layout(0, 1, [])
    with pytest.raises(ValueError, match="the storage's pointer is not where c10 keeps it"):
        hvd_core.c10_layout(t._cdata, _reuse._storage_of(other)._cdata, [])
    with pytest.raises(TypeError, match="autograd_cdatas must be a sequence"):
        hvd_core.c10_layout(t._cdata, _reuse._storage_of(t)._cdata, None)
    if _reuse._counts is _reuse._c10_counts:
        fresh, probes = torch.empty(8), _reuse._autograd_probes()  # alive while read
        assert hvd_core.c10_use_counts(fresh._cdata) == (1, 1)
        got = hvd_core.c10_layout(t._cdata, _reuse._storage_of(t)._cdata, [p._cdata for p in probes])
        assert got[1] is not None


@pytest.mark.parametrize("count", [COUNT, BIG])
@pytest.mark.parametrize("form", forms(), ids=lambda f: f[0])
def test_dropped_result_handed_out_again(form, count, take_impl):
    name, fn = form
    assert BIG * 4 >= hvd_core.KEPT_MIN_BYTES
    a = fn(rank_values(0, count), f"reuse.drop.{name}.{count}")
    a_id, a_ptr = id(a), a.data_ptr()
    assert torch.equal(a, summed(0, count))
    del a
    b = fn(rank_values(1, count), f"reuse.drop.{name}.{count}")
    assert id(b) == a_id and b.data_ptr() == a_ptr  # the same tensor, nobody else had it
    assert torch.equal(b, summed(1, count))  # and it holds the new result only
    assert not b.requires_grad and b.grad_fn is None and b.is_contiguous()


@pytest.mark.parametrize("count", [COUNT, BIG])
def test_loop_uses_two_tensors(count):
    """out = hvd.allreduce(t) in a loop: the previous result is held while
    the next call runs, the one before it is not."""
    ptrs = set()
    out = None
    for i in range(8):
        out = hvd.allreduce(rank_values(i, count), op=hvd.Sum, name=f"reuse.loop.{count}")
        assert torch.equal(out, summed(i, count))
        ptrs.add(out.data_ptr())
    assert len(ptrs) == 2


def bound_list(name):
    """The kept list the blocking allreduce named name has bound to its
    prepared request (hvd._core.bind_kept), or None."""
    hits = [hit for key, hit in mpi_ops._sync_requests.items() if key[0] == name]
    assert len(hits) == 1 and hits[0][2] is not None
    return hits[0][2].kept


def test_blocking_result_picked_with_the_run(monkeypatch):
    """A named blocking allreduce searches the kept list of its shape, bound
    to its prepared request, in the same C call that runs it: in a loop
    every call after the first two takes that path, with exact results in
    the two kept tensors."""
    if _reuse._pick is None:
        pytest.skip("hvd._core.reuse_pick is not used with this torch")
    picked = []
    real = mpi_ops._run_kept

    def spy(prepared, tensor):
        out = real(prepared, tensor)
        picked.append(out is not None)
        return out

    monkeypatch.setattr(mpi_ops, "_run_kept", spy)
    ptrs = set()
    out = None
    for i in range(6):
        out = hvd.allreduce(rank_values(i), op=hvd.Sum, name="reuse.bound.run")
        assert torch.equal(out, summed(i))
        ptrs.add(out.data_ptr())
    assert picked == [False, False, True, True, True, True] and len(ptrs) == 2
    assert bound_list("reuse.bound.run") is _reuse._kept[(out.dtype, out.shape)]


@pytest.mark.parametrize("drop", ["clear", "evicted"])
def test_binding_to_a_dropped_list_hands_out_nothing(drop):
    """A kept list _reuse.py lets go (hvd.init's clear, or the least
    recently used shape past MAX_SHAPES) is emptied: the request bound to
    it makes a new result, exact, and binds the list kept now."""
    if _reuse._pick is None:
        pytest.skip("hvd._core.reuse_pick is not used with this torch")
    a = hvd.allreduce(rank_values(0), op=hvd.Sum, name="reuse.dropped")
    old = bound_list("reuse.dropped")
    assert old is not None and len(old) == 1
    del a
    if drop == "clear":
        _reuse.clear()
    else:
        for n in range(1, _reuse.MAX_SHAPES + 1):
            hvd.allreduce(torch.ones(n), op=hvd.Sum, name=f"reuse.dropped.{n}")
    assert old == [] and (torch.float32, torch.Size([20, COUNT // 20])) not in _reuse._kept
    b = hvd.allreduce(rank_values(1), op=hvd.Sum, name="reuse.dropped")
    assert torch.equal(b, summed(1))
    now = bound_list("reuse.dropped")
    assert now is not old and now is _reuse._kept[(b.dtype, b.shape)] and now[0] is b


def test_parameter_input_reduced_out_of_place():
    """A Tensor subclass as input (a Parameter without a gradient): its data
    pointer is asked of it by name, the result is a plain kept tensor."""
    outs = []
    for i in range(4):
        p = torch.nn.Parameter(rank_values(i), requires_grad=False)
        out = hvd.allreduce(p, op=hvd.Sum, name="reuse.parameter")
        assert type(out) is torch.Tensor and torch.equal(out, summed(i))
        outs.append(out.data_ptr())
        del out
    assert len(set(outs)) == 1 or _reuse._pick is None


def storage_of(r):
    return r.untyped_storage() if hasattr(r, "untyped_storage") else r.storage()


def storage_values(s):
    """A storage's bytes as float32, 20 rows: untyped storages (torch 2.x)
    list bytes, typed ones (torch 1.x) their elements."""
    if isinstance(s, getattr(torch, "UntypedStorage", ())):
        return torch.tensor(s.tolist(), dtype=torch.uint8).view(torch.float32).reshape(20, -1)
    return torch.tensor(s.tolist(), dtype=torch.float32).reshape(20, -1)


def holders():
    """(name, make(result) -> holder, read(holder) -> the result's values as
    the holder sees them, all 20 rows)."""
    return [
        ("name", lambda r: r, lambda h: h),
        ("list", lambda r: [r], lambda h: h[0]),
        ("view", lambda r: r.view(-1), lambda h: h.reshape(20, -1)),
        ("slice", lambda r: (r[3:], r[:3].clone()), lambda h: torch.cat([h[1], h[0]])),
        ("data", lambda r: r.data, lambda h: h),
        ("detach", lambda r: r.detach(), lambda h: h),
        ("numpy", lambda r: r.numpy(), lambda h: torch.from_numpy(h.copy())),
        ("storage", storage_of, storage_values),
    ]


@pytest.mark.parametrize("holder", holders(), ids=lambda h: h[0])
def test_held_result_never_overwritten(holder, take_impl):
    name, make, read = holder
    r = hvd.allreduce(rank_values(0), op=hvd.Sum, name=f"reuse.held.{name}")
    kept_ptr = r.data_ptr()
    h = make(r)
    del r
    gc.collect()
    later = []
    for i in range(1, 6):
        out = hvd.allreduce(rank_values(i), op=hvd.Sum, name=f"reuse.held.{name}")
        assert torch.equal(out, summed(i)) and out.data_ptr() != kept_ptr
        if i % 2:
            later.append(out)  # some results held, some dropped
        del out
    assert torch.equal(read(h), summed(0))
    for i, out in zip(range(1, 6, 2), later):
        assert torch.equal(out, summed(i))


def test_saved_by_autograd_gradient_is_the_old_result():
    """A dropped result that autograd saved for a backward keeps its values."""
    r = hvd.allreduce(rank_values(0), op=hvd.Sum, name="reuse.autograd")
    want = r.clone()
    w = torch.ones_like(r, requires_grad=True)
    loss = (r * w).sum()
    del r
    for i in range(1, 4):
        out = hvd.allreduce(rank_values(i), op=hvd.Sum, name="reuse.autograd")
        assert torch.equal(out, summed(i))
        del out
    loss.backward()
    assert torch.equal(w.grad, want)


def test_weakly_referenced_result_not_handed_out(take_impl):
    r = hvd.allreduce(rank_values(0), op=hvd.Sum, name="reuse.weak")
    ref = weakref.ref(r)
    r_id = id(r)
    del r
    out = hvd.allreduce(rank_values(1), op=hvd.Sum, name="reuse.weak")
    assert id(out) != r_id and torch.equal(out, summed(1))
    held = ref()
    assert held is not None and torch.equal(held, summed(0))


@pytest.mark.parametrize("change", ["requires_grad", "grad", "attribute", "hook", "resize", "strides"])
def test_changed_result_not_handed_out(change, take_impl):
    """A dropped result whose state its user changed is forgotten: a later
    result is a tensor in the state of a new one."""
    r = hvd.allreduce(rank_values(0), op=hvd.Sum, name=f"reuse.changed.{change}")
    if change == "requires_grad":
        r.requires_grad_()
    elif change == "grad":
        r.grad = torch.zeros_like(r)
    elif change == "attribute":
        r.note = "mine"
    elif change == "hook":
        r.requires_grad_()
        r.register_hook(lambda g: g)
    elif change == "strides":
        r.as_strided_(r.shape, (1, 20))  # the same shape, not contiguous
    else:
        r.resize_(COUNT)
    del r
    gc.collect()
    for i in range(1, 4):
        out = hvd.allreduce(rank_values(i), op=hvd.Sum, name=f"reuse.changed.{change}")
        assert torch.equal(out, summed(i)) and out.shape == (20, COUNT // 20) and out.is_contiguous()
        assert not out.requires_grad and out.grad is None and out._backward_hooks is None
        assert not hasattr(out, "note")
        del out


def test_in_flight_output_not_handed_out():
    """The output of an operation not yet synchronized is held by its handle."""
    handle = hvd.allreduce_async(rank_values(0), op=hvd.Sum, name="reuse.inflight.0")
    outs = [hvd.allreduce(rank_values(i), op=hvd.Sum, name="reuse.inflight") for i in range(1, 4)]
    first = hvd.synchronize(handle)
    assert torch.equal(first, summed(0))
    for i, out in enumerate(outs, 1):
        assert torch.equal(out, summed(i))
        assert out.data_ptr() != first.data_ptr()


def test_shapes_and_dtypes_not_mixed():
    a = hvd.allreduce(rank_values(0), op=hvd.Sum, name="reuse.shape.a")
    a_id = id(a)
    del a
    b = hvd.allreduce(rank_values(1).reshape(-1, 20), op=hvd.Sum, name="reuse.shape.b")
    c = hvd.allreduce(rank_values(2).double(), op=hvd.Sum, name="reuse.shape.c")
    assert id(b) != a_id and id(c) != a_id
    assert b.shape == (COUNT // 20, 20) and torch.equal(b, summed(1).reshape(-1, 20))
    assert c.dtype == torch.float64 and torch.equal(c, summed(2).double())


def test_bounded():
    """At most PER_SHAPE tensors per shape, MAX_SHAPES shapes and MAX_BYTES."""
    held = [hvd.allreduce(rank_values(i), op=hvd.Sum, name="reuse.bound") for i in range(5)]
    assert _reuse.stats()[1] == _reuse.PER_SHAPE
    for n in range(1, _reuse.MAX_SHAPES + 20):
        hvd.allreduce(torch.ones(n), op=hvd.Sum, name=f"reuse.bound.{n}")
    nbytes, count = _reuse.stats()
    assert nbytes <= _reuse.MAX_BYTES and count <= _reuse.MAX_SHAPES * _reuse.PER_SHAPE
    for i, out in enumerate(held):
        assert torch.equal(out, summed(i))


def test_blocking_requests_per_variant():
    """The blocking allreduce remembers one request per name, dtype, shape,
    op and scale factors: each variant is reduced as its own, and a call
    that fails its checks fails every time (nothing is remembered of it)."""
    for i in range(3):
        assert torch.equal(hvd.allreduce(rank_values(i), op=hvd.Sum, name="reuse.req"), summed(i))
        assert torch.equal(hvd.allreduce(rank_values(i).reshape(-1), op=hvd.Sum, name="reuse.req.flat"),
                           summed(i).reshape(-1))
        assert torch.equal(hvd.allreduce(rank_values(i).double(), op=hvd.Sum, name="reuse.req.double"),
                           summed(i).double())
        assert torch.equal(hvd.allreduce(rank_values(i), op=hvd.Sum, prescale_factor=2.0, name="reuse.req.pre"),
                           2 * summed(i))
        avg = hvd.allreduce(rank_values(i), name="reuse.req.avg")
        assert torch.allclose(avg, summed(i) / hvd.size())
        t = rank_values(i)
        assert hvd.allreduce_(t, op=hvd.Sum, name="reuse.req.inplace") is t and torch.equal(t, summed(i))
        unnamed = hvd.allreduce(rank_values(i), op=hvd.Sum)
        assert torch.equal(unnamed, summed(i))
    for _ in range(2):
        with pytest.raises(ValueError, match="not supported"):
            hvd.allreduce(torch.zeros(4, dtype=torch.complex64), op=hvd.Sum, name="reuse.req.complex")
        with pytest.raises(ValueError, match="contiguous"):
            hvd.allreduce(rank_values(0).t(), op=hvd.Sum, name="reuse.req.t")
        with pytest.raises(ValueError, match="unknown reduce op"):
            hvd.allreduce(rank_values(0), op=99, name="reuse.req.op")
        with pytest.raises(ValueError, match="name must be a string"):
            hvd.allreduce_(rank_values(0), op=hvd.Sum, name=7)
