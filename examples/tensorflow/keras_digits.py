#!/usr/bin/env python3
"""Data-parallel Keras training on handwritten digits with hvd.tensorflow.keras.

A Horovod Keras program whose only change is the import line. It trains a
small CNN on the 1,797 8x8 digits scikit-learn ships
(sklearn.datasets.load_digits), nothing downloaded. Every rank splits them
the same way (a fixed seed) into a training set, of which it trains on its
shard, and a held-out set. The learning rate is scaled by the number of
ranks and warmed up to it; the callbacks broadcast rank 0's initial
weights, average the epoch's metrics over the ranks and keep the best
epoch's model (rank 0 writes it). At the end rank 0 prints the held-out
accuracy of the final model and every rank's checksum of its weights,
and the program fails if they differ.

    hvdrun -np 2 python examples/tensorflow/keras_digits.py --epochs 8
"""

import argparse
import hashlib
import sys

import numpy as np
import tensorflow as tf

import hvd.tensorflow.keras as hvd  # was: import horovod.tensorflow.keras as hvd


def load_digits(split_seed: int, heldout_fraction: float):
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        sys.exit("keras_digits: the digits come with scikit-learn: pip install scikit-learn "
                 "(scripts/venv-tf.sh installs it)")
    digits = sklearn_digits()
    x = (digits.images.astype(np.float32) / 16.0)[..., None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(split_seed).permutation(len(x))
    n_held = int(len(x) * heldout_fraction)
    held, train = order[:n_held], order[n_held:]
    return x[train], y[train], x[held], y[held]


def make_model():
    k = tf.keras
    return k.Sequential([
        k.Input((8, 8, 1)),
        k.layers.Conv2D(16, 3, padding="same", activation="relu"),
        k.layers.MaxPooling2D(2),
        k.layers.Conv2D(32, 3, padding="same", activation="relu"),
        k.layers.MaxPooling2D(2),
        k.layers.Flatten(),
        k.layers.Dense(64, activation="relu"),
        k.layers.Dense(10, activation="softmax"),
    ])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="for one rank; scaled by the number of ranks")
    p.add_argument("--warmup-epochs", type=int, default=2)
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--heldout-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=42, help="weights' seed (plus the rank: rank 0's are broadcast)")
    p.add_argument("--checkpoint", default=None, help="write the best epoch's model there (a .keras file)")
    args = p.parse_args()

    hvd.init()
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())
    x_train, y_train, x_held, y_held = load_digits(args.split_seed, args.heldout_fraction)
    # this rank's shard of the training set and of the held-out set
    x_shard, y_shard = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    x_val, y_val = x_held[hvd.rank()::hvd.size()], y_held[hvd.rank()::hvd.size()]

    model = make_model()
    lr = args.lr * hvd.size()
    opt = tf.keras.optimizers.SGD(lr, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=args.warmup_epochs,
                                                 verbose=1 if hvd.rank() == 0 else 0),
    ]
    if args.checkpoint:
        callbacks.append(hvd.callbacks.BestModelCheckpoint(monitor="val_accuracy", mode="max",
                                                           filepath=args.checkpoint))
    model.fit(x_shard, y_shard, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
              validation_data=(x_val, y_val), verbose=2 if hvd.rank() == 0 else 0)

    weights = b"".join(np.ascontiguousarray(w).tobytes() for w in model.get_weights())
    checksums = hvd.allgather_object(hashlib.sha256(weights).hexdigest()[:16])
    if hvd.rank() == 0:
        _, accuracy = model.evaluate(x_held, y_held, verbose=0)
        print(f"held-out accuracy {accuracy:.3f} after {args.epochs} epochs ({len(x_held)} held-out samples)")
        print("weights checksum per rank: " + " ".join(f"{r}:{c}" for r, c in enumerate(checksums)))
        if len(set(checksums)) != 1:
            sys.exit("keras_digits: the ranks' weights differ")
        print(f"final weights identical on all {hvd.size()} ranks")


if __name__ == "__main__":
    main()
