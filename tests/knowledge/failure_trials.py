"""Studies of the scripted target with a hidden constraint — configs with x·y above a limit crash
at start — written straight into a store (no driver), so the failure model and the gate can be
tested on data whose truth is known, in seconds."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from knowledge import StudyRecord, TrialRecord, TrialStore
from objectives.hardware import fingerprint
from objectives.workload import Workload
from tests.advisor.defaults_store import config_hash
from tests.scripted_target import response

#: Configs with x·y above this crash at start (the scripted space: x in [0, 1], y in [1, 64]).
LIMIT = 12.0
#: What a failed start costs and what a measurement costs, seconds (the H200's order).
FAILED_START_S = 45.0
MEASURED_S = 20.0


def violates(config: Mapping[str, Any], limit: float = LIMIT) -> bool:
    return float(config["x"]) * int(config["y"]) > limit


def random_config(rng: random.Random) -> dict[str, Any]:
    config: dict[str, Any] = {"x": round(rng.uniform(0.02, 0.89), 3),
                              "y": int(2 ** rng.uniform(0, 6)), "mode": rng.choice("ab")}
    if config["mode"] == "b":
        config["z"] = rng.randint(1, config["y"])
    return config


def constrained_study(store: TrialStore, name: str, *, n_configs: int = 60, seed: int = 0,
                      limit: float = LIMIT, hardware: Mapping[str, Any] | None = None,
                      workload: Workload | None = None) -> list[TrialRecord]:
    """A finished study of ``n_configs`` random configs: those over ``limit`` failed as
    ``crash`` (with a reason), the others measured on the scripted response surface."""
    hw = dict(hardware or fingerprint())
    wl = workload or Workload("scripted", "scripted-default", {"delay_s": 0.0})
    study = store.create_study(StudyRecord(
        name=name, target="scripted", slo="p95_latency_ms<=1", objective_metric="qps",
        objective_direction="maximize", workload_spec=wl.spec, workload_hash=wl.spec_hash,
        sampler="random", n_trials=n_configs, hardware_key=str(hw["key"]),
        advisor_version="test"))
    rng = random.Random(seed)
    out = []
    for number in range(n_configs):
        config = random_config(rng)
        t = store.start_trial(TrialRecord(
            study_id=study.id or 0, number=number, target="scripted", config=config,
            config_hash=config_hash(config), workload_spec=wl.spec, workload_hash=wl.spec_hash,
            hardware=hw, hardware_key=str(hw["key"]), advisor_version="test"))
        if violates(config, limit):
            product = float(config["x"]) * int(config["y"])
            out.append(store.fail_trial(
                t.id or 0, error_type="crash", duration_s=FAILED_START_S,
                error=f"engine aborted at start: x*y={product:.2f} is over {limit:g}"))
        else:
            metrics = response(config)
            out.append(store.complete_trial(
                t.id or 0, metrics=metrics, engine_versions={"scripted": "1.0"}, details={},
                margins=[], feasible=None, objective_value=metrics["qps"],
                duration_s=MEASURED_S))
    return out
