"""The scalar ops of the topology in a process set: size_op, rank_op and
process_set_included_op with process_set= (hvd) or process_set_id
(Horovod's), eagerly, in tf.function and in a TF1 session."""

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd


def subset(size):
    """A proper subset of the ranks: the last (2 ranks), else the first and
    the last."""
    return [size - 1] if size == 2 else [0, size - 1]


@pytest.mark.min_size(2)
def test_scalar_ops_in_a_process_set(run, rank, size):
    ranks = subset(size)
    ps = hvd.add_process_set(ranks)
    try:
        member = rank in ranks
        included = run(lambda: hvd.process_set_included_op(ps))
        assert included.dtype == tf.int32 and int(included) == int(member)
        assert int(run(lambda: hvd.process_set_included_op(process_set=ps))) == int(member)
        # every rank may ask the size; Horovod's process_set_id is an id
        assert int(run(lambda: hvd.size_op(process_set=ps))) == len(ranks)
        assert int(run(lambda: hvd.size_op(ps.process_set_id))) == len(ranks)
        if member:
            assert int(run(lambda: hvd.rank_op(process_set=ps))) == ranks.index(rank)
        else:
            with pytest.raises(tf.errors.FailedPreconditionError, match="not a member"):
                run(lambda: hvd.rank_op(process_set=ps))
        with pytest.raises(NotImplementedError, match="global process set"):
            hvd.local_size_op(process_set=ps)
    finally:
        hvd.remove_process_set(ps)


def test_scalar_ops_of_the_global_set(run, rank, size):
    out = run(lambda: (hvd.size_op(hvd.global_process_set), hvd.rank_op(process_set=hvd.global_process_set),
                       hvd.process_set_included_op(), hvd.local_size_op(process_set=hvd.global_process_set)))
    assert [int(v) for v in out] == [size, rank, 1, hvd.local_size()]


def test_unknown_process_set_id(run):
    with pytest.raises(tf.errors.InvalidArgumentError, match="no process set"):
        run(lambda: hvd.size_op(process_set_id=63))


@pytest.mark.min_size(2)
def test_scalar_ops_in_a_session(rank, size):
    ranks = subset(size)
    ps = hvd.add_process_set(ranks)
    try:
        with tf.Graph().as_default():
            ops = [hvd.size_op(process_set=ps), hvd.process_set_included_op(ps)]
            with tf.compat.v1.Session() as sess:
                got = sess.run(ops)
        np.testing.assert_array_equal(got, [len(ranks), int(rank in ranks)])
    finally:
        hvd.remove_process_set(ps)
