"""The whole-file score: how much of the builder the KB as a whole protects.

``gdn-review mutate --whole-file`` plants the broad automatic mutants
(``operators``, ``broad=True``) on every line of the target file's builder
class methods and module-level functions -- not only a PR's hunks -- and runs
them against every complete record's generated module at once, in-process
with forked children as ``mutate`` does. Stages, each a plain function:

- ``scope`` (guard_lines.py): the lines the score covers, with their function;
- ``load_notes`` (guard_notes.py): ``kb/guard/notes.yaml``, what the score must not count
  (equivalent mutants with their reason, statements CPU cannot reach with theirs);
- ``catalogue``: the mutants of the loaded release's file;
- ``score_whole_file``: the baseline (traced per test), then each mutant under only the
  tests that execute its edit, stopping at the first failure;
- ``markdown`` (report/guard_report.py): ``reports/guard.md`` from the JSON
  ``score_whole_file`` returns.

Why a mutant runs only under the tests that execute its edit: the tests are
deterministic, so a test that never executes the edited statement runs as it
did in the baseline and passes (see ``reach``). Construction code is the
exception: builders are cached per process, so the test that constructed one
in the baseline may not be the one that does in the child; a mutant of
``__init__`` (or of what it calls) runs under every test.
"""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gdn_review.common import interrupts
from gdn_review.common.vocabulary import KILLS, SURVIVORS, MutantStatus
from gdn_review.mutation import family, operators
from gdn_review.mutation.catalogue import Mutant, from_automatic
from gdn_review.mutation.guard_lines import (
    construction_functions,
    line_map,
    scope,
    test_configurations,
)
from gdn_review.mutation.guard_notes import Notes, unreachable_lines
from gdn_review.run import evidence_file, suite

if TYPE_CHECKING:  # runner imports pytest: only where mutants run
    from gdn_review.mutation.runner import Progress

GUARD_FORMAT = "gdn-review-guard/1"
DETECTED = KILLS  # a mutant that hangs the suite is caught too
SCORED = SURVIVORS | KILLS


def catalogue(source: str, target: str, notes: Notes) -> list[Mutant]:
    """Every broad automatic mutant of the scope's lines; the noted equivalents get their status
    now."""
    lines = scope(source)
    mutants = []
    for auto in operators.automatic_mutants(source, set(lines), broad=True):
        entry = from_automatic(auto, "file", [], source, target)
        if auto.id in notes.equivalent:
            entry.status, entry.reason = MutantStatus.EQUIVALENT, notes.equivalent[auto.id]
        elif auto.id in notes.elsewhere:
            entry.status, entry.reason = MutantStatus.UNREACHABLE, notes.elsewhere[auto.id]
        mutants.append(entry)
    return mutants


@dataclasses.dataclass
class Plan:
    """Which tests each mutant runs under, and the mutants decided without running."""

    tests: dict[str, list[str] | None]  # mutant id -> test ids (None: every test)
    decided: dict[str, tuple[str, str]]  # mutant id -> (status, reason)
    # A construction mutant runs every test: the files of those that executed its edit
    # first (the first failure stops it), then the rest. Mutant id -> test file names.
    first_files: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def plan(
    mutants: list[Mutant],
    source: str,
    by_test: dict[str, set[int]],
    unreachable: dict[int, str],
    scope_lines: dict[int, str],
) -> Plan:
    """Per runnable mutant: the tests that execute one of its edited statements; unreached ones are
    decided."""
    from gdn_review.mutation import reach

    construction = construction_functions(source)
    reached = set().union(*by_test.values()) if by_test else set()
    tests: dict[str, list[str] | None] = {}
    decided: dict[str, tuple[str, str]] = {}
    first_files: dict[str, list[str]] = {}
    for mutant in mutants:
        if mutant.status is not None:
            continue
        sites = reach.edit_sites(source, mutant.source)
        if not sites:
            tests[mutant.id] = None
            continue
        site_lines = {line for site in sites for line in site.lines}
        if not site_lines & reached:
            first = sites[0]
            function = scope_lines.get(first.line, first.function)
            reason = unreachable.get(first.line)
            decided[mutant.id] = (
                (MutantStatus.UNREACHABLE, reason)
                if reason
                else (MutantStatus.NOT_REACHED, f"no test executes line {first.line} of {function}")
            )
            continue
        if any(site.function in construction for site in sites):
            tests[mutant.id] = None
            first_files[mutant.id] = sorted(
                {
                    Path(nodeid.partition("::")[0]).name
                    for nodeid, lines in by_test.items()
                    if lines & site_lines
                }
            )
            continue
        tests[mutant.id] = sorted(nodeid for nodeid, lines in by_test.items() if lines & site_lines)
    return Plan(tests, decided, first_files)


