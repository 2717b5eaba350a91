"""A job across hosts (tests/python/run-hosts.sh: 2 emulated hosts of 2
ranks): process sets within a host and across hosts, and a broadcast from
every rank, where each host's ranks share what crossed between hosts.
Skipped in a job on one host."""

import pytest
import torch

import hvd.torch as hvd

pytestmark = pytest.mark.skipif(hvd.cross_size() < 2, reason="needs a job across hosts")


def hosts():
    """Every host's ranks, in host order, the same list on every rank."""
    mine = hvd.allgather(torch.tensor([[hvd.cross_rank(), hvd.rank()]]), name="hosts.ranks")
    out = {}
    for c, r in mine.tolist():
        out.setdefault(c, []).append(r)
    return [out[c] for c in sorted(out)]


def test_a_set_within_a_host_runs():
    sets = [hvd.add_process_set(rs) for rs in hosts()]
    try:
        for ps in sets:
            if not ps.included():
                continue
            x = torch.full((1000,), float(hvd.rank() + 1))
            y = hvd.allreduce(x, op=hvd.Sum, process_set=ps, name="hosts.within")
            assert torch.equal(y, torch.full((1000,), float(sum(r + 1 for r in ps.ranks))))
    finally:
        for ps in sets:
            assert hvd.remove_process_set(ps)


def test_a_set_across_hosts_is_refused_and_the_job_goes_on():
    hs = hosts()
    ps = hvd.add_process_set([hs[0][0], hs[1][-1]])
    try:
        if ps.included():
            with pytest.raises(NotImplementedError, match="spans several hosts.*must share a host"):
                hvd.allreduce(torch.ones(4), process_set=ps, name="hosts.across")
            with pytest.raises(NotImplementedError, match="spans several hosts"):
                hvd.allgather(torch.ones(2, 2), process_set=ps, name="hosts.across.ag")
        # nothing was lost: the whole job's collectives go on
        y = hvd.allreduce(torch.full((3,), float(hvd.rank())), op=hvd.Sum, name="hosts.after")
        assert torch.equal(y, torch.full((3,), float(sum(range(hvd.size())))))
    finally:
        assert hvd.remove_process_set(ps)


def test_broadcast_from_every_rank():
    for root in range(hvd.size()):
        t = torch.arange(70000, dtype=torch.float64) * (hvd.rank() + 1)
        b = hvd.broadcast(t, root, name=f"hosts.bc.{root}")
        assert torch.equal(b, torch.arange(70000, dtype=torch.float64) * (root + 1))
