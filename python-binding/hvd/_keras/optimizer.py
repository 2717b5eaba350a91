"""DistributedOptimizer for Keras, as in ``horovod.tensorflow.keras``: a
subclass of the optimizer's own class, made on the fly (so isinstance,
get_config and model.compile see the same optimizer), whose update
allreduces the gradients across the ranks before applying them.

Keras 3 optimizers apply gradients in ``apply`` (``apply_gradients`` and
model.fit's train step call it): the subclass overrides ``apply``. Keras 2
optimizers (tf_keras, new and legacy) get ``apply_gradients`` overridden,
which their ``minimize`` and model.fit call. Inside model.fit's
tf.function the allreduces are ops of one graph, in flight together, so
hvd fuses them; eagerly they run in a tf.function for the same reason.
"""

from typing import Any, Dict, List, Optional

import tensorflow as tf

from hvd._keras import compat
from hvd._keras.aggregation import LocalAggregation
from hvd.common.basics import Adasum, Average
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.tensorflow.compression import Compression
from hvd.tensorflow.gradient_tape import _allreduce_grads_fn, _index_groups

_classes: Dict[type, type] = {}


def _in_xla_function() -> bool:
    """Whether the graph being built is compiled with XLA (jit_compile=True)."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # TensorFlow moved it: XLA says it instead
        return False
    return not tf.executing_eagerly() and control_flow_util.GraphOrParentsInXlaContext(
        tf.compat.v1.get_default_graph())


class _Reducer:
    """The allreduce of a list of gradients (None where a variable has
    none), with DistributedOptimizer's arguments; kept off the optimizer's
    variable tracking (a plain object)."""

    def __init__(self, name: str, device_dense: str, device_sparse: str, compression, sparse_as_dense: bool, op: int,
                 gradient_predivide_factor: float, groups: Any, process_set: ProcessSet,
                 aggregation: Optional[LocalAggregation]):
        if op == Adasum:
            raise NotImplementedError("DistributedOptimizer: op=Adasum is not supported by hvd.tensorflow")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor is supported with op=Average only")
        self.name = name
        # Average of g / f, times f: the sum is divided by f before it is formed
        self.args = (device_dense, device_sparse, compression, bool(sparse_as_dense), op,
                     1.0 / gradient_predivide_factor, gradient_predivide_factor)
        self.groups = groups
        self.process_set = process_set
        self.aggregation = aggregation
        self._fns: Dict[Any, Any] = {}

    def reduce(self, grads: List[Any], variables: List[Any]) -> List[Any]:
        if _in_xla_function():
            raise ValueError("DistributedOptimizer: hvd's collectives have no XLA kernels, and this update is being "
                             "compiled with XLA (Keras 3 compiles model.fit's step with XLA where a GPU is "
                             "visible): compile the model with jit_compile=False")
        index_groups = _index_groups(len(grads), variables, self.groups)
        fn = _allreduce_grads_fn(*self.args, index_groups, self.process_set)
        if tf.executing_eagerly():
            if index_groups not in self._fns:
                self._fns[index_groups] = tf.function(fn)
            fn = self._fns[index_groups]
        with tf.name_scope(self.name):
            return fn(list(grads))

    def step(self, opt: Any, grads: List[Any], variables: List[Any], apply) -> Any:
        """Allreduces and applies the gradients (every backward_passes_per_step-th call)."""
        if self.aggregation is None:
            return apply(self.reduce(grads, variables))
        compat.build_optimizer(opt, variables)  # its variables must exist outside the branch that applies
        return self.aggregation.step(grads, variables, lambda g: self.reduce(g, variables), apply,
                                     lambda: opt.iterations.assign_add(1))


def _apply_keras3(opt, apply, grads, trainable_variables=None):
    grads = list(grads)
    if trainable_variables is None:
        if not opt.built or not grads:
            return apply(grads, trainable_variables)  # Keras says what is wrong
        variables = list(opt._trainable_variables)
    else:
        variables = list(trainable_variables)
    if not grads:
        return apply(grads, variables)
    opt._hvd.step(opt, grads, variables, lambda reduced: apply(reduced, variables))
    return None


def _apply_gradients_keras2(opt, apply_gradients, grads_and_vars, *args, **kwargs):
    pairs = list(grads_and_vars)
    if not pairs:
        return apply_gradients(pairs, *args, **kwargs)
    grads = [g for g, _ in pairs]
    variables = [v for _, v in pairs]
    opt._hvd.step(opt, grads, variables, lambda reduced: apply_gradients(list(zip(reduced, variables)), *args,
                                                                         **kwargs))
    return opt.iterations


def distributed_class(base: type) -> type:
    """The subclass of an optimizer class that allreduces (one per class).
    It keeps the base's name and module, so that a saved model names the
    base class and loads without hvd."""
    if getattr(base, "_hvd_distributed", False):
        raise ValueError(f"the optimizer is already a DistributedOptimizer ({base.__name__})")
    if base in _classes:
        return _classes[base]

    def apply(self, grads, trainable_variables=None):
        return _apply_keras3(self, super(cls, self).apply, grads, trainable_variables)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        return _apply_gradients_keras2(self, super(cls, self).apply_gradients, grads_and_vars, *args, **kwargs)

    body: Dict[str, Any] = {"__module__": base.__module__, "__qualname__": base.__qualname__,
                            "__doc__": base.__doc__, "_hvd_distributed": True}
    if compat.is_keras3(base):
        body["apply"] = apply
    else:
        body["apply_gradients"] = apply_gradients
    cls = type(base.__name__, (base,), body)
    _classes[base] = cls
    return cls


def make_distributed(opt: Any, **kwargs) -> Any:
    """Turns opt itself into a DistributedOptimizer, keeping its state (the
    variables of a loaded model's optimizer)."""
    reducer = _reducer(type(opt).__name__, **kwargs)
    object.__setattr__(opt, "__class__", distributed_class(type(opt)))
    object.__setattr__(opt, "_hvd", reducer)
    return opt


def _reducer(base_name: str, name: Optional[str] = None, device_dense: str = "", device_sparse: str = "",
             compression=Compression.none, sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
             op: int = Average, backward_passes_per_step: int = 1, average_aggregated_gradients: bool = False,
             num_groups: int = 0, groups=None, process_set: ProcessSet = global_process_set) -> _Reducer:
    if groups is not None and num_groups:
        raise ValueError("pass either num_groups or groups, not both")
    aggregation = None
    if backward_passes_per_step != 1:
        aggregation = LocalAggregation(backward_passes_per_step, average_aggregated_gradients)
    return _Reducer(name or f"Distributed{base_name}", device_dense, device_sparse, compression, sparse_as_dense,
                    op, gradient_predivide_factor, groups if groups is not None else num_groups, process_set,
                    aggregation)


def DistributedOptimizer(optimizer, name: Optional[str] = None, device_dense: str = "", device_sparse: str = "",
                         compression=Compression.none, sparse_as_dense: bool = False,
                         gradient_predivide_factor: float = 1.0, op: int = Average,
                         backward_passes_per_step: int = 1, average_aggregated_gradients: bool = False,
                         num_groups: int = 0, groups=None, process_set: ProcessSet = global_process_set):
    """An optimizer of the same class and configuration (a new one, made
    from optimizer.get_config(), as Horovod does) whose updates average (op)
    the gradients across the ranks first.

    backward_passes_per_step=N: gradients are summed locally and allreduced
    and applied every N-th call (divided by N when
    average_aggregated_gradients); the other calls leave the weights as
    they are. num_groups > 0 allreduces them in that many groups; groups, a
    list of lists of variables, in those groups. gradient_predivide_factor
    f divides the gradients by f before the sum and multiplies by f/size
    after (op=Average only)."""
    reducer = _reducer(type(optimizer).__name__, name, device_dense, device_sparse, compression, sparse_as_dense,
                       gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
                       num_groups, groups, process_set)
    cls = distributed_class(type(optimizer))
    new = cls.from_config(optimizer.get_config())
    object.__setattr__(new, "_hvd", reducer)
    return new
