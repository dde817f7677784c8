"""`advisor crosscheck` on CPU: the stand-in vLLM server and a stand-in `vllm bench serve` (the
real harness runs on the H200, docs/benchmarks.md). Checks the report's structure, that both
harnesses replay the same clamped requests, that co-resident configs alternate within a round,
that measurements are stored as trials with their verdict, and the command's bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.crosscheck import (
    CrosscheckPlan,
    CrosscheckReport,
    Measured,
    compare_rounds,
    run_crosscheck,
)
from advisor.errors import AdvisorError
from knowledge import TrialStatus, TrialStore
from knowledge.failures import NOT_THE_CONFIG, labelled_starts
from objectives.llm import validity
from objectives.llm.reference import LengthLimits, clamp_lengths, sharegpt_dataset
from objectives.llm.workload import LLMWorkloadSpec, generate_requests, load_preset
from objectives.targets.vllm_bench import BENCH_COMMAND_ENV, SHAREGPT_LIMITS, VllmBenchServe
from objectives.targets.vllm_target import COMMAND_ENV, VllmTarget

LLM_TESTS = Path(__file__).parents[1] / "objectives" / "llm"
FAKE_SERVER = LLM_TESTS / "fake_openai_server.py"
FAKE_BENCH = LLM_TESTS / "fake_bench_serve.py"


def small(**params: object):
    return load_preset("chat", model="tiny-llama", n_requests=12, warmup_requests=2,
                       arrival={"process": "poisson", "rate_rps": 12.0},
                       output_len={"dist": "uniform", "low": 8, "high": 16}).with_params(**params)


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMMAND_ENV, json.dumps([sys.executable, str(FAKE_SERVER)]))
    monkeypatch.setenv(BENCH_COMMAND_ENV, json.dumps([sys.executable, str(FAKE_BENCH)]))


def test_the_sharegpt_export_round_trips_through_the_word_tokenizer() -> None:
    spec_requests = generate_requests(LLMWorkloadSpec.from_workload(small()), vocab_size=2048)
    entries = sharegpt_dataset(spec_requests)
    for request, entry in zip(spec_requests, entries, strict=True):
        human, gpt = entry["conversations"]
        assert len(human["value"].split()) == request.prompt_len
        assert len(gpt["value"].split()) == request.output_len


def test_clamping_keeps_every_request_inside_the_harness_limits() -> None:
    clamped, changed = clamp_lengths(load_preset("chat").with_params(drain_limit_s=5),
                                     SHAREGPT_LIMITS)
    assert changed["prompt_len"]["to"]["max"] == 1024
    assert clamped.params["drain_limit_s"] == 5
    for r in generate_requests(LLMWorkloadSpec.from_workload(clamped), vocab_size=128256):
        assert SHAREGPT_LIMITS.accepts(r)
    unchanged, nothing = clamp_lengths(small(), LengthLimits(min_len=1))
    assert nothing == {} and unchanged == small()


def test_the_harness_refuses_requests_it_would_drop(tmp_path: Path) -> None:
    requests = generate_requests(LLMWorkloadSpec.from_workload(load_preset("chat")),
                                 vocab_size=128256)
    with pytest.raises(ValueError, match="would drop"):
        VllmBenchServe().run(base_url="http://127.0.0.1:1", served_model="m",
                             tokenizer=tmp_path, requests=requests, rate_rps=1.0, seed=0,
                             workdir=tmp_path, timeout_s=5)


def test_a_crosscheck_reports_both_harnesses_and_the_server(stand_ins: None,
                                                            tmp_path: Path) -> None:
    plan = CrosscheckPlan(target="vllm", workload=small(), rates=(8.0, 16.0))
    report = run_crosscheck(plan, cache_dir=tmp_path / "cache")
    kinds = [(m.kind, m.rate_rps) for m in report.measured]
    assert kinds == [("advisor", 8.0), ("reference", 8.0), ("advisor", 16.0),
                     ("reference", 16.0)]
    assert all(m.error is None for m in report.measured), [m.error for m in report.measured]
    for m in report.measured:
        assert m.server["available"]
        assert m.validity in ("valid", "frontend_delay", "client_bound")
    rows = report.rows()
    assert len(rows) == 2
    for row in rows:
        fig = row["figures"]["output_tokens_per_s"]
        assert fig["advisor"] > 0 and fig["reference"] > 0 and fig["ratio"] > 0
        assert fig["server_advisor_window"] == pytest.approx(fig["advisor"])
        assert set(row["figures"]) >= {"ttft_p95_ms", "tpot_p95_ms"}
    assert report.facts["reference"] == "vllm bench serve"
    # Every advisor measurement's server window saw its requests and no other traffic.
    for m in report.measured:
        if m.kind == "advisor":
            checks = {c["name"]: c for c in m.checks}
            assert checks["output_tokens"]["agrees"]


def test_co_resident_configs_alternate_and_are_stored_as_trials(
        stand_ins: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This test is about alternation and storage, not the gate: a shared 2-core machine can make
    # the one-process client lag, so its health bounds are lifted here (the gate's own tests are
    # in tests/objectives/llm/test_validity.py and test_gate_fake_engine.py).
    monkeypatch.setattr(validity, "MAX_LOOP_LAG_P99_MS", 1e9)
    monkeypatch.setattr(validity, "MAX_SEND_LATE_P99_MS", 1e9)
    store = TrialStore(f"sqlite:///{tmp_path / 'store.db'}")
    plan = CrosscheckPlan(target="vllm", workload=small(), rates=(8.0,),
                          configs=(("default", {}), ("big-blocks", {"block_size": 32})),
                          repeats=3, reference_repeats=0, co_resident=True, memory_share=0.45,
                          store_as="pair")
    report = run_crosscheck(plan, cache_dir=tmp_path / "cache", store=store)
    order = [m.config for m in report.measured]
    assert order == ["default", "big-blocks"] * 3
    trials = store.trials_of_study(store.get_study("pair@8rps").id or 0)
    assert len(trials) == 6
    for t in trials:
        assert t.config["gpu_memory_utilization"] == 0.45
        assert t.details["crosscheck"]["co_resident"] is True
        assert t.details["role"] == "crosscheck"  # a memory-shared default is not the default
        assert "validity" in t.details and "server_metrics" in t.details
        assert "--gpu-memory-utilization" in t.details["argv"]  # the exact launch is kept
        assert t.details["startup_s"] > 0
    assert {t.config["block_size"] for t in trials} == {16, 32}
    assert set(report.servers) == {"default", "big-blocks"}
    # The interleaved repeats give the study its paired comparison (the other config against the
    # default), which the recommenders use.
    paired = store.get_study("pair@8rps").data_provenance["paired_comparison"]
    assert paired["status"] == "compared", paired
    assert (paired["x"], paired["y"]) == ("big-blocks", "default")
    assert {m["metric"] for m in paired["metrics"]} >= {"ttft_p95_ms", "output_tokens_per_s"}


def test_a_failed_measurement_is_stored_as_a_failed_trial_that_blames_no_config(
        stand_ins: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every request refused, as vLLM answered a Qwen2 model whose tokenizer read the prompts as
    # empty: the measurement fails, and with --store-as it is kept as a failed trial with its
    # reason, labelled so that the failure model leaves it out (it was the advisor's fault).
    monkeypatch.setenv("FAKE_SERVER_REFUSE", "The decoder prompt cannot be empty")
    store = TrialStore(f"sqlite:///{tmp_path / 'store.db'}")
    plan = CrosscheckPlan(target="vllm", workload=small(), rates=(8.0,), reference_repeats=0,
                          store_as="refused")
    report = run_crosscheck(plan, cache_dir=tmp_path / "cache", store=store)
    [one] = report.measured
    assert one.error and one.error_type == "error"
    assert one.to_dict()["error_type"] == "error"
    [trial] = store.trials_of_study(store.get_study("refused@8rps").id or 0)
    assert trial.id == one.trial_id
    assert trial.status == TrialStatus.FAILED and trial.error_type == "error"
    assert "decoder prompt cannot be empty" in trial.error
    assert trial.details["crosscheck"]["config_label"] == "default"
    assert trial.details["startup_s"] > 0  # the server's launch facts are kept
    assert trial.error_type in NOT_THE_CONFIG and labelled_starts(store, target="vllm") == []


def test_bad_plans_are_refused_in_one_line() -> None:
    wl = small()
    with pytest.raises(AdvisorError, match="at least one"):
        CrosscheckPlan(target="vllm", workload=wl, rates=())
    with pytest.raises(AdvisorError, match="memory-share"):
        CrosscheckPlan(target="vllm", workload=wl, rates=(1.0,),
                       configs=(("a", {}), ("b", {})), co_resident=True)
    with pytest.raises(AdvisorError, match="do not fit"):
        CrosscheckPlan(target="vllm", workload=wl, rates=(1.0,),
                       configs=(("a", {}), ("b", {}), ("c", {})), co_resident=True,
                       memory_share=0.45)
    with pytest.raises(AdvisorError, match="unknown configs"):
        CrosscheckPlan(target="vllm", workload=wl, rates=(1.0,), reference_configs=("x",))


def test_the_command_rejects_bad_input_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "advisor", "crosscheck", "--target", "vllm",
                           "--rate", "0"], capture_output=True, text=True,
                          env={**os.environ, "ADVISOR_IMPORT_SHIPPED": "0",
                               "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'x.db'}"})
    assert done.returncode == 2
    assert "must be > 0" in done.stderr and "Traceback" not in done.stderr


def test_the_vllm_target_offers_vllm_bench_as_its_reference() -> None:
    harness = VllmTarget().reference_harness()
    assert harness is not None and harness.name == "vllm bench serve"
    args = VllmBenchServe.arguments(base_url="http://h:1/", served_model="m",
                                    tokenizer=Path("/t"), dataset=Path("/d.json"),
                                    n_requests=5, rate_rps=7.5, seed=3, result_dir=Path("/r"))
    assert args[args.index("--dataset-name") + 1] == "sharegpt"
    assert "--disable-shuffle" in args and "--ignore-eos" in args
    assert args[args.index("--request-rate") + 1] == "7.5"
    assert args[args.index("--temperature") + 1] == "0"


def _window(kind: str, round_: int, ttft: float, *, agrees: bool = True) -> Measured:
    checks = [{"name": name, "agrees": agrees} for name in
              ("ttft_p95_ms", "tpot_p95_ms", "output_tokens")]
    return Measured(kind, "default", 75.0, round_, metrics={
        "ttft_p95_ms": ttft, "tpot_p95_ms": 10.0, "output_tokens_per_s": 1000.0},
        checks=checks if kind == "advisor" else [])


def test_rounds_are_judged_on_the_median_ratio_not_on_one_pair() -> None:
    # One knee-bound round (3x the reference's window) among rounds that agree: the median
    # ratio decides, and the range keeps the outlier in view.
    pairs = [(_window("advisor", 0, 300.0, agrees=False), _window("reference", 0, 100.0)),
             (_window("advisor", 1, 105.0), _window("reference", 1, 100.0)),
             (_window("advisor", 2, 95.0), _window("reference", 2, 100.0))]
    row = compare_rounds("default", 75.0, pairs)
    ttft = row["figures"]["ttft_p95_ms"]
    assert row["rounds"] == 3
    assert ttft["ratio_median"] == pytest.approx(1.05)
    assert ttft["ratio_range"] == pytest.approx([0.95, 3.0])
    assert ttft["agrees_with_server"] == "2/3"
    assert ttft["goal_met"] and row["goal_met"]
    # Two of three rounds off: the median is off, and not every window agreed with its server.
    pairs[1] = (_window("advisor", 1, 250.0, agrees=False), _window("reference", 1, 100.0))
    row = compare_rounds("default", 75.0, pairs)
    assert row["figures"]["ttft_p95_ms"]["ratio_median"] == pytest.approx(2.5)
    assert not row["figures"]["ttft_p95_ms"]["goal_met"] and not row["goal_met"]


def test_a_report_pairs_each_advisor_window_with_the_reference_of_its_round() -> None:
    report = CrosscheckReport("s", {}, {"reference": "r"})
    report.measured = [_window("advisor", 0, 200.0), _window("reference", 0, 100.0),
                       _window("advisor", 1, 110.0), _window("advisor", 2, 90.0),
                       _window("reference", 2, 100.0)]
    (row,) = report.round_rows()
    assert row["rounds"] == 2  # round 1 had no reference window
    assert row["figures"]["ttft_p95_ms"]["ratio_range"] == pytest.approx([0.9, 2.0])
