"""`gdn-review snapshot --fill-expects`: missing expect blocks written into a record's YAML, comments kept."""

from __future__ import annotations

import re
import textwrap

import pytest
from click.testing import CliRunner
from conftest import MINIMAL, ROOT

from gdn_review.cli import main
from gdn_review.kb import RecordErrors, load_record, parse_record
from gdn_review.run.fill_expects import (
    check_filled,
    default_release,
    insert_expects,
    needing_expect,
)
from gdn_review.run.snapshot import SnapshotError

EQUIVALENCE = MINIMAL.replace(
    "cases:\n",
    "  - id: C2\n    text: Same metadata.\n    check: {kind: equivalence, cases: [spec, plain]}\ncases:\n",
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
    assert any("case 'spec' states no expect" in m and "run gdn-review snapshot --record 7 --fill-expects" in m for m in messages), messages
    record = parse_record(EQUIVALENCE, "7.yaml", expects_optional=True)
    assert needing_expect(record) == ["spec", "plain"]
    assert needing_expect(record, ["plain"]) == ["plain"]
    with pytest.raises(SnapshotError, match="no case 'nope'"):
        needing_expect(record, ["nope"])


def test_blocks_go_after_each_case_s_last_line_indented_as_its_keys_comments_kept():
    expects = {"spec": {"path": "spec", "spec_state_cells": [[[0, 1]], [[1, 2]]]}, "plain": {"path": "non_spec", "non_spec_state_rows": None}}
    text = insert_expects(EQUIVALENCE, "7.yaml", expects)
    before = parse_record(EQUIVALENCE, "7.yaml", expects_optional=True)
    check_filled(text, "7.yaml", before, expects)  # loads, validates, states exactly these
    assert parse_record(text, "7.yaml").case("spec").expect == expects["spec"]
    # Nothing but the blocks was added: every line of the original is kept, in order.
    added = [line for line in text.splitlines() if line not in EQUIVALENCE.splitlines()]
    assert added == ["    expect:", "      path: spec", "      spec_state_cells: [[[0, 1]], [[1, 2]]]",
                     "    expect:", "      path: non_spec", "      non_spec_state_rows: null"]
    kept = [line for line in text.splitlines() if line not in added]
    assert kept == [line for line in EQUIVALENCE.splitlines() if line not in added]
    # The second block sits after the case's rows, before the comment that follows them.
    assert "        query_len: 10\n    expect:\n      path: non_spec\n      non_spec_state_rows: null\n    # a comment after" in text
    # An empty `expect: {}` is replaced, not doubled; a file without a final newline gets one.
    empty = EQUIVALENCE.replace("      - {seq_len: 12, query_len: 3, drafted: 2}\n", "      - {seq_len: 12, query_len: 3, drafted: 2}\n    expect: {}\n")
    assert empty != EQUIVALENCE
    filled = insert_expects(empty.rstrip("\n"), "7.yaml", {"spec": {"path": "spec"}})
    assert "expect: {}" not in filled and filled.count("expect:") == 1 and filled.endswith("\n")


def test_a_flow_style_case_or_an_edit_that_does_not_round_trip_is_refused():
    flow = EQUIVALENCE.replace("  - id: spec\n", "  - {id: other, text: x, rows: [{seq_len: 4, query_len: 4}]}\n  - id: spec\n")
    with pytest.raises(SnapshotError, match=r"7.yaml:\d+:5: cases\[0\]: case 'other' is written in flow style"):
        insert_expects(flow, "7.yaml", {"other": {"path": "non_spec"}})
    before = parse_record(EQUIVALENCE, "7.yaml", expects_optional=True)
    with pytest.raises(SnapshotError, match="would not state the measured expects of spec"):
        check_filled(insert_expects(EQUIVALENCE, "7.yaml", {"spec": {"path": "spec"}}), "7.yaml", before, {"spec": {"path": "non_spec"}})


def test_usage_errors_and_nothing_to_fill():
    runner = CliRunner()
    result = runner.invoke(main, ["snapshot", "--kb", str(ROOT / "kb"), "--record", "52078", "--print"])
    assert result.exit_code == 2 and "--fill-expects" in result.output
    done = runner.invoke(main, ["snapshot", "--kb", str(ROOT / "kb"), "--record", "52078", "--fill-expects"])
    assert done.exit_code == 0 and "no case needs an expect" in done.output


@pytest.mark.slow  # one subprocess that imports vLLM and builds every case (about 20 s)
def test_filling_a_record_without_expects_gives_back_its_values_with_its_comments(tmp_path):
    original_path = ROOT / "kb" / "34871.yaml"  # 8 cases, each in an equivalence check, each with a one-line expect
    original = load_record(original_path)
    text = original_path.read_text(encoding="utf-8")
    stripped = re.sub(r"\n    expect: \{[^\n]*\}", "", text)
    assert stripped.count("expect:") == 0 and stripped.count("#") == text.count("#")
    kb = tmp_path / "kb"
    kb.mkdir()
    path = kb / "34871.yaml"
    path.write_text(stripped, encoding="utf-8")

    # The installed release (the record's claims are fixes, so the default would be its head release, 0.18.0).
    result = CliRunner().invoke(main, ["snapshot", "--kb", str(kb), "--record", "34871", "--fill-expects", "--release", "0.33.0"])
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
    holds = parse_record(EQUIVALENCE.replace("    text: Same metadata.\n", "    text: Same metadata.\n    before: holds\n"), "7.yaml", expects_optional=True)
    assert default_release(holds, ["spec"])[0] == "0.28.0"  # no change: what the release without the PR builds
    fails = parse_record(EQUIVALENCE.replace("    text: Same metadata.\n", "    text: Same metadata.\n    before: fails\n"), "7.yaml", expects_optional=True)
    assert default_release(fails, ["spec"])[0] == "0.29.0"  # a fix: what the PR builds
    both = EQUIVALENCE.replace("    text: Same metadata.\n", "    text: Same metadata.\n    before: holds\n").replace(
        "cases:\n", "  - id: C3\n    text: Fixed.\n    before: fails\n    check: {kind: equivalence, cases: [spec]}\ncases:\n", 1)
    with pytest.raises(SnapshotError, match="give --release"):
        default_release(parse_record(both, "7.yaml", expects_optional=True), ["spec"])
