"""TF1 training helpers of ``horovod.tensorflow``: broadcast_global_variables
(one op assigning root_rank's values to every global variable of the
graph) and BroadcastGlobalVariablesHook, a SessionRunHook that runs it once
the session is created (MonitoredTrainingSession, tf.compat.v1.train's
hooks). Graph mode only: eager code calls broadcast_variables."""

import tensorflow as tf

from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.tensorflow.functions import broadcast_variables


def broadcast_global_variables(root_rank: int, process_set: ProcessSet = global_process_set):
    """An op assigning root_rank's values to all global variables of the
    default graph (TF1 graphs; eager execution raises RuntimeError)."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution: "
                           "use hvd.broadcast_variables(<model/optimizer variables>, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, process_set=process_set)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts all global variables from root_rank after the session is
    created (and its variables initialised or restored), so that every
    rank starts from the same weights."""

    def __init__(self, root_rank: int, device: str = "", process_set: ProcessSet = global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        self.bcast_op = None

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank, process_set=self.process_set)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
