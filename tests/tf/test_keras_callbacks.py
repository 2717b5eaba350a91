"""The Keras callbacks of hvd.tensorflow.keras in model.fit on every rank:
the broadcast of the model's and the optimizer's variables, the average
of the logs, the learning-rate warm-up and schedule (the rate of every
batch against the formula), BestModelCheckpoint (rank 0 alone writes the
best epoch's model) and load_model, whose optimizer goes on distributed."""

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow.keras as hk
from keras_util import K, Recorder, assert_same_on_every_rank, flat, make_model, mse, rank_data, value

BATCH = 4


def fit(model, rank, callbacks, epochs=1, steps=2, **kwargs):
    x, y = rank_data(rank, steps * BATCH)
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks,
                     **kwargs)


def optimizer_state(model):
    return flat([value(v) for v in model.optimizer.variables if "iteration" not in v.name])


def test_broadcast_callback_makes_start_identical(rank, size):
    model = make_model(200 + rank)  # different weights on every rank
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.Adam(0.01)), loss=mse())
    start = Recorder(lambda m, logs: flat(m.get_weights()), when=("batch_begin",))
    fit(model, rank, [hk.callbacks.BroadcastGlobalVariablesCallback(0), start])
    # the first batch starts from rank 0's weights on every rank
    assert start.seen["batch_begin"][0].tobytes() == flat(make_model(200).get_weights()).tobytes()
    assert_same_on_every_rank(model.get_weights())
    # Adam's moments, made and broadcast before the first step: identical too, and not zero
    state = optimizer_state(model)
    assert np.any(state != 0)
    assert_same_on_every_rank([state])


def test_broadcast_callback_root_and_optimizer_state(rank, size):
    # The optimizer's state follows the allreduced gradients, alike on every
    # rank: made different here, it must become the root's before the first step.
    root = size - 1
    model = make_model(300 + rank)
    opt = hk.DistributedOptimizer(K.optimizers.Adam(0.01))
    model.compile(optimizer=opt, loss=mse())
    opt.build(model.trainable_variables)
    for i, v in enumerate(opt.variables):
        if "iteration" not in v.name:
            v.assign(tf.fill(v.shape, tf.cast(0.5 * (rank + 1) + i, v.dtype)))
    with pytest.raises(AssertionError, match="differs"):
        assert_same_on_every_rank([optimizer_state(model)])
    root_state = [np.full(v.shape, 0.5 * (root + 1) + i, np.float64) for i, v in enumerate(opt.variables)
                  if "iteration" not in v.name]
    start = Recorder(lambda m, logs: optimizer_state(m), when=("batch_begin",))
    fit(model, rank, [hk.callbacks.BroadcastGlobalVariablesCallback(root), start])
    assert start.seen["batch_begin"][0].tobytes() == flat(root_state).tobytes()
    assert_same_on_every_rank(model.get_weights())
    assert_same_on_every_rank([optimizer_state(model)])
    assert flat(model.get_weights()).tobytes() != flat(make_model(300 + root).get_weights()).tobytes()


class RankMetric(K.metrics.Metric):
    """rank + 1 + epoch: a metric that differs by rank."""

    def __init__(self, name="rank_metric", **kwargs):
        super().__init__(name=name, **kwargs)
        self.value = self.add_weight(name="value", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.value.assign(float(hk.rank() + 1))

    def result(self):
        return self.value


@pytest.mark.parametrize("average", [True, False])
def test_metric_average_callback(rank, size, average):
    model = make_model(7)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.SGD(0.01)), loss=mse(), metrics=[RankMetric()])
    x, y = rank_data(rank, 2 * BATCH)
    after = Recorder(lambda m, logs: dict(logs), when=("epoch_end",))
    cbs = ([hk.callbacks.MetricAverageCallback()] if average else []) + [after]
    hist = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0, callbacks=cbs,
                     validation_data=(x[:BATCH], y[:BATCH]))
    want = (size + 1) / 2 if average else rank + 1
    for logs in after.seen["epoch_end"]:
        assert logs["rank_metric"] == want
        assert logs["val_rank_metric"] == want
    assert hist.history["rank_metric"] == [want, want]
    losses = hk.allgather(np.array([hist.history["loss"][-1]]))
    if average:
        assert len(set(losses.tolist())) == 1
    else:
        assert len(set(losses.tolist())) == size


def lr_of(model, logs=None):
    return float(value(model.optimizer.learning_rate))


