"""Open endpoints do not hand out the serving host's absolute paths (log tails, local model
directories); each keeps its last part, and URLs are left alone."""

from __future__ import annotations

from api.redact import redact_paths
from api.routes.trials import trial_public
from knowledge import TrialRecord


def test_paths_keep_only_their_last_part_and_urls_stay() -> None:
    text = ('crashed\n--- log tail ---\n  File "/home/alice/.cache/slo-advisor/x/runner.py", '
            "line 3\nsee http://127.0.0.1:8000/v1/trials and /tmp/advisor-trial-12-abc/log.txt;"
            " 3/4 of the requests")
    out = redact_paths(text)
    assert "alice" not in out and "/tmp/" not in out
    assert '".../runner.py"' in out and ".../log.txt" in out
    assert "http://127.0.0.1:8000/v1/trials" in out and "3/4 of the requests" in out
    assert redact_paths({"model": "/models/llama-3", "n": 3}) == {"model": ".../llama-3", "n": 3}


def test_a_trials_public_view_redacts_its_error_and_workload() -> None:
    trial = TrialRecord(
        id=1, study_id=1, number=0, target="vllm", config={}, config_hash="c",
        workload_spec={"kind": "llm-serving", "name": "chat",
                       "params": {"model": "/srv/models/secret-llama"}},
        workload_hash="w", hardware={}, hardware_key="cpu", advisor_version="0",
        status="failed", error_type="crash",
        error="engine died\n--- log tail ---\nOSError: /srv/models/secret-llama/config.json")
    public = trial_public(trial)
    assert "/srv" not in (public.error or "") and ".../config.json" in (public.error or "")
    assert public.workload["params"]["model"] == ".../secret-llama"
