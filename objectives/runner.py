"""Child-process entry point of one trial: ``python -m objectives.runner REQUEST RESULT``.

Reads the request (target, config, workload, optional co-measured workloads or a search sweep's
knobs and time budget, cache dir, optionally the study's SLO) as JSON, runs the target, and
writes the outcome atomically to RESULT. This is the isolation boundary: whatever the engine
raises becomes a failed outcome with its reason; a hard crash (abort, segfault, OOM kill) leaves
no RESULT and the parent reports the exit signal and log tail instead.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from advisor.errors import AdvisorError, ConfigRejectedError, EngineStartError, NotMeasuredError
from objectives.measurement import Measurement
from objectives.registry import get_target
from objectives.slo import parse_slo
from objectives.workload import Workload

__all__ = ["error_type_of", "main"]


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, allow_nan=False, default=str))
    os.replace(tmp, path)


def error_type_of(exc: BaseException) -> str:
    """The stored ``error_type`` of a trial that ``exc`` stopped: ``rejected`` (the engine
    refused the config), ``engine_start``, ``oom``, ``error`` (the advisor's own checks: an
    :class:`AdvisorError` that blames no config) or ``crash`` (anything unexpected)."""
    if isinstance(exc, ConfigRejectedError):
        return "rejected"
    if isinstance(exc, EngineStartError):
        return "engine_start"
    if isinstance(exc, MemoryError):
        return "oom"
    if isinstance(exc, AdvisorError):
        return "error"
    return "crash"


def _outcome_for(exc: BaseException) -> dict[str, Any]:
    """Classify an exception raised by a target into a failed outcome."""
    kind = error_type_of(exc)
    reason = str(exc) or type(exc).__name__
    if kind in ("crash", "oom"):
        reason = f"{type(exc).__name__}: {reason}\n" + "".join(
            traceback.format_exception(exc)[-6:])
    return {"status": "failed", "error_type": kind, "reason": reason}


def _co_outcome_for(result: Measurement | Exception) -> dict[str, Any]:
    """A co-measured workload's outcome: measured, failed, or ``skipped`` (left unmeasured on
    purpose, :class:`NotMeasuredError`, with the reason)."""
    if isinstance(result, NotMeasuredError):
        return {"status": "skipped", "reason": str(result)}
    if isinstance(result, Exception):
        return _outcome_for(result)
    return {"status": "complete", "measurement": result.to_dict()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m objectives.runner REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = json.loads(Path(args[0]).read_text())
    result_path = Path(args[1])
    start = time.perf_counter()
    try:
        target = get_target(request["target"])
        # A rebuild check: the trial measures a build of its own, not one cached by another.
        target.reuse_builds = not request.get("fresh_build", False)
        # The study's SLO, when the driver passes it: a window may stop once its miss is settled.
        target.trial_slo = parse_slo(request["slo"]) if request.get("slo") else None
        workloads = [Workload.from_spec(w) for w in
                     [request["workload"], *request.get("co_workloads", [])]]
        cache_dir = Path(request["cache_dir"])
        outcome: dict[str, Any]
        if (sweep := request.get("sweep")) is not None:
            if len(workloads) != 1:
                raise ValueError("a trial sweeps its search knobs under one workload only")
            points = target.run_sweep(request["config"], workloads[0], cache_dir,
                                      knobs=frozenset(sweep["knobs"]),
                                      budget_s=float(sweep["budget_s"]),
                                      slo=parse_slo(sweep["slo"]) if sweep.get("slo") else None,
                                      include_own=bool(sweep.get("include_own", True)))
            outcome = {"status": "complete", "measurement": points[0][1].to_dict(),
                       "swept": [{"config": config, "measurement": m.to_dict()}
                                 for config, m in points]}
        elif len(workloads) == 1:
            measurement = target.run(request["config"], workloads[0], cache_dir)
            outcome = {"status": "complete", "measurement": measurement.to_dict()}
        else:
            first, *rest = target.run_series(request["config"], workloads, cache_dir)
            if isinstance(first, Exception):
                raise first
            outcome = {"status": "complete", "measurement": first.to_dict(),
                       "co_measured": [_co_outcome_for(r) for r in rest]}
    except Exception as exc:
        outcome = _outcome_for(exc)
    outcome["duration_s"] = time.perf_counter() - start
    _write_atomic(result_path, _sanitize(outcome))
    return 0


def _sanitize(data: Any) -> Any:
    """JSON cannot carry NaN/inf: map them to None so the parent sees 'not measured'."""
    if isinstance(data, float):
        return data if data == data and abs(data) != float("inf") else None
    if isinstance(data, dict):
        return {k: _sanitize(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_sanitize(v) for v in data]
    return data


if __name__ == "__main__":
    sys.exit(main())
