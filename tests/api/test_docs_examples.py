"""docs/api.md cannot rot: its curl examples run against a live `advisor serve` (uvicorn, the
supervised worker, a temporary store seeded with the shipped knowledge), and their answers are
checked. The same server's HTML cheat-sheet is loaded in headless Chromium; then the server runs a
study through its worker, cancels it mid-study, and stops cleanly (the last test)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowledge import StudyStatus, TrialStatus, TrialStore
from tests.api.conftest import KEY

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "api.md"


def _curl_blocks() -> list[str]:
    text = DOC.read_text()
    quickstart = text.split("## Quickstart", 1)[1].split("## Endpoints", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quickstart, flags=re.S)
    return [b for b in blocks if b.lstrip().startswith(("curl", "JOB="))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("serve")
    port = _free_port()
    env = {**os.environ, "ADVISOR_DB_URL": f"sqlite:///{tmp / 'advisor.db'}",
           "ADVISOR_CACHE_DIR": str(tmp / "cache"), "ADVISOR_API_KEY": KEY,
           "ADVISOR_WORKER_POLL_INTERVAL_S": "0.2", "ADVISOR_HEARTBEAT_INTERVAL_S": "0.5",
           "ADVISOR_EXTRA_TARGETS": "scripted=tests.scripted_target:ScriptedTarget",
           "PYTHONPATH": str(ROOT)}
    log = (tmp / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "serve", "--port", str(port),
                             "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    # Fitting (and cross-validating) every shipped context takes 1-3 minutes on 2 cores here,
    # and CI machines were seen over twice as slow (480 s did not suffice once).
    deadline = time.monotonic() + 1200
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"advisor serve did not start:\n{(tmp / 'serve.log').read_text()}")
        time.sleep(0.2)
    info = {"url": url, "proc": proc, "env": env, "db_url": env["ADVISOR_DB_URL"], "tmp": tmp}
    try:
        yield info
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _run(block: str, server: dict[str, Any]) -> str:
    env = {**server["env"], "ADVISOR_URL": server["url"], "ADVISOR_API_KEY": KEY}
    # -e -u but not pipefail: like a reader's shell, `curl ... | head` may end curl early.
    # The limit guards against a hang, it is no speed target (those live in benchmarks/): the
    # first cheat-sheet question builds the target's sheet, ~38 s on a quiet 2-core VM, and a
    # 60-s limit failed once under extra load.
    done = subprocess.run(["bash", "-eu", "-c", block], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{block}\n--- exit {done.returncode}, stderr ---\n{done.stderr}"
    return done.stdout


def _json_docs(out: str) -> list[Any]:
    """The JSON documents in ``out`` (curl prints no newline after a body)."""
    decoder, docs, i = json.JSONDecoder(), [], 0
    while (i := min((j for j in (out.find("{", i), out.find("[", i)) if j >= 0), default=-1)) >= 0:
        doc, i = decoder.raw_decode(out, i)
        docs.append(doc)
    return docs


def test_the_docs_have_the_examples_the_issue_asks_for() -> None:
    blocks = _curl_blocks()
    assert len(blocks) == 7
    assert "/v1/recommendations" in blocks[0] and "total_rate_rps" in blocks[1]
    assert "hf_config" in blocks[2] and "/v1/cheatsheet/value" in blocks[3]
    assert "/cancel" in blocks[5] and "Authorization" not in blocks[6]


def test_docs_examples_run_against_a_live_server(server: dict[str, Any]) -> None:
    recommend, calibrated, shape, value, sheet, study, refused = _curl_blocks()
    answer = json.loads(_run(recommend, server))
    # The headline example recommends a config: its own measured windows at 150 req/s meet it.
    assert answer["status"] in ("recommended", "keep_defaults"), answer["summary"]
    assert answer["question"]["target"] == "vllm" and answer["config"]
    # The H100, known from its calibration: predicted, with its capacity and replicas.
    h100 = json.loads(_run(calibrated, server))
    # (its recommended config's replicas, or, where the answer is `undecided`, the defaults')
    fleet = h100["capacity"]["replicas"] or h100["capacity"]["default_replicas"]
    assert h100["basis"] == "calibration" and fleet is not None, h100
    assert fleet["total_rate_rps"] == 500 and fleet["count"] >= 1, fleet
    carried = json.loads(_run(shape, server))  # Qwen2.5-7B: never measured, between 3B and 8B
    assert carried["basis"] == "extrapolation", carried
    assert carried["details"]["shape_position"] == "interpolation"
    assert carried["status"] in ("recommended", "keep_defaults", "no_feasible_config")
    knob = json.loads(_run(value, server))
    assert knob["knob"] == "max_num_seqs" and knob["target"] == "vllm"
    assert isinstance(knob["value"], int) and knob["row"]["tier"] == "throughput"
    assert "|" in _run(sheet, server)
    out = _run(study, server)
    job_id = re.search(r"^job ([0-9a-f]{32})$", out, flags=re.M)
    assert job_id is not None, out
    polled, cancelled = _json_docs(out)
    assert polled["id"] == job_id[1] and polled["status"] in ("queued", "running")
    assert cancelled["cancel_requested"] is True
    error = json.loads(_run(refused, server))
    doc_error = json.loads(DOC.read_text().split("**Without the key**", 1)[1]
                           .split("```json\n", 1)[1].split("```", 1)[0])
    assert error == doc_error
    deadline = time.monotonic() + 60
    while (job := httpx.get(f"{server['url']}/v1/jobs/{job_id[1]}").json())["status"] in (
            "queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert job["status"] == "cancelled"
    jobs = httpx.get(f"{server['url']}/v1/jobs").json()
    assert jobs["total"] == 1  # the refused request queued nothing


class _DomCounter(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
    pytest.skip("chromium is not installed (apt-get install chromium); CI installs it")


def test_html_cheatsheet_renders_in_headless_chromium(server: dict[str, Any]) -> None:
    browser = _chromium()
    page = f"{server['url']}/v1/cheatsheet?target=vllm&format=html"
    profile = server["tmp"] / "chromium-profile"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--user-data-dir={profile}", "--no-first-run", "--virtual-time-budget=5000"]
    dom = subprocess.run([*flags, "--dump-dom", page], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    counter = _DomCounter()
    counter.feed(dom.stdout)
    tags = counter.tags
    assert tags.get("table", 0) >= 1 and tags.get("tr", 0) >= 2, tags  # header and a row
    assert tags.get("svg", 0) >= 1, tags  # the plots
    assert tags.get("path", 0) + tags.get("circle", 0) + tags.get("polyline", 0) \
        + tags.get("rect", 0) >= 1, tags  # something drawn in them
    assert "max_num_seqs" in dom.stdout
    shot = server["tmp"] / "cheatsheet.png"
    done = subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1280,2000", page],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]


def test_live_worker_runs_and_cancels_a_study_then_the_server_stops_cleanly(
        server: dict[str, Any]) -> None:
    url, auth = server["url"], {"Authorization": f"Bearer {KEY}"}
    resp = httpx.post(f"{url}/v1/studies", headers=auth, json={
        "target": "scripted", "name": "live", "trials": 50, "seed": 0, "fixed": {"x": 0.5},
        "workload": {"params": {"delay_s": 0.3}}})
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    deadline = time.monotonic() + 60
    while ((job := httpx.get(f"{url}/v1/jobs/{job_id}").json())["progress"] or {}).get(
            "trials_finished", 0) < 2:
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert httpx.post(f"{url}/v1/jobs/{job_id}/cancel", headers=auth).status_code == 200
    while (job := httpx.get(f"{url}/v1/jobs/{job_id}").json())["status"] == "running":
        assert time.monotonic() < deadline + 30, job
        time.sleep(0.2)
    assert job["status"] == "cancelled", job
    store = TrialStore(server["db_url"])
    study = store.get_study("live")
    assert study is not None and study.status == StudyStatus.INTERRUPTED
    assert not store.trials_of_study(study.id or 0, [TrialStatus.RUNNING])
    store.close()
    metrics = httpx.get(f"{url}/metrics").text
    cancelled = re.search(r'^advisor_jobs\{status="cancelled"\} (\S+)$', metrics, flags=re.M)
    assert cancelled is not None and float(cancelled[1]) >= 1
    proc: subprocess.Popen[bytes] = server["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) is not None
    leftover = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "the worker outlived the server"
