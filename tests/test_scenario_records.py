"""Scenario fields in records: what validate refuses (file:line:col), and what it accepts.

A combination that can never run is a record error; one that needs what is absent
here (CUDA, a later release's API) is a skip at run time (tests/test_scenarios.py).
"""

from __future__ import annotations

import pytest

from gdn_review.generate import module_context
from gdn_review.kb import RecordErrors, is_draft, parse_record
from tests.conftest import MINIMAL


def with_cases(*cases: str, symbol: str | None = None, checked: str = "spec") -> str:
    """MINIMAL with these cases first (each an item of `cases:`, 2-space indented)."""
    text = MINIMAL.replace("cases:\n  - id: spec\n", "cases:\n" + "".join(cases) + "  - id: spec\n")
    text = text.replace("    cases: [spec]\ncases:", f"    cases: [{checked}]\ncases:")
    if symbol:
        text = text.replace("symbol: GDNAttentionMetadataBuilder.build", f"symbol: {symbol}")
    return text


def case(case_id: str, *lines: str, rows: tuple[str, ...] = ("{seq_len: 9, query_len: 1}",)) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"  - id: {case_id}\n    text: A case.\n{body}    rows:\n" + "".join(
        f"      - {row}\n" for row in rows
    )


def errors(text: str) -> list[str]:
    with pytest.raises(RecordErrors) as failure:
        parse_record(text, "7.yaml")
    return [str(e) for e in failure.value.errors]


def test_a_capture_case_must_not_state_drafts():
    text = with_cases(
        case(
            "cap",
            "speculative_tokens: 2",
            "entry: capture",
            rows=("{seq_len: 3, query_len: 3, drafted: 2}",),
        )
    )
    assert errors(text) == [
        "7.yaml:26:45: cases[0].rows[0].drafted: a capture case derives "
        "drafted from the query lengths "
        "(build_for_cudagraph_capture); leave drafted out"
    ]


def test_a_capture_case_must_fit_the_graph_buffers():
    rows = ("{seq_len: 3, query_len: 3}",) * 3
    text = with_cases(
        case(
            "cap",
            "speculative_tokens: 2",
            "entry: capture",
            "max_cudagraph_capture_size: 6",
            rows=rows,
        )
    )
    assert errors(text) == [
        "7.yaml:27:7: cases[0].rows: capture asserts 3 requests and 9 "
        "tokens <= decode_cudagraph_max_bs 6 "
        "(max_num_seqs * (k + 1), capped by max_cudagraph_capture_size)"
    ]


def test_after_must_name_a_case_of_the_same_builder_and_never_loop():
    found = errors(
        with_cases(
            case("big", "speculative_tokens: 3"),
            case("chained", "speculative_tokens: 2", "after: [spec]"),
            case("later", "speculative_tokens: 2", "after: [nope, big, later, chained]"),
        )
    )
    # 'chained' has its own after: chains of any depth are fine
    assert found == [
        "7.yaml:35:13: cases[2].after[0]: no case with id 'nope' (known: "
        "big, chained, later, spec)",
        "7.yaml:35:19: cases[2].after[1]: case 'big' needs another "
        "builder (speculative_tokens differ): builds after one another "
        "share one builder",
        "7.yaml:35:24: cases[2].after[2]: case 'later' is built before "
        "'later' and after it: after chains must not loop",
    ]


def test_host_lengths_are_upper_bounds_given_one_way():
    text = with_cases(
        case(
            "host", "host_seq_len_offset: 2", rows=("{seq_len: 9, query_len: 1, host_seq_len: 8}",)
        )
    )
    assert errors(text) == [
        "7.yaml:25:50: cases[0].rows[0].host_seq_len: give host_seq_len "
        "per row or host_seq_len_offset for the case, not both",
        "7.yaml:25:50: cases[0].rows[0].host_seq_len: host_seq_len 8 < "
        "seq_len 9: the host's length is an upper bound",
    ]


def test_block_table_offsets_keep_entries_readable():
    text = with_cases(case("offset", "block_table_offset: 2500"))
    assert errors(text) == [
        "7.yaml:23:25: cases[0].block_table_offset: Input should be a multiple of 10000 (got 2500)"
    ]


def test_a_target_symbol_no_check_reaches_is_named():
    capture = case(
        "cap", "speculative_tokens: 2", "entry: capture", rows=("{seq_len: 3, query_len: 3}",)
    )
    symbol = "GDNAttentionMetadataBuilder.build_for_cudagraph_capture"
    assert errors(with_cases(capture, symbol=symbol)) == [
        "7.yaml:10:11: target.symbol: no check reaches "
        "GDNAttentionMetadataBuilder.build_for_cudagraph_capture: "
        "check a case with `entry: capture` (or the invariant "
        "capture_matches_build); build() alone never calls it"
    ]
    # a check of a capture case reaches it
    parse_record(with_cases(capture, symbol=symbol, checked="spec, cap"), "7.yaml")


def test_a_differential_check_compares_two_known_cases():
    claim = (
        "  - id: C9\n    text: Same.\n    check:\n      kind: "
        "differential\n      pairs: [[spec, spec], [spec, ghost]]\n      "
        "fields: [num_spec_decodes]\n"
    )
    found = errors(MINIMAL.replace("cases:\n  - id: spec\n", claim + "cases:\n  - id: spec\n"))
    assert found == [
        "7.yaml:24:22: claims[1].check.pairs[0][1]: a differential check "
        "compares two different cases",
        "7.yaml:24:36: claims[1].check.pairs[1][1]: no case with id 'ghost' (known: spec)",
    ]


def test_upstream_tests_name_cases_and_claims_of_the_record():
    text = (
        MINIMAL
        + 'upstream_tests:\n  - {test: "tests/v1/x.py::test_a", cases: [nope], claims: [C1]}\n'
    )
    assert errors(text) == [
        "7.yaml:33:45: upstream_tests[0].cases[0]: no case with id 'nope' (known: spec)"
    ]


def test_an_open_pr_needs_no_head_release_and_its_cases_state_what_they_need():
    text = MINIMAL.replace("  head_release: 0.29.0\n", "").replace(
        "  title: A small PR\n", "  title: A small PR\n  state: open\n"
    )
    text = text.replace(
        "    speculative_tokens: 2\n    rows:",
        "    speculative_tokens: 2\n    needs: [spec_decode_src_indices]\n    rows:",
    )
    record = parse_record(text, "7.yaml")
    assert not is_draft(record)
    assert module_context(record, "kb/7.yaml")["cases"]["spec"]["needs"] == [
        "spec_decode_src_indices"
    ]
    merged = parse_record(MINIMAL.replace("  head_release: 0.29.0\n", ""), "7.yaml")
    assert is_draft(merged)  # a merged PR without a head release is still open work


def test_after_is_resolved_into_batches_and_defaults_stay_out_of_the_module():
    big = case(
        "big",
        "speculative_tokens: 2",
        "cudagraph_mode: FULL",
        rows=("{seq_len: 9, query_len: 3, drafted: 2}",),
    )
    later = case(
        "later",
        "speculative_tokens: 2",
        "cudagraph_mode: FULL",
        "after: [big]",
        rows=("{seq_len: 9, query_len: 3, drafted: 2}",),
    )
    cases = module_context(parse_record(with_cases(big, later), "7.yaml"), "kb/7.yaml")["cases"]
    assert cases["later"]["after"] == [cases["big"]]
    # A case without scenario fields renders exactly as before they existed.
    assert set(cases["spec"]) == {
        "id",
        "drafts",
        "max_num_seqs",
        "padded_rows",
        "rows",
        "speculative_tokens",
    }
