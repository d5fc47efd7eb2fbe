"""A knowledge-base YAML file read, and where a field of it is: ``file:line:col``.

YAML is read with the safe loader only, aliases refused, every failure said for
people. The node tree (which keeps line numbers) is what the loader's errors and
every other stage's point into: ``locate`` gives the line and column of a field,
``field_path`` its dotted path, ``read_mapping`` the keys plain YAML silently
collapses. ``Problems`` is what the rules of a record (``kb.record_rules``) find,
and ``error_at`` turns one into ``file:line:col`` (``errors_in``: all of a file's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gdn_review.kb.errors import RecordError, file_error

# libyaml's safe loader where PyYAML has it (about ten times faster; every command reads the
# whole KB), the pure-Python one otherwise: both read the same YAML with the same marks.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
TOO_DEEP = "YAML nested too deeply to be a knowledge-base file"

Loc = tuple[Any, ...]


class Problems(list):
    """(field location, message) pairs, as the rules of a record find them."""

    def add(self, loc: Loc, message: str) -> None:
        self.append((loc, message))


def field_path(loc: Loc) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def locate(root: yaml.Node | None, loc: Loc, at_key: bool = False) -> tuple[int, int]:
    """1-based line and column of the YAML node at ``loc`` (or its nearest ancestor)."""
    if root is None:
        return 1, 1
    node = root
    for position, item in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(item):
                    node = key if (last and at_key) else value
                    break
            # An item not found (a union tag, a missing key) leaves us at the parent.
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(item, int) and item < len(node.value)
        ):
            node = node.value[item]
    return node.start_mark.line + 1, node.start_mark.column + 1


def error_at(file: str, root: yaml.Node | None, loc: Loc, message: str) -> RecordError:
    """``message`` about the field at ``loc`` of a file's node tree: file, line, column, field."""
    line, column = locate(root, loc)
    return RecordError(file, line, column, field_path(loc), message)


def errors_in(path: str | os.PathLike, problems: list[tuple[Loc, str]]) -> list[RecordError]:
    """``problems`` (location, message) of a KB file as ``file:line:col`` errors; the file is read
    once, and only where there are any."""
    if not problems:
        return []
    root, _ = read_yaml(read_text(path), str(path))
    return [error_at(str(path), root, loc, message) for loc, message in problems]


def _aliases(text: str) -> list[yaml.Token]:
    """Alias tokens (``*name``): records are written out in full, never by reference."""
    return [
        token for token in yaml.scan(text, Loader=SAFE_LOADER) if isinstance(token, yaml.AliasToken)
    ]


def _duplicate_keys(node: yaml.Node, path: Loc = ()) -> Iterator[tuple[Loc, yaml.Node]]:
    """Each key a mapping repeats (plain YAML silently keeps its last value), and its node."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if key.value in seen:
                yield path + (key.value,), key
            seen.add(key.value)
            yield from _duplicate_keys(value, path + (key.value,))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _duplicate_keys(item, path + (index,))


def read_text(path: str | os.PathLike) -> str:
    """A KB file's UTF-8 text; RecordErrors naming the file when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise file_error(str(path), f"cannot read: {error}") from None


def read_mapping(text: str, file: str, shape: str) -> tuple[yaml.Node | None, dict, list]:
    """``read_yaml`` of a file that must be a mapping (``shape`` says of what), and its duplicate
    keys as errors (plain YAML keeps the last); RecordErrors when it is no mapping."""
    root, data = read_yaml(text, file)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise file_error(file, f"{shape}; got {got}")
    duplicates = [
        RecordError(
            file,
            key.start_mark.line + 1,
            key.start_mark.column + 1,
            field_path(loc),
            f"duplicate key {loc[-1]!r}",
        )
        for loc, key in _duplicate_keys(root)
    ]
    return root, data, duplicates


def read_yaml(text: str, file: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (line numbers) and the plain data of a KB file's YAML; RecordErrors naming
    file:line:col otherwise.

    Safe loader only; aliases refused (KB files are written out in full); every
    way YAML can fail (syntax, a refused tag, nesting, an unreadable value) is
    said for people, never raised as a traceback.
    """
    try:
        aliases = _aliases(text)
        if aliases:
            mark = aliases[0].start_mark
            raise file_error(
                file,
                "YAML aliases (*name) are not allowed in the knowledge base: write the value out",
                mark.line + 1,
                mark.column + 1,
            )
        root = yaml.compose(text, Loader=SAFE_LOADER)
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.MarkedYAMLError as error:
        if "maximum nesting depth" in str(error.problem):  # libyaml's limit; Python's recursion
            raise file_error(file, TOO_DEEP) from None
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = error.problem or "unreadable YAML"
        if error.context:
            where = error.context_mark
            started = (
                f" (started at line {where.line + 1}, column {where.column + 1})"
                if where and where != mark
                else ""
            )
            problem = f"{error.context}{started}: {problem}"
        # A constructor error is a tag the safe loader refuses (records are plain data).
        what = (
            "unsupported YAML tag"
            if isinstance(error, yaml.constructor.ConstructorError)
            else "YAML syntax error"
        )
        raise file_error(file, f"{what}: {problem}", line, column) from None
    except yaml.YAMLError as error:
        raise file_error(file, f"YAML error: {error}") from None
    except RecursionError:
        raise file_error(file, TOO_DEEP) from None
    except ValueError as error:  # e.g. an integer with thousands of digits
        raise file_error(file, f"YAML value cannot be read: {str(error)[:200]}") from None
    return root, data
