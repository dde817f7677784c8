"""Calibration on a new GPU (issue 44): the hardware profile fitted from a RECORDED real probe
(four windows of vLLM's defaults on the Llama-3-8B shape on an H100, 2026-12-06: the server's
own metrics and each request's first-token latency, as the device brought them back) reproduces
the stored profile; a profile round-trips through the knowledge's export and import; the
predictions from it are labelled, carry intervals as wide as the measured error, and the
capacity and replica answers follow from them."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.calibrate import (
    ERROR_METRICS,
    PROBE_DRAIN_LIMIT_S,
    PROBE_WINDOW_S,
    calibrate_from_trials,
    probe_window_params,
    window_noise,
    workload_streams,
)
from knowledge import TrialStore
from knowledge.batch_sim import FRONTEND_TOKEN_MS
from knowledge.calibrated import (
    LABEL,
    Capacity,
    KnobEffect,
    Prediction,
    StreamsAt,
    capacity_at_slo,
    frontend_scaled,
    predict,
    replicas_for,
    spanning,
    spanning_capacity,
)
from knowledge.models import TrialRecord
from knowledge.profiles import (
    HardwareProfile,
    find_profile,
    list_profiles,
    profiles_version,
    save_profile,
)
from knowledge.transfer import export_jsonl, import_jsonl, read_trials_text

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "calibration"
PROBE = FIXTURES / "h100-8b-probe-2026-12-06.jsonl.gz"
PROFILE = FIXTURES / "h100-8b-profile-2026-12-06.json"
SLO = {"ttft_p95_ms": 300.0, "tpot_p95_ms": 40.0}


def _close(value: object) -> object:
    """``value`` with every float leaf a ``pytest.approx`` of it (relative 1e-9): a refit
    reproduces a profile up to the last bits of its sums, which numpy's vectorised kernels
    round differently from one CPU to another (a profile fitted on one machine read
    0.5609560772532343 as 0.5609560772532337 on another)."""
    if isinstance(value, dict):
        return {k: _close(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_close(v) for v in value]
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-9, abs=1e-12)
    return value


def _probe_trials() -> list[TrialRecord]:
    rows = [json.loads(line) for line in read_trials_text(PROBE).splitlines()]
    return [TrialRecord.model_validate({**r["trial"], "study_id": i + 1})
            for i, r in enumerate(rows)]


@pytest.fixture(scope="module")
def stored() -> HardwareProfile:
    return HardwareProfile.from_json(json.loads(PROFILE.read_text()))


@pytest.fixture(scope="module")
def refitted(stored: HardwareProfile) -> HardwareProfile:
    return calibrate_from_trials(_probe_trials(), noise=stored.noise_log,
                                 noise_source=stored.noise_source, uid=stored.uid,
                                 created_at=stored.created_at)


def test_the_recorded_probe_reproduces_the_stored_profile(stored: HardwareProfile,
                                                          refitted: HardwareProfile) -> None:
    assert refitted.to_json() == _close(stored.to_json())
    # What it pinned, read off the real H100: a GPU and an engine, a step model with a cost
    # per prompt token and per running sequence, and an error for every scored figure.
    assert stored.hardware == "h100" and stored.gpu_memory_mib > 0
    assert stored.engine_versions and stored.per_prefill_token_ms > 0
    assert stored.fixed_ms > 0 and set(ERROR_METRICS) <= set(stored.error_log)
    assert len(stored.probe) == 4
    assert all(w["server_metrics"] and w["requests"] for w in stored.probe)


def test_a_probe_of_one_window_is_refused() -> None:
    from advisor.errors import AdvisorError

    with pytest.raises(AdvisorError, match="at least two probe windows"):
        calibrate_from_trials(_probe_trials()[:1], noise={}, noise_source="")


def test_profiles_round_trip_through_export_and_import(tmp_path: Path,
                                                       stored: HardwareProfile) -> None:
    source = TrialStore(f"sqlite:///{tmp_path / 'a.db'}")
    empty = profiles_version(source)
    assert save_profile(source, stored)
    # What answers key their memo of the profiles on: it moves with every profile added and
    # holds while an import adds none.
    once = profiles_version(source)
    assert once != empty and not save_profile(source, stored)
    assert profiles_version(source) == once
    buf = io.StringIO()
    export_jsonl(source, buf)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["format"] == "slo-advisor-profile/1"
    target = TrialStore(f"sqlite:///{tmp_path / 'b.db'}")
    first = import_jsonl(target, lines)
    again = import_jsonl(target, lines)
    assert (first.profiles_imported, first.profiles_skipped) == (1, 0)
    assert (again.profiles_imported, again.profiles_skipped) == (0, 1)
    back = find_profile(target, target=stored.target, model=stored.model, hardware="H100")
    assert back is not None and back.to_json() == stored.to_json()
    assert list_profiles(target, hardware="h200") == []


def test_the_newest_calibration_answers_whatever_order_it_was_stored_in(
        tmp_path: Path, stored: HardwareProfile) -> None:
    """A store imports its knowledge files in name order: a later calibration stored before an
    earlier one is still the newest."""
    import dataclasses

    later = dataclasses.replace(stored, uid="later", created_at="2026-12-07T10:48:51+00:00",
                                fixed_ms=stored.fixed_ms * 2)
    store = TrialStore(f"sqlite:///{tmp_path / 'order.db'}")
    assert save_profile(store, later) and save_profile(store, stored)  # "2026-12-06" last
    assert [p.uid for p in list_profiles(store)] == [stored.uid, "later"]
    newest = find_profile(store, target=stored.target, model=stored.model, hardware="h100")
    assert newest is not None and newest.uid == "later"


def test_a_broken_profile_line_imports_nothing(tmp_path: Path) -> None:
    from advisor.errors import StoreError

    target = TrialStore(f"sqlite:///{tmp_path / 'b.db'}")
    line = json.dumps({"format": "slo-advisor-profile/1", "profile": {"target": "x"}})
    with pytest.raises(StoreError, match="profile line 1"):
        import_jsonl(target, [line], source="bad.jsonl")
    assert list_profiles(target) == []


def _chat_streams(profile: HardwareProfile) -> StreamsAt:
    return workload_streams(profile.probe[0]["workload_spec"]["params"], seeds=1)


def test_predictions_are_labelled_and_as_wide_as_the_measured_error(
        stored: HardwareProfile) -> None:
    at = _chat_streams(stored)
    p = predict(stored, at(12.0), rate_rps=12.0)
    assert p.label == LABEL == "predicted from calibration"
    for m in ERROR_METRICS:
        f = p.figures[m]
        assert f.low < f.value < f.high
        sd = math.sqrt(stored.error_log[m] ** 2 + stored.noise_log[m] ** 2)
        assert math.log(f.high / f.value) == pytest.approx(1.6448536 * sd, rel=1e-6)
    # A knob effect carried from another machine moves the figure by its ratio and widens it.
    effect = KnobEffect({"tpot_p95_ms": 0.5}, {"tpot_p95_ms": 0.3}, "measured elsewhere")
    q = predict(stored, at(12.0), rate_rps=12.0, effect=effect)
    assert q.figures["tpot_p95_ms"].value == pytest.approx(
        0.5 * p.figures["tpot_p95_ms"].value)
    assert (q.figures["tpot_p95_ms"].high / q.figures["tpot_p95_ms"].value
            > p.figures["tpot_p95_ms"].high / p.figures["tpot_p95_ms"].value)


def test_capacity_brackets_the_slo_and_replicas_follow(stored: HardwareProfile) -> None:
    at = _chat_streams(stored)
    cap = capacity_at_slo(stored, at, SLO, low_rps=2.0, high_rps=300.0, tolerance=0.05)
    assert 0 < cap.low <= cap.rate_rps <= cap.high < 300.0
    below = predict(stored, at(cap.rate_rps * 0.9), rate_rps=cap.rate_rps * 0.9)
    assert all(below.figures[m].value <= b for m, b in SLO.items())
    above = predict(stored, at(cap.rate_rps * 1.3), rate_rps=cap.rate_rps * 1.3)
    assert any(above.figures[m].value > b for m, b in SLO.items())
    r = replicas_for(10 * cap.rate_rps, cap)
    assert r.count == 10 and r.low is not None and r.high is not None
    assert r.low <= r.count <= r.high
    assert replicas_for(5.0, Capacity(0.0, 0.0, 1.0)).count is None


def test_the_probe_past_its_frontend_pins_a_capacity_the_probe_itself_allows(
        stored: HardwareProfile) -> None:
    """The recorded probe's top window (64 req/s) missed the SLO (TTFT p95 460 ms: the server's
    frontend past ~6,300 tokens/s) and the same lease met it at 40: a capacity predicted from
    that probe must lie between. Held to the simulator's own frontend costs (at most 0.07
    ms/token), the fit predicted 79.6 req/s; it chooses a slower frontend now."""
    by_rate = {t.workload_spec["params"]["arrival"]["rate_rps"]: t for t in _probe_trials()}
    assert by_rate[64.0].metrics["ttft_p95_ms"] > SLO["ttft_p95_ms"]
    assert by_rate[40.0].metrics["ttft_p95_ms"] <= SLO["ttft_p95_ms"]
    assert stored.frontend_token_ms > max(FRONTEND_TOKEN_MS)
    cap = capacity_at_slo(stored, _chat_streams(stored), SLO, low_rps=2.0, high_rps=300.0,
                          tolerance=0.02)
    assert 40.0 <= cap.rate_rps < 64.0


def test_shared_prefixes_prefill_once_where_the_engine_caches_them(
        stored: HardwareProfile) -> None:
    """`rag-long-prompt` (half its prompts open with one of four 512-token prefixes): with the
    prefix cache on (vLLM's default, the knob of role prefix_cache), each prefix after its first
    arrival costs no prefill, so the prompts replayed are shorter and TTFT p95 lower; the arrivals
    and output lengths are the same requests."""
    import yaml

    from objectives.registry import get_target

    assert get_target("vllm").space().knob_with_role("prefix_cache") == "enable_prefix_caching"
    rag = yaml.safe_load((ROOT / "objectives/workloads/rag-long-prompt.yaml").read_text())
    params = {**rag["params"], "model": "llama-3-8b", "n_requests": 96, "drain_limit_s": 15}
    plain = workload_streams(params, seeds=1)(6.0)[0]
    cached = workload_streams(params, seeds=1, prefix_cache=True)(6.0)[0]
    assert (plain.arrivals_s == cached.arrivals_s).all()
    assert (plain.output_tokens == cached.output_tokens).all()
    saved = plain.prompt_tokens - cached.prompt_tokens
    assert set(saved.tolist()) == {0, 512} and int((saved == 512).sum()) == 48 - 4
    ttft = [predict(stored, [s], rate_rps=6.0).figures["ttft_p95_ms"].value
            for s in (plain, cached)]
    assert ttft[1] < ttft[0]
    chat = _chat_streams(stored)  # no shared prefix: nothing changes
    assert (chat(20.0)[0].prompt_tokens == workload_streams(
        stored.probe[0]["workload_spec"]["params"], seeds=1,
        prefix_cache=True)(20.0)[0].prompt_tokens).all()


def test_the_probe_measures_eight_second_windows_unless_told_otherwise() -> None:
    """A preset sized for long runs (`chat`: 600 requests at 20 req/s) is cut to the probe's
    window; a user's own `n_requests` or drain is kept."""
    assert probe_window_params({}, 20.0) == [f"n_requests={round(20 * PROBE_WINDOW_S)}",
                                              f"drain_limit_s={PROBE_DRAIN_LIMIT_S:g}"]
    assert probe_window_params({"n_requests": 50}, 20.0) == [
        f"drain_limit_s={PROBE_DRAIN_LIMIT_S:g}"]
    assert probe_window_params({"n_requests": 50, "drain_limit_s": 30}, 20.0) == []
    assert probe_window_params({}, None) == [f"drain_limit_s={PROBE_DRAIN_LIMIT_S:g}"]


def test_bisections_sharing_their_predictions_find_the_same_capacities(
        stored: HardwareProfile) -> None:
    """Answers pass one mapping of predictions by rate to every SLO's bisection of a config:
    each finds what it finds alone, and the later ones reuse the earlier ones' rates."""
    at = _chat_streams(stored)
    slos = [SLO, {"tpot_p95_ms": 40.0}]
    alone = [capacity_at_slo(stored, at, s, low_rps=2.0, high_rps=300.0, tolerance=0.05)
             for s in slos]
    shared: dict[float, Prediction] = {}
    first = capacity_at_slo(stored, at, slos[0], low_rps=2.0, high_rps=300.0, tolerance=0.05,
                            predictions=shared)
    tried = len(shared)
    second = capacity_at_slo(stored, at, slos[1], low_rps=2.0, high_rps=300.0, tolerance=0.05,
                             predictions=shared)
    assert [first, second] == alone
    assert {2.0, 300.0} <= set(shared) and len(shared) < 2 * tried


def test_window_noise_pools_repeated_windows_only() -> None:
    trials = _probe_trials()  # four rates, one window each: no repeats, no noise
    assert window_noise(trials, trials[0].target) == {}
    twin = [t.model_copy(update={"metrics": {**t.metrics, "ttft_p95_ms":
                                             t.metrics["ttft_p95_ms"] * 2}}) for t in trials]
    noise = window_noise([*trials, *twin], trials[0].target)
    assert noise["ttft_p95_ms"] == pytest.approx(math.log(2) / math.sqrt(2))
    assert noise["tpot_p95_ms"] == 0.0


def test_calibrate_from_a_stored_study_and_the_profiles_listing(tmp_path: Path) -> None:
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 's.db'}",
           "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "ADVISOR_IMPORT_SHIPPED": "0",
           "COLUMNS": "200", "PYTHONPATH": str(ROOT)}

    def advisor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)

    assert advisor("knowledge", "import", str(PROBE)).returncode == 0
    bad = advisor("calibrate", "--from-study", "nothing-here")
    assert bad.returncode == 2 and "no stored windows" in bad.stderr
    done = advisor("calibrate", "--from-study", "h100-8b-chat-1206", "-o",
                   str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stderr
    assert "h100/vllm/llama-3-8b" in done.stdout and "calibration error" in done.stdout
    listed = advisor("knowledge", "profiles")
    assert listed.returncode == 0 and "h100/vllm/llama-3-8b" in listed.stdout
    written = json.loads((tmp_path / "p.json").read_text())
    stored = json.loads(PROFILE.read_text())
    for key in ("fixed_ms", "per_sequence_ms", "per_prefill_token_ms", "error_log"):
        assert written[key] == _close(stored[key])


def test_more_frontend_processes_share_the_calibrated_frontend(stored: HardwareProfile) -> None:
    """A config running twice the probe's server processes in front of the engine (vLLM's
    ``--api-server-count``, the knob of role frontend_processes) halves each streamed token's
    frontend cost: below the frontend's capacity little changes, past it TTFT p95 falls and the
    capacity at the SLO rises; the engine's own step costs are the profile's either way."""
    model = stored.batch_model()
    doubled = frontend_scaled(model, 2)
    assert doubled.frontend.per_token_ms == pytest.approx(model.frontend.per_token_ms / 2)
    assert doubled.step == model.step and doubled.offsets_ms == model.offsets_ms
    assert frontend_scaled(model, 1) is model
    with pytest.raises(ValueError, match="must be > 0"):
        frontend_scaled(model, 0)
    at = _chat_streams(stored)
    light = [predict(stored, at(10.0), rate_rps=10.0, frontend_processes=n)
             .figures["ttft_p95_ms"].value for n in (1, 2)]
    assert light[1] <= light[0] and light[1] == pytest.approx(light[0], rel=0.1)
    heavy = [predict(stored, at(70.0), rate_rps=70.0, frontend_processes=n)
             .figures["ttft_p95_ms"].value for n in (1, 2)]
    assert heavy[1] < 0.8 * heavy[0]
    caps = [capacity_at_slo(stored, at, SLO, low_rps=2.0, high_rps=300.0, tolerance=0.02,
                            frontend_processes=n) for n in (1, 2)]
    assert caps[1].rate_rps > caps[0].rate_rps


def test_an_assumed_gain_keeps_the_interval_without_it(stored: HardwareProfile) -> None:
    """The frontend processes' share is an assumption: the answer widens such a prediction to
    span the one without it, keeping its own point value; a capacity likewise."""
    at = _chat_streams(stored)
    two = predict(stored, at(70.0), rate_rps=70.0, frontend_processes=2)
    one = predict(stored, at(70.0), rate_rps=70.0)
    both = spanning(two, one)
    for m, f in both.figures.items():
        assert f.value == two.figures[m].value
        assert f.low == min(two.figures[m].low, one.figures[m].low)
        assert f.high == max(two.figures[m].high, one.figures[m].high)
    assert both.figures["ttft_p95_ms"].high == one.figures["ttft_p95_ms"].high
    cap = spanning_capacity(Capacity(80.0, 60.0, 90.0), Capacity(60.0, 50.0, 70.0))
    assert (cap.rate_rps, cap.low, cap.high) == (80.0, 50.0, 90.0)
