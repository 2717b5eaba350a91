"""Gradients through the collectives, and SyncBatchNorm against BatchNorm on
the whole batch."""

import pytest
import torch

import hvd.torch as hvd


def n_me():
    return hvd.size(), hvd.rank()


def weight_for(r, shape):
    """The upstream gradient rank r feeds into backward."""
    return torch.full(shape, float(r + 1), dtype=torch.float64)


def mean_weight(n):
    return sum(range(1, n + 1)) / n


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_allreduce_grad(op):
    n, me = n_me()
    x = torch.arange(6, dtype=torch.float64).requires_grad_()
    y = hvd.allreduce(x, op=op, prescale_factor=2.0)
    (y * weight_for(me, (6,))).sum().backward()
    total = sum(range(1, n + 1)) * 2.0
    assert torch.allclose(x.grad, torch.full((6,), total / n if op == hvd.Average else total,
                                             dtype=torch.float64))


def test_grouped_allreduce_grad():
    n, me = n_me()
    xs = [torch.ones(3, dtype=torch.float64, requires_grad=True), torch.ones(2, 2, requires_grad=True)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    sum((y * (me + 1)).sum() for y in ys).backward()
    for x in xs:
        assert torch.allclose(x.grad, torch.full(x.shape, float(sum(range(1, n + 1))), dtype=x.dtype))


def test_allgather_grad():
    n, me = n_me()
    x = torch.ones(me + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x)
    assert y.shape == (sum(range(1, n + 1)), 2)
    # position-dependent upstream gradient, scaled by the rank
    g = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape) * (me + 1)
    (y * g).sum().backward()
    offset = sum(r + 1 for r in range(me))
    base = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape)[offset:offset + me + 1]
    # Horovod's convention: the gradient is averaged over the ranks
    assert torch.allclose(x.grad, base * mean_weight(n))


def test_grouped_allgather_grad():
    n, me = n_me()
    xs = [torch.ones(me + 1, dtype=torch.float64, requires_grad=True),
          torch.ones(2, 3, dtype=torch.float64, requires_grad=True)]
    ys = hvd.grouped_allgather(xs)
    sum((y * (me + 1)).sum() for y in ys).backward()
    for x in xs:
        assert torch.allclose(x.grad, torch.full(x.shape, mean_weight(n), dtype=torch.float64))


def test_broadcast_grad():
    n, me = n_me()
    root = n - 1
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    y = hvd.broadcast(x, root_rank=root)
    (y * weight_for(me, (4,))).sum().backward()
    expected = mean_weight(n) if me == root else 0.0
    assert torch.allclose(x.grad, torch.full((4,), expected, dtype=torch.float64))


def test_alltoall_grad():
    n, me = n_me()
    splits = [r + 1 for r in range(n)]  # rank me sends r + 1 rows to rank r
    x = torch.ones(sum(splits), 2, dtype=torch.float64, requires_grad=True)
    y, received = hvd.alltoall(x, splits=splits)
    assert received.tolist() == [me + 1] * n
    (y * (me + 1)).sum().backward()
    # rows sent to rank r come back with r's weight
    expected = torch.cat([torch.full((r + 1, 2), float(r + 1), dtype=torch.float64) for r in range(n)])
    assert torch.allclose(x.grad, expected)


def test_alltoall_grad_equal_split():
    n, me = n_me()
    x = torch.ones(2 * n, dtype=torch.float64, requires_grad=True)
    y = hvd.alltoall(x)
    (y * (me + 1)).sum().backward()
    expected = torch.cat([torch.full((2,), float(r + 1), dtype=torch.float64) for r in range(n)])
    assert torch.allclose(x.grad, expected)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter_grad(op):
    n, me = n_me()
    x = torch.ones(2 * n + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.reducescatter(x, op=op)
    (y * (me + 1)).sum().backward()
    rows = [2 + (1 if r < 1 else 0) for r in range(n)]
    expected = torch.cat([torch.full((rows[r], 2), float(r + 1), dtype=torch.float64) for r in range(n)])
    if op == hvd.Average:
        expected = expected / n
    assert torch.allclose(x.grad, expected)


def test_grouped_reducescatter_grad():
    n, me = n_me()
    xs = [torch.ones(n, dtype=torch.float64, requires_grad=True),
          torch.ones(n, 2, dtype=torch.float64, requires_grad=True)]
    ys = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    sum((y * (me + 1)).sum() for y in ys).backward()
    for x in xs:
        expected = torch.cat([torch.full((1,) + tuple(x.shape[1:]), float(r + 1), dtype=torch.float64)
                              for r in range(n)])
        assert torch.allclose(x.grad, expected)


# ---- SyncBatchNorm ------------------------------------------------------------------

def local_slice(total, n, me):
    per = total // n
    return slice(me * per, (me + 1) * per)


@pytest.mark.parametrize("dims", [2, 3, 4])
def test_sync_batch_norm_matches_full_batch(dims):
    n, me = n_me()
    torch.manual_seed(7)  # the same full batch on every rank
    channels = 3
    shape = {2: (4 * n, channels), 3: (2 * n, channels, 5), 4: (2 * n, channels, 3, 2)}[dims]
    full = torch.randn(shape, dtype=torch.float64) * 3 + 1
    upstream = torch.randn(shape, dtype=torch.float64)
    sl = local_slice(shape[0], n, me)

    ref = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d}[dims](channels)
    sync = hvd.SyncBatchNorm(channels)
    ref.double()
    sync.double()
    with torch.no_grad():
        for bn in (ref, sync):
            bn.weight.copy_(torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64))
            bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64))

    x_full = full.clone().requires_grad_()
    y_full = ref(x_full)
    (y_full * upstream).sum().backward()

    x = full[sl].clone().requires_grad_()
    y = sync(x)
    (y * upstream[sl]).sum().backward()

    assert torch.allclose(y, y_full[sl], atol=1e-10)
    assert torch.allclose(x.grad, x_full.grad[sl], atol=1e-10)
    assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-10)
    assert torch.allclose(sync.running_var, ref.running_var, atol=1e-10)
    assert int(sync.num_batches_tracked) == 1
    # parameter gradients are local; summed over ranks they are the full batch's
    assert torch.allclose(hvd.allreduce(sync.weight.grad, op=hvd.Sum), ref.weight.grad, atol=1e-10)
    assert torch.allclose(hvd.allreduce(sync.bias.grad, op=hvd.Sum), ref.bias.grad, atol=1e-10)

    # eval mode: plain batch norm with the running statistics
    sync.eval()
    ref.eval()
    assert torch.allclose(sync(full[sl]), ref(full[sl]), atol=1e-10)


def test_sync_batch_norm_float32_and_no_affine():
    n, me = n_me()
    torch.manual_seed(3)
    full = torch.randn(2 * n, 4, 3)
    sl = local_slice(2 * n, n, me)
    ref = torch.nn.BatchNorm1d(4, affine=False, momentum=None)
    sync = hvd.SyncBatchNorm(4, affine=False, momentum=None)
    x_full = full.clone().requires_grad_()
    ref(x_full).pow(2).sum().backward()
    x = full[sl].clone().requires_grad_()
    out = sync(x)
    out.pow(2).sum().backward()
    assert torch.allclose(out, ref(full)[sl].detach(), atol=1e-5)
    assert torch.allclose(x.grad, x_full.grad[sl], atol=1e-5)


def test_sync_batch_norm_rejects_1d_input():
    with pytest.raises(ValueError, match="expected at least 2D input"):
        hvd.SyncBatchNorm(3)(torch.ones(3))
