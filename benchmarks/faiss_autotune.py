"""Benchmark: FAISS's own autotuner (``ParameterSpace.explore`` over textbook index factories)
against an ``advisor tune --target faiss`` study of the same wall-time budget, on the same data,
with both winners re-measured by one timing loop in one process.

Method. The quickstart's workload (stdlib-docs-8k: 8,000 x 384 MiniLM vectors, 1,000 held-out
queries, exact top-10) is loaded through the project's dataset code, so FAISS sees the vectors,
queries and ground truth the advisor's trials see. For each factory (default IVF{sqrt_n},Flat;
HNSW16,Flat; HNSW32,Flat; IVF{sqrt_n},PQ48x8, inner-product metric as the faiss target builds)
the script builds the index and runs ``faiss.ParameterSpace().explore`` with an
``IntersectionCriterion`` (recall@10 by id); build + explore is FAISS's wall time. Then one
``advisor tune`` study runs as a subprocess (its own SQLite store and cache) until the same wall
time has passed and is stopped with SIGTERM, as a scheduler would; its trials are read from the
store. For each recall target the best FAISS operating point and the best advisor trial that meet
it are re-measured here, alternating A/B for several rounds, with the faiss target's own
measuring function (same threads, same batch size, same tie-aware recall@10).

    python benchmarks/faiss_autotune.py --out docs/benchmarks/faiss_autotune.json

A smoke run (tiny budget, one factory):

    python benchmarks/faiss_autotune.py --factories 'HNSW32,Flat' --budget-s 20 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.settings import Settings  # noqa: E402
from knowledge import TrialStatus, TrialStore  # noqa: E402
from objectives.datasets.vectors import VectorDataset, build_or_load_dataset  # noqa: E402
from objectives.hardware import fingerprint  # noqa: E402
from objectives.targets.faiss_target import (  # noqa: E402
    FaissTarget,
    _apply_search_params,
    _factory_string,
    _measure,
)

#: FAISS's textbook factories; ``{sqrt_n}`` becomes round(sqrt(n_base)) (89 for 8,000 vectors).
DEFAULT_FACTORIES = ("IVF{sqrt_n},Flat", "HNSW16,Flat", "HNSW32,Flat", "IVF{sqrt_n},PQ48x8")
DEFAULT_TARGETS = (0.90, 0.95, 0.99)
#: After SIGTERM, how long the study may take to record its interrupted trial and exit.
STOP_GRACE_S = 60.0
#: `advisor tune --trials` upper bound: with a wall-time budget the deadline stops the study.
MAX_TRIALS = 1000
RECALL_METRIC = "recall_at_10"


# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatingPoint:
    """One configuration FAISS's explore measured: its criterion value and throughput."""

    factory: str
    key: str
    recall: float
    qps: float
    #: FAISS's wall time from the start of the first factory's build to the end of this
    #: factory's explore (explore reports no time per point).
    found_after_s: float = 0.0


@dataclass(frozen=True)
class FactoryRun:
    """FAISS's autotune of one factory: what it cost and what it measured."""

    factory: str
    build_s: float
    explore_s: float
    n_combinations: int
    n_experiments: int
    parameter_ranges: dict[str, list[float]]
    points: list[OperatingPoint]

    @property
    def wall_s(self) -> float:
        return self.build_s + self.explore_s


@dataclass(frozen=True)
class AdvisorTrial:
    """One complete trial of the advisor's study, as the trial store holds it."""

    study: str
    number: int
    config: dict[str, Any]
    factory: str
    recall: float
    qps: float
    p95_latency_ms: float | None
    batch_size: int
    threads: int
    duration_s: float | None
    #: Seconds from the start of ``advisor tune`` to this trial's end.
    found_after_s: float | None


@dataclass(frozen=True)
class StudyRun:
    """One ``advisor tune`` subprocess: its budget, what it cost, and its trials by state."""

    name: str
    slo: str
    budget_s: float
    wall_s: float
    stopped_at_deadline: bool
    returncode: int
    trial_states: dict[str, int]
    trials: list[AdvisorTrial] = field(default_factory=list)
    #: ``data_hash`` of the dataset the trials measured (the faiss target records it).
    data_hashes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Spread:
    """Median and range of repeated measurements."""

    median: float
    low: float
    high: float
    runs: list[float]

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values), list(values))


