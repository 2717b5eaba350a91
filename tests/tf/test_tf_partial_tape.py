"""PartialDistributedGradientTape: the gradients of the local layers'
variables stay each rank's (divided by the set's size with
scale_local_gradients, as Horovod does), the others are averaged."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd


def layers():
    keras.utils.set_random_seed(3)  # the same start on every rank
    shared, local = keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)
    shared.build((None, 3))
    local.build((None, 4))
    return shared, local


def rank_batch(rank):
    rng = np.random.default_rng(50 + rank)
    return tf.constant(rng.standard_normal([5, 3]).astype(np.float32))


def gathered(t):
    return hvd.allgather(tf.reshape(t, [1, -1])).numpy()


@pytest.mark.parametrize("scale", [True, False])
def test_local_layer_gradients_stay_local(rank, size, scale):
    shared, local = layers()
    x = rank_batch(rank)
    variables = shared.trainable_weights + local.trainable_weights

    def loss():
        return tf.reduce_sum(tf.square(local(shared(x))))

    with tf.GradientTape() as plain:
        lp = loss()
    own = plain.gradient(lp, variables)
    with tf.GradientTape() as tape:
        lt = loss()
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=local, scale_local_gradients=scale)
    grads = tape.gradient(lt, variables)
    n_shared = len(shared.trainable_weights)
    for g, o in zip(grads[:n_shared], own[:n_shared]):
        every = gathered(o)
        np.testing.assert_allclose(g.numpy().ravel(), every.mean(axis=0), rtol=1e-6, atol=1e-7)
        rows = gathered(g)
        assert all(rows[r].tobytes() == rows[0].tobytes() for r in range(size))
    for g, o in zip(grads[n_shared:], own[n_shared:]):
        want = o / float(size) if scale else o
        assert g.numpy().tobytes() == want.numpy().tobytes()
        rows = gathered(g)
        assert not np.array_equal(rows[0], rows[-1])  # each rank its own


def test_without_local_layers_it_is_distributed_gradient_tape(rank, size):
    shared, local = layers()
    x = rank_batch(rank)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(local(shared(x)))
    tape = hvd.PartialDistributedGradientTape(tape)
    grads = tape.gradient(loss, local.trainable_weights)
    rows = gathered(grads[0])
    assert all(rows[r].tobytes() == rows[0].tobytes() for r in range(size))
    with pytest.raises(ValueError, match="keras.layers.Layer"):
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=[object()])
