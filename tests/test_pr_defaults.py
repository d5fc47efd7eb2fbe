"""Derived fields of pr: url defaults to the repository's pull-request page; merged_at is
optional."""

from __future__ import annotations

from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.kb import load_kb, parse_record, record_schema
from gdn_review.report import report
from gdn_review.run import evidence_file
from tests.conftest import MINIMAL, ROOT

GOLDEN = ROOT / "tests" / "golden"
WITHOUT = MINIMAL.replace('  merged_at: "2026-01-02 03:04"\n', "").replace(
    "  url: https://example.invalid/pr/7\n", ""
)


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_url_defaults_to_the_pull_request_page_and_merged_at_to_unknown():
    assert "url:" not in WITHOUT and "merged_at:" not in WITHOUT
    pr = parse_record(WITHOUT, "7.yaml").pr
    assert pr.url == "https://github.com/vllm-project/vllm/pull/7"
    assert pr.merged_at is None


def test_a_given_url_is_kept():
    assert parse_record(MINIMAL, "7.yaml").pr.url == "https://example.invalid/pr/7"


def test_schema_says_url_and_merged_at_are_optional():
    schema = record_schema()
    pr = schema["$defs"]["PullRequest"]
    assert sorted(pr["required"]) == ["number", "repo", "title"]
    assert "https://github.com/<repo>/pull/<number>" in pr["properties"]["url"]["description"]
    assert pr["properties"]["merged_at"]["default"] is None


def test_validate_and_generate_without_url_and_merged_at(write_record, tmp_path):
    kb = write_record(WITHOUT)
    assert run("validate", "--kb", str(kb)).exit_code == 0
    out = tmp_path / "generated"
    result = run("generate", "--kb", str(kb), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "test_pr_7.py").is_file()


def golden_report_without_url_and_merged_at(tmp_path) -> str:
    text = (GOLDEN / "kb" / "1.yaml").read_text(encoding="utf-8")
    text = text.replace('  merged_at: "2026-01-01"\n', "").replace(
        "  url: https://example.invalid/pull/1\n", ""
    )
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "1.yaml").write_text(text, encoding="utf-8")
    evidence = evidence_file.load([GOLDEN / "evidence" / "run.json"])
    written, _ = report.write_reports(load_kb(kb), evidence, tmp_path / "reports")
    return (tmp_path / "reports" / "1.md").read_text(encoding="utf-8")


def test_report_without_url_and_merged_at(tmp_path):
    assert "(https://github.com/example/repo/pull/1)" in golden_report_without_url_and_merged_at(
        tmp_path
    )


def test_report_says_merged_unknown(tmp_path):
    assert " · merged unknown · " in golden_report_without_url_and_merged_at(tmp_path)
