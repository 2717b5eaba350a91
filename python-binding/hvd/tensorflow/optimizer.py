"""DistributedOptimizer for TensorFlow 1 optimizers (tf.compat.v1.train.
Optimizer, graph mode with sessions), as in ``horovod.tensorflow``:
compute_gradients returns the gradients allreduced across the ranks;
apply_gradients is the wrapped optimizer's. A Keras optimizer is handed to
hvd.tensorflow.keras.DistributedOptimizer.

With backward_passes_per_step = N > 1, the gradients are summed into local
accumulators (variables of the LOCAL_VARIABLES collection), allreduced
every N-th run, and only that run applies them; every rank counts its runs
alike, so every rank takes the same branch.
"""

from typing import Any, List, Optional

import tensorflow as tf

from hvd.common import ops as _common_ops
from hvd.common.basics import Adasum, Average
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.tensorflow.compression import Compression
from hvd.tensorflow.gradient_tape import _allreduce_grads_fn, _index_groups

_LegacyOptimizer = tf.compat.v1.train.Optimizer


def _local_variable(initial, name: str):
    return tf.compat.v1.Variable(initial, trainable=False, name=name,
                                 collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


class _Aggregation:
    """The accumulators of backward_passes_per_step: sums the gradients of N
    runs, allreduces them on the N-th, tells apply_gradients whether this
    run applies."""

    def __init__(self, n: int, average: bool, allreduce_grads, name: str):
        self.n, self.average, self.allreduce_grads, self.name = n, average, allreduce_grads, name
        self.counter = None
        self.accumulators: List[Any] = []
        self.is_comm_step = None

    def reduce(self, grads: List[Any], variables: List[Any]) -> List[Any]:
        with tf.compat.v1.variable_scope(self.name + "_aggregation"):
            self.counter = _local_variable(tf.zeros([], tf.int32), "counter")
            self.accumulators = [None if g is None else _local_variable(tf.zeros(v.shape, g.dtype), f"acc_{i}")
                                 for i, (g, v) in enumerate(zip(grads, variables))]
        adds = [a.assign_add(tf.convert_to_tensor(g)) for a, g in zip(self.accumulators, grads) if a is not None]
        with tf.control_dependencies(adds):
            count = self.counter.assign_add(1)
        self.is_comm_step = tf.equal(count % self.n, 0)
        held = [a for a in self.accumulators if a is not None]

        def summed():
            sums = [a.read_value() for a in held]
            if self.average:
                sums = [s / tf.cast(self.n, s.dtype) for s in sums]
            return self.allreduce_grads(sums)

        with tf.control_dependencies([count]):
            out = tf.cond(self.is_comm_step, summed, lambda: [a.read_value() for a in held])
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        it = iter(out)
        return [None if a is None else next(it) for a in self.accumulators]

    def apply(self, apply_fn):
        def apply_and_clear():
            with tf.control_dependencies([apply_fn()]):
                return tf.group(*[a.assign(tf.zeros_like(a)) for a in self.accumulators if a is not None])

        return tf.cond(self.is_comm_step, apply_and_clear, tf.no_op)


def _scale_local(grad, process_set: ProcessSet):
    """A local variable's gradient divided by the set's size, as Horovod
    does (the other gradients are averages)."""
    if grad is None:
        return None
    n = _common_ops.set_size(process_set)
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices, grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)


