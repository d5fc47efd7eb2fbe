"""A patched vLLM source tree that copies nothing it does not change.

The tree is a folder of symbolic links to the release's own files and
folders; only the folders on the way to a changed file are real, and only
the changed files are written, as new files in the overlay. The release's
files (the release cache's entry, or an installed vLLM) are read, never
written: a link is replaced, never written through.
"""

from __future__ import annotations

import os
from pathlib import Path

from gdn_review.common import unified_diff


def _materialise(folder: Path, original: Path) -> None:
    """Make ``folder`` a real directory whose entries link to ``original``'s."""
    if folder.is_symlink():
        folder.unlink()
    if folder.is_dir():
        return
    folder.mkdir()
    if original.is_dir():
        for entry in original.iterdir():
            if (
                entry.name != "__pycache__"
            ):  # bytecode of the unpatched files must not shadow the patched ones
                os.symlink(entry, folder / entry.name)


def overlay(base: Path, patched: dict[str, str | None], dest: Path) -> Path:
    """``dest`` holding ``base``'s tree with ``patched`` (relative path -> text, None: deleted) in
    place.

    Every name is checked again here (a plain relative path; each folder on its
    way a real folder of the overlay once made), so nothing is written outside
    ``dest`` whatever a caller passes.
    """
    base, dest = Path(base).resolve(), Path(dest)
    _materialise(dest, base)
    root = dest.resolve()
    for relative, text in sorted(patched.items()):
        problem = unified_diff.path_problem(relative)
        if problem:
            raise unified_diff.PatchError(
                f"{unified_diff.shown_path(relative)}: refused: {problem}"
            )
        parts = relative.split("/")
        folder, original = dest, base
        for part in parts[:-1]:
            folder, original = folder / part, original / part
            _materialise(folder, original)
            if (
                folder.is_symlink()
                or folder.resolve().parent != (folder.parent.resolve())
                or root not in folder.resolve().parents
            ):
                raise unified_diff.PatchError(
                    f"{unified_diff.shown_path(relative)}: refused: {folder} is not a "
                    "folder of the overlay"
                )
        target = folder / parts[-1]
        if target.is_symlink() or target.exists():
            target.unlink()
        if text is not None:
            target.write_text(text, encoding="utf-8")
    return dest
