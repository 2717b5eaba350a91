#!/usr/bin/env python3
"""A job of one rank: the time of one blocking allreduce from Python, in
place and (where the system has one) out of place, per size, for one
system: hvd.torch (under hvdrun -np 1, or with no launcher), Horovod's
horovod.torch, or torch.distributed's gloo with a world of one. What a
script pays for its collectives when it runs on one process (a laptop, a
debug run, the first rung of a scaling curve). Each size is timed over
--min-time seconds of calls, --rounds times; one line per size:
  bench=one_rank impl=hvd launcher=hvdrun bytes=1024 in_place_us=3.1 out_of_place_us=4.0
(out_of_place_us=- where the system has no out-of-place call).
benchmarks/run-one-rank.sh runs every system alternating and tabulates."""
import argparse
import os
import statistics
import sys
import time

import torch


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", required=True, choices=("hvd", "horovod", "gloo"))
    p.add_argument("--launcher", default="-", help="a label for the output line")
    p.add_argument("--min-bytes", type=int, default=1024)
    p.add_argument("--max-bytes", type=int, default=1 << 20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.1)
    a = p.parse_args()
    if a.min_bytes < 4 or a.max_bytes < a.min_bytes:
        p.error("need 4 <= --min-bytes <= --max-bytes")
    if a.rounds < 1 or a.min_time <= 0:
        p.error("--rounds must be positive and --min-time above 0")
    return a


def calls(impl):
    """(in place, out of place or None) for a job of one rank of impl."""
    if impl == "gloo":
        import torch.distributed as dist
        port = 20000 + os.getpid() % 20000
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        return (lambda t: dist.all_reduce(t)), None
    if impl == "horovod":
        import horovod.torch as hvd
    else:
        import hvd.torch as hvd
    hvd.init()
    if hvd.size() != 1:
        sys.exit("torch_one_rank.py: a job of %d ranks; run it on one" % hvd.size())
    return (lambda t: hvd.allreduce_(t, name="one.ip")), (lambda t: hvd.allreduce(t, name="one.oop"))


def usec_per_call(f, t, min_time):
    f(t)  # warm: the first call of a name is negotiated
    k, t0 = 0, time.perf_counter()
    while True:
        f(t)
        k += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return dt / k * 1e6


def main():
    a = parse()
    torch.set_num_threads(1)
    ip, oop = calls(a.impl)
    b = a.min_bytes
    while b <= a.max_bytes:
        t = torch.ones(b // 4)
        res = {"ip": [], "oop": []}
        for _ in range(a.rounds):
            res["ip"].append(usec_per_call(ip, t, a.min_time))
            if oop is not None:
                out = usec_per_call(oop, t, a.min_time)
                res["oop"].append(out)
        o = "%.2f" % statistics.median(res["oop"]) if res["oop"] else "-"
        print("bench=one_rank impl=%s launcher=%s bytes=%d in_place_us=%.2f out_of_place_us=%s"
              % (a.impl, a.launcher, b, statistics.median(res["ip"]), o), flush=True)
        b *= 4


if __name__ == "__main__":
    main()
