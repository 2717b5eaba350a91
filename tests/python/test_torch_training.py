"""DistributedOptimizer and the broadcast helpers: N workers on slices of a
batch train exactly like one worker on the whole batch."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import hvd.torch as hvd

BATCH = 12  # divisible by 1, 2, 3 and 4 workers


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def make_data(steps, seed=123):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(BATCH, 8, generator=g), torch.randint(0, 4, (BATCH,), generator=g)) for _ in range(steps)]


def shard(t):
    per = t.shape[0] // hvd.size()
    return t[hvd.rank() * per:(hvd.rank() + 1) * per]


def params_of(model):
    return [p.detach().clone() for p in model.parameters()]


def assert_params_close(a, b, atol=1e-5):
    for x, y in zip(a, b):
        assert torch.allclose(x, y, atol=atol, rtol=1e-5), (x - y).abs().max()


def reference_training(opt_factory, steps, data):
    """One worker, whole batches, plain optimizer."""
    model = make_model()
    opt = opt_factory(model.parameters())
    for x, y in data[:steps]:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return params_of(model), opt


OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_distributed_matches_single_worker(name):
    steps, data = 4, make_data(4)
    expected, _ = reference_training(OPTIMIZERS[name], steps, data)

    model = make_model()
    opt = hvd.DistributedOptimizer(OPTIMIZERS[name](model.parameters()), named_parameters=model.named_parameters())
    assert isinstance(opt, type(OPTIMIZERS[name]([torch.nn.Parameter(torch.ones(1))])))
    for x, y in data[:steps]:
        opt.zero_grad()
        F.cross_entropy(model(shard(x)), shard(y)).backward()
        opt.step()
    assert_params_close(params_of(model), expected)


@pytest.mark.parametrize("compression", [hvd.Compression.none, hvd.Compression.fp16])
def test_distributed_options(compression):
    steps, data = 3, make_data(3, seed=5)
    expected, _ = reference_training(OPTIMIZERS["sgd"], steps, data)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=compression,
                                   gradient_predivide_factor=2.0)
    for x, y in data[:steps]:
        opt.zero_grad()
        F.cross_entropy(model(shard(x)), shard(y)).backward()
        opt.step()
    atol = 1e-5 if compression is hvd.Compression.none else 2e-3
    assert_params_close(params_of(model), expected, atol=atol)


@pytest.mark.parametrize("groups", [1, 2, "list"])
def test_distributed_groups(groups):
    steps, data = 3, make_data(3, seed=9)
    expected, _ = reference_training(OPTIMIZERS["sgd"], steps, data)
    model = make_model()
    if groups == "list":
        groups = [[model[0].weight, model[2].weight]]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=groups)
    for x, y in data[:steps]:
        opt.zero_grad()
        F.cross_entropy(model(shard(x)), shard(y)).backward()
        opt.step()
    assert_params_close(params_of(model), expected)


def test_distributed_sum_op():
    data = make_data(1, seed=2)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    x, y = data[0]
    F.cross_entropy(model(shard(x)), shard(y)).backward()
    opt.synchronize()
    summed = [p.grad.clone() for p in model.parameters()]
    ref = make_model()
    F.cross_entropy(ref(x), y).backward()
    # a sum of per-shard mean losses is size() times the full-batch mean
    for s, p in zip(summed, ref.parameters()):
        assert torch.allclose(s, p.grad * hvd.size(), atol=1e-5)
    with opt.skip_synchronize():
        opt.step()


def test_backward_passes_per_step_accumulates():
    passes = 3
    data = make_data(passes, seed=11)
    # reference: one step on the mean of the accumulated full-batch gradients, times passes
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in data:
        F.cross_entropy(ref(x), y).backward()
    ref_opt.step()

    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=passes)
    for x, y in data:
        F.cross_entropy(model(shard(x)), shard(y)).backward()
    opt.step()
    assert_params_close(params_of(model), params_of(ref))

    # one pass too many before step() is a misuse, as in Horovod
    opt.zero_grad()
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match="backward_passes_per_step"):
            for x, y in data + data[:1]:
                F.cross_entropy(model(shard(x)), shard(y)).backward()
        # drain the reductions that were started
        opt.synchronize()


def test_unused_parameter_still_reduced():
    model = make_model()
    extra = torch.nn.Linear(2, 2)
    params = list(model.named_parameters()) + [("extra." + n, p) for n, p in extra.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.1), named_parameters=params)
    x, y = make_data(1)[0]
    loss = F.cross_entropy(model(shard(x)), shard(y))
    if hvd.rank() == 0:  # only rank 0 uses `extra`
        loss = loss + extra(torch.ones(1, 2)).sum()
    loss.backward()
    opt.step()
    expected = torch.ones(2, 1).expand(2, 2) / hvd.size()
    assert torch.allclose(extra.weight.grad, expected)


def test_synchronize_then_step_warns_without_skip():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = make_data(1)[0]
    F.cross_entropy(model(shard(x)), shard(y)).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()
    F.cross_entropy(model(shard(x)), shard(y)).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()


@pytest.mark.min_size(2)
def test_zero_grad_before_step_is_an_error():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = make_data(1)[0]
    F.cross_entropy(model(shard(x)), shard(y)).backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()


def test_named_parameters_checks():
    model = make_model()
    params = list(model.named_parameters())
    with pytest.raises(ValueError, match="must be unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("same", p) for _, p in params])
    with pytest.raises(ValueError, match="sequence of tuples"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[p for _, p in params])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=params[:1])
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)


def test_without_named_parameters():
    steps, data = 2, make_data(2, seed=4)
    expected, _ = reference_training(OPTIMIZERS["momentum"], steps, data)
    model = make_model()
    opt = hvd.DistributedOptimizer(OPTIMIZERS["momentum"](model.parameters()))
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(shard(x)), shard(y)).backward()
        opt.step()
    assert_params_close(params_of(model), expected)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients(sparse_as_dense):
    def build():
        torch.manual_seed(0)
        return torch.nn.ModuleDict({"emb": torch.nn.Embedding(20, 4, sparse=True), "out": torch.nn.Linear(4, 3)})

    def loss_of(m, idx, y):
        return F.cross_entropy(m["out"](m["emb"](idx).mean(1)), y)

    g = torch.Generator().manual_seed(8)
    idx = torch.randint(0, 20, (BATCH, 5), generator=g)
    y = torch.randint(0, 3, (BATCH,), generator=g)
    ref = build()
    loss_of(ref, idx, y).backward()
    torch.optim.SGD(ref.parameters(), lr=0.5).step()

    model = build()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), sparse_as_dense=sparse_as_dense)
    loss_of(model, shard(idx), shard(y)).backward()
    assert model["emb"].weight.grad.is_sparse
    opt.step()
    assert_params_close(params_of(model), params_of(ref))


# ---- broadcast helpers ----------------------------------------------------------------

def test_broadcast_parameters_makes_models_identical():
    model = make_model(seed=100 + hvd.rank())
    model.add_module("bn", torch.nn.BatchNorm1d(4))
    with torch.no_grad():
        model.bn.running_mean.fill_(hvd.rank())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    ref = make_model(seed=100)
    for p, q in zip(model[:3].parameters(), ref.parameters()):
        assert torch.equal(p, q)
    assert torch.equal(model.bn.running_mean, torch.zeros(4))
    gathered = hvd.allgather(torch.cat([p.detach().reshape(1, -1) for p in model.parameters()], 1))
    assert all(torch.equal(gathered[0], g) for g in gathered)


def test_broadcast_named_parameters_and_list():
    model = make_model(seed=200 + hvd.rank())
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=hvd.size() - 1)
    ref = make_model(seed=200 + hvd.size() - 1)
    assert_params_close(params_of(model), params_of(ref), atol=0)
    model = make_model(seed=300 + hvd.rank())
    hvd.broadcast_parameters(list(model.parameters()), root_rank=0)
    assert_params_close(params_of(model), params_of(make_model(seed=300)), atol=0)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_broadcast_optimizer_state(name):
    # differently seeded models, optimizers with different state and options
    model = make_model(seed=hvd.rank())
    opt = OPTIMIZERS[name](model.parameters())
    for group in opt.param_groups:
        group["lr"] = 0.1 * (hvd.rank() + 1)
    x, y = make_data(1, seed=50 + hvd.rank())[0]
    F.cross_entropy(model(x), y).backward()
    opt.step()

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    mine = opt.state_dict()
    root = hvd.broadcast_object(mine, root_rank=0)
    assert [g["lr"] for g in mine["param_groups"]] == [g["lr"] for g in root["param_groups"]]
    assert mine["param_groups"][0]["lr"] == pytest.approx(0.1)
    assert len(mine["state"]) == len(root["state"])
    for pid, state in mine["state"].items():
        for key, value in state.items():
            other = root["state"][pid][key]
            if torch.is_tensor(value):
                assert torch.equal(value, other), (pid, key)
            else:
                assert value == other
    # identical from here on: the next steps keep every rank in agreement
    model2 = make_model(seed=1000 + hvd.rank())
    model2.load_state_dict(model.state_dict())
    opt2 = OPTIMIZERS[name](model2.parameters())
    opt2.load_state_dict(opt.state_dict())
    dopt = hvd.DistributedOptimizer(opt2, named_parameters=model2.named_parameters())
    dopt.load_state_dict(opt.state_dict())
    for x, y in make_data(2, seed=77):
        dopt.zero_grad()
        F.cross_entropy(model2(shard(x)), shard(y)).backward()
        dopt.step()
    gathered = hvd.allgather(torch.cat([p.detach().reshape(1, -1) for p in model2.parameters()], 1))
    assert all(torch.equal(gathered[0], g) for g in gathered)


def test_broadcast_optimizer_state_fresh_optimizer():
    model = make_model(seed=hvd.rank())
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.001 * (hvd.rank() + 1)),
                                   named_parameters=model.named_parameters())
    before = params_of(model)
    hvd.broadcast_optimizer_state(opt, root_rank=0)  # creates the state without reducing anything
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001)
    assert len(opt.state_dict()["state"]) == len(list(model.parameters()))
    assert_params_close(params_of(model), before, atol=0)
    assert all(p.grad is None for p in model.parameters())


# ---- join -------------------------------------------------------------------------

def test_join_with_uneven_batches():
    """Rank r has r + 2 batches; ranks that run out join and the others keep
    training without hanging."""
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    data = make_data(hvd.rank() + 2, seed=31 + hvd.rank())
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    last = hvd.join()
    assert last == hvd.size() - 1
    # after join everyone can keep using hvd
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    gathered = hvd.allgather(torch.cat([p.detach().reshape(1, -1) for p in model.parameters()], 1))
    assert all(torch.equal(gathered[0], g) for g in gathered)
