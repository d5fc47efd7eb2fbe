"""The click layer: exit codes 0 (ok), 1 (check failed), 2 (bad input or usage)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gdn_review.cli import main
from tests.conftest import MINIMAL, ROOT


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_validate_bundled_kb_ok():
    """Every bundled record validates; each line counts what its record states (not a fixed count:
    records grow)."""
    from gdn_review.kb import load_kb

    result = run("validate", "--kb", str(ROOT / "kb"))
    assert result.exit_code == 0, result.output
    for path, record in load_kb(ROOT / "kb").items():
        claims, cases, risks = len(record.claims), len(record.cases), len(record.risks)
        counts = f"{claims} claims, {cases} cases, {risks} risks"
        assert f"ok     {path}  {record.label}: {counts}" in result.output, result.output


def test_validate_counts_what_a_record_states(write_record):
    result = run("validate", "--kb", str(write_record(MINIMAL)))
    assert result.exit_code == 0, result.output
    assert "PR #7: 1 claims, 1 cases, 1 risks" in result.output


def test_validate_syntax_error_names_file_and_line(write_record):
    kb = write_record(MINIMAL.replace("  title: A small PR\n", "  title: [oops\n"), name="7.yaml")
    result = run("validate", "--kb", str(kb))
    assert result.exit_code == 2
    assert "7.yaml:6:12: YAML syntax error" in result.output


def test_validate_unknown_key_named(write_record):
    kb = write_record(MINIMAL.replace("  - id: C1\n", "  - id: C1\n    verdict: holds\n"))
    result = run("validate", "--kb", str(kb))
    assert result.exit_code == 2
    assert "claims[0].verdict: unknown key 'verdict'" in result.output
    assert "1 error(s) in 1 file(s)" in result.output


def test_validate_empty_kb_is_bad_input(tmp_path):
    (tmp_path / "kb").mkdir()
    result = run("validate", "--kb", str(tmp_path / "kb"))
    assert result.exit_code == 2 and "no records" in result.output


def test_generate_then_check_then_edit(tmp_path, write_record):
    kb = write_record(MINIMAL)
    out = tmp_path / "generated"
    assert run("generate", "--kb", str(kb), "--out", str(out)).exit_code == 0
    result = run("generate", "--check", "--kb", str(kb), "--out", str(out))
    assert result.exit_code == 0 and "up to date: 1 module(s)" in result.output
    (kb / "7.yaml").write_text(MINIMAL.replace("One ge per build.", "Changed."))
    result = run("generate", "--check", "--kb", str(kb), "--out", str(out))
    assert result.exit_code == 1
    assert f"stale  {out / 'test_pr_7.py'}: run `gdn-review generate`" in result.output
    (kb / "7.yaml").unlink()
    (kb / "8.yaml").write_text(MINIMAL.replace("number: 7", "number: 8"))
    result = run("generate", "--check", "--kb", str(kb), "--out", str(out))
    assert result.exit_code == 1
    assert (
        "missing" in result.output and "orphan" in result.output and "test_pr_7.py" in result.output
    )


def test_generate_bad_record_exits_2(write_record, tmp_path):
    kb = write_record(MINIMAL.replace("kind: op_budget", "kind: nope"))
    result = run("generate", "--kb", str(kb), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "unknown check kind 'nope'" in result.output
    assert not (tmp_path / "out").exists()


def test_usage_error_exits_2():
    assert run("generate", "--no-such-option").exit_code == 2
    assert run("no-such-command").exit_code == 2


def test_schema_is_json_schema_of_a_record():
    result = run("schema")
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["title"] == "gdn-review record"
    assert {"target", "claims"} <= set(schema["required"])
    assert {"pr", "contract"} <= set(
        schema["properties"]
    )  # one or the other (the loader says which is missing)


def test_help_shows_examples():
    for command in ([], ["validate"], ["generate"], ["schema"]):
        result = run(*command, "--help")
        assert result.exit_code == 0 and "Example" in result.output, command