@pytest.mark.parametrize("momentum_correction", [False, True])
def test_warmup_follows_the_formula(rank, size, momentum_correction):
    steps, warmup, epochs, initial = 3, 2, 3, 0.2
    model = make_model(8)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.SGD(initial, momentum=0.9)), loss=mse())
    rec = Recorder(lambda m, logs: (lr_of(m), [value(b) for b in getattr(m.optimizer, "momentums", [])]),
                   when=("batch_begin", "batch_end"))
    warm = hk.callbacks.LearningRateWarmupCallback(initial, warmup_epochs=warmup,
                                                   momentum_correction=momentum_correction)
    hist = fit(model, rank, [warm, rec], epochs=epochs, steps=steps)
    lrs = [lr for lr, _ in rec.seen["batch_begin"]]
    want = []
    for epoch in range(epochs):
        for batch in range(steps):
            if epoch < warmup:
                e = epoch + batch / steps + 1 / steps
                want.append(initial / size * (e * (size - 1) / warmup + 1))
            else:
                want.append(want[-1])  # not adjusted after the warm-up
    assert lrs == [float(np.float32(w)) for w in want]
    assert lrs[warmup * steps - 1] == float(np.float32(initial))
    assert hist.history["lr"] == [lrs[(e + 1) * steps - 1] for e in range(epochs)]
    # momentum correction: each change of the rate scaled the momentum by new/old
    for i in range(1, epochs * steps):
        before = rec.seen["batch_end"][i - 1][1]
        now = rec.seen["batch_begin"][i][1]
        ratio = lrs[i] / lrs[i - 1] if momentum_correction else 1.0
        for b, n in zip(before, now):
            np.testing.assert_allclose(n, b * np.float32(ratio), rtol=1e-6)
    if size > 1:
        assert lrs[0] < lrs[1] < lrs[warmup * steps - 1]


def test_schedule_multiplier_at_its_epochs(rank, size):
    steps, initial = 2, 0.4
    model = make_model(8)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.SGD(0.1)), loss=mse())
    rec = Recorder(lr_of, when=("batch_begin",))
    cbs = [hk.callbacks.LearningRateScheduleCallback(initial, 0.5, start_epoch=1, end_epoch=3),
           hk.callbacks.LearningRateScheduleCallback(initial, lambda epoch: 0.1 * epoch, start_epoch=4,
                                                     staircase=False), rec]
    fit(model, rank, cbs, epochs=6, steps=steps)
    want = [0.1, 0.1, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]  # epochs 0 to 3: as compiled, 0.4 * 0.5 in 1 and 2
    want += [initial * 0.1 * (e + b / steps) for e in (4, 5) for b in range(steps)]  # per batch from 4 on
    assert rec.seen["batch_begin"] == [float(np.float32(w)) for w in want]


def test_best_model_checkpoint_and_load_model(rank, size, tmp_path):
    scores = [3.0, 1.0, 2.0]  # the best (lowest) is epoch 1's

    class Score(K.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["score"] = scores[epoch]

    path = str(tmp_path / "best.keras")
    model = make_model(11)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.Adam(0.01)), loss=mse())
    weights = Recorder(lambda m, logs: [w.copy() for w in m.get_weights()], when=("epoch_end",))
    check = hk.callbacks.BestModelCheckpoint(monitor="score", mode="min", filepath=path)
    fit(model, rank, [hk.callbacks.BroadcastGlobalVariablesCallback(0), Score(), weights, check], epochs=3)
    assert tmp_path.joinpath("best.keras").exists() == (rank == 0)  # rank 0 alone writes

    path = hk.broadcast_object(path, root_rank=0)
    loaded = hk.load_model(path)
    assert getattr(type(loaded.optimizer), "_hvd_distributed", False)
    assert isinstance(loaded.optimizer, K.optimizers.Adam)
    for got, want in zip(loaded.get_weights(), weights.seen["epoch_end"][1]):
        assert got.tobytes() == want.tobytes()
    assert int(value(loaded.optimizer.iterations)) == 2 * 2  # the state after epoch 1: restored
    fit(loaded, rank, [], epochs=1)  # it trains on, distributed: identical weights on every rank
    assert int(value(loaded.optimizer.iterations)) == 3 * 2
    assert_same_on_every_rank(loaded.get_weights())
    assert not np.array_equal(flat(loaded.get_weights()), flat(weights.seen["epoch_end"][1]))


def test_best_model_checkpoint_needs_a_file(rank):
    model = make_model(11)
    model.compile(optimizer=hk.DistributedOptimizer(K.optimizers.SGD(0.01)), loss=mse())
    check = hk.callbacks.BestModelCheckpoint(monitor="loss")
    with pytest.raises(ValueError, match="needs a file"):  # on every rank, before any collective
        fit(model, rank, [check])


class MySGD(K.optimizers.SGD):
    """An optimizer class of the user's, which load_model is told of."""


def test_load_model_custom_optimizer(rank, size, tmp_path):
    model = make_model(12)
    model.compile(optimizer=hk.DistributedOptimizer(MySGD(0.05)), loss=mse())
    fit(model, rank, [])
    path = str(tmp_path / "custom.keras")
    model.save(path)  # every rank its own file
    loaded = hk.load_model(path, custom_optimizers=[MySGD])
    assert isinstance(loaded.optimizer, MySGD) and getattr(type(loaded.optimizer), "_hvd_distributed", False)
    assert int(value(loaded.optimizer.iterations)) == 2
    fit(loaded, rank, [])
    assert_same_on_every_rank(loaded.get_weights())
