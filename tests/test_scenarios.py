"""Scenario fields of a case reach vLLM's real builder (CPU here).

Each test changes one field and asserts what only that field can change in the
builder's output (or in what vLLM itself raises): a harness that dropped the
field would build the case as if it were absent, and the test would fail.
The scenario invariants are checked on named batches here; the records run
them over random batches (Hypothesis).
"""

from __future__ import annotations

import pytest

from gdn_review import harness
from gdn_review.common import interrupts
from gdn_review.harness.properties import FULL_GRAPH

SPEC_PADDED = {
    "speculative_tokens": 2,
    "padded_rows": 2,
    "rows": [
        {"seq_len": 30, "query_len": 3, "drafted": 2, "accepted": 2},
        {"seq_len": 41, "query_len": 3, "drafted": 2, "accepted": 3},
    ],
}


def build(case, **changes):
    return harness.build_case("cpu", {**case, **changes}, count_ops=False)


def test_cudagraph_mode_stages_into_padded_buffers():
    eager = build(SPEC_PADDED).metadata
    full = build(SPEC_PADDED, cudagraph_mode=FULL_GRAPH).metadata
    assert len(eager["num_accepted_tokens"]) == 2
    assert full["num_accepted_tokens"] == [2, 3, 1, 1]
    assert full["spec_state_indices_tensor"][2:] == [[0, 0, 0], [0, 0, 0]]


def test_mamba_cache_mode_changes_the_state_slots():
    # align: the slots of the sequence's last blocks (seq_len 41 -> column 2);
    # none: the block table's first columns.
    align = build(SPEC_PADDED, mamba_cache_mode="align").metadata["spec_state_cells"]
    none = build(SPEC_PADDED, mamba_cache_mode="none").metadata["spec_state_cells"]
    assert align[1] == [[1, 2], [1, 3], [1, 4]]
    assert none[1] == [[1, 0], [1, 1], [1, 2]]


def test_block_size_changes_the_state_slots():
    # seq_len 41: column (41 - 1) // block_size of the aligned state.
    wide = build(SPEC_PADDED, block_size=32, mamba_cache_mode="align").metadata
    assert wide["spec_state_cells"][1][0] == [1, 1]


def test_max_num_seqs_and_capture_size_limit_staging():
    # decode_cudagraph_max_bs = max_num_seqs * (k + 1), capped by the capture size:
    # 6 spec tokens fit 4 * 3 = 12 but not a cap of 4, nor max_num_seqs 1 (3).
    staged = build(SPEC_PADDED, cudagraph_mode=FULL_GRAPH, max_num_seqs=4).metadata
    capped = build(
        SPEC_PADDED, cudagraph_mode=FULL_GRAPH, max_num_seqs=4, max_cudagraph_capture_size=4
    ).metadata
    assert len(staged["num_accepted_tokens"]) == 4
    assert len(capped["num_accepted_tokens"]) == 2
    one = dict(SPEC_PADDED, rows=SPEC_PADDED["rows"][:1], padded_rows=0)
    assert (
        len(build(one, cudagraph_mode=FULL_GRAPH, max_num_seqs=1).metadata["num_accepted_tokens"])
        == 1
    )


def test_prefill_backend_reaches_vllms_resolution():
    # On CPU vLLM resolves every backend but sycl to triton; sycl it refuses by name.
    with pytest.raises(ValueError, match="sycl"):
        build({"rows": [{"seq_len": 5, "query_len": 5}]}, prefill_backend="sycl")


def test_padded_tokens_count_in_num_actual_tokens():
    assert build(SPEC_PADDED).metadata["num_actual_tokens"] == 6
    assert build(SPEC_PADDED, padded_tokens=5).metadata["num_actual_tokens"] == 11


def test_host_sequence_lengths_reach_the_first_chunk_rule():
    # A one-token first chunk is a prefill (no prior state) unless the host
    # believes the sequence is longer (0.31+: seq_lens_cpu_upper_bound).
    first_chunk = {
        "rows": [
            {"seq_len": 5, "query_len": 1, "prefilling": False},
            {"seq_len": 1, "query_len": 1, "prefilling": True},
        ]
    }
    assert build(first_chunk).metadata["num_prefills"] == 1
    assert build(first_chunk, host_seq_len_offset=3).metadata["num_prefills"] == 0
    rows = [dict(first_chunk["rows"][0]), dict(first_chunk["rows"][1], host_seq_len=2)]
    assert build(first_chunk, rows=rows).metadata["num_prefills"] == 0


def test_block_table_offset_moves_every_state_id():
    plain = build(SPEC_PADDED).metadata["spec_state_indices_tensor"]
    moved = build(SPEC_PADDED, block_table_offset=20000).metadata["spec_state_indices_tensor"]
    assert moved == [[value + 20000 for value in row] for row in plain]


def test_null_padded_blocks_zero_the_padded_rows():
    plain = {"rows": [{"seq_len": 9, "query_len": 1, "prefilling": False}], "padded_rows": 1}
    assert build(plain).metadata["non_spec_state_indices_tensor"][1] != 0
    assert build(plain, null_padded_blocks=True).metadata["non_spec_state_indices_tensor"][1] == 0


