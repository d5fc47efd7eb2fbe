"""Which mutants a record has on the loaded release, and which of them can run.

Two origins: the record's own mutants (exact find/replace edits, each under a
risk) and automatic mutants from the PR's diff (see ``operators``). A mutant
gets a fixed status before anything runs when it cannot run: ``equivalent``
(the record says why), ``not applicable`` (outside its release range, or the
code it edits changed after the PR), ``error`` (it does not compile). The
rest are run by ``runner``.

Record mutants are checked here too: a find must match exactly ``count``
(1) times in the target file of every release in its range whose source is
at hand; anything else is a record error naming the mutant, the release and
the count, at the mutant's file:line:col.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from packaging.version import Version

from gdn_review.common import release_range
from gdn_review.common.release import Release
from gdn_review.common.vocabulary import MutantStatus as M
from gdn_review.kb import Record, RecordError
from gdn_review.kb.yaml_source import SAFE_LOADER, error_at
from gdn_review.mutation import operators

if TYPE_CHECKING:
    from gdn_review.mutation.guard_notes import Notes

RUNNABLE = None  # status of a mutant that still has to run


@dataclasses.dataclass
class Mutant:
    id: str
    origin: str  # "record" or "diff"
    risks: list[str]
    diff: str  # the edit, as a short unified diff of the target file
    source: str | None = None  # the whole mutated file (None when it cannot run)
    status: str | None = RUNNABLE
    reason: str = ""
    operator: str | None = None
    line: int | None = None
    code: object = dataclasses.field(default=None, repr=False)  # compiled source, never serialised


@dataclasses.dataclass
class Catalogue:
    record: int
    release: str  # the loaded release the mutants apply to
    target_file: str  # e.g. vllm/v1/attention/backends/gdn_attn.py
    mutants: list[Mutant]
    gone_hunks: list[str]  # PR hunks no longer in the loaded file (they yield no mutant)
    notes: list[str]  # what could not be derived, and why
    source: str = ""  # the loaded release's target file, as the mutants' edits start from it
    # The target file's kb/guard/ notes: survivors they name are equivalent or unreachable here.
    guard_notes: Notes | None = None

    def runnable(self) -> list[Mutant]:
        return [m for m in self.mutants if m.status is RUNNABLE]


def edit_diff(original: str, mutated: str, name: str) -> str:
    lines = difflib.unified_diff(
        original.splitlines(keepends=True),
        mutated.splitlines(keepends=True),
        f"a/{name}",
        f"b/{name}",
        n=1,
    )
    return "".join(lines)


def from_automatic(auto, origin: str, risks: list[str], original: str, target: str) -> Mutant:
    """A mutant of ``operators``' automatic one on ``original``, the text of the ``target`` file."""
    diff = edit_diff(original, auto.source, target)
    return Mutant(auto.id, origin, risks, diff, auto.source, operator=auto.operator, line=auto.line)


def find_problems(path: Path, record: Record, sources: dict[str, str]) -> list[RecordError]:
    """Record errors for mutant finds that do not match ``count`` times on a release at hand.

    ``sources``: release -> text of the record's target file. A mutant with a
    range must match on every release of the range; one without a range must
    match on the head release (later releases may have changed the code: that
    makes it not applicable there, not wrong).
    """
    problems: list[RecordError] = []
    root = None
    for r_index, risk in enumerate(record.risks):
        for m_index, mutant in enumerate(risk.mutants):
            if mutant.equivalent:
                continue
            if mutant.releases:
                versions = [v for v in sources if release_range.contains(mutant.releases, v)]
            else:
                versions = [v for v in sources if v == record.target.head_release]
            for version in sorted(versions, key=Version):
                found = sources[version].count(mutant.find)
                if found == mutant.count:
                    continue
                if root is None:
                    root = _yaml_root(path)
                where = f"vLLM {version}'s {record.target.file}"
                expected = "exactly once" if mutant.count == 1 else f"exactly {mutant.count} times"
                hint = (
                    "copy the exact text, indentation and line breaks included"
                    if found == 0
                    else "make it longer so it names one site"
                )
                loc = ("risks", r_index, "mutants", m_index, "find")
                message = (
                    f"mutant {mutant.id!r}: find matches {found} times in {where} "
                    f"(expected {expected}); {hint}"
                )
                problems.append(error_at(str(path), root, loc, message))
    return problems


def _yaml_root(path: Path):
    try:
        return yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError):
        return None


