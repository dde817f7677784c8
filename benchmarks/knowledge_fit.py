"""Time a full scored fit of the shipped knowledge (what `advisor knowledge fit` and a fresh
`advisor serve` do) with the contexts fitted in one process against fitted in child processes
(``ADVISOR_FIT_PROCESSES``), interleaved, each fit in a fresh interpreter on a fresh store:

    PYTHONPATH=. python benchmarks/knowledge_fit.py --rounds 3

Prints each round's seconds and the per-round ratio (children / one process) with the median;
the figures in docs/benchmarks/surrogates-2026-12-06/ (fit time) come from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _one_fit(db: Path) -> dict[str, float]:
    """Import the shipped knowledge into a fresh store at ``db`` and fit it (scored)."""
    from knowledge import TrialStore
    from knowledge.cache import KnowledgeModels, fit_processes
    from knowledge.transfer import import_shipped_knowledge

    store = TrialStore(f"sqlite:///{db}")
    import_shipped_knowledge(store)
    began = time.perf_counter()
    models = KnowledgeModels.fit(store)
    return {"fit_s": time.perf_counter() - began, "contexts": len(models.contexts),
            "processes": fit_processes(len(models.contexts))}


def _arm(processes: str, tmp: Path, n: int) -> dict[str, float]:
    env = {**os.environ, "ADVISOR_FIT_PROCESSES": processes,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, "--one", str(tmp / f"{processes}-{n}.db")],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", default=str(len(os.sched_getaffinity(0))),
                        help="child-process arm's ADVISOR_FIT_PROCESSES (default: the cores)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(_one_fit(args.one)))
        return
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds):
            alone = _arm("1", Path(tmp), n)
            shared = _arm(args.processes, Path(tmp), n)
            ratios.append(shared["fit_s"] / alone["fit_s"])
            print(f"round {n + 1}: one process {alone['fit_s']:.1f} s, "
                  f"{shared['processes']} processes {shared['fit_s']:.1f} s "
                  f"({shared['contexts']} contexts): ratio {ratios[-1]:.2f}", flush=True)
    print(f"median ratio (children / one process) over {args.rounds} rounds: "
          f"{statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
