"""Drift between consecutive releases' snapshots of one record: which case fields moved, and
which PR (the record's own, a related one, an untied history entry) explains each move.

A case that raised on one side moves as one field (``raised``); a case that is not applicable
on one side only became applicable (or stopped being so), which is said as that
(``applicability``), not as its fields coming or going; a subclass builder's own metadata fields
that come or go are kept apart (``family_schema``): they are not gdn_attn.py's history.

Drift is never read from a run that could not build: a case whose snapshot measured nothing
on either side (its set-up raised, or our own code did: ``snapshot_take.NOT_TAKEN``) is not
compared across that step (``not_compared``, with why), and a release with no snapshot at all
(it could not run) is skipped (``missing``).
"""

from __future__ import annotations

import json
from pathlib import Path

from packaging.version import Version

from gdn_review.common import snapshots
from gdn_review.common.vocabulary import Verdict
from gdn_review.kb import Record
from gdn_review.kb.builder_family import GDN_BUILDER
from gdn_review.run.snapshot_take import not_taken


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
    # untied changes, each named by its changes.yaml id
    for move in [*record.target.moved, *(record.contract.moved if record.contract else [])]:
        if _in_window(move.release, previous, current):
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
    found = {"rows": [], "schema": [], "family_schema": [], "applicability": []}
    found["not_compared"] = []
    present = [(v, s) for v, s in snapshots_by_release if s is not None]
    for (previous, old), (current, new) in zip(present, present[1:]):
        step = {"from": previous, "to": current}
        skipped = _not_compared(old["cases"], new["cases"])
        found["not_compared"] += [{**step, "case": case, "reason": why} for case, why in skipped]
        old, new = _without(old, skipped), _without(new, skipped)
        by_case, added, removed, family, became = _sorted_moves(record, old, new)
        found["applicability"] += [{**step, **row} for row in became]
        found["family_schema"] += [
            {**step, "builder": builder, "added": sorted(sides[0]), "removed": sorted(sides[1])}
            for builder, sides in sorted(family.items())
        ]
        if added or removed:
            found["schema"].append({**step, "added": sorted(added), "removed": sorted(removed)})
        explainers = _explainers(record, previous, current)
        if own_change and not any(number == record.key for _, number, _ in explainers):
            explainers.insert(0, ("this PR", record.key, record.target.changes))
        for case_id, changed in sorted(by_case.items()):
            explained_by = _explained_by(explainers, case_id, changed, known_records)
            if own_change and not explained_by and _meets_expect(record, case_id, changed):
                explained_by.append(
                    {
                        "number": record.key,
                        "relation": "this PR (the case's expect)",
                        "record": True,
                        "note": "the record's expect states the new value",
                    }
                )
            found["rows"].append(
                {
                    **step,
                    "case": case_id,
                    "fields": [d["field"] for d in changed],
                    "changes": [
                        f"{d['field']}: {d.get('change') or _short(d['before'])}"
                        + ("" if d.get("change") else f" → {_short(d['after'])}")
                        for d in changed
                    ],
                    "explained_by": explained_by,
                }
            )
    return {
        **found,
        "unexplained": [r for r in found["rows"] if not r["explained_by"]],
        "missing": [v for v, s in snapshots_by_release if s is None],
    }


def _not_compared(old: dict, new: dict) -> list[tuple[str, str]]:
    """(case, why) of the cases whose snapshot measured nothing on either side of a step."""
    skipped = []
    for case in sorted(set(old) | set(new)):
        sides = (("before", old.get(case)), ("after", new.get(case)))
        why = [
            f"{found[0]} {side}: {found[1]}"
            for side, measured in sides
            if (found := not_taken(measured)) is not None
        ]
        if why:
            skipped.append((case, "; ".join(why)))
    return skipped


