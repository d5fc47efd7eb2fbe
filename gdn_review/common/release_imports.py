"""What an older vLLM release imports at import time that this environment lacks (``gguf``, which
vLLM up to 0.23 requires), installed beside that release's files in the release cache.

Each is installed with ``pip install --no-deps --target``: with its dependencies pip would also
put numpy there, and that copy would shadow the environment's own numpy. The folder goes on a
child's ``PYTHONPATH`` right after the release (``release_trees.environment``). Where pip cannot
install it (no network), the one command that does is said instead.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Callable

from packaging.requirements import InvalidRequirement, Requirement

# The imports vLLM makes when it is imported, of packages a newer vLLM no longer requires.
IMPORTED_AT_IMPORT_TIME = ("gguf",)
# In a release's cache entry (a name no import can reach); a review's overlay links it too.
FOLDER = "missing-imports"


def wanted(entry: Path) -> list[str]:
    """The requirements (``gguf>=0.17.0``) of the release at ``entry`` that its METADATA states
    unconditionally, among IMPORTED_AT_IMPORT_TIME, and that neither this environment nor the
    entry's folder has."""
    found = []
    for metadata in sorted(Path(entry).glob("vllm-*.dist-info/METADATA")):
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            try:
                requirement = Requirement(line.split(":", 1)[1].strip())
            except InvalidRequirement:
                continue
            name = requirement.name
            if (
                name in IMPORTED_AT_IMPORT_TIME
                and requirement.marker is None
                and find_spec(name) is None
                and not (Path(entry) / FOLDER / name).is_dir()
            ):
                found.append(f"{name}{requirement.specifier}")
    return found


def install_command(requirements: list[str], target: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"] + [
        str(target),
        *requirements,
    ]


def ensure(
    entry: Path, version: str, fetch: bool = True, say: Callable[[str], None] | None = None
) -> None:
    """Install what the release at ``entry`` imports and this environment lacks into
    ``entry/FOLDER``; where it cannot (``fetch`` off, pip failed), say the one command that does."""
    requirements = wanted(entry)
    if not requirements:
        return
    say = say or (lambda message: print(message, file=sys.stderr))
    folder = Path(entry) / FOLDER
    what = f"vLLM {version} imports {', '.join(requirements)} when it is imported"
    by_hand = shlex.join(install_command(requirements, folder))
    if not fetch:
        say(f"{what}, which this environment lacks; install it with: {by_hand}")
        return
    from gdn_review.common import interrupts

    say(f"{what}: installing it (no dependencies) into {folder}")
    with tempfile.TemporaryDirectory(prefix=".imports-", dir=entry) as scratch:
        done = interrupts.run_child(
            install_command(requirements, Path(scratch)), capture_output=True, text=True
        )
        if done.returncode != 0:
            last = (done.stderr or done.stdout or "").strip().splitlines() or ["no output"]
            say(f"{what}; pip could not install it ({last[-1]}); install it with: {by_hand}")
            return
        folder.mkdir(exist_ok=True)
        for item in Path(scratch).iterdir():  # another process may have placed it meanwhile
            if not (folder / item.name).exists():
                os.rename(item, folder / item.name)
