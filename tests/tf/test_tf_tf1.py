"""TF1 training with hvd.tensorflow: tf.compat.v1 graphs run by sessions
(tf.Graph().as_default(), since eager execution cannot be switched off in
the eager session), DistributedOptimizer over a tf.compat.v1.train
optimizer, BroadcastGlobalVariablesHook and broadcast_global_variables,
backward_passes_per_step; broadcast_ and broadcast_object_fn."""

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd

LR = 0.1


def initial_weights(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([3, 4]).astype(np.float32), rng.standard_normal([4]).astype(np.float32),
            rng.standard_normal([4, 1]).astype(np.float32)]


def batch(rank, step, n=8):
    rng = np.random.default_rng(1000 * step + rank)
    x = rng.standard_normal([n, 3]).astype(np.float32)
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)


def loss_of(weights, x, y):
    w1, b1, w2 = weights
    return tf.reduce_mean(tf.square(tf.matmul(tf.nn.tanh(tf.matmul(x, w1) + b1), w2) - y))


def graph_model(seed):
    """Variables (rank-dependent values), placeholders and the loss."""
    weights = [tf.compat.v1.Variable(w, name=f"w{i}") for i, w in enumerate(initial_weights(seed))]
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    return weights, x, y, loss_of(weights, x, y)


def reference(size, steps, passes=1):
    """One process, rank 0's start, the global batch of every step: with
    passes > 1, the gradients of `passes` runs summed, then applied."""
    weights = [tf.Variable(w) for w in initial_weights(0)]
    for step in range(steps):
        total = [tf.zeros_like(w) for w in weights]
        for p in range(passes):
            data = [batch(r, step * passes + p) for r in range(size)]
            x = np.concatenate([d[0] for d in data])
            y = np.concatenate([d[1] for d in data])
            with tf.GradientTape() as tape:
                loss = loss_of(weights, x, y)
            total = [t + g for t, g in zip(total, tape.gradient(loss, weights))]
        for w, g in zip(weights, total):
            w.assign_sub(LR * g)
    return [w.numpy() for w in weights]


def all_ranks(arrays):
    """Every rank's arrays flattened into one row each (eager allgather)."""
    flat = np.concatenate([a.ravel() for a in arrays])[None, :]
    return hvd.allgather(tf.constant(flat)).numpy()


