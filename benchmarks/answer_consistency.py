"""How many answers contradict the stored evidence they could cite: the consistency audit of
advisor/answers/audit.py, on the shipped knowledge, for the answer engine of this checkout and
(``--legacy-root``) for the recommenders of an older checkout, asked the same questions and
held to the same checks.

    PYTHONPATH=. python benchmarks/answer_consistency.py --targets vllm \\
        --extra-slo 'ttft_p95_ms<=300,tpot_p95_ms<=40' --extra-slo 'tpot_p95_ms<=40' \\
        --cache-dir /tmp/models --out new-vllm.json
    git worktree add --detach ../old 7e1119d
    PYTHONPATH=. python benchmarks/answer_consistency.py --targets vllm \\
        --extra-slo 'ttft_p95_ms<=300,tpot_p95_ms<=40' --extra-slo 'tpot_p95_ms<=40' \\
        --cache-dir /tmp/models --legacy-root ../old --out old-vllm.json

Both modes import the shipped knowledge into a fresh temporary SQLite store and fit (or load
from ``--cache-dir``) each target's models. The questions, the grouping of windows by config,
the windows' verdicts (>= 2/3 of a config's windows within 10 % of the asked workload meet
every bound) and the noise and load-bound rules always come from THIS checkout's fitted
contexts and advisor/answers/audit.py; only the answers differ.

New code: :func:`advisor.answers.audit.audit_answers`, as the lead's test runs it.

Legacy (``--legacy-root DIR``, a checkout before advisor/answers/ existed): the same questions
(every fitted context, every point of ``audit.workload_points``, every SLO tier of the context's
workload kind and every ``--extra-slo`` the context measures) go to a subprocess that puts DIR
first on ``sys.path`` (it checks that ``advisor`` is imported from DIR) and asks the old
``advisor.recommend.recommend(store, RecommendationQuery(target, slo, hardware, model,
workload, objective), models=...)`` (the model-based answer) and
``advisor.recommend.recommend_measured(store, target, slo, objective, hardware_key, model,
workload)`` (the measured answer; ``objective`` is the question's, else the target's default
objective, as the old ``recommend`` defaults it). Their ``to_dict()`` outputs are mapped onto the
audit's checks like this:

* covered: the model answer unless ``status`` is ``not_covered``; the measured answer unless it
  found no usable trial at all (``trials_considered`` 0 and nothing recommended), the old
  measured path's "not covered";
* the default's verdict an answer states: ``baseline.default_meets_slo`` when the answer
  carries a ``baseline`` (the old answers compare with the default only when they recommend
  something; a ``no_feasible_config`` model answer and a measured answer with no trial meeting
  the SLO state none); it counts as measured when ``baseline.default_figures_basis`` is
  ``measured``, and its window count is ``len(baseline.default_trials)``;
* (a): as in the audit, a measured verdict whose ``meets`` or window count differs from the
  rule on the default's windows at the point, or a predicted one (model answer) whose ``meets``
  differs; the JSON splits (a) into ``verdict`` (``meets`` differs) and ``windows`` (only the
  count differs);
* (b): both answers state a verdict on the default and they differ;
* (c): the answered config (model: ``config``, the default itself under ``keep_defaults``;
  measured: ``recommended.config``) has windows at the point meeting the SLO in a smaller share
  than the default's;
* (d): the default has windows at the point but the covered measured answer states no measured
  verdict on it (no ``baseline``, ``engine_default`` null, or ``baseline.basis`` ``no_default``);
* (f): the answer's objective figure (the median of the answered config's windows at the point
  where it has some, else the model answer's ``predicted`` value or the measured answer's
  recommended trial's figure) is beaten, by more than the larger noise threshold of the two
  sides (``audit._objective_threshold``: 2 x the CV of >= 2 windows, at least 2 %, else 10 %),
  by the median of another config measured at the point that meets the SLO by the rule, unless
  the new code's ``_load_bound`` puts the point below both configs' load-curve capacities.

The new audit's own (f) reads the answer's figure from its document, which follows the same
evidence rule (windows' median first, else the prediction). An old answer that raises is
counted under ``errors`` and checked no further.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The checks the audit runs (its docstring: (e) is the docs' examples, run by tests/).
CHECKS = ("a", "b", "c", "d", "f")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", nargs="+", default=["vllm"], help="targets to audit")
    p.add_argument("--extra-slo", action="append", default=[], dest="extra_slos",
                   help="an SLO asked besides the workload kind's tiers (repeatable)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where fitted models are kept between runs (default: a temp dir)")
    p.add_argument("--legacy-root", type=Path, default=None,
                   help="answer with the recommenders of the checkout at this directory")
    p.add_argument("--hardware", default=None,
                   help="audit only the contexts whose hardware key contains this")
    p.add_argument("--max-points", type=int, default=None,
                   help="check only the first N workload points of each context")
    p.add_argument("--out", type=Path, default=None, help="write the JSON summary here")
    p.add_argument("--examples", type=int, default=5,
                   help="contradictions printed per check")
    p.add_argument("--legacy-worker", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.legacy_worker is not None:
        return _legacy_worker(args.legacy_worker)
    if args.legacy_root is not None and not (args.legacy_root / "advisor" / "recommend.py"
                                             ).is_file():
        print(f"--legacy-root {args.legacy_root}: no advisor/recommend.py there (a checkout "
              "from before advisor/answers/ is needed)", file=sys.stderr)
        return 2
    from knowledge import TrialStore
    from knowledge.transfer import import_shipped_knowledge

    with tempfile.TemporaryDirectory(prefix="answer-consistency-") as tmp:
        db_url = f"sqlite:///{Path(tmp) / 'knowledge.db'}"
        store = TrialStore(db_url)
        started = time.perf_counter()
        import_shipped_knowledge(store)
        imported_s = time.perf_counter() - started
        cache_dir = args.cache_dir or Path(tmp) / "models"
        summary: dict[str, Any] = {
            "code": "legacy" if args.legacy_root else "new",
            "legacy_root_commit": _commit(args.legacy_root) if args.legacy_root else None,
            "commit": _commit(Path.cwd()), "extra_slos": args.extra_slos,
            "max_points": args.max_points, "import_s": round(imported_s, 1), "targets": {}}
        for target in args.targets:
            summary["targets"][target] = _run_target(store, db_url, cache_dir, target, args,
                                                     Path(tmp))
    totals = {c: sum(t["by_check"].get(c, 0) for t in summary["targets"].values())
              for c in CHECKS}
    summary["answers"] = sum(t["answers"] for t in summary["targets"].values())
    summary["contradictions"] = sum(totals.values())
    summary["by_check"] = totals
    print(f"{summary['code']} code: {summary['answers']} answers checked, "
          f"{summary['contradictions']} contradictions "
          f"({', '.join(f'{c}: {n}' for c, n in totals.items())})")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    return 0


def _commit(root: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() or None


def _run_target(store: Any, db_url: str, cache_dir: Path, target: str,
                args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from knowledge.cache import ModelCache

    started = time.perf_counter()
    models = ModelCache(store, cache_dir, target=target).get()
    fit_s = time.perf_counter() - started
    if args.hardware is not None:
        models = dataclasses.replace(models, contexts={
            k: c for k, c in models.contexts.items() if args.hardware in k.hardware_key})
    started = time.perf_counter()
    audit_raised: str | None = None
    if args.legacy_root is None:
        from advisor.answers.audit import audit_answers
        from advisor.errors import AdvisorError

        try:
            report = audit_answers(store, models, targets=[target], extra_slos=args.extra_slos,
                                   max_points=args.max_points)
        except AdvisorError as exc:
            # The audit stops at the first answer that raises: say so, and count the questions
            # that raise, answer by answer, so the run still tells what it could not check.
            audit_raised = f"{type(exc).__name__}: {exc}"
            answers, questions, errors, found = _new_raising(store, models, target, args)
        else:
            answers, questions, errors = report.answers, report.questions, 0
            found = [{"check": c.check, "question": c.question, "detail": c.detail,
                      "kind": None} for c in report.contradictions]
    else:
        answers, questions, errors, found = _legacy_audit(store, db_url, cache_dir, models,
                                                          target, args, tmp)
    audit_s = time.perf_counter() - started
    by_check = {c: sum(1 for f in found if f["check"] == c) for c in CHECKS}
    print(f"{target}: {answers} answers to {questions} questions checked in {audit_s:.0f} s "
          f"(models {fit_s:.0f} s), {sum(by_check.values())} contradictions: "
          f"{', '.join(f'{c}: {n}' for c, n in by_check.items())}"
          + (f"; {errors} questions raised" if errors else "")
          + (f"; THE AUDIT RAISED ({audit_raised}): nothing checked" if audit_raised else ""))
    for check in (*CHECKS, "error"):
        for f in [f for f in found if f["check"] == check][:args.examples]:
            print(f"  ({check}) {json.dumps(f['question'], sort_keys=True)}: {f['detail']}")
    kinds: dict[str, int] = {}
    for f in found:
        if f["kind"] is not None:
            kinds[f"{f['check']}:{f['kind']}"] = kinds.get(f"{f['check']}:{f['kind']}", 0) + 1
    return {"answers": answers, "questions": questions, "errors": errors,
            "audit_raised": audit_raised, "contexts": [c.key.label() for c in
                                                       models.contexts.values()
                                                       if c.key.target == target],
            "contradictions": sum(by_check.values()), "by_check": by_check, "by_kind": kinds,
            "models_s": round(fit_s, 1), "audit_s": round(audit_s, 1), "found": found}


def _new_raising(store: Any, models: Any, target: str, args: argparse.Namespace
                 ) -> tuple[int, int, int, list[dict[str, Any]]]:
    """When the audit itself raised: which of its questions this checkout's planner raises on
    (nothing is checked: the counts of contradictions stay 0 and ``audit_raised`` says why)."""
    from advisor.answers.planner import plan_recommendation
    from advisor.answers.request import RecommendationRequest
    from advisor.errors import AdvisorError

    found: list[dict[str, Any]] = []
    asked = _questions(models, target, args.extra_slos, args.max_points)
    for q in asked:
        for measured in (False, True):
            try:
                plan_recommendation(store, RecommendationRequest(**q["question"],
                                                                 measured=measured),
                                    models=models)
            except AdvisorError as exc:
                found.append({"check": "error", "question": q["question"],
                              "detail": f"{'measured' if measured else 'model'} answer: "
                                        f"{type(exc).__name__}: {exc}", "kind": None})
                break
    return 0, len(asked) - len(found), len(found), found


# -- the legacy answers ------------------------------------------------------------------------

def _questions(models: Any, target: str, extra_slos: Sequence[str], max_points: int | None
               ) -> list[dict[str, Any]]:
    """The questions audit_answers asks (the same loop, in the same order), with what the
    checks need about each point."""
    from advisor.answers.audit import _default_key, _groups, workload_points
    from advisor.answers.model_based import _space
    from objectives import parse_slo
    from objectives.kinds import kind_for_target

    out: list[dict[str, Any]] = []
    for ctx_id, ctx in models.contexts.items():
        if ctx.key.target != target:
            continue
        kind = kind_for_target(ctx.key.target)
        tiers = [(t.slo, t.objective) for t in kind.tiers] if kind is not None else []
        slos = [*tiers, *((s, None) for s in extra_slos)]
        default = _space(ctx.key.target).default_config()
        for features in workload_points(ctx)[:max_points]:
            groups = _groups(ctx, features)
            default_key = _default_key(groups, default, {k: len(v) for k, v in groups.items()})
            for slo_text, objective_text in slos:
                try:
                    slo = parse_slo(slo_text)
                    slo.check_metrics(ctx.key.target, list(ctx.metrics))
                except Exception:  # the audit skips an SLO the context does not measure
                    continue
                base = {"target": ctx.key.target, "slo": slo_text,
                        "hardware": ctx.key.hardware_key, "model": ctx.key.model,
                        "workload": features, "objective": objective_text}
                out.append({"ctx": ctx_id, "groups": groups, "default_key": default_key,
                            "question": {k: v for k, v in base.items() if v is not None}})
    return out


def _legacy_audit(store: Any, db_url: str, cache_dir: Path, models: Any, target: str,
                  args: argparse.Namespace, tmp: Path
                  ) -> tuple[int, int, int, list[dict[str, Any]]]:
    asked = _questions(models, target, args.extra_slos, args.max_points)
    job, result = tmp / f"legacy-{target}-job.json", tmp / f"legacy-{target}-answers.json"
    job.write_text(json.dumps({"root": str(args.legacy_root.resolve()), "db_url": db_url,
                               "cache_dir": str(cache_dir.resolve()), "target": target,
                               "result": str(result),
                               "questions": [q["question"] for q in asked]}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--legacy-worker",
                           str(job)], env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the legacy worker failed (exit {done.returncode})")
    answered = json.loads(result.read_text())
    found: list[dict[str, Any]] = []
    errors = answers = 0
    for q, a in zip(asked, answered, strict=True):
        if "error" in a:
            errors += 1
            found.append({"check": "error", "question": q["question"], "detail": a["error"],
                          "kind": None})
            continue
        answers += 2
        found.extend(_legacy_checks(models.contexts[q["ctx"]], q, a["model"], a["measured"]))
    return answers, len(asked) - errors, errors, found


def _legacy_worker(job_path: Path) -> int:
    """Answer the job's questions with the old code (run in a subprocess of its own, so the old
    packages are the ones imported)."""
    job = json.loads(job_path.read_text())
    root = job["root"]
    sys.path.insert(0, root)
    import advisor
    from advisor.objective import Objective
    from knowledge import TrialStore
    from knowledge.cache import ModelCache
    from objectives import parse_slo
    from objectives.registry import get_target

    if not str(Path(advisor.__file__).resolve()).startswith(root):
        raise SystemExit(f"advisor was imported from {advisor.__file__}, not from {root}")
    # By name: the old module exists only in the old checkout.
    old = importlib.import_module("advisor.recommend")
    store = TrialStore(job["db_url"])
    models = ModelCache(store, Path(job["cache_dir"]), target=job["target"]).get()
    out: list[dict[str, Any]] = []
    for i, q in enumerate(job["questions"]):
        if i % 50 == 0:
            print(f"  legacy: {i} of {len(job['questions'])} questions", file=sys.stderr,
                  flush=True)
        try:
            model = old.recommend(store, old.RecommendationQuery(**q), models=models)
            objective = Objective.parse(q.get("objective")
                                        or get_target(q["target"]).default_objective)
            measured = old.recommend_measured(
                store, target=q["target"], slo=parse_slo(q["slo"]), objective=objective,
                hardware_key=q.get("hardware"), model=q.get("model"),
                workload=q.get("workload"))
        except Exception as exc:  # counted and reported under `errors`, never hidden
            out.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append({"model": json.loads(json.dumps(model.to_dict(), default=str)),
                    "measured": json.loads(json.dumps(measured.to_dict(), default=str))})
    Path(job["result"]).write_text(json.dumps(out))
    return 0


def _stated_default(answer: dict[str, Any]) -> tuple[bool | None, bool, int]:
    """(meets, measured, windows) of the default's verdict an old answer states."""
    base = answer.get("baseline") or {}
    meets = base.get("default_meets_slo")
    if base.get("basis") == "no_default" or meets is None:
        return None, False, 0
    return bool(meets), base.get("default_figures_basis") == "measured", len(
        base.get("default_trials") or [])


