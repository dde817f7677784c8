"""`advisor recommend`: the CLI's door to the answer planner (advisor/answers/). It only turns
flags into a :class:`RecommendationRequest` and renders the :class:`Answer`; `--json` prints
exactly what `POST /v1/recommendations` returns.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from advisor.cli.context import (
    MODEL_CONFIG_HELP,
    TARGETS_METAVAR,
    cli_settings,
    cli_store,
    knowledge_models,
    one_line,
    out,
)
from advisor.errors import InputError
from objectives.registry import DEFAULT_TARGET

if TYPE_CHECKING:
    from advisor.answers import RecommendationRequest

__all__ = ["recommend_cmd"]


def recommend_cmd(
    slo: Annotated[str, typer.Option(help='The SLO to meet, e.g. "p95_latency_ms<=1,'
                                          'recall_at_10>=0.95".')],
    target: Annotated[str, typer.Option(help="Target engine.", metavar=TARGETS_METAVAR)
                      ] = DEFAULT_TARGET,
    objective: Annotated[str | None, typer.Option(
        help="What to optimise among configs meeting the SLO (default: the target's).")] = None,
    hardware: Annotated[str | None, typer.Option(callback=one_line,
        help="Which hardware to answer for: (part of) a hardware key such as h200, 'this' "
             "(this machine) or 'any'. Default: this machine when it measured the target, "
             "else the measured hardware with the most evidence (named in the answer).")
        ] = None,
    model: Annotated[str | None, typer.Option(callback=one_line,
        help="LLM targets: the model shape (llama-3-8b, llama-3.2-1b, ...).")] = None,
    model_config: Annotated[str | None, typer.Option("--model-config", callback=one_line,
        help=MODEL_CONFIG_HELP, metavar="PATH|KEY=VALUE,...")] = None,
    rate_rps: Annotated[float | None, typer.Option(
        help="LLM workload: Poisson arrival rate, requests/s.")] = None,
    prompt_len: Annotated[float | None, typer.Option(
        help="LLM workload: median prompt length, tokens.")] = None,
    output_len: Annotated[float | None, typer.Option(
        help="LLM workload: median output length, tokens.")] = None,
    n_vectors: Annotated[int | None, typer.Option(
        help="Vector-search workload: vectors in the index (corpus size N).")] = None,
    dim: Annotated[int | None, typer.Option(help="Vector-search workload: vector dimension.")
                   ] = None,
    total_rate_rps: Annotated[float | None, typer.Option(
        help="Total arrival rate (req/s) to serve across replicas: the answer gives the "
             "replicas of one GPU it needs at the SLO, where it knows the capacity.")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Show the evidence trials, intervals, model quality and the "
                          "reasoning behind the confidence.")] = False,
    measured: Annotated[bool, typer.Option(
        "--measured", help="Only measured evidence: the best stored trial meeting the SLO on "
                           "this hardware, model and workload (or the nearest measured "
                           "workload, named), no models.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Recommend a config for an SLO.

    The engine default is candidate #1: another config replaces it only when it meets the SLO
    by the same rule and is better beyond the noise. Measured windows at your workload decide
    first (k of n shown); model predictions, labelled with their 90 % intervals, fill the gaps.
    Questions outside the data are answered `not_covered` with the `advisor tune` command that
    would cover them; where no config is shown to meet the SLO but a prediction's interval
    straddles it, `undecided` with the measurement that decides it. Exit code 1 when no config
    is recommended.
    """
    from advisor.answers import plan_recommendation
    from advisor.cli.answer_view import print_answer
    from objectives.hardware import hardware_key

    settings = cli_settings()
    hw = {"this": hardware_key(), "any": None}.get(hardware or "", hardware)
    request = _request(target=target, slo=slo, objective=objective, hardware=hw, model=model,
                       model_config=model_config, measured=measured,
                       total_rate_rps=total_rate_rps,
                       workload=_workload_query(rate_rps, prompt_len, output_len, n_vectors,
                                                dim))
    store = cli_store(settings)
    answer = plan_recommendation(
        store, request, models=lambda: knowledge_models(settings, store, target),
        cache_dir=settings.cache_dir, this_hardware=hardware_key() if hardware is None else None,
        launch_model=_model_dir(model_config))
    if as_json:
        sys.stdout.buffer.write(answer.to_json_bytes())
        sys.stdout.flush()
    else:
        print_answer(out, answer, explain)
    if not answer.found:
        raise typer.Exit(1)


def _request(*, model_config: str | None, **fields: Any) -> RecommendationRequest:
    """The request the flags ask (one line on bad input, as REST's 422)."""
    from advisor.answers import RecommendationRequest
    from objectives.llm.shapes import load_model_config

    if model_config is not None:
        fields["hf_config"] = load_model_config(model_config)
    try:
        return RecommendationRequest(**fields)
    except ValueError as exc:
        detail = str(exc).splitlines()
        raise InputError(f"{detail[1].strip() if len(detail) > 1 else ''}: "
                         f"{detail[-1].strip()}") from None


def _model_dir(model_config: str | None) -> str | None:
    """The user's local model directory a launch command serves (a ``--model-config`` that is
    a directory or a file in one); None for inline ``KEY=VALUE`` fields."""
    if model_config is None or "=" in model_config:
        return None
    path = Path(model_config).expanduser()
    return str(path if path.is_dir() else path.parent)


def _workload_query(rate_rps: float | None, prompt_len: float | None, output_len: float | None,
                    n_vectors: int | None, dim: int | None) -> dict[str, Any]:
    given = {"rate_rps": rate_rps, "prompt_len": prompt_len, "output_len": output_len,
             "n_vectors": n_vectors, "dim": dim}
    return {k: v for k, v in given.items() if v is not None}
