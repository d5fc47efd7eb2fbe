"""``kb/guard/notes.yaml``: what the whole-file score must not count, each with its reason.

Equivalent mutants (they cannot change behaviour), mutants whose effect only CUDA or another
backend can see (``elsewhere``), and statements CPU cannot reach (``unreachable``, named by
their first line's text, resolved per release to whole statements by ``unreachable_lines``).
Loading collects every problem at file:line:col, as a record's errors are.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import yaml

from gdn_review.common.vocabulary import MutantStatus as M
from gdn_review.kb import RecordError, RecordErrors
from gdn_review.kb.yaml_source import SAFE_LOADER, locate

ENTRY_KEYS = {"find", "reason", "after"}  # of an ``unreachable`` entry


@dataclasses.dataclass
class Unreachable:
    find: str  # text of the first line of the statement(s) CPU cannot reach
    reason: str
    where: str  # file:line of the note, for messages
    # Only the first such statement after the first line that starts with this text
    # (a line the file repeats, e.g. an assert, in one branch only); None: every one.
    after: str | None = None


@dataclasses.dataclass
class Notes:
    """``kb/guard/notes.yaml``: what the score must not count, each with its reason."""

    equivalent: dict[str, str] = dataclasses.field(default_factory=dict)
    unreachable: list[Unreachable] = dataclasses.field(default_factory=list)
    # Mutants of lines CPU does reach whose effect only CUDA or another backend can see.
    elsewhere: dict[str, str] = dataclasses.field(default_factory=dict)


def load_notes(path: Path) -> Notes:
    """The guard notes; RecordErrors at file:line:col for anything malformed. No file: no notes."""
    path = Path(path)
    if not path.exists():
        return Notes()
    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=SAFE_LOADER)
        data = yaml.load(text, Loader=SAFE_LOADER) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise RecordErrors(
            [RecordError(str(path), line, column, "", f"not valid YAML: {error}")]
        ) from None
    errors: list[RecordError] = []

    def error(loc: tuple, field: str, message: str, at_key: bool = False) -> None:
        line, column = locate(root, loc, at_key=at_key)
        errors.append(RecordError(str(path), line, column, field, message))

    if not isinstance(data, dict):
        error((), "", "expected a mapping with `equivalent` and `unreachable`")
        raise RecordErrors(errors)
    for key in sorted(set(data) - {"equivalent", "unreachable", "elsewhere"}):
        error(
            (key,), key, "unknown field (allowed: equivalent, unreachable, elsewhere)", at_key=True
        )
    notes = Notes()
    _mutant_notes(data, notes, error)
    notes.unreachable = _unreachable_notes(data.get("unreachable") or [], root, path, error)
    if errors:
        raise RecordErrors(errors)
    return notes


def _mutant_notes(data: dict, notes: Notes, error) -> None:
    """The ``equivalent`` and ``elsewhere`` sections into ``notes`` (mutant id -> reason); what is
    malformed to ``error``."""
    for section, why in (
        ("equivalent", "why the mutant cannot change behaviour"),
        ("elsewhere", "which device or backend can tell it apart"),
    ):
        entries = data.get(section) or {}
        if not isinstance(entries, dict):
            error((section,), section, f"expected a mapping: mutant id -> {why}")
            continue
        for ident, reason in entries.items():
            if not (isinstance(ident, str) and ident.startswith("auto.")):
                problem = "a key is an automatic mutant's id (auto.<operator>.<site>.<hash>)"
            elif not (isinstance(reason, str) and reason.strip()):
                problem = f"say {why}"
            elif ident in notes.equivalent:
                problem = "already under equivalent: a mutant is one or the other"
            else:
                getattr(notes, section)[ident] = " ".join(reason.split())
                continue
            error((section, ident), f"{section}.{ident}", problem)


def _unreachable_notes(unreachable, root, path: Path, error) -> list[Unreachable]:
    """The ``unreachable`` section's entries, each with its file:line; what is malformed to
    ``error``."""
    found = []
    if not isinstance(unreachable, list):
        error(("unreachable",), "unreachable", "expected a list of {find, reason}")
        unreachable = []
    for index, entry in enumerate(unreachable):
        if not isinstance(entry, dict) or not {"find", "reason"} <= set(entry) <= ENTRY_KEYS:
            problem = (
                "expected `find` (a statement's first line), `reason` and "
                "optionally `after` (a line before it)"
            )
        elif not all(isinstance(entry[k], str) and entry[k].strip() for k in entry):
            problem = "`find`, `reason` and `after` are non-empty strings"
        else:
            line, _ = locate(root, ("unreachable", index))
            after = entry["after"].strip() if "after" in entry else None
            reason = " ".join(entry["reason"].split())
            found.append(Unreachable(entry["find"].strip(), reason, f"{path}:{line}", after))
            continue
        error(("unreachable", index), f"unreachable[{index}]", problem)
    return found


def unreachable_lines(source: str, notes: Notes) -> tuple[dict[int, str], list[str]]:
    """Line -> reason for the statements each note names, and the notes that name nothing here."""
    text_lines = [line.strip() for line in source.splitlines()]
    # (first, last) line of every statement: a note resolves to whole statements
    spans = [
        (n.lineno, n.end_lineno) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.stmt)
    ]
    marked: dict[int, str] = {}
    unmatched = []
    for note in notes.unreachable:
        starts = [i + 1 for i, line in enumerate(text_lines) if line.startswith(note.find)]
        if note.after is not None:
            anchor = next(
                (i + 1 for i, line in enumerate(text_lines) if line.startswith(note.after)), None
            )
            starts = [] if anchor is None else [line for line in starts if line > anchor][:1]
        covered = [(a, b) for a, b in spans if a in starts]
        if not covered:
            where = "" if note.after is None else f" after {note.after!r}"
            unmatched.append(
                f"{note.where}: no statement of this release starts with {note.find!r}{where}"
            )
            continue
        for first, last in covered:
            for line in range(first, last + 1):
                marked.setdefault(line, note.reason)
    return marked, unmatched


def judged_by_notes(
    mutant_id: str, lines: set[int], notes: Notes, unreachable: dict[int, str]
) -> tuple[str, str] | None:
    """(status, reason) the notes give a record's mutant that no test killed, as the whole-file
    guard counts it: ``equivalent``, or ``unreachable here`` (an ``elsewhere`` note, or an
    edit only on statements an ``unreachable`` note names, ``unreachable`` from
    ``unreachable_lines``); None where no note names it."""
    if mutant_id in notes.equivalent:
        return M.EQUIVALENT, notes.equivalent[mutant_id].strip()
    if mutant_id in notes.elsewhere:
        return M.UNREACHABLE, notes.elsewhere[mutant_id].strip()
    reasons = {unreachable[line] for line in lines if line in unreachable}
    if lines and len(reasons) == 1 and all(line in unreachable for line in lines):
        return M.UNREACHABLE, reasons.pop().strip()
    return None
