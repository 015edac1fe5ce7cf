#!/usr/bin/env python3
"""Bounded loopback load on `rollbox serve`: concurrent well-formed, malformed, oversized and
slow clients plus ~500 idle connections, while a separate process probes GET /healthz every
50 ms. Python 3.11, stdlib only (asyncio; the prober is a forked process so the load
generator's event loop cannot delay it).

    python3 scripts/stress/serve_load.py [--seconds 60] [--clients 64] [--half-open 500]
        [--binary target/release/rollbox] [--model GGUF] [--work target/robustness/serve]
        [--require-idle-timeout S] [--require-body-timeout S] [--pause-ms 50]
    python3 scripts/stress/serve_load.py --url http://127.0.0.1:8080 [--rows ROWS.jsonl] ...

Without --url it starts `rollbox serve --listen 127.0.0.1:0` itself (from the repository root,
where the default component paths resolve) with the deterministic engine of scripts/stress/storm.py:
the embedded engine recorded once on a few prompts, one answer per prompt, replayed with
`--engine replay:FILE --tokenizer MODEL.gguf`; well-formed requests use those prompts, so each
must return rows x --n-samples trajectories. Build first (scripts/stress/storm.sh builds when the
binary or components are missing, or scripts/quickstart.sh). With --url it loads a running
server; well-formed rows come from --rows (default workflows/rlvr/data/arith.jsonl) and only
"200 + a parseable safetensors body" is required of them.

Clients, all at once for --seconds (then in-flight requests may finish):
  * well-formed (clients/2): POST /v1/episodes {"rows": [1-2 rows]} on a keep-alive
    connection, a random pause (mean --pause-ms 50) between requests. Must get 200 and a
    safetensors body that parses (header length, JSON header, tensor offsets) whose metadata
    holds `trajectories` and `stats`.
  * malformed (clients/4, a new connection each, 50-250 ms apart), round robin over: bad
    JSON, a JSON list, `rows` of the wrong type, a row that is not an object, no `rows`,
    invalid UTF-8, 100 000-deep nesting, an empty body, a body shorter than its
    Content-Length, bad chunked encoding, a bad Content-Length, POST /v1/version with -1 /
    "3" / 1.5 / 2^32 / no version / bad JSON, GET /v1/episodes, an unknown path, a garbage
    request line, a 1 MiB header. Each must get a 4xx (the HTTP-level ones may instead have
    the connection closed), never a 2xx or 5xx, never a hang (--malformed-timeout 10 s).
    Rows that are JSON objects but useless ({"rows": []}, a row without `messages`) may get
    200 or a 4xx. A POST /v1/version that is wrongly accepted is followed by one restoring
    the version read from /metrics at the start.
  * oversized (--oversized 1 at a time, 3 s apart): 64 MiB + 1 byte bodies, by
    Content-Length and chunked, the response read while the body is sent; must be refused
    with 413 or the connection closed (a 2xx/400/5xx means the server took it all). How many
    bytes went out before the answer is printed (an up-front Content-Length check answers
    after a few KiB; reading up to the limit, after 64 MiB).
  * slow (clients - the above): half slowloris (a request line, then one header byte per
    second), half slow bodies (complete headers with Content-Length 100000, then one body
    byte per second).
  * half-open (--half-open 500): connect, send nothing.
    Slow and half-open connections are reopened whenever the server closes them, so the
    pressure stays for the whole run; the report says after how long the server closed them.
  * /healthz every 50 ms on a fresh connection, from its own process; latency is from
    connect to the complete response.
Keep --half-open + --clients well under the server's connection cap (MAX_CONNECTIONS, 1024 in
host/serve/src/lib.rs), or the prober's connections may be refused.

Printed at the end: requests by class and outcome (status code, closed, reset, timeout), well-
formed answered/total with latency, healthz p50/p99/max and the count over 100 ms (and the
slowest probes' times), how long the server kept slow and half-open connections, server RSS
and open fds (when started here), /metrics, and PASS/FAIL per check. Exit 1 when a check
fails: a well-formed request not answered 200 with a valid body; a healthz probe over
--healthz-max-ms (100) or failed; a malformed request answered 2xx/5xx or left hanging; an
oversized body not refused; the server gone or not answering /healthz, /v1/episodes and
/metrics after the load; with --require-idle-timeout S a half-open or slowloris connection,
with --require-body-timeout S a slow-body connection, kept open longer than S seconds.
Exit 2 when the setup is missing.

Bounded for a 2-core VM: a fixed number of connections, pauses between requests, at most
--oversized bodies in flight, and the load generator lowers its own priority (--load-nice 10;
the server and the prober keep theirs) so it does not starve what it measures.

What it relies on in rollbox (host/serve/src/): `rollbox serve --listen ADDR` prints
`listening on http://ADDR` on stdout once bound, port 0 picks a free port; routes
POST /v1/episodes, POST /v1/version, GET /healthz, GET /metrics with `rollbox_policy_version`;
the flags of `rollbox rollout` (--engine, --tokenizer, --n-samples, --config) are accepted.
The server's limits (HEADER_READ_TIMEOUT 10 s, BODY_READ_TIMEOUT 60 s, MAX_BODY_BYTES 64 MiB
with a declared Content-Length over it refused before reading, MAX_CONNECTIONS 1024, negative
versions refused) are what the checks expect.
"""

