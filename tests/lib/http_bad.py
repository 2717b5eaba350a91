#!/usr/bin/python3
"""http_bad.py -- bad input for the daemon's /metrics listener, each kind
followed by a good scrape that must still get 200:

  wrong method and path (404, 405 with Allow), HEAD, keep-alive;
  garbage (random bytes, NUL bytes, a request line without a version, an
  unknown protocol version); oversized heads (one long header, many
  headers, a long URI) and an announced body;
  slow and incomplete requests (half a request and gone, a request in slow
  pieces, a request dripping a header a second past its deadline);
  many connections (the limit of 16: the surplus gets 503; a burst of
  connections opened and closed; idle ones closed after their deadline).

    http_bad.py ADDRESS:PORT [--fast]

--fast leaves out the checks that wait for a deadline (about 12 s).
Prints one "ok - ..." line per kind; exits non-zero at the first failure.
"""
import http.client
import random
import socket
import sys
import time

DEADLINE_S = 5  # daemon/http.c: CONN_DEADLINE_USEC
LIMIT = 16  # daemon/http.c: MAX_CONNS

addr = sys.argv[1]
fast = "--fast" in sys.argv[2:]
host, port = addr.rsplit(":", 1)
port = int(port)


def connect(timeout=10):
    return socket.create_connection((host, port), timeout=timeout)


def read_all(s):
    out = b""
    while True:
        try:
            k = s.recv(65536)
        except ConnectionResetError:
            break
        if not k:
            break
        out += k
    return out


def raw(data, shut=True):
    """Sends data, then reads until the server closes."""
    s = connect()
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    if shut:
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    out = read_all(s)
    s.close()
    return out


def request(method, path, headers=None):
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r, body


def still_serving(after):
    st, r, body = request("GET", "/metrics")
    assert st == 200 and b"hvd_uptime_seconds" in body, "after %s: GET /metrics gave %d" % (after, st)


def status_of(reply):
    """The status code of a raw reply, 0 for none."""
    if not reply.startswith(b"HTTP/1."):
        return 0
    return int(reply.split(b" ", 2)[1])


# ---- methods, paths, HEAD, keep-alive ----
st, r, body = request("GET", "/metrics")
assert st == 200, st
assert r.getheader("Content-Type").startswith("text/plain; version=0.0.4"), r.getheader("Content-Type")
assert int(r.getheader("Content-Length")) == len(body)
st, r, hbody = request("HEAD", "/metrics")
assert st == 200 and hbody == b"" and int(r.getheader("Content-Length")) > 0, (st, hbody)
for path in ("/", "/metricsx", "/metrics/", "/x/../metrics", "/" + "m" * 1000):
    st, _, _ = request("GET", path)
    assert st == 404, "%s gave %d" % (path[:40], st)
assert request("GET", "/metrics?name=x&y")[0] == 200
for method in ("POST", "PUT", "DELETE", "OPTIONS", "BREW"):
    st, r, _ = request(method, "/metrics")
    assert st == 405 and r.getheader("Allow") == "GET, HEAD", "%s gave %d" % (method, st)
c = http.client.HTTPConnection(host, port, timeout=10)
c.request("GET", "/metrics")
r = c.getresponse()
r.read()
sock = c.sock
c.request("GET", "/metrics")
r2 = c.getresponse()
assert r.status == r2.status == 200 and c.sock is sock and b"hvd_" in r2.read(), "keep-alive"
c.close()
still_serving("wrong methods and paths")
print("ok - 404 for other paths, 405 (Allow: GET, HEAD) for other methods, HEAD, two requests on one connection")

# ---- garbage ----
rng = random.Random(7)
for n in (1, 16, 300, 4000, 65536):
    blob = bytes(rng.randrange(256) for _ in range(n))
    assert status_of(raw(blob)) in (0, 400, 505), "random bytes (%d)" % n
