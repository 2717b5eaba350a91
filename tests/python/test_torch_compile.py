"""torch.compile through hvd (hvd/torch/_library.py): compiled functions and
a compiled training step with DistributedOptimizer trace through hvd's
collectives without a graph break from hvd, compute what the eager code
computes, and fail with the eager errors. Needs torch >= 2.4."""

import os

import pytest
import torch
import torch.nn.functional as F

import hvd
import hvd.torch as hvt
from hvd.torch import _library

pytestmark = pytest.mark.skipif(
    not _library.SUPPORTED,
    reason=f"torch.compile through hvd needs torch >= 2.4 (torch.library.custom_op); this is torch "
           f"{torch.__version__}")

HVD_DIR = os.path.dirname(os.path.abspath(hvd.__file__))


def explain(fn, *args):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    return torch._dynamo.explain(fn)(*args)


def hvd_breaks(explanation):
    """The graph breaks that hvd's code caused: hvd in the reason
    (hvd._core.submit ...) or its frames on the break's stack. Dynamo's
    counters have the breaks explain() leaves out (those in a function it
    then runs eagerly, such as one inside torch's optimizer step)."""
    out = []
    for r in explanation.break_reasons:
        files = [f.filename for f in r.user_stack]
        if "hvd." in r.reason or any(os.path.abspath(f).startswith(HVD_DIR + os.sep) for f in files):
            out.append(f"{r.reason.strip().splitlines()[0]} at {files[-1:] or '?'}")
    out += [reason for reason in torch._dynamo.utils.counters["graph_break"] if "hvd." in reason]
    return out


def compiled(fn):
    """fn compiled through AOTAutograd (the fake implementations and autograd
    formulas) without generating code."""
    torch._dynamo.reset()
    return torch.compile(fn, backend="aot_eager")


def graph_ops(explanation):
    """The functions the graphs call, those of their subgraphs too (an
    autograd function's forward and backward)."""
    return [str(n.target) for g in explanation.graphs for m in g.modules() if isinstance(m, torch.fx.GraphModule)
            for n in m.graph.nodes if n.op == "call_function"]


def mine(shape=(2, 3)):
    """A float64 tensor that differs on every rank."""
    n = torch.tensor(shape).prod().item()
    return torch.arange(n, dtype=torch.float64).reshape(shape) * (hvt.rank() + 1)


def test_a_break_at_hvd_is_detected():
    # the handle API stays eager: Dynamo breaks at hvd._core, and hvd_breaks sees it
    def fn(x):
        return hvt.synchronize(hvt.allreduce_async(x, name="compile.async")) + 1

    breaks = hvd_breaks(explain(fn, mine()))
    assert breaks and "Attempted to call function marked as skipped" in breaks[0], breaks


def test_rank_and_size_are_constants():
    def fn(x):
        return x * hvt.rank() + hvt.size() + 10 * hvt.local_rank() + 100 * hvt.local_size()

    x = torch.ones(3)
    ex = explain(fn, x)
    assert ex.graph_break_count == 0, [r.reason for r in ex.break_reasons]
    assert ex.graph_count == 1
    assert torch.equal(compiled(fn)(x), fn(x))
    assert torch.equal(fn(x), torch.full((3,), hvt.rank() + hvt.size() + 10.0 * hvt.local_rank()
                                         + 100 * hvt.local_size()))


def collectives(x, y):
    n = hvt.size()
    s = hvt.allreduce(x, op=hvt.Sum, name="compile.sum")
    a = hvt.allreduce(x, prescale_factor=2.0, postscale_factor=0.5, name="compile.avg")
    g = hvt.grouped_allreduce([x, y], op=hvt.Max, name="compile.grouped")
    gathered = hvt.allgather(x, name="compile.gather")
    ga, gb = hvt.grouped_allgather([x, y], name="compile.grouped_gather")
    b = hvt.broadcast(y, root_rank=n - 1, name="compile.bcast")
    return s, a, g[0], g[1], gathered, ga, gb, b


def test_collectives_trace_into_one_graph():
    x, y = mine(), mine((4,))
    ex = explain(collectives, x, y)
    assert ex.graph_break_count == 0, [r.reason for r in ex.break_reasons]
    assert ex.graph_count == 1
    assert sorted(set(op for op in graph_ops(ex) if op.startswith("hvd."))) == [
        "hvd.allgather", "hvd.allreduce", "hvd.broadcast", "hvd.grouped_allgather", "hvd.grouped_allreduce"]


def test_collectives_compiled_equal_eager():
    n = hvt.size()
    x, y = mine(), mine((4,))
    got = compiled(collectives)(x, y)
    want = collectives(x, y)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)
    base = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    assert torch.equal(got[0], base * sum(range(1, n + 1)))
    assert torch.equal(got[2], base * n)
    assert torch.equal(got[4], torch.cat([base * (r + 1) for r in range(n)]))
    assert torch.equal(got[7], torch.arange(4, dtype=torch.float64) * n)


def test_inductor_compiles_the_collectives():
    x, y = mine(), mine((4,))
    torch._dynamo.reset()
    got = torch.compile(collectives)(x, y)
    for g, w in zip(got, collectives(x, y)):
        assert torch.equal(g, w), (g, w)


def grads_of(fn, *inputs):
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    outs = fn(*inputs)
    loss = sum((o * torch.arange(o.numel(), dtype=o.dtype).reshape(o.shape) * (hvt.rank() + 1)).sum()
               for o in outs)
    loss.backward()
    return [t.grad for t in inputs]