import argparse
import asyncio
import collections
import contextlib
import json
import multiprocessing
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import storm  # noqa: E402  (prepare_engine, parse_safetensors, check_setup, paths)

ROOT = storm.ROOT
MiB = 1 << 20
OVERSIZE = 64 * MiB + 1


class Closed(Exception):
    """The server closed the connection before a complete response."""


# ---------------------------------------------------------------------------------------------
# A minimal HTTP/1.1 client over asyncio streams (raw bytes in, one response out).


def request(method, path, body=None, host="127.0.0.1", extra=(), content_type="application/json", keep_alive=False):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *([] if keep_alive else ["Connection: close"]), *extra]
    if body is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_response(reader):
    try:
        line = await reader.readline()
        if not line:
            raise Closed()
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise ValueError(f"bad status line {line[:80]!r}")
        status = int(parts[1])
        headers = {}
        while True:
            h = await reader.readline()
            if not h:
                raise Closed()
            if h in (b"\r\n", b"\n"):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += await reader.readexactly(size)
                await reader.readexactly(2)
            body = bytes(body)
        else:
            body = await reader.read()
        return status, headers, body
    except asyncio.IncompleteReadError:
        raise Closed() from None


async def exchange(host, port, raw, eof=False):
    reader, writer = await asyncio.open_connection(host, port, limit=4 * MiB)
    try:
        writer.write(raw)
        await writer.drain()
        if eof:
            writer.write_eof()
        return await read_response(reader)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def attempt(coro, timeout):
    """(outcome, status, headers, body); outcome is the status code as text, or closed,
    reset, timeout, bad-response, error:..."""
    try:
        status, headers, body = await asyncio.wait_for(coro, timeout)
        return str(status), status, headers, body
    except TimeoutError:
        return "timeout", None, None, None
    except (Closed, BrokenPipeError):
        return "closed", None, None, None
    except ConnectionResetError:
        return "reset", None, None, None
    except ValueError as e:
        return f"bad-response ({e})", None, None, None
    except OSError as e:
        return f"error:{e.strerror or type(e).__name__}", None, None, None


# ---------------------------------------------------------------------------------------------
# Request classes.

FOUR = "4xx"  # a 4xx status
FOUR_OR_CLOSED = "4xx|closed"  # a 4xx status or the connection closed/reset (HTTP-level garbage)
OK_OR_FOUR = "2xx|4xx"  # valid JSON rows of no use: 200 (empty batch) or a refusal


