"""hvd.torch collectives: exact results for every CPU dtype, in every form
(blocking, async, in-place, grouped)."""

import time

import pytest
import torch

import hvd.torch as hvd
from conftest import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES

SHAPES = [(5,), (3, 4), (2, 3, 2)]


def rank_data(dtype, shape, r, kind="mixed"):
    """Small values, different on every rank, exact in every dtype."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64).reshape(shape)
    if dtype == torch.bool:
        return ((i + r) % 3 == 0)
    if kind == "product":  # 1..3 (negative too when signed): products stay small
        v = i % 3 + 1
        if dtype not in (torch.uint8,) and r % 2:
            v = -v
        return v.to(dtype)
    v = i % 7 + 2 * r
    if dtype != torch.uint8:
        v = v - 4
    return v.to(dtype)


def all_data(dtype, shape, kind="mixed"):
    return [rank_data(dtype, shape, r, kind) for r in range(hvd.size())]


def wide(t):
    return t.to(torch.float64) if t.dtype.is_floating_point else t.to(torch.int64)


def expected_reduce(dtype, shape, op, kind="mixed"):
    xs = all_data(dtype, shape, kind)
    n = len(xs)
    if dtype == torch.bool:
        stack = torch.stack(xs)
        if op in (hvd.Sum, hvd.Max):
            return stack.any(0)
        return stack.all(0)
    stack = torch.stack([wide(x) for x in xs])
    if op == hvd.Sum:
        r = stack.sum(0)
    elif op == hvd.Average:
        s = stack.sum(0)
        r = s / n if dtype.is_floating_point else torch.div(s, n, rounding_mode="trunc")
    elif op == hvd.Min:
        r = stack.min(0).values
    elif op == hvd.Max:
        r = stack.max(0).values
    else:
        r = stack.prod(0)
    return r.to(dtype)


def assert_same(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.equal(actual, expected), f"\n{actual}\n!=\n{expected}"


OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


def op_cases():
    for dtype in ALL_DTYPES:
        for op in OPS:
            if dtype == torch.bool and op == hvd.Average:
                continue  # no average of truth values
            yield dtype, op


# ---- allreduce ------------------------------------------------------------------

@pytest.mark.parametrize("dtype,op", list(op_cases()))
def test_allreduce(dtype, op):
    kind = "product" if op == hvd.Product else "mixed"
    for shape in SHAPES:
        x = rank_data(dtype, shape, hvd.rank(), kind)
        before = x.clone()
        out = hvd.allreduce(x, op=op)
        assert_same(out, expected_reduce(dtype, shape, op, kind))
        assert torch.equal(x, before), "allreduce modified its input"


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allreduce_inplace(dtype):
    op = hvd.Max if dtype == torch.bool else hvd.Sum
    x = rank_data(dtype, (4, 3), hvd.rank())
    out = hvd.allreduce_(x, op=op)
    assert out is x
    assert_same(x, expected_reduce(dtype, (4, 3), op))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allreduce_async_many_in_flight(dtype):
    op = hvd.Max if dtype == torch.bool else hvd.Sum
    xs = [rank_data(dtype, (i + 1, 2), hvd.rank()) for i in range(6)]
    handles = [hvd.allreduce_async(x, op=op, name=f"async.{dtype}.{i}") for i, x in enumerate(xs)]
    handles += [hvd.allreduce_async_(x.clone(), op=op) for x in xs]
    results = [hvd.synchronize(h) for h in reversed(handles)][::-1]
    for i, out in enumerate(results):
        assert_same(out, expected_reduce(dtype, ((i % 6) + 1, 2), op))


def test_allreduce_average_is_default():
    out = hvd.allreduce(torch.full((3,), float(hvd.rank())))
    assert torch.equal(out, torch.full((3,), (hvd.size() - 1) / 2))


@pytest.mark.parametrize("dtype", [d for d in INT_DTYPES if d != torch.uint8])
def test_allreduce_average_integer_truncates(dtype):
    # Horovod's behaviour: the integer average is truncated toward zero.
    x = torch.tensor([hvd.rank() + 1, -(hvd.rank() + 1), 7 * hvd.rank() - 3], dtype=dtype)
    out = hvd.allreduce(x, op=hvd.Average)
    xs = torch.stack([torch.tensor([r + 1, -(r + 1), 7 * r - 3]) for r in range(hvd.size())])
    assert_same(out, torch.div(xs.sum(0), hvd.size(), rounding_mode="trunc").to(dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_allreduce_prescale_postscale(dtype):
    x = rank_data(dtype, (6,), hvd.rank())
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert_same(out, expected_reduce(dtype, (6,), hvd.Sum))
    out = hvd.allreduce(x, op=hvd.Sum, postscale_factor=4.0)
    assert_same(out, (wide(expected_reduce(dtype, (6,), hvd.Sum)) * 4).to(dtype))
    out = hvd.allreduce(x, op=hvd.Average, prescale_factor=2.0)
    assert_same(out, (wide(expected_reduce(torch.float64, (6,), hvd.Sum)) * 2 / hvd.size()).to(dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_allreduce_integer_scale(dtype):
    x = torch.arange(6, dtype=dtype) + hvd.rank()
    out = hvd.allreduce(x, op=hvd.Sum, postscale_factor=2.0)
    assert_same(out, (2 * sum(torch.arange(6) + r for r in range(hvd.size()))).to(dtype))


def test_allreduce_scalar_and_empty():
    out = hvd.allreduce(torch.tensor(float(hvd.rank() + 1)), op=hvd.Sum)
    assert out.shape == () and out.item() == sum(range(1, hvd.size() + 1))
    empty = hvd.allreduce(torch.empty(0, 3), op=hvd.Sum)
    assert empty.shape == (0, 3)


def test_allreduce_fp16_compression():
    x = torch.full((5,), 1.5) * (hvd.rank() + 1)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.full((5,), 1.5 * sum(range(1, hvd.size() + 1))))
    c, ctx = hvd.Compression.fp16.compress(torch.ones(2, dtype=torch.float64))
    assert c.dtype == torch.float16 and hvd.Compression.fp16.decompress(c, ctx).dtype == torch.float64
    i, ctx = hvd.Compression.fp16.compress(torch.ones(2, dtype=torch.int32))
    assert i.dtype == torch.int32


# ---- grouped allreduce ------------------------------------------------------------

def test_grouped_allreduce_mixed_dtypes():
    dtypes = NUMERIC_DTYPES
    xs = [rank_data(dt, (i + 2, 3), hvd.rank()) for i, dt in enumerate(dtypes)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    assert len(outs) == len(xs)
    for i, (dt, out) in enumerate(zip(dtypes, outs)):
        assert_same(out, expected_reduce(dt, (i + 2, 3), hvd.Sum))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_grouped_allreduce_forms(dtype):
    op = hvd.Min
    xs = [rank_data(dtype, (3, i + 1), hvd.rank()) for i in range(3)]
    exp = [expected_reduce(dtype, (3, i + 1), op) for i in range(3)]
    for out, e in zip(hvd.synchronize(hvd.grouped_allreduce_async(xs, op=op)), exp):
        assert_same(out, e)
    copies = [x.clone() for x in xs]
    res = hvd.grouped_allreduce_(copies, op=op)
    for c, r, e in zip(copies, res, exp):
        assert r is c
        assert_same(c, e)
    copies = [x.clone() for x in xs]
    hvd.synchronize(hvd.grouped_allreduce_async_(copies, op=op, name=f"grouped.{dtype}"))
    for c, e in zip(copies, exp):
        assert_same(c, e)


def test_grouped_allreduce_repeated():
    # the same group again and again (on one host from the readiness board,
    # all its members at once: test-fastpath.sh counts that), a member's new
    # shape now and then, single allreduces in between: results exact
    n, me = hvd.size(), hvd.rank()
    for i in range(30):
        rows = 2 + (i // 10)
        xs = [torch.full((rows, 3), float(me + i)), torch.arange(5, dtype=torch.int32) * (me + 1)]
        single = torch.full((4,), float(10 * me + i))
        if i % 3 == 0:
            outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="rep.group")
        else:
            outs = hvd.grouped_allreduce_([x.clone() for x in xs], op=hvd.Sum, name="rep.group")
        s = hvd.allreduce(single, op=hvd.Max, name="rep.single")
        assert torch.equal(outs[0], torch.full((rows, 3), float(n * (n - 1) // 2 + n * i)))
        assert torch.equal(outs[1], torch.arange(5, dtype=torch.int32) * (n * (n + 1) // 2))
        assert torch.equal(s, torch.full((4,), float(10 * (n - 1) + i)))
        # unnamed, averaged
        out = hvd.grouped_allreduce([torch.full((2,), float(me + i)), torch.full((1,), 2.0 * me)])
        assert torch.equal(out[0], torch.full((2,), (n - 1) / 2 + i))
        assert torch.equal(out[1], torch.full((1,), float(n - 1)))


def test_grouped_allreduce_late_rank_and_overlap():
    # groups of different sizes in flight beside another group and a single
    # allreduce; twice one rank comes 250 ms late, past the 200 ms a tensor
    # waits on the readiness board, which then withdraws the group whole
    # (check_fastpath tests the withdrawal): results exact throughout
    n, me = hvd.size(), hvd.rank()
    for i in range(30):
        k = (2, 3, 5)[i % 3]
        if i in (7, 19) and me == i % n:
            time.sleep(0.25)
        xs = [torch.full((j + 1,), float(me + i + j)) for j in range(k)]
        h1 = hvd.grouped_allreduce_async_(xs, op=hvd.Sum, name=f"late.g{k}")
        ys = [torch.full((3,), float(me * i)), torch.ones(2, dtype=torch.int64) * me]
        h2 = hvd.grouped_allreduce_async(ys, op=hvd.Max, name="late.other")
        s = hvd.allreduce(torch.full((4,), float(i)), op=hvd.Sum, name="late.single")
        for j, x in enumerate(hvd.synchronize(h1)):
            assert torch.equal(x, torch.full((j + 1,), float(n * (n - 1) // 2 + n * (i + j))))
        o = hvd.synchronize(h2)
        assert torch.equal(o[0], torch.full((3,), float((n - 1) * i)))
        assert torch.equal(o[1], torch.full((2,), n - 1, dtype=torch.int64))
        assert torch.equal(s, torch.full((4,), float(n * i)))


def test_grouped_allreduce_empty_list():
    with pytest.raises(ValueError, match="at least one"):
        hvd.grouped_allreduce([])


# ---- allgather --------------------------------------------------------------------

def gather_piece(dtype, r):
    """Rank r contributes r + 1 rows (rank 0 one row)."""
    return rank_data(dtype, (r + 1, 2, 3), r)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allgather(dtype):
    x = gather_piece(dtype, hvd.rank())
    out = hvd.allgather(x)
    assert_same(out, torch.cat([gather_piece(dtype, r) for r in range(hvd.size())]))
    out = hvd.synchronize(hvd.allgather_async(x, name=f"ag.{dtype}"))
    assert_same(out, torch.cat([gather_piece(dtype, r) for r in range(hvd.size())]))


def test_allgather_rank_without_rows():
    rows = 0 if hvd.rank() == 0 else 2
    x = torch.full((rows, 3), float(hvd.rank()))
    out = hvd.allgather(x)
    assert out.shape == (2 * (hvd.size() - 1), 3)
    assert torch.equal(out, torch.cat([torch.full((0 if r == 0 else 2, 3), float(r)) for r in range(hvd.size())]))


def test_allgather_all_empty():
    out = hvd.allgather(torch.empty(0, 4, dtype=torch.int16))
    assert out.shape == (0, 4) and out.dtype == torch.int16


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_grouped_allgather(dtype):
    xs = [gather_piece(dtype, hvd.rank()), rank_data(dtype, (2,), hvd.rank())]
    outs = hvd.grouped_allgather(xs)
    assert_same(outs[0], torch.cat([gather_piece(dtype, r) for r in range(hvd.size())]))
    assert_same(outs[1], torch.cat([rank_data(dtype, (2,), r) for r in range(hvd.size())]))
    outs = hvd.synchronize(hvd.grouped_allgather_async(xs))
    assert_same(outs[1], torch.cat([rank_data(dtype, (2,), r) for r in range(hvd.size())]))


def test_allgather_output_is_writable_and_owned():
    out = hvd.allgather(torch.ones(2))
    out += 1  # memory from hvd, owned by the tensor
    assert torch.equal(out, torch.full((2 * hvd.size(),), 2.0))


# ---- broadcast --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_broadcast(dtype):
    for root in range(hvd.size()):
        x = rank_data(dtype, (3, 2), hvd.rank())
        before = x.clone()
        out = hvd.broadcast(x, root_rank=root)
        assert_same(out, rank_data(dtype, (3, 2), root))
        assert torch.equal(x, before)
        out = hvd.synchronize(hvd.broadcast_async(x, root, name=f"bc.{dtype}.{root}"))
        assert_same(out, rank_data(dtype, (3, 2), root))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_broadcast_inplace(dtype):
    for root in range(hvd.size()):
        x = rank_data(dtype, (4,), hvd.rank())
        assert hvd.broadcast_(x, root) is x
        assert_same(x, rank_data(dtype, (4,), root))
        y = rank_data(dtype, (2, 2), hvd.rank())
        hvd.synchronize(hvd.broadcast_async_(y, root))
        assert_same(y, rank_data(dtype, (2, 2), root))


def test_broadcast_scalar():
    out = hvd.broadcast(torch.tensor(hvd.rank() + 10), 0)
    assert out.item() == 10


# ---- alltoall ---------------------------------------------------------------------

def a2a_rows(sender, receiver):
    return (sender + receiver) % 3 + 1


def a2a_piece(dtype, sender, receiver):
    rows = a2a_rows(sender, receiver)
    v = torch.arange(rows * 2).reshape(rows, 2) + 10 * sender + receiver
    return (v % 2 == 0) if dtype == torch.bool else v.to(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_alltoall_with_splits(dtype):
    me, n = hvd.rank(), hvd.size()
    x = torch.cat([a2a_piece(dtype, me, r) for r in range(n)])
    splits = [a2a_rows(me, r) for r in range(n)]
    out, received = hvd.alltoall(x, splits=splits)
    assert_same(out, torch.cat([a2a_piece(dtype, s, me) for s in range(n)]))
    assert received.tolist() == [a2a_rows(s, me) for s in range(n)]
    assert received.dtype == torch.int32
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int64))
    assert received.dtype == torch.int64
    assert_same(out, torch.cat([a2a_piece(dtype, s, me) for s in range(n)]))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_alltoall_equal_split(dtype):
    me, n = hvd.rank(), hvd.size()
    x = torch.cat([torch.full((2, 3), 10 * me + r) for r in range(n)])
    x = (x % 2 == 1) if dtype == torch.bool else x.to(dtype)
    out = hvd.alltoall(x)
    exp = torch.cat([torch.full((2, 3), 10 * s + me) for s in range(n)])
    exp = (exp % 2 == 1) if dtype == torch.bool else exp.to(dtype)
    assert_same(out, exp)
    out, received = hvd.synchronize(hvd.alltoall_async(x))
    assert_same(out, exp)
    assert received.tolist() == [2] * n


def test_alltoall_nothing_to_some():
    me, n = hvd.rank(), hvd.size()
    # rank r sends rows only to rank 0
    splits = [3 if r == 0 else 0 for r in range(n)]
    out, received = hvd.alltoall(torch.full((3,), float(me)), splits=splits)
    if me == 0:
        assert torch.equal(out, torch.cat([torch.full((3,), float(s)) for s in range(n)]))
    else:
        assert out.shape == (0,)
    assert received.tolist() == ([3] * n if me == 0 else [0] * n)


# ---- reducescatter ------------------------------------------------------------------

def rs_rows(total, r, n):
    base, extra = divmod(total, n)
    start = r * base + min(r, extra)
    return start, base + (1 if r < extra else 0)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter(dtype, op):
    n, me = hvd.size(), hvd.rank()
    for rows in (2 * n, 2 * n + 1, 1):
        shape = (rows, 3)
        x = rank_data(dtype, shape, me)
        out = hvd.reducescatter(x, op=op)
        start, count = rs_rows(rows, me, n)
        assert_same(out, expected_reduce(dtype, shape, op)[start:start + count])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_reducescatter_min_max(dtype):
    n, me = hvd.size(), hvd.rank()
    shape = (n + 1, 2)
    for op in (hvd.Min, hvd.Max):
        out = hvd.synchronize(hvd.reducescatter_async(rank_data(dtype, shape, me), op=op))
        start, count = rs_rows(n + 1, me, n)
        assert_same(out, expected_reduce(dtype, shape, op)[start:start + count])


def test_reducescatter_default_is_average():
    n = hvd.size()
    out = hvd.reducescatter(torch.full((n, 2), float(hvd.rank())))
    assert torch.equal(out, torch.full((1, 2), (n - 1) / 2))


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_grouped_reducescatter(dtype):
    n, me = hvd.size(), hvd.rank()
    shapes = [(n, 2), (2 * n + 1,)]
    xs = [rank_data(dtype, s, me) for s in shapes]
    for outs in (hvd.grouped_reducescatter(xs, op=hvd.Sum),
                 hvd.synchronize(hvd.grouped_reducescatter_async(xs, op=hvd.Sum))):
        for s, out in zip(shapes, outs):
            start, count = rs_rows(s[0], me, n)
            assert_same(out, expected_reduce(dtype, s, hvd.Sum)[start:start + count])


def test_reducescatter_prescale():
    n = hvd.size()
    out = hvd.reducescatter(torch.ones(n, 2), op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.5)
    assert torch.equal(out, torch.full((1, 2), 1.5 * n))


# ---- poll, synchronize, join, barrier -------------------------------------------------

def test_poll_then_synchronize():
    h = hvd.allreduce_async(torch.ones(8), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    assert torch.equal(hvd.synchronize(h), torch.full((8,), float(hvd.size())))
    assert hvd.synchronize(h) is None  # Horovod: an unknown handle gives None


def test_barrier():
    for _ in range(3):
        hvd.barrier()


def test_join_returns_last_rank():
    last = hvd.join()
    assert 0 <= last < hvd.size()


def test_join_uneven_allreduces():
    # rank r has r + 1 batches: joined ranks contribute zeros
    n, me = hvd.size(), hvd.rank()
    for k in range(me + 1):
        out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name=f"join.batch.{k}")
        assert torch.equal(out, torch.full((3,), float(sum(1 for r in range(n) if r >= k))))
    assert hvd.join() == n - 1 or n == 1


# ---- the same blocking calls again and again ----------------------------------------
# broadcast, allgather, reducescatter and alltoall of a plain CPU tensor
# keep their requests by name, dtype, shape and root, op or splits
# (mpi_ops._run_now): the same name with a changing root, changing rows or
# splits, new contents every round and unnamed calls all stay exact

def test_blocking_calls_repeated():
    n, me = hvd.size(), hvd.rank()
    for i in range(40):
        root = i % n
        x = torch.full((3, 2), float(100 * me + i))
        assert hvd.broadcast_(x, root, name="rep.bc") is x
        assert torch.equal(x, torch.full((3, 2), float(100 * root + i)))
        out = hvd.broadcast(torch.full((2,), me + i, dtype=torch.int32), root)
        assert torch.equal(out, torch.full((2,), root + i, dtype=torch.int32))
        rows = (me + i // 10) % 3  # every rank's own rows, new every 10 rounds
        out = hvd.allgather(torch.full((rows, 2), float(me * 1000 + i)), name="rep.ag")
        want = torch.cat([torch.full(((r + i // 10) % 3, 2), float(r * 1000 + i)) for r in range(n)])
        assert torch.equal(out, want)
        t = torch.arange(2 * n + 1, dtype=torch.int64) * (me + 1) + i
        op = hvd.Sum if i % 2 else hvd.Max
        got = hvd.reducescatter(t, name="rep.rs", op=op)
        full = torch.arange(2 * n + 1, dtype=torch.int64)
        whole = full * (n * (n + 1) // 2) + n * i if op == hvd.Sum else full * n + i
        start, count = rs_rows(2 * n + 1, me, n)
        assert torch.equal(got, whole[start:start + count])


def test_alltoall_repeated():
    """The same alltoall names again and again: splits that stay, that change
    every 7 rounds on one rank only, equal parts, and unnamed calls, exact;
    received splits follow the senders' changes."""
    n, me = hvd.size(), hvd.rank()

    def rows(sender, receiver, i):
        # rank 0's splits change every 7 rounds, the others' stay
        return (sender + 2 * receiver + (i // 7 if sender == 0 else 0)) % 3 + (sender == receiver)

    def piece(sender, receiver, i):
        k = rows(sender, receiver, i)
        return torch.arange(k * 2, dtype=torch.int64).reshape(k, 2) + 1000 * sender + 10 * receiver + i

    for i in range(30):
        x = torch.cat([piece(me, r, i) for r in range(n)])
        splits = [rows(me, r, i) for r in range(n)]
        out, received = hvd.alltoall(x, splits=splits, name="rep.a2a")
        assert torch.equal(out, torch.cat([piece(s, me, i) for s in range(n)]))
        assert received.tolist() == [rows(s, me, i) for s in range(n)]
        # 512 KiB from each rank: a result whose memory libhvd reuses once it is dropped
        eq = torch.cat([torch.full((64, 1024), 100 * me + 10 * r + i) for r in range(n)])
        got = hvd.alltoall(eq, name="rep.a2a.eq" if i % 2 else None)
        assert torch.equal(got, torch.cat([torch.full((64, 1024), 100 * s + 10 * me + i) for s in range(n)]))
        got.fill_(-1)  # garbage into that memory: the next result must overwrite all of it


def test_blocking_bad_root_after_good():
    x = torch.ones(2)
    hvd.broadcast_(x, 0, name="rep.root")
    with pytest.raises(ValueError, match="root_rank .* is out of range"):
        hvd.broadcast_(x, hvd.size(), name="rep.root")
    with pytest.raises(ValueError, match="root_rank .* is out of range"):
        hvd.broadcast(x, -1, name="rep.root")


# ---- objects --------------------------------------------------------------------------

def test_broadcast_object():
    obj = {"rank": hvd.rank(), "list": list(range(hvd.rank() + 3)), "nested": ("x", 1.5)}
    for root in range(hvd.size()):
        got = hvd.broadcast_object(obj, root_rank=root)
        assert got == {"rank": root, "list": list(range(root + 3)), "nested": ("x", 1.5)}


def test_allgather_object():
    got = hvd.allgather_object({"r": hvd.rank(), "pad": "x" * hvd.rank() * 100})
    assert got == [{"r": r, "pad": "x" * r * 100} for r in range(hvd.size())]


# ---- argument checks -------------------------------------------------------------------

def test_non_contiguous_rejected():
    x = torch.ones(4, 6).t()
    with pytest.raises(ValueError, match="contiguous"):
        hvd.allreduce_async_(x)


def test_unsupported_dtype_rejected():
    with pytest.raises(ValueError, match="not supported"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))


def test_non_cpu_device_rejected():
    with pytest.raises(ValueError, match="not supported"):
        hvd.allreduce(torch.ones(2, device="meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensor_without_gpu_backend():
    if hvd.nccl_built():
        pytest.skip("this build has a GPU backend")
    with pytest.raises(ValueError, match="GPU backend"):
        hvd.allreduce(torch.ones(2, device="cuda"))


def test_scalar_allgather_rejected():
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.allgather(torch.tensor(1.0))


def test_bad_root_rejected():
    with pytest.raises(ValueError, match="out of range"):
        hvd.broadcast(torch.ones(1), root_rank=hvd.size())


def test_bad_splits_rejected():
    n = hvd.size()
    with pytest.raises(ValueError, match="entries"):
        hvd.alltoall(torch.ones(n), splits=[1] * (n + 1))
    with pytest.raises(ValueError, match="sum"):
        hvd.alltoall(torch.ones(n), splits=[2] * n)
    with pytest.raises(ValueError, match="negative"):
        hvd.alltoall(torch.ones(n), splits=[-1] + [1] * (n - 2) + [2] if n > 1 else [-1])
    if n > 1:
        with pytest.raises(ValueError, match="divisible"):
            hvd.alltoall(torch.ones(n + 1))
