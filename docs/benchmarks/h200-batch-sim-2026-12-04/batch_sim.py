"""The continuous-batching simulator (knowledge/batch_sim.py) against the load curves and the
knob-level models, on the shipped GPU serving trials: held-out rates and held-out configs.

    # every test, on the shipped data (--json out.json also writes the figures)
    PYTHONPATH=. python docs/benchmarks/h200-batch-sim-2026-12-04/batch_sim.py

Each trial is replayed from its workload spec (the same seeded arrivals and lengths the client
sent). A config's *step class* is its config less the knobs whose role is the batch-slot limit
or the step's token budget (the search space marks them): configs of one class share one
step-time model, fitted to the server's mean inter-token latency of the class's training trials.

Three tests, each against what the shipped models answer on the same trials:

The "curves" of every test are the load curves alone (``fit_load_curves(..., blend=False)``):
the blends this benchmark scores are what knowledge/curve_blend.py adopted.

* ``workload folds``: the 5 folds of ``advisor knowledge eval --group-by workload`` (a held-out
  workload, i.e. a rate and its seed, predicted from the rest). Scored on the trials whose config
  was measured on the training side (the eval's "measured at other rates" column): the batch
  model of its class against the config's load curve.
* ``between rates``: the trials of the 2026-12-04 between-rates study (the shipped file of it)
  predicted from every other shipped trial (as benchmarks/between_rates.py does for the curves).
* ``held-out configs``: every config whose class has other measured configs, held out with all
  its trials; the class's other configs fit the batch model, which simulates the held-out
  config's own batch limits. Against the load curves predicted from the knobs (the GP the
  context uses) and the knob-level surrogate, fitted on the same rest.

The two held-out-rate tests also score blends of the two: the geometric mean of the config's
curve and the batch model, simulator weight 0.25, 0.5 (the candidate) and 0.75, and with
``--nested`` the curves or the 0.5 blend, chosen per metric by the training set's own workload
folds (a choice made without the held-out trials; about 6x the fits):

    PYTHONPATH=. python docs/benchmarks/h200-batch-sim-2026-12-04/batch_sim.py \
        --frontend-costs 0 --tests folds,between --nested
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stores import shipped_store, temp_store
from knowledge import TrialStatus
from knowledge.batch_sim import FRONTEND_TOKEN_MS, Observation, RequestStream, fit_batch_models
from knowledge.curve_blend import SIM_WEIGHT, mix
from knowledge.curve_model import KNOB_CURVE_FAMILY, KnobCurveModel
from knowledge.load_curve import config_key, unvaried_knobs
from knowledge.store import TrialFilter
from knowledge.surrogates import (
    DEFAULT_FAMILY,
    FeatureEncoder,
    IntervalRegressor,
    context_of,
    cost_law,
    fit_load_curves,
    metric_transform,
    workload_features,
)
from knowledge.surrogates.training import _usable, _xy
from knowledge.surrogates.transforms import _forward, _inverse
from knowledge.transfer import import_file, shipped_file
from objectives.llm.simulation import LLMSimulation, first_token_ms, mean_step_ms
from objectives.llm.workload import KIND, LLMWorkloadSpec, request_shapes
from search_spaces.space import load_space

METRICS = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s")
BETWEEN = "h200-vllm-between-2026-12-04.jsonl"


class Replay:
    """What the simulator needs of each trial of one target: its request stream, batch limits,
    mean engine iteration and step class."""

    def __init__(self, target: str, trials: Sequence[Any],
                 frontend_costs: Sequence[float] = FRONTEND_TOKEN_MS) -> None:
        self.frontend_costs = tuple(frontend_costs)
        space = load_space(target)
        self.slots = space.knob_with_role("batch_slots")
        self.budget = space.knob_with_role("step_token_budget")
        self.defaults = space.default_config()
        self.unvaried = unvaried_knobs([t.config for t in trials])
        self._streams: dict[str, RequestStream] = {}
        # Step classes and batch limits as the product's simulator reads them.
        self._product = (LLMSimulation(self.slots, self.budget, self.defaults, self.unvaried,
                                       {}, [])
                         if self.slots is not None and self.budget is not None else None)

    def usable(self, trial: Any) -> bool:
        return (self._product is not None and trial.workload_spec.get("kind") == KIND
                and mean_step_ms(trial) is not None)

    def stream(self, trial: Any) -> RequestStream:
        key = json.dumps(trial.workload_spec, sort_keys=True)
        if key not in self._streams:
            spec = LLMWorkloadSpec.from_params(trial.workload_spec["params"])
            arrivals, prompts, outputs = request_shapes(spec)
            self._streams[key] = RequestStream(arrivals, prompts, outputs, spec.drain_limit_s)
        return self._streams[key]

    def limits(self, config: dict) -> tuple[int, int]:
        assert self._product is not None
        return self._product.limits(config)

    def step_class(self, config: dict) -> str:
        assert self._product is not None
        return self._product.step_class(config)

    def observation(self, trial: Any) -> Observation:
        slots, budget = self.limits(trial.config)
        itl = mean_step_ms(trial)
        assert itl is not None
        stream = self.stream(trial)
        return Observation(stream, slots, budget, itl, trial.metrics,
                           first_token_ms(trial.details.get("requests"), len(stream.arrivals_s)))

    def fit(self, trials: Sequence[Any]) -> dict[str, Any]:
        """One batch model per step class of ``trials``."""
        classes: dict[str, list[Any]] = {}
        for t in trials:
            if self.usable(t):
                classes.setdefault(self.step_class(t.config), []).append(t)
        return fit_batch_models({k: [self.observation(t) for t in ts]
                                 for k, ts in classes.items()}, self.frontend_costs)

    def predict(self, models: dict[str, Any], trial: Any) -> dict[str, float] | None:
        model = models.get(self.step_class(trial.config))
        if model is None or trial.workload_spec.get("kind") != KIND:
            return None
        return model.predict(self.stream(trial), *self.limits(trial.config))


def _ape(pred: float | None, truth: Any) -> float | None:
    if pred is None or not isinstance(truth, int | float) or truth <= 0:
        return None
    return abs(pred - truth) / truth


def _score(errors: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict[str, float]]]:
    return {m: {name: {"n": len(e), "mape": float(np.mean(e)), "median_ape": float(np.median(e))}
                for name, e in by.items() if e} for m, by in errors.items()}


#: Weights of the simulator in the blends the held-out-rate tests also score: each blend is the
#: geometric mean ``curve^(1-w) * simulator^w``. Equal weights (0.5) is the candidate, named before
#: it was scored (the usual default for combining two forecasts); 0.25 and 0.75 show how much the
#: figure depends on the weight.
BLEND_WEIGHTS = (0.25, 0.5, 0.75)


def _blend_name(w: float) -> str:
    return f"curves x simulator {w:g}"


#: The candidate whose blend is chosen per metric by inner folds (``--nested``).
CHOSEN = "curves or blend, chosen by inner folds"
#: The blend ``--nested`` chooses between (against the curves alone).
CHOSEN_WEIGHT = 0.5


def _rate_candidates(nested: bool = False) -> dict[str, dict[str, list[float]]]:
    """Per metric, an empty list of errors per candidate of the held-out-rate tests."""
    names = ["curves", "batch model", *map(_blend_name, BLEND_WEIGHTS)]
    if nested:
        names.append(CHOSEN)
    return {m: {name: [] for name in names} for m in METRICS}


def _score_trial(errors: dict[str, dict[str, list[float]]], trial: Any, curves: Any,
                 sim: dict[str, float] | None, blend: dict[str, bool] | None = None) -> None:
    """Append ``trial``'s error of every candidate, per metric, where both the config's curve
    and the batch model answer (so every candidate is scored on the same trials). ``blend``:
    per metric, whether the chosen candidate blends (else it is the curves alone)."""
    for m in METRICS:
        c = curves.predict(trial.config, workload_features(trial.workload_spec), m) \
            if curves is not None else None
        s = sim.get(m) if sim else None
        truth = trial.metrics.get(m)
        if not c or s is None or c[0] <= 0 or s <= 0 or not isinstance(truth, int | float) \
                or truth <= 0:
            continue
        preds = {"curves": c[0], "batch model": s}
        preds.update((_blend_name(w), mix(c[0], s, w)) for w in BLEND_WEIGHTS)
        if blend is not None:
            preds[CHOSEN] = preds[_blend_name(CHOSEN_WEIGHT)] if blend[m] else c[0]
        for name, pred in preds.items():
            errors[m][name].append(abs(pred - truth) / truth)


def _workload_splits(replay: Replay, trials: list, folds: int = 5
                     ) -> Iterator[tuple[list, list[tuple[Any, Any, dict[str, float] | None]]]]:
    """Per split of the eval's workload folds: the training trials, and each held-out trial
    whose config was measured on the training side with its curves and simulated figures."""
    from sklearn.model_selection import GroupKFold

    groups = np.asarray([t.workload_hash for t in trials])
    for train, test in GroupKFold(n_splits=min(folds, len(set(groups)))).split(
            np.zeros(len(trials)), groups=groups):
        train_trials = [trials[i] for i in train]
        trained = {t.config_hash for t in train_trials}
        curves = fit_load_curves(train_trials, blend=False)
        models = replay.fit(train_trials)
        yield train_trials, [(trials[i], curves, replay.predict(models, trials[i]))
                             for i in test if trials[i].config_hash in trained]


def blend_choice(replay: Replay, trials: list, folds: int = 5) -> dict[str, bool]:
    """Per metric, whether the blend (weight :data:`CHOSEN_WEIGHT`) predicted held-out
    workloads of ``trials`` better than the curves alone (MAPE over the inner workload folds):
    a choice made on the training side only."""
    errors = _rate_candidates()
    for _, held in _workload_splits(replay, trials, folds):
        for t, curves, sim in held:
            _score_trial(errors, t, curves, sim)
    blend = _blend_name(CHOSEN_WEIGHT)
    return {m: bool(by["curves"]) and float(np.mean(by[blend])) < float(np.mean(by["curves"]))
            for m, by in errors.items()}


def workload_folds(replay: Replay, usable: list, folds: int = 5, nested: bool = False) -> dict:
    """The eval's workload folds: curves against the batch model (and their blends) on trials
    whose config was measured on the training side. ``nested``: also the blend chosen per
    metric by inner workload folds of each training set (:func:`blend_choice`)."""
    errors = _rate_candidates(nested)
    choices: list[dict[str, bool]] = []
    for train_trials, held in _workload_splits(replay, usable, folds):
        blend = blend_choice(replay, train_trials, folds) if nested else None
        choices += [blend] if blend is not None else []
        for t, curves, sim in held:
            _score_trial(errors, t, curves, sim, blend)
    return _with_choices(_score(errors), choices)


def between_rates(replay: Replay, usable: list, between: set[str],
                  nested: bool = False) -> dict:
    held = [t for t in usable if t.uid in between]
    train = [t for t in usable if t.uid not in between]
    if not held:
        return {}
    curves = fit_load_curves(train, blend=False)
    models = replay.fit(train)
    blend = blend_choice(replay, train) if nested else None
    errors = _rate_candidates(nested)
    for t in held:
        _score_trial(errors, t, curves, replay.predict(models, t), blend)
    return _with_choices(_score(errors), [blend] if blend is not None else [])


def _with_choices(scores: dict, choices: list[dict[str, bool]]) -> dict:
    """``scores`` with, under the chosen candidate of each metric, whether each fit's inner
    folds chose the blend (one entry per training set, in fold order)."""
    for m, by in scores.items():
        if CHOSEN in by:
            by[CHOSEN]["blended"] = [c[m] for c in choices]
    return scores


#: The held-out-configs test's blends: the batch model's figure and the knob-level answer
#: (the knob curves where they answer, else the surrogate: what an unmeasured config gets
#: today), or the surrogate alone, as the geometric mean with the simulator weight the load
#: curves' blend adopted (knowledge/curve_blend.py), named before these were scored.
BLEND_SHIPPED = f"blend with the knob-level answer, w = {SIM_WEIGHT}"
BLEND_SURROGATE = f"blend with the surrogate, w = {SIM_WEIGHT}"


def _mixed(answer: float | None, simulated: float | None) -> float | None:
    if answer is None or simulated is None or not answer > 0 or not simulated > 0:
        return None
    return mix(answer, simulated, SIM_WEIGHT)


def held_out_configs(replay: Replay, usable: list) -> dict:
    """Leave one config out (its curve identity); the batch model of its class, fitted on the
    class's other configs, against the knob-level curve model and the surrogate, and blended
    with each (:data:`BLEND_SHIPPED`, :data:`BLEND_SURROGATE`)."""
    wl = [workload_features(t.workload_spec) for t in usable]
    rate = "rate_rps"
    identity = [config_key(t.config, w, rate, replay.unvaried) for t, w in zip(usable, wl,
                                                                                strict=True)]
    shipped = f"curves from knobs ({KNOB_CURVE_FAMILY})"
    errors: dict[str, dict[str, list[float]]] = {
        m: {"batch model": [], shipped: [], "surrogate": [], BLEND_SHIPPED: [],
            BLEND_SURROGATE: []} for m in METRICS}
    inside: dict[str, dict[str, list[bool]]] = {m: {} for m in METRICS}
    for held in sorted(set(identity)):
        test = [i for i, k in enumerate(identity) if k == held]
        train = [i for i, k in enumerate(identity) if k != held]
        cls = replay.step_class(usable[test[0]].config)
        same_class = [usable[i] for i in train if replay.usable(usable[i])
                      and replay.step_class(usable[i].config) == cls]
        if not same_class:
            continue
        train_trials = [usable[i] for i in train]
        models = replay.fit(same_class)
        curves = fit_load_curves(train_trials, blend=False)
        encoder = FeatureEncoder().fit([t.config for t in train_trials], [wl[i] for i in train])
        knob = (KnobCurveModel(family=KNOB_CURVE_FAMILY).fit(curves, encoder.transform)
                if curves is not None and KNOB_CURVE_FAMILY else None)
        for m in METRICS:
            X, y, groups, _ = _xy(train_trials, encoder, m)
            kind = metric_transform(m, y)
            law = cost_law(encoder, m) if kind == "log" else None
            reg = IntervalRegressor(family=DEFAULT_FAMILY, cost_law=law).fit(
                X, _forward(kind, y), groups)
            for i in test:
                t = usable[i]
                sim = replay.predict(models, t)
                c, lo, hi = reg.predict_interval(encoder.transform([t.config], [wl[i]]))
                surrogate = float(_inverse(kind, c)[0])
                p = knob.predict(t.config, wl[i], m) if knob is not None else None
                answer = p[0] if p else surrogate
                simulated = sim.get(m) if sim else None
                low, high = ((p[1], p[2]) if p else (float(_inverse(kind, lo)[0]),
                                                     float(_inverse(kind, hi)[0])))
                _cover(inside[m], t.metrics.get(m), answer, low, high, simulated)
                row = {"batch model": _ape(simulated, t.metrics.get(m)),
                       shipped: _ape(answer, t.metrics.get(m)),
                       "surrogate": _ape(surrogate, t.metrics.get(m)),
                       BLEND_SHIPPED: _ape(_mixed(answer, simulated), t.metrics.get(m)),
                       BLEND_SURROGATE: _ape(_mixed(surrogate, simulated), t.metrics.get(m))}
                scored = {name: v for name, v in row.items() if v is not None}
                if len(scored) == len(row):  # the same trials for every candidate
                    for name, v in scored.items():
                        errors[m][name].append(v)
    scores: dict[str, Any] = _score(errors)
    for m, by in inside.items():
        if any(by.values()):
            scores.setdefault(m, {})["90 % interval coverage"] = {
                name: float(np.mean(v)) for name, v in by.items() if v}
    return scores


def _cover(inside: dict[str, list[bool]], truth: Any, answer: float, low: float, high: float,
           simulated: float | None) -> None:
    """Whether ``truth`` lies inside the knob-level interval, that interval's log half-width
    around the blend (what an answer gives since 2026-12-05) and the same widened to hold the
    knob-level interval too (never more optimistic at either end; the first version)."""
    blended = _mixed(answer, simulated)
    if not isinstance(truth, int | float) or blended is None or not 0 < low <= answer <= high:
        return
    half = max(math.log(high / answer), math.log(answer / low))
    around = (blended * math.exp(-half), blended * math.exp(half))
    for name, (a, b) in (("knob level", (low, high)),
                         ("blend, widened", (min(low, around[0]), max(high, around[1]))),
                         ("blend, centred", around)):
        inside.setdefault(name, []).append(a <= truth <= b)


def predict(trials: list, configs: list[dict], runs: list[tuple[float, int]], like: str,
            frontend_costs: Sequence[float] = FRONTEND_TOKEN_MS) -> list[dict]:
    """Predictions for configs never measured: each at each (rate, seed), on the workload of the
    shipped trial ``like`` (its uid) moved to that rate (its arrival window kept) and seed,
    from the batch model of the config's step class fitted on every shipped trial."""
    template = next(t for t in trials if t.uid == like)
    context = [t for t in trials if context_of(t) == context_of(template)]
    usable = _usable(context)
    replay = Replay(template.target, usable, frontend_costs)
    models = replay.fit(usable)
    params = template.workload_spec["params"]
    window = params["n_requests"] / params["arrival"]["rate_rps"]
    out = []
    for config in configs:
        full = replay.defaults | config
        model = models.get(replay.step_class(full))
        for rate, seed in runs:
            p = {**params, "arrival": {**params["arrival"], "rate_rps": rate},
                 "n_requests": max(1, round(window * rate)), "seed": seed}
            spec = LLMWorkloadSpec.from_params(p)
            stream = RequestStream(*request_shapes(spec), spec.drain_limit_s)
            figures = model.predict(stream, *replay.limits(full)) if model else None
            row = {"config": config, "rate_rps": rate, "seed": seed,
                   "n_requests": p["n_requests"],
                   "predicted": {m: figures[m] for m in METRICS} if figures else None,
                   "step_model": list(model.step.as_tuple()) if model else None}
            out.append(row)
            shown = ("no measured step class" if figures is None else
                     "  ".join(f"{m} {figures[m]:8.1f}" for m in METRICS))
            print(f"{json.dumps(config):50} {rate:6.1f} req/s seed {seed:2d}  {shown}")
    return out


