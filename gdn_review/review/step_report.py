"""A release step's data as files: ``step.md`` (the step in one page, for a job summary),
``changes.draft.yaml`` (the changes.yaml entries still to write), beside the history section and
the reviews that ``release_step`` wrote.

Every string a release's source carries (hunk lines, headers, file names, mutants' edits) goes
through ``gdn_review.report.markdown``: code as code, text escaped, diffs in fences nothing
inside can close.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gdn_review.common.files import atomic_write
from gdn_review.common.vocabulary import KILLS
from gdn_review.report.markdown import cell, code, fence, text

DRAFT_HEAD = """\
# Draft kb/history/changes.yaml entries for vLLM {new}: hunks of the step {old} -> {new} and
# metadata fields that no entry names. For each: search the PR threads for its to_search
# terms (or add the hunks: tie to one of its candidates instead), then write `what`, and
# `pr:` with how strongly the thread ties it, or `searched:` with every query tried; drop
# to_search and candidates, and paste it under `changes:`. `gdn-review validate` checks it.
"""


def drafts_yaml(data: dict) -> str:
    body = yaml.safe_dump(
        {"changes": data["drafts"]}, sort_keys=False, allow_unicode=True, width=100
    )
    return DRAFT_HEAD.format(old=data["from"], new=data["to"]) + body


def _mutant_counts(review: dict) -> tuple[int, int, list[dict]]:
    mutants = review["mutants"]
    killed = [m for m in mutants if m["status"] in KILLS]
    named = [m for m in mutants if m["status"] not in KILLS]
    return len(killed), len(mutants), named


def headline(data: dict) -> str:
    if data["could_not_run"]:
        return f"release step {data['from']} → {data['to']}: could not run: {data['could_not_run']}"
    unexplained = sum(1 for r in data["hunks"] if not r["by"])
    killed = sum(_mutant_counts(r["review"])[0] for r in data["reviews"] if "review" in r)
    total = sum(_mutant_counts(r["review"])[1] for r in data["reviews"] if "review" in r)
    return (
        f"release step {data['from']} → {data['to']}: {len(data['hunks'])} hunk(s), "
        f"{unexplained} named by no changes.yaml entry; {len(data['history']['unexplained'])} "
        f"unexplained drift row(s); {killed} of {total} mutants of the new lines killed, "
        f"{len(data['unguarded'])} new line(s) no record guards"
    )


def markdown(data: dict) -> str:
    old, new = data["from"], data["to"]
    lines = [f"# Release step: vLLM {text(old)} → {text(new)}", "", text(headline(data)), ""]
    if data["could_not_run"]:
        lines += [f"**Could not run:** {cell(data['could_not_run'])}. No verdict.", ""]
    lines += [
        "The history's section of this release (each moved field and the change behind it): "
        "[history.md](history.md). Each record's matrix: [matrix/](matrix/).",
        "",
        "## Hunks of the builder's files",
        "",
        "| file | hunk | named by (kb/history/changes.yaml `hunks:`) |",
        "|---|---|---|",
    ]
    for row in data["hunks"]:
        by = ", ".join(row["by"]) if row["by"] else "**unexplained**"
        lines.append(f"| {code(row['file'])} | {code(row['header'])} | {cell(by)} |")
    lines += ["", "## Drift the KB does not explain", ""]
    rows = data["history"]["unexplained"]
    lines += [
        f"- {cell(str(r.get('record') or 'metadata class'))}: {cell(r['case'])}: "
        f"{', '.join(code(f) for f in r['fields'])} ({text(r['from'])} → {text(r['to'])})"
        for r in rows
    ] or ["None."]
    if data.get("record_drafts"):
        lines += [
            "",
            "What would explain it in the records (`gdn-review matrix --record N "
            "--draft-changes`; write each `note`, and name the PR where it says TODO):",
            "",
        ]
        for draft in data["record_drafts"]:
            lines += fence(draft, "yaml") + [""]
    lines += ["", "## Each file's diff reviewed onto " + text(old), ""]
    for entry in data["reviews"]:
        if "review" not in entry:
            why = entry.get("could_not_run") or entry.get("not_reviewed")
            lines.append(f"- {code(entry['file'])}: not reviewed: {cell(why)}")
            continue
        killed, total, named = _mutant_counts(entry["review"])
        lines.append(
            f"- {code(entry['file'])}: {killed} of {total} mutants of its new lines killed "
            f"([review]({entry['report']}))"
        )
        for mutant in named:
            why = f" (kb/guard: {text(mutant['guard_note'])})" if mutant.get("guard_note") else ""
            lines.append(
                f"  - {code(mutant['id'])} (line {int(mutant['line'])}): "
                f"{text(mutant['status'])}{why}"
            )
    if data["unguarded"]:
        lines += ["", "## New lines no record guards", ""]
        for row in data["unguarded"]:
            lines += [f"{code(row['file'])} line {int(row['line'])} ({text(row['status'])}):", ""]
            lines += fence(row["diff"], "diff") + [""]
    if data["drafts"]:
        lines += [
            "",
            f"{len(data['drafts'])} draft changes.yaml entr(y/ies), with what to search for: "
            "[changes.draft.yaml](changes.draft.yaml).",
        ]
    return "\n".join(lines).rstrip() + "\n"


def write(data: dict, out: Path) -> list[Path]:
    """``step.md`` and, where a hunk or field is unexplained, ``changes.draft.yaml``."""
    atomic_write(out / "step.md", markdown(data))
    written = [out / "step.md"]
    draft = out / "changes.draft.yaml"
    if data["drafts"]:
        atomic_write(draft, drafts_yaml(data))
        written.append(draft)
    elif draft.exists():
        draft.unlink()
    return written
