#!/usr/bin/env python3
"""torch_compile.py — hvd.torch under torch.compile against eager hvd.torch,
in one job, alternating round by round (these machines are noisy):

1. the per-call cost of a 4 KiB allreduce: eager hvd.torch.allreduce, the
   custom operator called directly (torch.ops.hvd.allreduce), and a
   compiled function that does nothing but that allreduce;
2. a training step of a small CNN (two convolutions, two linear layers,
   DistributedOptimizer with SGD and momentum): eager against the whole
   step under torch.compile (inductor), and against the eager step of the
   model compiled alone; and the same model's steps without hvd (plain
   SGD, no communication), which tell what torch.compile itself gains or
   loses on this model and CPU.

Prints one line per result, medians over the rounds, from rank 0:

    bench=torch_allreduce bytes=4096 np=2 eager_us=.. op_us=.. compiled_us=.. op_minus_eager_us=..
    bench=torch_step model=cnn batch=32 np=2 eager_ms=.. compiled_ms=.. compiled_over_eager=.. ...

Needs torch >= 2.4. From the top of the tree, after make:

    PYTHONPATH=build/python-binding/pkg build/tools/hvdrun -np 2 \\
        VENV/bin/python benchmarks/torch_compile.py [--rounds N]
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import hvd.torch as hvd
from hvd.torch import _library


def per_call_us(fn, calls):
    hvd.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def bench_allreduce(rounds, calls):
    t = torch.ones(1024, dtype=torch.float32)  # 4 KiB
    ways = {
        "eager": lambda: hvd.allreduce(t, name="bench.eager"),
        "op": lambda: torch.ops.hvd.allreduce(t, "bench.op", hvd.Average, 1.0, 1.0, 0),
    }
    compiled = torch.compile(lambda x: hvd.allreduce(x, name="bench.compiled"))
    ways["compiled"] = lambda: compiled(t)
    for fn in ways.values():  # warm up: the names' first negotiation, the compile
        for _ in range(20):
            fn()
    times = {k: [] for k in ways}
    for _ in range(rounds * 3):
        for k, fn in ways.items():
            times[k].append(per_call_us(fn, calls))
    med = {k: statistics.median(v) for k, v in times.items()}
    # the median of each round's difference: the noise of the machine cancels
    op_diff = statistics.median(o - e for o, e in zip(times["op"], times["eager"]))
    compiled_diff = statistics.median(c - e for c, e in zip(times["compiled"], times["eager"]))
    return (f"bench=torch_allreduce bytes=4096 np={hvd.size()} eager_us={med['eager']:.1f} "
            f"op_us={med['op']:.1f} compiled_us={med['compiled']:.1f} "
            f"op_minus_eager_us={op_diff:.1f} compiled_minus_eager_us={compiled_diff:.1f} "
            f"rounds={rounds * 3} calls={calls}")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def training(prefix, distributed=True, compile_model=False):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=[(f"{prefix}.{n}", p)
                                                              for n, p in model.named_parameters()])
    if compile_model:
        model = torch.compile(model)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def bench_step(rounds, steps, batch):
    g = torch.Generator().manual_seed(hvd.rank())
    x, y = torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g)
    ways = {"eager": training("eager"), "compiled": torch.compile(training("compiled")),
            "model_compiled": training("model", compile_model=True),
            "plain_eager": training("plain", distributed=False),
            "plain_compiled": torch.compile(training("plain_c", distributed=False))}
    for fn in ways.values():  # warm up: compiles, and recompiles once momentum exists
        for _ in range(5):
            fn(x, y)
    times = {k: [] for k in ways}
    for _ in range(rounds):
        for k, fn in ways.items():
            times[k].append(per_call_us(lambda: fn(x, y), steps) / 1000)
    med = {k: statistics.median(v) for k, v in times.items()}
    return (f"bench=torch_step model=cnn batch={batch} np={hvd.size()} eager_ms={med['eager']:.2f} "
            f"compiled_ms={med['compiled']:.2f} compiled_over_eager={med['compiled'] / med['eager']:.3f} "
            f"model_compiled_ms={med['model_compiled']:.2f} "
            f"model_compiled_over_eager={med['model_compiled'] / med['eager']:.3f} "
            f"plain_eager_ms={med['plain_eager']:.2f} plain_compiled_ms={med['plain_compiled']:.2f} "
            f"plain_compiled_over_eager={med['plain_compiled'] / med['plain_eager']:.3f} "
            f"rounds={rounds} steps={steps}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200, help="allreduces per way and round")
    ap.add_argument("--steps", type=int, default=10, help="training steps per way and round")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    if not _library.SUPPORTED:
        sys.exit(f"torch_compile.py needs torch >= 2.4 (this is {torch.__version__})")
    torch.set_num_threads(1)
    hvd.init()
    lines = [bench_allreduce(args.rounds, args.calls), bench_step(args.rounds, args.steps, args.batch)]
    if hvd.rank() == 0:
        print(f"# torch {torch.__version__}, {hvd.size()} ranks")
        for line in lines:
            print(line, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
