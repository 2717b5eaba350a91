"""Local gradient aggregation for DistributedOptimizer's
backward_passes_per_step = N > 1, as Horovod does it: every call adds the
gradients into local sums; every N-th call allreduces the sums (divided by
N first with average_aggregated_gradients), applies them and zeroes the
sums. The other calls leave the weights unchanged and only count the
optimizer's iterations. The sums and the call counter are variables of
this object, not of the optimizer: they are neither saved with it nor
among optimizer.variables."""

from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf


class LocalAggregation:
    def __init__(self, passes: int, average: bool):
        if int(passes) != passes or passes < 1:
            raise ValueError(f"backward_passes_per_step must be an integer >= 1, not {passes!r}")
        self.passes = int(passes)
        self.average = bool(average)
        self._counter: Optional[tf.Variable] = None
        self._sums: Dict[Tuple[int, ...], List[tf.Variable]] = {}

    def _state(self, variables: List[Any]) -> Tuple[tf.Variable, List[tf.Variable]]:
        """The counter and this list of variables' sums, made at the first
        call (lifted out of a tf.function being traced)."""
        key = tuple(id(v) for v in variables)
        if self._counter is None or key not in self._sums:
            with tf.init_scope():
                if self._counter is None:
                    self._counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvd_passes")
                self._sums[key] = [tf.Variable(tf.zeros(v.shape, dtype=tf.as_dtype(v.dtype)), trainable=False,
                                               name="hvd_grad_sum") for v in variables]
        return self._counter, self._sums[key]

    def step(self, grads: List[Any], variables: List[Any], reduce: Callable[[List[Any]], List[Any]],
             apply: Callable[[List[Any]], Any], skip: Callable[[], Any]) -> Any:
        """Adds grads to the sums; on every passes-th call, apply(reduce(sums))
        and zero them, else skip(). Returns whether it applied (a tensor)."""
        counter, sums = self._state(variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            sums[i].assign_add(tf.cast(tf.convert_to_tensor(grads[i]), sums[i].dtype))
        count = counter.assign_add(1)

        def aggregated():
            total: List[Any] = [None] * len(grads)
            for i in present:
                total[i] = sums[i].read_value()
                if self.average:
                    total[i] = total[i] / tf.cast(self.passes, total[i].dtype)
            apply(reduce(total))
            for i in present:
                sums[i].assign(tf.zeros_like(sums[i]))
            return tf.constant(True)

        def local():
            skip()
            return tf.constant(False)

        return tf.cond(tf.equal(count % self.passes, 0), aggregated, local)
