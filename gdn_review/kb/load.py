"""Load records from YAML with errors that name file, line, column and field.

YAML is read by ``kb.yaml_source`` (safe loader only). The node tree (which
keeps line numbers) is walked alongside pydantic's error locations, so an error
points at the key or value that is wrong; duplicate keys, which plain YAML
silently collapses, are errors too, and so is every rule of ``kb.record_rules``
(what types alone cannot say) that a record the models accept breaks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from gdn_review.kb.batch_rules import FIELD_RULES
from gdn_review.kb.errors import RecordError, RecordErrors, file_error
from gdn_review.kb.models import Check, Record
from gdn_review.kb.record_rules import record_problems
from gdn_review.kb.yaml_source import Loc, error_at, field_path, locate, read_mapping, read_text


def _allowed_keys(loc: Loc) -> list[str]:
    """Field names of the model that owns the last element of ``loc`` (for 'unknown key' hints)."""
    model: Any = Record
    for index, item in enumerate(loc[:-1]):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        if isinstance(item, int):
            continue
        field = model.model_fields.get(str(item))
        if field is None:
            kind = model.model_fields.get("kind")
            if kind is not None and item in get_args(kind.annotation):
                continue  # a discriminated union's tag ('op_budget'), already resolved
            return []
        model = _unwrap(field.annotation, next_tag=loc[index + 1])
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(model.model_fields)
    return []


def _unwrap(annotation, next_tag=None):
    """Find the model class inside list[...], X | None, Annotated[...] and unions."""
    candidates = [annotation]
    while candidates:
        current = candidates.pop(0)
        if isinstance(current, type) and issubclass(current, BaseModel):
            kind = current.model_fields.get("kind")
            if kind is None or next_tag is None or next_tag in get_args(kind.annotation):
                return current
            continue
        candidates.extend(get_args(current))
    return None


def _pydantic_errors(
    file: str, root: yaml.Node | None, error: ValidationError
) -> list[RecordError]:
    errors = []
    for item in error.errors():
        loc = tuple(item["loc"])
        kind = item["type"]
        if kind == "extra_forbidden":
            allowed = _allowed_keys(loc)
            hint = f" (allowed here: {', '.join(allowed)})" if allowed else ""
            message = f"unknown key {str(loc[-1])!r}{hint}"
            line, column = locate(root, loc, at_key=True)
        elif kind == "missing":
            message = "required field is missing"
            line, column = locate(root, loc[:-1])
        elif kind == "union_tag_invalid":
            context = item.get("ctx", {})
            message = (
                f"unknown check kind {context.get('tag')!r} (expected one of: "
                f"{context.get('expected_tags')})"
            )
            line, column = locate(root, loc + ("kind",))
        else:
            message = item["msg"]
            if "input" in item and not isinstance(item["input"], (dict, list)):
                message += f" (got {item['input']!r})"
            if len(loc) == 5 and loc[0] == "cases" and loc[2] == "rows" and loc[4] in FIELD_RULES:
                message += f" (rule {FIELD_RULES[loc[4]]})"
            line, column = locate(root, loc)
        field = field_path(tuple(x for x in loc if not _is_union_tag(x)))
        errors.append(RecordError(file, line, column, field, message))
    return errors


# Check kinds (each check's `kind`): tags in pydantic's error locations that field paths leave out.
_CHECK_TAGS = {get_args(m.model_fields["kind"].annotation)[0] for m in get_args(get_args(Check)[0])}


def _is_union_tag(item: Any) -> bool:
    return item in _CHECK_TAGS or (
        isinstance(item, str) and item.startswith(("function-", "list[", "int", "str"))
    )


def parse_record(
    text: str, file: str, expects_optional: bool = False, *, checked: bool = True
) -> Record:
    """A record from YAML text; raises RecordErrors naming every problem.

    ``expects_optional``: a case an equivalence check names may state no ``expect``
    yet (``snapshot --fill-expects`` and ``--as-expect`` measure them). ``checked=False``: the
    schema only, for a child handed a record its parent loaded (the rules beyond the types
    read every cached release's files: about a second a process).
    """
    root, data, errors = read_mapping(
        text, file, "a record is a mapping with pr, target, claims..."
    )
    try:
        record = Record.model_validate(data)
    except ValidationError as error:
        raise RecordErrors(errors + _pydantic_errors(file, root, error)) from None
    if checked:
        errors += [
            error_at(file, root, loc, message)
            for loc, message in record_problems(
                record, Path(file).stem, expects_optional, Path(file)
            )
        ]
    if errors:
        raise RecordErrors(errors)
    return record


def load_record(
    path: str | os.PathLike, expects_optional: bool = False, *, checked: bool = True
) -> Record:
    return parse_record(read_text(path), str(path), expects_optional, checked=checked)


def record_paths(kb_dir: str | os.PathLike) -> list[Path]:
    return sorted(p for p in Path(kb_dir).glob("*.yaml") if p.is_file())


def load_kb(kb_dir: str | os.PathLike) -> dict[Path, Record]:
    """Every record in ``kb_dir``; all errors of all files are collected before raising."""
    folder = Path(kb_dir)
    if not folder.is_dir():
        raise file_error(str(folder), "no such knowledge-base folder")
    records: dict[Path, Record] = {}
    errors: list[RecordError] = []
    numbers: dict[int | str, Path] = {}
    for path in record_paths(folder):
        try:
            record = load_record(path)
        except RecordErrors as failure:
            errors.extend(failure.errors)
            continue
        if record.key in numbers:
            what = "pr.number" if record.pr is not None else "contract.id"
            errors.append(
                RecordError(
                    str(path),
                    1,
                    1,
                    what,
                    f"{record.label} is already recorded in {numbers[record.key]}",
                )
            )
        numbers[record.key] = path
        records[path] = record
    if errors:
        raise RecordErrors(errors)
    return records
