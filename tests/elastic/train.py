"""An elastic training for the tests: linear regression on a fixed data
set, an ElasticSampler, a TorchState committed after every batch.

Environment:
  ELASTIC_EPOCHS   epochs (default 4)
  ELASTIC_EXIT     "GEN:EPOCH:BATCH:RANK:KIND[,...]": in generation GEN,
                   the rank RANK at that batch kills itself (KIND kill9),
                   raises (KIND exception) or hangs (KIND stop: it writes
                   the time to ELASTIC_PROGRESS.stopped and stops itself
                   with SIGSTOP; a helper resumes it after ELASTIC_STOP_SEC
                   seconds, default 12, and writes ELASTIC_PROGRESS.resumed)
  ELASTIC_SYNC_EXIT "GEN:RANK": the rank RANK of generation GEN kills itself
                   as it enters it, while the others sync the state
  ELASTIC_WAIT     "EPOCH:BATCH:HOSTS": at that batch, wait until the ranks'
                   hosts are HOSTS, by rank ("a+a+b+b": hosts added or
                   removed by the discovery script) before going on
  ELASTIC_HOLD     "EPOCH:BATCH:FILE[,...]": at that batch, wait until FILE
                   exists (at most 60 s; the discovery script creates it)
  ELASTIC_PROGRESS a file this rank 0 writes "EPOCH BATCH" to at each commit
                   (the discovery script's schedule reads it)
  ELASTIC_TUNE     1: each rank reports the autotuner's values in force
                   (hvd_tuning_get) as each generation starts and at its end
Prints one line per generation:
  ELASTIC gen=G rank=R size=S local_rank=L local_size=N cross_rank=C host=H pid=P sync=0|1 t=TIME listen=PORTS
(TIME: time.time() as the generation starts on that rank; PORTS: the TCP
ports this process listens on, its data-plane listener, or -)
and with ELASTIC_TUNE, one at its start and one at each rank's end:
  TUNE gen=G rank=R change=C seq=Q threshold=T cycle=U
and at the end:
  RESULT rank=R weights=W1,W2,.. samples=K dup=D resets=N
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

import torch

import hvd.torch as hvd
from hvd import _core

N, DIM, BS = 96, 4, 3
W_TRUE = torch.tensor([[1.5, -2.0, 0.5, 3.0]])


def data():
    g = torch.Generator()
    g.manual_seed(7)
    x = torch.randn(N, DIM, generator=g)
    return x, x @ W_TRUE.t()


def schedule(var):
    out = []
    for item in filter(None, os.environ.get(var, "").split(",")):
        out.append(item.split(":"))
    return out


class Tuning(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in ("generation", "schedule_seq", "threshold", "cycle")] + [
        ("switches", ctypes.c_uint32)
    ]


def libhvd():
    """The libhvd that hvd._core is linked to, already loaded."""
    with open("/proc/self/maps") as f:
        path = next(l.split()[-1] for l in f if "/libhvd.so" in l)
    return ctypes.CDLL(path)


def main():
    hvd.init()
    tune = os.environ.get("ELASTIC_TUNE") == "1"
    lib = libhvd() if tune else None

    def tune_report():
        if tune:
            t = Tuning()
            assert lib.hvd_tuning_get(ctypes.byref(t)) == 0
            print(f"TUNE gen={_core.elastic_info()[0]} rank={hvd.rank()} change={t.generation} "
                  f"seq={t.schedule_seq} threshold={t.threshold} cycle={t.cycle}", flush=True)

    x, y = data()
    torch.manual_seed(0)
    model = torch.nn.Linear(DIM, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    sampler = hvd.elastic.ElasticSampler(list(range(N)), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler, epoch=0, batch=0,
                                   seen=[0] * N, dups=0)
    epochs = int(os.environ.get("ELASTIC_EPOCHS", "4"))
    exits = schedule("ELASTIC_EXIT")
    waits = schedule("ELASTIC_WAIT")
    holds = schedule("ELASTIC_HOLD")
    progress = os.environ.get("ELASTIC_PROGRESS")
    host = os.environ.get("HVD_HOSTNAME", "?")

    resets = [0]

    def hang():
        """Stops this process (background thread and all) as a hung worker
        would be; a helper in its own session resumes it later."""
        stop_sec = float(os.environ.get("ELASTIC_STOP_SEC") or "12")
        with open(f"{progress}.stopped", "w") as f:
            f.write(f"{time.time():.3f}\n")
        subprocess.Popen(["sh", "-c", f'sleep {stop_sec}; kill -CONT {os.getpid()}; date +%s.%N >"$0"',
                          f"{progress}.resumed"], start_new_session=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    sync_exits = schedule("ELASTIC_SYNC_EXIT")

    def on_reset():
        resets[0] += 1
        for g, r in sync_exits:
            if _core.elastic_info()[0] == int(g) and hvd.rank() == int(r):
                os.kill(os.getpid(), signal.SIGKILL)
        opt.param_groups[0]["lr"] = 0.3

    state.register_reset_callbacks([on_reset])

    def listening():
        """The TCP ports this process listens on (/proc: its sockets' inodes
        among the listening ones of its network namespace)."""
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        ports = set()
        with open("/proc/self/net/tcp") as f:
            for line in f.readlines()[1:]:
                c = line.split()
                if c[3] == "0A" and c[9] in inodes:
                    ports.add(int(c[1].rsplit(":", 1)[1], 16))
        return ",".join(str(p) for p in sorted(ports)) or "-"

    def report():
        gen, sync, _ = _core.elastic_info()
        print(f"ELASTIC gen={gen} rank={hvd.rank()} size={hvd.size()} local_rank={hvd.local_rank()} "
              f"local_size={hvd.local_size()} cross_rank={hvd.cross_rank()} host={host} pid={os.getpid()} "
              f"sync={int(sync)} t={time.time():.3f} listen={listening()}", flush=True)

    @hvd.elastic.run
    def train(state):
        report()
        tune_report()
        assert 0 <= hvd.rank() < hvd.size() and 0 <= hvd.local_rank() < hvd.local_size()
        while state.epoch < epochs:
            if state.batch == 0 and sampler.epoch != state.epoch:
                sampler.set_epoch(state.epoch)
            idx = sampler.indices
            for start in range(0, len(idx), BS):
                batch = idx[start:start + BS]
                for g, e, b, r, kind in exits:
                    if (_core.elastic_info()[0] == int(g) and int(e) == state.epoch and int(b) == state.batch
                            and int(r) == hvd.rank()):
                        if kind == "kill9":
                            os.kill(os.getpid(), signal.SIGKILL)
                        if kind == "stop":
                            hang()
                        else:
                            raise RuntimeError(f"scheduled failure at epoch {e} batch {b}")
                for e, b, hosts in waits:
                    if int(e) == state.epoch and int(b) == state.batch:
                        while "+".join(hvd.allgather_object(host, name="hosts")) != hosts:
                            state.check_host_updates()
                            time.sleep(0.05)
                for e, b, path in holds:
                    if int(e) == state.epoch and int(b) == state.batch:
                        deadline = time.monotonic() + 60
                        while not os.path.exists(path):
                            if time.monotonic() > deadline:
                                raise RuntimeError(f"{path} did not appear in 60 s")
                            time.sleep(0.05)
                opt.zero_grad()
                loss = ((model(x[batch]) - y[batch]) ** 2).mean()
                loss.backward()
                for p in model.parameters():
                    p.grad = hvd.allreduce(p.grad, name="grad")
                opt.step()
                sampler.record_indices(batch)
                # every rank counts every rank's samples: the count survives a lost rank
                for i in hvd.allgather(torch.tensor(batch, dtype=torch.int64), name="batch").tolist():
                    state.seen[i] += 1
                state.batch += 1
                if progress and hvd.rank() == 0:
                    with open(progress + ".tmp", "w") as f:
                        f.write(f"{state.epoch} {state.batch}\n")
                    os.replace(progress + ".tmp", progress)
                state.commit()
            seen = torch.tensor(state.seen)
            missing = int((seen == 0).sum())
            assert missing == 0, f"epoch {state.epoch}: {missing} samples never processed"
            state.dups += int((seen - 1).clamp(min=0).sum())
            state.seen = [0] * N
            state.epoch += 1
            state.batch = 0
            state.commit()
        return state.dups

    dups = train(state)
    tune_report()
    w = model.weight.detach().flatten()
    every = hvd.allgather(w.unsqueeze(0), name="final")
    assert torch.equal(every, w.unsqueeze(0).expand_as(every)), "ranks ended with different weights"
    print(f"RESULT rank={hvd.rank()} size={hvd.size()} weights={','.join(f'{v:.6f}' for v in w.tolist())} "
          f"dup={dups} resets={resets[0]}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