@dataclass(frozen=True)
class Remeasured:
    """One arm re-measured in this process: tie-aware recall@10, batched qps, single-query p95."""

    recall_at_10: float
    qps: Spread
    p95_latency_ms: Spread


# -- FAISS's autotuner -----------------------------------------------------------------------


def factory_strings(templates: Sequence[str], n_base: int) -> list[str]:
    sqrt_n = round(math.sqrt(n_base))
    return [t.format(sqrt_n=sqrt_n) for t in templates]


def autotune_factory(factory: str, dataset: VectorDataset, *, polysemous: bool,
                     n_experiments: int | None, min_test_duration_s: float, verbose: int
                     ) -> tuple[FactoryRun, Any, Any]:
    """Build ``factory`` and run FAISS's ``ParameterSpace.explore`` on it.

    Returns the run and the index with its ``ParameterSpace`` (to set an operating point's
    parameters for the re-measurement). The criterion is recall@k by id: |ANN top-k ∩ exact
    top-k| / k averaged over the queries — the advisor's recall@10 without its tie rule.
    """
    import faiss

    index: Any = faiss.index_factory(dataset.dim, factory, faiss.METRIC_INNER_PRODUCT)
    if hasattr(index, "do_polysemous_training"):
        # index_factory turns polysemous training on; the faiss target turns it off (see
        # faiss_target._build), and it multiplies IVF-PQ's train time several times over.
        index.do_polysemous_training = polysemous
    base = np.ascontiguousarray(dataset.base)
    queries = np.ascontiguousarray(dataset.queries)
    started = time.perf_counter()
    index.train(base)
    index.add(base)
    build_s = time.perf_counter() - started

    started = time.perf_counter()
    space: Any = faiss.ParameterSpace()
    space.verbose = verbose
    if n_experiments is not None:
        space.n_experiments = n_experiments
    space.min_test_duration = min_test_duration_s
    space.initialize(index)
    criterion: Any = faiss.IntersectionCriterion(queries.shape[0], dataset.k)
    criterion.set_groundtruth(np.ascontiguousarray(dataset.gt_scores, dtype=np.float32),
                              np.ascontiguousarray(dataset.gt_ids, dtype=np.int64))
    ops = space.explore(index, queries, criterion)
    explore_s = time.perf_counter() - started

    points = []
    for i in range(ops.all_pts.size()):
        op = ops.all_pts.at(i)
        if op.cno < 0 or op.t <= 0:  # the sentinel point (perf 0, time 0) explore starts from
            continue
        # op.t is the wall time of one pass over all the queries, in seconds.
        points.append(OperatingPoint(factory, str(op.key), float(op.perf),
                                     queries.shape[0] / float(op.t)))
    ranges = {}
    for i in range(space.parameter_ranges.size()):
        pr = space.parameter_ranges.at(i)
        ranges[str(pr.name)] = [float(v) for v in faiss.vector_to_array(pr.values)]
    run = FactoryRun(factory, build_s, explore_s, int(space.n_combinations()), len(points),
                     ranges, points)
    return run, index, space


# -- the advisor's study -----------------------------------------------------------------------


