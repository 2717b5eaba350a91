"""hvd.join() as in Horovod 0.28.1: while some ranks have joined, the
others' allreduces (plain and grouped) run with zeros from the joined ranks
(Average divides by the full size); every other collective fails on them at
once with an error naming the operation, the tensor and the joined ranks;
every join() returns the rank that joined last; and after each round the
job is as usable as before.

Ranks join in a fixed order within a round: ranks order[k:] are the active
ones of stage k, and a stage's collectives are submitted by every active
rank under names of that stage, so a tensor of stage k completes only once
the join of order[k - 1] has reached the coordinator (which never sees that
rank submit it). What each rank sees is therefore the same in every run.
"""

import time

import pytest
import torch

import hvd.torch as hvd

pytestmark = pytest.mark.min_size(2)

# The stall inspector warns after 60 s; an error with join comes at once.
AT_ONCE_S = 5.0
ONLY_ALLREDUCE = "only allreduce runs until every rank has joined"
SPARSE_HINT = " (specify sparse_to_dense=True if using DistributedOptimizer)"


def joined_text(ranks):
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]} has"
    return "ranks [" + ", ".join(str(r) for r in ranks) + "] have"


def expect_join_error(call, what, joined, hint=""):
    """call() fails at once with hvd's join error for `what` ("allgather
    'allgather.x'") while `joined` have joined."""
    t0 = time.monotonic()
    with pytest.raises(hvd.HorovodInternalError) as info:
        call()
    elapsed = time.monotonic() - t0
    assert str(info.value) == f"{what} is not supported while {joined_text(joined)} joined: {ONLY_ALLREDUCE}{hint}"
    # Horovod's code catches RuntimeError
    assert isinstance(info.value, RuntimeError)
    assert elapsed < AT_ONCE_S, f"the error took {elapsed:.1f} s"


def rotated(first):
    n = hvd.size()
    return [(first + k) % n for k in range(n)]


def stage_collectives(tag, order, k):
    """Stage k of a round on an active rank (order[k:] active): allreduces
    exact with zeros from order[:k], every other kind an error at once."""
    me, n = hvd.rank(), hvd.size()
    active, joined = order[k:], order[:k]
    # Sum: the active ranks' values, the joined ranks' zeros
    x = torch.full((5,), float(100 * (me + 1) + k))
    out = hvd.allreduce(x, op=hvd.Sum, name=f"{tag}.sum")
    assert torch.equal(out, torch.full((5,), float(sum(100 * (r + 1) + k for r in active))))
    # Average divides by the full size, as Horovod does
    x = torch.full((3,), float(n * (me + 1)), dtype=torch.float64)
    out = hvd.allreduce(x, op=hvd.Average, name=f"{tag}.avg")
    assert torch.equal(out, torch.full((3,), float(sum(r + 1 for r in active)), dtype=torch.float64))
    # a grouped allreduce, integers
    outs = hvd.grouped_allreduce([torch.tensor([me + 1, 7], dtype=torch.int32), torch.full((2, 2), me, dtype=torch.int64)],
                                 op=hvd.Sum, name=f"{tag}.grp")
    assert torch.equal(outs[0], torch.tensor([sum(r + 1 for r in active), 7 * len(active)], dtype=torch.int32))
    assert torch.equal(outs[1], torch.full((2, 2), sum(active), dtype=torch.int64))

    t = torch.ones(n, 2) * me
    expect_join_error(lambda: hvd.allgather(t, name=f"{tag}.ag"), f"allgather 'allgather.{tag}.ag'", joined,
                      SPARSE_HINT)
    # a broadcast fails whether its root joined or not
    for root in (active[0], joined[0]):
        expect_join_error(lambda: hvd.broadcast(t, root, name=f"{tag}.bc{root}"),
                          f"broadcast 'broadcast.{tag}.bc{root}'", joined)
    expect_join_error(lambda: hvd.alltoall(t, name=f"{tag}.a2a"), f"alltoall 'alltoall.{tag}.a2a'", joined)
    expect_join_error(lambda: hvd.reducescatter(t, op=hvd.Sum, name=f"{tag}.rs"),
                      f"reducescatter 'reducescatter.{tag}.rs'", joined)
    expect_join_error(hvd.barrier, "barrier", joined)


def join_round(tag, first):
    """One round: rank `first` joins at once, the others stage by stage;
    returns what join() returned here."""
    order = rotated(first)
    me = hvd.rank()
    k = order.index(me)
    for stage in range(1, k + 1):
        stage_collectives(f"{tag}.s{stage}", order, stage)
    t0 = time.monotonic()
    last = hvd.join()
    assert time.monotonic() - t0 < AT_ONCE_S
    assert last == order[-1], f"join returned {last}, the last rank to join was {order[-1]}"
    return last


