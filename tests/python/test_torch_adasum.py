"""op=hvd.Adasum: allreduce, grouped_allreduce and DistributedOptimizer
against a float64 reference computed here with the pairwise formula in
Horovod's order (pairs r, r ^ 1 first, then pairs of pairs ...).

Runs with 2 and 3 processes in the suite, and with 4 in a run of this file
alone (run-np4-adasum.sh). With a number of processes that is not a power of
two only the error and process sets of a power-of-two size are tested.
"""

import math
import sys

import pytest
import torch

import hvd.torch as hvd

pytestmark = pytest.mark.min_size(2)

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
# How close the reduction in a dtype comes to the float64 reference: its
# inputs are the same, its levels round to the dtype.
TOL = {
    torch.float16: dict(rtol=4e-3, atol=4e-3),
    torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
    torch.float32: dict(rtol=1e-6, atol=1e-6),
    torch.float64: dict(rtol=1e-13, atol=1e-13),
}


# hvd is initialized before collection (conftest.py)
POW2 = hvd.size() & (hvd.size() - 1) == 0
needs_pow2 = pytest.mark.skipif(not POW2, reason="Adasum needs a power-of-two number of processes")


def pair(a, b):
    """Horovod's pairwise Adasum of two float64 vectors."""
    guard = math.sqrt(sys.float_info.min)
    dot, na, nb = float(a @ b), float(a @ a), float(b @ b)
    ac = 1.0 - dot / na * 0.5 if na >= guard else 1.0
    bc = 1.0 - dot / nb * 0.5 if nb >= guard else 1.0
    return ac * a + bc * b


def reference(per_rank):
    """Adasum of one tensor per rank, in float64, in Horovod's order."""
    level = [t.double().reshape(-1) for t in per_rank]
    while len(level) > 1:
        level = [pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0].reshape(per_rank[0].shape)


def same_everywhere(t, process_set=hvd.global_process_set):
    """Whether every rank (of the set) holds exactly these bits."""
    flat = t.reshape(1, -1).contiguous()
    bits = flat.view(torch.int16) if t.element_size() == 2 else flat.view(torch.int32 if t.element_size() == 4
                                                                          else torch.int64)
    everyone = hvd.allgather(bits, process_set=process_set)
    return all(torch.equal(row, bits[0]) for row in everyone)


def random_inputs(shape, dtype, seed, n):
    """The inputs of all n ranks (every rank can make every rank's)."""
    return [torch.randn(shape, generator=torch.Generator().manual_seed(seed + r), dtype=torch.float64).to(dtype)
            for r in range(n)]


@needs_pow2
@pytest.mark.parametrize("dtype", FLOATS)
def test_orthogonal_add(dtype):
    n, me = hvd.size(), hvd.rank()
    x = torch.zeros(2 * n, dtype=dtype)
    x[me] = me + 1
    out = hvd.allreduce(x, op=hvd.Adasum)
    expected = torch.zeros(2 * n, dtype=dtype)
    expected[:n] = torch.arange(1, n + 1, dtype=dtype)
    assert out.dtype == dtype
    assert torch.equal(out, expected)
    assert torch.equal(x[me], torch.tensor(me + 1, dtype=dtype))  # the input is untouched


@needs_pow2
@pytest.mark.parametrize("dtype", FLOATS)
def test_parallel_average(dtype):
    n, me = hvd.size(), hvd.rank()
    v = torch.tensor([1.0, -2.0, 0.5, 4.0, 3.0], dtype=dtype)
    # the same vector everywhere: exactly itself
    assert torch.equal(hvd.allreduce(v, op=hvd.Adasum), v)
    # (r + 1) v: the average, (n + 1) / 2 v
    out = hvd.allreduce(v * (me + 1), op=hvd.Adasum)
    torch.testing.assert_close(out, v * ((n + 1) / 2), **TOL[dtype])
    assert same_everywhere(out)


@needs_pow2
@pytest.mark.parametrize("dtype", FLOATS)
def test_random_against_reference(dtype):
    n, me = hvd.size(), hvd.rank()
    inputs = random_inputs((7, 11), dtype, 100, n)
    out = hvd.allreduce(inputs[me], op=hvd.Adasum, name=f"adasum.random.{dtype}")
    expected = reference(inputs)
    torch.testing.assert_close(out.double(), expected, **TOL[dtype])
    assert same_everywhere(out)
    if dtype == torch.float64:
        # Horovod's formula, not a plain sum or average
        assert not torch.allclose(out, sum(inputs)) and not torch.allclose(out, sum(inputs) / n)