def tune_command(name: str, slo: str, trials: int, seed: int | None,
                 extra: Sequence[str] = ()) -> list[str]:
    cmd = [sys.executable, "-m", "advisor", "tune", "--target", "faiss", "--name", name,
           "--slo", slo, "--objective", "maximize:qps", "--trials", str(trials),
           # The benchmark re-measures the winners itself; the study's own paired check would
           # only spend the budget after the search.
           "--paired-repeats", "0", "--json"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return [*cmd, *extra]


def run_study(name: str, slo: str, budget_s: float, trials: int, seed: int | None,
              env: Mapping[str, str], log_dir: Path, db_url: str,
              extra: Sequence[str] = ()) -> StudyRun:
    """Run one ``advisor tune`` until it finishes or ``budget_s`` passes (then SIGTERM), and read
    the trials it completed before the deadline from its store."""
    cmd = tune_command(name, slo, trials, seed, extra)
    print(f"advisor: {' '.join(cmd[1:])} (budget {budget_s:.1f} s)", file=sys.stderr)
    deadline = datetime.now(UTC) + timedelta(seconds=budget_s)
    started = time.perf_counter()
    stopped = False
    with open(log_dir / f"{name}.stdout", "wb") as out, open(log_dir / f"{name}.stderr",
                                                             "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=dict(env), cwd=ROOT)
        try:
            rc = proc.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            stopped = True
            proc.send_signal(signal.SIGTERM)  # the CLI records the running trial as interrupted
            try:
                rc = proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    wall_s = time.perf_counter() - started
    if not stopped and rc != 0:
        tail = (log_dir / f"{name}.stderr").read_text(errors="replace")[-3000:]
        sys.exit(f"advisor tune failed (exit {rc}) before its budget:\n{tail}")
    states, trials_done, hashes = read_trials(db_url, name, deadline - timedelta(seconds=budget_s),
                                              deadline)
    if not trials_done:
        tail = (log_dir / f"{name}.stderr").read_text(errors="replace")[-2000:]
        print(f"advisor: study {name} completed no trial within {budget_s:.1f} s; its stderr "
              f"ends:\n{tail}", file=sys.stderr)
    return StudyRun(name, slo, budget_s, wall_s, stopped, rc, states, trials_done, hashes)


def read_trials(db_url: str, study_name: str, started: datetime, deadline: datetime
                ) -> tuple[dict[str, int], list[AdvisorTrial], list[str]]:
    """Trial counts by state, the complete trials that finished before ``deadline``, and the
    data hashes their measurements name."""
    store = TrialStore(db_url)
    try:
        study = store.get_study(study_name)
        if study is None or study.id is None:
            return {}, [], []
        records = store.trials_of_study(study.id)
    finally:
        store.close()
    states: dict[str, int] = {}
    done = []
    hashes: set[str] = set()
    for rec in records:
        late = rec.finished_at is not None and rec.finished_at > deadline
        state = f"{rec.status} (after deadline)" if late else rec.status
        states[state] = states.get(state, 0) + 1
        if rec.status != TrialStatus.COMPLETE or late or RECALL_METRIC not in rec.metrics:
            continue
        p95 = rec.metrics.get("p95_latency_ms")
        done.append(AdvisorTrial(
            study=study_name, number=rec.number, config=dict(rec.config),
            factory=str(rec.details.get("factory") or _factory_string(rec.config)),
            recall=float(rec.metrics[RECALL_METRIC]), qps=float(rec.metrics["qps"]),
            p95_latency_ms=None if p95 is None else float(p95),
            batch_size=int(rec.details.get("batch_size", rec.config["batch_size"])),
            threads=int(rec.details.get("threads", rec.config["threads"])),
            duration_s=rec.duration_s,
            found_after_s=None if rec.finished_at is None
            else (rec.finished_at - started).total_seconds()))
        if rec.details.get("data_hash"):
            hashes.add(str(rec.details["data_hash"]))
    return states, done, sorted(hashes)


def advisor_env(work: Path, cache_dir: Path, import_shipped: bool) -> tuple[dict[str, str], str]:
    """Environment of the study: a fresh store, and a fresh cache that links the built dataset (so
    the study measures the same vectors and pays for its own index builds, as FAISS does)."""
    cache = work / "advisor-cache"
    cache.mkdir(parents=True, exist_ok=True)
    link = cache / "datasets"
    if not link.is_symlink():  # a reused --work-dir keeps its link
        link.symlink_to((cache_dir / "datasets").resolve(), target_is_directory=True)
    db_url = f"sqlite:///{work / 'advisor.db'}"
    env = {**os.environ, "ADVISOR_DB_URL": db_url, "ADVISOR_CACHE_DIR": str(cache),
           "ADVISOR_IMPORT_SHIPPED": "true" if import_shipped else "false",
           "ADVISOR_PAIRED_REPEATS": "0"}
    return env, db_url


# -- re-measurement ------------------------------------------------------------------------------


@dataclass
class Arm:
    """One config to re-measure: an index and how to put its search parameters on it."""

    tuner: str
    label: str
    index: Any
    apply: Callable[[], object]


def remeasure(arms: Sequence[Arm], dataset: VectorDataset, *, batch_size: int, threads: int,
              rounds: int) -> list[Remeasured]:
    """Time every arm ``rounds`` times, alternating their order each round, with the faiss
    target's own ``_measure`` (warm-up, single-query pass, batched pass, tie-aware recall)."""
    import faiss

    qps: list[list[float]] = [[] for _ in arms]
    p95: list[list[float]] = [[] for _ in arms]
    recall: list[float] = [0.0 for _ in arms]
    order = list(range(len(arms)))
    for r in range(rounds):
        for i in order if r % 2 == 0 else order[::-1]:
            faiss.omp_set_num_threads(threads)
            arms[i].apply()
            metrics, _counts = _measure(arms[i].index, dataset, batch_size)
            qps[i].append(metrics["qps"])
            p95[i].append(metrics["p95_latency_ms"])
            recall[i] = metrics[RECALL_METRIC]  # deterministic for a fixed index and params
    return [Remeasured(recall[i], Spread.of(qps[i]), Spread.of(p95[i])) for i in range(len(arms))]


def advisor_index(target: FaissTarget, clean: Mapping[str, Any], dataset: VectorDataset,
                  cache: Path) -> Any:
    """The index the trial measured, from the study's build cache (built again if absent)."""
    index, _build = target._index(clean, dataset, cache)
    return index


def best_faiss(points: Sequence[OperatingPoint], recall: float) -> OperatingPoint | None:
    meeting = [p for p in points if p.recall >= recall]
    return max(meeting, key=lambda p: p.qps) if meeting else None


def best_advisor(trials: Sequence[AdvisorTrial], recall: float) -> AdvisorTrial | None:
    meeting = [t for t in trials if t.recall >= recall]
    return max(meeting, key=lambda t: t.qps) if meeting else None


def describe_advisor(trial: AdvisorTrial) -> str:
    cfg = trial.config
    knobs = [f"{k}={cfg[k]}" for k in ("nprobe", "ef_search", "ef_construction") if k in cfg]
    return f"{trial.factory} {','.join(knobs)}".strip()


# -- report ---------------------------------------------------------------------------------------


def index_family(factory: str) -> str:
    """The faiss target's ``index_type`` that builds ``factory`` (``other`` when none does)."""
    if factory.startswith("HNSW"):
        return "hnsw"
    if factory.startswith("IVF") and "_HNSW" in factory.split(",")[0]:
        return "ivf_hnsw"
    if factory.startswith("IVF") and ",PQ" in factory:
        return "ivf_pq"
    if factory.startswith("IVF") and factory.endswith(",Flat"):
        return "ivf_flat"
    return "other"


def coverage(trials: Sequence[AdvisorTrial], faiss_winner: OperatingPoint | None,
             recall: float) -> str:
    """What the advisor's study measured around a recall target: the 'why' beside a verdict."""
    meeting = [t for t in trials if t.recall >= recall]
    families = sorted({str(t.config.get("index_type")) for t in meeting})
    text = (f"{len(trials)} trials measured, {len(meeting)} reached {recall:g}"
            + (f" ({', '.join(families)})" if families else ""))
    if faiss_winner is not None:
        family = index_family(faiss_winner.factory)
        same = [t for t in trials if t.config.get("index_type") == family]
        best = max((t.recall for t in same), default=None)
        text += (f"; FAISS's winner is {family}: the study measured {len(same)} {family} trials"
                 + (f", best recall {best:.4f}" if best is not None else ""))
    return text


def verdict(faiss_m: Remeasured | None, advisor_m: Remeasured | None, target: float,
            best_seen: float | None) -> str:
    if faiss_m is None and advisor_m is None:
        return f"neither tuner found a config with recall >= {target:g}"
    if advisor_m is None:
        seen = f"; its best recall was {best_seen:.3f}" if best_seen is not None else ""
        return f"advisor: no trial reached recall {target:g} within the budget{seen}"
    if faiss_m is None:
        return f"FAISS: no operating point reached recall {target:g}; advisor wins by default"
    # The arms were measured in alternating pairs, so each round gives one ratio; a load spike
    # hits both arms of a round, which an overlap test of the two ranges would not see.
    ratios = [ad / fa for ad, fa in zip(advisor_m.qps.runs, faiss_m.qps.runs, strict=True)]
    ratio = statistics.median(ratios)
    spread = f"advisor/FAISS qps x{ratio:.2f}, per round x{min(ratios):.2f}–x{max(ratios):.2f}"
    notes = []
    for who, m in (("advisor", advisor_m), ("FAISS", faiss_m)):
        if m.recall_at_10 < target:
            notes.append(f"{who}'s config re-measures at recall {m.recall_at_10:.4f} < {target:g}")
    if min(ratios) >= 1:
        head = f"advisor >= FAISS in every round ({spread})"
    elif max(ratios) < 1:
        head = f"advisor < FAISS in every round ({spread})"
    else:
        head = f"within noise: rounds disagree ({spread})"
    return "; ".join([head, *notes])


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Two Markdown tables: both winners per recall target as re-measured, then the verdicts."""
    lines = ["| recall target | tuner | config | tuner's own recall / qps | re-measured "
             "recall@10 | re-measured qps, median (min–max) | p95 ms at batch 1 (median) | "
             "batch, threads | found after / tuner's wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for tuner in ("faiss", "advisor"):
            arm = row[tuner]
            if arm is None:
                lines.append(f"| {row['recall_target']:g} | {tuner} | — (none) | | | | | | "
                             f"– / {row['wall_s'][tuner]:.1f} |")
                continue
            m = arm["remeasured"]
            own = f"{arm['tuner_recall']:.4f} / {arm['tuner_qps']:,.0f}"
            lines.append(
                f"| {row['recall_target']:g} | {tuner} | {arm['label']} | {own} | "
                f"{m['recall_at_10']:.4f} | {m['qps']['median']:,.0f} "
                f"({m['qps']['low']:,.0f}–{m['qps']['high']:,.0f}) | "
                f"{m['p95_latency_ms']['median']:.3f} | {row['batch_size']}, {row['threads']} | "
                f"{_seconds(arm['winner']['found_after_s'])} / {row['wall_s'][tuner]:.1f} |")
    lines += ["", "| recall target | verdict (re-measured, paired by round) | why: what the "
              "advisor's study measured |", "|---|---|---|"]
    lines += [f"| {row['recall_target']:g} | {row['verdict']} | {row['advisor_coverage']} |"
              for row in rows]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def source_state() -> dict[str, Any]:
    """The commit the advisor ran from and how many tracked files differed from it (read-only
    git queries; the advisor's code is whatever this working tree holds)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True, timeout=30).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=ROOT, capture_output=True, text=True, check=True,
                                timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "modified_tracked_files": None}
    return {"commit": commit, "modified_tracked_files": len(status.splitlines())}


def versions() -> dict[str, str]:
    import faiss

    out = {"faiss": faiss.__version__, "numpy": np.__version__,
           "python": platform.python_version()}
    for dist in ("optuna", "slo-advisor"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--factories", default=";".join(DEFAULT_FACTORIES),
                        help="FAISS index_factory strings, separated by ';' ({sqrt_n}: "
                             "round(sqrt(n_base))); default: %(default)s")
    parser.add_argument("--targets", default=",".join(f"{t:g}" for t in DEFAULT_TARGETS),
                        help="recall@10 targets, comma-separated; default: %(default)s")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="the advisor's wall-time budget (default: FAISS's total build + "
                             "explore time)")
    parser.add_argument("--trials", type=int, default=MAX_TRIALS,
                        help="advisor tune --trials (the budget stops the study first); "
                             "default: %(default)s")
    parser.add_argument("--slo", default=None,
                        help="SLO of the single advisor study (default: recall_at_10>= the "
                             "lowest target)")
    parser.add_argument("--per-target", action="store_true",
                        help="run one study per recall target (SLO recall_at_10>=target), each "
                             "with budget / number of targets, instead of one study")
    parser.add_argument("--tune-arg", action="append", default=[],
                        help="an extra `advisor tune` argument (repeatable), e.g. "
                             "--tune-arg=--search-sweep")
    parser.add_argument("--seed", type=int, default=0,
                        help="advisor sampler seed; default: %(default)s")
    parser.add_argument("--import-shipped", action="store_true",
                        help="let the study's store import the shipped knowledge (off: a "
                             "fresh store, no prior trials)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="OpenMP threads for FAISS's explore (and the re-measure when the "
                             "advisor has no winner)")
    parser.add_argument("--polysemous", action="store_true",
                        help="IVF-PQ: keep index_factory's polysemous training (the faiss "
                             "target turns it off; it multiplies train time)")
    parser.add_argument("--n-experiments", type=int, default=None,
                        help="ParameterSpace.n_experiments (default: FAISS's, 500)")
    parser.add_argument("--min-test-duration-s", type=float, default=0.0,
                        help="ParameterSpace.min_test_duration (FAISS's default 0: one pass)")
    parser.add_argument("--faiss-verbose", type=int, default=0,
                        help="ParameterSpace.verbose (FAISS's default is 1)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="re-measure batch size (default: the advisor winner's batch_size; "
                             "without one, all queries in one call as FAISS's explore does)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="re-measure rounds per arm, A/B order alternating; "
                             "default: %(default)s")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="dataset cache (default: $ADVISOR_CACHE_DIR or the advisor's)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="the study's store, cache and logs (default: a temporary dir, "
                             "removed at the end)")
    parser.add_argument("--note", default="",
                        help="a label stored in the JSON, e.g. 'smoke run on a loaded machine'")
    parser.add_argument("--out", type=Path, default=None, help="write all figures as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"`--rounds >= 1` must hold, but got {args.rounds}")
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error(f"`--budget-s > 0` must hold, but got {args.budget_s}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    import faiss

    targets = sorted(float(t) for t in args.targets.split(",") if t.strip())
    target = FaissTarget()
    workload = target.default_workload()
    cache_dir = args.cache_dir or Settings().cache_dir
    print(f"loading {workload.name} ...", file=sys.stderr)
    dataset = build_or_load_dataset(workload.params, cache_dir,
                                    lambda m: print(m, file=sys.stderr))
    load_avg_start = os.getloadavg()

    # 1. FAISS's autotuner, factory by factory.
    faiss.omp_set_num_threads(args.threads)
    factories = factory_strings([f.strip() for f in args.factories.split(";") if f.strip()],
                                dataset.base.shape[0])
    runs: list[FactoryRun] = []
    tuned: dict[str, tuple[Any, Any]] = {}
    for factory in factories:
        print(f"faiss: {factory} build + explore ...", file=sys.stderr)
        run, index, space = autotune_factory(
            factory, dataset, polysemous=args.polysemous, n_experiments=args.n_experiments,
            min_test_duration_s=args.min_test_duration_s, verbose=args.faiss_verbose)
        so_far = sum(r.wall_s for r in runs) + run.wall_s
        run = replace(run, points=[replace(p, found_after_s=so_far) for p in run.points])
        runs.append(run)
        tuned[factory] = (index, space)
        print(f"faiss: {factory}: build {run.build_s:.1f} s, explore {run.explore_s:.1f} s, "
              f"{run.n_experiments}/{run.n_combinations} combinations measured, best recall "
              f"{max((p.recall for p in run.points), default=0):.4f}", file=sys.stderr)
    faiss_wall_s = sum(r.wall_s for r in runs)
    points = [p for r in runs for p in r.points]

    # 2. The advisor, with the same wall-time budget.
    budget_s = args.budget_s if args.budget_s is not None else faiss_wall_s
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="faiss-autotune-"))
    work.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    try:
        env, db_url = advisor_env(work, cache_dir, args.import_shipped)
        if args.per_target:
            plan = [(f"faiss-autotune-{stamp}-r{t:g}", f"{RECALL_METRIC}>={t:g}",
                     budget_s / len(targets)) for t in targets]
        else:
            slo = args.slo or f"{RECALL_METRIC}>={targets[0]:g}"
            plan = [(f"faiss-autotune-{stamp}", slo, budget_s)]
        studies = [run_study(name, slo, b, args.trials, args.seed, env, work, db_url,
                             args.tune_arg)
                   for name, slo, b in plan]
        hashes = {h for s in studies for h in s.data_hashes}
        if hashes - {dataset.data_hash}:
            sys.exit(f"the advisor's trials measured other data ({sorted(hashes)}) than "
                     f"this script loaded ({dataset.data_hash}); same --cache-dir?")
        rows = compare(targets, studies, faiss_wall_s, points, tuned, dataset, target, work,
                       args)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)

    report = {
        "benchmark": "faiss_autotune", "note": args.note,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/faiss_autotune.py",
                               *(sys.argv[1:] if argv is None else argv)]),
        "hardware": fingerprint(), "load_average_1_5_15_at_start": list(load_avg_start),
        "versions": versions(), "advisor_source": source_state(),
        "workload": workload.spec, "data": dict(dataset.provenance),
        "budget": {"faiss_wall_s": faiss_wall_s, "advisor_budget_s": budget_s,
                   "advisor_wall_s": sum(s.wall_s for s in studies),
                   "budget_from": "--budget-s" if args.budget_s is not None else "faiss_wall_s"},
        "faiss": {"threads": args.threads, "criterion": f"IntersectionCriterion(nq, {dataset.k})",
                  "polysemous_training": args.polysemous, "n_experiments": args.n_experiments,
                  "min_test_duration_s": args.min_test_duration_s,
                  "factories": [{**asdict(r), "wall_s": r.wall_s} for r in runs]},
        "advisor": {"studies": [asdict(s) for s in studies],
                    "import_shipped": args.import_shipped, "seed": args.seed},
        "rounds": args.rounds, "targets": rows,
    }
    print_summary(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")


def compare(targets: Sequence[float], studies: Sequence[StudyRun], faiss_wall_s: float,
            points: Sequence[OperatingPoint], tuned: Mapping[str, tuple[Any, Any]],
            dataset: VectorDataset, target: FaissTarget, work: Path, args: argparse.Namespace
            ) -> list[dict[str, Any]]:
    """Per recall target: both winners, re-measured together."""
    cache = work / "advisor-cache"
    rows = []
    for i, recall in enumerate(targets):
        trials = studies[i].trials if args.per_target else studies[0].trials
        fa, ad = best_faiss(points, recall), best_advisor(trials, recall)
        batch = args.batch_size or (ad.batch_size if ad else dataset.queries.shape[0])
        threads = ad.threads if ad else args.threads
        arms: list[Arm] = []
        if fa is not None:
            index, space = tuned[fa.factory]
            arms.append(Arm("faiss", f"{fa.factory} {fa.key}", index,
                            partial(space.set_index_parameters, index, fa.key)))
        if ad is not None:
            clean = target.validate_config(ad.config)
            ad_index = advisor_index(target, clean, dataset, cache)
            arms.append(Arm("advisor", describe_advisor(ad), ad_index,
                            partial(_apply_search_params, ad_index, clean)))
        print(f"re-measure @ recall {recall:g}: {[a.label for a in arms]} at batch {batch}, "
              f"{threads} threads, {args.rounds} rounds", file=sys.stderr)
        measured = remeasure(arms, dataset, batch_size=batch, threads=threads,
                             rounds=args.rounds)
        by_tuner = {arm.tuner: (arm, m) for arm, m in zip(arms, measured, strict=True)}
        study_wall = studies[i].wall_s if args.per_target else studies[0].wall_s
        row: dict[str, Any] = {"recall_target": recall, "batch_size": batch, "threads": threads,
                               "wall_s": {"faiss": faiss_wall_s, "advisor": study_wall}}
        for name, winner in (("faiss", fa), ("advisor", ad)):
            if winner is None:
                row[name] = None
                continue
            arm, m = by_tuner[name]
            row[name] = {"label": arm.label, "tuner_recall": winner.recall,
                         "tuner_qps": winner.qps, "winner": asdict(winner),
                         "remeasured": asdict(m)}
        best_seen = max((t.recall for t in trials), default=None)
        row["verdict"] = verdict(by_tuner.get("faiss", (None, None))[1],
                                 by_tuner.get("advisor", (None, None))[1], recall, best_seen)
        row["advisor_coverage"] = coverage(trials, fa, recall)
        rows.append(row)
    return rows


def print_summary(report: Mapping[str, Any]) -> None:
    budget = report["budget"]
    print(f"\nFAISS autotune: {budget['faiss_wall_s']:.1f} s over "
          f"{len(report['faiss']['factories'])} factories; advisor budget "
          f"{budget['advisor_budget_s']:.1f} s, wall {budget['advisor_wall_s']:.1f} s")
    for f in report["faiss"]["factories"]:
        print(f"  {f['factory']}: build {f['build_s']:.1f} s + explore {f['explore_s']:.1f} s, "
              f"{f['n_experiments']} of {f['n_combinations']} combinations")
    for s in report["advisor"]["studies"]:
        print(f"  advisor study {s['name']} ({s['slo']}): {len(s['trials'])} complete trials "
              f"in budget; states {s['trial_states']}")
    print()
    print(markdown_table(report["targets"]))


if __name__ == "__main__":
    main()
