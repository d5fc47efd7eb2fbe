"""``gdn-review mutate --whole-file``'s flow: the whole target file's guard score, written as a
report.

On the loaded vLLM the score runs in this process (``guard.score_whole_file``)
and goes to ``reports/guard.json`` and ``reports/guard.md`` (for a release
asked for by ``--release``: ``guard-<release>.*``). On another release the score runs
in a child of this module (``python -m gdn_review.mutation.whole_file SPEC``) whose vLLM is
that release's tree (``common.release_trees``, fetched once): it writes the files, and its
progress, result or error come back to the parent as lines on its stderr.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from gdn_review.common import interrupts, release_cache, release_trees
from gdn_review.common.files import atomic_write
from gdn_review.common.release import loaded as loaded_release
from gdn_review.common.vocabulary import SURVIVORS, MutantStatus
from gdn_review.kb.server_config import configuration_label
from gdn_review.kb.subjects import key_order, key_short
from gdn_review.mutation import family, guard, guard_notes
from gdn_review.report import guard_report

if TYPE_CHECKING:  # runner imports pytest: only where mutants run
    from gdn_review.mutation.runner import Progress


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
            (m for m in mutants if m["status"] in SURVIVORS),
            key=lambda m: (m.get("line") or 0, m["id"]),
        )


@dataclasses.dataclass
class Options(guard.Settings):
    """``mutate --whole-file``'s options: the KB (its ``guard/`` notes), where the reports go, the
    release (None: the loaded one) and whether it may be fetched, the file (None: GDN's)."""

    kb_dir: Path = Path("kb")
    reports_dir: Path = Path("reports")
    release: str | None = None
    fetch: bool = True
    file: str | None = None


def score_and_write(
    records: dict,
    modules: dict,
    options: Options,
    progress: Progress | None = None,
    say: Callable[[str], None] = print,
) -> Scored:
    """Score the target file of the loaded vLLM, or of ``options.release`` in a child on that
    release's tree; GuardError when the score cannot be measured (a check failed), ReleaseError
    when the release cannot be had (bad input)."""
    loaded, root = loaded_release()
    if options.release and options.release != loaded:
        return _score_on(options.release, records, modules, options, progress, say)
    target = options.file or family.GDN_FILE
    if family.is_family_file(target):
        records, modules = _covering(records, modules, target)
    notes_file = family.notes_path(Path(options.kb_dir), target)
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
    stem = family.report_stem(target)
    stem = f"{stem}-{loaded}" if options.release else stem
    folder = Path(options.reports_dir)
    remembered = killers_file(stem)
    options.last_killers = options.last_killers or {
        **last_killers(remembered, target),
        **last_killers(folder / f"{stem}.json", target),
    }
    data = guard.score_whole_file(
        target, loaded, source, notes, named, configurations, options, progress
    )
    remember_killers(remembered, target, options.last_killers, data["mutants"])
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(
        folder / f"{stem}.json", json.dumps(data, indent=1, sort_keys=True, default=str) + "\n"
    )
    atomic_write(folder / f"{stem}.md", guard_report.markdown(data))
    return Scored(data, [folder / f"{stem}.md", folder / f"{stem}.json"])


def killers_file(stem: str) -> Path:
    """Where the tests that killed each mutant of the last score are kept, outside the tree
    (``$GDN_REVIEW_CACHE/guard-killers/<stem>.json``): reports/ is not kept in git, and a clean
    clone's first score would otherwise search again for the killer of every mutant."""
    return release_cache.cache_root().parent / "guard-killers" / f"{stem}.json"


def remember_killers(
    path: Path, target: str, before: dict[str, list[str]], mutants: list[dict]
) -> None:
    """Keep ``before`` updated with this score's kills at ``path`` (a cache: where it cannot
    be written, the next score only takes longer)."""
    killed = {e["id"]: e["killed_by"] for e in mutants if e["status"] == MutantStatus.KILLED}
    merged = {**before, **killed}
    data = {
        "target": target,
        "mutants": [
            {"id": ident, "status": MutantStatus.KILLED, "killed_by": merged[ident]}
            for ident in sorted(merged)
        ],
    }
    try:
        atomic_write(path, json.dumps(data, indent=0, sort_keys=True) + "\n")
    except OSError:
        pass


def last_killers(report: Path, target: str) -> dict[str, list[str]]:
    """Mutant id -> the tests that killed it, from the file's last score (its report's JSON,
    or what ``remember_killers`` kept; nothing where there is none, or it is unreadable or of
    another file). Only the order of a mutant's tests follows it, never its verdict. A mutant's
    id names its edit and place, so an id of another release names the same edit."""
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("target") != target:
        return {}
    return {
        entry["id"]: [str(test) for test in entry["killed_by"]]
        for entry in data.get("mutants", [])
        if isinstance(entry, dict)
        and entry.get("status") == MutantStatus.KILLED
        and isinstance(entry.get("id"), str)
        and isinstance(entry.get("killed_by"), list)
    }


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


# The child's lines on stderr that carry its progress and result to the parent (the rest of
# its output is the parent's to show as it is).
EVENT = "gdn-review-whole-file:"


def _score_on(
    version: str,
    records: dict,
    modules: dict,
    options: Options,
    progress: Progress | None,
    say: Callable[[str], None],
) -> Scored:
    """The score on release ``version``, by this module in a child whose vLLM is that release's
    tree: its progress shown here as it comes, its files read back, its error raised here."""
    folder = release_trees.tree(version, fetch=options.fetch, say=say)  # ReleaseError: bad input
    say(f"vLLM {version}: running in a process on {folder or 'the installed vLLM'}")
    spec = {
        "options": dataclasses.asdict(options),
        "records": [str(path) for path in records],
        "modules": [[key, str(path)] for key, path in modules.items()],
    }
    child = interrupts.popen(
        [sys.executable, "-m", "gdn_review.mutation.whole_file", json.dumps(spec, default=str)],
        env=release_trees.environment(folder),
        stderr=subprocess.PIPE,
        text=True,
    )
    ended: dict = {}
    try:
        for line in child.stderr:
            if not line.startswith(EVENT):
                sys.stderr.write(line)
                continue
            event = json.loads(line[len(EVENT) :])
            for step in {"start", "advance"} & event.keys() if progress else ():
                getattr(progress, step)(event[step])
            ended.update(event)
        child.wait()
    finally:
        code = interrupts.stop(child)
    interrupts.check()
    if ended.get("error") == "GuardError":
        raise guard.GuardError(ended["message"], ended.get("no_verdict", False))
    if "error" in ended:
        raise FamilyError(ended["message"])
    if "written" not in ended:  # it died before it could say how it ended
        return Scored(child_exit=code)
    written = [Path(p) for p in ended["written"]]
    return Scored(json.loads(written[1].read_text(encoding="utf-8")), written)


def child_main(spec_json: str) -> int:
    """The child of ``_score_on``: the score on this process's vLLM, said on stderr as events."""
    from gdn_review.kb import load_record

    def tell(**event) -> None:
        print(EVENT + json.dumps(event, default=str), file=sys.stderr, flush=True)

    told = types.SimpleNamespace(
        start=lambda total: tell(start=total), advance=lambda entry: tell(advance=entry)
    )
    spec = json.loads(spec_json)
    options = Options(**spec["options"])
    options.kb_dir, options.reports_dir = Path(options.kb_dir), Path(options.reports_dir)
    options.patterns = tuple(options.patterns)
    # checked by the parent that chose them
    records = {Path(path): load_record(Path(path), checked=False) for path in spec["records"]}
    modules = {key: Path(path) for key, path in spec["modules"]}
    say = functools.partial(print, file=sys.stderr, flush=True)
    try:
        scored = score_and_write(records, modules, options, told, say)
    except (guard.GuardError, FamilyError) as error:
        tell(
            error=type(error).__name__,
            message=str(error),
            no_verdict=getattr(error, "no_verdict", False),
        )
        return 1
    tell(written=[str(path) for path in scored.written])
    return 0


if __name__ == "__main__":
    from gdn_review.common.fast_exit import exit_now
    from gdn_review.mutation import whole_file  # the module's own classes, not __main__'s

    exit_now(whole_file.child_main(sys.argv[1]))
