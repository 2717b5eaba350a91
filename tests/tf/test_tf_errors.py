"""What a rank sees when a collective is wrong: hvd's message in the
matching TensorFlow error, and the job going on afterwards."""

import re

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd


def still_works(size):
    out = hvd.allreduce(tf.ones([2]), op=hvd.Sum)
    np.testing.assert_array_equal(out.numpy(), np.full([2], size, np.float32))


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_shape_mismatch_names_the_ranks(mode, rank, size):
    x = tf.ones([rank + 1])
    fn = (lambda t: hvd.allreduce(t, name=f"mismatch.{mode}"))
    if mode == "function":
        fn = tf.function(fn)
    with pytest.raises(tf.errors.FailedPreconditionError) as err:
        fn(x)
    msg = err.value.message
    m = re.search(rf"allreduce 'allreduce.mismatch.{mode}': rank (\d+) sent shape \[(\d+)\], "
                  rf"rank (\d+) sent \[(\d+)\]", msg)
    assert m, msg
    a, sa, b, sb = map(int, m.groups())
    assert a != b and sa == a + 1 and sb == b + 1
    still_works(size)


def test_dtype_mismatch(rank, size):
    x = tf.ones([2], tf.float32 if rank == 0 else tf.float64)
    with pytest.raises(tf.errors.FailedPreconditionError, match=r"rank \d+ sent dtype float(32|64), "
                                                                r"rank \d+ sent float(32|64)"):
        hvd.allgather(tf.reshape(x, [1, 2]), name="dtype.mismatch")
    still_works(size)


def test_allgather_of_a_scalar_is_invalid(size):
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs at least one dimension"):
        hvd.allgather(tf.constant(1.0))
    still_works(size)


def test_alltoall_splits_of_the_wrong_length(size):
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"splits has {size + 1} entries, the process "
                                                             rf"set has {size} ranks"):
        hvd.alltoall(tf.ones([size + 1]), splits=[1] * (size + 1))
    still_works(size)


def test_alltoall_splits_beyond_the_rows(size):
    with pytest.raises(tf.errors.InvalidArgumentError):
        hvd.alltoall(tf.ones([2]), splits=[5] * size)
    still_works(size)


def test_unsupported_dtype_and_op(size):
    with pytest.raises(tf.errors.InvalidArgumentError, match="complex64 is not in the list of allowed values"):
        hvd.allreduce(tf.complex(tf.ones([2]), tf.ones([2])))
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce(tf.ones([2]), op=hvd.Adasum)
    with pytest.raises(ValueError, match="root_rank 7 is out of range"):
        hvd.broadcast(tf.ones([2]), 7)
    with pytest.raises(NotImplementedError, match="op=Average and op=Sum"):
        hvd.allreduce(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0])), op=hvd.Max)
    still_works(size)


def test_bad_attributes_of_the_raw_ops(size):
    # the op library checks what the Python wrappers would never pass
    from hvd.tensorflow import mpi_ops
    with pytest.raises(tf.errors.InvalidArgumentError, match="reduce_op: not a reduce op of hvd"):
        mpi_ops._lib.hvd_allreduce(tf.ones([2]), reduce_op=99)
    with pytest.raises(tf.errors.InvalidArgumentError, match="process_set: not an id of a process set"):
        mpi_ops._lib.hvd_allgather(tf.ones([1, 2]), process_set=-3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="process_set: not an id of a process set"):
        mpi_ops._lib.hvd_broadcast(tf.ones([2]), process_set=500)
    still_works(size)


def test_unknown_process_set_id(size):
    # an id in range that no set has: hvd refuses the request
    from hvd.tensorflow import mpi_ops
    with pytest.raises(tf.errors.InvalidArgumentError, match="process set 40 does not exist"):
        mpi_ops._lib.hvd_allreduce(tf.ones([2]), process_set=40)
    still_works(size)
