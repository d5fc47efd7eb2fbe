"""``gdn-review matrix``'s flow: the records' matrices run, their reports, and (with ``--all``)
the builder's history page.

The records are chosen and their modules made current (``run.selection``), planned
(release_plan.py) and run on their releases in one pool (matrix.py); an open PR's diff side is
added on its base release's evidence; each record's matrix report is written, then the
history page from the same runs (history.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gdn_review.common import release_cache
from gdn_review.kb import is_draft
from gdn_review.matrix import history, matrix_report
from gdn_review.matrix.matrix import Job, run_matrices
from gdn_review.matrix.matrix_files import MatrixError, load_matrix, matrix_folder_name
from gdn_review.matrix.release_plan import plan
from gdn_review.report import report as reporting
from gdn_review.run import evidence_file
from gdn_review.run.selection import current_modules, load_records


def run_records(
    kb_dir: Path,
    numbers: list[int],
    versions: list[str],
    jobs: int | None,
    keyword: str | None,
    generated: Path,
    write: bool,
    work_dir: Path | None,
    reports_dir: Path,
    say: Callable[[str], None] = print,
    since: str | None = None,
    diff_side: Callable | None = None,
    history_path: Path | None = None,
) -> tuple[list[dict], list[Path], dict | None]:
    """``gdn-review matrix``: run the records on their releases, write their reports; their data,
    the files written and the history page's data (None: no page).

    ``numbers`` empty: every record that is not a draft. With several records
    the release runs share one pool and each record's work goes to
    ``WORK/matrix-N`` (default ``.gdn-review``), where ``history`` reads it.
    ``diff_side(record_path, record, release, evidence_path)``: after the runs,
    called for each record of an open PR on its base release's evidence (the
    review stage adds the PR's diff side there, when the diff is stored).
    ``history_path``: also write the builder's history page there, from these runs.
    """
    every = load_records(kb_dir)
    known = {r.key for r in every.values()}
    records = (
        load_records(kb_dir, tuple(numbers))
        if numbers
        else {p: r for p, r in every.items() if not is_draft(r)}
    )
    for record_path, record in records.items():
        if is_draft(record):
            raise MatrixError(f"{record_path} is a draft (open TODOs): nothing to run")
    if not records:
        raise MatrixError(f"{kb_dir}: no record to run")
    modules = current_modules(kb_dir, records, generated, write, say)
    installed = release_cache.installed()
    # --work is then the record's own folder, as before
    single = len(records) == 1 and bool(numbers)
    root = work_dir if work_dir and not single else Path(".gdn-review")
    work = []
    for record_path, record in sorted(records.items(), key=lambda item: item[1].sort_key):
        number = record.key
        folder = work_dir if single and work_dir else root / matrix_folder_name(number)
        work.append(
            Job(
                record,
                record_path,
                modules[number],
                folder,
                plan(record, installed, versions or None, since),
            )
        )
    run_matrices(work, installed, jobs, keyword, say)
    for job in work:
        if diff_side is not None and job.record.is_open and job.record.target.base_release:
            entry = next(
                (
                    e
                    for e in load_matrix(job.out_dir)["releases"]
                    if e["version"] == job.record.target.base_release and e.get("evidence_path")
                ),
                None,
            )
            if entry is not None:
                diff_side(
                    job.record_path, job.record, entry["version"], Path(entry["evidence_path"])
                )
    reports = [
        matrix_report.matrix_report(job.record, load_matrix(job.out_dir), known) for job in work
    ]
    written, _ = reporting.write_reports(records, None, reports_dir, "markdown", reports=reports)
    if history_path is None:
        return reports, written, None
    data, page = history.write_page(
        kb_dir, root, evidence_file.BENCH_PATH, history_path, since, reports_dir
    )
    return reports, written + [page], data
