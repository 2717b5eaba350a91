#!/usr/bin/env python3
"""tf_mwms.py — the peer a TensorFlow user would pick for hvd.tensorflow:
tf.distribute.MultiWorkerMirroredStrategy, 2 workers on this machine
(TF_CONFIG with two localhost ports, CommunicationImplementation.RING over
gRPC), doing what tf_collective.py times through hvd: a ResNet-50 gradient
step (the shapes of --model-tsv, float32 sums) as one packed all-reduce of
every gradient (bytes_per_pack=0), in packs of 25 MiB, and tensor by
tensor; and single all-reduces of --sizes bytes. Spawns its own workers;
worker 0 prints, in tf_collective.py's format:

    bench=allreduce impl=mwms bytes=1048576 np=2 time_us=.. busbw_gbs=..
    bench=step model=resnet50 impl=mwms.packed|mwms.pack25M|mwms.per_tensor np=2 ms=..

    TF_VENV/bin/python tf_mwms.py --model-tsv resnet50.tsv [--steps N] [--sizes 4096,1048576,67108864]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from tf_collective import iters, shapes


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def worker(args):
    ports = [int(p) for p in args.ports.split(",")]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": args.worker}})
    import tensorflow as tf

    exp = tf.distribute.experimental
    ring = exp.CommunicationOptions(implementation=exp.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=ring)
    n = len(ports)
    say = (lambda s: print(s, flush=True)) if args.worker == 0 else (lambda s: None)
    SUM = tf.distribute.ReduceOp.SUM

    def replica_fn(body):
        @tf.function
        def run():
            return strategy.run(lambda: body(tf.distribute.get_replica_context()))
        return run

    sync = replica_fn(lambda ctx: ctx.all_reduce(SUM, tf.ones([1])))

    def seconds(fn, calls, reps):
        out = []
        for _ in range(reps):
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - start) / calls)
        return out

    if args.model_tsv:
        model = os.path.basename(args.model_tsv).split(".")[0]
        grads = [tf.ones(s, tf.float32) for s in shapes(args.model_tsv)][::-1]
        pack25 = exp.CommunicationOptions(bytes_per_pack=25 << 20, implementation=exp.CommunicationImplementation.RING)
        ways = {
            "mwms.packed": replica_fn(lambda ctx: ctx.all_reduce(SUM, grads)),
            "mwms.pack25M": replica_fn(lambda ctx: ctx.all_reduce(SUM, grads, options=pack25)),
            "mwms.per_tensor": replica_fn(lambda ctx: [ctx.all_reduce(SUM, g) for g in grads]),
        }
        for impl, fn in ways.items():
            for _ in range(2):
                fn()
            ms = [s * 1e3 for s in seconds(fn, 1, args.steps)]
            say(f"bench=step model={model} impl={impl} np={n} ms={statistics.median(ms):.2f} "
                f"ms_min={min(ms):.2f} ms_max={max(ms):.2f} steps={args.steps}")
    for nbytes in [int(b) for b in args.sizes.split(",") if b]:
        t = tf.ones([nbytes // 4], tf.float32)
        fn = replica_fn(lambda ctx, t=t: ctx.all_reduce(SUM, t))
        for _ in range(3):
            fn()
        sec = statistics.median(seconds(fn, max(2, iters(nbytes) // 4), 3))
        say(f"bench=allreduce impl=mwms bytes={nbytes} np={n} time_us={sec * 1e6:.1f} "
            f"busbw_gbs={nbytes / sec / 1e9 * 2 * (n - 1) / n:.3f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--model-tsv", default="")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--sizes", default="4096,1048576,67108864")
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--ports", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker >= 0:
        return worker(args)
    ports = ",".join(str(x) for x in free_ports(args.np))
    cmd = [sys.executable, os.path.abspath(__file__), "--ports", ports, "--steps", str(args.steps),
           "--sizes", args.sizes, "--model-tsv", args.model_tsv]
    procs = [subprocess.Popen(cmd + ["--worker", str(i)], stdout=None if i == 0 else subprocess.DEVNULL)
             for i in range(args.np)]
    status = 0
    for pr in procs:
        try:
            status = pr.wait(timeout=args.timeout) or status
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print(f"tf_mwms: workers still running after {args.timeout} s: killed", file=sys.stderr)
            return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
