"""Framework-independent parts of hvd: life cycle, topology, reduce ops,
process sets, exceptions and the handle registry the frontends share."""
