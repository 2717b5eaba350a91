"""Eager calls without a name: executing synchronously (TensorFlow's
default), every call of a kind takes the same name, <kind>.tf.noname.sync
(a counted name is new each call and is negotiated each time); shapes and
dtypes may change from call to call, results stay exact, a disagreement
between ranks is still an error. Asynchronous eager calls, which overlap,
and a tf.function's ops keep their own names."""

import pytest
import tensorflow as tf

import hvd.tensorflow as hvd
from hvd.tensorflow import mpi_ops

OPS = ("hvd_allreduce", "hvd_grouped_allreduce", "hvd_allgather", "hvd_broadcast", "hvd_alltoall",
       "hvd_reducescatter", "hvd_grouped_allgather", "hvd_grouped_reducescatter")


@pytest.fixture
def given(monkeypatch):
    """The tensor_name each op is given, in order: (op, tensor_name)."""
    seen = []
    for op in OPS:
        def spy(*args, _op=op, _real=getattr(mpi_ops._lib, op), **kwargs):
            seen.append((_op, kwargs.get("tensor_name")))
            return _real(*args, **kwargs)
        monkeypatch.setattr(mpi_ops._lib, op, spy)
    return seen


def test_eager_calls_repeat_one_name(given, rank, size):
    total = float(sum(range(size)))
    for length in (3, 5):  # another shape under the same name
        x = tf.fill([size * length], float(rank))
        assert hvd.allreduce(x, op=hvd.Sum).numpy().tolist() == [total] * (size * length)
        outs = hvd.grouped_allreduce([x, tf.cast(x[:2], tf.float64)], op=hvd.Sum)
        assert outs[1].numpy().tolist() == [total] * 2
        assert hvd.broadcast(x + 1, root_rank=size - 1).numpy().tolist() == [float(size)] * (size * length)
        assert hvd.allgather(x[:length]).numpy().tolist() == [float(r) for r in range(size) for _ in range(length)]
        assert hvd.grouped_allgather([x[:1]])[0].numpy().tolist() == [float(r) for r in range(size)]
        assert hvd.reducescatter(x, op=hvd.Sum).numpy().tolist() == [total] * length
        assert hvd.grouped_reducescatter([x], op=hvd.Sum)[0].numpy().tolist() == [total] * length
        out, received = hvd.alltoall(x)
        assert out.numpy().tolist() == [float(r) for r in range(size) for _ in range(length)]
    assert {op for op, _ in given} == set(OPS)
    assert {n for _, n in given} == {"tf.noname.sync"}


def test_changing_calls_stay_exact(rank, size):
    for i in range(30):
        dtype = (tf.float32, tf.int64, tf.float64)[i % 3]
        shape = [1 + i % 4, 2] if i % 2 else [7]
        out = hvd.allreduce(tf.fill(shape, tf.cast(rank + i, dtype)), op=hvd.Sum)
        assert out.dtype == dtype and out.shape == shape
        assert out.numpy().ravel().tolist() == [sum(range(size)) + size * i] * (len(out.numpy().ravel())), i


@pytest.mark.min_size(2)
def test_disagreement_is_still_an_error(rank, size):
    hvd.allreduce(tf.ones([2]))  # the name is known, with shape [2]
    with pytest.raises(tf.errors.OpError, match="shape"):
        hvd.allreduce(tf.ones([3 + rank]))
    assert hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy().tolist() == [float(size)] * 2


def test_function_and_async_calls_keep_their_names(given, size):
    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Sum)

    assert step(tf.ones([2])).numpy().tolist() == [float(size)] * 2
    assert given[-1] == ("hvd_allreduce", "")  # the node's name: the kernel takes it
    tf.config.experimental.set_synchronous_execution(False)  # overlapping eager calls: counted by the op library
    try:
        outs = [hvd.allreduce(tf.ones([2]), op=hvd.Sum) for _ in range(3)]
        assert [o.numpy().tolist() for o in outs] == [[float(size)] * 2] * 3
    finally:
        tf.config.experimental.set_synchronous_execution(True)
    assert given[-3:] == [("hvd_allreduce", "")] * 3


def test_another_frameworks_call_does_not_move_the_name(given, size):
    # a torch call without a name, in flight in another thread, holds the
    # allreduce slot of the process's shared table; TensorFlow's are its own
    from hvd.common import ops
    held = ops.unnamed_blocking("allreduce", hvd.global_process_set,
                                lambda n: (n, hvd.allreduce(tf.ones([2]), op=hvd.Sum)))
    assert held[0] == "noname.sync"
    assert held[1].numpy().tolist() == [float(size)] * 2
    assert given[-1] == ("hvd_allreduce", "tf.noname.sync")


def test_the_executor_check_agrees_with_tensorflows():
    # mpi_ops asks the thread's executor itself (context.is_async() makes
    # an executor object whose finalizer waits for pending ops)
    from tensorflow.python.eager import context, executor
    ctx = context.context()
    assert mpi_ops._EXECUTOR_CALLS
    assert mpi_ops._thread_executor_is_async(ctx) is ctx.is_async() is False
    tf.config.experimental.set_synchronous_execution(False)
    try:
        assert mpi_ops._thread_executor_is_async(ctx) is ctx.is_async() is True
        assert not mpi_ops._sync_eager()
    finally:
        tf.config.experimental.set_synchronous_execution(True)
    with context.executor_scope(executor.new_executor(enable_async=True)):  # this thread's own
        assert mpi_ops._thread_executor_is_async(ctx) is ctx.is_async() is True
    assert mpi_ops._sync_eager()
