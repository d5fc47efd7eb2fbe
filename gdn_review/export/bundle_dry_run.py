"""A bundle's dry run: its run.sh run here on CPU, as the GPU machine would run it, in a bare
environment (a venv with BASELINE's packages linked from an installed copy, this interpreter's or
another's, and nothing else) and with no network where ``unshare -rn`` works.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from packaging.utils import canonicalize_name

from gdn_review.common import interrupts
from gdn_review.export import bundle_wheels
from gdn_review.export.bundle_wheels import BundleError


def bare_environment(destination: Path, say: Callable[[str], None] = print) -> Path:
    """A venv that has BASELINE (and its requirements) from this environment, and nothing else; its
    python.

    The packages are linked from their installed copies (no download, seconds): the stand-in
    for a machine with only PyTorch.
    """
    destination = Path(destination)
    shared = destination / "site"
    shared.mkdir(parents=True, exist_ok=True)
    baseline = bundle_wheels.baseline_distributions().values()
    names = {canonicalize_name(d.metadata["Name"]) for d in baseline}
    owners = _top_level_owners()
    count = 0
    for distribution in baseline:
        for entry in distribution.files or []:
            name = str(entry)
            if name.startswith(".."):
                continue  # scripts and data outside site-packages
            top = Path(name).parts[0]
            source = Path(distribution.locate_file(top))
            if source.is_dir() and owners.get(source, set()) <= names:
                # Only the baseline installed files here: one link brings the folder whole,
                # bytecode too (tens of thousands of links took seconds of system time).
                link = shared / top
                if not link.is_symlink():
                    link.symlink_to(source.resolve())
                    count += 1
                continue
            count += _link_file(Path(distribution.locate_file(entry)), shared / name)
    interrupts.run_child(
        [sys.executable, "-m", "venv", "--clear", str(destination / "venv")],
        check=True,
        env=_plain_environment(),
    )
    python = destination / "venv" / "bin" / "python"
    purelib = interrupts.run_child(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "bare-baseline.pth").write_text(f"{shared}\n", encoding="utf-8")
    say(f"bare environment {destination}: {len(baseline)} distributions ({count} links)")
    return python


def _top_level_owners() -> dict[Path, set[str]]:
    """Each top-level entry of an installed site-packages folder -> the distributions with files in
    it (a namespace package or ``__pycache__`` has several)."""
    owners: dict[Path, set[str]] = {}
    for distribution in importlib.metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"])
        for entry in distribution.files or []:
            if not str(entry).startswith(".."):
                top = Path(distribution.locate_file(Path(str(entry)).parts[0]))
                owners.setdefault(top, set()).add(name)
    return owners


def _link_file(source: Path, link: Path) -> int:
    """Link one installed file and, for a module, its bytecode; how many files were linked.

    A machine with PyTorch installed has its bytecode: without it, every fresh process of the
    dry run (PYTHONDONTWRITEBYTECODE) would compile those modules again.
    """
    source = source.resolve()
    if not source.is_file() or link.exists():
        return 0
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(source)
    if source.suffix == ".py":
        compiled = Path(importlib.util.cache_from_source(str(source)))
        cached = Path(importlib.util.cache_from_source(str(link)))
        if compiled.is_file() and not cached.exists():
            cached.parent.mkdir(exist_ok=True)
            cached.symlink_to(compiled)
    return 1


def _plain_environment() -> dict[str, str]:
    """PATH and HOME only: nothing of this environment's PYTHONPATH, pip settings or caches leaks
    in."""
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}


def no_network_prefix() -> list[str]:
    """``unshare -rn`` where it works (a new network namespace with no interfaces up), else
    nothing."""
    unshare = shutil.which("unshare")
    if (
        unshare
        and interrupts.run_child(
            [unshare, "-rn", "true"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return [unshare, "-rn"]
    return []


def _bare_environment_from(
    source_python: str, destination: Path, say: Callable[[str], None]
) -> Path:
    """``bare_environment`` made from another interpreter's packages (another torch), in that
    interpreter."""
    # This project's gdn_review goes first on that interpreter's path (it has none of its own).
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); from pathlib import Path; "
        "from gdn_review.export.bundle_dry_run import bare_environment; "
        "print(bare_environment(Path(sys.argv[1])))"
    )
    project = str(Path(__file__).resolve().parents[2])
    done = interrupts.run_child(
        [source_python, "-c", code, str(destination), project],
        capture_output=True,
        text=True,
        check=False,
        env=_plain_environment(),
    )
    if done.returncode != 0:
        raise BundleError(
            f"{source_python} could not make the bare environment: {done.stderr.strip()[-500:]}"
        )
    lines = done.stdout.strip().splitlines()
    for line in lines[:-1]:
        say(line)
    return Path(lines[-1])


def dry_run(
    bundle_dir: Path,
    work: Path,
    bench_seconds: int = 2,
    source_python: str | None = None,
    say: Callable[[str], None] = print,
    keyword: str | None = None,
) -> tuple[int, Path, bool]:
    """Run ``bundle_dir/run.sh`` on this machine's CPU in a bare environment, with no network if
    possible.

    The bare environment links the packages of ``source_python`` (default: this
    interpreter), e.g. a venv with the GPU machine's torch. Returns (run.sh's
    exit code, its OUT folder, whether the network was cut). ``keyword``: only the generated
    tests that pytest's ``-k`` selects run (``GDN_BUNDLE_KEYWORD``). ``bench_seconds``: short,
    as a dry run shows that the bench runs from the bundle, not what it measures.
    """
    manifest = json.loads((Path(bundle_dir) / "bundle.json").read_text(encoding="utf-8"))
    source_python = source_python or sys.executable
    version = interrupts.run_child(
        [
            source_python,
            "-c",
            "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if manifest["python"] != version:
        raise BundleError(
            f"the bundle's wheels are for Python {manifest['python']}, "
            f"{source_python} is {version or 'not runnable'}: make it with "
            f"--python {version}"
        )
    if source_python == sys.executable:
        python = bare_environment(Path(work) / "bare", say=say)
    else:
        python = _bare_environment_from(source_python, Path(work) / "bare", say)
    out = Path(work) / "evidence"
    environment = (
        _plain_environment()
        | {
            "PYTHON": str(python),
            "GDN_BUNDLE_BENCH_SECONDS": str(bench_seconds),
            "GDN_BUNDLE_KEYWORD": keyword or "",
            "PIP_CONFIG_FILE": os.devnull,  # no index or find-links of this machine's pip
            "TMPDIR": str(work),
        }
        | interrupts.hold_environment()
    )
    prefix = no_network_prefix()
    say(
        f"dry run: {bundle_dir}/run.sh on CPU, "
        f"{'no network (unshare -rn)' if prefix else 'network not cut (no unshare here)'}"
    )
    code = interrupts.run_child(
        [*prefix, "bash", str(Path(bundle_dir) / "run.sh"), str(out)], env=environment, check=False
    ).returncode
    return code, out, bool(prefix)
