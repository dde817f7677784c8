"""Contexts fitted in child processes give the models a fit in one process gives, the shares
balance, and a child that fails costs time, not the fit."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from knowledge import TrialStore
from knowledge.cache import FIT_PROCESSES_ENV, KnowledgeModels, fit_processes, share_out
from tests.knowledge.synthetic_trials import populate


@pytest.fixture
def store(tmp_path: Path) -> TrialStore:
    """Three contexts (three hardware keys) of the scripted target's synthetic surface."""
    store = TrialStore(f"sqlite:///{tmp_path / 'fit.db'}")
    for n, hardware in enumerate(("cpu-box-a-2c", "cpu-box-b-2c", "cpu-box-c-2c")):
        populate(store, n_configs=12 + 6 * n, sizes=(1000, 2000), repeats=1, seed=n,
                 hardware=hardware, study_prefix=f"syn{n}")
    return store


def _predictions(models: KnowledgeModels) -> dict[str, np.ndarray]:
    """Every context's predictions (value, low, high) for its first configs at its first
    measured workload."""
    out = {}
    for key, ctx in sorted(models.contexts.items()):
        for metric, arrays in ctx.predict(ctx.configs[:5], ctx.workloads[0].features).items():
            out[f"{key.label()}:{metric}"] = np.concatenate(arrays)
    return out


def test_child_processes_fit_the_same_models(store: TrialStore,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FIT_PROCESSES_ENV, "1")
    alone = KnowledgeModels.fit(store, score=False)
    monkeypatch.setenv(FIT_PROCESSES_ENV, "3")
    shared = KnowledgeModels.fit(store, score=False)
    assert sorted(alone.contexts) == sorted(shared.contexts) and len(alone.contexts) == 3
    a, b = _predictions(alone), _predictions(shared)
    assert a.keys() == b.keys() and a
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_failing_child_is_refitted_here(store: TrialStore, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    # A child whose path puts a knowledge package first whose worker exits with an error.
    shadow = tmp_path / "shadow" / "knowledge"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "fit_worker.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr("knowledge.cache._child_path", lambda: str(shadow.parent))
    monkeypatch.setenv(FIT_PROCESSES_ENV, "2")
    with caplog.at_level(logging.WARNING, logger="knowledge.cache"):
        models = KnowledgeModels.fit(store, score=False)
    assert len(models.contexts) == 3  # nothing lost: the failed share was fitted here
    assert "a fitting process failed (exit code 3)" in caplog.text


def test_shares_balance_and_the_first_holds_the_biggest() -> None:
    shares = share_out([10, 50, 20, 20, 5], 2)
    assert 1 in shares[0]
    assert sorted(i for share in shares for i in share) == [0, 1, 2, 3, 4]
    loads = [sum([10, 50, 20, 20, 5][i] for i in share) for share in shares]
    assert max(loads) == 55  # 50 + 5 against 20 + 20 + 10
    assert share_out([3], 4)[0] == [0] and share_out([], 2) == [[], []]


def test_processes_follow_the_cores_the_setting_and_the_contexts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FIT_PROCESSES_ENV, "8")
    assert fit_processes(3) == 3 and fit_processes(1) == 1
    monkeypatch.setenv(FIT_PROCESSES_ENV, "1")
    assert fit_processes(5) == 1
    monkeypatch.setenv(FIT_PROCESSES_ENV, "many")
    assert fit_processes(5) == 1
