"""Tensor Fusion from hvd.tensorflow: the allreduces of one tf.function are
in flight together, so the daemon fuses them: its counters for this job
(hvdctl status --json) grow by fewer fused operations than tensors. Each
round's tensors are new names, which the coordinator negotiates: a name
seen before runs from the readiness board, which runs what every rank has
posted at once, fused or not as the posts happen to fall (8 to 67
operations for the 96 tensors of 3 rounds on a 2-vCPU machine)."""

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import hvd.tensorflow as hvd

N_TENSORS, ROUNDS = 32, 3


def job_counters():
    """This job's counters in the daemon's status (rank 0 asks)."""
    hvdctl = os.path.join(os.environ["HVD_BUILDDIR"], "tools", "hvdctl")
    out = subprocess.run([hvdctl, "--runtime-dir", os.environ["HVD_RUNTIME_DIR"], "status", "--json"],
                         check=True, capture_output=True, text=True, timeout=30).stdout

    def jobs(x):
        if isinstance(x, dict):
            if "job_id" in x and "fused_ops" in x:
                yield x
            for v in x.values():
                yield from jobs(v)
        elif isinstance(x, list):
            for v in x:
                yield from jobs(v)

    mine = [j for j in jobs(json.loads(out)) if j["job_id"] == os.environ["HVD_JOB_ID"]]
    assert len(mine) == 1, out
    return mine[0]


def test_allreduces_of_one_function_are_fused(rank, size):
    hvdctl = os.path.join(os.environ.get("HVD_BUILDDIR", ""), "tools", "hvdctl")
    if not (os.access(hvdctl, os.X_OK) and os.environ.get("HVD_RUNTIME_DIR") and os.environ.get("HVD_JOB_ID")):
        pytest.skip("needs tools/hvdctl and the job's HVD_RUNTIME_DIR, HVD_JOB_ID")

    @tf.function
    def step(t, rnd):  # traced once a round (rnd is a Python int)
        return [hvd.allreduce(t + float(i), op=hvd.Sum, name=f"fusion.{rnd}.{i}") for i in range(N_TENSORS)]

    x = tf.fill([64], float(rank))
    # traced first: a rank still tracing while the other has posted its
    # round would feed the coordinator one tensor at a time
    for rnd in range(ROUNDS):
        step.get_concrete_function(x, rnd)
    hvd.barrier()
    before = job_counters() if rank == 0 else None
    hvd.barrier()  # both start together, after rank 0's hvdctl
    for rnd in range(ROUNDS):
        out = step(x, rnd)
    for i, t in enumerate(out):
        np.testing.assert_array_equal(t.numpy(), np.full([64], size * i + size * (size - 1) / 2, np.float32))
    hvd.barrier()
    if rank != 0:
        return
    after = job_counters()
    tensors = after["tensors_negotiated"] - before["tensors_negotiated"]
    ops = after["fused_ops"] - before["fused_ops"]
    shared = after["tensors_in_fused_ops"] - before["tensors_in_fused_ops"]
    assert tensors >= N_TENSORS * ROUNDS, (before, after)
    # all 32 of a round are in flight together: a few operations a round
    # (5 to 12 for the 3 rounds in 40 runs on a 2-vCPU machine, 8 of them
    # beside two busy loops; one op a tensor, none shared, if each
    # allreduce waited for the last. Traced inside the rounds, 24 and 28
    # in 2 of 30: one rank's posts came one at a time)
    assert ops * 4 <= tensors, f"{ops} operations for {tensors} tensors: hardly fused ({before}, {after})"
    assert shared * 4 >= N_TENSORS * ROUNDS * 3, (before, after)