for bad in (b"\x00\x01\x02garbage\r\n\r\n", b"BLAH\r\n\r\n", b"GET\r\n\r\n", b"\r\n\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", b"GET /metrics HTTP/1.1\r\nA\x00: b\r\n\r\n"):
    reply = raw(bad)
    assert status_of(reply) in (0, 400), (bad, reply[:60])
assert status_of(raw(b"GET /metrics\r\n\r\n")) == 400
assert status_of(raw(b"GET /metrics HTTP/2.0\r\n\r\n")) == 505
assert status_of(raw(b"GET /metrics HTTP/9.9\r\n\r\n")) == 505
still_serving("garbage")
print("ok - garbage: no answer but 400 or 505, and the next scrape works")

# ---- oversized ----
big_header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
assert status_of(raw(big_header, shut=False)) == 431
many = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(2000)) + b"\r\n"
assert status_of(raw(many, shut=False)) == 431
assert status_of(raw(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", shut=False)) == 414
# a body announced but never sent: refused at once
reply = raw(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n", shut=False)
assert status_of(reply) == 405, reply[:60]
still_serving("oversized requests")
print("ok - oversized: 431 for a long or many-lined head, 414 for a long URI, 405 for a large body")

# ---- slow and incomplete ----
raw(b"GET /metr")  # half a request, then gone
s = connect()
s.sendall(b"GET /metrics HTTP/1.1\r\nHo")
s.close()  # the same, without saying goodbye
s = connect()
for piece in (b"GE", b"T /metrics HT", b"TP/1.0\r\n", b"\r\n"):
    s.sendall(piece)
    time.sleep(0.05)
out = read_all(s)
s.close()
assert status_of(out) == 200 and b"hvd_uptime_seconds" in out, out[:80]
if not fast:
    # one header line a second keeps the connection busy, not within its deadline
    s = connect(timeout=3 * DEADLINE_S)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    t0, closed = time.time(), False
    s.settimeout(1)
    while time.time() - t0 < 3 * DEADLINE_S:
        try:
            s.sendall(b"X-Drip: 1\r\n")
            k = s.recv(100)
            if not k:
                closed = True
                break
            assert status_of(k) != 200, "a dripping request was answered"
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
    took = time.time() - t0
    s.close()
    assert closed and took < 2 * DEADLINE_S + 2, "a dripping request was not dropped (%.1f s)" % took
    print("ok - a request dripping a header a second is dropped after %.1f s" % took)
still_serving("slow and incomplete requests")
print("ok - slow and incomplete: half requests, a request in slow pieces (200)")

# ---- many connections ----
time.sleep(0.3)  # the connections above are closed by now
idle = [connect() for _ in range(LIMIT - 4)]
idle_since = time.time()
still_serving("%d idle connections" % len(idle))
extra = [connect() for _ in range(12)]
refused = 0
for s in extra:
    s.settimeout(1)
    try:
        if status_of(s.recv(100)) == 503:
            refused += 1
    except socket.timeout:
        pass
assert refused >= 8, "surplus connections refused: %d of %d" % (refused, len(extra))
for s in idle[1:] + extra:
    s.close()
time.sleep(0.3)
still_serving("surplus connections")
for _ in range(300):  # a burst of connections that come and go
    s = connect()
    s.close()
burst = [connect() for _ in range(200)]
for s in burst:
    s.close()
time.sleep(0.3)
still_serving("a burst of connections")
print("ok - %d idle connections do not block a scrape; surplus ones get 503; a burst of 500" % (LIMIT - 4))
if not fast:
    idle[0].settimeout(4 * DEADLINE_S)
    assert idle[0].recv(100) == b"", "an idle connection got data"
    took = time.time() - idle_since
    assert DEADLINE_S - 1 < took < 2 * DEADLINE_S + 2, "the idle connection was closed after %.1f s" % took
    print("ok - an idle connection is closed after its deadline (%.1f s)" % took)
idle[0].close()
still_serving("the end")
