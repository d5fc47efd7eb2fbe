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


# --fail-on: each word trips the same way in run/report/mutate, matrix and review, since every
# command keeps, with fail_conditions.tripped, the conditions it chose among its stage's findings.
COMMANDS = {"report": "REPORT", "matrix": "MATRIX", "history": "HISTORY", "review": "REVIEW"}


def test_fail_on_help_says_each_word_as_the_vocabulary_does():
    from gdn_review.common import fail_conditions

    for command, stage in COMMANDS.items():
        # click may wrap a line after a hyphen ("gdn-" / "review's"): compared without spaces.
        shown = "".join(run(command, "--help").output.split())
        for word in getattr(fail_conditions, stage):
            said = "".join(f"{word} ({fail_conditions.CONDITIONS[word]})".split())
            assert said in shown, (command, word)


def _claims_found(verdict: str) -> tuple[list, list]:
    """The findings of one claim with ``verdict``: as a report has it, and as a matrix has it."""
    from gdn_review.matrix import matrix_report
    from gdn_review.report import verdicts

    data = {"key": 7, "claims": [{"id": "C1", "verdict": verdict, "reason": "why"}], "risks": []}
    matrix = {**data, "matrix": {"rows": [], "drift": {"unexplained": []}}}
    return verdicts.findings([data]), matrix_report.findings([matrix])


def test_claim_words_trip_the_same_in_report_and_matrix():
    from gdn_review.common.fail_conditions import CONDITIONS, tripped
    from gdn_review.common.vocabulary import Verdict

    CHECK_ERROR, COULD_NOT_RUN, NOT_TIED = (
        Verdict.CHECK_ERROR,
        Verdict.COULD_NOT_RUN,
        Verdict.NOT_TIED,
    )

    expected = {
        "fails": ["fails: PR #7 claim C1"],
        "unverified": ["unverified: PR #7 claim C1: why"],
        NOT_TIED: [f"unverified: PR #7 claim C1 {NOT_TIED}"],
        "pending": ["pending: PR #7 claim C1: why"],
        # No verdict: the one condition whose findings alone exit 3.
        COULD_NOT_RUN: [f"error: PR #7 claim C1 {COULD_NOT_RUN}: why"],
        CHECK_ERROR: [f"error: PR #7 claim C1 {CHECK_ERROR}: why"],
        "holds": [],
        "known deviation": [],
        "not applicable": [],
    }
    for verdict, lines in expected.items():
        in_report, in_matrix = _claims_found(verdict)
        assert in_report == in_matrix, verdict
        assert tripped(in_report, set(CONDITIONS)) == lines, verdict
        word = lines[0].split(":")[0] if lines else None
        assert tripped(in_report, set(CONDITIONS) - {word}) == [], verdict


def test_survived_and_drift_trip_the_same_in_every_command_that_has_them():
    from gdn_review.common.fail_conditions import tripped
    from gdn_review.matrix import matrix_report
    from gdn_review.report import verdicts
    from gdn_review.review import render

    for status in ("survived", "not reached", "killed", "timeout", "error", "equivalent"):
        mutant = {"id": "m1", "status": status}
        report = {"key": 7, "claims": [], "risks": [], "mutation": {"survivors": [mutant]}}
        review = {"records": [], "mutants": [mutant]}
        trips = status in ("survived", "not reached")
        for found in (verdicts.findings([report]), render.findings(review)):
            assert bool(tripped(found, {"survived"})) == trips, status
            assert tripped(found, {"fails", "drift", "breaks", "unverified"}) == []
    row = {"case": "spec", "fields": ["num_prefills"], "from": "0.29.0", "to": "0.30.0"}
    contract = {"key": "update_block_table", "claims": [], "risks": []}
    drift = {"rows": [], "drift": {"unexplained": [row]}}
    in_matrix = matrix_report.findings([{**contract, "matrix": drift}])
    in_review = render.findings({"records": [{**contract, "unexplained": [row]}], "mutants": []})
    for found in (in_matrix, in_review):
        (line,) = tripped(found, {"drift"})
        assert line.startswith("drift: contract update_block_table ") and "num_prefills" in line
        assert tripped(found, {"fails", "survived", "breaks"}) == []
    history = {"unexplained": [{"record": None, "from": "0.29.0", "to": "0.30.0", "fields": ["x"]}]}
    assert tripped(matrix_report.findings(history=history), {"drift"}) == [
        "drift: history: 0.29.0 → 0.30.0: field x unattributed"
    ]


def _shard(tmp_path, status: str):
    from gdn_review.review.review_files import REVIEW_FORMAT

    mutant = {"id": "auto.gt_to_ge.n.7c01d2", "status": status, "line": 3, "diff": "-a\n+b\n"}
    data = {
        "format": REVIEW_FORMAT,
        **{"name": "pr-1", "diff_sha256": "0" * 64, "onto": "0.33.0", "lands_in": "0.34.0"},
        **{"source": "vLLM 0.33.0", "shard": None, "run": {}, "mutants_left_out": 0},
        **{"files": [], "impact": [], "carried": [], "records": [], "mutants": [mutant]},
    }
    path = tmp_path / f"{status.replace(' ', '-')}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_a_mutant_not_reached_trips_survived_in_report_and_review_merge(tmp_path):
    golden = ROOT / "tests" / "golden"
    evidence = str(golden / "evidence" / "mutation.json")
    report = ["report", "--kb", str(golden / "kb"), "--evidence", evidence]
    done = run(*report, "--out", str(tmp_path / "r"), "--fail-on", "survived")
    assert done.exit_code == 1
    assert "fail-on: survived: PR #1 mutant auto.gt_to_ge.n.7c01d2 (not reached)" in done.output
    merge = ["review-merge", "--out", str(tmp_path / "m"), "--fail-on", "survived"]
    done = run(*merge, _shard(tmp_path, "not reached"))
    assert done.exit_code == 1
    assert "fail-on: survived: mutant auto.gt_to_ge.n.7c01d2 (not reached)" in done.output
    assert run(*merge, _shard(tmp_path, "killed")).exit_code == 0
