#!/usr/bin/env python3
"""Data-parallel training with hvd.tensorflow in a custom training loop:
a small convolutional network on scikit-learn's 1,797 8x8 handwritten
digits (sklearn.datasets.load_digits, nothing downloaded).

Every rank splits the digits the same way (a fixed seed) into a training
set, of which it trains on its own shard (rank::size), and a held-out set.
The gradients are averaged with DistributedGradientTape; rank 0's initial
variables are broadcast after the first step. After every epoch the
held-out accuracy is counted over all ranks (each its share, summed with
an allreduce) and rank 0 prints it; at the end every rank's weights are
checked to be identical.

    hvdrun -np 2 python tensorflow2_digits.py --epochs 10
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

import hvd.tensorflow as hvd


def parse_args():
    p = argparse.ArgumentParser(description="hvd.tensorflow on scikit-learn's digits",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.001, help="learning rate of one worker (scaled by the size)")
    p.add_argument("--heldout-fraction", type=float, default=0.2)
    p.add_argument("--split-seed", type=int, default=42)
    return p.parse_args()


def digits(seed, heldout_fraction):
    """(train images, train labels, held-out images, held-out labels), the
    same split on every rank; images N x 8 x 8 x 1 in [0, 1]."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        sys.exit(f"tensorflow2_digits.py: the digits need scikit-learn ({e}): pip install scikit-learn")
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[..., None]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_held = int(len(y) * heldout_fraction)
    held, train = order[:n_held], order[n_held:]
    return x[train], y[train], x[held], y[held]


def make_model():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(2),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(2),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Dense(10),
    ])


def main():
    args = parse_args()
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    tf.random.set_seed(hvd.rank())  # different initial weights: the broadcast must make them equal
    x_train, y_train, x_held, y_held = digits(args.split_seed, args.heldout_fraction)
    rank, size = hvd.rank(), hvd.size()
    # this rank's shards; every rank runs the same number of steps an epoch
    x_mine, y_mine = x_train[rank::size], y_train[rank::size]
    steps = len(y_train) // size // args.batch_size
    x_eval, y_eval = x_held[rank::size], y_held[rank::size]

    model = make_model()
    opt = tf.keras.optimizers.Adam(args.lr * size)
    opt.build(model.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # after the first step, when every variable exists, as Horovod does
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    def heldout_accuracy():
        pred = tf.argmax(model(x_eval, training=False), axis=1)
        counts = tf.constant([float(np.sum(pred.numpy() == y_eval)), float(len(y_eval))], tf.float64)
        correct, total = hvd.allreduce(counts, op=hvd.Sum, name="heldout").numpy()
        return correct / total, int(total)

    rng = np.random.default_rng(1000 + rank)
    epoch_s = []
    for epoch in range(args.epochs):
        start = time.perf_counter()
        order = rng.permutation(len(y_mine))
        losses = []
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            loss = train_step(tf.constant(x_mine[idx]), tf.constant(y_mine[idx]), epoch == 0 and s == 0)
            losses.append(float(loss))
        epoch_s.append(time.perf_counter() - start)
        acc, n = heldout_accuracy()
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f} held-out accuracy {acc:.4f} ({n} samples)",
                  flush=True)

    flat = tf.concat([tf.reshape(v, [-1]) for v in model.trainable_variables], 0)
    rows = hvd.allgather(tf.reshape(flat, [1, -1]), name="weights").numpy()
    same = all(rows[r].tobytes() == rows[0].tobytes() for r in range(size))
    if rank == 0:
        print(f"held-out accuracy {acc:.4f} after {args.epochs} epochs on {size} workers, "
              f"median epoch {statistics.median(epoch_s) * 1e3:.1f} ms", flush=True)
        print(f"weights {'identical' if same else 'DIFFERENT'} on all {size} workers", flush=True)
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
