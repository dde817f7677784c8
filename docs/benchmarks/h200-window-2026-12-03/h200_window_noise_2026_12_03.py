"""How much of a trial's TTFT p95 spread is its short window? (issue 18, held-out rates)

Every shipped H200 vLLM trial measured WINDOW = 8 s of Poisson arrivals per rate (``n_requests``
= 8 x rate). Repeats of one config at one rate on one server spread widely even at light load
(8B defaults at 15 req/s: TTFT p95 54-86 ms), and that spread is the floor under the held-out
rate error (docs/knowledge.md). This measures, on ONE server start, the same config at the same
rates with the short window and a long one, alternating A B B A ... round by round, so both
windows see the same server, lease and drift, and writes every measurement as a JSON line.

Run by ``docs/benchmarks/h200-window-2026-12-03/h200_window_noise_2026_12_03.sh`` on the
device tool (nvidia-h200), with
the project's own measurement path (``ServingTarget.measure``: warm-up, prefix-cache reset,
replay, server metrics, validity gate), as a trial would measure.

    python3 docs/benchmarks/h200-window-2026-12-03/h200_window_noise_2026_12_03.py \
        --model llama-3-8b --rate 15 --rate 60 --window 8 --window 30 --deadline-s 540 \
        -o $OUT/window-noise.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from advisor.presets import resolve_workload
from objectives.llm.serving_target import ServingTarget
from objectives.llm.workload import at_rate
from objectives.registry import get_target
from objectives.workload import Workload

FIGURES = ("ttft_p50_ms", "ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s",
           "requests_per_s")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rate", type=float, action="append", required=True)
    ap.add_argument("--window", type=float, action="append", required=True,
                    help="seconds of arrivals per measurement (two or more)")
    ap.add_argument("--deadline-s", type=float, required=True,
                    help="start no measurement that would end after this many seconds")
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/advisor-cache"))
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    args = ap.parse_args(argv)
    started = time.monotonic()
    target = get_target("vllm")
    assert isinstance(target, ServingTarget)
    base = resolve_workload(target, "chat", {"model": args.model, "drain_limit_s": 15,
                                             "arrival": {"process": "poisson",
                                                         "rate_rps": args.rate[0]},
                                             "n_requests": int(args.rate[0] * 8)})
    # One served workload per (window, rate); the seed moves with the rate as in a crosscheck
    # (prompts differ between rates), and is the same for both windows of one rate.
    plan: list[tuple[float, float, Workload]] = []
    workloads = []
    for window in args.window:
        for i, rate in enumerate(args.rate):
            wl = at_rate(base, rate, seed_offset=i + 1)
            wl = wl.with_params(n_requests=max(1, round(rate * window)))
            workloads.append(wl)
            plan.append((window, rate, wl))
    series = target.load_series(workloads, args.cache_dir)
    for window, rate, wl in plan:
        print(f"window {window:g} s at {rate:g} req/s: {wl.params['n_requests']} requests, "
              f"seed {wl.params.get('seed')}", flush=True)
    if args.dry_run:
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    print(f"starting vLLM's defaults for {args.model}", flush=True)
    with target.serve({}, series[0], args.cache_dir) as running, args.output.open("a") as out:
        up = time.monotonic() - started
        out.write(json.dumps({"type": "server", "startup_s": up,
                              "versions": running.versions}) + "\n")
        order = list(range(len(args.window)))
        round_ = 0
        while True:
            # A B, then B A: each window goes first in every other round.
            windows = order if round_ % 2 == 0 else order[::-1]
            for w in windows:
                for j, (window, rate, _) in enumerate(plan):
                    if window != args.window[w]:
                        continue
                    need = window + 25.0
                    if time.monotonic() - started + need > args.deadline_s:
                        print(f"deadline: stopping in round {round_ + 1}", flush=True)
                        return 0
                    t0 = time.monotonic()
                    metrics, details = target.measure(running, series[j])
                    row = {"type": "measurement", "round": round_, "window_s": window,
                           "rate_rps": rate, "n_requests": details.get("n_requests"),
                           "validity": details.get("validity"),
                           "reasons": details.get("validity_reasons", []),
                           "load_duration_s": details.get("load_duration_s"),
                           "wall_s": time.monotonic() - t0,
                           **{k: metrics.get(k) for k in FIGURES}}
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(json.dumps(row), flush=True)
            round_ += 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
