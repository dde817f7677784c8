"""Where each 8B trial of the two H100 calls spent its time, from the exported trials alone.

    python docs/benchmarks/h100-trial-time-2026-12-07/breakdown.py

One row per trial (one engine start, then the study's rate and each co-measured rate): the
trial's whole time (the study's own trial: its isolated run, start to stop), the engine start
(``startup_s``) split by vLLM's own log (``startup_phases_s``: process start and imports before
the first line are the rest), then each rate's window (warm-up, replay, drain, scrape; the
gate's re-measurements included) and what the shortcuts did. Arms: ``before`` (every shortcut
off), ``shortcuts`` (call 1: settled misses, skipped rates, warm-up once, client processes
carried forward), ``after`` (call 2: those, 2,000 streamed tokens/s per client process, the
payload byte-compiled).
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
CALLS = {"call1": HERE / "call1" / "trials.jsonl.gz", "call2": HERE / "call2" / "trials2.jsonl.gz"}


def arm(call: str, study: str) -> str:
    if study.startswith("prime"):
        return "prime (cold cache)"
    if call == "call1":
        return "before" if study.endswith("a0") else "shortcuts"
    return study.split("-")[0]


def main() -> None:
    rows: list[dict] = []
    for call, path in CALLS.items():
        groups: dict[str, dict] = defaultdict(dict)
        with gzip.open(path, "rt") as f:
            for line in f:
                record = json.loads(line)
                study, trial = record["study"]["name"], record["trial"]
                base, _, rate = study.partition("@")
                groups[base][rate or "primary"] = trial
        for base, trials in groups.items():
            primary = trials["primary"]
            d = primary["details"]
            phases = d.get("startup_phases_s") or {}
            windows = {k: t["duration_s"] for k, t in trials.items() if k != "primary"}
            own = primary["duration_s"] - d["startup_s"] - sum(windows.values())
            attempts = [a["client_processes"] for a in d.get("validity_attempts", [])]
            settled = [k for k, t in trials.items() if t["details"].get("settled")]
            skipped = [n["workload"] for n in d.get("not_measured") or []]
            rows.append({
                "call": call, "arm": arm(call, base), "trial_s": primary["duration_s"],
                "start_s": d["startup_s"],
                "before_first_line_s": d["startup_s"] - sum(phases.values()),
                **{f"{k}_s": v for k, v in phases.items()},
                "torch_compile_s": d.get("torch_compile_s"),
                "cuda_graphs_s": d.get("cuda_graphs_s"),
                "weights_load_s": d.get("weights_load_s"),
                "window_45_s": own, "window_45_attempts": attempts,  # with the trial's own overhead
                **{f"window_{k.removesuffix('rps')}_s": v for k, v in windows.items()},
                "settled": settled, "skipped": skipped,
            })
    cols = ["call", "arm", "trial_s", "start_s", "before_first_line_s", "api_to_engine_core_s",
            "engine_core_init_s", "torch_compile_s", "window_45_s", "window_45_attempts",
            "window_15_s", "window_30_s", "window_80_s", "settled", "skipped"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append(f"{v:.1f}" if isinstance(v, float) else ("" if v is None else str(v)))
        print("| " + " | ".join(cells) + " |")
    by_arm: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_arm[r["arm"]].append(r["trial_s"])
    for name, values in by_arm.items():
        print(f"{name}: n={len(values)} median trial {statistics.median(values):.1f} s "
              f"({', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
