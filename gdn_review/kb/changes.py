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

from pydantic import Field, StringConstraints, ValidationError, model_validator

from gdn_review.kb.errors import RecordError, RecordErrors
from gdn_review.kb.load import _duplicate_keys, _field_path, _locate, read_yaml
from gdn_review.kb.models import Release, Strict, Text

CHANGES_FILE = Path("history") / "changes.yaml"

FieldName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]+$")]


class ChangeSource(Strict):
    """The PR a change is tied to, and how strongly its public thread ties it."""

    number: Annotated[int, Field(gt=0)]
    title: Text
    url: Annotated[str, StringConstraints(pattern=r"^https?://\S+$")] | None = None
    evidence: Literal["high", "medium", "low"]
    why: Text = Field(description="what in the thread ties the change to this PR (a quoted hunk, the description's words)")


class BuilderChange(Strict):
    release: Release = Field(description="the first release with the change")
    what: Text
    fields: list[FieldName] = Field(
        default_factory=list, description="metadata fields of build()'s result it adds or removes (the history attributes those to it)"
    )
    pr: ChangeSource | None = None
    searched: list[Text] = Field(default_factory=list, description="queries tried where no PR was found")

    @model_validator(mode="after")
    def _tied_or_searched(self):
        if self.pr is None and not self.searched:
            raise ValueError("a change with no pr must list what was searched (searched: [...]): never attribute by guess")
        return self


class BuilderChanges(Strict):
    schema_version: Literal[1] = 1
    changes: list[BuilderChange]


def changes_path(kb_dir: str | os.PathLike) -> Path:
    return Path(kb_dir) / CHANGES_FILE


def load_changes(kb_dir: str | os.PathLike) -> list[BuilderChange]:
    """The KB's untracked builder changes; [] when the file is absent; RecordErrors naming file:line:col otherwise."""
    path = changes_path(kb_dir)
    if not path.is_file():
        return []
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RecordErrors([RecordError(file, 1, 1, "", f"cannot read: {error}")]) from None
    root, data = read_yaml(text, file)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise RecordErrors([RecordError(file, 1, 1, "", f"expected a mapping with schema_version and changes; got {got}")])
    found: list = []
    _duplicate_keys(root, (), found)
    errors = [RecordError(file, n.start_mark.line + 1, n.start_mark.column + 1, _field_path(loc), f"duplicate key {loc[-1]!r}") for loc, n in found]
    try:
        parsed = BuilderChanges.model_validate(data)
    except ValidationError as error:
        for item in error.errors():
            loc = tuple(item["loc"])
            at_key = item["type"] == "extra_forbidden"
            line, column = _locate(root, loc[:-1] if item["type"] == "missing" else loc, at_key=at_key)
            message = f"unknown key {str(loc[-1])!r}" if at_key else ("required field is missing" if item["type"] == "missing" else item["msg"])
            errors.append(RecordError(file, line, column, _field_path(loc), message))
        raise RecordErrors(errors) from None
    if errors:
        raise RecordErrors(errors)
    return parsed.changes
