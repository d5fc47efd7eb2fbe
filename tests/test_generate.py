"""The generator: golden files, determinism, literal-only record text, --check, safe writes."""

from __future__ import annotations

import ast
import subprocess

import pytest

from gdn_review import generate
from gdn_review.generate.literals import GENERATED, RUFF, LiteralError
from gdn_review.kb import RecordErrors, load_record, parse_record
from tests.conftest import MINIMAL, ROOT, dev_tool

GOLDEN = ROOT / "tests" / "golden"


def test_golden_modules_are_up_to_date():
    plan = generate.plan(GOLDEN / "kb", GOLDEN / "generated")
    assert not plan.stale and not plan.foreign, (
        f"golden files differ: {[str(p) for p in plan.stale]}; after an "
        "intended template change run "
        "scripts/regenerate-goldens and review the diff"
    )
    assert plan.unchanged == [GOLDEN / "generated" / "test_pr_1.py"]


def test_bundled_kb_modules_are_up_to_date():
    plan = generate.plan(ROOT / "kb", ROOT / "generated_tests")
    assert not plan.stale, f"run `gdn-review generate`: stale {[str(p) for p in plan.stale]}"


def test_rendering_is_deterministic():
    record = load_record(GOLDEN / "kb" / "1.yaml")
    first = generate.render_module(record, "kb/1.yaml")
    second = generate.render_module(load_record(GOLDEN / "kb" / "1.yaml"), "kb/1.yaml")
    assert first == second
    assert first.splitlines()[1] == generate.BANNER_MARK
    assert "DO NOT EDIT" in first.splitlines()[0] and "kb/1.yaml" in first.splitlines()[0]


