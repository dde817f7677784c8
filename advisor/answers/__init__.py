"""Answers to "here is my SLO — what config?": one request, one planner, one document.

``RecommendationRequest`` -> :func:`plan_recommendation` -> :class:`Answer`, for every door
(CLI, REST, cheat-sheet, sweeps' report). The rule deciding "config C meets the SLO at workload
W" lives in :mod:`advisor.answers.rule` and is applied to the default and every candidate alike.
"""

from advisor.answers.document import Answer, answer_json_schema
from advisor.answers.planner import ModelsSource, plan_recommendation
from advisor.answers.request import RecommendationRequest, ResolvedQuestion, resolve
from advisor.answers.rule import MEET_SHARE, Verdict

__all__ = ["MEET_SHARE", "Answer", "ModelsSource", "RecommendationRequest", "ResolvedQuestion",
           "Verdict", "answer_json_schema", "plan_recommendation", "resolve"]
