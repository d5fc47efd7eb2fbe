"""What differs between releases has one owner (harness/adaptations.py), and it is never silent.

A field a case sets that a release renamed makes the case *could not run*, naming the
field, rather than run in another configuration; the 0.34.0 platform adaptation is
named in the evidence, and switched off it leaves 0.34.0's own refusal.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from gdn_review.common import interrupts, release_trees
from tests.conftest import ROOT

# #56960 (head release 0.32.0): its first_chunk_checkpoint case puts prefix caching in align
# mode, CacheConfig(mamba_cache_mode=...); its other cases leave the cache config as it is.
MODULE = "generated_tests/test_pr_56960.py"


def _run(tree, evidence, *args, extra_env=None):
    env = release_trees.environment(tree)
    env.update(extra_env or {})
    return interrupts.run_child(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--gdn-evidence",
            str(evidence),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_a_config_field_a_release_renamed_makes_the_case_say_so(tmp_path):
    """0.32.0 with CacheConfig.mamba_cache_mode renamed (a copy of the release): the cases
    that set it could not run, naming the field; none ran in "none" mode instead."""
    original = release_trees.tree("0.32.0")
    copy = tmp_path / "vllm-0.32.0-renamed"
    shutil.copytree(original, copy)
    cache = copy / "vllm" / "config" / "cache.py"
    text = cache.read_text(encoding="utf-8")
    declaration = '    mamba_cache_mode: MambaCacheMode = "none"\n'
    assert declaration in text, "0.32.0's CacheConfig no longer declares the field as expected"
    cache.write_text(
        text.replace(declaration, '    mamba_cache_policy: MambaCacheMode = "none"\n'),
        encoding="utf-8",
    )
    evidence = tmp_path / "evidence.json"
    done = _run(copy, evidence, MODULE)
    assert done.returncode != 0, done.stdout[-2000:]
    tests = json.loads(evidence.read_text())["tests"]
    prefix = [t for t in tests if "first_chunk_checkpoint" in t["nodeid"]]
    ran = [t for t in prefix if t["outcome"] not in ("skipped", "deselected")]
    assert ran, done.stdout[-2000:]
    for test in ran:
        assert test["outcome"] == "could not run", test
        assert "CacheConfig has no mamba_cache_mode, which the case sets" in test["reason"], test
    # Nothing on the copy passed in another configuration (vLLM itself reads the renamed
    # field elsewhere too: the other cases could not run either, each saying why).
    assert not [t for t in tests if t["outcome"] in ("passed", "failed", "xfailed")]


@pytest.mark.slow
def test_the_0_34_platform_adaptation_is_named_and_can_be_switched_off(tmp_path):
    """0.34.0's CPU platform refuses x86 without triton-cpu: adapted, its checks run and the
    evidence names the adaptation; switched off, they read could not run with its message."""
    tree = release_trees.tree("0.34.0")
    on, off = tmp_path / "on.json", tmp_path / "off.json"
    selection = ("generated_tests/test_pr_52078.py", "-k", "C1 and pure_spec_decode")
    done = _run(tree, on, *selection)
    assert done.returncode == 0, done.stdout[-2000:]
    data = json.loads(on.read_text())
    assert [a["name"] for a in data["environment"]["adaptations"]] == ["x86_cpu_without_triton"]
    assert {t["outcome"] for t in data["tests"]} >= {"passed"}
    # The report says how the release was set up, and why that is sound.
    from click.testing import CliRunner

    from gdn_review.cli import main

    reports = tmp_path / "reports"
    result = CliRunner().invoke(
        main,
        ["report", "--record", "52078", "--evidence", str(on), "--out", str(reports)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    text = (reports / "52078.md").read_text()
    assert "adapted (x86_cpu_without_triton, vLLM 0.34.0 on)" in text
    assert "the metadata builder launches no Triton kernel on CPU" in text
    done = _run(tree, off, *selection, extra_env={"GDN_REVIEW_NO_RELEASE_ADAPTATIONS": "1"})
    assert done.returncode != 0
    data = json.loads(off.read_text())
    assert data["environment"]["adaptations"] == []
    ran = [t for t in data["tests"] if t["outcome"] not in ("skipped", "deselected")]
    assert ran and all(t["outcome"] == "could not run" for t in ran), ran
    assert all("requires Triton (triton-cpu)" in t["reason"] for t in ran)
    assert all("vllm/platforms/cpu.py" in t["reason"] for t in ran)


def test_every_adaptation_names_its_releases_and_reason():
    from gdn_review.harness import adaptations

    for adaptation in adaptations.ADAPTATIONS:
        assert adaptation.releases and adaptation.reason and adaptation.what


IN_FORCE = (
    "import json; from gdn_review.harness import adaptations; "
    "print(json.dumps([(a['name'], a['what']) for a in adaptations.in_force()]))"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "release, names",
    [
        # CacheConfig without hash_block_size / cache_hit_alignment_tokens (0.32.0 added them).
        ("0.31.0", ["prefix_caching_unresolved"]),
        ("0.32.0", []),
        # CommonAttentionMetadata without seq_lens_cpu_upper_bound (0.20.0 added it).
        ("0.19.0", ["prefix_caching_unresolved", "metadata_without_row_facts"]),
    ],
)
def test_an_api_adaptation_is_in_force_where_the_release_lacks_the_place(release, names):
    """Read from the release's own classes, not from a version table: the evidence of a run on
    that release names each (issue 53, item 2)."""
    done = interrupts.run_child(
        [sys.executable, "-c", IN_FORCE],
        cwd=ROOT,
        env=release_trees.environment(release_trees.tree(release)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert [name for name, _ in found] == names
    if release == "0.19.0":  # it has is_prefilling: only the host lengths are not passed
        assert found[1][1].startswith("the rows' seq_lens_cpu_upper_bound not passed")


def test_a_case_asking_for_a_resolver_the_release_lacks_could_not_run(monkeypatch):
    from gdn_review.harness import adaptations

    monkeypatch.setattr(adaptations, "RESOLVER_MODULES", ("vllm.no_such_module", "json"))
    with pytest.raises(adaptations.NotInRelease, match="_resolve_gdn_prefill_backend"):
        adaptations.prefill_backend_resolvers()
    # Making the builder, the server's configuration around it is set-up: that case could not
    # run (it raised unmarked before, read as an error in gdn-review's own check).
    from gdn_review.harness import builders
    from gdn_review.harness.origin import CouldNotRun

    settings = builders.BuilderSettings(device="cpu", resolved_prefill_backend="triton")
    with pytest.raises(CouldNotRun, match="_resolve_gdn_prefill_backend"):
        builders.new_builder(settings)


# A row's own prefilling on a release whose CommonAttentionMetadata has no is_prefilling (0.18.0):
# metadata_without_row_facts leaves out only the facts a case does not state.
ROW_FACTS = """
import json
import pytest
from gdn_review.harness.environment import prepare_platform
prepare_platform()
from gdn_review.harness.case_build import build_case
rows = [{"seq_len": 10, "query_len": 1}, {"seq_len": 20, "query_len": 4}]
seen = {}
for name, stated in (("derived", rows), ("stated", [{**rows[0], "prefilling": False}, rows[1]])):
    try:
        seen[name] = sorted(build_case("cpu", {"rows": stated}, count_ops=False).metadata)[:1]
    except pytest.skip.Exception as skip:
        seen[name] = "skipped: " + str(skip.msg)
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_a_row_fact_the_case_states_is_not_applicable_where_the_release_has_no_field():
    done = interrupts.run_child(
        [sys.executable, "-c", ROW_FACTS],
        env=release_trees.environment(release_trees.tree("0.18.0")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert isinstance(seen["derived"], list), seen  # built: the fact is left out
    assert seen["stated"] == (
        "skipped: not applicable: vLLM 0.18.0's CommonAttentionMetadata has no "
        "is_prefilling (a row's prefilling)"
    ), seen
