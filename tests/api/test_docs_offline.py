"""`/docs` (Swagger UI) and `/redoc` render with no network: their scripts and stylesheet come
from the app itself. Checked on a real uvicorn server in headless Chromium, with every host but
the server unresolvable, so a page that still reached for a CDN would stay blank."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import make_settings

pytest.importorskip("fastapi_offline")
uvicorn = pytest.importorskip("uvicorn")


class _Assets(HTMLParser):
    """Every URL a page loads: scripts, stylesheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag in ("script", "img") and found.get("src"):
            self.urls.append(str(found["src"]))
        if tag == "link" and found.get("href"):
            self.urls.append(str(found["href"]))


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from api import create_app

    tmp = tmp_path_factory.mktemp("docs-offline")
    settings = make_settings(f"sqlite:///{tmp / 'api.db'}", tmp, import_shipped=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # readiness, not a timing assertion
        if not thread.is_alive():
            pytest.fail("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_only_local_assets(base_url: str, page: str) -> None:
    html = httpx.get(base_url + page, trust_env=False).text
    parser = _Assets()
    parser.feed(html)
    assert parser.urls, html
    for url in parser.urls:
        assert url.startswith("/"), f"{page} loads {url} from outside the app"
        asset = httpx.get(base_url + url, trust_env=False)
        assert asset.status_code == 200 and len(asset.content) > 1000, url
    assert "cdn" not in html.lower() and "googleapis" not in html


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
    pytest.skip("chromium is not installed (apt-get install chromium)")


def _render(base_url: str, page: str, profile: Path) -> str:
    dom = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=20000",
         # Offline: every host name but the server's address fails to resolve.
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
         "--dump-dom", base_url + page],
        capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


@pytest.mark.slow
def test_swagger_ui_renders_offline_in_chromium(base_url: str, tmp_path: Path) -> None:
    dom = _render(base_url, "/docs", tmp_path / "profile")
    # Rendered by the script, not in the served HTML: the title and one block per operation.
    assert 'class="swagger-ui' in dom
    assert len(re.findall(r'class="opblock opblock-', dom)) >= 5
    assert "/v1/recommendations" in dom


@pytest.mark.slow
def test_redoc_renders_offline_in_chromium(base_url: str, tmp_path: Path) -> None:
    dom = _render(base_url, "/redoc", tmp_path / "profile")
    assert "redoc-wrap" in dom or "redoc-markdown" in dom
    assert "/v1/recommendations" in dom and "slo-advisor" in dom
