"""Checks tests/delay_proxy on loopback, through an echo server, so that
every byte crosses the proxy both ways:

  python3 delay_proxy_check.py PROXY DELAY_US [--copy]

- the delay: 20 one-byte round trips each take at least 2 x DELAY_US (the
  proxy holds every byte DELAY_US each way; a lower bound, whatever the
  machine's load);
- bulk: 48 MiB of a pattern echoed back intact and in order while the
  proxy holds at most 16 MiB a direction (it fills and drains many times);
- small writes: 20,000 sends of 7 bytes echoed intact (a segment each can
  fill a pipe's slots long before its bytes);
- the stall: after SIGUSR1 nothing comes back for 0.5 s while 1 MiB is
  sent, and after SIGUSR2 all of it does, in order.
Prints one "ok:" line per check; exits 1 naming the first that fails."""
import hashlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def echo_server():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)

    def serve(c):
        with c:
            while True:
                b = c.recv(1 << 20)
                if not b:
                    return
                c.sendall(b)

    def accept():
        while True:
            c, _ = s.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return s.getsockname()[1]


def pattern(n):
    """n bytes that differ from block to block (a reordering shows)."""
    out, i = bytearray(), 0
    while len(out) < n:
        out += hashlib.sha256(i.to_bytes(8, "little")).digest() * 128
        i += 1
    return bytes(out[:n])


def connect(port):
    c = socket.create_connection(("127.0.0.1", port), timeout=60)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def echo_back(c, chunks, total):
    """Sends chunks from a thread, returns the total bytes that came back."""
    def send():
        for b in chunks:
            c.sendall(b)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    got = bytearray()
    while len(got) < total:
        b = c.recv(1 << 20)
        if not b:
            break
        got += b
    t.join(60)
    return bytes(got)


def main():
    proxy, delay_us = sys.argv[1], int(sys.argv[2])
    extra = sys.argv[3:]
    port = echo_server()
    p = subprocess.Popen([proxy, "--max-seconds", "120", *extra, "127.0.0.1:0", f"127.0.0.1:{port}",
                          str(delay_us)], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().split()
        if line[:1] != ["listening"]:
            fail(f"the proxy did not say where it listens: {line}")
        pport = int(line[1].rsplit(":", 1)[1])

        c = connect(pport)
        rtts = []
        for i in range(20):
            t0 = time.perf_counter()
            c.sendall(bytes([i]))
            b = c.recv(1)
            rtts.append((time.perf_counter() - t0) * 1e6)
            if b != bytes([i]):
                fail(f"round trip {i}: {b!r} came back")
        if min(rtts) < 2 * delay_us:
            fail(f"a round trip took {min(rtts):.0f} us, under 2 x {delay_us} us")
        print(f"ok: 20 round trips of one byte, {min(rtts):.0f}-{max(rtts):.0f} us "
              f"(at least 2 x {delay_us} us)", flush=True)

        data = pattern(48 << 20)
        got = echo_back(c, [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)], len(data))
        if got != data:
            fail(f"bulk: {len(got)} bytes of {len(data)} came back, "
                 f"first difference at {next((i for i in range(min(len(got), len(data))) if got[i] != data[i]), None)}")
        print("ok: 48 MiB echoed intact and in order", flush=True)

        small = pattern(7 * 20000)
        got = echo_back(c, [small[i:i + 7] for i in range(0, len(small), 7)], len(small))
        if got != small:
            fail(f"small writes: {len(got)} bytes of {len(small)} came back, or out of order")
        print("ok: 20,000 writes of 7 bytes echoed intact and in order", flush=True)

        p.send_signal(signal.SIGUSR1)
        time.sleep(0.05)
        held = pattern(1 << 20)[::-1]
        sender = threading.Thread(target=c.sendall, args=(held,), daemon=True)
        sender.start()
        r, _, _ = select.select([c], [], [], 0.5)
        if r:
            fail("bytes came back while the proxy was stalled (SIGUSR1)")
        p.send_signal(signal.SIGUSR2)
        got = bytearray()
        while len(got) < len(held):
            b = c.recv(1 << 20)
            if not b:
                break
            got += b
        sender.join(60)
        if bytes(got) != held:
            fail(f"after SIGUSR2: {len(got)} bytes of {len(held)} came back, or out of order")
        print("ok: nothing passed while stalled; 1 MiB passed intact after SIGUSR2", flush=True)
        c.close()
    finally:
        p.terminate()
        p.wait(30)


if __name__ == "__main__":
    main()