def test_monitored_session_with_hook(rank, size):
    steps = 3
    with tf.Graph().as_default():
        weights, x, y, loss = graph_model(seed=rank)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR))
        train = opt.minimize(loss, global_step=global_step)
        hooks = [hvd.BroadcastGlobalVariablesHook(0)]
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, log_step_count_steps=None,
                                                         save_checkpoint_secs=None,
                                                         save_summaries_steps=None) as sess:
            start = sess.run(weights)
            for step in range(steps):
                xs, ys = batch(rank, step)
                sess.run(train, feed_dict={x: xs, y: ys})
            end = sess.run(weights)
            assert sess.run(global_step) == steps
    for got, want in zip(start, initial_weights(0)):
        assert got.tobytes() == want.tobytes()  # rank 0's, bit for bit
    rows = all_ranks(end)
    for r in range(size):
        assert rows[r].tobytes() == rows[0].tobytes()
    # the mean of equal-sized per-rank means is the global batch's mean:
    # equal up to float32 rounding of the different summation orders
    for got, want in zip(end, reference(size, steps)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(end[0], initial_weights(0)[0])  # it trained


@pytest.mark.parametrize("groups", [0, 2])
def test_session_broadcast_global_variables_and_passes(rank, size, groups):
    # backward_passes_per_step=2: runs 1, 3 accumulate; runs 2, 4 allreduce
    # the sums and apply them
    with tf.Graph().as_default():
        weights, x, y, loss = graph_model(seed=rank)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                       backward_passes_per_step=2, num_groups=groups)
        train = opt.minimize(loss)
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session() as sess:
            sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
            sess.run(bcast)
            seen = []
            for run in range(4):
                xs, ys = batch(rank, run)
                sess.run(train, feed_dict={x: xs, y: ys})
                seen.append(sess.run(weights))
    start = initial_weights(0)
    for got, want in zip(seen[0], start):
        assert got.tobytes() == want.tobytes()  # the first run only accumulated
    assert not np.allclose(seen[1][0], start[0])
    for got, want in zip(seen[2], seen[1]):
        assert got.tobytes() == want.tobytes()
    rows = all_ranks(seen[3])
    for r in range(size):
        assert rows[r].tobytes() == rows[0].tobytes()
    for got, want in zip(seen[3], reference(size, steps=2, passes=2)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_broadcast_global_variables_eager_raises():
    with pytest.raises(RuntimeError, match="broadcast_variables"):
        hvd.broadcast_global_variables(0)


def test_broadcast_in_place(rank, size):
    root = size - 1
    v = tf.Variable(tf.fill([3], float(rank)))
    vs = [tf.Variable(tf.fill([2], float(rank) * 2)), tf.Variable(tf.fill([1], rank))]
    hvd.broadcast_(v, root)
    hvd.broadcast_(vs, root, name="bcast_inplace")
    np.testing.assert_array_equal(v.numpy(), np.full([3], float(root), np.float32))
    np.testing.assert_array_equal(vs[0].numpy(), np.full([2], 2.0 * root, np.float32))
    np.testing.assert_array_equal(vs[1].numpy(), np.full([1], root, np.int32))


def test_broadcast_object_fn(rank, size):
    root = size - 1
    with tf.Graph().as_default():
        bcast = hvd.broadcast_object_fn(root_rank=root)
        with tf.compat.v1.Session():  # the default session, which bcast feeds
            got = bcast({"from": rank, "payload": list(range(rank + 3))})
            again = bcast(("second", rank))  # the same ops, another object
    assert got == {"from": root, "payload": list(range(root + 3))}
    assert again == ("second", root)
    # eagerly, it is broadcast_object
    assert hvd.broadcast_object_fn(root_rank=root)([rank]) == [root]


def test_object_collectives_take_horovods_session(rank, size):
    # Horovod's TF signatures have session=; hvd needs none, also in a graph
    with tf.Graph().as_default():
        with tf.compat.v1.Session() as sess:
            assert hvd.broadcast_object({"r": rank}, root_rank=size - 1, session=sess) == {"r": size - 1}
            assert hvd.allgather_object(("x", rank), session=sess) == [("x", r) for r in range(size)]
    assert hvd.broadcast_object(rank) == 0


def test_keras_optimizer_is_handed_on(rank, size):
    # a Keras optimizer becomes hvd.tensorflow.keras's, with the arguments
    # the caller set: op=Sum over ranks, 2 passes summed locally
    sgd = tf.keras.optimizers.SGD(0.1)
    opt = hvd.DistributedOptimizer(sgd, op=hvd.Sum, backward_passes_per_step=2)
    assert isinstance(opt, type(sgd))
    w = tf.Variable(np.ones(2, np.float32))
    g = tf.constant(np.full(2, rank + 1.0, np.float32))
    opt.apply_gradients([(g, w)])
    np.testing.assert_array_equal(w.numpy(), np.ones(2, np.float32))
    opt.apply_gradients([(g, w)])
    expected = np.float32(1.0) - np.float32(0.1) * np.float32(size * (size + 1))
    np.testing.assert_allclose(w.numpy(), np.full(2, expected, np.float32), rtol=1e-6)
    with pytest.raises(ValueError, match="neither"):
        hvd.DistributedOptimizer(object())


def test_momentum_passes_and_local_var(rank, size):
    # slots created inside the applying branch; a registered local
    # variable's gradient is not reduced but divided by the size
    with tf.Graph().as_default():
        w = tf.compat.v1.Variable(np.ones([3], np.float32))
        v = tf.compat.v1.Variable(np.ones([2], np.float32))
        loss = tf.reduce_sum(w * float(rank + 1)) + tf.reduce_sum(v * v) * float(rank + 1)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), backward_passes_per_step=2)
        opt.register_local_var(v)
        train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
            seen = []
            for _ in range(4):
                sess.run(train)
                seen.append(sess.run([w, v]))
    # w: the sum of 2 passes' (r + 1), averaged over the ranks; v: its own
    # 2 passes' 2 v (r + 1), divided by the size; momentum 0.9 in between
    gw = 2 * (size + 1) / 2
    w1 = 1 - 0.1 * gw
    w2 = w1 - 0.1 * (0.9 * gw + gw)
    gv1 = 2 * 2 * 1.0 * (rank + 1) / size
    v1 = 1 - 0.1 * gv1
    gv2 = 2 * 2 * v1 * (rank + 1) / size
    v2 = v1 - 0.1 * (0.9 * gv1 + gv2)
    for got, want in zip(seen, [(1, 1), (w1, v1), (w1, v1), (w2, v2)]):
        np.testing.assert_allclose(got[0], np.full([3], want[0], np.float32), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got[1], np.full([2], want[1], np.float32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients(rank, size, sparse_as_dense):
    # an embedding's tf.IndexedSlices gradient: allgathered (or made dense
    # and allreduced), the mean over the ranks either way
    ids = [[r % 5, (2 * r + 1) % 5, 4] for r in range(size)]
    with tf.Graph().as_default():
        emb = tf.compat.v1.Variable(np.zeros([5, 2], np.float32))
        loss = tf.reduce_sum(tf.gather(emb, ids[rank])) * float(rank + 1)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                       sparse_as_dense=sparse_as_dense)
        (grad, _), = opt.compute_gradients(loss, [emb])
        assert isinstance(grad, tf.IndexedSlices) != sparse_as_dense
        train = opt.apply_gradients([(grad, emb)])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            got = sess.run(emb)
    want = np.zeros([5, 2], np.float32)
    for r in range(size):
        for i in ids[r]:
            want[i] -= (r + 1) / size
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tf1_optimizer_eagerly(rank, size):
    # minimize with a callable loss, executing eagerly: the same averaging
    w = tf.Variable(np.ones([3], np.float32))
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    opt.minimize(lambda: tf.reduce_sum(w * float(rank + 1)), var_list=[w])
    np.testing.assert_allclose(w.numpy(), np.full([3], 1 - 0.1 * (size + 1) / 2, np.float32), rtol=1e-6)
    with pytest.raises(ValueError, match="TF1 graph"):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), backward_passes_per_step=2)