HOSTILE = [
    '"""; import os; os.system("echo pwned")',
    "'''\nimport os\n'''",
    "back\\slash \\n \\x00 and {{ jinja }} {% if %} {# c #}",
    'quote " and \' mixed \\" end\\',
    "line one\nline two\r\n\ttab",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_record_text_is_only_a_string_literal(text):
    source = generate.render_module(_hostile_record(text), "kb/7.yaml\nimport os")
    tree = ast.parse(source)
    imports = sorted(
        alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    )
    assert imports == ["gdn_review.harness", "pytest"]
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "os" not in names
    constants = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert ast.literal_eval(constants["CLAIM_C1"]) == text
    assert ast.literal_eval(constants["TITLE"]) == text
    assert source.splitlines()[0].endswith("kb/7.yaml_import_os. DO NOT EDIT.")


def _hostile_record(text: str):
    record = parse_record(MINIMAL, "7.yaml")
    claim = record.claims[0].model_copy(update={"text": text})
    case = record.cases[0].model_copy(update={"text": text})
    pr = record.pr.model_copy(update={"title": text})
    return record.model_copy(update={"claims": [claim], "cases": [case], "pr": pr})


def test_generated_modules_pass_ruff_at_the_project_settings(tmp_path):
    """The KB's modules and the golden record's, generated fresh, and modules of hostile
    record text pass `ruff check` at the project's settings (pyproject.toml, 100 columns),
    as generated_tests/ must: the generator wraps long literals itself."""
    for kb in (ROOT / "kb", GOLDEN / "kb"):
        generate.apply(generate.plan(kb, tmp_path / kb.parent.name))
    long_text = "a claim's text far longer than any line " * 6 + "x" * 120
    for index, text in enumerate([*HOSTILE, long_text]):
        module = generate.render_module(_hostile_record(text), "kb/7.yaml")
        (tmp_path / f"test_hostile_{index}.py").write_text(module, encoding="utf-8")
    assert len(list(tmp_path.rglob("test_*.py"))) > len(HOSTILE) + 10
    config = ["--config", str(ROOT / "pyproject.toml")]
    done = subprocess.run(
        [dev_tool("ruff", "ruff"), "check", "--no-cache", *config, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr


def test_both_literal_styles_write_the_same_data():
    """One writer, two styles: what differs is the layout, never the value."""
    long_text = "words that need more than one line " * 4
    value = {"b": [1, None, True, -3], "a": {"z": "x'\"", "y": 2.5}, "long": long_text, "c": []}
    value["nested"] = [dict(value), list(range(30))]
    generated, ruff = GENERATED.literal(value), RUFF.assignment("VALUE", value)
    assert ast.literal_eval(generated) == value
    assert ast.literal_eval(GENERATED.literal(value["nested"], 90)) == value["nested"]
    namespace: dict = {}
    exec(ruff, namespace)
    assert namespace["VALUE"] == value
    assert generated.index("'a'") < generated.index("'b'")  # sorted keys, repr quotes
    assert ruff.index('"b"') < ruff.index('"a"')  # insertion order, double quotes
    assert 100 >= max(map(len, generated.splitlines())) > 88 >= max(map(len, ruff.splitlines()))
    for style in (GENERATED, RUFF):
        for bad in (object(), float("nan")):
            with pytest.raises(LiteralError):
                style.literal({"x": bad})


def test_plan_write_check_orphan_and_foreign(tmp_path, write_record):
    kb = write_record(MINIMAL)
    out = tmp_path / "out"
    plan = generate.plan(kb, out)
    assert list(plan.write) == [out / "test_pr_7.py"]
    generate.apply(plan)
    assert generate.plan(kb, out).stale == []

    # Edit the record: the module is stale, and nothing is written by planning.
    before = (out / "test_pr_7.py").read_text()
    (kb / "7.yaml").write_text(MINIMAL.replace("One ge per build.", "Still one ge."))
    assert generate.plan(kb, out).stale == [out / "test_pr_7.py"]
    assert (out / "test_pr_7.py").read_text() == before

    # A module whose record is gone is an orphan; a file without the banner is never touched.
    (out / "test_pr_99.py").write_text("# gdn-review: generated module\n")
    (out / "test_handwritten.py").write_text("def test_mine():\n    pass\n")
    plan = generate.plan(kb, out)
    assert plan.remove == [out / "test_pr_99.py"]
    generate.apply(plan)
    assert not (out / "test_pr_99.py").exists()
    assert (out / "test_handwritten.py").exists()

    (out / "test_pr_7.py").write_text("# written by hand\n")
    plan = generate.plan(kb, out)
    assert plan.foreign == [out / "test_pr_7.py"]
    with pytest.raises(generate.GenerateError, match="without the gdn-review banner"):
        generate.apply(plan)
    assert (out / "test_pr_7.py").read_text() == "# written by hand\n"


def test_template_error_writes_nothing(tmp_path, write_record):
    kb = write_record(MINIMAL)
    templates = tmp_path / "templates"
    (templates / "checks").mkdir(parents=True)
    (templates / "test_module.py.j2").write_text(
        "# banner\n# gdn-review: generated module\nx = (\n"
    )
    out = tmp_path / "out"
    with pytest.raises(generate.GenerateError, match="not valid Python"):
        generate.plan(kb, out, templates)
    # A module without the banner could never be replaced: the renderer refuses it.
    (templates / "test_module.py.j2").write_text("# banner\nx = 1\n")
    with pytest.raises(generate.GenerateError, match="must write '# gdn-review: generated module'"):
        generate.plan(kb, out, templates)
    assert not out.exists()


def test_unknown_check_kind_template_is_named(tmp_path, write_record):
    kb = write_record(MINIMAL)
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "test_module.py.j2").write_text(
        (ROOT / "templates" / "test_module.py.j2").read_text()
    )
    with pytest.raises(generate.GenerateError, match="checks/op_budget.py.j2"):
        generate.plan(kb, tmp_path / "out", templates)


def test_claim_ids_that_collide_as_names_are_refused():
    text = MINIMAL.replace("claims: [C1]", "claims: [C-1]").replace(
        "  - id: C1\n", "  - id: C-1\n", 1
    )
    text = text.replace(
        "cases:\n  - id: spec",
        "  - id: C_1\n    text: Same name.\n    check: {kind: op_budget, "
        "budget: {aten.ge: 1}, cases: [spec]}\ncases:\n  - id: spec",
    )
    with pytest.raises(RecordErrors) as failure:
        parse_record(text, "7.yaml")
    assert [str(e) for e in failure.value.errors] == [
        "7.yaml:20:9: claims[1].id: 'C_1' and 'C-1' both become the Python name 'C_1'; rename one"
    ]


def test_every_claim_and_risk_of_the_bundled_record_gets_a_test():
    record = load_record(ROOT / "kb" / "52078.yaml")
    model = generate.module_model(record)
    for claim in model.claims:
        assert claim.tests or claim.kind == "invariant", claim.id
    covered = {risk for claim in model.claims for risk in claim.risks}
    covered |= {risk for claim in model.claims for test in claim.tests for risk in test.risks}
    assert covered == {risk.id for risk in record.risks}
