"""The release cache, offline: a fake wheel stands in for pip's download.

What is pinned: an entry exists only once fully unpacked and verified; a
truncated wheel, a wheel whose hash is not the index's, or a file damaged in
the cache never gives a usable entry, and the next call fetches again.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from gdn_review.common import release, release_cache, release_trees

TARGET = "vllm/v1/attention/backends/gdn_attn.py"


def make_wheel(folder: Path, version: str, body: str = "x = 1\n") -> Path:
    files = {
        "vllm/__init__.py": "",
        TARGET: body,
        "vllm/_C.abi3.so": "binary",
        f"vllm-{version}.dist-info/METADATA": f"Name: vllm\nVersion: {version}\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},{len(text)}\n"
        for name, text in files.items()
    )
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        # Fixed timestamps: the same wheel twice has the same bytes (and hash).
        for name, text in [*files.items(), (f"vllm-{version}.dist-info/RECORD", record)]:
            archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), text)
    return wheel


@pytest.fixture
def fake_index(monkeypatch, tmp_path):
    """pip replaced by a local wheel factory; counts downloads; `damage` spoils the next one."""
    state = {"downloads": 0, "damage": None}

    def download(version, folder):
        state["downloads"] += 1
        wheel = make_wheel(folder, version, body=f"version = {version!r}\n")
        if state["damage"] in ("truncate", "truncate-unhashed"):
            data = wheel.read_bytes()
            wheel.write_bytes(data[: len(data) // 2])
        return wheel

    def index_hash(version):
        if state["damage"] == "truncate-unhashed":
            return None  # an index that publishes no hash: the wheel's own RECORD still guards it
        good = make_wheel(tmp_path / "index" / version, version, body=f"version = {version!r}\n")
        return (
            hashlib.sha256(good.read_bytes()).hexdigest()
            if state["damage"] != "wrong-hash"
            else "0" * 64
        )

    monkeypatch.setattr(release_cache, "download_wheel", download)
    monkeypatch.setattr(release_cache, "index_sha256", index_hash)
    return state


def test_fetched_once_then_read_from_the_cache(fake_index, tmp_path):
    root = tmp_path / "cache"
    messages = []
    entry = release_cache.ensure("0.29.0", root, messages.append)
    assert entry.source(TARGET) == "version = '0.29.0'\n"
    assert not (entry.path / "vllm" / "_C.abi3.so").exists()  # compiled parts stay out
    assert release_cache.source("0.29.0", TARGET, root) == "version = '0.29.0'\n"
    assert fake_index["downloads"] == 1 and release_cache.cached_versions(root) == ["0.29.0"]
    assert any("fetching vLLM 0.29.0" in m for m in messages)
    assert not [p for p in root.iterdir() if p.name.startswith(".fetch")]  # no scratch left behind


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncate", "the index says"),
        ("truncate-unhashed", "not a readable wheel|cannot be read"),
        ("wrong-hash", "the index says"),
    ],
)
def test_a_bad_download_leaves_no_entry_and_is_fetched_again(fake_index, tmp_path, damage, message):
    root = tmp_path / "cache"
    fake_index["damage"] = damage
    with pytest.raises(release_cache.ReleaseError, match=message):
        release_cache.ensure("0.30.0", root, lambda _: None)
    assert (
        release_cache.cached("0.30.0", root) is None and release_cache.cached_versions(root) == []
    )
    assert not [p for p in root.iterdir() if p.name.startswith(".fetch")]
    fake_index["damage"] = None
    assert (
        release_cache.ensure("0.30.0", root, lambda _: None).source(TARGET)
        == "version = '0.30.0'\n"
    )
    assert fake_index["downloads"] == 2


def test_a_damaged_cached_file_drops_the_entry_and_only_release_trees_fetches_it_again(
    fake_index, tmp_path
):
    root = tmp_path / "cache"
    entry = release_cache.ensure("0.31.0", root, lambda _: None)
    (entry.path / TARGET).write_text("version = '0.31.X'\n")  # same size, other bytes
    assert release_cache.source("0.31.0", TARGET, root) is None  # dropped, not fetched
    assert release_trees.source("0.31.0", TARGET, fetch=False, root=root) is None
    assert fake_index["downloads"] == 1
    quiet = {"say": lambda _: None, "root": root}
    assert release_trees.source("0.31.0", TARGET, **quiet) == "version = '0.31.0'\n"
    # Damaged while cached (its size kept): read, dropped and fetched again in one call.
    (root / "0.31.0" / TARGET).write_text("version = '0.31.Y'\n")
    assert release_trees.source("0.31.0", TARGET, **quiet) == "version = '0.31.0'\n"
    (root / "0.31.0" / TARGET).write_text("trunc")  # other size: not even listed as cached
    assert release_cache.cached("0.31.0", root) is None
    assert fake_index["downloads"] == 3


def test_a_half_unpacked_entry_without_manifest_is_not_used(fake_index, tmp_path):
    root = tmp_path / "cache"
    (root / "0.32.0" / "vllm").mkdir(parents=True)
    (root / "0.32.0" / TARGET).parent.mkdir(parents=True)
    (root / "0.32.0" / TARGET).write_text("partial")
    assert release_cache.cached("0.32.0", root) is None
    assert (
        release_cache.ensure("0.32.0", root, lambda _: None).source(TARGET)
        == "version = '0.32.0'\n"
    )


@pytest.mark.parametrize("version", ["latest", "0.29.0+cu130", "0.29.0; rm -rf /"])
def test_release_numbers_are_checked_before_anything_runs(version, tmp_path):
    with pytest.raises(release_cache.ReleaseError, match="release number|plain release"):
        release_cache.ensure(version, tmp_path)


def test_the_installed_release_is_adopted_as_a_verified_entry_without_compiled_files(tmp_path):
    version, root = release.loaded()
    entry = release_cache.adopt_installed(root=tmp_path, say=lambda line: None)
    assert entry.version == version and release_cache.cached(version, tmp_path) == entry
    assert (entry.path / "vllm" / "v1" / "attention" / "backends" / "gdn_attn.py").is_file()
    assert not list(entry.path.rglob("*.so"))
    assert entry.wheel.startswith("installed distribution at ")
    # The same source text as the installed file, read through the entry.
    installed = root / "vllm" / "v1" / "attention" / "backends" / "gdn_attn.py"
    assert entry.source("vllm/v1/attention/backends/gdn_attn.py") == installed.read_text(
        encoding="utf-8"
    )


def test_a_child_on_a_cached_release_writes_its_bytecode_and_one_on_an_overlay_does_not(
    tmp_path, monkeypatch
):
    from gdn_review.common import release_trees

    monkeypatch.setenv("GDN_REVIEW_CACHE", str(tmp_path / "cache"))
    entry = release_cache.cache_root() / "0.29.0"
    overlay = tmp_path / "review" / "patched"
    for folder in (entry, overlay):
        (folder / "vllm").mkdir(parents=True)
    base = {"PATH": "/usr/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    assert "PYTHONDONTWRITEBYTECODE" not in release_trees.environment(entry, base)
    assert release_trees.environment(overlay, base)["PYTHONDONTWRITEBYTECODE"] == "1"
    assert release_trees.environment(None, base)["PYTHONDONTWRITEBYTECODE"] == "1"


def test_only_release_trees_fetches_a_release():
    """``ensure`` (a download) and ``adopt_installed`` are called by ``release_trees`` alone: every
    other stage fetches through it (``entry``, ``tree``, ``source``)."""
    import ast

    package = Path(release_cache.__file__).resolve().parent.parent
    fetching = {"ensure", "adopt_installed"}
    callers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in fetching:
                if isinstance(node.value, ast.Name) and node.value.id == "release_cache":
                    callers.add(path.relative_to(package).as_posix())
    assert callers == {"common/release_trees.py"}
