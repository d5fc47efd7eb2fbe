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

A bundle carries what this machine's cache learnt of each of its releases (``model_info``):
its run starts from an empty cache, where each release's first vLLM process would inspect
the model class in a subprocess of its own (a vLLM import, about ten seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

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


def model_info(package: str) -> list[Path]:
    """The model-info files vLLM wrote under ``package``'s root (``modelinfos/*.json``): plain
    files holding a hash and a model info, as vLLM writes them. vLLM uses one only while its hash
    is the model file's, so a copy in another cache of the same release is safe."""
    folder = Path(cache_root(package)) / "modelinfos"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if (
            isinstance(data, dict)
            and isinstance(data.get("hash"), str)
            and isinstance(data.get("modelinfo"), dict)
        ):
            found.append(path)
    return found
