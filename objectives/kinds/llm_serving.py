"""The ``llm-serving`` workload kind: requests arriving at a rate, with prompt and output lengths.

Its features are the arrival rate and the median prompt / output lengths (tokens); its cost
features are the token rates the arrivals demand; its rules of thumb are about the KV cache and
the batch a serving engine keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from objectives.kinds._values import median_of, positive
from objectives.vocabulary import Quantile, RuleOfThumb, RulePoints, RuleTrial, Tier, WorkloadKind

__all__ = ["LLM_RULES", "LLM_SERVING", "LLM_TIERS", "llm_audit_slos"]


def _features(params: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    arrival = params.get("arrival")
    rate = arrival.get("rate_rps") if isinstance(arrival, Mapping) else params.get("rate_rps")
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        out["rate_rps"] = float(rate)
    for name in ("prompt_len", "output_len"):
        if (v := median_of(params.get(name))) is not None:
            out[name] = v
    return out


def _workload_params(features: Mapping[str, float]) -> list[str]:
    if "rate_rps" in features:
        return [f"arrival={{process: poisson, rate_rps: {features['rate_rps']:g}}}"]
    return []


def _derived(config: Mapping[str, Any], workload: Mapping[str, float]) -> dict[str, float]:
    """Tokens/s and prefill tokens/s the arrival process demands, and sequences allowed per
    arriving request/s."""
    out: dict[str, float] = {}
    rate = positive(workload.get("rate_rps"))
    if rate:
        if out_len := positive(workload.get("output_len")):
            out["demand_tokens_per_s"] = rate * out_len
        if in_len := positive(workload.get("prompt_len")):
            out["demand_prefill_tokens_per_s"] = rate * in_len
        if seqs := positive(config.get("max_num_seqs")):
            out["seqs_per_rate"] = seqs / rate
    return out


def llm_audit_slos(q: Quantile) -> list[str]:
    """TTFT bounds at the 30th/50th/70th percentile of the measured values, crossed with TPOT
    bounds at the 50th and 80th."""
    out: list[str] = []
    for p in (30, 50, 70):
        ttft = q("ttft_p95_ms", p)
        for pt in (50, 80):
            tpot = q("tpot_p95_ms", pt)
            if ttft is not None and tpot is not None:
                out.append(f"ttft_p95_ms<={ttft:.6g},tpot_p95_ms<={tpot:.6g}")
    return out


def _knob_metric_points(trials: Sequence[RuleTrial], knob: str, metric: str) -> RulePoints:
    """(knob value, metric) of every trial that has both."""
    return RulePoints([(float(t["config"][knob]), float(t["metrics"][metric])) for t in trials
                       if knob in t["config"] and metric in t["metrics"]])


def _offload_points(trials: Sequence[RuleTrial]) -> RulePoints:
    offload = [t for t in trials if "ttft_p99_ms" in t["metrics"]]
    return RulePoints([(float(t["config"].get("kv_offloading_size", 0.0))
                        if t["config"].get("kv_offloading") else 0.0,
                        float(t["metrics"]["ttft_p99_ms"])) for t in offload])


LLM_RULES = (
    RuleOfThumb(
        "p99 TTFT against KV offload (swap) space", "p99 = a + b / (1 + c * x)",
        "kv_offloading_size (GiB, 0 = off)", "TTFT p99 (ms)", _offload_points,
        lambda x, a, b, c: a + b / (1 + c * x), (1000.0, 1000.0, 0.1), ("a", "b", "c"),
        log_y=True, bounds=([0, 0, 0], [1e7, 1e7, 100]),
        note="vLLM's CPU offloading (its swap space since 0.18), fitted as decreasing in x (b, c "
             ">= 0); all other knobs and the arrival rate vary too, so R² shows how much of p99 "
             "the offload size alone explains"),
    RuleOfThumb(
        "output throughput against page (block) size", "tokens/s = a + b * log2(x)",
        "block_size (tokens)", "output throughput (tokens/s)",
        lambda trials: _knob_metric_points(trials, "block_size", "output_tokens_per_s"),
        lambda x, a, b: a + b * np.log2(x), (1000.0, 0.0), ("a", "b"),
        note="paged-attention block size; other knobs vary too"),
    RuleOfThumb(
        "output throughput against max_num_seqs", "tokens/s = a * x / (b + x)",
        "max_num_seqs (sequences)", "output throughput (tokens/s)",
        lambda trials: _knob_metric_points(trials, "max_num_seqs", "output_tokens_per_s"),
        lambda x, a, b: a * x / (b + x),
        lambda pts: [max((p[1] for p in pts), default=1000.0), 32.0], ("a", "b"), log_y=True,
        bounds=([0, 0], [1e8, 1e5]),
        note="batch-size cap: throughput saturates once the arrival rate, not the cap, limits"),
)

LLM_TIERS = (
    Tier("interactive", "ttft_p95_ms<=500,tpot_p95_ms<=25", "maximize:output_tokens_per_s",
         "chat that feels instant: first token within 0.5 s, 40+ tokens/s per stream"),
    Tier("standard", "ttft_p95_ms<=2000,tpot_p95_ms<=50", "maximize:output_tokens_per_s",
         "interactive use with some queueing: first token within 2 s, 20+ tokens/s"),
    Tier("throughput", "tpot_p95_ms<=100", "maximize:output_tokens_per_s",
         "batch / offline: the most output tokens per second, streams may be slow"),
)

LLM_SERVING = WorkloadKind(
    name="llm-serving", features=_features, workload_params=_workload_params,
    derived_features=_derived, tiers=LLM_TIERS, audit_slos=llm_audit_slos,
    rules_of_thumb=LLM_RULES)
