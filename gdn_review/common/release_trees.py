"""A vLLM release's tree of Python files, and the environment of a child process that runs on one.

Every stage that runs or reads another release asks here: ``tree`` gives the
folder that holds a release's ``vllm/`` (None for the installed release, which
a child imports as it is), ``entry`` the release cache's entry of a release
(the installed one's copied in once), both fetched once into the release cache
unless ``fetch`` is off; either raises ``ReleaseError`` saying why not.
``environment`` is the environment of a child on a tree: the tree first on
``PYTHONPATH`` and its release's own ``VLLM_CACHE_ROOT`` (``vllm_cache``). No
other module sets ``PYTHONPATH`` or fetches a release. Nothing here imports vLLM.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path
from typing import Callable, Mapping

from gdn_review.common import release_cache, vllm_cache
from gdn_review.common.release_cache import ReleaseError

__all__ = ["ReleaseError", "entry", "environment", "tree", "trees"]

# The VLLM_CACHE_ROOT a parent set for a child (harness.environment leaves it to the child as its
# own).
OUR_VLLM_CACHE_ROOT = "GDN_REVIEW_VLLM_CACHE_ROOT"


def entry(
    version: str,
    fetch: bool = True,
    say: Callable[[str], None] | None = None,
    root: Path | None = None,
) -> release_cache.Release:
    """The release cache's entry of ``version``: the installed release's files copied in (once),
    another release's fetched (once; with ``fetch`` off, ReleaseError where it is not cached).
    ``root``: another release cache than the default one."""
    version = release_cache.checked_version(version)
    if version == release_cache.installed():
        return release_cache.adopt_installed(root, say=say)
    hit = release_cache.cached(version, root)
    if hit is not None:
        return hit
    if not fetch:
        raise ReleaseError(
            f"vLLM {version} is not in the release cache and --offline forbids fetching it"
        )
    return release_cache.ensure(version, root, say)


def tree(version: str, fetch: bool = True, say: Callable[[str], None] | None = None) -> Path | None:
    """The folder holding ``version``'s vllm/ for a child to import; None: the installed release, as
    it is."""
    version = release_cache.checked_version(version)
    if version == release_cache.installed():
        return None
    return entry(version, fetch, say).path


def trees(versions: list[str], say: Callable[[str], None] | None = None) -> dict[str, Path | None]:
    """``tree`` of each version, the releases not at hand fetched side by side (at most four
    downloads at once: downloading and unpacking overlap); the first ReleaseError is raised."""
    wanted = list(dict.fromkeys(versions))
    if not wanted:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, len(wanted))) as pool:
        return dict(zip(wanted, pool.map(lambda version: tree(version, say=say), wanted)))


def environment(folder: Path | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment (``base``, default this process's) of a child whose vLLM is the tree at
    ``folder``.

    ``folder`` goes first on ``PYTHONPATH`` and the child gets that release's
    ``VLLM_CACHE_ROOT``; None leaves the installed vLLM to the child, with its own.
    """
    env = dict(os.environ if base is None else base)
    if folder is None:
        return env
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    if Path(folder).resolve().is_relative_to(release_cache.cache_root().resolve()):
        # A release cache entry's bytecode is written beside its sources by the first process that
        # imports each module (a builder imports about 600 of its 2,500; where
        # PYTHONDONTWRITEBYTECODE is set, as on CI machines, every process compiled them anew).
        # An overlay of links (review) stays read-only: the release's files are never written.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    package = Path(folder) / "vllm"
    if env.get("VLLM_CACHE_ROOT") in (
        None,
        env.get(OUR_VLLM_CACHE_ROOT),
    ):  # a user's own root stays
        env["VLLM_CACHE_ROOT"] = env[OUR_VLLM_CACHE_ROOT] = vllm_cache.cache_root(str(package))
    return env
