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


def test_a_new_root_of_a_carried_release_gets_its_model_info_and_vllms_own_stays(
    tmp_path, monkeypatch
):
    """The project's model_infos.json seeds an empty root (no inspection subprocess on a fresh
    machine); a file vLLM wrote is never replaced, and a seed name that is no plain file name is
    not written."""
    import json

    monkeypatch.setenv("GDN_REVIEW_CACHE", str(tmp_path / "cache"))
    package = _package(tmp_path / "releases" / "0.29.0" / "vllm", "0.29.0")
    key = vllm_cache.cache_root(str(package)).rsplit("/", 1)[1]
    seeds = tmp_path / "model_infos.json"
    info = {"hash": "abc", "modelinfo": {"architecture": "Qwen3NextForCausalLM"}}
    files = {"m.json": info, "../escape.json": info, "other.json": info}
    seeds.write_text(json.dumps({key: {"release": "0.29.0", "files": files}}), encoding="utf-8")
    monkeypatch.setattr(vllm_cache, "SEEDS", seeds)
    root = vllm_cache.cache_root(str(package))
    assert sorted(p.name for p in vllm_cache.model_info(str(package))) == ["m.json", "other.json"]
    assert json.loads(
        (tmp_path / "cache" / "vllm-cache" / key / "modelinfos" / "m.json").read_text()
    )
    assert not (tmp_path / "cache" / "vllm-cache" / key / "escape.json").exists()
    # vLLM's own file (here: written after the seed) is what a later call finds.
    (tmp_path / "cache" / "vllm-cache" / key / "modelinfos" / "m.json").write_text(
        json.dumps({"hash": "vllm", "modelinfo": {}}), encoding="utf-8"
    )
    assert vllm_cache.cache_root(str(package)) == root
    written = json.loads(
        (tmp_path / "cache" / "vllm-cache" / key / "modelinfos" / "m.json").read_text()
    )
    assert written["hash"] == "vllm"


def test_the_carried_model_info_is_of_the_releases_the_first_command_runs():
    import json

    carried = json.loads(vllm_cache.SEEDS.read_text(encoding="utf-8"))
    releases = {entry["release"] for entry in carried.values()}
    assert {"0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"} <= releases
    for entry in carried.values():
        for data in entry["files"].values():
            assert isinstance(data["hash"], str) and isinstance(data["modelinfo"], dict)
