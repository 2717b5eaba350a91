"""Shared tensors: CPU tensors whose memory the other processes of this
node read in place (libhvd's hvd_shared_alloc). An allreduce of a shared
tensor on every local rank of one node skips the copy into the data
plane's shared-memory slots, so each byte is touched about half as often
(docs/PERFORMANCE.md). Any other tensor still works, and an allreduce
where some rank's tensor is not shared takes the usual path.

    buf = hvd.shared_zeros(64 << 20, dtype=torch.float32)
    hvd.allreduce_(buf)

The memory is freed when the last tensor viewing it dies. A forked child
(a DataLoader worker) must not write its parent's shared tensors.
"""

from typing import Sequence, Union

import torch

from hvd import _core

__all__ = ["shared_zeros", "shared_like"]


def _size(size) -> Sequence[int]:
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    return tuple(int(d) for d in size)


def shared_zeros(*size: Union[int, Sequence[int]], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A zero-filled CPU tensor of the given size and dtype in shared
    tensor memory, as ``torch.zeros(*size, dtype=dtype)``."""
    shape = _size(size)
    count = 1
    for d in shape:
        if d < 0:
            raise ValueError(f"shared_zeros: negative dimension {d} in {shape}")
        count *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    if count == 0:
        return torch.zeros(shape, dtype=dtype)
    buf = _core.shared_buffer(count * itemsize)
    # the tensor's storage keeps buf (and so the memory) alive
    flat = torch.frombuffer(buf, dtype=torch.uint8, count=count * itemsize)
    return flat.view(dtype).view(shape)


def shared_like(tensor: torch.Tensor) -> torch.Tensor:
    """A shared tensor of tensor's size and dtype holding a copy of it."""
    if tensor.device.type != "cpu":
        raise ValueError(f"shared_like: shared tensors are CPU memory, not {tensor.device}")
    out = shared_zeros(tensor.shape, dtype=tensor.dtype)
    out.copy_(tensor)
    return out
