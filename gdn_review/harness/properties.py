"""Invariant properties of ``build()``: ``_check_<property>(batch, run)`` asserts one.

The standalone modules of ``gdn-review export`` copy these functions verbatim.
They are the same functions (the same syntax tree, ``harness.build_case`` read
as ``build_case``) as those ``templates/checks/invariant.py.j2`` writes into
the generated suite; tests/test_export.py fails when the two drift apart.
"""

from __future__ import annotations

from gdn_review.harness.run import build_case


def _real_rows(rows):
    """State-index rows without NULL_BLOCK_ID (-1): CUDA-graph padding is not a row."""
    return [row for row in (rows or []) if row != -1]


def _check_fallback_condition(batch, run):
    # The old condition: fall back unless a speculating row drafted at least one token.
    drafted = [
        row["drafted"] for row in batch["rows"] if row.get("drafted") is not None
    ]
    falls_back = (
        batch.get("speculative_tokens") is None
        or batch.get("drafts", "given") == "none"
        or sum(drafted) == 0
    )
    path = run.metadata["path"]
    assert (path == "non_spec") == falls_back, (
        f"path {path!r}, but the old condition says fall back = {falls_back}"
    )


def _check_fallback_without_speculating_rows(batch, run):
    # The rule since vLLM 0.32 (PR #56531): fall back only when no row speculates.
    speculating = [row for row in batch["rows"] if row.get("drafted") is not None]
    falls_back = (
        batch.get("speculative_tokens") is None
        or batch.get("drafts", "given") == "none"
        or not speculating
    )
    path = run.metadata["path"]
    assert (path == "non_spec") == falls_back, (
        f"path {path!r}, but no-speculating-row rule says fall back = {falls_back}"
    )


def _check_partition(batch, run):
    spec = _real_rows(run.metadata["spec_state_rows"])
    non_spec = _real_rows(run.metadata["non_spec_state_rows"])
    assert len(spec) == len(set(spec)) and len(non_spec) == len(set(non_spec)), (
        "a row appears twice"
    )
    assert not set(spec) & set(non_spec), (
        f"rows on both paths: {sorted(set(spec) & set(non_spec))}"
    )
    missing = set(range(run.rows)) - set(spec) - set(non_spec)
    assert not missing, f"rows on neither path: {sorted(missing)}"


def _check_spec_rows_match_drafts(batch, run):
    if run.metadata["path"] != "spec":
        return
    speculating = [
        i for i, row in enumerate(batch["rows"]) if row.get("drafted") is not None
    ]
    assert _real_rows(run.metadata["spec_state_rows"]) == speculating
    assert run.metadata["num_spec_decodes"] == len(speculating)
    accepted = [batch["rows"][i].get("accepted", 1) for i in speculating]
    assert run.metadata["num_accepted_tokens"][: len(speculating)] == accepted
    # Each spec row reads k + 1 consecutive state slots of its own block-table row.
    for row, cells in zip(speculating, run.metadata["spec_state_cells"]):
        assert [cell[0] for cell in cells] == [row] * (
            batch["speculative_tokens"] + 1
        ), f"row {row} reads {cells}"
        first = cells[0][1]
        assert [cell[1] for cell in cells] == list(range(first, first + len(cells))), (
            f"row {row} reads {cells}"
        )
    # The spec token indices are exactly the tokens of the spec rows, in order.
    starts = [0]
    for row in batch["rows"]:
        starts.append(starts[-1] + row["query_len"])
    spec_tokens = [t for i in speculating for t in range(starts[i], starts[i + 1])]
    if run.metadata["spec_token_indx"] is not None:
        assert run.metadata["spec_token_indx"] == spec_tokens, (
            "spec_token_indx selects other tokens"
        )
    if run.metadata["non_spec_token_indx"] is not None:
        others = [t for t in range(starts[-1]) if t not in set(spec_tokens)]
        assert run.metadata["non_spec_token_indx"] == others, (
            "non_spec_token_indx selects other tokens"
        )


def _check_counts_add_up(batch, run):
    m = run.metadata
    tokens = sum(row["query_len"] for row in batch["rows"])
    counted = (
        m["num_prefill_tokens"] + m["num_decode_tokens"] + m["num_spec_decode_tokens"]
    )
    assert counted == tokens, f"{counted} tokens counted, batch has {tokens}"
    # Every real row is counted once; zero-length padding may count as a decode
    # on the non-speculative path (vLLM sizes CUDA graphs by it).
    requests = m["num_prefills"] + m["num_decodes"] + m["num_spec_decodes"]
    assert run.rows <= requests <= run.rows + run.padded_rows, (
        f"{requests} requests counted, batch has {run.rows} (+{run.padded_rows} padded)"
    )
    assert not (m["num_decodes"] > 0 and m["num_spec_decodes"] > 0), (
        "plain and spec decodes together"
    )


def _check_indices_in_bounds(batch, run):
    m = run.metadata
    total_rows = run.rows + run.padded_rows
    for key in ("spec_state_rows", "non_spec_state_rows", "prefill_state_rows"):
        for row in _real_rows(m.get(key)):
            assert 0 <= row < total_rows, f"{key} selects row {row} of {total_rows}"
    tokens = sum(row["query_len"] for row in batch["rows"])
    for key in ("spec_query_start_loc", "non_spec_query_start_loc"):
        starts = m.get(key)
        if starts:
            assert starts[0] == 0 and all(a <= b for a, b in zip(starts, starts[1:])), (  # noqa: RUF007
                f"{key} {starts}"
            )
            assert starts[-1] <= tokens, (
                f"{key} ends at {starts[-1]} of {tokens} tokens"
            )
    spec_tokens, non_spec_tokens = (
        m.get("spec_token_indx"),
        m.get("non_spec_token_indx"),
    )
    if spec_tokens is not None and non_spec_tokens is not None:
        everything = sorted(spec_tokens + non_spec_tokens)
        assert (
            everything == list(range(len(everything))) and len(everything) <= tokens
        ), "token indices overlap or leave gaps"


def _check_deterministic(batch, run):
    again = build_case(run.device, batch, count_ops=False)
    assert again.metadata == run.metadata, "two builds of the same batch differ"