def _without(snapshot: dict, skipped: list[tuple[str, str]]) -> dict:
    """A release's snapshot without the cases not compared."""
    left_out = {case for case, _ in skipped}
    return {**snapshot, "cases": {c: v for c, v in snapshot["cases"].items() if c not in left_out}}


def _sorted_moves(record: Record, old: dict, new: dict) -> tuple:
    """One step's differences sorted: (case -> its moved fields, metadata fields added, removed,
    subclass builder -> its own fields (added, removed), cases that became (not) applicable).

    A subclass's metadata class is its own: its fields coming and going are not GDN's; a host
    function's result (a call case) is not the metadata class: a function that appears (or goes)
    moves its cases, as any change does."""
    differences = _raised_as_one_field(
        snapshots.differences(
            old["cases"], new["cases"], old.get("usual_dtypes"), new.get("usual_dtypes")
        ),
        old["cases"],
        new["cases"],
    )
    became = _applicability(old["cases"], new["cases"])
    subclass = {c.id: c.builder for c in record.cases if c.builder not in (None, GDN_BUILDER)}
    calls = {c.id for c in record.cases if c.call is not None}
    by_case: dict[str, list[dict]] = {}
    added, removed, family = set(), set(), {}
    for difference in differences:
        case, field = difference["case"], difference["field"]
        sides = (difference["before"], difference["after"])
        if field == "(case)" or case in {row["case"] for row in became}:
            continue
        if case in calls or snapshots.NO_FIELD not in sides:
            by_case.setdefault(case, []).append(difference)
        elif case in subclass:
            own = family.setdefault(subclass[case], (set(), set()))
            own[0 if sides[0] == snapshots.NO_FIELD else 1].add(field)
        else:
            (added if sides[0] == snapshots.NO_FIELD else removed).add(field)
    return by_case, added, removed, family, became


def _explained_by(
    explainers: list, case_id: str, changed: list[dict], known_records: set
) -> list[dict]:
    """The stated changes that explain one case's moved fields: per explaining PR, its first
    change that names the case and all those fields (or no fields: any of them)."""
    fields = {d["field"] for d in changed}
    found = []
    for label, number, changes in explainers:
        change = next(
            (
                c
                for c in changes
                if case_id in c.cases and (not c.fields or fields <= set(c.fields))
            ),
            None,
        )
        if change is not None:
            found.append(
                {
                    "number": number,
                    "relation": label,
                    "record": number in known_records,
                    "note": change.note,
                }
            )
    return found


def _applicability(old: dict, new: dict) -> list[dict]:
    """The cases not applicable on exactly one side and built on the other: each {case, became,
    reason} (the reason is the not-applicable side's)."""
    found = []
    for case in sorted(set(old) & set(new)):
        sides = (old[case] or {}, new[case] or {})
        before, after = (side.get("not_applicable") for side in sides)
        if (before is None) != (after is None) and not any("raised" in side for side in sides):
            became = "applicable" if after is None else Verdict.NOT_APPLICABLE
            found.append({"case": case, "became": became, "reason": before or after})
    return found


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


# --- A draft of the changes that would explain the unexplained drift ---------------------------


