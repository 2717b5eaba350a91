"""The top-level hvd module on numpy arrays."""

import numpy as np
import pytest

import hvd

DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]


def data(dtype, shape, r):
    i = np.arange(int(np.prod(shape))).reshape(shape)
    if dtype == np.bool_:
        return (i + r) % 3 == 0
    v = i % 5 + r
    return v.astype(dtype)


def everyone(dtype, shape):
    return [data(dtype, shape, r) for r in range(hvd.size())]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Min, hvd.Max, hvd.Product, hvd.Average])
def test_allreduce(dtype, op):
    if dtype == np.bool_ and op == hvd.Average:
        pytest.skip("no average of truth values")
    x = data(dtype, (3, 4), hvd.rank())
    out = hvd.allreduce(x, op=op)
    xs = np.stack(everyone(dtype, (3, 4)))
    if dtype == np.bool_:
        exp = xs.any(0) if op in (hvd.Sum, hvd.Max) else xs.all(0)
    elif op == hvd.Sum:
        exp = xs.astype(np.float64).sum(0).astype(dtype)
    elif op == hvd.Min:
        exp = xs.min(0)
    elif op == hvd.Max:
        exp = xs.max(0)
    elif op == hvd.Product:
        exp = xs.astype(np.float64).prod(0).astype(dtype)
    else:
        s = xs.astype(np.float64).sum(0) / hvd.size()
        exp = s.astype(dtype) if np.issubdtype(dtype, np.floating) else np.trunc(s).astype(dtype)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, exp)
    np.testing.assert_array_equal(x, data(dtype, (3, 4), hvd.rank()))  # input untouched


def test_allreduce_inplace_and_async():
    x = np.ones(5, dtype=np.float32)
    assert hvd.allreduce_(x, op=hvd.Sum) is x
    np.testing.assert_array_equal(x, np.full(5, hvd.size(), dtype=np.float32))
    h = hvd.allreduce_async(np.arange(4.0), op=hvd.Sum)
    np.testing.assert_array_equal(hvd.synchronize(h), np.arange(4.0) * hvd.size())
    y = np.zeros(3, dtype=np.int64) + hvd.rank()
    hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Max))
    np.testing.assert_array_equal(y, np.full(3, hvd.size() - 1))


def test_allreduce_python_list_and_noncontiguous():
    out = hvd.allreduce([1.0, 2.0], op=hvd.Sum)
    np.testing.assert_array_equal(out, np.array([1.0, 2.0]) * hvd.size())
    x = np.arange(12.0).reshape(3, 4).T  # copied to contiguous memory for out-of-place
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum), x * hvd.size())
    with pytest.raises(ValueError, match="contiguous"):
        hvd.allreduce_(x)
    ro = np.ones(2)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="writeable"):
        hvd.allreduce_(ro)


def test_grouped_allreduce():
    xs = [np.ones(2, dtype=np.int32), np.full((2, 2), 0.5)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    np.testing.assert_array_equal(outs[0], np.full(2, hvd.size(), dtype=np.int32))
    np.testing.assert_array_equal(outs[1], np.full((2, 2), 0.5 * hvd.size()))
    hvd.grouped_allreduce_(xs, op=hvd.Sum)
    np.testing.assert_array_equal(xs[0], np.full(2, hvd.size(), dtype=np.int32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather(dtype):
    x = data(dtype, (hvd.rank() + 1, 3), hvd.rank())
    out = hvd.allgather(x)
    np.testing.assert_array_equal(out, np.concatenate([data(dtype, (r + 1, 3), r) for r in range(hvd.size())]))
    outs = hvd.grouped_allgather([x, x[:1]])
    np.testing.assert_array_equal(outs[1], np.concatenate([data(dtype, (r + 1, 3), r)[:1]
                                                           for r in range(hvd.size())]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype):
    for root in range(hvd.size()):
        x = data(dtype, (2, 2), hvd.rank())
        np.testing.assert_array_equal(hvd.broadcast(x, root), data(dtype, (2, 2), root))
        assert hvd.broadcast_(x, root) is x
        np.testing.assert_array_equal(x, data(dtype, (2, 2), root))


def test_alltoall():
    n, me = hvd.size(), hvd.rank()
    x = np.concatenate([np.full((r + 1, 2), 10 * me + r) for r in range(n)])
    out, received = hvd.alltoall(x, splits=[r + 1 for r in range(n)])
    np.testing.assert_array_equal(out, np.concatenate([np.full((me + 1, 2), 10 * s + me) for s in range(n)]))
    assert received.tolist() == [me + 1] * n
    y = np.arange(2 * n) + 100 * me
    out = hvd.alltoall(y)
    np.testing.assert_array_equal(out, np.concatenate([np.arange(2 * me, 2 * me + 2) + 100 * s for s in range(n)]))


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter(op):
    n, me = hvd.size(), hvd.rank()
    x = np.arange((2 * n + 1) * 2, dtype=np.float64).reshape(-1, 2) * (me + 1)
    out = hvd.reducescatter(x, op=op)
    full = np.arange((2 * n + 1) * 2, dtype=np.float64).reshape(-1, 2) * sum(range(1, n + 1))
    if op == hvd.Average:
        full = full / n
    start = 2 * me + min(me, 1)
    rows = 2 + (1 if me < 1 else 0)
    np.testing.assert_array_equal(out, full[start:start + rows])
    outs = hvd.grouped_reducescatter([x, x[:n]], op=op)
    np.testing.assert_array_equal(outs[0], full[start:start + rows])


def test_objects():
    assert hvd.broadcast_object({"r": hvd.rank()}, root_rank=0) == {"r": 0}
    assert hvd.allgather_object(hvd.rank() * 2) == [2 * r for r in range(hvd.size())]


def test_poll_join_barrier():
    h = hvd.allreduce_async(np.ones(3), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    np.testing.assert_array_equal(hvd.synchronize(h), np.full(3, float(hvd.size())))
    hvd.barrier()
    assert 0 <= hvd.join() < hvd.size()


def test_errors():
    with pytest.raises(ValueError, match="not supported"):
        hvd.allreduce(np.ones(2, dtype=np.complex64))
    with pytest.raises(ValueError, match="byte order"):
        hvd.allreduce(np.ones(2, dtype=">f4"))
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce(np.ones(2), op=hvd.Adasum)
    if hvd.size() > 1:
        with pytest.raises(hvd.HorovodInternalError, match="shape"):
            hvd.allreduce(np.ones(2 + hvd.rank()), name="np.mismatch")


def test_unnamed_blocking_calls_repeat_one_name(submitted):
    # as hvd.torch's (test_torch_unnamed.py): <kind>.noname.sync every call,
    # exact results whatever the shape; asynchronous calls keep counted names
    names = submitted
    n, me = hvd.size(), hvd.rank()
    for length in (2, 3):
        x = np.full(n * length, float(me))
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum), np.full(n * length, float(sum(range(n)))))
        np.testing.assert_array_equal(hvd.broadcast(x, root_rank=n - 1), np.full(n * length, float(n - 1)))
        np.testing.assert_array_equal(hvd.allgather(x[:1]), np.arange(n, dtype=float))
        np.testing.assert_array_equal(hvd.alltoall(x), np.repeat(np.arange(n, dtype=float), length))
    assert set(names) == {"allreduce.noname.sync", "broadcast.noname.sync", "allgather.noname.sync",
                          "alltoall.noname.sync"}
    del names[:]
    hvd.synchronize(hvd.allreduce_async(np.ones(2)))
    assert names[0].startswith("allreduce.noname.") and names[0].rsplit(".", 1)[1].isdigit()
