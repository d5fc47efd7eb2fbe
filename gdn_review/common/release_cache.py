"""The release cache: other vLLM releases' pure-Python sources, fetched once.

Each release's wheel is fetched with ``pip download --no-deps`` (the ordinary
client, so it goes through the same index and proxy settings as every other
install), its sha256 compared with the hash the index publishes for it (pip's
``--report`` of a dry-run install), its Python files unpacked into a temp
folder beside the cache entry and checked against the wheel's own RECORD
hashes, and only then renamed into place. A partial download or unpack is
never used: an entry exists only once its ``.complete`` manifest does, and a
manifest that no longer matches the files (a truncated or edited file) makes
the entry be fetched again.

Nothing here imports vLLM: the cached sources are read as text (diffs,
mutants) or put first on ``PYTHONPATH`` of a subprocess (other releases).
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from gdn_review.common.release import Release, ReleaseError, loaded

MANIFEST = ".complete"
# Compiled extensions were built against that release's torch: only Python travels.
KEEP_SUFFIXES = (".py", ".pyi", ".json", ".yaml", ".yml", ".txt", ".jinja", ".typed")


class UnknownRelease(ReleaseError):
    """A release the package index does not have (bad input: exit 2)."""


class DamagedEntry(ReleaseError):
    """A cached file no longer matches its manifest."""


@dataclasses.dataclass(frozen=True)
class Entry:
    version: str
    path: Path  # folder to put first on PYTHONPATH (holds vllm/)
    wheel: str
    sha256: str

    def source(self, relative_path: str) -> str:
        """Text of one file of this release (``vllm/v1/attention/backends/gdn_attn.py``), after
        checking its hash against the manifest: DamagedEntry where it differs."""
        manifest = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        expected = manifest["files"].get(relative_path)
        if expected is None:
            raise ReleaseError(f"vLLM {self.version} has no {relative_path}")
        try:
            data = (self.path / relative_path).read_bytes()
        except OSError:
            data = b""
        if hashlib.sha256(data).hexdigest() != expected[0]:
            raise DamagedEntry(f"vLLM {self.version}: cached {relative_path} is damaged")
        return data.decode("utf-8")


def cache_root() -> Path:
    """``$GDN_REVIEW_CACHE/releases`` (default ``~/.cache/gdn-review/releases``)."""
    base = os.environ.get("GDN_REVIEW_CACHE")
    if not base:
        home = os.environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".cache", "gdn-review")
    return Path(base) / "releases"


def cached(version: str, root: Path | None = None) -> Entry | None:
    """The complete, intact cache entry of ``version``, or None (nothing is fetched)."""
    entry = (root or cache_root()) / Release(version)
    manifest = entry / MANIFEST
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for relative, digest in data.get("files", {}).items():
        # Size first (cheap) for every file; the hash of the files a run reads is
        # checked by _intact on demand.
        try:
            if (entry / relative).stat().st_size != digest[1]:
                return None
        except OSError:
            return None
    return Entry(data["version"], entry, data["wheel"], data["sha256"])


def cached_versions(root: Path | None = None) -> list[str]:
    """Versions with a complete cache entry, oldest first."""
    folder = root or cache_root()
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        try:
            if (child / MANIFEST).is_file():
                found.append(Release(child.name))
        except ReleaseError:
            continue
    return sorted(found)


def ensure(
    version: str, root: Path | None = None, say: Callable[[str], None] | None = None
) -> Entry:
    """The cache entry of ``version``, fetched and unpacked first if needed: called by
    ``release_trees``, the one owner that fetches.

    Its files are only read here; a child on the entry writes their bytecode as it imports
    them (``release_trees.environment``).
    """
    version = Release(version)
    root = root or cache_root()
    hit = cached(version, root)
    if hit is not None:
        return hit
    say = say or (lambda message: print(message, file=sys.stderr))
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".fetch-{version}-", dir=root) as scratch:
        scratch = Path(scratch)
        expected = index_sha256(version)
        say(f"release cache: fetching vLLM {version} (once; about 0.5 GB, Python files kept)")
        wheel = download_wheel(version, scratch / "download")
        actual = file_sha256(wheel)
        if expected and actual != expected:
            raise ReleaseError(
                f"vLLM {version}: {wheel.name} has sha256 {actual}, the index "
                f"says {expected}: not used"
            )
        staged = scratch / "unpacked"
        files = unpack_python(wheel, staged)
        manifest = {
            "version": version,
            "wheel": wheel.name,
            "sha256": actual,
            "index_sha256": expected,
            "files": files,
        }
        target = _move_into_place(staged, manifest, root)
    say(f"release cache: vLLM {version} ready in {target}")
    release = cached(version, root)
    if release is None:
        raise ReleaseError(
            f"vLLM {version}: the cache entry at {target} did not verify after unpacking"
        )
    return release


def _pip(*args: str) -> subprocess.CompletedProcess:
    from gdn_review.common import interrupts

    return interrupts.run_child(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True
    )


def _pip_failure(version: str, done: subprocess.CompletedProcess) -> ReleaseError:
    text = (done.stderr or done.stdout or "").strip()
    if "No matching distribution" in text or "Could not find a version" in text:
        return UnknownRelease(
            f"vLLM {version} is not a release on the package index (pip: no matching distribution)"
        )
    last = text.splitlines()[-1] if text else f"exit code {done.returncode}"
    return ReleaseError(f"vLLM {version}: pip could not fetch it: {last}")


def index_sha256(version: str) -> str | None:
    """The sha256 the package index publishes for this platform's wheel of ``version``."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        done = _pip(
            "install",
            "--quiet",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--report",
            str(report),
            f"vllm=={version}",
        )
        if done.returncode != 0:
            raise _pip_failure(version, done)
        try:
            install = json.loads(report.read_text(encoding="utf-8"))["install"]
            hashes = install[0]["download_info"]["archive_info"].get("hashes", {})
        except (OSError, ValueError, KeyError, IndexError):
            return None
        return hashes.get("sha256")


