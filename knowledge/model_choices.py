"""The choices the fitted models offer a user (surrogate and failure-classifier families, how
cross-validation holds out and scores, the failure gate's default threshold), as plain values
that import nothing, so the command line lists them in ``--help`` without loading the models."""

from __future__ import annotations

__all__ = ["DEFAULT_FAILURE_FAMILY", "DEFAULT_FAILURE_THRESHOLD", "DEFAULT_SURROGATE_FAMILY",
           "FAILURE_FAMILIES", "GROUP_BY", "SCORE_ON", "SURROGATE_FAMILIES"]

#: Surrogate families that :class:`~knowledge.surrogates.regressor.IntervalRegressor`
#: implements (benchmarks/surrogates.py compares them on the shipped data; ``linear-forest`` is
#: the default).
SURROGATE_FAMILIES = ("linear-forest", "forest", "hgb-quantile", "gp")
DEFAULT_SURROGATE_FAMILY = "linear-forest"

#: How :func:`~knowledge.surrogates.validation.cross_validate` can group what it holds out
#: together.
GROUP_BY = ("config", "instance", "workload")

#: What :func:`~knowledge.surrogates.validation.cross_validate` scores a prediction against:
#: each ``trial``'s measurement, or the ``median`` of the repeats of one config at one workload
#: (one score per such group).
SCORE_ON = ("trial", "median")

#: Classifier families :class:`~knowledge.failures.FailureClassifier` implements (compared by
#: ``advisor knowledge eval --failures --family``; docs/knowledge.md has the figures).
FAILURE_FAMILIES = ("forest", "calibrated-forest", "hgb", "logistic")
DEFAULT_FAILURE_FAMILY = "forest"
#: The failure probability at or above which a config is skipped / dropped, chosen on the
#: shipped trials' held-out predictions (docs/knowledge.md, "Failure model").
DEFAULT_FAILURE_THRESHOLD = 0.7
