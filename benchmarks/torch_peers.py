#!/usr/bin/env python3
"""torch_peers.py — one rank of the Python benchmarks that put hvd.torch
beside Horovod and torch.distributed (benchmarks/run-python.sh and
benchmarks/run-scaling.sh run it, alternating, and tabulate the ratios).

The same code runs against hvd and Horovod; only the import differs, the
one line a Horovod script changes to run on hvd:

    --impl horovod   import horovod.torch as hvd    (under horovodrun --gloo)
    --impl hvd       import hvd.torch as hvd        (under hvdrun)
    --impl torch     torch.distributed, gloo backend: the ranks from RANK,
                     WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun's names)

What it measures (--what, comma-separated; rank 0 prints one line each):

    sweep    float32 allreduce (sum) from --min-bytes to --max-bytes,
             doubling, the same tensor every call (the steady state):
             mode=inplace: hvd.allreduce_(t); dist.all_reduce(t)
             mode=outofplace: hvd.allreduce(t) (a new output each call);
             torch has no out-of-place allreduce, so t.clone() then
             dist.all_reduce on the clone, as a script would
             mode=unnamed (hvd and Horovod): hvd.allreduce(t) without a
             name, the call a script makes for a metric (Horovod names it
             allreduce.noname.<n>, new each call)
             mode=grouped: two tensors of half the bytes each, in place, as
             one group: hvd.grouped_allreduce_([a, b]); torch: two
             asynchronous dist.all_reduce, then both waited for
             mode=shared (hvd only): hvd.allreduce_(t) on a shared tensor
             (hvd.shared_like), which the other local ranks read in place
        bench=allreduce impl=I mode=M bytes=N np=P time_us=.. busbw_gbs=..
    colls    broadcast, allgather, reducescatter (float32, sum) and
             alltoall (equal parts), the blocking calls a script makes,
             from --min-bytes to --max-bytes: bytes is the broadcast
             tensor, the gathered result, the reduced input and what each
             rank sends (nccl-tests' convention); busbw = algbw times 1,
             (np-1)/np, (np-1)/np, (np-1)/np.
             hvd, Horovod: hvd.broadcast_(t, 0), hvd.allgather(part)
             (a new result each call), hvd.reducescatter(t, op=Sum),
             hvd.alltoall(t) (a new result each call);
             torch: dist.broadcast(t, 0), dist.all_gather_into_tensor
             (or dist.all_gather into a list where gloo has no
             all_gather_into_tensor), dist.reduce_scatter_tensor,
             dist.all_to_all_single; an op a system lacks prints
             "# IMPL (no OP: why)" and no line
        bench=coll op=O impl=I bytes=N np=P time_us=.. busbw_gbs=..
    step     the gradients of --model-tsv (ResNet-50: 161 tensors, 97.5 MiB),
             averaged in backward order, all in flight together:
             mode=async: allreduce_async_ of each, then synchronize each
             (what DistributedOptimizer does), for torch all_reduce with
             async_op=True per tensor, then wait and divide;
             mode=shared (hvd only, impl=hvd_shared): async, the
             gradients shared tensors (hvd.shared_like);
             mode=buckets (torch only): DistributedDataParallel's way,
             gradients copied into 25 MiB buckets (the first 1 MiB), one
             asynchronous all_reduce per bucket, then divided and copied back
        bench=step model=resnet50 impl=I mode=M np=P ms=..
    train    a real training step (forward, backward, SGD with momentum)
             of --train-model on synthetic data, through
             hvd.DistributedOptimizer, or DistributedDataParallel for torch;
             compute_ms is the same step of a copy of the model with no
             communication at all, timed in the same rounds
        bench=train model=M impl=I np=P batch=B ms=.. compute_ms=.. params=..
    scaling  a training step with a compute model and the gradients of
             --model-tsv: --fwd-ms of forward, then --bwd-ms of backward
             spread evenly over the tensors in backward order, each
             gradient's allreduce started as soon as it is "computed"; the
             compute is time.sleep, so N ranks emulate N independent
             accelerators on a machine with fewer cores. torch: DDP's
             25 MiB buckets as in step. --impl plain: one process, the
             compute alone, no communication: the single-device rate
        bench=scaling model=resnet50 impl=I np=P batch=B img_s=.. ms=.. mib=.. cpu_ms=..
             (img_s: one rank's images/s, batch / step time; cpu_ms: this
             rank's process CPU time, user + system, per timed step)

Timings are medians over --reps repetitions of each measurement inside a
run, each after a barrier; the rounds of run-python.sh give the spread. A
sweep repetition is as many calls as fill --min-time (0.1 s) at the pace of
a warm call, at least 3, the count rank 0's; the steps take --steps.
"""
import argparse
import os
import resource
import statistics
import sys
import time

