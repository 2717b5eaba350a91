#!/usr/bin/env python3
"""hvd.torch allreduce in place, out of place (blocking, async, grouped, and
the fresh-allocation way it was done before kept buffers) and torch.distributed
gloo, 2 ranks, alternating, median of rounds; busbw and the ratios. Modes
add_ and add are the machine's own floor for the ratio: torch.add(t, u)
into t, and into two outputs in turn (as `out = hvd.allreduce(t)` leaves
them), on every rank at once; the column floor is add_'s speed over add's.
Run:
  ROUNDS=9 PYTHONPATH=build/python-binding/pkg build/tools/hvdrun -np 2 \
      /usr/bin/python3 benchmarks/torch_outofplace.py
Environment: ROUNDS, MINB, MAXB, MODES, GLOO_PORT."""
import os, sys, time, statistics
import torch
import torch.distributed as dist
import hvd.torch as hvd

torch.set_num_threads(1)
hvd.init()
r, n = hvd.rank(), hvd.size()
port = int(os.environ.get("GLOO_PORT", "29611"))
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=n)
rounds = int(os.environ.get("ROUNDS", "3"))
minb = int(os.environ.get("MINB", str(1 << 10)))
maxb = int(os.environ.get("MAXB", str(256 << 20)))
modes = os.environ.get("MODES", "inplace,outofplace,async,grouped,old,gloo").split(",")
sizes = []
b = minb
while b <= maxb:
    sizes.append(b)
    b *= 4
factor = 2 * (n - 1) / n


def iters(nbytes):
    return 100 if nbytes <= 64 << 10 else 50 if nbytes <= 1 << 20 else 10 if nbytes <= 16 << 20 else 4


def run(mode, t, k):
    if mode == "inplace":
        for _ in range(k):
            hvd.allreduce_(t, op=hvd.Sum, name="ip")
    elif mode == "outofplace":
        out = None
        for _ in range(k):
            out = hvd.allreduce(t, op=hvd.Sum, name="oop")
    elif mode == "async":
        out = None
        for _ in range(k):
            out = hvd.synchronize(hvd.allreduce_async(t, op=hvd.Sum, name="as"))
    elif mode == "grouped":
        out = None
        for _ in range(k):
            out = hvd.grouped_allreduce([t], op=hvd.Sum, name="gr")
    elif mode == "old":
        # the output as before the fix: a fresh torch allocation each call
        from hvd.torch import mpi_ops as mo
        out = None
        for _ in range(k):
            o = torch.empty_like(t, memory_format=torch.contiguous_format)
            out = hvd.synchronize(mo._allreduce_async(t, o, "old", hvd.Sum, 1.0, 1.0, hvd.global_process_set))
    elif mode == "add_":
        for _ in range(k):
            torch.add(t, floor_u[t.numel()], out=t)
    elif mode == "add":
        u, outs = floor_u[t.numel()], floor_out[t.numel()]
        for i in range(k):
            torch.add(t, u, out=outs[i % 2])
    elif mode == "gloo":
        for _ in range(k):
            dist.all_reduce(t)


res = {(m, s): [] for m in modes for s in sizes}
tensors = {s: torch.ones(s // 4, dtype=torch.float32) for s in sizes}
floor_u = {s // 4: torch.ones(s // 4) for s in sizes} if "add" in modes or "add_" in modes else {}
floor_out = {s // 4: [torch.ones(s // 4), torch.ones(s // 4)] for s in sizes} if "add" in modes else {}
for rd in range(rounds):
    for s in sizes:
        t = tensors[s]
        k = iters(s)
        reps = 5 if s <= 1 << 20 else 1
        for rep in range(reps):
            j = (rd * reps + rep) % len(modes)
            order = modes[j:] + modes[:j]  # each mode takes every place in turn
            for m in order:
                run(m, t, 1)  # warm
                dist.barrier()
                t0 = time.perf_counter()
                run(m, t, k)
                dt = (time.perf_counter() - t0) / k
                # the slower rank's time
                x = torch.tensor([dt], dtype=torch.float64)
                dist.all_reduce(x, op=dist.ReduceOp.MAX)
                res[(m, s)].append(x.item())
                t.fill_(1.0)
if r == 0:
    print("# commit=%s date=%s np=%d rounds=%d python=%s torch=%s load=%s" % (os.environ.get("COMMIT", "?"), time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), n, rounds, sys.executable, torch.__version__, open("/proc/loadavg").read().split()[:3]))
    print("# busbw GB/s (bytes*2(n-1)/n / median time; samples: rounds x 5 up to 1 MiB, rounds above); ratios of busbw")
    others = [m for m in modes if m not in ("inplace", "gloo", "add_", "add")]
    floor = "add_" in modes and "add" in modes
    hdr = "#%9s" % "bytes" + "".join("%12s" % m for m in modes)
    hdr += "".join("%10s" % ("ip/" + m[:5]) for m in others) + ("     floor" if floor else "")
    hdr += "  oop/gloo   ip/gloo" if "gloo" in modes else ""
    print(hdr)
    for s in sizes:
        bw = {m: s * factor / statistics.median(res[(m, s)]) / 1e9 for m in modes}
        line = "%10d" % s + "".join("%12.3f" % bw[m] for m in modes)
        line += "".join("%10.2f" % (bw["inplace"] / bw[m]) for m in others)
        if floor:
            line += "%10.2f" % (bw["add_"] / bw["add"])
        if "gloo" in bw:
            line += "  %8.2f  %8.2f" % (bw["outofplace"] / bw["gloo"], bw["inplace"] / bw["gloo"])
        print(line, flush=True)
    print("# ip/X: in place's busbw over X's (X's time over in place's); target <= 1.25")
    if floor:
        print("# floor: torch.add's time into two outputs in turn over its time in place, both ranks at once")
    for s in sizes:
        for m in modes:
            print("# raw bytes=%d mode=%s times_us=%s" % (s, m, ",".join("%.1f" % (x * 1e6) for x in res[(m, s)])))
dist.destroy_process_group()
hvd.shutdown()
