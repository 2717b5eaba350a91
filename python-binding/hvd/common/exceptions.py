"""Exceptions raised by hvd, named as in ``horovod.common.exceptions``."""

from hvd._core import HorovodInternalError

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt"]


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by elastic training when the set of hosts changed.

    hvd has no elastic mode yet; the class exists so that code catching it
    keeps working.
    """

    def __init__(self, skip_sync: bool = False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync
