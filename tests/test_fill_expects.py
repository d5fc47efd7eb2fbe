"""`gdn-review snapshot --fill-expects`: missing expect blocks written into a record's YAML,
comments kept."""

from __future__ import annotations

import re
import subprocess
import textwrap

import pytest
from click.testing import CliRunner
from conftest import MINIMAL, ROOT

from gdn_review.cli import main
from gdn_review.common import release
from gdn_review.kb import RecordErrors, load_record, parse_record
from gdn_review.run import snapshot_take
from gdn_review.run.fill_expects import (
    case_fields,
    check_filled,
    default_release,
    insert_expects,
    needed_expect,
    needing_expect,
)
from gdn_review.run.snapshot_take import SnapshotError

# The fixture below takes snapshots in this process, which has loaded the installed release.
INSTALLED = str(release.installed())

EQUIVALENCE = MINIMAL.replace(
    "cases:\n",
    "  - id: C2\n    text: Same metadata.\n    check: {kind: "
    "equivalence, cases: [spec, plain]}\ncases:\n",
    1,
).replace(
    "risks:\n",
    textwrap.dedent(
        """\
          # the plain case: a prefill
          - id: plain   # trailing comment
            text: >-
              A prefill, written
              over two lines.

            rows:
              - seq_len: 10
                query_len: 10
            # a comment after the case's last line
        risks:
        """
    ),
    1,
)


def test_a_record_whose_equivalence_cases_state_no_expect_loads_only_when_asked():
    with pytest.raises(RecordErrors) as failure:
        parse_record(EQUIVALENCE, "7.yaml")
    messages = [str(error) for error in failure.value.errors]
    assert any(
        "case 'spec' states no expect" in m
        and "run gdn-review snapshot --record 7 --fill-expects" in m
        for m in messages
    ), messages
    record = parse_record(EQUIVALENCE, "7.yaml", expects_optional=True)
    assert needing_expect(record) == ["spec", "plain"]
    assert needing_expect(record, ["plain"]) == ["plain"]
    with pytest.raises(SnapshotError, match="no case 'nope'"):
        needing_expect(record, ["nope"])


def test_blocks_go_after_each_case_s_last_line_indented_as_its_keys_comments_kept():
    expects = {
        "spec": {"path": "spec", "spec_state_cells": [[[0, 1]], [[1, 2]]]},
        "plain": {"path": "non_spec", "non_spec_state_rows": None},
    }
    text = insert_expects(EQUIVALENCE, "7.yaml", expects)
    before = parse_record(EQUIVALENCE, "7.yaml", expects_optional=True)
    check_filled(text, "7.yaml", before, expects)  # loads, validates, states exactly these
    assert parse_record(text, "7.yaml").case("spec").expect == expects["spec"]
    # Nothing but the blocks was added: every line of the original is kept, in order.
    added = [line for line in text.splitlines() if line not in EQUIVALENCE.splitlines()]
    assert added == [
        "    expect:",
        "      path: spec",
        "      spec_state_cells: [[[0, 1]], [[1, 2]]]",
        "    expect:",
        "      path: non_spec",
        "      non_spec_state_rows: null",
    ]
    kept = [line for line in text.splitlines() if line not in added]
    assert kept == [line for line in EQUIVALENCE.splitlines() if line not in added]
    # The second block sits after the case's rows, before the comment that follows them.
    assert (
        "        query_len: 10\n    expect:\n      path: non_spec\n      "
        "non_spec_state_rows: null\n    # a comment after" in text
    )
    # An empty `expect: {}` is replaced, not doubled; a file without a final newline gets one.
    empty = EQUIVALENCE.replace(
        "      - {seq_len: 12, query_len: 3, drafted: 2}\n",
        "      - {seq_len: 12, query_len: 3, drafted: 2}\n    expect: {}\n",
    )
    assert empty != EQUIVALENCE
    filled = insert_expects(empty.rstrip("\n"), "7.yaml", {"spec": {"path": "spec"}})
    assert "expect: {}" not in filled and filled.count("expect:") == 1 and filled.endswith("\n")


