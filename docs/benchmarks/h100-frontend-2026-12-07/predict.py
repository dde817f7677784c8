"""Predictions for the held-out GPU from this lease's calibration ONLY, written before any scored
window is measured (issue 44, "Done when": the accuracy goals). The second held-out campaign:
the code that predicts now models vLLM's prefix cache (a change the first campaign's
`rag-long-prompt` windows motivated, docs/benchmarks/h100-new-gpu-2026-12-07/) and a config's
API server processes; both were committed before this lease measured anything.

    python docs/benchmarks/h100-frontend-2026-12-07/predict.py PROFILE.json -o predictions.json

run.sh calls it on the device right after `advisor calibrate` wrote PROFILE.json and before the
first scored window; it logs the file's sha256 and the time, and every scored window's request
stream is fixed here, so the scored figures cannot have shaped it. Run again on the same
profile (measured/profile.json), it writes the same file.

What it predicts, each figure labelled "predicted from calibration" with its 90 % interval
(knowledge/calibrated.py, the planner's own code):

- per workload (`chat`, 8 s of arrivals per window; `rag-long-prompt`, 16 s), vLLM's defaults
  on the 8B shape: the capacity at the SLO (the highest rate whose prediction meets it,
  bisected over other draws of the workload, as the planner answers), then the scored rates at
  FRACTIONS of that capacity (light load to past it);
- at each scored rate, the figures of the very window the cross-check will send there (its
  workload moved to the rate exactly as `advisor crosscheck` moves it: the same arrivals,
  prompts and lengths), the primary prediction; and the figures over other draws of the
  workload at that rate (seeds no window uses, as the planner answers a question), the
  secondary one. The primary isolates the engine model's error; the secondary adds the draw
  of the requests. The defaults cache prefixes (vLLM's default, the knob of role
  ``prefix_cache``), so a prompt whose shared prefix an earlier request carried counts only
  the tokens the engine prefills (objectives/llm/simulation.py ``request_stream``);
- for `chat`, the same figures and capacity for the defaults with twice the API server
  processes (the knob of role ``frontend_processes``), as the calibrated answer predicts them:
  what the study and the verification of run.sh's later phases measure at 60 req/s.

Nothing here reads a measured window except the profile's own probe (inside PROFILE.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from advisor.calibrate import workload_streams  # noqa: E402
from advisor.cli.context import parse_workload  # noqa: E402
from knowledge.batch_sim import RequestStream  # noqa: E402
from knowledge.calibrated import LABEL, capacity_at_slo, predict  # noqa: E402
from knowledge.profiles import HardwareProfile  # noqa: E402
from objectives.llm.simulation import caches_prefixes, request_stream  # noqa: E402
from objectives.llm.workload import LLMWorkloadSpec, at_rate  # noqa: E402
from objectives.registry import get_target  # noqa: E402

SLO = {"ttft_p95_ms": 300.0, "tpot_p95_ms": 40.0}
METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
MODEL = "llama-3-8b"
#: The scored rates as fractions of the predicted capacity: light load, mid, just under and
#: just past it (a capacity right within 10 % meets at the third and misses at the fourth).
FRACTIONS = (0.3, 0.6, 0.9, 1.1)
#: Each workload's base as the cross-check gets it (`--workload NAME --workload-param ...`):
#: its own rate, requests for WINDOW_S seconds of arrivals, a 15 s drain.
WORKLOADS = {
    "chat": {"window_s": 8, "rounds": 3},
    "rag-long-prompt": {"window_s": 16, "rounds": 1},
}
#: The question the later phases answer and verify.
ASKED_RATE = 60.0
#: The frontend variant predicted beside the defaults (``chat`` only): the processes' factor.
FRONTEND_PROCESSES = 2


def prefix_cache_on() -> bool:
    """Whether vLLM's defaults serve shared prompt prefixes from the engine's cache."""
    space = get_target("vllm").space()
    return caches_prefixes(space.knob_with_role("prefix_cache"), space.default_config(), {})


def base_params(name: str) -> list[str]:
    """The `--workload-param` values run.sh passes the cross-check of workload ``name``."""
    wl = parse_workload(get_target("vllm"), name, [f"model={MODEL}"])
    rate = LLMWorkloadSpec.from_workload(wl).arrival.rate_rps
    assert rate is not None
    n = round(rate * WORKLOADS[name]["window_s"])
    return [f"model={MODEL}", f"n_requests={n}", "drain_limit_s=15"]


def own_stream(name: str, rate: float, position: int) -> tuple[RequestStream, dict[str, Any]]:
    """The request stream the cross-check sends at ``rate``, the ``position``-th of its rates
    (advisor/crosscheck.py `_workload_at`: `at_rate(workload, rate, seed_offset=position + 1)`),
    and that workload's params (score.py checks the measured window carries the same)."""
    wl = at_rate(parse_workload(get_target("vllm"), name, base_params(name)), rate,
                 seed_offset=position + 1)
    spec = LLMWorkloadSpec.from_workload(wl)
    return request_stream(spec, prefix_cache_on()), dict(wl.params)


