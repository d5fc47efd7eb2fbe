"""``gdn-review run``'s flow: the KB's generated suite on the installed vLLM, then its reports.

Three stages in order, each a plain function of its own: the suite under
pytest in a fresh process (``run.suite``: evidence), each open PR's diff side
(the review stage's ``diff_side``, handed in by the command line: it lies to
the right of this stage), then one report per record and the index (this
stage). Every diff is read before anything runs, so a diff from a stranger
that leaves vLLM's tree stops the command first.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Protocol

from gdn_review.kb import Record
from gdn_review.report import report
from gdn_review.run import evidence_file, suite


class OwnReach(Protocol):
    """What the flow needs of the mutation stage's ``own_reach`` module (the PR's own lines
    reached)."""

    def pytest_args(self, records: dict) -> tuple[str, ...]: ...

    def add_to_evidence(self, evidence_path, records, say) -> list[str]: ...


class DiffSides(Protocol):
    """What the flow needs of the review stage's ``diff_side`` module."""

    def wanted(self, records: dict) -> dict[Path, Path]: ...

    def add_to_evidence(
        self, record_path, record, release, evidence, kb_dir, generated, say
    ) -> bool: ...


@dataclasses.dataclass
class KbRun:
    pytest_exit: int
    reports: list[dict]
    written: list[Path]

    @property
    def collected_nothing(self) -> bool:
        return self.pytest_exit == suite.NO_TESTS


def check_kb(
    kb_dir: Path,
    records: dict[Path, Record],
    modules: dict,
    evidence_path: Path,
    reports_dir: Path,
    keyword: str | None = None,
    pytest_args: tuple[str, ...] = (),
    diff_sides: DiffSides | None = None,
    generated: Path = Path("generated_tests"),
    say: Callable[[str], None] = print,
    reach: OwnReach | None = None,
) -> KbRun:
    """Run the records' generated modules, add each open PR's diff side, write the reports.

    ``reach`` (handed in by the command line, as ``diff_sides``): the session traces which
    lines each case executes, and each record's own lines are judged into the evidence.
    """
    diffs = (
        {} if diff_sides is None or keyword else diff_sides.wanted(records)
    )  # PatchError: nothing has run
    traced = reach.pytest_args(records) if reach is not None else ()
    code = suite.run_suite(
        list(modules.values()), evidence_path, keyword, (*traced, *pytest_args), say=say
    )
    if traced and code != suite.NO_TESTS:
        for line in reach.add_to_evidence(evidence_path, records, say):
            say(line)
    if diffs and code != suite.NO_TESTS:
        release = evidence_file.tests_release(evidence_path)
        for path in diffs:
            diff_sides.add_to_evidence(
                path, records[path], release, evidence_path, kb_dir, generated, say=say
            )
    say("[2/2] writing risk reports")
    paths = evidence_file.with_bench(evidence_path, say)
    written, reports = report.write_reports(records, evidence_file.load(list(paths)), reports_dir)
    return KbRun(code, reports, written)
