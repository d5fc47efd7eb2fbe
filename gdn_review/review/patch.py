"""Unified diffs as ``git diff`` and ``gh pr diff`` write them: read, then apply to text.

Applying is strict: every hunk's context and removed lines must be found as
they are (at the stated line, else the nearest place with the same lines, as
``patch`` does with no fuzz). A hunk that is found nowhere is a ``PatchError``
naming the file, the hunk's number and header, and the first line that does
not match; nothing is applied then. Pure text in, text out: no file is
written here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


class PatchError(Exception):
    """A diff that cannot be read or does not apply (bad input: exit 2)."""


@dataclasses.dataclass
class Hunk:
    number: int  # 1-based, within its file
    header: str
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: list[str]  # each starts with ' ', '-' or '+', without its line ending
    line: int  # line of the header in the diff file
    no_newline_old: bool = False
    no_newline_new: bool = False

    def old_lines(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " -"]

    def new_lines(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " +"]

    def old_range(self) -> tuple[int, int]:
        """First and last line of the old file the hunk removes or rests on (1-based, inclusive)."""
        return self.old_start, self.old_start + max(self.old_count, 1) - 1

    def changed_old_lines(self) -> set[int]:
        """Lines of the old file this hunk removes; for a block that only inserts, the line it follows."""
        lines, number, block_removes, pending = set(), self.old_start, False, False
        for line in self.lines + [" "]:  # a sentinel closes the last block
            if line[0] == "-":
                lines.add(number)
                number += 1
                block_removes = True
            elif line[0] == "+":
                pending = True
            else:
                if pending and not block_removes:
                    lines.add(max(number - 1, 1))
                block_removes = pending = False
                number += 1
        return lines

    def added_new_lines(self) -> set[int]:
        """Lines of the new file this hunk adds (1-based)."""
        lines, number = set(), self.new_start
        for line in self.lines:
            if line[0] == "+":
                lines.add(number)
                number += 1
            elif line[0] == " ":
                number += 1
        return lines


@dataclasses.dataclass
class FileDiff:
    old_path: str | None  # None: a new file
    new_path: str | None  # None: a deleted file
    hunks: list[Hunk]
    line: int  # where the file's section starts in the diff
    binary: bool = False

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"

    def added_lines(self) -> set[int]:
        return set().union(*(h.added_new_lines() for h in self.hunks)) if self.hunks else set()


def _strip(path: str) -> str | None:
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1]
    return path[2:] if path[:2] in ("a/", "b/") else path


def read_diff(text: str, name: str = "DIFF") -> list[FileDiff]:
    """The files of a unified diff, with their hunks; PatchError at the first line that makes no sense."""
    files: list[FileDiff] = []
    lines = text.splitlines()
    current: FileDiff | None = None
    index = 0
    git_paths: tuple[str | None, str | None] | None = None
    while index < len(lines):
        line = lines[index]
        if line.startswith("diff --git "):
            parts = line[len("diff --git "):].split(" b/", 1)
            git_paths = (_strip(parts[0]), _strip("b/" + parts[1])) if len(parts) == 2 else None
            current = FileDiff(git_paths[0] if git_paths else None, git_paths[1] if git_paths else None, [], index + 1)
            files.append(current)
        elif line.startswith("new file mode") and current is not None:
            current.old_path = None
        elif line.startswith("deleted file mode") and current is not None:
            current.new_path = None
        elif line.startswith("Binary files ") and current is not None:
            current.binary = True
        elif line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            old, new = _strip(line[4:]), _strip(lines[index + 1][4:])
            if current is None or current.hunks or git_paths is None:
                current = FileDiff(old, new, [], index + 1)
                files.append(current)
            else:
                current.old_path, current.new_path = old, new
            git_paths = None
            index += 1
        elif line.startswith("@@"):
            if current is None:
                raise PatchError(f"{name}:{index + 1}: a hunk before any file header (--- / +++)")
            index = _read_hunk(lines, index, current, name)
            continue
        index += 1
    if not files:
        raise PatchError(f"{name}: no file in it: expected a unified diff (as git diff or gh pr diff write it)")
    return files


def _read_hunk(lines: list[str], index: int, file: FileDiff, name: str) -> int:
    match = HUNK_HEADER.match(lines[index])
    if not match:
        raise PatchError(f"{name}:{index + 1}: not a hunk header: {lines[index][:80]!r}")
    old_start, old_count, new_start, new_count = (
        int(match.group(1)), int(match.group(2) or 1), int(match.group(3)), int(match.group(4) or 1),
    )
    hunk = Hunk(len(file.hunks) + 1, lines[index], old_start, old_count, new_start, new_count, [], index + 1)
    old_seen = new_seen = 0
    index += 1
    while index < len(lines) and (old_seen < old_count or new_seen < new_count):
        line = lines[index]
        kind = line[:1] or " "  # an empty line in a diff is an empty context line
        if kind == "\\":
            index += 1
            continue
        if kind not in " +-":
            raise PatchError(
                f"{name}:{index + 1}: {file.path} hunk {hunk.number} ({hunk.header}) ends early: "
                f"{old_count - old_seen} old and {new_count - new_seen} new line(s) missing"
            )
        hunk.lines.append(kind + line[1:])
        old_seen += kind in " -"
        new_seen += kind in " +"
        index += 1
    if old_seen != old_count or new_seen != new_count:
        raise PatchError(f"{name}:{index}: {file.path} hunk {hunk.number} ({hunk.header}) is cut short")
    while index < len(lines) and lines[index].startswith("\\"):  # "\ No newline at end of file"
        last = hunk.lines[-1][0] if hunk.lines else " "
        if last in " -":
            hunk.no_newline_old = True
        if last in " +":
            hunk.no_newline_new = True
        index += 1
    file.hunks.append(hunk)
    return index


def _find(lines: list[str], wanted: list[str], near: int) -> int | None:
    """Index where ``wanted`` starts in ``lines``, the closest to ``near`` first."""
    if not wanted:
        return min(max(near, 0), len(lines))
    limit = len(lines) - len(wanted)
    for distance in range(0, max(limit, near) + 1):
        for start in (near - distance, near + distance) if distance else (near,):
            if 0 <= start <= limit and lines[start:start + len(wanted)] == wanted:
                return start
    return None


def apply_file(file: FileDiff, original: str | None, name: str = "DIFF") -> str | None:
    """The new text of one file (None: deleted); PatchError naming the hunk that does not apply."""
    if file.binary:
        raise PatchError(f"{name}:{file.line}: {file.path}: a binary change cannot be applied")
    if file.old_path is None:
        if original is not None:
            raise PatchError(f"{name}:{file.line}: {file.path}: the diff creates it, but it already exists")
        original = ""
    elif original is None:
        raise PatchError(f"{name}:{file.line}: {file.path}: no such file in the sources the diff is applied to")
    if file.new_path is None:
        return None
    lines = original.splitlines()
    ends_with_newline = original.endswith("\n") or original == ""
    offset = 0
    for hunk in file.hunks:
        wanted = hunk.old_lines()
        stated = hunk.old_start - 1 + offset if hunk.old_count else hunk.old_start + offset
        at = _find(lines, wanted, stated)
        if at is None:
            raise PatchError(_mismatch(file, hunk, lines, stated, wanted, name))
        lines[at:at + len(wanted)] = hunk.new_lines()
        offset += len(hunk.new_lines()) - len(wanted)
        if hunk.no_newline_new:
            ends_with_newline = False
        elif hunk.no_newline_old:
            ends_with_newline = True
    text = "\n".join(lines)
    return text + "\n" if lines and ends_with_newline else text


def _mismatch(file: FileDiff, hunk: Hunk, lines: list[str], stated: int, wanted: list[str], name: str) -> str:
    """Which line of the hunk differs at the place it names."""
    detail = "its lines are beyond the end of the file"
    for i, want in enumerate(wanted):
        have = lines[stated + i] if 0 <= stated + i < len(lines) else None
        if have != want:
            detail = f"line {stated + i + 1} is {have!r}, the hunk expects {want!r}" if have is not None else detail
            break
    return (
        f"{name}:{hunk.line}: {file.path}: hunk {hunk.number} ({hunk.header.strip()}) does not apply: {detail}; "
        "the same lines are nowhere else in the file either"
    )


def apply(files: list[FileDiff], read: callable, name: str = "DIFF") -> dict[str, str | None]:
    """Every file's new text (None: deleted), or PatchError at the first hunk that does not apply.

    ``read(path)`` gives the text the diff is applied to, None where there is no such file.
    """
    patched: dict[str, str | None] = {}
    for file in files:
        original = read(file.old_path) if file.old_path else None
        patched[file.path] = apply_file(file, original, name)
        if file.old_path and file.new_path and file.old_path != file.new_path:
            patched[file.old_path] = None  # a rename
    return patched


def read_diff_file(path: Path) -> tuple[str, list[FileDiff]]:
    """The diff's text and files, or PatchError (missing, unreadable, not a diff)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PatchError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PatchError(f"{path}: cannot read: {error}") from None
    return text, read_diff(text, str(path))
