"""Which releases a record's matrix runs, in which role, and how many run at once.

The base release (the last one without the PR), the head release (the first with it) and
every minor release after it up to the newest release the package index serves (the caller
finds it: ``common.published.default_newest``; offline, the newest at hand), or the releases
asked for; a contract runs from the first release its range names; each in its role (base,
head, later, earlier). A release that is not installed runs from the release cache.
A release that cannot run on this machine (``cannot_run_here``) is left out, and the matrix
report says why. matrix.py runs what ``plan`` gives, ``default_jobs`` at a time.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from gdn_review.common import release_range
from gdn_review.common.release import Release, ReleaseError
from gdn_review.matrix.matrix_files import MatrixError

# vLLM 0.24 to 0.27 choose their CPU platform only when vLLM is a CPU build (from 0.28
# VLLM_TARGET_DEVICE=cpu is enough); the release cache holds the index's CUDA build.
NO_CPU_PLATFORM = ">=0.24,<0.28"
NO_CPU_PLATFORM_REASON = (
    "vLLM 0.24 to 0.27 choose their CPU platform only in a CPU build of vLLM; the CUDA build "
    'stops with "Found no NVIDIA driver" on a machine without one, as this one'
)


@dataclasses.dataclass
class Planned:
    version: str
    role: str  # base, head, later, earlier
    installed: bool


def default_releases(base: str | None, head: str | None, newest: str | None) -> list[str]:
    """Base, head, and every minor release X.Y.0 after the head up to ``newest`` (the newest
    published release), that one included.

    An open PR (no head release yet) runs on its base release and every later one.
    """
    if not base:
        raise MatrixError("the record names no target.base_release: give releases with --vllm")
    if newest is None:
        raise MatrixError(
            "no release ends the default range (the package index could not be read and no "
            "release is at hand): give releases with --vllm"
        )
    base, head, top = Release(base), Release(head or base), Release(newest)
    chosen = {base, head, *head.minors_until(top)}
    if top > head:
        chosen.add(top)
    return sorted(chosen)


def nvidia_driver() -> bool:
    """Whether this machine has an NVIDIA driver loaded (read without importing torch)."""
    return Path("/proc/driver/nvidia").is_dir()


def cannot_run_here(version: str) -> str | None:
    """Why ``version`` cannot run on this machine (None: it can)."""
    if release_range.contains(NO_CPU_PLATFORM, version) and not nvidia_driver():
        return NO_CPU_PLATFORM_REASON
    return None


def left_out(versions: list[str]) -> dict[str, str]:
    """The releases of ``versions`` that cannot run here, each with why."""
    return {v: why for v in versions if (why := cannot_run_here(v)) is not None}


def plan(
    record,
    installed: str | None,
    requested: list[str] | None = None,
    since: str | None = None,
    newest: str | None = None,
) -> list[Planned]:
    """The releases to run for a record, those that cannot run here left out; ``since``: none
    older than that (a history's window); ``newest``: where the default range ends (the newest
    published release), needed only without ``requested``."""
    base, head = record.target.base_release, record.target.head_release
    if record.contract is not None:
        # A contract has no base: it runs from the first release its range names (as a head) on.
        base, head = None, record.contract.first_release
        if not requested and head is None:
            raise MatrixError(
                f"{record.label} names no lower bound in contract.releases: give "
                "releases with --vllm"
            )
    try:
        versions = {
            Release(v)
            for v in requested or default_releases(head if base is None else base, head, newest)
        }
        versions = {v for v in versions if not since or v >= Release(since)}
    except ReleaseError as error:
        raise MatrixError(str(error)) from None
    if not versions:
        raise MatrixError(f"{record.label}: no release of its matrix is at or after {since}")
    skipped = left_out(sorted(versions))
    if len(skipped) == len(versions):
        raise MatrixError(f"no release to run: {', '.join(skipped)}: {NO_CPU_PLATFORM_REASON}")
    planned = []
    for version in sorted(versions - set(skipped)):
        if version == base:
            role = "base"
        elif version == head:
            role = "head"
        elif (head or base) and version > (head or base):  # an open PR (no head): after its base
            role = "later"
        else:
            role = "earlier"
        planned.append(Planned(version, role, version == installed))
    return planned


def default_jobs() -> int:
    """Releases run at once: one per CPU, at most one per 2 GiB of available memory."""
    cpus = os.cpu_count() or 1
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            info = dict(line.split(":", 1) for line in handle)
        available_gib = int(info["MemAvailable"].split()[0]) / (1 << 20)
        return max(1, min(cpus, int(available_gib // 2)))
    except (OSError, KeyError, ValueError):
        return max(1, min(cpus, 2))
