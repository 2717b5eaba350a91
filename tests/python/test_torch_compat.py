"""What Horovod scripts rely on beyond the collectives' values:
broadcast_optimizer_state with parameters that have no gradient (and
Horovod's model= argument), and sparse gradients reduced without torch's
warnings."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import hvd.torch as hvd


class WithIndex(torch.nn.Module):
    """A model that keeps tensors without gradients as parameters: a float
    one frozen, and an index (integers cannot require a gradient)."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = torch.nn.Linear(4, 3)
        self.frozen = torch.nn.Parameter(torch.full((2,), float(seed)), requires_grad=False)
        self.index = torch.nn.Parameter(torch.arange(3) + seed, requires_grad=False)
        self.out = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x))[:, self.index - self.index[0]] * self.frozen[0])


OPTIMIZERS = {
    "sgd_momentum": lambda ps, r: torch.optim.SGD(ps, lr=0.1 * (r + 1), momentum=0.9),
    "adam": lambda ps, r: torch.optim.Adam(ps, lr=0.01 * (r + 1)),
    "rmsprop": lambda ps, r: torch.optim.RMSprop(ps, lr=0.01 * (r + 1), momentum=0.5),
}


def grads_of(model):
    return {n: (None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}


def assert_same_state(mine, root):
    """Every option and every state entry equal, tensors exactly."""
    assert mine["param_groups"] == root["param_groups"]
    assert sorted(mine["state"]) == sorted(root["state"])
    for pid, state in mine["state"].items():
        assert sorted(state) == sorted(root["state"][pid])
        for key, value in state.items():
            other = root["state"][pid][key]
            if torch.is_tensor(value):
                assert torch.equal(value.to_dense() if value.is_sparse else value,
                                   other.to_dense() if other.is_sparse else other), (pid, key)
            else:
                assert value == other, (pid, key)


@pytest.mark.parametrize("distributed", [False, True], ids=["plain", "distributed"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_broadcast_optimizer_state_with_gradless_parameters(name, distributed):
    me = hvd.rank()
    model = WithIndex(seed=1 + me)
    opt = OPTIMIZERS[name](model.parameters(), me)
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(10 + me))
    F.mse_loss(model(x), torch.zeros(5, 2)).backward()
    opt.step()
    before = grads_of(model)
    assert before["frozen"] is None and before["index"] is None

    hvd.broadcast_optimizer_state(opt, root_rank=0)

    mine = opt.state_dict()
    assert_same_state(mine, hvd.broadcast_object(mine, root_rank=0))
    assert mine["param_groups"][0]["lr"] == OPTIMIZERS[name]([torch.zeros(1)], 0).param_groups[0]["lr"]
    # state for the four trained tensors only; the gradients untouched, None where there was none
    assert len(mine["state"]) == 4
    after = grads_of(model)
    assert after["frozen"] is None and after["index"] is None
    for n, g in before.items():
        if g is not None:
            assert torch.equal(after[n], g), n
    # the parameters without gradients are not optimizer state: still this rank's own
    assert torch.equal(model.frozen, torch.full((2,), float(1 + me)))
    assert torch.equal(model.index, torch.arange(3) + 1 + me)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_broadcast_optimizer_state_fresh_with_gradless_parameters(name):
    """No step taken yet: the state is created on zero gradients, for the
    parameters that require one, and every .grad is None again after."""
    me = hvd.rank()
    model = WithIndex(seed=1 + me)
    opt = OPTIMIZERS[name](model.parameters(), me)
    weights = [p.detach().clone() for p in model.parameters()]

    hvd.broadcast_optimizer_state(opt, root_rank=0)

    mine = opt.state_dict()
    assert len(mine["state"]) == 4
    assert_same_state(mine, hvd.broadcast_object(mine, root_rank=0))
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))


