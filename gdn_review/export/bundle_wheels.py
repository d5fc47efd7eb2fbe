"""The wheels a bundle carries: what a machine with only PyTorch is assumed to have (BASELINE),
what vLLM's builder path needs beyond it (CARRIED), each pinned at the version installed here
and fetched once per Python into the wheel cache with pip download.

``BundleError`` lives here, the bottom of the bundle's modules: every bundle step raises it.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gdn_review.common import interrupts, release_cache

# What a machine with only PyTorch is known to have (the GPU machine's image);
# their own requirements come with them.
BASELINE = (
    "torch",
    "numpy",
    "transformers",
    "tokenizers",
    "safetensors",
    "jinja2",
    "pyyaml",
    "pytest",
    "hypothesis",
    "click",
    "rich",
    "tqdm",
)
# What importing vLLM's builder path (0.28.0 to 0.33.0) and gdn-review needs beyond
# BASELINE: found by running the generated suite with BASELINE alone and adding
# each missing module's distribution until nothing was missing. Their own
# requirements are carried too, except those BASELINE already brings.
# `gdn-review bundle --dry-run` (and the slow test) proves the list again.
CARRIED = (
    "pydantic",
    "psutil",
    "requests",
    "pyzmq",
    "cbor2",
    "aiohttp",
    "oss-harmony",
    "openai",
    # openai needs httpx2. Here huggingface_hub 2.x brings it too; the GPU image's
    # huggingface_hub 1.33 does not (its first run, 2026-12-04: "No module named 'httpx2'").
    "httpx2",
    "pillow",
    "pybase64",
    "cachetools",
    "msgspec",
    "cloudpickle",
    "uvloop",
    "py-cpuinfo",
    "prometheus-client",
    "xgrammar",
    "fastapi",
    "partial-json-parser",
    "llguidance",
    "einops",
    "compressed-tensors",
)


class BundleError(Exception):
    """A bundle that cannot be made as asked (too big, a wheel not on the index...): exit 2."""


@dataclasses.dataclass(frozen=True)
class Pin:
    name: str
    version: str


def requirement_closure(names, stop=()) -> dict[str, importlib.metadata.Distribution]:
    """Installed distributions ``names`` need, with extras, following no requirement named in
    ``stop``."""
    stopped = {canonicalize_name(name) for name in stop}
    found: dict[tuple[str, tuple], importlib.metadata.Distribution] = {}
    pending = [(name, ()) for name in names]
    while pending:
        name, extras = pending.pop()
        key = (canonicalize_name(name), tuple(sorted(extras)))
        if key in found:
            continue
        try:
            distribution = importlib.metadata.distribution(key[0])
        except importlib.metadata.PackageNotFoundError:
            raise BundleError(
                f"{name} is not installed here, so its wheel cannot be pinned "
                "(run scripts/bootstrap)"
            ) from None
        found[key] = distribution
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) in stopped:
                continue
            if requirement.marker and not any(
                requirement.marker.evaluate({"extra": e}) for e in ("", *extras)
            ):
                continue
            pending.append((requirement.name, tuple(requirement.extras)))
    return {key[0]: distribution for key, distribution in found.items()}


def baseline_distributions() -> dict[str, importlib.metadata.Distribution]:
    """What the GPU machine is assumed to have: BASELINE and its requirements, up to what is
    carried."""
    return requirement_closure(BASELINE, stop=CARRIED)


def carried_pins() -> list[Pin]:
    """Every distribution the bundle carries as a wheel, at the version installed here (tested)."""
    baseline = baseline_distributions()
    carried = requirement_closure(CARRIED)
    return sorted(
        (
            Pin(distribution.metadata["Name"], distribution.version)
            for name, distribution in carried.items()
            if name not in baseline
        ),
        key=lambda pin: canonicalize_name(pin.name),
    )


def _platform_arguments(python: str) -> list[str]:
    """pip download arguments for CPython ``python`` (3.12) on x86_64 Linux, any manylinux."""
    digits = python.replace(".", "")
    arguments = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for abi in (f"cp{digits}", "abi3", "none"):
        arguments += ["--abi", abi]
    platforms = [
        "linux_x86_64",
        "manylinux1_x86_64",
        "manylinux2010_x86_64",
        "manylinux2014_x86_64",
    ]
    platforms += [f"manylinux_2_{minor}_x86_64" for minor in range(5, 40)]
    for platform in platforms:
        arguments += ["--platform", platform]
    return arguments


def wheel_cache(python: str) -> Path:
    return release_cache.cache_root().parent / "wheels" / f"cp{python.replace('.', '')}"


def _wheel_for(pin: Pin, folder: Path) -> Path | None:
    name = canonicalize_name(pin.name).replace("-", "_")
    for path in sorted(folder.glob("*.whl")):
        parts = path.name.split("-")
        if canonicalize_name(parts[0]).replace("-", "_") == name and Version(parts[1]) == Version(
            pin.version
        ):
            return path
    return None


def fetch_wheels(pins: list[Pin], python: str, say: Callable[[str], None]) -> list[Path]:
    """One wheel per pin for ``python``, downloaded once into the wheel cache."""
    folder = wheel_cache(python)
    folder.mkdir(parents=True, exist_ok=True)
    missing = [pin for pin in pins if _wheel_for(pin, folder) is None]
    if missing:
        say(f"downloading {len(missing)} wheel(s) for Python {python} into {folder}")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
            listing.write("".join(f"{pin.name}=={pin.version}\n" for pin in missing))
        try:
            done = interrupts.run_child(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "-q",
                    *_platform_arguments(python),
                    "-r",
                    listing.name,
                    "-d",
                    str(folder),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            os.unlink(listing.name)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
            raise BundleError(
                f"pip download for Python {python} failed: "
                f"{' '.join(errors) or done.stderr.strip()[-500:]}"
            )
    wheels = []
    for pin in pins:
        wheel = _wheel_for(pin, folder)
        if wheel is None:
            raise BundleError(
                f"no wheel of {pin.name}=={pin.version} for CPython {python} on x86_64 Linux"
            )
        wheels.append(wheel)
    return wheels
