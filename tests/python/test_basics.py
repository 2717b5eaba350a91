"""Life cycle, topology, capability queries and the shape of the API."""

import json
import os
import re
import signal

import pytest
import torch

import hvd
import hvd.torch as ht

# horovod.torch's public names that scripts use.
HOROVOD_TORCH_API = """
init shutdown is_initialized size rank local_rank local_size cross_rank cross_size is_homogeneous
mpi_built mpi_enabled mpi_threads_supported gloo_built gloo_enabled nccl_built ddl_built ccl_built
cuda_built rocm_built allreduce allreduce_ allreduce_async allreduce_async_ grouped_allreduce
grouped_allreduce_ grouped_allreduce_async grouped_allreduce_async_ sparse_allreduce_async allgather
allgather_async grouped_allgather grouped_allgather_async broadcast broadcast_ broadcast_async
broadcast_async_ alltoall alltoall_async reducescatter reducescatter_async grouped_reducescatter
grouped_reducescatter_async join barrier poll synchronize broadcast_parameters
broadcast_optimizer_state broadcast_object allgather_object Average Sum Adasum Min Max Product
Compression ProcessSet global_process_set add_process_set remove_process_set DistributedOptimizer
SyncBatchNorm start_timeline stop_timeline elastic
""".split()


@pytest.mark.parametrize("name", HOROVOD_TORCH_API)
def test_torch_api_names(name):
    assert hasattr(ht, name), f"hvd.torch.{name} is missing"


def test_topology():
    assert hvd.is_initialized() and ht.is_initialized()
    n = ht.size()
    assert n == int(os.environ.get("HVD_SIZE", "1"))
    assert 0 <= ht.rank() < n
    assert ht.rank() == int(os.environ.get("HVD_RANK", "0"))
    assert 0 <= ht.local_rank() < ht.local_size() <= n
    assert 0 <= ht.cross_rank() < ht.cross_size()
    # every host runs as many ranks (HVD_PYTEST_HOSTS=a:1,b:2 does not)
    local_sizes = ht.allgather(torch.tensor([ht.local_size()]), name="basics.topology").tolist()
    assert ht.is_homogeneous() is (len(set(local_sizes)) == 1)
    assert hvd.size() == n and hvd.rank() == ht.rank()


def test_init_twice_is_harmless():
    ht.init()
    assert ht.is_initialized()


def built_nccl_version():
    """NCCL_VERSION_CODE of the nccl.h this build compiled against (the
    build tree's config.h and Makefile say whether and where); 0 without."""
    builddir = os.environ["HVD_BUILDDIR"]
    with open(os.path.join(builddir, "config.h")) as f:
        if not re.search(r"^#define HAVE_NCCL 1$", f.read(), re.M):
            return 0
    with open(os.path.join(builddir, "Makefile")) as f:
        flags = " ".join(re.findall(r"^(?:NCCL|CUDA)_CFLAGS = (.*)$", f.read(), re.M))
    for d in re.findall(r"-I(\S+)", flags) + ["/usr/include"]:
        header = os.path.join(d, "nccl.h")
        if os.path.exists(header):
            with open(header) as f:
                return int(re.search(r"^#define NCCL_VERSION_CODE (\d+)", f.read(), re.M).group(1))
    raise AssertionError(f"no nccl.h in {flags!r}")


def test_capabilities():
    """Horovod's types: bools, and nccl_built() the NCCL version as an int."""
    assert ht.mpi_built() is False and ht.mpi_enabled() is False
    assert ht.gloo_built() is False and ht.gloo_enabled() is False
    assert ht.ddl_built() is False and ht.ccl_built() is False and ht.rocm_built() is False
    version = ht.nccl_built()
    assert type(version) is int and version == built_nccl_version() == hvd.nccl_built()
    assert version == 0 or version >= 2700  # configure's minimum, NCCL 2.7
    assert ht.cuda_built() is (version > 0)
    with pytest.raises(ValueError, match="MPI is not enabled"):
        ht.mpi_threads_supported()


def test_reduce_op_values_match_horovod():
    assert (ht.Average, ht.Sum, ht.Adasum, ht.Min, ht.Max, ht.Product) == (0, 1, 2, 3, 4, 5)
    assert hvd.Sum == ht.Sum


