"""hvd.tensorflow.keras (tf.keras) and hvd.keras: DistributedOptimizer in
model.fit and eagerly against a single-process training on the global
batch, backward_passes_per_step, the optimizer's class and configuration,
the collectives, broadcast_global_variables, and the Keras backends."""

import types

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow.keras as hk
from keras_util import (LEGACY, K, Recorder, assert_same_on_every_rank, flat, gathered, global_batches, make_model,
                        mse, rank_data, value)

N, BATCH, LR = 16, 4, 0.1
# float64 everywhere: the distributed run and the single-process reference
# compute the same sums in different orders (per rank, then across ranks;
# over the global batch at once), which differ by rounding (~1e-16
# relative per operation, a few 1e-15 after these few steps). 1e-9 is far
# above that and far below what a wrong gradient gives (a sum instead of
# an average, one rank's gradient alone: differences of 1e-2 and more).
RTOL, ATOL = 1e-9, 1e-12


def frontends():
    out = ["tf.keras"]
    if not LEGACY:
        out.append("keras")  # the keras package: tf.keras is the same Keras 3 then
    return out


@pytest.mark.parametrize("frontend", frontends())
@pytest.mark.parametrize("eager", [False, True], ids=["fit", "fit-eager"])
def test_fit_matches_single_process_on_global_batch(rank, size, eager, frontend):
    if frontend == "keras":
        import keras
        import hvd.keras as front
    else:
        keras, front = K, hk
    model = make_model(5, keras)
    opt = front.DistributedOptimizer(keras.optimizers.SGD(LR))
    model.compile(optimizer=opt, loss=mse(keras), run_eagerly=eager)
    x, y = rank_data(rank, N)
    hist = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                     callbacks=[front.callbacks.MetricAverageCallback()])

    reference = make_model(5, keras)
    reference.compile(optimizer=keras.optimizers.SGD(LR), loss=mse(keras))
    gx, gy = global_batches(size, N, BATCH)
    ref_hist = reference.fit(gx, gy, batch_size=size * BATCH, epochs=2, shuffle=False, verbose=0)

    assert_same_on_every_rank(model.get_weights())
    np.testing.assert_allclose(flat(model.get_weights()), flat(reference.get_weights()), rtol=RTOL, atol=ATOL)
    # the ranks' losses, averaged by MetricAverageCallback, are the global
    # batch's; Keras's loss tracker keeps a float32 mean (7 digits)
    np.testing.assert_allclose(hist.history["loss"], ref_hist.history["loss"], rtol=1e-6)
    assert not np.allclose(flat(model.get_weights()), flat(make_model(5, keras).get_weights()))
    # the data differed: without averaging, the weights would have too
    assert len(set(gathered([rank_data(rank, N)[0]])[:, 0].tolist())) == size


def dense_kernel(value=0.0):
    layer = K.layers.Dense(1, use_bias=False, kernel_initializer=K.initializers.Constant(value), dtype="float32")
    layer.build((None, 3))
    return layer.kernel


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("kwargs,want", [
    ({}, lambda s: -(s + 1) / 2),
    ({"op": hk.Sum}, lambda s: -s * (s + 1) / 2),
    ({"gradient_predivide_factor": 2.0}, lambda s: -(s + 1) / 2),
    ({"num_groups": 1}, lambda s: -(s + 1) / 2),
])
def test_apply_gradients_reduces(rank, size, mode, kwargs, want):
    w = dense_kernel()
    opt = hk.DistributedOptimizer(K.optimizers.SGD(1.0), **kwargs)

    def step():
        opt.apply_gradients([(tf.fill([3, 1], float(rank + 1)), w)])

    (tf.function(step) if mode == "function" else step)()
    np.testing.assert_array_equal(value(w), np.full([3, 1], want(size), np.float32))


