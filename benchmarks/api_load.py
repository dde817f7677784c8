"""Latency and throughput of the REST service under a bounded load from a second process.

Starts ``advisor serve`` on 127.0.0.1 (a free port, a temporary SQLite store seeded with the
shipped knowledge, no worker), then drives each endpoint with a fixed number of concurrent
keep-alive clients from this process, bounded by a request count and a time limit, and prints
p50/p99 latency and requests/s per endpoint, with ``/healthz`` measured in the same run as the
baseline. Only localhost is contacted.

    python benchmarks/api_load.py --requests 5000 --concurrency 8 --out benchmarks/out/api.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[1]

RECOMMENDATION = {"target": "vllm", "slo": "tpot_p95_ms<=40",
                  "hardware": "h200", "model": "llama-3-8b", "workload": {"rate_rps": 60}}
KNOB_VALUE = {"target": "vllm", "knob": "max_num_seqs", "hardware": "h200",
              "model": "llama-3-8b", "workload_class": "chat", "tier": "throughput"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp / 'advisor.db'}",
           "ADVISOR_CACHE_DIR": str(tmp / "cache"),
           "ADVISOR_API_KEY": secrets.token_urlsafe(24), "PYTHONPATH": str(ROOT)}
    env.pop("ADVISOR_EXTRA_TARGETS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--no-worker", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=(tmp / "serve.log").open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"advisor serve did not start:\n{(tmp / 'serve.log').read_text()}")


class _Conn:
    """One keep-alive HTTP/1.1 connection with a minimal client (a heavy client would put its
    own overhead into the latencies and steal the CPU the server needs)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> _Conn:
        conn = cls(*await asyncio.open_connection("127.0.0.1", port))
        conn.port = port
        return conn

    port = 0

    async def request(self, raw: bytes) -> int:
        self.writer.write(raw)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:  # the server closed an idle keep-alive connection
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writer.write(raw)
            head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length:
            await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


def _raw_request(method: str, path: str, port: int, body: Any = None,
                 params: dict[str, str] | None = None) -> bytes:
    if params:
        path += "?" + urlencode(params)
    payload = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Length: {len(payload)}\r\n")
    if body is not None:
        head += "Content-Type: application/json\r\n"
    return (head + "\r\n").encode() + payload


async def drive(port: int, method: str, path: str, *, body: Any = None,
                params: dict[str, str] | None = None, n: int, concurrency: int,
                max_s: float, warmup: int) -> dict[str, Any]:
    """``n`` requests (at most ``max_s`` seconds) over ``concurrency`` keep-alive connections,
    each sending its next request when the previous answer arrived (closed loop)."""
    raw = _raw_request(method, path, port, body, params)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    conns = [await _Conn.open(port) for _ in range(concurrency)]
    for i in range(warmup):
        await conns[i % concurrency].request(raw)
    remaining = n
    stop_at = time.monotonic() + max_s

    async def worker(conn: _Conn) -> None:
        nonlocal remaining
        while remaining > 0 and time.monotonic() < stop_at:
            remaining -= 1
            t0 = time.perf_counter()
            code = await conn.request(raw)
            latencies.append(time.perf_counter() - t0)
            statuses[code] = statuses.get(code, 0) + 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"method": method, "path": path, "requests": len(latencies), "seconds": elapsed,
            "requests_per_s": len(latencies) / elapsed, "p50_ms": q[49] * 1e3,
            "p99_ms": q[98] * 1e3, "mean_ms": statistics.fmean(latencies) * 1e3,
            "max_ms": latencies[-1] * 1e3, "statuses": statuses, "concurrency": concurrency}


async def drive_at_rate(port: int, method: str, path: str, *, rate: float, n: int,
                        max_s: float, body: Any = None, params: dict[str, str] | None = None,
                        pool: int = 16) -> dict[str, Any]:
    """Open loop: request ``i`` is due at ``start + i / rate`` whatever the server's pace, and
    its latency counts from that due time (queueing included, no coordinated omission)."""
    raw = _raw_request(method, path, port, body, params)
    free: asyncio.Queue[_Conn] = asyncio.Queue()
    conns = [await _Conn.open(port) for _ in range(pool)]
    for c in conns:
        await c.request(raw)  # warm each connection
        free.put_nowait(c)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    n = min(n, int(rate * max_s))

    async def one(due: float) -> None:
        conn = await free.get()
        code = await conn.request(raw)
        latencies.append(time.perf_counter() - due)
        statuses[code] = statuses.get(code, 0) + 1
        free.put_nowait(conn)

    tasks = []
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        if (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"method": method, "path": path, "mode": f"open loop at {rate:g} req/s",
            "requests": len(latencies), "seconds": elapsed,
            "requests_per_s": len(latencies) / elapsed, "p50_ms": q[49] * 1e3,
            "p99_ms": q[98] * 1e3, "mean_ms": statistics.fmean(latencies) * 1e3,
            "max_ms": latencies[-1] * 1e3, "statuses": statuses}


