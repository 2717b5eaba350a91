#!/usr/bin/env python3
"""Synthetic training benchmark with hvd.tensorflow, like Horovod's
tensorflow2_synthetic_benchmark.py: a tf.keras.applications model
(ResNet50 by default, weights=None: nothing downloaded) trained with SGD on
random images through DistributedGradientTape, the variables broadcast
from rank 0 after the first step. Rank 0 prints Horovod's lines (images per
second per iteration, per worker and in total, mean +- 1.96 std); every
rank also prints its own mean.

Horovod's defaults are kept (224x224 images, batch 32, 10 warm-up batches,
10 iterations of 10 batches); on a few CPU cores ResNet-50 at that size
takes seconds a batch, so try small inputs first:

    hvdrun -np 2 python tensorflow2_synthetic_benchmark.py --image-size 64 \\
        --batch-size 8 --num-warmup-batches 2 --num-batches-per-iter 2 --num-iters 3
"""

import argparse
import os
import timeit

import numpy as np
import tensorflow as tf

import hvd.tensorflow as hvd  # was: import horovod.tensorflow as hvd


def parse_args():
    p = argparse.ArgumentParser(description="hvd.tensorflow synthetic benchmark",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fp16-allreduce", action="store_true", default=False,
                   help="use fp16 compression during allreduce")
    p.add_argument("--model", type=str, default="ResNet50", help="model to benchmark (tf.keras.applications)")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
    p.add_argument("--num-warmup-batches", type=int, default=10, help="number of warm-up batches that don't count")
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="number of batches per benchmark iteration")
    p.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
    p.add_argument("--image-size", type=int, default=224, help="height and width of the random images (>= 32)")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    device = "GPU" if not args.no_cuda and tf.config.list_physical_devices("GPU") else "CPU"
    if device == "CPU":
        # share the node's cores between its workers
        threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
        tf.config.threading.set_intra_op_parallelism_threads(threads)

    size = args.image_size
    model = getattr(tf.keras.applications, args.model)(weights=None, input_shape=(size, size, 3),
                                                       classes=args.num_classes)
    opt = tf.keras.optimizers.SGD(0.01)
    opt.build(model.trainable_variables)  # its variables exist before the first broadcast
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    data = tf.random.uniform([args.batch_size, size, size, 3])
    target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=args.num_classes, dtype=tf.int64)

    @tf.function
    def benchmark_step(first_batch):
        with tf.GradientTape() as tape:
            probs = model(data, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(target, probs))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        gradients = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(gradients, model.trainable_variables))
        # after the first step, so that every variable exists (Horovod's order)
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)

    def log(s):
        if hvd.rank() == 0:
            print(s, flush=True)

    log(f"Model: {args.model}")
    log(f"Batch size: {args.batch_size}")
    log(f"Image size: {size}x{size}")
    log(f"Number of {device}s: {hvd.size()}")

    with tf.device(device):
        log("Running warmup...")
        benchmark_step(first_batch=True)
        timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)

        log("Running benchmark...")
        img_secs = []
        for x in range(args.num_iters):
            t = timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_batches_per_iter)
            img_sec = args.batch_size * args.num_batches_per_iter / t
            log(f"Iter #{x}: {img_sec:.1f} img/sec per {device}")
            img_secs.append(img_sec)

    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    print(f"Rank {hvd.rank()}: {img_sec_mean:.1f} img/sec per {device}", flush=True)
    hvd.barrier()
    log(f"Img/sec per {device}: {img_sec_mean:.1f} +-{img_sec_conf:.1f}")
    log(f"Total img/sec on {hvd.size()} {device}(s): {hvd.size() * img_sec_mean:.1f} "
        f"+-{hvd.size() * img_sec_conf:.1f}")


if __name__ == "__main__":
    main()
