#!/usr/bin/python3
"""notify_peer.py SOCKET RUNTIME_DIR LOG [HVDCTL] -- plays systemd's side of
the notify protocol (sd_notify(3)) for tests: binds an AF_UNIX datagram
socket at SOCKET (export it as NOTIFY_SOCKET) and writes every assignment
received to LOG, one "TIME_MS KEY=VALUE" line each. The moment READY=1
arrives it tries what a worker would do, and logs the outcome:
"probe connect ok|failed ..." (a stream connect to RUNTIME_DIR/worker.sock)
and "probe hvdctl RC" (hvdctl status, when HVDCTL is given). Exits after
STOPPING=1, or after 120 s of silence."""
import os
import socket
import subprocess
import sys
import time

path, runtime, log_path = sys.argv[1:4]
hvdctl = sys.argv[4] if len(sys.argv) > 4 else None
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(120)
t0 = time.monotonic()
log = open(log_path, "w", buffering=1)
open(path + ".ready", "w").close()
ready = False
while True:
    try:
        data = s.recv(65536).decode("utf-8", "replace")
    except socket.timeout:
        log.write("timeout\n")
        break
    ms = int((time.monotonic() - t0) * 1000)
    lines = [l for l in data.split("\n") if l]
    for l in lines:
        log.write("%d %s\n" % (ms, l))
    if "READY=1" in lines and not ready:
        ready = True
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            c.connect(os.path.join(runtime, "worker.sock"))
            log.write("probe connect ok\n")
        except OSError as e:
            log.write("probe connect failed %s\n" % e)
        c.close()
        if hvdctl:
            r = subprocess.run([hvdctl, "-r", runtime, "--timeout", "10", "status"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            log.write("probe hvdctl %d\n" % r.returncode)
    if "STOPPING=1" in lines:
        break
log.write("peer done\n")
