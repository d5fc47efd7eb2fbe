"""Each vLLM release gets one VLLM_CACHE_ROOT, wherever its files lie (common.vllm_cache)."""

from __future__ import annotations

from gdn_review.common import release_cache, vllm_cache
from gdn_review.review import tree


def test_a_release_unpacked_elsewhere_shares_its_root_and_releases_do_not(tmp_path, monkeypatch):
    monkeypatch.setenv("GDN_REVIEW_CACHE", str(tmp_path / "cache"))
    entry = release_cache.ensure("0.29.0").path / "vllm"
    copy = tmp_path / "unpacked" / "vllm"
    copy.mkdir(parents=True)
    (copy / "_version.py").write_bytes((entry / "_version.py").read_bytes())
    other = release_cache.ensure("0.30.0").path / "vllm"
    assert vllm_cache.cache_root(str(copy)) == vllm_cache.cache_root(str(entry))
    assert vllm_cache.cache_root(str(other)) != vllm_cache.cache_root(str(entry))
    assert vllm_cache.cache_root(str(entry)).startswith(str(tmp_path / "cache" / "vllm-cache") + "/")
    # a review's overlay of a release: the release's root
    assert tree.vllm_cache_root(copy.parent) == vllm_cache.cache_root(str(entry))


def test_a_tree_without_a_version_file_is_keyed_by_its_path(tmp_path, monkeypatch):
    monkeypatch.setenv("GDN_REVIEW_CACHE", str(tmp_path / "cache"))
    (tmp_path / "a" / "vllm").mkdir(parents=True)
    (tmp_path / "b" / "vllm").mkdir(parents=True)
    assert vllm_cache.cache_root(str(tmp_path / "a" / "vllm")) != vllm_cache.cache_root(str(tmp_path / "b" / "vllm"))
