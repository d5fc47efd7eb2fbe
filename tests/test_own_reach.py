"""The PR's own lines reached: which cases execute each line a record's PR added or changed,
the case that came closest to a line none reaches, and a record whose cases reach none of its
own lines reported as "not tied to the change" (mutation/own_reach.py, mutation/reach.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import fail_conditions
from gdn_review.kb import load_record
from gdn_review.mutation import own_reach
from gdn_review.report import report, verdicts
from gdn_review.run import evidence_file
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
# The #52078 hunk that only a batch with non-speculative rows beside speculative ones runs.
NON_SPEC_LINE = "non_spec_state_indices_tensor = block_table_tensor["


def _own(lines: list[tuple[int, str]], body: range) -> own_reach.OwnLines:
    return own_reach.OwnLines(
        "1",
        "0.33.0",
        "vllm/x.py",
        [own_reach.OwnLine(line, "B.build", f"line_{line}()", (line,)) for line, _ in lines],
        bodies={"B.build": frozenset(body)},
    )


def test_judge_names_the_cases_of_each_line_and_the_closest_to_a_missed_one():
    own = _own([(12, ""), (20, "")], range(10, 30))
    cases = {"decode": {10, 11, 12, 14}, "mixed": {10, 11, 12, 17, 18}, "other": {40}}
    part = own_reach.judge(own, cases)
    assert part["state"] == "partly reached"
    assert [(row["line"], row["cases"]) for row in part["lines"]] == [
        (12, ["decode", "mixed"]),
        (20, []),
    ]
    # closest: the case that executes the nearest line before it in the same function
    (missed,) = part["unreached"]
    assert missed["closest"] == "mixed" and "line 18, the nearest line before it" in missed["why"]
    shown = "\n".join(own_reach.report_lines("PR #1", part))
    assert "line 20 (B.build) `line_20()`: no case reaches it; closest: mixed" in shown


def test_judge_a_record_whose_cases_reach_none_of_its_lines_is_not_tied():
    part = own_reach.judge(_own([(20, "")], range(10, 30)), {"decode": {10, 11}})
    assert part["state"] == "not tied"
    assert own_reach.not_tied({"1": part}) == ["1"]
    assert "claims not tied to the change" in own_reach.report_lines("PR #1", part)[0]
    # nothing stated: a contract, or own_hunks: [] (kb/52839.yaml): never flagged
    for key in ("runner_inputs", "52839"):
        record = load_record(ROOT / "kb" / f"{key}.yaml")
        stated = own_reach.judge(own_reach.own_lines(record, fetch=False), {})
        assert stated["state"] == "no own lines stated", stated
        assert not own_reach.not_tied({key: stated})


@pytest.fixture(scope="module")
def traced_52078():
    """kb/52078.yaml's own lines on the installed release and two of its cases built once under
    the line trace, on the real builder."""
    from gdn_review.mutation import reach

    record = load_record(ROOT / "kb" / "52078.yaml")
    own = own_reach.own_lines(record, fetch=False)
    if own.state is not None:
        pytest.skip(f"#52078's own lines: {own.reason}")
    inputs = record.case_inputs()
    chosen = {c: inputs[c] for c in ("pure_spec_decode", "some_spec_rows_zero_drafts")}
    return own, reach.trace_cases(chosen, own.target)


def test_a_case_that_reaches_the_prs_line_and_one_that_misses_it(traced_52078):
    own, cases = traced_52078
    part = own_reach.judge(own, cases, how="validate")
    assert part["state"] == "reached"
    row = next(r for r in part["lines"] if r["code"] == NON_SPEC_LINE)
    # a batch with a non-speculative row beside spec decodes runs it; pure spec decodes do not
    assert row["cases"] == ["some_spec_rows_zero_drafts"]
    alone = own_reach.judge(own, {"pure_spec_decode": cases["pure_spec_decode"]})
    assert alone["state"] == "partly reached"
    missed = next(r for r in alone["unreached"] if r["code"] == NON_SPEC_LINE)
    assert missed["closest"] == "pure_spec_decode"
    assert "the nearest line before it in GDNAttentionMetadataBuilder.build" in missed["why"]
    # a record whose own lines were that hunk alone: its claims are not tied to the change
    hunk = dataclasses.replace(own, lines=[o for o in own.lines if o.line >= row["line"]])
    assert own_reach.judge(hunk, {"pure_spec_decode": cases["pure_spec_decode"]})["state"] == (
        "not tied"
    )


def test_validate_reach_names_the_cases_of_each_own_line():
    record = load_record(ROOT / "kb" / "52078.yaml")
    if own_reach.own_lines(record, fetch=False).state is not None:
        pytest.skip("vLLM 0.28.0 and 0.29.0 are not in the release cache")
    result = CliRunner().invoke(main, ["validate", "--reach", "--record", "52078", "--offline"])
    assert result.exit_code == 0, result.output
    assert "reach: PR #52078 on vLLM" in result.output
    assert "own lines executed by the record's cases" in result.output
    line = next(x for x in result.output.splitlines() if NON_SPEC_LINE in x)
    assert line.endswith(": largest_batch, some_spec_rows_zero_drafts, spec_decode_and_prefill")


def test_the_report_says_claims_not_tied_to_the_change(tmp_path):
    data = json.loads((GOLDEN / "evidence" / "run.json").read_text(encoding="utf-8"))
    data["reach"] = {"1": own_reach.judge(_own([(20, "")], range(10, 30)), {"decode": {10, 11}})}
    path = tmp_path / "evidence.json"
    evidence_file.write(path, data)
    made = report.report_data(load_record(GOLDEN / "kb" / "1.yaml"), evidence_file.load([path]))
    claims = {c["id"]: c["verdict"] for c in made["claims"]}
    # what held is not tied to the change; a failure stays a failure, a deviation a deviation
    assert claims == {
        "C1": "not tied to the change",
        "C2.equal-rows": "fails",
        "C3": "known deviation",
        "C4": "not tied to the change",
    }
    assert made["verdict_counts"]["not tied to the change"] == 2
    assert any(
        s.startswith("Add a case that executes line 20 of B.build") for s in made["next_steps"]
    )
    markdown = report.render_markdown(made)
    assert "2 not tied to the change" in markdown
    assert (
        "**not tied to the change**: 1 test passes (1 CUDA test not run: needs CUDA), but no case "
        "executes any of the PR's 1 own line in vllm/x.py (first: line 20 of B.build; closest: "
        "decode" in markdown
    )
    found = verdicts.findings([made])
    assert any("C1 not tied" in t for t in fail_conditions.tripped(found, {"unverified"}))
    assert not any("not tied" in t for t in fail_conditions.tripped(found, {"fails"}))
