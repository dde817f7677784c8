"""The stand-in OpenAI-compatible server (``fake_openai_server.py``) the vLLM target's tests start
through ADVISOR_VLLM_COMMAND (the ``fake_vllm`` fixture in this folder's conftest.py), and the
short workloads they replay against it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from objectives.llm.workload import load_preset
from objectives.workload import Workload

FAKE = Path(__file__).with_name("fake_openai_server.py")


def short_workload(n_requests: int, rate_rps: float = 50.0, **target_params: Any) -> Workload:
    """``n_requests`` short prompts with 4-token outputs, Poisson at ``rate_rps``, 2 warm-up
    requests; ``target_params`` are the target's own keys (client_processes, ...)."""
    return load_preset(
        "chat", model="tiny-llama", n_requests=n_requests, warmup_requests=2,
        arrival={"process": "poisson", "rate_rps": rate_rps},
        prompt_len={"dist": "uniform", "low": 8, "high": 16},
        output_len={"dist": "fixed", "value": 4}).with_params(**target_params)
