"""A scripted LLM-serving target and a small measured store of it for the cheat-sheet's figures:
one workload family co-measured at four arrival rates (the engine default, a config that holds
the interactive SLO to the highest rate, one that saturates early, and configs measured at one
rate), and one family measured at a single rate.

The target reports the serving metrics (TTFT, TPOT, output tokens/s) so the sheet gives it the
LLM tiers; its knobs are generic (``max_batch``, ``chunked``). Trials are written straight into
the store (no driver), with a known queueing response, so the figures' points can be checked.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from knowledge import StudyRecord, TrialRecord, TrialStore
from objectives.measurement import Measurement
from objectives.target import Target
from objectives.workload import Workload, canonical_json
from search_spaces import SearchSpace

NAME = "scripted-serving"
REGISTRATION = f"{NAME}=tests.advisor.serving_sheet_store:ServingTarget"
HARDWARE = "cpu-test-box-2c"
MODEL = "tiny-test"
RATES = (10.0, 20.0, 40.0, 80.0)
ONE_RATE = 5.0

SPACE = {
    "target": NAME,
    "engine": NAME,
    "knobs": [
        {"name": "max_batch", "type": "int", "low": 1, "high": 512, "log": True, "default": 64,
         "unit": "requests"},
        {"name": "chunked", "type": "bool", "default": True},
    ],
}

DEFAULT = {"max_batch": 64, "chunked": True}
HOLDS = {"max_batch": 256, "chunked": True}  # meets the interactive SLO at every rate
SATURATES = {"max_batch": 16, "chunked": False}  # past capacity at the highest rate
ONE_OFF = ({"max_batch": 32, "chunked": True}, {"max_batch": 128, "chunked": False})


def capacity_rps(config: Mapping[str, Any]) -> float:
    return 15.0 * math.log2(int(config["max_batch"])) * (1.2 if config["chunked"] else 1.0)


def truth(config: Mapping[str, Any], rate: float) -> dict[str, float]:
    """TTFT grows exponentially with utilisation, TPOT linearly; throughput is capped."""
    u = rate / capacity_rps(config)
    ttft = 40.0 * math.exp(4.0 * u)
    return {"ttft_p95_ms": ttft, "ttft_p99_ms": 1.3 * ttft, "tpot_p95_ms": 8.0 + 20.0 * u,
            "output_tokens_per_s": min(rate, capacity_rps(config)) * 128.0}


class ServingTarget(Target):
    name = NAME
    engine = NAME
    description = "scripted LLM serving response for cheat-sheet tests"
    default_objective = "maximize:output_tokens_per_s"
    default_slo = "ttft_p95_ms<=500"
    install_hint = "nothing to install"

    def reported_metrics(self) -> frozenset[str]:
        return frozenset({"ttft_p95_ms", "ttft_p99_ms", "tpot_p95_ms", "output_tokens_per_s"})

    def space(self) -> SearchSpace:
        return SearchSpace.from_dict(SPACE, source="tests/advisor/serving_sheet_store.py")

    def check_available(self) -> None:
        return None

    def engine_versions(self) -> dict[str, str]:
        return {NAME: "1.0"}

    def default_workload(self) -> Workload:
        return workload("chat", RATES[0])

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        rate = float(workload.params["arrival"]["rate_rps"])
        return Measurement(truth(config, rate), self.engine_versions(), {})

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        return "serve " + " ".join(f"--{k} {v}" for k, v in config.items())


def workload(name: str, rate: float, prompt: float = 256.0) -> Workload:
    return Workload("llm-serving", name, {
        "arrival": {"process": "poisson", "rate_rps": rate}, "model": MODEL,
        "prompt_len": {"median": prompt}, "output_len": {"median": 128.0}})


def _write(store: TrialStore, study: StudyRecord, wl: Workload, number: int,
           config: Mapping[str, Any], noise: float) -> TrialRecord:
    t = store.start_trial(TrialRecord(
        study_id=study.id or 0, number=number, target=NAME, config=dict(config),
        config_hash=hashlib.sha256(canonical_json(dict(config)).encode()).hexdigest()[:16],
        workload_spec=wl.spec, workload_hash=wl.spec_hash, hardware={"key": HARDWARE},
        hardware_key=HARDWARE, engine_versions={NAME: "1.0"}, advisor_version="test"))
    rate = float(wl.params["arrival"]["rate_rps"])
    metrics = {m: v * noise for m, v in truth(config, rate).items()}
    return store.complete_trial(t.id or 0, metrics=metrics, engine_versions={NAME: "1.0"},
                                details={}, margins=[], feasible=None,
                                objective_value=metrics["output_tokens_per_s"], duration_s=0.01)


def _study(store: TrialStore, name: str, wl: Workload) -> StudyRecord:
    return store.create_study(StudyRecord(
        name=name, target=NAME, slo="ttft_p95_ms<=500", objective_metric="output_tokens_per_s",
        objective_direction="maximize", workload_spec=wl.spec, workload_hash=wl.spec_hash,
        sampler="random", n_trials=10, hardware_key=HARDWARE, advisor_version="test"))


def populate(store: TrialStore) -> None:
    """The chat family at every rate of :data:`RATES` (co-measured, named ``chat@<rate>rps``
    after the first) and the ``long`` family at :data:`ONE_RATE` only."""
    for i, rate in enumerate(RATES):
        name = "chat" if i == 0 else f"chat@{rate:g}rps"
        wl = workload(name, rate)
        study = _study(store, f"serving-{name}", wl)
        number = 0
        for config in (DEFAULT, HOLDS, SATURATES):
            for noise in (0.97, 1.03):  # two repeats: a spread bar per point
                _write(store, study, wl, number, config, noise)
                number += 1
        if rate == RATES[1]:
            for config in ONE_OFF:
                _write(store, study, wl, number, config, 1.0)
                number += 1
    wl = workload("long", ONE_RATE, prompt=1024.0)
    study = _study(store, "serving-long", wl)
    for number, config in enumerate((DEFAULT, HOLDS, SATURATES, *ONE_OFF)):
        _write(store, study, wl, number, config, 1.0)