def every_kind_exact(tag):
    """Every kind of collective with every rank taking part, exact."""
    me, n = hvd.rank(), hvd.size()
    out = hvd.allreduce(torch.full((4,), float(me + 1)), op=hvd.Sum, name=f"{tag}.ar")
    assert torch.equal(out, torch.full((4,), float(n * (n + 1) // 2)))
    out = hvd.allreduce(torch.full((4,), float(2 * n * me)), op=hvd.Average, name=f"{tag}.avg")
    assert torch.equal(out, torch.full((4,), float(n * (n - 1))))
    outs = hvd.grouped_allreduce([torch.tensor([me]), torch.tensor([1.5])], op=hvd.Sum, name=f"{tag}.grp")
    assert outs[0].item() == n * (n - 1) // 2 and outs[1].item() == 1.5 * n
    # allgather with uneven rows: rank r gives r + 1 rows of r
    g = hvd.allgather(torch.full((me + 1, 2), me, dtype=torch.int32), name=f"{tag}.ag")
    assert torch.equal(g, torch.cat([torch.full((r + 1, 2), r, dtype=torch.int32) for r in range(n)]))
    for root in range(n):
        b = hvd.broadcast(torch.full((3,), float(me)), root, name=f"{tag}.bc{root}")
        assert torch.equal(b, torch.full((3,), float(root)))
    # alltoall: rank r sends row d * 10 + r to rank d
    a = hvd.alltoall(torch.tensor([[d * 10 + me] for d in range(n)], dtype=torch.int64), name=f"{tag}.a2a")
    assert torch.equal(a, torch.tensor([[me * 10 + s] for s in range(n)], dtype=torch.int64))
    # reducescatter: rank r's part of the sum of n rows of (row index + 1)
    rs = hvd.reducescatter(torch.arange(1, n + 1, dtype=torch.float32).reshape(n, 1), op=hvd.Sum,
                           name=f"{tag}.rs")
    assert torch.equal(rs, torch.tensor([[float(n * (me + 1))]]))
    hvd.barrier()


def test_join_at_once_returns_the_same_rank_everywhere():
    # every rank joins with nothing else to do, in whatever order
    last = hvd.join()
    assert 0 <= last < hvd.size()
    seen = hvd.allgather(torch.tensor([last]), name="at_once.last")
    assert seen.tolist() == [last] * hvd.size()
    every_kind_exact("at_once.after")


def test_join_allreduce_zeros_and_other_kinds_raise():
    join_round("first0", 0)
    every_kind_exact("first0.after")


def test_join_rounds_each_rank_first_in_turn():
    # every rank joins first once, and rank 0 a second time; every kind of
    # collective runs exact between the rounds, the same names each time
    # (cached, and sent by id after the first round)
    rounds = list(range(hvd.size())) + [0]
    for i, first in enumerate(rounds):
        assert join_round("rounds", first) == rotated(first)[-1]
        every_kind_exact("rounds.between")
        # the round's last rank learned every tensor's name though it
        # never submitted some: a fresh name after the round works too
        every_kind_exact(f"rounds.fresh{i}")


@pytest.mark.min_size(3)
def test_join_process_sets():
    """Rank 0 joins: a set without it runs as ever; a set with it fails at
    once instead of waiting for it; after the round both run exact."""
    n, me = hvd.size(), hvd.rank()
    others = hvd.add_process_set(list(range(1, n)))
    with_0 = hvd.add_process_set([0, 1])
    try:
        if me == 0:
            assert hvd.join() == n - 1
        else:
            out = hvd.allreduce(torch.tensor([float(me)]), op=hvd.Sum, name="ps.others", process_set=others)
            assert out.item() == sum(range(1, n))
            if me == 1:
                t0 = time.monotonic()
                with pytest.raises(hvd.HorovodInternalError) as info:
                    hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name="ps.with0", process_set=with_0)
                assert time.monotonic() - t0 < AT_ONCE_S
                ps = with_0.process_set_id
                assert str(info.value) == (
                    f"allreduce 'allreduce.ps{ps}.ps.with0' of process set {ps} is not supported while its member "
                    f"rank 0 has joined: a joined rank takes part in allreduces of the global process set only")
            # ranks 1 .. n-1 join in order: an allreduce of the remaining
            # ones completes only after the previous one joined
            for k in range(1, me):
                rest = list(range(k + 1, n))
                out = hvd.allreduce(torch.tensor([float(me)]), op=hvd.Sum, name=f"ps.wait{k}")
                assert out.item() == sum(rest)
            assert hvd.join() == n - 1
        for ps, members in ((others, list(range(1, n))), (with_0, [0, 1])):
            if me in members:
                out = hvd.allreduce(torch.tensor([float(me + 1)]), op=hvd.Sum, name="ps.after", process_set=ps)
                assert out.item() == sum(r + 1 for r in members)
                g = hvd.allgather(torch.tensor([[me]]), name="ps.after.ag", process_set=ps)
                assert g.flatten().tolist() == members
        every_kind_exact("ps.after.global")
    finally:
        assert hvd.remove_process_set(with_0)
        assert hvd.remove_process_set(others)
