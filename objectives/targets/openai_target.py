"""The openai target: measures an OpenAI-compatible endpoint that is already running.

The advisor does not start or configure the server, so the knobs are client-side only (requests
in flight, arrival-rate scale): a :class:`~objectives.llm.serving_target.ServingTarget` with its
own ``run``. The endpoint comes from the workload's ``base_url`` and ``served_model`` parameters
or from ``ADVISOR_OPENAI_BASE_URL`` / ``ADVISOR_OPENAI_MODEL``; an API key is read from
``ADVISOR_OPENAI_API_KEY`` at request time and never stored with a trial. Every request carries
``{"ignore_eos": true}`` (fixed output lengths) unless the workload's ``extra_body`` parameter
says otherwise.

Prompts are sequences of the words ``t<i>`` (see :mod:`objectives.llm.models`): against a model
with a real tokenizer their token counts differ from the workload's nominal lengths (each trial
records that its lengths are nominal).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from advisor.errors import EngineUnavailableError, WorkloadError
from objectives.llm.reference import ReferenceHarness
from objectives.llm.server import (
    CLIENT_PROCESSES_MAX_PARAM,
    CLIENT_PROCESSES_PARAM,
    client_processes_max_param,
    client_processes_param,
    measure_endpoint,
)
from objectives.llm.server_metrics import MetricVocabulary, ServerMetricsError, scrape
from objectives.llm.serving_target import ServingTarget
from objectives.measurement import Measurement
from objectives.target import ProgressFn
from objectives.targets.tensorrt_llm_target import TRTLLM_METRICS
from objectives.targets.tgi_target import TGI_METRICS
from objectives.targets.vllm_bench import VllmBenchServe
from objectives.targets.vllm_target import VLLM_METRICS
from objectives.workload import Workload

__all__ = ["API_KEY_ENV", "BASE_URL_ENV", "MODEL_ENV", "Endpoint", "OpenAITarget",
           "resolve_endpoint"]

BASE_URL_ENV = "ADVISOR_OPENAI_BASE_URL"
MODEL_ENV = "ADVISOR_OPENAI_MODEL"
API_KEY_ENV = "ADVISOR_OPENAI_API_KEY"
TARGET_PARAMS = frozenset({"base_url", "served_model", "extra_body", "server_metrics",
                           CLIENT_PROCESSES_PARAM, CLIENT_PROCESSES_MAX_PARAM})
#: The engines whose metrics the ``server_metrics`` param can name; "auto" tries them in order.
KNOWN_VOCABULARIES: dict[str, MetricVocabulary] = {
    v.source: v for v in (VLLM_METRICS, TRTLLM_METRICS, TGI_METRICS)}
AUTO = "auto"
#: Sent with every request unless the workload's ``extra_body`` replaces it: vLLM, TensorRT-LLM
#: and SGLang then produce exactly ``max_tokens`` tokens. Hosted APIs that refuse unknown fields
#: need ``extra_body: {}`` (output lengths then vary with the model's EOS).
DEFAULT_EXTRA_BODY: dict[str, Any] = {"ignore_eos": True}
NONE_CHOICE = "none"


class Endpoint:
    """Where to send requests: the server's base URL (without ``/v1``) and the model name."""

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url, self.model = base_url, model

    def __repr__(self) -> str:
        return f"Endpoint({self.base_url!r}, {self.model!r})"


def _check_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EngineUnavailableError(
            f"{where} must be an http:// or https:// URL with a host, got {url!r}")
    base = url.rstrip("/")
    # The client appends /v1/...; accept the common ".../v1" spelling too.
    return base[: -len("/v1")] if base.endswith("/v1") else base


def resolve_endpoint(params: Mapping[str, Any], env: Mapping[str, str] | None = None
                     ) -> Endpoint:
    """The endpoint from workload params (``base_url``, ``served_model``), else the environment.

    Raises :class:`EngineUnavailableError` when no base URL or model is configured or the URL is
    not http(s).
    """
    env = os.environ if env is None else env
    url = params.get("base_url") or env.get(BASE_URL_ENV)
    if not url:
        raise EngineUnavailableError(
            f"the openai target needs an endpoint: set {BASE_URL_ENV}=http://HOST:PORT (and "
            f"{MODEL_ENV}), or pass --workload-param base_url=... --workload-param "
            "served_model=...")
    where = "workload param base_url" if params.get("base_url") else BASE_URL_ENV
    base = _check_url(str(url), where)
    model = params.get("served_model") or env.get(MODEL_ENV)
    if not model:
        raise EngineUnavailableError(
            f"the openai target needs the served model's name: set {MODEL_ENV} or pass "
            "--workload-param served_model=...")
    return Endpoint(base, str(model))


