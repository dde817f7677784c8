"""Benchmark: how many trials the default sampler (TPE, as ``advisor tune`` builds it) needs to
reach 95% of the best feasible QPS that an exhaustive grid finds, against random search and
against TPE with Optuna's default random start-up (10), on the same real FAISS data.

Method (a tabular benchmark, as HPOBench does): every config of a grid over the faiss knobs is
measured for real, in ``--grid-passes`` whole passes, each figure the median of its passes
(the grid's cost is that wall time). The samplers then search the *same*
grid — each numeric knob is an ordinal index into its grid values, so TPE keeps the ordering —
and each trial's figures are looked up from the grid's measurements. This separates sampler
efficiency from measurement noise and lets many seeds run cheaply; every arm runs every seed on
the same grid, so the arms are paired. Noise is reported alongside: the default config is
re-measured several times in the same run.

    python benchmarks/sampler_efficiency.py --seeds 200 --budget 80 \
        --out docs/benchmarks/sampler_efficiency.json

``--save-grid FILE`` keeps the measured grid; ``--grid FILE`` searches a kept grid instead of
measuring one (the report then says so and carries that grid's own provenance).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.samplers import STARTUP_TRIALS, make_sampler  # noqa: E402
from advisor.settings import Settings  # noqa: E402
from objectives import parse_slo  # noqa: E402
from objectives.hardware import fingerprint  # noqa: E402
from objectives.registry import get_target  # noqa: E402

# The grid: per index family, the values each knob takes. batch_size and threads are fixed so the
# grid measures the index knobs (they are the ones with a recall/latency trade-off).
FIXED = {"batch_size": 64, "threads": 2}
GRID: dict[str, dict[str, list[Any]]] = {
    "ivf_flat": {"nlist": [32, 64, 128, 256, 512, 1024],
                 "nprobe": [1, 2, 4, 8, 16, 32, 64, 128]},
    "ivf_pq": {"nlist": [64, 256, 1024], "pq_m": [24, 48, 96], "pq_nbits": [8],
               "nprobe": [1, 4, 16, 64]},
    "hnsw": {"hnsw_m": [8, 16, 32], "ef_construction": [40, 200],
             "ef_search": [16, 32, 64, 128, 256]},
    "ivf_hnsw": {"nlist": [256, 1024], "hnsw_m": [32], "ef_construction": [40],
                 "nprobe": [1, 4, 16, 64], "ef_search": [32, 128]},
}


def effective(index_type: str, values: dict[str, Any]) -> dict[str, Any]:
    """The config faiss runs: nprobe capped by nlist, as the search space defines."""
    config = {"index_type": index_type, **values, **FIXED}
    if "nprobe" in config:
        config["nprobe"] = min(config["nprobe"], config["nlist"])
    return config


def key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def grid_configs() -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for index_type, knobs in GRID.items():
        names = list(knobs)
        for combo in itertools.product(*(knobs[n] for n in names)):
            config = effective(index_type, dict(zip(names, combo, strict=True)))
            seen.setdefault(key(config), config)
    return list(seen.values())


def measure_grid(target: Any, workload: Any, cache_dir: Path, passes: int
                 ) -> tuple[dict[str, dict], float]:
    """Every grid config measured ``passes`` times, in whole passes over the grid (so a slow
    spell of the machine touches every config alike), each metric the median of its passes: one
    lucky measurement must not become the goal every search chases."""
    configs = grid_configs()
    runs: dict[str, list[dict[str, float]]] = {key(c): [] for c in configs}
    errors: dict[str, str] = {}
    start = time.perf_counter()
    for p in range(1, passes + 1):
        for i, config in enumerate(configs, 1):
            if key(config) in errors:
                continue
            try:
                runs[key(config)].append(dict(target.run(config, workload, cache_dir).metrics))
            except Exception as exc:
                errors[key(config)] = str(exc)
            print(f"\rgrid pass {p}/{passes}: {i}/{len(configs)}", end="", file=sys.stderr,
                  flush=True)
    print(file=sys.stderr)
    table: dict[str, dict] = {}
    for k, measured in runs.items():
        if k in errors:
            table[k] = {"error": errors[k]}
        else:
            table[k] = {m: statistics.median(r[m] for r in measured) for m in measured[0]}
    return table, time.perf_counter() - start


#: The arms: a name, the sampler's name and its random start-up (None: the sampler has none).
ARMS: tuple[tuple[str, str, int | None], ...] = (
    ("tpe", "tpe", STARTUP_TRIALS),
    ("tpe-startup-10", "tpe", 10),
    ("random", "random", None),
)


def search(table: dict[str, dict], sampler_name: str, startup: int | None, seed: int, budget: int,
           slo: Any, target_qps: float) -> int | None:
    """Trials until the best feasible qps reaches ``target_qps`` (None: not within budget)."""
    sampler = (make_sampler(sampler_name, seed) if startup is None
               else make_sampler(sampler_name, seed, n_startup_trials=startup))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    best = 0.0
    for n in range(1, budget + 1):
        trial = study.ask()
        index_type = trial.suggest_categorical("index_type", list(GRID))
        values = {}
        for name, choices in GRID[index_type].items():
            values[name] = choices[trial.suggest_int(f"{index_type}.{name}", 0, len(choices) - 1)]
        metrics = table[key(effective(index_type, values))]
        if "error" in metrics:
            study.tell(trial, state=TrialState.FAIL)
            continue
        margins = slo.margins(metrics)
        for k, v in margins.items():
            trial.set_constraint(k, v)
        study.tell(trial, metrics["qps"])
        if all(v <= 0 for v in margins.values()):
            best = max(best, metrics["qps"])
        if best >= target_qps:
            return n
    return None


def costs(found: list[int | None], budget: int) -> list[int]:
    """Trials per seed, a search that never reached the goal counted as ``budget + 1`` (a lower
    bound on its cost)."""
    return [x if x is not None else budget + 1 for x in found]


def median_ratio_interval(a: list[int], b: list[int], rounds: int = 2000,
                          seed: int = 0) -> tuple[float, float, float]:
    """median(a) / median(b) and its 95 % paired-bootstrap interval (seeds resampled together,
    since both arms ran the same seeds on the same grid)."""
    rng = random.Random(seed)
    n = len(a)
    ratios = []
    for _ in range(rounds):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(statistics.median(a[i] for i in picks)
                      / statistics.median(b[i] for i in picks))
    ratios.sort()
    return (statistics.median(a) / statistics.median(b),
            ratios[int(0.025 * rounds)], ratios[int(0.975 * rounds) - 1])


def measured_grid(target: Any, workload: Any, cache_dir: Path, args: argparse.Namespace,
                  provenance: Any) -> tuple[dict[str, dict], float, dict[str, Any]]:
    """The grid's measurements, measured now or read from ``--grid``, and where they came from."""
    if args.grid:
        kept = json.loads(args.grid.read_text())
        return kept["table"], kept["wall_s"], {"measured": "kept", "file": args.grid.name,
                                               **kept["provenance"]}
    table, grid_s = measure_grid(target, workload, cache_dir, args.grid_passes)
    origin = {"measured": "this run", "passes": args.grid_passes, "hardware": fingerprint(),
              "engine_versions": target.engine_versions(), "data": provenance,
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if args.save_grid:
        args.save_grid.write_text(json.dumps({"table": table, "wall_s": grid_s,
                                              "provenance": origin}, default=str))
    return table, grid_s, origin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--budget", type=int, default=80, help="max trials per search")
    parser.add_argument("--slo", default=None, help="default: the faiss target's default SLO")
    parser.add_argument("--repeats", type=int, default=5, help="noise: re-measure the default")
    parser.add_argument("--grid-passes", type=int, default=3,
                        help="measure the grid this many times; each figure is the median")
    parser.add_argument("--grid", type=Path, default=None, help="search a grid kept by --save-grid")
    parser.add_argument("--save-grid", type=Path, default=None, help="keep the measured grid")
    parser.add_argument("--out", type=Path, default=None, help="write all figures as JSON")
    args = parser.parse_args()
    if args.seeds < 10:
        parser.error("--seeds must be at least 10 (the median of fewer says little)")
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    target = get_target("faiss")
    workload = target.default_workload()
    cache_dir = Settings().cache_dir
    slo = parse_slo(args.slo or target.default_slo)
    print(f"preparing {workload.name} ...", file=sys.stderr)
    provenance = target.prepare(workload, cache_dir, lambda m: print(m, file=sys.stderr))

    table, grid_s, grid_origin = measured_grid(target, workload, cache_dir, args, provenance)
    feasible = {k: m for k, m in table.items() if "error" not in m and slo.is_met(m)}
    if not feasible:
        sys.exit(f"no grid config meets {slo}; loosen it with --slo")
    best_key = max(feasible, key=lambda k: feasible[k]["qps"])
    best_qps = feasible[best_key]["qps"]
    goal = 0.95 * best_qps
    reaching = sorted(k for k, m in feasible.items() if m["qps"] >= goal)

    noise: list[float] = []
    if not args.grid:
        default = target.space().default_config()
        noise = [target.run(default, workload, cache_dir).metrics["qps"]
                 for _ in range(args.repeats)]

    found: dict[str, list[int | None]] = {name: [] for name, _, _ in ARMS}
    for seed in range(args.seeds):
        for name, sampler, startup in ARMS:
            found[name].append(search(table, sampler, startup, seed, args.budget, slo, goal))
        print(f"\rseed {seed + 1}/{args.seeds}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    cost = {name: costs(xs, args.budget) for name, xs in found.items()}
    ratios = {name: median_ratio_interval(cost[name], cost["random"])
              for name in cost if name != "random"}

    report = {
        "hardware": fingerprint(), "engine_versions": target.engine_versions(),
        "workload": workload.spec, "workload_hash": workload.spec_hash, "data": provenance,
        "optuna": optuna.__version__, "slo": str(slo), "objective": "maximize:qps",
        "grid": {"configs": len(table), "feasible": len(feasible), "wall_s": round(grid_s, 1),
                 "best_feasible_qps": best_qps, "best_config": json.loads(best_key),
                 "configs_reaching_goal": len(reaching), "origin": grid_origin},
        "goal_qps_95pct": goal, "budget": args.budget, "seeds": args.seeds,
        "arms": {name: {"sampler": sampler, "n_startup_trials": startup}
                 for name, sampler, startup in ARMS},
        "trials_to_goal": found,
        "median_trials_to_goal": {name: statistics.median(c) for name, c in cost.items()},
        "reached_within_budget": {name: sum(x is not None for x in xs)
                                  for name, xs in found.items()},
        "median_ratio_to_random": {name: {"ratio": r, "ci95": [lo, hi]}
                                   for name, (r, lo, hi) in ratios.items()},
        "noise_default_config_qps": (
            {"runs": noise, "mean": statistics.mean(noise),
             "stdev": statistics.stdev(noise) if len(noise) > 1 else 0.0}
            if noise else "not measured (kept grid)"),
    }
    cost_per_trial = grid_s / len(table)
    print(f"grid: {len(table)} configs measured in {grid_s:.0f} s ({grid_origin['measured']}); "
          f"best feasible qps {best_qps:.0f}; goal (95%) {goal:.0f}, reached by "
          f"{len(reaching)} configs")
    for name, c in cost.items():
        med = statistics.median(c)
        reached = report["reached_within_budget"][name]
        line = (f"{name:>15}: median {med:g} trials to goal (~{med * cost_per_trial:.0f} s of "
                f"measuring), reached in {reached}/{args.seeds} seeds")
        if name in ratios:
            r, lo, hi = ratios[name]
            line += f"; x{r:.2f} of random's (95% CI {lo:.2f}-{hi:.2f})"
        print(line)
    if noise:
        print(f"noise: default config qps {statistics.mean(noise):.0f} ± "
              f"{report['noise_default_config_qps']['stdev']:.0f} over {len(noise)} runs")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
