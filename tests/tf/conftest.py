"""pytest setup for hvd.tensorflow.

Every rank of the job runs this same session (tests/tf/run-pytest.sh);
the tests are collective, so they run in the same order everywhere and any
skip decision depends only on what all ranks share. hvd is initialized once
for the session. A per-test alarm turns a rank left waiting for a
collective the others never start into a failure instead of a hang.
"""

import os
import signal

import pytest

tf = pytest.importorskip("tensorflow")
import hvd.tensorflow as hvd  # noqa: E402

TEST_TIMEOUT_S = int(os.environ.get("HVD_PYTEST_TEST_TIMEOUT", "120"))

# Every dtype TensorFlow has that hvd carries.
INT_DTYPES = [tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64]
FLOAT_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES + [tf.bool]


def pytest_configure(config):
    hvd.init()
    config.addinivalue_line("markers", "min_size(n): needs a job of at least n processes")


def pytest_unconfigure(config):
    if hvd.is_initialized():
        hvd.shutdown()


def pytest_report_header(config):
    return f"hvd.tensorflow, TensorFlow {tf.__version__}: rank {hvd.rank()} of {hvd.size()}"


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


@pytest.fixture(params=["eager", "function"])
def run(request):
    """Runs a function eagerly, or traced into a tf.function (a fresh one
    per call, so each call's graph is built alike on every rank)."""
    if request.param == "eager":
        return lambda fn, *args: fn(*args)
    return lambda fn, *args: tf.function(fn)(*args)