def test_a_flow_style_case_or_an_edit_that_does_not_round_trip_is_refused():
    flow = EQUIVALENCE.replace(
        "  - id: spec\n",
        "  - {id: other, text: x, rows: [{seq_len: 4, query_len: 4}]}\n  - id: spec\n",
    )
    with pytest.raises(
        SnapshotError, match=r"7.yaml:\d+:5: cases\[0\]: case 'other' is written in flow style"
    ):
        insert_expects(flow, "7.yaml", {"other": {"path": "non_spec"}})
    before = parse_record(EQUIVALENCE, "7.yaml", expects_optional=True)
    with pytest.raises(SnapshotError, match="would not state the measured expects of spec"):
        check_filled(
            insert_expects(EQUIVALENCE, "7.yaml", {"spec": {"path": "spec"}}),
            "7.yaml",
            before,
            {"spec": {"path": "non_spec"}},
        )


def test_usage_errors_and_nothing_to_fill():
    runner = CliRunner()
    result = runner.invoke(
        main, ["snapshot", "--kb", str(ROOT / "kb"), "--record", "52078", "--print"]
    )
    assert result.exit_code == 2 and "--fill-expects" in result.output
    done = runner.invoke(
        main, ["snapshot", "--kb", str(ROOT / "kb"), "--record", "52078", "--fill-expects"]
    )
    assert done.exit_code == 0 and "no case needs an expect" in done.output


