"""How many streamed tokens/s the load client times correctly, in one process and in several.

A local SSE server (asyncio, in its own processes, ``--server-processes`` of them on one port)
streams every completion at a known pace: one token every ``--itl-ms`` milliseconds. The client
replays Poisson loads at rising rates; for each, the script prints what the client measured —
ITL p50/p95 (the truth is ``--itl-ms``), the event loop's lag p99, how late requests went out —
with one client process (the baseline) and with ``--processes`` (the sharded client), plus the
ratio of their ITL p95 errors. A client that keeps up reports ITLs near ``--itl-ms``; one that
falls behind reads chunks in bursts (ITL p50 near 0, p95 far above the pace).

    PYTHONPATH=. python benchmarks/client_capacity.py                      # defaults
    PYTHONPATH=. python benchmarks/client_capacity.py --rates 50,100,200 --processes 4

Only 127.0.0.1 is contacted; every load is bounded by ``--window-s`` of arrivals.
On a small machine the server and the clients share the cores, so the figures say where this
machine's client saturates, not the client's capacity on a serving host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import socket
import time
from typing import Any

import httpx
import numpy as np

from objectives.llm.client_pool import run_load_sharded
from objectives.llm.metrics import summarize
from objectives.llm.requests import RequestSpec


def _chunk(i: int) -> bytes:
    return f"data: {json.dumps({'choices': [{'index': 0, 'text': f't{i} '}]})}\n\n".encode()


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     itl_s: float) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = json.loads(await reader.readexactly(length)) if length else {}
        if head.startswith(b"GET"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            return
        n = int(body.get("max_tokens", 16))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\n")
        start = time.perf_counter()
        for i in range(n):  # paced against the start, so a late wake-up does not add up
            delay = start + i * itl_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(_chunk(i))
            await writer.drain()
        usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n}}
        writer.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _server_process(sock: socket.socket, itl_s: float) -> None:
    async def main() -> None:
        server = await asyncio.start_server(
            lambda r, w: _serve_one(r, w, itl_s), sock=sock, backlog=4096)
        async with server:
            await server.serve_forever()
    asyncio.run(main())


def _requests(rate: float, window_s: float, output_len: int, seed: int) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    n = max(1, round(rate * window_s))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n)) - 1.0 / rate
    return [RequestSpec(index=i, arrival_s=float(a), prompt_token_ids=(5, 6, 7),
                        output_len=output_len) for i, a in enumerate(arrivals)]


def _measure(url: str, requests: list[RequestSpec], processes: int) -> dict[str, Any]:
    result = run_load_sharded(url, "m", requests, processes=processes, timeout_s=120.0)
    metrics = summarize(result.records, duration_s=result.duration_s)
    lag = np.asarray(result.loop_lag_s) * 1e3 if result.loop_lag_s else np.zeros(1)
    late = max((r.sent_s - r.scheduled_s for r in result.records if r.sent_s is not None),
               default=0.0)
    return {"itl_p50": metrics.get("itl_p50_ms", float("nan")),
            "itl_p95": metrics.get("itl_p95_ms", float("nan")),
            "tok_s": metrics["output_tokens_per_s"], "failed": metrics["failed_requests"],
            "lag_p99": float(np.percentile(lag, 99)), "late_ms": late * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="20,50,100,200", help="Poisson rates, requests/s")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--itl-ms", type=float, default=10.0, help="the server's token pace")
    parser.add_argument("--window-s", type=float, default=4.0, help="seconds of arrivals")
    parser.add_argument("--processes", type=int, default=2, help="the sharded client's size")
    parser.add_argument("--server-processes", type=int, default=2)
    args = parser.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    ctx = multiprocessing.get_context("fork")  # the children only serve the inherited socket
    servers = [ctx.Process(target=_server_process, args=(sock, args.itl_ms / 1e3), daemon=True)
               for _ in range(args.server_processes)]
    for proc in servers:
        proc.start()
    try:
        for _ in range(100):
            try:
                httpx.get(url + "/health", timeout=1.0, trust_env=False)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}, httpx {httpx.__version__}; server pace "
              f"{args.itl_ms:g} ms/token in {args.server_processes} processes; "
              f"{args.output_len} tokens per request; {args.window_s:g} s of arrivals per load")
        print(f"{'rate':>6} {'offered tok/s':>13} {'procs':>5} {'tok/s':>8} {'ITL p50':>8} "
              f"{'ITL p95':>8} {'loop lag p99':>12} {'max late ms':>11}")
        for rate in [float(x) for x in args.rates.split(",")]:
            requests = _requests(rate, args.window_s, args.output_len, seed=int(rate))
            offered = rate * args.output_len
            errors = {}
            for procs in (1, args.processes):
                m = _measure(url, requests, procs)
                errors[procs] = abs(m["itl_p95"] - args.itl_ms)
                print(f"{rate:>6g} {offered:>13,.0f} {procs:>5} {m['tok_s']:>8,.0f} "
                      f"{m['itl_p50']:>8.2f} {m['itl_p95']:>8.2f} {m['lag_p99']:>12.2f} "
                      f"{m['late_ms']:>11.1f}" + (f"  ({m['failed']:.0f} failed)"
                                                   if m["failed"] else ""))
            ratio = errors[1] / errors[args.processes] if errors[args.processes] else float("inf")
            print(f"{'':>6} ITL p95 error vs the {args.itl_ms:g} ms pace: 1 process "
                  f"{errors[1]:.2f} ms, {args.processes} processes "
                  f"{errors[args.processes]:.2f} ms (ratio {ratio:.1f}x)")
    finally:
        for proc in servers:
            proc.terminate()
            proc.join(timeout=5)


if __name__ == "__main__":
    main()
