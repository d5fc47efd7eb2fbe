"""Mutation testing of a record's risks: plant the bug, see a generated test fail.

Stages (each a plain function; ``gdn-review mutate`` only calls them):
``catalogue`` (the mutants of a record on the loaded release), ``mutate`` (the
baseline suite and every runnable mutant, in-process with forked children),
then the results go into the evidence JSON, from which ``report`` draws the
kill matrix and the mutation-verified coverage of each risk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from gdn_review.common import interrupts, release_cache, release_trees
from gdn_review.common.release import Release, ReleaseError
from gdn_review.common.release import loaded as loaded_release
from gdn_review.common.release_range import contains
from gdn_review.common.vocabulary import MutantStatus as M
from gdn_review.kb import Record, RecordErrors
from gdn_review.kb.subjects import key_label, state_words
from gdn_review.mutation import operators
from gdn_review.mutation.catalogue import (
    Catalogue,
    Mutant,
    automatic,
    find_problems,
    own_hunk_problems,
    own_hunks,
    record_mutants,
)
from gdn_review.run import evidence_file, suite

if TYPE_CHECKING:  # runner imports pytest: only where mutants run
    from gdn_review.mutation.guard_notes import Notes
    from gdn_review.mutation.runner import Progress

MUTATION_FORMAT = "gdn-review-mutation/1"


class MutationError(Exception):
    """Mutation testing cannot start (bad selection, failing baseline): said for people.

    ``no_verdict``: the baseline's tests could not run, or raised an error in the check
    (exit 3, not 1: nothing about vLLM was measured)."""

    def __init__(self, message: str, no_verdict: bool = False):
        super().__init__(message)
        self.no_verdict = no_verdict


def catalogue_for(
    path: Path, record: Record, fetch: bool = True, say: Callable[[str], None] = print
) -> Catalogue:
    """The record's mutants on the loaded vLLM; RecordErrors when a record mutant's find is
    wrong."""
    release, root = loaded_release()
    target = record.target.file
    try:
        loaded = (root / target).read_text(encoding="utf-8")
    except OSError:
        raise MutationError(f"the loaded vLLM {release} has no {target}") from None
    sources, notes = _other_sources(record, release, fetch, say)
    problems = _problems(path, record, {**sources, release: loaded})
    if problems:
        raise RecordErrors(problems)
    mutants = record_mutants(record, release, loaded, sources)
    auto, gone, auto_notes = _diff_mutants(record, release, {**sources, release: loaded})
    return Catalogue(record.key, release, target, mutants + auto, gone, notes + auto_notes, loaded)


def _other_sources(
    record: Record, release: str, fetch: bool, say: Callable[[str], None]
) -> tuple[dict[str, str], list[str]]:
    """The target file on the record's base and head releases (fetched when ``fetch``) and on
    every release in the cache, but the loaded ``release``; notes on those that cannot be had."""
    target = record.target.file
    sources: dict[str, str] = {}
    notes: list[str] = []
    for version in (record.target.base_release, record.target.head_release):
        if not version or version == release:
            continue
        try:
            text = release_trees.source(version, target, fetch=fetch, say=say)
        except ReleaseError as error:
            notes.append(f"vLLM {version} unavailable: {error}")
            continue
        if text is None:  # --offline, and not in the release cache
            notes.append(f"vLLM {version} unavailable: not in the release cache (--offline)")
        else:
            sources[version] = text
    sources.update(_cached_sources(target, {*sources, release}))
    return sources, notes


def _diff_mutants(
    record: Record, release: str, sources: dict[str, str]
) -> tuple[list[Mutant], list[str], list[str]]:
    """The automatic mutants of the record's PR diff on the loaded ``release`` (``sources``:
    release -> target file), the PR's hunks gone from it, and notes on what was not derived."""
    base, head = record.target.base_release, record.target.head_release
    missing = " and ".join(f"vLLM {v}" for v in (base, head) if v and v not in sources)
    if record.contract is not None:
        why_none = (
            "a contract record has no PR diff, so no automatic mutants: its risks' mutants "
            "are its own, and `gdn-review mutate --whole-file` scores the whole file"
        )
    elif record.is_open:
        why_none = (
            f"{record.label} is {state_words(record.state)}: no release has its lines, "
            "so its automatic mutants come from its diff "
            f"(`gdn-review review kb/{record.key}.diff --pr {record.key}` runs them "
            "against the KB's tests)"
        )
    elif sources.get(base) is None or sources.get(head) is None:
        why_none = (
            "automatic mutants not derived: the sources of "
            f"{missing or 'both releases'} are needed for the PR's diff"
        )
    else:
        why_none = None
    if why_none:
        return [], [], [why_none]
    auto, gone = automatic(record, sources[release], sources[base], sources[head])
    notes = []
    if record.target.own_hunks is not None:
        hunks = operators.pr_hunks(sources[base], sources[head])
        step, kept = len(hunks), len(own_hunks(record, hunks))
        step_prs = [
            f"#{r.number}"
            for r in record.related
            if r.from_release and contains(f">{base},<={head}", r.from_release)
        ]
        notes.append(
            f"target.own_hunks: {kept} of the {step} changed blocks of {base} -> {head} are this "
            f"PR's and give automatic mutants; the other {step - kept} are changes of other PRs "
            "that shipped in the same release, and give none"
            + (f" (the record names {', '.join(step_prs)} among them)" if step_prs else "")
        )
    known = {m.id for m in auto}
    notes += [
        f"risk {risk.id} names automatic mutant {ident}, which the diff "
        f"does not give on vLLM {release}"
        for risk in record.risks
        for ident in risk.auto_mutants
        if ident not in known
    ]
    notes += [
        f"equivalent_mutants names {ident}, which the diff does not give on vLLM {release}"
        for ident in record.equivalent_mutants
        if ident not in known
    ]
    return auto, gone, notes


