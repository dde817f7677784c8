"""Where a server's compile and kernel caches live: one directory every trial shares.

An engine that compiles at start-up (vLLM's torch.compile: ~25 s of an 8B start on an H100)
keeps what it compiled in a cache keyed by the model, the config and its own code, and reuses it
at the next start with the same key. A trial that gave each server a fresh cache would pay the
compile every time; so the trials of a study (and every later study on the machine, since the
caches are keyed by content) share one directory: ``$ADVISOR_ENGINE_CACHE_DIR``, else
``<cache dir>/engine-cache`` (the advisor's cache dir, ``$ADVISOR_CACHE_DIR``, where the model
directories are written too). ``ADVISOR_ENGINE_CACHE_DIR=per-trial`` gives each server an empty
cache in its own scratch directory instead (every start compiles: the cold start, measured).

An engine names its cache variables and their subdirectories
(:attr:`~objectives.llm.serving_target.EngineServer.cache_env`); a variable already set in the
server's environment is the user's choice and is kept, except in ``per-trial`` mode. Nothing
else of a trial is shared: its scratch directory, log and port stay its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_SUBDIR", "ENGINE_CACHE_ENV", "PER_TRIAL", "engine_cache_env",
           "engine_cache_root"]

#: The environment variable naming the shared cache directory (or ``per-trial``).
ENGINE_CACHE_ENV = "ADVISOR_ENGINE_CACHE_DIR"
#: Its value that gives every server a cache of its own, emptied with its scratch directory.
PER_TRIAL = "per-trial"
#: The shared directory under the advisor's cache dir when the variable is unset.
DEFAULT_SUBDIR = "engine-cache"


def engine_cache_root(cache_dir: Path, env: Mapping[str, str]) -> Path | None:
    """The shared engine-cache directory for trials run with ``cache_dir`` under ``env``: the
    variable's path (``~`` expanded, made absolute), else ``cache_dir / engine-cache``; None
    when the variable says ``per-trial``."""
    raw = env.get(ENGINE_CACHE_ENV, "").strip()
    if raw == PER_TRIAL:
        return None
    return (Path(raw).expanduser() if raw else Path(cache_dir) / DEFAULT_SUBDIR).absolute()


def engine_cache_env(variables: Sequence[tuple[str, str]], *, cache_dir: Path, scratch: Path,
                     env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
    """The cache variables to add to a server's environment ``env``, and the facts a trial
    records about them.

    ``variables`` pairs each of the engine's cache variables with its subdirectory. Shared mode
    (the default): each one not already set in ``env`` points under :func:`engine_cache_root`;
    ``per-trial``: each one points under ``scratch`` (the trial's own directory), whatever
    ``env`` says. The directories it points to are created. The facts: ``engine_cache_dir``
    (the root, or ``per-trial``) and ``engine_cache_warm`` (whether any of the directories held
    something before this start, i.e. whether the engine could reuse what an earlier start
    compiled).
    """
    if not variables:
        return {}, {}
    root = engine_cache_root(cache_dir, env)
    base = Path(scratch) / DEFAULT_SUBDIR if root is None else root
    out: dict[str, str] = {}
    warm = False
    for name, subdir in variables:
        if root is not None and env.get(name):
            path = Path(env[name]).expanduser()  # the user's own choice stands, as it is
            warm = warm or (path.is_dir() and any(path.iterdir()))
            continue
        path = base / subdir
        warm = warm or (path.is_dir() and any(path.iterdir()))
        path.mkdir(parents=True, exist_ok=True)
        out[name] = str(path)
    return out, {"engine_cache_dir": PER_TRIAL if root is None else str(root),
                 "engine_cache_warm": warm}
