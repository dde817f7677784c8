"""Draw docs/rag/*.svg from measured rag trials (a JSONL export, e.g. the shipped H200 set, and/or
a trial store): TTFT p95 against prefetch_ratio, and each trial's stage budget.

    python scripts/knowledge/rag_figures.py knowledge/data/h200-rag-2026-11-30.jsonl \
        --db sqlite:///PATH/advisor.db --out docs/rag
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from knowledge.render import svg_plot


def _trials(jsonl: list[Path], db: str | None) -> dict[str, list[dict[str, Any]]]:
    sets: dict[str, list[dict[str, Any]]] = {}
    for path in jsonl:
        rows = [json.loads(line)["trial"] for line in path.read_text().splitlines() if line]
        sets[path.stem] = [t for t in rows if t["target"] == "rag" and t["status"] == "complete"]
    if db:
        from knowledge import TrialFilter, TrialStore

        store = TrialStore(db)
        for t in store.list_trials(TrialFilter(target="rag", status="complete")):
            if t.status == "complete":
                sets.setdefault(f"{t.hardware_key}-study{t.study_id}", []).append(
                    {"config": t.config, "metrics": t.metrics, "hardware_key": t.hardware_key})
        store.close()
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("jsonl", nargs="*", type=Path)
    parser.add_argument("--db")
    parser.add_argument("--out", type=Path, default=Path("docs/rag"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, trials in _trials(args.jsonl, args.db).items():
        if not trials:
            continue
        hw = trials[0]["hardware_key"]
        slug = name.replace(":", "-")
        points = [(t["config"]["prefetch_ratio"], t["metrics"]["ttft_p95_ms"]) for t in trials]
        (args.out / f"{slug}-prefetch.svg").write_text(svg_plot(
            f"TTFT p95 vs prefetch_ratio ({hw}, {len(trials)} trials)", "prefetch_ratio",
            "ttft_p95_ms", points, log_y=True))
        stages = ("embed", "retrieve", "prefill", "decode")
        shares = [(t["metrics"]["e2e_mean_ms"],
                   100 * t["metrics"]["decode_mean_ms"] / sum(t["metrics"][f"{s}_mean_ms"]
                                                             for s in stages))
                  for t in trials]
        (args.out / f"{slug}-decode-share.svg").write_text(svg_plot(
            f"decode share of the stage budget vs E2E mean ({hw})", "e2e_mean_ms",
            "decode share of E2E (%)", shares, log_x=True))
        print(f"{name}: {len(trials)} trials -> {args.out}/{slug}-*.svg")


if __name__ == "__main__":
    main()
