"""The properties records could not state before: buffer identity, a second builder,
per-claim fields, `after` chains deeper than one level. Each reaches the real builder
(a test here fails when the harness ignores it), and each misuse is a record error."""

from __future__ import annotations

import pytest

from gdn_review import harness
from gdn_review.harness import case_build as harness_build
from gdn_review.kb import RecordErrors
from gdn_review.kb.load import parse_record

K2 = {"speculative_tokens": 2, "mamba_cache_mode": "none"}
SPEC_ROWS = [
    {"seq_len": 10, "query_len": 3, "drafted": 2, "accepted": 2},
    {"seq_len": 20, "query_len": 3, "drafted": 2, "accepted": 3},
]
LARGER = dict(
    K2,
    cudagraph_mode="FULL_AND_PIECEWISE",
    block_table_offset=20000,
    rows=[{"seq_len": 40, "query_len": 3, "drafted": 2, "accepted": 3}] * 4,
)


@pytest.fixture
def calls(monkeypatch):
    """Which builder each real build() / update_block_table() ran on (the real methods, wrapped)."""
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder

    seen = []
    for name in ("build", "update_block_table"):
        real = getattr(GDNAttentionMetadataBuilder, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            seen.append((_name, id(self)))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(GDNAttentionMetadataBuilder, name, spy)
    return seen


def test_layout_says_which_fields_are_views_of_the_persistent_buffers():
    full = dict(K2, cudagraph_mode="FULL_AND_PIECEWISE", rows=SPEC_ROWS, padded_rows=1, layout=True)
    staged = harness.build_case("cpu", full, count_ops=False).metadata
    assert {
        "spec_state_indices_tensor",
        "spec_sequence_masks",
        "spec_query_start_loc",
        "num_accepted_tokens",
    } <= set(staged["persistent_views"])
    assert "spec_state_indices_tensor" not in staged["noncontiguous"]
    eager = harness.build_case(
        "cpu", dict(K2, rows=SPEC_ROWS, padded_rows=1, layout=True), count_ops=False
    ).metadata
    assert eager["persistent_views"] == []
    # Without `layout` the snapshot stays as it was (stored snapshots do not move).
    assert (
        "persistent_views"
        not in harness.build_case("cpu", dict(full, layout=None), count_ops=False).metadata
    )


def test_a_second_builder_re_gathers_after_its_own_builds(calls):
    case = dict(
        K2,
        cudagraph_mode="FULL_AND_PIECEWISE",
        entry="update_block_table",
        rows=SPEC_ROWS,
        padded_rows=1,
        null_padded_blocks=True,
        second_builder={"after": [LARGER]},
        layout=True,
    )
    result = harness.build_case("cpu", case, count_ops=False).metadata
    builds = [who for name, who in calls if name == "build"]
    (regather,) = [who for name, who in calls if name == "update_block_table"]
    # the larger batch on the second builder first
    assert len(builds) == 2 and builds[0] == regather != builds[1], calls
    assert result["spec_state_indices_tensor"] == [
        [10001, 10002, 10003],
        [10017, 10018, 10019],
        [0, 0, 0],
    ]
    assert "spec_state_indices_tensor" in result["persistent_views"]  # the second builder's buffer


def test_after_chains_run_every_level_in_order(calls):
    deepest = dict(LARGER, block_table_offset=30000)
    middle = dict(LARGER, rows=LARGER["rows"][:3], after=[deepest])
    case = dict(K2, cudagraph_mode="FULL_AND_PIECEWISE", rows=SPEC_ROWS, after=[middle])
    harness.build_case("cpu", case, count_ops=False)
    assert [name for name, _ in calls] == ["build", "build", "build"]
    assert len({who for _, who in calls}) == 1  # one builder, as in a server


RECORD = """\
schema_version: 1
pr: {{number: 7, repo: a/b, title: t}}
target:
  file: vllm/v1/attention/backends/gdn_attn.py
  symbol: GDNAttentionMetadataBuilder.build
  base_release: 0.32.0
  head_release: 0.33.0
claims:
  - id: C1
    text: The path.
    check:
      kind: equivalence
      cases: [a]
      {compare}
cases:
  - id: a
    text: A case.
    {extra}
    rows:
      - {{seq_len: 9, query_len: 1}}
    expect: {{path: non_spec, num_decodes: 1}}
  - id: b
    text: B case.
    after: [a]
    rows:
      - {{seq_len: 9, query_len: 1}}
"""


def test_per_claim_fields_compare_only_what_the_claim_names():
    record = parse_record(RECORD.format(compare="fields: [path]", extra=""), "7.yaml")
    (claim,) = record.claims
    assert claim.check.compared(record.case("a").expect) == {"path": "non_spec"}
    record = parse_record(RECORD.format(compare="except: [path]", extra=""), "7.yaml")
    assert record.claims[0].check.compared(record.case("a").expect) == {"num_decodes": 1}


@pytest.mark.parametrize(
    ("compare", "extra", "message"),
    [
        (
            "fields: [path]\n      except: [path]",
            "",
            "7.yaml:12:7: claims[0].check: Value error, give fields (what to compare) or except",
        ),
        (
            "fields: [spec_state_rows]",
            "",
            "7.yaml:14:15: claims[0].check.fields: case 'a' expects none of "
            "the fields this claim compares",
        ),
        ("fields: [no_such_field]", "", "7.yaml:14:16: claims[0].check.fields[0]:"),
        (
            "",
            "second_builder: {after: [b]}",
            "7.yaml:18:21: cases[0].second_builder: a second builder is "
            "where update_block_table runs",
        ),
        (
            "",
            "after: [b]",
            "7.yaml:18:13: cases[0].after[0]: case 'b' is built before 'a' "
            "and after it: after chains must not loop",
        ),
    ],
)
def test_misused_properties_are_record_errors_at_file_line_column(compare, extra, message):
    with pytest.raises(RecordErrors) as failure:
        parse_record(RECORD.format(compare=compare, extra=extra), "7.yaml")
    assert any(str(e).startswith(message) for e in failure.value.errors), [
        str(e) for e in failure.value.errors
    ]


def test_case_inputs_expand_chains_and_mark_layout_cases():
    text = RECORD.format(compare="", extra="").replace(
        "expect: {path: non_spec, num_decodes: 1}", "expect: {path: non_spec, persistent_views: []}"
    )
    text = text.replace("    after: [a]\n", "    after: [c]\n") + (
        "  - id: c\n    text: C case.\n    after: [d]\n    rows:\n      "
        "- {seq_len: 9, query_len: 1}\n"
        "  - id: d\n    text: D case.\n    rows:\n      - {seq_len: 9, query_len: 1}\n"
    )
    inputs = parse_record(text, "7.yaml").case_inputs()
    assert inputs["a"]["layout"] is True
    # d, built before c, built before b
    assert inputs["b"]["after"][0]["after"][0]["rows"][0]["seq_len"] == 9
    assert harness_build.needs_own_builder(inputs["b"])


def test_a_generated_equivalence_test_compares_only_the_claims_fields(tmp_path):
    """One case, two claims: `fields: [path]` passes though the case's num_decodes is wrong;
    the claim that compares every field fails on it. (The generated module, run by pytest.)"""
    from gdn_review import generate
    from tests.conftest import in_process_pytest

    text = RECORD.format(compare="fields: [path]", extra="").replace(
        "num_decodes: 1}", "num_decodes: 2}"
    )
    text = text.replace(
        "cases:\n",
        "  - id: C2\n    text: Everything.\n    check:\n      kind: "
        "equivalence\n      cases: [a]\ncases:\n",
        1,
    )
    module = tmp_path / "test_fields.py"
    module.write_text(
        generate.render_module(
            parse_record(text, "7.yaml"), "kb/7.yaml", snapshot_dir=str(tmp_path)
        ),
        encoding="utf-8",
    )
    code, printed = in_process_pytest(
        "-q", str(module), "-k", "equivalence and cpu", "-rA", "--gdn-no-evidence"
    )
    assert code == 1, printed[-3000:]
    assert "PASSED" in printed and "test_C1_equivalence[cpu-a]" in printed.split("PASSED", 1)[1], (
        printed[-3000:]
    )
    assert "FAILED" in printed and "test_C2_equivalence[cpu-a]" in printed.split("FAILED", 1)[1], (
        printed[-3000:]
    )
    assert "num_decodes" in printed


def test_a_case_that_states_the_reorder_threshold_reads_it_from_the_builder():
    spec = dict(K2, rows=SPEC_ROWS, builder_fields=True)
    # 1 + k
    assert harness.build_case("cpu", spec, count_ops=False).metadata["reorder_batch_threshold"] == 3
    plain = dict(rows=[{"seq_len": 9, "query_len": 1}], builder_fields=True)
    assert (
        harness.build_case("cpu", plain, count_ops=False).metadata["reorder_batch_threshold"] == 1
    )
    assert (
        "reorder_batch_threshold"
        not in harness.build_case("cpu", dict(spec, builder_fields=None), count_ops=False).metadata
    )
