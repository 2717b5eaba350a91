"""Checks tests/delay_proxy on loopback, through an echo server, so that
every byte crosses the proxy both ways:

  python3 delay_proxy_check.py PROXY DELAY_US [--copy]

- the buffer it says it uses: its ring with --copy, else pipes (splice)
  where this machine's fs.pipe-max-size allows 1 MiB;
- the delay: 10 one-byte round trips each take at least 2 x DELAY_US (the
  proxy holds every byte DELAY_US each way; a lower bound, whatever the
  machine's load);
- bulk: 48 MiB of a pattern echoed back intact and in order while the
  proxy holds at most 16 MiB a direction (it fills and drains many times);
- small writes: 20,000 sends of 7 bytes echoed intact (a segment each can
  fill a pipe's slots long before its bytes);
- the stall: after SIGUSR1 nothing comes back while a sender of 24 MiB
  fills what the proxy takes in, and the proxy holds exactly its 16 MiB
  (what was sent, less what the sender's queue and the proxy's socket
  still hold, /proc/net/tcp; more than one pipe's worth: the pipes
  chain); after SIGUSR2 all 24 MiB come back, in order.
Prints one "ok:" line per check; exits 1 naming the first that fails."""
import fcntl
import hashlib
import select
import signal
import socket
import struct
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


def unread(local, remote):
    """Bytes received and not yet read by the loopback TCP socket local ->
    remote (ports): its rx_queue in /proc/net/tcp."""
    want = (f"0100007F:{local:04X}", f"0100007F:{remote:04X}")
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            col = line.split()
            if (col[1], col[2]) == want:
                return int(col[4].split(":")[1], 16)
    fail(f"no socket 127.0.0.1:{local} -> 127.0.0.1:{remote} in /proc/net/tcp")


def unsent(sock):
    """Bytes in sock's send queue not yet sent (SIOCOUTQNSD)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), 0x894B, b"\0" * 4))[0]


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
        with open("/proc/sys/fs/pipe-max-size") as f:
            pipes_allowed = int(f.read()) >= 1 << 20
        said = " ".join(line[2:])
        # without pipes of 1 MiB here, a privileged proxy may still make them
        want = "(ring)" if "--copy" in extra else "(pipes" if pipes_allowed else said
        if not said.startswith(want):
            fail(f"the proxy said {' '.join(line)!r}, not {want}...")
        print(f"ok: it uses {said}", flush=True)

        c = connect(pport)
        rtts = []
        for i in range(10):
            t0 = time.perf_counter()
            c.sendall(bytes([i]))
            b = c.recv(1)
            rtts.append((time.perf_counter() - t0) * 1e6)
            if b != bytes([i]):
                fail(f"round trip {i}: {b!r} came back")
        if min(rtts) < 2 * delay_us:
            fail(f"a round trip took {min(rtts):.0f} us, under 2 x {delay_us} us")
        print(f"ok: 10 round trips of one byte, {min(rtts):.0f}-{max(rtts):.0f} us "
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

        c.close()

        # a sender held by SIGUSR1: the proxy reads on until its own
        # 16 MiB are full, in pipes of 1 MiB that chain
        s = socket.create_connection(("127.0.0.1", pport), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        p.send_signal(signal.SIGUSR1)
        time.sleep(0.05)
        held, sent = pattern(24 << 20)[::-1], 0
        s.setblocking(False)
        deadline = time.monotonic() + 60
        while True:
            try:
                sent += s.send(held[sent:sent + (1 << 20)]) if sent < len(held) else 0
            except BlockingIOError:
                pass
            # what the sender has not sent, and what waits unread in the
            # proxy's socket (on loopback nothing is on the way): the rest
            # the proxy holds, 16 MiB once it has read all it may
            outq, inq = unsent(s), unread(pport, s.getsockname()[1])
            held_by_proxy = sent - outq - inq
            if select.select([s], [], [], 0)[0]:
                fail("bytes came back while the proxy was stalled (SIGUSR1)")
            if held_by_proxy == 16 << 20:
                break
            if held_by_proxy > 16 << 20 or time.monotonic() > deadline:
                fail(f"stalled, the proxy took {sent} bytes, {outq} still in the sender's queue and {inq} unread "
                     f"in its socket: it holds {held_by_proxy}, not its 16 MiB")
            select.select([], [s], [], 0.05)
        p.send_signal(signal.SIGUSR2)
        s.setblocking(True)
        s.settimeout(60)
        s.sendall(held[sent:])
        got = bytearray()
        while len(got) < len(held):
            b = s.recv(1 << 20)
            if not b:
                break
            got += b
        if bytes(got) != held:
            fail(f"after SIGUSR2: {len(got)} bytes of {len(held)} came back, or out of order")
        print(f"ok: stalled, nothing passed and the proxy held its 16 MiB ({sent} bytes sent, {outq} in the "
              f"sender's queue, {inq} unread); after SIGUSR2 all 24 MiB passed intact", flush=True)
        s.close()
    finally:
        p.terminate()
        p.wait(30)


if __name__ == "__main__":
    main()
