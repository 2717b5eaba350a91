"""SyncBatchNorm: batch normalization whose statistics are computed over the
batches of all processes, as ``horovod.torch.SyncBatchNorm``.

Unlike Horovod's (which needs CUDA kernels), this one is written with plain
tensor operations and works on CPU tensors. Forward gathers each process's
per-channel count, mean and variance in one allgather and combines them
exactly (Chan et al.'s parallel variance); backward reduces the two
per-channel gradient sums in one allreduce.
"""

import torch
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from hvd.common import ops as _ops
from hvd.torch.mpi_ops import Sum, allgather, allreduce, global_process_set

__all__ = ["SyncBatchNorm"]


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous N-dimensional batch normalization.

    The mean and variance are those of the batch of all processes together,
    which matters when each process only holds a few examples. In eval mode
    (with running statistics) it is an ordinary BatchNorm.

    Arguments:
        num_features: number of channels C of an input (N, C, ...).
        eps: added to the variance for numerical stability. Default: 1e-5
        momentum: factor of the running statistics update; None for a
            cumulative moving average. Default: 0.1
        affine: learnable per-channel scale and shift. Default: True
        track_running_stats: keep running mean and variance. Default: True
        process_set: synchronize over this process set (hvd extension;
            default: all processes).
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _run_bn(self, input, exponential_average_factor):
        return torch.nn.functional.batch_norm(
            input, self.running_mean, self.running_var, self.weight, self.bias,
            self.training or not self.track_running_stats, exponential_average_factor, self.eps)

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training and self.track_running_stats:
            return self._run_bn(input, factor)
        if _ops.set_size(self.process_set) == 1:
            return self._run_bn(input, factor)
        running = self.track_running_stats and self.training
        return _SyncBatchNorm.apply(input, self.weight, self.bias,
                                    self.running_mean if running else None,
                                    self.running_var if running else None,
                                    self.eps, factor, self.process_set)


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """(N, C, ...) -> (M, C): one row per element of a channel."""
    return x.transpose(0, 1).reshape(x.shape[1], -1).t()


class _SyncBatchNorm(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        input = input.contiguous()
        c = input.shape[1]
        stats_dtype = torch.float64 if input.dtype == torch.float64 else torch.float32
        x = _channels_last(input).to(stats_dtype)
        count = x.shape[0]
        mean = x.mean(0) if count else torch.zeros(c, dtype=stats_dtype)
        m2 = ((x - mean) ** 2).sum(0) if count else torch.zeros(c, dtype=stats_dtype)
        local = torch.cat([torch.tensor([float(count)], dtype=stats_dtype), mean, m2]).unsqueeze(0)
        gathered = allgather(local, name="sync_batch_norm.stats", process_set=process_set)
        counts, means, m2s = gathered[:, 0], gathered[:, 1:1 + c], gathered[:, 1 + c:]
        total = counts.sum()
        if total <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got input size {}"
                             .format(list(input.shape)))
        g_mean = (counts.unsqueeze(1) * means).sum(0) / total
        g_m2 = (m2s + counts.unsqueeze(1) * (means - g_mean) ** 2).sum(0)
        var = g_m2 / total
        invstd = torch.rsqrt(var + eps)

        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(g_mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = g_m2 / (total - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)

        shape = [1, c] + [1] * (input.dim() - 2)
        xhat = (input.to(stats_dtype) - g_mean.view(shape)) * invstd.view(shape)
        out = xhat
        if weight is not None:
            out = out * weight.to(stats_dtype).view(shape)
        if bias is not None:
            out = out + bias.to(stats_dtype).view(shape)
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.total = total
        ctx.process_set = process_set
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        xhat, weight, invstd = ctx.saved_tensors
        c = xhat.shape[1]
        shape = [1, c] + [1] * (xhat.dim() - 2)
        dy = grad_output.contiguous().to(xhat.dtype)
        dims = [0] + list(range(2, xhat.dim()))
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]

        grad_input = grad_weight = grad_bias = None
        if need_input:
            sums = allreduce(torch.cat([sum_dy, sum_dy_xhat]), op=Sum, name="sync_batch_norm.grad_sums",
                             process_set=ctx.process_set)
            g_sum_dy, g_sum_dy_xhat = sums[:c], sums[c:]
            scale = invstd if weight is None else invstd * weight.to(xhat.dtype)
            grad_input = scale.view(shape) * (dy - (g_sum_dy / ctx.total).view(shape)
                                              - xhat * (g_sum_dy_xhat / ctx.total).view(shape))
            grad_input = grad_input.to(grad_output.dtype)
        # Parameter gradients stay local: DistributedOptimizer reduces them.
        if weight is not None and need_weight:
            grad_weight = sum_dy_xhat.to(weight.dtype)
        if weight is not None and need_bias:
            grad_bias = sum_dy.to(weight.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