def _problems(path: Path, record: Record, sources: dict[str, str]) -> list:
    """The record's mutant finds and own hunks checked on ``sources`` (release -> target file):
    ``validate`` and ``mutate`` refuse the same records."""
    problems = find_problems(path, record, sources)
    base, head = record.target.base_release, record.target.head_release
    if record.target.own_hunks and base in sources and head in sources:
        problems += own_hunk_problems(path, record, sources[base], sources[head])
    return problems


def check_finds(records: dict[Path, Record]) -> tuple[list, list[str]]:
    """``gdn-review validate``'s check of every record's mutant finds on the releases at hand
    (nothing is fetched): (record errors, notes on what could not be checked).

    At hand: the installed (loaded) release and any release in the cache; the
    head release is the one a find must match, so it is named when missing.
    """
    problems, notes = [], []
    for path, record in records.items():
        if not any(risk.mutants for risk in record.risks) and record.target.own_hunks is None:
            continue
        target, sources, skipped = record.target.file, {}, []
        try:
            release, root = loaded_release()
            sources[release] = (root / target).read_text(encoding="utf-8")
        except (ReleaseError, OSError) as error:
            skipped.append(f"the installed vLLM: {error}")
        sources.update(_cached_sources(target, sources))
        head = record.target.head_release
        if head and head not in sources:
            skipped.append(
                f"vLLM {head} (the head release) is not in the release cache; "
                "`gdn-review mutate` fetches it"
            )
        problems += _problems(path, record, sources)
        notes += [f"{path}: mutant finds not checked against {what}" for what in skipped]
    return problems, notes


def _cached_sources(target: str, have) -> dict[str, str]:
    """The target file on each release in the cache but those in ``have`` (nothing is fetched; a
    release without the file is left out)."""
    found = {}
    for version in release_cache.cached_versions():
        with contextlib.suppress(ReleaseError):
            text = None if version in have else release_cache.source(version, target)
            if text is not None:
                found[version] = text
    return found


def _diff_releases_to_fetch(records: dict[Path, Record]) -> dict[str, list[str]]:
    """The PRs' base and head releases the release cache lacks (the loaded one is at hand), each
    with whose base or head it is ("#34871's base"), in release order."""
    from gdn_review.kb import is_draft

    at_hand = {*release_cache.cached_versions(), loaded_release()[0]}
    wanted: dict[str, list[str]] = {}
    for record in records.values():
        if is_draft(record):
            continue
        target = record.target
        for role, version in (("base", target.base_release), ("head", target.head_release)):
            if version and version not in at_hand:
                wanted.setdefault(version, []).append(f"{record.label}'s {role}")
    return dict(sorted(wanted.items(), key=lambda item: Release(item[0])))


def select(found: Catalogue, risk: str | None, patterns: tuple[str, ...]) -> Catalogue:
    """Only the mutants of ``risk`` and/or matching one of ``patterns`` (shell-style: 'auto.*')."""
    mutants = found.mutants
    if risk:
        mutants = [m for m in mutants if risk in m.risks]
    if patterns:
        mutants = [m for m in mutants if any(fnmatch.fnmatchcase(m.id, p) for p in patterns)]
    return dataclasses.replace(found, mutants=mutants)


