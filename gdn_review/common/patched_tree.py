"""A patched vLLM source tree that copies nothing it does not change.

The tree is a folder of symbolic links to the release's own files and
folders; only the folders on the way to a changed file are real, and only
the changed files are written, as new files in the overlay. The release's
files (the release cache's entry, or an installed vLLM) are read, never
written: a link is replaced, never written through. ``release_with_diff``: a release's files and
the same with a PR's diff applied, as a review applies it (`gdn-review bench`'s two sides).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from gdn_review.common import release_trees, unified_diff


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


def release_with_diff(
    diff: Path, version: str, folder: Path, say: Callable[[str], None] | None = None
) -> tuple[Path, Path]:
    """(``version``'s files, the same with ``diff`` applied): two folders holding vllm/.

    Every name is checked, nothing outside vLLM's tree (PatchError names the
    file and what is wrong); the patched side is a tree of links with only the
    changed files written, in ``folder``.
    """
    tree = release_trees.entry(version, say=say).path
    _, files = unified_diff.read_diff_file(diff)
    in_tree = [
        f for f in files if any(p and p.startswith("vllm/") for p in (f.old_path, f.new_path))
    ]
    if not in_tree:
        raise unified_diff.PatchError(
            f"{diff}: the diff changes no file of vLLM's Python package: nothing to time"
        )
    unified_diff.confine(in_tree, tree, str(diff))

    def read(relative: str) -> str | None:
        try:
            return unified_diff.inside(tree, relative).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None

    patched = unified_diff.apply(in_tree, read, str(diff))
    return tree, overlay(tree, patched, Path(folder) / "tree")