torch = None  # imported by main() once the arguments are checked (it takes seconds)

BUCKET_BYTES = 25 << 20  # DistributedDataParallel's bucket_cap_mb default
FIRST_BUCKET_BYTES = 1 << 20  # and its first, smaller bucket


def shapes(path):
    out = []
    for line in open(path):
        if line.startswith("#") or line.startswith("name\t"):
            continue
        f = line.rstrip("\n").split("\t")
        if len(f) >= 2:
            out.append([int(d) for d in f[1].split("x")])
    return out


def sizes(lo, hi):
    n = lo
    while n <= hi:
        yield n
        n *= 2


def iters(nbytes):
    return 30 if nbytes <= 256 << 10 else 10 if nbytes <= 4 << 20 else 5 if nbytes <= 32 << 20 else 3


def calls_for(min_time, last):
    """Calls that fill min_time at the pace of one call that took last
    seconds, at least 3 (benchmarks/bench_collective's rule)."""
    n = min_time / last if last > 0 else 1e6
    return 3 if n < 3 else 1000000 if n > 1e6 else int(n) + 1


class Comm:
    """The few collectives the benchmarks need, over Horovod's API or
    torch.distributed."""

    def __init__(self, impl):
        self.impl = impl
        if impl == "torch":
            import torch.distributed as dist

            self.dist = dist
            dist.init_process_group("gloo", rank=int(os.environ["RANK"]),
                                    world_size=int(os.environ["WORLD_SIZE"]))
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
            self.where = f"torch.distributed gloo ({dist.__file__})"
            return
        if impl == "horovod":
            import horovod.torch as hvd
        else:
            import hvd.torch as hvd
        self.hvd = hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        self.where = f"{impl} ({hvd.__file__})"

    def barrier(self):
        if self.impl == "torch":
            self.dist.barrier()
        else:
            # Horovod 0.28.1 has barrier(); a tiny allreduce works on both
            self.hvd.allreduce(torch.zeros(1), name="bench.barrier", op=self.hvd.Sum)

    def agree(self, n, name):
        """Rank 0's integer n, on every rank."""
        k = torch.tensor([n], dtype=torch.int64)
        if self.impl == "torch":
            self.dist.broadcast(k, 0)
            return int(k.item())
        return int(self.hvd.broadcast(k, root_rank=0, name=name).item())

    def allreduce_inplace(self, t, name):
        if self.impl == "torch":
            self.dist.all_reduce(t)
        else:
            self.hvd.allreduce_(t, name=name, op=self.hvd.Sum)

    def allreduce_outofplace(self, t, name):
        if self.impl == "torch":
            out = t.clone()
            self.dist.all_reduce(out)
            return out
        return self.hvd.allreduce(t, name=name, op=self.hvd.Sum)

    def allreduce_unnamed(self, t):
        return self.hvd.allreduce(t, op=self.hvd.Sum)

    def allreduce_grouped(self, ts, name):
        if self.impl == "torch":
            for w in [self.dist.all_reduce(t, async_op=True) for t in ts]:
                w.wait()
        else:
            self.hvd.grouped_allreduce_(ts, name=name, op=self.hvd.Sum)

    def collective(self, op, count, name):
        """A function that runs one blocking op (broadcast, allgather,
        reducescatter, alltoall) of a float32 tensor of count elements (the
        gathered total, the reduced input, what each rank sends), or why
        this system cannot."""
        n = self.size
        part = torch.ones(count // n)
        t = torch.ones(count)
        if self.impl != "torch":
            hvd = self.hvd
            fns = {"broadcast": lambda: hvd.broadcast_(t, 0, name=name),
                   "allgather": lambda: hvd.allgather(part, name=name),
                   "reducescatter": lambda: hvd.reducescatter(t, name=name, op=hvd.Sum),
                   "alltoall": lambda: hvd.alltoall(t, name=name)}
            return fns[op]
        dist = self.dist
        if op == "broadcast":
            return lambda: dist.broadcast(t, 0)
        if op == "allgather":
            out = torch.empty(count // n * n)
            try:
                dist.all_gather_into_tensor(out, part)
                return lambda: dist.all_gather_into_tensor(out, part)
            except (AttributeError, RuntimeError, NotImplementedError):
                outs = [torch.empty(count // n) for _ in range(n)]
                return lambda: dist.all_gather(outs, part)
        if op == "alltoall":
            out = torch.empty(count)
            try:
                dist.all_to_all_single(out, t)
            except (AttributeError, RuntimeError, NotImplementedError) as e:
                return f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            return lambda: dist.all_to_all_single(out, t)
        out = torch.empty(count // n)
        try:
            dist.reduce_scatter_tensor(out, t)
        except (AttributeError, RuntimeError, NotImplementedError) as e:
            return f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        return lambda: dist.reduce_scatter_tensor(out, t)

    def average_async(self, grads, prefix):
        """Starts the average of every tensor of grads (in this order);
        returns a function that waits for them all."""
        if self.impl == "torch":
            works = [self.dist.all_reduce(g, async_op=True) for g in grads]

            def wait():
                for w, g in zip(works, grads):
                    w.wait()
                    g.div_(self.size)
            return wait
        hs = [self.hvd.allreduce_async_(g, name=f"{prefix}.{i}", op=self.hvd.Average) for i, g in enumerate(grads)]

        def wait():
            for h in hs:
                self.hvd.synchronize(h)
        return wait

    def shutdown(self):
        if self.impl == "torch":
            self.dist.destroy_process_group()
        else:
            self.hvd.shutdown()


class Buckets:
    """DistributedDataParallel's communication: gradients (in backward order)
    copied into flat buckets of up to 25 MiB (the first up to 1 MiB), one
    asynchronous all_reduce per bucket as soon as it is full, then divided
    and copied back."""

    def __init__(self, comm, grads):
        self.comm, self.grads, self.buckets = comm, grads, []
        cur, cur_bytes, cap = [], 0, FIRST_BUCKET_BYTES
        for i, g in enumerate(grads):
            cur.append(i)
            cur_bytes += g.numel() * 4
            if cur_bytes >= cap:
                self.buckets.append(cur)
                cur, cur_bytes, cap = [], 0, BUCKET_BYTES
        if cur:
            self.buckets.append(cur)
        self.flat = [torch.empty(sum(grads[i].numel() for i in b)) for b in self.buckets]
        self.last = {b[-1]: k for k, b in enumerate(self.buckets)}
        self.works = []

    def ready(self, i):
        """Gradient i is computed: start its bucket when it is the last one in it."""
        k = self.last.get(i)
        if k is None:
            return
        off, flat = 0, self.flat[k]
        for j in self.buckets[k]:
            n = self.grads[j].numel()
            flat[off:off + n].copy_(self.grads[j].view(-1))
            off += n
        self.works.append((k, self.comm.dist.all_reduce(flat, async_op=True)))

    def wait(self):
        for k, w in self.works:
            w.wait()
            flat = self.flat[k]
            flat.div_(self.comm.size)
            off = 0
            for j in self.buckets[k]:
                n = self.grads[j].numel()
                self.grads[j].view(-1).copy_(flat[off:off + n])
                off += n
        self.works = []


def timed(comm, fn, n, reps):
    """Median over reps of the seconds per call of fn, n calls after a barrier."""
    out = []
    for _ in range(reps):
        comm.barrier()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - start) / n)
    return statistics.median(out)


def sweep_time(comm, args, fn, nbytes, name):
    """Seconds per call of fn, a sweep's call of nbytes: warmed, then
    timed over iters(nbytes) calls, or with --min-time (every system
    alike) as many as fill it at its own warm pace, rank 0's count, then
    warm again after the broadcast."""
    fn()
    fn()
    n = iters(nbytes)
    if args.min_time > 0:
        w0 = time.perf_counter()
        fn()
        n = comm.agree(calls_for(args.min_time, time.perf_counter() - w0), f"{name}.calls")
        fn()
    return timed(comm, fn, n, args.reps)


def sweep(comm, args, emit):
    factor = 2 * (comm.size - 1) / comm.size
    for nbytes in sizes(args.min_bytes, args.max_bytes):
        t = torch.ones(nbytes // 4)
        # hvd alone: in place on a shared tensor (hvd.shared_zeros), which
        # the other local ranks read in place
        halves = [torch.ones(nbytes // 8), torch.ones(nbytes // 8)]
        modes = ("inplace", "outofplace") + (("unnamed",) if comm.impl != "torch" else ()) + ("grouped",) + \
            (("shared",) if comm.impl == "hvd" else ())
        for mode in modes:
            name = f"sweep.{mode}.{nbytes}"
            if mode == "shared":
                ts = comm.hvd.shared_like(t)

                def fn():
                    comm.allreduce_inplace(ts, name)
            elif mode == "inplace":
                def fn():
                    comm.allreduce_inplace(t, name)
            elif mode == "unnamed":
                def fn():
                    comm.allreduce_unnamed(t)
            elif mode == "grouped":
                def fn():
                    comm.allreduce_grouped(halves, name)
            else:
                def fn():
                    comm.allreduce_outofplace(t, name)
            dt = sweep_time(comm, args, fn, nbytes, name)
            emit(f"bench=allreduce impl={comm.impl if comm.impl != 'torch' else 'gloo'} mode={mode} bytes={nbytes} "
                 f"np={comm.size} time_us={dt * 1e6:.1f} busbw_gbs={nbytes * factor / dt / 1e9:.3f}")


def colls(comm, args, emit):
    impl = comm.impl if comm.impl != "torch" else "gloo"
    factor = {"broadcast": 1.0, "allgather": (comm.size - 1) / comm.size,
              "reducescatter": (comm.size - 1) / comm.size, "alltoall": (comm.size - 1) / comm.size}
    lacking = set()
    for nbytes in sizes(args.min_bytes, args.max_bytes):
        count = nbytes // 4 // comm.size * comm.size
        if count < comm.size:
            continue
        for op in ("broadcast", "allgather", "reducescatter", "alltoall"):
            if op in lacking:
                continue
            name = f"colls.{op}.{nbytes}"
            fn = comm.collective(op, count, name)
            if isinstance(fn, str):
                lacking.add(op)
                emit(f"# {impl} (no {op}: {fn})")
                continue
            dt = sweep_time(comm, args, fn, nbytes, name)
            emit(f"bench=coll op={op} impl={impl} bytes={count * 4} np={comm.size} time_us={dt * 1e6:.1f} "
                 f"busbw_gbs={count * 4 * factor[op] / dt / 1e9:.3f}")


def step(comm, args, emit):
    grads = [torch.ones(s) for s in reversed(shapes(args.model_tsv))]
    model = os.path.basename(args.model_tsv).rsplit(".", 1)[0]
    ways = {"async": lambda: comm.average_async(grads, "step")()}
    if comm.impl == "torch":
        buckets = Buckets(comm, grads)

        def bucketed():
            for i in range(len(grads)):
                buckets.ready(i)
            buckets.wait()
        ways["buckets"] = bucketed
    if comm.impl == "hvd":
        # the same gradients as shared tensors (DistributedOptimizer's
        # shared_gradients=True), which the other local ranks read in place
        shared = [comm.hvd.shared_like(g) for g in grads]
        ways["shared"] = lambda: comm.average_async(shared, "step.shared")()
    for mode, fn in ways.items():
        fn()
        fn()
        dt = timed(comm, fn, args.steps, args.reps)
        impl = ("ddp" if mode == "buckets" else "gloo" if comm.impl == "torch"
                else "hvd_shared" if mode == "shared" else comm.impl)
        emit(f"bench=step model={model} impl={impl} mode={mode} np={comm.size} ms={dt * 1e3:.2f} "
             f"tensors={len(grads)} mib={sum(g.numel() for g in grads) * 4 / 2**20:.1f}")


MODEL_NAMES = ("textcls", "mlp", "cnn")


def make_models():
    """The models of --what train, by name."""

    class TextClassifier(torch.nn.Module):
        """A bag-of-words text classifier (fastText-like): a large embedding
        table with dense gradients, the mean of each document's token vectors,
        two small linear layers, trained with plain SGD as fastText is. 12.8 M
        parameters and little arithmetic: its step is the 49 MiB gradient's
        allreduce plus a few passes over memory."""

        def __init__(self, vocab=100_000, dim=128, classes=16):
            super().__init__()
            self.emb = torch.nn.EmbeddingBag(vocab, dim, mode="mean")
            self.fc1 = torch.nn.Linear(dim, dim)
            self.fc2 = torch.nn.Linear(dim, classes)
            self.vocab, self.classes = vocab, classes

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(self.emb(x))))

        def batch(self, n, g):
            return torch.randint(0, self.vocab, (n, 64), generator=g), torch.randint(0, self.classes, (n,), generator=g)

    class MLP(torch.nn.Module):
        """A wide multilayer perceptron, 1024-4096-4096-10 (21 M parameters): as
        many gradients as the text classifier and much more arithmetic."""

        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                                           torch.nn.ReLU(), torch.nn.Linear(4096, 10))

        def forward(self, x):
            return self.net(x)

        def batch(self, n, g):
            return torch.randn(n, 1024, generator=g), torch.randint(0, 10, (n,), generator=g)

    class CNN(torch.nn.Module):
        """A small CNN on MNIST-sized images (two 3x3 convolutions, two linear
        layers, 0.4 M parameters): compute-bound."""

        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
            self.fc1 = torch.nn.Linear(32 * 7 * 7, 256)
            self.fc2 = torch.nn.Linear(256, 10)

        def forward(self, x):
            f = torch.nn.functional
            x = f.max_pool2d(f.relu(self.conv1(x)), 2)
            x = f.max_pool2d(f.relu(self.conv2(x)), 2)
            return self.fc2(f.relu(self.fc1(x.flatten(1))))

        def batch(self, n, g):
            return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)

    return {"textcls": TextClassifier, "mlp": MLP, "cnn": CNN}


def train(comm, args, emit):
    models = make_models()
    for name in args.train_model.split(","):
        torch.manual_seed(0)
        model, plain = models[name](), models[name]()
        plain.load_state_dict(model.state_dict())
        # fastText trains its embeddings with plain SGD; the others with momentum
        momentum = 0.0 if name == "textcls" else 0.9
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=momentum)
        plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01, momentum=momentum)
        if comm.impl == "torch":
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(model)
        else:
            net = model
            comm.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            opt = comm.hvd.DistributedOptimizer(opt, named_parameters=[(f"{name}.{n}", p)
                                                                       for n, p in model.named_parameters()])
        x, y = model.batch(args.batch, torch.Generator().manual_seed(comm.rank))
        loss_fn = torch.nn.functional.cross_entropy

        def dist_step():
            model.zero_grad(set_to_none=True)  # Horovod's optimizer has no set_to_none
            loss_fn(net(x), y).backward()
            opt.step()

        def plain_step():
            plain.zero_grad(set_to_none=True)
            loss_fn(plain(x), y).backward()
            plain_opt.step()

        for _ in range(3):
            dist_step()
            plain_step()
        dms, pms = [], []
        for _ in range(args.reps):
            dms.append(timed(comm, dist_step, args.steps, 1))
            pms.append(timed(comm, plain_step, args.steps, 1))
        params = sum(p.numel() for p in model.parameters())
        emit(f"bench=train model={name} impl={'ddp' if comm.impl == 'torch' else comm.impl} np={comm.size} "
             f"batch={args.batch} ms={statistics.median(dms) * 1e3:.2f} compute_ms={statistics.median(pms) * 1e3:.2f} "
             f"params={params}")


