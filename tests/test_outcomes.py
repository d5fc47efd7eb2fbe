"""An error is never a verdict: each way a check can end, injected once into a real run.

One pytest process (as ``gdn-review run`` starts it, with the evidence plugin) runs
the real generated module of the open PR #40738 on the installed vLLM, copied once per
kind into a folder whose conftest.py patches the real harness or vLLM for that
folder's tests only:

- ``config``: the harness's ``VllmConfig`` raises, as vLLM 0.34.0's CPU platform does on
  x86 without triton-cpu: **could not run**;
- ``check``: a harness helper the check calls raises ``KeyError`` (the #53929 trial's
  ``expect: {returned: 4}``), on C1, an improvement claim that is pending on this
  release: **error in the check**, not pending;
- ``init``: vLLM's builder constructor raises ``ValueError`` (a mutant): **fails**;
- ``build``: vLLM's ``build()`` raises: **fails**;
- ``fixture``: a test of the record asks for a fixture that does not exist: **could not
  run**;
- ``export``: the module ``gdn-review export`` writes (without gdn-review), its
  ``VllmConfig`` raising: pytest's output says ``CouldNotRun: could not run: ...``.

Each folder's evidence then goes through ``gdn-review report`` (markdown and JSON) and
every place this package shows a verdict is read: the evidence's outcome, the claim's
verdict and row, the per-test row, the risk's coverage, the index, the summary line, the
next steps, the exit code.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import interrupts, release
from gdn_review.run import suite
from tests.conftest import ROOT

# One xdist worker runs the module: its module-scoped runs (about 20 s) are made once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("outcomes")]

RECORD = 40738
MODULE = ROOT / "generated_tests" / f"test_pr_{RECORD}.py"
INSTALLED = str(release.installed())  # the release the one pytest process runs on

# What each folder's conftest.py injects, in a module-scoped autouse fixture (the
# ``device`` fixture makes the module's builders once, before any function-scoped one):
# the builders made earlier in the process are dropped, so each folder builds its own.
CONFTEST = """\
import pytest

from gdn_review.harness import builders
from gdn_review.harness.environment import prepare_platform


def builder_class():
    prepare_platform()
    return builders.builder_class(None)


@pytest.fixture(autouse=True, scope="module")
def injected(request):
    builders.make_builder.cache_clear()
    builders.engine_config.cache_clear()  # a config made before the fault is not made again
    with pytest.MonkeyPatch.context() as patch:
{inject}
        yield
    builders.make_builder.cache_clear()
    builders.engine_config.cache_clear()
"""

INJECT = {
    "config": """\
        def refuse(settings):
            raise RuntimeError("vLLM on x86 CPUs requires Triton (triton-cpu).")

        patch.setattr(builders, "make_vllm_config", refuse)
""",
    "check": """\
        from gdn_review import harness

        def compare(measured, expected, record_format):
            return {"returned": measured["returned"]}

        patch.setattr(harness, "expect_differences", compare)
""",
    "init": """\
        def refuse(self, *args, **kwargs):
            raise ValueError("a planted mutant: the constructor refuses")

        patch.setattr(builder_class(), "__init__", refuse)
""",
    "build": """\
        def refuse(self, *args, **kwargs):
            raise IndexError("a planted mutant: build() indexes past the batch")

        patch.setattr(builder_class(), "build", refuse)
""",
    # A harness helper outside the checks' own code asserts (a slip of ours, not a measurement).
    "assert": """\
        from gdn_review.harness import case_build

        # compiled as case_build.py's own code: an assert on its line 1
        slip = "def slip(*args, **kwargs):\\n    assert False, \\"a helper's own assertion\\""
        found = {}
        exec(compile(slip, case_build.__file__, "exec"), found)
        patch.setattr(case_build, "snapshot", found["slip"])
""",
    # The module `gdn-review export` writes (no gdn-review in it): its own copy of the harness.
    "export": """\
        def refuse(settings):
            raise RuntimeError("vLLM on x86 CPUs requires Triton (triton-cpu).")

        patch.setattr(request.module, "make_vllm_config", refuse)
