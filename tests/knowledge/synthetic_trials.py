"""Synthetic trials of the scripted target with a known response surface, written straight into a
store (no driver), so surrogate and recommender tests run in seconds and can compare predictions
with the truth."""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

from knowledge import StudyRecord, TrialRecord, TrialStore
from objectives.workload import Workload, canonical_json

HARDWARE = "cpu-test-box-2c"


def truth(config: dict[str, Any], n_vectors: float) -> dict[str, float]:
    """qps peaks near x=0.6, grows with y and falls with N; latency grows with x*y and N."""
    x, y = float(config["x"]), int(config["y"])
    scale = n_vectors / 2000
    mode = 1.3 if config["mode"] == "b" else 1.0
    return {
        "qps": 1000.0 * (1 - (x - 0.6) ** 2) * math.log2(y + 1) / 6 / scale * mode,
        "p95_latency_ms": (0.2 + 2.0 * x * y / 64) * scale * mode,
        "recall_at_10": min(0.999, 0.5 + 0.55 * x),
    }


def random_config(rng: random.Random) -> dict[str, Any]:
    config: dict[str, Any] = {"x": round(rng.uniform(0.05, 0.85), 3),
                              "y": int(2 ** rng.uniform(0, 6)), "mode": rng.choice("ab")}
    if config["mode"] == "b":
        config["z"] = rng.randint(1, config["y"])
    return config


def populate(store: TrialStore, *, n_configs: int = 40, sizes: tuple[int, ...] = (1000, 2000,
             4000), repeats: int = 2, noise: float = 0.04, seed: int = 0,
             hardware: str = HARDWARE, study_prefix: str = "syn",
             target: str = "scripted") -> list[TrialRecord]:
    """``n_configs`` random configs measured ``repeats`` times at each corpus size, with
    multiplicative log-normal noise of ``noise``, as trials of ``target``."""
    rng = random.Random(seed)
    configs = [random_config(rng) for _ in range(n_configs)]
    out: list[TrialRecord] = []
    for size in sizes:
        wl = Workload(target, f"{target}-{size}", {"n_base": size, "dim": 64})
        study = store.create_study(StudyRecord(
            name=f"{study_prefix}-{size}", target=target, slo="p95_latency_ms<=1",
            objective_metric="qps", objective_direction="maximize", workload_spec=wl.spec,
            workload_hash=wl.spec_hash, sampler="random", n_trials=n_configs * repeats,
            hardware_key=hardware, advisor_version="test"))
        number = 0
        for config in configs:
            for _ in range(repeats):
                t = store.start_trial(TrialRecord(
                    study_id=study.id or 0, number=number, target=target, config=config,
                    config_hash=hashlib.sha256(canonical_json(config).encode()).hexdigest()[:16],
                    workload_spec=wl.spec,
                    workload_hash=wl.spec_hash, hardware={"key": hardware},
                    hardware_key=hardware, engine_versions={target: "1.0"},
                    advisor_version="test"))
                metrics = {m: v * math.exp(rng.gauss(0, noise)) if m != "recall_at_10" else v
                           for m, v in truth(config, size).items()}
                out.append(store.complete_trial(
                    t.id or 0, metrics=metrics, engine_versions={target: "1.0"},
                    details={}, margins=[], feasible=None, objective_value=metrics["qps"],
                    duration_s=0.01))
                number += 1
    return out
