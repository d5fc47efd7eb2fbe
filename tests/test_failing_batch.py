"""The batch an invariant failed on, everywhere a failure is shown.

The plugin keeps a failed test's last recorded batch (``failing_batch`` in the
evidence); ``report.failing_batch`` turns it into rows, the configuration and a
YAML case that a record accepts. End to end on the installed vLLM: an invariant
whose known deviation is left out fails on a batch Hypothesis shrank; the run's
report, the review's markdown and the matrix show its rows; the YAML case pasted
into the record loads, and its test fails the same way on that case.
"""

from __future__ import annotations

import json
import re
import types

import pytest
import yaml

from gdn_review.kb.load import parse_record
from gdn_review.report import failing_batch
from gdn_review.run import plugin
from tests.conftest import ROOT

RANDOM_BATCH = {
    "speculative_tokens": 1,
    "drafts": "given",
    "rows": [
        {"seq_len": 2, "query_len": 1, "drafted": 0, "accepted": 1},
        {"seq_len": 18, "query_len": 16},
    ],
    "padded_rows": 2,
    "max_num_seqs": 8,
}


def _report(properties, failed=True):
    # As the plugin's makereport hook leaves a failed call: origin() said a measured failure.
    measured = {"gdn_outcome": "failed", "gdn_failure": "measured", "gdn_reason": ""}
    return types.SimpleNamespace(
        **(measured if failed else {}),
        nodeid="m.py::test_C1_invariant[cpu-p]",
        user_properties=properties,
        when="call",
        duration=0.1,
        skipped=False,
        failed=failed,
        passed=not failed,
        outcome="failed" if failed else "passed",
        longrepr="E   AssertionError: p fails" if failed else None,
    )


@pytest.mark.parametrize("failed", [True, False])
def test_the_plugin_keeps_the_last_failed_batch_of_a_failed_test_only(failed):
    """harness.check_invariant records each batch that fails (Hypothesis replays the shrunk
    one last): the last is the failing batch. A test that passed keeps none."""
    collector = plugin.EvidenceCollector(config=None)
    entry = {"nodeid": "m.py::test_C1_invariant[cpu-p]", "outcome": "not run"}
    collector.tests[entry["nodeid"]] = entry
    first = {**RANDOM_BATCH, "padded_rows": 0}
    collector.pytest_runtest_logreport(
        _report(
            [
                ("measured", {"property": "p"}),
                ("batch", first),
                ("failed_batch", first),
                ("batch", RANDOM_BATCH),
                ("failed_batch", RANDOM_BATCH),
                ("batch", {**RANDOM_BATCH, "id": "a later example that passed"}),
            ],
            failed,
        )
    )
    if failed:
        assert entry["outcome"] == "failed"
        assert entry["failing_batch"] == RANDOM_BATCH
    else:
        assert entry["outcome"] == "passed" and "failing_batch" not in entry


def test_only_a_failed_test_has_a_failing_batch_to_show():
    """A test that could not run, or whose check raised, measured no batch: whatever batch it
    recorded before it raised is not the one the builder failed on."""
    tests = [
        {
            "outcome": outcome,
            "claim": "C1",
            "property": "p",
            "device": "cpu",
            "failing_batch": RANDOM_BATCH,
        }
        for outcome in ("could not run", "error in the check", "error", "failed")
    ]
    found = failing_batch.of_tests(tests)
    assert len(found) == 1 and found[0]["batch"] == RANDOM_BATCH


def test_check_invariant_records_the_batch_that_failed_and_not_one_that_passed():
    """The harness's side of the interface, on the real builder: a named case that fails
    is recorded as failed_batch, a later one that passes is not (Hypothesis runs the explicit
    examples after a failing one, and does not replay it)."""
    from gdn_review import harness

    if not harness.release_in_range(">=0.32"):
        pytest.skip("a zero-draft speculating row takes the spec path from vLLM 0.32 (PR #56531)")
    recorded = []

    def record(name, value):
        recorded.append((name, value))

    spec = {**RANDOM_BATCH, "padded_rows": 0}  # a speculating row that drafted 0: spec path
    with pytest.raises(AssertionError):
        # fallback_condition (the rule before vLLM 0.32) fails on the spec path taken since
        harness.check_invariant("cpu", "fallback_condition", None, spec, {}, record)
    plain = {
        "speculative_tokens": None,
        "rows": [{"seq_len": 9, "query_len": 1, "prefilling": False}],
    }
    harness.check_invariant("cpu", "fallback_condition", None, plain, {}, record)
    failed = [value for name, value in recorded if name == "failed_batch"]
    assert failed == [spec]
    assert [value for name, value in recorded if name == "batch"] == [spec, plain]