def download_wheel(version: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    done = _pip(
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(folder),
        f"vllm=={version}",
    )
    if done.returncode != 0:
        raise _pip_failure(version, done)
    wheels = sorted(folder.glob(f"vllm-{version}-*.whl"))
    if len(wheels) != 1:
        raise ReleaseError(
            f"vLLM {version}: expected one wheel from pip download, got "
            f"{[w.name for w in folder.iterdir()]}"
        )
    return wheels[0]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _kept(name: str) -> bool:
    """Python files and the dist-info are kept; compiled extensions are not."""
    return not name.endswith("/") and (name.endswith(KEEP_SUFFIXES) or ".dist-info/" in name)


def _place(target: Path, name: str, data: bytes, files: dict[str, list]) -> None:
    """Write one checked file into a staged entry and note it for the manifest."""
    destination = target / name
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(data)
    files[name] = [hashlib.sha256(data).hexdigest(), len(data)]


def _move_into_place(staged: Path, manifest: dict, root: Path) -> Path:
    """Write the manifest (last: it is what makes an entry complete) and rename the entry into the
    cache."""
    (staged / MANIFEST).write_text(
        json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    target = root / manifest["version"]
    if target.exists():  # an incomplete or damaged entry: replaced whole
        shutil.rmtree(target)
    os.rename(staged, target)
    return target


def unpack_python(wheel: Path, target: Path) -> dict[str, list]:
    """Unpack the wheel's Python files into ``target``, each checked against the wheel's RECORD.

    Returns {relative path: [sha256, size]} for the manifest.
    """
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as error:
        raise ReleaseError(f"{wheel.name}: not a readable wheel ({error})") from None
    with archive:
        names = archive.namelist()
        record_name = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
        if record_name is None:
            raise ReleaseError(f"{wheel.name}: no RECORD in the wheel")
        record = {
            row[0]: row[1]
            for row in csv.reader(io.StringIO(archive.read(record_name).decode()))
            if len(row) >= 2
        }
        files: dict[str, list] = {}
        for name in names:
            if not _kept(name):
                continue
            try:
                data = archive.read(name)
            except (zipfile.BadZipFile, OSError, EOFError) as error:
                raise ReleaseError(f"{wheel.name}: {name} cannot be read ({error})") from None
            if record.get(name) and record[name] != _record_digest(data):
                raise ReleaseError(f"{wheel.name}: {name} does not match the wheel's RECORD")
            _place(target, name, data, files)
    if not (target / "vllm" / "__init__.py").is_file():
        raise ReleaseError(f"{wheel.name}: no vllm/__init__.py in the wheel")
    return files


# (file's path) -> (its inode, mtime and size when read, its text): a KB's records ask for the
# same file of every cached release, and each first ask checks the whole entry (2,800 files'
# sizes; 27 records x 13 releases were 10 s of a mutate run). A file changed since is read and
# checked again.
_READ: dict[Path, tuple[tuple[int, int, int], str]] = {}


def source(version: str, relative_path: str, root: Path | None = None) -> str | None:
    """Text of one file of release ``version`` from the cache, never fetched (that is
    ``release_trees.source``'s); None: not cached, or damaged (then dropped, so the next fetch
    replaces it)."""
    path = (root or cache_root()) / Release(version) / relative_path
    try:
        seen = path.stat()
        stamp = (seen.st_ino, seen.st_mtime_ns, seen.st_size)
    except OSError:
        stamp = None
    kept = _READ.get(path)
    if stamp is not None and kept is not None and kept[0] == stamp:
        return kept[1]
    entry = cached(version, root)
    if entry is None:
        return None
    try:
        text = entry.source(relative_path)
    except DamagedEntry:
        shutil.rmtree(entry.path, ignore_errors=True)
        return None
    if stamp is not None:
        _READ[path] = (stamp, text)
    return text


def adopt_installed(root: Path | None = None, say: Callable[[str], None] | None = None) -> Entry:
    """The loaded vLLM's Python files (``release.loaded``: the installed one, unless an entry is
    first on PYTHONPATH) as a cache entry (a bundle carries entries; no wheel download).

    Files are taken from the distribution's own RECORD and checked against it,
    as ``unpack_python`` does for a wheel; the entry's ``wheel`` names where
    they came from.
    """
    import importlib.metadata

    version, package_root = loaded()
    root = root or cache_root()
    hit = cached(version, root)
    if hit is not None:
        return hit
    distribution = importlib.metadata.distribution("vllm")
    say = say or (lambda message: print(message, file=sys.stderr))
    say(f"release cache: copying the installed vLLM {version}'s Python files from {package_root}")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".adopt-{version}-", dir=root) as scratch:
        staged = Path(scratch) / "unpacked"
        files: dict[str, list] = {}
        for entry in distribution.files or []:
            name = str(entry)
            if name.startswith("..") or not _kept(name):
                continue
            try:
                data = Path(distribution.locate_file(entry)).read_bytes()
            except OSError:
                continue  # RECORD lists files pip may not have written (__pycache__)
            if (
                entry.hash is not None
                and entry.hash.mode == "sha256"
                and _record_digest(data) != f"sha256={entry.hash.value}"
            ):
                raise ReleaseError(
                    f"installed vLLM {version}: {name} does not match its RECORD "
                    "(edited?): not used"
                )
            _place(staged, name, data, files)
        if not (staged / "vllm" / "__init__.py").is_file():
            raise ReleaseError(f"installed vLLM {version}: no vllm/__init__.py in its RECORD")
        manifest = {
            "version": version,
            "wheel": f"installed distribution at {package_root}",
            "sha256": "",
            "files": files,
        }
        _move_into_place(staged, manifest, root)
    release = cached(version, root)
    if release is None:
        raise ReleaseError(f"vLLM {version}: the cache entry at {root / version} did not verify")
    return release
