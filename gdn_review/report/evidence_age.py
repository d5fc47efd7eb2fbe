"""How old each part of a record's evidence is: the tests, the mutants, the diff side, the bench;
which are stale.

Each command keeps its latest result in the evidence (``run.evidence``),
so one report can mix parts of different times; the report says when each was
measured, how much older than the tests it is, and which parts were measured
on an earlier version of the record's file than the one there now (each part
keeps the sha256 of the record's file as it was when the part ran).
"""

from __future__ import annotations

from pathlib import Path

from gdn_review.common.vocabulary import NOT_MEASURED, RAN
from gdn_review.kb import Record
from gdn_review.run.evidence_file import Evidence, record_sha256


def stale_parts(
    record: Record, evidence: Evidence, path: Path | None, tests: list[dict]
) -> dict[str, str]:
    """Part -> "stale: ..." for each part of the evidence measured on an earlier version of the
    record's file.

    A part's ``record_sha256`` (the file when it ran) against the file now;
    a part without one (older evidence) or a record whose file is not known
    is never stale. Parts: ``tests``, ``mutants``, ``diff`` (the open PR's
    diff side), ``bench (DEVICE)``; each line names the command that measures it again.
    """
    current = record_sha256(path) if path is not None else None
    if current is None:
        return {}
    key, name = record.key, str(record.key)  # evidence JSON's keys are text
    edited = f"an earlier version of {path} (edited since)"
    found = {}
    ran_on = {
        evidence.tests_record_hash(t["environment"], key)
        for t in tests
        if t["environment"] is not None
    }
    if ran_on - {None, current}:
        found["tests"] = (
            f"stale: the tests of {record.label} ran on {edited}; run "
            f"`gdn-review run --record {key}`"
        )
    if (evidence.mutation.get(name) or {}).get("record_sha256") not in (None, current):
        found["mutants"] = (
            f"stale: the mutation results of {record.label} were measured on "
            f"{edited}; run `gdn-review mutate --record {key}`"
        )
    if (evidence.diff.get(name) or {}).get("record_sha256") not in (None, current):
        found["diff"] = (
            f"stale: the results with the PR's diff of {record.label} were "
            f"measured on {edited}; run `gdn-review run --record {key}`"
        )
    for device, result in sorted(evidence.bench.get(name, {}).items()):
        if result.get("record_sha256") not in (None, current):
            on = " --device cuda" if device == "cuda" else ""
            found[f"bench ({device})"] = (
                f"stale: the bench ({device}) of {record.label} was measured on "
                f"{edited}; run `gdn-review bench --record {key}{on}`"
            )
    return found


def evidence_parts(
    record: Record,
    evidence: Evidence,
    tests: list[dict],
    diff_side: dict | None,
    stale: dict[str, str] | None = None,
) -> list[str]:
    """How old each part of the evidence is: the tests, the mutants, the diff side, the bench; and
    which are ``stale``."""
    stale = stale or {}

    def mark(part: str) -> str:
        return ", stale: measured on an earlier version of the record" if part in stale else ""

    # A test that could not run was tried then too: its time is the tests'.
    ran = [
        t
        for t in tests
        if t["environment"] is not None and (t["outcome"] in RAN or t["outcome"] in NOT_MEASURED)
    ]
    newest = max((evidence.finished_at[t["environment"]] for t in ran), default="")
    parts = [f"tests: {newest or 'none ran'}{mark('tests')}"]
    info = evidence.mutation.get(str(record.key))
    if info:
        parts.append(
            f"mutants: {info.get('finished_at') or '?'} (vLLM "
            f"{info.get('release', '?')}){age(info.get('finished_at'), newest)}{mark('mutants')}"
        )
    else:
        parts.append("mutants: not run (`gdn-review mutate`)")
    if diff_side:
        parts.append(
            f"the PR's diff: {diff_side['finished_at']} (onto vLLM "
            f"{diff_side['release']}){age(diff_side['finished_at'], newest)}{mark('diff')}"
        )
    for device, result in sorted(evidence.bench.get(str(record.key), {}).items()):
        parts.append(
            f"bench ({device}): {result.get('finished_at', '?')}{mark(f'bench ({device})')}"
        )
    return parts


def age(then: str | None, tests: str) -> str:
    """`` (2 h 5 min before the tests)``: how much older a part is than the tests ('' when it is
    not, or unknown)."""
    import datetime

    def parse(value):
        try:
            moment = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)

    a, b = parse(then), parse(tests)
    if a is None or b is None or b <= a:
        return ""
    minutes = int((b - a).total_seconds() // 60)
    if minutes < 1:
        return ""
    shown = (
        f"{minutes // 1440} d {minutes % 1440 // 60} h"
        if minutes >= 1440
        else f"{minutes // 60} h {minutes % 60} min"
        if minutes >= 60
        else f"{minutes} min"
    )
    return f" ({shown} before the tests)"
