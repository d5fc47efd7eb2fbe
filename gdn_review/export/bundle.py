"""An offline bundle: everything a GPU machine with only PyTorch needs to run the generated checks
and the bench.

``gdn-review bundle --out DIR`` writes::

    DIR/run.sh              installs the wheels into a temp folder (pip --no-index), unpacks the
                            releases into a temp release cache, then runs gdn-review itself there:
                            a probe per release, `matrix` per record, `bench`, `report`
    DIR/README.md           what it is and how to run it
    DIR/bundle.json         what is inside: records, releases, wheels with their sha256, sizes
    DIR/probe-cases.json    the case the probe builds
    DIR/project.tar.xz      project/: gdn_review/, templates/, kb/, generated_tests/,
                            pyproject.toml
    DIR/wheels/*.whl        what vLLM's builder path imports beyond BASELINE, for one Python,
                            and requirements.txt pinning each with its sha256
    DIR/releases/V.tar.xz   release cache entries (vLLM's Python files only, with their manifest)
    DIR/vllm-cache/         what this machine's vLLM learnt of each release's model class (where
                            it has), copied into the run's cache: no inspection subprocess there

Nothing is run here but pip download; the folder is staged beside DIR and
renamed into place only once it is complete and within the size limit. Which wheels it
carries, and fetching them, is ``bundle_wheels``'s; running it here (``--dry-run``),
``bundle_dry_run``'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gdn_review.common import release, release_cache, release_trees, vllm_cache
from gdn_review.common.release import Release
from gdn_review.export import bundle_dry_run, bundle_wheels
from gdn_review.export.bundle_wheels import BundleError

BUNDLE_FORMAT = "gdn-review-bundle/1"
MAX_BYTES = 60 * 1024 * 1024
DEFAULT_PYTHON = "3.12"  # the GPU machine's (DESIGN.md, device KINDS.md)
PROJECT_PARTS = ("gdn_review", "templates", "kb", "generated_tests", "pyproject.toml")


def default_versions(records) -> list[str]:
    """The installed release (the generated suite's target) and the base and head of every latency
    claim (the bench)."""
    wanted = {release.installed()}  # None where no vLLM is installed: dropped below
    for record in records:
        if record.latency_check is not None:
            wanted.update(record.latency_releases())
    return sorted(Release(v) for v in wanted if v)


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if "__pycache__" in info.name:
        return None
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def pack_release(
    release: release_cache.Entry, destination: Path, say: Callable[[str], None]
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


def _carry_model_info(package: Path, staging: Path) -> list[str]:
    """This machine's vLLM model info for the release at ``package``, copied to
    ``vllm-cache/<its root's name>/modelinfos/`` (run.sh seeds the run's empty cache with it: no
    model-inspection subprocess per release); the files' names."""
    files = vllm_cache.model_info(str(package))
    for path in files:  # <root>/modelinfos/NAME.json, the same place under the bundle's folder
        copy = staging / "vllm-cache" / path.relative_to(path.parents[2])
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    return [path.name for path in files]


def _pack_project(root: Path, destination: Path) -> None:
    """``project/...`` as tar.xz: its records' snapshots (JSON, most of its bytes) pack to a
    tenth, which keeps a bundle of four releases within the GPU machine's carry limit."""
    ignored = {"__pycache__", ".pytest_cache", ".hypothesis"}

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if ignored & set(Path(info.name).parts) or info.name.endswith(".pyc"):
            return None
        return _tar_filter(info)

    with tarfile.open(destination, "w:xz") as archive:
        for part in PROJECT_PARTS:
            source = root / part
            if not source.exists():
                raise BundleError(
                    f"{source} is missing: run `gdn-review bundle` from the project's root"
                )
            archive.add(source, arcname=f"project/{part}", filter=keep)


def _size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _plan(records: dict, versions: list[Release]) -> list[dict]:
    """bundle.json's records: each one's releases to run (from its base release on) and its
    bench (the latency claim's two releases, which must be carried)."""
    plan = []
    for path, record in records.items():
        base = record.target.base_release
        bench = None
        latency_base, latency_head = record.latency_releases()
        # An open PR's latency claim has no head release (its side is the PR's diff): no bench.
        if record.latency_check is not None and latency_head:
            bench = {"base": latency_base, "head": latency_head}
            absent = [v for v in bench.values() if v not in versions]
            if absent:
                raise BundleError(
                    f"{path}: the latency claim's releases {', '.join(absent)} are "
                    "not carried (add --vllm)"
                )
        plan.append(
            {
                "record": record.key,
                "label": record.label,
                "file": path.name,
                "releases": [v for v in versions if not base or v >= base],
                "bench": bench,
            }
        )
    return plan


def _stage_wheels(staging: Path, python: str, say: Callable[[str], None]) -> list[dict]:
    """``wheels/``: what vLLM's builder path imports beyond the baseline, for ``python``, with
    requirements.txt pinning each to its sha256; bundle.json's ``wheels``."""
    (staging / "wheels").mkdir()
    pins = bundle_wheels.carried_pins()
    wheels = bundle_wheels.fetch_wheels(pins, python, say)
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
    # pip checks each wheel's hash before installing: a file damaged on the way is refused.
    (staging / "wheels" / "requirements.txt").write_text(
        "".join(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}\n" for w in carried),
        encoding="utf-8",
    )
    say(f"{len(wheels)} wheels for Python {python}: {_mib(_size(staging / 'wheels'))}")
    return carried


