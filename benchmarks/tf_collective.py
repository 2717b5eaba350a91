#!/usr/bin/env python3
"""tf_collective.py — hvd.tensorflow's allreduce beside hvd.torch's, one
rank of a job run by hvdrun: a float32 sweep (bytes from --min-bytes to
--max-bytes, doubling), a ResNet-50 gradient step (the shapes of
--model-tsv, all in flight together) and, for TensorFlow, the per-op cost
at 4 KiB. benchmarks/run-tf.sh runs it under both frontends, alternating,
beside tf.distribute (tf_mwms.py), and prints the ratios.

    hvdrun -np 2 TF_VENV/bin/python tf_collective.py --frontend tf
    hvdrun -np 2 TORCH_VENV/bin/python tf_collective.py --frontend torch

Rank 0 prints one line per result (sum of float32, same tensor name every
iteration: the steady state; busbw = algbw * 2(n-1)/n):

    bench=allreduce impl=hvd.tf.function bytes=4096 np=2 time_us=.. busbw_gbs=..
      impl: hvd.tf.function (a tf.function of one allreduce, called from
      Python), hvd.tf.eager (hvd.tensorflow.allreduce eagerly), hvd.torch
      (hvd.torch.allreduce); all out of place
    bench=step model=resnet50 impl=hvd.tf.ops|hvd.tf.grouped|hvd.torch.async|hvd.torch.grouped|... np=2 ms=..
      hvd.tf.ops: one allreduce op per tensor in one tf.function (what
      DistributedGradientTape runs); hvd.tf.grouped: one grouped_allreduce;
      hvd.torch.async: allreduce_async_ of every tensor, then synchronize
      each (what hvd.torch.DistributedOptimizer does: in place);
      hvd.torch.async_oop: the same out of place (allreduce_async, new
      outputs, as the TF ops' when TensorFlow cannot give them the input's
      buffer); hvd.torch.async_kept: out of place into outputs allocated
      once (as the TF ops' kept buffers); hvd.torch.grouped:
      grouped_allreduce_ (in place); *.made (both frontends): the gradients
      made inside the step (each tensor times a scalar argument), as a
      training step's are: TensorFlow then hands each op its input's
      buffer, reduced in place, and torch reduces the new tensors in place
    bench=floor impl=tf.function|tf.eager bytes=4096 np=2 time_us=..
      TensorFlow's own cost of the same call with no hvd in it: a
      tf.function of one tf.identity of the same tensor, called from
      Python, and tf.identity eagerly (TensorFlow frontend only)
    bench=op_cost bytes=4096 np=2 tf_loop_us=.. numpy_us=.. tf_minus_numpy_us=..
      tf_loop: allreduces chained in a tf.while_loop inside one tf.function
      (no Python between them); numpy: hvd.allreduce of a numpy array (the
      extension's path); the median of the rounds' differences
--tag T names a variant of the environment (run-tf.sh: +bfc, TensorFlow's
BFC allocator on the CPU, TF_CPU_ALLOCATOR_USE_BFC=true).
"""
import argparse
import statistics
import time

STEP_WARMUP = 2


def iters(nbytes):
    return 200 if nbytes <= 256 << 10 else 50 if nbytes <= 4 << 20 else 10 if nbytes <= 32 << 20 else 4


def sizes(lo, hi):
    n = lo
    while n <= hi:
        yield n
        n *= 2


def shapes(path):
    out = []
    for line in open(path):
        if line.startswith("#") or line.startswith("name\t"):
            continue
        f = line.rstrip("\n").split("\t")
        if len(f) >= 2:
            out.append([int(d) for d in f[1].split("x")])
    return out


def timed(fn, n):
    """Seconds per call of fn, n calls."""
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def median_of(fn, n, reps, barrier):
    out = []
    for _ in range(reps):
        barrier()
        out.append(timed(fn, n))
    return statistics.median(out)