""",
}

# A test of the record that asks for a fixture nobody defines (a template's slip).
MISSING_FIXTURE = f"""\
import pytest

pytestmark = pytest.mark.record({RECORD})
DEVICES = ["cpu"]
CASES = {{}}


@pytest.mark.claim("C3")
@pytest.mark.case("spec_decodes_only")
def test_C3_equivalence(device, no_such_fixture):
    assert no_such_fixture
"""

# The tests each kind runs (pytest -k over the module's name and the test's).
SELECTED = (
    "cpu and ((kind_config and C2) or (kind_check and C1) or (kind_init and C3) "
    "or (kind_build and C2) or kind_fixture or (kind_export and C2) or (kind_assert and C2))"
)

# Words no report may use for a claim that measured nothing.
VERDICT_WORDS = ("**holds**", "**fails**", "**pending**")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One pytest process over every kind's folder; per kind its own evidence file (the tests
    of its folder) and ``gdn-review report``'s results over it, in markdown and JSON."""
    if not MODULE.is_file():
        pytest.fail(f"{MODULE} is missing: run `gdn-review generate`")
    root = tmp_path_factory.mktemp("outcomes")
    kb = _record_kb(tmp_path_factory.mktemp("outcomes-kb"))
    for kind, inject in INJECT.items():
        folder = root / f"kind_{kind}"
        folder.mkdir()
        if kind == "export":
            exported = CliRunner().invoke(
                main,
                ["export", "--kb", str(kb), "--record", str(RECORD)]
                + ["--vllm-release", INSTALLED, "--out", str(folder)],
            )
            assert exported.exit_code == 0, exported.output
        else:
            shutil.copy(MODULE, folder / f"test_pr_{RECORD}_kind_{kind}.py")
        (folder / "conftest.py").write_text(CONFTEST.format(inject=inject), encoding="utf-8")
    (root / "kind_fixture").mkdir()
    (root / "kind_fixture" / "test_kind_fixture.py").write_text(MISSING_FIXTURE, "utf-8")
    evidence = root / "evidence.json"
    args = suite.pytest_args(
        [str(root), "-k", SELECTED, "--import-mode=importlib"],
        evidence,
        ("--rootdir", str(root)),
    )
    done = interrupts.run_child(
        [sys.executable, "-m", "pytest", *args], cwd=root, capture_output=True, timeout=300
    )
    output = done.stdout.decode() + done.stderr.decode()
    assert evidence.is_file(), output
    everything = json.loads(evidence.read_text(encoding="utf-8"))
    results = {}
    for kind in (*INJECT.keys() - {"export"}, "fixture"):
        mine = [t for t in everything["tests"] if t["nodeid"].startswith(f"kind_{kind}/")]
        assert mine, (kind, output)
        path = root / f"{kind}.json"
        path.write_text(json.dumps({**everything, "tests": mine}), encoding="utf-8")
        results[kind] = _report(path, root / "reports" / kind, kb)
    return output, results


def _record_kb(folder: Path) -> Path:
    """``folder``/kb: the record's file and its stored snapshots, as in kb/. Export and report
    write from it what they write from kb/ (the same module, the same reports), without
    loading and checking the KB's other records (about 1 s of each of the eleven commands)."""
    kb = folder / "kb"
    (kb / "snapshots").mkdir(parents=True)
    shutil.copy(ROOT / "kb" / f"{RECORD}.yaml", kb)
    shutil.copytree(ROOT / "kb" / "snapshots" / str(RECORD), kb / "snapshots" / str(RECORD))
    return kb


