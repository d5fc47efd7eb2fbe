"""An offline bundle: everything a GPU machine with only PyTorch needs to run the generated checks
and the bench.

``gdn-review bundle --out DIR`` writes::

    DIR/run.sh              installs the wheels into a temp folder (pip --no-index), unpacks the
                            releases into a temp release cache, then runs gdn-review itself there:
                            a probe per release, `matrix` per record, `bench`, `report`
    DIR/README.md           what it is and how to run it
    DIR/bundle.json         what is inside: records, releases, wheels with their sha256, sizes
    DIR/probe-cases.json    the case the probe builds
    DIR/project/            gdn_review/, templates/, kb/, generated_tests/, pyproject.toml
    DIR/wheels/*.whl        what vLLM's builder path imports beyond BASELINE, for one Python,
                            and requirements.txt pinning each with its sha256
    DIR/releases/V.tar.xz   release cache entries (vLLM's Python files only, with their manifest)

Nothing is run here but pip download; the folder is staged beside DIR and
renamed into place only once it is complete and within the size limit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gdn_review.common import interrupts, release_cache, release_trees

BUNDLE_FORMAT = "gdn-review-bundle/1"
MAX_BYTES = 60 * 1024 * 1024
DEFAULT_PYTHON = "3.12"  # the GPU machine's (DESIGN.md, device KINDS.md)

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
PROJECT_PARTS = ("gdn_review", "templates", "kb", "generated_tests", "pyproject.toml")


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


def default_versions(records) -> list[str]:
    """The installed release (the generated suite's target) and the base and head of every latency
    claim (the bench)."""
    wanted = set()
    installed = release_cache.installed()
    if installed:
        wanted.add(installed)
    for record in records:
        if record.latency_check is not None:
            wanted.update(record.latency_releases())
    return sorted((v for v in wanted if v), key=Version)


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if "__pycache__" in info.name:
        return None
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def pack_release(
    release: release_cache.Release, destination: Path, say: Callable[[str], None]
) -> None:
    """``<version>/...`` (the cache entry, manifest included) as tar.xz, packed once per entry and
    reused."""
    manifest = (release.path / release_cache.MANIFEST).read_bytes()
    key = hashlib.sha256(manifest).hexdigest()[:16]
    packed = release_cache.cache_root().parent / "packed" / f"{release.version}-{key}.tar.xz"
    if not packed.is_file():
        say(f"packing vLLM {release.version}'s Python files (once; about half a minute)")
        packed.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=packed.parent, suffix=".partial")
        os.close(handle)
        try:
            with tarfile.open(partial, "w:xz", preset=9) as archive:
                for path in sorted(release.path.rglob("*")):
                    if path.is_file():
                        archive.add(
                            path,
                            arcname=f"{release.version}/{path.relative_to(release.path)}",
                            filter=_tar_filter,
                        )
            os.replace(partial, packed)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    shutil.copyfile(packed, destination)


def _copy_project(root: Path, destination: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for part in PROJECT_PARTS:
        source = root / part
        if source.is_dir():
            shutil.copytree(source, destination / part, ignore=ignore)
        elif source.is_file():
            shutil.copyfile(source, destination / part)
        else:
            raise BundleError(
                f"{source} is missing: run `gdn-review bundle` from the project's root"
            )


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def write_bundle(
    out: Path,
    records: dict,
    versions: list[str],
    python: str = DEFAULT_PYTHON,
    max_bytes: int = MAX_BYTES,
    project_root: Path = Path("."),
    force: bool = False,
    say: Callable[[str], None] = print,
) -> dict:
    """Write the bundle for ``records`` ({path: record}) and ``versions``; return bundle.json's
    data."""
    from gdn_review.generate import environment, module_context

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise BundleError(f"{out} exists and is not empty (--force replaces it)")
    versions = sorted({release_cache.checked_version(v) for v in versions}, key=Version)
    if not versions:
        raise BundleError("no vLLM release to carry (no vLLM installed here and no --vllm)")
    ordered = sorted(records.items(), key=lambda item: item[1].sort_key)
    plan = []
    for path, record in ordered:
        base = record.target.base_release
        runs = [v for v in versions if not base or Version(v) >= Version(base)]
        bench = None
        latency_base, latency_head = record.latency_releases()
        # An open PR's latency claim has no head release (its side is the PR's diff): not benched
        # here.
        if record.latency_check is not None and latency_head:
            bench = {"base": latency_base, "head": latency_head}
            absent = [v for v in bench.values() if v not in versions]
            if absent:
                raise BundleError(
                    f"{path}: the latency claim's releases {', '.join(absent)} are "
                    "not carried (add --vllm)"
                )
        plan.append({"record": record.key, "file": path.name, "releases": runs, "bench": bench})
    first_case = next(iter(module_context(ordered[0][1], ordered[0][0].name)["cases"].items()))

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        say(f"project files -> {out}/project")
        _copy_project(Path(project_root), staging / "project")
        (staging / "wheels").mkdir()
        pins = carried_pins()
        wheels = fetch_wheels(pins, python, say)
        carried = [
            {
                "name": pin.name,
                "version": pin.version,
                "file": wheel.name,
                "sha256": release_cache.file_sha256(wheel),
            }
            for pin, wheel in zip(pins, wheels)
        ]
        for wheel in wheels:
            shutil.copyfile(wheel, staging / "wheels" / wheel.name)
        # pip checks each wheel against its hash before installing: a file damaged on the way is
        # refused.
        (staging / "wheels" / "requirements.txt").write_text(
            "".join(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}\n" for w in carried),
            encoding="utf-8",
        )
        say(f"{len(wheels)} wheels for Python {python}: {_mib(_size(staging / 'wheels'))}")
        (staging / "releases").mkdir()
        for version in versions:
            pack_release(
                release_trees.entry(version, say=say),
                staging / "releases" / f"{version}.tar.xz",
                say,
            )
            say(
                f"vLLM {version}: "
                f"{_mib((staging / 'releases' / f'{version}.tar.xz').stat().st_size)}"
            )
        (staging / "probe-cases.json").write_text(
            json.dumps(dict([first_case]), indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
        manifest = {
            "format": BUNDLE_FORMAT,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": python,
            "baseline": list(BASELINE),
            "records": plan,
            "releases": versions,
            "wheels": carried,
        }
        templates = environment()
        for name in ("run.sh", "README.md"):
            text = templates.get_template(f"bundle/{name}.j2").render(
                manifest=manifest, max_mib=max_bytes / (1 << 20)
            )
            (staging / name).write_text(text, encoding="utf-8")
        os.chmod(staging / "run.sh", 0o755)
        size = _size(staging) + 4096  # bundle.json itself
        manifest["bytes"] = size
        (staging / "bundle.json").write_text(
            json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
        if size > max_bytes:
            parts = {
                p.name: _size(p) if p.is_dir() else p.stat().st_size for p in staging.iterdir()
            }
            biggest = ", ".join(
                f"{name} {_mib(n)}" for name, n in sorted(parts.items(), key=lambda i: -i[1])[:3]
            )
            raise BundleError(
                f"the bundle would be {_mib(size)}, over the limit of "
                f"{_mib(max_bytes)} ({biggest}): carry fewer releases with --vllm"
            )
        if out.exists():
            shutil.rmtree(out)
        os.rename(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    say(f"bundle {out}: {_mib(size)} (limit {_mib(max_bytes)})")
    return manifest


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def bare_environment(destination: Path, say: Callable[[str], None] = print) -> Path:
    """A venv that has BASELINE (and its requirements) from this environment, and nothing else; its
    python.

    The packages are linked file by file from their installed copies (no
    download, seconds): the stand-in for a machine with only PyTorch.
    """
    destination = Path(destination)
    shared = destination / "site"
    count = 0
    for distribution in baseline_distributions().values():
        for entry in distribution.files or []:
            name = str(entry)
            if name.startswith(".."):
                continue  # scripts and data outside site-packages
            source = Path(distribution.locate_file(entry)).resolve()
            if not source.is_file():
                continue
            link = shared / name
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(source)
                count += 1
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
    say(
        f"bare environment {destination}: {len(baseline_distributions())} "
        f"distributions ({count} files linked)"
    )
    return python


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
        "from gdn_review.export.bundle import bare_environment; print(bare_environment(Path(sys.argv[1])))"
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
    bench_seconds: int = 5,
    source_python: str | None = None,
    say: Callable[[str], None] = print,
) -> tuple[int, Path, bool]:
    """Run ``bundle_dir/run.sh`` on this machine's CPU in a bare environment, with no network if
    possible.

    The bare environment links the packages of ``source_python`` (default: this
    interpreter), e.g. a venv with the GPU machine's torch. Returns (run.sh's
    exit code, its OUT folder, whether the network was cut).
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


