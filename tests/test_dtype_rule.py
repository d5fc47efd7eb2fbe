"""The dtype rule: a tensor is its values, its dtype and its shape, in every comparison.

Real builds of real cases (the installed vLLM, in this process), one tensor cast to another
dtype as a changed builder would return it: the snapshot comparison, the expect
(equivalence) comparison, the differential comparison, a whole-dict comparison of two runs
and the matrix's drift must each name it. And the table of usual dtypes is what the real
builder returns.
"""

from __future__ import annotations

import collections
import copy

import pytest
import torch

from gdn_review import harness
from gdn_review.common import snapshots
from gdn_review.common.record_format import BATCH_DEPENDENT_DTYPES
from gdn_review.common.snapshots import explicit_form
from gdn_review.harness import case_build, values
from gdn_review.kb import load_record
from gdn_review.matrix import matrix_report
from gdn_review.run import snapshot_take
from tests.conftest import ROOT

RECORD = ROOT / "kb" / "52078.yaml"


def _case(case_id: str) -> dict:
    return load_record(RECORD).case_inputs()[case_id]


def _real_and_cast(case_id: str, field: str, dtype) -> tuple[dict, dict]:
    """The snapshot of the real build of a case of #52078, and of the same metadata with
    ``field`` cast to ``dtype`` (what a builder that changed the field's dtype returns)."""
    case = _case(case_id)
    builder, settings = case_build._builder_after("cpu", case)
    metadata, _ = case_build._run_entry(builder, case, settings)
    columns = settings.block_table_columns
    real = values.snapshot(metadata, columns)
    cast = copy.copy(metadata)
    setattr(cast, field, getattr(metadata, field).to(dtype))
    return real, values.snapshot(cast, columns)


def test_a_cast_tensor_differs_in_the_snapshot_comparison():
    real, cast = _real_and_cast("pure_spec_decode", "num_accepted_tokens", torch.int64)
    assert list(cast["num_accepted_tokens"]) == list(real["num_accepted_tokens"])
    # As `gdn-review snapshot` stores it, and as harness.stored_snapshot reads it back (with
    # the table it was taken with, every dtype stated).
    stored = explicit_form(harness.stored_form(real), None, values.USUAL_DTYPES)
    assert harness.snapshot_differences(real, stored) == {}
    differences = harness.snapshot_differences(cast, stored)
    assert list(differences) == ["num_accepted_tokens"]
    assert harness.describe_differences(differences, "stored") == (
        "num_accepted_tokens: dtype int64, stored int32"
    )


def test_a_cast_tensor_differs_in_the_expect_comparison():
    record = load_record(RECORD)
    assert record.schema_version == 2  # the current format: a list has its usual dtype
    expect = record.case("pure_spec_decode").expect
    assert "num_accepted_tokens" in expect
    real, cast = _real_and_cast("pure_spec_decode", "num_accepted_tokens", torch.int64)
    # What the generated equivalence test compares (templates/checks/equivalence.py.j2).
    compare = harness.expect_differences
    assert compare({f: real[f] for f in expect}, expect, record.schema_version) == {}
    differences = compare({f: cast[f] for f in expect}, expect, record.schema_version)
    assert harness.describe_differences(differences) == (
        "num_accepted_tokens: dtype int64, expected int32"
    )


def test_a_cast_tensor_differs_in_whole_dict_and_differential_comparisons():
    real, cast = _real_and_cast("spec_decode_and_prefill", "spec_query_start_loc", torch.int64)
    # What check_deterministic and capture_matches_build compare: two runs' whole dicts.
    assert real == copy.deepcopy(real) and real != cast
    # An invariant that computes a field's values itself still compares values only.
    assert cast["spec_query_start_loc"] == list(real["spec_query_start_loc"])
    for compare in ("equal", "prefix"):
        differences = harness.field_differences(
            real, cast, ["spec_query_start_loc", "num_decodes"], compare
        )
        assert list(differences) == ["spec_query_start_loc"], compare
        assert harness.describe_differences(differences, "cast") == (
            "spec_query_start_loc: dtype int32, cast int64"
        )