def _report(evidence, out, kb) -> dict:
    """``gdn-review report`` (its default --fail-on) over one evidence file: exit code, output,
    the markdown report and index, and the JSON report."""

    def report(*extra):
        return CliRunner().invoke(
            main,
            ["report", "--kb", str(kb), "--record", str(RECORD)]
            + ["--evidence", str(evidence), "--out", str(out), *extra],
        )

    markdown = report()
    as_json = report("--format", "json")
    assert as_json.exit_code == markdown.exit_code, as_json.output
    return {
        "tests": json.loads(evidence.read_text(encoding="utf-8"))["tests"],
        "exit": markdown.exit_code,
        "output": markdown.output,
        "markdown": (out / f"{RECORD}.md").read_text(encoding="utf-8"),
        "index": (out / "index.md").read_text(encoding="utf-8"),
        "json": json.loads((out / f"{RECORD}.json").read_text(encoding="utf-8")),
    }


def _claim(result: dict, claim_id: str) -> dict:
    return next(c for c in result["json"]["claims"] if c["id"] == claim_id)


def _claim_row(result: dict, claim_id: str) -> str:
    return next(
        line for line in result["markdown"].splitlines() if line.startswith(f"| {claim_id} | ")
    )


def _summary(result: dict) -> str:
    return next(line for line in result["output"].splitlines() if line.startswith("PR #"))


def _index_row(result: dict) -> str:
    return next(line for line in result["index"].splitlines() if line.startswith("| #"))


def _check_not_measured(result: dict, claim_id: str, outcome: str, words: list[str]) -> dict:
    """Every place shows ``outcome`` for ``claim_id`` and none of holds, fails or pending."""
    tests = [t for t in result["tests"] if t["claim"] == claim_id and t["outcome"] != "deselected"]
    assert tests and {t["outcome"] for t in tests} == {outcome}, tests
    claim = _claim(result, claim_id)
    assert claim["verdict"] == outcome, claim
    assert all(word in claim["reason"] for word in words), claim["reason"]
    row = _claim_row(result, claim_id)
    assert f"**{outcome}**: " in row and not any(word in row for word in VERDICT_WORDS), row
    rows = _test_rows(result, claim_id)
    assert rows and all(f"| {outcome} |" in t for t in rows), result["markdown"]
    counts = result["json"]["verdict_counts"]
    assert counts[outcome] == 1 and not counts["fails"] and not counts["pending"], counts
    assert f"1 {outcome}" in _summary(result) and "holds" not in _summary(result)
    assert f"1 {outcome}" in _index_row(result), _index_row(result)
    assert "Fix the code, or record the deviation" not in result["markdown"]
    assert result["exit"] == 3, result["output"]
    assert f"fail-on: error: PR #{RECORD} claim {claim_id} {outcome}: " in result["output"]
    risks = result["json"]["risks"]
    assert all(r["coverage"] not in ("passing", "mutation-verified") for r in risks), risks
    return claim


def _test_rows(result: dict, claim_id: str) -> list[str]:
    """The rows of the claim's per-test table in the markdown report."""
    section = result["markdown"].split(f"### {claim_id}: ", 1)[1].split("\n### ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| spec_")]


def _step(result: dict, claim_id: str) -> str:
    return next(s for s in result["json"]["next_steps"] if s.startswith(f"Claim {claim_id}"))


def test_vllm_config_raising_could_not_run(runs):
    _, results = runs
    result = results["config"]
    claim = _check_not_measured(
        result,
        "C2",
        "could not run",
        ["2 of 4 tests could not run", "VllmConfig raised RuntimeError: vLLM on x86 CPUs"],
    )
    assert "(at conftest.py:" in claim["reason"] and "in refuse)" in claim["reason"]
    assert claim["vllm"] == INSTALLED and claim["devices"].startswith("cpu: could not run;")
    step = _step(result, "C2")
    assert step.startswith(f"Claim C2 could not run on vLLM {INSTALLED}: ")
    assert "fix the set-up" in step
    assert "report it" not in step


