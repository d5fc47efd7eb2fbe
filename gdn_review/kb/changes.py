"""Changes of the builder between releases that no record states: ``kb/history/changes.yaml``.

A record says what its own PR changed (``target.changes``) and what the PRs it
names changed (``related[].changes``). Some changes of ``gdn_attn.py`` are
covered by no record: a new metadata field, a new method, a refactor whose
values are the same. This file lists them per release, each with the PR that
made it and how strongly the thread ties it (quoted hunk, matching
description, title only), or, where no PR was found, what was searched. The
history page shows them beside the records and uses their ``fields`` to
attribute metadata fields that appear or go away between releases.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from gdn_review.common import release_range
from gdn_review.kb.errors import RecordError, RecordErrors
from gdn_review.kb.types import ChangeId, FieldName, Release, Strict, Text, Url
from gdn_review.kb.yaml_source import (
    Problems,
    error_at,
    errors_in,
    field_path,
    locate,
    read_mapping,
    read_text,
)

CHANGES_FILE = Path("history") / "changes.yaml"


class ChangeSource(Strict):
    """The PR a change is tied to, and how strongly its public thread ties it."""

    number: Annotated[int, Field(gt=0)]
    title: Text
    url: Url | None = None
    evidence: Literal["high", "medium", "low"]
    why: Text = Field(
        description="what in the thread ties the change to this PR (a quoted hunk, "
        "the description's words)"
    )


class HunkTie(Strict):
    """A hunk of the release step's diff this change is: its file and one line the hunk adds or
    removes (as the release's file writes it, leading spaces aside)."""

    file: Text = Field(description="the file, vllm/...py (gdn_attn.py or a family file)")
    line: Text = Field(
        description="a line the hunk adds or removes, as written (leading spaces aside); "
        "a hunk is this change's when one of its changed lines contains it"
    )

    def matches(self, file: str, changed: list[str]) -> bool:
        wanted = self.line.strip()
        return self.file == file and any(wanted in line for line in changed)


class BuilderChange(Strict):
    id: ChangeId | None = Field(
        default=None,
        description="a name contract records use to say they cover this change (contract.covers)",
    )
    release: Release = Field(description="the first release with the change")
    what: Text
    fields: list[FieldName] = Field(
        default_factory=list,
        description="metadata fields of build()'s result it adds or removes (the "
        "history attributes those to it)",
    )
    hunks: list[HunkTie] = Field(
        default_factory=list,
        description="the hunks of the release step's diff that are this change (gdn-review "
        "release-step attributes each hunk to the entries that name it)",
    )
    pr: ChangeSource | None = None
    searched: list[Text] = Field(
        default_factory=list, description="queries tried where no PR was found"
    )

    @model_validator(mode="after")
    def _tied_or_searched(self):
        if self.pr is None and not self.searched:
            raise ValueError(
                "a change with no pr must list what was searched (searched: "
                "[...]): never attribute by guess"
            )
        return self


class BuilderChanges(Strict):
    schema_version: Literal[1] = 1
    changes: list[BuilderChange]


def changes_path(kb_dir: str | os.PathLike) -> Path:
    return Path(kb_dir) / CHANGES_FILE


def load_changes(kb_dir: str | os.PathLike) -> list[BuilderChange]:
    """The KB's untracked builder changes; [] when the file is absent; RecordErrors naming
    file:line:col otherwise."""
    path = changes_path(kb_dir)
    if not path.is_file():
        return []
    file = str(path)
    root, data, errors = read_mapping(
        read_text(path), file, "expected a mapping with schema_version and changes"
    )
    try:
        parsed = BuilderChanges.model_validate(data)
    except ValidationError as error:
        for item in error.errors():
            loc = tuple(item["loc"])
            at_key = item["type"] == "extra_forbidden"
            line, column = locate(
                root, loc[:-1] if item["type"] == "missing" else loc, at_key=at_key
            )
            message = (
                f"unknown key {str(loc[-1])!r}"
                if at_key
                else ("required field is missing" if item["type"] == "missing" else item["msg"])
            )
            errors.append(RecordError(file, line, column, field_path(loc), message))
        raise RecordErrors(errors) from None
    seen: dict[str, int] = {}
    for index, change in enumerate(parsed.changes):
        if change.id in seen:
            errors.append(
                error_at(
                    file,
                    root,
                    ("changes", index, "id"),
                    f"id {change.id!r} is already changes[{seen[change.id]}]'s",
                )
            )
        elif change.id is not None:
            seen[change.id] = index
    if errors:
        raise RecordErrors(errors)
    return parsed.changes


def contract_problems(records: dict, changes: list[BuilderChange]) -> list[RecordError]:
    """A contract's ``covers`` must name changes.yaml entries that no PR is tied to, inside its
    release range; a record's ``moved`` entries (contract.moved, target.moved) must name untied
    entries and its own cases."""
    by_id = {change.id: change for change in changes if change.id}
    problems = []
    for path, record in records.items():
        found = Problems()
        for part, holder in (("target", record.target), ("contract", record.contract)):
            for index, move in enumerate(holder.moved if holder is not None else ()):
                change = by_id.get(move.change)
                if change is None:
                    message = f"no entry of kb/history/changes.yaml has id {move.change!r}"
                elif change.pr is not None:
                    message = (
                        f"{move.change!r} is tied to PR #{change.pr.number}: name that PR "
                        "in related (with changes)"
                    )
                elif change.release != move.release:
                    message = (
                        f"{move.change!r} first shipped in {change.release}, not {move.release}"
                    )
                elif unknown := sorted(set(move.cases) - {c.id for c in record.cases}):
                    message = f"no case {', '.join(map(repr, unknown))} in this record"
                else:
                    continue
                found.add((part, "moved", index), message)
        for index, name in enumerate(record.contract.covers if record.contract is not None else ()):
            change = by_id.get(name)
            if change is None:
                message = (
                    f"no entry of kb/history/changes.yaml has id {name!r} (ids: "
                    f"{', '.join(sorted(by_id)) or 'none'})"
                )
            elif change.pr is not None:
                message = (
                    f"{name!r} is tied to PR #{change.pr.number}: state it in a "
                    "record of that PR, not in a contract"
                )
            elif not release_range.contains(record.contract.releases, change.release):
                message = (
                    f"{name!r} first shipped in {change.release}, outside "
                    f"contract.releases {record.contract.releases!r}"
                )
            else:
                continue
            found.add(("contract", "covers", index), message)
        problems += errors_in(path, found)
    return problems
