"""The fitted models shipped with the knowledge (knowledge/data/fitted-models.*): current for the
shipped data and the fitting code, and what a fresh store of the shipped knowledge answers from
without fitting; any other store fits as before."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path

import pytest

from knowledge import TrialStore
from knowledge.cache import KnowledgeModels, ModelCache, data_key, shipped_models_key
from knowledge.shipped_models import REGENERATE, shipped_key
from knowledge.transfer import import_jsonl, import_shipped_knowledge, shipped_files


def test_the_shipped_models_are_current_for_the_shipped_data_and_the_fitting_code() -> None:
    shipped = shipped_key()
    assert shipped is not None, f"no shipped models: run `{REGENERATE}`"
    now = shipped_models_key(shipped.family)
    assert shipped.content == now.content, (
        f"the shipped models were fitted on other knowledge/data files ({shipped.content}, the "
        f"files now hash to {now.content}): run `{REGENERATE}` and commit knowledge/data/"
        "fitted-models.*")
    assert shipped.code == now.code, (
        f"the shipped models were fitted by other fitting code ({shipped.code}, now "
        f"{now.code}): run `{REGENERATE}` and commit knowledge/data/fitted-models.*")


@pytest.fixture(scope="module")
def fresh_store(tmp_path_factory: pytest.TempPathFactory) -> TrialStore:
    """A fresh store of the shipped knowledge, as `advisor serve` opens on a new machine."""
    path = tmp_path_factory.mktemp("fresh") / "fresh.db"
    store = TrialStore(f"sqlite:///{path}")
    import_shipped_knowledge(store)
    return store


def _no_fit(*_: object, **__: object) -> KnowledgeModels:
    raise AssertionError("fitted, although the shipped models fit this store")


@pytest.mark.parametrize("target", [None, "faiss"])
def test_a_fresh_store_answers_from_the_shipped_models_without_fitting(
        fresh_store: TrialStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        target: str | None) -> None:
    import knowledge.cache as cache_module

    # The fitting code's digest reads the source of KnowledgeModels.fit: take it before the
    # stand-in replaces it (else the digest is the stand-in's, and whether the shipped models
    # match depended on whether an earlier test of this process had taken it first).
    code = cache_module.fit_code_version()
    monkeypatch.setattr(cache_module, "fit_code_version", lambda: code)
    monkeypatch.setattr(KnowledgeModels, "fit", classmethod(_no_fit))
    cache = ModelCache(fresh_store, tmp_path / "cache", target=target,
                       shared_dir=tmp_path / "no-shared-fit")
    models = cache.get()
    assert models.data == data_key(fresh_store)
    assert models.contexts and all(target in (None, k.target) for k in models.contexts)
    # kept as this store's cache: the next process loads it without the shipped file
    assert ModelCache(fresh_store, tmp_path / "cache", target=target).peek() is not None


def test_a_store_holding_more_than_the_shipped_files_fits_its_own(
        fresh_store: TrialStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TrialStore(f"sqlite:///{tmp_path / 'more.db'}")
    import_shipped_knowledge(store)
    with gzip.open(shipped_files()[0], "rt") as f:
        line = json.loads(f.readline())
    line["trial"]["uid"] = uuid.uuid4().hex  # one more trial, not from a shipped file
    line["study"]["uid"], line["study"]["name"] = uuid.uuid4().hex, "one-more"
    import_jsonl(store, [json.dumps(line)], source="extra")
    fitted: list[str | None] = []

    def fit(cls: type[KnowledgeModels], s: TrialStore, **kw: object) -> KnowledgeModels:
        fitted.append(s.url)
        return KnowledgeModels(data_key(s), "linear-forest")

    monkeypatch.setattr(KnowledgeModels, "fit", classmethod(fit))
    ModelCache(store, tmp_path / "cache", shared_dir=tmp_path / "shared").get()
    store.close()
    assert fitted == [store.url]


def test_shipped_models_from_other_fitting_code_are_not_used(
        fresh_store: TrialStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import knowledge.cache as cache

    monkeypatch.setattr(cache, "fit_code_version", lambda: "0000000000000000")
    fitted: list[str] = []

    def fit(cls: type[KnowledgeModels], s: TrialStore, **kw: object) -> KnowledgeModels:
        fitted.append(s.url)
        return KnowledgeModels(data_key(s), "linear-forest")

    monkeypatch.setattr(KnowledgeModels, "fit", classmethod(fit))
    ModelCache(fresh_store, tmp_path / "cache", shared_dir=tmp_path / "shared").get()
    assert fitted == [fresh_store.url]


def test_the_shipped_profile_is_imported_and_leaves_the_fitted_content_alone(
        fresh_store: TrialStore) -> None:
    """A fresh store holds the shipped H100 profile (knowledge/data/h100-vllm-profile-*), and a
    file of profiles only adds no trial: the store's content key is still the shipped models'
    one, so the shipped fit is used on it."""
    from knowledge.cache import content_key
    from knowledge.profiles import find_profile, is_profile_row
    from knowledge.shipped_models import shipped_content
    from knowledge.transfer import read_trials_text

    profile = find_profile(fresh_store, target="vllm", model="llama-3-8b", hardware="h100")
    assert profile is not None and profile.hardware_key == "1x-nvidia-h100-80gb-hbm3"
    profile_only = [p for p in shipped_files() if all(
        is_profile_row(json.loads(line)) for line in read_trials_text(p).splitlines()
        if line.strip())]
    assert profile_only, "a shipped file of profiles only"
    assert content_key(fresh_store) == shipped_content()
