"""Exceptions raised by hvd, named as in ``horovod.common.exceptions``."""

from hvd._core import HorovodInternalError

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt"]


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by elastic training (State.check_host_updates, State.commit)
    on every rank of a generation alike when workers wait to join the job:
    hvd.elastic.run re-initialises into the next generation. skip_sync is
    kept for Horovod's scripts; whether the state is synced is the root
    daemon's decision (hvd.elastic.sync_needed()).
    """

    def __init__(self, skip_sync: bool = False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync
