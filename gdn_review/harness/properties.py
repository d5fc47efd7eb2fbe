"""Invariant properties of ``build()``: ``check_<property>(batch, run)`` asserts one.

The standalone modules of ``gdn-review export`` copy these functions verbatim.
They are the same functions (the same syntax tree, ``harness.build_case`` read
as ``build_case``) as those ``templates/checks/invariant.py.j2`` writes into
the generated suite; tests/test_export.py fails when the two drift apart.
"""

from __future__ import annotations

from gdn_review.common.snapshots import NO_FIELD
from gdn_review.harness.builders import GDN_BUILDER
from gdn_review.harness.case_build import build_case
from gdn_review.harness.steps import STATE_INDEX_FIELDS

# Properties that read the drafts a case's rows state: a capture derives its drafts from
# the query lengths (build_for_cudagraph_capture), so they say nothing of it.
READS_ROW_DRAFTS = {
    "fallback_condition",
    "fallback_without_speculating_rows",
    "spec_rows_match_drafts",
}


def capture_bound(batch) -> int:
    """vLLM's decode_cudagraph_max_bs for the batch's settings: max_num_seqs * (k + 1),
    capped by max_cudagraph_capture_size; a FULL-graph build stages, and a capture
    accepts, at most this many requests and tokens."""
    bound = batch.get("max_num_seqs", 8) * ((batch.get("speculative_tokens") or 0) + 1)
    if batch.get("max_cudagraph_capture_size") is not None:
        bound = min(bound, batch["max_cudagraph_capture_size"])
    return bound


def not_applicable_reason(name, batch):
    """Why property ``name`` says nothing of this batch's entry point (None: it
    applies)."""
    if batch.get("call") is not None:
        return (
            f"{name} is a property of build()'s metadata; this case calls a host "
            "function on its own"
        )
    requests = len(batch["rows"]) + batch.get("padded_rows", 0)
    if name == "full_graph_tails_neutral" and requests > capture_bound(batch):
        # The runner pads a FULL-graph batch to a captured size, never past the bound
        # (and the staging buffers hold only that many rows).
        return (
            f"{name}: a runner pads a FULL-graph batch to at most the capture bound "
            f"({capture_bound(batch)} requests); this one has {requests}"
        )
    if name == "checkpoints_on_real_prefills" and batch.get("prefix_caching") is None:
        return (
            f"{name} needs prefix caching in align mode (a case with prefix_caching, "
            "or an invariant whose configuration names one)"
        )
    if batch.get("entry") == "capture" and name in READS_ROW_DRAFTS:
        return (
            f"{name} reads the drafts the rows state; a capture derives them from "
            "the query lengths"
        )
    return None


def _real_rows(rows):
    """State-index rows without NULL_BLOCK_ID (-1): CUDA-graph padding is not a row."""
    return [row for row in (rows or []) if row != -1]


def check_fallback_condition(batch, run):
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


def check_fallback_without_speculating_rows(batch, run):
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


def check_accepted_counts_in_range(batch, run):
    # The kernels index a spec row's state slots with num_accepted_tokens - 1:
    # a count outside 1..k+1 reads another row's slot or past the row (PR #51508).
    if run.metadata["path"] != "spec":
        return
    k = batch["speculative_tokens"]
    real = _real_rows(run.metadata["spec_state_rows"])
    counts = run.metadata["num_accepted_tokens"][: len(real)]
    outside = [
        (row, count) for row, count in zip(real, counts) if not 1 <= count <= k + 1
    ]
    assert not outside, f"accepted counts outside 1..{k + 1} (row, count): {outside}"


def check_partition(batch, run):
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


def check_spec_rows_match_drafts(batch, run):
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


def check_counts_add_up(batch, run):
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


def check_indices_in_bounds(batch, run):
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


