"""Gradients of hvd.tensorflow's differentiable ops against Horovod's
formulas, with tf.GradientTape eagerly and inside tf.function. Weights of
the loss depend on the rank, so each formula's sum over ranks shows."""

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd


def grad_of(run, fn, x):
    """d(fn(x))/dx, taped eagerly or in a tf.function."""
    def g(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            loss = fn(t)
        return tape.gradient(loss, t)
    return run(g, x).numpy()


def tri(n):
    return n * (n + 1) // 2


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_allreduce_grad_is_allreduce(run, op, rank, size):
    # loss = sum(allreduce(x) * (rank + 1)): the gradient is op over ranks of rank + 1
    x = tf.fill([2, 3], 5.0)
    g = grad_of(run, lambda t: tf.reduce_sum(hvd.allreduce(t, op=getattr(hvd, op)) * float(rank + 1)), x)
    want = tri(size) if op == "Sum" else tri(size) / size
    np.testing.assert_array_equal(g, np.full([2, 3], want, np.float32))


def test_allreduce_grad_scaled(run, rank, size):
    x = tf.ones([4])
    g = grad_of(run, lambda t: tf.reduce_sum(hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0,
                                                           postscale_factor=0.25) * float(rank + 1)), x)
    np.testing.assert_array_equal(g, np.full([4], tri(size) * 0.5, np.float32))


def test_grouped_allreduce_grad(run, rank, size):
    a, b = tf.ones([2]), tf.ones([3])

    def g(x, y):
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            ra, rb = hvd.grouped_allreduce([x, y], op=hvd.Sum)
            loss = tf.reduce_sum(ra) * float(rank + 1) + tf.reduce_sum(rb) * 2.0
        return tape.gradient(loss, [x, y])
    ga, gb = run(g, a, b)
    np.testing.assert_array_equal(ga.numpy(), np.full([2], tri(size), np.float32))
    np.testing.assert_array_equal(gb.numpy(), np.full([3], 2.0 * size, np.float32))


def test_allgather_grad_is_my_rows_of_the_sum(run, rank, size):
    # rank r has r + 1 rows; the loss weighs gathered row i by (rank + 1)(i + 1)
    total = tri(size)
    x = tf.ones([rank + 1, 2])
    weights = tf.constant([[float((rank + 1) * (i + 1))] * 2 for i in range(total)])
    g = grad_of(run, lambda t: tf.reduce_sum(hvd.allgather(t) * weights), x)
    first = tri(rank)
    want = np.array([[tri(size) * (i + 1)] * 2 for i in range(first, first + rank + 1)], np.float32)
    np.testing.assert_array_equal(g, want)


def test_broadcast_grad_sum_on_root_zero_elsewhere(run, rank, size):
    for root in range(size):
        x = tf.fill([3], float(rank))
        g = grad_of(run, lambda t: tf.reduce_sum(hvd.broadcast(t, root) * float(rank + 1)), x)
        want = tri(size) if rank == root else 0.0
        np.testing.assert_array_equal(g, np.full([3], want, np.float32))


def test_alltoall_grad_goes_back(run, rank, size):
    # loss = sum(y^2) / 2: dL/dy = y, and alltoall's gradient sends it back, so dL/dx = x
    splits = tf.constant([j + 1 for j in range(size)])
    x = tf.reshape(tf.range(tri(size) * 2, dtype=tf.float32) + 100.0 * rank, [tri(size), 2])

    def g(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y, _ = hvd.alltoall(t, splits=splits)
            loss = tf.reduce_sum(y * y) / 2
        return tape.gradient(loss, t)
    np.testing.assert_array_equal(run(g, x).numpy(), x.numpy())


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_grad_is_allgather(run, op, rank, size):
    # rank r keeps row r of a [size, 2] tensor and weighs it by r + 1
    x = tf.ones([size, 2])
    g = grad_of(run, lambda t: tf.reduce_sum(hvd.reducescatter(t, op=getattr(hvd, op)) * float(rank + 1)), x)
    want = np.array([[r + 1.0] * 2 for r in range(size)], np.float32)
    np.testing.assert_array_equal(g, want if op == "Sum" else want / size)


def test_reducescatter_grad_needs_sum_or_average():
    x = tf.ones([hvd.size(), 2])

    @tf.function
    def g(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            loss = tf.reduce_sum(hvd.reducescatter(t, op=hvd.Max))
        return tape.gradient(loss, t)
    with pytest.raises(NotImplementedError, match="op=Sum or op=Average"):
        g(x)


def test_grouped_allgather_grad(run, rank, size):
    # each member as test_allgather_grad_is_my_rows_of_the_sum, the second weighed twice
    total = tri(size)
    x = tf.ones([rank + 1, 2])
    weights = tf.constant([[float((rank + 1) * (i + 1))] * 2 for i in range(total)])

    def g(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            ga, gb = hvd.grouped_allgather([t, t * 2.0])
            loss = tf.reduce_sum(ga * weights) + tf.reduce_sum(gb * weights)
        return tape.gradient(loss, t)
    first = tri(rank)
    want = np.array([[3 * tri(size) * (i + 1)] * 2 for i in range(first, first + rank + 1)], np.float32)
    np.testing.assert_array_equal(run(g, x).numpy(), want)


def test_grouped_reducescatter_grad(run, rank, size):
    x, y = tf.ones([size, 2]), tf.ones([size, 1])

    def g(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            ra, rb = hvd.grouped_reducescatter([a, b])  # Average
            loss = tf.reduce_sum(ra) * float(rank + 1) + tf.reduce_sum(rb)
        return tape.gradient(loss, [a, b])
    ga, gb = run(g, x, y)
    np.testing.assert_array_equal(ga.numpy(), np.array([[(r + 1.0) / size] * 2 for r in range(size)], np.float32))
    np.testing.assert_array_equal(gb.numpy(), np.full([size, 1], 1.0 / size, np.float32))
