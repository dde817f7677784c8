"""plan_study: every front door's study request checked and named by one service: the same
request names the same study whichever door it came through, and each door's errors read in
its own spelling."""

from __future__ import annotations

import pytest

from advisor.cli.tune import CLI_DOOR
from advisor.driver import StudyDriver
from advisor.errors import StudyError, WorkloadError
from advisor.jobs import API_DOOR
from advisor.samplers import SAMPLERS
from advisor.settings import Settings
from advisor.study_request import StudyRequest, plan_study
from knowledge import TrialStore


def test_the_default_name_is_the_same_for_every_door() -> None:
    cli = plan_study(StudyRequest(target="scripted", slo="p95_latency_ms<=5", door=CLI_DOOR))
    api = plan_study(StudyRequest(target="scripted", slo="p95_latency_ms<=5", from_client=True,
                                  door=API_DOOR))
    assert cli.spec.name == api.spec.name and cli.spec.name.startswith("scripted-")
    other = plan_study(StudyRequest(target="scripted", slo="p95_latency_ms<=6"))
    assert other.spec.name != cli.spec.name


def test_requests_are_checked_against_the_target() -> None:
    with pytest.raises(StudyError, match="does not report the objective metric"):
        plan_study(StudyRequest(target="scripted", objective="maximize:ttft_p95_ms"))
    with pytest.raises(StudyError, match="unknown sampler 'nope'; choose one of "
                                         + ", ".join(SAMPLERS)):
        plan_study(StudyRequest(target="scripted", sampler="nope"))
    with pytest.raises(WorkloadError, match="not a preset of scripted"):
        plan_study(StudyRequest(target="scripted", workload="missing"))
    with pytest.raises(WorkloadError, match="presets: "):  # a client never names a file
        plan_study(StudyRequest(target="scripted", workload="missing", from_client=True))


def test_resume_and_name_rules_use_the_store(store: TrialStore, settings: Settings) -> None:
    request = StudyRequest(target="scripted", slo="p95_latency_ms<=5", trials=1, name="s",
                           paired_repeats=0, door=CLI_DOOR)
    plan = plan_study(request, store)
    assert not plan.resume
    StudyDriver(store, settings).run(plan.spec)
    with pytest.raises(StudyError, match=r"already exists \(1 trials\); pass --resume"):
        plan_study(request, store)
    resumed = plan_study(StudyRequest(target="scripted", name="s", resume=True), store)
    assert resumed.resume and resumed.stored is not None
    with pytest.raises(StudyError, match="--resume of study 's' with different settings: SLO"):
        plan_study(StudyRequest(target="scripted", slo="p95_latency_ms<=9", name="s",
                                resume=True, door=CLI_DOOR), store)
    with pytest.raises(StudyError, match="`enqueue` applies when a study starts"):
        plan_study(StudyRequest(target="scripted", name="s", resume=True,
                                enqueued=({"x": 0.5},), door=API_DOOR), store)
