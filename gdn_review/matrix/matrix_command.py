"""``gdn-review matrix``'s flow: the records' matrices run, their reports, and (with ``--all``)
the builder's history page.

The records are chosen and their modules made current (``run.selection``), planned
(release_plan.py: up to the newest published release, ``default_end``) and run on their
releases in one pool (matrix.py): ``run_records``. Then
the command hands each open PR's record and its base release's evidence (``open_pr_bases``)
to the review stage, which adds the PR's diff side there; ``write_reports`` writes each
record's matrix report, then the history page from the same runs (history.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from gdn_review.common import published
from gdn_review.common.release import loaded_or_none
from gdn_review.kb import Record, is_draft
from gdn_review.matrix import history, matrix_report
from gdn_review.matrix.matrix import Job, run_matrices
from gdn_review.matrix.matrix_files import MatrixError, load_matrix, matrix_folder_name
from gdn_review.matrix.release_plan import plan
from gdn_review.report import report as reporting
from gdn_review.run import evidence_file
from gdn_review.run.selection import current_modules, load_records, pick


@dataclasses.dataclass(frozen=True)
class MatrixOptions:
    """What ``gdn-review matrix`` runs (``gdn-review matrix --help`` says each option)."""

    keys: tuple = ()  # the records (empty: every record that is not a draft)
    since: str | None = None
    versions: tuple[str, ...] = ()
    jobs: int | None = None
    keyword: str | None = None
    generated_dir: Path = Path("generated_tests")
    write: bool = False
    work_dir: Path | None = None
    offline: bool = False  # the default range ends at the newest release at hand, index not asked


@dataclasses.dataclass
class MatrixRuns:
    """The records' matrices, run: what their reports, the diff sides and the history read."""

    kb_dir: Path
    options: MatrixOptions
    records: dict[Path, Record]
    work: list[Job]
    root: Path  # where each record's matrix-N folder is (the history reads them there)
    known: set  # every record's key in the KB
    newest: str | None = None  # where the default range ended (the newest published release)


def run_records(
    kb_dir: Path,
    options: MatrixOptions,
    say: Callable[[str], None] = print,
    every: dict[Path, Record] | None = None,
) -> MatrixRuns:
    """Run the records on their releases; the runs (nothing reported yet). ``every``: the KB's
    records where the caller has loaded them.

    With several records the release runs share one pool and each record's work
    goes to ``WORK/matrix-N`` (default ``.gdn-review``), where ``history`` reads it.
    """
    every = load_records(kb_dir) if every is None else every
    keys = options.keys
    if keys:
        records = pick(every, kb_dir, tuple(keys))
    else:
        records = {p: r for p, r in every.items() if not is_draft(r)}
    for record_path, record in records.items():
        if is_draft(record):
            raise MatrixError(f"{record_path} is a draft (open TODOs): nothing to run")
    if not records:
        raise MatrixError(f"{kb_dir}: no record to run")
    modules = current_modules(kb_dir, records, options.generated_dir, options.write, say, every)
    installed = loaded_or_none()  # the release an import of vLLM gives here
    newest = None if options.versions else default_end(options.offline, say)
    work_dir = options.work_dir
    single = len(records) == 1 and bool(keys)  # --work is then the record's own folder
    root = work_dir if work_dir and not single else Path(".gdn-review")
    work = []
    for record_path, record in sorted(records.items(), key=lambda item: item[1].sort_key):
        folder = work_dir if single and work_dir else root / matrix_folder_name(record.key)
        planned = plan(record, installed, list(options.versions) or None, options.since, newest)
        work.append(Job(record, record_path, modules[record.key], folder, planned))
    run_matrices(work, installed, options.jobs, options.keyword, say)
    known = {r.key for r in every.values()}
    return MatrixRuns(kb_dir, options, records, work, root, known, newest)


def default_end(
    offline: bool = False, say: Callable[[str], None] = print, what: str = "the default range"
) -> str | None:
    """Where ``what`` ends: the newest release the package index serves (offline, or the index
    unreadable: the newest at hand), said once through ``say``."""
    fell_back: list[str] = []
    newest = published.default_newest(fell_back.append, offline)
    for line in fell_back:
        say(line)
    if newest is not None:
        where = "at hand" if offline or fell_back else "the package index serves"
        say(f"{what} ends at vLLM {newest}, the newest release {where}")
    return newest


def open_pr_bases(runs: MatrixRuns) -> list[tuple[Path, Record, str, Path]]:
    """(record path, record, base release, that release's evidence file) of each open PR's record
    whose base release ran: where the review stage adds the PR's diff side."""
    found = []
    for job in runs.work:
        base = job.record.target.base_release
        if not job.record.is_open or not base:
            continue
        for entry in load_matrix(job.out_dir)["releases"]:
            if entry["version"] == base and entry.get("evidence_path"):
                found.append((job.record_path, job.record, base, Path(entry["evidence_path"])))
                break
    return found


def write_reports(
    runs: MatrixRuns, reports_dir: Path, history_path: Path | None = None
) -> tuple[list[dict], list[Path], dict | None]:
    """Each record's matrix report; their data, the files written and the history page's data
    (``history_path`` None: no page)."""
    reports = [
        matrix_report.matrix_report(job.record, load_matrix(job.out_dir), runs.known)
        for job in runs.work
    ]
    written, _ = reporting.write_reports(
        runs.records, None, reports_dir, "markdown", reports=reports
    )
    if history_path is None:
        return reports, written, None
    since, bench = runs.options.since, evidence_file.BENCH_PATH
    data, page = history.write_page(
        runs.kb_dir, runs.root, bench, history_path, since, reports_dir, runs.newest
    )
    return reports, written + [page], data
