"""What every ``advisor`` command shares: the consoles, the global options (``--db-url``), the
settings and the store they open, option texts and callbacks, and the parsing of values a user
types (workload parameters, ``--enqueue`` configs, ``--model`` / ``--model-config``).

Typer (pinned in pyproject.toml) ships its own copy of click; option callbacks raise
``typer.BadParameter`` so a bad value is a usage error.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from advisor.errors import AdvisorError, InputError, WorkloadError
from advisor.inputs import check_label, check_numbers
from advisor.model_config import describe, shape_option
from advisor.presets import resolve_workload
from objectives.llm.models import MODEL_SHAPES
from objectives.registry import TARGETS
from objectives.target import Target
from objectives.workload import Workload

if TYPE_CHECKING:
    # The settings (pydantic-settings), the store and the fitted models are imported by the
    # functions that build or open them: `--help`, a usage error and the commands that never
    # touch them do not pay for pydantic or the surrogate stack.
    from advisor.settings import Settings
    from knowledge import TrialStore
    from knowledge.cache import KnowledgeModels

__all__ = ["CSV_HELP", "MODELS_METAVAR", "MODEL_CONFIG_HELP", "TARGETS_METAVAR", "WIDE_HELP",
           "State", "choice", "cli_settings", "cli_store", "err", "knowledge_models",
           "model_option", "one_line", "out", "parse_enqueued", "parse_workload", "positive",
           "probability", "sigterm_interrupts", "workload_overrides"]

#: ``--target`` in --help: the built-in targets (out-of-tree ones are accepted too).
TARGETS_METAVAR = "|".join(sorted(TARGETS))
MODELS_METAVAR = "|".join([*MODEL_SHAPES, "DIR"])
MODEL_CONFIG_HELP = (
    "LLM targets: a Hugging Face config.json (a path, or KEY=VALUE,... fields) of a dense "
    "Llama, Mistral or Qwen2 decoder, served with random weights under the shape's name (a "
    "built-in name, else one spelling the shape out). With --model, both must name one shape.")
WIDE_HELP = "One line per row, however wide (for wide terminals or `less -S`)."
CSV_HELP = "Comma-separated values with a header row (wins over --wide)."

#: Human output (stdout) and progress, warnings and errors (stderr).
out = Console()
err = Console(stderr=True)


class State:
    """The global options of this invocation (set by the root command's callback)."""

    debug = False
    db_url: str | None = None


def cli_settings() -> Settings:
    """The settings from the environment, with ``--db-url`` applied."""
    from advisor.settings import Settings

    settings = Settings()
    if State.db_url:
        settings = settings.model_copy(update={"db_url": State.db_url})
    return settings


def cli_store(settings: Settings | None = None, *, sigterm_raises: bool = True) -> TrialStore:
    """The store a command works on (advisor/stores.py: the shipped knowledge imported).
    SIGTERM stops the command as Ctrl-C does, so the store is closed (checkpointed) on the way
    out rather than left to its ``-wal`` file; ``sigterm_raises=False`` leaves the signal
    handlers as they are, for a command that installed its own (:func:`stop_on_signals`)."""
    from advisor.stores import open_store

    if sigterm_raises:
        sigterm_interrupts()
    return open_store(settings or cli_settings())


def _one_of(choices: Sequence[str]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        values = value if isinstance(value, list | tuple) else [value]
        for v in values:
            if v is not None and v not in choices:
                raise typer.BadParameter(f"{v!r} is not one of {', '.join(choices)}")
        return value

    return check


def choice(choices: Sequence[str]) -> dict[str, Any]:
    """``typer.Option`` keyword arguments for a string option limited to ``choices``: ``--help``
    lists them (instead of ``<str>``) and any other value is a usage error naming them.

    The choices come from the registries (samplers, surrogate families, statuses), so adding one
    there adds it here; the value stays a plain ``str`` for the command.
    """
    return {"metavar": "|".join(choices), "callback": _one_of(list(choices))}


def one_line(value: str | None) -> str | None:
    """Option callback: a name, hardware or model label must be one line of printable text
    (advisor/inputs.py: it is printed into commands a user may paste into a shell)."""
    if value is not None:
        try:
            check_label(value, "the value")
        except InputError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def positive(value: float | None) -> float | None:
    """Option callback: a number of seconds must be > 0 (a usage error otherwise)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be > 0, got {value:g}")
    return value


def probability(value: float | None) -> float | None:
    """Option callback: a failure threshold is a probability in (0, 1]."""
    if value is not None:
        from advisor.study_spec import check_threshold

        try:
            check_threshold(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def sigterm_interrupts() -> None:
    """Make SIGTERM (a scheduler's or a deadline's stop) raise KeyboardInterrupt in the main
    thread, so a study stopped that way records its running trial as interrupted instead of
    leaving it "running" until the next `--resume`."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)


def stop_on_signals(stop: Callable[[], object]) -> None:
    """Make SIGTERM and SIGINT call ``stop`` (which only sets a flag) instead of raising, for
    the long-running commands whose loop looks at that flag: an exception raised by a signal
    handler lands wherever the main thread is, and inside a WSGI request (whose handler
    catches every exception) or a garbage-collection callback it is swallowed."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def model_option(model: str | None, model_config: str | None) -> str | None:
    """``--model`` / ``--model-config`` as the workload's ``model``; names the config's shape."""
    shape = shape_option(model, model_config)
    if shape is None:
        return model
    err.print(escape(f"--model-config {model_config}: {describe(shape)}"), highlight=False)
    return shape.name


def workload_overrides(params: Sequence[str]) -> dict[str, Any]:
    """``--workload-param KEY=VALUE`` values as overrides (each VALUE read as YAML)."""
    overrides: dict[str, Any] = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(f"--workload-param expects KEY=VALUE, got {item!r}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            why = " ".join(str(exc).split())  # YAML's messages span lines; errors are one line
            raise WorkloadError(f"--workload-param {key.strip()}: not a YAML value ({why})"
                                ) from None
        overrides[key.strip()] = check_numbers(parsed, f"--workload-param {key.strip()}")
    return overrides


def parse_workload(target: Target, workload: str | None, params: Sequence[str]) -> Workload:
    """``--workload`` and ``--workload-param`` values as the workload they name."""
    return resolve_workload(target, workload, workload_overrides(params))


def parse_enqueued(values: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """``--enqueue`` values as knob mappings: inline YAML/JSON, or @FILE with one or a list."""
    configs: list[dict[str, Any]] = []
    for value in values:
        where = f"--enqueue {value!r}"
        text = value
        if value.startswith("@"):
            path = Path(value[1:]).expanduser()
            try:
                text = path.read_text()
            except OSError as exc:
                raise AdvisorError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise AdvisorError(f"{where}: not YAML/JSON: {exc}") from None
        items = data if isinstance(data, list) else [data]
        for item in items:
            if not isinstance(item, dict) or not item or not all(isinstance(k, str) for k in item):
                raise AdvisorError(f"{where}: expected a mapping of knob names to values, e.g. "
                                   "'{knob_a: 256}'")
            configs.append(item)
    return tuple(configs)


def knowledge_models(settings: Settings, store: TrialStore, target: str | None = None
            ) -> KnowledgeModels:
    """The fitted models for ``store``: the all-target set `advisor knowledge fit` saved when it
    is current, else ``target``'s own set (fitted now when missing or stale)."""
    from knowledge.cache import ModelCache

    full = ModelCache(store, settings.cache_dir).peek()
    if full is not None:
        return full
    cache = ModelCache(store, settings.cache_dir, target=target,
                       shared_dir=settings.shared_model_dir)
    if cache.peek() is None:
        err.print("[dim]fitting the surrogate models on the stored trials first (`advisor "
                  "knowledge fit` does this ahead of time)[/dim]")
    return cache.get()