def malformed_cases(host):
    deep = b'{"rows": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    ep = "/v1/episodes"
    raw_head = f"POST {ep} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\n"
    return [
        ("episodes/bad-json", request("POST", ep, b'{"rows": [{"messages": '), False, FOUR),
        ("episodes/json-list", request("POST", ep, b"[1, 2, 3]"), False, FOUR),
        ("episodes/rows-not-list", request("POST", ep, b'{"rows": "abc"}'), False, FOUR),
        ("episodes/row-not-object", request("POST", ep, b'{"rows": [1, "x"]}'), False, FOUR),
        ("episodes/missing-rows", request("POST", ep, b'{"row": [{}]}'), False, FOUR),
        ("episodes/invalid-utf8", request("POST", ep, b'{"rows": [{"messages": [{"role": "user", "content": "\xff\xfe"}]}]}'), False, FOUR),
        ("episodes/deep-nesting", request("POST", ep, deep), False, FOUR),
        ("episodes/empty-body", request("POST", ep, b""), False, FOUR),
        ("episodes/short-body", (raw_head + "Content-Length: 1000\r\n\r\n").encode() + b'{"rows": [', True, FOUR_OR_CLOSED),
        ("episodes/bad-chunked", (raw_head + "Transfer-Encoding: chunked\r\n\r\n").encode() + b"zz\r\nhello\r\n0\r\n\r\n", False, FOUR_OR_CLOSED),
        ("episodes/bad-content-length", (raw_head + "Content-Length: abc\r\n\r\n").encode() + b"{}", False, FOUR_OR_CLOSED),
        ("episodes/empty-rows", request("POST", ep, b'{"rows": []}'), False, OK_OR_FOUR),
        ("episodes/row-without-messages", request("POST", ep, b'{"rows": [{"answer": "1"}]}'), False, OK_OR_FOUR),
        ("version/negative", request("POST", "/v1/version", b'{"version": -1}'), False, FOUR),
        ("version/string", request("POST", "/v1/version", b'{"version": "3"}'), False, FOUR),
        ("version/float", request("POST", "/v1/version", b'{"version": 1.5}'), False, FOUR),
        ("version/overflow", request("POST", "/v1/version", b'{"version": 4294967296}'), False, FOUR),
        ("version/missing", request("POST", "/v1/version", b"{}"), False, FOUR),
        ("version/bad-json", request("POST", "/v1/version", b"{version"), False, FOUR),
        ("http/wrong-method", request("GET", ep), False, FOUR),
        ("http/unknown-path", request("GET", "/v2/nothing-here"), False, FOUR),
        ("http/garbage-request-line", b"HELLO THERE\r\n\r\n", False, FOUR_OR_CLOSED),
        ("http/huge-header", request("GET", "/healthz", extra=["X-Big: " + "a" * MiB]), False, FOUR_OR_CLOSED),
    ]


def acceptable(expect, outcome, status):
    if status is not None:
        if 400 <= status < 500:
            return True
        return expect == OK_OR_FOUR and 200 <= status < 300
    return expect == FOUR_OR_CLOSED and outcome in ("closed", "reset")