def test_an_error_in_a_check_of_a_pending_claim_is_no_verdict(runs):
    _, results = runs
    result = results["check"]
    claim = _check_not_measured(
        result,
        "C1",
        "error in the check",
        ["2 of 4 tests raised an error in the check", "KeyError: 'returned'"],
    )
    assert "pending" not in claim["reason"] and "as the PR says it should" not in claim["reason"]
    assert "gdn-review's own code raised" in claim["reason"]
    step = _step(result, "C1")
    assert step.startswith(f"Claim C1: error in the check on vLLM {INSTALLED}: ")
    assert "A fault in gdn-review, not in vLLM: report it with this message" in step
    assert "store its diff" not in result["markdown"]  # the pending claim's next step


def test_an_assertion_in_our_own_helper_is_an_error_in_the_check_not_a_failure(runs):
    """Only the checks' own code (harness/__init__.py, properties.py, pytest_checks.py,
    sync_proxy.py, the generated module) measures with an assertion (run/plugin.py)."""
    _, results = runs
    claim = _check_not_measured(
        results["assert"],
        "C2",
        "error in the check",
        ["AssertionError: a helper's own assertion", "gdn_review/harness/case_build.py"],
    )
    assert "gdn-review's own code raised" in claim["reason"]


def test_a_missing_fixture_could_not_run(runs):
    _, results = runs
    result = results["fixture"]
    claim = _claim(result, "C3")
    assert claim["verdict"] == "could not run", claim
    assert "no_such_fixture" in claim["reason"] or "FixtureLookupError" in claim["reason"]
    assert "**could not run**" in _claim_row(result, "C3")
    assert result["exit"] == 3 and "1 could not run" in _summary(result)


@pytest.mark.parametrize(
    ("kind", "claim_id", "raised"),
    [
        ("init", "C3", "GDNAttentionMetadataBuilder.__init__"),
        ("build", "C2", "GDNAttentionMetadataBuilder.build"),
    ],
)
def test_the_builder_raising_fails(runs, kind, claim_id, raised):
    _, results = runs
    result = results[kind]
    tests = [t for t in result["tests"] if t["claim"] == claim_id and t["outcome"] != "deselected"]
    assert tests and all(t["outcome"] == "failed" for t in tests), tests
    assert all(t["failure"] == f"raised by {raised}" for t in tests), tests
    claim = _claim(result, claim_id)
    assert claim["verdict"] == "fails", claim
    assert "**fails**" in _claim_row(result, claim_id)
    assert (
        "could not run" not in result["markdown"] and "error in the check" not in result["markdown"]
    )
    assert "1 fails" in _summary(result) and result["exit"] == 1, result["output"]
    assert "Fix the code, or record the deviation" in _step(result, claim_id)


@pytest.mark.parametrize(
    ("kind", "raised_as"),
    [
        ("config", "gdn_review.harness.origin.CouldNotRun"),
        ("export", f"kind_export.test_gdn_pr_{RECORD}.CouldNotRun"),
    ],
)
def test_pytest_output_names_could_not_run(runs, kind, raised_as):
    """pytest's own output (what CI shows) says what happened, in gdn-review's words: in a
    generated module, and in an exported one (no gdn-review plugin, its own harness copy)."""
    output, _ = runs
    # Each test's setup error ends with the exception pytest raised, then where it was raised.
    raised = re.findall(r"\nE +(\S+): (.*)\n\n(\S+):\d+: CouldNotRun\n", output)
    mine = [words for name, words, _ in raised if name == raised_as]
    assert len(mine) == 2, output  # C2's two cases on the CPU
    for words in mine:
        assert words.startswith("could not run: VllmConfig raised RuntimeError: vLLM on x86")


def test_an_error_in_the_check_says_where_it_came_from(runs):
    _, results = runs
    reason = next(t["reason"] for t in results["check"]["tests"] if t["claim"] == "C1")
    assert reason.startswith("error in the check (gdn-review's own code raised KeyError")
    assert "conftest.py:" in reason and "in compare" in reason


def test_the_test_module_is_the_generated_one():
    """The injected runs check the real generated module, unchanged (not a stand-in)."""
    text = MODULE.read_text(encoding="utf-8")
    assert "harness.build_case(device, CASES[case_id]" in text
    assert "harness.expect_differences(measured, expected, RECORD_FORMAT)" in text
