"""Shared fixtures: an isolated settings/cache per test, the scripted target registered, and the
trial stores (SQLite always; PostgreSQL when the local server answers)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.settings import Settings
from knowledge import TrialStore
from tests.extras import require_extra

ROOT = Path(__file__).resolve().parent.parent
SCRIPTED = ("scripted=tests.scripted_target:ScriptedTarget,"
            "scripted-sweep=tests.scripted_target:SweepingScriptedTarget,"
            "scripted-rebuild=tests.scripted_target:RebuildingScriptedTarget")
PG_ADMIN_URL = os.environ.get("ADVISOR_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def run_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory of the whole test run, shared by pytest-xdist's workers (each worker's
    basetemp is a ``popen-gwN`` folder under the run's own), so what is costly to build is built
    once per run rather than once per worker. Whatever writes there must publish atomically (the
    dataset and model caches do: temporary name, then rename; the model fit also takes a lock)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / name
    path.mkdir(exist_ok=True)
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every collected test has its own node id. pytest 9 builds a test function's id from its
    original name and its parametrisation, and schemathesis's per-operation items carry neither,
    so all 14 operations had one id; pytest-xdist schedules by id and ran one of them. Such items
    get their full name back as their id; any duplicate left stops the run."""
    counts = Counter(item.nodeid for item in items)
    for item in items:
        if counts[item.nodeid] > 1 and isinstance(item, pytest.Function) and item.parent:
            item._id = item.parent.id.child(item.name)  # type: ignore[attr-defined]
    twice = [nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1]
    if twice:
        raise pytest.UsageError(f"tests collected twice under one id: {twice[:5]}")
    _longest_modules_first(items)


#: The test modules that take longest, longest first (seconds each took alone on an idle 2-core
#: machine, 2026-12-04; those dated 12-06 alone at load average 1-2, with the shipped fitted
#: models current). scripts/test.sh runs three pytest-xdist workers with ``--dist loadfile``,
#: which hands out whole modules in collection order (``--no-loadscope-reorder``: its default
#: order, most tests first, left these few-test modules for the end of the run, where one of
#: them kept a worker busy minutes after the other had finished). Started first, they overlap
#: each other and the hundred short modules fill the gaps. A module missing here (renamed,
#: split) only loses its early start.
LONGEST_MODULES = (
    # 123 s (12-06): the consistency audit of every shipped vLLM answer (96 s of it)
    "tests/advisor/test_answer_consistency.py",
    # 56 s (12-06): its server loads the shipped fitted models; early still, since while
    # knowledge/data/fitted-models.* is stale it fits every shipped context (115 s) for the
    # suite's shared fit
    "tests/api/test_docs_examples.py",
    "tests/e2e/test_cli_sweep_faiss.py",  # 106 s, and the session's FAISS corpus when first
    "tests/e2e/test_cli_knowledge.py",  # 102 s
    "tests/e2e/test_cli_sweep_ray.py",  # 94 s
    "tests/e2e/test_cli_sweep.py",  # 84 s
    "tests/e2e/test_cli_faiss.py",  # 63 s
    # 87 s (2026-12-06, load average 7, Chromium absent; 242 s before the dashboard deferred
    # the shipped studies' trials): the fresh-store dashboard and two Chromium tests in CI
    "tests/advisor/test_dashboard.py",
    "tests/e2e/test_cli_storage_failure.py",  # 31-47 s (12-06; 92-170 s with 60-s trials)
    "tests/advisor/test_study_lease.py",  # 46 s (12-06)
    "tests/objectives/test_faiss_contract.py",  # 52 s
    "tests/advisor/test_driver.py",  # 50 s
    "tests/advisor/test_paired_study.py",  # 48 s
    "tests/objectives/llm/test_server_targets_fake_engine.py",  # 44 s
    "tests/advisor/test_recommend_model.py",  # 37 s (12-06)
    "tests/objectives/llm/test_server_targets_unavailable.py",  # 36 s
    "tests/objectives/llm/test_tgi_ollama_fake_engine.py",  # 35 s
    "tests/api/test_knowledge_api.py",  # 34 s
    "tests/api/test_jobs.py",  # 33 s
)