class TF:
    def __init__(self):
        import numpy as np
        import tensorflow as tf

        import hvd
        import hvd.tensorflow as hvdtf

        self.np, self.tf, self.hvd, self.h = np, tf, hvd, hvdtf
        hvdtf.init()
        self.size, self.rank = hvdtf.size(), hvdtf.rank()

    def barrier(self):
        self.hvd.barrier()

    def sweep(self, nbytes):
        tf, h = self.tf, self.h
        t = tf.ones([nbytes // 4], tf.float32)
        fn = tf.function(lambda x: h.allreduce(x, op=h.Sum, name=f"sweep.fn.{nbytes}"))
        return self.timed_ways(nbytes, {
            "hvd.tf.function": lambda: fn(t),
            "hvd.tf.eager": lambda: h.allreduce(t, op=h.Sum, name=f"sweep.eager.{nbytes}"),
        })

    def timed_ways(self, nbytes, ways):
        """Seconds per call of each way (3 calls to warm it first)."""
        out = {}
        for k, f in ways.items():
            for _ in range(3):
                f()
            out[k] = median_of(lambda: f().shape, iters(nbytes), 1, self.barrier)
        return out

    def floor(self, nbytes):
        """TensorFlow's own per-call cost, the sweep's two ways, of an op
        that does nothing: what hvd's op cannot go below."""
        tf = self.tf
        t = tf.ones([nbytes // 4], tf.float32)
        fn = tf.function(lambda x: tf.identity(x))
        return self.timed_ways(nbytes, {"tf.function": lambda: fn(t), "tf.eager": lambda: tf.identity(t)})

    def step(self, tsv):
        tf, h = self.tf, self.h
        grads = [tf.ones(s, tf.float32) for s in shapes(tsv)][::-1]  # backward order

        @tf.function
        def ops(gs):
            return [h.allreduce(g, op=h.Sum, name=f"step.{i}") for i, g in enumerate(gs)]

        @tf.function
        def grouped(gs):
            return h.grouped_allreduce(gs, op=h.Sum, name="stepg")

        # gradients made inside the step, as a training step's are (scaled by
        # an argument, which no graph optimisation folds away)
        scale = tf.constant(1.0)

        @tf.function
        def ops_made(gs, s):
            return [h.allreduce(g * s, op=h.Sum, name=f"stepm.{i}") for i, g in enumerate(gs)]

        @tf.function
        def grouped_made(gs, s):
            return h.grouped_allreduce([g * s for g in gs], op=h.Sum, name="stepmg")

        return {"hvd.tf.ops": lambda: ops(grads)[-1].shape, "hvd.tf.grouped": lambda: grouped(grads)[-1].shape,
                "hvd.tf.ops.made": lambda: ops_made(grads, scale)[-1].shape,
                "hvd.tf.grouped.made": lambda: grouped_made(grads, scale)[-1].shape}

    def op_cost(self, calls, reps):
        """Per-op µs of 4 KiB allreduces chained in one tf.function against
        the numpy path, alternating; the median difference."""
        tf, h, np, hvd = self.tf, self.h, self.np, self.hvd
        x = tf.ones([1024], tf.float32)

        @tf.function
        def loop(x):
            for _ in tf.range(calls):
                x = h.allreduce(x, op=h.Average, name="opcost.tf")
            return x

        a = np.ones(1024, np.float32)
        numpy_fn = lambda: hvd.allreduce(a, op=hvd.Average, name="opcost.numpy")
        loop(x)
        timed(numpy_fn, 20)
        tf_us, np_us = [], []
        for _ in range(reps):
            self.barrier()
            start = time.perf_counter()
            loop(x).numpy()
            tf_us.append((time.perf_counter() - start) / calls * 1e6)
            self.barrier()
            np_us.append(timed(numpy_fn, calls) * 1e6)
        diff = statistics.median(t - n for t, n in zip(tf_us, np_us))
        return statistics.median(tf_us), statistics.median(np_us), diff


class Torch:
    def __init__(self):
        import torch

        import hvd.torch as hvdt

        torch.set_num_threads(1)
        self.torch, self.h = torch, hvdt
        hvdt.init()
        self.size, self.rank = hvdt.size(), hvdt.rank()

    def barrier(self):
        self.h.barrier()

    def sweep(self, nbytes):
        t = self.torch.ones(nbytes // 4, dtype=self.torch.float32)
        f = lambda: self.h.allreduce(t, op=self.h.Sum, name=f"sweep.torch.{nbytes}")
        for _ in range(3):
            f()
        return {"hvd.torch": median_of(f, iters(nbytes), 1, self.barrier)}

    def step(self, tsv):
        torch, h = self.torch, self.h
        grads = [torch.ones(s, dtype=torch.float32) for s in shapes(tsv)][::-1]
        names = [f"step.{i}" for i in range(len(grads))]

        def async_():
            handles = [h.allreduce_async_(g, op=h.Sum, name=n) for g, n in zip(grads, names)]
            for hd in handles:
                h.synchronize(hd)

        def async_oop():  # out of place, as the TF ops are
            handles = [h.allreduce_async(g, op=h.Sum, name=n) for g, n in zip(grads, names)]
            for hd in handles:
                h.synchronize(hd)

        from hvd.torch import mpi_ops
        outs = [torch.empty_like(g) for g in grads]
        onames = [f"stepo.{i}" for i in range(len(grads))]

        def async_kept():  # out of place into outputs kept from step to step, as the TF ops' are
            handles = [mpi_ops._allreduce_async(g, o, n, h.Sum, 1.0, 1.0, h.global_process_set)
                       for g, o, n in zip(grads, outs, onames)]
            for hd in handles:
                h.synchronize(hd)

        scale = torch.tensor(1.0)
        mnames = [f"stepm.{i}" for i in range(len(grads))]

        def async_made():  # gradients made in the step (a new tensor each), reduced in place
            made = [g * scale for g in grads]
            handles = [h.allreduce_async_(g, op=h.Sum, name=n) for g, n in zip(made, mnames)]
            for hd in handles:
                h.synchronize(hd)

        return {"hvd.torch.async": async_, "hvd.torch.async_oop": async_oop, "hvd.torch.async_kept": async_kept,
                "hvd.torch.grouped": lambda: h.grouped_allreduce_(grads, op=h.Sum, name="stepg"),
                "hvd.torch.async.made": async_made,
                "hvd.torch.grouped.made": lambda: h.grouped_allreduce_([g * scale for g in grads], op=h.Sum,
                                                                      name="stepmg")}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--frontend", choices=["tf", "torch"], required=True)
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--model-tsv", default="")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--op-calls", type=int, default=500)
    p.add_argument("--op-reps", type=int, default=7)
    p.add_argument("--tag", default="", help="appended to the impl names (impl=hvd.tf.ops+TAG)")
    args = p.parse_args()
    b = TF() if args.frontend == "tf" else Torch()
    say = (lambda s: print(s, flush=True)) if b.rank == 0 else (lambda s: None)
    factor = 2 * (b.size - 1) / b.size
    tag = f"+{args.tag}" if args.tag else ""
    for nbytes in sizes(args.min_bytes, args.max_bytes):
        for impl, sec in b.sweep(nbytes).items():
            say(f"bench=allreduce impl={impl}{tag} bytes={nbytes} np={b.size} time_us={sec * 1e6:.1f} "
                f"busbw_gbs={nbytes / sec / 1e9 * factor:.3f}")
        if args.frontend == "tf" and not tag:
            for impl, sec in b.floor(nbytes).items():
                say(f"bench=floor impl={impl} bytes={nbytes} np={b.size} time_us={sec * 1e6:.1f}")
    if args.model_tsv:
        model = args.model_tsv.rsplit("/", 1)[-1].split(".")[0]
        for impl, fn in b.step(args.model_tsv).items():
            for _ in range(STEP_WARMUP):
                fn()
            ms = [median_of(fn, 1, 1, b.barrier) * 1e3 for _ in range(args.steps)]
            say(f"bench=step model={model} impl={impl}{tag} np={b.size} ms={statistics.median(ms):.2f} "
                f"ms_min={min(ms):.2f} ms_max={max(ms):.2f} steps={args.steps}")
    if args.frontend == "tf" and args.op_calls > 0:
        tf_us, np_us, diff = b.op_cost(args.op_calls, args.op_reps)
        say(f"bench=op_cost bytes=4096 np={b.size} tf_loop_us={tf_us:.1f} numpy_us={np_us:.1f} "
            f"tf_minus_numpy_us={diff:.1f} calls={args.op_calls} reps={args.op_reps}")


if __name__ == "__main__":
    main()
