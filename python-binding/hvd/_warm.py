"""A standby interpreter of an elastic job's warm start (tools/hvdrun_warm.c).

``hvdrun`` starts ``python -m hvd._warm SCRIPT ARGS...`` before it needs the
worker, with standard input a Unix socket to hvdrun. The standby imports
the framework the script uses (torch and hvd.torch; tensorflow), writes one
byte ``R`` (ready) and waits. When hvdrun makes it a worker it sends the
rank's environment, ``NAME=VALUE`` entries each ended by a NUL byte, and
closes its end; the standby then takes that environment (``os.environ``,
so libhvd's ``getenv`` sees it), reads ``/dev/null`` as standard input and
runs SCRIPT as ``__main__`` with ``sys.argv`` and ``sys.path[0]`` as
``python SCRIPT ARGS...`` would have them. It is the worker process itself:
its exit status is the script's.

An end of input before any byte (hvdrun stopped it) ends it with status 0;
an import that fails ends it with the error's traceback and status 1, and
hvdrun starts its workers cold.
"""

import os
import runpy
import sys


def _preload(script):
    """Imports what the script's start would: the framework it names."""
    try:
        with open(script, "rb") as f:
            text = f.read()
    except OSError:
        return  # the worker's run reports it, as a cold start would
    if b"torch" in text:
        import torch  # noqa: F401
        if b"hvd.torch" in text:
            import hvd.torch  # noqa: F401
    if b"tensorflow" in text or b"keras" in text:
        import tensorflow  # noqa: F401


def _wait():
    """Signals ready, then reads the environment until hvdrun closes."""
    os.write(0, b"R")
    chunks = []
    while True:
        b = os.read(0, 1 << 16)
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: python -m hvd._warm SCRIPT [ARGS...] (started by hvdrun)\n")
        return 2
    script = sys.argv[1]
    # imports look where the script's would: its directory first, not ours
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    _preload(script)
    data = _wait()
    if not data:
        return 0
    env = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
