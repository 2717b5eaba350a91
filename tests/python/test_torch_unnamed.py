"""Blocking collectives called without a name: every call of a kind takes
the same name, <kind>.noname.sync (a counted name is new each call and is
negotiated each time); shapes and dtypes may change from call to call,
results stay exact, a disagreement between ranks is still an error, and
asynchronous calls keep their counted names."""

import pytest
import torch

import hvd.torch as hvd
from hvd.common import ops


def test_each_kind_repeats_one_name(submitted):
    n, me = hvd.size(), hvd.rank()
    total = float(sum(range(n)))
    for length in (3, 5):  # another shape under the same name
        x = torch.full((n * length,), float(me))
        assert torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full((n * length,), total))
        assert torch.equal(hvd.allreduce_(x.clone(), op=hvd.Sum), torch.full((n * length,), total))
        outs = hvd.grouped_allreduce([x, x[:2].double()], op=hvd.Sum)
        assert torch.equal(outs[1], torch.full((2,), total, dtype=torch.float64))
        assert torch.equal(hvd.broadcast(x + 1, root_rank=n - 1), torch.full((n * length,), float(n)))
        assert hvd.broadcast_(x.clone(), root_rank=0).tolist() == [0.0] * (n * length)
        gathered = hvd.allgather(x[:length])
        assert gathered.tolist() == [float(r) for r in range(n) for _ in range(length)]
        assert hvd.grouped_allgather([x[:1]])[0].tolist() == [float(r) for r in range(n)]
        assert torch.equal(hvd.reducescatter(x, op=hvd.Sum), torch.full((length,), total))
        assert torch.equal(hvd.alltoall(x), torch.arange(n).repeat_interleave(length).float())
    hvd.barrier()
    kinds = {"allreduce", "grouped_allreduce", "broadcast", "allgather", "grouped_allgather", "reducescatter",
             "alltoall"}
    assert {s.split(".")[0] for s in submitted} == kinds
    members = ("noname.sync.0of2", "noname.sync.1of2", "noname.sync.0of1")
    for s in submitted:
        kind, rest = s.split(".", 1)
        assert rest in (members if kind.startswith("grouped") else ("noname.sync",)), s


def test_asynchronous_calls_count_their_names(submitted):
    x = torch.ones(2)
    handles = [hvd.allreduce_async(x, op=hvd.Sum) for _ in range(3)]
    for h in handles:
        assert torch.equal(hvd.synchronize(h), torch.full((2,), float(hvd.size())))
    numbers = [int(s.rsplit(".", 1)[1]) for s in submitted]
    assert [s.rsplit(".", 1)[0] for s in submitted] == ["allreduce.noname"] * 3
    assert numbers == sorted(set(numbers))


def test_changing_calls_stay_exact():
    n, me = hvd.size(), hvd.rank()
    for i in range(30):
        dtype = (torch.float32, torch.int64, torch.float64)[i % 3]
        shape = (1 + i % 4, 2) if i % 2 else (7,)
        x = torch.full(shape, me + i, dtype=dtype)
        out = hvd.allreduce(x, op=hvd.Sum) if i % 5 else hvd.allreduce_(x, op=hvd.Sum)
        assert out.dtype == dtype and out.shape == shape
        assert torch.equal(out, torch.full(shape, sum(range(n)) + n * i, dtype=dtype)), i


@pytest.mark.min_size(2)
def test_disagreement_is_still_an_error():
    hvd.allreduce(torch.ones(2))  # the name is known, with shape (2,)
    with pytest.raises(hvd.HorovodInternalError, match="shape"):
        hvd.allreduce(torch.ones(3 + hvd.rank()))
    with pytest.raises(hvd.HorovodInternalError, match="(?i)root"):
        hvd.broadcast_(torch.ones(2), root_rank=hvd.rank())
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())))


def test_a_call_in_flight_holds_its_slot():
    # what another thread's call sees while this one is in flight (no
    # collective runs: call only returns its name)
    g = hvd.global_process_set

    def inner(first):
        return first, ops.unnamed_blocking("allreduce", g, lambda n: n), \
            ops.unnamed_blocking("broadcast", g, lambda n: n)

    assert ops.unnamed_blocking("allreduce", g, inner) == ("noname.sync", "noname.sync.1", "noname.sync")
    assert ops.unnamed_blocking("allreduce", g, lambda n: n) == "noname.sync"  # freed
    with pytest.raises(KeyError):
        ops.unnamed_blocking("allreduce", g, lambda n: {}[n])
    assert ops.unnamed_blocking("allreduce", g, lambda n: n) == "noname.sync"  # freed after an error too
