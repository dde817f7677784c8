"""Print the client cross-check side by side: `vllm bench serve` against the advisor's client.

Reads what ``h200_client_crosscheck_2026_11_30.sh`` wrote (``crosscheck-bench.jsonl``, one
``vllm bench serve --save-result`` JSON per line, and ``crosscheck-trials.jsonl``, the advisor's
``openai``-target trials) and prints, per request rate, each metric from both tools and their
ratio (advisor / vLLM). Both tools ran against the same server, but each drew its own Poisson
arrivals, so percentiles differ by sampling as well as by measurement.

    python scripts/device/compare_crosscheck.py DIR [--markdown]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: (label, vllm bench serve key, advisor metric key)
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("TTFT p50 ms", "p50_ttft_ms", "ttft_p50_ms"),
    ("TTFT p95 ms", "p95_ttft_ms", "ttft_p95_ms"),
    ("TTFT p99 ms", "p99_ttft_ms", "ttft_p99_ms"),
    ("TPOT p50 ms", "p50_tpot_ms", "tpot_p50_ms"),
    ("TPOT p95 ms", "p95_tpot_ms", "tpot_p95_ms"),
    ("ITL p50 ms", "p50_itl_ms", "itl_p50_ms"),
    ("ITL p95 ms", "p95_itl_ms", "itl_p95_ms"),
    ("E2E p50 ms", "p50_e2el_ms", "e2e_p50_ms"),
    ("E2E p99 ms", "p99_e2el_ms", "e2e_p99_ms"),
    ("output tok/s", "output_throughput", "output_tokens_per_s"),
    ("requests/s", "request_throughput", "requests_per_s"),
)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _advisor_rate(row: dict[str, Any]) -> float:
    return float(row["trial"]["workload_spec"]["params"]["arrival"]["rate_rps"])


def rows_by_rate(directory: Path) -> list[tuple[float, dict[str, Any], dict[str, float]]]:
    """(rate, vLLM's result, the advisor's metrics) for each rate both tools measured."""
    bench = {float(b["crosscheck_rate_rps"]): b
             for b in _read_jsonl(directory / "crosscheck-bench.jsonl")}
    advisor = {_advisor_rate(t): t["trial"]["metrics"]
               for t in _read_jsonl(directory / "crosscheck-trials.jsonl")
               if t["trial"]["status"] == "complete"}
    return [(rate, bench[rate], advisor[rate]) for rate in sorted(bench) if rate in advisor]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    rows = rows_by_rate(args.directory)
    if not rows:
        raise SystemExit(f"no rate measured by both tools in {args.directory}")
    for rate, bench, ours in rows:
        if args.markdown:
            print(f"\n**Poisson {rate:g} req/s**, {bench['num_prompts']} requests "
                  f"(vLLM completed {bench['completed']}, failed {bench['failed']})\n")
            print("| metric | vllm bench serve | advisor client | ratio |")
            print("|---|---|---|---|")
        else:
            print(f"\n== Poisson {rate:g} req/s, {bench['num_prompts']} requests")
        for label, bench_key, our_key in PAIRS:
            theirs, mine = float(bench[bench_key]), float(ours[our_key])
            ratio = mine / theirs if theirs else float("nan")
            if args.markdown:
                print(f"| {label} | {theirs:,.1f} | {mine:,.1f} | {ratio:.2f} |")
            else:
                print(f"  {label:<14} vllm {theirs:>10,.1f}   advisor {mine:>10,.1f}   "
                      f"ratio {ratio:5.2f}")


if __name__ == "__main__":
    main()
