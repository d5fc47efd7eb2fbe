"""Which vLLM releases contain a line (or a fixed string) of a file: ``gdn-review find-release``.

For a record's ``target``: the first release that has a PR's line is its
``head_release``, the release checked before it the ``base_release``. Each
release's file is read as text, never imported: the installed vLLM's from its
package folder, every other release's from the release cache (fetched into it
when missing, unless offline). The range ends by default at the newest release the
package index serves (``common.published``), not at the installed one.

A line matches when it equals the wanted line with surrounding whitespace
stripped (several wanted lines: consecutive non-blank lines of the file, each
stripped); a fixed string matches anywhere in the file's text, as given.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Callable

from gdn_review.common import release, release_cache, release_trees
from gdn_review.common.release import Release, ReleaseError

DEFAULT_FILE = "vllm/v1/attention/backends/gdn_attn.py"
DEFAULT_FROM = "0.28.0"


class FinderError(Exception):
    """Bad input (exit 2): an empty line, an unknown release, a range upside down, a file no release
    has."""


@dataclasses.dataclass(frozen=True)
class Seen:
    """One release's answer: the 1-based lines where a match starts (none: absent)."""

    release: str
    lines: tuple[int, ...] = ()
    where: str = "release cache"  # or "installed"
    no_file: bool = False

    @property
    def present(self) -> bool:
        return bool(self.lines)


@dataclasses.dataclass(frozen=True)
class Finding:
    wanted: str
    file: str
    fixed_string: bool
    seen: list[Seen]  # oldest first
    not_checked: dict[str, str]  # release -> why (offline, not on the index)

    @property
    def present(self) -> list[str]:
        return [s.release for s in self.seen if s.present]

    @property
    def first(self) -> str | None:
        return self.present[0] if self.present else None

    @property
    def last(self) -> str | None:
        return self.present[-1] if self.present else None

    @property
    def still_present(self) -> bool:
        return bool(self.seen) and self.seen[-1].present

    @property
    def base(self) -> str | None:
        """The release checked just before the first one that has it (it lacks it), if any."""
        releases = [s.release for s in self.seen]
        if self.first is None or releases.index(self.first) == 0:
            return None
        return releases[releases.index(self.first) - 1]

    def runs(self) -> list[tuple[str, str]]:
        """(from, to) of each stretch of consecutive checked releases that have it."""
        stretches = itertools.groupby(self.seen, key=lambda item: item.present)
        found = [[item.release for item in stretch] for present, stretch in stretches if present]
        return [(releases[0], releases[-1]) for releases in found]

    def unchecked_between(self, low: str | None, high: str) -> list[str]:
        """Releases in (low, high) that were meant to be checked and were not."""
        return [v for v in map(Release, self.not_checked) if (low is None or low < v) and v < high]


def _version(text: str, what: str) -> Release:
    try:
        return Release(text)
    except ReleaseError as error:
        raise FinderError(f"{what}: {error}") from None


def releases_between(start: str, end: str, cached: list[str]) -> list[str]:
    """Every X.Y.0 from ``start`` to ``end`` (the ends themselves included) and every cached release
    in that range."""
    low, high = _version(start, "--from"), _version(end, "--to")
    if low > high:
        raise FinderError(f"--from {start} is later than --to {end}")
    if low.version.major != high.version.major:
        raise FinderError(f"--from {start} and --to {end}: give a range within one major version")
    chosen = {low, high, *low.minors_until(high)}
    chosen.update(v for v in map(Release, cached) if low <= v <= high)
    return sorted(chosen)


