"""An elastic training with hvd.tensorflow for the tests: a Keras linear
model (SGD with momentum, so the optimizer has state) in a custom loop,
a TensorFlowKerasState committed after every step. Each step takes the
next GLOBAL samples of the epoch's permutation, split over the ranks, and
sums the gradients (each rank's loss is its share of the global mean), so
the weights do not depend on the number of ranks.

Environment: ELASTIC_EPOCHS, ELASTIC_EXIT "GEN:EPOCH:STEP:RANK:KIND[,...]":
in generation GEN the rank RANK kills itself at that step, before it
(KIND kill9) or after its update (KIND kill9-after: the survivors have
updated too, fail in the loss's allreduce and must go back to the
commit). Prints one line per generation:
  ELASTIC gen=G rank=R size=S host=H pid=P sync=0|1
and at the end:
  RESULT rank=R size=S weights=W1,W2,.. resets=N
"""

import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvd.tensorflow as hvd  # noqa: E402
import hvd.tensorflow.keras as hvd_keras  # noqa: E402
from hvd import _core  # noqa: E402

N, DIM, GLOBAL = 96, 4, 12
W_TRUE = np.array([[1.5], [-2.0], [0.5], [3.0]], dtype=np.float32)


def main():
    hvd.init()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    y = x @ W_TRUE
    model = tf.keras.Sequential([tf.keras.Input((DIM,)), tf.keras.layers.Dense(1, use_bias=False,
                                                                               kernel_initializer="zeros")])
    opt = tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.5)
    state = hvd_keras.elastic.KerasState(model, optimizer=opt, epoch=0, step=0)
    epochs = int(os.environ.get("ELASTIC_EPOCHS", "2"))
    exits = [e.split(":") for e in filter(None, os.environ.get("ELASTIC_EXIT", "").split(","))]
    host = os.environ.get("HVD_HOSTNAME", "?")
    resets = [0]

    def on_reset():
        resets[0] += 1

    state.register_reset_callbacks([on_reset])

    def exit_here(gen, when):
        for g, e, s, r, kind in exits:
            if (kind == when and gen == int(g) and int(e) == state.epoch and int(s) == state.step
                    and int(r) == hvd.rank()):
                os.kill(os.getpid(), signal.SIGKILL)

    @hvd.elastic.run
    def train(state):
        gen, sync, _ = _core.elastic_info()
        print(f"ELASTIC gen={gen} rank={hvd.rank()} size={hvd.size()} host={host} pid={os.getpid()} "
              f"sync={int(sync)}", flush=True)
        while state.epoch < epochs:
            perm = np.random.default_rng(100 + state.epoch).permutation(N)
            while state.step < N // GLOBAL:
                exit_here(gen, "kill9")
                part = perm[state.step * GLOBAL:(state.step + 1) * GLOBAL][hvd.rank()::hvd.size()]
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum((model(x[part]) - y[part]) ** 2) / GLOBAL
                grads = tape.gradient(loss, model.trainable_variables)
                grads = [hvd.allreduce(g, op=hvd.Sum, name=f"grad.{i}") for i, g in enumerate(grads)]
                opt.apply_gradients(zip(grads, model.trainable_variables))
                exit_here(gen, "kill9-after")
                # the global batch's loss, for every rank: a collective between update and commit
                hvd.allreduce(loss, op=hvd.Sum, name="loss")
                state.step += 1
                state.commit()
            state.epoch += 1
            state.step = 0
            state.commit()

    train(state)
    w = model.get_weights()[0].flatten()
    every = hvd.allgather(tf.constant(w[None, :]), name="final").numpy()
    assert (every == w[None, :]).all(), f"ranks ended with different weights: {every}"
    print(f"RESULT rank={hvd.rank()} size={hvd.size()} weights={','.join(f'{v:.6f}' for v in w)} "
          f"resets={resets[0]}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
