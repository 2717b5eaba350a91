"""An elastic Keras 3 training with hvd.keras for the tests, as Horovod's
Keras elastic example trains: model.fit inside @hvd.elastic.run with
UpdateEpochStateCallback, UpdateBatchStateCallback and CommitStateCallback
(every COMMIT batches), an hvd.keras.DistributedOptimizer (SGD with
momentum, so the optimizer has state) and fit(initial_epoch=state.epoch).
Each step takes the next GLOBAL samples of the epoch's permutation, split
evenly over the ranks (GLOBAL divides by 2, 3 and 4), and the optimizer
averages the ranks' mean losses' gradients: the weights do not depend on
the number of ranks, and a training resumed at the committed epoch and
batch ends with the weights of an uninterrupted one.

Environment: ELASTIC_EPOCHS; ELASTIC_EXIT "GEN:EPOCH:BATCH:RANK:kill9[,...]":
in generation GEN the rank RANK kills itself before that batch (BATCH:
batches of the epoch done); ELASTIC_WAIT "EPOCH:BATCH:HOSTS": before that
batch, wait until the ranks' hosts are HOSTS (a+a+b+b), committing
until workers waiting to join interrupt; ELASTIC_PROGRESS: a file rank 0 writes
"EPOCH BATCH" to after each batch. Prints one line per generation, with
where it starts:
  ELASTIC gen=G rank=R size=S local_rank=L host=H pid=P sync=0|1 epoch=E batch=B
and at the end:
  RESULT rank=R size=S weights=W1,W2,.. resets=N batches=K
(K: the batches this process ran in model.fit).
"""

import os
import signal
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvd.keras as hvd  # noqa: E402
from hvd import _core  # noqa: E402

N, DIM, GLOBAL, COMMIT = 96, 4, 12, 2
STEPS = N // GLOBAL
W_TRUE = np.array([[1.5], [-2.0], [0.5], [3.0]], dtype=np.float32)


def schedule(name):
    return [e.split(":") for e in filter(None, os.environ.get(name, "").split(","))]


def main():
    hvd.init()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    y = x @ W_TRUE
    model = keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(1, use_bias=False,
                                                                      kernel_initializer="zeros")])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.05, momentum=0.5))
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    state = hvd.elastic.KerasState(model, optimizer=opt, epoch=0, batch=0)
    epochs = int(os.environ.get("ELASTIC_EPOCHS", "3"))
    exits = schedule("ELASTIC_EXIT")
    waits = schedule("ELASTIC_WAIT")
    progress = os.environ.get("ELASTIC_PROGRESS")
    host = os.environ.get("HVD_HOSTNAME", "?")
    resets = [0]
    batches = [0]
    state.register_reset_callbacks([lambda: resets.__setitem__(0, resets[0] + 1)])

    def dataset():
        """This rank's share of every batch from (state.epoch, state.batch) on."""
        idx = []
        for e in range(state.epoch, epochs):
            perm = np.random.default_rng(100 + e).permutation(N)
            for s in range(state.batch if e == state.epoch else 0, STEPS):
                idx.extend(perm[s * GLOBAL:(s + 1) * GLOBAL][hvd.rank()::hvd.size()])
        idx = np.array(idx, dtype=np.int64)
        return tf.data.Dataset.from_tensor_slices((x[idx], y[idx])).batch(GLOBAL // hvd.size())

    class Schedule(keras.callbacks.Callback):
        """The exits and waits of the environment, before each batch; the
        progress after it (after the state callbacks: the batch is done)."""

        def __init__(self, gen):
            super().__init__()
            self.gen = gen

        def on_train_batch_begin(self, batch, logs=None):
            for g, e, b, r, _ in exits:
                if (int(g), int(e), int(b), int(r)) == (self.gen, state.epoch, state.batch, hvd.rank()):
                    os.kill(os.getpid(), signal.SIGKILL)
            for e, b, hosts in waits:
                if (int(e), int(b)) == (state.epoch, state.batch):
                    while "+".join(hvd.allgather_object(host, name="hosts")) != hosts:
                        state.commit()  # HostsUpdatedInterrupt once workers wait to join
                        time.sleep(0.05)

        def on_train_batch_end(self, batch, logs=None):
            batches[0] += 1
            if progress and hvd.rank() == 0:
                with open(progress + ".tmp", "w") as f:
                    f.write(f"{state.epoch} {state.batch}\n")
                os.replace(progress + ".tmp", progress)

    @hvd.elastic.run
    def train(state):
        gen, sync, _ = _core.elastic_info()
        print(f"ELASTIC gen={gen} rank={hvd.rank()} size={hvd.size()} local_rank={hvd.local_rank()} host={host} "
              f"pid={os.getpid()} "
              f"sync={int(sync)} epoch={state.epoch} batch={state.batch}", flush=True)
        if state.epoch >= epochs:
            return
        callbacks = [hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                     hvd.elastic.CommitStateCallback(state, batches_per_commit=COMMIT), Schedule(gen)]
        model.fit(dataset(), steps_per_epoch=STEPS, epochs=epochs, initial_epoch=state.epoch,
                  callbacks=callbacks, verbose=0, shuffle=False)

    train(state)
    assert (state.epoch, state.batch) == (epochs, 0), f"fit ended at epoch {state.epoch} batch {state.batch}"
    w = model.get_weights()[0].flatten()
    every = hvd.allgather(w[None, :], name="final")
    assert (every == w[None, :]).all(), f"ranks ended with different weights: {every}"
    print(f"RESULT rank={hvd.rank()} size={hvd.size()} weights={','.join(f'{v:.6f}' for v in w)} "
          f"resets={resets[0]} batches={batches[0]}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
