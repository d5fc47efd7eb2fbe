"""The release a change is applied onto: a vLLM source folder (--vllm-src), else a release from
the release cache (--onto, default: the installed one, its files copied in once), read but never
written (``check_work``: a review's --work lies apart from it); by default, where the diff is a
PR's own (``own_record``), the base release of that PR's record.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable

from gdn_review.common import release, release_trees, unified_diff
from gdn_review.common.release import Release
from gdn_review.review.review_files import ReviewError


@dataclasses.dataclass
class Onto:
    """The release a change is applied onto."""

    version: str
    tree: Path  # folder holding vllm/ (read; never written)
    pythonpath: Path | None  # None: the installed vLLM, imported as it is
    label: str

    def read(self, relative: str) -> str | None:
        """The release's text of ``relative`` (None: no such file); PatchError for a name that
        leaves the tree."""
        try:
            return unified_diff.inside(self.tree, relative).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None


def onto_release(onto: str | None, vllm_src: Path | None, say: Callable[[str], None]) -> Onto:
    """The sources to apply the change to: --vllm-src, else release --onto (default: the installed
    one)."""
    if vllm_src is not None:
        folder = Path(vllm_src)
        if not (folder / "vllm" / "__init__.py").is_file():
            raise ReviewError(
                f"--vllm-src {folder}: no vllm/__init__.py under it (give the "
                "folder that holds vllm/)"
            )
        version = onto or release.of_tree(folder)
        if version is None:
            raise ReviewError(
                f"--vllm-src {folder}: cannot tell its release (no "
                "vllm/_version.py): say it with --onto"
            )
        resolved = folder.resolve()
        return Onto(Release(version), resolved, resolved, f"vLLM source {folder} ({version})")
    version = Release(onto) if onto else release.loaded_or_none()
    if version is None:
        raise ReviewError(
            "no vLLM is importable here: say which release to apply the change onto with --onto"
        )
    # The loaded release's files are copied into the release cache once.
    entry = release_trees.entry(version, say=say)
    tree = release_trees.tree(version, say=say)  # its children import it: bytecode written once
    where = "installed" if tree is None else "release cache"
    return Onto(version, entry.path, tree, f"vLLM {version} ({where})")


def own_record(own: int | None, diff_path: Path, records: dict) -> int | None:
    """The PR whose diff is reviewed: ``own`` (checked: the KB has a record of it), else one its
    file name gives."""
    numbers = {r.key: r for r in records.values() if r.pr is not None}
    if own is not None:
        if own not in numbers:
            raise ReviewError(
                f"--pr {own}: the KB has no record of PR #{own} (its record "
                "explains the diff's stated changes)"
            )
        return own
    match = re.fullmatch(r"(?:pr-)?([1-9][0-9]{0,8})", Path(diff_path).stem)
    if match and int(match.group(1)) in numbers and numbers[int(match.group(1))].is_open:
        return int(match.group(1))
    return None


def check_work(work: Path | None, tree: Path) -> None:
    """--work must not lie in the sources the diff is applied to (their files are read, never
    written)."""
    if work is None:
        return
    resolved, tree = Path(work).resolve(), Path(tree).resolve()
    if resolved == tree or tree in resolved.parents or resolved in tree.parents:
        raise ReviewError(
            f"--work {work}: inside (or holding) the vLLM sources the diff is "
            f"applied to ({tree}); give a folder apart from them"
        )