class Compute:
    """The compute model's clock: forward() then backward(i) for each
    tensor i in backward order sleep until that part's end, counted from
    the step's start, so the sleeps' overshoot and the time spent starting
    allreduces do not add up over the step's 161 parts (an accelerator
    computes while the host starts the communication)."""

    def __init__(self, fwd_ms, bwd_ms, parts):
        self.fwd, self.per = fwd_ms / 1e3, bwd_ms / 1e3 / parts
        self.next = 0.0

    def _until(self):
        d = self.next - time.perf_counter()
        if d > 0:
            time.sleep(d)

    def forward(self):
        self.next = time.perf_counter() + self.fwd
        self._until()

    def backward(self):
        self.next += self.per
        self._until()


def scaling(comm, args, emit):
    grads = [torch.ones(s) for s in reversed(shapes(args.model_tsv))]
    model = os.path.basename(args.model_tsv).rsplit(".", 1)[0]
    clock = Compute(args.fwd_ms, args.bwd_ms, len(grads))

    if comm is None:
        def one():
            clock.forward()
            for _ in grads:
                clock.backward()
    elif comm.impl == "torch":
        buckets = Buckets(comm, grads)

        def one():
            clock.forward()
            for i in range(len(grads)):
                clock.backward()
                buckets.ready(i)
            buckets.wait()
    else:
        hvd = comm.hvd

        def one():
            clock.forward()
            hs = []
            for i, g in enumerate(grads):
                clock.backward()
                hs.append(hvd.allreduce_async_(g, name=f"scaling.{i}", op=hvd.Average))
            for h in hs:
                hvd.synchronize(h)
    for _ in range(2):
        one()
    if comm is None:
        dt = statistics.median(_plain_timed(one, args.steps) for _ in range(args.reps))
        np_, impl = 1, "plain"
    else:
        cpu0 = _cpu_s()
        dt = timed(comm, one, args.steps, args.reps)
        cpu = (_cpu_s() - cpu0) / (args.steps * args.reps)
        np_, impl = comm.size, "ddp" if comm.impl == "torch" else comm.impl
    emit(f"bench=scaling model={model} impl={impl} np={np_} batch={args.batch} img_s={args.batch / dt:.1f} "
         f"ms={dt * 1e3:.1f} fwd_ms={args.fwd_ms} bwd_ms={args.bwd_ms} "
         f"mib={sum(g.numel() for g in grads) * 4 / 2**20:.1f}" + ("" if comm is None else f" cpu_ms={cpu * 1e3:.1f}"))