def matches(text: str, wanted: str, fixed_string: bool) -> tuple[int, ...]:
    """1-based lines where ``wanted`` starts in ``text``."""
    if fixed_string:
        found, start = [], text.find(wanted)
        while start != -1:
            found.append(text.count("\n", 0, start) + 1)
            start = text.find(wanted, start + 1)
        return tuple(found)
    needle = [line.strip() for line in wanted.splitlines() if line.strip()]
    lines = [
        (number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if line.strip()
    ]
    width = len(needle)
    return tuple(
        lines[i][0]
        for i in range(len(lines) - width + 1)
        if [stripped for _, stripped in lines[i : i + width]] == needle
    )


def find_release(
    wanted: str,
    file: str = DEFAULT_FILE,
    start: str | None = None,
    end: str | None = None,
    fixed_string: bool = False,
    offline: bool = False,
    say: Callable[[str], None] = print,
    root: Path | None = None,
) -> Finding:
    """Which releases from ``start`` (default 0.28.0) to ``end`` (default: the newest the package
    index serves; ``offline``: the newest at hand) contain ``wanted`` in ``file``.

    Releases missing from the release cache are fetched into it (progress through
    ``say``) unless ``offline``: then they are listed as not checked.
    """
    if not wanted.strip():
        raise FinderError("give the line (or with --fixed-string the text) to find; it is empty")
    file = file.strip().lstrip("/")
    if not file or ".." in Path(file).parts:
        raise FinderError(f"--file {file!r}: give a path inside vLLM, e.g. {DEFAULT_FILE}")
    installed_root: Path | None = None
    try:
        installed, installed_root = release.loaded()
    except ReleaseError:
        installed = None
    if end is None:
        from gdn_review.common import published

        end = published.default_newest(say, offline)
        if end is None:
            raise FinderError(
                "no release ends the range (the package index could not be read and no release "
                "is at hand): give --to X.Y.Z"
            )
    releases = releases_between(start or DEFAULT_FROM, end, release_cache.cached_versions(root))
    seen: list[Seen] = []
    not_checked: dict[str, str] = {}
    for version in releases:
        if version == installed and installed_root is not None:
            path = installed_root / file
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
            seen.append(_seen(version, text, wanted, fixed_string, "installed"))
            continue
        try:  # not on the index, no network, not cached or damaged (--offline)
            entry = release_trees.entry(version, fetch=not offline, say=say, root=root)
            if not (entry.path / file).is_file():
                seen.append(Seen(version, no_file=True))
                continue
            text = release_trees.source(version, file, fetch=not offline, say=say, root=root)
        except ReleaseError as error:
            not_checked[version] = str(error)
            continue
        if text is None:
            not_checked[version] = "its cache entry is damaged (--offline)"
            continue
        seen.append(_seen(version, text, wanted, fixed_string, "release cache"))
    if not seen:
        raise FinderError(
            f"no release from {start or DEFAULT_FROM} to {end} could be read: "
            + "; ".join(f"{v}: {why}" for v, why in not_checked.items())
        )
    if all(item.no_file for item in seen):
        raise FinderError(
            f"--file {file}: no release checked has this file "
            f"({', '.join(s.release for s in seen)})"
        )
    return Finding(wanted, file, fixed_string, seen, not_checked)


def _seen(version: str, text: str | None, wanted: str, fixed_string: bool, where: str) -> Seen:
    if text is None:
        return Seen(version, where=where, no_file=True)
    return Seen(version, matches(text, wanted, fixed_string), where)


def finding_lines(finding: Finding) -> list[str]:
    """What ``find-release`` prints: each release, then first and last, then the target lines to
    paste."""
    shown = finding.wanted if len(finding.wanted) <= 100 else finding.wanted[:97] + "..."
    how = "fixed string" if finding.fixed_string else "line, whitespace stripped"
    out = [f"{finding.file}: {shown!r} ({how})"]
    rows = [
        (item.release, _state(item) + ("  [installed]" if item.where == "installed" else ""))
        for item in finding.seen
    ]
    rows += [(version, f"not checked: {why}") for version, why in finding.not_checked.items()]
    for version, state in sorted(rows, key=lambda row: Release(row[0])):
        out.append(f"  {version:<10} {state}")
    if finding.first is None:
        out.append(f"not found in any of the {len(finding.seen)} releases checked")
        return out
    releases = [item.release for item in finding.seen]
    if finding.still_present:
        tail = f"{finding.last} (still present)"
    else:
        tail = f"{finding.last} (gone from {releases[releases.index(finding.last) + 1]})"
    out.append(f"first: {finding.first}, last: {tail}")
    runs = finding.runs()
    if len(runs) > 1:
        out.append(
            "it disappears and reappears: present in "
            + ", ".join(a if a == b else f"{a} to {b}" for a, b in runs)
        )
    gaps = finding.unchecked_between(finding.base, finding.first)
    if gaps:
        out.append(
            f"note: {', '.join(gaps)} not checked: the first release with it "
            f"may be earlier than {finding.first}"
        )
    if finding.base is None:
        out.append(
            f"it is already in {finding.first}, the oldest release checked: "
            "give an earlier --from to find the release without it"
        )
        return out
    if gaps:
        out.append("to paste once the releases above are checked (unverified):")
    else:
        out.append("to paste into the record:")
    # unverified: offered commented out, so it is not pasted by accident
    mark = "# " if gaps else ""
    out += [
        f"{mark}target:",
        f"{mark}  base_release: {finding.base}",
        f"{mark}  head_release: {finding.first}",
    ]
    return out


def _state(item: Seen) -> str:
    if item.no_file:
        return "no such file"
    if item.present:
        return (
            f"present (line{'s' if len(item.lines) > 1 else ''} {', '.join(map(str, item.lines))})"
        )
    return "absent"
