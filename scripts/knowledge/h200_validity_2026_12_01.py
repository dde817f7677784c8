"""Give every shipped LLM trial a validity verdict, and ship the H200 trials of 2026-12-01.

Run from the repository root: ``python scripts/knowledge/h200_validity_2026_12_01.py
[DEVICE_EXPORT ...]``. Idempotent.

1. The H200 files measured before the validity gate existed (2026-11-30) are marked, in place:
   a vLLM trial timed by one client process at more than 5,000 streamed tokens/s is
   ``client_bound`` (one process read 5-13x the TTFT p95 that three processes read on the same
   server: docs/metrics.md); any other measured vLLM trial is ``legacy_unverified`` (never
   checked against the server); transformers and RAG trials (in-process engines, timed by the
   process that runs them) are ``unchecked``. Each gets ``server_metrics`` saying none were read.
   Unusable verdicts get status ``invalid`` (knowledge/validity.py): kept, never modelled.
2. The device exports of 2026-12-01 (``advisor knowledge export`` of each call's store) are
   merged into knowledge/data/h200-vllm-crosscheck-2026-12-01.jsonl; verdicts taken by an older
   gate (the first call's by version 1, the others by version 2) are judged again by the current
   gate from their stored checks (``objectives.llm.validity.rejudge``), each older verdict kept in
   ``validity_history``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from advisor.pairing import PROVENANCE_KEY, outcome_of_configs
from knowledge import TrialStore
from knowledge.transfer import import_jsonl
from knowledge.validity import is_usable
from objectives.llm.validity import GATE_VERSION, rejudge

DATA = Path("knowledge/data")
LEGACY = sorted(DATA.glob("h200-*-2026-11-30.jsonl"))
NEW = DATA / "h200-vllm-crosscheck-2026-12-01.jsonl"
#: Above this many streamed tokens/s one client process fell behind on the H200.
ONE_PROCESS_LIMIT_TOK_S = 5000.0
MEASURED = ("complete", "invalid")


def legacy_verdict(trial: dict[str, Any]) -> tuple[str, str]:
    details, metrics = trial["details"], trial.get("metrics") or {}
    if trial["target"] != "vllm":
        return "unchecked", "in-process engine timed by the process that runs it (measured " \
                            "before the validity gate, 2026-11-30)"
    tok_s = float(metrics.get("output_tokens_per_s") or 0.0)
    processes = details.get("client_processes") or 1
    if processes == 1 and tok_s > ONE_PROCESS_LIMIT_TOK_S:
        return "client_bound", (f"timed by one client process at {tok_s:,.0f} streamed tokens/s "
                                f"(> {ONE_PROCESS_LIMIT_TOK_S:,.0f}): the client was part of "
                                "what it measured (re-measured 2026-12-01)")
    return "legacy_unverified", ("measured before the validity gate (2026-11-30) and never "
                                 "checked against the server's own metrics")


def mark_legacy(line: dict[str, Any]) -> dict[str, Any]:
    trial = line["trial"]
    details = trial.setdefault("details", {})
    if trial["status"] in MEASURED and "validity" not in details:
        validity, reason = legacy_verdict(trial)
        details.update({"validity": validity, "validity_reasons": [reason],
                        "validity_checks": [], "validity_gate": 0})
    details.setdefault("server_metrics", {
        "available": False,
        "reason": "not read: measured before server metrics were scraped (2026-11-30)"
        if trial["status"] in MEASURED else "the trial failed before it measured anything"})
    if trial["status"] == "complete" and not is_usable(details):
        trial["status"] = "invalid"
        trial["feasible"] = False
    return line


def rejudged(line: dict[str, Any]) -> dict[str, Any]:
    trial = line["trial"]
    details = trial["details"]
    gate = details.get("validity_gate", 1)
    if gate < GATE_VERSION and (verdict := rejudge(details)):
        details.setdefault("validity_history", []).append(
            {"gate": gate, "validity": details["validity"]})
        details["validity"] = verdict
        details["validity_gate"] = GATE_VERSION
        details["validity_rejudged"] = (f"gate {GATE_VERSION} applied to the stored checks, lag "
                                        "and reasons (2026-12-01)")
    usable = is_usable(details)
    if trial["status"] in MEASURED:
        trial["status"] = "complete" if usable else "invalid"
        if not usable:
            trial["feasible"] = False
    return line


def main(exports: list[str]) -> None:
    for path in LEGACY:
        lines = [mark_legacy(json.loads(raw)) for raw in path.read_text().splitlines() if raw]
        path.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
        print(f"{path}: {len(lines)} trials marked")
    if exports:
        seen: dict[str, dict[str, Any]] = {}
        for export in exports:
            for raw in Path(export).read_text().splitlines():
                if raw:
                    line = json.loads(raw)
                    seen[line["trial"]["uid"] if "uid" in line["trial"] else
                         f"{line['study']['name']}#{line['trial']['number']}"] = line
        lines = [rejudged(x) for x in seen.values()]
        lines.sort(key=lambda x: (x["study"]["name"], x["trial"]["number"]))
        add_launch_facts(lines)
        add_paired_comparisons(lines)
        NEW.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
        print(f"{NEW}: {len(lines)} trials")


REPORTS = Path("docs/benchmarks/h200-crosscheck-2026-12-01")
#: The interpreter of the device image (every report header that has its servers names it).
DEVICE_PYTHON = "/opt/torch/.venv/bin/python3"


def add_launch_facts(lines: list[dict[str, Any]]) -> None:
    """The device runs stored their trials before the launch facts reached them (fixed since:
    ServingTarget.serve now holds them from the start). Add them back: from the report's header
    where the run finished (the 1B call), else rebuilt by the target's own argv builder from the
    trial's config and workload, the port left as ``<port>`` and the reconstruction noted."""
    import tempfile

    from objectives.llm.server import ServingWorkload
    from objectives.targets.vllm_target import VllmTarget, build_argv

    servers: dict[tuple[str, str], dict[str, Any]] = {}
    for report in REPORTS.glob("crosscheck-*.jsonl"):
        head = json.loads(report.read_text().splitlines()[0])
        if head.get("type") == "crosscheck":
            for label, facts in head.get("servers", {}).items():
                servers[(head["session"], label)] = facts
    target = VllmTarget()
    for line in lines:
        details = line["trial"]["details"]
        if "argv" in details:
            continue
        cc = details["crosscheck"]
        known = servers.get((cc["session"], cc["config_label"]))
        if known is not None:
            details.update({k: v for k, v in known.items() if k not in ("config",
                                                                         "engine_versions")})
            continue
        params = line["study"]["workload_spec"]["params"]
        with tempfile.TemporaryDirectory() as tmp:
            served = ServingWorkload.load(params, Path(tmp), target_keys=target.target_params)
            max_model_len = served.max_model_len()
        model_dir = f"/tmp/advisor-cache/models/{served.model.label}"  # the device's cache dir
        first_rate_seed = 1  # the session's first rate's workload seed (at_rate offset 1)
        argv = build_argv(line["trial"]["config"], model_dir=model_dir, port=0,
                          engine_version="0.26.0", max_model_len=max_model_len,
                          seed=first_rate_seed, served_model_name=served.model.label)
        argv[argv.index("--port") + 1] = "<port>"
        details.update({
            "argv": [DEVICE_PYTHON, "-m", "vllm.entrypoints.cli.main", "serve", *argv],
            "argv_reconstructed": "rebuilt after the run by build_argv from the trial's config "
                                  "and workload; the port was chosen at run time",
            "engine_version": "0.26.0", "model": served.model.label,
            "model_path": model_dir, "dummy_weights": True, "max_model_len": max_model_len})


def add_paired_comparisons(lines: list[dict[str, Any]]) -> None:
    """Give each study of a co-resident crosscheck (two configs measured in turn) the paired
    comparison ``advisor crosscheck`` now stores itself (the other config against the default)."""
    store = TrialStore("sqlite://")
    import_jsonl(store, [json.dumps(x) for x in lines], source="h200-2026-12-01")
    for study in store.list_studies("vllm"):
        if not study.data_provenance.get("co_resident"):
            continue
        trials = store.trials_of_study(study.id or 0)
        by_label: dict[str, dict[str, Any]] = {}
        for t in trials:
            by_label.setdefault(t.details["crosscheck"]["config_label"], dict(t.config))
        if set(by_label) != {"default", "best-sampled"}:
            continue
        found = outcome_of_configs(trials, study, by_label["best-sampled"], by_label["default"],
                                   x="best-sampled", y="default")
        for line in lines:
            if line["study"]["name"] == study.name:
                line["study"]["data_provenance"][PROVENANCE_KEY] = found
        print(f"{study.name}: paired comparison {found['status']}")


if __name__ == "__main__":
    main(sys.argv[1:])
