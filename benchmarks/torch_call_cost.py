#!/usr/bin/env python3
"""The Python cost of one hvd.torch allreduce call, without the data plane:
hvd._core.submit is replaced by a stub whose handle is complete at once, so
what is timed is hvd.torch's own work (argument handling, the output, the
reuse check, the request, the wait's bookkeeping), named and without a
name (allreduce.unnamed: the named call plus the name's slot,
hvd.common.ops.unnamed_blocking). Also the reuse search alone
(hvd.torch._reuse.take_of, in hvd._core and in its Python loop) and a
fresh torch.empty_like for comparison. Minimum over batches (robust on a
busy machine: preemption only adds). One process, no daemon needed:
  PYTHONPATH=build/python-binding/pkg python3 benchmarks/torch_call_cost.py
Prints one line per measurement:
  bench=call_cost torch=2.15.0 what=allreduce bytes=1024 usec=2.67
Environment: BATCHES (80), CALLS (200)."""
import os
import time

import torch

from hvd import _core
import hvd.torch as hvd
from hvd.torch import _reuse

BATCHES = int(os.environ.get("BATCHES", "80"))
CALLS = int(os.environ.get("CALLS", "200"))
torch.set_num_threads(1)


def best_usec(f):
    best = None
    for _ in range(BATCHES):
        t0 = time.perf_counter_ns()
        for _ in range(CALLS):
            f()
        dt = time.perf_counter_ns() - t0
        best = dt if best is None or dt < best else best
    return best / CALLS / 1000


class _Done:
    """A handle of an operation that has completed."""
    __slots__ = ("keepalive",)

    def wait(self, timeout=None):
        return True

    def poll(self):
        return True


def _stub_submit(kind, requests, keepalive=None, grouped=False, waits=False):
    h = _Done()
    h.keepalive = keepalive
    return h


def main():
    hvd.init()
    _core.submit = _stub_submit
    held = [None]
    for nbytes in (1024, 65536):
        t = torch.ones(nbytes // 4)

        def in_place():
            hvd.allreduce_(t, op=hvd.Sum, name="cost.ip")

        def out_of_place():
            held[0] = hvd.allreduce(t, op=hvd.Sum, name="cost.oop")

        def unnamed():
            held[0] = hvd.allreduce(t, op=hvd.Sum)

        def async_sync():
            held[0] = hvd.synchronize(hvd.allreduce_async(t, op=hvd.Sum, name="cost.async"))

        def empty_like():
            held[0] = torch.empty_like(t)

        for what, f in (("allreduce_", in_place), ("allreduce", out_of_place), ("allreduce.unnamed", unnamed),
                        ("allreduce_async", async_sync), ("empty_like", empty_like)):
            print(f"bench=call_cost torch={torch.__version__} what={what} bytes={nbytes} usec={best_usec(f):.2f}",
                  flush=True)
        if not hasattr(_reuse, "take_of"):  # an older package: no search of its own to time
            continue
        _reuse.clear()
        _reuse.keep(torch.empty_like(t))
        dtype, shape = t.dtype, t.shape
        pick = _reuse._pick
        for impl in ("c", "python"):
            if impl == "c" and pick is None:
                continue
            _reuse._pick = pick if impl == "c" else None
            usec = best_usec(lambda: _reuse.take_of(dtype, shape))
            print(f"bench=call_cost torch={torch.__version__} what=take_of.{impl} bytes={nbytes} usec={usec:.2f}",
                  flush=True)
        _reuse._pick = pick
    hvd.shutdown()


if __name__ == "__main__":
    main()
