"""hvd.torch's out-of-place results: new tensors, over buffers hvd keeps
for reuse from hvd._core.KEPT_MIN_BYTES on (mpi_ops._new_output). Every
form (allreduce, allreduce_async, grouped_allreduce, broadcast) must give
an exact result in memory of its own, leave the input alone, and never
hand out a buffer that a live tensor, or a view of one, still uses."""

import gc

import pytest
import torch

import hvd._core as core
import hvd.torch as hvd
from hvd.torch import _reuse
from conftest import ALL_DTYPES

KEPT = core.KEPT_MIN_BYTES
# float32 element counts below, at and above the size from which outputs are kept
COUNTS = [KEPT // 4 - 1, KEPT // 4, 3 * KEPT // 4 + 5]


def rank_values(count, r, i=0, dtype=torch.float32):
    """Values different on every rank and call, exact in every dtype."""
    v = torch.arange(count, dtype=torch.int64) % 5 + r + 2 * i
    return (v % 2 == 1) if dtype == torch.bool else v.to(dtype)


def summed(count, i=0, dtype=torch.float32):
    total = sum(rank_values(count, r, i, torch.int64) for r in range(hvd.size()))
    return (total > 0) if dtype == torch.bool else total.to(dtype)


def shares_memory(a, b):
    """Whether two CPU tensors' bytes overlap."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    return a0 < b1 and b0 < a1


def forms():
    """(name, fn(tensor, name) -> result) for every out-of-place allreduce form."""
    return [
        ("allreduce", lambda t, n: hvd.allreduce(t, op=hvd.Sum, name=n)),
        ("async", lambda t, n: hvd.synchronize(hvd.allreduce_async(t, op=hvd.Sum, name=n))),
        ("grouped", lambda t, n: hvd.grouped_allreduce([t], op=hvd.Sum, name=n)[0]),
        ("grouped_async", lambda t, n: hvd.synchronize(hvd.grouped_allreduce_async([t], op=hvd.Sum, name=n))[0]),
    ]


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("form", forms(), ids=lambda f: f[0])
def test_result_exact_input_untouched_not_aliased(form, count):
    name, fn = form
    x = rank_values(count, hvd.rank()).reshape(-1, 1)
    before = x.clone()
    out = fn(x, f"outputs.{name}.{count}")
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    assert torch.equal(out.reshape(-1), summed(count))
    assert torch.equal(x, before)
    assert not shares_memory(out, x)


@pytest.mark.parametrize("form", forms(), ids=lambda f: f[0])
def test_repeated_calls_same_name_fresh_results(form):
    """Results of one name held at once never share memory, and each keeps
    its own values while later calls run; results dropped in between give
    their buffers back, and a reused buffer holds the new result only."""
    name, fn = form
    count = 2 * KEPT // 4
    held = []
    for i in range(6):
        out = fn(rank_values(count, hvd.rank(), i), f"outputs.repeat.{name}")
        if i % 2:
            out.fill_(-7)  # garbage into a buffer given back below
            del out
            gc.collect()
            continue
        held.append((i, out))
    for i, out in held:
        assert torch.equal(out, summed(count, i))
    for a in range(len(held)):
        for b in range(a + 1, len(held)):
            assert not shares_memory(held[a][1], held[b][1])
    # a buffer that came back serves a new result, fully overwritten
    again = fn(rank_values(count, hvd.rank(), 9), f"outputs.repeat.{name}")
    assert torch.equal(again, summed(count, 9))
    for _, out in held:
        assert not shares_memory(again, out)


def test_view_keeps_buffer():
    """A view of a result keeps its buffer out of the pool after the result
    itself is gone."""
    count = 2 * KEPT // 4
    out = hvd.allreduce(rank_values(count, hvd.rank()), op=hvd.Sum, name="outputs.view")
    view = out[count // 2:]
    want = summed(count)[count // 2:].clone()
    del out
    gc.collect()
    later = [hvd.allreduce(rank_values(count, hvd.rank(), i), op=hvd.Sum, name="outputs.view")
             for i in range(1, 4)]
    assert torch.equal(view, want)
    for i, t in enumerate(later, 1):
        assert torch.equal(t, summed(count, i))
        assert not shares_memory(t, view)


def test_buffers_given_back_and_reused():
    """A kept buffer goes back to the pool when its last tensor dies. The
    dropped results that hvd.torch hands out again (_reuse.py) sit above
    the pool: let go of here, so that the result dies with its caller's
    reference."""
    count = 2 * KEPT // 4
    _reuse.clear()
    gc.collect()
    core.kept_drain()
    assert core.kept_stats() == (0, 0)
    out = hvd.allreduce(rank_values(count, hvd.rank()), op=hvd.Sum, name="outputs.reuse")
    _reuse.clear()
    assert core.kept_stats() == (0, 0)  # in use: not in the pool
    ptr = out.data_ptr()
    del out
    gc.collect()
    assert core.kept_stats() == (count * 4, 1)
    out = hvd.allreduce(rank_values(count, hvd.rank(), 3), op=hvd.Sum, name="outputs.reuse")
    assert core.kept_stats() == (0, 0) and out.data_ptr() == ptr  # taken from the pool, not new
    assert torch.equal(out, summed(count, 3))
    _reuse.clear()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_kept_outputs_every_dtype(dtype):
    count = KEPT  # at least KEPT bytes in every dtype
    x = rank_values(count, hvd.rank(), dtype=dtype).reshape(4, -1)
    before = x.clone()
    out = hvd.allreduce(x, op=hvd.Sum if dtype != torch.bool else hvd.Max, name=f"outputs.dtype.{dtype}")
    want = summed(count, dtype=dtype).reshape(4, -1)
    if dtype == torch.bool:
        want = torch.stack([rank_values(count, r, dtype=dtype) for r in range(hvd.size())]).any(0).reshape(4, -1)
    assert out.dtype == dtype and torch.equal(out, want)
    assert torch.equal(x, before) and not shares_memory(out, x)


def test_broadcast_out_of_place_kept():
    count = 2 * KEPT // 4
    x = rank_values(count, hvd.rank())
    before = x.clone()
    results = [hvd.broadcast(x, 0, name="outputs.broadcast") for _ in range(3)]
    for out in results:
        assert torch.equal(out, rank_values(count, 0))
    assert torch.equal(x, before)
    for a in range(3):
        assert not shares_memory(results[a], x)
        for b in range(a + 1, 3):
            assert not shares_memory(results[a], results[b])


def test_result_is_an_ordinary_tensor():
    """Writable, its own; numpy and autograd see an ordinary tensor."""
    count = 2 * KEPT // 4
    x = rank_values(count, hvd.rank())
    out = hvd.allreduce(x, op=hvd.Sum, name="outputs.ordinary")
    out += 1
    assert torch.equal(out, summed(count) + 1)
    assert torch.equal(x, rank_values(count, hvd.rank()))
    assert out.numpy()[0] == float(summed(count)[0]) + 1
    w = x.clone().requires_grad_()
    y = hvd.allreduce(w, op=hvd.Sum, name="outputs.grad")
    assert y.grad_fn is not None
    y.sum().backward()
    assert torch.equal(w.grad, torch.full_like(w, float(hvd.size())))
    with torch.no_grad():
        z = hvd.allreduce(w, op=hvd.Sum, name="outputs.nograd")
    assert z.grad_fn is None and not z.requires_grad and torch.equal(z, summed(count))


def test_non_contiguous_input_rejected_untouched():
    count = 2 * KEPT // 4
    x = rank_values(count, hvd.rank()).reshape(2, -1).t()
    before = x.clone()
    for fn in (lambda: hvd.allreduce(x, name="outputs.nc"), lambda: hvd.allreduce_async(x, name="outputs.nc"),
               lambda: hvd.grouped_allreduce([x], name="outputs.nc")):
        with pytest.raises(ValueError, match="contiguous"):
            fn()
    assert torch.equal(x, before)
    # what the error asks for works
    out = hvd.allreduce(x.contiguous(), op=hvd.Sum, name="outputs.nc.copy")
    assert torch.equal(out, summed(count).reshape(2, -1).t())


# ---- outputs libhvd allocates: allgather, reducescatter ----------------------------
# Their results lie over host buffers libhvd allocates and hands over
# (hvd_handle_steal_output); when a result dies its buffer goes back to
# libhvd (hvd_recycle_output), which serves a later output of about its
# size with it (from 256 KiB, client/outbuf.c) instead of fresh pages.

def gathered(rows, cols, i=0):
    """What allgather of rank_values rows (rows + rank rows each) returns."""
    return torch.cat([rank_values((rows + r) * cols, r, i).reshape(-1, cols) for r in range(hvd.size())])


def gather_forms():
    return [
        ("allgather", lambda t, n: hvd.allgather(t, name=n)),
        ("allgather_async", lambda t, n: hvd.synchronize(hvd.allgather_async(t, name=n))),
        ("grouped_allgather", lambda t, n: hvd.grouped_allgather([t], name=n)[0]),
    ]


@pytest.mark.parametrize("form", gather_forms(), ids=lambda f: f[0])
def test_allgather_buffers_come_back(form):
    """A dropped allgather result's buffer serves the next one of its size,
    fully overwritten; results held at once never share memory and keep
    their values while later calls run."""
    label, fn = form
    cols = KEPT // 4 // 4  # a row is a quarter of the kept size
    rows = 8  # rank r sends 8 + r rows: uneven
    x = lambda i: rank_values((rows + hvd.rank()) * cols, hvd.rank(), i).reshape(-1, cols)
    first = fn(x(0), f"outputs.gather.{label}")
    assert torch.equal(first, gathered(rows, cols, 0))
    ptr = first.data_ptr()
    first.fill_(-7)  # garbage into the buffer given back below
    del first
    gc.collect()
    again = fn(x(1), f"outputs.gather.{label}")
    assert again.data_ptr() == ptr  # the same memory, not fresh pages
    assert torch.equal(again, gathered(rows, cols, 1))
    held = [again] + [fn(x(i), f"outputs.gather.{label}") for i in range(2, 5)]
    for i, out in enumerate(held, 1):
        assert torch.equal(out, gathered(rows, cols, i))
    for a in range(len(held)):
        for b in range(a + 1, len(held)):
            assert not shares_memory(held[a], held[b])


def test_allgather_view_keeps_buffer():
    cols = KEPT // 4 // 4
    x = lambda i: rank_values((4 + hvd.rank()) * cols, hvd.rank(), i).reshape(-1, cols)
    out = hvd.allgather(x(0), name="outputs.gather.view")
    view = out[2:]
    want = gathered(4, cols, 0)[2:].clone()
    del out
    gc.collect()
    later = [hvd.allgather(x(i), name="outputs.gather.view") for i in range(1, 4)]
    assert torch.equal(view, want)
    for i, t in enumerate(later, 1):
        assert torch.equal(t, gathered(4, cols, i))
        assert not shares_memory(t, view)


def test_reducescatter_buffers_come_back():
    n = hvd.size()
    rows, cols = 4 * n, KEPT // 4  # 4 rows of the kept size per rank
    x = lambda i: rank_values(rows * cols, hvd.rank(), i).reshape(rows, cols)
    mine = lambda i: summed(rows * cols, i).reshape(rows, cols)[4 * hvd.rank():4 * hvd.rank() + 4]
    first = hvd.reducescatter(x(0), op=hvd.Sum, name="outputs.rs")
    assert torch.equal(first, mine(0))
    ptr = first.data_ptr()
    first.fill_(-7)
    del first
    gc.collect()
    again = hvd.reducescatter(x(1), op=hvd.Sum, name="outputs.rs")
    assert again.data_ptr() == ptr and torch.equal(again, mine(1))
    other = hvd.reducescatter(x(2), op=hvd.Sum, name="outputs.rs")
    assert torch.equal(other, mine(2)) and torch.equal(again, mine(1))
    assert not shares_memory(again, other)
