"""Training with hvd.tensorflow: broadcast_variables makes every rank's
weights the root's; a custom loop with DistributedGradientTape on
different data per rank keeps the weights bit-identical on every rank;
collectives of one graph are in flight together."""

import os

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd


def gathered(variables):
    """Every rank's variables, flattened: one row per rank."""
    flat = tf.concat([tf.reshape(v, [-1]) for v in variables], 0)
    return hvd.allgather(tf.reshape(flat, [1, -1])).numpy()


def make_weights(seed):
    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.standard_normal([4, 8]).astype(np.float32), name="w1"),
            tf.Variable(rng.standard_normal([8]).astype(np.float32), name="b1"),
            tf.Variable(rng.standard_normal([8, 1]).astype(np.float32), name="w2")]


@pytest.mark.parametrize("root", [0, -1])
def test_broadcast_variables_makes_weights_identical(rank, size, root):
    root = root % size
    weights = make_weights(100 + rank)
    before = gathered(weights)
    assert not np.array_equal(before[0], before[-1])  # different to start with
    hvd.broadcast_variables(weights, root_rank=root)
    after = gathered(weights)
    for r in range(size):
        assert after[r].tobytes() == before[root].tobytes()


def model(weights, x):
    w1, b1, w2 = weights
    return tf.matmul(tf.nn.tanh(tf.matmul(x, w1) + b1), w2)


def rank_data(rank, n=32):
    rng = np.random.default_rng(7 + rank)
    x = rng.standard_normal([n, 4]).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    return tf.constant(x), tf.constant(y)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("num_groups", [0, 2])
def test_training_loop_weights_bit_identical(rank, size, mode, num_groups):
    weights = make_weights(1000 + rank)
    hvd.broadcast_variables(weights, root_rank=0)
    x, y = rank_data(rank)
    lr = 0.05

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(weights, x) - y))
        tape = hvd.DistributedGradientTape(tape, num_groups=num_groups)
        grads = tape.gradient(loss, weights)
        for v, g in zip(weights, grads):
            v.assign_sub(lr * g)
        return loss

    if mode == "function":
        step = tf.function(step)
    losses = [float(step()) for _ in range(30)]
    assert losses[-1] < losses[0]
    rows = gathered(weights)
    for r in range(1, size):
        assert rows[r].tobytes() == rows[0].tobytes()
    # the same loss on every rank would mean the data were not different
    all_losses = hvd.allgather(tf.constant([losses[0]])).numpy()
    assert len(set(all_losses.tolist())) == size


def test_gradients_are_the_average(rank, size):
    w = tf.Variable(tf.ones([3]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(rank + 1))
    tape = hvd.DistributedGradientTape(tape)
    (g,) = tape.gradient(loss, [w])
    np.testing.assert_array_equal(g.numpy(), np.full([3], (size + 1) / 2, np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(rank + 1))
    tape = hvd.DistributedGradientTape(tape, op=hvd.Sum)
    (g,) = tape.gradient(loss, [w])
    np.testing.assert_array_equal(g.numpy(), np.full([3], size * (size + 1) / 2, np.float32))


def test_sparse_gradient_from_embedding_lookup(rank, size):
    # a gather's gradient is tf.IndexedSlices: allgathered, then averaged
    table = tf.Variable(tf.zeros([size + 1, 2]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [rank]) * float(rank + 1))
    tape = hvd.DistributedGradientTape(tape)
    (g,) = tape.gradient(loss, [table])
    assert isinstance(g, tf.IndexedSlices)
    dense = tf.convert_to_tensor(g).numpy()
    want = np.zeros([size + 1, 2], np.float32)
    for r in range(size):
        want[r] = (r + 1) / size
    np.testing.assert_array_equal(dense, want)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [rank]) * float(rank + 1))
    (g,) = hvd.DistributedGradientTape(tape, sparse_as_dense=True).gradient(loss, [table])
    np.testing.assert_array_equal(g.numpy(), want)


def test_independent_collectives_in_flight_together(rank, size):
    # More independent allreduces than TensorFlow has inter-op threads, built
    # in opposite orders on alternate ranks: a kernel that blocked a thread
    # until its collective completed would leave each rank waiting on ones
    # the others have not reached. Asynchronous kernels all submit at once.
    threads = max(tf.config.threading.get_inter_op_parallelism_threads(),
                  int(os.environ.get("TF_NUM_INTEROP_THREADS", "0")), os.cpu_count() or 1)
    n = 3 * threads + 8
    order = list(range(n)) if rank % 2 == 0 else list(reversed(range(n)))

    @tf.function
    def f(t):
        out = {}
        for i in order:
            out[i] = hvd.allreduce(t * float(i), op=hvd.Sum, name=f"inflight.{i}")
        return [out[i] for i in range(n)]
    for _ in range(2):
        res = f(tf.fill([64], float(rank + 1)))
        for i, t in enumerate(res):
            np.testing.assert_array_equal(t.numpy(), np.full([64], i * size * (size + 1) / 2, np.float32))