def _cpu_s():
    """CPU seconds (user + system) of this process, all its threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _plain_timed(fn, n):
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=("hvd", "horovod", "torch", "plain"), required=True,
                    help="plain: no communication, one process (--what scaling only)")
    ap.add_argument("--what", default="sweep,step,train")
    ap.add_argument("--min-bytes", type=int, default=1024)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.1,
                    help="sweep: seconds of calls per repetition (0: a fixed count per size)")
    ap.add_argument("--steps", type=int, default=5, help="steps per repetition (step, train, scaling)")
    ap.add_argument("--model-tsv", help="gradient shapes (step, scaling), e.g. shared/data/resnet50.tsv")
    ap.add_argument("--train-model", default="textcls,cnn", help=f"comma-separated, of {','.join(MODEL_NAMES)}")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fwd-ms", type=float, default=60.0, help="scaling: forward time of the compute model")
    ap.add_argument("--bwd-ms", type=float, default=120.0, help="scaling: backward time of the compute model")
    args = ap.parse_args()
    what = args.what.split(",")
    bad = [w for w in what if w not in ("sweep", "colls", "step", "train", "scaling")]
    if bad:
        ap.error(f"unknown --what {','.join(bad)}")
    if any(w in ("step", "scaling") for w in what) and not args.model_tsv:
        ap.error("--what step and scaling need --model-tsv")
    if any(m not in MODEL_NAMES for m in args.train_model.split(",")):
        ap.error(f"--train-model: one of {','.join(MODEL_NAMES)}")
    if args.impl == "plain" and what != ["scaling"]:
        ap.error("--impl plain measures --what scaling only")
    global torch
    import torch

    torch.set_num_threads(1)
    if args.impl == "plain":
        scaling(None, args, print)
        return
    comm = Comm(args.impl)

    def emit(line):
        if comm.rank == 0:
            print(line, flush=True)
    emit(f"# {comm.where}, torch {torch.__version__}, {comm.size} ranks")
    for w in what:
        {"sweep": sweep, "colls": colls, "step": step, "train": train, "scaling": scaling}[w](comm, args, emit)
    comm.shutdown()


if __name__ == "__main__":
    sys.exit(main())
