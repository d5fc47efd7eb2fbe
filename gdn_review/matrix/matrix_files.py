"""What a matrix run leaves on disk: ``matrix.json`` per record (which release ran how), and reading
it back.

The matrix (``matrix.py``) writes it, the reports (``matrix_report.py``) and
the history page (``history.py``) read it; with several records each record's
run goes to ``WORK/matrix-N``.
"""

from __future__ import annotations

import json
from pathlib import Path

from gdn_review.common import snapshots
from gdn_review.common.files import atomic_write

MATRIX_FORMAT = "gdn-review-matrix/1"


class MatrixError(Exception):
    """Bad input for the matrix (unknown release, no base release...): exit 2."""


def matrix_folder_name(key: int | str) -> str:
    """A record's folder under the work root when several records run (``gdn-review matrix
    --all``)."""
    return f"matrix-{key}"


def write_matrix(folder: Path, data: dict) -> Path:
    """``folder/matrix.json``, written whole or not at all (``data`` without its format: set
    here)."""
    path = Path(folder) / "matrix.json"
    atomic_write(
        path, json.dumps({**data, "format": MATRIX_FORMAT}, indent=1, sort_keys=True) + "\n"
    )
    return path


def load_matrix(folder: Path) -> dict:
    """matrix.json of a matrix run, with each release's evidence path and snapshot loaded."""
    path = Path(folder) / "matrix.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MatrixError(f"{path}: no matrix here (run `gdn-review matrix` first)") from None
    except (OSError, ValueError) as error:
        raise MatrixError(f"{path}: cannot read: {error}") from None
    if not isinstance(data, dict) or data.get("format") != MATRIX_FORMAT:
        raise MatrixError(f"{path}: not a gdn-review matrix (expected format {MATRIX_FORMAT!r})")
    for entry in data["releases"]:
        entry["evidence_path"] = (
            str(Path(folder) / entry["evidence"]) if entry.get("evidence") else None
        )
        entry["snapshot_data"] = (
            snapshots.load(Path(folder) / entry["snapshot"]) if entry.get("snapshot") else None
        )
    return data