def test_gradients_compiled_equal_eager():
    x, y = mine(), mine((4,))
    got = grads_of(compiled(collectives), x, y)
    want = grads_of(collectives, x, y)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=0, atol=1e-12), (g, w)


def test_allgather_of_different_rows():
    n, me = hvt.size(), hvt.rank()
    # 2**rank rows: no rank's rows times the ranks is the sum (at 2 and 3 ranks)
    x = torch.full((2**me, 2), float(me))

    def fn(t):
        return hvt.allgather(t, name="compile.rows") * 2

    # traced for equal first dimensions: a clear error, not a wrong shape
    with pytest.raises(ValueError, match=r"traced for \d rows on each of the \d processes, but they sent "
                                         rf"{2**n - 1} rows in all"):
        compiled(fn)(x)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        ex = explain(fn, x)
        assert ex.graph_break_count == 0, [r.reason for r in ex.break_reasons]
        got = compiled(fn)(x)
    want = torch.cat([torch.full((2**r, 2), 2.0 * r) for r in range(n)])
    assert torch.equal(got, want)


def test_errors_are_the_eager_ones():
    def fn(t):
        return hvt.allreduce(t, name="compile.bad")

    bad = torch.ones(2, dtype=torch.complex64)
    with pytest.raises(ValueError) as eager_error:
        fn(bad)
    with pytest.raises(ValueError) as compiled_error:
        compiled(fn)(bad)
    assert str(eager_error.value) == "Tensor type torch.ComplexFloatTensor is not supported."
    assert str(compiled_error.value) == str(eager_error.value)

    with pytest.raises(ValueError, match="unknown reduce op 42"):
        compiled(lambda t: hvt.allreduce(t, op=42, name="compile.badop"))(torch.ones(2))


@pytest.mark.min_size(2)
def test_process_set_in_a_compiled_graph():
    ranks = list(range(1, hvt.size()))
    ps = hvt.add_process_set(ranks)
    try:
        if ps.included():
            x = torch.full((3,), float(hvt.rank() + 1))

            def fn(t):
                return hvt.allreduce(t, op=hvt.Sum, process_set=ps, name="compile.ps") + hvt.rank()

            ex = explain(fn, x)
            assert ex.graph_break_count == 0, [r.reason for r in ex.break_reasons]
            want = torch.full((3,), float(sum(r + 1 for r in ranks) + hvt.rank()))
            assert torch.equal(compiled(fn)(x), want)
    finally:
        hvt.remove_process_set(ps)


# ---- a training step ------------------------------------------------------------

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = torch.nn.Linear(4 * 4 * 4, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_training(seed=0):
    torch.manual_seed(seed)
    model = Net()
    opt = hvt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvt.broadcast_parameters(model.state_dict(), root_rank=0)

    def step(x, y):
        opt.zero_grad()
        out = model(x)
        # a collective in the forward pass too: the batch's mean output of every rank
        center = hvt.allreduce(out.mean(0), name="compile.center")
        loss = F.cross_entropy(out - center, y)
        loss.backward()
        opt.step()
        return loss

    return model, step


def batches(steps):
    g = torch.Generator().manual_seed(100 + hvt.rank())
    return [(torch.randn(4, 1, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(steps)]


def test_training_step_has_no_break_from_hvd():
    model, step = make_training()
    x, y = batches(1)[0]
    ex = explain(step, x, y)
    assert hvd_breaks(ex) == []
    # the breaks torch itself makes are seen (Tensor.backward())
    assert any("backward" in r.reason for r in ex.break_reasons), [r.reason for r in ex.break_reasons]
    assert "hvd.allreduce" in graph_ops(ex)


def test_training_step_compiled_equals_eager():
    data = batches(4)
    eager_model, eager_step = make_training()
    want = [eager_step(x, y).item() for x, y in data]

    model, step = make_training()
    step = compiled(step)
    # the second step recompiles torch's SGD.step (its momentum buffers exist now), no more
    got = [step(x, y).item() for x, y in data[:2]]
    with torch._dynamo.config.patch(error_on_recompile=True):
        got += [step(x, y).item() for x, y in data[2:]]
    assert got == pytest.approx(want, rel=1e-6)
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), name
        # every rank holds the same parameters
        assert torch.equal(hvt.allreduce(p.detach(), op=hvt.Max, name=f"compile.check.{name}"), p.detach())


def test_optimizer_synchronize_in_a_graph():
    # where Dynamo traces DistributedOptimizer.step() into a graph (torch 2.15
    # runs torch's optimizer wrapper eagerly), one operator waits for the
    # hooks' reductions and leaves them in the gradients the graph reads
    x, y = batches(1)[0]
    grads = []
    for way in ("eager", "compiled"):
        torch.manual_seed(0)
        model = Net()
        opt = hvt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=[(f"compile.sync.{way}.{n}", p)
                                                         for n, p in model.named_parameters()])
        F.cross_entropy(model(x), y).backward()
        if way == "eager":
            opt.synchronize()
        else:
            compiled(lambda: opt._hvd_traced_synchronize())()
        grads.append([p.grad.clone() for p in model.parameters()])
    for g, w in zip(*grads):
        assert torch.allclose(g, w, rtol=0, atol=1e-7)
    # averaged: the same on every rank
    assert torch.equal(hvt.allreduce(grads[1][0], op=hvt.Max, name="compile.sync.check"), grads[1][0])
