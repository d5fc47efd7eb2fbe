"""Which vLLM releases the package index serves, and which is the newest.

The newest release on the index is the one users run, so a default range (the matrix's,
``find-release``'s, the history's) ends there, not at whatever this machine installed.
Asked of pip (``pip index versions vllm --json``), the same index ``release_cache`` fetches
from. Offline, or where the index cannot be read, the newest release at hand (installed or in
the release cache) stands in, and the caller is told so. Nothing here imports vLLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from gdn_review.common.release import Release, ReleaseError

PACKAGE = "vllm"


def is_final(version: str) -> bool:
    """A final release (0.34.0, 0.27.1), not a pre-, post- or dev release."""
    try:
        parsed = Release(version).version
    except ReleaseError:
        return False
    return not (parsed.is_prerelease or parsed.is_postrelease or parsed.is_devrelease)


def _index_versions(timeout: float) -> list[str]:
    from gdn_review.common import interrupts

    command = [sys.executable, "-m", "pip", "index", "versions", PACKAGE, "--json"]
    try:
        done = interrupts.run_child(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ReleaseError(
            f"the package index did not answer which vLLM releases it serves in {timeout:.0f} s"
        ) from None
    if done.returncode != 0:
        text = (done.stderr or done.stdout or "").strip().splitlines()
        raise ReleaseError(
            "the package index could not say which vLLM releases it serves (pip index "
            f"versions: {text[-1] if text else f'exit code {done.returncode}'})"
        )
    try:
        versions = json.loads(done.stdout)["versions"]
    except (ValueError, KeyError, TypeError):
        raise ReleaseError("pip index versions vllm --json gave no list of versions") from None
    return [str(v) for v in versions]


def published_releases(timeout: float = 120) -> list[Release]:
    """Every final vLLM release the package index serves, oldest first (``ReleaseError``
    where the index cannot be read)."""
    return sorted({Release(v) for v in _index_versions(timeout) if is_final(v)})


def newest_published(timeout: float = 120) -> Release:
    """The newest final vLLM release on the package index."""
    releases = published_releases(timeout)
    if not releases:
        raise ReleaseError("the package index serves no final vLLM release")
    return releases[-1]


def local_releases() -> list[Release]:
    """The final releases at hand without the index (installed or in the release cache), oldest
    first."""
    from gdn_review.common import release, release_cache

    found = {Release(v) for v in release_cache.cached_versions() if is_final(v)}
    if (installed := release.installed()) is not None:
        found.add(Release(installed))
    return sorted(found)


def newest_local() -> Release | None:
    """The newest release at hand without the index: installed or in the release cache."""
    found = local_releases()
    return found[-1] if found else None


def default_newest(
    say: Callable[[str], None] | None = None, offline: bool = False
) -> Release | None:
    """Where a default range ends: the newest release on the index; ``offline`` (or the index
    unreadable, said through ``say``), the newest at hand."""
    if not offline:
        try:
            return newest_published()
        except ReleaseError as error:
            if say is not None:
                say(f"{error}; the newest release at hand stands in for the newest published")
    return newest_local()
