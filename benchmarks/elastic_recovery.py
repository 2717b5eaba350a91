"""One rank of the elastic recovery benchmark (benchmarks/run-elastic.sh):
allreduces of 1024 floats in a loop; the last rank of the first
generation kills itself (SIGKILL) at step 20, after writing the time;
rank 0 of the next generation prints how long after that its first
allreduce at the new size completed.

  bench=elastic_recovery np=N new_size=M recovery_ms=X
"""

import os
import signal
import sys
import time

import torch

import hvd.torch as hvd

STEPS = int(os.environ.get("BENCH_STEPS", "40"))
KILL_AT = 20
stamp = os.environ["BENCH_STAMP"]


def main():
    hvd.init()
    np0 = hvd.size()
    state = hvd.elastic.ObjectState(step=0)
    x = torch.ones(1024)

    @hvd.elastic.run
    def loop(state):
        first = hvd.elastic.generation() > 1
        while state.step < STEPS:
            if hvd.elastic.generation() == 1 and state.step == KILL_AT and hvd.rank() == hvd.size() - 1:
                with open(stamp, "w") as f:
                    f.write(repr(time.clock_gettime(time.CLOCK_MONOTONIC)))
                os.kill(os.getpid(), signal.SIGKILL)
            hvd.allreduce(x, name="x")
            if first and hvd.rank() == 0:
                with open(stamp) as f:
                    died = float(f.read())
                ms = (time.clock_gettime(time.CLOCK_MONOTONIC) - died) * 1e3
                print(f"bench=elastic_recovery np={np0} new_size={hvd.size()} recovery_ms={ms:.0f}", flush=True)
            first = False
            state.step += 1
            state.commit()

    loop(state)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