def test_broadcast_optimizer_state_model_argument():
    """Horovod's model= marks sparse Embeddings: SGD's momentum for them is
    created sparse, and broadcast like the rest."""
    me = hvd.rank()
    torch.manual_seed(me)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 3, sparse=True), torch.nn.Linear(3, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (me + 1), momentum=0.9)

    hvd.broadcast_optimizer_state(opt, 0, model=model)

    assert opt.state[model[0].weight]["momentum_buffer"].is_sparse
    assert not opt.state[model[1].weight]["momentum_buffer"].is_sparse
    mine = opt.state_dict()
    assert mine["param_groups"][0]["lr"] == pytest.approx(0.1)
    assert_same_state(mine, hvd.broadcast_object(mine, root_rank=0))
    # and training goes on with sparse gradients
    model(torch.tensor([[1, 2]])).sum().backward()
    opt.step()


def test_broadcast_optimizer_state_rejects_a_model_that_is_not_one():
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="model must be a torch.nn.Module, not str"):
        hvd.broadcast_optimizer_state(opt, 0, model="net")


# ---- sparse gradients ----------------------------------------------------------

SPARSE_WARNING = r".*[Ss]parse invariant checks"


@pytest.fixture
def torch_warnings_as_errors():
    """torch's warnings raised every time (not once a process) and, for the
    sparse invariant checks, as errors."""
    always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=SPARSE_WARNING)
            yield
    finally:
        torch.set_warn_always(always)


def torch_version():
    return tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])


@pytest.mark.skipif(torch_version() < (2, 11), reason="this torch does not warn about sparse invariant checks")
def test_torch_warns_about_implicit_sparse_checks(torch_warnings_as_errors):
    """The filter below catches the warning on this torch: a plain
    sparse_coo_tensor raises it."""
    with pytest.raises(UserWarning, match=SPARSE_WARNING):
        torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.tensor([1.0, 2.0]), (2,))


@pytest.mark.parametrize("op_name", ["Sum", "Average"])
def test_sparse_allreduce_without_warnings(torch_warnings_as_errors, op_name):
    n, me = hvd.size(), hvd.rank()
    op = {"Sum": hvd.Sum, "Average": hvd.Average}[op_name]
    # rank r has rows r and r + 1 of a 5 x 2 tensor, valued n * (r + 1): exact divided by n
    dense = torch.zeros(5, 2, dtype=torch.float64)
    dense[me:me + 2] = n * (me + 1)
    reduced = hvd.synchronize(hvd.sparse_allreduce_async(dense.to_sparse(), name=f"sparse.{op_name}", op=op))
    assert reduced.is_sparse
    expected = torch.zeros(5, 2, dtype=torch.float64)
    for r in range(n):
        expected[r:r + 2] += (r + 1) * (1 if op == hvd.Average else n)
    assert torch.equal(reduced.to_dense(), expected)


def test_sparse_allreduce_rejects_indices_out_of_range():
    """The gathered indices are checked against this rank's size: indices
    another rank sent beyond it give an error, not a tensor that crashes
    later."""
    n, me = hvd.size(), hvd.rank()
    size = 2 if me == 0 else 4  # the others send row 3, beyond rank 0's 2 rows
    t = torch.zeros(size)
    t[0 if me == 0 else 3] = 1.0
    t = t.to_sparse()
    handle = hvd.sparse_allreduce_async(t, name="sparse.out_of_range", op=hvd.Sum)
    if me == 0:
        with pytest.raises(RuntimeError, match="(?i)index|size"):
            hvd.synchronize(handle)
    else:
        assert torch.equal(hvd.synchronize(handle).to_dense(), torch.tensor([1.0, 0.0, 0.0, n - 1.0]))


def test_sparse_embedding_training_without_warnings(torch_warnings_as_errors):
    """A DistributedOptimizer step on a sparse Embedding's gradient, from
    its state's creation on."""
    me = hvd.rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(12, 3, sparse=True), torch.nn.Linear(3, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, 0, model=model)
    idx = torch.tensor([[me, me + 1], [2 * me, 11]])
    model(idx).sum().backward()
    assert model[0].weight.grad.is_sparse
    opt.step()
    weights = torch.cat([p.detach().reshape(1, -1) for p in model.parameters()], 1)
    gathered = hvd.allgather(weights)
    assert all(torch.equal(gathered[0], g) for g in gathered)