def server_vocabulary(base_url: str, choice: Any) -> MetricVocabulary | None:
    """The metrics vocabulary of the endpoint: the one named by the ``server_metrics`` param, or
    with "auto" (the default) the first known one whose metrics the endpoint serves; None for
    "none" or when it serves none (its trials are then "unchecked")."""
    if choice == NONE_CHOICE:
        return None
    if choice != AUTO:
        if choice not in KNOWN_VOCABULARIES:
            raise WorkloadError(f"workload param server_metrics must be {AUTO!r}, "
                                f"{NONE_CHOICE!r} or one of {sorted(KNOWN_VOCABULARIES)}, "
                                f"got {choice!r}")
        return KNOWN_VOCABULARIES[choice]
    for vocabulary in KNOWN_VOCABULARIES.values():
        try:
            scrape(base_url, vocabulary)
        except ServerMetricsError:
            continue
        return vocabulary
    return None


class OpenAITarget(ServingTarget):
    """Any running OpenAI-compatible endpoint, measured from the client side."""

    name: ClassVar[str] = "openai"
    engine: ClassVar[str] = "openai"
    trial_time_estimate_s: ClassVar[float] = 60.0
    description: ClassVar[str] = (
        "Any running OpenAI-compatible endpoint (client-side knobs: concurrency, rate scale)"
    )
    install_hint: ClassVar[str] = (
        f"a running OpenAI-compatible server: set {BASE_URL_ENV} and {MODEL_ENV} "
        f"(and {API_KEY_ENV} if it needs a key)"
    )
    target_params: ClassVar[frozenset[str]] = TARGET_PARAMS

    def check_available(self) -> None:
        """Checks the environment's endpoint when one is set. The workload (which may carry its
        own ``base_url``) is not known here; :meth:`prepare` checks the endpoint it resolves."""
        url = os.environ.get(BASE_URL_ENV)
        if url:
            _check_url(url, BASE_URL_ENV)

    def engine_versions(self) -> dict[str, str]:
        # The server's software is unknown from the client side; the endpoint is in the workload.
        return {"openai-endpoint": "unknown"}

    def prepare(self, workload: Workload, cache_dir: Path, progress: ProgressFn | None = None
                ) -> dict[str, Any]:
        self._check_kind(workload)
        endpoint = resolve_endpoint(workload.params)
        self.load_served(workload, cache_dir)
        return {"base_url": endpoint.base_url, "served_model": endpoint.model}

    def run(self, config: Mapping[str, Any], workload: Workload, cache_dir: Path) -> Measurement:
        started = time.perf_counter()
        self._check_kind(workload)
        endpoint = resolve_endpoint(workload.params)
        served = self.load_served(workload, cache_dir)
        clean = self.validate_config(config)
        cap = clean["max_concurrency"]
        extra_body = served.target_params.get("extra_body", DEFAULT_EXTRA_BODY)
        if not isinstance(extra_body, Mapping):
            raise WorkloadError(f"workload param extra_body must be a mapping, got {extra_body!r}")
        vocabulary = server_vocabulary(endpoint.base_url,
                                       served.target_params.get("server_metrics", AUTO))
        metrics, details = measure_endpoint(
            endpoint.base_url, endpoint.model, served, api_key=os.environ.get(API_KEY_ENV),
            extra_body=extra_body,
            concurrency=None if cap == NONE_CHOICE else int(cap),
            rate_scale=float(clean["request_rate_scale"]),
            client_processes=client_processes_param(served.target_params),
            max_client_processes=client_processes_max_param(served.target_params),
            vocabulary=vocabulary)
        details.update({"base_url": endpoint.base_url, "served_model": endpoint.model,
                        "extra_body": dict(extra_body),
                        "prompt_lengths": "nominal: exact only when the endpoint serves an "
                                          "advisor model directory (word-level tokenizer)"})
        return Measurement(metrics=metrics, engine_versions=self.engine_versions(),
                           details=details, duration_s=time.perf_counter() - started)

    def reference_harness(self) -> ReferenceHarness | None:
        # vllm bench serve drives any OpenAI-compatible completions endpoint.
        return VllmBenchServe()

    def launch_command(self, config: Mapping[str, Any], workload: Workload | None = None) -> str:
        """There is no server to launch: the client settings that reproduce ``config``."""
        clean = self.validate_config(config)
        endpoint = ""
        if workload is not None:
            params = workload.params
            url, model = params.get("base_url"), params.get("served_model")
            endpoint = f" against {url or '$' + BASE_URL_ENV} ({model or '$' + MODEL_ENV})"
        return (f"# openai target: the server is not launched by the advisor. Client settings"
                f"{endpoint}: max_concurrency={clean['max_concurrency']}, "
                f"request_rate_scale={clean['request_rate_scale']:g}")
