"""`gdn-review import`: which importer reads a file, and writing the draft it gives.

A file whose name ends in ``.json`` or whose first non-space character is
``{`` is gh's JSON of a pull request (gh_pr.py; ``--diff`` adds what
``gh pr diff`` wrote); any other file is a markdown review report
(review_report.py). The draft goes to ``kb/<number>.yaml``, a file of that
name, or a folder; an existing file is replaced only when forced, and the
write goes through a temp file and a rename: on any error nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gdn_review.common.files import atomic_write
from gdn_review.importers.drafting import ReportImportError


def read_text(path: Path) -> str:
    """A file's UTF-8 text (a BOM dropped), or ReportImportError naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ReportImportError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ReportImportError(
            f"{path}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from None


def is_gh_json(path: Path, text: str) -> bool:
    return Path(path).suffix.lower() == ".json" or text.lstrip()[:1] == "{"


def draft_text(report_path: Path, diff_path: Path | None = None) -> str:
    """The draft's YAML text from a markdown report or gh's JSON (with gh's diff)."""
    text = read_text(report_path)
    if is_gh_json(report_path, text):
        from gdn_review.importers.gh_pr import import_gh_pr

        return import_gh_pr(text, str(report_path), diff_path)
    if diff_path is not None:
        raise ReportImportError(
            f"{report_path}: --diff goes with gh's JSON of the PR (gh pr view "
            "N --json ...), not with a markdown report"
        )
    from gdn_review.importers.review_report import import_report

    return import_report(text, str(report_path))


def write_draft(
    report_path: Path,
    out_path: Path | None = None,
    force: bool = False,
    diff_path: Path | None = None,
) -> Path:
    """Import ``report_path`` (and ``diff_path``) and write the draft; returns the path written.

    ``out_path`` is a file (named ``<number>.yaml``, as the loader requires) or a
    folder (an existing one, or a path without a suffix, made if needed); by
    default ``kb/<number>.yaml``. An existing file is replaced
    only with ``force``. The write goes through a temp file and a rename.
    """
    text = draft_text(Path(report_path), Path(diff_path) if diff_path is not None else None)
    number = yaml.safe_load(text)["pr"]["number"]
    name = f"{number}.yaml"
    if out_path is None:
        target = Path("kb") / name
    elif Path(out_path).is_dir() or not Path(out_path).suffix:
        # a folder, made if it does not exist yet
        target = Path(out_path) / name
    else:
        target = Path(out_path)
        if target.name != name:
            raise ReportImportError(
                f"{target}: a record of PR #{number} must be named {name} (or "
                "give a folder to --out)"
            )
    if target.exists() and not force:
        raise ReportImportError(f"{target} exists; use --force to replace it")
    atomic_write(target, text)
    return target