def prospective(trials: list, predictions: Path, measured: Sequence[Path]) -> list[dict]:
    """The committed predictions (``--predict --json``) against the trials measured after
    them, beside what the shipped models answer for the same configs, fitted on the shipped
    trials only: the context's predictions (since 2026-12-05 the knob-level answer blended with
    the context's simulator where that places the config) and the knob-level answer alone
    (load curves predicted from the knobs where they answer, else the surrogate)."""
    from knowledge.surrogates import fit_context

    rows = json.loads(predictions.read_text())
    store = temp_store("measured.db")
    for path in measured:
        import_file(store, path)
    new = [t for t in store.list_trials(TrialFilter(status=TrialStatus.COMPLETE)) if t.metrics]
    if not new:
        return []
    key = context_of(new[0])
    shipped = _usable([t for t in trials if context_of(t) == key])
    models = fit_context(key, shipped, score=False)
    out = []
    for t in sorted(new, key=lambda t: (json.dumps(t.config, sort_keys=True),
                                        t.workload_spec["params"]["arrival"]["rate_rps"])):
        params = t.workload_spec["params"]
        row = next((r for r in rows if r["rate_rps"] == params["arrival"]["rate_rps"]
                    and r["seed"] == params["seed"]
                    and all(t.config.get(k) == v for k, v in r["config"].items())), None)
        if row is None or not row["predicted"]:
            continue
        features = workload_features(t.workload_spec)
        today = models.predict([t.config], features, METRICS)
        blend, models.load_curves.blend_ = models.load_curves.blend_, None  # type: ignore[union-attr]
        try:
            knob_level = models.predict([t.config], features, METRICS)
        finally:
            models.load_curves.blend_ = blend  # type: ignore[union-attr]
        entry = {"config": row["config"], "rate_rps": row["rate_rps"], "seed": row["seed"],
                 "validity": t.details.get("validity"), "measured": {}, "simulator": {},
                 "shipped models": {}, "knob level": {}, "shipped interval": {},
                 "knob-level interval": {}}
        for m in METRICS:
            truth = t.metrics.get(m)
            entry["measured"][m] = truth
            entry["simulator"][m] = row["predicted"][m]
            entry["shipped models"][m] = float(today[m][0][0]) if m in today else None
            entry["knob level"][m] = float(knob_level[m][0][0]) if m in knob_level else None
            for name, got in (("shipped interval", today), ("knob-level interval", knob_level)):
                entry[name][m] = ([float(got[m][1][0]), float(got[m][2][0])] if m in got
                                  else None)
        out.append(entry)
        print(f"{json.dumps(row['config']):52} {row['rate_rps']:5.1f} req/s  " + "  ".join(
            f"{m} {entry['measured'][m]:8.1f} sim {entry['simulator'][m]:8.1f} "
            f"models {entry['shipped models'][m] or float('nan'):8.1f}" for m in METRICS))
    for m in METRICS:
        for name in ("shipped interval", "knob-level interval"):
            held = [e["measured"][m] for e in out if e[name][m] is not None]
            inside = sum(e[name][m][0] <= e["measured"][m] <= e[name][m][1] for e in out
                         if e[name][m] is not None)
            print(f"{m:20} {name:19} n={len(held):2d}  inside the 90 % interval: {inside}")
        for name in ("simulator", "shipped models", "knob level"):
            errs = [abs(e[name][m] - e["measured"][m]) / e["measured"][m] for e in out
                    if e[name][m] is not None and e["measured"][m]]
            if errs:
                print(f"{m:20} {name:15} n={len(errs):2d}  MAPE {np.mean(errs):6.1%}  "
                      f"median {np.median(errs):6.1%}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--predict", action="append", type=json.loads, default=[],
                        metavar="CONFIG_JSON",
                        help="predict this unmeasured config (knobs that differ from the "
                             "space's defaults) instead of running the tests; repeatable")
    parser.add_argument("--runs", default="30:9,15:10,45:11,60:12",
                        help="with --predict: rate:seed pairs (default %(default)s)")
    parser.add_argument("--like", help="with --predict: the uid of the shipped trial whose "
                                       "workload the predicted runs share")
    parser.add_argument("--score", type=Path, metavar="PREDICTIONS_JSON",
                        help="score these committed predictions against --measured trials "
                             "instead of running the tests")
    parser.add_argument("--measured", type=Path, action="append", default=[],
                        help="with --score: an exported trials file (repeatable)")
    parser.add_argument("--frontend-costs", default=",".join(map(str, FRONTEND_TOKEN_MS)),
                        help="the frontend's costs per output token (ms) the fit chooses from "
                             "(default %(default)s; 0 alone: no frontend)")
    parser.add_argument("--tests", default="folds,between,configs",
                        help="which tests, comma-separated (folds, between, configs)")
    parser.add_argument("--nested", action="store_true",
                        help="held-out-rate tests: also score the blend chosen per metric by "
                             "inner workload folds of each training set (about 6x the fits)")
    args = parser.parse_args()
    store = shipped_store()
    done = TrialFilter(status=TrialStatus.COMPLETE)
    trials = [t for t in store.list_trials(done) if t.metrics]
    report: dict[str, Any] = {}
    by_context: dict[Any, list] = {}
    for t in trials:
        by_context.setdefault(context_of(t), []).append(t)
    costs = [float(c) for c in args.frontend_costs.split(",")]
    if args.score:
        rows = prospective(trials, args.score, args.measured)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return
    if args.predict:
        if not args.like:
            parser.error("--predict needs --like UID")
        runs = [(float(r), int(sd)) for r, sd in (x.split(":") for x in args.runs.split(","))]
        rows = predict(trials, args.predict, runs, args.like, costs)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return
    tests = set(args.tests.split(","))
    held_store = temp_store("between.db")
    import_file(held_store, shipped_file(BETWEEN))
    between = {t.uid for t in held_store.list_trials(done)}
    for key, ctx in sorted(by_context.items(), key=lambda kv: kv[0].label()):
        usable = _usable(ctx)
        try:
            replay = Replay(key.target, usable, costs)
        except Exception:  # no search space of that name: not a served target
            continue
        if not any(replay.usable(t) for t in usable):
            continue
        label = key.label()
        results = {}
        if "folds" in tests:
            results["workload folds"] = workload_folds(replay, usable, nested=args.nested)
        if "between" in tests:
            results["between rates"] = between_rates(replay, usable, between, args.nested)
        if "configs" in tests:
            results["held-out configs"] = held_out_configs(replay, usable)
        report[label] = results
        for test, by_metric in results.items():
            for m, cands in by_metric.items():
                if not cands:  # no trial of this test in this context (e.g. one step class)
                    continue
                scored = {name: s for name, s in cands.items() if "mape" in s}
                if not scored:
                    continue
                line = "  ".join(f"{name} {s['mape']:6.1%} (median {s['median_ape']:5.1%})"
                                 for name, s in scored.items())
                if (cover := cands.get("90 % interval coverage")):
                    line += "  coverage " + ", ".join(f"{k} {v:.0%}" for k, v in cover.items())
                n = next(iter(scored.values()))["n"]
                print(f"{label:40} {test:17} {m:20} n={n:3d}  {line}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
