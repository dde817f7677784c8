"""After the fact: lease A's `rag-long-prompt` windows predicted again with the prefix cache
modelled (a change their over-predicted TTFT motivated; not a prediction made before measuring).

    python docs/benchmarks/h100-new-gpu-2026-12-07/rescore_prefix.py

The same profile (measured/profile.json, lease A's calibration from the `chat` probe, which
shares no prefix, so the calibration itself is unchanged) and the same windows' own request
streams as predict.py; the only difference is that a request whose 512-token shared prefix an
earlier request of the window carried prefills only the rest (objectives/llm/simulation.py
``prefill_prompt_tokens``: what vLLM's prefix cache, on by default, serves). Nothing is fitted
to the windows. Prints the per-window TTFT / TPOT / tok/s against the measured figures, before
(the committed predictions) and after.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from knowledge.batch_sim import RequestStream  # noqa: E402
from knowledge.calibrated import predict  # noqa: E402
from knowledge.profiles import HardwareProfile  # noqa: E402
from objectives.llm.simulation import prefill_prompt_tokens  # noqa: E402
from objectives.llm.workload import LLMWorkloadSpec, request_shapes  # noqa: E402

METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
STUDY = "h100-8b-rag-1207-scored@"


def main() -> int:
    measured = HERE / "measured"
    profile = HardwareProfile.from_json(json.loads((measured / "profile.json").read_text()))
    committed = json.loads((measured / "predictions.json").read_text())
    windows = {}
    with gzip.open(measured / "trials-score.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            if str((row.get("study") or {}).get("name", "")).startswith(STUDY):
                t = row["trial"]
                windows[float(t["workload_spec"]["params"]["arrival"]["rate_rps"])] = t
    errors: dict[str, dict[str, list[float]]] = {"before": {m: [] for m in METRICS},
                                                 "after": {m: [] for m in METRICS}}
    print("| req/s | figure | measured | committed prediction | with the prefix cache |")
    print("|---|---|---|---|---|")
    for point in committed["workloads"]["rag-long-prompt"]["points"]:
        t = windows.get(point["rate_rps"])
        if t is None:
            continue
        spec = LLMWorkloadSpec.from_params(t["workload_spec"]["params"])
        arrivals, prompts, outputs = request_shapes(spec)
        stream = RequestStream(arrivals, prefill_prompt_tokens(spec, prompts), outputs,
                               spec.drain_limit_s)
        after = predict(profile, [stream], rate_rps=point["rate_rps"]).figures
        for m in METRICS:
            v = float(t["metrics"][m])
            b, a = point["own_stream"][m]["value"], after[m].value
            errors["before"][m].append(abs(b / v - 1))
            errors["after"][m].append(abs(a / v - 1))
            print(f"| {point['rate_rps']:g} | {m} | {v:,.1f} "
                  f"| {b:,.1f} ({100 * abs(b / v - 1):.0f} %) "
                  f"| {a:,.1f} ({100 * abs(a / v - 1):.0f} %, inside: "
                  f"{after[m].low <= v <= after[m].high}) |")
    print()
    for when, errs in errors.items():
        print(f"- {when}: MAPE " + ", ".join(f"{m} {100 * sum(e) / len(e):.1f} %"
                                           for m, e in errs.items() if e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
