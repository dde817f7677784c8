"""Draw docs/rag/*.svg from measured rag trials (a JSONL export, e.g. the shipped H200 set, and/or
a trial store): TTFT p95 against prefetch_ratio, and each trial's stage budget.

    python scripts/knowledge/rag_figures.py knowledge/data/h200-rag-2026-11-30.jsonl.gz \
        --db sqlite:///PATH/advisor.db --out docs/rag
"""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path
from typing import Any

from knowledge.render import svg_plot
from knowledge.transfer import read_trials_text


def _trials(jsonl: list[Path], db: str | None) -> dict[str, list[dict[str, Any]]]:
    sets: dict[str, list[dict[str, Any]]] = {}
    for path in jsonl:
        rows = [json.loads(line)["trial"] for line in read_trials_text(path).splitlines() if line]
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


STAGES = ("embed", "retrieve", "prefill", "decode")
COLOURS = ("#4a7ab8", "#8fb04a", "#e0a030", "#d0543c")


def _label(config: dict[str, Any]) -> str:
    keys = ("prefetch_ratio", "swap_threshold", "top_k", "chunk_size", "index_type", "page_size")
    return " ".join(f"{k}={config[k]:g}" if isinstance(config.get(k), float) else f"{k}={config[k]}"
                    for k in keys if k in config)


def stage_bars(title: str, trials: list[dict[str, Any]]) -> str:
    """Horizontal stacked bars: each trial's mean ms per stage (they sum to its mean E2E)."""
    width, left, bar, gap = 760, 330, 16, 6
    top = 40
    height = top + len(trials) * (bar + gap) + 40
    total = max(sum(t["metrics"][f"{s}_mean_ms"] for s in STAGES) for t in trials)
    scale = (width - left - 20) / total
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10" role="img" '
           f'aria-label="{html.escape(title)}">',
           f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">'
           f'{html.escape(title)}</text>']
    for i, stage in enumerate(STAGES):
        out.append(f'<rect x="{left + i * 90}" y="24" width="10" height="10" '
                   f'fill="{COLOURS[i]}"/><text x="{left + i * 90 + 14}" y="33">{stage}</text>')
    for row, t in enumerate(trials):
        y = top + row * (bar + gap)
        out.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">'
                   f'{html.escape(_label(t["config"]))}</text>')
        x = float(left)
        for i, stage in enumerate(STAGES):
            w = t["metrics"][f"{stage}_mean_ms"] * scale
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar}" '
                       f'fill="{COLOURS[i]}"/>')
            x += w
        e2e = sum(t["metrics"][f"{s}_mean_ms"] for s in STAGES)
        out.append(f'<text x="{x + 4:.1f}" y="{y + 12}">{e2e:,.0f} ms</text>')
    out.append(f'<text x="{left}" y="{height - 12}">mean ms per stage (= mean E2E), '
               'measured</text></svg>')
    return "".join(out)


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
        (args.out / f"{slug}-stages.svg").write_text(stage_bars(
            f"Stage budget per trial ({hw})", trials))
        print(f"{name}: {len(trials)} trials -> {args.out}/{slug}-*.svg")


if __name__ == "__main__":
    main()