def test_optimizer_keeps_class_and_config():
    base = K.optimizers.Adam(0.003, beta_1=0.8)
    opt = hk.DistributedOptimizer(base)
    assert isinstance(opt, K.optimizers.Adam)
    assert type(opt).__name__ == "Adam" and type(opt) is not type(base)
    assert opt.get_config() == base.get_config()
    with pytest.raises(ValueError, match="already a DistributedOptimizer"):
        hk.DistributedOptimizer(opt)
    with pytest.raises(ValueError, match="num_groups or groups"):
        hk.DistributedOptimizer(base, num_groups=2, groups=[[]])
    with pytest.raises(ValueError, match="op=Average only"):
        hk.DistributedOptimizer(base, op=hk.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hk.DistributedOptimizer(base, backward_passes_per_step=0)


@pytest.mark.parametrize("average", [False, True])
def test_backward_passes_per_step_accumulates(rank, size, average):
    steps = 4
    model = make_model(9)
    opt = hk.DistributedOptimizer(K.optimizers.SGD(LR), backward_passes_per_step=2,
                                  average_aggregated_gradients=average)
    model.compile(optimizer=opt, loss=mse())
    x, y = rank_data(rank, steps * BATCH)
    rec = Recorder(lambda m, logs: flat(m.get_weights()))
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[rec])
    after = rec.seen["batch_end"]
    initial = flat(make_model(9).get_weights())

    # the reference: every 2 global batches, their gradients at the same weights, summed (or averaged)
    reference = make_model(9)
    gx, gy = global_batches(size, steps * BATCH, BATCH)
    gb = size * BATCH
    lr = float(np.float32(LR))  # Keras keeps the learning rate in float32
    want = []
    for k in range(0, steps, 2):
        total = None
        for j in (k, k + 1):
            with tf.GradientTape() as tape:
                loss = mse()(gy[j * gb:(j + 1) * gb], reference(gx[j * gb:(j + 1) * gb]))
            g = tape.gradient(loss, reference.trainable_variables)
            total = g if total is None else [a + b for a, b in zip(total, g)]
        want.append(flat(reference.get_weights()))
        for v, g in zip(reference.trainable_variables, total):
            v.assign_sub(lr * (g / 2 if average else g))
        want.append(flat(reference.get_weights()))

    assert after[0].tobytes() == initial.tobytes()  # the 1st pass only accumulates
    assert after[2].tobytes() == after[1].tobytes()  # so does the 3rd
    assert not np.allclose(after[1], after[0])
    for got, ref in zip(after, want):
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    assert_same_on_every_rank(model.get_weights())
    assert int(value(opt.iterations)) == steps  # as Horovod: every pass counts


def test_backward_passes_per_step_eager(rank, size):
    w = dense_kernel()
    opt = hk.DistributedOptimizer(K.optimizers.SGD(1.0), backward_passes_per_step=3)
    seen = []
    for _ in range(3):
        opt.apply_gradients([(tf.fill([3, 1], float(rank + 1)), w)])
        seen.append(float(value(w)[0, 0]))
    # the sum of 3 passes, averaged over the ranks, applied at the 3rd
    assert seen == [0.0, 0.0, -3 * (size + 1) / 2]


def test_collectives_give_numpy(rank, size):
    out = hk.allreduce(np.array([float(rank)]))
    assert isinstance(out, np.ndarray) and out.tolist() == [(size - 1) / 2]
    assert hk.allreduce([rank], op=hk.Sum).tolist() == [size * (size - 1) // 2]
    assert hk.allgather(np.array([rank])).tolist() == list(range(size))
    assert hk.broadcast(np.array([rank + 5]), root_rank=size - 1).tolist() == [size + 4]
    assert hk.reducescatter(np.ones([size, 2]), op=hk.Sum).tolist() == [[float(size)] * 2]
    rows, counts = hk.alltoall(np.full([size], rank))
    assert rows.tolist() == list(range(size)) and counts.tolist() == [1] * size
    hk.barrier()


def test_broadcast_global_variables(rank, size):
    model = make_model(100 + rank)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.Adam(0.01)), loss="mse")
    with pytest.raises(ValueError, match="pass model="):
        hk.broadcast_global_variables(0)
    hk.broadcast_global_variables(0, model=model)
    assert flat(model.get_weights()).tobytes() == flat(make_model(100).get_weights()).tobytes()
    assert_same_on_every_rank(model.get_weights())


def test_other_backends_refused():
    # Keras of this environment imports no backend but TensorFlow's (no jax,
    # no torch): the check is fed what such a Keras would answer
    from hvd._keras import compat
    for name in ("jax", "torch", "numpy"):
        fake = types.SimpleNamespace(backend=types.SimpleNamespace(backend=lambda name=name: name),
                                     __version__="3.15.1")
        with pytest.raises(ImportError, match=f"hvd.keras needs Keras with the TensorFlow backend, but this "
                                              f"Keras 3.15.1 runs on '{name}'"):
            compat.checked_keras(fake, "hvd.keras")
    assert compat.checked_keras(K, "hvd.tensorflow.keras") is K


