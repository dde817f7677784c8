"""optuna-dashboard shows what a study tuned for: the metric name, the SLO, objective and workload,
each trial's SLO margins and the best trial that met the SLO; imported studies show too.

Everything goes through optuna-dashboard's own server code over real HTTP (and, when Chromium is
installed, a real headless browser), on SQLite and on the local PostgreSQL server.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import optuna
import pytest

from advisor.dashboard import backfill_optuna_studies, dashboard_app
from advisor.driver import StudyDriver, StudyResult, StudySpec, optuna_storage
from advisor.objective import Objective
from advisor.optuna_bridge import best_feasible_trial
from advisor.settings import Settings
from knowledge import TrialStatus, TrialStore
from knowledge.transfer import export_jsonl, import_jsonl
from objectives import parse_slo
from tests.scripted_target import ScriptedTarget

if os.environ.get("CI") != "true":  # CI installs the dashboard extra (scripts/quickstart.sh)
    pytest.importorskip("optuna_dashboard")

ROOT = Path(__file__).resolve().parents[2]
SLO = "p95_latency_ms<=1,recall_at_10>=0.8"


def _run_study(db_url: str, tmp_path: Path, name: str = "dash") -> StudyResult:
    # Seed 0 samples one config in the scripted engine's hang region: it is killed at the trial
    # timeout. A trial elsewhere takes well under a second, so 3 s (not 10) only shortens that
    # wait; tests/advisor/test_driver.py kills hangs at 2 s.
    settings = Settings(db_url=db_url, cache_dir=tmp_path / "cache", trial_timeout_s=3,
                        heartbeat_interval_s=0.5)
    spec = StudySpec(name=name, target="scripted", slo=parse_slo(SLO),
                     objective=Objective.parse("maximize:qps"),
                     workload=ScriptedTarget().default_workload(), n_trials=8, seed=0)
    return StudyDriver(TrialStore(db_url), settings).run(spec)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[str], str]]:
    """Start the dashboard app on a free port in a thread; yields a function url -> base URL."""
    servers: list[WSGIServer] = []

    def start(db_url: str) -> str:
        server = make_server("127.0.0.1", 0, dashboard_app(optuna_storage(db_url)),
                             handler_class=_Quiet)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _study(base: str, name: str) -> dict:
    with httpx.Client(base_url=base, trust_env=False, timeout=30) as client:
        summaries = client.get("/api/studies").json()["study_summaries"]
        study_id = next(s["study_id"] for s in summaries if s["study_name"] == name)
        response = client.get(f"/api/studies/{study_id}")
    assert response.status_code == 200
    return response.json()


def _attrs(items: list[dict]) -> dict[str, str]:
    return {a["key"]: a["value"] for a in items}


def test_dashboard_shows_slo_margins_metric_name_and_feasible_best(
        db_url: str, tmp_path: Path, serve: Callable[[str], str]) -> None:
    result = _run_study(db_url, tmp_path)
    measured = [t for t in result.trials if t.status == TrialStatus.COMPLETE]
    # The scenario that matters: the highest objective missed the SLO.
    top = max(measured, key=lambda t: t.objective_value or 0.0)
    assert not top.feasible and result.best is not None

    detail = _study(serve(db_url), "dash")
    assert detail["objective_names"] == ["qps"]  # not "Objective 0"
    study_attrs = _attrs(detail["user_attrs"])
    assert study_attrs["slo"] == SLO and study_attrs["objective"] == "maximize:qps"
    assert study_attrs["workload"] == "scripted-default"
    slo = parse_slo(SLO)
    by_number = {t["number"]: t for t in detail["trials"]}
    for rec in measured:
        shown = by_number[rec.number]
        # The list the dashboard greys infeasible trials out by, in the SLO's order.
        assert shown["constraints"] == pytest.approx(list(slo.margins(rec.metrics).values()))
        attrs = _attrs(shown["user_attrs"])
        assert float(attrs["margin p95_latency_ms<=1"]) == pytest.approx(
            slo.margins(rec.metrics)["p95_latency_ms<=1"])
        assert attrs["slo_met"] == str(bool(rec.feasible))
    assert [t["number"] for t in detail["best_trials"]] == [result.best.number]


def test_best_feasible_trial_is_none_when_no_trial_met_the_slo() -> None:
    study = optuna.create_study(direction="maximize")
    for value, margin in ((3.0, 0.5), (1.0, 0.1)):
        study.add_trial(optuna.trial.create_trial(value=value, system_attrs={
            "constraints": [margin]}))
    assert best_feasible_trial(study.trials, study.direction) is None
    study.add_trial(optuna.trial.create_trial(value=0.5, system_attrs={"constraints": [-0.1]}))
    best = best_feasible_trial(study.trials, study.direction)
    assert best is not None and best.value == 0.5


def test_imported_study_gets_an_optuna_study_the_dashboard_shows(
        db_url: str, tmp_path: Path, serve: Callable[[str], str]) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    result = _run_study(source, tmp_path, name="tuned-elsewhere")
    buffer = io.StringIO()
    export_jsonl(TrialStore(source), buffer)
    store = TrialStore(db_url)
    import_jsonl(store, buffer.getvalue().splitlines())
    storage = optuna_storage(db_url)
    assert backfill_optuna_studies(store, storage) == 1
    assert backfill_optuna_studies(store, storage) == 0  # once per store

    detail = _study(serve(db_url), "tuned-elsewhere")
    assert detail["objective_names"] == ["qps"]
    assert _attrs(detail["user_attrs"])["imported"] == "True"
    shown = {t["number"]: t for t in detail["trials"]}
    assert len(shown) == len([t for t in result.trials if t.status in TrialStatus.FINISHED])
    slo = parse_slo(SLO)
    for number, rec in enumerate(t for t in result.trials if t.status in TrialStatus.FINISHED):
        if rec.status == TrialStatus.COMPLETE:
            assert shown[number]["state"] == "Complete"
            assert shown[number]["values"] == [pytest.approx(rec.objective_value)]
            assert shown[number]["constraints"] == pytest.approx(
                list(slo.margins(rec.metrics).values()))
        else:
            assert shown[number]["state"] == "Fail"
    assert result.best is not None
    best = detail["best_trials"][0]
    assert best["values"] == [pytest.approx(result.best.objective_value)]


def test_a_recorded_study_of_no_requested_trials_and_no_sampler_is_shown(
        tmp_path: Path, serve: Callable[[str], str]) -> None:
    """Shipped studies measured by another study's trials record a budget of 0 and sampler
    ``none``: a record the dashboard shows, though no driver could run it (it refused to start)."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    result = _run_study(source, tmp_path, name="measured-alongside")
    buffer = io.StringIO()
    export_jsonl(TrialStore(source), buffer)
    lines = []
    for line in buffer.getvalue().splitlines():
        row = json.loads(line)
        row["study"].update(n_trials=0, sampler="none")
        if row["study"].get("spec"):
            row["study"]["spec"].update(n_trials=0, sampler="none")
        lines.append(json.dumps(row))
    db_url = f"sqlite:///{tmp_path / 'advisor.db'}"
    store = TrialStore(db_url)
    import_jsonl(store, lines)
    assert store.list_studies()[0].n_trials == 0
    seen: list[tuple[int, int, str]] = []
    assert backfill_optuna_studies(store, optuna_storage(db_url),
                                   progress=lambda *a: seen.append(a)) == 1
    assert seen == [(0, 1, "measured-alongside")]  # what `advisor dashboard` shows as it builds

    detail = _study(serve(db_url), "measured-alongside")
    assert detail["objective_names"] == ["qps"]
    assert _attrs(detail["user_attrs"])["slo"] == SLO
    complete = [t for t in result.trials if t.status == TrialStatus.COMPLETE]
    margins = [t["constraints"] for t in detail["trials"] if t["state"] == "Complete"]
    assert margins == [pytest.approx(list(parse_slo(SLO).margins(t.metrics).values()))
                       for t in complete]


