"""Print the tables of docs/benchmarks.md and docs/engines.md from the committed H200 crosscheck
reports (docs/benchmarks/h200-crosscheck-2026-12-01/*.jsonl), so every figure there can be
re-derived: ``python scripts/device/crosscheck_tables.py [REPORT_DIR]``.

0. The goal of the crosscheck per config, rate and figure.
1. Crosscheck: per config and rate, the advisor's first measurement and the reference's
   (`vllm bench serve`), each beside the server's view of its own window (TTFT mean, TTFT p95
   bucket, TPOT p95 bucket), and the verdicts.
2. Repeats: per config and rate, the advisor's repeats (TTFT p95, TPOT p95, goodput at the
   issue's SLO, tok/s), as min-max.
3. Paired: co-resident configs measured interleaved, compared with advisor.paired (difference of
   means X - Y with a 95 % bootstrap interval) where each arm has >= 3 repeats.
4. Rounds (the second session's 8B call): three rounds of the advisor's window then the
   reference's at each rate, the goal judged on the median of the per-round ratios
   (advisor.crosscheck.compare_rounds).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.crosscheck import GOAL_METRICS, CrosscheckReport, Measured, compare_row
from advisor.paired import PairedComparisonError, Repeat, compare
from knowledge.transfer import read_trials_text
from objectives.llm.validity import rejudge

DEFAULT_DIR = Path("docs/benchmarks/h200-crosscheck-2026-12-01")
DEFAULT_TRIALS = Path("knowledge/data/h200-vllm-crosscheck-2026-12-01.jsonl.gz")


def measurements(path: Path) -> list[dict[str, Any]]:
    """A report's measurements, each verdict judged by the current gate from its stored checks
    (the first call's were taken by gate version 1)."""
    lines = [json.loads(raw) for raw in path.read_text().splitlines() if raw]
    out = [m for m in lines if m.get("type") == "measurement" and not m.get("error")]
    for m in out:
        m["validity"] = rejudge({"validity": m["validity"], "validity_checks": m["checks"],
                                 "validity_reasons": m["reasons"]})
    return out


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _bucket(server: Mapping[str, Any], family: str) -> str:
    bracket = (server.get(family) or {}).get("p95_bracket_ms")
    if not bracket:
        return "-"
    hi = "inf" if bracket[1] is None else f"{bracket[1]:g}"
    return f"{bracket[0]:g}-{hi}"


def crosscheck_table(ms: Iterable[Mapping[str, Any]], title: str) -> list[str]:
    firsts: dict[tuple[str, float, str], Mapping[str, Any]] = {}
    for m in ms:
        firsts.setdefault((m["config"], m["rate_rps"], m["kind"]), m)
    out = [f"**{title}**", "",
           "| config | req/s | harness | TTFT p95 | TTFT mean (server) | server TTFT p95 bucket "
           "| TPOT p95 | server TPOT p95 bucket | tok/s (server) | verdict (gate 2) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for (config, rate, kind), m in sorted(firsts.items(), key=lambda x: (x[0][0], x[0][1],
                                                                        x[0][2])):
        s, x = m["server"], m["metrics"]
        out.append(
            f"| {config} | {rate:g} | {'advisor' if kind == 'advisor' else 'vllm bench serve'} "
            f"| {_f(x.get('ttft_p95_ms'))} | {_f(x.get('ttft_mean_ms'))} "
            f"({_f((s.get('ttft') or {}).get('mean_ms'))}) | {_bucket(s, 'ttft')} "
            f"| {_f(x.get('tpot_p95_ms'), 1)} | {_bucket(s, 'tpot')} "
            f"| {_f(x.get('output_tokens_per_s'))} ({_f(s.get('output_tokens_per_s'))}) "
            f"| {m.get('validity')} |")
    return out


def trial_measurements(path: Path, session_of: str) -> list[dict[str, Any]]:
    """The stored trials of one crosscheck session as measurements, in the order they were
    taken (goodput there is at the study's SLO; the report's advisor lines predate that)."""
    out = []
    for raw in path.read_text().splitlines():
        line = json.loads(raw)
        trial, cc = line["trial"], line["trial"]["details"].get("crosscheck") or {}
        if cc.get("session") != session_of:
            continue
        out.append({"kind": "advisor", "config": cc["config_label"], "round": cc["round"],
                    "rate_rps": line["study"]["workload_spec"]["params"]["arrival"]["rate_rps"],
                    "metrics": trial["metrics"], "finished_at": trial["finished_at"],
                    "status": trial["status"], "validity": trial["details"].get("validity")})
    return sorted(out, key=lambda m: m["finished_at"])


