"""Server-side truth for a serving measurement: the engine's own Prometheus metrics, scraped just
before and just after the measured window, with its queue gauges sampled during it.

The client times what a user sees, but at thousands of streamed tokens per second one client
process can fall behind the server it times (docs/metrics.md). The engine's histograms are immune
to that: they are observed inside the server. :func:`scrape` reads one ``/metrics`` exposition
into a :class:`Snapshot`; the difference of two snapshots holds exactly the requests of the window;
:func:`summarize_window` turns it into per-family percentiles, means and counts stored with the
trial as ``details["server_metrics"]``.

Percentiles come from cumulative histogram buckets the way Prometheus' ``histogram_quantile`` does:
find the bucket where the cumulative count crosses ``q * count`` and interpolate linearly inside it
(the first bucket starts at 0; a quantile in the ``+Inf`` bucket is reported as the highest finite
bound). The true quantile is only known to lie inside that bucket, so each estimate keeps the
bucket's bounds (``p95_bracket_ms``): vLLM 0.26's TTFT buckets are 1, 5, 10, 20, 40, 60, 80, 100,
250, 500, 750 ms ..., its TPOT and ITL buckets 10, 25, 50, 75, 100 ms ..., so a TPOT p95 of 12 ms
is only known to lie in 10-25 ms. Means (``_sum / _count``) are exact.

Which series an engine exposes is the engine's vocabulary, declared by its target as a
:class:`MetricVocabulary`; nothing here names an engine.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = [
    "HISTOGRAM_FAMILIES",
    "GaugeSampler",
    "GaugeTrace",
    "Histogram",
    "MetricVocabulary",
    "QuantileEstimate",
    "ServerMetricsError",
    "Snapshot",
    "parse_exposition",
    "reset_cache",
    "scrape",
    "snapshot_from_text",
    "summarize_window",
]

#: The per-request latency families a vocabulary may name, in the order they are reported.
HISTOGRAM_FAMILIES: tuple[str, ...] = ("ttft", "tpot", "itl", "e2e", "queue")
#: Percentiles reported per family (the client reports the same ones).
QUANTILES: tuple[int, ...] = (50, 90, 95, 99)
#: How often :class:`GaugeSampler` reads the queue gauges (the issue asks for ~2 Hz).
GAUGE_PERIOD_S = 0.5
#: How long :func:`scrape` waits for the exposition.
SCRAPE_TIMEOUT_S = 10.0

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+"
                     r"(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class ServerMetricsError(RuntimeError):
    """The server's metrics could not be read or do not hold what the vocabulary names."""


@dataclass(frozen=True)
class MetricVocabulary:
    """The Prometheus series one engine exposes, by what they measure.

    Histogram names are base names (``<name>_bucket``, ``_sum`` and ``_count`` are read); counter
    and gauge names are full sample names (a counter usually ends in ``_total``). ``None`` means
    the engine does not expose it. ``reset_cache_path``, when set, is a POST endpoint that empties
    the engine's prefix cache, so a replay of the same prompts is not served from cache.
    """

    #: Names the source in the stored record (e.g. the engine's name).
    source: str
    path: str = "/metrics"
    ttft: str | None = None
    tpot: str | None = None
    itl: str | None = None
    e2e: str | None = None
    queue: str | None = None
    generation_tokens: str | None = None
    finished_requests: str | None = None
    running: str | None = None
    waiting: str | None = None
    kv_cache_usage: str | None = None
    preemptions: str | None = None
    #: A counter of seconds summed over finished requests, each from its first token to its last
    #: (llama.cpp's ``tokens_predicted_seconds_total``): the client's own spans must add up to it.
    decode_seconds: str | None = None
    reset_cache_path: str | None = None

    def histograms(self) -> dict[str, str]:
        """Family (``ttft``, ...) -> histogram base name, for the families exposed."""
        return {f: name for f in HISTOGRAM_FAMILIES if (name := getattr(self, f)) is not None}

    def counters(self) -> dict[str, str]:
        return {key: name for key in ("generation_tokens", "finished_requests", "preemptions",
                                      "decode_seconds")
                if (name := getattr(self, key)) is not None}

    def gauges(self) -> dict[str, str]:
        return {key: name for key in ("running", "waiting", "kv_cache_usage")
                if (name := getattr(self, key)) is not None}


