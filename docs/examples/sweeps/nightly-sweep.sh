#!/usr/bin/env bash
# Nightly sweep wrapper: runs `advisor sweep run`, keeps its JSON summary, exits with its code.
#
# Exit code (the sweep's): 0 every cell ran and nothing regressed, 3 regression, 4 failing cell,
# 5 both, 130 interrupted (the next run resumes it), 2 bad usage or an error before any cell ran.
#
# Settings, all from the environment (the crontab or a systemd EnvironmentFile sets them):
#   ADVISOR_DB_URL  the shared store, read by advisor itself (default: a SQLite file of this user)
#   ADVISOR         the advisor command (default: advisor on PATH; cron's PATH is short, so give
#                   the full path of the virtual environment's advisor there)
#   SWEEP_FILE      the sweep file (default: sweeps/nightly.yaml, relative to the working dir)
#   REPORT_ROOT     where each run's report dir and JSON summary are kept
#                   (default: $HOME/advisor-sweeps)
#   ALERT_HOOK      optional executable, called as `ALERT_HOOK CODE SUMMARY_FILE` when the sweep
#                   does not exit 0 (post to chat, open a ticket, ...)
set -uo pipefail

advisor=${ADVISOR:-advisor}
sweep_file=${SWEEP_FILE:-sweeps/nightly.yaml}
report_root=${REPORT_ROOT:-$HOME/advisor-sweeps}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
summary="$report_root/$stamp.json"
mkdir -p "$report_root"

echo "$(date -u +%FT%TZ) nightly sweep $sweep_file starting"
# Progress goes to stderr (the log); --json puts the summary alone on stdout. The run also writes
# summary.json and the rebuilt cheat-sheets into its report dir.
"$advisor" sweep run "$sweep_file" --json --report-dir "$report_root/$stamp" >"$summary"
code=$?

if [[ -s "$summary" ]]; then
    ln -sfn "$stamp.json" "$report_root/latest.json"
else
    rm -f "$summary"  # interrupted or refused before a summary existed
    summary=""
fi
echo "$(date -u +%FT%TZ) nightly sweep $sweep_file exited $code${summary:+; summary $summary}"

if [[ $code -ne 0 && -n "${ALERT_HOOK:-}" ]]; then
    "$ALERT_HOOK" "$code" "${summary:-none}" || echo "alert hook $ALERT_HOOK failed" >&2
fi
exit "$code"
