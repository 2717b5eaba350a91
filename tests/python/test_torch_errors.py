"""Errors: disagreements between ranks become an exception on every rank
(with the core's message), argument errors a ValueError, and the job keeps
working afterwards."""

import os
import signal
import threading
import time

import pytest
import torch

import hvd.torch as hvd

pytestmark = pytest.mark.min_size(2)


def still_works():
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum)
    assert torch.equal(out, torch.full((2,), float(hvd.size())))


def test_allreduce_shape_mismatch():
    x = torch.ones(3 + hvd.rank())
    with pytest.raises(hvd.HorovodInternalError, match="shape"):
        hvd.allreduce(x, name="mismatch.shape")
    still_works()


def test_allreduce_rank_mismatch():
    x = torch.ones([2] * (hvd.rank() + 1))
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(x, name="mismatch.ndim")
    still_works()


def test_allreduce_dtype_mismatch():
    x = torch.ones(4, dtype=torch.float32 if hvd.rank() == 0 else torch.int32)
    with pytest.raises(hvd.HorovodInternalError, match="(?i)type"):
        hvd.allreduce(x, name="mismatch.dtype")
    still_works()


def test_allreduce_op_mismatch():
    op = hvd.Sum if hvd.rank() == 0 else hvd.Max
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(torch.ones(2), op=op, name="mismatch.op")
    still_works()


def test_allreduce_scale_mismatch():
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(torch.ones(2), op=hvd.Sum, prescale_factor=1.0 + hvd.rank(), name="mismatch.scale")
    still_works()


def test_broadcast_root_mismatch():
    with pytest.raises(hvd.HorovodInternalError, match="(?i)root"):
        hvd.broadcast(torch.ones(2), root_rank=hvd.rank(), name="mismatch.root")
    still_works()


def test_broadcast_shape_mismatch():
    with pytest.raises(hvd.HorovodInternalError):
        hvd.broadcast_(torch.ones(2 + hvd.rank()), root_rank=0, name="mismatch.bshape")
    still_works()


def test_allgather_trailing_shape_mismatch():
    x = torch.ones(2, 3 + hvd.rank())
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allgather(x, name="mismatch.allgather")
    still_works()


def test_allgather_dtype_mismatch():
    x = torch.ones(2, dtype=torch.float64 if hvd.rank() == 0 else torch.float32)
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allgather(x, name="mismatch.agdtype")
    still_works()


def test_reducescatter_shape_mismatch():
    with pytest.raises(hvd.HorovodInternalError):
        hvd.reducescatter(torch.ones(hvd.size() + hvd.rank(), 2), name="mismatch.rs")
    still_works()


def test_alltoall_trailing_shape_mismatch():
    n = hvd.size()
    with pytest.raises(hvd.HorovodInternalError):
        hvd.alltoall(torch.ones(n, 1 + hvd.rank()), name="mismatch.a2a")
    still_works()


def test_operation_kind_mismatch():
    # The same tensor name for an allreduce on rank 0 and a broadcast on the
    # others (hvd.torch prefixes names by kind, so go one level lower).
    from hvd import _core
    from hvd.common import ops
    x, out = torch.ones(2), torch.empty(2)
    kind = ops.KIND_ALLREDUCE if hvd.rank() == 0 else ops.KIND_BROADCAST
    req = ops.request("mismatch.kind", x.data_ptr(), out.data_ptr(), _core.FLOAT32, x.shape)
    with pytest.raises(hvd.HorovodInternalError):
        hvd.synchronize(ops.submit(kind, [req], (x, out), lambda h: out))
    still_works()


def test_grouped_member_mismatch():
    xs = [torch.ones(2), torch.ones(3 + hvd.rank())]
    with pytest.raises(hvd.HorovodInternalError):
        hvd.grouped_allreduce(xs, name="mismatch.group")
    still_works()


def test_grouped_member_mismatch_after_agreement():
    # a group every rank agreed on three times (on one host: from the
    # board) then gets a member of another shape on one rank: every rank
    # gets an error naming the shape, and the next call works
    for _ in range(3):
        outs = hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], name="mismatch.group.later", op=hvd.Sum)
        assert torch.equal(outs[1], torch.full((3,), float(hvd.size())))
    xs = [torch.ones(2), torch.ones(3 + (hvd.rank() == hvd.size() - 1))]
    with pytest.raises(hvd.HorovodInternalError, match="shape"):
        hvd.grouped_allreduce(xs, name="mismatch.group.later")
    still_works()
    outs = hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], name="mismatch.group.later", op=hvd.Sum)
    assert torch.equal(outs[0], torch.full((2,), float(hvd.size())))


def test_duplicate_name_in_flight():
    # A name may be in flight once per rank. Take turns, so that the first
    # submission cannot complete (the others hold back) while the turn's rank
    # submits the same name again.
    n, me = hvd.size(), hvd.rank()
    x = torch.ones(2)
    for turn in range(n):
        name = f"dup.{turn}"
        if me == turn:
            first = hvd.allreduce_async(x, name=name, op=hvd.Sum)
            with pytest.raises(ValueError, match=name):
                hvd.allreduce_async(x, name=name, op=hvd.Sum)
            hvd.broadcast_(torch.zeros(1), root_rank=turn, name=f"dup.go.{turn}")
            out = hvd.synchronize(first)
        else:
            hvd.broadcast_(torch.zeros(1), root_rank=turn, name=f"dup.go.{turn}")
            out = hvd.synchronize(hvd.allreduce_async(x, name=name, op=hvd.Sum))
        assert torch.equal(out, torch.full((2,), float(n)))
    # the name is free again once the first completed
    hvd.synchronize(hvd.allreduce_async(x, name="dup.0"))
    still_works()


def test_error_message_names_the_tensor():
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.allreduce(torch.ones(1 + hvd.rank()), name="named.tensor")
    assert "named.tensor" in str(info.value)
    still_works()


def test_interrupted_blocking_allreduce_finishes_as_an_orphan():
    """A signal handler raises while rank 0 waits in a blocking allreduce
    (rank 1 comes a second late): the call raises at once, the operation
    still finishes with its tensor kept alive, and the job goes on."""
    from hvd import _core

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()

    n = hvd.size()
    want = torch.full((1000,), float(n * (n + 1) // 2))
    t = torch.full((1000,), float(hvd.rank() + 1))
    if hvd.rank() == 0:
        old = signal.signal(signal.SIGUSR1, handler)
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        try:
            with pytest.raises(Interrupted):
                hvd.allreduce_(t, op=hvd.Sum, name="interrupted.blocking")
        finally:
            timer.cancel()
            signal.signal(signal.SIGUSR1, old)
    else:
        time.sleep(1.0)
        hvd.allreduce_(t, op=hvd.Sum, name="interrupted.blocking")
        assert torch.equal(t, want)
    hvd.barrier()
    assert torch.equal(t, want)  # rank 0's too: the orphan ran to the end
    assert _core.pending_orphans() == 0
    still_works()
