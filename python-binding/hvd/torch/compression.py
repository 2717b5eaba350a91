"""Gradient compression used around allreduce, as in ``horovod.torch.compression``.

``Compression.none`` sends tensors as they are; ``Compression.fp16`` sends
floating-point tensors as float16 and restores their dtype afterwards.
"""

from typing import Any, Tuple

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface: compress() before the allreduce, decompress() after it."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        """Returns the tensor to send and the context decompress() needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Restores a received tensor using the context of compress()."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16; other dtypes unchanged."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != torch.float16:
            return tensor.to(torch.float16), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        dtype = ctx
        if dtype is not None and dtype.is_floating_point and tensor.dtype != dtype:
            return tensor.to(dtype)
        return tensor


class Compression:
    """The available compressors."""

    none = NoneCompressor
    fp16 = FP16Compressor