class _DistributedOptimizer(_LegacyOptimizer):
    """Wraps a tf.compat.v1.train.Optimizer: its compute_gradients allreduces
    the gradients; apply_gradients is the wrapped optimizer's."""

    def __init__(self, optimizer, name, use_locking, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, backward_passes_per_step, average_aggregated_gradients, groups,
                 process_set, scale_local_gradients):
        if name is None:
            name = f"Distributed{type(optimizer).__name__}"
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._hvd_args = (device_dense, device_sparse, compression, bool(sparse_as_dense), op,
                          1.0 / gradient_predivide_factor, gradient_predivide_factor)
        self._hvd_groups = groups
        self.process_set = process_set
        self._local_vars = {}
        self.scale_local_gradients = scale_local_gradients
        self._agg = None
        if backward_passes_per_step > 1:
            self._agg = _Aggregation(backward_passes_per_step, average_aggregated_gradients, None, name)

    def register_local_var(self, var) -> None:
        """Gradients of var are not reduced (they stay this rank's)."""
        self._local_vars[id(var)] = var

    def _allreduce(self, grads: List[Any], variables: List[Any]) -> List[Any]:
        shared = [i for i, v in enumerate(variables) if id(v) not in self._local_vars]
        index_groups = _index_groups(len(shared), [variables[i] for i in shared], self._hvd_groups)
        fn = _allreduce_grads_fn(*self._hvd_args, index_groups, self.process_set)
        out = list(grads)
        with tf.name_scope(self._name + "_Allreduce"):
            for i, r in zip(shared, fn([grads[i] for i in shared])):
                out[i] = r
        if self.scale_local_gradients and len(shared) < len(out):
            out = [_scale_local(g, self.process_set) if i not in shared else g for i, g in enumerate(out)]
        return out

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, the gradients
        allreduced (op) across the ranks of the process set."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = [list(x) for x in zip(*pairs)]
        if self._agg is None:
            reduced = self._allreduce(grads, variables)
        else:
            if any(isinstance(g, tf.IndexedSlices) for g in grads):
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            self._agg.allreduce_grads = lambda gs: self._allreduce_present(gs, grads, variables)
            reduced = self._agg.reduce(grads, variables)
        return list(zip(reduced, variables))

    def _allreduce_present(self, sums: List[Any], grads: List[Any], variables: List[Any]) -> List[Any]:
        present = [v for g, v in zip(grads, variables) if g is not None]
        return self._allreduce(sums, present)

    def apply_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (every backward_passes_per_step-th run)."""
        if self._agg is None or self._agg.is_comm_step is None:
            return self._optimizer.apply_gradients(*args, **kwargs)
        return self._agg.apply(lambda: self._optimizer.apply_gradients(*args, **kwargs))

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def _is_keras_optimizer(optimizer) -> bool:
    """A Keras 3 optimizer, or tf.keras's (Keras 2 with TF_USE_LEGACY_KERAS=1:
    its new optimizers and the legacy OptimizerV2)."""
    classes = []
    try:
        import keras
        classes.append(keras.optimizers.Optimizer)
    except ImportError:
        pass
    tf_keras_optimizers = getattr(tf.keras, "optimizers", None)
    for path in ("Optimizer", "legacy.Optimizer"):
        cls = tf_keras_optimizers
        for part in path.split("."):
            cls = getattr(cls, part, None)
        if isinstance(cls, type):
            classes.append(cls)
    return any(isinstance(optimizer, c) for c in classes)


def DistributedOptimizer(optimizer, name: Optional[str] = None, use_locking: bool = False, device_dense: str = "",
                         device_sparse: str = "", compression=Compression.none, sparse_as_dense: bool = False,
                         backward_passes_per_step: int = 1, op: int = Average, gradient_predivide_factor: float = 1.0,
                         average_aggregated_gradients: bool = False, num_groups: int = 0, groups=None,
                         process_set: ProcessSet = global_process_set, scale_local_gradients: bool = True):
    """Wraps an optimizer so that gradients are averaged (op) across the
    ranks before they are applied: a tf.compat.v1.train.Optimizer (TF1
    graphs run by a session), or a Keras optimizer (handed to
    hvd.tensorflow.keras.DistributedOptimizer)."""
    if op == Adasum:
        raise NotImplementedError("hvd.tensorflow.DistributedOptimizer: op=Adasum is not supported")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor is supported with op=Average only")
    if groups is not None and num_groups:
        raise ValueError("pass either num_groups or groups, not both")
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, not {backward_passes_per_step}")
    groups = groups if groups is not None else num_groups
    if isinstance(optimizer, _LegacyOptimizer):
        if backward_passes_per_step > 1 and tf.executing_eagerly():
            raise ValueError("backward_passes_per_step > 1 needs a TF1 graph (tf.Graph().as_default()) "
                             "with a tf.compat.v1.train.Optimizer")
        return _DistributedOptimizer(optimizer, name, use_locking, device_dense, device_sparse, compression,
                                     sparse_as_dense, op, gradient_predivide_factor, backward_passes_per_step,
                                     average_aggregated_gradients, groups, process_set, scale_local_gradients)
    if _is_keras_optimizer(optimizer):
        try:
            import hvd.tensorflow.keras as hvd_keras
        except ImportError as e:
            raise ValueError(f"hvd.tensorflow.DistributedOptimizer: {type(optimizer).__name__} is a Keras "
                             f"optimizer, which hvd.tensorflow.keras wraps, and that cannot be imported "
                             f"({e})") from e
        # only what the caller set, so that hvd.tensorflow.keras need not
        # take every argument of this function
        given = dict(name=name, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
                     sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor, op=op,
                     backward_passes_per_step=backward_passes_per_step,
                     average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
                     groups=groups if isinstance(groups, list) else None, process_set=process_set,
                     scale_local_gradients=scale_local_gradients)
        defaults = dict(name=None, device_dense="", device_sparse="", compression=Compression.none,
                        sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                        average_aggregated_gradients=False, num_groups=0, groups=None,
                        process_set=global_process_set, scale_local_gradients=True)
        kwargs = {k: v for k, v in given.items() if v is not defaults[k] and v != defaults[k]}
        return hvd_keras.DistributedOptimizer(optimizer, **kwargs)
    raise ValueError(f"hvd.tensorflow.DistributedOptimizer: {type(optimizer).__name__} is neither a "
                     f"tf.compat.v1.train.Optimizer nor a Keras optimizer")