@needs_pow2
@pytest.mark.parametrize("dtype", FLOATS)
def test_grouped_each_tensor_its_own_coefficients(dtype):
    """Sizes that leave some ranks no element of a tensor (1, 3 at 4
    ranks), an empty one and a scalar; each tensor is reduced on its own."""
    n, me = hvd.size(), hvd.rank()
    shapes = [(1,), (3,), (0,), (), (257,), (4, 5)]
    inputs = [random_inputs(s, dtype, 1000 * i, n) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce([t[me] for t in inputs], op=hvd.Adasum)
    for per_rank, out in zip(inputs, outs):
        assert out.shape == per_rank[0].shape and out.dtype == dtype
        torch.testing.assert_close(out.double(), reference(per_rank), **TOL[dtype])
        assert same_everywhere(out)


@needs_pow2
def test_grouped_mixed_dtypes_and_in_place():
    n, me = hvd.size(), hvd.rank()
    a = random_inputs((6,), torch.float32, 7, n)
    b = random_inputs((9,), torch.float64, 8, n)
    c = random_inputs((5,), torch.float32, 9, n)
    mine = [a[me].clone(), b[me].clone(), c[me].clone()]
    outs = hvd.grouped_allreduce_(mine, op=hvd.Adasum)
    assert all(o is m for o, m in zip(outs, mine))
    for per_rank, out in zip((a, b, c), outs):
        torch.testing.assert_close(out.double(), reference(per_rank), **TOL[out.dtype])


@needs_pow2
def test_scale_factors():
    n, me = hvd.size(), hvd.rank()
    x = torch.zeros(n, dtype=torch.float64)
    x[me] = me + 1
    out = hvd.allreduce(x, op=hvd.Adasum, prescale_factor=4.0, postscale_factor=0.25)
    assert torch.equal(out, torch.arange(1, n + 1, dtype=torch.float64))
    out = hvd.allreduce(x, op=hvd.Adasum, postscale_factor=3.0)
    assert torch.equal(out, 3 * torch.arange(1, n + 1, dtype=torch.float64))


@needs_pow2
def test_async_waited_in_any_order():
    """Two reductions waited for in opposite orders on odd and even ranks:
    waiting for one advances the other, so neither waits forever."""
    n, me = hvd.size(), hvd.rank()
    xs = random_inputs((33,), torch.float32, 50, n)
    ys = random_inputs((17,), torch.float32, 60, n)
    hx = hvd.allreduce_async(xs[me], op=hvd.Adasum, name="adasum.order.x")
    hy = hvd.allreduce_async(ys[me], op=hvd.Adasum, name="adasum.order.y")
    if me % 2:
        y, x = hvd.synchronize(hy), hvd.synchronize(hx)
    else:
        x, y = hvd.synchronize(hx), hvd.synchronize(hy)
    torch.testing.assert_close(x.double(), reference(xs), **TOL[torch.float32])
    torch.testing.assert_close(y.double(), reference(ys), **TOL[torch.float32])
    h = hvd.allreduce_async(xs[me], op=hvd.Adasum, name="adasum.order.x")
    while not hvd.poll(h):
        pass
    assert torch.equal(hvd.synchronize(h), x)


@needs_pow2
def test_gradient_is_adasum_of_gradients():
    x = torch.arange(4, dtype=torch.float32, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Adasum)
    (y * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((4,), 2.0))  # the same gradient everywhere: itself


@needs_pow2
def test_ranks_that_disagree_get_an_error():
    me = hvd.rank()
    with pytest.raises(hvd.HorovodInternalError, match=r"Adasum 'adasum.mismatch': rank \d sent \[float32 x "
                                                       r"\d\], rank \d sent \[float32 x \d\]"):
        hvd.allreduce(torch.ones(3 + (me == 1)), op=hvd.Adasum, name="mismatch")
    # the job goes on
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Adasum), torch.ones(2))


def test_bad_input():
    for bad in (torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.bool)):
        with pytest.raises(ValueError, match="Adasum reduces float16, bfloat16, float32 and float64"):
            hvd.allreduce(bad, op=hvd.Adasum)
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        hvd.grouped_allreduce_async_([torch.ones(2), "x"], op=hvd.Adasum)
    with pytest.raises(ValueError, match="Adasum does not reduce sparse tensors"):
        hvd.grouped_allreduce_([torch.ones(2).to_sparse()], op=hvd.Adasum)