def test_a_dtype_drift_between_releases_is_named_and_attributed():
    record = load_record(RECORD)
    old_cases, new_cases = {}, {}
    for case_id in ("pure_spec_decode", "all_spec_rows_zero_drafts"):
        real, cast = _real_and_cast(case_id, "num_accepted_tokens", torch.int64)
        old_cases[case_id], new_cases[case_id] = (
            harness.stored_form(real),
            harness.stored_form(cast),
        )

    def document(release, cases):
        taken = {"release": release, "device": "cpu", "cases": cases}
        return snapshots.document(52078, {**taken, "usual_dtypes": values.USUAL_DTYPES})

    # #56531 (from 0.32.0) states that it changed all_spec_rows_zero_drafts; nothing
    # recorded changed pure_spec_decode.
    drift = matrix_report.drift_data(
        record,
        [("0.31.0", document("0.31.0", old_cases)), ("0.32.0", document("0.32.0", new_cases))],
        {56531},
    )
    rows = {row["case"]: row for row in drift["rows"]}
    assert set(rows) == {"pure_spec_decode", "all_spec_rows_zero_drafts"}
    for row in rows.values():
        assert row["fields"] == ["num_accepted_tokens"]
        assert row["changes"] == ["num_accepted_tokens: dtype int32 → int64"]
    assert rows["all_spec_rows_zero_drafts"]["explained_by"][0]["number"] == 56531
    assert [row["case"] for row in drift["unexplained"]] == ["pure_spec_decode"]


def test_shape_is_compared_where_the_values_do_not_imply_it():
    empty_rows = values.plain(torch.zeros((0, 3), dtype=torch.int32))
    empty = values.plain(torch.zeros((0,), dtype=torch.int32))
    assert list(empty_rows) == list(empty) == [] and empty_rows != empty
    field = "spec_state_indices_tensor"
    assert values.stored_form({field: empty})[field] == []
    assert values.stored_form({field: empty_rows})[field] == {
        "dtype": "int32",
        "shape": [0, 3],
        "values": [],
    }
    # An expect of the current format (2): a list has its usual dtype and implied shape.
    differences = harness.expect_differences({field: empty_rows}, {field: []}, 2)
    assert harness.describe_differences(differences) == f"{field}: shape [0, 3], expected [0]"
    # [3, 0] is what its values say ([[], [], []]): stored as them.
    assert values.stored_form({field: values.plain(torch.zeros((3, 0), dtype=torch.int32))}) == {
        field: [[], [], []]
    }


def test_a_tensor_of_a_field_without_a_usual_dtype_states_it_and_pickles_whole():
    import pickle

    tensor = values.plain(torch.tensor([1, 2], dtype=torch.int16))
    assert values.stored_form({"unknown_field": tensor}) == {
        "unknown_field": {"dtype": "int16", "values": [1, 2]}
    }
    again = pickle.loads(pickle.dumps(tensor))
    assert again == tensor and again.dtype == "int16" and again.shape == [2]


def test_fill_expects_writes_a_dtype_only_where_it_is_not_the_fields_usual_one():
    # A mixed batch: build() sorts the token mask, so its token indices are int64.
    taken = snapshot_take.take({"spec_decode_and_prefill": _case("spec_decode_and_prefill")})
    assert taken["usual_dtypes"] == values.USUAL_DTYPES
    measured = taken["cases"]["spec_decode_and_prefill"]
    block = snapshot_take.expect_block(snapshot_take.core_expect(measured))
    token_lines = [line for line in block if "token_indx" in line]
    assert token_lines and all("{dtype: int64, values: [" in line for line in token_lines)
    assert any(line.startswith("  num_accepted_tokens: [") for line in block)
    # The record states them so, and loads.
    expect = load_record(RECORD).case("spec_decode_and_prefill").expect
    assert expect["spec_token_indx"]["dtype"] == "int64"