def parse_exposition(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> ``[(labels, value), ...]`` from Prometheus' text exposition format.

    Comments (``# HELP``, ``# TYPE``) and blank lines are skipped; a line that is not a sample
    raises :class:`ServerMetricsError` naming it (a proxy's HTML error page must not parse as an
    empty set of metrics)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ServerMetricsError(f"line {number} of the metrics is not a sample: "
                                     f"{line[:120]!r}")
        try:
            value = float(match["value"])
        except ValueError:
            raise ServerMetricsError(f"line {number} has a non-numeric value: "
                                     f"{line[:120]!r}") from None
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\")
                  for k, v in _LABEL.findall(match["labels"] or "")}
        samples.setdefault(match["name"], []).append((labels, value))
    return samples


@dataclass(frozen=True)
class QuantileEstimate:
    """A quantile read from a histogram: the interpolated value and the bucket it lies in."""

    value: float
    lower: float
    upper: float


@dataclass(frozen=True)
class Histogram:
    """One cumulative histogram: ``cumulative[i]`` observations <= ``bounds[i]``, the last entry
    of ``cumulative`` being the ``+Inf`` bucket (== ``count``)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float

    def __post_init__(self) -> None:
        if len(self.cumulative) != len(self.bounds) + 1:
            raise ValueError(f"a histogram needs one more cumulative count than finite bounds, "
                             f"got {len(self.cumulative)} and {len(self.bounds)}")
        if any(b <= a for a, b in zip(self.bounds, self.bounds[1:], strict=False)):
            raise ValueError(f"histogram bounds must increase, got {self.bounds}")

    @property
    def count(self) -> float:
        return self.cumulative[-1]

    @property
    def mean(self) -> float | None:
        """The exact mean (sum / count); None without observations."""
        return self.total / self.count if self.count > 0 else None

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made after ``earlier`` was read (same buckets required)."""
        if earlier.bounds != self.bounds:
            raise ServerMetricsError("the histogram's buckets changed between two scrapes")
        cumulative = tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative,
                                                 strict=True))
        if any(c < 0 for c in cumulative):
            raise ServerMetricsError("a histogram count went down between two scrapes (the "
                                     "server restarted?)")
        return Histogram(self.bounds, cumulative, self.total - earlier.total)

    def quantile(self, q: float) -> QuantileEstimate | None:
        """The ``q`` quantile (0 < q < 1) as Prometheus' ``histogram_quantile`` computes it;
        None without observations."""
        if not 0 < q < 1:
            raise ValueError(f"`0 < q < 1` must hold, but got {q=}")
        if self.count <= 0:
            return None
        rank = q * self.count
        previous = 0.0
        for i, cum in enumerate(self.cumulative):
            if cum >= rank:
                if i == len(self.bounds):  # the +Inf bucket: only a lower bound is known
                    top = self.bounds[-1] if self.bounds else 0.0
                    return QuantileEstimate(top, top, math.inf)
                lower = self.bounds[i - 1] if i > 0 else 0.0
                upper = self.bounds[i]
                inside = cum - previous
                fraction = (rank - previous) / inside if inside > 0 else 1.0
                return QuantileEstimate(lower + (upper - lower) * fraction, lower, upper)
            previous = cum
        raise AssertionError("unreachable: the +Inf bucket holds every observation")


def _histogram(samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str
               ) -> Histogram | None:
    """``name``'s histogram summed over every label set but ``le`` (several engines add up)."""
    buckets = samples.get(f"{name}_bucket")
    if not buckets:
        return None
    by_bound: dict[float, float] = {}
    for labels, value in buckets:
        le = labels.get("le")
        if le is None:
            raise ServerMetricsError(f"{name}_bucket has a sample without `le`")
        bound = math.inf if le in ("+Inf", "Inf", "inf") else float(le)
        by_bound[bound] = by_bound.get(bound, 0.0) + value
    if math.inf not in by_bound:
        raise ServerMetricsError(f"{name} has no +Inf bucket")
    bounds = sorted(b for b in by_bound if b != math.inf)
    total = sum(v for _, v in samples.get(f"{name}_sum", []))
    return Histogram(tuple(bounds), tuple([*(by_bound[b] for b in bounds), by_bound[math.inf]]),
                     total)


def _scalar(samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str
            ) -> float | None:
    values = samples.get(name)
    return None if not values else sum(v for _, v in values)


@dataclass(frozen=True)
class Snapshot:
    """What one scrape read, by family / vocabulary key, and when (``time.perf_counter``)."""

    taken_s: float
    histograms: dict[str, Histogram]
    counters: dict[str, float]
    gauges: dict[str, float]


def snapshot_from_text(text: str, vocabulary: MetricVocabulary, *,
                       taken_s: float | None = None) -> Snapshot:
    """A :class:`Snapshot` of ``text``; raises :class:`ServerMetricsError` when none of the
    vocabulary's histograms is there (the endpoint is not that engine's, or has no metrics)."""
    samples = parse_exposition(text)
    histograms = {family: h for family, name in vocabulary.histograms().items()
                  if (h := _histogram(samples, name)) is not None}
    if vocabulary.histograms() and not histograms:
        names = ", ".join(vocabulary.histograms().values())
        raise ServerMetricsError(f"the metrics hold none of {names}")
    counters = {key: v for key, name in vocabulary.counters().items()
                if (v := _scalar(samples, name)) is not None}
    gauges = {key: v for key, name in vocabulary.gauges().items()
              if (v := _scalar(samples, name)) is not None}
    return Snapshot(time.perf_counter() if taken_s is None else taken_s, histograms, counters,
                    gauges)


def _get(client: httpx.Client, url: str) -> str:
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise ServerMetricsError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ServerMetricsError(f"GET {url} answered HTTP {response.status_code}")
    return response.text


