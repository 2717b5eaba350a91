#!/usr/bin/env python3
"""horovod_step.py --model FILE.tsv [--steps N] [--warmup N] [--mode M] —
benchmarks/bench_step's training step through Horovod (horovod.torch, run
by benchmarks/run-step.sh HOROVOD=1 under Horovod's Gloo controller): every
gradient of the model (float32, read from the tsv, parameter order) is
submitted with allreduce_async_ in backward order, then all are waited for.
Warm-up steps, then timed steps; rank 0 prints one line as bench_step does:
  bench=step impl=horovod model=.. np=.. mode=M fusion_bytes=.. cycle_ms=..
  tensors=.. bytes=.. steps=.. ms_median=.. ms_mean=.. ms_min=..
The fusion threshold and cycle time are Horovod's (HOROVOD_FUSION_THRESHOLD,
HOROVOD_CYCLE_TIME; "default" when unset), or its autotuner's
(HOROVOD_AUTOTUNE=1, --mode autotune). Needs Horovod 0.28.1 on PYTHONPATH
(scripts/horovod.sh) and the torch it was built against."""
import argparse
import os
import statistics
import sys
import time

import torch
import horovod.torch as hvd


def shapes(path):
    """(name, numel) of every gradient, in parameter order."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or line.startswith("name\t") or not line.strip():
                continue
            name, _shape, numel = line.rstrip("\n").split("\t")
            out.append((name, int(numel)))
    if not out:
        sys.exit(f"horovod_step: {path} holds no tensors")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--mode", default="fusion")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 1:
        sys.exit("horovod_step: --steps and --warmup must be >= 1")
    model = shapes(a.model)
    torch.set_num_threads(1)
    hvd.init()
    grads = [torch.ones(n, dtype=torch.float32) for _, n in model]
    times = []
    for s in range(a.warmup + a.steps):
        for g in grads:
            g.fill_(1.0)
        t0 = time.perf_counter()
        handles = [hvd.allreduce_async_(grads[k], name=model[k][0], op=hvd.Sum)
                   for k in reversed(range(len(model)))]
        for h in handles:
            hvd.synchronize(h)
        dt = time.perf_counter() - t0
        if s == 0 and float(grads[0][0]) != hvd.size():
            sys.exit(f"horovod_step: '{model[0][0]}' holds {float(grads[0][0])} after one step, "
                     f"expected {hvd.size()}")
        if s >= a.warmup:
            times.append(dt * 1e3)
    if hvd.rank() == 0:
        name = os.path.basename(a.model).rsplit(".", 1)[0]
        nbytes = 4 * sum(n for _, n in model)
        print(f"bench=step impl=horovod model={name} np={hvd.size()} mode={a.mode}"
              f" fusion_bytes={os.environ.get('HOROVOD_FUSION_THRESHOLD', 'default')}"
              f" cycle_ms={os.environ.get('HOROVOD_CYCLE_TIME', 'default')} tensors={len(model)}"
              f" bytes={nbytes} steps={a.steps} ms_median={statistics.median(times):.3f}"
              f" ms_mean={statistics.mean(times):.3f} ms_min={min(times):.3f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