def figures(prediction: Any) -> dict[str, Any]:
    return {m: asdict(prediction.figures[m]) for m in METRICS if m in prediction.figures}


def workload_predictions(profile: HardwareProfile, name: str) -> dict[str, Any]:
    """Capacity, scored rates and per-rate predictions of one workload (module docstring)."""
    wl = parse_workload(get_target("vllm"), name, base_params(name))
    others = workload_streams(dict(wl.params), prefix_cache=prefix_cache_on())
    low = 0.2 if name != "chat" else 1.0
    cap = capacity_at_slo(profile, others, SLO, low_rps=low, high_rps=400.0)
    rates = sorted({round(cap.rate_rps * f, 1 if cap.rate_rps < 20 else 0) for f in FRACTIONS})
    points = []
    for i, rate in enumerate(rates):
        stream, params = own_stream(name, rate, i)
        points.append({
            "rate_rps": rate, "position": i, "workload": params,
            "own_stream": figures(predict(profile, [stream], rate_rps=rate)),
            "other_draws": figures(predict(profile, others(rate), rate_rps=rate)),
        })
    out = {"base_params": base_params(name), "capacity_rps": asdict(cap),
           "rates": rates, "rounds": WORKLOADS[name]["rounds"], "points": points}
    if name == "chat":
        n = FRONTEND_PROCESSES
        out["frontend_processes"] = {
            "processes_factor": n,
            "capacity_rps": asdict(capacity_at_slo(profile, others, SLO, low_rps=low,
                                                   high_rps=400.0, frontend_processes=n)),
            "asked_rate_rps": ASKED_RATE,
            "other_draws": figures(predict(profile, others(ASKED_RATE), rate_rps=ASKED_RATE,
                                           frontend_processes=n)),
            "defaults_other_draws": figures(predict(profile, others(ASKED_RATE),
                                                    rate_rps=ASKED_RATE)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path, help="the profile `advisor calibrate -o` wrote")
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args(argv)
    profile = HardwareProfile.from_json(json.loads(args.profile.read_text()))
    out = {
        "label": LABEL, "profile": profile.name, "profile_uid": profile.uid,
        "gpu": profile.gpu_name, "driver": profile.driver,
        "engine_versions": dict(profile.engine_versions), "probe_seconds": profile.probe_seconds,
        "step_model": {"fixed_ms": profile.fixed_ms, "per_sequence_ms": profile.per_sequence_ms,
                       "per_prefill_token_ms": profile.per_prefill_token_ms,
                       "frontend_token_ms": profile.frontend_token_ms},
        "error_log": dict(profile.error_log), "noise_log": dict(profile.noise_log),
        "slo": SLO, "fractions": FRACTIONS,
        "workloads": {name: workload_predictions(profile, name) for name in WORKLOADS},
    }
    args.output.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for name, w in out["workloads"].items():
        c = w["capacity_rps"]
        print(f"{name}: capacity {c['rate_rps']:.1f} req/s [{c['low']:.1f}, {c['high']:.1f}]; "
              f"scored rates {' '.join(f'{r:g}' for r in w['rates'])}")
        if "frontend_processes" in w:
            f = w["frontend_processes"]
            c = f["capacity_rps"]
            print(f"{name}, {f['processes_factor']}x the API server processes: capacity "
                  f"{c['rate_rps']:.1f} req/s [{c['low']:.1f}, {c['high']:.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
