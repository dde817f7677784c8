"""``vllm bench serve`` as the reference harness of ``advisor crosscheck``.

vLLM's own benchmark client (vllm/benchmarks/serve.py in vLLM 0.26) replays the workload's exact
requests from a ShareGPT file (``--dataset-name sharegpt --disable-shuffle``: prompts in order,
each request's output length taken from its completion, ``--ignore-eos`` so every request makes
exactly that many tokens, ``--temperature 0`` as the advisor's client asks), on its own Poisson
arrivals at the same rate (``--request-rate``, ``--seed``), without its ready check or warm-up
(the advisor has warmed the server). ``--save-result --save-detailed`` writes its summary and
per-request timings, which come back as a :class:`~objectives.llm.reference.ReferenceRun`.

Its ShareGPT loader drops prompts under 4 or over 1,024 tokens and requests over 2,048 tokens in
all (``is_valid_sequence``): :data:`SHAREGPT_LIMITS`. The command runs as a subprocess (vLLM is
never imported here); ``ADVISOR_VLLM_BENCH_COMMAND`` (a JSON list) replaces its prefix.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.errors import EngineUnavailableError
from objectives.llm.reference import (
    LengthLimits,
    ReferenceRun,
    records_from_timings,
    sharegpt_dataset,
)
from objectives.llm.requests import RequestSpec

__all__ = ["BENCH_COMMAND_ENV", "SHAREGPT_LIMITS", "VllmBenchServe", "summary_from_result"]

BENCH_COMMAND_ENV = "ADVISOR_VLLM_BENCH_COMMAND"
SHAREGPT_LIMITS = LengthLimits(min_len=4, max_prompt_len=1024, max_total_len=2048)
PERCENTILES = (50, 90, 95, 99)
#: vllm bench serve's result keys -> the advisor's metric families.
_FAMILIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
_LOG_TAIL_CHARS = 3000
_DONE = "ADVISOR-BENCH-DONE "
#: The worker: imports vLLM's benchmark once, then runs `vllm bench serve` once per stdin line
#: (a JSON list of its arguments) and reports each run's outcome on a line of its own.
_WORKER = f"""
import json, sys, traceback
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
print({_DONE!r} + json.dumps({{"ready": True}}), flush=True)
for line in sys.stdin:
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    try:
        main(parser.parse_args(json.loads(line)))
        outcome = {{"ok": True}}
    except BaseException:
        outcome = {{"ok": False, "error": traceback.format_exc()[-3000:]}}
    print({_DONE!r} + json.dumps(outcome), flush=True)
"""


def summary_from_result(result: Mapping[str, Any]) -> dict[str, float]:
    """vllm bench serve's result JSON in the advisor's metric names (``ttft_p95_ms``, ...,
    ``output_tokens_per_s``, ``requests_per_s``, ``failed_requests``)."""
    out: dict[str, float] = {}
    for theirs, ours in _FAMILIES.items():
        for q in PERCENTILES:
            if (value := result.get(f"p{q}_{theirs}_ms")) is not None:
                out[f"{ours}_p{q}_ms"] = float(value)
        if (value := result.get(f"mean_{theirs}_ms")) is not None:
            out[f"{ours}_mean_ms"] = float(value)
    for key, ours in (("output_throughput", "output_tokens_per_s"),
                      ("request_throughput", "requests_per_s"), ("failed", "failed_requests"),
                      ("completed", "completed_requests")):
        if result.get(key) is not None:
            out[ours] = float(result[key])
    return out


class VllmBenchServe:
    """The reference harness ``vllm bench serve`` (see the module docstring)."""

    def __init__(self) -> None:
        self.name = "vllm bench serve"
        self.limits = SHAREGPT_LIMITS
        self._worker: subprocess.Popen[str] | None = None
        self._output: list[str] = []

    def command(self, env: Mapping[str, str] | None = None) -> list[str] | None:
        """The per-run command prefix from ``ADVISOR_VLLM_BENCH_COMMAND``, or None: the worker."""
        raw = (os.environ if env is None else env).get(BENCH_COMMAND_ENV)
        if not raw:
            return None
        try:
            command = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EngineUnavailableError(f"{BENCH_COMMAND_ENV} must be a JSON list of "
                                         f"strings: {exc}") from None
        if not isinstance(command, list) or not command or not all(
                isinstance(part, str) and part for part in command):
            raise EngineUnavailableError(f"{BENCH_COMMAND_ENV} must be a non-empty JSON list "
                                         f"of strings, got {raw!r}")
        return command

    def unavailable_reason(self) -> str | None:
        try:
            if self.command() is not None:
                return None
        except EngineUnavailableError as exc:
            return str(exc)
        if importlib.util.find_spec("vllm") is None:
            return (f"{self.name} needs vLLM importable here (or {BENCH_COMMAND_ENV}); on the "
                    "project's H200 use the vLLM payload (docs/engines.md)")
        return None

    @staticmethod
    def arguments(*, base_url: str, served_model: str, tokenizer: Path, dataset: Path,
                  n_requests: int, rate_rps: float, seed: int, result_dir: Path) -> list[str]:
        """``vllm bench serve``'s arguments for one run."""
        return ["--backend", "vllm", "--base-url", base_url.rstrip("/"),
                "--endpoint", "/v1/completions", "--model", served_model,
                "--tokenizer", str(tokenizer), "--dataset-name", "sharegpt",
                "--dataset-path", str(dataset), "--disable-shuffle",
                "--num-prompts", str(n_requests), "--request-rate", f"{rate_rps:g}",
                "--seed", str(seed), "--ignore-eos", "--temperature", "0",
                "--percentile-metrics", "ttft,tpot,itl,e2el",
                "--metric-percentiles", ",".join(map(str, PERCENTILES)),
                "--save-result", "--save-detailed", "--result-dir", str(result_dir),
                "--result-filename", "result.json", "--disable-tqdm"]

    def run(self, *, base_url: str, served_model: str, tokenizer: Path,
            requests: Sequence[RequestSpec], rate_rps: float, seed: int, workdir: Path,
            timeout_s: float) -> ReferenceRun:
        refused = [r.index for r in requests if not self.limits.accepts(r)]
        if refused:
            raise ValueError(f"{self.name} would drop requests {refused[:5]} (lengths outside "
                             f"{self.limits}); clamp the workload first")
        workdir.mkdir(parents=True, exist_ok=True)
        dataset = workdir / "sharegpt.json"
        dataset.write_text(json.dumps(sharegpt_dataset(requests)))
        result_path = workdir / "result.json"
        result_path.unlink(missing_ok=True)
        args = self.arguments(base_url=base_url, served_model=served_model, tokenizer=tokenizer,
                              dataset=dataset, n_requests=len(requests), rate_rps=rate_rps,
                              seed=seed, result_dir=workdir)
        started = time.perf_counter()
        command = self.command()
        if command is None:
            self._run_in_worker(args, timeout_s)
        else:
            self._run_once([*command, *args], timeout_s)
        duration = time.perf_counter() - started
        if not result_path.is_file():
            raise RuntimeError(f"{self.name} wrote no result file")
        result = json.loads(result_path.read_text())
        n = len(requests)
        records = records_from_timings(
            requests, start_s=result.get("start_times") or [0.0] * n,
            ttft_s=result.get("ttfts") or [0.0] * n, itl_s=result.get("itls") or [[]] * n,
            output_tokens=result.get("output_lens") or [0] * n,
            errors=result.get("errors") or [None] * n)
        keep = {k: v for k, v in result.items() if not isinstance(v, list)}
        return ReferenceRun(self.name, ["vllm", "bench", "serve", *args],
                            summary_from_result(result), records, duration, keep)

    def close(self) -> None:
        """Stop the worker process, if one was started."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        with contextlib.suppress(OSError):
            if worker.stdin:
                worker.stdin.close()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()

    # -- internals --------------------------------------------------------------------------------

    @staticmethod
    def _env() -> dict[str, str]:
        return {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}

    def _run_once(self, argv: list[str], timeout_s: float) -> None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                  env=self._env(), check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{self.name} did not finish within {timeout_s:g} s") from None
        except OSError as exc:
            raise RuntimeError(f"cannot run {self.name}: {exc}") from None
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-_LOG_TAIL_CHARS:]
            raise RuntimeError(f"{self.name} exited with code {done.returncode}:\n{tail}")

    def _start_worker(self) -> subprocess.Popen[str]:
        worker = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=self._env(), bufsize=1)
        self._worker = worker
        self._await_outcome(worker, 300.0)  # the import
        return worker

    def _await_outcome(self, worker: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
        """Read the worker's output until its next outcome line (its other output is kept for
        error messages); a hung or dead worker is stopped and reported."""
        assert worker.stdout is not None
        found: list[dict[str, Any]] = []
        lines = self._output

        def read() -> None:
            assert worker.stdout is not None
            for line in worker.stdout:
                if line.startswith(_DONE):
                    found.append(json.loads(line[len(_DONE):]))
                    return
                lines.append(line)
                del lines[:-60]

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not found:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            self._worker = None
            tail = "".join(lines)[-_LOG_TAIL_CHARS:]
            raise RuntimeError(f"{self.name} did not report within {timeout_s:g} s or died "
                               f"(exit code {worker.poll()}):\n{tail}")
        return found[0]

    def _run_in_worker(self, args: list[str], timeout_s: float) -> None:
        worker = self._worker if self._worker is not None and self._worker.poll() is None \
            else self._start_worker()
        assert worker.stdin is not None
        self._output.clear()
        worker.stdin.write(json.dumps(args) + "\n")
        worker.stdin.flush()
        outcome = self._await_outcome(worker, timeout_s)
        if not outcome.get("ok"):
            tail = "".join(self._output)[-_LOG_TAIL_CHARS // 2:]
            raise RuntimeError(f"{self.name} failed: {outcome.get('error', '')}\n{tail}")