def _changed_in(mutant, head: str | None, sources: dict[str, str]) -> str:
    """Where the code a mutant edits disappeared, as precisely as the releases at hand tell."""
    last_match = head
    for version in sorted(
        (v for v in sources if head is None or Version(v) > Version(head)), key=Version
    ):
        if sources[version].count(mutant.find) == mutant.count:
            last_match = version
            continue
        if last_match is not None and _next_minor(last_match, version):
            return f"the code changed in {version}"
        return f"the code changed between {last_match or 'the head release'} and {version}"
    return f"the code changed after {head or 'the head release'}"


def _next_minor(previous: str, version: str) -> bool:
    """True when ``version`` is the minor release right after ``previous`` (0.29.x -> 0.30.x)."""
    return Release(version).minor in (Release(previous).minor, Release(previous).next_minor())


def record_mutants(
    record: Record, release: str, loaded: str, sources: dict[str, str]
) -> list[Mutant]:
    """The record's mutants on the loaded release ``release`` (whose target file is ``loaded``)."""
    found = []
    for risk in record.risks:
        for mutant in risk.mutants:
            entry = Mutant(mutant.id, "record", [risk.id], diff="")
            matches = loaded.count(mutant.find)
            if mutant.equivalent:
                entry.status, entry.reason = M.EQUIVALENT, mutant.equivalent
            elif not release_range.contains(mutant.releases, release):
                entry.status = M.NOT_APPLICABLE
                entry.reason = f"written for vLLM {mutant.releases}; loaded {release}"
            elif matches == mutant.count:
                entry.source = loaded.replace(mutant.find, mutant.replace)
                entry.diff = edit_diff(loaded, entry.source, record.target.file)
            else:
                head = record.target.head_release
                entry.status = M.NOT_APPLICABLE
                entry.reason = (
                    _changed_in(mutant, head, {**sources, release: loaded})
                    if matches == 0
                    else f"find matches {matches} times in vLLM {release}"
                )
            if not entry.diff:
                entry.diff = f"- {mutant.find}\n+ {mutant.replace}\n"
            found.append(entry)
    return found


def own_hunks(record: Record, hunks: list[operators.Hunk]) -> list[operators.Hunk]:
    """The step's hunks that are this PR's (``target.own_hunks``); every hunk when the record names
    none."""
    anchors = record.target.own_hunks
    if anchors is None:
        return hunks
    wanted = {anchor.strip() for anchor in anchors}
    return [hunk for hunk in hunks if wanted & {line.strip() for line in hunk.lines}]


def own_hunk_problems(path: Path, record: Record, base: str, head: str) -> list[RecordError]:
    """Record errors for ``target.own_hunks`` lines that are in no hunk of the base->head diff."""
    anchors = record.target.own_hunks or []
    hunks = operators.pr_hunks(base, head)
    problems = []
    for index, anchor in enumerate(anchors):
        holding = [
            hunk for hunk in hunks if anchor.strip() in {line.strip() for line in hunk.lines}
        ]
        if len(holding) == 1:
            continue
        step = f"the diff {record.target.base_release} -> {record.target.head_release}"
        message = (
            f"{anchor.strip()!r} is not a line {step} adds or changes"
            if not holding
            else f"{anchor.strip()!r} is in {len(holding)} changed blocks of "
            f"{step}: name a line that only this PR's block has"
        )
        problems.append(
            error_at(str(path), _yaml_root(path), ("target", "own_hunks", index), message)
        )
    return problems


def automatic(record: Record, loaded: str, base: str, head: str) -> tuple[list[Mutant], list[str]]:
    """Mutants from the PR's diff mapped onto the loaded file, and the hunks that are gone."""
    hunks = own_hunks(record, operators.pr_hunks(base, head))
    lines, gone = operators.map_hunks(hunks, loaded)
    named: dict[str, list[str]] = {}
    for risk in record.risks:
        for ident in risk.auto_mutants:
            named.setdefault(ident, []).append(risk.id)
    equivalent = dict(record.equivalent_mutants)
    mutants = []
    for auto in operators.automatic_mutants(loaded, lines):
        risks = sorted(named.get(auto.id, []))
        entry = from_automatic(auto, "diff", risks, loaded, record.target.file)
        if auto.id in equivalent:
            entry.status, entry.reason, entry.source = M.EQUIVALENT, equivalent[auto.id], None
        mutants.append(entry)
    return mutants, [hunk.label() for hunk in gone]
