"""``gdn-review validate``: every record well-formed, every mutant's find where it should be.

Record errors (types, unknown keys, references, impossible batches) come from
the loader; mutant finds are checked on the releases at hand (the installed
vLLM and the release cache, nothing fetched). A draft is well-formed but lists
open TODOs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from gdn_review.kb import Record, RecordErrors, incomplete, load_kb
from gdn_review.kb.errors import SelectionError


@dataclasses.dataclass
class Validation:
    records: dict[Path, Record]
    todos: dict[Path, list[str]]  # open TODOs per record (empty: complete)
    notes: list[str]  # what could not be checked, and why

    @property
    def open_items(self) -> int:
        return sum(len(items) for items in self.todos.values())


def validate_kb(
    kb_dir: Path, check_finds: Callable[[Path, Record], tuple[list, list[str]]]
) -> Validation:
    """Load and check every record; RecordErrors (all of them) when one is bad.

    ``check_finds`` is the mutation stage's check of a record's mutant finds
    (``mutation.check_finds``): passed in, so the records' stage imports no later stage.
    """
    from gdn_review.kb.changes import changes_path, contract_problems, load_changes

    records = load_kb(kb_dir)
    if not records:
        raise SelectionError(f"no records (*.yaml) in {kb_dir}")
    changes = load_changes(
        kb_dir
    )  # the history's notes: RecordErrors with file:line:col when malformed
    find_errors, notes = [], []
    for path, record in records.items():
        problems, skipped = check_finds(path, record)
        find_errors += problems
        notes += [f"{path}: mutant finds not checked against {what}" for what in skipped]
    find_errors += relation_problems(records)
    find_errors += contract_problems(records, changes)
    if find_errors:
        raise RecordErrors(find_errors)
    if changes_path(kb_dir).is_file():
        notes.append(
            f"{changes_path(kb_dir)}: {len(changes)} builder change(s) that "
            "no record states (for the history page)"
        )
    return Validation(
        records, {path: incomplete(path, record) for path, record in records.items()}, notes
    )


def relation_problems(records: dict[Path, Record]) -> list:
    """A relation's from_release must be the head release of the named PR's own record (one release
    per PR in the history)."""
    from gdn_review.kb import RecordError
    from gdn_review.kb.yaml_source import locate, read_yaml

    heads = {
        record.key: (path, record.target.head_release)
        for path, record in records.items()
        if record.target.head_release
    }
    problems = []
    for path, record in records.items():
        for index, relation in enumerate(record.related):
            known = heads.get(relation.number)
            if known is None or relation.from_release is None or relation.from_release == known[1]:
                continue
            root, _ = read_yaml(Path(path).read_text(encoding="utf-8"), str(path))
            line, column = locate(root, ("related", index, "from_release"))
            problems.append(
                RecordError(
                    str(path),
                    line,
                    column,
                    f"related[{index}].from_release",
                    f"#{relation.number} first shipped in {known[1]} by its own "
                    f"record {known[0]} (target.head_release), not "
                    f"{relation.from_release}",
                )
            )
    return problems
