"""Sweep files: validation names the broken field; the matrix expands to the right cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from advisor.sweeps.spec import SweepFileError, load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[2]


def base(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t", "trials": 4,
        "matrix": [{"target": "scripted", "slo_tiers": {"strict": "p95_latency_ms<=1",
                                                         "loose": "p95_latency_ms<=5"}}],
    }
    data.update(over)
    return data


def test_matrix_expands_targets_models_workloads_and_tiers() -> None:
    spec = parse_sweep(base(matrix=[
        {"target": "scripted", "workloads": [None], "slo_tiers": {"a": "p95_latency_ms<=1",
                                                                  "b": "p95_latency_ms<=2"},
         "workload_params": {"delay_s": 0.1}, "trials": 7},
        {"target": "transformers", "models": ["tiny-llama"], "workloads": ["chat-cpu"],
         "slo_tiers": {"i": "ttft_p95_ms<=2000"}},
    ]))
    keys = [c.key for c in spec.cells]
    assert keys == ["scripted/-/scripted-default/a", "scripted/-/scripted-default/b",
                    "transformers/tiny-llama/chat-cpu/i"]
    assert [c.trials for c in spec.cells] == [7, 7, 4]
    assert spec.cells[0].workload.params["delay_s"] == 0.1
    assert spec.cells[2].workload.params["model"] == "tiny-llama"
    assert spec.cells[0].study_name("t@2026-11-30") == "t@2026-11-30/scripted/-/scripted-default/a"


def test_spec_hash_changes_with_the_file() -> None:
    assert parse_sweep(base()).spec_hash == parse_sweep(base()).spec_hash
    assert parse_sweep(base()).spec_hash != parse_sweep(base(trials=5)).spec_hash


@pytest.mark.parametrize(("data", "message"), [
    (base(name="bad name"), "`name`"),
    (base(backend="slurm"), "`backend`"),
    (base(workers=0), "`workers`"),
    (base(trails=3), "unknown field(s) trails"),
    (base(matrix=[]), "`matrix`"),
    (base(matrix=[{"target": "nope", "slo_tiers": {"a": "p95_latency_ms<=1"}}]),
     "unknown target 'nope'"),
    (base(matrix=[{"target": "scripted", "slo_tiers": {"a": "ttft_p95_ms<=1"}}]),
     "SLO tier 'a'"),
    (base(matrix=[{"target": "scripted", "slo_tiers": {"a": "p95_latency_ms<=1"},
                   "objective": "maximize:nothing"}]), "objective: unknown metric"),
    (base(matrix=[{"target": "scripted", "slo_tiers": {"a": "p95_latency_ms<=1"},
                   "objective": "maximize:ttft_p95_ms"}]), "objective metric"),
    (base(matrix=[{"target": "scripted", "slo_tiers": {"a": "p95_latency_ms<=1"},
                   "workloads": ["nope"]}]), "unknown workload 'nope'"),
    (base(matrix=[{"target": "scripted", "slo_tiers": {"a": "p95_latency_ms<=1"},
                   "fixed": {"x": 7.0}}]), "fixed"),
    (base(matrix=[{"target": "scripted", "slo_tiers": {"a": "p95_latency_ms<=1"}},
                  {"target": "scripted", "slo_tiers": {"a": "p95_latency_ms<=2"}}]),
     "cells appear twice"),
    (base(drift={"noise_factor": -1}), "noise_factor"),
    (base(ray={"gpus": 1}), "unknown field(s) gpus"),
])
def test_bad_files_name_the_broken_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SweepFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_sweep(data, source="f.yaml")


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(SweepFileError, match="cannot read"):
        load_sweep(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SweepFileError, match="not valid YAML"):
        load_sweep(bad)


def test_shipped_nightly_cpu_sweep_is_valid() -> None:
    spec = load_sweep(ROOT / "sweeps" / "nightly-cpu.yaml")
    assert {c.target for c in spec.cells} == {"faiss", "transformers"}
    assert len(spec.cells) == 3 and spec.workers == 2 and spec.repeats >= 2


def test_shipped_two_gpu_vllm_sweep_loads_here_with_one_gpu_per_trial() -> None:
    # It must load on a machine without GPUs (plan it, check it) even though it runs on two.
    spec = load_sweep(ROOT / "sweeps" / "h200-x2-vllm-ray.yaml")
    (cell,) = spec.cells
    assert cell.target == "vllm" and spec.backend == "ray" and spec.workers == 2
    assert dict(cell.fixed) == {"tensor_parallel_size": 1, "data_parallel_size": 1}
    assert spec.ray.gpus_per_trial == 1
