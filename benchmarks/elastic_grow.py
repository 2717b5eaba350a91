"""One rank of the elastic growth benchmark (benchmarks/run-elastic.sh):
allreduces of 1024 floats, a commit after each step. At step 20 of the
first generation rank 0 writes the time to BENCH_DIR/appear: from then on
the discovery script lists one more host (and writes BENCH_DIR/listed the
first time it does). The first new rank prints, once its first allreduce at
the new size has completed, how long each part took:

  bench=elastic_grow impl=I start=S np=N new_size=M total_ms=T poll_ms=.. start_ms=..
        wait_ms=.. sync_ms=.. step_ms=.. interrupt_at_ms=.. python_ms=.. load1=L

  poll    the host listed in BENCH_DIR/appear -> the discovery script's
          first run that lists it (--discovery-interval)
  start   -> the new worker calls init (launcher spawn, Python, torch;
          python_ms of it is the script's start to its init call)
  wait    -> the new worker's init returns: admitted and the new
          generation formed (hvd: once it has enrolled, 0.5 s of quiet
          among joiners, the running ranks' next commit, their re-init;
          Horovod: its rendezvous)
  sync    -> the state is synced (the training function is entered)
  step    -> the first allreduce at the new size completed
  interrupt_at  when the running ranks raised HostsUpdatedInterrupt,
          since the appearance (Horovod: at discovery, before the new
          worker starts; hvd: after it has enrolled)

BENCH_IMPL=hvd (hvd.torch) or horovod (horovod.torch, under horovodrun);
BENCH_START=warm|cold names how hvdrun started the new workers (hvdrun
--elastic-warm-start), and with BENCH_READY rank 0 writes BENCH_DIR/appear
only once that file exists too (the standby interpreters are ready).
Times are wall-clock (time.time(), and `date +%s.%N` in the script), all
on this machine.
"""

import os
import sys
import time

T_START = time.time()

import torch  # noqa: E402

IMPL = os.environ.get("BENCH_IMPL", "hvd")
if IMPL == "horovod":
    import horovod.torch as hvd  # noqa: E402
    from horovod.common.exceptions import HostsUpdatedInterrupt  # noqa: E402
else:
    import hvd.torch as hvd  # noqa: E402
    from hvd.common.exceptions import HostsUpdatedInterrupt  # noqa: E402

APPEAR_AT = 20
AFTER = 20  # steps at the new size before the end
MAX_STEPS = 6000
DIR = os.environ["BENCH_DIR"]
NP = int(os.environ["BENCH_NP"])
READY = os.environ.get("BENCH_READY")  # the host appears once this file exists too
START = os.environ.get("BENCH_START", "cold")


def stamp(name, t):
    tmp = os.path.join(DIR, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(repr(t))
    os.replace(tmp, os.path.join(DIR, name))


def read(name):
    with open(os.path.join(DIR, name)) as f:
        return float(f.read().split()[0])


def main():
    # a worker started after the host appeared is a new one
    joiner = os.path.exists(os.path.join(DIR, "appear"))
    t_init = time.time()
    hvd.init()
    t_inited = time.time()
    state = hvd.elastic.TorchState(step=0, end=0)
    x = torch.ones(1024)
    printed = []  # once: a later joiner's reset is not this one's

    @hvd.elastic.run
    def loop(state):
        t_synced = time.time()
        first = True
        while state.step < MAX_STEPS and not (state.end and state.step >= state.end):
            if (hvd.rank() == 0 and state.step >= APPEAR_AT and not os.path.exists(os.path.join(DIR, "appear"))
                    and (not READY or os.path.exists(READY))):
                stamp("appear", time.time())
            hvd.allreduce(x, name="x")
            if first and joiner and hvd.rank() == NP and not printed:
                t = time.time()
                appear, listed, admitted = read("appear"), read("listed"), read("interrupt")
                parts = {
                    "poll": listed - appear,
                    "start": t_init - listed,
                    "wait": t_inited - t_init,
                    "sync": t_synced - t_inited,
                    "step": t - t_synced,
                }
                with open("/proc/loadavg") as f:
                    load = f.read().split()[0]
                print(f"bench=elastic_grow impl={IMPL} start={START} np={NP} new_size={hvd.size()} total_ms={(t - appear) * 1e3:.0f} "
                      + " ".join(f"{k}_ms={v * 1e3:.0f}" for k, v in parts.items())
                      + f" interrupt_at_ms={(admitted - appear) * 1e3:.0f} python_ms={(t_init - T_START) * 1e3:.0f}"
                      + f" load1={load}", flush=True)
                printed.append(True)
            first = False
            if hvd.size() > NP and not state.end:
                state.end = state.step + AFTER
            state.step += 1
            time.sleep(0.01)
            try:
                state.commit()
            except HostsUpdatedInterrupt:
                if hvd.rank() == 0:
                    stamp("interrupt", time.time())
                raise

    loop(state)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