def ordered_args(args: list[str], first_files: list[str]) -> list[str]:
    """``args`` (test files, then options) with the files named in ``first_files`` first."""
    files = [a for a in args if a.endswith(".py")]
    rest = [a for a in args if not a.endswith(".py")]
    return sorted(files, key=lambda f: Path(f).name not in first_files) + rest


def kill_order(tests: list[str], killers: list[str], cost: dict | None = None) -> list[str]:
    """A mutant's selected tests in the order most likely to fail soon (``-x`` stops there):
    those that killed the latest mutants first (a neighbouring edit tends to fall to the same
    test), then the cheapest: by ``cost`` (each test's seconds in the baseline) where measured,
    else the tests of one batch (a case, a boundary batch) before the random examples' tests
    (many builds each). The order only changes which test reports the kill, and when."""
    recent = {test: index for index, test in enumerate(killers)}

    def price(test: str) -> float:
        return cost.get(test, 0.0) if cost else float("_invariant[" in test)

    return sorted(tests, key=lambda test: (recent.get(test, len(recent)), price(test), test))


def rounds(every: list[str], killers: list[str], selected) -> list[list[str]]:
    """A mutant's runs: the three latest ``killers`` of other mutants that it ``selected`` alone
    first (a neighbouring edit tends to fall to the same test, and collecting three tests costs a
    fraction of collecting a thousand), then ``every`` test of its selection; the first round that
    kills ends it. Only the time changes: a test that would kill does so in either round."""
    likely = [test for test in killers if test in selected][:3]
    return [[*likely, "-x"], every] if likely else [every]


def score(entries: list[dict]) -> dict:
    """The counts and the score: detected of the non-equivalent mutants CPU can reach."""
    counts = collections.Counter(e["status"] for e in entries)
    scored = sum(counts[s] for s in SCORED)
    detected = sum(counts[s] for s in DETECTED)
    return {
        "counts": dict(sorted(counts.items())),
        "scored": scored,
        "detected": detected,
        "percent": round(100.0 * detected / scored, 1) if scored else None,
    }


