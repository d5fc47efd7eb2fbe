"""``gdn-review validate``: every record well-formed, every mutant's find where it should be.

Record errors (types, unknown keys, references, impossible batches) come from
the loader; mutant finds are checked on the releases at hand (the installed
vLLM and the release cache, nothing fetched). A draft is well-formed but lists
open TODOs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gdn_review.kb import Record, incomplete, load_kb
from gdn_review.kb.errors import SelectionError


@dataclasses.dataclass
class Validation:
    records: dict[Path, Record]
    todos: dict[Path, list[str]]  # open TODOs per record (empty: complete)
    notes: list[str]  # what could not be checked, and why
    problems: list  # RecordErrors between records, raised with the mutant finds' by the caller

    @property
    def open_items(self) -> int:
        return sum(len(items) for items in self.todos.values())


def validate_kb(kb_dir: Path) -> Validation:
    """Load and check every record; RecordErrors when one is bad; the problems between records
    (relations, contracts) in ``problems``, raised by the caller with the mutation stage's."""
    from gdn_review.kb.changes import changes_path, contract_problems, load_changes

    records = load_kb(kb_dir)
    if not records:
        raise SelectionError(f"no records (*.yaml) in {kb_dir}")
    # the history's notes: RecordErrors with file:line:col when malformed
    changes = load_changes(kb_dir)
    notes = []
    if changes_path(kb_dir).is_file():
        notes.append(
            f"{changes_path(kb_dir)}: {len(changes)} builder change(s) that "
            "no record states (for the history page)"
        )
    todos = {path: incomplete(path, record) for path, record in records.items()}
    problems = relation_problems(records) + contract_problems(records, changes)
    return Validation(records, todos, notes, problems)


def format_note(record: Record) -> str:
    """Which record format ``record`` is read as, and what the current one would add."""
    from gdn_review.common import record_format

    version = record.schema_version
    if version == record_format.CURRENT:
        return f"format {version} (current)"
    added = "; ".join(
        f"{later}: {record_format.ADDED[later]}"
        for later in range(version + 1, record_format.CURRENT + 1)
    )
    return (
        f"format {version}, read as written (the current format adds {added}; "
        "`gdn-review migrate` measures and states it)"
    )


def relation_problems(records: dict[Path, Record]) -> list:
    """A relation's from_release must be the head release of the named PR's own record (one release
    per PR in the history)."""
    from gdn_review.kb.yaml_source import Problems, errors_in

    heads = {
        record.key: (path, record.target.head_release)
        for path, record in records.items()
        if record.target.head_release
    }
    problems = []
    for path, record in records.items():
        found = Problems()
        for index, relation in enumerate(record.related):
            known = heads.get(relation.number)
            if known is None or relation.from_release is None or relation.from_release == known[1]:
                continue
            found.add(
                ("related", index, "from_release"),
                f"#{relation.number} first shipped in {known[1]} by its own "
                f"record {known[0]} (target.head_release), not {relation.from_release}",
            )
        problems += errors_in(path, found)
    return problems
