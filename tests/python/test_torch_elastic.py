"""hvd.elastic outside an elastic job (generation 0): the names, the
sampler's sharding and resumption, the states' commit, restore and sync,
and that run() re-raises what is not a reset. The resets themselves are
tests/test-elastic-*.sh."""

import pytest
import torch

import hvd.torch as hvd
from hvd import _core
from hvd.common.exceptions import HorovodInternalError


@pytest.mark.parametrize("name", "run State ObjectState TorchState ElasticSampler".split())
def test_elastic_names(name):
    assert hasattr(hvd.elastic, name), f"hvd.torch.elastic.{name} is missing"


def test_not_elastic():
    assert hvd.elastic.generation() == 0
    assert not hvd.elastic.sync_needed()
    hvd.elastic.ObjectState(x=1).check_host_updates()  # no-op: no allreduce, no interrupt


def test_sampler_resumes_without_repeating():
    n, size, rank = 20, hvd.size(), hvd.rank()
    s = hvd.elastic.ElasticSampler(list(range(n)), shuffle=True, seed=1)
    mine = list(s)
    assert len(mine) == (n + size - 1) // size
    every = hvd.allgather_object(mine)
    assert sorted(set(i for part in every for i in part)) == list(range(n))
    # the first 3 samples of every rank are done; the rest re-shards
    done = set(i for part in every for i in part[:3])
    s.load_state_dict({"epoch": 0, "processed_indices": done})
    rest = hvd.allgather_object(list(s))
    left = [i for part in rest for i in part]
    assert not done & set(left)
    assert sorted(set(left)) == sorted(set(range(n)) - done)
    s.set_epoch(1)
    assert s.processed_indices == set() and len(list(s)) == len(mine)


def test_object_state_commit_restore_sync():
    st = hvd.elastic.ObjectState(epoch=0, seen=[0, 0])
    st.epoch = 3
    st.seen[0] = 5
    st.commit()
    st.seen[1] = 9  # after the commit: not kept
    st.epoch = 4
    st.restore()
    assert st.epoch == 3 and st.seen == [5, 0]
    st.epoch = 10 + hvd.rank()
    st.save()
    st.sync()
    assert st.epoch == 10  # rank 0's


def test_torch_state_restore_and_sync():
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = hvd.elastic.ElasticSampler(list(range(8)))
    state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler, step=0)
    state.sync()
    w0 = model.weight.detach().clone()
    every = hvd.allgather(w0.unsqueeze(0))
    assert torch.equal(every, w0.unsqueeze(0).expand_as(every)), "sync did not take rank 0's weights"
    sampler.record_indices(list(sampler)[:1])
    state.step = 1
    state.commit()
    assert sampler.processed_indices == set(i for part in hvd.allgather_object(list(sampler.processed_indices))
                                            for i in part)
    with torch.no_grad():
        model.weight.add_(1.0)
    state.step = 2
    state.restore()
    assert torch.equal(model.weight, w0) and state.step == 1


def test_run_reraises_what_is_not_a_reset():
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(1)
        raise HorovodInternalError("not a reset")

    with pytest.raises(HorovodInternalError, match="not a reset"):
        train(hvd.elastic.ObjectState(x=0))
    assert calls == [1]
    assert _core.ERESET == -1012