def _first_missing(path: Path) -> Path | None:
    """The outermost folder on the way to ``path`` that is not there (None: ``path`` is)."""
    missing = [folder for folder in [Path(path), *Path(path).parents] if not folder.exists()]
    return missing[-1] if missing else None


def trash() -> Path:
    """Where an interrupted bundle command's folders go to be deleted (beside the release cache)."""
    return release_cache.cache_root().parent / "trash"


def _discard(folders: list[Path], seconds: float = 3.0) -> None:
    """Take folders away at once: each moved into the trash (a rename), then deleted there for at
    most
    ``seconds``; what a slow disk leaves, the next bundle command deletes. On another file system:
    deleted in place."""
    moved = []
    for folder in filter(Path.exists, folders):
        target = trash() / f"{folder.name}.{os.getpid()}.{time.monotonic_ns()}"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(folder, target)
            moved.append(target)
        except (
            OSError
        ):  # another file system (or another bundle command emptied the trash meanwhile)
            shutil.rmtree(folder, ignore_errors=True)
    deleting = threading.Thread(
        target=lambda: [shutil.rmtree(path, ignore_errors=True) for path in moved], daemon=True
    )
    deleting.start()
    deleting.join(seconds)


def make_bundle(
    records: dict,
    out_dir: Path,
    versions: list[str],
    python: str,
    max_mib: int,
    force: bool,
    dry: bool,
    work_dir: Path | None,
    source_python: str | None,
    say: Callable[[str], None] = print,
) -> tuple[int, Path, bool] | None:
    """``gdn-review bundle``: write the bundle of the records that are not drafts; with ``dry``, run
    it
    here and return (run.sh's exit code, its OUT folder, whether the network was cut).

    Interrupted, it leaves no folder it made (the bundle, the dry run's work folder): they are
    moved into ``trash()`` at once and deleted there.
    """
    from gdn_review.kb import is_draft

    records = {path: record for path, record in records.items() if not is_draft(record)}
    if not records:
        raise BundleError("no record that is not a draft")
    shutil.rmtree(trash(), ignore_errors=True)  # what interrupted runs left there
    wanted = [out_dir] + ([work_dir, work_dir / "bare", work_dir / "evidence"] if work_dir else [])
    made = list(dict.fromkeys(m for m in map(_first_missing, wanted) if m is not None))
    try:
        write_bundle(
            out_dir,
            records,
            versions or default_versions(records.values()),
            python=python,
            max_bytes=max_mib << 20,
            force=force,
            say=say,
        )
        if not dry:
            return None
        work = work_dir or Path(tempfile.mkdtemp(prefix="gdn-bundle-dry-run-"))
        made += [] if work_dir else [work]
        return dry_run(out_dir, work, source_python=source_python, say=say)
    except KeyboardInterrupt:
        _discard(made)
        raise
