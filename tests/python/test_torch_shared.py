"""hvd.torch's shared tensors (hvd.shared_zeros, hvd.shared_like): CPU
tensors in shared tensor memory. An allreduce of shared tensors on every
rank of the node reads the others' in place (from 1 MiB); the results are
exact either way, also where only some ranks' tensors are shared."""

import gc

import pytest
import torch

import hvd.torch as hvd

MIB = 1 << 20


def rank_values(count, r, dtype=torch.float32):
    v = torch.arange(count, dtype=torch.int64) % 7 + 3 * r
    return v.to(dtype)


def summed(count, dtype=torch.float32):
    return sum(rank_values(count, r, torch.int64) for r in range(hvd.size())).to(dtype)


def test_shared_zeros_shape_dtype_zero():
    for size, dtype in [((3, 4), torch.float32), ((5,), torch.int64), ((2, 3, 7), torch.float16),
                        ((MIB // 2 + 3,), torch.bool), ((0, 4), torch.float32)]:
        t = hvd.shared_zeros(*size, dtype=dtype)
        assert t.shape == torch.Size(size) and t.dtype == dtype and t.is_contiguous()
        assert not t.any()
    t = hvd.shared_zeros([2, 2])
    assert t.shape == (2, 2) and t.dtype == torch.float32
    with pytest.raises(ValueError, match="negative dimension"):
        hvd.shared_zeros(2, -1)


def test_shared_like_copies():
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    y = hvd.shared_like(x)
    assert torch.equal(x, y) and x.data_ptr() != y.data_ptr()
    y.add_(1)
    assert x[0, 0] == 0  # a copy, not a view
    with pytest.raises(ValueError, match="CPU memory"):
        hvd.shared_like(torch.empty(1, device="meta"))


@pytest.mark.parametrize("count", [1000, MIB // 4 + 3, 3 * MIB + 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_allreduce_in_place_exact(count, dtype):
    t = hvd.shared_like(rank_values(count, hvd.rank(), dtype))
    ptr = t.data_ptr()
    hvd.allreduce_(t, op=hvd.Sum, name=f"shared.inplace.{count}.{dtype}")
    assert t.data_ptr() == ptr
    assert torch.equal(t, summed(count, dtype))


def test_allreduce_average_and_out_of_place():
    count = 2 * MIB + 1
    t = hvd.shared_like(rank_values(count, hvd.rank()))
    before = t.clone()
    out = hvd.allreduce(t, name="shared.outofplace")  # average
    assert torch.equal(out, summed(count) / hvd.size())
    assert torch.equal(t, before)
    hvd.allreduce_(t, name="shared.average")
    assert torch.equal(t, summed(count) / hvd.size())


def test_only_some_ranks_shared():
    count = MIB + 7
    x = rank_values(count, hvd.rank())
    t = hvd.shared_like(x) if hvd.rank() == 0 else x.clone()
    hvd.allreduce_(t, op=hvd.Sum, name="shared.mixed")
    assert torch.equal(t, summed(count))


def test_memory_freed_with_last_view():
    """A view keeps the memory alive; dropping every tensor frees it (its
    pages go back, the next allocation there reads as zeros)."""
    t = hvd.shared_zeros(MIB)
    view = t[10:20]
    t.fill_(5)
    del t
    gc.collect()
    assert torch.equal(view, torch.full((10,), 5.0))
    del view
    gc.collect()
    again = hvd.shared_zeros(MIB)
    assert not again.any()


def _train(shared, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 8))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), shared_gradients=shared)
    g = torch.Generator().manual_seed(hvd.rank())
    ptrs = []
    for _ in range(steps):
        x = torch.randn(16, 512, generator=g)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        ptrs.append([p.grad.data_ptr() for p in model.parameters()])
    return model, opt, ptrs


def test_distributed_optimizer_shared_gradients():
    """shared_gradients=True: the gradients stay in the same shared memory
    across steps (zero_grad zeroes them there, backward accumulates into
    them) and the weights are bit for bit those of the usual path; the
    2 MiB weight's gradient reads in place."""
    plain, _, _ = _train(False)
    model, opt, ptrs = _train(True)
    assert all(p == ptrs[0] for p in ptrs), "the shared gradients moved between steps"
    for p in model.parameters():
        assert p.grad is not None
    opt.zero_grad(set_to_none=True)
    if hvd.local_size() > 1:  # zeroed in place all the same
        assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    else:  # alone on its host: nobody to share with, the usual zero_grad
        assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    for a, b in zip(plain.parameters(), model.parameters()):
        assert torch.equal(a, b)