def test_an_expect_states_a_tensor_form_and_nothing_else_of_a_dict():
    from gdn_review.kb.types import _plain_value

    form = {"dtype": "int64", "values": [0, 1], "shape": [2]}
    assert _plain_value(form) == form
    for bad in (
        {"dtype": "int64"},
        {"values": [1], "dtype": 64},
        {"dtype": "int8", "values": [], "x": 1},
    ):
        with pytest.raises(ValueError, match="a tensor as"):
            _plain_value(bad)


def test_the_usual_dtypes_are_what_the_real_builder_returns():
    """Every tensor every kb case's build returns (every part measured) has its field's
    usual dtype; the token indices, whose dtype depends on the batch, have none."""
    from gdn_review.kb import load_kb

    found = collections.defaultdict(set)

    def walk(value, name):
        if isinstance(value, values.Tensor):
            found[name].add(value.dtype)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, str(key))
        elif isinstance(value, list):
            for item in value:
                walk(item, name)

    for record in load_kb(ROOT / "kb").values():
        for case in snapshot_take.every_field(record.case_inputs()).values():
            if harness.release_in_range(case.get("releases")):
                try:
                    walk(harness.snapshot_case("cpu", case), None)
                except pytest.skip.Exception:
                    continue
    assert found, "no tensor measured"
    unusual = {
        name: dtypes - {values.USUAL_DTYPES[name]}
        for name, dtypes in found.items()
        if name in values.USUAL_DTYPES and dtypes - {values.USUAL_DTYPES[name]}
    }
    assert unusual == {}
    # The token indices have no usual dtype: both occur, by batch (int64 where build()
    # argsorts the token mask), so the table does not guess one.
    assert {name: found[name] for name in BATCH_DEPENDENT_DTYPES} == {
        "non_spec_token_indx": {"int32", "int64"},
        "spec_token_indx": {"int32", "int64"},
    }
    assert not set(BATCH_DEPENDENT_DTYPES) & set(values.USUAL_DTYPES)


def test_snapshot_stored_takes_no_record_and_a_record_is_needed_without_it():
    from click.testing import CliRunner

    from gdn_review.cli import main

    result = CliRunner().invoke(main, ["snapshot", "--stored", "--record", "52078"])
    assert result.exit_code == 2 and "--stored takes no other option" in result.output
    result = CliRunner().invoke(main, ["snapshot"])
    assert result.exit_code == 2 and "Missing option '--record'" in result.output


@pytest.mark.parametrize("field", ["spec_token_indx", "non_spec_token_indx"])
def test_int64_token_indices_turned_int32_are_caught_by_the_snapshot_and_the_expect(field):
    """A mixed batch's token indices are int64 (argsort); a builder that returned them int32
    fails the stored snapshot (read as the generated test reads it) and the record's current
    format expect, each naming the dtype; the real build passes both (and back: int32 to
    int64 is test_a_cast_tensor_differs_in_the_snapshot_comparison)."""
    case_id = "spec_decode_and_prefill"
    real, cast = _real_and_cast(case_id, field, torch.int32)
    stored, why = harness.stored_snapshot(
        str(ROOT / "generated_tests" / "test_pr_52078.py"),
        "../kb/snapshots/52078",
        52078,
        case_id,
        "cpu",
    )
    assert stored is not None, why
    assert harness.snapshot_differences(real, stored) == {}
    changed = harness.snapshot_differences(cast, stored)
    assert harness.describe_differences(changed, "stored") == f"{field}: dtype int32, stored int64"
    record = load_record(RECORD)
    expect = record.case(case_id).expect
    compare = harness.expect_differences
    assert compare({f: real[f] for f in expect}, expect, record.schema_version) == {}
    changed = compare({f: cast[f] for f in expect}, expect, record.schema_version)
    assert harness.describe_differences(changed) == f"{field}: dtype int32, expected int64"
