#!/usr/bin/env python3
"""Data-parallel training of a small MNIST-style CNN with hvd.torch.

Horovod's PyTorch MNIST example, ported by changing one line (the import).
By default the data is generated: every class is a fixed random 28x28
pattern plus noise, so nothing is downloaded and the model visibly learns.
Give --mnist-dir to train on a local copy of MNIST instead.

    hvdrun -np 2 python3 train_mnist.py --epochs 2
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed

import hvd.torch as hvd  # was: import horovod.torch as hvd


class Net(nn.Module):
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


def synthetic_digits(n, seed):
    """n (image, label) pairs: a fixed random template per class plus noise.
    The templates depend only on a constant, so train and test agree."""
    templates = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = templates[labels] + torch.randn(n, 1, 28, 28, generator=g)
    return torch.utils.data.TensorDataset(images, labels)


def datasets(args):
    if args.mnist_dir:
        from torchvision import datasets as tvd, transforms
        t = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
        return (tvd.MNIST(args.mnist_dir, train=True, download=False, transform=t),
                tvd.MNIST(args.mnist_dir, train=False, download=False, transform=t))
    return synthetic_digits(args.train_samples, seed=1), synthetic_digits(args.test_samples, seed=2)


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    p = argparse.ArgumentParser(description="hvd.torch MNIST-style example")
    p.add_argument("--batch-size", type=int, default=64, help="input batch size per worker")
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01, help="learning rate for one worker")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log-interval", type=int, default=10, help="batches between log lines")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16")
    p.add_argument("--gradient-predivide-factor", type=float, default=1.0)
    p.add_argument("--train-samples", type=int, default=6000, help="size of the generated training set")
    p.add_argument("--test-samples", type=int, default=1000, help="size of the generated test set")
    p.add_argument("--mnist-dir", default=None, help="train on MNIST from this directory (no download)")
    args = p.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # one worker per core

    train_set, test_set = datasets(args)
    # Each worker reads its own 1/size of the data.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()
    # Scale the learning rate by the number of workers: the global batch grew.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)

    # Start every worker from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()  # gradients are averaged across workers while backward runs
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_sampler)} "
                      f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}", flush=True)

        model.eval()
        test_loss, correct = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                correct += output.argmax(dim=1).eq(target).sum().item()
        # Average the per-worker metrics over all workers.
        test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
        accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
        if hvd.rank() == 0:
            print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {100.0 * accuracy:.2f}%\n", flush=True)


if __name__ == "__main__":
    main()
