"""The ``vector-search`` workload kind: k-nearest-neighbour queries over a corpus of vectors.

Its features are the corpus size, the vector dimension and k; its cost features are the work a
query does in an IVF and/or HNSW index, flat or PQ (:func:`search_work`), which is also what the
fitted cost law adds up; its rules of thumb are the classic IVF ones (nlist against sqrt(N),
recall against the share of lists probed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from objectives.kinds._values import positive
from objectives.vocabulary import (
    CostLawSpec,
    Quantile,
    RuleOfThumb,
    RulePoints,
    RuleTrial,
    Tier,
    WorkloadKind,
)

__all__ = ["COST_TERMS", "VECTOR_SEARCH", "VECTOR_TIERS", "search_work"]

#: The dimension of a dataset whose spec does not store one: the MiniLM embedder of the
#: stdlib corpus.
_DATASET_DIM = {"stdlib-docs": 384}
#: The dimension ``advisor tune`` assumes when none is given (the default dataset's).
_DEFAULT_DIM = 384


def _features(params: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    n_vectors = params.get("n_vectors", params.get("n_base"))
    if isinstance(n_vectors, int | float) and not isinstance(n_vectors, bool):
        out["n_vectors"] = float(n_vectors)
    if isinstance(params.get("dim"), int | float):
        out["dim"] = float(params["dim"])
    elif "n_vectors" in out and params.get("dataset") in _DATASET_DIM:
        out["dim"] = float(_DATASET_DIM[params["dataset"]])  # not a stored parameter
    if isinstance(params.get("k"), int | float) and not isinstance(params.get("k"), bool):
        out["k"] = float(params["k"])
    return out


def _workload_params(features: Mapping[str, float]) -> list[str]:
    out: list[str] = []
    if "n_vectors" in features:
        out.append(f"n_base={int(features['n_vectors'])}")
    if "dim" in features and features.get("dim") != _DEFAULT_DIM:
        out.append(f"dim={int(features['dim'])}")
    return out


def _launch_params(params: Mapping[str, Any], features: Mapping[str, float]) -> dict[str, Any]:
    out = dict(params)
    if "dim" in features and "dim" in out:
        out["dim"] = int(features["dim"])
    return out


def _derived(config: Mapping[str, Any], workload: Mapping[str, float]) -> dict[str, float]:
    """Vectors scanned per query (N·nprobe/nlist), the share of lists probed, PQ code size,
    queries per thread per call, and the per-query work summed over the stages a query goes
    through (:func:`search_work`): the stages add up, so no product of knobs (a straight line
    in log space) describes the total, and one work figure lets index families share one cost
    law."""
    out: dict[str, float] = {}
    nlist, nprobe, n = positive(config.get("nlist")), positive(config.get("nprobe")), \
        positive(workload.get("n_vectors"))
    if nlist and nprobe:
        out["probe_fraction"] = nprobe / nlist
        if n:
            out["scanned_vectors"] = n * nprobe / nlist
            out["list_size"] = n / nlist
    if (m := positive(config.get("pq_m"))) and (bits := positive(config.get("pq_nbits"))):
        out["pq_code_bits"] = m * bits
    if (batch := positive(config.get("batch_size"))) and \
            (threads := positive(config.get("threads"))):
        out["batch_per_thread"] = batch / threads
        # Searches run one query per thread: a call of fewer queries than threads leaves some idle.
        out["busy_threads"] = min(batch, threads)
    out.update(search_work(config, workload, out.get("scanned_vectors")))
    return out


def search_work(config: Mapping[str, Any], workload: Mapping[str, float],
                scanned: float | None) -> dict[str, float]:
    """Per-query work of an (IVF and/or HNSW, flat or PQ) vector index, from the knobs present.

    A query's time is a *sum* over its stages, each with its own cost per unit; the log of a sum
    is not linear in the logs of the knobs, so the stages' work and their total are features:

    - ``graph_visits``: distances an HNSW search computes, ~ max(ef_search, wanted) · 2·hnsw_m
      (the bottom layer keeps up to 2M neighbours per node; wanted = k, or nprobe when the graph
      is an IVF index's coarse quantizer), at most the graph's size (N, or nlist under IVF).
    - ``work_queue``: comparisons in the HNSW candidate queue. faiss keeps q = max(ef_search,
      wanted) candidates (at most the graph's size) in an array, and each of the ~q nodes a
      search expands scans all of it twice (pop the nearest, count those nearer than it):
      2·q² per query. Quadratic in ef: at ef = 719 on a 1,784-node coarse graph it is 3.7x the
      search's multiply-adds, and the ef-heavy IVF-HNSW configs were the worst predicted.
    - ``coarse_distances``: distances that pick the lists to probe: nlist for a flat coarse
      quantizer, ``graph_visits`` for an HNSW one; ``distance_evals``: those plus the vectors
      scanned (an HNSW index alone: its graph visits).
    - With ``dim``, multiply-adds per stage: ``work_graph`` (graph_visits · dim),
      ``work_coarse`` (nlist · dim), ``work_flat_scan`` (scanned · dim for full vectors),
      ``work_codes`` (scanned · pq_m table look-ups for byte-aligned PQ codes;
      ``work_packed_codes`` for 4- or 6-bit codes, which are unpacked first: another cost per
      look-up), ``work_pq_table`` (the 2^pq_nbits · dim look-up table a query builds), and the
      fixed costs per probed list (``work_lists`` = nprobe) and per candidate vector
      (``work_vectors`` = scanned: heap and id bookkeeping); ``query_work`` is their
      multiply-add total, with ``work_queue``'s comparisons counted as one multiply-add each.

    These are also the terms of the fitted cost law (:data:`COST_TERMS`).
    """
    out: dict[str, float] = {}
    nlist, nprobe = positive(config.get("nlist")), positive(config.get("nprobe"))
    n, k, dim = positive(workload.get("n_vectors")), positive(workload.get("k")), \
        positive(workload.get("dim"))
    ef, hnsw_m = positive(config.get("ef_search")), positive(config.get("hnsw_m"))
    pq_m, bits = positive(config.get("pq_m")), positive(config.get("pq_nbits"))
    visits: float | None = None
    queue = 0.0
    if ef and hnsw_m:
        wanted = (nprobe if nlist else k) or 0.0
        queue = max(ef, wanted)
        visits = queue * 2 * hnsw_m
        if graph := nlist or n:
            visits, queue = min(visits, graph), min(queue, graph)
        out["graph_visits"] = visits
    ivf = nlist is not None and nprobe is not None and scanned is not None
    if ivf:
        coarse = visits if visits is not None else float(nlist or 0.0)
        out["coarse_distances"] = coarse
        out["distance_evals"] = coarse + float(scanned or 0.0)
    elif visits is not None:
        out["distance_evals"] = visits
    if not dim:
        return out
    terms: dict[str, float] = {}
    if visits is not None:
        terms["graph"] = visits * dim
        terms["queue"] = 2 * queue * queue
    if ivf and nlist and nprobe and scanned:
        if visits is None:
            terms["coarse"] = nlist * dim
        terms["lists"] = nprobe
        terms["vectors"] = scanned
        if pq_m and bits:
            # Byte-aligned codes (8 bits per sub-quantizer) index the look-up table directly;
            # packed ones (4, 6 bits) are unpacked first: a different cost per code.
            terms["codes" if bits % 8 == 0 else "packed_codes"] = scanned * pq_m
            terms["pq_table"] = 2**bits * dim
        else:
            terms["flat_scan"] = scanned * dim
    if terms:
        multiply_adds = ("graph", "queue", "coarse", "flat_scan", "codes", "packed_codes",
                         "pq_table")
        out["query_work"] = sum(terms.get(t, 0.0) for t in multiply_adds)
        out.update({f"work_{t}": v for t, v in terms.items()})
    return out


#: The stages of a vector search whose work (per query, :func:`search_work`) the cost law adds
#: up, each at a unit cost of its own: HNSW multiply-adds, visits (visited-table checks, queue
#: pushes) and queue comparisons; the flat coarse quantizer's multiply-adds; the scan's
#: multiply-adds, byte-aligned and packed PQ look-ups and PQ table; per probed list and per
#: candidate vector bookkeeping.
COST_TERMS = ("work_graph", "graph_visits", "work_queue", "work_coarse", "work_flat_scan",
              "work_codes", "work_packed_codes", "work_pq_table", "work_lists", "work_vectors")


def _cost_metric_role(metric: str) -> Literal["rate", "time"] | None:
    """``qps`` is the rate of batched calls; the single-query latency percentiles and mean
    (``*_latency_ms`` but ``batch_*``) are one query's time."""
    if metric == "qps":
        return "rate"
    if metric.endswith("_latency_ms") and not metric.startswith("batch_"):
        return "time"
    return None


def _audit_slos(q: Quantile) -> list[str]:
    """Latency bounds at the 30th/50th/70th percentile of the measured values, crossed with
    recall@10 bounds of 0.9 and 0.95."""
    out: list[str] = []
    for p in (30, 50, 70):
        lat = q("p95_latency_ms", p)
        for recall in (0.9, 0.95):
            if lat is not None:
                out.append(f"p95_latency_ms<={lat:.6g},recall_at_10>={recall}")
    return out


_IVF_TYPES = ("ivf_flat", "ivf_pq", "ivf_hnsw")


def _ivf(trials: Sequence[RuleTrial]) -> list[RuleTrial]:
    return [t for t in trials if t["config"].get("index_type") in _IVF_TYPES
            and "nlist" in t["config"]]


def _best_per_corpus(trials: Sequence[RuleTrial]) -> dict[Any, RuleTrial]:
    """Per corpus size, the IVF trial with the highest qps at recall@10 >= 0.9."""
    best: dict[Any, RuleTrial] = {}
    for t in _ivf(trials):
        if not float(t["metrics"].get("recall_at_10", 0)) >= 0.9:
            continue
        g = t["features"].get("n_vectors")
        if g is None:
            continue
        if g not in best or float(t["metrics"].get("qps", 0)) > float(best[g]["metrics"].get(
                "qps", 0)):
            best[g] = t
    return best


def _nlist_points(trials: Sequence[RuleTrial]) -> RulePoints:
    return RulePoints([(math.sqrt(float(n)), float(t["config"]["nlist"]))
                       for n, t in _best_per_corpus(trials).items()])


def _flat_main_corpus(trials: Sequence[RuleTrial]) -> tuple[list[RuleTrial], str] | None:
    """IVF-Flat trials at the corpus size most of them measured, and that size's label; None
    without IVF-Flat trials."""
    flat = [t for t in _ivf(trials) if t["config"].get("index_type") == "ivf_flat"
            and "nprobe" in t["config"]]
    if not flat:
        return None
    main_n = max({t["features"].get("n_vectors") for t in flat},
                 key=lambda n: sum(t["features"].get("n_vectors") == n for t in flat))
    return [t for t in flat if t["features"].get("n_vectors") == main_n], f"N={main_n:g}"


def _recall_points(trials: Sequence[RuleTrial]) -> RulePoints | None:
    if (found := _flat_main_corpus(trials)) is None:
        return None
    sub, label = found
    return RulePoints([(float(t["config"]["nprobe"]) / float(t["config"]["nlist"]),
                        float(t["metrics"]["recall_at_10"])) for t in sub
                       if "recall_at_10" in t["metrics"]], label)


def _latency_points(trials: Sequence[RuleTrial]) -> RulePoints | None:
    if (found := _flat_main_corpus(trials)) is None:
        return None
    sub, label = found
    return RulePoints([(float(t["config"]["nprobe"]), float(t["metrics"]["p95_latency_ms"]))
                       for t in sub if "p95_latency_ms" in t["metrics"]], label)


VECTOR_RULES = (
    RuleOfThumb(
        "best nlist against sqrt(N)", "nlist = c * sqrt(N)", "sqrt(N) (vectors^0.5)",
        "best nlist (lists)", _nlist_points, lambda x, c: c * x, (1.0,), ("c",), log_y=True,
        note="per corpus size, the IVF trial with the highest qps at recall@10 >= 0.9; "
             "the literature's rule of thumb is c ~ 1-16"),
    RuleOfThumb(
        "recall@10 against nprobe/nlist (IVF-Flat, {subset})",
        "recall = 1 - a * exp(-b * x)", "nprobe/nlist (share of lists)", "recall@10 (fraction)",
        _recall_points, lambda x, a, b: 1 - a * np.exp(-b * x), (0.5, 10.0), ("a", "b"),
        bounds=([0, 0], [1.5, 1e4]),
        note="the share of lists probed decides recall, not nprobe alone"),
    RuleOfThumb(
        "p95 latency against nprobe (IVF-Flat, {subset})", "p95 = a + b * nprobe",
        "nprobe (lists)", "p95 latency (ms)", _latency_points, lambda x, a, b: a + b * x,
        (0.01, 0.001), ("a", "b"), note="each probed list adds a scan of about N/nlist vectors"),
)

VECTOR_TIERS = (
    Tier("interactive", "recall_at_10>=0.95", "minimize:p95_latency_ms",
         "online retrieval: lowest single-query p95 at recall@10 >= 0.95"),
    Tier("standard", "recall_at_10>=0.95,p95_latency_ms<=1", "maximize:qps",
         "most queries/s at recall@10 >= 0.95 with single-query p95 <= 1 ms"),
    Tier("throughput", "recall_at_10>=0.9", "maximize:qps",
         "bulk search: most queries/s at recall@10 >= 0.9"),
)

VECTOR_SEARCH = WorkloadKind(
    name="vector-search", features=_features, workload_params=_workload_params,
    launch_params=_launch_params, derived_features=_derived, tiers=VECTOR_TIERS,
    audit_slos=_audit_slos, rules_of_thumb=VECTOR_RULES,
    cost_law=CostLawSpec(COST_TERMS, _cost_metric_role, parallel="busy_threads",
                         per_call="batch_size"))
