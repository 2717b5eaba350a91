"""A job across hosts (tests/python/run-hosts.sh: 2 emulated hosts of 2
ranks, and 3 of 2): process sets within a host and across hosts, and a
broadcast from every rank, where each host's ranks share what crossed
between hosts. Skipped in a job on one host."""

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


def across_hosts():
    """Sets whose ranks are on several hosts: one rank of each of two hosts,
    all but one rank, and every host's last rank."""
    hs = hosts()
    out = []
    for s in ([hs[0][0], hs[1][-1]], sorted(r for h in hs for r in h)[1:], [h[-1] for h in hs]):
        if sorted(s) not in out:
            out.append(sorted(s))
    return out


# 300000 float64 are 2.3 MiB: the pipelined rings; 1000 elements take
# recursive doubling (allreduce, barrier) and single frames
@pytest.mark.parametrize("n", [1000, 300000])
def test_a_set_across_hosts_runs_every_collective(n):
    sets = [hvd.add_process_set(rs) for rs in across_hosts()]
    me = hvd.rank()
    try:
        for ps in sets:
            if not ps.included():
                continue
            rs, k, tag = ps.ranks, len(ps.ranks), f"hosts.across.{ps.process_set_id}.{n}"
            base = torch.arange(n, dtype=torch.float64)
            y = hvd.allreduce(base + me, op=hvd.Sum, process_set=ps, name=tag + ".sum")
            assert torch.equal(y, base * k + sum(rs))
            y = hvd.allreduce(base * 0 + me, op=hvd.Average, process_set=ps, name=tag + ".avg",
                              prescale_factor=2.0, postscale_factor=0.5)
            assert torch.allclose(y, torch.full((n,), sum(rs) / k, dtype=torch.float64))
            # a fused group: members of several sizes and dtypes end to end
            ys = hvd.grouped_allreduce([base[: n // 3] + me, torch.ones(7, dtype=torch.float64) * me,
                                        torch.arange(n // 2, dtype=torch.float64) * (me + 1)],
                                       op=hvd.Sum, process_set=ps, name=tag + ".group")
            assert torch.equal(ys[0], base[: n // 3] * k + sum(rs))
            assert torch.equal(ys[1], torch.full((7,), float(sum(rs)), dtype=torch.float64))
            assert torch.equal(ys[2], torch.arange(n // 2, dtype=torch.float64) * sum(r + 1 for r in rs))
            # reducescatter of rows that do not divide evenly
            rows = k * 3 + 1
            x = torch.arange(rows * (n // 100), dtype=torch.float64).reshape(rows, -1) * (me + 1)
            y = hvd.reducescatter(x, op=hvd.Sum, process_set=ps, name=tag + ".rs")
            i = ps.rank()
            lo = i * (rows // k) + min(i, rows % k)
            hi = lo + rows // k + (1 if i < rows % k else 0)
            full = torch.arange(rows * (n // 100), dtype=torch.float64).reshape(rows, -1) * sum(r + 1 for r in rs)
            assert torch.equal(y, full[lo:hi])
            # allgather of uneven rows
            g = hvd.allgather(torch.full((me + 1, n // 100), float(me)), process_set=ps, name=tag + ".ag")
            assert torch.equal(g, torch.cat([torch.full((r + 1, n // 100), float(r)) for r in rs]))
            # broadcast from every member
            for root in rs:
                b = hvd.broadcast(base * (me + 1), root, process_set=ps, name=f"{tag}.bc.{root}")
                assert torch.equal(b, base * (root + 1))
            # alltoall of uneven splits: member j gets j + 1 rows of n // 100
            splits = [j + 1 for j in range(k)]
            x = torch.cat([torch.full((j + 1, n // 100), float(100 * me + rs[j])) for j in range(k)])
            out, received = hvd.alltoall(x, splits=splits, process_set=ps, name=tag + ".a2a")
            assert received.tolist() == [i + 1] * k
            assert torch.equal(out, torch.cat([torch.full((i + 1, n // 100), float(100 * r + me)) for r in rs]))
            hvd.barrier(process_set=ps)
            # empty tensors, alone and beside others in a group
            e = torch.empty(0, dtype=torch.float64)
            assert hvd.allreduce(e, process_set=ps, name=tag + ".empty").numel() == 0
            ys = hvd.grouped_allreduce([e, base[:5] + me], op=hvd.Sum, process_set=ps, name=tag + ".empty.group")
            assert ys[0].numel() == 0 and torch.equal(ys[1], base[:5] * k + sum(rs))
            assert hvd.allgather(torch.empty(0, 3), process_set=ps, name=tag + ".empty.ag").shape == (0, 3)
            assert hvd.broadcast(e, rs[-1], process_set=ps, name=tag + ".empty.bc").numel() == 0
        # every rank, in or out of the sets: the whole job goes on
        y = hvd.allreduce(torch.full((3,), float(me)), op=hvd.Sum, name=f"hosts.after.{n}")
        assert torch.equal(y, torch.full((3,), float(sum(range(hvd.size())))))
    finally:
        for ps in sets:
            assert hvd.remove_process_set(ps)


def test_broadcast_from_every_rank():
    for root in range(hvd.size()):
        t = torch.arange(70000, dtype=torch.float64) * (hvd.rank() + 1)
        b = hvd.broadcast(t, root, name=f"hosts.bc.{root}")
        assert torch.equal(b, torch.arange(70000, dtype=torch.float64) * (root + 1))