def check_checkpoints_on_real_prefills(batch, run):
    # A prefill checkpoint lies inside its row's chunk, on a cache-hit-aligned position,
    # with a block column and a real state slot; a padded row has none ("0 and -1 mean
    # the row has none": compute_mamba_prefill_checkpoints, vLLM 0.33.0). A runner pads
    # behind the prefills, so a padded row that takes a checkpoint writes a state the
    # prefix cache then serves.
    m = run.metadata
    offsets = m.get("checkpoint_offsets")
    if offsets is None:
        return
    alignment = batch["prefix_caching"]["cache_hit_alignment_tokens"]
    rows = batch["rows"]
    parts = zip(
        m["checkpoint_request_rows"],
        offsets,
        m["checkpoint_block_columns"],
        m["checkpoint_state_indices"],
    )
    for row, offset, column, state in parts:
        if row >= len(rows) or offset == 0:
            what = "padded row" if row >= len(rows) else "row without a checkpoint"
            assert offset == 0 and column == -1, (
                f"{what} {row} has checkpoint offset {offset}, block column {column}"
            )
            continue
        start = rows[row]["seq_len"] - rows[row]["query_len"]
        assert 0 < offset <= rows[row]["query_len"], (
            f"row {row}'s checkpoint offset {offset} is outside its chunk of "
            f"{rows[row]['query_len']} tokens"
        )
        assert (start + offset) % alignment == 0, (
            f"row {row}'s checkpoint at token {start + offset} is not a multiple of "
            f"{alignment}"
        )
        assert column >= 0 and state > 0, (
            f"row {row}'s checkpoint has block column {column}, state index {state}"
        )


