"""Hardware fingerprint recorded with every trial: CPU/GPU model, memory, driver, OS.

Read from /proc, ``os`` and ``nvidia-smi`` (when present) without importing any engine, so the
fingerprint costs milliseconds and works on any machine.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

__all__ = ["filed_under", "fingerprint", "hardware_key", "hardware_matches"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float:
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return round(pages * page_size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return 0.0


def _visible(index: str, uuid: str) -> bool:
    """Whether CUDA_VISIBLE_DEVICES lets this process use the GPU (unset: all are visible)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return True
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return index in wanted or any(uuid.startswith(w) for w in wanted if w.startswith("GPU-"))


def _gpus() -> list[dict[str, Any]]:
    """The GPUs this process can use (nvidia-smi lists all; CUDA_VISIBLE_DEVICES narrows it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid,name,memory.total,driver_version",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        index, uuid, name, mem, driver = (p.strip() for p in line.split(",")[:5])
        if _visible(index, uuid):
            gpus.append({"index": int(index), "uuid": uuid, "name": name,
                         "memory_mib": float(mem), "driver": driver})
    return gpus


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@lru_cache(maxsize=1)
def fingerprint() -> dict[str, Any]:
    """The hardware this process runs on, as plain data."""
    gpus, cpu_model = _gpus(), _cpu_model()
    return {
        "key": hardware_key_for(gpus, cpu_model, os.cpu_count() or 1),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count() or 1,
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": _memory_gib(),
        "gpus": gpus,
        "gpu_driver": gpus[0]["driver"] if gpus else None,
        "machine": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def hardware_key_for(gpus: list[dict[str, Any]], cpu_model: str, cpu_count: int) -> str:
    """A short stable name for grouping trials by hardware (``1x-nvidia-h200``, ``cpu-...-2c``)."""
    if gpus:
        name = _slug(gpus[0]["name"]).replace("nvidia-", "")
        return f"{len(gpus)}x-nvidia-{name}"
    model = _slug(re.sub(r"\(R\)|\(TM\)|CPU|@.*$", "", cpu_model))
    return f"cpu-{model}-{cpu_count}c"


def filed_under(hardware: Mapping[str, Any], *, uses_accelerator: bool) -> str:
    """The hardware key a trial measured on ``hardware`` (a :func:`fingerprint`) is filed
    under: the machine's key, or, for an engine that runs on the CPU only, the key of the CPU
    alone (a GPU host's CPU is not the GPU). A fingerprint without its CPU facts keeps its key."""
    key = str(hardware.get("key", ""))
    if uses_accelerator or not hardware.get("gpus"):
        return key
    cpu_model, cpu_count = hardware.get("cpu_model"), hardware.get("cpu_count")
    if not cpu_model or not cpu_count:
        return key
    return hardware_key_for([], str(cpu_model), int(cpu_count))


def hardware_key() -> str:
    """The short key of this machine."""
    return str(fingerprint()["key"])


def hardware_matches(query: str, key: str) -> bool:
    """Whether ``query`` names the hardware ``key``: the whole key or a run of its dash-separated
    parts, in any case (``h200``, ``nvidia-h200``, ``80gb-hbm3``, ``cpu`` each name
    ``1x-nvidia-h200`` or ``cpu-amd-epyc-2c`` as they fit). A fragment of a part (``0``, ``h1``)
    names nothing: it would select every key that happens to contain it."""
    asked = [p for p in query.lower().split("-") if p]
    parts = key.lower().split("-")
    n = len(asked)
    return bool(asked) and any(parts[i:i + n] == asked for i in range(len(parts) - n + 1))


def hardware_key_with_gpus(n_gpus: int) -> str:
    """The key a process of this machine records when it is given ``n_gpus`` of its GPUs (one
    trial of a sweep that splits the GPUs); 0 GPUs is the CPU's key."""
    fp = fingerprint()
    return hardware_key_for(list(fp["gpus"])[:max(0, n_gpus)], str(fp["cpu_model"]),
                            int(fp["cpu_count"]))
