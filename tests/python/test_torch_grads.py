"""The gradient of every collective, value for value, against Horovod
0.28.1's formulas (horovod/torch/mpi_ops.py, the backward of each autograd
Function):

- allreduce, grouped_allreduce: the allreduce of the incoming gradients
  with the same op, prescale and postscale factors;
- allgather, grouped_allgather: this process's rows of the Average
  allreduce of the incoming gradients;
- broadcast: the Average allreduce of the incoming gradients on the root,
  zeros elsewhere;
- alltoall: the incoming gradients sent back with the received splits;
- reducescatter, grouped_reducescatter: the allgather of the incoming
  gradients times the process set's size for op=Sum (1 for Average), times
  the prescale and postscale factors.

Every rank feeds a different upstream gradient (rank r: r + 1, also varying
by position), so that a wrong op, a missing factor or a wrong slice gives a
different number. The values are small integers and halves: exact in
float64, so the checks are exact.
"""

import math

import pytest
import torch

import hvd.torch as hvd

OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
SCALES = [(1.0, 1.0), (2.0, 3.0), (0.5, 1.0), (1.0, 4.0)]


def n_me():
    return hvd.size(), hvd.rank()


def upstream(r, shape):
    """The gradient rank r feeds into backward: (r + 1) * (1, 2, 3, ...)."""
    numel = math.prod(shape)
    return (torch.arange(1, numel + 1, dtype=torch.float64) * (r + 1)).reshape(shape)


def reduce_over_ranks(op, tensors, pre, post):
    """What an allreduce with op, prescale and postscale gives for the
    tensors of ranks 0..n-1, computed here elementwise."""
    scaled = torch.stack([t * pre for t in tensors])
    if op == hvd.Sum:
        out = scaled.sum(0)
    elif op == hvd.Average:
        out = scaled.sum(0) / len(tensors)
    elif op == hvd.Min:
        out = scaled.min(0).values
    elif op == hvd.Max:
        out = scaled.max(0).values
    else:
        out = scaled.prod(0)
    return out * post


def rows_of(r, n, total):
    """Rows process r keeps of a reducescatter of total rows (the first
    total % n processes one more)."""
    return total // n + (1 if r < total % n else 0)


# ---- allreduce ------------------------------------------------------------------

@pytest.mark.parametrize("pre,post", SCALES)
@pytest.mark.parametrize("op_name", sorted(OPS))
def test_allreduce_grad(op_name, pre, post):
    n, me = n_me()
    op = OPS[op_name]
    shape = (2, 3)
    x = torch.ones(shape, dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post)
    y.backward(upstream(me, shape))
    expected = reduce_over_ranks(op, [upstream(r, shape) for r in range(n)], pre, post)
    assert torch.equal(x.grad, expected), (x.grad, expected)


def test_allreduce_grad_average_argument():
    """The deprecated average=False is op=Sum for the gradient too."""
    n, me = n_me()
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    with pytest.warns(DeprecationWarning):  # forward and backward both pass average on
        y = hvd.allreduce(x, average=False)
        y.backward(upstream(me, (4,)))
    assert torch.equal(x.grad, reduce_over_ranks(hvd.Sum, [upstream(r, (4,)) for r in range(n)], 1.0, 1.0))