def test_timeline(tmp_path):
    """start_timeline/stop_timeline around named allreduces: rank 0's file
    is strict JSON with, for each tensor, a negotiation holding one mark per
    rank, then the allreduce; nothing from before or after the window."""
    assert hvd.start_timeline is ht.start_timeline and hvd.stop_timeline is ht.stop_timeline
    path = tmp_path / "timeline.json"
    ht.allreduce(torch.ones(3), name="timeline.before")
    ht.start_timeline(str(path), mark_cycles=True)
    for i in range(3):
        out = ht.allreduce(torch.full((5,), float(ht.rank())), name="timeline.grad.%d" % i, op=ht.Sum)
        assert out.tolist() == [float(sum(range(ht.size())))] * 5
    ht.stop_timeline()
    ht.allreduce(torch.ones(3), name="timeline.after")
    if ht.rank() != 0:
        assert not path.exists()  # rank 0 alone writes
        return
    events = json.loads(path.read_text())
    rows = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name" and e["pid"]}
    # hvd.torch names an allreduce "allreduce.<name>", as Horovod does
    assert sorted(rows.values()) == ["allreduce.timeline.grad.%d" % i for i in range(3)]
    assert any(e.get("name") == "CYCLE_START" for e in events)
    for pid, name in rows.items():
        evs = [e for e in events if e["pid"] == pid and e["ph"] != "M"]
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts), name
        phases = [(e["ph"], e.get("name")) for e in evs if e["ph"] in "BE"]
        assert phases[0] == ("B", "NEGOTIATE_ALLREDUCE") and phases[1] == ("E", None), name
        assert phases[2] == ("B", "ALLREDUCE") and phases[-1] == ("E", None), name
        marks = sorted(int(e["name"]) for e in evs if e["ph"] == "i")
        assert marks == list(range(ht.size())), name
        names = [n for p, n in phases if p == "B"]
        assert "MEMCPY_IN_FUSION_BUFFER" in names and "MEMCPY_OUT_FUSION_BUFFER" in names, names


def test_timeline_errors(tmp_path):
    with pytest.raises(ValueError):
        ht.start_timeline("")
    if ht.rank() == 0:
        with pytest.raises(OSError, match="cannot create"):
            ht.start_timeline(str(tmp_path / "no" / "such" / "dir" / "t.json"))
    ht.stop_timeline()  # none on: nothing to do


def test_unknown_op_rejected():
    with pytest.raises(ValueError, match="reduce op"):
        ht.allreduce(torch.ones(2), op=42)


def test_average_and_op_conflict():
    with pytest.raises(ValueError, match="supersedes"):
        ht.allreduce(torch.ones(2), average=True, op=ht.Sum)


def test_deprecated_average_argument():
    with pytest.warns(DeprecationWarning):
        out = ht.allreduce(torch.ones(3), average=False)
    assert torch.equal(out, torch.full((3,), float(ht.size())))


def test_init_rejects_mpi_comm():
    with pytest.raises(NotImplementedError):
        ht.init(comm=[0])


def test_global_process_set():
    gps = ht.global_process_set
    assert gps.process_set_id == 0
    assert gps.ranks == list(range(ht.size()))
    assert gps.size() == ht.size() and gps.rank() == ht.rank() and gps.included()


def test_exception_types():
    assert issubclass(ht.HorovodInternalError, RuntimeError)
    from hvd.common.exceptions import HorovodInternalError
    assert HorovodInternalError is ht.HorovodInternalError is hvd.HorovodInternalError


