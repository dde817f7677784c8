"""``GET /v1/targets``: the registered targets, their defaults, workload presets and knobs."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from api.deps import ReadAccess
from objectives.registry import get_target, target_names

router = APIRouter(prefix="/v1", tags=["targets"], dependencies=[ReadAccess])


@cache
def _describe(name: str) -> dict[str, Any]:
    target = get_target(name)
    return {
        "name": name, "engine": target.engine, "description": target.description,
        "default_objective": target.default_objective, "default_slo": target.default_slo,
        "workloads": sorted(target.named_workloads()),
        "knobs": [{"name": k.name, "type": k.type, "low": k.low, "high": k.high,
                   "choices": list(k.choices), "default": k.default, "unit": k.unit,
                   "when": {n: list(v) for n, v in k.when.items()}} for k in target.space()],
    }


@router.get("/targets")
def list_targets() -> list[dict[str, Any]]:
    """Targets that studies may be started on, with the knobs `fixed` may set."""
    return [_describe(name) for name in target_names()]
