"""Registered targets: name -> implementing class, imported lazily.

Adding an engine adds one line here. Import paths are strings so that listing targets never
imports an engine. Out-of-tree targets (plugins, and the scripted targets of the test suite) are
registered with ``ADVISOR_EXTRA_TARGETS="name=package.module:Class,..."``; the variable is read on
every lookup so that trial child processes, which inherit it, see the same registry.
"""

from __future__ import annotations

import importlib
import os

from advisor.errors import UnknownTargetError, did_you_mean
from objectives.metrics import MetricSpec, metrics_in_families
from objectives.target import Target

__all__ = ["DEFAULT_SERVING_TARGET", "DEFAULT_TARGET", "TARGETS", "get_target",
           "metrics_for_target", "target_class", "target_names"]

TARGETS: dict[str, str] = {
    "faiss": "objectives.targets.faiss_target:FaissTarget",
    "transformers": "objectives.targets.transformers_target:TransformersTarget",
    "vllm": "objectives.targets.vllm_target:VllmTarget",
    "tensorrt-llm": "objectives.targets.tensorrt_llm_target:TensorRTLLMTarget",
    "tgi": "objectives.targets.tgi_target:TGITarget",
    "sglang": "objectives.targets.sglang_target:SglangTarget",
    "ollama": "objectives.targets.ollama_target:OllamaTarget",
    "llamacpp": "objectives.targets.llamacpp_target:LlamaCppTarget",
    "openai": "objectives.targets.openai_target:OpenAITarget",
    "rag": "objectives.targets.rag_target:RagTarget",
}

#: The target a command tunes or answers for when none is named (``advisor tune``, ``recommend``;
#: it runs on any CPU).
DEFAULT_TARGET = "faiss"
#: The LLM serving target ``advisor crosscheck`` checks when none is named.
DEFAULT_SERVING_TARGET = "vllm"


def _registry() -> dict[str, str]:
    extra: dict[str, str] = {}
    for item in os.environ.get("ADVISOR_EXTRA_TARGETS", "").split(","):
        name, sep, path = item.strip().partition("=")
        if sep and ":" in path:
            extra[name.strip()] = path.strip()
    return {**TARGETS, **extra}


def target_names() -> list[str]:
    """Names of every registered target."""
    return sorted(_registry())


def get_target(name: str) -> Target:
    """Instantiate the target registered as ``name``."""
    return target_class(name)()


def target_class(name: str) -> type[Target]:
    """The class registered as ``name``, for its declarations (nothing is instantiated)."""
    try:
        path = _registry()[name]
    except KeyError:
        hint = did_you_mean(name, target_names())
        raise UnknownTargetError(f"unknown target {name!r}{hint}" if hint else
                                 f"unknown target {name!r}; registered targets: "
                                 f"{', '.join(target_names())}") from None
    module_name, _, class_name = path.partition(":")
    cls: type[Target] = getattr(importlib.import_module(module_name), class_name)
    return cls


def metrics_for_target(target: str) -> list[MetricSpec]:
    """Every metric that the target registered as ``target`` reports (its metric families')."""
    return metrics_in_families(target_class(target).metric_families)
