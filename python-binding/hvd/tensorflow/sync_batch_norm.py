"""SyncBatchNormalization: a Keras 3 BatchNormalization whose training-mode
mean and variance are those of the batches of all ranks together, as
``horovod.tensorflow.SyncBatchNormalization``.

Two allreduces (Sum) per call, of plain TensorFlow values: the per-channel
sums with the element count (the global mean, exact for batch sizes that
differ by rank, also 0), then the per-channel sums of squared deviations
from that mean (the global variance, two-pass like a single process's, so
no cancellation). The allreduces' gradients are allreduces, so autodiff
gives the gradient of the loss summed over the ranks; gamma's and beta's
gradients stay each rank's part (DistributedGradientTape reduces them).
"""

import keras
import tensorflow as tf

from hvd.common import ops as _common_ops
from hvd.common.basics import Sum
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.tensorflow.functions import allreduce


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization with statistics over all ranks (of
    process_set) in training mode; inference uses the moving statistics,
    which stay identical on every rank."""

    def __init__(self, fused=False, process_set: ProcessSet = global_process_set, **kwargs):
        if fused:
            raise ValueError("SyncBatchNormalization: fused=True is not supported (Keras 3 has no fused kernel)")
        if kwargs.get("synchronized"):
            raise ValueError("SyncBatchNormalization: synchronized=True is tf.distribute's; hvd synchronizes")
        if kwargs.get("renorm"):
            raise NotImplementedError("SyncBatchNormalization: renorm is not supported")
        super().__init__(**kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        if _common_ops.set_size(self.process_set) == 1:
            return super()._moments(inputs, mask)
        if mask is not None:
            raise NotImplementedError("SyncBatchNormalization: masks are not supported")
        axes = list(self._reduction_axes)
        local_sum = tf.reduce_sum(inputs, axis=axes, keepdims=True)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), inputs.dtype)
        sums = allreduce(tf.concat([tf.reshape(local_sum, [-1]), tf.reshape(count, [1])], 0), op=Sum,
                         process_set=self.process_set)
        total = sums[-1]
        mean = tf.reshape(sums[:-1], tf.shape(local_sum)) / total
        deviations = tf.reduce_sum(tf.square(inputs - mean), axis=axes)
        variance = allreduce(deviations, op=Sum, process_set=self.process_set) / total
        return tf.squeeze(mean, axis=axes), variance
