"""How old each part of a record's evidence is: the tests, the mutants, the diff side, the bench.

Each command keeps its latest result in the evidence (``run.evidence_parts``),
so one report can mix parts of different times; the report says when each was
measured, and how much older than the tests it is.
"""

from __future__ import annotations

from gdn_review.kb import Record
from gdn_review.report.verdicts import RAN, Evidence


def evidence_parts(record: Record, evidence: Evidence, tests: list[dict], diff_side: dict | None) -> list[str]:
    """How old each part of the evidence is: the tests, the mutants, the diff side, the bench."""
    ran = [t for t in tests if t["environment"] is not None and t["outcome"] in RAN]
    newest = max((evidence.finished_at[t["environment"]] for t in ran), default="")
    parts = [f"tests: {newest or 'none ran'}"]
    info = evidence.mutation.get(str(record.number))
    if info:
        parts.append(f"mutants: {info.get('finished_at') or '?'} (vLLM {info.get('release', '?')}){age(info.get('finished_at'), newest)}")
    else:
        parts.append("mutants: not run (`gdn-review mutate`)")
    if diff_side:
        parts.append(f"the PR's diff: {diff_side['finished_at']} (onto vLLM {diff_side['release']}){age(diff_side['finished_at'], newest)}")
    for device, result in sorted(evidence.bench.get(str(record.number), {}).items()):
        parts.append(f"bench ({device}): {result.get('finished_at', '?')}")
    return parts


def age(then: str | None, tests: str) -> str:
    """`` (2 h 5 min before the tests)``: how much older a part is than the tests ('' when it is not, or unknown)."""
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
    shown = f"{minutes // 1440} d {minutes % 1440 // 60} h" if minutes >= 1440 else f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"
    return f" ({shown} before the tests)"