@pytest.mark.slow  # one subprocess that imports vLLM and builds every case (about 20 s)
def test_filling_a_record_without_expects_gives_back_its_values_with_its_comments(tmp_path):
    original_path = (
        ROOT / "kb" / "34871.yaml"
    )  # 8 cases, each in an equivalence check, each with a one-line expect
    original = load_record(original_path)
    text = original_path.read_text(encoding="utf-8")
    stripped = re.sub(r"\n    expect: \{[^\n]*\}", "", text)
    assert stripped.count("expect:") == 0 and stripped.count("#") == text.count("#")
    kb = tmp_path / "kb"
    kb.mkdir()
    path = kb / "34871.yaml"
    path.write_text(stripped, encoding="utf-8")

    # The installed release (the record's claims are fixes, so the default would be its head
    # release, 0.18.0).
    result = CliRunner().invoke(
        main,
        [
            "snapshot",
            "--kb",
            str(kb),
            "--record",
            "34871",
            "--fill-expects",
            "--release",
            INSTALLED,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote the expect of 8 case(s)" in result.output

    filled_text = path.read_text(encoding="utf-8")
    filled = load_record(path)  # strict: validates with every expect stated
    # Comments and every other line kept, in order: only expect blocks were added.
    without, in_block, blocks = [], False, 0
    for line in filled_text.splitlines():
        if line == "    expect:":
            in_block, blocks = True, blocks + 1
        elif not (in_block and line.startswith("      ")):
            in_block = False
            without.append(line)
    assert blocks == 8
    assert without == stripped.splitlines()
    for case in original.cases:
        measured = filled.case(case.id).expect
        assert {field: measured.get(field) for field in case.expect} == case.expect, case.id


def test_without_release_an_expect_comes_from_the_release_the_claims_speak_of():
    record = parse_record(EQUIVALENCE, "7.yaml", expects_optional=True)  # C2 states no `before`
    version, why = default_release(record, ["spec", "plain"])
    assert version is None and "cannot fail there" in why
    holds = parse_record(
        EQUIVALENCE.replace(
            "    text: Same metadata.\n", "    text: Same metadata.\n    before: holds\n"
        ),
        "7.yaml",
        expects_optional=True,
    )
    assert (
        default_release(holds, ["spec"])[0] == "0.28.0"
    )  # no change: what the release without the PR builds
    fails = parse_record(
        EQUIVALENCE.replace(
            "    text: Same metadata.\n", "    text: Same metadata.\n    before: fails\n"
        ),
        "7.yaml",
        expects_optional=True,
    )
    assert default_release(fails, ["spec"])[0] == "0.29.0"  # a fix: what the PR builds
    both = EQUIVALENCE.replace(
        "    text: Same metadata.\n", "    text: Same metadata.\n    before: holds\n"
    ).replace(
        "cases:\n",
        "  - id: C3\n    text: Fixed.\n    before: fails\n    check: "
        "{kind: equivalence, cases: [spec]}\ncases:\n",
        1,
    )
    with pytest.raises(SnapshotError, match="give --release"):
        default_release(parse_record(both, "7.yaml", expects_optional=True), ["spec"])


# A record whose cases need more than the core fields (issue 33): full_graph_staging's
# FULL-graph batches (kb/full_graph_staging.yaml, full_spec_staged and full_decode_staged).
STAGING = textwrap.dedent(
    """\
    schema_version: 1
    pr:
      number: 7
      repo: vllm-project/vllm
      title: A small PR
      merged_at: "2026-01-02 03:04"
      url: https://example.invalid/pr/7
    target:
      file: vllm/v1/attention/backends/gdn_attn.py
      symbol: GDNAttentionMetadataBuilder.build
      base_release: 0.31.0
      head_release: 0.33.0
    claims:
      - id: C1
        text: Staged into the persistent buffers.
        check:
          kind: equivalence
          cases: [staged]
          fields: [persistent_views, spec_state_indices_tensor]
      - id: C2
        text: The eager decodes build what the staged ones state.
        check:
          kind: equivalence
          cases: [decode_stated, decode_new]
          except: [persistent_views]
    cases:
      - id: staged
        text: FULL graph, k=2, two spec-decode rows and one padded row.
        speculative_tokens: 2
        cudagraph_mode: FULL_AND_PIECEWISE
        mamba_cache_mode: none
        padded_rows: 1
        null_padded_blocks: true
        rows:
          - {seq_len: 10, query_len: 3, drafted: 2, accepted: 2}
          - {seq_len: 20, query_len: 2, drafted: 1, accepted: 1}
      - id: decode_stated
        text: FULL graph, two one-token decodes and one padded row.
        cudagraph_mode: FULL_AND_PIECEWISE
        mamba_cache_mode: none
        padded_rows: 1
        null_padded_blocks: true
        rows:
          - {seq_len: 9, query_len: 1, prefilling: false}
          - {seq_len: 17, query_len: 1, prefilling: false}
        expect:
          path: non_spec
          persistent_views: [non_spec_query_start_loc, non_spec_state_indices_tensor]
          non_spec_state_indices_tensor: [1, 17, 0]
      - id: decode_new
        text: The same decodes, eager.
        cudagraph_mode: NONE
        mamba_cache_mode: none
        padded_rows: 1
        null_padded_blocks: true
        rows:
          - {seq_len: 9, query_len: 1, prefilling: false}
          - {seq_len: 17, query_len: 1, prefilling: false}
    risks:
      - id: R1
        text: Something could break.
        cases: [staged]
        claims: [C1]
    """
)


def test_a_case_needs_the_fields_its_expect_and_the_claims_naming_it_state():
    record = parse_record(STAGING, "7.yaml", expects_optional=True)
    # A claim's `fields:`, in ExpectField's order (the raw state indices before the layout).
    assert case_fields(record, "staged") == {
        "spec_state_indices_tensor": "claim C1 compares it",
        "persistent_views": "claim C1 compares it",
    }
    # A claim without `fields:`: what it compares of its other cases (not its `except:`).
    assert case_fields(record, "decode_new") == {
        "non_spec_state_indices_tensor": "claim C2 compares it of case decode_stated"
    }
    assert list(case_fields(record, "decode_stated")) == [
        "non_spec_state_indices_tensor",
        "persistent_views",
    ]
    # Written: the core fields, then those; not every field measured (the server's, the builder's).
    measured = {
        "path": "spec",
        "num_prefills": 0,
        "persistent_views": ["spec_state_indices_tensor"],
        "noncontiguous": [],
        "spec_state_indices_tensor": [[1, 2, 3]],
        "reorder_batch_threshold": 3,
        "chunk_metadata_built": False,
    }
    assert needed_expect(record, "staged", measured) == {
        "path": "spec",
        "num_prefills": 0,
        "spec_state_indices_tensor": [[1, 2, 3]],
        "persistent_views": ["spec_state_indices_tensor"],
    }
    assert list(snapshot_take.full_expect(measured)) == [
        "path",
        "num_prefills",
        "spec_state_indices_tensor",
        "persistent_views",
        "noncontiguous",
        "reorder_batch_threshold",
        "chunk_metadata_built",
    ]


@pytest.fixture
def snapshots_in_this_process(monkeypatch):
    """The installed release's snapshots taken in this process, which has loaded it, not in a fresh
    child (a vLLM import, about 10 s, each). What is done with a snapshot is the same; the child
    itself is the first filling test's (above)."""

    def take_here(record_path, pythonpath, out, device="cpu", all_fields=False):
        assert pythonpath is None, "only the installed release is loaded here"
        snapshot_take.write_snapshot(record_path, out, device, all_fields=all_fields)
        return subprocess.CompletedProcess([], 0, "", "")

    monkeypatch.setattr(snapshot_take, "take_in_subprocess", take_here)


def test_filling_writes_the_layout_and_raw_indices_the_claims_compare_measured_on_the_builder(
    write_record, snapshots_in_this_process
):
    kb = write_record(STAGING)
    result = CliRunner().invoke(
        main,
        ["snapshot", "--kb", str(kb), "--record", "7", "--fill-expects", "--release", INSTALLED],
    )
    assert result.exit_code == 0, result.output
    assert (
        "wrote the expect of 2 case(s)" in result.output and "staged, decode_new" in result.output
    )
    filled = load_record(kb / "7.yaml")  # strict: every equivalence case states an expect
    staged = filled.case("staged").expect
    # The values of kb/full_graph_staging.yaml's full_spec_staged (0.31.0 on).
    assert staged["persistent_views"] == [
        "non_spec_token_indx",
        "num_accepted_tokens",
        "spec_query_start_loc",
        "spec_sequence_masks",
        "spec_state_indices_tensor",
        "spec_token_indx",
    ]
    assert staged["spec_state_indices_tensor"] == [[1, 2, 3], [17, 18, 19], [0, 0, 0]]
    assert staged["path"] == "spec" and staged["num_spec_decode_tokens"] == 5  # the core fields too
    assert (
        "noncontiguous" not in staged and "reorder_batch_threshold" not in staged
    )  # no claim compares them
    new = filled.case("decode_new").expect
    assert new["non_spec_state_indices_tensor"] == [1, 17, 0] and "persistent_views" not in new
    assert (
        filled.case("decode_stated").expect
        == parse_record(STAGING, "7.yaml", expects_optional=True).case("decode_stated").expect
    )  # untouched
    # Deterministic: the block's fields in full_expect's order.
    assert list(staged)[-2:] == ["spec_state_indices_tensor", "persistent_views"]


def test_as_expect_prints_every_field_measured_layout_raw_indices_builder_and_server_fields(
    write_record, snapshots_in_this_process
):
    import typing

    from gdn_review.kb.types import ServerExpectField

    kb = write_record(STAGING)
    result = CliRunner().invoke(
        main,
        [
            "snapshot",
            "--kb",
            str(kb),
            "--record",
            "7",
            "--case",
            "decode_stated",
            "--as-expect",
            "--release",
            INSTALLED,
        ],
    )
    assert result.exit_code == 0, result.output
    # (torch's import warnings come first where this test is the first to import it)
    lines = result.output.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("# expect of")) :]
    assert lines[0].startswith(
        f"# expect of case decode_stated, measured on vLLM {INSTALLED} (cpu)"
    )
    # A field this release's builder lacks is named, not offered (0.34.0: kernel_block_size).
    notes = [line for line in lines[1:] if line.startswith("#")]
    assert all(line.startswith("# left out, not on this release's builder: ") for line in notes)
    lines = [lines[0], *lines[1 + len(notes) :]]
    assert lines[1] == "expect:" and "(no such field" not in result.output
    printed = {line.split(":", 1)[0].strip() for line in lines[2:]}
    # What the case states, measured on the real builder (kb/full_graph_staging.yaml's
    # full_decode_staged).
    assert "  persistent_views: [non_spec_query_start_loc, non_spec_state_indices_tensor]" in lines
    assert "  non_spec_state_indices_tensor: [1, 17, 0]" in lines
    # And everything else the harness can measure for it.
    assert {
        "path",
        "num_decodes",
        "spec_state_indices_tensor",
        "prefill_state_indices",
        "noncontiguous",
        "reorder_batch_threshold",
        *typing.get_args(ServerExpectField),
    } <= printed
    assert "  noncontiguous: []" in lines and "  reorder_batch_threshold: 1" in lines
    # A complete block to paste: the record with it in place of the case's expect loads and states
    # it.
    stated = (
        "      path: non_spec\n      persistent_views: "
        "[non_spec_query_start_loc, non_spec_state_indices_tensor]\n     "
        " non_spec_state_indices_tensor: [1, 17, 0]\n"
    )
    assert stated in STAGING
    pasted = STAGING.replace(
        "    expect:\n" + stated, "".join(f"    {line}\n" for line in lines[1:])
    )
    assert parse_record(pasted, "7.yaml", expects_optional=True).case("decode_stated").expect[
        "persistent_views"
    ] == ["non_spec_query_start_loc", "non_spec_state_indices_tensor"]