@pytest.mark.parametrize("pre,post", SCALES)
@pytest.mark.parametrize("op_name", sorted(OPS))
def test_grouped_allreduce_grad(op_name, pre, post):
    n, me = n_me()
    op = OPS[op_name]
    shapes = [(3,), (2, 2)]
    xs = [torch.ones(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    ys = hvd.grouped_allreduce(xs, op=op, prescale_factor=pre, postscale_factor=post)
    # the second tensor's upstream gradient is negated: Min and Max pick other ranks for it
    torch.autograd.backward(ys, [upstream(me, shapes[0]), -upstream(me, shapes[1])])
    assert torch.equal(xs[0].grad, reduce_over_ranks(op, [upstream(r, shapes[0]) for r in range(n)], pre, post))
    assert torch.equal(xs[1].grad, reduce_over_ranks(op, [-upstream(r, shapes[1]) for r in range(n)], pre, post))


# ---- allgather ------------------------------------------------------------------

def test_allgather_grad():
    n, me = n_me()
    x = torch.ones(me + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x)
    total = n * (n + 1) // 2
    assert y.shape == (total, 2)
    y.backward(upstream(me, (total, 2)))
    mean = reduce_over_ranks(hvd.Average, [upstream(r, (total, 2)) for r in range(n)], 1.0, 1.0)
    offset = me * (me + 1) // 2
    assert torch.equal(x.grad, mean[offset:offset + me + 1])


def test_grouped_allgather_grad():
    n, me = n_me()
    xs = [torch.ones(me + 1, dtype=torch.float64, requires_grad=True),
          torch.ones(2, 3, dtype=torch.float64, requires_grad=True)]
    ys = hvd.grouped_allgather(xs)
    shapes = [(n * (n + 1) // 2,), (2 * n, 3)]
    torch.autograd.backward(ys, [upstream(me, s) for s in shapes])
    means = [reduce_over_ranks(hvd.Average, [upstream(r, s) for r in range(n)], 1.0, 1.0) for s in shapes]
    offset = me * (me + 1) // 2
    assert torch.equal(xs[0].grad, means[0][offset:offset + me + 1])
    assert torch.equal(xs[1].grad, means[1][2 * me:2 * me + 2])


# ---- broadcast ------------------------------------------------------------------

@pytest.mark.parametrize("root_of", [lambda n: 0, lambda n: n - 1], ids=["first", "last"])
def test_broadcast_grad(root_of):
    n, me = n_me()
    root = root_of(n)
    x = torch.full((3,), float(me), dtype=torch.float64, requires_grad=True)
    y = hvd.broadcast(x, root_rank=root)
    assert torch.equal(y.detach(), torch.full((3,), float(root), dtype=torch.float64))
    y.backward(upstream(me, (3,)))
    mean = reduce_over_ranks(hvd.Average, [upstream(r, (3,)) for r in range(n)], 1.0, 1.0)
    assert torch.equal(x.grad, mean if me == root else torch.zeros(3, dtype=torch.float64))


# ---- alltoall -------------------------------------------------------------------

def test_alltoall_grad_with_splits():
    n, me = n_me()
    splits = [r + 1 for r in range(n)]  # rank me sends r + 1 rows to rank r
    x = torch.ones(sum(splits), 2, dtype=torch.float64, requires_grad=True)
    y, received = hvd.alltoall(x, splits=splits)
    assert received.tolist() == [me + 1] * n
    y.backward(upstream(me, tuple(y.shape)))
    # the rows sent to rank r come back with r's upstream gradient for rank me's rows
    g = [upstream(r, (n * (r + 1), 2)) for r in range(n)]
    expected = torch.cat([g[r][me * (r + 1):(me + 1) * (r + 1)] for r in range(n)])
    assert torch.equal(x.grad, expected)


def test_alltoall_grad_equal_splits():
    n, me = n_me()
    x = torch.ones(2 * n, dtype=torch.float64, requires_grad=True)
    y = hvd.alltoall(x)
    y.backward(upstream(me, (2 * n,)))
    expected = torch.cat([upstream(r, (2 * n,))[2 * me:2 * me + 2] for r in range(n)])
    assert torch.equal(x.grad, expected)


# ---- reducescatter ----------------------------------------------------------------

def reducescatter_grad(op, n, shapes_of, pre, post):
    """Horovod's gradient of a reducescatter on n processes, whose process r
    got a part of shape shapes_of(r) and feeds upstream(r, that shape)."""
    factor = (n if op == hvd.Sum else 1) * pre * post
    return torch.cat([upstream(r, shapes_of(r)) * factor for r in range(n)])


@pytest.mark.parametrize("pre,post", SCALES)
@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_reducescatter_grad(op_name, pre, post):
    n, me = n_me()
    op = OPS[op_name]
    total = 2 * n + 1  # uneven: rank 0 keeps 3 rows, the others 2
    x = torch.ones(total, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
    part = (rows_of(me, n, total), 2)
    assert y.shape == part
    assert torch.equal(y.detach(), torch.full(part, (n if op == hvd.Sum else 1) * pre * post,
                                              dtype=torch.float64))
    y.backward(upstream(me, part))
    expected = reducescatter_grad(op, n, lambda r: (rows_of(r, n, total), 2), pre, post)
    assert torch.equal(x.grad, expected), (x.grad, expected)


def test_reducescatter_grad_sum_of_ones_is_the_set_size():
    """The case scripts meet first: backward of ones through a Sum."""
    n, me = n_me()
    x = torch.ones(n, dtype=torch.float64, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Sum).sum().backward()
    assert torch.equal(x.grad, torch.full((n,), float(n), dtype=torch.float64))


@pytest.mark.parametrize("pre,post", SCALES)
@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_grouped_reducescatter_grad(op_name, pre, post):
    n, me = n_me()
    op = OPS[op_name]
    xs = [torch.ones(n + 1, dtype=torch.float64, requires_grad=True),
          torch.ones(2 * n, 3, dtype=torch.float64, requires_grad=True)]
    ys = hvd.grouped_reducescatter(xs, op=op, prescale_factor=pre, postscale_factor=post)
    parts = [(rows_of(me, n, n + 1),), (2, 3)]
    assert [tuple(y.shape) for y in ys] == parts
    torch.autograd.backward(ys, [upstream(me, p) for p in parts])
    assert torch.equal(xs[0].grad, reducescatter_grad(op, n, lambda r: (rows_of(r, n, n + 1),), pre, post))
    assert torch.equal(xs[1].grad, reducescatter_grad(op, n, lambda r: (2, 3), pre, post))


@pytest.mark.min_size(3)
@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_reducescatter_grad_in_a_process_set(op_name):
    """The factor of a Sum is the size of the operation's process set."""
    n, me = n_me()
    op = OPS[op_name]
    ps = hvd.add_process_set([0, n - 1])
    try:
        if ps.included():
            x = torch.ones(4, dtype=torch.float64, requires_grad=True)
            y = hvd.reducescatter(x, op=op, process_set=ps, prescale_factor=3.0)
            y.backward(upstream(ps.rank(), (2,)))
            expected = reducescatter_grad(op, 2, lambda r: (2,), 3.0, 1.0)
            assert torch.equal(x.grad, expected)
        hvd.barrier()
    finally:
        assert hvd.remove_process_set(ps)


@pytest.mark.parametrize("op_name", ["Min", "Max", "Product"])
def test_reducescatter_grad_of_other_ops_is_an_error(op_name):
    """Horovod's reducescatter takes Sum and Average only, and so defines no
    other gradient: hvd, whose forward takes more ops, says so."""
    n, me = n_me()
    x = torch.ones(n, dtype=torch.float64, requires_grad=True)
    y = hvd.reducescatter(x, op=OPS[op_name])
    with pytest.raises(NotImplementedError, match=f"op=Sum and op=Average only \\(got {op_name}\\)"):
        y.sum().backward()