def start_fetching(
    records: dict[Path, Record], fetch: bool, say: Callable[[str], None] = print
) -> release_trees.Fetches:
    """The PRs' base and head releases not at hand, fetched side by side in the background (their
    target file is read, nothing imported). A failure is said by each record's own read in
    ``catalogues`` (which release it lacks, and why)."""
    wanted = _diff_releases_to_fetch(records) if fetch else {}
    if wanted:
        say(
            "release cache: fetching "
            + "; ".join(f"{v} ({', '.join(why)})" for v, why in wanted.items())
            + ": a PR's target file on both gives its automatic mutants (their diff), and its "
            "mutants' finds are checked on both; only that file is read"
        )
    return release_trees.Fetches(list(wanted), say, files_only=True, held=True)


def catalogues(
    records: dict[Path, Record],
    risk: str | None,
    patterns: tuple[str, ...],
    fetch: bool,
    say: Callable[[str], None] = print,
    fetching: release_trees.Fetches | None = None,
) -> list[Catalogue]:
    """The selected mutants of every complete record; RecordErrors of all records' bad finds at
    once. ``fetching``: fetches started earlier (None: started and waited for here)."""
    from gdn_review.kb import is_draft

    found_all, errors = [], []
    (fetching or start_fetching(records, fetch, say)).wait()
    for path, record in sorted(records.items(), key=lambda item: item[1].sort_key):
        if is_draft(record):
            say(f"warning: skipped draft {path}: it has open TODOs")
            continue
        try:
            found = catalogue_for(path, record, fetch=fetch, say=say)
        except RecordErrors as failure:
            errors.extend(failure.errors)
            continue
        found_all.append(select(found, risk, patterns))
    if errors:
        raise RecordErrors(errors)
    if (risk or patterns) and not any(c.mutants for c in found_all):
        raise MutationError(
            f"no mutant matches --risk {risk or '*'} --mutant "
            f"{' '.join(patterns) or '*'} (see `gdn-review mutate --list`)"
        )
    for found in found_all:
        for note in found.notes:
            say(f"note: {key_label(found.record)}: {note}")
    return found_all


def listing_lines(found_all: list[Catalogue]) -> list[str]:
    """``mutate --list``: every mutant with its origin, risks and state."""
    lines = []
    for found in found_all:
        lines.append(
            f"{key_label(found.record)} on vLLM {found.release}: "
            f"{len(found.mutants)} mutants, {len(found.runnable())} to run"
        )
        for mutant in found.mutants:
            state = mutant.status or "to run"
            risks = ",".join(mutant.risks) or "-"
            lines.append(
                f"  {mutant.id:<58} {mutant.origin:<6} risks {risks:<8} "
                f"{state}{': ' + mutant.reason if mutant.reason else ''}"
            )
        lines += [
            f"  (no mutant) PR hunk no longer in vLLM {found.release}: {hunk}"
            for hunk in found.gone_hunks
        ]
    return lines


def result_entry(
    found: Catalogue,
    mutant: Mutant,
    result: dict | None,
    reached: set[int] | None = None,
    notes: Notes | None = None,
) -> dict:
    """One mutant's evidence: what it is, how it ended, which tests killed it.

    ``reached``: the target file's lines the baseline executed for this record's
    tests (None: not traced); a survivor none of whose edited statements is
    among them is **not reached** (see ``reach``). ``notes``: the target file's guard
    notes (kb/guard/): a survivor they name is equivalent or unreachable here, with their
    reason, as the whole-file guard counts it.
    """
    from gdn_review.mutation import reach, runner  # import pytest: only where mutants ran
    from gdn_review.mutation.guard_notes import judged_by_notes, unreachable_lines

    status, reason = runner.outcome(mutant, result)
    result = result or {}
    if status == M.SURVIVED and mutant.source and found.source:
        sites = reach.edit_sites(found.source, mutant.source)
        hint = reach.unreached(sites, reached)
        if hint:
            status, reason = M.NOT_REACHED, hint
        if notes is not None:
            lines = {line for site in sites or [] for line in site.lines}
            judged = judged_by_notes(
                mutant.id, lines, notes, unreachable_lines(found.source, notes)[0]
            )
            if judged and (judged[0] == M.EQUIVALENT or status == M.NOT_REACHED):
                status, reason = judged
    return {
        "record": found.record,
        "id": mutant.id,
        "origin": mutant.origin,
        "operator": mutant.operator,
        "line": mutant.line,
        "risks": mutant.risks,
        "status": status,
        "reason": reason,
        "killed_by": result.get("killed_by", {}),
        "claims_passed": result.get("claims_passed", []),
        "tests_run": result.get("tests_run", 0),
        "duration_s": result.get("duration_s", 0.0),
        "diff": mutant.diff,
    }


