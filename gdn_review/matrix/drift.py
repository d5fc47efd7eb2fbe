"""Drift between consecutive releases' snapshots of one record: which case fields moved, and
which PR (the record's own, a related one, an untied history entry) explains each move.

A case that raised on one side moves as one field (``raised``); a subclass builder's own
metadata fields that come or go are kept apart (``family_schema``): they are not
gdn_attn.py's history.
"""

from __future__ import annotations

import json

from packaging.version import Version

from gdn_review.kb import Record
from gdn_review.kb.builder_family import GDN_BUILDER


def _in_window(release: str | None, after: str, upto: str) -> bool:

    return release is not None and Version(after) < Version(release) <= Version(upto)


def _explainers(record: Record, previous: str, current: str) -> list[tuple[str, int, list]]:
    """(label, PR number, changes) of the PRs that first shipped after ``previous``, up to
    ``current``."""
    found = []
    if _in_window(record.target.head_release, previous, current):
        found.append(("this PR", record.key, record.target.changes))
    for relation in record.related:
        if _in_window(relation.from_release, previous, current):
            found.append((relation.relation, relation.number, relation.changes))
    for move in [
        *record.target.moved,
        *(record.contract.moved if record.contract is not None else []),
    ]:
        if _in_window(
            move.release, previous, current
        ):  # an untied change, named by its changes.yaml id
            found.append(("changes.yaml", move.change, [move]))
    return found


def _meets_expect(record: Record, case_id: str, changed: list[dict]) -> bool:
    """Every moved field of the case is one its ``expect`` states, at the new value."""
    case = next((c for c in record.cases if c.id == case_id), None)
    return case is not None and all(
        d["field"] in case.expect and case.expect[d["field"]] == d["after"] for d in changed
    )


def _short(value, limit: int = 60) -> str:
    """A snapshot value for a table cell: JSON, cut at ``limit`` characters (the stored snapshots
    have it whole)."""
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def drift_data(
    record: Record,
    snapshots_by_release: list[tuple[str, dict | None]],
    known_records: set[int],
    own_change: bool = False,
) -> dict:
    """Field differences between consecutive releases' snapshots, each attributed or unexplained.

    ``own_change``: the second snapshot was taken with the record's own PR applied
    (its diff, in a review): what the record states it changes explains a move
    whatever the releases, and so does a case's ``expect`` that the new value meets.
    """
    from gdn_review.run import snapshot_files

    rows, schema, family_schema, missing = [], [], [], []
    present = [(v, s) for v, s in snapshots_by_release if s is not None]
    # A subclass's metadata class is its own: its fields coming and going are not GDN's.
    subclass = {c.id: c.builder for c in record.cases if c.builder not in (None, GDN_BUILDER)}
    missing = [v for v, s in snapshots_by_release if s is None]
    for (previous, old), (current, new) in zip(present, present[1:]):
        differences = _raised_as_one_field(
            snapshot_files.differences(
                old["cases"], new["cases"], old.get("usual_dtypes"), new.get("usual_dtypes")
            ),
            old["cases"],
            new["cases"],
        )
        added, removed = set(), set()
        family: dict[str, dict[str, set]] = {}
        by_case: dict[str, list[dict]] = {}
        calls = {c.id for c in record.cases if c.call is not None}
        for difference in differences:
            if difference["field"] == "(case)":
                continue
            if difference["case"] in calls:
                # A host function's result, not the metadata class: a function that appears
                # (or goes) moves its cases, as any change does.
                by_case.setdefault(difference["case"], []).append(difference)
            elif difference["case"] in subclass and "(no such field)" in (
                difference["before"],
                difference["after"],
            ):
                entry = family.setdefault(
                    subclass[difference["case"]], {"added": set(), "removed": set()}
                )
                side = "added" if difference["before"] == "(no such field)" else "removed"
                entry[side].add(difference["field"])
            elif difference["before"] == "(no such field)":
                added.add(difference["field"])
            elif difference["after"] == "(no such field)":
                removed.add(difference["field"])
            else:
                by_case.setdefault(difference["case"], []).append(difference)
        for builder, entry in sorted(family.items()):
            family_schema.append(
                {
                    "from": previous,
                    "to": current,
                    "builder": builder,
                    "added": sorted(entry["added"]),
                    "removed": sorted(entry["removed"]),
                }
            )
        if added or removed:
            schema.append(
                {
                    "from": previous,
                    "to": current,
                    "added": sorted(added),
                    "removed": sorted(removed),
                }
            )
        explainers = _explainers(record, previous, current)
        if own_change and not any(number == record.key for _, number, _ in explainers):
            explainers.insert(0, ("this PR", record.key, record.target.changes))
        for case_id, changed in sorted(by_case.items()):
            fields = [d["field"] for d in changed]
            explained_by = []
            for label, number, changes in explainers:
                for change in changes:
                    if case_id in change.cases and (
                        not change.fields or set(fields) <= set(change.fields)
                    ):
                        explained_by.append(
                            {
                                "number": number,
                                "relation": label,
                                "record": number in known_records,
                                "note": change.note,
                            }
                        )
                        break
            if own_change and not explained_by and _meets_expect(record, case_id, changed):
                explained_by.append(
                    {
                        "number": record.key,
                        "relation": "this PR (the case's expect)",
                        "record": True,
                        "note": "the record's expect states the new value",
                    }
                )
            rows.append(
                {
                    "from": previous,
                    "to": current,
                    "case": case_id,
                    "fields": fields,
                    "changes": [
                        f"{d['field']}: {d.get('change') or _short(d['before'])}"
                        + ("" if d.get("change") else f" → {_short(d['after'])}")
                        for d in changed
                    ],
                    "explained_by": explained_by,
                }
            )
    return {
        "rows": rows,
        "unexplained": [r for r in rows if not r["explained_by"]],
        "schema": schema,
        # A subclass builder's own metadata fields (their history is not gdn_attn.py's).
        "family_schema": family_schema,
        "missing": missing,
    }


def _raised_as_one_field(differences: list[dict], old: dict, new: dict) -> list[dict]:
    """A case that raised on one side moved as one field, ``raised``: the other side's fields
    are not fields that appeared or went away."""
    raised = {
        case
        for case in {d["case"] for d in differences}
        if "raised" in (old.get(case) or {}) or "raised" in (new.get(case) or {})
    }
    kept = [d for d in differences if d["case"] not in raised]
    for case in sorted(raised):
        before = (old.get(case) or {}).get("raised")
        after = (new.get(case) or {}).get("raised")
        if before != after:
            kept.append({"case": case, "field": "raised", "before": before, "after": after})
    return kept
