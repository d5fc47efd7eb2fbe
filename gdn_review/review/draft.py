"""A draft record for a reviewed change: what the review measured, with TODOs for what only a person
knows.

Target file and symbol come from the hunks; every case that moved is copied
from its record (its inputs) with the ``expect`` block measured with the
change, and named in ``target.changes``; each surviving mutant of the new
lines becomes a risk candidate. The PR's title and claims are TODOs, so the
draft validates as a draft (``gdn-review validate`` lists them) and is never
run until they are filled.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gdn_review.common import record_format
from gdn_review.common.files import atomic_write
from gdn_review.common.vocabulary import SURVIVORS
from gdn_review.kb import RecordErrors, is_draft, parse_record
from gdn_review.kb.subjects import key_short


class DraftError(Exception):
    """The draft cannot be written (bad input: exit 2)."""


def draft_data(review: dict, records: dict[int, object], number: int) -> dict:
    """The draft record of PR ``number`` from a review's data and the records it ran."""
    impact = review["impact"][0] if review["impact"] else None
    target_file = (
        impact["target"].split(" (")[0]
        if impact
        else next((f["path"] for f in review["files"] if f["path"].endswith(".py")), "TODO")
    )
    symbols = [s for s in (impact["reaches_target"] or impact["symbols"])] if impact else []
    cases, changes = [], []
    for effect in review["records"]:
        record = records[effect["key"]]
        by_id = {case.id: case for case in record.cases}
        moved = []
        for case_id, expect in effect["expect_after"].items():
            new_id = (
                case_id if case_id not in {c["id"] for c in cases} else f"{case_id}_{effect['key']}"
            )
            case = by_id[case_id].model_dump(mode="json", exclude_none=True, exclude_defaults=True)
            case.update(
                id=new_id,
                expect=expect,
                text=f"{by_id[case_id].text} (from record "
                f"{key_short(effect['key'])}; expect measured with the change)",
            )
            cases.append(case)
            moved.append(
                (new_id, next(r["fields"] for r in effect["moved"] if r["case"] == case_id))
            )
        if moved:
            changes.append(
                {
                    "cases": [case_id for case_id, _ in moved],
                    "fields": sorted({f for _, fields in moved for f in fields}),
                    "note": f"measured by gdn-review review onto {review['onto']} (cases of "
                    f"record {key_short(effect['key'])})",
                }
            )
    survivors = [m for m in review["mutants"] if m["status"] in SURVIVORS]
    return {
        "schema_version": record_format.CURRENT,
        "pr": {"number": number, "repo": "vllm-project/vllm", "title": "TODO: the PR's title"},
        "target": {
            "file": target_file,
            "symbol": symbols[0] if symbols else "TODO",
            "base_release": review["onto"],
            **({"changes": changes} if changes else {}),
        },
        "summary": f"Draft written by `gdn-review review` from {review['name']} onto "
        f"vLLM {review['onto']}.",
        "claims": [
            {
                "id": "C1",
                "text": "TODO: what the PR claims, in its own words",
                "check": {
                    "kind": "TODO",
                    "hint": "op_budget, equivalence, invariant or gpu_sync on the cases below",
                },
            }
        ],
        "cases": cases,
        "risks": [
            {
                "id": f"R{i}",
                "text": f"No recorded claim protects line {m['line']}: the mutant "
                f"{m['id']} survived the KB's tests.",
                "auto_mutants": [m["id"]],
            }
            for i, m in enumerate(survivors, 1)
        ],
    }


def write_draft(review: dict, records: dict[int, object], number: int, path: Path) -> Path:
    """Write the draft as YAML (it must load as a record, and as a draft); DraftError if it does
    not."""
    data = draft_data(review, records, number)
    header = (
        f"# Draft record of PR #{number}, written by gdn-review review from {review['name']} "
        f"onto vLLM {review['onto']}.\n"
        "# The cases and expect blocks were measured with the change; "
        "the title and claims are TODOs.\n"
    )
    text = header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    try:
        record = parse_record(text, f"{number}.yaml")
    except RecordErrors as failure:
        raise DraftError(
            f"the draft of PR #{number} does not load as a record:\n{failure}"
        ) from None
    if not is_draft(record):
        raise DraftError("internal error: the draft has no open TODO")
    atomic_write(path, text)
    return path
