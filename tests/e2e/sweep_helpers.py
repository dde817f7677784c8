"""What the `advisor sweep` end-to-end tests share: the CLI as a subprocess, sweep files, the
scripted cell, and the store-consistency check (no lost, duplicated or stuck trial)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from knowledge import TrialStatus, TrialStore

ROOT = Path(__file__).resolve().parents[2]


def advisor(*args: str, env: dict[str, str], timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def sweep_file(tmp_path: Path, name: str, matrix: list[dict[str, Any]], **top: Any) -> Path:
    # Random search (seeded): these tests are about sweeps, and TPE, modelling after 5 trials,
    # may propose the scripted engine's hanging or crashing configs in a row (a failing cell).
    data = {"name": name, "workers": 2, "trials": 6, "repeats": 2, "seed": 0, "sampler": "random",
            "trial_timeout_s": 60, "max_consecutive_failures": 3,
            "warm_start": {"recommendation": False, "best_known": 1},
            "drift": {"noise_factor": 3, "min_change": 0.1}, "matrix": matrix, **top}
    path = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def scripted_cell(tier: str = "t", **params: Any) -> dict[str, Any]:
    return {"target": "scripted", "workload_params": {"delay_s": 0.3, **params},
            "slo_tiers": {tier: "p95_latency_ms<=1,recall_at_10>=0.8"}}


def summary_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


def study_trials(store: TrialStore, name: str) -> list[Any]:
    study = store.get_study(name)
    assert study is not None, name
    return store.trials_of_study(study.id or 0)


def assert_consistent(store: TrialStore, study_name: str, budget: int) -> None:
    """No lost, duplicated or stuck-running trials; Optuna agrees with the store. ``budget``
    counts the trials that took a slot (settings a search sweep measured beside them do not)."""
    trials = study_trials(store, study_name)
    finished = [t for t in trials if t.status in TrialStatus.FINISHED and t.swept_from is None]
    assert len(finished) == budget, [(t.number, t.status) for t in trials]
    assert not [t for t in trials if t.status == TrialStatus.RUNNING]
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    ostudy = optuna.load_study(study_name=study_name, storage=store.url)
    states = [t.state for t in ostudy.get_trials(deepcopy=False)]
    assert optuna.trial.TrialState.RUNNING not in states
    complete = {t.number for t in ostudy.get_trials(deepcopy=False)
                if t.state == optuna.trial.TrialState.COMPLETE}
    assert complete == {t.number for t in trials if t.status == TrialStatus.COMPLETE}


def run_nightly_cpu_sweep(backend: str, tmp_path: Path, faiss_cache: Path,
                          ray_address: str | None = None) -> None:
    """Run the shipped nightly CPU matrix (on Ray: its FAISS cells) and check every cell:
    budget and repeats finished, the engine default measured, the reports written."""
    pytest.importorskip("faiss")
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp_path / 'n.db'}",
           "ADVISOR_CACHE_DIR": str(faiss_cache), "ADVISOR_IMPORT_SHIPPED": "false",
           "COLUMNS": "200"}
    sweep = "sweeps/nightly-cpu.yaml"
    cells = 3
    if backend == "ray":
        # On Ray, the FAISS cells of the shipped matrix: the trainable is the same for every
        # target (the local run covers the transformers cell, ~60 s of CPU trials), so this
        # checks what Ray adds — trials spread as Tune trials, stored and told — on a real engine.
        # One of its SLO tiers: a tier is one more study of the same trainable, which the local
        # run covers (both tiers); Ray's part is the same for one cell as for two.
        spec = yaml.safe_load((ROOT / sweep).read_text())
        spec["matrix"] = [c for c in spec["matrix"] if c["target"] == "faiss"]
        for cell in spec["matrix"]:
            cell["slo_tiers"] = dict(list(cell["slo_tiers"].items())[:1])
        cells = sum(len(c["slo_tiers"]) for c in spec["matrix"])
        sweep = str(tmp_path / "nightly-cpu-faiss.yaml")
        Path(sweep).write_text(yaml.safe_dump(spec, sort_keys=False))
    args = ["sweep", "run", sweep, "--json", "--report-dir", str(tmp_path / "report")]
    if backend == "ray":
        args += ["--backend", "ray", "--ray-address", str(ray_address)]
    result = advisor(*args, env=env, timeout=1200)
    summary = summary_of(result)
    assert result.returncode == summary["exit_code"] == 0, (result.stderr[-3000:], summary)
    assert summary["backend"] == backend and len(summary["cells"]) == cells
    store = TrialStore(env["ADVISOR_DB_URL"])
    for cell in summary["cells"]:
        assert cell["status"] == "ok", cell
        llm = cell["key"].startswith("transformers")
        assert_consistent(store, cell["study"], 3 if llm else 7)  # budget + repeats of the best
        trials = study_trials(store, cell["study"])
        assert {t.details.get("role") for t in trials} >= {"engine-default", "repeat"}
        for t in trials:
            assert (t.hardware_key and t.engine_versions) or t.status != TrialStatus.COMPLETE
            if backend == "ray":  # each trial ran as a Tune trial on the cluster
                assert t.details.get("ray_trial_id"), (t.number, t.details)
    reports = summary["reports"]
    assert Path(reports["summary"]).exists()
    assert Path(reports["cheatsheet_faiss_md"]).read_text().strip()
    assert "context" in reports["models_faiss"]
    if backend == "ray":  # Ray ran the trials: Tune experiments (search, then repeats) per cell
        experiments = list((Path(env["ADVISOR_CACHE_DIR"]) / "ray-tune").iterdir())
        assert len(experiments) >= 2 * cells, experiments
