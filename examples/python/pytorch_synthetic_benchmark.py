#!/usr/bin/env python3
"""Synthetic training benchmark with hvd.torch, like Horovod's
pytorch_synthetic_benchmark.py: a torchvision model (ResNet-50 by default,
random weights) trained on random data; prints images per second per
worker and in total.

    hvdrun -np 2 python3 pytorch_synthetic_benchmark.py --batch-size 16
"""

import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torchvision import models

import hvd.torch as hvd  # was: import horovod.torch as hvd


def main():
    p = argparse.ArgumentParser(description="hvd.torch synthetic benchmark",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fp16-allreduce", action="store_true", default=False,
                   help="use fp16 compression during allreduce")
    p.add_argument("--model", type=str, default="resnet50", help="model to benchmark (torchvision.models)")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
    p.add_argument("--num-warmup-batches", type=int, default=10, help="number of warm-up batches that don't count")
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="number of batches per benchmark iteration")
    p.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
    p.add_argument("--image-size", type=int, default=224, help="height and width of the random images")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
    p.add_argument("--use-adasum", action="store_true", default=False, help="use adasum algorithm to do reduction")
    args = p.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available() and hvd.nccl_built()

    hvd.init()
    device = "GPU" if args.cuda else "CPU"
    if args.cuda:
        torch.cuda.set_device(hvd.local_rank())  # one GPU per worker
    else:
        # share the node's cores between its workers
        import os
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    model = getattr(models, args.model)(num_classes=args.num_classes)  # random weights, nothing downloaded
    lr_scaler = 1 if args.use_adasum else hvd.size()
    if args.cuda:
        model.cuda()
    optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.LongTensor(args.batch_size).random_() % args.num_classes
    if args.cuda:
        data, target = data.cuda(), target.cuda()

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(s):
        if hvd.rank() == 0:
            print(s, flush=True)

    log(f"Model: {args.model}")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of {device}s: {hvd.size()}")

    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    log("Running benchmark...")
    img_secs = []
    for x in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log(f"Iter #{x}: {img_sec:.1f} img/sec per {device}")
        img_secs.append(img_sec)

    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log(f"Img/sec per {device}: {img_sec_mean:.1f} +-{img_sec_conf:.1f}")
    log(f"Total img/sec on {hvd.size()} {device}(s): {hvd.size() * img_sec_mean:.1f} "
        f"+-{hvd.size() * img_sec_conf:.1f}")


if __name__ == "__main__":
    main()
