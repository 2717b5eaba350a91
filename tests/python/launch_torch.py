"""launch_torch.py — a small hvd.torch training run for torchrun (tests/test-launch-torchrun.sh).

Checks that hvd.init() took its place from torchrun's variables, trains a
tiny model for a few steps with hvd.DistributedOptimizer on data that
differs by rank, and prints one line from rank 0 when the final weights
are bit-identical on every rank.
"""

import hashlib
import os
import sys

import torch

import hvd.torch as hvd


def main() -> int:
    hvd.init()
    world = int(os.environ["WORLD_SIZE"])
    assert hvd.rank_source() == "torchrun", hvd.rank_source()
    assert hvd.size() == world and hvd.rank() == int(os.environ["RANK"]), (hvd.rank(), hvd.size())
    assert hvd.local_rank() == int(os.environ["LOCAL_RANK"]), hvd.local_rank()
    assert hvd.cross_rank() == int(os.environ["GROUP_RANK"]), (hvd.cross_rank(), os.environ["GROUP_RANK"])
    torch.manual_seed(1234 + hvd.rank())  # different initial weights: the broadcast must fix them
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    gen = torch.Generator().manual_seed(hvd.rank())
    for _ in range(5):
        x = torch.randn(32, 8, generator=gen)
        loss = (model(x).squeeze(1) - x.sum(1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    digests = hvd.allgather_object(digest)
    if hvd.rank() == 0:
        same = len(set(digests)) == 1
        print(f"launch_torch: {'identical' if same else 'DIFFERENT'} weights on all {hvd.size()} ranks "
              f"on {hvd.cross_size()} nodes (placed by {hvd.rank_source()}): {digests[0][:16]}", flush=True)
        if not same:
            return 1
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
