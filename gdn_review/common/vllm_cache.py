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

A fresh machine starts the same way: its first config on a release took 24.9 s, not 2.1 s
(0.34.0, 2 CPUs), once per release, seven times in the README's first command. So the project
carries what vLLM learnt of the harness's model class on each release it runs
(``model_infos.json``, keyed as the roots are); ``cache_root`` puts a release's files in an empty
root. vLLM uses one only while its hash is its model file's, and inspects again where not.
``python -m gdn_review.common.vllm_cache`` writes ``model_infos.json`` again from this machine's
cache (after a new release ran here).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from gdn_review.common import release_cache

SEEDS = Path(__file__).with_name("model_infos.json")


def cache_root(package: str) -> str:
    """The root for the vLLM package folder ``package`` (``.../vllm``), beside the release cache;
    a new root of a release ``SEEDS`` knows gets its model info first."""
    base = release_cache.cache_root().parent  # $GDN_REVIEW_CACHE, default ~/.cache/gdn-review
    try:
        with open(os.path.join(package, "_version.py"), "rb") as version_file:
            key = "release-" + hashlib.sha256(version_file.read()).hexdigest()[:16]
    except OSError:
        key = hashlib.sha256(os.path.abspath(package).encode()).hexdigest()[:16]
    root = base / "vllm-cache" / key
    if not (root / "modelinfos").is_dir():
        _seed(root / "modelinfos", _seeds().get(key, {}).get("files", {}))
    return str(root)


def _seeds() -> dict:
    try:
        return json.loads(SEEDS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _seed(folder: Path, files: dict) -> None:
    """Each seed file into ``folder``, whole or not at all (a rename), never over vLLM's own."""
    for name, data in files.items():
        if os.sep in name or not name.endswith(".json"):
            continue
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{name}.{os.getpid()}.partial"
        partial.write_text(json.dumps(data, indent=2), encoding="utf-8")
        try:
            os.link(partial, folder / name)  # fails where vLLM (or a sibling) wrote it first
        except OSError:
            pass
        finally:
            partial.unlink(missing_ok=True)


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


def save_seeds() -> int:
    """``SEEDS`` again from this machine's vLLM cache: every root with model info whose release
    (its ``_version.py``) is the installed one or in the release cache. The number of releases."""
    from gdn_review.common.release import loaded_or_none

    root = release_cache.cache_root()
    packages = {v: root / v / "vllm" for v in release_cache.cached_versions()}
    installed = loaded_or_none()
    if installed is not None:
        import importlib.util

        packages[str(installed)] = Path(importlib.util.find_spec("vllm").origin).parent
    seeds = {}
    for version, package in sorted(packages.items()):
        files = model_info(str(package))
        if files:
            seeds[files[0].parents[1].name] = {
                "release": version,
                "files": {f.name: json.loads(f.read_text(encoding="utf-8")) for f in files},
            }
    SEEDS.write_text(json.dumps(seeds, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return len(seeds)


if __name__ == "__main__":
    print(f"{SEEDS}: model info of {save_seeds()} release(s)")
