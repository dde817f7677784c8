"""Server metrics: parsing a real vLLM 0.26 exposition (captured on the H200 by `advisor
crosscheck --metrics-sample`), histogram deltas and quantiles as Prometheus computes them, the
window summary, and a live scrape of the stand-in server."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from objectives.llm.server import free_port
from objectives.llm.server_metrics import (
    GaugeSampler,
    Histogram,
    ServerMetricsError,
    parse_exposition,
    reset_cache,
    scrape,
    snapshot_from_text,
    summarize_window,
)
from objectives.targets.tensorrt_llm_target import TRTLLM_METRICS
from objectives.targets.vllm_target import VLLM_METRICS

DATA = Path(__file__).with_name("data")
REAL_8B = DATA / "vllm-0.26.0-metrics-llama-3-8b.txt"
FAKE = Path(__file__).with_name("fake_openai_server.py")


def test_a_real_vllm_exposition_holds_every_series_the_vocabulary_names() -> None:
    text = REAL_8B.read_text()
    samples = parse_exposition(text)
    for name in VLLM_METRICS.histograms().values():
        assert f"{name}_bucket" in samples and f"{name}_count" in samples, name
    for name in [*VLLM_METRICS.counters().values(), *VLLM_METRICS.gauges().values()]:
        assert name in samples, name
    snap = snapshot_from_text(text, VLLM_METRICS)
    ttft = snap.histograms["ttft"]
    # The sample was read after 8 warm-up + 120 measured requests at 15 req/s.
    assert ttft.count == 128
    assert ttft.bounds[:8] == (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1)
    assert ttft.mean is not None and 0.01 < ttft.mean < 0.2
    assert snap.counters["generation_tokens"] == 18668
    assert snap.gauges["running"] == 0


def test_the_tensorrt_vocabulary_is_not_found_in_vllm_metrics() -> None:
    with pytest.raises(ServerMetricsError, match="none of"):
        snapshot_from_text(REAL_8B.read_text(), TRTLLM_METRICS)


def test_a_page_that_is_not_an_exposition_is_refused() -> None:
    with pytest.raises(ServerMetricsError, match="not a sample"):
        parse_exposition("<html><body>502 Bad Gateway</body></html>")


def test_label_values_with_escaped_quotes_and_commas_parse() -> None:
    samples = parse_exposition('m{a="x\\"y,z",le="+Inf"} 3\n')
    (labels, value), = samples["m"]
    assert labels == {"a": 'x"y,z', "le": "+Inf"} and value == 3


def test_histograms_of_several_engines_add_up() -> None:
    text = "\n".join([
        'h_bucket{engine="0",le="1.0"} 2', 'h_bucket{engine="0",le="+Inf"} 3',
        'h_bucket{engine="1",le="1.0"} 1', 'h_bucket{engine="1",le="+Inf"} 1',
        'h_sum{engine="0"} 4', 'h_sum{engine="1"} 0.5', 'h_count{engine="0"} 3'])
    from objectives.llm.server_metrics import MetricVocabulary
    snap = snapshot_from_text(text, MetricVocabulary(source="x", ttft="h"))
    assert snap.histograms["ttft"].cumulative == (3, 4)
    assert snap.histograms["ttft"].total == 4.5


def test_quantiles_interpolate_inside_the_bucket_like_histogram_quantile() -> None:
    # 10 observations: 4 in (0, 0.1], 4 in (0.1, 0.5], 2 in (0.5, 1.0].
    h = Histogram((0.1, 0.5, 1.0), (4, 8, 10, 10), 3.0)
    p50 = h.quantile(0.5)
    assert p50 is not None
    # rank 5 lies one observation into the second bucket of four: 0.1 + 0.4 * 1/4.
    assert p50.value == pytest.approx(0.2) and (p50.lower, p50.upper) == (0.1, 0.5)
    p95 = h.quantile(0.95)
    assert p95 is not None and (p95.lower, p95.upper) == (0.5, 1.0)
    assert p95.value == pytest.approx(0.5 + 0.5 * 1.5 / 2)
    assert h.mean == pytest.approx(0.3)


def test_a_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    h = Histogram((0.1, 0.5), (0, 0, 5), 10.0)
    est = h.quantile(0.9)
    assert est is not None and est.value == 0.5 and math.isinf(est.upper)


def test_empty_histograms_have_no_quantile_or_mean() -> None:
    h = Histogram((0.1,), (0, 0), 0.0)
    assert h.quantile(0.5) is None and h.mean is None


def test_deltas_keep_only_the_window_and_refuse_a_restart() -> None:
    before = Histogram((0.1, 1.0), (5, 7, 8), 2.0)
    after = Histogram((0.1, 1.0), (6, 10, 12), 4.5)
    delta = after.minus(before)
    assert delta.cumulative == (1, 3, 4) and delta.total == pytest.approx(2.5)
    with pytest.raises(ServerMetricsError, match="restarted"):
        before.minus(after)
    with pytest.raises(ServerMetricsError, match="buckets changed"):
        after.minus(Histogram((0.2, 1.0), (0, 0, 0), 0.0))


def test_the_window_summary_reports_counts_means_brackets_and_tokens() -> None:
    text = REAL_8B.read_text()
    before = snapshot_from_text(text, VLLM_METRICS, taken_s=0.0)
    bumped = text.replace('vllm:generation_tokens_total{engine="0",model_name="llama-3-8b"} '
                          '18668.0', 'vllm:generation_tokens_total{engine="0",'
                          'model_name="llama-3-8b"} 20668.0')
    after = snapshot_from_text(bumped, VLLM_METRICS, taken_s=10.0)
    summary = summarize_window(before, after, VLLM_METRICS, window_s=8.0)
    assert summary["generation_tokens_delta"] == 2000
    assert summary["output_tokens_per_s"] == pytest.approx(250.0)
    assert summary["ttft"]["count"] == 0  # no request between two identical scrapes
    assert "p95_ms" not in summary["ttft"]
    assert summary["scrape_span_s"] == 10.0 and summary["source"] == "vllm"


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAKE), str(tmp_path), "--port", str(port),
                             "--served-model-name", "m"], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_live_scrape_sees_the_requests_of_the_window(fake_server: str) -> None:
    before = scrape(fake_server, VLLM_METRICS)
    with GaugeSampler(fake_server, VLLM_METRICS, period_s=0.05) as sampler:
        for n in (3, 5):
            body = {"model": "m", "prompt": "t3", "max_tokens": n, "stream": True,
                    "ignore_eos": True}
            with httpx.stream("POST", fake_server + "/v1/completions", json=body) as r:
                for _ in r.iter_lines():
                    pass
        time.sleep(0.2)
    after = scrape(fake_server, VLLM_METRICS)
    summary = summarize_window(before, after, VLLM_METRICS, window_s=1.0,
                               gauges=sampler.trace)
    assert summary["ttft"]["count"] == 2 and summary["e2e"]["count"] == 2
    assert summary["generation_tokens_delta"] == 8
    assert summary["tpot"]["count"] == 2
    assert summary["gauges"]["running"]["n"] >= 1
    assert reset_cache(fake_server, VLLM_METRICS) is True


def test_reset_is_false_without_an_endpoint(fake_server: str) -> None:
    assert reset_cache(fake_server, TRTLLM_METRICS) is False
