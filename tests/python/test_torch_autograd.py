"""SyncBatchNorm against BatchNorm on the whole batch, forward and backward.
(The collectives' own gradients are in test_torch_grads.py.)"""

import pytest
import torch

import hvd.torch as hvd


def n_me():
    return hvd.size(), hvd.rank()


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