def test_deferred_trials_are_built_when_a_study_is_first_opened(tmp_path: Path) -> None:
    """`advisor dashboard` creates imported studies at once and their trials later (Optuna writes
    them row by row: minutes for the shipped knowledge): a study opened in the page gets its
    trials before its answer, the same trials an eager build gives."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    _run_study(source, tmp_path, name="first")
    _run_study(source, tmp_path, name="second")
    buffer = io.StringIO()
    export_jsonl(TrialStore(source), buffer)
    lines = buffer.getvalue().splitlines()
    eager_url, lazy_url = (f"sqlite:///{tmp_path / n}" for n in ("eager.db", "lazy.db"))
    eager, lazy = TrialStore(eager_url), TrialStore(lazy_url)
    for store in (eager, lazy):
        import_jsonl(store, lines)
    backfill_optuna_studies(eager, optuna_storage(eager_url))
    storage = optuna_storage(lazy_url)
    assert backfill_optuna_studies(lazy, storage, defer_trials=True) == 2
    assert [optuna.load_study(study_name=n, storage=storage).trials
            for n in ("first", "second")] == [[], []]
    app = dashboard_app(storage, lazy)
    server = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        shown = _study(base, "first")
        expected = _study_of(eager_url, "first")
        assert [(t["number"], t["state"], t.get("values"), t.get("constraints") or [])
                for t in shown["trials"]] == [
            (t.number, t.state.name.title(), t.values, t.system_attrs.get("constraints", []))
            for t in expected.trials]
        assert optuna.load_study(study_name="second", storage=storage).trials == []
        # A build cut short (the dashboard stopped mid-study) left the first trials; the next
        # adds only the rest.
        second = optuna.load_study(study_name="second", storage=storage)
        second.add_trials(_study_of(eager_url, "second").trials[:2])
        app.pending.build_all()  # type: ignore[attr-defined]  # what the background thread does
        assert [t.params for t in optuna.load_study(study_name="second", storage=storage).trials
                ] == [t.params for t in _study_of(eager_url, "second").trials]
        assert not optuna.load_study(study_name="first", storage=storage).user_attrs[
            "advisor_trials_pending"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_stopped_background_build_builds_no_more_studies(tmp_path: Path) -> None:
    """`advisor dashboard` stops its background builder before the store closes (a SIGTERM
    mid-build took over 30 s to end the process, the store's closing checkpoint waiting on the
    builder's writes): after stop() no further trial is added, and the studies stay pending."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    _run_study(source, tmp_path, name="first")
    _run_study(source, tmp_path, name="second")
    buffer = io.StringIO()
    export_jsonl(TrialStore(source), buffer)
    url = f"sqlite:///{tmp_path / 'lazy.db'}"
    store = TrialStore(url)
    import_jsonl(store, buffer.getvalue().splitlines())
    storage = optuna_storage(url)
    assert backfill_optuna_studies(store, storage, defer_trials=True) == 2
    app = dashboard_app(storage, store)
    pending = app.pending  # type: ignore[attr-defined]
    seen: list[str] = []
    pending.build_all(progress=lambda done, total, what: (seen.append(what), pending.stop()))
    assert len(seen) == 1 and len(pending) == 2  # stopped before its first trials: no study built
    for name in ("first", "second"):
        study = optuna.load_study(study_name=name, storage=storage)
        assert study.user_attrs["advisor_trials_pending"] and not study.trials


def _study_of(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=optuna_storage(url))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which(
        "google-chrome")


def _headless(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={profile}", "--window-size=1400,1800",
         "--virtual-time-budget=20000", *args],
        capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_advisor_dashboard_renders_in_headless_chromium(tmp_path: Path) -> None:
    """`advisor dashboard` as a user starts it; Chromium renders the trial page and the study's
    history plot. Screenshots go to $ADVISOR_SCREENSHOT_DIR (docs/images for the docs) or the
    test's temporary directory."""
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    db_url = f"sqlite:///{tmp_path / 'advisor.db'}"
    result = _run_study(db_url, tmp_path)
    port = _free_port()
    env = {**os.environ, "ADVISOR_IMPORT_SHIPPED": "false", "ADVISOR_CACHE_DIR":
           str(tmp_path / "cache")}
    server = subprocess.Popen([sys.executable, "-m", "advisor", "--db-url", db_url, "dashboard",
                               "--port", str(port)], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # readiness, not a timing assertion
            try:
                if httpx.get(f"{base}/api/studies", trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail(f"advisor dashboard did not start: {server.stderr}")
        shots = Path(os.environ.get("ADVISOR_SCREENSHOT_DIR") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        profile = tmp_path / "chromium-profile"
        default = next(t for t in result.trials if t.details.get("role") == "engine-default")
        trial_page = f"{base}/dashboard/studies/1/trials?numbers={default.number}"
        dom = _headless(browser, profile, "--dump-dom", trial_page)
        assert dom.returncode == 0, dom.stderr
        assert "margin p95_latency_ms&lt;=1" in dom.stdout or "margin p95_latency_ms<=1" in \
            dom.stdout
        assert "slo_met" in dom.stdout and "Best Trial" in dom.stdout
        history = _headless(browser, profile, "--dump-dom", f"{base}/dashboard/studies/1")
        assert ">qps<" in history.stdout  # the history plot's axis: the metric name
        assert "Study User Attributes" in history.stdout
        assert SLO.replace("<", "&lt;").replace(">", "&gt;") in history.stdout
        for name, url in (("dashboard-trial.png", trial_page),
                          ("dashboard-study.png", f"{base}/dashboard/studies/1")):
            shot = _headless(browser, profile, f"--screenshot={shots / name}", url)
            assert shot.returncode == 0 and (shots / name).stat().st_size > 10_000, shot.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_advisor_dashboard_on_a_fresh_store_of_the_shipped_knowledge(tmp_path: Path) -> None:
    """What a new user runs first: `advisor dashboard` on a fresh store, which imports the shipped
    knowledge (studies of 0 requested trials among them) and shows every study with its metric
    name and each trial's constraint values, in the API and rendered by headless Chromium."""
    db_url = f"sqlite:///{tmp_path / 'advisor.db'}"
    port = _free_port()
    env = {**os.environ, "ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    env.pop("ADVISOR_IMPORT_SHIPPED", None)
    server = subprocess.Popen([sys.executable, "-m", "advisor", "--db-url", db_url, "dashboard",
                               "--port", str(port)], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(900):  # readiness (the import takes a while on 2 cores), not a timing
            if server.poll() is not None:
                pytest.fail(f"advisor dashboard exited {server.returncode}: "
                            f"{server.stderr.read() if server.stderr else ''}")
            try:
                if httpx.get(f"{base}/api/studies", trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("advisor dashboard did not start")
        store = TrialStore(db_url)
        shipped = store.list_studies()
        assert any(s.n_trials == 0 for s in shipped)  # the case that stopped it
        with httpx.Client(base_url=base, trust_env=False, timeout=60) as client:
            summaries = client.get("/api/studies").json()["study_summaries"]
            assert {s["study_name"] for s in summaries} == {s.name for s in shipped}
            faiss = next(s.name for s in shipped if s.target == "faiss")
            study_id = next(s["study_id"] for s in summaries if s["study_name"] == faiss)
            detail = client.get(f"/api/studies/{study_id}").json()
        attrs = _attrs(detail["user_attrs"])
        metric = detail["objective_names"][0]
        assert metric == attrs["objective"].split(":")[1]
        complete = next(t for t in detail["trials"] if t["state"] == "Complete")
        bound = json.loads(attrs["slo_constraints"])[0]
        margin = float(_attrs(complete["user_attrs"])[f"margin {bound}"])
        assert complete["constraints"][0] == pytest.approx(margin)

        browser = _chromium()
        if browser is not None:
            profile = tmp_path / "chromium-profile"
            study_page = f"{base}/dashboard/studies/{study_id}"
            trial_page = f"{study_page}/trials?numbers={complete['number']}"
            history = _headless(browser, profile, "--dump-dom", study_page)
            assert history.returncode == 0, history.stderr
            assert f">{metric}<" in history.stdout  # the history plot's axis: the metric name
            dom = _headless(browser, profile, "--dump-dom", trial_page)
            assert f"margin {bound}".replace("<", "&lt;").replace(">", "&gt;") in dom.stdout or \
                f"margin {bound}" in dom.stdout
            shots = Path(os.environ.get("ADVISOR_SCREENSHOT_DIR") or tmp_path)
            shots.mkdir(parents=True, exist_ok=True)
            for name, url in (("dashboard-shipped-study.png", study_page),
                              ("dashboard-shipped-trial.png", trial_page)):
                shot = _headless(browser, profile, f"--screenshot={shots / name}", url)
                assert shot.returncode == 0 and (shots / name).stat().st_size > 10_000, \
                    shot.stderr

        # A stop that lands while a request is served ends the dashboard too. The last study
        # (the background builder goes in id order) is built when its page asks, under the
        # builder's lock: raised as KeyboardInterrupt there, SIGTERM was swallowed by the WSGI
        # handler, which catches every exception, and the dashboard served on for good.
        def open_last() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{base}/api/studies/{max(s['study_id'] for s in summaries)}",
                          trust_env=False, timeout=120)

        threading.Thread(target=open_last, daemon=True).start()
        time.sleep(0.5)
        server.terminate()
        server.wait(timeout=30)
        assert server.returncode == 0, server.stderr.read() if server.stderr else ""
        if browser is None:
            if os.environ.get("CI") == "true":
                pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
            pytest.skip("Chromium is not installed (apt-get install chromium)")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
