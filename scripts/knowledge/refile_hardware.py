"""Re-file a trials file's trials under the hardware key their target declares.

A target that runs on the CPU only (``uses_accelerator = False``, e.g. a CPU vector index) is
filed under the CPU's key (``cpu-<model>-<cores>c``) even when the machine also had GPUs; trials
recorded before that rule carry the machine's GPU key. This rewrites each such line of a JSONL
(or ``.jsonl.gz``) export in place: the trial's ``hardware_key``, its fingerprint's ``key`` and
its study's keys (the study line, a paired comparison's context) become the filed key. Lines
already filed right are left byte for byte.

    python scripts/knowledge/refile_hardware.py knowledge/data/cpu-faiss-sweep-2026-12-02.jsonl.gz

After changing a shipped file, refit the shipped models (scripts/knowledge/fit_shipped_models.py).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

from advisor.trial_records import trial_hardware_key
from knowledge.transfer import read_trials_text

TRIAL_FORMAT = "slo-advisor-trial/1"


def refile_line(line: str) -> tuple[str, tuple[str, str] | None]:
    """The line re-filed, and the (old, new) key it changed (None: unchanged)."""
    row = json.loads(line)
    if row.get("format") != TRIAL_FORMAT:
        return line, None
    trial = row["trial"]
    old = str(trial.get("hardware_key", ""))
    new = trial_hardware_key(str(trial["target"]), trial.get("hardware") or {})
    if not old or new == old:
        return line, None
    # The old key names the machine everywhere in this line (the trial, its fingerprint, its
    # study, the study's paired-comparison context): JSON-quoted, so no other value matches.
    return line.replace(json.dumps(old), json.dumps(new)), (old, new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.files:
        lines = read_trials_text(path).splitlines()
        changed: Counter[tuple[str, str]] = Counter()
        out = []
        for line in lines:
            if not line.strip():
                continue
            new_line, change = refile_line(line)
            out.append(new_line)
            if change is not None:
                changed[change] += 1
        if not changed:
            print(f"{path}: every trial already filed right")
            continue
        text = "\n".join(out) + "\n"
        if path.name.endswith(".gz"):
            # mtime 0: the same content gives the same bytes on every run.
            with gzip.GzipFile(path, "wb", mtime=0) as f:
                f.write(text.encode())
        else:
            path.write_text(text)
        for (old, new), n in sorted(changed.items()):
            print(f"{path}: {n} trials re-filed from {old} to {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