def test_a_step_case_needs_the_fields_that_compare_its_groups(write_record):
    from gdn_review.kb import load_record
    from gdn_review.run.fill_expects import case_fields

    text = (
        (ROOT / "kb" / "52297.yaml")
        .read_text(encoding="utf-8")
        .replace("      group_differences: [[]]\n", "", 1)
    )  # mixed_step's
    record = load_record(write_record(text, "52297.yaml") / "52297.yaml")
    assert case_fields(record, "mixed_step") == {
        "group_state_tables": "its expect states it",
        "group_differences": "a step compares its groups",
    }
    assert list(case_fields(record, "mixed_batch")) == []  # one build(): no groups to compare


# An open PR's record of class-level declarations (kb/53929.yaml's shape): call cases only.
OPEN_CALLS = textwrap.dedent(
    """\
    schema_version: 2
    pr:
      number: 7
      repo: vllm-project/vllm
      title: An open PR
      state: open
    target:
      file: vllm/v1/attention/backends/gdn_attn.py
      symbol: GDNAttentionMetadataBuilder.build
      base_release: 0.33.0
    claims:
      - id: C1
        text: The backend declares it.
        before: fails
        check: {kind: equivalence, cases: [declared]}
      - id: C2
        text: The bound.
        before: fails
        check: {kind: equivalence, cases: [bound]}
    cases:
      - id: declared
        text: The backend's classmethod.
        call:
          function: GDNAttentionBackend.supports_device_cpu_query_lens_mismatch
      - id: bound
        text: The builder's classmethod, k=2.
        speculative_tokens: 2
        call:
          function: GDNAttentionMetadataBuilder.get_varlen_cudagraph_max_query_len
    risks: []
    """
)


