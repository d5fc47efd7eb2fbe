"""An open PR's diff as the head side: its record's claims with the diff applied, kept in the
evidence.

The diff is the file beside the record (``kb/N.diff``, as ``gh pr diff N``
writes it). ``gdn-review run`` reviews it with the record as its own PR
(``orchestrate.review``: a copy of the release's files with the diff
applied, never the installed vLLM) on the release the tests just ran on, and
adds the result to the evidence file as its ``diff`` part for that record:
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
from gdn_review.review import orchestrate
from gdn_review.review.onto_release import onto_release
from gdn_review.review.review_files import ReviewError


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
    timeout: float = 300.0,
) -> dict:
    """The record's claims with its PR's diff applied onto ``release``: the evidence's ``diff`` part
    for the record."""
    data = orchestrate.review(
        diff,
        kb_dir,
        (record.key,),
        onto=release,
        generated=generated,
        timeout=timeout,
        max_mutants=0,
        say=say,
        own=record.key,
    )
    effect = next((r for r in data["records"] if r["number"] == record.key), None)
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
            c.id: {"verdict": "unverified", "reason": f"not run: {reason}", "measured": ""}
            for c in record.claims
        }
        return part
    for claim in effect["claims"]:
        verdict = claim["after"] if not claim["after"].startswith("not run") else "unverified"
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


def release_with_diff(
    diff: Path, release: str, folder: Path, say: Callable[[str], None] = print
) -> tuple[Path, Path]:
    """(the release's files, the same with the PR's ``diff`` applied): two folders holding vllm/
    (`gdn-review bench`'s two sides).

    The diff is applied as a review applies it: every name checked, nothing
    outside vLLM's tree (``patch``); a tree of links to the release's files
    with only the changed files written, in ``folder`` (``tree.overlay``).
    """
    from gdn_review.review import tree

    onto = onto_release(release, None, say)
    _, files = unified_diff.read_diff_file(
        diff
    )  # PatchError: a file name that leaves vLLM's tree, or no diff
    in_tree = [
        f for f in files if any(p and p.startswith("vllm/") for p in (f.old_path, f.new_path))
    ]
    if not in_tree:
        raise ReviewError(
            f"{diff}: the diff changes no file of vLLM's Python package: nothing to time"
        )
    unified_diff.confine(in_tree, onto.tree, str(diff))
    patched = unified_diff.apply(
        in_tree, onto.read, str(diff)
    )  # PatchError: a hunk that does not apply
    return onto.tree, tree.overlay(onto.tree, patched, Path(folder) / "tree")


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
    stamp = evidence_file.record_sha256(
        record_path
    )  # the record as it is when the diff side starts
    part = {
        **run_diff_side(record, diff, kb_dir, release, generated, say=say),
        "record_sha256": stamp,
    }
    evidence_file.add_part(evidence, "diff", record.key, part)
    return True
