#!/usr/bin/env python3
"""gloo_collective.py — the torch.distributed (gloo) peer of
bench_collective: the same sweep (allreduce, broadcast, allgather,
alltoall: all_to_all_single in equal parts), the same output line format
(impl=gloo). Gloo in torch 1.13 has no reduce_scatter
(nor _allgather_base): allgather gathers into a list of per-rank tensors,
and --op reducescatter prints nothing. Spawns its own ranks on this machine.

    gloo_collective.py --np 2 [--op OP] [--min-bytes N] [--max-bytes N] [--iters N | --min-time S]"""
import argparse
import os
import time


def bench_iters(min_time, last):
    """Calls to time: enough to fill min_time at the pace of one call that
    took last seconds, at least 5 (bench_collective's rule)."""
    n = min_time / last if last > 0 else 1e6
    return 5 if n < 5 else 1000000 if n > 1e6 else int(n) + 1


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.np)
    size = args.np
    factor = {"allreduce": 2 * (size - 1) / size, "broadcast": 1.0, "allgather": (size - 1) / size,
              "alltoall": (size - 1) / size}[args.op]
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = nbytes // 4
        if count >= size:
            if args.op == "allgather":
                # bytes is the gathered total, as in nccl-tests
                t = torch.ones(count // size, dtype=torch.float32)
                outs = [torch.empty(count // size, dtype=torch.float32) for _ in range(size)]
                op = lambda: dist.all_gather(outs, t)
            elif args.op == "alltoall":
                # bytes is what each rank sends in all, equal parts to every rank
                t = torch.ones(count // size * size, dtype=torch.float32)
                out = torch.empty_like(t)
                op = lambda: dist.all_to_all_single(out, t)
            elif args.op == "broadcast":
                t = torch.ones(count, dtype=torch.float32)
                op = lambda: dist.broadcast(t, 0)
            else:
                t = torch.ones(count, dtype=torch.float32)
                op = lambda: dist.all_reduce(t)
            last = 0.0
            for _ in range(3):
                w0 = time.perf_counter()
                op()
                last = time.perf_counter() - w0
            n = args.iters
            if not n:
                # bench_collective's rule: rank 0's count, broadcast, then warm again
                k = torch.tensor([bench_iters(args.min_time, last)], dtype=torch.int64)
                dist.broadcast(k, 0)
                n = int(k.item())
                for _ in range(3):
                    op()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(n):
                op()
            dt = (time.perf_counter() - t0) / n
            algbw = nbytes / dt / 1e9
            if rank == 0:
                print(f"bench={args.op} impl=gloo bytes={nbytes} np={size} time_us={dt * 1e6:.1f} "
                      f"algbw_gbs={algbw:.3f} busbw_gbs={algbw * factor:.3f}", flush=True)
        nbytes *= 2
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--min-time", type=float, default=0.1, help="time each size over calls filling this (s)")
    p.add_argument("--op", default="allreduce", choices=["allreduce", "broadcast", "allgather", "reducescatter",
                                                               "alltoall"])
    args = p.parse_args()
    if args.op == "reducescatter":
        return  # ProcessGroupGloo does not support reduce_scatter
    import torch.multiprocessing as mp

    port = 20000 + os.getpid() % 20000
    mp.spawn(worker, args=(args, port), nprocs=args.np, join=True)


if __name__ == "__main__":
    main()