def test_rows_configuration_and_a_yaml_case_with_scenario_keys():
    batch = {
        **RANDOM_BATCH,
        "boundary": "8 rows at the capture bound in tokens (16), k=1",
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "after": [{"id": "larger_batch", "rows": [{"seq_len": 9, "query_len": 1}]}],
        "layout": True,  # a harness flag, not a record field
        "rounds": 3,  # no case field of that name
    }
    described = failing_batch.describe(batch, "C2", "full_graph_tails_neutral", "cpu")
    assert described["rows"][0] == {
        "seq_len": "2",
        "query_len": "1",
        "drafted": "0",
        "accepted": "1",
        "prefilling": "—",
        "host_seq_len": "—",
    }
    assert described["configuration"] == {
        "speculative_tokens": 1,
        "drafts": "given",
        "max_num_seqs": 8,
        "after": ["larger_batch"],
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "rounds": 3,
    }
    case = yaml.safe_load(described["yaml"])[0]
    assert case["id"] == "failing_C2_8_rows_at_the_capture_bound_in_tokens_16_k_1"
    assert "8 rows at the capture bound" in case["text"]
    assert case["after"] == ["larger_batch"] and case["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert "layout" not in case and "boundary" not in case and "rounds" not in case
    assert "# left out (not a case field): rounds" in described["yaml"]
    text = "\n".join(failing_batch.markdown(described))
    assert "| 0 | 2 | 1 | 0 | 1 | — | — |" in text and "| 1 | 18 | 16 | — | 1 | — | — |" in text
    assert "Padding: 2 zero-length padded row(s)." in text
    assert "`cudagraph_mode` `FULL_AND_PIECEWISE`" in text
    assert "```yaml\n  - id: failing_C2_8_rows" in text
    assert "batch (seq_len, query_len, drafted, accepted) [(2, 1, 0, 1), (18, 16, —, 1)]" in (
        failing_batch.compact(described)
    )
    # A batch of padding only is no record case: the YAML says why.
    padding = failing_batch.describe({**RANDOM_BATCH, "rows": []}, "C2", "p")
    assert not padding["valid"] and "a case needs rows" in padding["yaml"]


def _paste(record_text: str, case_yaml: str, claim_cases: str | None = None) -> str:
    """The record with the case pasted as the first entry under ``cases:``."""
    return record_text.replace("\ncases:\n", "\ncases:\n" + case_yaml + "\n", 1)


def test_the_yaml_case_loads_as_a_record_case():
    """Pasted under a real record's ``cases:``, the case passes the record's whole validation
    (schema, batch rules, record rules) and is the batch as drawn."""
    from gdn_review.kb.models import Record

    text = (ROOT / "kb" / "45100.yaml").read_text(encoding="utf-8")
    described = failing_batch.describe(RANDOM_BATCH, "C2", "full_graph_tails_neutral", "cpu")
    assert described["valid"], described["problem"]
    record = parse_record(_paste(text, described["yaml"]), "45100.yaml")
    inputs = Record.case_inputs(record)["failing_C2_full_graph_tails_neutral"]
    rows = [{"accepted": 1, **row} for row in RANDOM_BATCH["rows"]]  # the schema's default
    assert {k: v for k, v in inputs.items() if k != "id"} == {**RANDOM_BATCH, "rows": rows}


def test_hostile_batches_stay_text_in_the_review_and_their_yaml_one_line_per_key():
    from gdn_review.review import render, review_files
    from tests.test_untrusted_input import HOSTILE, RAW, hostile_review

    batch = {
        **RANDOM_BATCH,
        "boundary": HOSTILE,
        HOSTILE: HOSTILE,
        "rows": [{"seq_len": HOSTILE, "query_len": 1, HOSTILE: 1}],
    }
    described = failing_batch.describe(batch, HOSTILE, HOSTILE, HOSTILE)
    loaded = yaml.safe_load(described["yaml"])
    assert len(loaded) == 1 and set(loaded[0]) <= set(LEADING_AND_SCENARIO), loaded[0]
    data = hostile_review()
    data["records"][0]["claims"][0]["failing_after"] = [
        {"case": HOSTILE, "device": HOSTILE, "reason": HOSTILE, "failing_batch": described}
    ]
    text = render.markdown(data)
    assert not RAW.search(text), RAW.search(text)
    assert "| 0 |" in text
    review_files.check_shape(json.loads(json.dumps(data)), ROOT / "shard.json")


def _case_fields():
    from gdn_review.kb.cases import Case

    return {field.alias or name for name, field in Case.model_fields.items()}


LEADING_AND_SCENARIO = _case_fields()


# --- End to end on the installed vLLM -------------------------------------------------------

# kb/52078.yaml's C5 without its known deviation on >= 0.32 (PR #56531): fallback_condition
# fails there on a batch whose speculating rows all drafted 0. Its named example passes, so the
# failure is Hypothesis's (k = 1 and two rows at most: it finds one in a few examples).
C5_FROM = (
    "properties: [fallback_condition, partition, spec_rows_match_drafts, counts_add_up, "
    "indices_in_bounds, deterministic]\n      speculative_tokens: [1, 2, 3]\n      max_rows: 8"
)
C5_TO = (
    "properties: [fallback_condition]\n      cases: [{cases}]\n"
    "      speculative_tokens: [1]\n      max_rows: 2"
)


def _record_text(cases: str) -> str:
    text = (ROOT / "kb" / "52078.yaml").read_text(encoding="utf-8")
    assert C5_FROM in text, "kb/52078.yaml's C5 changed: update this test"
    text = text.replace(C5_FROM, C5_TO.format(cases=cases))
    deviation = re.search(
        r"    known_deviations:\n      - releases: \">=0\.32\"\n        properties: "
        r"\[fallback_condition\]\n(?:        .*\n)+",
        text,
    )
    return text[: deviation.start()] + text[deviation.end() :]


def _run_c5(tmp_path, text: str, name: str) -> dict:
    from gdn_review import generate
    from tests.conftest import in_process_pytest

    record = parse_record(text, "52078.yaml")
    module = tmp_path / f"test_{name}.py"
    module.write_text(
        generate.render_module(record, "kb/52078.yaml", snapshot_dir=str(tmp_path)),
        encoding="utf-8",
    )
    evidence = tmp_path / f"{name}.json"
    code, printed = in_process_pytest(
        "-q", str(module), "-k", "C5 and cpu and not boundary", "--gdn-evidence", str(evidence)
    )
    assert code == 1, printed[-3000:]
    (test,) = [
        t
        for t in json.loads(evidence.read_text(encoding="utf-8"))["tests"]
        if t["outcome"] == "failed"
    ]
    return {"test": test, "evidence": evidence, "record": record}


def _assertion(reason: str) -> str:
    """What the property says is wrong, without how the batch is named."""
    kind, names, said = reason.split(": ", 2)  # AssertionError: P fails on <batch>: <said>
    return f"{kind}: {names.split(' on ')[0]}: {said.split(' (rows', 1)[0]}"


@pytest.mark.slow
def test_a_real_failing_invariant_shows_its_batch_and_its_case_fails_the_same_way(tmp_path):
    from gdn_review.matrix.matrix_report import matrix_report
    from gdn_review.report.report import render_markdown, summary_lines
    from gdn_review.report.report_contents import report_data
    from gdn_review.review import compare
    from gdn_review.run import evidence_file

    first = _run_c5(tmp_path, _record_text("pure_spec_decode"), "drawn")
    test = first["test"]
    batch = test["failing_batch"]
    assert "id" not in batch and batch["speculative_tokens"] == 1
    assert all(row.get("drafted") == 0 for row in batch["rows"]), batch

    # The report (reports/N.md and `run`'s lines), the review, the matrix: the rows, the case.
    evidence = evidence_file.load([first["evidence"]])
    data = report_data(first["record"], evidence)
    markdown = render_markdown(data)
    row = batch["rows"][0]
    shown = f"| 0 | {row['seq_len']} | {row['query_len']} | 0 | {row['accepted']} |"
    assert shown in markdown and "- id: failing_C5_fallback_condition" in markdown
    assert any("C5 fallback_condition (cpu) failed on" in line for line in summary_lines([data]))
    (failing,) = compare.failing_cases([test], "C5")
    assert failing["failing_batch"]["case"]["rows"][0]["drafted"] == 0
    matrix = {
        "releases": [
            {
                "version": "0.33.0",
                "role": "base",
                "source": "installed",
                "evidence_path": str(first["evidence"]),
            }
        ]
    }
    with_matrix = render_markdown(matrix_report(first["record"], matrix))
    assert "failing batch (seq_len, query_len, drafted, accepted)" in with_matrix
    assert "**C5 on vLLM 0.33.0**" in with_matrix

    # Pasted into the record and named by C5: the record loads, and C5 fails on that case.
    described = failing_batch.of_test(test)
    text = _paste(
        _record_text("pure_spec_decode, failing_C5_fallback_condition"), described["yaml"]
    )
    second = _run_c5(tmp_path, text, "pasted")
    assert second["test"]["failing_batch"]["id"] == "failing_C5_fallback_condition"
    assert _assertion(second["test"]["reason"]) == _assertion(test["reason"])
