"""pytest setup for the hvd Python binding.

Every rank of the job runs this same session (tests/python/run-pytest.sh);
the tests are collective, so they run in the same order everywhere and any
skip decision depends only on what all ranks share (such as the world
size). hvd is initialized once for the whole session.

A test whose rank waits for a collective the others never start would hang
the job: a per-test alarm turns that into a failure instead (the waits in
hvd._core check signals several times a second).
"""

import os
import signal

import pytest

torch = pytest.importorskip("torch")
import hvd.torch as hvd  # noqa: E402

TEST_TIMEOUT_S = int(os.environ.get("HVD_PYTEST_TEST_TIMEOUT", "60"))

# Every dtype torch supports on the CPU that hvd can carry.
ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64, torch.bool]
INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES


def pytest_configure(config):
    torch.set_num_threads(1)
    hvd.init()
    config.addinivalue_line("markers", "min_size(n): needs a job of at least n processes")


def pytest_unconfigure(config):
    if hvd.is_initialized():
        hvd.shutdown()


def pytest_report_header(config):
    return f"hvd {hvd.__name__}: rank {hvd.rank()} of {hvd.size()}"


def pytest_runtest_setup(item):
    for mark in item.iter_markers(name="min_size"):
        if hvd.size() < mark.args[0]:
            pytest.skip(f"needs at least {mark.args[0]} processes")


class CollectiveTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CollectiveTimeout(f"test still running after {TEST_TIMEOUT_S}s: another rank is probably "
                            f"not taking part in a collective")


@pytest.fixture(autouse=True)
def _collective_timeout():
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TEST_TIMEOUT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()


@pytest.fixture
def submitted(monkeypatch):
    """The tensor names the frontends submit to libhvd, in order (through
    hvd._core.submit, and hvd.torch's prepared blocking collectives, run
    into the caller's output or into a kept result)."""
    from hvd import _core
    from hvd.torch import mpi_ops
    names = []
    real = _core.submit
    real_prepared = mpi_ops._run_prepared
    real_kept = mpi_ops._run_kept

    def spy(kind, requests, *args):
        names.extend(r[0] for r in requests)
        return real(kind, requests, *args)

    def spy_prepared(prepared, *args):
        names.append(prepared.name)
        return real_prepared(prepared, *args)

    def spy_kept(prepared, tensor):
        out = real_kept(prepared, tensor)
        if out is not None:  # None: nothing was run
            names.append(prepared.name)
        return out

    monkeypatch.setattr(_core, "submit", spy)
    monkeypatch.setattr(mpi_ops, "_run_prepared", spy_prepared)
    monkeypatch.setattr(mpi_ops, "_run_kept", spy_kept)
    return names
