"""The release a change is applied onto: a vLLM source folder (--vllm-src), else a release from
the release cache (--onto, default: the installed one, its files copied in once), read but never
written; and the release a change would land in by default (the next minor).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable

from packaging.version import Version

from gdn_review.common import release_cache, release_trees, unified_diff
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


def next_minor(version: str) -> str:
    parsed = Version(version)
    return f"{parsed.major}.{parsed.minor + 1}.0"


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
        version = onto or _source_version(folder)
        if version is None:
            raise ReviewError(
                f"--vllm-src {folder}: cannot tell its release (no "
                "vllm/_version.py): say it with --onto"
            )
        return Onto(
            release_cache.checked_version(version),
            folder.resolve(),
            folder.resolve(),
            f"vLLM source {folder} ({version})",
        )
    installed = release_cache.installed()
    version = release_cache.checked_version(onto) if onto else installed
    if version is None:
        raise ReviewError(
            "no vLLM is importable here: say which release to apply the change onto with --onto"
        )
    # The installed release's files are copied into the release cache once.
    entry = release_trees.entry(version, say=say)
    if version == installed:
        return Onto(version, entry.path, None, f"vLLM {version} (installed)")
    tree = release_trees.tree(version, say=say)  # its children import it: bytecode written once
    return Onto(version, entry.path, tree, f"vLLM {version} (release cache)")


def _source_version(folder: Path) -> str | None:
    text = (
        (folder / "vllm" / "_version.py").read_text(encoding="utf-8")
        if (folder / "vllm" / "_version.py").is_file()
        else ""
    )
    match = re.search(r"""version\s*=\s*['"]([0-9][^'"+]*)""", text)
    return Version(match.group(1)).base_version if match else None
