"""An open PR's diff as the head side: its record's claims with the diff applied, kept in the
evidence.

The diff is the file beside the record (``kb/N.diff``, as ``gh pr diff N``
writes it). After ``gdn-review run``'s suite (and ``matrix``'s runs) the command
calls ``add_to_evidence``: the diff is reviewed with the record as its own PR
(``orchestrate.review``: a copy of the release's files with the diff applied,
never the installed vLLM) on the release the tests ran on, and the result is
added to that release's evidence file as its ``diff`` part for the record:
each claim's verdict with the change, the cases that fail, the fields that
moved and whether the record explains them. The report then reads an
improvement claim as pending on the release and **discriminating** with the
diff, and a claim of no change as **preserved**.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from gdn_review.common import unified_diff
from gdn_review.common.vocabulary import Verdict
from gdn_review.review import orchestrate


def wanted(records: dict) -> dict[Path, Path]:
    """record path -> its diff, for the records of open (or closed, unmerged) PRs that have one
    beside them.

    Each diff is read here, before anything runs: a diff from a stranger that
    names a file outside vLLM's tree (or is no diff) stops the command (PatchError).
    """
    found = {}
    for path, record in records.items():
        if not record.is_open:
            continue
        diff = unified_diff.stored_beside(path)
        if diff is not None:
            unified_diff.read_diff_file(diff)  # PatchError names the file and what is wrong
            found[path] = diff
    return found


def run_diff_side(
    record,
    diff: Path,
    kb_dir: Path,
    release: str,
    generated: Path,
    say: Callable[[str], None] = print,
) -> dict:
    """The record's claims with its PR's diff applied onto ``release``: the evidence's ``diff`` part
    for the record."""
    own = record.key
    options = orchestrate.ReviewOptions(
        (own,), onto=release, generated_dir=generated, max_mutants=0, own=own
    )
    data = orchestrate.review(diff, kb_dir, options, say)
    effect = next((r for r in data["records"] if r["key"] == record.key), None)
    part = {
        "release": data["onto"],
        "diff": str(diff),
        "diff_sha256": data["diff_sha256"],
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "claims": {},
        "moved": 0,
        "unexplained": [],
    }
    if effect is None:
        reason = f"the diff changes no file of the record's target ({record.target.file})"
        part["claims"] = {
            c.id: {"verdict": Verdict.UNVERIFIED, "reason": f"not run: {reason}", "measured": ""}
            for c in record.claims
        }
        return part
    for claim in effect["claims"]:
        verdict = Verdict.of(claim["after"]) or Verdict.UNVERIFIED  # "not run: ...": none
        part["claims"][claim["id"]] = {
            "verdict": verdict,
            "reason": claim["reason_after"] or claim["after"],
            "measured": claim["measured_after"],
            "failing": claim["failing_after"],
        }
    part["moved"] = len(effect["moved"])
    part["unexplained"] = [
        {"case": row["case"], "fields": row["fields"]} for row in effect["unexplained"]
    ]
    return part


def add_to_evidence(
    record_path: Path,
    record,
    release: str,
    evidence: Path,
    kb_dir: Path,
    generated: Path,
    say: Callable[[str], None] = print,
) -> bool:
    """The PR's diff side on ``release``, added to the evidence of that release (`run`'s, or the
    matrix's base release's); False: no diff stored."""
    diff = unified_diff.stored_beside(record_path)
    if diff is None or not record.is_open:
        return False
    from gdn_review.run import evidence_file

    say(f"[diff] {record.label}: its diff {diff} applied onto a copy of vLLM {release}'s files")
    stamp = evidence_file.record_sha256(record_path)  # the record as the diff side starts
    part = {
        **run_diff_side(record, diff, kb_dir, release, generated, say=say),
        "record_sha256": stamp,
    }
    evidence_file.add_part(evidence, "diff", record.key, part)
    return True
