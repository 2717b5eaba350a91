"""hvd.tensorflow.elastic and the Keras elastic names outside an elastic
job (generation 0): the states' commit, restore and sync, the Keras
callbacks in model.fit, run re-raising what is not a reset. The resets
themselves: tests/test-elastic-tf.sh, tests/test-elastic-keras-fit.sh."""

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd
import hvd.tensorflow.keras as hvd_keras


@pytest.mark.parametrize("name", ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState"])
def test_tf_elastic_names(name):
    assert hasattr(hvd.elastic, name), f"hvd.tensorflow.elastic.{name} is missing"


@pytest.mark.parametrize("name", ["run", "KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
                                  "UpdateEpochStateCallback"])
def test_keras_elastic_names(name):
    assert hasattr(hvd_keras.elastic, name), f"hvd.tensorflow.keras.elastic.{name} is missing"


def test_tensorflow_state_restore_and_sync():
    v = tf.Variable(np.full(3, float(hvd.rank()), np.float32))
    state = hvd.elastic.TensorFlowState([v], step=0)
    state.sync()
    assert np.array_equal(v.numpy(), np.zeros(3, np.float32)), "sync did not take rank 0's values"
    v.assign([1.0, 2.0, 3.0])
    state.step = 1
    state.commit()
    v.assign_add([5.0, 5.0, 5.0])
    state.step = 2
    state.restore()
    assert np.array_equal(v.numpy(), [1.0, 2.0, 3.0]) and state.step == 1


def _model(seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])


def test_keras_state_keeps_the_optimizer():
    model = _model(hvd.rank())
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    state = hvd_keras.elastic.KerasState(model, optimizer=opt, epoch=0)
    state.sync()
    w = [x.copy() for x in model.get_weights()]
    every = hvd.allgather_object(w)
    assert all(np.array_equal(a, b) for other in every for a, b in zip(other, w)), "sync did not take rank 0's"
    x = np.ones((4, 3), np.float32)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    step()
    state.commit()
    committed = [v.numpy().copy() for v in opt.variables]
    after_one = [x.copy() for x in model.get_weights()]
    step()
    step()
    state.restore()
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), after_one))
    assert all(np.array_equal(v.numpy(), c) for v, c in zip(opt.variables, committed)), \
        "the optimizer's variables (momentum, iterations) were not restored"


def test_keras_callbacks_in_fit():
    model = _model(0)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    state = hvd_keras.elastic.KerasState(model, epoch=0, batch=0)
    commits = []
    commit = state.commit
    state.commit = lambda: (commits.append(state.batch), commit())
    x, y = np.ones((12, 3), np.float32), np.zeros((12, 2), np.float32)
    cbs = [hvd_keras.elastic.UpdateBatchStateCallback(state), hvd_keras.elastic.UpdateEpochStateCallback(state),
           hvd_keras.elastic.CommitStateCallback(state, batches_per_commit=2)]
    model.fit(x, y, batch_size=2, epochs=2, callbacks=cbs, verbose=0, shuffle=False)
    # 6 batches an epoch; state.batch (batches done) is set before the
    # commit (callbacks in order), and the epoch's last batch moves the
    # state to the next epoch's start
    assert commits == [2, 4, 0, 2, 4, 0], commits
    assert state.epoch == 2 and state.batch == 0


def test_keras_fit_resumes_at_state_batch():
    """fit called again at state.batch > 0 (as after a reset) runs the rest
    of that epoch, then whole epochs."""
    model = _model(0)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    state = hvd_keras.elastic.KerasState(model, epoch=1, batch=4)
    seen = []

    class Record(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append((state.epoch, state.batch))

    x, y = np.ones((6 * 2, 3), np.float32), np.zeros((6 * 2, 2), np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(2).repeat()
    cbs = [hvd_keras.elastic.UpdateEpochStateCallback(state), hvd_keras.elastic.UpdateBatchStateCallback(state),
           Record()]
    model.fit(data, steps_per_epoch=6, epochs=3, initial_epoch=state.epoch, callbacks=cbs, verbose=0,
              shuffle=False)
    assert seen == [(1, 4), (1, 5)] + [(2, b) for b in range(6)], seen
    assert state.epoch == 3 and state.batch == 0


def test_commit_callback_checks_its_argument():
    state = hvd_keras.elastic.KerasState(_model(0), epoch=0, batch=0)
    with pytest.raises(ValueError, match="batches_per_commit"):
        hvd_keras.elastic.CommitStateCallback(state, batches_per_commit=0)


def test_run_reraises_what_is_not_a_reset():
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(1)
        raise tf.errors.AbortedError(None, None, "something else aborted")

    with pytest.raises(tf.errors.AbortedError, match="something else"):
        train(hvd.elastic.ObjectState(x=0))
    assert calls == [1]
