"""A review's files: the report's markdown and JSON (``REVIEW_FORMAT``) written whole, a shard's
JSON read back and its shape checked before any of it is used (it comes from a job that read an
untrusted diff), and the draft record of the reviewed change.

``ReviewError`` lives here, the bottom of the review's modules: every step of a review raises it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gdn_review.common.files import atomic_write

REVIEW_FORMAT = "gdn-review-review/1"


class ReviewError(Exception):
    """Bad input for a review (a diff that does not apply, a module that no longer imports): exit
    2."""


class ReviewCouldNotRun(Exception):
    """The release itself does not load here (vLLM's import or platform raised before any change
    was applied): no verdict, exit 3."""


REPORT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def write(data: dict, folder: Path, markdown: str) -> list[Path]:
    """``folder/<name>.md`` and ``.json``, each written whole or not at all."""
    folder = Path(folder)
    if not REPORT_NAME.match(str(data.get("name", ""))):
        raise ReviewError(
            f"report name {data.get('name')!r}: use letters, digits, '_', '.' "
            f"and '-' (it becomes a file name in {folder}); say one with "
            "--name"
        )
    md, js = folder / f"{data['name']}.md", folder / f"{data['name']}.json"
    atomic_write(js, json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    atomic_write(md, markdown)
    return [md, js]


def load(path: Path) -> dict:
    """A review's JSON (a shard's, for merging), or ReviewError naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReviewError(f"{path}: no such file") from None
    except ValueError as error:
        raise ReviewError(f"{path}: not JSON: {error}") from None
    if not isinstance(data, dict) or data.get("format") != REVIEW_FORMAT:
        raise ReviewError(f"{path}: not a gdn-review review (expected format {REVIEW_FORMAT!r})")
    check_shape(data, path)
    return data


# What a review's JSON holds at its top: a shard comes from a job that read an
# untrusted diff, so the job that comments checks it before using any of it.
_SHAPE = {
    "name": str,
    "diff_sha256": str,
    "onto": str,
    "source": str,
    "lands_in": str,
    "files": list,
    "impact": list,
    "carried": list,
    "records": list,
    "mutants": list,
    "mutants_left_out": int,
    "run": dict,
}


def check_shape(data: dict, path: Path) -> None:
    """ReviewError naming the file and field unless ``data`` has a review's shape and renders."""
    from gdn_review.review import render

    for key, kind in _SHAPE.items():
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ReviewError(
                f"{path}: field {key!r}: expected {kind.__name__}, got "
                f"{type(data.get(key)).__name__}"
            )
    if not re.fullmatch(r"[0-9a-f]{64}", data["diff_sha256"]):
        raise ReviewError(f"{path}: field 'diff_sha256': not a sha256 in hex")
    if not REPORT_NAME.match(data["name"]):
        raise ReviewError(
            f"{path}: field 'name': {data['name'][:80]!r} is not a report "
            "name (letters, digits, '_', '.', '-')"
        )
    for key in ("onto", "lands_in"):
        if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", data[key]):
            raise ReviewError(f"{path}: field {key!r}: {data[key][:80]!r} is not a release (X.Y.Z)")
    for key in ("files", "impact", "carried", "records", "mutants"):
        for index, item in enumerate(data[key]):
            if not isinstance(item, dict):
                raise ReviewError(
                    f"{path}: field '{key}[{index}]': expected an object, got {type(item).__name__}"
                )
    try:
        render.markdown(data)
        render.findings(data)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise ReviewError(
            f"{path}: not a review as gdn-review writes it: "
            f"{type(error).__name__}: {str(error)[:200]}"
        ) from None


def write_draft(data: dict, kb_dir: Path, number: int, folder: Path) -> Path:
    """``folder/<number>.yaml``: a draft record of the reviewed change (see ``review.draft``)."""
    from gdn_review.review import draft
    from gdn_review.run.selection import load_records

    records = {r.key: r for r in load_records(kb_dir).values()}
    try:
        return draft.write_draft(data, records, number, Path(folder) / f"{number}.yaml")
    except draft.DraftError as error:
        raise ReviewError(str(error)) from None
