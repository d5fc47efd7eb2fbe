"""Errors in records, as people read them: ``file:line:col: field.path: message``."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, order=True)
class RecordError:
    file: str
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        field = f" {self.field}:" if self.field else ""
        return f"{self.file}:{self.line}:{self.column}:{field} {self.message}"


class RecordErrors(Exception):
    """Every error found in one or more records (never just the first)."""

    def __init__(self, errors: list[RecordError]):
        self.errors = sorted(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def file_error(file: str, message: str, line: int = 1, column: int = 1) -> RecordErrors:
    """``message`` about a whole file (no field), at its first line unless told where."""
    return RecordErrors([RecordError(file, line, column, "", message)])


class SelectionError(Exception):
    """A command was asked for records that are not there (bad input: exit 2)."""