def test_a_call_case_is_filled_with_what_it_returned_or_raised(
    write_record, snapshots_in_this_process
):
    # Found by a new user's trial (issue 55): the blocks of call cases were empty (no batch
    # field is measured there), so the filled record would not load and nothing was written.
    kb = write_record(OPEN_CALLS)
    result = CliRunner().invoke(
        main, ["snapshot", "--kb", str(kb), "--record", "7", "--fill-expects"]
    )
    assert result.exit_code == 0, result.output
    # An open PR has no head release: the note says so (not "no claim states before").
    assert "fixes (before: fails) of an open PR, which has no head release" in result.output
    filled = load_record(kb / "7.yaml")
    for case_id in ("declared", "bound"):
        expect = filled.case(case_id).expect
        assert set(expect) == {"returned", "raised"} and expect["raised"] is None, expect


def test_a_field_the_release_s_builder_lacks_is_not_offered_as_an_expect():
    # 0.34.0's builder has no kernel_block_size: the printed block left "(no such field: ...)" to
    # paste, a value no other release measures (found by a new user's trial, issue 55).
    measured = {
        "path": "spec",
        "kernel_block_size": "(no such field: AttributeError: 'B' object has no attribute 'x')",
        "reorder_batch_threshold": 3,
    }
    assert snapshot_take.absent_fields(measured) == ["kernel_block_size"]
    assert snapshot_take.full_expect(measured) == {"path": "spec", "reorder_batch_threshold": 3}
