"""Turn a case into ``build()`` inputs, run the real ``build()``, snapshot the result.

A case is plain data (as a record states it)::

    {
        "speculative_tokens": 2,
        "drafts": "given",
        "padded_rows": 1,
        "rows": [{"seq_len": 9, "query_len": 3, "drafted": 2}, ...],
    }

``drafted`` is the row's draft count, or None for a row that does not
speculate (vLLM's -1). Padded rows are zero-length rows at the back, as the
runner pads a batch for CUDA graphs.
"""

from __future__ import annotations

import collections
import dataclasses
import warnings

import torch

from gdn_review.harness.builders import BuilderSettings, make_builder
from gdn_review.harness.environment import prepare_platform


@dataclasses.dataclass
class BuildRun:
    """What one ``build()`` returned (as plain data) and which aten ops it executed."""

    metadata: dict
    ops: dict[str, int]
    rows: int
    padded_rows: int
    device: str


def settings_for(case: dict, device: str) -> BuilderSettings:
    return BuilderSettings(
        device=device,
        speculative_tokens=case.get("speculative_tokens"),
        max_num_seqs=case.get("max_num_seqs", 8),
    )


def _row_values(case: dict) -> list[dict]:
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


def _inputs(case: dict, settings: BuilderSettings):
    """``build()``'s arguments, with a CommonAttentionMetadata fitted to the release."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    device = torch.device(settings.device)
    rows = _row_values(case)
    query_lens = [row["query_len"] for row in rows]
    seq_lens = [row["seq_len"] for row in rows]
    starts = [0]
    for length in query_lens:
        starts.append(starts[-1] + length)
    num_tokens = starts[-1]
    columns = settings.block_table_columns
    # Entry (r, c) = r * columns + c + 1: every state index names its row, and
    # 0 (vLLM's NULL_BLOCK_ID) never appears as a real entry.
    block_table = torch.arange(1, len(rows) * columns + 1, dtype=torch.int32).reshape(
        len(rows), columns
    )
    # Unless a row says so, a row that does not speculate and has more than
    # one query token is a prefill (vLLM's is_prefilling).
    prefilling = [
        row["prefilling"]
        if row.get("prefilling") is not None
        else (row.get("drafted") is None and row["query_len"] > 1)
        for row in rows
    ]
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    query_lens_cpu = torch.tensor(query_lens, dtype=torch.int32)
    query_start_loc_cpu = torch.tensor(starts, dtype=torch.int32)
    candidates = {
        "query_start_loc": query_start_loc_cpu.to(device),
        "query_start_loc_cpu": query_start_loc_cpu,
        "seq_lens": seq_lens_cpu.to(device),
        "num_reqs": len(rows),
        "num_actual_tokens": num_tokens,
        "max_query_len": max(query_lens, default=0),
        "max_seq_len": max(seq_lens, default=0),
        "block_table_tensor": block_table.to(device),
        "slot_mapping": torch.arange(num_tokens, dtype=torch.int64).to(device),
        "causal": True,
        "is_prefilling": torch.tensor(prefilling, dtype=torch.bool),
        "seq_lens_cpu_upper_bound": seq_lens_cpu.clone(),
        # Fields of older releases (0.28, 0.29), ignored where absent.
        "_seq_lens_cpu": seq_lens_cpu.clone(),
        "_num_computed_tokens_cpu": seq_lens_cpu - query_lens_cpu,
    }
    accepted = {f.name for f in dataclasses.fields(CommonAttentionMetadata) if f.init}
    common = CommonAttentionMetadata(
        **{k: v for k, v in candidates.items() if k in accepted}
    )

    drafts = None
    num_accepted = None
    if (
        case.get("drafts", "given") == "given"
        and case.get("speculative_tokens") is not None
    ):
        drafts = torch.tensor(
            [-1 if row.get("drafted") is None else row["drafted"] for row in rows],
            dtype=torch.int32,
        )
        num_accepted = torch.tensor(
            [row.get("accepted", 1) for row in rows], dtype=torch.int32
        ).to(device)
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


class _OpCounter:
    """Counts every aten op ``build()`` executes, CPU and CUDA tensors alike."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counts = collections.Counter()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counts[str(func.overloadpacket)] += 1
                return func(*args, **(kwargs or {}))

        self.counts = counts
        self.mode = Mode()


def _plain(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {
            str(k): _plain(v)
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        }
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {
            f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
    return f"<{type(value).__name__}>"


def _rows_of(indices, columns: int) -> list[int] | None:
    """Which batch rows a state-index tensor was gathered from (see the block table)."""
    if indices is None:
        return None
    values = indices.detach().cpu()
    if values.dim() == 2:
        values = values[:, 0]
    return [(int(v) - 1) // columns if int(v) > 0 else -1 for v in values.tolist()]


def _cells_of(indices, columns: int) -> list[list[list[int]]] | None:
    """[row, slot] of every 2-D state-index entry; NULL_BLOCK_ID: [-1, -1]."""
    if indices is None or indices.dim() != 2:
        return None
    return [
        [
            [(int(v) - 1) // columns, (int(v) - 1) % columns]
            if int(v) > 0
            else [-1, -1]
            for v in row
        ]
        for row in indices.detach().cpu().tolist()
    ]


def snapshot(metadata, columns: int) -> dict:
    """Metadata as plain data, and the rows (and slots) each state index selects."""
    data = {
        f.name: _plain(getattr(metadata, f.name)) for f in dataclasses.fields(metadata)
    }
    data["spec_state_cells"] = _cells_of(metadata.spec_state_indices_tensor, columns)
    data["path"] = "non_spec" if metadata.spec_sequence_masks is None else "spec"
    data["spec_state_rows"] = _rows_of(metadata.spec_state_indices_tensor, columns)
    data["non_spec_state_rows"] = _rows_of(
        metadata.non_spec_state_indices_tensor, columns
    )
    data["prefill_state_rows"] = _rows_of(
        getattr(metadata, "prefill_state_indices", None), columns
    )
    return data


def build_case(device: str, case: dict, count_ops: bool = True) -> BuildRun:
    """Run the real ``build()`` on ``case`` and return its snapshot and op counts."""
    prepare_platform()
    settings = settings_for(case, device)
    builder = make_builder(settings)
    kwargs, rows, columns = _inputs(case, settings)
    counter = _OpCounter()
    if count_ops:
        with counter.mode:
            metadata = builder.build(**kwargs)
    else:
        metadata = builder.build(**kwargs)
    padded = case.get("padded_rows", 0)
    return BuildRun(
        metadata=snapshot(metadata, columns),
        ops=dict(sorted(counter.counts.items())),
        rows=len(rows) - padded,
        padded_rows=padded,
        device=device,
    )


def prepare_builders(device: str, cases) -> None:
    """Make every builder these cases need now (once), so tests only build()."""
    for case in cases:
        make_builder(settings_for(case, device))


def count_sync_warnings(device: str, case: dict) -> int:
    """How many host-device synchronisations CUDA reports while ``build()`` runs."""
    settings = settings_for(case, device)
    builder = make_builder(settings)
    kwargs, _, _ = _inputs(case, settings)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            builder.build(**kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return sum(1 for w in caught if "synchroniz" in str(w.message).lower())
