"""The llamacpp target against a real ``llama-server`` on the tiny-llama shape: the shared target
contract (a few requests of a few tokens, so each start and measurement takes a second or two on
2 cores), prompts that reach the server with exactly the workload's token lengths, and trials
that fail with llama.cpp's reason: a refused config, a damaged model file (a crash at start), a
server that does not answer in time, and a trial killed mid-measurement that leaves no server."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from advisor.errors import EngineUnavailableError
from advisor.isolation import run_isolated
from objectives import Target, Workload
from objectives.llm.models import prompt_text
from objectives.llm.workload import KIND

if os.environ.get("CI") != "true":  # CI installs the llamacpp extra (quickstart --setup-only)
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
from advisor.testing import TargetContract
from objectives.llm.gguf_quant import quantized_gguf
from objectives.targets.llamacpp_target import COMMAND_ENV, LlamaCppTarget, server_binary

if os.environ.get("CI") != "true":
    try:
        server_binary()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc), allow_module_level=True)


def tiny_workload(**params: object) -> Workload:
    return Workload(KIND, "tiny-contract", {
        "model": "tiny-llama", "n_requests": 6, "warmup_requests": 2, "seed": 0,
        "arrival": {"process": "poisson", "rate_rps": 12.0},
        "prompt_len": {"dist": "uniform", "low": 8, "high": 32}, "output_len": 6, **params,
    })


class TestLlamaCppTarget(TargetContract):
    # Each config starts its own server (about a second for tiny-llama). Quantized KV types never
    # fit tiny-llama's 16-wide heads, so most random configs are refused before a start: with
    # the contract's seed the fourth one runs.
    n_sampled = 4

    @pytest.fixture
    def target(self) -> Target:
        return LlamaCppTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return tiny_workload()


def _servers_on(cache: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "llama-server" in cmdline and str(cache) in cmdline:
            found.append(proc)
    return found


def test_a_trial_measures_exact_prompts_and_records_the_servers_facts(tmp_path: Path) -> None:
    target = LlamaCppTarget()
    workload = tiny_workload()
    cache = tmp_path / "cache"
    target.prepare(workload, cache)
    served = target.load_served(workload, cache)
    # repack off: where the CPU reports AMX but faults on it (a CI VM did), llama.cpp's repacked
    # quantized weights crash at load; that case has its own test below.
    config = {"quant": "Q8_0", "parallel": 2, "threads": 1, "repack": False}
    with target.serve(config, served, cache) as running:
        with httpx.Client(base_url=running.base_url, timeout=30, trust_env=False) as client:
            for request in served.requests[:3]:
                text = prompt_text(request.prompt_token_ids)
                tokens = client.post("/tokenize", json={"content": text}).json()["tokens"]
                assert tokens == list(request.prompt_token_ids)
                body = client.post("/v1/completions", json={
                    "model": served.model.label, "prompt": text, "max_tokens": 5,
                    "temperature": 0, "ignore_eos": True}).json()
                assert body["usage"]["prompt_tokens"] == request.prompt_len
                assert body["usage"]["completion_tokens"] == 5
        metrics, details = target.measure(running, served)
    facts = running.facts
    assert metrics["failed_requests"] == 0 and metrics["output_tokens_per_s"] > 0
    # The server counted exactly the tokens the workload asked for.
    assert details["server_metrics"]["generation_tokens_delta"] == sum(
        r.output_len for r in served.requests)
    # llama-server has no latency histograms; its per-request streamed timings and its decode
    # seconds counter are what the client is checked against.
    assert "decode_seconds_delta" in details["server_metrics"]
    checked = {c["name"] for c in details["validity_checks"]}
    assert {"streamed_tpot_mean_ms", "ttft_mean_over_streamed_prompt_ms", "decode_total_ms",
            "output_tokens"} <= checked
    # (A loaded machine may make the client lag: client_bound is the gate doing its job.)
    assert details["validity"] not in ("unchecked", "server_disagrees"), details["validity_reasons"]
    argv = facts["argv"]
    assert argv[argv.index("--parallel") + 1] == "2" and "Q8_0" in facts["gguf"]
    assert facts["slots"] == 2 and facts["ctx_per_slot"] == 4096  # kv_unified: the whole pool
    assert details["gguf_file_type"] == "Q8_0" and details["model_ctx_train"] == 4096
    # What the quantization did: the weights' bytes, bits per weight (Q8_0: 8.5 in its blocks,
    # more with the f32 norms of so small a model) and the server's peak resident memory.
    assert metrics["weights_mb"] == pytest.approx(details["model_bytes"] / 2**20)
    assert 8.5 <= metrics["bits_per_weight"] < 16
    assert metrics["peak_memory_mb"] > metrics["weights_mb"]
    assert details["llama_cpp_build"]
    assert set(facts["gguf_tensor_types"]) == {"f32", "q8_0"}  # 64-wide rows fit Q8_0's blocks
    assert _servers_on(cache) == []  # stopped with its process group


def test_quantized_files_are_made_once_per_shape_and_type(tmp_path: Path) -> None:
    model_dir = tmp_path / "models" / "tiny-llama"
    first = quantized_gguf(model_dir, "tiny-llama", "Q4_0")
    again = quantized_gguf(model_dir, "tiny-llama", "Q4_0")
    source = quantized_gguf(model_dir, "tiny-llama", "F16")
    assert not first.cached and again.cached and again.path == first.path
    assert source.cached and source.path != first.path
    assert first.path.stat().st_size < source.path.stat().st_size
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_refused_config_is_a_failed_trial_with_the_reason(tmp_path: Path) -> None:
    outcome = run_isolated("llamacpp", {"cache_type_k": "q8_0"}, tiny_workload(),
                           tmp_path / "cache", timeout_s=60)
    assert not outcome.ok and outcome.error_type == "rejected"
    assert "head dimension 16" in (outcome.reason or "")


def test_the_servers_own_argument_refusal_is_a_rejected_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMMAND_ENV, json.dumps([str(server_binary()), "--no-such-flag"]))
    outcome = run_isolated("llamacpp", {}, tiny_workload(), tmp_path / "cache", timeout_s=60)
    assert not outcome.ok and outcome.error_type == "rejected", outcome.reason
    assert "invalid argument: --no-such-flag" in (outcome.reason or "")


def _crashing_with(flag: str) -> list[str]:
    """A stand-in server command: dies by SIGILL when its argv holds ``flag``, else is the real
    ``llama-server`` with the same arguments (a host whose CPU faults on repacked weights)."""
    script = ("import os, signal, sys\n"
              f"if {flag!r} in sys.argv[2:]: os.kill(os.getpid(), signal.SIGILL)\n"
              "os.execv(sys.argv[1], sys.argv[1:])\n")
    return [sys.executable, "-c", script, str(server_binary())]


def test_a_crash_that_repack_off_avoids_is_a_rejected_config_with_the_evidence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMMAND_ENV, json.dumps(_crashing_with("--repack")))
    cache = tmp_path / "cache"
    outcome = run_isolated("llamacpp", {"quant": "Q8_0", "repack": True}, tiny_workload(),
                           cache, timeout_s=60)
    assert not outcome.ok and outcome.error_type == "rejected", outcome.reason
    assert "crashed (SIGILL) loading Q8_0 weights with repack on" in (outcome.reason or "")
    assert "repack off started" in (outcome.reason or "")
    # Unquantized weights have nothing to repack: the same crash is the engine's failure.
    outcome = run_isolated("llamacpp", {"quant": "F16", "repack": True}, tiny_workload(),
                           cache, timeout_s=60)
    assert not outcome.ok and outcome.error_type == "engine_start", outcome.reason
    # A crash with repack off too is not repacking's doing.
    monkeypatch.setenv(COMMAND_ENV, json.dumps(_crashing_with("--model")))
    outcome = run_isolated("llamacpp", {"quant": "Q8_0", "repack": True}, tiny_workload(),
                           cache, timeout_s=60)
    assert not outcome.ok and outcome.error_type == "engine_start", outcome.reason
    assert _servers_on(cache) == []


def test_a_damaged_model_file_fails_the_start_with_llamas_reason(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    LlamaCppTarget().prepare(tiny_workload(), cache)
    damaged = quantized_gguf(cache / "models" / "tiny-llama", "tiny-llama", "Q8_0").path
    with damaged.open("r+b") as f:  # keep the header, lose most tensor data
        f.truncate(damaged.stat().st_size // 2)
    outcome = run_isolated("llamacpp", {"quant": "Q8_0"}, tiny_workload(), cache, timeout_s=60)
    assert not outcome.ok and outcome.error_type == "engine_start"
    reason = outcome.reason or ""
    assert reason.startswith("llama.cpp failed to start") or "exited with" in reason, reason
    assert "llama-server exited with exit code" in reason
    assert _servers_on(cache) == []


def test_a_server_that_does_not_answer_in_time_is_a_failed_trial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # tiny-llama's server is up in tens of milliseconds, so the hang is a stand-in that takes the
    # trial's argv and never listens (the target's start-up timeout and stop are what is tested).
    hang = [sys.executable, "-c", "import time; time.sleep(600)"]
    monkeypatch.setenv(COMMAND_ENV, json.dumps(hang))
    outcome = run_isolated("llamacpp", {}, tiny_workload(startup_timeout_s=1.0),
                           tmp_path / "cache", timeout_s=60)
    assert not outcome.ok and outcome.error_type == "engine_start"
    assert "did not answer 200" in (outcome.reason or "")
    leftovers = [p for p in psutil.process_iter(["cmdline"])
                 if "time.sleep(600)" in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []


def test_a_trial_killed_mid_measurement_leaves_no_server(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    LlamaCppTarget().prepare(tiny_workload(), cache)
    slow = tiny_workload(n_requests=400, arrival={"process": "poisson", "rate_rps": 4.0})
    outcome = run_isolated("llamacpp", {}, slow, cache, timeout_s=6)
    assert not outcome.ok and outcome.error_type == "timeout"
    assert _servers_on(cache) == []
