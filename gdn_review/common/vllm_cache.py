"""The ``VLLM_CACHE_ROOT`` a vLLM tree gets: one per release, not one per path.

vLLM keeps what it learns of a model class (``modelinfos/``) in one file per
class, keyed by the model file's hash. Releases have different model files,
so runs that alternate releases (matrix, bench, mutate) would overwrite each
other's entry and pay a model-inspection subprocess (a second vLLM import) on
every start: each release gets its own root. The key is the tree's
``vllm/_version.py`` (release and commit), not its path, so a release
unpacked afresh (a bundle's run, a review's overlay, a new clone's
environment) finds what the same release learnt before. A tree without that
file is keyed by its path. Nothing here imports vLLM.
"""

from __future__ import annotations

import hashlib
import os

from gdn_review.common import release_cache


def cache_root(package: str) -> str:
    """The root for the vLLM package folder ``package`` (``.../vllm``), beside the release cache."""
    base = release_cache.cache_root().parent  # $GDN_REVIEW_CACHE, default ~/.cache/gdn-review
    try:
        with open(os.path.join(package, "_version.py"), "rb") as version_file:
            key = "release-" + hashlib.sha256(version_file.read()).hexdigest()[:16]
    except OSError:
        key = hashlib.sha256(os.path.abspath(package).encode()).hexdigest()[:16]
    return str(base / "vllm-cache" / key)
