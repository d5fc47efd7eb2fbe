"""A case -> ``build()``'s arguments: a real ``CommonAttentionMetadata`` fitted to
the loaded release, the block table (entry (r, c) = offset + r * columns + c + 1, so
every state index names its row), draft and accepted counts (``run``: the format)."""

from __future__ import annotations

import torch

from gdn_review.harness.adaptations import accepted_kwargs
from gdn_review.harness.builders import BuilderSettings
from gdn_review.harness.origin import setting_up


def row_values(case: dict) -> list[dict]:
    rows = [dict(row) for row in case["rows"]]
    for _ in range(case.get("padded_rows", 0)):
        rows.append(
            {
                "seq_len": 0,
                "query_len": 0,
                "drafted": None,
                "accepted": 1,
                "padded": True,
            }
        )
    return rows


def build_arguments(case: dict, settings: BuilderSettings):
    """``build()``'s arguments, with a CommonAttentionMetadata fitted to the release
    (what raises while they are made: could not run)."""
    with setting_up("build()'s inputs"):
        return _build_arguments(case, settings)


def _build_arguments(case: dict, settings: BuilderSettings):
    device = torch.device(settings.device)
    rows = row_values(case)
    columns = settings.block_table_columns
    common = _common_metadata(case, rows, columns, device)
    drafts, num_accepted = _speculation_counts(case, rows, device)
    return (
        {
            "common_prefix_len": 0,
            "common_attn_metadata": common,
            "num_accepted_tokens": num_accepted,
            "num_decode_draft_tokens_cpu": drafts,
        },
        rows,
        columns,
    )


def _common_metadata(case: dict, rows: list[dict], columns: int, device):
    """The case's CommonAttentionMetadata, with the fields this release accepts."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    query_lens = [row["query_len"] for row in rows]
    seq_lens = [row["seq_len"] for row in rows]
    starts = [0]
    for length in query_lens:
        starts.append(starts[-1] + length)
    # Token padding (FULL-graph replay) counts tokens beyond the real ones.
    num_tokens = starts[-1] + case.get("padded_tokens", 0)
    # Entry (r, c) = offset + r * columns + c + 1: every state index names its
    # row, and 0 (vLLM's NULL_BLOCK_ID) never appears as a real entry.
    block_table = case.get("block_table_offset", 0) + torch.arange(
        1, len(rows) * columns + 1, dtype=torch.int32
    ).reshape(len(rows), columns)
    if case.get("null_padded_blocks"):
        # Padded rows own no blocks: every entry is NULL_BLOCK_ID (0).
        block_table[len(case["rows"]) :] = 0
    # Unless a row says so, a row that does not speculate and has more than one
    # query token is a prefill (vLLM's is_prefilling); capture batches are decodes.
    capture = case.get("entry") == "capture"
    prefilling = [
        row["prefilling"]
        if row.get("prefilling") is not None
        else (not capture and row.get("drafted") is None and row["query_len"] > 1)
        for row in rows
    ]
    # What the host believes of each sequence's length (vLLM may overestimate).
    host_seq_lens = [
        row["seq_len"]
        if row.get("padded")
        else row.get("host_seq_len")
        or row["seq_len"] + case.get("host_seq_len_offset", 0)
        for row in rows
    ]
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    query_lens_cpu = torch.tensor(query_lens, dtype=torch.int32)
    query_start_loc_cpu = torch.tensor(starts, dtype=torch.int32)
    candidates = {
        "query_start_loc": query_start_loc_cpu.to(device, copy=True),
        "query_start_loc_cpu": query_start_loc_cpu,
        "seq_lens": seq_lens_cpu.to(device, copy=True),
        "num_reqs": len(rows),
        "num_actual_tokens": num_tokens,
        "max_query_len": max(query_lens, default=0),
        "max_seq_len": max(seq_lens, default=0),
        "block_table_tensor": block_table.to(device),
        "slot_mapping": torch.arange(num_tokens, dtype=torch.int64).to(device),
        "causal": True,
        # A runner that sends no is_prefilling (no_is_prefilling) leaves it None.
        "is_prefilling": None
        if case.get("no_is_prefilling")
        else torch.tensor(prefilling, dtype=torch.bool),
        "seq_lens_cpu_upper_bound": torch.tensor(host_seq_lens, dtype=torch.int32),
        # Fields of older releases (0.29.0 and before), left out where absent.
        "_seq_lens_cpu": seq_lens_cpu.clone(),
        "_num_computed_tokens_cpu": seq_lens_cpu - query_lens_cpu,
    }
    # The fields this release's class has: a row fact it lacks is left out
    # (adaptations.METADATA_WITHOUT_ROW_FACTS), and so are the inputs of other releases;
    # a row's own `prefilling` is not: NotInRelease, the case could not run.
    stated = any(row.get("prefilling") is not None for row in case["rows"])
    asked = ("is_prefilling",) if stated else ()
    fitted = accepted_kwargs(CommonAttentionMetadata, asked, **candidates)
    return CommonAttentionMetadata(**fitted)


def _speculation_counts(case: dict, rows: list[dict], device):
    """(draft counts, accepted counts) of a speculative case; None where not sent."""
    drafts = None
    num_accepted = None
    given = case.get("drafts", "given")
    if given != "none" and case.get("speculative_tokens") is not None:
        # "accepted_only": the accepted counts without draft counts (a runner
        # step that drafted nothing still passes what the last step accepted).
        if given == "given":
            drafts = torch.tensor(
                [-1 if row.get("drafted") is None else row["drafted"] for row in rows],
                dtype=torch.int32,
            )
        num_accepted = torch.tensor(
            [row.get("accepted", 1) for row in rows], dtype=torch.int32
        ).to(device)
    return drafts, num_accepted