def _stage_releases(
    staging: Path, versions: list[Release], say: Callable[[str], None]
) -> dict[str, list[str]]:
    """``releases/V.tar.xz`` and ``vllm-cache/`` of each release; bundle.json's ``model_info``."""
    (staging / "releases").mkdir()
    model_info = {}
    for version in versions:
        release = release_trees.entry(version, say=say)
        packed = staging / "releases" / f"{version}.tar.xz"
        pack_release(release, packed, say)
        say(f"vLLM {version}: {_mib(packed.stat().st_size)}")
        model_info[version] = _carry_model_info(release.path / "vllm", staging)
    return model_info


def _refuse_over(staging: Path, size: int, max_bytes: int) -> None:
    """A bundle of ``size`` bytes over ``max_bytes``: BundleError names its three biggest parts."""
    if size > max_bytes:
        parts = {p.name: _size(p) if p.is_dir() else p.stat().st_size for p in staging.iterdir()}
        biggest = ", ".join(
            f"{name} {_mib(n)}" for name, n in sorted(parts.items(), key=lambda i: -i[1])[:3]
        )
        raise BundleError(
            f"the bundle would be {_mib(size)}, over the limit of "
            f"{_mib(max_bytes)} ({biggest}): carry fewer releases with --vllm"
        )


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
    versions = sorted({Release(v) for v in versions})
    if not versions:
        raise BundleError("no vLLM release to carry (no vLLM installed here and no --vllm)")
    ordered = dict(sorted(records.items(), key=lambda item: item[1].sort_key))
    plan = _plan(ordered, versions)
    first_path, first_record = next(iter(ordered.items()))
    first_case = next(iter(module_context(first_record, first_path.name)["cases"].items()))

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        say(f"project files -> {out}/project.tar.xz")
        _pack_project(Path(project_root), staging / "project.tar.xz")
        carried = _stage_wheels(staging, python, say)
        model_info = _stage_releases(staging, versions, say)
        (staging / "probe-cases.json").write_text(
            json.dumps(dict([first_case]), indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
        manifest = {
            "format": BUNDLE_FORMAT,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": python,
            "baseline": list(bundle_wheels.BASELINE),
            "records": plan,
            "releases": versions,
            "wheels": carried,
            "model_info": model_info,
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
        _refuse_over(staging, size, max_bytes)
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


def _first_missing(path: Path) -> Path | None:
    """The outermost folder on the way to ``path`` that is not there (None: ``path`` is)."""
    missing = [folder for folder in [Path(path), *Path(path).parents] if not folder.exists()]
    return missing[-1] if missing else None


def trash() -> Path:
    """Where an interrupted bundle command's folders go to be deleted (beside the release cache)."""
    return release_cache.cache_root().parent / "trash"


def _discard(folders: list[Path], seconds: float = 3.0) -> None:
    """Take folders away at once: each moved into the trash (a rename), then deleted there for at
    most ``seconds``; what a slow disk leaves, the next bundle command deletes. On another file
    system: deleted in place."""
    moved = []
    for folder in filter(Path.exists, folders):
        target = trash() / f"{folder.name}.{os.getpid()}.{time.monotonic_ns()}"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(folder, target)
            moved.append(target)
        except OSError:  # another file system (or another bundle command emptied the trash)
            shutil.rmtree(folder, ignore_errors=True)
    deleting = threading.Thread(
        target=lambda: [shutil.rmtree(path, ignore_errors=True) for path in moved], daemon=True
    )
    deleting.start()
    deleting.join(seconds)


@dataclasses.dataclass(frozen=True)
class DryRun:
    """``--dry-run``'s options: where its environment and evidence go (None: a temp folder,
    kept), the interpreter whose packages it links (None: this one), and the pytest ``-k`` of the
    generated tests it runs (None: all)."""

    work_dir: Path | None = None
    source_python: str | None = None
    keyword: str | None = None


def make_bundle(
    records: dict,
    out_dir: Path,
    versions: list[str],
    python: str,
    max_mib: int,
    force: bool,
    dry: DryRun | None = None,
    say: Callable[[str], None] = print,
) -> tuple[int, Path, bool] | None:
    """``gdn-review bundle``: write the bundle of the records that are not drafts; with ``dry``,
    run it here and return (run.sh's exit code, its OUT folder, whether the network was cut).

    Interrupted, it leaves no folder it made (the bundle, the dry run's work folder): they are
    moved into ``trash()`` at once and deleted there.
    """
    from gdn_review.kb import is_draft

    records = {path: record for path, record in records.items() if not is_draft(record)}
    if not records:
        raise BundleError("no record that is not a draft")
    shutil.rmtree(trash(), ignore_errors=True)  # what interrupted runs left there
    work_dir = dry.work_dir if dry else None
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
        if dry is None:
            return None
        work = work_dir or Path(tempfile.mkdtemp(prefix="gdn-bundle-dry-run-"))
        made += [] if work_dir else [work]
        return bundle_dry_run.dry_run(
            out_dir, work, source_python=dry.source_python, say=say, keyword=dry.keyword
        )
    except KeyboardInterrupt:
        _discard(made)
        raise
