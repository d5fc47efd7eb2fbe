"""Where the checks run: platform set-up, device availability, versions."""

from __future__ import annotations

import functools
import os
import platform
import sys

from gdn_review.common import release
from gdn_review.common.release_trees import (
    CLAIMS_ON_ANY_RELEASE,
    CUDA_ON_CPU_PLATFORM,
    OUR_VLLM_CACHE_ROOT,
)
from gdn_review.harness import adaptations


def prepare_platform() -> None:
    """Tell vLLM its platform before it is first imported.

    Without a GPU, vLLM must be told ``cpu`` or it reaches for pinned memory
    and fails with "Found no NVIDIA driver". An explicit setting wins.
    """
    # The model is a config in a local folder: never ask a hub for anything.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Importing the builder's module imports vLLM's humming kernels, which
    # start two background processes (a whole Python and torch each, ~18 s of
    # CPU) to compile CUDA launchers the builder never calls.
    os.environ.setdefault("HUMMING_DISABLE_PARALLEL_BUILD", "1")
    if "VLLM_TARGET_DEVICE" in os.environ:
        return
    import torch

    os.environ["VLLM_TARGET_DEVICE"] = "cuda" if torch.cuda.is_available() else "cpu"


def vllm_cache_per_release() -> None:
    """Give the loaded vLLM's release its own ``VLLM_CACHE_ROOT``, unless set by a user.

    The root is ``common.vllm_cache``'s: one per release, wherever its files lie.
    A root this function set in a parent process (a CLI run on another release,
    a pytest worker) is not the user's: a child on another release inheriting it
    would overwrite the parent's model info and pay a model inspection (a second
    vLLM import) on every start. Called before vLLM is imported; finding the
    package does not import it.
    """
    current = os.environ.get("VLLM_CACHE_ROOT")
    if current is not None and current != os.environ.get(OUR_VLLM_CACHE_ROOT):
        return
    import importlib.util

    from gdn_review.common import vllm_cache

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        return
    root = vllm_cache.cache_root(os.path.dirname(os.path.abspath(spec.origin)))
    os.environ["VLLM_CACHE_ROOT"] = os.environ[OUR_VLLM_CACHE_ROOT] = root


@functools.cache
def vllm_release() -> release.Release:
    """The loaded vLLM's release (``release.loaded``'s answer), once vLLM is
    imported: a tree whose vLLM cannot import fails here."""
    prepare_platform()
    import vllm  # noqa: F401

    return release.loaded()[0]


def cuda_on_cpu_platform() -> bool:
    return (
        os.environ.get(CUDA_ON_CPU_PLATFORM) == "1"
        and os.environ.get("VLLM_TARGET_DEVICE") == "cpu"
    )


def cuda_skip_reason() -> str | None:
    """None when CUDA can be used, else why not (shown as the skip reason)."""
    import torch

    if not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA"
        return (
            "needs CUDA: no CUDA device on this machine "
            f"(torch {torch.__version__}, built with {built})"
        )
    if (
        os.environ.get("VLLM_TARGET_DEVICE", "cuda") != "cuda"
        and not cuda_on_cpu_platform()
    ):
        target = os.environ["VLLM_TARGET_DEVICE"]
        return f"needs CUDA: VLLM_TARGET_DEVICE={target} pins vLLM to another platform"
    return None


def device_skip_reason(device: str) -> str | None:
    if device == "cpu":
        return None
    if device == "cuda":
        return cuda_skip_reason()
    return f"unknown device {device!r} (expected 'cpu' or 'cuda')"


def environment() -> dict:
    """Versions and origins of what the checks ran against, as plain data."""
    prepare_platform()
    import torch
    import vllm

    vllm_path = os.path.dirname(os.path.abspath(vllm.__file__))
    source = _vllm_source(vllm_path)
    return {
        "vllm_version": str(vllm_release()),
        "vllm_path": vllm_path,
        "vllm_source": source,
        "torch_version": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda_device": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else None,
        "vllm_target_device": os.environ.get("VLLM_TARGET_DEVICE"),
        "cuda_on_cpu_platform": cuda_on_cpu_platform() and torch.cuda.is_available(),
        # The release matrix runs every claim on the base release (release_ranges.py).
        "claim_ranges_ignored": os.environ.get(CLAIMS_ON_ANY_RELEASE) == "1",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        # How the harness set up a release that refuses this machine (adaptations.py).
        "adaptations": adaptations.in_force(),
    }


def _vllm_source(vllm_path: str) -> str:
    """Whether vLLM is pip's installed distribution or a wheel unpacked on PYTHONPATH"""
    parent = os.path.dirname(vllm_path)
    on_path = {
        os.path.abspath(p)
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p
    }
    if parent in on_path:
        return "unpacked on PYTHONPATH (not the installed distribution)"
    installed = any(
        name.startswith("vllm-")
        and name.endswith(".dist-info")
        and os.path.exists(os.path.join(parent, name, "INSTALLER"))
        for name in os.listdir(parent)
    )
    return (
        "installed distribution"
        if installed
        else f"loaded from {parent} (not installed by pip)"
    )


def target_source(relative_path: str) -> tuple[str, str]:
    """Path and text of a file of the loaded vLLM.

    For example ``vllm/v1/attention/backends/gdn_attn.py``.
    """
    prepare_platform()
    import vllm

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(vllm.__file__)))
    path = os.path.join(package_root, relative_path)
    with open(path, encoding="utf-8") as handle:
        return path, handle.read()
