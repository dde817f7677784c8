"""Benchmark: the quickstart's tuning step as it runs now against two other ways of running it,
measured in one run, interleaved, on the same cached dataset:

- ``20-trials``: the quickstart as it ships (``--trials 20``, random start-up 5, warm start with
  the target's textbook starting points);
- ``30-trials``: the same with 30 trials (the quickstart until 20 trials were measured to be
  enough, docs/benchmarks.md);
- ``before``: the quickstart as it ran before issue 16 (``--trials 30``, Optuna's random start-up
  of 10 via ``--startup-trials 10``, no warm start);
- ``sweep``: two-level search (``--search-sweep``, 10 sampled builds).

Each arm runs ``advisor tune --target faiss`` (the quickstart's SLO, objective and workload) in a
fresh SQLite store of its own (no shipped knowledge, so no arm is warm-started from data another
never had), then asks the model-based ``advisor recommend`` for the same SLO. Reported per run:
wall time of the tune step, settings measured, the best measured qps meeting the SLO, and
whether the model-based recommender answered (and with what predicted qps).

    python benchmarks/quickstart_time.py --rounds 3 --arm 20-trials --arm before \
        --out docs/benchmarks/quickstart_time_trials.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.settings import Settings  # noqa: E402
from knowledge import TrialStatus, TrialStore  # noqa: E402
from objectives.hardware import fingerprint  # noqa: E402
from objectives.registry import get_target  # noqa: E402

#: Arm name -> (trials, extra ``advisor tune`` arguments).
ARMS: dict[str, tuple[int, list[str]]] = {
    "20-trials": (20, []),  # as shipped ("now" in quickstart_time_trials.json)
    "30-trials": (30, []),  # the quickstart before it went to 20 trials
    "before": (30, ["--startup-trials", "10", "--no-warm-start"]),
    "sweep": (10, ["--search-sweep"]),
}


def _advisor(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "advisor", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False)


def run_arm(arm: str, trials: int, cache_dir: Path, slo: str, seed: int) -> dict[str, Any]:
    """One tune + model-based recommend in a fresh store; returns what was measured."""
    with tempfile.TemporaryDirectory(prefix="qs-bench-") as tmp:
        db = f"sqlite:///{Path(tmp) / 'store.db'}"
        env = {**os.environ, "ADVISOR_DB_URL": db, "ADVISOR_CACHE_DIR": str(cache_dir),
               "ADVISOR_IMPORT_SHIPPED": "false", "ADVISOR_SHARED_MODEL_DIR": str(Path(tmp)),
               "COLUMNS": "200"}
        started = time.perf_counter()
        tune = _advisor(["tune", "--target", "faiss", "--trials", str(trials), "--seed",
                         str(seed), "--name", "qs", "--json", *ARMS[arm][1]], env)
        wall = time.perf_counter() - started
        if tune.returncode != 0:
            raise SystemExit(f"{arm}: advisor tune failed: {tune.stderr.strip()[-400:]}")
        store = TrialStore(db)
        study = store.get_study("qs")
        assert study is not None
        trials_all = store.trials_of_study(study.id or 0)
        # The search itself, without the paired re-measurement of best and default at the end.
        searched = [t for t in trials_all
                    if not str(t.details.get("role", "")).startswith("paired-")]
        met = [t for t in searched if t.status == TrialStatus.COMPLETE and t.feasible]
        best = max(met, key=lambda t: float(t.metrics["qps"]), default=None)
        store.close()
        rec = _advisor(["recommend", "--target", "faiss", "--slo", slo, "--json"], env)
        answer = json.loads(rec.stdout) if rec.stdout.strip().startswith("{") else {}
        return {
            "arm": arm, "trials_requested": trials, "wall_s": round(wall, 1),
            "settings_measured": len(searched),
            "sampled": sum(t.swept_from is None for t in searched),
            "meeting_slo": len(met),
            "best": None if best is None else {
                "config": best.config, "qps": best.metrics["qps"],
                "p95_latency_ms": best.metrics["p95_latency_ms"],
                "recall_at_10": best.metrics["recall_at_10"]},
            "model_recommend_exit": rec.returncode,
            "model_recommend": {k: answer.get(k) for k in
                                ("found", "config", "predicted", "reason", "status")
                                if k in answer},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the arms")
    parser.add_argument("--arm", action="append", choices=list(ARMS), default=None,
                        help="arms to run (repeatable; default: all)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of round 0; round r uses seed + r (the same in every arm)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="dataset cache (default: the advisor's; the dataset is built once)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()

    target = get_target("faiss")
    workload = target.default_workload()
    cache_dir = args.cache_dir or Settings().cache_dir
    print(f"preparing {workload.name} in {cache_dir} (cached after the first run)", flush=True)
    provenance = target.prepare(workload, cache_dir)
    slo = target.default_slo
    arms = args.arm or list(ARMS)
    runs = []
    for round_ in range(args.rounds):
        order = arms if round_ % 2 == 0 else list(reversed(arms))
        for arm in order:
            result = run_arm(arm, ARMS[arm][0], cache_dir, slo, args.seed + round_)
            result["round"] = round_
            runs.append(result)
            best = result["best"]
            print(f"round {round_} {arm:>8}: {result['wall_s']:6.1f} s, "
                  f"{result['settings_measured']} settings ({result['sampled']} sampled), "
                  f"{result['meeting_slo']} met the SLO, best qps "
                  f"{best['qps'] if best else float('nan'):,.0f}; model-based recommend exit "
                  f"{result['model_recommend_exit']}", flush=True)
    summary = {}
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        summary[arm] = {
            "wall_s_median": statistics.median(r["wall_s"] for r in mine),
            "wall_s": [r["wall_s"] for r in mine],
            "best_qps": [r["best"]["qps"] if r["best"] else None for r in mine],
            "model_recommend_answered": [r["model_recommend_exit"] == 0 for r in mine],
        }
    # Per round, each arm's wall time against the first arm's of the same round (paired).
    first = arms[0]
    ratios = {arm: [r["wall_s"] / f["wall_s"] for r, f in zip(
        [r for r in runs if r["arm"] == arm], [r for r in runs if r["arm"] == first],
        strict=True)] for arm in arms[1:]}
    for arm in arms:
        line = (f"{arm:>8}: median wall {summary[arm]['wall_s_median']:.1f} s, best qps "
                f"{summary[arm]['best_qps']}")
        if arm in ratios:
            line += f"; wall x{statistics.median(ratios[arm]):.2f} of {first}'s (per round "
            line += ", ".join(f"{x:.2f}" for x in ratios[arm]) + ")"
        print(line)
    if args.out:
        import faiss
        import numpy as np

        args.out.write_text(json.dumps({
            "command": " ".join(["python", "benchmarks/quickstart_time.py", *sys.argv[1:]]),
            "hardware": fingerprint(), "python": platform.python_version(),
            "versions": {"faiss": faiss.__version__, "numpy": np.__version__},
            "load_average_at_end": os.getloadavg(), "slo": slo, "workload": workload.spec,
            "dataset": provenance, "runs": runs, "summary": summary,
            "arms": {arm: {"trials": ARMS[arm][0], "args": ARMS[arm][1]} for arm in arms},
            f"wall_ratio_vs_{first}_per_round": ratios,
        }, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
