"""The GDN builder's family as the releases ship it: what a case's ``builder:`` may name.

A case may build any in-tree subclass of ``GDNAttentionMetadataBuilder``
(``harness.builders.builder_class`` finds it in the loaded release). Validation
knows the names the same way, without importing vLLM: it scans the Python files
of every release in the release cache (and the installed vLLM's) for classes
whose base is the GDN builder or one of its subclasses, as
``harness.builders.family_modules`` scans the loaded release. Not a hand list.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
from pathlib import Path

from gdn_review.common import release_cache
from gdn_review.kb.checks import GDN_BUILDER

GDN_BUILDER_MODULE = "vllm.v1.attention.backends.gdn_attn"
_CLASS = re.compile(rb"^class (\w+)\(([\w., ]+)\):", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class FamilyMember:
    """A builder class of the family, as the releases that ship it define it."""

    name: str
    module: str  # e.g. vllm.models.kimi_k3.amd.kda_metadata
    releases: tuple[str, ...]  # the scanned releases that ship it ("installed": the installed vLLM)
    # Methods its own class body defines in some release (e.g. _build_chunk_metadata).
    methods: frozenset[str]

    @property
    def kimi_k3(self) -> bool:
        """Kimi-K3's KDA builders (vllm/models/kimi_k3/): kda_prefill_backend and
        use_kda_recoverssm configure them."""
        return ".kimi_k3." in self.module


@functools.cache
def scan_tree(root: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """The family in one release's ``vllm/`` folder: class -> (module, methods its body
    defines). GDN's own builder included. Read once per process (every file of the release)."""
    bases: dict[str, tuple[str, list[str], frozenset[str]]] = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                text = handle.read()
            if b"MetadataBuilder)" not in text and b"MetadataBuilder," not in text:
                continue
            module = "vllm." + os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            found = list(_CLASS.finditer(text))
            for index, match in enumerate(found):
                body_end = found[index + 1].start() if index + 1 < len(found) else len(text)
                body = text[match.end() : body_end]
                methods = frozenset(
                    m.decode() for m in re.findall(rb"^    def (\w+)\(", body, re.MULTILINE)
                )
                parents = [
                    b.strip().rsplit(b".", 1)[-1].decode() for b in match.group(2).split(b",")
                ]
                bases[match.group(1).decode()] = (
                    module.removesuffix(".__init__"),
                    parents,
                    methods,
                )
    # GDN's own (its base is generic, AttentionMetadataBuilder[...]: the pattern skips it).
    family = {GDN_BUILDER: (GDN_BUILDER_MODULE, frozenset())}
    grown = True
    while grown:
        grown = False
        for cls, (module, parents, methods) in bases.items():
            if cls not in family and any(parent in family for parent in parents):
                family[cls] = (module, methods)
                grown = True
    return family


def trees_at_hand() -> tuple[tuple[str, Path], ...]:
    """(release, its vllm/ folder) of every cached release, and of the installed vLLM ("installed");
    what validation scans (kb.release_names too)."""
    trees = []
    root = release_cache.cache_root()
    for version in release_cache.cached_versions():
        folder = root / version / "vllm"
        if folder.is_dir():
            trees.append((version, folder))
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.submodule_search_locations:
        trees.append(("installed", Path(list(spec.submodule_search_locations)[0])))
    return tuple(trees)


@functools.cache
def known_builders() -> dict[str, FamilyMember]:
    """Every builder class of the family some scanned release ships, by name (empty: no
    release is there to scan; validation then cannot tell)."""
    found: dict[str, dict] = {}
    for release, folder in trees_at_hand():
        for name, (module, methods) in scan_tree(folder).items():
            entry = found.setdefault(name, {"module": module, "releases": [], "methods": set()})
            entry["releases"].append(release)
            entry["methods"] |= methods
    return {
        name: FamilyMember(
            name, data["module"], tuple(data["releases"]), frozenset(data["methods"])
        )
        for name, data in sorted(found.items())
    }