def _longest_modules_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` module by module: :data:`LONGEST_MODULES` first, in that order, then the
    others, most tests first (pytest-xdist's own order); each module's tests keep their order."""
    module = {id(item): item.nodeid.split("::", 1)[0] for item in items}
    sizes = Counter(module.values())
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(module[id(item)], i)
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}

    def key(item: pytest.Item) -> tuple[int, int, int]:
        name = module[id(item)]
        return rank.get(name, len(rank)), -sizes[name], first_seen[name]

    items.sort(key=key)


@pytest.fixture(scope="session", autouse=True)
def _shared_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test's store that holds exactly the shipped knowledge shares one fit of it
    (knowledge/cache.py, ``ADVISOR_SHARED_MODEL_DIR``): it takes over a minute on 2 cores, and
    tens of tests open a fresh store of it, in-process, in the subprocesses they start and in
    the other test workers."""
    previous = os.environ.get("ADVISOR_SHARED_MODEL_DIR")
    os.environ["ADVISOR_SHARED_MODEL_DIR"] = str(run_dir(tmp_path_factory, "shared-models"))
    yield
    if previous is None:
        os.environ.pop("ADVISOR_SHARED_MODEL_DIR", None)
    else:
        os.environ["ADVISOR_SHARED_MODEL_DIR"] = previous


@pytest.fixture(autouse=True)
def _scripted_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_EXTRA_TARGETS", SCRIPTED)
    # Studies re-measure best and default only where a test asks (tests/advisor/test_paired_*).
    monkeypatch.setenv("ADVISOR_PAIRED_REPEATS", "0")
    # Trial children must import the tests package too.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


@pytest.fixture
def needs_gguf() -> None:
    """The test writes a random-weight GGUF model (objectives/llm/gguf_model.py): it needs the
    gguf package (the llm extra, which scripts/quickstart.sh installs)."""
    require_extra("gguf", "llm")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db_url=f"sqlite:///{tmp_path / 'advisor.db'}", cache_dir=tmp_path / "cache",
                    trial_timeout_s=5, heartbeat_interval_s=0.5)


def _postgres_url() -> Iterator[str]:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pytest.importorskip("psycopg")
    admin = sqlalchemy.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            name = f"advisor_test_{uuid.uuid4().hex[:10]}"
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except sqlalchemy.exc.OperationalError as exc:
        admin.dispose()
        if os.environ.get("CI") and not os.environ.get("ADVISOR_ALLOW_NO_POSTGRES"):
            pytest.fail(f"PostgreSQL must be reachable in CI: {exc}")
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each store test runs on SQLite and on the local PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield from _postgres_url()


@pytest.fixture
def store(db_url: str) -> Iterator[TrialStore]:
    s = TrialStore(db_url)
    yield s
    s.close()


@pytest.fixture(scope="session")
def faiss_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One dataset/index cache for the whole run, so MiniLM embeds the test corpus once.

    The stdlib-docs-2k corpus most of its users need (the faiss contract and target tests,
    `advisor tune`, the nightly sweeps) is built here, one test worker at a time: the dataset
    cache publishes atomically but does not lock, so two workers reaching an empty cache together
    each embedded it (~40 s of both cores each when alone, over 150 s each side by side)."""
    path = run_dir(tmp_path_factory, "faiss-cache")
    if importlib.util.find_spec("faiss") is None:
        return path  # the tests that need it skip
    from advisor.errors import DataError
    from objectives.datasets.vectors import load_dataset
    from objectives.targets.faiss_target import FaissTarget

    target = FaissTarget()
    workload = target.named_workloads()["stdlib-docs-2k"]
    with _file_lock(path.parent / "faiss-cache.lock"), contextlib.ExitStack() as stack:
        try:
            load_dataset(workload.params, path)  # another worker built it
        except DataError:
            if os.environ.get("PYTEST_XDIST_WORKER"):
                stack.enter_context(_one_torch_thread())
        target.prepare(workload, path)
    return path


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """torch on one thread inside (its own count restored after), for the corpus embedding
    under pytest-xdist: three workers share two cores there, and torch's two threads waiting
    on each other for a core cost CPU time: 2,100 passages took 55 and 44 CPU-s on two threads
    with the cores shared, 40 and 39 on one (the same embeddings to the bit on this 2-core VM;
    thread counts change only the order of float sums, within float tolerance anywhere); a
    faiss test building the session cache alone on one worker: 74 and 78 CPU-s, 56 and 56."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between the test workers (released when the holder exits)."""
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def rag_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One RAG store / index / model cache for the run: MiniLM embeds the chunks once."""
    return run_dir(tmp_path_factory, "rag-cache")
