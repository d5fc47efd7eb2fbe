"""Which releases a record's matrix runs, in which role, and how many run at once.

The base release (the last one without the PR), the head release (the first with it) and
every minor release after it up to the installed one, or the releases asked for; a contract
runs from the first release its range names; each in its role (base, head, later, earlier).
matrix.py runs what ``plan`` gives, ``default_jobs`` at a time.
"""

from __future__ import annotations

import dataclasses
import os

from packaging.version import Version

from gdn_review.common import release_cache
from gdn_review.matrix.matrix_files import MatrixError


@dataclasses.dataclass
class Planned:
    version: str
    role: str  # base, head, later, earlier
    installed: bool


def default_releases(base: str | None, head: str | None, installed: str | None) -> list[str]:
    """Base, head, and every minor release X.Y.0 after the head up to the installed one.

    An open PR (no head release yet) runs on its base release and every later one.
    """
    if not base:
        raise MatrixError("the record names no target.base_release: give releases with --vllm")
    if installed is None:
        raise MatrixError(
            "no vLLM is importable here to end the default range: give releases with --vllm"
        )
    head = head or base
    chosen = [Version(base), Version(head)]
    top = Version(installed)
    chosen += release_cache.minor_releases_after(Version(head), top)
    if top not in chosen and top > Version(head):
        chosen.append(top)
    return [str(v) for v in sorted(set(chosen))]


def plan(
    record, installed: str | None, requested: list[str] | None = None, since: str | None = None
) -> list[Planned]:
    """The releases to run for a record; ``since``: none older than that (a history's window)."""
    base, head = record.target.base_release, record.target.head_release
    if record.contract is not None:
        # A contract has no base: it runs from the first release its range names (as a head) on.
        base, head = None, record.contract.first_release
        if not requested and head is None:
            raise MatrixError(
                f"{record.label} names no lower bound in contract.releases: give "
                "releases with --vllm"
            )
    versions = requested or default_releases(head if base is None else base, head, installed)
    if since:
        versions = [v for v in versions if Version(v) >= Version(since)]
        if not versions:
            raise MatrixError(f"{record.label}: no release of its matrix is at or after {since}")
    checked = set()
    for version in versions:
        try:
            checked.add(release_cache.checked_version(version))
        except release_cache.ReleaseError as error:
            raise MatrixError(str(error)) from None
    planned = []
    for version in sorted(checked, key=Version):
        if base and Version(version) == Version(base):
            role = "base"
        elif head and Version(version) == Version(head):
            role = "head"
        elif (head or base) and Version(version) > Version(
            head or base
        ):  # an open PR (no head yet): after its base
            role = "later"
        else:
            role = "earlier"
        planned.append(
            Planned(version, role, installed is not None and Version(version) == Version(installed))
        )
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