def test_capture_derives_drafts_and_accepted_counts_from_query_lengths():
    rows = [{"seq_len": 3, "query_len": 3}, {"seq_len": 3, "query_len": 3}]
    captured = build(SPEC_PADDED, rows=rows, entry="capture").metadata
    assert captured["num_spec_decodes"] == 2
    assert captured["num_accepted_tokens"] == [3, 3]  # capture passes the query lengths


def test_update_block_table_regathers_from_the_second_table():
    run = build(SPEC_PADDED, entry="update_block_table", mamba_cache_mode="none")
    assert run.built["spec_state_indices_tensor"] == [[1, 2, 3], [17, 18, 19]]
    assert run.metadata["spec_state_indices_tensor"] == [
        [10001, 10002, 10003],
        [10017, 10018, 10019],
    ]
    assert run.metadata["spec_state_rows"] == [0, 1]


def test_update_block_table_in_align_mode_needs_the_v2_runners_aligned_indices():
    with pytest.raises(
        pytest.skip.Exception, match="aligned state indices, and the case gives none"
    ):
        build(SPEC_PADDED, entry="update_block_table", mamba_cache_mode="align")


def test_after_builds_first_on_the_same_builder(monkeypatch):
    # The builder's persistent buffers outlive a build: the rows a smaller batch
    # does not touch keep what the earlier batch staged there.
    larger = dict(
        SPEC_PADDED,
        padded_rows=0,
        cudagraph_mode=FULL_GRAPH,
        block_table_offset=30000,
        rows=SPEC_PADDED["rows"] * 2,
    )
    smaller = dict(
        SPEC_PADDED, padded_rows=0, cudagraph_mode=FULL_GRAPH, rows=SPEC_PADDED["rows"][:1]
    )
    seen = []
    original = harness.case_build._run_entry

    def spy(builder, case, settings, other=None):
        seen.append(builder)
        return original(builder, case, settings, other)

    monkeypatch.setattr(harness.case_build, "_run_entry", spy)
    build(smaller, after=[larger])
    assert len(seen) == 2 and seen[0] is seen[1]
    buffer = seen[1].spec_state_indices_tensor
    assert buffer[1].tolist() == [30019, 30020, 30021]  # the larger batch's second row
    build(smaller)
    assert seen[2] is not seen[1]  # a FULL-graph case gets a fresh builder


def test_needs_reads_not_applicable_for_what_the_release_lacks():
    with pytest.raises(
        pytest.skip.Exception, match="not applicable: vLLM .* has no spec_decode_src_indices"
    ):
        build(SPEC_PADDED, needs=["spec_decode_src_indices"])
    build(SPEC_PADDED, needs=["spec_state_indices_tensor", "update_block_table"])


@pytest.mark.parametrize(
    "prop", ["full_graph_tails_neutral", "capture_matches_build", "regather_matches_fresh_build"]
)
@pytest.mark.parametrize(
    "batch",
    [
        SPEC_PADDED,
        {
            "rows": [
                {"seq_len": 9, "query_len": 1, "prefilling": False},
                {"seq_len": 20, "query_len": 6},
            ],
            "padded_rows": 1,
        },
        {
            "speculative_tokens": 1,
            "rows": [{"seq_len": 9, "query_len": 1, "prefilling": False}],
            "padded_rows": 3,
        },
    ],
    ids=["spec", "mixed", "plain_decode"],
)
def test_scenario_invariants_hold_on_named_batches(prop, batch):
    harness.check_property(prop, batch, build(batch))


def test_field_differences_compare_prefixes():
    first = {"a": [1, 2], "b": 3}
    second = {"a": [1, 2, 0], "b": 3}
    assert harness.field_differences(first, second, ["a", "b"], "prefix") == {}
    assert harness.field_differences(first, second, ["a"], "equal") == {"a": ([1, 2], [1, 2, 0])}
    assert harness.field_differences({"a": [2]}, second, ["a"], "prefix") == {"a": ([2], [1, 2, 0])}


def test_a_crash_is_stored_as_what_the_release_raised():
    # vLLM refuses sycl on CPU in the builder's constructor: the snapshot says so.
    stored = harness.snapshot_case(
        "cpu", {"rows": [{"seq_len": 5, "query_len": 5}], "prefill_backend": "sycl"}
    )
    assert (
        list(stored) == ["raised"]
        and stored["raised"].startswith("ValueError:")
        and "sycl" in stored["raised"]
    )


PROXY_ON_CAPTURE = """
import json
from gdn_review import harness
case = {
    "speculative_tokens": 2, "entry": "capture", "rows": [{"seq_len": 3, "query_len": 3}] * 2,
    "padded_rows": 1,
}
print(json.dumps(harness.count_device_origin_reads("cpu", case)))
"""


@pytest.mark.slow
@pytest.mark.parametrize("release, reads", [("0.29.0", {"Tensor.cpu": 1}), ("0.30.0", {})])
def test_the_cpu_proxy_tells_capture_before_and_after_pr_55404(release, reads):
    # 0.29.0: (num_accepted_tokens - 1).cpu(), a copy of a device tensor to the host;
    # 0.30.0: torch.diff(m.query_start_loc_cpu).sub_(1), host data only.
    import json
    import sys

    from gdn_review.common import release_trees

    env = release_trees.environment(release_trees.tree(release))
    done = interrupts.run_child(
        [sys.executable, "-c", PROXY_ON_CAPTURE],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == reads
