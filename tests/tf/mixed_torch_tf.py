"""One process, two frameworks: hvd.torch and hvd.tensorflow share one
libhvd. Run by every rank of a job (tests/tf/run-mixed.sh) with
TensorFlow's Python; torch's site-packages, from HVD_TORCH_SITE, come
after TensorFlow's own, so that TensorFlow's numpy is the one imported.
Exits non-zero on any wrong result."""

import os
import sys

sys.path.append(os.environ["HVD_TORCH_SITE"])

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

import hvd.tensorflow as htf  # noqa: E402
import hvd.torch as ht  # noqa: E402


def main() -> None:
    ht.init()
    assert htf.is_initialized(), "hvd.torch's init is hvd.tensorflow's"
    htf.init()  # a second init of the same libhvd: nothing to do
    rank, size = ht.rank(), ht.size()
    assert (htf.rank(), htf.size()) == (rank, size)
    total = size * (size + 1) / 2

    a = ht.allreduce(torch.full((3,), float(rank + 1)), op=ht.Sum, name="mixed.torch")
    b = htf.allreduce(tf.fill([3], float(rank + 1)), op=htf.Sum, name="mixed.tf")
    assert a.tolist() == [total] * 3, a
    np.testing.assert_array_equal(b.numpy(), np.full([3], total, np.float32))

    # a torch allreduce in flight while TensorFlow's run (in one
    # tf.function, unnamed: each frontend numbers its own calls)
    handle = ht.allreduce_async(torch.arange(4, dtype=torch.float64) * (rank + 1), op=ht.Sum)
    outs = tf.function(lambda t: [htf.allreduce(t * float(i), op=htf.Average) for i in range(4)])(
        tf.fill([2], float(rank)))
    got = ht.synchronize(handle)
    assert got.tolist() == [float(i * total) for i in range(4)], got
    for i, t in enumerate(outs):
        np.testing.assert_array_equal(t.numpy(), np.full([2], i * (size - 1) / 2, np.float32))

    # the tensors of one framework become the other's
    from_tf = torch.from_numpy(htf.broadcast(tf.fill([2], rank), root_rank=size - 1).numpy())
    assert from_tf.tolist() == [size - 1] * 2
    back = htf.allgather(tf.constant(ht.allreduce(from_tf, op=ht.Sum).numpy()[None, :]))
    np.testing.assert_array_equal(back.numpy(), np.full([size, 2], size * (size - 1), np.int32))
    ht.shutdown()
    assert not htf.is_initialized()
    print(f"mixed torch {torch.__version__} and TensorFlow {tf.__version__}: rank {rank} of {size} ok")


if __name__ == "__main__":
    main()
