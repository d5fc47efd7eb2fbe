"""What the history page reads: each record's last matrix run (refused where the record has
changed since, or only part of it ran) and `gdn-review bench`'s latency ratios.

Reads what `gdn-review matrix` left under ``.gdn-review/matrix-N/`` (``matrix.json``, each
release's evidence) into each record's matrix report data; history.py builds the page from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gdn_review.kb import Record, is_draft
from gdn_review.matrix.matrix_files import MatrixError, load_matrix, matrix_folder_name
from gdn_review.matrix.matrix_report import matrix_report
from gdn_review.run import evidence_file


class HistoryError(MatrixError):
    """Nothing to read a history from (no matrix run at all): bad input, exit 2."""


@dataclasses.dataclass
class Matrices:
    """The matrix runs found per record, and the records that have none (with the command that makes
    one)."""

    reports: dict[int, dict]  # record -> matrix report data
    tests: dict[int, dict[str, list[dict]]]  # record -> release -> that release's evidence tests
    missing: dict[int, str]


def load_matrices(records: dict[Path, Record], work_root: Path) -> Matrices:
    """Each record's matrix report data from its last matrix run under ``work_root``."""
    known = {r.key for r in records.values()}
    reports, tests, missing = {}, {}, {}
    for path, record in sorted(records.items(), key=lambda item: item[1].sort_key):
        if is_draft(record):
            continue
        number, folder = record.key, Path(work_root) / matrix_folder_name(record.key)
        try:
            matrix = load_matrix(folder)
            stale = _stale(path, matrix)
            if stale:
                missing[number] = f"{folder}: {stale}; run `gdn-review matrix --record {number}`"
                continue
            reports[number] = matrix_report(record, matrix, known)
            tests[number] = {
                entry["version"]: [
                    t
                    for t in evidence_file.load([Path(entry["evidence_path"])]).tests
                    if t["record"] == number
                ]
                for entry in matrix["releases"]
                if entry.get("evidence_path")
            }
        except (MatrixError, evidence_file.EvidenceError) as error:
            missing[number] = f"{error}; run `gdn-review matrix --record {number}`"
    if not reports:
        raise HistoryError(
            f"no record has a matrix run under {work_root}: run `gdn-review "
            "matrix --all --since 0.28.0` first"
        )
    return Matrices(reports, tests, missing)


def _stale(record_path: Path, matrix: dict) -> str | None:
    """Why a matrix run no longer speaks for its record (None: it does)."""
    digest = matrix.get("record_sha256")
    if digest and digest != evidence_file.record_sha256(record_path):
        return f"{record_path} changed since this run"
    if matrix.get("keyword"):
        return f"the run selected tests with -k {matrix['keyword']!r}: only part of the record ran"
    return None


def load_bench(path: Path) -> dict[int, dict]:
    """Latency ratios per record from `gdn-review bench`'s file (per device, CUDA preferred); {}
    when there is none."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        by_record = evidence_file.load([path]).bench
    except evidence_file.EvidenceError as error:
        raise HistoryError(f"not a readable `gdn-review bench` result: {error}") from None
    found = {}
    for number, results in by_record.items():
        chosen = results.get("cuda") or results.get("cpu") or next(iter(results.values()), None)
        if chosen is not None:
            found[int(number) if str(number).isdigit() else str(number)] = chosen
    return found
