"""Does vLLM's own ``vllm serve`` parser take the argv the vLLM target renders for each
``performance_mode``? Run it on a machine with vLLM importable, from the repository root:

    python docs/benchmarks/perf-mode-2026-12-06/check_parser.py

For the default config and each mode it renders the trial argv with
``objectives.targets.vllm_target.build_argv`` for the installed vLLM release, parses it with
``make_arg_parser(FlexibleArgumentParser())`` (the parser ``vllm serve`` builds: the model
positional, the frontend flags and ``AsyncEngineArgs.add_cli_args``) and checks that the mode
reaches ``EngineArgs``. On a release without ``--performance-mode`` the expected outcome is the
default rendered without the flag and any other mode refused as a config before a start.
Prints one OK/FAIL line per case; exits 1 on any FAIL, 2 when vLLM cannot be imported.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root

MODES = ("balanced", "interactivity", "throughput")
FLAG = "--performance-mode"


def _parser() -> Any:
    try:  # vLLM >= 0.11 keeps FlexibleArgumentParser here (0.26.0 too)
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    return make_arg_parser(FlexibleArgumentParser())


def check(config: dict[str, Any], expected: str, version: str | None) -> tuple[bool, str]:
    """(passed, what happened) for one config whose mode should be ``expected``."""
    from advisor.errors import ConfigRejectedError
    from objectives.targets.vllm_target import build_argv
    from search_spaces import load_space

    knob = load_space("vllm").knob("performance_mode")
    has_flag = knob.flag_for(version) is not None if version else True
    try:
        # An existing directory: EngineArgs resolves a model path that does not exist as a hub
        # name (a lookup that fails offline); nothing is loaded from it.
        model_dir = tempfile.mkdtemp(prefix="check-parser-model-")
        args = build_argv(config, model_dir=model_dir, port=8123, engine_version=version,
                          max_model_len=4096, seed=0, served_model_name="m")
    except ConfigRejectedError as exc:
        if not has_flag and expected != knob.default:
            return True, f"rejected before a start, as it must be here: {exc}"
        return False, f"rejected: {exc}"
    rendered = [args[i + 1] for i, a in enumerate(args[:-1]) if a == FLAG]
    if has_flag and rendered != [expected]:
        return False, f"argv carries {FLAG} {rendered}, expected [{expected!r}]"
    if not has_flag and rendered:
        return False, f"argv carries {FLAG} {rendered} on a release without the flag"
    try:
        ns = _parser().parse_args(args)
    except SystemExit as exc:  # argparse refuses by exiting (its message is on stderr)
        return False, f"vLLM's parser refused the argv (exit {exc.code}): {args}"
    from vllm.engine.arg_utils import EngineArgs

    # `vllm serve MODEL` takes the model as a positional `model_tag`; its command copies it
    # into `model` before building the engine's arguments, as done here.
    if getattr(ns, "model_tag", None):
        ns.model = ns.model_tag
    engine_args = EngineArgs.from_cli_args(ns)
    got = getattr(engine_args, "performance_mode", None)
    if has_flag and got != expected:
        return False, f"EngineArgs.performance_mode is {got!r}, expected {expected!r}"
    shown = f"{FLAG} {rendered[0]}" if rendered else f"no {FLAG} (release without the flag)"
    return True, f"parsed; {shown}; EngineArgs.performance_mode={got!r}"


def main() -> int:
    try:
        import vllm
    except ImportError as exc:
        print(f"vLLM is not importable here ({exc}); run this where vLLM is installed")
        return 2
    from objectives.targets.vllm_target import installed_version

    version = installed_version() or getattr(vllm, "__version__", None)
    print(f"vLLM {version} at {Path(vllm.__file__).parent}")
    cases = [("default config", {}, "balanced"),
             *((f"performance_mode={m}", {"performance_mode": m}, m) for m in MODES)]
    failed = 0
    for label, config, expected in cases:
        passed, what = check(config, expected, version)
        failed += not passed
        print(f"{'OK  ' if passed else 'FAIL'} {label}: {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
