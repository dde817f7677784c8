"""Benchmark: how soon a fresh store of the shipped knowledge answers its first question, for two
checkouts of the project (``--before`` and ``--after``), interleaved, each run on a fresh store,
cache and shared-model directory of its own:

- ``serve``: ``advisor serve`` started, until ``/readyz`` says 200 and until the first
  ``POST /v1/recommendations`` answers 200 (asked every 0.5 s; 503 while the models are not ready);
- ``recommend``: the first ``advisor recommend`` on a fresh store, start to exit.

Each figure is capped at ``--cap-s`` (a capped run reads ``>cap``). Each checkout runs its own code
(``python -m advisor`` in its root) with this interpreter.

    python benchmarks/first_answer.py --before ../main --after . --rounds 3 --cap-s 240
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

SLO = "p95_latency_ms<=0.25,recall_at_10>=0.95"
RECOMMEND = ["recommend", "--target", "faiss", "--hardware", "cpu", "--slo", SLO]


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp), "ADVISOR_DB_URL": f"sqlite:///{tmp / 'fresh.db'}",
            "ADVISOR_CACHE_DIR": str(tmp / "cache"),
            "ADVISOR_SHARED_MODEL_DIR": str(tmp / "shared")}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(root: Path, cap_s: float) -> dict[str, float | None]:
    """Seconds from the start of ``advisor serve`` to /readyz 200 and to the first answer."""
    with tempfile.TemporaryDirectory(prefix="first-answer-") as tmp:
        port = _port()
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "advisor", "serve", "--port", str(port), "--no-worker",
             "--log-level", "warning"], cwd=root, env=_env(Path(tmp)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        ready = answered = None
        try:
            while time.monotonic() - started < cap_s and (ready is None or answered is None):
                try:
                    if ready is None and httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                        ready = time.monotonic() - started
                    if answered is None and httpx.post(
                            f"{url}/v1/recommendations", timeout=60,
                            json={"target": "faiss", "slo": SLO}).status_code == 200:
                        answered = time.monotonic() - started
                except httpx.TransportError:
                    if proc.poll() is not None:
                        raise SystemExit(f"{root}: serve exited {proc.returncode}") from None
                time.sleep(0.5)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        return {"ready_s": ready, "answered_s": answered}


def recommend(root: Path, cap_s: float) -> dict[str, float | None]:
    """Seconds the first ``advisor recommend`` on a fresh store takes (None past the cap)."""
    with tempfile.TemporaryDirectory(prefix="first-answer-") as tmp:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "advisor", *RECOMMEND], cwd=root,
                                env=_env(Path(tmp)), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=cap_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            return {"recommend_s": None}
        if proc.returncode != 0:
            raise SystemExit(f"{root}: recommend exited {proc.returncode}: {err.decode()[-500:]}")
        return {"recommend_s": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cap-s", type=float, default=240.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    load_at_start = os.getloadavg()
    for n in range(args.rounds):
        for step in (serve, recommend):
            for arm, root in (("before", args.before), ("after", args.after)):
                load_1m = os.getloadavg()[0]  # the machine is shared: what else was running
                result = {"round": n + 1, "arm": arm, "step": step.__name__,
                          **step(root.resolve(), args.cap_s), "load_1m_at_start": load_1m}
                print(json.dumps(result), flush=True)
                runs.append(result)
    report = {"cap_s": args.cap_s, "cpus": len(os.sched_getaffinity(0)),
              "load_avg_at_start": load_at_start, "load_avg_at_end": os.getloadavg(),
              "python": platform.python_version(),
              "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
