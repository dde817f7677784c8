"""The tgi and ollama targets end to end on CPU, against stand-ins for their commands (through
ADVISOR_TGI_COMMAND / ADVISOR_OLLAMA_COMMAND): the real launch reaches the process (argv,
environment, Modelfile, `ollama create`), the trial starts, warms up, measures and stops it, and
a crash, a refusal and an infeasible config become failed trials with their reasons. Neither
engine is installed here; the stand-ins serve fake_openai_server's API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from advisor.isolation import run_isolated
from advisor.testing import TargetContract
from objectives.llm.validity import MAX_LOOP_LAG_P99_MS, MAX_SEND_LATE_P99_MS
from objectives.llm.workload import load_preset
from objectives.target import Target
from objectives.targets import ollama_target, tgi_target
from objectives.targets.ollama_target import OllamaTarget
from objectives.targets.tgi_target import TGITarget
from objectives.workload import Workload

HERE = Path(__file__).parent
FAKE_TGI = HERE / "fake_tgi_launcher.py"
FAKE_OLLAMA = HERE / "fake_ollama.py"
ROOT = Path(__file__).resolve().parents[3]
#: What a trial may be judged when the server's metrics were read (never "unchecked"): a loaded
#: 2-core machine can make the one-process client lag.
CHECKED = {"valid", "frontend_delay", "client_bound", "server_disagrees"}


def small_workload(**target_params: Any) -> Workload:
    return load_preset(
        "chat", model="tiny-llama", n_requests=6, warmup_requests=2,
        arrival={"process": "poisson", "rate_rps": 50.0},
        prompt_len={"dist": "uniform", "low": 8, "high": 32},
        output_len={"dist": "uniform", "low": 4, "high": 12}).with_params(**target_params)


def wrapper(script: Path) -> str:
    return json.dumps([sys.executable, str(script)])


def no_leftovers(script: Path) -> bool:
    return not [p for p in psutil.process_iter(["cmdline"])
                if str(script) in " ".join(p.info["cmdline"] or [])]


def bodies(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line)["body"] for line in record.read_text().splitlines()]


# -- tgi ------------------------------------------------------------------------------------------

@pytest.fixture
def fake_tgi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    paths = {"requests": tmp_path / "requests.jsonl", "launch": tmp_path / "launch.json"}
    monkeypatch.setenv(tgi_target.COMMAND_ENV, wrapper(FAKE_TGI))
    monkeypatch.setenv("FAKE_SERVER_RECORD", str(paths["requests"]))
    monkeypatch.setenv("FAKE_TGI_RECORD", str(paths["launch"]))
    return paths


def test_tgi_target_runs_a_whole_trial(fake_tgi: dict[str, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_BATCH_TOTAL_TOKENS", "7")  # inherited: must not reach TGI
    target = TGITarget()
    target.check_available()  # the wrapper stands in for text-generation-launcher
    config = {"attention": "flashdecoding", "prefill_chunking": False, "max_waiting_tokens": 10}
    m = target.run(config, small_workload(), tmp_path / "cache")
    assert m.metrics["failed_requests"] == 0 and m.metrics["output_tokens_per_s"] > 0
    argv = m.details["argv"]
    assert argv[:2] == [sys.executable, str(FAKE_TGI)]
    model_dir = Path(argv[argv.index("--model-id") + 1])
    assert model_dir.name.startswith("tiny-llama-safetensors-")
    assert (model_dir / "model.safetensors").is_file()
    assert argv[argv.index("--max-waiting-tokens") + 1] == "10"
    assert argv[argv.index("--max-total-tokens") + 1] == "256"
    assert argv[argv.index("--usage-stats") + 1] == "off"
    seen = json.loads(fake_tgi["launch"].read_text())
    assert seen["argv"] == argv[2:]
    assert seen["env"] == {"ATTENTION": "flashdecoding", "PREFILL_CHUNKING": "0",
                           "HF_HUB_OFFLINE": "1"}
    assert m.details["environment"] == {"ATTENTION": "flashdecoding", "PREFILL_CHUNKING": "0"}
    # TGI's own series were scraped and the gate compared them with the client.
    server = m.details["server_metrics"]
    assert server["source"] == "tgi" and server["e2e"]["count"] == 6
    assert server["generation_tokens_delta"] > 0
    assert m.details["validity"] in CHECKED
    assert m.engine_versions == {"tgi": "0.0.0-fake-tgi"}
    assert m.details["engine_info"]["version"] == "0.0.0-fake-tgi"
    assert m.details["attention_resolved"] == "flashinfer"  # what the log says TGI chose
    assert m.details["max_batch_total_tokens_resolved"] == 12345
    assert {b["model"] for b in bodies(fake_tgi["requests"])} == {"tgi"}
    json.dumps(m.to_dict())  # storable


def test_tgi_trial_runs_isolated_and_leaves_no_server(tmp_path: Path) -> None:
    env = {tgi_target.COMMAND_ENV: wrapper(FAKE_TGI)}
    outcome = run_isolated("tgi", {}, small_workload(), tmp_path / "cache", timeout_s=120,
                           env=env)
    assert outcome.ok, outcome.reason
    assert outcome.measurement is not None and outcome.measurement.metrics["requests_per_s"] > 0
    assert no_leftovers(FAKE_TGI)


def test_a_tgi_crash_is_a_failed_trial_with_its_cause(tmp_path: Path) -> None:
    env = {tgi_target.COMMAND_ENV: wrapper(FAKE_TGI),
           "FAKE_SERVER_CRASH": "CUDA error: no kernel image is available"}
    outcome = run_isolated("tgi", {}, small_workload(), tmp_path / "cache", timeout_s=120,
                           env=env)
    assert outcome.status == "failed" and outcome.error_type == "engine_start"
    assert (outcome.reason or "").startswith(
        "TGI failed to start: ValueError: CUDA error: no kernel image is available")
    assert no_leftovers(FAKE_TGI)


def test_a_tgi_argument_refusal_is_a_rejected_config(tmp_path: Path) -> None:
    message = "`max_batch_prefill_tokens` must be >= `max_input_tokens`. Given: 100 and 255"
    env = {tgi_target.COMMAND_ENV: wrapper(FAKE_TGI), "FAKE_TGI_ARGUMENT_ERROR": message}
    outcome = run_isolated("tgi", {}, small_workload(), tmp_path / "cache", timeout_s=120,
                           env=env)
    assert outcome.error_type == "rejected"
    assert outcome.reason == f"TGI rejected the configuration: {message}"


def test_an_infeasible_tgi_config_never_starts_it(tmp_path: Path) -> None:
    launch = tmp_path / "launch.json"
    env = {tgi_target.COMMAND_ENV: wrapper(FAKE_TGI), "FAKE_TGI_RECORD": str(launch)}
    config = {"max_batch_total_tokens_auto": False, "max_batch_total_tokens": 4096,
              "max_batch_prefill_tokens_auto": False, "max_batch_prefill_tokens": 8192}
    outcome = run_isolated("tgi", config, small_workload(), tmp_path / "cache", timeout_s=120,
                           env=env)
    assert outcome.error_type == "rejected"
    assert "must be at most max_batch_total_tokens" in (outcome.reason or "")
    assert not launch.exists()


# -- ollama ---------------------------------------------------------------------------------------

@pytest.fixture
def fake_ollama(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    paths = {"requests": tmp_path / "requests.jsonl", "env": tmp_path / "ollama-env.json"}
    monkeypatch.setenv(ollama_target.COMMAND_ENV, wrapper(FAKE_OLLAMA))
    monkeypatch.setenv("FAKE_SERVER_RECORD", str(paths["requests"]))
    monkeypatch.setenv("FAKE_OLLAMA_RECORD", str(paths["env"]))
    return paths


@pytest.mark.usefixtures("needs_gguf")  # the random-weight GGUF Ollama serves
def test_ollama_target_runs_a_whole_trial(fake_ollama: dict[str, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_CONTEXT_LENGTH", "64")  # inherited: must not reach Ollama
    target = OllamaTarget()
    target.check_available()
    config = {"num_parallel": 2, "flash_attention": "on", "kv_cache_type": "q8_0",
              "num_batch_auto": False, "num_batch": 128, "quantize": "Q8_0"}
    m = target.run(config, small_workload(), tmp_path / "cache")
    assert m.metrics["failed_requests"] == 0 and m.metrics["output_tokens_per_s"] > 0
    env = json.loads(fake_ollama["env"].read_text())
    assert env == m.details["environment"]
    assert {k: env[k] for k in ("OLLAMA_NUM_PARALLEL", "OLLAMA_FLASH_ATTENTION",
                                "OLLAMA_KV_CACHE_TYPE", "OLLAMA_KEEP_ALIVE")} == {
        "OLLAMA_NUM_PARALLEL": "2", "OLLAMA_FLASH_ATTENTION": "1",
        "OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_KEEP_ALIVE": "-1"}
    assert "OLLAMA_CONTEXT_LENGTH" not in env and "OLLAMA_MAX_QUEUE" in env
    assert m.details["argv"] == [sys.executable, str(FAKE_OLLAMA), "serve"]
    create = m.details["create_argv"]
    assert create[2:4] == ["create", "advisor-tiny-llama"] and create[-2:] == ["--quantize",
                                                                                 "Q8_0"]
    modelfile = m.details["modelfile"].splitlines()
    assert modelfile[0].startswith("FROM ") and modelfile[0].endswith("-F16.gguf")
    assert Path(modelfile[0][5:]).is_file()
    assert "PARAMETER num_batch 128" in modelfile and "PARAMETER num_ctx 4096" in modelfile
    assert m.details["load_s"] >= 0 and m.details["startup_s"] >= m.details["create_s"]
    # Ollama exposes no metrics: nothing is compared with a server, and the client's own health
    # alone decides the label (a client that lagged on a busy machine is client_bound; CI saw it).
    assert m.details["validity_checks"] == []
    lag = m.details.get("client_loop_lag_p99_ms")
    late = m.details.get("client_send_late_p99_ms")
    lagging = (lag is not None and lag > MAX_LOOP_LAG_P99_MS) or (
        late is not None and late > MAX_SEND_LATE_P99_MS)
    assert m.details["validity"] == ("client_bound" if lagging else "unchecked"), m.details
    assert m.engine_versions == {"ollama": "0.0.0-fake-ollama"}
    assert {b["model"] for b in bodies(fake_ollama["requests"])} == {"advisor-tiny-llama"}
    json.dumps(m.to_dict())


@pytest.mark.usefixtures("needs_gguf")  # the random-weight GGUF Ollama serves
def test_ollama_trial_runs_isolated_and_leaves_no_server(tmp_path: Path) -> None:
    env = {ollama_target.COMMAND_ENV: wrapper(FAKE_OLLAMA)}
    outcome = run_isolated("ollama", {}, small_workload(), tmp_path / "cache", timeout_s=120,
                           env=env)
    assert outcome.ok, outcome.reason
    assert no_leftovers(FAKE_OLLAMA)


@pytest.mark.usefixtures("needs_gguf")  # the random-weight GGUF Ollama serves
def test_an_ollama_crash_is_a_failed_trial_with_its_cause(tmp_path: Path) -> None:
    env = {ollama_target.COMMAND_ENV: wrapper(FAKE_OLLAMA),
           "FAKE_SERVER_CRASH": "no compatible GPUs were discovered"}
    outcome = run_isolated("ollama", {}, small_workload(), tmp_path / "cache", timeout_s=120,
                           env=env)
    assert outcome.status == "failed" and outcome.error_type == "engine_start"
    assert (outcome.reason or "").startswith(
        "Ollama failed to start: ValueError: no compatible GPUs were discovered")
    assert no_leftovers(FAKE_OLLAMA)


@pytest.mark.usefixtures("needs_gguf")  # the random-weight GGUF Ollama serves
def test_an_ollama_create_refusal_is_a_rejected_config(tmp_path: Path) -> None:
    env = {ollama_target.COMMAND_ENV: wrapper(FAKE_OLLAMA),
           "FAKE_OLLAMA_CREATE_ERROR": "unsupported quantization type Q3_K"}
    outcome = run_isolated("ollama", {"quantize": "Q4_K_M"}, small_workload(),
                           tmp_path / "cache", timeout_s=120, env=env)
    assert outcome.error_type == "rejected"
    assert outcome.reason == "Ollama rejected the configuration: unsupported quantization type Q3_K"
    assert no_leftovers(FAKE_OLLAMA)


def test_an_ollama_context_too_small_never_starts_it(tmp_path: Path) -> None:
    record = tmp_path / "ollama-env.json"
    env = {ollama_target.COMMAND_ENV: wrapper(FAKE_OLLAMA), "FAKE_OLLAMA_RECORD": str(record)}
    outcome = run_isolated("ollama", {"num_ctx": 512}, small_workload(max_model_len=1024),
                           tmp_path / "cache", timeout_s=120, env=env)
    assert outcome.error_type == "rejected"
    assert "num_ctx (512) must hold the workload's longest request (1024" in (outcome.reason or "")
    assert not record.exists()


# -- both: one line naming how to install, from the CLI --------------------------------------------

@pytest.mark.parametrize("name", ["tgi", "ollama"])
def test_tune_without_the_engine_says_it_is_not_installable_here(name: str,
                                                                 tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in (tgi_target.COMMAND_ENV, ollama_target.COMMAND_ENV)}
    env.update({"ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'advisor.db'}",
                "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300"})
    result = subprocess.run(
        [sys.executable, "-m", "advisor", "tune", "--target", name, "--trials", "1"],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "not installable from the package registries this project reaches" in lines[0]


# -- the Target contract, on the stand-ins ---------------------------------------------------------

class TestTGITargetOnFakeEngine(TargetContract):
    @pytest.fixture
    def target(self, monkeypatch: pytest.MonkeyPatch) -> Target:
        monkeypatch.setenv(tgi_target.COMMAND_ENV, wrapper(FAKE_TGI))
        return TGITarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return small_workload()


@pytest.mark.usefixtures("needs_gguf")  # the random-weight GGUF Ollama serves
class TestOllamaTargetOnFakeEngine(TargetContract):
    @pytest.fixture
    def target(self, monkeypatch: pytest.MonkeyPatch) -> Target:
        monkeypatch.setenv(ollama_target.COMMAND_ENV, wrapper(FAKE_OLLAMA))
        return OllamaTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return small_workload()
