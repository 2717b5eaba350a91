#!/usr/bin/env python3
"""horovod_rendezvous.py HOSTS NP — Horovod's Gloo rendezvous server for
ranks started by hand (benchmarks/run-scaling.sh starts them in network
namespaces, which horovodrun's ssh cannot reach): what `horovodrun --gloo`
starts before its workers. HOSTS as horovodrun's -H (h0:1,h1:1). Prints
`port=N`, then one line per rank with the variables horovodrun gives it
(HOROVOD_HOSTNAME=h0 HOROVOD_RANK=0 ...), and serves until its standard
input closes. Needs Horovod 0.28.1 on PYTHONPATH (scripts/horovod.sh)."""
import sys

from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.http.http_server import RendezvousServer


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[0])
    plan = get_host_assignments(parse_hosts(sys.argv[1]), int(sys.argv[2]))
    server = RendezvousServer(0)
    port = server.start()
    server.init(plan)
    print(f"port={port}")
    for s in plan:
        print(f"HOROVOD_HOSTNAME={s.hostname} HOROVOD_RANK={s.rank} HOROVOD_SIZE={s.size} "
              f"HOROVOD_LOCAL_RANK={s.local_rank} HOROVOD_LOCAL_SIZE={s.local_size} "
              f"HOROVOD_CROSS_RANK={s.cross_rank} HOROVOD_CROSS_SIZE={s.cross_size}")
    sys.stdout.flush()
    sys.stdin.read()


if __name__ == "__main__":
    main()
