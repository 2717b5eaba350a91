#!/bin/bash
# run-allreduce.sh — the allreduce part of run-collectives.sh: hvd beside
# Open MPI and torch.distributed gloo in the same run, alternating, medians
# of ROUNDS, as a table of ratios (nccl-tests convention: busbw = algbw ·
# 2(n-1)/n), then each system's spread over the rounds (min, median, max
# busbw and max/min per size: ROUNDS=10 is the repeat-run check), and with
# PNG= a plot of the medians over bands from the slowest to the fastest round.
#
#   benchmarks/run-allreduce.sh [BUILDDIR]      (after `make bench`)
# Environment: NPS="2 4", ROUNDS=3, MIN=65536, MAX=67108864, NODES=1 (or 2, 4:
# emulated nodes, one daemon each on loopback; the MPI peer then uses TCP),
# PNG= (a file name draws the plot), SHARED=1 (also hvd on shared tensors),
# MIN_TIME=0.1 (seconds of calls each system times per size).
OPS=allreduce MIN=${MIN:-65536} MAX=${MAX:-67108864} PNG=${PNG-} SHARED=${SHARED:-0} \
        exec "$(dirname "$0")/run-collectives.sh" "$@"