async def drive_distinct(port: int, n: int) -> dict[str, Any]:
    """``n`` different recommendation questions, one at a time: every one misses the answer
    cache, so this is the cost of answering from the models (the ``predict`` path)."""
    conn = await _Conn.open(port)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    start = time.perf_counter()
    for i in range(n):
        body = {**RECOMMENDATION, "slo": f"tpot_p95_ms<={40 + (i + 1) * 0.01:.2f}"}
        t0 = time.perf_counter()
        code = await conn.request(_raw_request("POST", "/v1/recommendations", port, body))
        latencies.append(time.perf_counter() - t0)
        statuses[code] = statuses.get(code, 0) + 1
    elapsed = time.perf_counter() - start
    conn.close()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"method": "POST", "path": "/v1/recommendations",
            "mode": "distinct questions, 1 conn", "requests": n, "seconds": elapsed,
            "requests_per_s": n / elapsed, "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
            "mean_ms": statistics.fmean(latencies) * 1e3, "max_ms": latencies[-1] * 1e3,
            "statuses": statuses}


def server_side(metrics_text: str) -> dict[str, dict[str, float]]:
    """Per route, the share of requests the server itself answered within each histogram bucket
    (time inside the app, from the service's own /metrics): what the client-side tail owes to
    the machine rather than to the endpoint."""
    buckets: dict[str, dict[str, float]] = {}
    counts: dict[str, float] = {}
    for line in metrics_text.splitlines():
        m = re.match(r'advisor_http_request_duration_seconds_(bucket|count)\{(.*)\} (\S+)$', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2]))
        route = f"{labels['method']} {labels['route']}"
        if m[1] == "count":
            counts[route] = float(m[3])
        elif labels["le"] in ("0.001", "0.0025", "0.005", "0.05"):
            buckets.setdefault(route, {})[f"<= {float(labels['le']) * 1e3:g} ms"] = float(m[3])
    return {route: {le: n / counts[route] for le, n in b.items()}
            for route, b in buckets.items() if counts.get(route)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000, help="per endpoint (upper bound)")
    ap.add_argument("--max-seconds", type=float, default=30.0, help="per endpoint (upper bound)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--distinct", type=int, default=20,
                    help="recommendation questions that all miss the answer cache")
    ap.add_argument("--rate", type=float, default=500.0,
                    help="offered load of the open-loop run, requests/s")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = ap.parse_args()
    uncached: dict[str, Any] = {}
    if not 1 <= args.requests <= 100_000 or not 0 < args.max_seconds <= 300:
        raise SystemExit("--requests must be 1..100000 and --max-seconds 0..300")
    with tempfile.TemporaryDirectory(prefix="advisor-api-bench-") as tmpdir:
        tmp, port = Path(tmpdir), _free_port()
        proc = start_server(tmp, port)
        base = f"http://127.0.0.1:{port}"
        try:
            check = httpx.post(f"{base}/v1/recommendations", json=RECOMMENDATION).json()
            value = httpx.get(f"{base}/v1/cheatsheet/value", params=KNOB_VALUE).json()
            endpoints: list[tuple[str, str, dict[str, Any]]] = [
                ("GET", "/healthz", {}),
                ("POST", "/v1/recommendations", {"body": RECOMMENDATION}),
                ("GET", "/v1/cheatsheet/value", {"params": KNOB_VALUE}),
            ]
            results = []
            for method, path, req in endpoints:
                closed = asyncio.run(drive(port, method, path, n=args.requests,
                                           concurrency=args.concurrency,
                                           max_s=args.max_seconds, warmup=args.warmup, **req))
                closed["mode"] = f"closed loop, {args.concurrency} connections"
                results.append(closed)
                if closed["requests_per_s"] < args.rate:
                    print(f"{method} {path}: {closed['requests_per_s']:.0f} req/s at most, below "
                          f"--rate {args.rate:g}: no open-loop run")
                    continue
                results.append(asyncio.run(drive_at_rate(
                    port, method, path, rate=args.rate, n=args.requests,
                    max_s=args.max_seconds, **req)))
            if args.distinct >= 2:
                uncached = asyncio.run(drive_distinct(port, args.distinct))
            inside = server_side(httpx.get(f"{base}/metrics").text)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    base = {r["mode"]: r["p50_ms"] for r in results if r["path"] == "/healthz"}
    results = [r for r in results if r["mode"] in base]
    if args.distinct >= 2:
        base[uncached["mode"]] = base[results[0]["mode"]]
        results.append(uncached)
    print(f"{'endpoint':28} {'mode':28} {'n':>6} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'p50/healthz':>11}  statuses")
    for r in results:
        print(f"{r['method'] + ' ' + r['path']:28} {r['mode']:28} {r['requests']:>6} "
              f"{r['requests_per_s']:>7.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
              f"{r['p50_ms'] / base[r['mode']]:>11.2f}  {r['statuses']}")
    print("\nserver-side (time inside the app, all modes together): share of requests within")
    for route, shares in sorted(inside.items()):
        print(f"  {route:32} " + "  ".join(f"{le}: {v:.2%}" for le, v in shares.items()))
    report = {
        "results": results, "server_side_share_within": inside,
        "recommendation_answer": check, "knob_value_answer": value,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
