"""The H100's hardware profile as shipped knowledge (issue 44), fitted from the probe windows only.

    PYTHONPATH=. python docs/benchmarks/h100-heldout-2026-12-06/profile.py

Reads the shipped H100 trials (knowledge/data/h100-vllm-heldout-2026-12-06.jsonl.gz, the same
export as this folder's trials-heldout.jsonl.gz), keeps the calibration probe's windows
(``h100-8b-chat-1206@<rate>rps`` at 8, 24, 40 and 64 req/s; the scored 12 and 36 req/s windows
share the study name and are left out), fits the profile exactly as predict.py does
(advisor/calibrate.py, the H200's repeated windows for the noise) and writes it as one profile
line (knowledge/profiles.py PROFILE_FORMAT) to knowledge/data/h100-vllm-profile-2026-12-06.jsonl.gz.
Deterministic: the uid and date are fixed and the gzip header carries no time, so running it
again writes the same bytes. ``--check`` fails (exit 1) where the shipped file differs.
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
TRIALS = "h100-vllm-heldout-2026-12-06.jsonl"
NOISE = "h200-vllm-crosscheck-2026-12-01.jsonl"
OUTPUT = ROOT / "knowledge/data/h100-vllm-profile-2026-12-06.jsonl.gz"
PROBE_STUDY = "h100-8b-chat-1206"
PROBE_RATES = (8.0, 24.0, 40.0, 64.0)
#: predict.py's uid and date: the profile it scored is this one.
UID = "h100-" + PROBE_STUDY
CREATED_AT = "2026-12-06"


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


def fit_profile() -> HardwareProfile:
    """The profile of the probe windows (see the module docstring)."""
    probe = [t for name, t in read_trials(read_trials_text(shipped_file(TRIALS)))
             if name.startswith(PROBE_STUDY + "@")
             and t.workload_spec["params"]["arrival"]["rate_rps"] in PROBE_RATES]
    noise_trials = [t for _, t in read_trials(read_trials_text(shipped_file(NOISE)))]
    return calibrate_from_trials(probe, noise=window_noise(noise_trials, "vllm"),
                                 noise_source=NOISE, uid=UID, created_at=CREATED_AT)


def profile_bytes(profile: HardwareProfile) -> bytes:
    """The gzip-compressed profile line, with no time or file name in its header."""
    line = profile_line(profile) + "\n"
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", filename="", mtime=0) as f:
        f.write(line.encode())
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the shipped file instead of writing it")
    args = ap.parse_args(argv)
    data = profile_bytes(fit_profile())
    if args.check:
        same = OUTPUT.exists() and OUTPUT.read_bytes() == data
        print(f"{OUTPUT.name}: {'up to date' if same else 'differs: run without --check'}")
        return 0 if same else 1
    OUTPUT.write_bytes(data)
    print(f"wrote {OUTPUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
