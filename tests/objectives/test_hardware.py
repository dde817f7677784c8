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
