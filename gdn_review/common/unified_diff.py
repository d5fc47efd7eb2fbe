"""Unified diffs as ``git diff`` and ``gh pr diff`` write them: read, then apply to text.

Applying is strict: every hunk's context and removed lines must be found as
they are (at the stated line, else the nearest place with the same lines, as
``patch`` does with no fuzz). A hunk that is found nowhere is a ``PatchError``
naming the file, the hunk's number and header, and the first line that does
not match; nothing is applied then. Pure text in, text out: no file is
written here.

A diff is untrusted input (whatever a contributor submits). Every file name it
carries (``diff --git``, ``---``/``+++``, rename and copy headers) must be a
plain relative path: no absolute path, no ``..`` or ``.`` part, no backslash,
no control character; anything else is a ``PatchError`` naming the file and
its hunk before anything is applied. ``confine`` then checks the names against
the tree the diff is applied to (no symlink out of it, regular files only).
A diff over ``MAX_DIFF_BYTES`` is refused before it is read.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


MAX_DIFF_BYTES = (
    32 * 1024 * 1024
)  # a PR's diff of the builder is kilobytes; hundreds of MB is an attack or a mistake
MAX_PATH_CHARS = 1024


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

    def changed_old_lines(self) -> set[int]:
        """Lines of the old file this hunk removes; for a block that only inserts, the line it
        follows."""
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
    copy: bool = False  # a copy header: old_path stays, new_path is made from it

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"

    def where(self) -> str:
        """The file and its first hunk, as an error names them."""
        shown = shown_path(self.path)
        if not self.hunks:
            return f"{shown} (no hunk)"
        return f"{shown} hunk 1 ({self.hunks[0].header.strip()[:80]})"

    def added_lines(self) -> set[int]:
        return set().union(*(h.added_new_lines() for h in self.hunks)) if self.hunks else set()


def shown_path(path: str) -> str:
    """A file name as an error shows it: quoted, control characters escaped, cut when long."""
    text = repr(path[:200])
    return text + ("…" if len(path) > 200 else "")


def _strip(path: str, prefixed: bool = True) -> str | None:
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if len(path) >= 2 and path.startswith('"') and path.endswith('"'):
        path = _unquote(path[1:-1])
    return path[2:] if prefixed and path[:2] in ("a/", "b/") else path


def _unquote(text: str) -> str:
    """git's C-style quoting of unusual names ("a/x\\ty"), read back so the name is checked as git
    means it."""
    try:
        return (
            text.encode("latin-1", "backslashreplace")
            .decode("unicode_escape")
            .encode("latin-1")
            .decode("utf-8", "replace")
        )
    except (UnicodeDecodeError, UnicodeEncodeError):
        return text


def path_problem(path: str) -> str | None:
    """Why ``path`` may not name a file of the tree a diff is applied to; None when it may."""
    if not path:
        return "an empty file name"
    if len(path) > MAX_PATH_CHARS:
        return f"a file name of {len(path)} characters (at most {MAX_PATH_CHARS})"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        return "a control character in the file name"
    if "\\" in path:
        return "a backslash in the file name"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "an absolute path"
    parts = path.split("/")
    if ".." in parts:
        return "a '..' part, which climbs out of the tree"
    if "." in parts or "" in parts:
        return "an empty or '.' part"
    return None


def check_paths(files: list[FileDiff], name: str = "DIFF") -> None:
    """PatchError for the first file whose name is not a plain relative path (see
    ``path_problem``)."""
    for file in files:
        if file.old_path is None and file.new_path is None:
            raise PatchError(
                f"{name}:{file.line}: {file.where()}: names no file on either side (both /dev/null)"
            )
        for path in (file.old_path, file.new_path):
            problem = path_problem(path) if path is not None else None
            if problem:
                raise PatchError(
                    f"{name}:{file.line}: {shown_path(path)} ({file.where()}): refused: {problem}"
                )


def confine(files: list[FileDiff], root: Path, name: str = "DIFF") -> None:
    """PatchError unless every file the diff names stays inside ``root`` and is a regular file there
    (or absent).

    The names are already plain relative paths (``check_paths``); this follows
    the tree as it is on disk: a folder or file that is a symbolic link out of
    ``root`` is refused, and so is anything there that is not a regular file
    or folder (a device, a socket, a pipe).
    """
    root = Path(root).resolve()
    for file in files:
        for path in {p for p in (file.old_path, file.new_path) if p is not None}:
            problem = _outside(root, path)
            if problem:
                raise PatchError(
                    f"{name}:{file.line}: {shown_path(path)} ({file.where()}): refused: {problem}"
                )


def _outside(root: Path, relative: str) -> str | None:
    here = root
    parts = relative.split("/")
    for index, part in enumerate(parts):
        here = here / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return None  # a new file or folder: nothing on disk to escape through
        except OSError as error:
            return f"cannot look at it in the tree: {error.strerror}"
        if stat.S_ISLNK(info.st_mode):
            target = here.resolve()
            if target != root and root not in target.parents:
                return (
                    f"{'/'.join(parts[: index + 1])} is a symbolic link out of the "
                    f"tree (to {target})"
                )
            info = os.stat(here)
        last = index == len(parts) - 1
        if not last and not stat.S_ISDIR(info.st_mode):
            return f"{'/'.join(parts[: index + 1])} is not a folder in the tree"
        if last and not stat.S_ISREG(info.st_mode):
            return "not a regular file of the tree (a folder, device, socket or pipe)"
    return None


def inside(root: Path, relative: str) -> Path:
    """``root/relative`` once it is known to stay in ``root``; PatchError otherwise."""
    problem = path_problem(relative) or _outside(Path(root).resolve(), relative)
    if problem:
        raise PatchError(f"{shown_path(relative)}: refused: {problem}")
    return Path(root).resolve() / relative


_GIT_QUOTED = re.compile(r'^("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$')


def _git_paths(rest: str) -> tuple[str | None, str | None] | None:
    """The two names of a ``diff --git`` line, quoted (git's C style) or plain."""
    match = _GIT_QUOTED.match(rest.strip())
    if match:
        return _strip(match.group(1)), _strip(match.group(2))
    parts = rest.split(" b/", 1)
    return (_strip(parts[0]), _strip("b/" + parts[1])) if len(parts) == 2 else None


def read_diff(text: str, name: str = "DIFF") -> list[FileDiff]:
    """The files of a unified diff, with their hunks; PatchError at the first line that makes no
    sense."""
    files: list[FileDiff] = []
    lines = text.splitlines()
    current: FileDiff | None = None
    index = 0
    git_paths: tuple[str | None, str | None] | None = None
    while index < len(lines):
        line = lines[index]
        if line.startswith("diff --git "):
            git_paths = _git_paths(line[len("diff --git ") :])
            current = FileDiff(
                git_paths[0] if git_paths else None,
                git_paths[1] if git_paths else None,
                [],
                index + 1,
            )
            files.append(current)
            git_paths = git_paths or (None, None)
        elif line.startswith("new file mode") and current is not None:
            current.old_path = None
        elif line.startswith("deleted file mode") and current is not None:
            current.new_path = None
        elif (
            line.startswith("Binary files ") or line.startswith("GIT binary patch")
        ) and current is not None:
            current.binary = True
        elif current is not None and line.startswith(("rename from ", "copy from ")):
            current.old_path = _strip(line.split(" from ", 1)[1], prefixed=False)
            current.copy = line.startswith("copy")
        elif current is not None and line.startswith(("rename to ", "copy to ")):
            current.new_path = _strip(line.split(" to ", 1)[1], prefixed=False)
        elif (
            line.startswith("--- ")
            and index + 1 < len(lines)
            and lines[index + 1].startswith("+++ ")
        ):
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
        raise PatchError(
            f"{name}: no file in it: expected a unified diff (as git diff or gh pr diff write it)"
        )
    check_paths(files, name)
    return files


def _read_hunk(lines: list[str], index: int, file: FileDiff, name: str) -> int:
    match = HUNK_HEADER.match(lines[index])
    if not match:
        raise PatchError(f"{name}:{index + 1}: not a hunk header: {lines[index][:80]!r}")
    old_start, old_count, new_start, new_count = (
        int(match.group(1)),
        int(match.group(2) or 1),
        int(match.group(3)),
        int(match.group(4) or 1),
    )
    hunk = Hunk(
        len(file.hunks) + 1, lines[index], old_start, old_count, new_start, new_count, [], index + 1
    )
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
        raise PatchError(
            f"{name}:{index}: {file.path} hunk {hunk.number} ({hunk.header}) is cut short"
        )
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
            if 0 <= start <= limit and lines[start : start + len(wanted)] == wanted:
                return start
    return None


def apply_file(file: FileDiff, original: str | None, name: str = "DIFF") -> str | None:
    """The new text of one file (None: deleted); PatchError naming the hunk that does not apply."""
    if file.binary:
        raise PatchError(f"{name}:{file.line}: {file.path}: a binary change cannot be applied")
    if file.old_path is None:
        if original is not None:
            raise PatchError(
                f"{name}:{file.line}: {file.path}: the diff creates it, but it already exists"
            )
        original = ""
    elif original is None:
        raise PatchError(
            f"{name}:{file.line}: {file.path}: no such file in the sources the diff is applied to"
        )
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
        lines[at : at + len(wanted)] = hunk.new_lines()
        offset += len(hunk.new_lines()) - len(wanted)
        if hunk.no_newline_new:
            ends_with_newline = False
        elif hunk.no_newline_old:
            ends_with_newline = True
    text = "\n".join(lines)
    return text + "\n" if lines and ends_with_newline else text


def _mismatch(
    file: FileDiff, hunk: Hunk, lines: list[str], stated: int, wanted: list[str], name: str
) -> str:
    """Which line of the hunk differs at the place it names."""
    detail = "its lines are beyond the end of the file"
    for i, want in enumerate(wanted):
        have = lines[stated + i] if 0 <= stated + i < len(lines) else None
        if have != want:
            detail = (
                f"line {stated + i + 1} is {have!r}, the hunk expects {want!r}"
                if have is not None
                else detail
            )
            break
    return (
        f"{name}:{hunk.line}: {file.path}: hunk {hunk.number} "
        f"({hunk.header.strip()}) does not apply: {detail}; "
        "the same lines are nowhere else in the file either"
    )


def apply(files: list[FileDiff], read: callable, name: str = "DIFF") -> dict[str, str | None]:
    """Every file's new text (None: deleted), or PatchError at the first hunk that does not apply.

    ``read(path)`` gives the text the diff is applied to, None where there is no such file.
    """
    patched: dict[str, str | None] = {}
    for file in files:
        original = read(file.old_path) if file.old_path else None
        if file.copy:  # the source stays; the copy is its text with the hunks applied
            patched[file.path] = apply_file(file, original, name)
            continue
        patched[file.path] = apply_file(file, original, name)
        if file.old_path and file.new_path and file.old_path != file.new_path:
            patched[file.old_path] = None  # a rename
    return patched


def stored_beside(record_path: Path) -> Path | None:
    """The PR's diff stored beside its record (``kb/N.diff`` beside ``kb/N.yaml``, as ``gh pr diff
    N`` writes it), or None; a link or anything but a regular file there is refused (PatchError)."""
    path = Path(record_path).with_suffix(".diff")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise PatchError(
            f"{path}: refused: the PR's diff beside its record must be a "
            "regular file, not a link or a folder"
        )
    return path if path.is_file() else None


def read_diff_file(path: Path) -> tuple[str, list[FileDiff]]:
    """The diff's text and files, or PatchError (missing, unreadable, too large, not a diff)."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_DIFF_BYTES:
            raise PatchError(
                f"{path}: {size / 2**20:.0f} MiB, larger than a diff gdn-review "
                f"reads ({MAX_DIFF_BYTES // 2**20} MiB)"
            )
        if not Path(path).is_file():
            raise PatchError(f"{path}: not a regular file")
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PatchError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PatchError(f"{path}: cannot read: {error}") from None
    return text, read_diff(text, str(path))
