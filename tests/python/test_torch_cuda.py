"""hvd.torch collectives on CUDA tensors: exact allreduce, broadcast,
allgather, alltoall and reducescatter results, ordered after the producing
(current) stream without a device-wide synchronize, and hvd-allocated
outputs that are CUDA tensors on the input's device.

Needs a GPU per process (local rank = device) and an hvd built with the
NCCL module; everything skips with the reason otherwise, so this file is
safe in the CPU-only `make check`. Every rank decides the same way on one
host (same GPUs, same build)."""

import pytest
import torch

import hvd.torch as hvd

DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.bool]


def _why_skip():
    if not torch.cuda.is_available():
        return "no usable CUDA device (torch.cuda.is_available() is False)"
    if not hvd.nccl_built():
        return "this hvd was built without the NCCL module"
    if torch.cuda.device_count() < hvd.local_size():
        return f"{hvd.local_size()} processes on this host but {torch.cuda.device_count()} GPU(s): NCCL needs one each"
    return None


_reason = _why_skip()
if _reason:
    pytest.skip(_reason, allow_module_level=True)


@pytest.fixture
def dev():
    d = torch.device("cuda", hvd.local_rank())
    torch.cuda.set_device(d)
    return d


def values(dtype, n, r, dev):
    """Small values, different per rank, exact in every dtype."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + r) % 3 == 0).to(dev)
    return ((i % 5) + r + 1).to(dtype).to(dev)


def slow_stream_input(dtype, n, r, dev):
    """The input is written on a side stream after a long kernel, and the
    current stream is that side stream while it is submitted: hvd must wait
    for it (no synchronize happens anywhere before the collective)."""
    s = torch.cuda.Stream(dev)
    with torch.cuda.stream(s):
        big = torch.rand(2048, 2048, device=dev)
        for _ in range(4):
            big = big @ big  # keeps the stream busy for a while
        t = torch.zeros(n, dtype=dtype, device=dev)
        t.copy_(values(dtype, n, r, dev))
    return t, s, big


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool])
def test_allreduce_sum(dtype, dev):
    n, size = 1000, hvd.size()
    t = values(dtype, n, hvd.rank(), dev)
    out = hvd.allreduce(t, op=hvd.Sum, name=f"cuda.ar.{dtype}")
    want = sum(values(dtype, n, r, torch.device("cpu")).to(torch.float64) for r in range(size))
    assert out.device == dev
    assert torch.equal(out.cpu().to(torch.float64), want.to(dtype).to(torch.float64))


def test_allreduce_average_and_inplace(dev):
    size = hvd.size()
    t = torch.full((257,), float(2 * (hvd.rank() + 1)), device=dev)
    hvd.allreduce_(t, op=hvd.Average, name="cuda.ar.avg")
    assert torch.equal(t.cpu(), torch.full((257,), float(size + 1)))


def test_allreduce_waits_for_the_current_stream(dev):
    t, s, _ = slow_stream_input(torch.float32, 1 << 16, hvd.rank(), dev)
    with torch.cuda.stream(s):
        out = hvd.allreduce(t, op=hvd.Sum, name="cuda.ar.stream")
    want = sum(values(torch.float32, 1 << 16, r, torch.device("cpu")) for r in range(hvd.size()))
    assert torch.equal(out.cpu(), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype, dev):
    root = hvd.size() - 1
    t = values(dtype, 333, hvd.rank(), dev)
    out = hvd.broadcast(t, root_rank=root, name=f"cuda.bc.{dtype}")
    assert out.device == dev
    assert torch.equal(out.cpu(), values(dtype, 333, root, torch.device("cpu")))


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_uneven(dtype, dev):
    r = hvd.rank()
    t = values(dtype, 3 * (r + 1), r, dev).reshape(r + 1, 3)
    out = hvd.allgather(t, name=f"cuda.ag.{dtype}")
    assert out.is_cuda and out.device == dev and out.dtype == dtype
    want = torch.cat([values(dtype, 3 * (q + 1), q, torch.device("cpu")).reshape(q + 1, 3)
                      for q in range(hvd.size())])
    assert torch.equal(out.cpu(), want)


def test_allgather_waits_for_the_current_stream(dev):
    t, s, _ = slow_stream_input(torch.int64, 4096, hvd.rank(), dev)
    with torch.cuda.stream(s):
        out = hvd.allgather(t, name="cuda.ag.stream")
        out = out + 0  # usable on the current stream at once
    want = torch.cat([values(torch.int64, 4096, q, torch.device("cpu")) for q in range(hvd.size())])
    assert torch.equal(out.cpu(), want)


def test_grouped_allgather_empty_member(dev):
    r = hvd.rank()
    a = values(torch.float32, 4, r, dev).reshape(2, 2)
    e = torch.zeros(0, 5, device=dev)
    outs = hvd.grouped_allgather([a, e], name="cuda.gag")
    assert outs[1].shape == (0, 5) and outs[1].is_cuda
    want = torch.cat([values(torch.float32, 4, q, torch.device("cpu")).reshape(2, 2) for q in range(hvd.size())])
    assert torch.equal(outs[0].cpu(), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall_splits(dtype, dev):
    size, r = hvd.size(), hvd.rank()
    # rank r sends (r + d) % 2 + 1 rows of 2 to rank d; row values encode (src, dst, i)
    splits = [(r + d) % 2 + 1 for d in range(size)]
    rows = []
    for d, k in enumerate(splits):
        for i in range(k):
            rows.append([(r * 7 + d * 3 + i) % 11, (r + d + i) % 2])
    t = torch.tensor(rows, dtype=torch.int64).to(dtype).to(dev)
    out, received = hvd.alltoall(t, splits=torch.tensor(splits, dtype=torch.int32), name=f"cuda.a2a.{dtype}")
    assert out.is_cuda and out.device == dev and out.dtype == dtype
    want_rows = []
    for s in range(size):
        for i in range((s + r) % 2 + 1):
            want_rows.append([(s * 7 + r * 3 + i) % 11, (s + r + i) % 2])
    assert received.tolist() == [(s + r) % 2 + 1 for s in range(size)]
    assert torch.equal(out.cpu(), torch.tensor(want_rows, dtype=torch.int64).to(dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
                                   torch.float64])
@pytest.mark.parametrize("extra", [0, 1])
def test_reducescatter(dtype, extra, dev):
    size, r = hvd.size(), hvd.rank()
    rows = 2 * size + extra
    t = values(dtype, rows * 3, r, dev).reshape(rows, 3)
    out = hvd.reducescatter(t, op=hvd.Sum, name=f"cuda.rs.{dtype}.{extra}")
    assert out.is_cuda and out.device == dev and out.dtype == dtype
    total = sum(values(dtype, rows * 3, q, torch.device("cpu")).to(torch.float64) for q in range(size))
    start = r * (rows // size) + min(r, rows % size)
    n = rows // size + (1 if r < rows % size else 0)
    want = total.reshape(rows, 3)[start:start + n].to(dtype)
    assert torch.equal(out.cpu(), want)


def test_outputs_are_freed(dev):
    """hvd-allocated outputs are freed when their tensors die: many rounds do
    not grow the device memory in use."""
    t = values(torch.float32, 1 << 18, hvd.rank(), dev)
    for i in range(3):
        hvd.allgather(t, name="cuda.free.warm")
    torch.cuda.synchronize()
    before = torch.cuda.mem_get_info(dev)[0]
    for i in range(20):
        out = hvd.allgather(t, name="cuda.free")
        del out
    torch.cuda.synchronize()
    after = torch.cuda.mem_get_info(dev)[0]
    # 20 leaked outputs would be 20 * size MiB
    assert before - after < 8 * hvd.size() * (1 << 20), (before, after)
