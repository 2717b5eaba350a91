"""Gradient compression for allreduce, as in ``horovod.tensorflow``: none, or
floating-point tensors sent as float16 and cast back."""

import tensorflow as tf


class Compressor:
    """Compresses a tensor before its allreduce and restores it after."""

    @staticmethod
    def compress(tensor):
        """Returns (the tensor to send, what decompress needs)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16; others unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tf.cast(tensor, ctx) if ctx is not None else tensor


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
