"""The H200's hardware profiles of the 8B and 1B shapes as shipped knowledge (issue 44): what a
calibration of each would have pinned, fitted from the cross-check's windows of vLLM's defaults.

    PYTHONPATH=. python docs/benchmarks/h200-crosscheck-2026-12-01/profiles.py

The H200 measured both shapes' defaults in one session (knowledge/data/
h200-vllm-crosscheck-2026-12-01.jsonl.gz): ``h200-8b-chat-1201-defaults@<rate>rps`` (15 to 120
req/s) and ``h200-1b-chat-1201-defaults@<rate>rps`` (30 to 210 req/s), the `chat` preset, with
the server's own metrics and each request's first-token latency. Each study's windows are fitted
exactly as a calibration probe's (advisor/calibrate.py), the same file's repeated windows giving
the noise. The planner reads the pair to carry a profile of one shape on another GPU to the other
shape (advisor/answers/calibration.py: the ratio of their step costs). Deterministic: fixed uids
and dates, no time in the gzip header; ``--check`` fails (exit 1) where the shipped file differs.
Fitting takes a few minutes (each window is predicted by a fit of the others).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
from pathlib import Path

from advisor.calibrate import calibrate_from_trials, window_noise
from knowledge.models import TrialRecord
from knowledge.profiles import HardwareProfile, profile_line
from knowledge.transfer import FORMAT, read_trials_text, shipped_file

ROOT = Path(__file__).resolve().parents[3]
TRIALS = "h200-vllm-crosscheck-2026-12-01.jsonl"
OUTPUT = ROOT / "knowledge/data/h200-vllm-profiles-2026-12-01.jsonl.gz"
STUDIES = ("h200-8b-chat-1201-defaults", "h200-1b-chat-1201-defaults")
CREATED_AT = "2026-12-01"


def read_trials(text: str) -> list[tuple[str, TrialRecord]]:
    """(study name, trial) of every trial line; each study gets its own id."""
    studies: dict[str, int] = {}
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("format") != FORMAT:
            continue
        name = row["study"]["name"]
        sid = studies.setdefault(name, len(studies) + 1)
        out.append((name, TrialRecord.model_validate({**row["trial"], "study_id": sid})))
    return out


def fit_profiles() -> list[HardwareProfile]:
    """One profile per study of :data:`STUDIES` (see the module docstring)."""
    trials = read_trials(read_trials_text(shipped_file(TRIALS)))
    noise = window_noise([t for _, t in trials], "vllm")
    return [calibrate_from_trials([t for name, t in trials if name.startswith(study + "@")],
                                  noise=noise, noise_source=TRIALS, uid=study,
                                  created_at=CREATED_AT)
            for study in STUDIES]


def profiles_bytes(profiles: list[HardwareProfile]) -> bytes:
    """The gzip-compressed profile lines, with no time or file name in its header."""
    text = "".join(profile_line(p) + "\n" for p in profiles)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", filename="", mtime=0) as f:
        f.write(text.encode())
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the shipped file instead of writing it")
    args = ap.parse_args(argv)
    data = profiles_bytes(fit_profiles())
    if args.check:
        same = OUTPUT.exists() and OUTPUT.read_bytes() == data
        print(f"{OUTPUT.name}: {'up to date' if same else 'differs: run without --check'}")
        return 0 if same else 1
    OUTPUT.write_bytes(data)
    print(f"wrote {OUTPUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
