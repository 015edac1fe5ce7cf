#!/usr/bin/env python3
"""Health of a running `rollbox serve` while clients flood it with 64 MiB bodies (issue 32).

Two sender threads post, in a loop, one row holding 21 million `{}` values (refused with 400 by
the row's parse budget) and 21 million `{}` rows (refused with 413 at row 16,385); a prober
sends 200 `GET /healthz` on new connections, 20 ms apart, and prints p50/p99/max.

    python3 scripts/stress/serve_attack.py HOST:PORT            # senders and prober in one process
    nice -n 19 python3 scripts/stress/serve_attack.py HOST:PORT send 9 &   # senders for 9 s, niced,
    python3 scripts/stress/serve_attack.py HOST:PORT probe                 # and the prober apart

On a 2-core machine the senders' own CPU competes with the server; niced, they stand in for
clients on another machine. Standard library only.
"""
import os, socket, sys, threading, time
addr = sys.argv[1]
host, port = addr.split(":"); port = int(port)
def exchange(request):
    """Send one request on a new connection; return the whole answer."""
    s = socket.create_connection((host, port))
    s.sendall(request)
    data = b""
    while True:
        d = s.recv(65536)
        if not d: break
        data += d
    s.close()
    return data
def post(body):
    return exchange(b"POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)[:12]
def probe():
    t = time.perf_counter()
    data = exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    ok = data.startswith(b"HTTP/1.1 200") and data.endswith(b"ok")
    return (time.perf_counter() - t) * 1e3 if ok else None
n = ((64 << 20) - 64) // 3
one_row = b'{"rows": [{"x": [' + b"{}," * n + b'{}]}]}'
many = b'{"rows": [' + b"{}," * n + b"{}]}"
stop = False
sent = [0, 0]
codes = set()
def sender(i, body):
    while not stop:
        codes.add(post(body)); sent[i] += 1
def probe_health():
    """200 probes, 20 ms apart; the figures as a line."""
    times = []; failed = 0
    for _ in range(200):
        r = probe()
        if r is None: failed += 1
        else: times.append(r)
        time.sleep(0.02)
    times.sort()
    return f"200 probes: {failed} failed, p50 {times[len(times)//2]:.1f} ms, p99 {times[int(len(times)*0.99)-1]:.1f} ms, max {times[-1]:.1f} ms"
mode = sys.argv[2] if len(sys.argv) > 2 else "both"
if mode == "send":
    for i, body in ((0, one_row), (1, many)):
        threading.Thread(target=sender, args=(i, body), daemon=True).start()
    time.sleep(float(sys.argv[3]))
    print(f"bodies sent {sent}, answers {codes}")
    os._exit(0)
if mode == "probe":
    print(probe_health())
    os._exit(0)
ts = [threading.Thread(target=sender, args=(0, one_row)), threading.Thread(target=sender, args=(1, many))]
for t in ts: t.start()
time.sleep(0.5)
line = probe_health()
stop = True
for t in ts: t.join()
print(f"bodies sent {sent}, answers {codes}; {line}")
