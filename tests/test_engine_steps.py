"""Engine steps as entry points, and the scopes of needs, invariants and properties (issue 33).

A step runs every KV-cache group's build() on its own real builder and block table, as
vLLM's runners do; methods a PR adds run once per step where the release (or a change
applied to a copy of it) has them, and read "not applicable" (pending) where it does not.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from gdn_review import harness
from gdn_review.common import interrupts, patched_tree, release, release_trees
from gdn_review.kb import RecordErrors, load_record
from gdn_review.report.report_contents import report_data
from gdn_review.run import evidence_file
from tests.conftest import ROOT, in_process_pytest

TARGET = "vllm/v1/attention/backends/gdn_attn.py"
ROWS = [
    {"seq_len": 20, "query_len": 3, "drafted": 2, "accepted": 2},
    {"seq_len": 15, "query_len": 3, "drafted": 1, "accepted": 3},
    {"seq_len": 40, "query_len": 8},
]
MIXED = {"speculative_tokens": 2, "rows": ROWS}


def test_a_step_builds_each_group_on_its_own_builder_and_table_and_counts_per_step_and_call():
    one = harness.build_case("cpu", MIXED)
    step = harness.build_case("cpu", dict(MIXED, step={"groups": 3}))
    assert step.metadata["group_state_tables"] == [[0], [1], [2]]  # each group's own block table
    assert step.metadata["group_differences"] == [
        [],
        [],
    ]  # otherwise what the first group's build() returns
    first = {
        k: v
        for k, v in step.metadata.items()
        if k not in ("group_state_tables", "group_differences")
    }
    assert first == one.metadata  # the first group: today's single build()
    # Three calls, each what the others executed (a single build's count also holds making its
    # inputs).
    assert len(step.call_ops) == 3 and step.call_ops[0] == step.call_ops[1] == step.call_ops[2]
    budget = {"aten.ge": 1, "aten.repeat_interleave": 1}
    assert harness.op_counts(step, budget, "step") == {
        "aten.ge": 3,
        "aten.repeat_interleave": 3,
    }  # once per build, three per step
    assert harness.op_counts(step, budget, "call") == {"aten.ge": 1, "aten.repeat_interleave": 1}
    assert harness.op_counts(one, budget, "step") == harness.op_counts(
        one, budget, "call"
    )  # one call: the same count


def test_a_method_the_release_lacks_is_not_applicable_naming_it():
    case = dict(MIXED, step={"groups": 2, "before_builds": [{"method": "compute_spec_metadata"}]})
    with pytest.raises(
        pytest.skip.Exception,
        match=r"not applicable: vLLM \S+ has no GDNAttentionMetadataBuilder.compute_spec_metadata",
    ):
        harness.build_case("cpu", case)


# A change of this test's own (not any PR's): the builder gains a per-step method that
# computes the spec masks, and build() takes them instead of computing them again.
PATCHES = [
    (
        "    def build(  # type: ignore[override]\n",
        "    def compute_step_masks(self, num_decode_draft_tokens_cpu):\n"
        "        self.step_calls = getattr(self, 'step_calls', 0) + 1\n"
        "        return num_decode_draft_tokens_cpu >= 0\n\n"
        "    def build(  # type: ignore[override]\n",
    ),
    (
        "        fast_build: bool = False,\n    ) -> GDNAttentionMetadata:\n",
        "        fast_build: bool = False,\n        step_masks=None,\n   "
        " ) -> GDNAttentionMetadata:\n",
    ),
    (
        "            spec_sequence_masks_cpu = num_decode_draft_tokens_cpu >= 0\n",
        "            spec_sequence_masks_cpu = step_masks if step_masks "
        "is not None else num_decode_draft_tokens_cpu >= 0\n",
    ),
]
STEP_SCRIPT = """
import json, sys
from gdn_review import harness
case = json.loads(sys.argv[1])
run = harness.build_case("cpu", case)
print(json.dumps({
    "ge": harness.op_counts(run, {"aten.ge": 1}, "step")["aten.ge"],
    "calls": len(run.call_ops),
    "tables": run.metadata["group_state_tables"],
    "differ": run.metadata["group_differences"],
    "path": run.metadata["path"],
}))
"""


@pytest.mark.slow
def test_with_a_change_that_adds_the_method_it_runs_once_per_step_and_its_result_reaches_each_build(
    tmp_path,
):
    version, root = release.loaded()
    source = (root / TARGET).read_text(encoding="utf-8")
    changed = source
    for find, replace in PATCHES:
        assert changed.count(find) == 1, f"vLLM {version}: {find!r} is not in {TARGET} once"
        changed = changed.replace(find, replace)
    patched = patched_tree.overlay(root, {TARGET: changed}, tmp_path / "tree")
    case = dict(
        MIXED,
        step={
            "groups": 2,
            "before_builds": [{"method": "compute_step_masks", "result_as": "step_masks"}],
        },
    )
    done = interrupts.run_child(
        [sys.executable, "-c", STEP_SCRIPT, json.dumps(case)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=release_trees.environment(patched),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    # Once per step: the method's >= 0, none in the two builds; three calls counted apart.
    assert measured == {"ge": 1, "calls": 3, "tables": [[0], [1]], "differ": [[]], "path": "spec"}
    # The same step on the release as it is (loaded here): the method is absent.
    with pytest.raises(
        pytest.skip.Exception,
        match=r"vLLM \S+ has no GDNAttentionMetadataBuilder.compute_step_masks",
    ):
        harness.build_case("cpu", case)


STEP_RECORD = textwrap.dedent(
    """\
    schema_version: 1
    pr:
      number: 7
      repo: vllm-project/vllm
      title: A small PR
      state: open
    target:
      file: vllm/v1/attention/backends/gdn_attn.py
      symbol: GDNAttentionMetadataBuilder.build
      base_release: 0.33.0
    claims:
      - id: C1
        text: The rows are split once.
        before: holds
        check:
          kind: invariant
          properties: [partition, counts_add_up]
          speculative_tokens: [2]
          examples: 3
    cases:
      - id: plain
        text: A mixed batch.
        speculative_tokens: 2
        rows:
          - {seq_len: 20, query_len: 3, drafted: 2}
          - {seq_len: 40, query_len: 8}
      - id: needs_the_pr
        text: A batch that needs a field only the PR adds.
        speculative_tokens: 2
        rows:
          - {seq_len: 20, query_len: 3, drafted: 2}
        needs: [spec_decode_src_indices]
    """
)


def _run_generated(kb: Path, tmp_path: Path) -> Path:
    """The KB's generated modules in one pytest session (in this process, vLLM loaded once); its
    evidence."""
    from gdn_review import generate

    out = tmp_path / "generated"
    generate.apply(generate.plan(kb, out))
    evidence = tmp_path / "evidence.json"
    code, printed = in_process_pytest(str(out), "-q", "--gdn-evidence", str(evidence))
    assert code in (0, 1), printed[-3000:]
    return evidence


def test_needs_on_one_case_leaves_the_records_invariant_holding_and_a_failure_names_its_case(
    write_record, tmp_path
):
    # Record 7: an invariant with a case that needs what only the PR adds. Record 8: the same
    # invariant failing on a named case. Both in one session.
    failing = (
        STEP_RECORD.replace("number: 7", "number: 8")
        .replace("properties: [partition, counts_add_up]", "properties: [fallback_condition]")
        .replace(
            "      - {seq_len: 20, query_len: 3, drafted: 2}\n"
            "      - {seq_len: 40, query_len: 8}\n",
            "      - {seq_len: 20, query_len: 1, drafted: 0}\n      - "
            "{seq_len: 9, query_len: 1, drafted: 0}\n",
            1,
        )
    )
    write_record(STEP_RECORD)
    kb = write_record(failing, name="8.yaml")
    evidence = _run_generated(kb, tmp_path)
    claim = report_data(load_record(kb / "7.yaml"), evidence_file.load([evidence]))["claims"][0]
    # Before, the needs case skipped the whole invariant: "pending" for a claim of no change.
    assert claim["verdict"] == "holds", claim
    # An invariant that fails on a named case names it and its rows (report and review show the
    # first line).
    tests = json.loads(evidence.read_text(encoding="utf-8"))["tests"]
    reason = next(
        t["reason"]
        for t in tests
        if t.get("record") == 8 and t.get("claim") == "C1" and t["outcome"] == "failed"
    )
    assert "fallback_condition fails on case plain: path 'spec'" in reason, reason
    assert "rows (seq_len, query_len, drafted) [(20, 1, 0), (9, 1, 0)], k = 2" in reason
    shown = report_data(load_record(kb / "8.yaml"), evidence_file.load([evidence]))["claims"][0]
    assert (
        shown["verdict"] == "fails" and "fallback_condition fails on case plain" in shown["reason"]
    ), shown


def test_a_property_says_where_it_does_not_apply():
    capture = {
        "speculative_tokens": 2,
        "entry": "capture",
        "rows": [{"seq_len": 9, "query_len": 3}],
    }
    run = harness.build_case("cpu", capture)
    assert "a capture derives them from the query lengths" in harness.check_property(
        "spec_rows_match_drafts", capture, run
    )
    assert harness.check_property("partition", capture, run) is None  # checked, and holds
    call = {
        "call": {
            "function": "plan_flashinfer_checkpoints",
            "arguments": {"checkpoint_offsets": [0], "query_lens": [1]},
        }
    }
    assert "calls a host function on its own" in harness.check_property("partition", call, None)


def test_a_step_the_harness_cannot_run_as_a_runner_would_is_a_record_error(write_record):
    record = STEP_RECORD.replace(
        "    needs: [spec_decode_src_indices]\n",
        "    entry: capture\n    step:\n      groups: 1\n"
        "      before_builds:\n        - {method: compute, arguments: "
        "[block_table]}\n    expect: {group_differences: []}\n",
    )
    with pytest.raises(RecordErrors) as caught:
        load_record(
            write_record(record.replace("drafted: 2}\n    entry", "}\n    entry")) / "7.yaml"
        )
    text = str(caught.value)
    assert "cases[1].entry: a step calls each group's build() as the runner does" in text
    assert (
        "cases[1].step.before_builds[0].arguments[0]: 'block_table' is "
        "not one of build()'s arguments" in text
    )
    assert "cases[1].step.groups: group_differences compare groups: give groups: 2 or more" in text


def test_an_invariant_lists_its_cases_and_they_must_exist(write_record):
    record = STEP_RECORD.replace(
        "      examples: 3\n", "      examples: 3\n      cases: [plain, nowhere]\n"
    )
    with pytest.raises(
        RecordErrors, match=r"claims\[0\]\.check\.cases\[1\]: no case with id 'nowhere'"
    ):
        load_record(write_record(record) / "7.yaml")


def test_the_generated_invariant_runs_only_on_the_cases_it_lists(write_record):
    from gdn_review.generate import render_module

    record = load_record(
        write_record(
            STEP_RECORD.replace("      examples: 3\n", "      examples: 3\n      cases: [plain]\n")
        )
        / "7.yaml"
    )
    text = render_module(record, "kb/7.yaml")
    assert (
        "@example(batch=CASES['plain'])" in text
        and "@example(batch=CASES['needs_the_pr'])" not in text
    )


def test_bench_times_a_step_case_as_its_whole_step():
    from gdn_review.harness.timing import time_build

    samples = time_build("cpu", dict(MIXED, step={"groups": 2}), 2)
    assert len(samples) == 2 and all(isinstance(ns, int) and ns > 0 for ns in samples)


def test_reports_and_the_guards_line_map_name_a_step():
    from gdn_review.kb.server_config import configuration_label

    record = load_record(ROOT / "kb" / "52297.yaml")
    assert configuration_label(record.case("mixed_step")) == "step of 2 groups"
    assert record.case("mixed_step_spec_metadata").configuration() == (
        "one engine step: compute_spec_metadata() once, then build() of "
        "each of 2 KV-cache groups (own builders and block tables)"
    )
    assert record.case("mixed_batch").configuration() is None


def test_a_step_result_for_a_build_parameter_the_release_lacks_is_not_applicable():
    # Before, the result was left out silently and the step ran without it (issue 53, item 2).
    case = dict(
        MIXED,
        step={"groups": 2, "before_builds": [{"method": "build", "result_as": "step_masks"}]},
    )
    with pytest.raises(
        pytest.skip.Exception,
        match=r"vLLM \S+'s GDNAttentionMetadataBuilder.build\(\) takes no step_masks",
    ):
        harness.build_case("cpu", case)
