"""A vLLM release's tree of Python files, and the environment of a child process that runs on one.

Every stage that runs or reads another release asks here: ``tree`` gives the
folder that holds a release's ``vllm/`` (None for the loaded release, which
a child imports as it is), ``entry`` the release cache's entry of a release
(the loaded one's copied in once), ``source`` a file of it, each fetched once into
the release cache unless ``fetch`` is off; ``ReleaseError`` says why not.
``tree`` also installs what an older release imports and this environment lacks
(``release_imports``: gguf). ``environment`` is the environment of a child on a tree: the tree
first on ``PYTHONPATH``, then those imports, and its release's own ``VLLM_CACHE_ROOT``
(``vllm_cache``). No other module sets ``PYTHONPATH`` or fetches a release. Nothing here
imports vLLM.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path
from typing import Callable, Mapping

from gdn_review.common import release_cache, release_imports, vllm_cache
from gdn_review.common.release import Release, ReleaseError, loaded_or_none

__all__ = ["Fetches", "ReleaseError", "entry", "environment", "source", "tree"]

# What a parent tells a child through its environment; the harness reads them, and a parent names
# them from here without importing the harness (and torch). The VLLM_CACHE_ROOT a parent set for
# a child (harness.environment leaves it to the child as its own):
OUR_VLLM_CACHE_ROOT = "GDN_REVIEW_VLLM_CACHE_ROOT"
# "1": the release matrix's base run (the release without the PR): every claim runs whatever its
# `releases` range, so that a claim of an improvement is seen to fail without the PR.
CLAIMS_ON_ANY_RELEASE = "GDN_REVIEW_CLAIMS_ON_ANY_RELEASE"
# "1": a bundle's run where vLLM's CUDA platform cannot load (its compiled kernels are not carried,
# or were built for another torch): vLLM on its CPU platform, the builder's tensors on the GPU.
CUDA_ON_CPU_PLATFORM = "GDN_REVIEW_CUDA_ON_CPU_PLATFORM"


def entry(
    version: str,
    fetch: bool = True,
    say: Callable[[str], None] | None = None,
    root: Path | None = None,
) -> release_cache.Entry:
    """The release cache's entry of ``version``: the loaded release's files copied in (once),
    another release's fetched (once; with ``fetch`` off, ReleaseError where it is not cached).
    ``root``: another release cache than the default one."""
    version = Release(version)
    if version == loaded_or_none():
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
    """The folder holding ``version``'s vllm/ for a child to import; None: the loaded release, as
    it is."""
    version = Release(version)
    if version == loaded_or_none():
        return None
    found = entry(version, fetch, say).path
    release_imports.ensure(found, version, fetch, say)  # gguf, which vLLM <= 0.23 imports
    return found


def source(
    version: str,
    relative_path: str,
    fetch: bool = True,
    say: Callable[[str], None] | None = None,
    root: Path | None = None,
) -> str | None:
    """Text of one file of ``version`` (``entry``'s; None: not cached and ``fetch`` off); a damaged
    entry is dropped and, when fetching is allowed, fetched again."""
    text = release_cache.source(version, relative_path, root)  # cached and intact: no fetch
    for _ in range(2 if fetch and text is None else 0):
        entry(version, say=say, root=root)
        text = release_cache.source(version, relative_path, root)
        if text is not None:
            break
    return text


class Fetches:
    """``tree`` of each version (``files_only``: its ``entry``, for a reader of its files that
    imports nothing of it), fetched in the background from now, in the order given (at most four
    at once: downloading and unpacking overlap). ``held``: what the fetches say is said once
    ``wait`` has seen them all end (amid a running pytest's output a line reads badly)."""

    def __init__(
        self,
        versions: list[str],
        say: Callable[[str], None] | None = None,
        files_only: bool = False,
        held: bool = False,
    ):
        wanted = list(dict.fromkeys(versions))
        self._say, self._held = say, [] if held else None
        tell = self._held.append if self._held is not None else say
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(4, len(wanted))))
        fetch_one = entry if files_only else tree
        self.futures = {v: self._pool.submit(fetch_one, v, True, tell) for v in wanted}

    def result(self, version: str):
        """``version``'s tree (or entry); raises its ReleaseError."""
        return self.futures[version].result()

    def wait(self) -> None:
        """Until every fetch has ended; a failure is left to the reader of that release."""
        self.close(wait=True)
        while self._held:
            (self._say or print)(self._held.pop(0))

    def close(self, wait: bool = True) -> None:
        """The fetches not started are dropped; ``wait``: until those under way have ended."""
        self._pool.shutdown(wait=wait, cancel_futures=True)


def environment(folder: Path | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment (``base``, default this process's) of a child whose vLLM is the tree at
    ``folder``.

    ``folder`` goes first on ``PYTHONPATH`` and the child gets that release's
    ``VLLM_CACHE_ROOT``; None leaves the installed vLLM to the child, with its own.
    """
    env = dict(os.environ if base is None else base)
    if folder is None:
        return env
    imports = Path(folder) / release_imports.FOLDER  # what the release imports and we lack
    paths = (str(folder), str(imports) if imports.is_dir() else "", env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
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