def test_keras_under_test():
    # TF_USE_LEGACY_KERAS=1 (run-legacy-np2.sh) gives Keras 2 from tf_keras, else Keras 3
    if LEGACY:
        import tf_keras
        assert K.__name__.startswith("tf_keras") and tf_keras.__version__.startswith("2."), K.__name__
    else:
        import keras
        assert keras.__version__.startswith("3.") and K.optimizers.SGD is keras.optimizers.SGD


@pytest.mark.skipif(not LEGACY, reason="Keras 2's OptimizerV2 (tf_keras.optimizers.legacy): TF_USE_LEGACY_KERAS=1")
@pytest.mark.parametrize("passes", [1, 2])
def test_legacy_optimizer_v2(rank, size, passes):
    model = make_model(5)
    opt = hk.DistributedOptimizer(K.optimizers.legacy.SGD(LR), backward_passes_per_step=passes)
    assert isinstance(opt, K.optimizers.legacy.SGD)
    model.compile(optimizer=opt, loss=mse())
    x, y = rank_data(rank, N)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    reference = make_model(5)
    reference.compile(optimizer=K.optimizers.legacy.SGD(LR), loss=mse())
    gx, gy = global_batches(size, N, BATCH)
    if passes == 1:
        reference.fit(gx, gy, batch_size=size * BATCH, epochs=1, shuffle=False, verbose=0)
        np.testing.assert_allclose(flat(model.get_weights()), flat(reference.get_weights()), rtol=RTOL, atol=ATOL)
    assert_same_on_every_rank(model.get_weights())
    assert int(value(opt.iterations)) == N // BATCH


def test_xla_compiled_step_refused(rank):
    # hvd's ops have no XLA kernels: a clear error at the trace, on every rank, before any collective
    model = make_model(5)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.SGD(LR)), loss=mse(), jit_compile=True)
    x, y = rank_data(rank, N)
    with pytest.raises(ValueError, match="compile the model with jit_compile=False"):
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)


def test_groups_of_variables(rank, size):
    ws = [dense_kernel() for _ in range(3)]
    opt = hk.DistributedOptimizer(K.optimizers.SGD(1.0), groups=[[ws[0], ws[2]]])  # ws[1] on its own
    opt.apply_gradients([(tf.fill([3, 1], float(rank + 1 + i)), w) for i, w in enumerate(ws)])
    for i, w in enumerate(ws):
        np.testing.assert_array_equal(value(w), np.full([3, 1], -((size + 1) / 2 + i), np.float32))


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_sparse_gradients(rank, size, sparse_as_dense):
    # an Embedding's gradient is tf.IndexedSlices: allgathered (or made dense), then averaged
    def model_of():
        m = K.Sequential([K.Input((2,), dtype="int32"), K.layers.Embedding(8, 3, dtype="float64"),
                          K.layers.Flatten(), K.layers.Dense(1, dtype="float64")])
        rng = np.random.default_rng(3)
        m.set_weights([rng.standard_normal(w.shape) for w in m.get_weights()])
        return m

    def data(r):
        rng = np.random.default_rng(40 + r)
        return rng.integers(0, 8, [N, 2]).astype(np.int32), rank_data(r, N)[1]

    model = model_of()
    x, y = data(rank)
    with tf.GradientTape() as tape:
        loss = mse()(y, model(x))
    assert isinstance(tape.gradient(loss, model.trainable_variables)[0], tf.IndexedSlices)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.SGD(LR), sparse_as_dense=sparse_as_dense),
                  loss=mse())
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    parts = [data(r) for r in range(size)]
    gx = np.concatenate([p[0][i:i + BATCH] for i in range(0, N, BATCH) for p in parts])
    gy = np.concatenate([p[1][i:i + BATCH] for i in range(0, N, BATCH) for p in parts])
    reference = model_of()
    reference.compile(optimizer=K.optimizers.SGD(LR), loss=mse())
    reference.fit(gx, gy, batch_size=size * BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(model.get_weights())
    # TensorFlow's own gradient of the lookup over a global batch of 12 rows
    # differs from the average of three batches of 4 by up to 3e-7 (measured
    # without hvd; 1e-16 for 8 rows and two of 4): 1e-6 here, still far below
    # a wrong sparse average (a sum, or one rank's rows alone: 1e-2 and more)
    np.testing.assert_allclose(flat(model.get_weights()), flat(reference.get_weights()), rtol=1e-6, atol=1e-6)
