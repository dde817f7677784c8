"""Scores a prospective blend check: the figures committed before a device call
(``docs/benchmarks/h200-blend-check-2026-12-05/blend_predictions.py`` output, one file per
config) against the trials that call
measured (``advisor knowledge export`` of its store), per config and rate.

    D=docs/benchmarks/h200-blend-check-2026-12-05
    PYTHONPATH=. python docs/benchmarks/h200-blend-check-2026-12-05/blend_check_score.py \\
        --predicted fp8=$D/blend_predictions.json \\
        --predicted default=$D/blend_predictions_default.json \\
        --measured $D/trials-blend-check.jsonl --measured $D/trials-blend-check-default.jsonl \\
        --slo "ttft_p95_ms<=2000,tpot_p95_ms<=50" --json score.json

Trials are matched to a prediction file by the crosscheck's config label (``--predicted
LABEL=FILE``; trials not recorded by ``advisor crosscheck`` are skipped) and to a rate by their
workload's arrival rate; ``--model`` keeps one model's trials and ``--hardware-key`` (default
the H200's) the machine's the predictions are for. For each metric it prints every
round's figure, their median, the curve's, the simulator's and the answer's figure with the
answer's 90 % interval, how many rounds lie inside that interval, and the log error
(ln predicted - ln measured median) of each of the three: negative reads low. Every complete
trial counts, whatever its validity label (printed beside it: the crosscheck stores a round
its gate flagged, with the flag).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from knowledge.transfer import read_trials_text
from objectives.slo import parse_slo

METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")


def measured_rounds(paths: list[Path], hardware_key: str, model: str | None = None
                    ) -> dict[tuple[str, float], list[dict[str, Any]]]:
    """Exported trials on ``hardware_key`` (of ``model`` when given) grouped by (crosscheck
    config label, arrival rate). Raises SystemExit naming the hardware found when no trial was
    measured on ``hardware_key``: predictions do not transfer between machines."""
    rounds: dict[tuple[str, float], list[dict[str, Any]]] = {}
    elsewhere: set[str] = set()
    for path in paths:
        for line in read_trials_text(path).splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            trial = row["trial"]
            params = trial["workload_spec"]["params"]
            if trial.get("status") != "complete" or model not in (None, params.get("model")):
                continue
            if trial.get("hardware_key") != hardware_key:
                elsewhere.add(str(trial.get("hardware_key")))
                continue
            details = trial.get("details") or {}
            label = (details.get("crosscheck") or {}).get("config_label")
            if label is None:  # not measured by `advisor crosscheck`
                continue
            rate = float(params["arrival"]["rate_rps"])
            rounds.setdefault((label, rate), []).append(
                {"metrics": trial["metrics"], "validity": details.get("validity"),
                 "study": row["study"]["name"]})
    if not rounds and elsewhere:
        raise SystemExit(f"no trial was measured on {hardware_key} (found: "
                         f"{', '.join(sorted(elsewhere))}); predictions for one machine do not "
                         f"score measurements on another")
    return rounds


def log_error(predicted: float | None, measured: float) -> float | None:
    if predicted is None or predicted <= 0 or measured <= 0:
        return None
    return math.log(predicted) - math.log(measured)


def score(predicted: dict[str, Path], measured: list[Path], slo: str | None, *,
          hardware_key: str = "1x-nvidia-h200", model: str | None = None
          ) -> list[dict[str, Any]]:
    """One row per (config label, rate) that has both a prediction and a measurement on
    ``hardware_key``."""
    rounds = measured_rounds(measured, hardware_key, model)
    bounds = parse_slo(slo) if slo else None
    rows: list[dict[str, Any]] = []
    for label, path in predicted.items():
        for entry in json.loads(path.read_text()):
            rate = float(entry["rate_rps"])
            got = rounds.get((label, rate))
            if not got:
                continue
            row: dict[str, Any] = {
                "config": label, "rate_rps": rate, "capacity_rps": entry.get("capacity_rps"),
                "rounds": len(got), "validity": [g["validity"] for g in got], "metrics": {}}
            for metric in METRICS:
                values = [float(g["metrics"][metric]) for g in got if metric in g["metrics"]]
                if not values:
                    continue
                pred = entry["metrics"][metric]
                value, low, high = pred["answer"]
                median = statistics.median(values)
                row["metrics"][metric] = {
                    "measured": values, "measured_median": median,
                    "curve": pred.get("curve"), "simulator": pred.get("simulator"),
                    "answer": value, "interval": [low, high], "blended": pred.get("blended"),
                    "inside": sum(low <= v <= high for v in values),
                    "log_error": {name: log_error(pred.get(name) if name != "answer" else value,
                                                  median)
                                  for name in ("curve", "simulator", "answer")}}
            if bounds:
                row["slo_met"] = [bounds.is_met(g["metrics"]) for g in got]
            rows.append(row)
    return rows


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        head = (f"{row['config']} @ {row['rate_rps']:g} req/s ({row['rounds']} rounds, "
                f"validity {', '.join(str(v) for v in row['validity'])}")
        if "slo_met" in row:
            head += f"; SLO met in {sum(row['slo_met'])} of {len(row['slo_met'])}"
        print(head + ")")
        for metric, m in row["metrics"].items():
            errs = m["log_error"]
            print(f"  {metric:<20} measured {' / '.join(_fmt(v) for v in m['measured'])} "
                  f"(median {_fmt(m['measured_median'])}); curve {_fmt(m['curve'])}, "
                  f"simulator {_fmt(m['simulator'])}, answer {_fmt(m['answer'])} "
                  f"[{_fmt(m['interval'][0])} .. {_fmt(m['interval'][1])}]"
                  f"{' (blended)' if m['blended'] else ''}; inside {m['inside']} of "
                  f"{len(m['measured'])}; log error curve {_fmt(errs['curve'], 2)}, simulator "
                  f"{_fmt(errs['simulator'], 2)}, answer {_fmt(errs['answer'], 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predicted", action="append", required=True,
                        help="LABEL=FILE: blend_predictions.py output for the config the "
                             "crosscheck labelled LABEL (repeatable)")
    parser.add_argument("--measured", action="append", required=True, type=Path,
                        help="an exported trials file, .jsonl or .jsonl.gz (repeatable)")
    parser.add_argument("--model", help="count only trials of this model (the workload's)")
    parser.add_argument("--hardware-key", default="1x-nvidia-h200",
                        help="the machine the predictions are for; trials measured on any "
                             "other are skipped (default: %(default)s)")
    parser.add_argument("--slo", help="also say which rounds met this SLO")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    predicted: dict[str, Path] = {}
    for item in args.predicted:
        label, sep, path = item.partition("=")
        if not sep:
            parser.error(f"--predicted expects LABEL=FILE, got {item!r}")
        predicted[label] = Path(path)
    rows = score(predicted, args.measured, args.slo, hardware_key=args.hardware_key,
                 model=args.model)
    if not rows:
        raise SystemExit("no measured trial matches a predicted config label and rate")
    print_rows(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