def scrape(base_url: str, vocabulary: MetricVocabulary, *,
           client: httpx.Client | None = None) -> Snapshot:
    """Read ``{base_url}{vocabulary.path}`` into a :class:`Snapshot`."""
    url = base_url.rstrip("/") + vocabulary.path
    if client is not None:
        return snapshot_from_text(_get(client, url), vocabulary)
    with httpx.Client(timeout=httpx.Timeout(SCRAPE_TIMEOUT_S), trust_env=False) as own:
        return snapshot_from_text(_get(own, url), vocabulary)


def reset_cache(base_url: str, vocabulary: MetricVocabulary, *,
                api_key: str | None = None) -> bool:
    """POST the vocabulary's cache-reset endpoint; True when the server answered 200, False when
    it has none or refused (the caller records that the cache was not reset)."""
    if vocabulary.reset_cache_path is None:
        return False
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=httpx.Timeout(SCRAPE_TIMEOUT_S), trust_env=False) as client:
            response = client.post(base_url.rstrip("/") + vocabulary.reset_cache_path,
                                   headers=headers)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


@dataclass
class GaugeTrace:
    """The queue gauges read during a window: ``(seconds since the sampler started, value)``."""

    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    errors: int = 0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"period_s": GAUGE_PERIOD_S, "failed_reads": self.errors}
        for key, points in self.samples.items():
            if not points:
                continue
            values = [v for _, v in points]
            out[key] = {"n": len(values), "max": max(values),
                        "mean": sum(values) / len(values), "last": values[-1]}
        return out


class GaugeSampler:
    """Reads the vocabulary's gauges every :data:`GAUGE_PERIOD_S` in a background thread.

    Only the gauge lines are parsed (a prefix test per line), so a read costs the client
    little: the thread shares the interpreter with whatever else this process runs."""

    def __init__(self, base_url: str, vocabulary: MetricVocabulary,
                 period_s: float = GAUGE_PERIOD_S) -> None:
        self.url = base_url.rstrip("/") + vocabulary.path
        self.names = vocabulary.gauges()
        self.period_s = period_s
        self.trace = GaugeTrace({key: [] for key in self.names})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GaugeSampler:
        if self.names:
            self._thread = threading.Thread(target=self._run, name="gauge-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SCRAPE_TIMEOUT_S + 1)

    def _run(self) -> None:
        prefixes = tuple(self.names.values())
        by_name = {name: key for key, name in self.names.items()}
        start = time.perf_counter()
        with httpx.Client(timeout=httpx.Timeout(SCRAPE_TIMEOUT_S), trust_env=False) as client:
            while not self._stop.is_set():
                at = time.perf_counter() - start
                try:
                    text = _get(client, self.url)
                except ServerMetricsError:
                    self.trace.errors += 1
                else:
                    totals: dict[str, float] = {}
                    for line in text.splitlines():
                        if line.startswith(prefixes):
                            match = _SAMPLE.match(line.strip())
                            if match and match["name"] in by_name:
                                key = by_name[match["name"]]
                                totals[key] = totals.get(key, 0.0) + float(match["value"])
                    for key, value in totals.items():
                        self.trace.samples[key].append((round(at, 3), value))
                self._stop.wait(self.period_s)


def _family_summary(hist: Histogram) -> dict[str, Any]:
    out: dict[str, Any] = {"count": hist.count}
    mean = hist.mean
    if mean is not None:
        out["mean_ms"] = mean * 1e3
    for q in QUANTILES:
        est = hist.quantile(q / 100)
        if est is None:
            continue
        out[f"p{q}_ms"] = est.value * 1e3
        out[f"p{q}_bracket_ms"] = [est.lower * 1e3,
                                   None if math.isinf(est.upper) else est.upper * 1e3]
    return out


def summarize_window(before: Snapshot, after: Snapshot, vocabulary: MetricVocabulary, *,
                     window_s: float, gauges: GaugeTrace | None = None) -> dict[str, Any]:
    """``details["server_metrics"]`` of one measured window: per histogram family its count,
    exact mean and interpolated percentiles with their buckets (milliseconds), the counters'
    increase, output tokens per second over ``window_s`` (the client's run duration), and the
    gauges read during the window."""
    if not window_s > 0:
        raise ValueError(f"`window_s > 0` must hold, but got {window_s=}")
    out: dict[str, Any] = {
        "source": vocabulary.source, "path": vocabulary.path,
        "method": "histogram deltas between scrapes before and after the window; percentiles "
                  "by linear interpolation inside the bucket (Prometheus histogram_quantile)",
        "scrape_span_s": after.taken_s - before.taken_s, "window_s": window_s,
    }
    for family, hist in after.histograms.items():
        if family in before.histograms:
            out[family] = _family_summary(hist.minus(before.histograms[family]))
    for key, value in after.counters.items():
        if key in before.counters:
            out[f"{key}_delta"] = value - before.counters[key]
    if "generation_tokens_delta" in out:
        out["output_tokens_per_s"] = out["generation_tokens_delta"] / window_s
    if gauges is not None:
        out["gauges"] = gauges.summary()
    out["buckets_s"] = {family: list(after.histograms[family].bounds)
                        for family in after.histograms}
    return out