@pytest.mark.skipif(POW2, reason="the job's size is a power of two")
def test_not_a_power_of_two():
    n = hvd.size()
    message = f"Adasum needs a power-of-two number of processes, but the job has {n}"
    with pytest.raises(NotImplementedError, match=message):
        hvd.allreduce(torch.ones(4), op=hvd.Adasum)
    with pytest.raises(NotImplementedError, match=message):
        hvd.grouped_allreduce([torch.ones(4), torch.ones(2)], op=hvd.Adasum)
    model = torch.nn.Linear(2, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    model(torch.ones(1, 2)).sum().backward()
    with pytest.raises(NotImplementedError, match=message):
        opt.step()
    # the job goes on
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(n)))


@pytest.mark.min_size(3)
def test_process_set_of_two():
    """Over a process set of a power-of-two size, in a job of any size."""
    me = hvd.rank()
    ps = hvd.add_process_set([0, 2])
    try:
        if ps.included():
            inputs = random_inputs((10,), torch.float64, 77, 2)
            out = hvd.allreduce(inputs[ps.rank()], op=hvd.Adasum, process_set=ps)
            torch.testing.assert_close(out, reference(inputs), **TOL[torch.float64])
            assert same_everywhere(out, ps)
        else:
            with pytest.raises(ValueError, match=f"rank {me}\\) is not part of"):
                hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=ps)
    finally:
        assert hvd.remove_process_set(ps)


@pytest.mark.min_size(4)
def test_process_set_of_three():
    ps = hvd.add_process_set([0, 1, 2])
    try:
        if ps.included():
            with pytest.raises(NotImplementedError, match=r"ranks=\[0, 1, 2\].* has 3"):
                hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=ps)
    finally:
        assert hvd.remove_process_set(ps)


# ---- DistributedOptimizer(op=Adasum) ---------------------------------------------------


@needs_pow2
def test_optimizer_reduces_the_change_of_the_weights():
    """One step by hand: each rank's SGD-with-momentum change of the weights,
    reduced with Adasum, added to the weights before the step."""
    n, me = hvd.size(), hvd.rank()
    torch.manual_seed(5)
    model = torch.nn.Linear(3, 2)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)

    def local_change(r):
        local = torch.nn.Linear(3, 2)
        local.load_state_dict({k: v.clone() for k, v in before.items()})
        sgd = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.9)
        data = torch.randn(4, 3, generator=torch.Generator().manual_seed(40 + r))
        local(data).pow(2).sum().backward()
        sgd.step()
        return {k: v.detach() - before[k] for k, v in local.named_parameters()}

    data = torch.randn(4, 3, generator=torch.Generator().manual_seed(40 + me))
    model(data).pow(2).sum().backward()
    opt.step()
    changes = [local_change(r) for r in range(n)]
    for k, v in model.named_parameters():
        expected = before[k].double() + reference([c[k] for c in changes])
        torch.testing.assert_close(v.detach().double(), expected, rtol=1e-6, atol=1e-6)
        assert same_everywhere(v.detach())
    opt.synchronize()  # nothing to do, as in Horovod
    with pytest.raises(AssertionError, match="not supported when using Adasum"):
        with opt.skip_synchronize():
            pass


@needs_pow2
@pytest.mark.parametrize("compression", [hvd.Compression.none, hvd.Compression.fp16])
def test_training_converges(compression):
    """Linear regression, each rank on its own shard: the weights reach the
    true ones and stay the same on every rank (also with the changes sent
    as float16)."""
    me = hvd.rank()
    true_w = torch.tensor([[2.0, -3.0, 0.5]])
    gen = torch.Generator().manual_seed(300 + me)
    x = torch.randn(64, 3, generator=gen)
    y = x @ true_w.t() + 1.0 + 0.01 * torch.randn(64, 1, generator=gen)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   compression=compression)
    first = None
    for step in range(150):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 1e-3 < first
    torch.testing.assert_close(model.weight.detach(), true_w, rtol=0, atol=0.02)
    torch.testing.assert_close(model.bias.detach(), torch.tensor([1.0]), rtol=0, atol=0.02)
    assert same_everywhere(model.weight.detach()) and same_everywhere(model.bias.detach())