def check_plan_picks_checkpoint_states(batch, run):
    # FlashInfer's GDN prefill emits a state every N tokens of each sequence it runs
    # (the trailing checkpoint rows): N divides each checkpoint offset, q tokens emit
    # q // N states, and a checkpoint row's plan row is the state emitted at its offset
    # (plan_flashinfer_checkpoints, vLLM 0.33.0). No plan: nothing to check.
    m = run.metadata
    every = m.get("flashinfer_plan_every_n_tokens")
    if every is None:
        return
    offsets, starts = m["checkpoint_offsets"], m["flashinfer_plan_cu_starts"]
    rows = batch["rows"]  # the prefill kernel's: the trailing checkpoint rows
    ran = list(m["checkpoint_request_rows"])[len(offsets) - len(starts) + 1 :]
    lens = [rows[row]["query_len"] if row < len(rows) else 0 for row in ran]
    emitted = [0]
    for query_len in lens:
        emitted.append(emitted[-1] + query_len // every)
    assert (
        list(starts) == emitted and m["flashinfer_plan_num_checkpoints"] == emitted[-1]
    ), f"plan counts states {starts}; every {every} tokens of {lens}: {emitted}"
    first = len(offsets) - len(lens)
    for i, (offset, row) in enumerate(zip(offsets, m["flashinfer_plan_rows"])):
        if i < first or offset == 0:
            continue
        state = emitted[i - first] + offset // every - 1
        assert offset % every == 0 and row == state, (
            f"checkpoint row {i} at offset {offset} takes plan row {row}; the state "
            f"emitted there (every {every} tokens) is {state}"
        )


# --- The builder family: a subclass's build() against GDN's ---------------------

# Keys an invariant's check adds to every batch for mirrors_gdn (not a case's own).
MIRROR_KEYS = ("builder", "mirror_fields")


def _field_words(value) -> str:
    """A snapshot value in words: a tensor's values with its dtype."""
    dtype = getattr(value, "dtype", None)
    return f"{list(value)!r} ({dtype})" if dtype is not None else repr(value)


def check_mirrors_gdn(batch, run):
    # The same batch and configuration through two builder classes: ``run`` is the
    # subclass's build() (the batch names it: the check's builder), and GDN's own
    # build() must return the same value, dtype and shape on each of the check's fields.
    # Where a subclass keeps its own copy of GDN's classification and staging (Kimi-K3's
    # KimiK3KDAMetadataBuilder "intentionally mirrors" them), a fix to one copy that the
    # other lacks shows here, batch by batch.
    subject = batch.get("builder") or GDN_BUILDER
    reference = {key: value for key, value in batch.items() if key not in MIRROR_KEYS}
    try:
        gdn = build_case(run.device, reference, count_ops=False).metadata
    except AssertionError as error:  # a crash is no deviation of the mirror
        raise RuntimeError(
            f"{GDN_BUILDER}.build() raised AssertionError: {error}"
        ) from error
    fields = batch.get("mirror_fields") or sorted(set(run.metadata) & set(gdn))
    differ = [
        field
        for field in fields
        if run.metadata.get(field, NO_FIELD) != gdn.get(field, NO_FIELD)
    ]
    assert not differ, f"{subject} differs from {GDN_BUILDER} on " + "; ".join(
        f"{field}: {_field_words(run.metadata.get(field, NO_FIELD))}, GDN's "
        f"{_field_words(gdn.get(field, NO_FIELD))}"
        for field in differ
    )


def check_deterministic(batch, run):
    again = build_case(run.device, batch, count_ops=False)
    assert again.metadata == run.metadata, "two builds of the same batch differ"


# --- Scenario invariants: FULL-graph staging, capture, re-gather ----------------

FULL_GRAPH = "FULL_AND_PIECEWISE"
# Fields build() stages into the FULL-graph buffers, by path: (field, its tail
# value, whether it holds one entry per request plus one).
STAGED = {
    "spec": [
        ("spec_state_indices_tensor", "null", False),
        ("spec_sequence_masks", False, False),
        ("spec_query_start_loc", "flat", True),
        ("num_accepted_tokens", 1, False),
    ],
    "decode": [
        ("non_spec_state_indices_tensor", 0, False),
        ("non_spec_query_start_loc", "flat", True),
    ],
}
# Derived from the state-index tensors: they follow from the tensors themselves;
# and the layout of a case that states one (which builder's buffers, contiguity).
DERIVED = {
    "spec_state_rows",
    "spec_state_cells",
    "prefill_state_rows",
    "non_spec_state_rows",
    "persistent_views",
    "noncontiguous",
    "reorder_batch_threshold",
}


def _variant(batch, **changes):
    """The batch as another scenario: scenario keys replaced, earlier builds dropped."""
    keys = ("after", "entry", "cudagraph_mode", "block_table_offset", "step")
    variant = {key: value for key, value in batch.items() if key not in keys}
    variant.update({key: value for key, value in changes.items() if value is not None})
    return variant


def _dirty_batches(batch):
    """Builds that fill every FULL-graph buffer with other state ids first."""
    k = batch.get("speculative_tokens")
    size = batch.get("max_num_seqs", 8)
    decodes = [{"seq_len": 40, "query_len": 1, "prefilling": False}] * size
    dirty = [_variant(batch, rows=decodes, padded_rows=0, block_table_offset=20000)]
    if k is not None:
        spec = [
            {"seq_len": 40, "query_len": k + 1, "drafted": k, "accepted": k + 1}
        ] * size
        dirty.append(_variant(batch, rows=spec, padded_rows=0, drafts="given"))
        dirty[-1]["block_table_offset"] = 30000
    return [dict(d, cudagraph_mode=FULL_GRAPH) for d in dirty]


def check_full_graph_tails_neutral(batch, run):
    # After larger batches filled the buffers, a FULL-graph build's padded
    # tails are neutral and its real prefix is the eager build's.
    eager = build_case(run.device, _variant(batch), count_ops=False).metadata
    full = build_case(
        run.device,
        _variant(batch, cudagraph_mode=FULL_GRAPH, after=_dirty_batches(batch)),
        count_ops=False,
    ).metadata
    requests = len(batch["rows"]) + batch.get("padded_rows", 0)
    # The buffers hold decode_cudagraph_max_bs requests (and tokens): what the
    # builder stages must fit, as _stage_spec_decode / _stage_decode require.
    limit = capture_bound(batch)
    staged = []
    if (
        eager["num_prefills"] == 0
        and eager["num_decodes"] == 0
        and eager["num_spec_decodes"] <= limit
        and eager["num_spec_decode_tokens"] <= limit
    ):
        staged, real = STAGED["spec"], eager["num_spec_decodes"]
    elif (
        eager["num_prefills"] == 0
        and eager["num_spec_decodes"] == 0
        and eager["num_decodes"] <= limit
    ):
        staged, real = STAGED["decode"], eager["num_decodes"]
    for field, tail, plus_one in staged:
        values, length = full[field], requests + int(plus_one)
        assert len(values) == length, f"{field} has {len(values)} entries, not {length}"
        cut = real + int(plus_one)
        assert values[:cut] == eager[field][:cut], (
            f"{field}: real prefix {values[:cut]} != eager {eager[field][:cut]}"
        )
        expected = values[cut - 1] if tail == "flat" else tail
        for value in values[cut:]:
            flat = value if isinstance(value, list) else [value]
            assert all(v == (0 if tail == "null" else expected) for v in flat), (
                f"{field}: padded tail {values[cut:]} is not neutral"
            )
    skip = {field for field, _, _ in staged} | DERIVED
    differ = sorted(f for f in eager if f not in skip and full.get(f) != eager[f])
    assert not differ, f"the FULL-graph build differs from the eager one on {differ}"


def check_capture_matches_build(batch, run):
    # Capture derives drafts from the query lengths: it equals a build of the
    # same batch with drafts = query length - 1 and accepted = query length.
    k = batch.get("speculative_tokens")
    query = 1 + (k or 0)
    rows = [
        {"seq_len": max(row["seq_len"], query), "query_len": query}
        for row in batch["rows"]
    ]
    built_rows = [
        dict(row, prefilling=False)
        if k is None
        else dict(row, drafted=query - 1, accepted=query, prefilling=False)
        for row in rows
    ]
    capture = _variant(batch, rows=rows, entry="capture")
    requests, tokens = len(rows) + batch.get("padded_rows", 0), query * len(rows)
    bound = capture_bound(batch)
    if requests > bound or tokens > bound:
        # Above decode_cudagraph_max_bs a capture is refused: no graph that size exists.
        try:
            build_case(run.device, capture, count_ops=False)
        except AssertionError as refused:
            assert "capture" in str(refused), f"refused for another reason: {refused}"
            return
        raise AssertionError(
            f"capture of {requests} requests and {tokens} tokens was accepted above "
            f"the capture bound {bound}"
        )
    captured = build_case(run.device, capture, count_ops=False).metadata
    built = build_case(
        run.device, _variant(batch, rows=built_rows, drafts="given"), count_ops=False
    ).metadata
    differ = {
        f: (captured[f], built.get(f)) for f in captured if captured[f] != built.get(f)
    }
    assert not differ, f"capture differs from build (capture, build): {differ}"


def check_regather_matches_fresh_build(batch, run):
    # update_block_table with a second table equals a fresh build with that
    # table on the state indices, and leaves every other field as it was.
    # In align mode the re-gathering group reads the aligned state indices the V2
    # runner hands it (its own, or the first group's when the case names none), and
    # its prefill checkpoint re-gathers from its own block table.
    # Without them the re-gather is stated in mamba_cache_mode none (no prefix cache).
    aligned = batch.get("aligned_state_indices") is not None
    plain_cache = {k: v for k, v in batch.items() if k != "prefix_caching"}
    base = batch if aligned else _variant(plain_cache, mamba_cache_mode="none")
    regather = build_case(
        run.device, _variant(base, entry="update_block_table"), count_ops=False
    )
    second = (batch.get("second_builder") or {}).get("aligned_state_indices")
    fresh = build_case(
        run.device,
        _variant(base, block_table_offset=10000, aligned_state_indices=second),
        count_ops=False,
    ).metadata
    state = set(STATE_INDEX_FIELDS)
    for field in sorted(state):
        assert regather.metadata[field] == fresh[field], (
            f"{field}: re-gathered {regather.metadata[field]} != fresh {fresh[field]}"
        )
    checkpoint = regather.metadata.get("checkpoint")
    if checkpoint is not None or fresh.get("checkpoint") is not None:
        got = (checkpoint or {}).get("state_indices")
        want = (fresh.get("checkpoint") or {}).get("state_indices")
        assert got == want, (
            f"checkpoint state indices: re-gathered {got} != fresh {want}"
        )
        kept = regather.built.get("checkpoint") or {}
        moved = sorted(
            k for k in kept if k != "state_indices" and kept[k] != checkpoint.get(k)
        )
        assert not moved, f"update_block_table changed the checkpoint's {moved}"
    others = set(regather.metadata) - state - DERIVED - {"checkpoint"}
    # (Parts a server configuration adds are measured on the result only.)
    changed = sorted(
        f
        for f in others
        if f in regather.built and regather.metadata[f] != regather.built[f]
    )
    assert not changed, f"update_block_table changed batch-level fields {changed}"
