"""The metric catalogue: every metric a target may report, with its unit and good direction.

Names carry their unit (``p95_latency_ms``, ``qps``). SLO expressions and objectives may only name
metrics listed here, so a typo is caught before a study starts rather than after it ran. Each
metric belongs to one or more families; a target declares the families it reports
(``Target.metric_families``), so a new engine needs no edit here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from advisor.errors import SLOParseError, did_you_mean

__all__ = [
    "LLM_SERVING",
    "METRICS",
    "PIPELINE_STAGES",
    "RETRIEVAL",
    "VECTOR_SEARCH",
    "WEIGHTS",
    "MetricSpec",
    "metric_spec",
    "metrics_in_families",
    "unknown_metric",
]

Better = Literal["lower", "higher"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: name (with unit suffix), unit, which direction is better, its meaning, and
    the metric families it belongs to."""

    name: str
    unit: str
    better: Better
    description: str
    families: tuple[str, ...]


def _latency_family(prefix: str, what: str, families: tuple[str, ...]) -> list[MetricSpec]:
    return [
        MetricSpec(f"{prefix}_p{q}_ms", "ms", "lower", f"{q}th percentile of {what}", families)
        for q in (50, 90, 95, 99)
    ] + [MetricSpec(f"{prefix}_mean_ms", "ms", "lower", f"mean of {what}", families)]


#: Metric families (what a target declares in ``Target.metric_families``).
VECTOR_SEARCH = "vector-search"
LLM_SERVING = "llm-serving"
#: Serving targets that know the weights they loaded (file type or quantization, and bytes).
WEIGHTS = "weights"
#: Recall of a retrieval stage searched 10 deep (recall@1/5/10).
RETRIEVAL = "retrieval"
#: Per-stage latencies of a RAG pipeline.
PIPELINE_STAGES = "pipeline-stages"
_VECTOR = (VECTOR_SEARCH,)
_LLM = (LLM_SERVING,)
_WEIGHTS = (WEIGHTS,)
_STAGES = (PIPELINE_STAGES,)

_SPECS: list[MetricSpec] = [
    # Vector search. Single-query mode: one query per search call, the latency an online
    # retriever sees. Batched mode: `batch_size` queries per call; each query's latency is its
    # batch's latency, and `qps` is the throughput of that mode.
    *[
        MetricSpec(
            f"p{q}_latency_ms", "ms", "lower",
            f"{q}th percentile of per-query latency, single-query mode", _VECTOR,
        )
        for q in (50, 90, 95, 99)
    ],
    MetricSpec("mean_latency_ms", "ms", "lower", "mean per-query latency, single-query mode",
               _VECTOR),
    *[
        MetricSpec(
            f"batch_p{q}_latency_ms", "ms", "lower",
            f"{q}th percentile of per-query latency in batched mode (a query waits for its batch)",
            _VECTOR,
        )
        for q in (50, 90, 95, 99)
    ],
    MetricSpec("qps", "queries/s", "higher", "queries per second in batched mode", _VECTOR),
    MetricSpec("single_qps", "queries/s", "higher", "queries per second in single-query mode",
               _VECTOR),
    *[
        MetricSpec(f"recall_at_{k}", "fraction", "higher",
                   f"recall@{k}: share of the exact top-{k} neighbours found",
                   (*_VECTOR, RETRIEVAL) if k <= 10 else _VECTOR)
        for k in (1, 5, 10, 20, 50, 100)
    ],
    MetricSpec("index_memory_mb", "MiB", "lower", "size of the serialized index", _VECTOR),
    MetricSpec("build_time_s", "s", "lower", "index train + add time (cached builds report the "
               "original build's time)", _VECTOR),
    # LLM serving (per-request metrics aggregated per trial, as `vllm bench serve` defines them).
    *_latency_family("ttft", "time to first token from the request's scheduled arrival", _LLM),
    *_latency_family("tpot", "time per output token after the first", _LLM),
    *_latency_family("itl", "inter-token latency", _LLM),
    *_latency_family("e2e", "end-to-end request latency", _LLM),
    MetricSpec("output_tokens_per_s", "tokens/s", "higher", "output token throughput", _LLM),
    MetricSpec("requests_per_s", "requests/s", "higher", "completed requests per second", _LLM),
    MetricSpec("goodput_requests_per_s", "requests/s", "higher",
               "requests per second that met every per-request SLO (DistServe goodput)", _LLM),
    MetricSpec("peak_memory_mb", "MiB", "lower",
               "peak accelerator memory of the engine's processes (on a CPU engine: their peak "
               "resident memory)", _LLM),
    # Quantization's effect, per trial: the memory the weights take, and bits per weight as a
    # stated quality proxy (random weights have no quality to measure: docs/engines.md).
    MetricSpec("weights_mb", "MiB", "lower",
               "memory of the model's weights as the engine loaded them (quantization shrinks it)",
               _WEIGHTS),
    MetricSpec("bits_per_weight", "bits", "higher",
               "average bits per weight of the loaded model: a stated quality proxy for the "
               "quantization (16 = unquantized), not a measured quality", _WEIGHTS),
    MetricSpec("failed_requests", "count", "lower", "requests that errored", _LLM),
    MetricSpec("cut_requests", "count", "lower",
               "requests unfinished at the workload's drain limit (latencies as lower bounds)",
               _LLM),
    # RAG stages, per request from the query's arrival (objectives/rag/pipeline.py): they sum to
    # TTFT (embed + retrieve + prefill) and to E2E (+ decode).
    *_latency_family("embed", "the embed stage (arrival to query embedded, waiting included)",
                     _STAGES),
    *_latency_family("retrieve", "the retrieve stage (FAISS search and prompt assembly)", _STAGES),
    *_latency_family("prefill", "the prefill stage (prompt submitted to first token)", _STAGES),
    *_latency_family("decode", "the decode stage (first token to last)", _STAGES),
]

METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}


def unknown_metric(name: str, known: Iterable[str]) -> str:
    """The message for a metric name not in ``known``: the near miss when there is one
    (``ttft_p95`` -> ``ttft_p95_ms``), else every name in ``known``."""
    hint = did_you_mean(name, known)
    if hint:
        return f"unknown metric {name!r}{hint}"
    return f"unknown metric {name!r}; valid metrics are: {', '.join(sorted(known))}"


def metric_spec(name: str) -> MetricSpec:
    """Return the spec of ``name``; unknown names raise an error listing the valid ones."""
    try:
        return METRICS[name]
    except KeyError:
        raise SLOParseError(unknown_metric(name, METRICS)) from None


def metrics_in_families(families: Iterable[str]) -> list[MetricSpec]:
    """Every metric of any of ``families``, in catalogue order."""
    wanted = frozenset(families)
    return [spec for spec in _SPECS if wanted.intersection(spec.families)]
