"""Each vLLM release gets one VLLM_CACHE_ROOT, wherever its files lie (common.vllm_cache)."""

from __future__ import annotations

from gdn_review.common import vllm_cache


def _package(folder, version: str):
    """A vLLM package folder with the version file a wheel carries (setuptools-scm's layout)."""
    folder.mkdir(parents=True)
    (folder / "_version.py").write_text(
        f"__version__ = version = '{version}'\n__commit_id__ = commit_id = 'g0'\n", encoding="utf-8"
    )
    return folder


def test_a_release_unpacked_elsewhere_shares_its_root_and_releases_do_not(tmp_path, monkeypatch):
    monkeypatch.setenv("GDN_REVIEW_CACHE", str(tmp_path / "cache"))
    entry = _package(tmp_path / "releases" / "0.29.0" / "vllm", "0.29.0")
    unpacked = _package(tmp_path / "bundle-run" / "vllm", "0.29.0")
    other = _package(tmp_path / "releases" / "0.30.0" / "vllm", "0.30.0")
    assert vllm_cache.cache_root(str(unpacked)) == vllm_cache.cache_root(str(entry))
    assert vllm_cache.cache_root(str(other)) != vllm_cache.cache_root(str(entry))
    assert vllm_cache.cache_root(str(entry)).startswith(
        str(tmp_path / "cache" / "vllm-cache") + "/"
    )


def test_a_tree_without_a_version_file_is_keyed_by_its_path(tmp_path, monkeypatch):
    monkeypatch.setenv("GDN_REVIEW_CACHE", str(tmp_path / "cache"))
    (tmp_path / "a" / "vllm").mkdir(parents=True)
    (tmp_path / "b" / "vllm").mkdir(parents=True)
    assert vllm_cache.cache_root(str(tmp_path / "a" / "vllm")) != vllm_cache.cache_root(
        str(tmp_path / "b" / "vllm")
    )


def test_a_root_inherited_from_our_parent_is_replaced_and_a_users_is_kept(monkeypatch):
    """A child on another release must not write into its parent's root; a user's root is the
    user's."""
    import importlib
    import importlib.util
    import os

    environment = importlib.import_module(
        "gdn_review.harness.environment"
    )  # the package exports a function of that name

    loaded = vllm_cache.cache_root(os.path.dirname(importlib.util.find_spec("vllm").origin))
    parents = "/parent/on/another/release"
    monkeypatch.setenv("VLLM_CACHE_ROOT", parents)
    monkeypatch.setenv(environment.OUR_VLLM_CACHE_ROOT, parents)
    environment.vllm_cache_per_release()
    assert os.environ["VLLM_CACHE_ROOT"] == os.environ[environment.OUR_VLLM_CACHE_ROOT] == loaded
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/the/users/choice")
    environment.vllm_cache_per_release()
    assert os.environ["VLLM_CACHE_ROOT"] == "/the/users/choice"