@dataclasses.dataclass
class Settings:
    """How the whole-file score runs: mutants at once, seconds each, and which mutants (shell
    patterns such as 'auto.*'; none: every one)."""

    jobs: int = 1
    timeout: float = 60.0
    patterns: tuple[str, ...] = ()
    # mutant id -> the tests that killed it in the last score of the file (its report's JSON):
    # tried first. Only the time changes: a test that kills does so in any order.
    last_killers: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def score_whole_file(
    target: str,
    release: str,
    source: str,
    notes: Notes,
    modules: dict[str, Path],
    configurations: dict[str, dict[str, str]] | None = None,
    settings: Settings | None = None,
    progress: Progress | None = None,
) -> dict:
    """Baseline, then every runnable mutant of the whole file; returns the guard data (nothing
    written).

    ``target``: the file's path in the tree, ``source`` its text on the loaded ``release``;
    ``modules``: record name -> generated module; ``configurations``: record name -> case id -> how
    the case configures the builder (``kb.server_config.configuration_label``), for the line map;
    ``progress``: how the mutants' run is shown (``runner.Progress``; None: nowhere).
    """
    from gdn_review.mutation import reach, runner

    settings = settings or Settings()
    runner.prepare_cpu()
    started = time.monotonic()
    scope_lines = scope(source)
    unreachable, unmatched = unreachable_lines(source, notes)
    # A kernel's own body (``@triton.jit``) is device code: unreachable here, named.
    unreachable = {**family.kernel_lines(source), **unreachable}
    mutants, stale = _mutants(source, target, notes, settings.patterns)
    trace = reach.LineTrace({target}, per_test=True)
    tests = suite.test_args(sorted(modules.values()))
    # the baseline's evidence: not kept
    with tempfile.TemporaryDirectory(prefix="gdn-review-guard-") as scratch:
        evidence = Path(scratch) / "baseline.json"
        code, baseline_s = runner.baseline(tests, evidence, plugins=(trace,))
        if code != 0:
            raise GuardError(*runner.baseline_failed(code, evidence))
        # What each test cost in the baseline: a mutant tries the cheap ones first.
        cost = {t["nodeid"]: t["duration_s"] for t in evidence_file.read(evidence)["tests"]}
    if not trace.active:
        raise GuardError(
            "another tracer (coverage, a debugger) is active: the line map "
            "and test selection need the trace; run without it"
        )
    key = target.replace("\\", "/")
    by_test = {nodeid: lines.get(key, set()) for nodeid, lines in (trace.by_test or {}).items()}
    work = plan(mutants, source, by_test, unreachable, scope_lines)
    entries = _run(
        target, scope_lines, mutants, work, cost, tests, settings, progress or runner.Progress()
    )
    by_module_key = {reach.module_key(path): name for name, path in modules.items()}
    by_module = {module: lines.get(key, set()) for module, lines in trace.by_module.items()}
    return {
        "format": GUARD_FORMAT,
        "release": release,
        "target": target,
        "records": sorted(modules),
        "score": score(entries),
        "mutants": entries,
        "lines": line_map(
            source,
            scope_lines,
            by_module,
            by_module_key,
            unreachable,
            by_test,
            test_configurations(by_test, modules, configurations or {}),
        ),
        "notes": unmatched + stale,
        "settings": {
            "jobs": settings.jobs,
            "timeout_s": settings.timeout,
            "baseline_s": round(baseline_s, 1),
            "patterns": list(settings.patterns),
        },
        "duration_s": round(time.monotonic() - started, 1),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _mutants(
    source: str, target: str, notes: Notes, patterns: tuple[str, ...]
) -> tuple[list[Mutant], list[str]]:
    """The file's mutants (only those matching ``patterns``, when any), and the notes that name a
    mutant this release's file does not give."""
    mutants = catalogue(source, target, notes)
    if patterns:
        mutants = [m for m in mutants if any(fnmatch.fnmatchcase(m.id, p) for p in patterns)]
    known = {m.id for m in catalogue(source, target, Notes())}
    stale = [
        f"{section} names {ident}, which this release's file does not give"
        for section in ("equivalent", "elsewhere")
        for ident in getattr(notes, section)
        if ident not in known
    ]
    return mutants, stale


def _run(
    target: str,
    scope_lines: dict[int, str],
    mutants: list[Mutant],
    work: Plan,
    cost: dict[str, float],
    tests: list[str],
    settings: Settings,
    progress: Progress,
) -> list[dict]:
    """Each mutant's entry, in the file's order: those ``work`` decided, then the rest run, each
    under its own tests (``work.tests``), the first failure stopping it."""
    from gdn_review.mutation import runner

    entries: list[dict] = []
    killers: list[str] = []  # tests that killed a mutant, the latest first (see kill_order)

    def finished(mutant: Mutant, result: dict | None) -> None:
        status, reason = runner.outcome(mutant, result)
        killed_by = (result or {}).get("killed_by", {})
        for test in (test for ids in killed_by.values() for test in ids):
            if test in killers:
                killers.remove(test)
            killers.insert(0, test)
        del killers[64:]
        entry = {
            "id": mutant.id,
            "operator": mutant.operator,
            "line": mutant.line,
            "function": scope_lines.get(mutant.line, "?"),
            "status": status,
            "reason": reason,
            "killed_by": sorted({t for ids in killed_by.values() for t in ids}),
            "tests_selected": _selected(work, mutant.id),
            "duration_s": (result or {}).get("duration_s", 0.0),
            "diff": mutant.diff,
        }
        entries.append(entry)
        if result is not None:  # decided before anything ran: no progress step
            progress.advance(entry)

    def selection(mutant: Mutant) -> list[list[str]]:
        # Called in the forked child: it sees the killers as they were when it was forked.
        # This mutant's own killers of the last score first: a mutant that took hundreds of
        # tests to kill the first time (a tenth of them took over half the time) takes one.
        likely = [*settings.last_killers.get(mutant.id, []), *killers]
        chosen = work.tests[mutant.id]
        if chosen is None:
            every = [*ordered_args(tests, work.first_files.get(mutant.id, [])), "-x"]
        else:
            every = [*kill_order(chosen, likely, cost), "-x"]
        return rounds(every, likely, chosen or cost)

    for mutant in mutants:
        if mutant.id in work.decided:
            mutant.status, mutant.reason = work.decided[mutant.id]
    progress.start(sum(m.status is None for m in mutants))
    # Each mutant under its own selection: one runner call per distinct selection would
    # serialise them, so the selection travels with the mutant (``tests`` per mutant).
    runner.run_mutants(mutants, target, selection, settings.jobs, settings.timeout, finished)
    interrupts.finishing()
    order = {m.id: i for i, m in enumerate(mutants)}
    return sorted(entries, key=lambda e: order[e["id"]])


def _selected(work: Plan, ident: str) -> int | str | None:
    """How many tests a mutant ran under ("all", a count, or None: it did not run)."""
    if ident not in work.tests:
        return None
    return "all" if work.tests[ident] is None else len(work.tests[ident])


class GuardError(Exception):
    """The whole-file score cannot be measured (failing baseline, another tracer): said for
    people. ``no_verdict``: the baseline's tests could not run or raised an error in the check
    (exit 3, not 1)."""

    def __init__(self, message: str, no_verdict: bool = False):
        super().__init__(message)
        self.no_verdict = no_verdict
