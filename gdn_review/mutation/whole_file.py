"""``gdn-review mutate --whole-file``'s flow: the whole target file's guard score, written as a
report.

On the loaded vLLM the score runs in this process (``guard.score_whole_file``)
and goes to ``reports/guard.json`` and ``reports/guard.md`` (for a release
asked for by ``--release``: ``guard-<release>.*``). On another release this
command runs again in a child whose vLLM is that release's tree
(``common.release_trees``, fetched once), which writes its own files.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Callable

from gdn_review.common import interrupts, release_cache, release_trees
from gdn_review.common.files import atomic_write
from gdn_review.kb.server_config import configuration_label
from gdn_review.kb.subjects import key_order, key_short
from gdn_review.mutation import family, guard, guard_notes
from gdn_review.report import guard_report

# What the gate (``--min-score 100``, in the test suite) fails on: a reachable, non-equivalent
# mutant that no test detected.
ESCAPED = ("survived", "not reached")


@dataclasses.dataclass
class Scored:
    """What a whole-file run left: the score's data and its files, or the exit code of the child
    that ran it."""

    data: dict | None = None
    written: list[Path] = dataclasses.field(default_factory=list)
    child_exit: int | None = None

    def below(self, min_score: float) -> bool:
        """Whether the score is under ``min_score`` percent, from the exact counts (a rounded
        percentage reads 100.0 with one survivor in 2,000)."""
        score = (self.data or {}).get("score", {})
        detected, scored = score.get("detected"), score.get("scored")
        if detected is None or not scored:
            return True
        return detected * 100 < min_score * scored

    def escaped(self) -> list[dict]:
        """The mutants CPU can reach (not noted unreachable), not equivalent, that no test
        detected: survivors and those no test reaches, in the file's order."""
        mutants = (self.data or {}).get("mutants", [])
        return sorted(
            (m for m in mutants if m["status"] in ESCAPED),
            key=lambda m: (m.get("line") or 0, m["id"]),
        )


def score_and_write(
    kb_dir: Path,
    records: dict,
    modules: dict,
    reports_dir: Path,
    release: str | None = None,
    child_options: list[str] = (),
    fetch: bool = True,
    patterns: tuple[str, ...] = (),
    jobs: int = 1,
    timeout: float = 60.0,
    on_start: Callable[[int], None] = lambda total: None,
    on_result: Callable[[dict], None] = lambda entry: None,
    say: Callable[[str], None] = print,
    file: str | None = None,
) -> Scored:
    """Score the target file of the loaded vLLM, or of ``release`` in a child (``child_options``:
    the command's own options for it); GuardError when the score cannot be measured (a check
    failed), ReleaseError when the release cannot be had (bad input)."""
    loaded, root = release_cache.loaded()
    if release and release != loaded:
        return Scored(
            child_exit=_rerun_on(
                release,
                ["mutate", "--whole-file", "--release", release, *child_options],
                fetch,
                say,
            )
        )
    target = file or family.GDN_FILE
    if family.is_family_file(target):
        records, modules = _covering(records, modules, target)
    notes_file = family.notes_path(Path(kb_dir), target)
    notes = guard_notes.load_notes(notes_file)
    source = (root / target).read_text(encoding="utf-8")
    if family.is_family_file(target):
        problems = family.reasons_without_kernel(
            source,
            [(u.where, u.reason) for u in notes.unreachable]
            + [(f"{notes_file}: elsewhere.{i}", r) for i, r in notes.elsewhere.items()],
        )
        if problems:
            raise FamilyError("\n".join(problems))
    say(
        f"[1/3] baseline: {len(modules)} generated module(s) on vLLM "
        f"{loaded}, traced per test (CPU)"
    )
    named = {
        key_short(n): path
        for n, path in sorted(modules.items(), key=lambda item: key_order(item[0]))
    }
    configurations = {
        key_short(record.key): {c.id: configuration_label(c) for c in record.cases}
        for record in records.values()
    }
    data = guard.score_whole_file(
        named,
        target,
        loaded,
        source,
        notes,
        jobs,
        timeout,
        on_start,
        on_result,
        patterns,
        configurations,
    )
    stem = family.report_stem(target)
    stem = f"{stem}-{loaded}" if release else stem
    folder = Path(reports_dir)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(
        folder / f"{stem}.json", json.dumps(data, indent=1, sort_keys=True, default=str) + "\n"
    )
    atomic_write(folder / f"{stem}.md", guard_report.markdown(data))
    return Scored(data, [folder / f"{stem}.md", folder / f"{stem}.json"])


class FamilyError(Exception):
    """``--file`` names no file of the loaded release's builder family, or no record covers it:
    bad input, said for people."""


def _covering(records: dict, modules: dict, target: str) -> tuple[dict, dict]:
    """Only the records whose cases name a builder class of ``target`` (a subclass file), and
    their modules."""
    files = family.family_files()
    if target not in files:
        known = ", ".join(f for f in files if family.is_family_file(f)) or "none"
        raise FamilyError(
            f"--file {target}: not a file of the loaded vLLM's GDN builder family "
            f"(its subclass files: {known})"
        )
    chosen = {p: r for p, r in records.items() if family.covers(r, target, files)}
    kept = {
        key: path for key, path in modules.items() if any(r.key == key for r in chosen.values())
    }
    if not kept:
        raise FamilyError(
            f"--file {target}: no record has a case naming {' or '.join(files[target])} "
            "(`builder:`); add one, then score it"
        )
    return chosen, kept


def _rerun_on(version: str, argv: list[str], fetch: bool, say: Callable[[str], None]) -> int:
    """``gdn-review <argv>`` in a child whose vLLM is release ``version``'s tree; its exit code."""
    folder = release_trees.tree(version, fetch=fetch, say=say)  # ReleaseError: bad input
    say(f"vLLM {version}: running in a process on {folder or 'the installed vLLM'}")
    command = [sys.executable, "-m", "gdn_review.cli", *argv]
    return interrupts.run_child(command, env=release_trees.environment(folder)).returncode