def write_evidence(
    path: Path, catalogues: list[Catalogue], entries: list[dict], settings: dict
) -> None:
    """Add the mutation results to the baseline run's evidence file (written whole or not at
    all)."""
    hashes = evidence_file.read(path).get("record_sha256") or {}  # the baseline's record files
    evidence_file.set_mutation(
        path,
        {
            "format": MUTATION_FORMAT,
            **settings,
            "records": {
                str(c.record): {
                    "release": c.release,
                    "gone_hunks": c.gone_hunks,
                    "notes": c.notes,
                    "finished_at": settings.get("finished_at"),
                    "record_sha256": hashes.get(str(c.record)),
                }
                for c in catalogues
            },
            "mutants": entries,
        },
    )


def mutate(
    catalogues: list[Catalogue] | Callable[[], list[Catalogue]],
    modules: dict[int, Path],
    target_files: set[str],
    keyword: str | None,
    limits: tuple[int, float],
    evidence_path: Path,
    progress: Progress | None = None,
    on_baseline: Callable[[object, Path], None] = lambda trace, staged: None,
) -> list[dict]:
    """Baseline suite, then every runnable mutant; returns the evidence entries (also written).

    ``catalogues``: the mutants of each record of ``modules`` (its generated module, in the order
    they run), or what makes them once the baseline has run: the first run on a machine fetches
    the PRs' older releases meanwhile, which the baseline needs none of. ``target_files``: the
    records' target files (traced).

    ``progress``: how the mutants' run is shown (``runner.Progress``; None: nowhere).
    ``on_baseline(trace, staged)``: after the baseline passed, with its line trace (per case) and
    its staged evidence file (the reach of the records' own lines goes there, ``own_reach``).

    Interrupted (``interrupts.Interrupted``), it leaves nothing behind: no
    evidence, no staged baseline, no folder it made for them.
    """
    from gdn_review.mutation import reach, runner

    runner.prepare_cpu()
    evidence_path = Path(evidence_path)
    # the diff side and other records' mutants outlive this run
    kept = evidence_file.take_parts(evidence_path)
    staged = evidence_path.with_name(f".{evidence_path.name}.baseline")
    made = [
        folder
        for folder in [evidence_path.parent, *evidence_path.parent.parents]
        if not folder.exists()
    ]
    tests = suite.test_args(list(modules.values()), keyword)
    try:
        # which lines run, to name the unreached
        trace = reach.LineTrace(set(target_files), per_case=True)
        code, seconds = runner.baseline(tests, staged, plugins=(trace,))
        if code != 0 or not staged.exists():
            why, no_verdict = runner.baseline_failed(code, staged)
            staged.unlink(missing_ok=True)
            raise MutationError(why, no_verdict)
        if callable(catalogues):  # before on_baseline, which may read the releases fetched
            catalogues = catalogues()
        on_baseline(trace, staged)
        entries = _run_mutants(catalogues, modules, keyword, limits, progress, trace)
    except KeyboardInterrupt:
        staged.unlink(missing_ok=True)  # an interrupted run leaves no partial evidence behind
        for folder in made:  # deepest first; one that holds anything else stays
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    interrupts.finishing()  # every mutant ran: the evidence is written whatever comes now
    order = {(c.record, m.id): i for c in catalogues for i, m in enumerate(c.mutants)}
    entries.sort(key=lambda e: order[(e["record"], e["id"])])
    write_evidence(
        staged,
        catalogues,
        entries,
        {
            "jobs": limits[0],
            "timeout_s": limits[1],
            "keyword": keyword,
            "baseline_s": round(seconds, 2),
            "line_trace": trace.active,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    evidence_file.promote(staged, evidence_path)
    for line in evidence_file.carry_over(evidence_path, kept):
        print(line, file=sys.stderr)
    return entries


def _run_mutants(catalogues, modules, keyword, limits, progress, trace) -> list[dict]:
    """Every mutant of every catalogue, the runnable ones forked from this (unmutated) process;
    ``limits``: (jobs, seconds per mutant)."""
    from gdn_review.mutation import runner

    entries: list[dict] = []
    progress = progress or runner.Progress()
    progress.start(sum(len(c.runnable()) for c in catalogues))
    for found in catalogues:
        reached = trace.reached(modules[found.record], found.target_file)

        def finished(mutant, result, found=found, reached=reached):
            entry = result_entry(found, mutant, result, reached, found.guard_notes)
            entries.append(entry)
            if result is not None:  # decided before anything ran: no progress step
                progress.advance(entry)

        tests = suite.test_args([modules[found.record]], keyword)
        runner.run_mutants(found.mutants, found.target_file, tests, *limits, finished)
    return entries
