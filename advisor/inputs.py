"""Checks every front door applies to what a user gives — the CLI, the REST API, sweep files, the
driver's :class:`~advisor.driver.StudySpec` — so a value one accepts the others accept too.

- **Labels** (study names, hardware, model) are one line of printable text: they are printed into
  commands a user may paste into a shell (``tune_command``, ``# run on <hardware>`` comments) and
  into one-line errors, where a control character, a newline above all, would start a second
  command (:func:`check_label`, :data:`LABEL_PATTERN` for request models).
- **Numbers** in free-form mappings (workload parameters, fixed knobs, enqueued configs) are
  finite and at most :data:`MAX_NUMBER` in size: a 400-digit integer otherwise overflows the
  first float conversion deep inside a target (:func:`check_numbers`). Each field's own range is
  checked where it is declared (search-space knobs, workload schemas); this only keeps absurd
  magnitudes from reaching them.
- **SLOs a user asks for** have at least one bound and every bound can both hold and fail
  (:func:`requested_slo`): ``p95_latency_ms<=-1`` can never hold, ``recall_at_10>=0`` always
  does, and an empty SLO would make every trial feasible.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from advisor.errors import InputError, SLOParseError
from objectives.metrics import metric_spec
from objectives.slo import SLO, parse_slo

__all__ = ["LABEL_PATTERN", "MAX_NUMBER", "MAX_TRIALS", "STUDY_NAME_PATTERN", "check_label",
           "check_numbers", "check_study_name", "requested_slo"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: The label rule as a JSON-schema / pydantic ``pattern``.
LABEL_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"
#: The largest magnitude a number in a free-form mapping may have (2**53: every integer up to it
#: is exact as a float, so no conversion loses or overflows it).
MAX_NUMBER = 2**53
#: The most trials one study may be asked for, from the CLI or the API.
MAX_TRIALS = 1000
#: Units of quantities that are a positive time: a bound ``<= 0`` on them can never hold.
_TIME_UNITS = frozenset({"ms", "s"})


#: A name a user gives a new study (CLI ``--name``, API ``name``): a plain word, never a path.
#: Names the advisor derives itself may hold more (``<study>@<rate>rps``, ``<run>/<cell>``).
STUDY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
_STUDY_NAME = re.compile(STUDY_NAME_PATTERN)


def check_study_name(name: str) -> str:
    """``name`` when it may name a new study, else :class:`InputError` saying what may."""
    if not _STUDY_NAME.match(name):
        check_label(name, "a study name")
        raise InputError(f"a study name must be 1 to 200 letters, digits, '.', '_' or '-', "
                         f"starting with a letter or digit (no paths); got {name!r}")
    return name


def check_label(value: str, what: str) -> str:
    """``value`` when it is one line of printable text, else :class:`InputError` naming ``what``
    and the offending character."""
    if (bad := _CONTROL.search(value)) is not None:
        raise InputError(f"{what} must be one line of printable text, but it holds "
                         f"{bad.group()!r} at position {bad.start()}")
    return value


def check_numbers(value: Any, where: str) -> Any:
    """``value`` (a JSON-like tree) when every number in it is finite and at most
    :data:`MAX_NUMBER` in size, else :class:`InputError` naming the path to the first that is
    not."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_NUMBER:
            digits = len(str(abs(value))) if abs(value) < 10**4300 else "thousands of"
            raise InputError(f"{where} is a {digits}-digit number; numbers here must be at most "
                             f"2**53 ({MAX_NUMBER:,}) in size")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > MAX_NUMBER:
            raise InputError(f"{where} must be a finite number of at most 2**53 in size, got "
                             f"{value!r}")
        return value
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_numbers(item, f"{where}.{key}")
        return value
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_numbers(item, f"{where}[{i}]")
        return value
    return value


def requested_slo(text: str, known: Collection[str] | None = None) -> SLO:
    """Parse an SLO a user asks for (:func:`~objectives.slo.parse_slo`) and check that it says
    something: at least one bound, and none that can never hold or always holds (every metric in
    the catalogue is non-negative; fractions lie in [0, 1]; a time is positive). Stored SLOs are
    read with ``parse_slo`` as they were written. ``known``: the asked target's metrics, which
    an unknown name is matched against (its near miss, else its list)."""
    slo = parse_slo(text, known)
    if not slo.bounds:
        raise SLOParseError(f"the SLO {text!r} has no bound; give at least one, e.g. "
                            "'p95_latency_ms<=2' or 'ttft_p95_ms<=300,tpot_p95_ms<=40'")
    for bound in slo.bounds:
        spec = metric_spec(bound.metric)
        never = (bound.op == "<=" and (bound.threshold < 0 or (
            bound.threshold == 0 and spec.unit in _TIME_UNITS)))
        always = (bound.op == ">=" and bound.threshold <= 0) or (
            bound.op == "<=" and spec.unit == "fraction" and bound.threshold >= 1)
        if never:
            why = "a positive time" if spec.unit in _TIME_UNITS else "never negative"
            raise SLOParseError(f"SLO bound {str(bound)!r} can never hold: {bound.metric} is "
                                f"{why}")
        if always:
            raise SLOParseError(f"SLO bound {str(bound)!r} always holds, so it constrains "
                                f"nothing: {bound.metric} lies in "
                                f"{'[0, 1]' if spec.unit == 'fraction' else '[0, inf)'}")
    return slo
