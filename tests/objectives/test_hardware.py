"""The hardware fingerprint: stable keys, and only the GPUs a process may use."""

from __future__ import annotations

import pytest

from objectives import hardware


def test_keys() -> None:
    gpu = [{"name": "NVIDIA H200", "memory_mib": 143771.0, "driver": "580"}]
    assert hardware.hardware_key_for(gpu, "x", 16) == "1x-nvidia-h200"
    assert hardware.hardware_key_for(gpu * 2, "x", 16) == "2x-nvidia-h200"
    assert hardware.hardware_key_for([], "AMD EPYC 7B13 64-Core Processor", 2) == \
        "cpu-amd-epyc-7b13-64-core-processor-2c"


def test_fingerprint_records_cpu_and_memory() -> None:
    fp = hardware.fingerprint()
    assert fp["cpu_count"] >= 1 and fp["memory_gib"] > 0 and fp["key"]


@pytest.mark.parametrize("visible, index, uuid, expected", [
    (None, "0", "GPU-aaa", True),
    ("1", "0", "GPU-aaa", False),
    ("0,1", "1", "GPU-bbb", True),
    ("GPU-bb", "3", "GPU-bbb", True),
    ("", "0", "GPU-aaa", False),
])
def test_cuda_visible_devices_narrows_the_gpus(monkeypatch: pytest.MonkeyPatch, visible: str | None,
                                               index: str, uuid: str, expected: bool) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert hardware._visible(index, uuid) is expected


_GPU_HOST = {"key": "1x-nvidia-h200", "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 16,
             "gpus": [{"name": "NVIDIA H200", "memory_mib": 143771.0, "driver": "580"}]}


def test_a_cpu_only_engine_is_filed_under_the_cpu_of_a_gpu_host() -> None:
    assert hardware.filed_under(_GPU_HOST, uses_accelerator=True) == "1x-nvidia-h200"
    assert (hardware.filed_under(_GPU_HOST, uses_accelerator=False)
            == "cpu-intel-xeon-processor-16c")
    cpu_host = {**_GPU_HOST, "gpus": [], "key": "cpu-intel-xeon-processor-2c", "cpu_count": 2}
    assert hardware.filed_under(cpu_host, uses_accelerator=False) == cpu_host["key"]
    # A fingerprint without its CPU facts keeps the key it has.
    assert hardware.filed_under({"key": "1x-nvidia-h200", "gpus": [{}]},
                                uses_accelerator=False) == "1x-nvidia-h200"


def test_targets_declare_where_their_trials_are_filed() -> None:
    from advisor.trial_records import trial_hardware_key

    assert trial_hardware_key("faiss", _GPU_HOST) == "cpu-intel-xeon-processor-16c"
    assert trial_hardware_key("vllm", _GPU_HOST) == "1x-nvidia-h200"
    assert trial_hardware_key("no-such-target", _GPU_HOST) == "1x-nvidia-h200"


def test_shipped_trials_of_cpu_only_targets_are_filed_under_a_cpu() -> None:
    """No shipped trial of an engine that runs on the CPU only sits in a GPU's context (the
    FAISS sweep measured on the H200 host's CPU was once filed under the H200)."""
    import json

    from knowledge.transfer import read_trials_text, shipped_files
    from objectives.registry import target_class, target_names

    cpu_only = {n for n in target_names() if not target_class(n).uses_accelerator}
    assert "faiss" in cpu_only
    seen = 0
    for path in shipped_files():
        for line in read_trials_text(path).splitlines():
            row = json.loads(line)
            if row.get("format") == "slo-advisor-trial/1" and row["trial"]["target"] in cpu_only:
                seen += 1
                assert row["trial"]["hardware_key"].startswith("cpu-"), path.name
                assert row["study"]["hardware_key"].startswith("cpu-"), path.name
    assert seen > 900


def test_refiling_an_old_export_rewrites_every_key_of_the_line() -> None:
    import importlib.util
    import json
    from pathlib import Path

    # A script, not a package: loaded from its file.
    path = Path(__file__).parents[2] / "scripts" / "knowledge" / "refile_hardware.py"
    spec = importlib.util.spec_from_file_location("refile_hardware", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    refile_line = module.refile_line

    line = json.dumps({"format": "slo-advisor-trial/1",
                       "study": {"name": "s", "hardware_key": "1x-nvidia-h200"},
                       "trial": {"target": "faiss", "hardware_key": "1x-nvidia-h200",
                                 "hardware": _GPU_HOST}})
    new, change = refile_line(line)
    assert change == ("1x-nvidia-h200", "cpu-intel-xeon-processor-16c")
    assert "1x-nvidia-h200" not in new and new.count("cpu-intel-xeon-processor-16c") == 3
    assert refile_line(new) == (new, None)


def test_a_hardware_filter_names_whole_parts_of_a_key() -> None:
    """`--hardware h200` names `1x-nvidia-h200`; `0` or `h2` name nothing (they used to select
    every key that contained them, `GET /v1/cheatsheet?hardware=0` every context)."""
    key = "1x-nvidia-h100-80gb-hbm3"
    for query in ("h100", "H100", "nvidia-h100", "80gb-hbm3", "1x-nvidia-h100-80gb-hbm3",
                  "h100-"):
        assert hardware.hardware_matches(query, key), query
    for query in ("0", "h1", "h10", "100", "hbm", "h100-hbm3", "", "-"):
        assert not hardware.hardware_matches(query, key), query
    assert hardware.hardware_matches("cpu", "cpu-amd-epyc-2c")
    assert not hardware.hardware_matches("2", "cpu-amd-epyc-2c")