def _legacy_checks(ctx: Any, asked: dict[str, Any], model: dict[str, Any],
                   measured: dict[str, Any]) -> list[dict[str, Any]]:
    """The audit's checks (advisor/answers/audit.py ``_check``) on the old answers."""
    from advisor.answers.audit import _objective_threshold, _share
    from advisor.answers.model_based import _load_bound, _same_config
    from advisor.answers.rule import measured_verdict
    from advisor.answers.versus_default import gain
    from advisor.objective import Objective
    from objectives import parse_slo
    from objectives.registry import get_target

    q, groups, default_key = asked["question"], asked["groups"], asked["default_key"]
    features = q["workload"]
    slo = parse_slo(q["slo"])
    verdicts = {k: measured_verdict(slo, [ctx.measured[i] for i in rows])
                for k, rows in groups.items()}
    found: list[dict[str, Any]] = []

    def say(check: str, kind: str | None, detail: str) -> None:
        found.append({"check": check, "question": q, "detail": detail, "kind": kind})

    covered = {"model": model.get("status") != "not_covered",
               "measured": bool(measured.get("trials_considered"))
               or measured.get("recommended") is not None}
    stated = {"model": _stated_default(model), "measured": _stated_default(measured)}
    if measured.get("engine_default") is None:
        stated["measured"] = (None, False, 0)
    if default_key is not None:
        want = verdicts[default_key]
        for label in ("model", "measured"):
            if not covered[label]:
                continue
            got, is_measured, windows = stated[label]
            if got is None or not is_measured:
                if label == "measured":
                    say("d", None, f"the default has {want.windows} windows here but the "
                                   "measured answer cites none")
                elif got is not None and got != want.meets:
                    say("a", "verdict", f"{label} answer: the default meets={got} (predicted) "
                                        f"although its {want.windows} windows say {want.meets}")
                continue
            if got != want.meets or windows != want.windows:
                say("a", "verdict" if got != want.meets else "windows",
                    f"{label} answer: default meets={got} on {windows} measurements; its "
                    f"windows: {want.windows_met} of {want.windows}")
        m, s = stated["model"][0], stated["measured"][0]
        if covered["model"] and covered["measured"] and m is not None and s is not None \
                and m != s:
            say("b", None, f"model answer says the default meets={m}; measured says {s}")
    objective = Objective.parse(q.get("objective") or get_target(q["target"]).default_objective)
    metric = objective.metric
    answered = {"model": (model.get("config") if model.get("status") == "recommended" else None,
                          (model.get("predicted") or {}).get(metric, {}).get("value")),
                "measured": ((measured.get("recommended") or {}).get("config"),
                             ((measured.get("recommended") or {}).get("metrics") or {}
                              ).get(metric))}
    for label, (config, value) in answered.items():
        if config is None:
            continue
        key = _same_config(ctx.key.target, config)
        if default_key is not None and key in verdicts:
            mine, theirs = verdicts[key], verdicts[default_key]
            if _share(mine.windows_met, mine.windows) < _share(theirs.windows_met,
                                                                theirs.windows):
                say("c", None, f"{label} answer's config meets in {mine.windows_met} of "
                               f"{mine.windows} windows, the default in {theirs.windows_met} "
                               f"of {theirs.windows}")
        own = [float(ctx.measured[i][metric]) for i in groups.get(key, [])
               if metric in ctx.measured[i]]
        figure = statistics.median(own) if own else value
        if figure is None:
            continue
        for other, rows in groups.items():
            if other == key or not verdicts[other].meets:
                continue
            values = [float(ctx.measured[i][metric]) for i in rows if metric in ctx.measured[i]]
            if not values or _load_bound(ctx, [config, ctx.configs[rows[0]]], features, metric):
                continue
            g = gain(objective, statistics.median(values), float(figure))
            if g > max(_objective_threshold(values), _objective_threshold(own)):
                say("f", None, f"{label} answer ({metric} {float(figure):.4g} "
                               f"{'measured' if own else 'as answered'}) is beaten by a config "
                               f"measured here meeting the SLO in {verdicts[other].windows_met} "
                               f"of {verdicts[other].windows} windows: median "
                               f"{statistics.median(values):.4g} ({g:+.1%}, trials "
                               f"{[ctx.trial_ids[i] for i in rows]})")
    return found


if __name__ == "__main__":
    sys.exit(main())