class Load:
    def __init__(self, a, host, port, rows, expect_trajectories):
        self.a, self.host, self.port, self.rows = a, host, port, rows
        self.expect_trajectories = expect_trajectories
        self.stop = asyncio.Event()
        self.outcomes = collections.defaultdict(collections.Counter)  # class -> outcome -> n
        self.failures = collections.defaultdict(dict)  # check -> {what: [count, example body]}
        self.wf_latency = []
        self.wf_total = self.wf_ok = 0
        self.held = collections.defaultdict(lambda: {"opened": 0, "connect_failed": 0, "closed_by_server": [], "held_to_end": 0, "ages": []})
        self.oversize_sent = []
        self.base_version = 0  # restored after a wrongly accepted POST /v1/version
        self.rss, self.fds = [], []  # server RSS (MiB) and open fds, sampled every second
        self.plan = (0, 0, 0)

    def fail(self, check, what, body=b""):
        seen = self.failures[check].setdefault(what, [0, body[:160] if body else b""])
        seen[0] += 1

    def examples(self, check):
        return [f"{what} x{n}" + (f": {body!r}" if body else "") for what, (n, body) in self.failures.get(check, {}).items()]

    # -- well-formed
    def check_batch(self, body, n_rows):
        tensors, meta = storm.parse_safetensors(body)
        trajs = json.loads(meta["trajectories"])
        if not isinstance(trajs, list):
            raise ValueError("metadata trajectories is not a list")
        json.loads(meta["stats"])
        if self.expect_trajectories and len(trajs) != n_rows * self.a.n_samples:
            raise ValueError(f"{len(trajs)} trajectories for {n_rows} rows x {self.a.n_samples} samples")
        return len(trajs)

    async def well_formed(self, i):
        """One keep-alive connection per client (a new connection per request would leave tens
        of thousands of loopback sockets in TIME_WAIT over a long run); reconnects after any
        error or a `Connection: close` answer. The server sets no idle timeout, so a kept
        connection closed under a request counts as a failure like any other."""
        rng = random.Random(i)
        conn = None

        async def one(raw):
            nonlocal conn
            if conn is None:
                conn = await asyncio.open_connection(self.host, self.port, limit=4 * MiB)
            reader, writer = conn
            writer.write(raw)
            await writer.drain()
            status, headers, body = await read_response(reader)
            if headers.get("connection", "").lower() == "close":
                drop()
            return status, headers, body

        def drop():
            nonlocal conn
            if conn is not None:
                conn[1].close()
                conn = None

        while not self.stop.is_set():
            rows = rng.sample(self.rows, k=min(len(self.rows), rng.randint(1, 2)))
            raw = request("POST", "/v1/episodes", json.dumps({"rows": rows}).encode(), host=self.host, keep_alive=True)
            t0 = time.perf_counter()
            outcome, status, headers, body = await attempt(one(raw), self.a.request_timeout)
            ms = (time.perf_counter() - t0) * 1e3
            if status is None:
                drop()
            self.wf_total += 1
            good = False
            if status == 200:
                try:
                    self.check_batch(body, len(rows))
                    good = True
                except (ValueError, KeyError) as e:
                    outcome = "200-bad-body"
                    self.fail("well-formed", f"200 with a bad body ({e})")
            else:
                self.fail("well-formed", outcome, body)
            self.outcomes["well-formed"][outcome] += 1
            if good:
                self.wf_ok += 1
                self.wf_latency.append(ms)
            await asyncio.sleep(rng.uniform(0.0, 2 * self.a.pause_ms / 1e3))
        drop()

    # -- malformed
    async def malformed(self, i, cases):
        rng = random.Random(1000 + i)
        k = i
        while not self.stop.is_set():
            name, raw, eof, expect = cases[k % len(cases)]
            k += 1
            outcome, status, _, body = await attempt(exchange(self.host, self.port, raw, eof=eof), self.a.malformed_timeout)
            self.outcomes[f"malformed {name}"][outcome] += 1
            if not acceptable(expect, outcome, status):
                self.fail("malformed", f"{name}: {outcome} (expected {expect})", body)
            if name.startswith("version/") and status is not None and 200 <= status < 300:
                # A wrongly accepted version: put the policy version back.
                restore = json.dumps({"version": self.base_version}).encode()
                await attempt(exchange(self.host, self.port, request("POST", "/v1/version", restore)), 10)
            await asyncio.sleep(rng.uniform(0.05, 0.25))

    # -- oversized
    async def oversized_once(self, chunked):
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=4 * MiB)
        head = (f"POST /v1/episodes HTTP/1.1\r\nHost: {self.host}\r\nConnection: close\r\nContent-Type: application/json\r\n"
                + ("Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {OVERSIZE}\r\n") + "\r\n").encode()
        chunk = memoryview(b'{"rows": [' + b" " * (MiB - 10))
        sent = [0]

        async def send():
            writer.write(head)
            while sent[0] < OVERSIZE:
                n = min(len(chunk), OVERSIZE - sent[0])
                if chunked:
                    writer.write(f"{n:x}\r\n".encode())
                writer.write(chunk[:n])
                if chunked:
                    writer.write(b"\r\n")
                await writer.drain()
                sent[0] += n
            if chunked:
                writer.write(b"0\r\n\r\n")
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            return await read_response(reader)
        finally:
            self.oversize_sent.append(sent[0])
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def oversized(self, i):
        k = i
        while not self.stop.is_set():
            chunked = k % 2 == 1
            k += 1
            name = "oversized chunked" if chunked else "oversized content-length"
            outcome, status, _, body = await attempt(self.oversized_once(chunked), self.a.request_timeout)
            self.outcomes[name][outcome] += 1
            if not (status == 413 or (status is None and outcome in ("closed", "reset"))):
                self.fail("oversized", f"{name}: {outcome} (expected 413 or closed)", body)
            await asyncio.sleep(3.0)

    # -- slow and idle connections
    async def hold(self, kind, pre=b"", drip=None):
        """Keep one connection of `kind` open until the end; when the server closes it (an idle
        or header timeout), record after how long and open another, so the pressure stays."""
        st = self.held[kind]
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 10)
            except (OSError, TimeoutError) as e:
                st["connect_failed"] += 1
                self.fail(f"connect ({kind})", type(e).__name__)
                await asyncio.sleep(1.0)
                continue
            st["opened"] += 1
            eof = asyncio.create_task(reader.read(1))
            stopped = asyncio.create_task(self.stop.wait())
            closed = False
            try:
                if pre:
                    writer.write(pre)
                    await writer.drain()
                while not self.stop.is_set():
                    done, _ = await asyncio.wait({eof, stopped}, timeout=1.0 if drip else None,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if eof in done:
                        closed = True
                        break
                    if drip and not self.stop.is_set():
                        writer.write(drip)
                        await writer.drain()
            except OSError:
                closed = True
            finally:
                age = time.monotonic() - t0
                if closed:
                    st["closed_by_server"].append(age)
                else:
                    st["held_to_end"] += 1
                    st["ages"].append(age)
                for t in (eof, stopped):
                    t.cancel()
                await asyncio.gather(eof, stopped, return_exceptions=True)
                writer.close()

    async def run(self, server_pid):
        a = self.a
        n_wf = max(1, a.clients // 2)
        n_mal = max(1, a.clients // 4)
        n_slow = max(0, a.clients - n_wf - n_mal)
        self.plan = (n_wf, n_mal, n_slow)
        cases = malformed_cases(self.host)
        tasks = []
        # Idle connections first, opened in steps so the accept queue sees no burst.
        for i in range(a.half_open):
            tasks.append(asyncio.create_task(self.hold("half-open")))
            if i % 50 == 49:
                await asyncio.sleep(0.05)
        slowloris = f"POST /v1/episodes HTTP/1.1\r\nHost: {self.host}\r\nX-Slow: ".encode()
        slow_body = (f"POST /v1/episodes HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: 100000\r\n\r\n").encode() + b'{"rows": ['
        for i in range(n_slow):
            if i % 2 == 0:
                tasks.append(asyncio.create_task(self.hold("slowloris", slowloris, b"a")))
            else:
                tasks.append(asyncio.create_task(self.hold("slow-body", slow_body, b" ")))
        workers = [asyncio.create_task(self.well_formed(i)) for i in range(n_wf)]
        workers += [asyncio.create_task(self.malformed(i, cases)) for i in range(n_mal)]
        workers += [asyncio.create_task(self.oversized(i)) for i in range(a.oversized)]
        monitor = asyncio.create_task(self.monitor(server_pid))
        await asyncio.sleep(a.seconds)
        self.stop.set()
        # In-flight requests finish within their own timeouts.
        done, pending = await asyncio.wait(workers, timeout=a.request_timeout + 15)
        for t in pending:
            self.fail("drain", "a client was still running after its timeout")
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.gather(*tasks, return_exceptions=True)
        monitor.cancel()
        await asyncio.gather(monitor, *done, return_exceptions=True)
        for t in done:
            if t.exception() is not None:
                self.fail("client error", repr(t.exception()))

    async def monitor(self, pid):
        if pid is None:
            return
        while True:
            try:
                with open(f"/proc/{pid}/status") as f:
                    m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
                    if m:
                        self.rss.append(int(m.group(1)) / 1024)
                self.fds.append(len(os.listdir(f"/proc/{pid}/fd")))
            except OSError:
                pass
            await asyncio.sleep(1.0)


# ---------------------------------------------------------------------------------------------
# The /healthz prober (own process, blocking sockets).


def prober(host, port, interval, timeout, stop, conn):
    results = []  # (seconds since start, latency ms, ok, what)
    req = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    start = next_t = time.monotonic()
    while not stop.is_set():
        t0 = time.perf_counter()
        ok, what = False, ""
        try:
            with socket.create_connection((host, port), timeout=timeout) as s:
                s.settimeout(timeout)
                s.sendall(req)
                data = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                    if data.startswith(b"HTTP/1.1 200") and data.endswith(b"\r\n\r\nok"):
                        break
            ok = data.startswith(b"HTTP/1.1 200") and data.endswith(b"ok")
            what = "" if ok else data[:60].decode("latin-1")
        except OSError as e:
            what = type(e).__name__
        results.append((time.monotonic() - start, (time.perf_counter() - t0) * 1e3, ok, what))
        next_t += interval
        delay = next_t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_t = time.monotonic()
    conn.send(results)
    conn.close()


# ---------------------------------------------------------------------------------------------


def start_server(a, engine, log_path):
    cmd = [a.binary, "serve", "--listen", "127.0.0.1:0", "--engine", f"replay:{engine['replay']}",
           "--tokenizer", engine["tokenizer"], "--n-samples", str(a.n_samples), "--config", json.dumps(storm.CONFIG)]
    lf = open(log_path, "wb")
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=lf, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            m = re.search(rb"listening on http://([0-9.]+):(\d+)", f.read())
        if m:
            return p, m.group(1).decode(), int(m.group(2))
        if p.poll() is not None:
            raise storm.SetupError(f"rollbox serve exited {p.returncode}:\n{storm.tail(log_path)}")
        time.sleep(0.05)
    stop_server(p)
    raise storm.SetupError(f"rollbox serve did not print its address within 300 s:\n{storm.tail(log_path)}")


def stop_server(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)  # our own child, by pid
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def pct(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round((len(v) - 1) * q)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=64, help="request clients: 1/2 well-formed, 1/4 malformed, the rest slow")
    ap.add_argument("--half-open", type=int, default=500, help="connections that never send anything")
    ap.add_argument("--oversized", type=int, default=1, help="64 MiB bodies in flight at once")
    ap.add_argument("--url", help="load a running server instead of starting one")
    ap.add_argument("--rows", help="JSONL rows for well-formed requests (with --url)")
    ap.add_argument("--binary", default=storm.DEFAULT_BINARY)
    ap.add_argument("--model", default=storm.default_model())
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "robustness", "serve"))
    ap.add_argument("--n-samples", type=int, default=4, help="rollbox serve --n-samples (episodes per row)")
    ap.add_argument("--pause-ms", type=float, default=50, help="mean pause of a well-formed client between requests")
    ap.add_argument("--healthz-interval-ms", type=float, default=50)
    ap.add_argument("--healthz-max-ms", type=float, default=100)
    ap.add_argument("--request-timeout", type=float, default=60)
    ap.add_argument("--malformed-timeout", type=float, default=10)
    ap.add_argument("--require-idle-timeout", type=float, default=None, metavar="S",
                    help="also fail when the server keeps a half-open or slowloris connection (headers never "
                         "complete) open longer than S seconds")
    ap.add_argument("--require-body-timeout", type=float, default=None, metavar="S",
                    help="also fail when the server keeps a slow-body connection open longer than S seconds")
    ap.add_argument("--load-nice", type=int, default=10, help="niceness increment of the load generator (0: none)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)

    server = None
    expect_trajectories = False
    try:
        if a.url:
            u = urllib.parse.urlsplit(a.url)
            host, port = u.hostname or "127.0.0.1", u.port or 80
            rows_file = a.rows or os.path.join(ROOT, "workflows", "rlvr", "data", "arith.jsonl")
            with open(rows_file) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            target = f"{a.url} (running)"
        else:
            storm.check_setup(a.binary, a.model)
            engine = storm.prepare_engine(a.work, a.binary, a.model)
            rows = engine["prompts"]
            expect_trajectories = True
            log_path = os.path.join(a.work, "serve.log")
            server, host, port = start_server(a, engine, log_path)
            target = f"http://{host}:{port} (rollbox serve started here, pid {server.pid}, log {storm.rel(log_path)})"
    except storm.SetupError as e:
        print(f"serve_load: {e}", file=sys.stderr)
        return 2
    print(f"target   {target}")
    if a.half_open + a.clients + a.oversized + 8 > 900:
        print(f"warning  {a.half_open + a.clients} connections come near the server's cap of 1024 open connections; "
              "/healthz probes may be refused")

    try:
        # The prober: forked before the event loop exists and before this process lowers its
        # priority.
        ctx = multiprocessing.get_context("fork")
        stop_probe = ctx.Event()
        recv, send = ctx.Pipe(duplex=False)
        probe = ctx.Process(target=prober, args=(host, port, a.healthz_interval_ms / 1e3, 2.0, stop_probe, send), daemon=True)
        probe.start()
        send.close()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = a.half_open + 4 * a.clients + 256
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
        if a.load_nice:
            with contextlib.suppress(OSError):
                os.nice(a.load_nice)
        time.sleep(0.5)  # a few probes before the load

        async def go():
            load = Load(a, host, port, rows, expect_trajectories)
            _, _, _, body = await attempt(exchange(host, port, request("GET", "/metrics", host=host)), 10)
            m = re.search(rb"^rollbox_policy_version (-?\d+)", body or b"", re.M)
            load.base_version = int(m.group(1)) if m else 0
            await load.run(server.pid if server else None)
            # After the load: the server still answers.
            final = {}
            outcome, status, _, body = await attempt(exchange(host, port, request("GET", "/healthz", host=host)), 5)
            final["healthz"] = (outcome, body)
            raw = request("POST", "/v1/episodes", json.dumps({"rows": rows[:1]}).encode(), host=host)
            outcome, status, _, body = await attempt(exchange(host, port, raw), a.request_timeout)
            try:
                final["episodes"] = (outcome, status == 200 and load.check_batch(body, 1) >= 0)
            except (ValueError, KeyError) as e:
                final["episodes"] = (outcome, f"bad body: {e}")
            outcome, status, _, body = await attempt(exchange(host, port, request("GET", "/metrics", host=host)), 5)
            final["metrics"] = (outcome, body.decode("utf-8", "replace") if body else "")
            return load, final

        load, final = asyncio.run(go())
        stop_probe.set()
        probes = recv.recv() if recv.poll(10) else []
        probe.join(5)
    finally:
        alive = server is None or server.poll() is None
        if server is not None:
            stop_server(server)

    # ---- report
    checks = []
    n_wf, n_mal, n_slow = load.plan
    print(f"load     {a.seconds:.0f} s: {n_wf} well-formed, {n_mal} malformed, {n_slow} slow, {a.oversized} oversized, "
          f"{a.half_open} half-open clients; healthz every {a.healthz_interval_ms:.0f} ms")
    print("requests (class, outcome: count)")
    for cls in sorted(load.outcomes):
        print(f"  {cls:<40} " + ", ".join(f"{k}: {v}" for k, v in sorted(load.outcomes[cls].items())))
    if load.oversize_sent:
        print(f"  oversized bytes sent before the answer: min {min(load.oversize_sent) / MiB:.1f} MiB, "
              f"max {max(load.oversize_sent) / MiB:.1f} MiB")
    lat = load.wf_latency
    print(f"well-formed answered {load.wf_ok}/{load.wf_total} "
          f"(latency p50 {pct(lat, 0.5):.0f} ms, p99 {pct(lat, 0.99):.0f} ms, max {max(lat, default=float('nan')):.0f} ms)")
    checks.append(("every well-formed request answered 200 with a valid batch",
                   load.wf_total > 0 and load.wf_ok == load.wf_total, load.examples("well-formed")))
    hz = [ms for _, ms, _, _ in probes]
    failed = [(t, what) for t, _, ok, what in probes if not ok]
    over = [(t, ms) for t, ms, _, _ in probes if ms > a.healthz_max_ms]
    print(f"healthz  {len(hz)} probes: p50 {pct(hz, 0.5):.1f} ms, p99 {pct(hz, 0.99):.1f} ms, "
          f"max {max(hz, default=float('nan')):.1f} ms, over {a.healthz_max_ms:.0f} ms: {len(over)}, failed: {len(failed)}")
    worst = sorted(probes, key=lambda p: -p[1])[:5]
    if worst and worst[0][1] > a.healthz_max_ms:
        print("         slowest: " + ", ".join(f"{ms:.0f} ms at t={t:.1f}s" for t, ms, _, _ in worst))
    checks.append((f"healthz always answered within {a.healthz_max_ms:.0f} ms",
                   bool(hz) and not over and not failed,
                   [f"{ms:.0f} ms at t={t:.1f}s" for t, ms in over[:5]] + [f"failed at t={t:.1f}s: {w}" for t, w in failed[:5]]))
    checks.append(("malformed requests refused with 4xx (never 2xx/5xx, never a hang)",
                   not load.failures.get("malformed"), load.examples("malformed")))
    checks.append(("oversized bodies refused with 413 or the connection closed",
                   not load.failures.get("oversized"), load.examples("oversized")))
    for kind, st in sorted(load.held.items()):
        closed = st["closed_by_server"]
        print(f"{kind:<9} {st['opened']} opened ({st['connect_failed']} failed to connect; reopened when closed): "
              f"{len(closed)} closed by the server"
              + (f" after {min(closed):.1f}-{max(closed):.1f} s (median {pct(closed, 0.5):.1f} s)" if closed else "")
              + f", {st['held_to_end']} open at the end (oldest {max(st['ages'], default=0):.0f} s)")
        limit = a.require_body_timeout if kind == "slow-body" else a.require_idle_timeout
        if limit is not None:
            too_long = [x for x in st["ages"] + closed if x > limit]
            checks.append((f"{kind} connections closed by the server within {limit:.0f} s",
                           not too_long, [f"{len(too_long)} held for up to {max(too_long, default=0):.0f} s"]))
        if st["connect_failed"]:
            checks.append((f"{kind} connections accepted", False, load.examples(f"connect ({kind})")))
    if load.rss:
        print(f"server   RSS {load.rss[0]:.0f} MiB at the start, peak {max(load.rss):.0f}, end {load.rss[-1]:.0f}; "
              f"open fds peak {max(load.fds, default=0)}")
    print("metrics  " + ", ".join(f"{k} {v}" for k, v in re.findall(r"^(rollbox_\w+) (\S+)", final["metrics"][1], re.M)))
    server_ok = (alive and final["healthz"][0] == "200" and final["episodes"][1] is True and final["metrics"][0] == "200")
    checks.append(("the server is alive and answers /healthz, /v1/episodes and /metrics after the load", server_ok,
                   [f"alive {alive}, healthz {final['healthz'][0]}, episodes {final['episodes']}, metrics {final['metrics'][0]}"]))
    for k in ("drain", "client error"):
        if load.failures.get(k):
            checks.append((f"load generator: {k}", False, load.examples(k)))
    print("checks")
    bad = False
    for name, ok, examples in checks:
        print(f"  {'PASS' if ok else 'FAIL'} {name}")
        if not ok:
            bad = True
            for e in (examples or [])[:12]:
                print(f"         {e}")
            if len(examples or []) > 12:
                print(f"         ... and {len(examples) - 12} more kinds")
    print(f"result   {'FAIL' if bad else 'PASS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
