"""A vLLM release number, and which release this interpreter loads.

``Release`` is a release's text (``0.29.0``: keys, file names, JSON), checked where it comes
in (``ReleaseError`` names bad text), ordered as releases are, with its next minor.
``loaded`` is the one answer to which release an import of vLLM gives here; ``installed``
what pip installed, whatever ``PYTHONPATH`` puts first. Nothing here imports vLLM.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version


class ReleaseError(ValueError):
    """A release that cannot be had (unknown, offline, corrupt) or text that is no release
    number: said for people. A ValueError, so a record's field reports it as its own error."""


class Release(str):
    """A plain release number (``0.29.0``, ``0.30.0rc1``), as the text it is."""

    def __new__(cls, text: str | Version) -> Release:
        if isinstance(text, Release):
            return text
        stripped = str(text).strip()
        try:
            version = Version(stripped)
        except InvalidVersion:
            raise ReleaseError(f"{text!r} is not a release number (for example 0.29.0)") from None
        if version.local or str(version) != stripped:
            raise ReleaseError(
                f"{text!r}: give a plain release number, for example {version.base_version}"
            )
        return super().__new__(cls, stripped)

    @property
    def version(self) -> Version:
        return Version(self)

    @property
    def minor(self) -> Release:
        """The first release of its minor series: 0.29.3 -> 0.29.0."""
        return Release(f"{self.version.major}.{self.version.minor}.0")

    def next_minor(self) -> Release:
        """The first release of the next minor series: 0.29.3 -> 0.30.0."""
        return Release(f"{self.version.major}.{self.version.minor + 1}.0")

    def minors_until(self, last: str) -> list[Release]:
        """Every X.Y.0 after this release up to ``last`` (in its major version), oldest first."""
        found, minor, last = [], self.next_minor(), Release(last)
        while minor <= last and minor.version.major == last.version.major:
            found.append(minor)
            minor = minor.next_minor()
        return found

    # Ordered as releases, whatever the other side's type (a plain str is parsed).
    def __lt__(self, other: str) -> bool:
        return self.version < Release(other).version

    def __le__(self, other: str) -> bool:
        return self.version <= Release(other).version

    def __gt__(self, other: str) -> bool:
        return self.version > Release(other).version

    def __ge__(self, other: str) -> bool:
        return self.version >= Release(other).version


# YAML writes a Release as the text it is (drafts, changes), as JSON does.
yaml.SafeDumper.add_representer(Release, yaml.SafeDumper.represent_str)


def of_tree(root: Path) -> Release | None:
    """The release of the vLLM in ``root`` (the folder holding ``vllm/``): its one
    ``vllm-*.dist-info`` says it, else ``vllm/_version.py`` (a source tree); None: neither does."""
    infos = [path.name[len("vllm-") : -len(".dist-info")] for path in root.glob("vllm-*.dist-info")]
    text = infos[0] if len(infos) == 1 else None
    version_file = root / "vllm" / "_version.py"
    if text is None and version_file.is_file():
        found = re.search(
            r"""version\s*=\s*['"]([0-9][^'"]*)""", version_file.read_text(encoding="utf-8")
        )
        text = found.group(1) if found else None
    try:
        return None if text is None else Release(Version(text).base_version)
    except InvalidVersion:
        return None


def loaded() -> tuple[Release, Path]:
    """(release, folder holding ``vllm/``) of the vLLM an import gives here, or has given (the
    one imported), read without importing it; its local or dev suffix dropped (0.33.0+cpu:
    0.33.0). A wheel unpacked first on ``PYTHONPATH`` wins over the installed one, as it does
    for an import."""
    module = sys.modules.get("vllm")
    if module is not None and getattr(module, "__file__", None):
        root = Path(module.__file__).resolve().parent.parent
    else:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            raise ReleaseError("vLLM is not importable here (run scripts/bootstrap)")
        root = Path(list(spec.submodule_search_locations)[0]).parent
    release = of_tree(root)
    if release is None:
        raise ReleaseError(
            f"cannot tell which vLLM release is in {root} (not one vllm-*.dist-info folder, "
            "no vllm/_version.py)"
        )
    return release, root


def loaded_or_none() -> Release | None:
    """``loaded``'s release, or None where no vLLM is importable here (a bundle's GPU machine)."""
    try:
        return loaded()[0]
    except ReleaseError:
        return None


def installed() -> Release | None:
    """The release pip installed here (site-packages and what its .pth files add), not one that
    ``PYTHONPATH`` puts before it; None: none is."""
    overlays = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) not in overlays]
    for distribution in importlib.metadata.distributions(name="vllm", path=path):
        return Release(Version(distribution.version).base_version)
    return None