def test_blocking_allreduce_runs_its_request_prepared():
    """A named blocking allreduce of a CPU tensor parses its request once
    (hvd._core.prepare) and runs it with new pointers on each call
    (run_prepared): exact results, in place and out of place."""
    from hvd import _core
    from hvd.torch import mpi_ops
    n = ht.size()
    t = torch.full((5,), float(ht.rank() + 1))
    for _ in range(3):
        out = ht.allreduce(t, op=ht.Sum, name="basics.prepared")
        assert torch.equal(out, torch.full((5,), float(n * (n + 1) // 2)))
        ht.allreduce_(t, op=ht.Sum, name="basics.prepared_")
        assert torch.equal(t, torch.full((5,), float(n * (n + 1) // 2)))
        t.fill_(float(ht.rank() + 1))
    prepared = {hit[2].name for key, hit in mpi_ops._sync_requests.items() if key[0] in ("basics.prepared",
                                                                                          "basics.prepared_")}
    assert len(prepared) == 2 and all(name.startswith("allreduce.") for name in prepared)
    assert all(type(hit[2]) is _core.Prepared for hit in mpi_ops._sync_requests.values() if hit[0] is not None)


def test_blocking_collectives_run_their_requests_prepared():
    """The named blocking broadcast, allgather, reducescatter and alltoall
    of a CPU tensor parse their requests once too (hvd._core.prepare with
    their kind) and run them with new pointers: exact results, also on
    later calls, with one and two dimensions; an alltoall with splits is
    submitted as before (its splits are not prepared)."""
    from hvd import _core
    from hvd.torch import mpi_ops
    n, r = ht.size(), ht.rank()
    for i in range(3):
        t = torch.arange(2 * n, dtype=torch.float32) + 10 * r + i
        b = t.clone()
        ht.broadcast_(b, 0, name="basics.prep.bc")
        assert torch.equal(b, torch.arange(2 * n, dtype=torch.float32) + i)
        g = ht.allgather(t, name="basics.prep.ag")
        assert torch.equal(g, torch.cat([torch.arange(2 * n, dtype=torch.float32) + 10 * k + i for k in range(n)]))
        g2 = ht.allgather(t.reshape(2, n), name="basics.prep.ag2")
        assert g2.shape == (2 * n, n) and torch.equal(g2.reshape(-1), g)
        total = sum(torch.arange(2 * n, dtype=torch.float32) + 10 * k + i for k in range(n))
        rs = ht.reducescatter(t, op=ht.Sum, name="basics.prep.rs")
        assert torch.equal(rs, total[2 * r:2 * r + 2])
        a = ht.alltoall(t, name="basics.prep.a2a")
        assert torch.equal(a, torch.cat([torch.arange(2 * n, dtype=torch.float32)[2 * r:2 * r + 2] + 10 * k + i
                                         for k in range(n)]))
        a2, recv = ht.alltoall(t, splits=[2] * n, name="basics.prep.a2s")
        assert torch.equal(a2, a) and recv.tolist() == [2] * n
    kinds = {key[0]: hit[2] for key, hit in mpi_ops._now_requests.items() if key[1] and key[1].startswith("basics.prep.")}
    prepared = [hit[2] for key, hit in mpi_ops._now_requests.items() if key[1] and key[1].startswith("basics.prep.")]
    assert len(prepared) == 6 and sum(p is None for p in prepared) == 1  # the alltoall with splits
    assert all(type(p) is _core.Prepared for p in prepared if p is not None)
    assert set(kinds) == {_core.KIND_BROADCAST, _core.KIND_ALLGATHER, _core.KIND_REDUCESCATTER, _core.KIND_ALLTOALL}


def test_blocking_group_runs_its_requests_prepared(monkeypatch):
    """A named blocking group of CPU tensors is parsed once
    (hvd._core.prepare_group) and later calls over new tensors of the same
    members run without building requests (run_prepared_group): exact
    results in place and out of place. A member that no longer matches
    (another dtype or size, not contiguous, sparse) takes the full path,
    which reduces it or says what is wrong."""
    from hvd import _core
    from hvd.torch import mpi_ops
    built = []
    parts = mpi_ops._grouped_allreduce_parts
    monkeypatch.setattr(mpi_ops, "_grouped_allreduce_parts", lambda *a: built.append(a[2]) or parts(*a))
    monkeypatch.setattr(mpi_ops, "_group_requests", {})  # none prepared yet
    n, r = ht.size(), ht.rank()
    total = n * (n + 1) // 2

    def members(i, dtype=torch.float32, first=(3,)):
        return [torch.full(first, float(r + 1 + i), dtype=dtype), torch.full((2, 4), float(r + 1 + 2 * i))]

    for i in range(4):
        ts = members(i)
        assert ht.grouped_allreduce_(ts, op=ht.Sum, name="basics.group") is not None
        assert torch.equal(ts[0], torch.full((3,), float(total + n * i)))
        assert torch.equal(ts[1], torch.full((2, 4), float(total + 2 * n * i)))
        ts = members(i)
        outs = ht.grouped_allreduce(ts, op=ht.Sum, name="basics.group.new")
        assert torch.equal(outs[0], torch.full((3,), float(total + n * i)))
        assert torch.equal(outs[1], torch.full((2, 4), float(total + 2 * n * i)))
        assert torch.equal(ts[0], torch.full((3,), float(r + 1 + i)))  # out of place: inputs unchanged
    assert built == ["basics.group", "basics.group.new"]  # each built once, then prepared
    assert all(type(p) is _core.PreparedGroup for k, p in mpi_ops._group_requests.items()
               if k[0].startswith("basics.group"))
    # another size or dtype: the full path again, and exact
    for dtype, first in ((torch.float32, (5,)), (torch.float64, (3,))):
        ts = members(0, dtype, first)
        ht.grouped_allreduce_(ts, op=ht.Sum, name="basics.group")
        assert ts[0].dtype == dtype and torch.equal(ts[0], torch.full(first, float(total), dtype=dtype))
    assert built[2:] == ["basics.group", "basics.group"]
    ht.grouped_allreduce_(members(0), op=ht.Sum, name="basics.group")  # prepared for float32 again
    assert built[4:] == ["basics.group"]
    ts = members(0)
    ts[1] = torch.full((4, 2), float(r + 1)).t()  # (2, 4), not contiguous
    with pytest.raises(ValueError, match="contiguous"):
        ht.grouped_allreduce_(ts, op=ht.Sum, name="basics.group")
    ts = members(0)
    ts[0] = torch.full((3,), float(r + 1)).to_sparse()
    with pytest.raises(ValueError, match="sparse tensors are not supported"):
        ht.grouped_allreduce_(ts, op=ht.Sum, name="basics.group")


def test_async_allreduce_runs_its_request_prepared(monkeypatch):
    """A named allreduce_async_ of a contiguous CPU tensor of the global
    set (a DistributedOptimizer's call for each gradient) parses its
    request once, as the blocking call does, and later calls submit it
    without building a request (hvd._core.submit_prepared): exact results,
    several in flight at once, the handle's result is the tensor itself.
    What does not fit (not contiguous, a name in flight, factors that are
    not floats) takes the full path or gets its usual error."""
    from hvd.torch import mpi_ops
    built, parsed = [], []
    submit, sync_request = mpi_ops._submit_allreduce, mpi_ops._sync_request
    monkeypatch.setattr(mpi_ops, "_submit_allreduce", lambda *a: built.append(a[2]) or submit(*a))
    monkeypatch.setattr(mpi_ops, "_sync_request", lambda *a: parsed.append(a[0][0]) or sync_request(*a))
    monkeypatch.setattr(mpi_ops, "_sync_requests", {})
    n, r = ht.size(), ht.rank()
    total = n * (n + 1) // 2
    for i in range(4):
        ts = [torch.full((3,), float(r + 1 + i)), torch.full((2, 4), float(2 * (r + 1) + i), dtype=torch.float64)]
        handles = [ht.allreduce_async_(t, name=f"basics.async.{k}", op=ht.Sum) for k, t in enumerate(ts)]
        outs = [ht.synchronize(h) for h in reversed(handles)][::-1]
        assert outs[0] is ts[0] and outs[1] is ts[1]
        assert torch.equal(ts[0], torch.full((3,), float(total + n * i)))
        assert torch.equal(ts[1], torch.full((2, 4), float(2 * total + n * i), dtype=torch.float64))
    avg = torch.full((5,), float(r + 1))
    h = ht.allreduce_async_(avg, name="basics.async.avg")  # Average, the default
    while not ht.poll(h):
        pass
    assert ht.synchronize(h) is avg and torch.allclose(avg, torch.full((5,), (n + 1) / 2))
    assert built == [] and parsed == ["basics.async.0", "basics.async.1", "basics.async.avg"]
    t = torch.full((3,), float(r + 1))
    h = ht.allreduce_async_(t, name="basics.async.2", op=ht.Sum, prescale_factor=2)  # an int: the full path
    assert torch.equal(ht.synchronize(h), torch.full((3,), float(2 * total)))
    assert built == ["basics.async.2"]
    with pytest.raises(ValueError, match="contiguous"):  # the dtype and shape of a prepared request
        ht.allreduce_async_(torch.ones(4, 2, dtype=torch.float64).t(), name="basics.async.1", op=ht.Sum)
    # rank 0 submits the name twice; the others once, after rank 0's check
    t = torch.full((3,), float(r + 1))
    if r == 0:
        h = ht.allreduce_async_(t, name="basics.async.0", op=ht.Sum)
        with pytest.raises(ValueError, match="'allreduce.basics.async.0': a tensor with this name is already "
                                             "in flight on rank 0"):
            ht.allreduce_async_(torch.ones(3), name="basics.async.0", op=ht.Sum)
        ht.barrier()
    else:
        ht.barrier()
        h = ht.allreduce_async_(t, name="basics.async.0", op=ht.Sum)
    assert torch.equal(ht.synchronize(h), torch.full((3,), float(total)))


def test_async_group_runs_its_requests_prepared(monkeypatch):
    """grouped_allreduce_async_ (DistributedOptimizer(groups=...)) of a
    named group of CPU tensors is parsed once and later calls submit it
    without building requests (hvd._core.submit_prepared_group): exact
    results; a member that no longer matches takes the full path."""
    from hvd.torch import mpi_ops
    built = []
    parts = mpi_ops._grouped_allreduce_parts
    monkeypatch.setattr(mpi_ops, "_grouped_allreduce_parts", lambda *a: built.append(a[2]) or parts(*a))
    monkeypatch.setattr(mpi_ops, "_group_requests", {})
    n, r = ht.size(), ht.rank()
    total = n * (n + 1) // 2

    def members(i, first=(3,)):
        return [torch.full(first, float(r + 1 + i)), torch.full((2, 4), float(r + 1 + 2 * i))]

    for i in range(4):
        ts = members(i)
        h = ht.grouped_allreduce_async_(ts, op=ht.Sum, name="basics.agroup")
        outs = ht.synchronize(h)
        assert len(outs) == 2 and outs[0] is ts[0] and outs[1] is ts[1]
        assert torch.equal(ts[0], torch.full((3,), float(total + n * i)))
        assert torch.equal(ts[1], torch.full((2, 4), float(total + 2 * n * i)))
    assert built == ["basics.agroup"]
    ts = members(0, (5,))  # another size: the full path, exact, and prepared anew
    assert ht.synchronize(ht.grouped_allreduce_async_(ts, op=ht.Sum, name="basics.agroup"))[0] is ts[0]
    assert torch.equal(ts[0], torch.full((5,), float(total)))
    assert built == ["basics.agroup"] * 2
    ts = members(0)
    ts[1] = torch.full((4, 2), float(r + 1)).t()
    with pytest.raises(ValueError, match="contiguous"):
        ht.grouped_allreduce_async_(ts, op=ht.Sum, name="basics.agroup")


def test_out_of_place_group_reuses_outputs_nobody_holds(monkeypatch):
    """A named out-of-place group keeps two sets of its outputs and
    reduces into one nobody else holds: never into results the caller
    still has (whole, as a view, or with autograd state), always exact."""
    from hvd.torch import mpi_ops
    if mpi_ops._PICK is None:
        pytest.skip("this torch's use counts cannot be read: outputs are never reused")
    monkeypatch.setattr(mpi_ops, "_group_requests", {})
    n, r = ht.size(), ht.rank()

    def step(i):
        ts = [torch.full((3,), float(r + i)), torch.full((2, 4), float(2 * r + i))]
        outs = ht.grouped_allreduce(ts, op=ht.Sum, name="basics.group.kept")
        assert torch.equal(outs[0], torch.full((3,), float(n * (n - 1) // 2 + n * i)))
        assert torch.equal(outs[1], torch.full((2, 4), float(n * (n - 1) + n * i)))
        return outs

    a = step(0)  # fresh, bound as the first set
    b = step(1)  # fresh: a is held
    held = [id(t) for t in a + b]
    c = step(2)  # a and b held: fresh again, a's set let go
    assert not {id(t) for t in c} & set(held)
    del a
    b_ids = [id(t) for t in b]
    del b
    d = step(3)  # b's set is free again: reduced into
    assert [id(t) for t in d] == b_ids
    view = d[1][0]  # a view of a result keeps its set
    c_ids = [id(t) for t in c]
    del c, d
    e = step(4)
    assert [id(t) for t in e] == c_ids
    f = step(5)  # d's set is seen through the view, e is held: fresh
    assert not {id(t) for t in f} & set(c_ids + b_ids)
    del view, e
    e2 = step(6)  # the older set (c's) is free again
    assert [id(t) for t in e2] == c_ids
    e2[0].requires_grad_()  # autograd state: never reduced into again
    f_ids = [id(t) for t in f]
    del e2, f
    for i in range(7, 10):  # the older set is looked at first, and passed over
        assert [id(t) for t in step(i)] == f_ids


def test_out_of_place_group_too_large_to_keep(monkeypatch):
    """A group above _GROUP_KEPT_BYTES keeps no outputs of its own: its
    results come from the shared kept results, exact, and the group is
    judged once."""
    from hvd.torch import mpi_ops
    monkeypatch.setattr(mpi_ops, "_group_requests", {})
    monkeypatch.setattr(mpi_ops, "_group_unkept", set())
    monkeypatch.setattr(mpi_ops, "_GROUP_KEPT_BYTES", 40)  # the group below has 44 bytes
    bound = []
    monkeypatch.setattr(mpi_ops, "_bind_group_outputs", lambda *a: bound.append(a))
    n, r = ht.size(), ht.rank()
    for i in range(3):
        ts = [torch.full((3,), float(r + i)), torch.full((2, 4), float(r + i))]
        outs = ht.grouped_allreduce(ts, op=ht.Sum, name="basics.group.large")
        assert all(torch.equal(o, torch.full_like(o, float(n * (n - 1) // 2 + n * i))) for o in outs)
    assert not bound and [k[0] for k in mpi_ops._group_unkept] == ["basics.group.large"]


def test_groups_keep_outputs_within_a_total(monkeypatch):
    """All groups together keep at most _GROUP_KEPT_TOTAL bytes of
    outputs: past it every group lets its outputs go (and is parsed
    again), so names that never repeat hold nothing for long."""
    from hvd.torch import mpi_ops
    if mpi_ops._PICK is None:
        pytest.skip("this torch's use counts cannot be read: outputs are never reused")
    monkeypatch.setattr(mpi_ops, "_group_requests", {})
    monkeypatch.setattr(mpi_ops, "_group_unkept", set())
    monkeypatch.setattr(mpi_ops, "_group_kept", {})
    monkeypatch.setattr(mpi_ops, "_GROUP_KEPT_TOTAL", 100)  # each call below keeps 44 bytes more
    n, r = ht.size(), ht.rank()

    def step(name, i):
        ts = [torch.full((3,), float(r + i)), torch.full((2, 4), float(r + i))]
        outs = ht.grouped_allreduce(ts, op=ht.Sum, name=name)
        assert all(torch.equal(o, torch.full_like(o, float(n * (n - 1) // 2 + n * i))) for o in outs)
        return outs

    a = step("basics.total.a", 0)
    b = step("basics.total.a", 1)  # a held: a second set
    assert list(mpi_ops._group_kept.values()) == [88]
    c = step("basics.total.a", 2)  # both held: a new set in place of the older, still 88
    assert list(mpi_ops._group_kept.values()) == [88]
    d = step("basics.total.b", 0)  # 132 bytes: every group lets go
    assert not mpi_ops._group_kept and not mpi_ops._group_requests
    step("basics.total.b", 1)
    assert list(mpi_ops._group_kept.values()) == [44]
    del a, b, c, d


def test_a_name_twice_in_flight_is_refused_and_leaves_nothing():
    """A group that names a tensor twice, or names one already in flight,
    is refused whole with the name in the message; its other names are
    free again at once (a group of them runs)."""
    from hvd import _core
    n = ht.size()
    ts = [torch.full((4,), 1.0) for _ in range(3)]

    def req(name, t):
        return (name, t.data_ptr(), t.data_ptr(), _core.FLOAT32, (4,), _core.REDUCE_SUM, 1.0, 1.0, 0, None, 0,
                _core.DEVICE_CPU)

    with pytest.raises(ValueError, match="'basics.twice.b': a tensor with this name is already in flight"):
        _core.submit(_core.KIND_ALLREDUCE, [req("basics.twice.a", ts[0]), req("basics.twice.b", ts[1]),
                                            req("basics.twice.b", ts[2])], ts, True)
    if n > 1:
        # rank 0's "c" stays in flight until the others submit it, after
        # an allreduce rank 0 makes once it has checked
        if ht.rank() == 0:
            busy = ht.allreduce_async_(torch.full((4,), 1.0), op=ht.Sum, name="basics.twice.c")
            with pytest.raises(ValueError, match="'allreduce.basics.twice.c': a tensor with this name is already"):
                _core.submit(_core.KIND_ALLREDUCE, [req("basics.twice.a", ts[0]),
                                                    req("allreduce.basics.twice.c", ts[1])], ts, True)
            ht.allreduce(torch.ones(1), name="basics.twice.checked")
        else:
            ht.allreduce(torch.ones(1), name="basics.twice.checked")
            busy = ht.allreduce_async_(torch.full((4,), 1.0), op=ht.Sum, name="basics.twice.c")
        assert torch.equal(ht.synchronize(busy), torch.full((4,), float(n)))
    h = _core.submit(_core.KIND_ALLREDUCE, [req("basics.twice.a", ts[0]), req("basics.twice.b", ts[1])], ts, True)
    h.wait()
    assert all(torch.equal(t, torch.full((4,), float(n))) for t in ts[:2])


def test_prepared_groups_reject_bad_input():
    from hvd import _core
    req = ("g.0", 0, 0, _core.FLOAT32, (4,), _core.REDUCE_SUM, 1.0, 1.0, 0, None, 0, _core.DEVICE_CPU)
    with pytest.raises(ValueError, match="one or more requests, a dtype and a size each"):
        _core.prepare_group((req,), (), ())
    with pytest.raises(TypeError):
        _core.prepare_group([req], (torch.float32,), (torch.Size([4]),))
    with pytest.raises(TypeError, match="a request is a tuple"):
        _core.prepare_group((["x"],), (torch.float32,), (torch.Size([4]),))
    with pytest.raises(TypeError, match="prepared must come from prepare_group"):
        _core.run_prepared_group(object(), [], [])
    with pytest.raises(TypeError, match=r"run_prepared_group\(prepared, tensors, outputs\)"):
        _core.run_prepared_group(object(), [])
    with pytest.raises(TypeError, match="run_group_kept: prepared must come from prepare_group"):
        _core.run_group_kept(object(), [])
    with pytest.raises(TypeError, match="bind_group_outputs: prepared must come from prepare_group"):
        _core.bind_group_outputs(object(), [])
    g = _core.prepare_group((req,), (torch.float32,), (torch.Size([4]),))
    with pytest.raises(ValueError, match="bind_group_outputs: 2 outputs for a group of 1"):
        _core.bind_group_outputs(g, [torch.ones(4), torch.ones(4)])
    assert _core.run_group_kept(g, [torch.ones(4)]) is None  # no outputs bound
    # nothing run: another count, dtype, size, device or layout, or no tensor
    for ts in ([], [torch.ones(4), torch.ones(4)], [torch.ones(4, dtype=torch.float64)], [torch.ones(5)],
               [torch.ones(8)[::2]], [torch.ones(4).to_sparse()], [object()], [None]):
        assert _core.run_prepared_group(g, ts, ts) is None
    assert _core.run_prepared_group(g, [torch.ones(4)], [torch.ones(5)]) is None
    with pytest.raises(TypeError, match="submit_prepared_group: prepared must come from prepare_group"):
        _core.submit_prepared_group(object(), [])
    with pytest.raises(TypeError, match=r"submit_prepared_group\(prepared, tensors\)"):
        _core.submit_prepared_group(g)
    for ts in ([], [torch.ones(4), torch.ones(4)], [torch.ones(5)], [torch.ones(8)[::2]], [None]):
        assert _core.submit_prepared_group(g, ts) is None  # nothing submitted


def test_prepared_requests_reject_bad_input():
    from hvd import _core
    with pytest.raises(TypeError, match="prepared must come from prepare"):
        _core.run_prepared(object(), 0, 0, None)
    with pytest.raises(TypeError):
        _core.prepare(("only a name",))
    with pytest.raises(TypeError, match="a request is a tuple"):
        _core.prepare(["x"])
    req = ("p.splits", 0, 0, _core.FLOAT32, (4,), _core.REDUCE_SUM, 1.0, 1.0, 0, (2, 2), 0, _core.DEVICE_CPU)
    with pytest.raises(ValueError, match="splits has 2 entries, at most 0"):
        _core.prepare(req)
    ok = _core.prepare(req[:9] + (None,) + req[10:])
    assert ok.name == "p.splits"
    with pytest.raises(TypeError):
        _core.run_prepared(ok, "not a pointer", 0, None)
    with pytest.raises(ValueError, match="unknown operation kind 9"):
        _core.prepare(req[:9] + (None,) + req[10:], 9)
    gather = _core.prepare(req[:9] + (None,) + req[10:], _core.KIND_ALLGATHER)
    with pytest.raises(ValueError, match="run_kept: the prepared request is not an allreduce"):
        _core.run_kept(gather, torch.ones(4))
    with pytest.raises(TypeError, match="run_kept: prepared must come from prepare"):
        _core.run_kept(object(), torch.ones(4))
    with pytest.raises(TypeError, match=r"run_kept\(prepared, tensor\)"):
        _core.run_kept(ok)
    with pytest.raises(TypeError, match="submit_prepared: prepared must come from prepare"):
        _core.submit_prepared(object(), torch.ones(4))
    with pytest.raises(TypeError, match=r"submit_prepared\(prepared, tensor\)"):
        _core.submit_prepared(ok)
    with pytest.raises(ValueError, match="submit_prepared: the prepared request is not an allreduce"):
        _core.submit_prepared(gather, torch.ones(4))
    with pytest.raises(AttributeError):
        _core.submit_prepared(ok, object())  # no data_ptr: nothing submitted
    with pytest.raises(TypeError, match="bind_kept: prepared must come from prepare"):
        _core.bind_kept(object(), [], torch.float32, torch.Size([4]))
    with pytest.raises(TypeError, match="kept must be a list or None"):
        _core.bind_kept(ok, (), torch.float32, torch.Size([4]))
    assert ok.kept is None and _core.run_kept(ok, torch.ones(4)) is None  # nothing bound, nothing run
    kept = []
    _core.bind_kept(ok, kept, torch.float32, torch.Size([4]))
    assert ok.kept is kept
    _core.bind_kept(ok, None, None, None)
    assert ok.kept is None


def test_no_handles_leak():
    from hvd import _core
    from hvd.common import ops
    before = ops.in_flight()
    ht.synchronize(ht.allreduce_async(torch.ones(1)))
    assert ops.in_flight() == before
    # A core handle dropped while pending keeps its buffers alive until the
    # operation completes, then is freed.
    t = torch.ones(1000)
    req = ops.request("test.orphan", t.data_ptr(), t.data_ptr(), _core.FLOAT32, t.shape)
    h = _core.submit(_core.KIND_ALLREDUCE, [req], t)
    del h, t
    ht.barrier()
    assert _core.pending_orphans() == 0


def test_collectives_complete_while_signals_land():
    """A script's timer (a profiler, a DataLoader's SIGCHLD) sends the
    process signals, which the kernel gives to any thread that does not
    block them, hvd's own included. Every collective still completes,
    exact."""
    hits = []
    old = signal.signal(signal.SIGALRM, lambda sig, frame: hits.append(sig))
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    try:
        n, r = ht.size(), ht.rank()
        for i in range(300):
            for numel in (16, 1 << 18):
                t = torch.full((numel,), float(r + i))
                out = ht.allreduce(t, op=ht.Sum, name=f"signals.{numel}")
                assert torch.equal(out, torch.full_like(t, float(n * (n - 1) // 2 + n * i)))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, old)
    assert len(hits) > 50
