"""DistributedGradientTape: a tf.GradientTape whose gradient() returns the
gradients allreduced across the ranks, as in ``horovod.tensorflow``.

Executing eagerly, the allreduces run in one tf.function (kept per set of
arguments), so that they are in flight together and hvd fuses them.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from hvd.common import ops as _common_ops
from hvd.common.basics import Average
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.tensorflow.compression import Compression
from hvd.tensorflow.functions import allreduce, grouped_allreduce

_fns: Dict[Tuple[Any, ...], Any] = {}


def _index_groups(n: int, sources: Optional[Sequence[Any]], groups: Any) -> Optional[Tuple[Tuple[int, ...], ...]]:
    """Indices of the gradients allreduced together: num_groups nearly equal
    parts, or the variables of each listed group (the rest one by one)."""
    if groups is None or groups == 0:
        return None
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError(f"num_groups must be >= 0, not {groups}")
        k = min(groups, n)
        bounds = [n * i // k for i in range(k + 1)]
        return tuple(tuple(range(bounds[i], bounds[i + 1])) for i in range(k))
    if sources is None:
        raise ValueError("groups of variables need the sources passed to gradient()")
    where = {id(v): i for i, v in enumerate(tf.nest.flatten(sources))}
    out, seen = [], set()
    for group in groups:
        idx = []
        for v in group:
            if id(v) not in where:
                raise ValueError(f"groups: {getattr(v, 'name', v)!r} is not among the gradient's sources")
            idx.append(where[id(v)])
        seen.update(idx)
        out.append(tuple(idx))
    out.extend((i,) for i in range(n) if i not in seen)
    return tuple(out)


def _allreduce_grads_fn(device_dense: str, device_sparse: str, compression, sparse_as_dense: bool, op: int,
                        prescale: float, postscale: float, index_groups, process_set: ProcessSet):
    def allreduce_grads(grads: List[Any]) -> List[Any]:
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        kw = dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression, op=op,
                  prescale_factor=prescale, postscale_factor=postscale, process_set=process_set)
        if index_groups is None:
            return [allreduce(g, **kw) if g is not None else None for g in grads]
        out: List[Any] = [None] * len(grads)
        for group in index_groups:
            members = [i for i in group if grads[i] is not None]
            if members:
                for i, r in zip(members, grouped_allreduce([grads[i] for i in members], **kw)):
                    out[i] = r
        return out

    return allreduce_grads


def _divided(grad, n: int):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices, grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)


class _DistributedGradientTape(tf.GradientTape):
    def __init__(self, tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, groups, persistent=False, watch_accessed_variables=True,
                 process_set=global_process_set, scale_local_gradients=True):
        super(self.__class__, self).__init__(persistent, watch_accessed_variables)
        self._tape = tape
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor is supported with op=Average only")
        # Average of g / f, times f: the sum is divided by f before it is formed
        prescale = 1.0 / gradient_predivide_factor
        postscale = gradient_predivide_factor
        self._hvd_args = (device_dense, device_sparse, compression, bool(sparse_as_dense), op, prescale,
                          postscale, process_set)
        self._hvd_groups = groups
        self._local_sources = {}
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients

    def register_local_source(self, source):
        """The gradient of source is not reduced: it stays this rank's
        (divided by the set's size when scale_local_gradients)."""
        self._local_sources[id(source)] = source  # Keras 3 variables have no ref()

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = super(self.__class__, self).gradient(target, sources, output_gradients, **kwargs)
        if self._local_sources:
            return self._partial_gradient(grads, sources)
        flat = tf.nest.flatten(grads)
        return tf.nest.pack_sequence_as(grads, self._reduced(flat, sources))

    def _partial_gradient(self, grads, sources):
        """Reduces the gradients of the sources that are not local."""
        flat, srcs = tf.nest.flatten(grads), tf.nest.flatten(sources)
        shared = [i for i, s in enumerate(srcs) if id(s) not in self._local_sources]
        out = list(flat)
        for i, r in zip(shared, self._reduced([flat[i] for i in shared], [srcs[i] for i in shared])):
            out[i] = r
        if self.scale_local_gradients:
            n = _common_ops.set_size(self.process_set)
            out = [g if i in shared or g is None else _divided(g, n) for i, g in enumerate(out)]
        return tf.nest.pack_sequence_as(grads, out)

    def _reduced(self, flat, sources):
        if not flat:
            return []
        index_groups = _index_groups(len(flat), sources, self._hvd_groups)
        fn = _allreduce_grads_fn(*self._hvd_args[:7], index_groups, self._hvd_args[7])
        if tf.executing_eagerly():
            key = (self._hvd_args[:7], id(self._hvd_args[7]), index_groups)
            if key not in _fns:
                _fns[key] = tf.function(fn)
            fn = _fns[key]
        return fn(flat)


def DistributedGradientTape(gradtape, device_dense: str = "", device_sparse: str = "", compression=Compression.none,
                            sparse_as_dense: bool = False, op: int = Average, gradient_predivide_factor: float = 1.0,
                            num_groups: int = 0, groups=None, process_set: ProcessSet = global_process_set,
                            scale_local_gradients: bool = True):
    """Wraps a tf.GradientTape: its gradient() averages (op) the gradients
    across the ranks. num_groups > 0 allreduces them in that many groups;
    groups, a list of lists of variables, in those groups."""
    if groups is not None and num_groups:
        raise ValueError("pass either num_groups or groups, not both")
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,), dict(_DistributedGradientTape.__dict__))
    return cls(gradtape._tape, device_dense, device_sparse, compression, sparse_as_dense, op,
               gradient_predivide_factor, groups if groups is not None else num_groups, gradtape._persistent,
               gradtape._watch_accessed_variables, process_set=process_set,
               scale_local_gradients=scale_local_gradients)


def PartialDistributedGradientTape(gradtape, device_dense: str = "", device_sparse: str = "",
                                   compression=Compression.none, sparse_as_dense: bool = False, op: int = Average,
                                   gradient_predivide_factor: float = 1.0, num_groups: int = 0, groups=None,
                                   process_set: ProcessSet = global_process_set, local_layers=None,
                                   scale_local_gradients: bool = True):
    """DistributedGradientTape whose gradients of the local layers' (Keras
    layers) trainable variables are not reduced: each rank keeps its own,
    divided by the set's size when scale_local_gradients (as Horovod)."""
    import keras
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("local_layers: every local layer must be a keras.layers.Layer")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
