"""SyncBatchNormalization: on every rank's part of a global batch (batch
sizes differ by rank), the outputs, the gradients and the moving
statistics equal those of one keras.layers.BatchNormalization on the
whole global batch."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd

# Tolerance: the statistics are sums in another order (per rank, then
# across ranks) than one process's; in float32 (eps 1.2e-7) over a few
# dozen elements of magnitude ~1 the difference stays below 1e-6, and the
# normalized outputs and gradients are of magnitude ~1: 1e-5 leaves margin
# while a wrong statistic (one rank's instead of the job's) is off by ~0.1.
RTOL = ATOL = 1e-5


def rows(size):
    """Uneven batch sizes: rank r holds 2 + 3r rows."""
    return [2 + 3 * r for r in range(size)]


def global_data(size, shape):
    rng = np.random.default_rng(11)
    n = sum(rows(size))
    x = (rng.standard_normal([n, *shape]) * 2 + 1.5).astype(np.float32)
    cotangent = rng.standard_normal([n, *shape]).astype(np.float32)
    return x, cotangent


def my_rows(a, rank, size):
    start = sum(rows(size)[:rank])
    return a[start:start + rows(size)[rank]]


def make(cls, shape):
    layer = cls(momentum=0.9, epsilon=1e-3)
    layer.build((None, *shape))
    rng = np.random.default_rng(5)
    c = shape[-1]
    layer.gamma.assign(rng.uniform(0.5, 1.5, c).astype(np.float32))
    layer.beta.assign(rng.standard_normal(c).astype(np.float32))
    return layer


def forward_backward(layer, x, cotangent):
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * cotangent)
    dx, dgamma, dbeta = tape.gradient(loss, [x, layer.gamma, layer.beta])
    return y, dx, dgamma, dbeta


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("shape", [(4,), (2, 3, 3)], ids=["dense", "image"])
def test_matches_batch_norm_on_the_global_batch(rank, size, shape, mode):
    x, cot = global_data(size, shape)
    ref = make(keras.layers.BatchNormalization, shape)
    want_y, want_dx, want_dgamma, want_dbeta = forward_backward(ref, x, cot)

    sync = make(hvd.SyncBatchNormalization, shape)
    fn = forward_backward if mode == "eager" else tf.function(forward_backward)
    y, dx, dgamma, dbeta = fn(sync, my_rows(x, rank, size), my_rows(cot, rank, size))
    np.testing.assert_allclose(y.numpy(), my_rows(want_y.numpy(), rank, size), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(dx.numpy(), my_rows(want_dx.numpy(), rank, size), rtol=RTOL, atol=ATOL)
    # gamma's and beta's gradients are this rank's part of the sum
    for g, want in ((dgamma, want_dgamma), (dbeta, want_dbeta)):
        np.testing.assert_allclose(hvd.allreduce(g, op=hvd.Sum).numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    # the moving statistics: the same bits on every rank, the reference's
    for mine, theirs in ((sync.moving_mean, ref.moving_mean), (sync.moving_variance, ref.moving_variance)):
        every = hvd.allgather(tf.reshape(mine, [1, -1])).numpy()
        assert all(every[r].tobytes() == every[0].tobytes() for r in range(size))
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=RTOL, atol=ATOL)
    # a rank's own statistics would differ: the comparison can fail
    own = make(keras.layers.BatchNormalization, shape)
    own_y = own(tf.constant(my_rows(x, rank, size)), training=True)
    assert not np.allclose(own_y.numpy(), y.numpy(), rtol=RTOL, atol=ATOL)


def test_inference_uses_moving_statistics(rank, size):
    layer = make(hvd.SyncBatchNormalization, (4,))
    x = tf.fill([3, 4], float(rank))
    want = make(keras.layers.BatchNormalization, (4,))(x, training=False)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), want.numpy())


def test_rejects_what_it_does_not_do():
    with pytest.raises(ValueError, match="fused"):
        hvd.SyncBatchNormalization(fused=True)


def test_a_rank_without_rows(rank, size):
    # rank 0's batch is empty: the others' statistics, and rank 0's moving
    # statistics move with them
    x, cot = global_data(size, (3,))
    counts = [0] + [4] * (size - 1)
    starts = np.cumsum([0] + counts)
    ref = make(keras.layers.BatchNormalization, (3,))
    want_y, want_dx, _, _ = forward_backward(ref, x[:starts[-1]], cot[:starts[-1]])
    sync = make(hvd.SyncBatchNormalization, (3,))
    mine = slice(starts[rank], starts[rank + 1])
    y, dx, _, _ = forward_backward(sync, x[mine], cot[mine])
    assert y.shape == (counts[rank], 3)
    np.testing.assert_allclose(y.numpy(), want_y.numpy()[mine], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(dx.numpy(), want_dx.numpy()[mine], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(sync.moving_mean.numpy(), ref.moving_mean.numpy(), rtol=RTOL, atol=ATOL)