def session(path: Path) -> str:
    first = json.loads(path.read_text().splitlines()[0])
    if first.get("type") == "crosscheck":
        return str(first["session"])
    raise ValueError(f"{path} has no header line (an interrupted run); pass its session")


def _measured(m: Mapping[str, Any]) -> Measured:
    return Measured(**{k: m[k] for k in ("kind", "config", "rate_rps", "round", "metrics",
                                          "server", "validity", "reasons", "checks")})


def goal_table(ms: Sequence[Mapping[str, Any]], title: str) -> list[str]:
    """The issue's goal per config and rate: each goal figure of the advisor within 15 % of the
    reference, or agreeing with the server's view of the same window (the gate's check)."""
    out = [f"**{title}**", "", "| config | req/s | figure | advisor | vllm bench serve | ratio "
           "| within 15 % of the reference | agrees with the server | goal |",
           "|---|---|---|---|---|---|---|---|---|"]
    firsts: dict[tuple[str, float, str], Measured] = {}
    for m in ms:
        firsts.setdefault((m["config"], m["rate_rps"], m["kind"]), _measured(m))
    for (config, rate, kind), adv in sorted(firsts.items()):
        if kind != "advisor":
            continue
        row = compare_row(config, rate, adv, firsts.get((config, rate, "reference")))
        for metric in GOAL_METRICS:
            f = row["figures"][metric]
            ratio = f.get("ratio")
            out.append(f"| {config} | {rate:g} | {metric} | {_f(f['advisor'], 1)} "
                       f"| {_f(f['reference'], 1)} | {'-' if ratio is None else f'{ratio:.2f}'} "
                       f"| {'yes' if f['within_goal_of_reference'] else 'no'} "
                       f"| {'yes' if f['agrees_with_server'] else 'no'} "
                       f"| {'met' if f['goal_met'] else '**missed**'} |")
    return out


def repeats_table(ms: Iterable[Mapping[str, Any]], title: str) -> list[str]:
    groups: dict[tuple[str, float], list[Mapping[str, Any]]] = defaultdict(list)
    for m in ms:
        if m["kind"] == "advisor":
            groups[(m["config"], m["rate_rps"])].append(m)
    out = [f"**{title}**", "",
           "| config | req/s | repeats | TTFT p95 ms | TPOT p95 ms | goodput req/s | tok/s |",
           "|---|---|---|---|---|---|---|"]

    def span(values: list[float], digits: int = 0) -> str:
        lo, hi = min(values), max(values)
        return _f(lo, digits) if lo == hi else f"{_f(lo, digits)}-{_f(hi, digits)}"

    for (config, rate), group in sorted(groups.items()):
        xs = [g["metrics"] for g in group]
        out.append(f"| {config} | {rate:g} | {len(xs)} | {span([x['ttft_p95_ms'] for x in xs])} "
                   f"| {span([x['tpot_p95_ms'] for x in xs], 1)} "
                   f"| {span([x['goodput_requests_per_s'] for x in xs], 1)} "
                   f"| {span([x['output_tokens_per_s'] for x in xs])} |")
    return out


BETTER = {"ttft_p95_ms": "lower", "tpot_p95_ms": "lower", "goodput_requests_per_s": "higher",
          "output_tokens_per_s": "higher"}


def paired_table(ms: Sequence[Mapping[str, Any]], x: str, y: str) -> list[str]:
    out = [f"**{x} − {y}, co-resident, interleaved** (difference of means, 95 % bootstrap "
           "interval; claimed only with ≥ 3 repeats of each)", "",
           "| req/s | metric | " + x + " | " + y + " | difference [95 % interval] | verdict |",
           "|---|---|---|---|---|---|"]
    by_rate: dict[float, list[tuple[int, Mapping[str, Any]]]] = defaultdict(list)
    for order, m in enumerate(ms):
        if m["kind"] == "advisor":
            by_rate[m["rate_rps"]].append((order, m))
    for rate, items in sorted(by_rate.items()):
        arms = {arm: [Repeat(arm, order, m["metrics"]) for order, m in items
                      if m["config"] == arm] for arm in (x, y)}
        try:
            result = compare(arms[x], arms[y], better=BETTER)  # type: ignore[arg-type]
        except PairedComparisonError as exc:
            out.append(f"| {rate:g} | - | {len(arms[x])} repeats | {len(arms[y])} repeats "
                       f"| not claimed: {exc} | - |")
            continue
        for c in result.metrics:
            lo, hi = c.interval
            out.append(f"| {rate:g} | {c.metric} | {c.mean_x:,.1f} | {c.mean_y:,.1f} "
                       f"| {c.difference:+,.1f} [{lo:+,.1f}, {hi:+,.1f}] | {c.verdict} |")
    return out


