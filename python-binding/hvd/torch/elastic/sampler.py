"""ElasticSampler: shards a dataset over the job's ranks and, after a
reset, the rest of the epoch (the samples not yet processed by any rank at
the last commit) over the new ranks, so that no sample is repeated or
skipped by a reset."""

import math

import torch.utils.data

__all__ = ["ElasticSampler"]


class ElasticSampler(torch.utils.data.Sampler):
    """As ``horovod.torch.elastic.ElasticSampler``: call
    ``record_batch(batch_idx, batch_size)`` (or ``record_indices``) after
    each batch, ``set_epoch(epoch)`` at each epoch's start, and keep the
    sampler in the TorchState."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 1
        self.rank = 0
        self.indices = []
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def reset(self):
        from hvd.torch import is_initialized, rank, size
        self.num_replicas = size() if is_initialized() else 1
        self.rank = rank() if is_initialized() else 0
        remaining = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            perm = torch.randperm(len(remaining), generator=g).tolist()
            remaining = [remaining[i] for i in perm]
        self.remaining_indices = remaining
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas)) if remaining else 0
        self.total_size = self.num_samples * self.num_replicas
        # every rank gets num_samples: the last ones may repeat a few of the
        # remaining samples, as DistributedSampler pads
        padded = remaining + remaining[:self.total_size - len(remaining)]
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples
