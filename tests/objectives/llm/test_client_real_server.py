"""The load client against a real OpenAI-compatible server: ``transformers serve`` on this CPU,
serving a random-weight tiny-llama from a local directory (no hub access).

Needs ``transformers[serving]`` (fastapi, uvicorn, openai, accelerate). The server streams
``/v1/completions`` and ``/v1/chat/completions`` with usage in the last chunk; it has no
``ignore_eos``, so EOS (and the other special ids) are suppressed through its per-request
``generation_config`` to get exact output lengths.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from objectives.llm.client import Endpoint, run_load
from objectives.llm.client_pool import run_load_sharded
from objectives.llm.metrics import per_request, summarize
from objectives.llm.models import MODEL_SHAPES, N_SPECIAL_TOKENS, write_model_dir
from objectives.llm.workload import LLMWorkloadSpec, generate_requests, max_concurrency

START_TIMEOUT_S = 90.0
# Greedy, and no special token may be generated: every request runs to its max_tokens.
NO_EOS = {"generation_config": json.dumps(
    {"do_sample": False, "suppress_tokens": list(range(N_SPECIAL_TOKENS))})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tiny_model_dir(directory: Path) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    write_model_dir("tiny-llama", directory)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory)).save_pretrained(
        directory)
    return directory


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"transformers serve exited with {proc.returncode}:\n"
                        f"{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0, trust_env=False).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    pytest.fail(f"transformers serve not healthy after {START_TIMEOUT_S} s:\n"
                f"{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base_url, model name) of a running ``transformers serve``; stopped at module end."""
    root = tmp_path_factory.mktemp("transformers-serve")
    model = tiny_model_dir(root / "tiny-llama")
    port = free_port()
    log = root / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model),
           "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log)
        yield url, str(model)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.parametrize("endpoint,n", [("completions", 6), ("chat", 2)])
def test_run_load_against_transformers_serve(server: tuple[str, str], endpoint: Endpoint,
                                             n: int) -> None:
    base_url, model = server
    spec = LLMWorkloadSpec.from_params({
        "model": "tiny-llama", "n_requests": n, "seed": 3,
        "arrival": {"process": "poisson", "rate_rps": 10.0, "max_concurrency": 3},
        "prompt_len": {"dist": "uniform", "low": 8, "high": 24},
        "output_len": {"dist": "uniform", "low": 4, "high": 12},
    })
    requests = generate_requests(spec, MODEL_SHAPES["tiny-llama"]["vocab_size"])
    result = run_load(base_url, model, requests, max_concurrency=max_concurrency(spec),
                      endpoint=endpoint, extra_body=NO_EOS, timeout_s=60.0)
    assert len(result.records) == n
    for req, rec in zip(requests, result.records, strict=True):
        assert rec.ok, rec.error
        assert rec.output_tokens == req.output_len  # from the server's usage report
        times = rec.chunk_times_s
        assert all(b > a for a, b in itertools.pairwise(times))
        assert rec.sent_s is not None and rec.sent_s >= req.arrival_s
        p = per_request(rec)
        assert 0 < p.ttft_s <= p.e2e_s
        assert p.tpot_s is not None and p.tpot_s > 0
    metrics = summarize(result.records, duration_s=result.duration_s)
    assert metrics["failed_requests"] == 0
    assert metrics["requests_per_s"] == pytest.approx(n / result.duration_s)
    assert metrics["output_tokens_per_s"] == pytest.approx(
        sum(r.output_len for r in requests) / result.duration_s)


def test_sharded_client_against_transformers_serve(server: tuple[str, str]) -> None:
    """Two client processes share one schedule against the real server: every request is sent on
    time (one time zero across processes) and timed as the single-process client times it."""
    base_url, model = server
    spec = LLMWorkloadSpec.from_params({
        "model": "tiny-llama", "n_requests": 6, "seed": 5,
        "arrival": {"process": "poisson", "rate_rps": 8.0},
        "prompt_len": {"dist": "uniform", "low": 8, "high": 16},
        "output_len": {"dist": "uniform", "low": 4, "high": 8},
    })
    requests = generate_requests(spec, MODEL_SHAPES["tiny-llama"]["vocab_size"])
    result = run_load_sharded(base_url, model, requests, processes=2, extra_body=NO_EOS,
                              timeout_s=60.0)
    assert [r.index for r in result.records] == [r.index for r in requests]
    for req, rec in zip(requests, result.records, strict=True):
        assert rec.ok, rec.error
        assert rec.output_tokens == req.output_len
        assert rec.sent_s is not None and 0 <= rec.sent_s - req.arrival_s < 0.5
        p = per_request(rec)
        assert 0 < p.ttft_s <= p.e2e_s
    assert result.loop_lag_s  # both workers sampled their event loops
