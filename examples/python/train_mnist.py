#!/usr/bin/env python3
"""Data-parallel training of a small CNN on handwritten digits with hvd.torch.

Horovod's PyTorch MNIST example, ported by changing one line (the import).
By default it trains on the 1,797 8x8 digits scikit-learn ships
(sklearn.datasets.load_digits; Debian: python3-sklearn), nothing downloaded.
Every rank splits them the same way (a fixed seed) into a training set, of
which it trains on its shard, and a held-out set, on which the accuracy is
measured after every epoch. --synthetic trains on generated 8x8 images
instead (a fixed random pattern per class plus noise), --mnist-dir DIR on a
local copy of MNIST with Horovod's original network.

    hvdrun -np 2 python3 train_mnist.py --epochs 10
"""

import argparse
import hashlib
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed

import hvd.torch as hvd  # was: import horovod.torch as hvd


class Net(nn.Module):
    """Horovod's MNIST network, for 28x28 images (--mnist-dir)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


class DigitsNet(nn.Module):
    """The same kind of network for 8x8 images: two 3x3 convolutions, each
    followed by a 2x2 max-pool, then two fully connected layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, p=0.25, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def digits():
    """scikit-learn's digits as an (images, labels) pair: 1797 x 1 x 8 x 8 in [0, 1]."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise SystemExit(f"train_mnist.py: the digits need scikit-learn ({e}); "
                         "Debian: apt-get install python3-sklearn, or use --synthetic") from None
    d = load_digits()
    images = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return images, torch.tensor(d.target, dtype=torch.int64)


def synthetic_digits(n, seed):
    """n generated 8x8 images: a fixed random pattern per class plus noise."""
    templates = torch.rand(10, 1, 8, 8, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = templates[labels] + 0.5 * torch.randn(n, 1, 8, 8, generator=g)
    return images, labels


def split(images, labels, heldout_fraction, seed):
    """The same shuffle on every rank (it depends on the seed only), then the
    first samples to train on and the last ones held out."""
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_heldout = int(len(labels) * heldout_fraction)
    train, heldout = perm[n_heldout:], perm[:n_heldout]
    return (torch.utils.data.TensorDataset(images[train], labels[train]),
            torch.utils.data.TensorDataset(images[heldout], labels[heldout]))


def datasets(args):
    if args.mnist_dir:
        from torchvision import datasets as tvd, transforms
        t = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
        return (tvd.MNIST(args.mnist_dir, train=True, download=False, transform=t),
                tvd.MNIST(args.mnist_dir, train=False, download=False, transform=t))
    images, labels = synthetic_digits(args.synthetic_samples, seed=1) if args.synthetic else digits()
    return split(images, labels, args.heldout_fraction, args.split_seed)


def weights_checksum(model):
    """A 64-bit hash of every parameter's and buffer's bytes, as an int64."""
    h = hashlib.blake2b(digest_size=8)
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


def main():
    p = argparse.ArgumentParser(description="hvd.torch digits example")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per worker")
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate for one worker")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42, help="initialisation and shuffling seed")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the split into training and held-out sets")
    p.add_argument("--heldout-fraction", type=float, default=0.2, help="share of the samples held out")
    p.add_argument("--log-interval", type=int, default=10, help="batches between log lines")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16")
    p.add_argument("--gradient-predivide-factor", type=float, default=1.0)
    p.add_argument("--synthetic", action="store_true", help="train on generated 8x8 images (no scikit-learn)")
    p.add_argument("--synthetic-samples", type=int, default=2000, help="size of the generated data set")
    p.add_argument("--mnist-dir", default=None, help="train on MNIST from this directory (no download)")
    args = p.parse_args()
    if not 0 < args.heldout_fraction < 1:
        p.error(f"--heldout-fraction {args.heldout_fraction}: expected a number between 0 and 1")

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one worker per core

    train_set, test_set = datasets(args)
    # Each worker trains on its own 1/size of the training set.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    # ... and tests its rank::size share of the held-out set, without padding, so that
    # the counts added over the workers are the held-out set's exactly.
    test_shard = torch.utils.data.Subset(test_set, range(hvd.rank(), len(test_set), hvd.size()))
    test_loader = torch.utils.data.DataLoader(test_shard, batch_size=args.test_batch_size)

    model = Net() if args.mnist_dir else DigitsNet()
    # Scale the learning rate by the number of workers: the global batch grew.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)

    # Start every worker from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    epoch_s, accuracy = [], 0.0
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        start = time.perf_counter()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()  # gradients are averaged across workers while backward runs
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_sampler)} "
                      f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}", flush=True)
        epoch_s.append(time.perf_counter() - start)

        model.eval()
        sums = torch.zeros(3, dtype=torch.float64)  # loss, correct, samples
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                sums += torch.tensor([F.nll_loss(output, target, reduction="sum").item(),
                                      output.argmax(dim=1).eq(target).sum().item(), len(target)],
                                     dtype=torch.float64)
        # Add the workers' sums: the loss and accuracy of the whole held-out set.
        test_loss, correct, n = hvd.allreduce(sums, op=hvd.Sum, name="heldout_sums").tolist()
        accuracy = correct / n
        if hvd.rank() == 0:
            print(f"\nHeld-out set: Average loss: {test_loss / n:.4f}, Accuracy: {int(correct)}/{int(n)} "
                  f"({100.0 * accuracy:.2f}%), epoch time {epoch_s[-1]:.2f} s\n", flush=True)

    # Every worker's checksum of its weights, gathered: equal on all of them.
    sums = hvd.allgather(torch.tensor([weights_checksum(model)]), name="weights_checksum").tolist()
    if hvd.rank() == 0:
        print(f"held-out accuracy {accuracy:.3f} after {args.epochs} epochs ({len(test_set)} held-out samples)")
        print(f"time per epoch {1000 * statistics.median(epoch_s):.1f} ms "
              f"(median of {args.epochs} epochs, {hvd.size()} rank{'s' if hvd.size() > 1 else ''})")
        print("weights checksum per rank: " + " ".join(f"{r}:0x{s & (2**64 - 1):016x}" for r, s in enumerate(sums)))
        if len(set(sums)) == 1:
            print(f"final weights identical on all {hvd.size()} ranks", flush=True)
    if len(set(sums)) != 1:
        raise SystemExit(f"train_mnist.py: rank {hvd.rank()}: final weights differ across ranks")


if __name__ == "__main__":
    main()
