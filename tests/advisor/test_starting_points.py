"""A target's textbook starting points: queued by a new study's warm start even on a store that
knows nothing, after what the store knows, within the budget, and quietly skipped where the
study's fixed knobs rule them out."""

from __future__ import annotations

import logging

import pytest

from advisor.driver import StudySpec
from advisor.objective import Objective
from advisor.settings import Settings
from advisor.warm_start import TEXTBOOK, study_warm_start
from knowledge import TrialStore
from objectives import parse_slo
from objectives.registry import get_target

pytest.importorskip("faiss")


def _spec(n: int = 30, **kw: object) -> StudySpec:
    target = get_target("faiss")
    return StudySpec(name="tb", target="faiss", slo=parse_slo(target.default_slo),
                     objective=Objective.parse("maximize:qps"),
                     workload=target.default_workload(), n_trials=n, seed=0,
                     **kw)  # type: ignore[arg-type]


def test_faiss_starting_points_are_valid_textbook_factories() -> None:
    target = get_target("faiss")
    points = target.starting_points(target.default_workload())  # n_base 8000
    configs = [target.validate_config(p) for p in points]  # completed with the defaults
    assert [(c["index_type"], c.get("hnsw_m"), c.get("ef_search")) for c in configs[:3]] == [
        ("hnsw", 32, 16), ("hnsw", 32, 32), ("hnsw", 16, 16)]
    assert configs[3]["index_type"] == "ivf_flat" and configs[3]["nlist"] == 89  # sqrt(8000)
    assert configs[3]["nprobe"] == 8
    small = target.named_workloads()["stdlib-docs-2k"]
    assert target.starting_points(small)[3]["nlist"] == 45  # sqrt(2000)


def test_an_empty_store_still_warm_starts_from_the_starting_points(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    store = TrialStore(settings.db_url)
    plan = study_warm_start(store, settings, _spec(), hardware_key="cpu-nowhere-2c")
    assert [w.source for w in plan] == [TEXTBOOK] * 4
    assert plan[0].config["index_type"] == "hnsw" and plan[0].config["batch_size"] == 32
    # the default and 4 starting points fill a 5-trial budget; 3 trials leave room for 2
    assert len(study_warm_start(store, settings, _spec(n=3), hardware_key="x")) == 2
    said: list[str] = []
    with caplog.at_level(logging.INFO):
        fixed = study_warm_start(store, settings, _spec(fixed={"index_type": "ivf_flat"}),
                                 hardware_key="x", say=said.append)
    assert [w.config["index_type"] for w in fixed] == ["ivf_flat"]
    assert said == []  # the HNSW points the fixed knob rules out are skipped quietly