def draft_changes(record: Record, drift: dict, others: list = (), notes: list = ()) -> str:
    """The YAML to add to ``record`` so that ``drift``'s unexplained rows are explained ("": none
    is). Per pair of releases, the change goes where the record's keys take it:

    - ``target.changes``: the record's own PR first shipped in between;
    - ``related``: a PR the record already names there, another record's PR (``others``) or one
      ``kb/history/changes.yaml`` (``notes``) ties to a change there, else a PR still to find;
    - ``target.moved`` (``contract.moved``): an untied changes.yaml entry of that release.

    Each moved case's fields are stated (cases that moved the same fields share an entry)."""
    draft: dict = {}
    said = []
    steps: dict[tuple[str, str], list[dict]] = {}
    for row in drift["unexplained"]:
        steps.setdefault((row["from"], row["to"]), []).append(row)
    for (previous, current), rows in steps.items():
        said += [f"{previous} → {current}: {r['case']}: {'; '.join(r['changes'])}" for r in rows]
        said = [line if len(line) <= 160 else line[:159] + "…" for line in said]
        groups: dict[tuple, list[str]] = {}
        for row in rows:
            groups.setdefault(tuple(row["fields"]), []).append(row["case"])
        entries = [{"cases": cases, "fields": list(fields)} for fields, cases in groups.items()]
        _draft_step(record, previous, current, entries, others, notes, draft)
    if not draft:
        return ""
    import yaml

    head = [f"# {record.label}: drift that no record or kb/history/changes.yaml explains:"]
    head += [f"#   {line}" for line in said]
    head.append(
        "# Add this to the record, merged with its keys (a related PR it names: its changes)"
    )
    text = yaml.safe_dump(draft, sort_keys=False, default_flow_style=None, allow_unicode=True)
    return "\n".join(head) + "\n" + text


def _draft_step(record, previous, current, entries, others, notes, draft: dict) -> None:
    """Add to ``draft`` what explains ``entries`` (moved cases and fields) between two releases."""

    def within(release) -> bool:
        return _in_window(release, previous, current)

    if record.contract is None and within(record.target.head_release):
        for entry in entries:
            entry["note"] = "TODO: what this PR changed in these cases"
        draft.setdefault("target", {}).setdefault("changes", []).extend(entries)
        return
    named = [(r.number, r.title, r.from_release) for r in record.related if within(r.from_release)]
    named += [
        (o.key, o.title, o.target.head_release)
        for o in others
        if o.key != record.key and within(o.target.head_release)
    ]
    named += [(n.pr.number, n.pr.title, n.release) for n in notes if n.pr and within(n.release)]
    untied = [n for n in notes if n.pr is None and n.id and within(n.release)]
    if not named and untied:
        where = "target" if record.contract is None else "contract"
        moved = [{"change": untied[0].id, "release": str(untied[0].release), **e} for e in entries]
        draft.setdefault(where, {}).setdefault("moved", []).extend(moved)
        return
    number, title, release = named[0] if named else ("TODO", "TODO", current)
    for entry in entries:
        entry["note"] = f"TODO: what {f'#{number}' if named else 'the PR'} changed in these cases"
    relation = {"number": number, "changes": entries}  # a PR the record names: add its changes
    if number not in {r.number for r in record.related}:
        relation = {"number": number, "title": title, "relation": "same-area"} | {
            "from_release": str(release),  # the first release with it
            "changes": entries,
        }
    draft.setdefault("related", []).append(relation)


def drafts(kb_dir: Path, keys: list, work_dir: Path | None = None) -> list[str]:
    """``gdn-review matrix --draft-changes``: per record (``keys``; none: every record with a matrix
    run), ``draft_changes`` of its last matrix run (``work_dir``, as ``gdn-review matrix`` has it).
    Runs and writes nothing."""
    from gdn_review.kb.changes import load_changes
    from gdn_review.matrix.matrix_files import MatrixError, load_matrix, matrix_folder_name
    from gdn_review.run.selection import load_records

    every = list(load_records(kb_dir).values())
    notes = load_changes(kb_dir)
    texts = []
    for record in sorted(load_records(kb_dir, tuple(keys)).values(), key=lambda r: r.sort_key):
        folder = Path(work_dir or ".gdn-review")
        if not (len(keys) == 1 and work_dir):  # one record's --work is its own folder
            folder = folder / matrix_folder_name(record.key)
        try:
            matrix = load_matrix(folder)
        except MatrixError:
            if keys:
                raise
            continue
        taken = [(e["version"], e.get("snapshot_data")) for e in matrix["releases"]]
        drift = drift_data(record, taken, {r.key for r in every})
        texts.append(
            draft_changes(record, drift, every, notes)
            or f"# {record.label}: no unexplained drift in {folder}"
        )
    return texts
