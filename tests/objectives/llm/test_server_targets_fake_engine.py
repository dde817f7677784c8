"""The serving targets end to end on CPU, against a stand-in OpenAI-compatible server: the vLLM
target starts it through ADVISOR_VLLM_COMMAND with the real argv, warms up, measures and stops
it; the openai target measures a server that is already running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from advisor.errors import WorkloadError
from advisor.isolation import run_isolated
from advisor.testing import TargetContract
from objectives.llm.server import ManagedServer, free_port
from objectives.llm.workload import at_rate, load_preset
from objectives.target import Target
from objectives.targets.openai_target import API_KEY_ENV, BASE_URL_ENV, MODEL_ENV, OpenAITarget
from objectives.targets.vllm_target import COMMAND_ENV, VllmTarget
from objectives.workload import Workload
from tests.objectives.llm.stand_in import FAKE


def small_workload(**target_params: Any) -> Workload:
    """A few short requests; ``target_params`` (base_url, startup_timeout_s, ...) are the target's
    own keys, which the llm-serving spec itself does not accept."""
    return load_preset(
        "chat", model="tiny-llama", n_requests=6, warmup_requests=2,
        arrival={"process": "poisson", "rate_rps": 50.0},
        prompt_len={"dist": "uniform", "low": 8, "high": 32},
        output_len={"dist": "uniform", "low": 4, "high": 12}).with_params(**target_params)


def test_vllm_target_runs_a_whole_trial(fake_vllm: Path, tmp_path: Path) -> None:
    target = VllmTarget()
    target.check_available()  # a wrapper command needs no local vLLM
    m = target.run({"block_size": 32, "enable_prefix_caching": False}, small_workload(),
                   tmp_path / "cache")
    assert m.metrics["failed_requests"] == 0
    assert m.metrics["output_tokens_per_s"] > 0
    assert m.metrics["ttft_p95_ms"] > 0 and m.metrics["e2e_p50_ms"] >= m.metrics["ttft_p50_ms"]
    argv = m.details["argv"]
    assert argv[:2] == [sys.executable, str(FAKE)]
    assert argv[2] == str(tmp_path / "cache" / "models" / "tiny-llama")
    assert argv[argv.index("--block-size") + 1] == "32"
    assert "--no-enable-prefix-caching" in argv and "--load-format" in argv
    assert m.details["warmup_requests"] == 2 and m.details["n_requests"] == 6
    assert m.details["model"] == "tiny-llama" and m.details["dummy_weights"] is True
    assert m.details["startup_s"] > 0
    assert "fake server for" in m.details["engine_log_tail"]
    assert m.details["max_model_len"] == 256  # 32 + 12 rounded up to the 256-token quantum
    assert (tmp_path / "cache" / "models" / "tiny-llama" / "config.json").is_file()
    bodies = [json.loads(line)["body"] for line in fake_vllm.read_text().splitlines()]
    assert len(bodies) == 8  # 2 warm-up + 6 measured
    assert all(b["ignore_eos"] is True and b["model"] == "tiny-llama" for b in bodies)
    json.dumps(m.to_dict())  # storable


def test_vllm_trial_runs_isolated_and_leaves_no_server(fake_vllm: Path, tmp_path: Path) -> None:
    outcome = run_isolated("vllm", {}, small_workload(), tmp_path / "cache", timeout_s=120)
    assert outcome.ok, outcome.reason
    assert outcome.measurement is not None
    assert outcome.measurement.metrics["requests_per_s"] > 0
    # Every process of this trial's fake server is gone once the trial is over. Only this
    # test's: another xdist worker may be running stand-in servers of its own tests right now.
    leftovers = [p for p in psutil.process_iter(["cmdline", "environ"])
                 if str(FAKE) in " ".join(p.info["cmdline"] or [])
                 and (p.info["environ"] or {}).get("FAKE_SERVER_RECORD") == str(fake_vllm)]
    assert leftovers == []


def test_openai_target_measures_a_running_endpoint(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    port = free_port()
    argv = [sys.executable, str(FAKE), "served", "--port", str(port),
            "--served-model-name", "my-model"]
    monkeypatch.setenv(API_KEY_ENV, "sk-test-secret")
    monkeypatch.delenv(BASE_URL_ENV, raising=False)
    with ManagedServer(argv, base_url=f"http://127.0.0.1:{port}", log_path=tmp_path / "log",
                       env={"FAKE_SERVER_RECORD": str(record), "PATH": "/usr/bin:/bin"}
                       ) as server:
        server.wait_ready(30, poll_interval_s=0.1)
        workload = small_workload(base_url=f"http://127.0.0.1:{port}/v1",
                                  served_model="my-model")
        target = OpenAITarget()
        target.check_available()
        target.prepare(workload, tmp_path / "cache")
        m = target.run({"max_concurrency": 2, "request_rate_scale": 2.0}, workload,
                       tmp_path / "cache")
    assert m.metrics["failed_requests"] == 0
    assert m.details["max_concurrency"] == 2 and m.details["rate_scale"] == 2.0
    assert m.details["base_url"] == f"http://127.0.0.1:{port}"  # "/v1" is the client's part
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    assert {s["auth"] for s in sent} == {"Bearer sk-test-secret"}
    assert "sk-test-secret" not in json.dumps(m.to_dict())  # the key is never stored


# -- the Target contract, on the stand-in server ------------------------------------------------

class TestVllmTargetOnFakeEngine(TargetContract):
    @pytest.fixture
    def target(self, monkeypatch: pytest.MonkeyPatch) -> Target:
        monkeypatch.setenv(COMMAND_ENV, json.dumps([sys.executable, str(FAKE)]))
        return VllmTarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return small_workload()


class TestOpenAITargetOnFakeServer(TargetContract):
    @pytest.fixture
    def target(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Target]:
        port = free_port()
        argv = [sys.executable, str(FAKE), "m", "--port", str(port), "--served-model-name", "m"]
        with ManagedServer(argv, base_url=f"http://127.0.0.1:{port}",
                           log_path=tmp_path / "server.log") as server:
            server.wait_ready(30, poll_interval_s=0.1)
            monkeypatch.setenv(BASE_URL_ENV, f"http://127.0.0.1:{port}")
            monkeypatch.setenv(MODEL_ENV, "m")
            yield OpenAITarget()

    @pytest.fixture
    def workload(self) -> Workload:
        return small_workload()


def test_a_vllm_study_stores_per_request_samples_and_slo_goodput(
        fake_vllm: Path, settings: Any) -> None:
    """Through the driver: each trial keeps its per-request figures, and goodput uses the study's
    SLO as per-request bounds (run() measures the same whatever the SLO)."""
    from advisor.driver import StudyDriver, StudySpec
    from advisor.objective import Objective
    from knowledge import TrialStatus, TrialStore
    from objectives import parse_slo
    from objectives.llm.metrics import goodput_from_samples

    slo = parse_slo("ttft_p95_ms<=5000,tpot_p95_ms<=1")  # TPOT 1 ms: only 1-token requests pass
    store = TrialStore(settings.db_url)
    result = StudyDriver(store, settings).run(StudySpec(
        name="llm", target="vllm", slo=slo, objective=Objective.parse("output_tokens_per_s"),
        workload=small_workload(), n_trials=2, seed=0))
    measured = [t for t in result.trials if t.status == TrialStatus.COMPLETE]
    assert measured
    for t in measured:
        samples = t.details["requests"]
        assert len(samples["ttft_ms"]) == 6
        assert t.details["goodput_bounds_ms"] == {"ttft_ms": 5000.0, "tpot_ms": 1.0}
        expected = goodput_from_samples(samples, duration_s=t.details["load_duration_s"],
                                        bounds_ms={"ttft_ms": 5000.0, "tpot_ms": 1.0})
        assert t.metrics["goodput_requests_per_s"] == pytest.approx(expected)
        assert t.metrics["goodput_requests_per_s"] < t.metrics["requests_per_s"]


def test_vllm_series_measures_every_workload_on_one_server_start(fake_vllm: Path,
                                                                  tmp_path: Path) -> None:
    base = small_workload()
    faster = at_rate(base, 100.0, seed_offset=1)
    first, second = VllmTarget().run_series({"max_num_seqs": 8}, [base, faster],
                                            tmp_path / "cache")
    assert not isinstance(first, Exception) and not isinstance(second, Exception)
    assert first.details["argv"] == second.details["argv"]  # one server: the same port
    assert first.details["startup_s"] == second.details["startup_s"]
    assert (first.details["series_index"], second.details["series_index"]) == (0, 1)
    assert first.details["series"] == ["chat", "chat@100rps"]
    assert (first.details["n_requests"], second.details["n_requests"]) == (6, 12)
    assert first.metrics["failed_requests"] == second.metrics["failed_requests"] == 0
    bodies = [json.loads(line)["body"] for line in fake_vllm.read_text().splitlines()]
    assert len(bodies) == 2 + 6 + 12  # one warm-up per server start, before its first window
    assert (first.details["warmup_requests"], second.details["warmup_requests"]) == (2, 0)


def test_vllm_series_refuses_workloads_that_need_another_server(fake_vllm: Path,
                                                                tmp_path: Path) -> None:
    other_model = small_workload().with_params(model="llama-3.2-1b")
    with pytest.raises(WorkloadError, match="cannot share the server"):
        VllmTarget().run_series({}, [small_workload(), other_model], tmp_path / "cache")


def test_cli_also_rate_records_a_study_per_rate(fake_vllm: Path, tmp_path: Path) -> None:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'cli.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "0",
           "COLUMNS": "200"}
    arrival = '{"process":"poisson","rate_rps":50}'
    tune = subprocess.run(
        [sys.executable, "-m", "advisor", "tune", "--target", "vllm", "--model", "tiny-llama",
         "--workload-param", "n_requests=6", "--workload-param", "warmup_requests=1",
         "--workload-param", f"arrival={arrival}", "--workload-param",
         'output_len={"dist":"fixed","value":4}', "--name", "fake", "--trials", "2",
         "--seed", "0", "--also-rate", "25", "--also-rate", "100", "--json"],
        env=env, capture_output=True, text=True, timeout=300)
    assert tune.returncode == 0, tune.stderr
    summary = json.loads(tune.stdout)
    assert [c["study"] for c in summary["co_measured"]] == ["fake@25rps", "fake@100rps"]
    # Every co-measured trial finished; on a loaded 2-core machine the one-process client may
    # lag at 100 req/s and the gate stores that trial as invalid (client_bound): still measured.
    assert all(c["complete"] + c["failed"] + c["invalid"] == 2 for c in summary["co_measured"]), \
        summary["co_measured"]
    trials = json.loads(subprocess.run(
        [sys.executable, "-m", "advisor", "trials", "--study", "fake@100rps", "--json"],
        env=env, capture_output=True, text=True, timeout=120).stdout)
    assert len(trials) == 2
    assert trials[0]["workload_spec"]["params"]["arrival"]["rate_rps"] == 100
    newest = subprocess.run(
        [sys.executable, "-m", "advisor", "trials", "--study", "fake@100rps", "--limit", "1",
         "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert len(json.loads(newest.stdout)) == 1
    assert "showing the newest 1 of 2 matching trials; --limit 2" in newest.stderr
    wrong = subprocess.run(
        [sys.executable, "-m", "advisor", "tune", "--target", "faiss", "--also-rate", "5",
         "--trials", "1"], env=env, capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and "--also-rate needs an 'llm-serving' workload" in wrong.stderr


def test_a_failed_start_names_its_root_cause_beyond_the_log_tail(
        fake_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SERVER_CRASH", "fp8 KV cache needs a newer GPU")
    outcome = run_isolated("vllm", {}, small_workload(), tmp_path / "cache", timeout_s=120)
    assert outcome.error_type == "engine_start"
    reason = outcome.reason or ""
    assert reason.startswith("vLLM failed to start: ValueError: fp8 KV cache needs a newer GPU")
    assert "Engine core initialization failed" in reason  # the log tail follows


def test_a_drain_limit_cuts_an_overloaded_server_short(fake_vllm: Path, tmp_path: Path) -> None:
    # 1,000 tokens at ~1 ms each: every request outlasts a 0.3 s drain limit.
    slow = small_workload().with_params(output_len={"dist": "fixed", "value": 1000},
                                        drain_limit_s=0.3)
    m = VllmTarget().run({}, slow, tmp_path / "cache")
    assert m.metrics["cut_requests"] == 6 and m.metrics["failed_requests"] == 0
    assert m.metrics["requests_per_s"] == 0 and m.metrics["output_tokens_per_s"] > 0
    assert m.details["drain_limit_s"] == 0.3 and m.details["load_duration_s"] < 5
    assert m.details["requests"]["cut"] == [True] * 6
    assert "first_request_errors" not in m.details  # a cut is not an error of the server