def rounds_table(ms: Sequence[Mapping[str, Any]], title: str) -> list[str]:
    """Per config and rate, the rounds of advisor-then-reference windows: medians, the median
    ratio with its range, the advisor windows agreeing with their server, the goal (the rows
    ``advisor crosscheck`` itself prints: CrosscheckReport.round_rows)."""
    out = [f"**{title}**", "", "| config | req/s | rounds | figure | advisor (median) "
           "| vllm bench serve (median) | ratio, median [range] | advisor windows agreeing "
           "with the server | goal |", "|---|---|---|---|---|---|---|---|---|"]
    report = CrosscheckReport("tables", {}, {})
    report.measured = [_measured(m) for m in ms]
    for row in report.round_rows():
        for metric in GOAL_METRICS:
            f = row["figures"][metric]
            lo, hi = f["ratio_range"]
            out.append(f"| {row['config']} | {row['rate_rps']:g} | {row['rounds']} | {metric} "
                       f"| {_f(f['advisor_median'], 1)} | {_f(f['reference_median'], 1)} "
                       f"| {f['ratio_median']:.2f} [{lo:.2f}–{hi:.2f}] "
                       f"| {f['agrees_with_server']} "
                       f"| {'met' if f['goal_met'] else '**missed**'} |")
    return out


def sessions_in(trials: Path) -> dict[str, str]:
    """Study-name prefix -> crosscheck session, from the stored trials."""
    out: dict[str, str] = {}
    for raw in read_trials_text(trials).splitlines():
        line = json.loads(raw)
        cc = line["trial"]["details"].get("crosscheck") or {}
        if cc:
            out.setdefault(line["study"]["name"].split("@")[0], cc["session"])
    return out


def main(folder: Path, trials: Path) -> None:
    defaults = measurements(folder / "crosscheck-8b-defaults.jsonl")
    paired = measurements(folder / "crosscheck-8b-paired.jsonl")
    small = measurements(folder / "crosscheck-1b.jsonl")
    rounds = measurements(folder / "crosscheck-8b-rounds.jsonl")
    ids = sessions_in(trials)
    stored = {name: trial_measurements(trials, sid) for name, sid in ids.items()}
    blocks = [
        rounds_table(rounds, "The goal over three rounds, 8B defaults at 15 / 45 / 75 req/s "
                             "(second session)"),
        goal_table([m for m in defaults if m["rate_rps"] in (15, 45, 75)],
                   "The goal, 8B defaults at 15 / 45 / 75 req/s"),
        goal_table([m for m in paired if m["config"] == "best-sampled"],
                   "The goal, a non-default config (8B, best-sampled, co-resident)"),
        goal_table(small, "The goal, 1B defaults"),
        crosscheck_table(defaults, "8B, vLLM defaults alone on the GPU"),
        crosscheck_table([m for m in paired if m["config"] == "best-sampled"],
                         "8B, the old best sampled config (co-resident, 0.45 of the GPU)"),
        crosscheck_table(small, "1B, vLLM defaults alone on the GPU"),
        repeats_table(stored["h200-8b-chat-1201-defaults"],
                      "8B defaults, repeats on one engine start"),
        repeats_table(stored["h200-8b-chat-1201-paired"],
                      "8B co-resident pair (each 0.45 of the GPU)"),
        repeats_table(stored["h200-1b-chat-1201-defaults"],
                      "1B defaults, repeats on one engine start"),
        repeats_table(stored["h200-8b-chat-1201-rounds"] + stored["h200-8b-chat-1201-knee"],
                      "8B defaults, second session (one engine start per call)"),
        repeats_table(stored["h200-1b-chat-1201-more"] + stored["h200-1b-chat-1201-light"],
                      "1B defaults, second session (one engine start per call)"),
        paired_table(stored["h200-8b-chat-1201-paired"], "best-sampled", "default"),
    ]
    print("\n\n".join("\n".join(block) for block in blocks))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR,
         Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_TRIALS)
