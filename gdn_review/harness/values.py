"""What ``build()`` returns, as plain data: snapshots, the rows each state index
names (see the block table ``inputs.build_arguments`` makes), and the layout of its
tensors."""

from __future__ import annotations

import dataclasses

import torch

# Offset of the second block table (update_block_table); table offsets are
# multiples of it, so an entry still names its row and slot.
SECOND_TABLE = 10000


def plain(value):
    """A metadata value as JSON-able data (tensors as lists, dataclasses as dicts)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {
            str(k): plain(v)
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        }
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {
            f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
    return f"<{type(value).__name__}>"


def _rows_of(indices, columns: int) -> list[int] | None:
    """Which batch rows a state-index tensor was gathered from (see the block table)."""
    if indices is None:
        return None
    values = indices.detach().cpu()
    if values.dim() == 2:
        values = values[:, 0]
    return [
        (int(v) - 1) % SECOND_TABLE // columns if int(v) > 0 else -1
        for v in values.tolist()
    ]


def _cells_of(indices, columns: int) -> list[list[list[int]]] | None:
    """[row, slot] of every 2-D state-index entry; NULL_BLOCK_ID: [-1, -1]."""
    if indices is None or indices.dim() != 2:
        return None
    return [
        [
            [(int(v) - 1) % SECOND_TABLE // columns, (int(v) - 1) % columns]
            if int(v) > 0
            else [-1, -1]
            for v in row
        ]
        for row in indices.detach().cpu().tolist()
    ]


def snapshot(metadata, columns: int) -> dict:
    """Metadata as plain data, and the rows (and slots) each state index selects."""
    data = {
        f.name: plain(getattr(metadata, f.name)) for f in dataclasses.fields(metadata)
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


def layout(builder, metadata) -> dict:
    """Which tensor fields are views of ``builder``'s persistent buffer of the same
    name, and which are not contiguous: what a replayed CUDA graph reads is the
    buffer, so staging that is skipped shows here and not in the values."""
    views, scattered = [], []
    for field in dataclasses.fields(metadata):
        value = getattr(metadata, field.name)
        if not isinstance(value, torch.Tensor):
            continue
        buffer = getattr(builder, field.name, None)
        if isinstance(buffer, torch.Tensor) and (
            value.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
        ):
            views.append(field.name)
        if not value.is_contiguous():
            scattered.append(field.name)
    return {"persistent_views": sorted(views), "noncontiguous": sorted(scattered)}
