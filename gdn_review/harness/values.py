"""What ``build()`` returns, as plain data: snapshots, the rows each state index
names (see the block table ``inputs.build_arguments`` makes), and the layout of its
tensors.

The dtype rule: a tensor is its values, its dtype and its shape (the kernels take
these tensors as raw pointers: an int64 tensor turned int32 is an ABI break). In a
run, ``plain`` makes it a ``Tensor``: a list of its values that also carries its
dtype and shape, so two runs compare all three (``==``) wherever they are compared.
Stored (snapshots, a record's ``expect``) it is ``stored_form``: its values where its
dtype is its field's usual one (``USUAL_DTYPES``) and its values imply its shape,
else ``{dtype, values}`` (and ``shape`` where the values do not imply it).
``stored_differences`` compares a run with stored data field by field, and
``describe_differences`` names what differs (``num_accepted_tokens: dtype int64,
expected int32``).
"""

from __future__ import annotations

import dataclasses

import torch

from gdn_review.common.snapshots import (
    NO_FIELD,
    implied_shape,
    tensor_change,
    tensor_parts,
)

# Offset of the second block table (update_block_table); table offsets are
# multiples of it, so an entry still names its row and slot.
SECOND_TABLE = 10000


# The dtype of each tensor build() returns, by the name it has in a snapshot (a
# metadata field, a field of one of its parts such as ``checkpoint`` or ``nums_dict``,
# a server field): measured from the real builder (vLLM 0.33.0 on CPU, every case of
# kb/, tests/test_dtype_rule.py). A tensor of its field's usual dtype is stored as its
# values; one of another dtype, or of a name not here, states its dtype. The token
# indices are int64 where build() sorts the token mask (a batch that mixes spec
# decodes with other rows) and int32 where it makes them itself (spec decodes only,
# FULL-graph staging): the first is stored with its dtype.
USUAL_DTYPES = {
    # GDNAttentionMetadata
    "batch_ptr": "int32",
    "chunk_indices": "int32",
    "chunk_offsets": "int64",
    "has_initial_state": "bool",
    "non_spec_query_start_loc": "int32",
    "non_spec_state_indices_tensor": "int32",
    "non_spec_token_indx": "int32",
    "num_accepted_tokens": "int32",
    "prefill_has_initial_state": "bool",
    "prefill_query_start_loc": "int32",
    "prefill_state_indices": "int32",
    "spec_query_start_loc": "int32",
    "spec_sequence_masks": "bool",
    "spec_sequence_masks_cpu": "bool",
    "spec_state_indices_tensor": "int32",
    "spec_token_indx": "int32",
    "token_chunk_offset_ptr": "int32",
    # nums_dict[chunk size]
    "mlist": "int64",
    "nums": "int32",
    "offsetlist": "int32",
    # checkpoint (MambaPrefillCheckpoint), flashinfer_checkpoint_plan
    "block_cols": "int64",
    "checkpoint_offsets": "int32",
    "cu_starts": "int64",
    "request_rows": "int64",
    "rows": "int64",
    "state_indices": "int32",
    # server fields (harness.server.server_fields)
    "checkpoint_block_columns": "int64",
    "checkpoint_request_rows": "int64",
    "checkpoint_state_indices": "int32",
    "flashinfer_plan_cu_starts": "int64",
    "flashinfer_plan_rows": "int64",
    # KimiK3KDAMetadata's own (the nvidia subclass's FlashInfer prefill order)
    "flashinfer_prefill_query_start_loc": "int64",
    "flashinfer_prefill_seq_order": "int32",
}


class Tensor(list):
    """A tensor as plain data: its values (``tolist()``), with its ``dtype`` ("int32")
    and ``shape``. Equal to another Tensor when all three are; to a plain list when its
    values are (what an invariant computes itself has no dtype)."""

    def __init__(self, values, dtype: str, shape):
        super().__init__(values)
        self.dtype = dtype
        self.shape = list(shape)

    def __eq__(self, other):
        if isinstance(other, Tensor) and (
            self.dtype != other.dtype or self.shape != other.shape
        ):
            return False
        return list.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __reduce__(self):
        return Tensor, (list(self), self.dtype, self.shape)


def stored_form(value, name: str | None = None):
    """Plain data as it is stored (JSON, YAML): a ``Tensor`` (under field ``name``) as
    its values where its dtype is the field's usual one and its values imply its shape,
    else ``{"dtype", "values"}`` (and ``"shape"`` where the values do not imply it)."""
    if isinstance(value, Tensor):
        values = list(value)
        implied = implied_shape(values) == value.shape
        if value.dtype == USUAL_DTYPES.get(name) and implied:
            return values
        form = {"dtype": value.dtype, "values": values}
        if not implied:
            form["shape"] = value.shape
        return form
    if isinstance(value, dict):
        return {key: stored_form(item, str(key)) for key, item in value.items()}
    if isinstance(value, list):
        return [stored_form(item, name) for item in value]
    return value


def stored_differences(measured: dict, stored: dict, fields=None) -> dict:
    """field -> (measured, stored), both in stored form, of every field (of ``fields``;
    default: of either) whose value, dtype or shape differs, or that only one has
    (``NO_FIELD`` on the side that lacks it)."""
    if fields is None:
        fields = sorted(set(measured) | set(stored))
    found = {}
    for field in fields:
        a = stored_form(measured[field], field) if field in measured else NO_FIELD
        b = stored.get(field, NO_FIELD)
        if a != b:
            found[field] = (a, b)
    return found


def describe_differences(differences: dict, other: str = "expected") -> str:
    """``differences`` (field -> (measured, other), stored forms) in words, a field a
    clause: ``num_accepted_tokens: dtype int64, expected int32``, ``non_spec_token_indx:
    shape [0, 3], expected [0]``, ``num_decodes: 2, expected 1``."""
    clauses = []
    for field, (a, b) in differences.items():
        usual = USUAL_DTYPES.get(field)
        change = tensor_change(tensor_parts(a, usual), tensor_parts(b, usual))
        if change:
            clauses.append(f"{field}: {change[0]} {change[1]}, {other} {change[2]}")
        else:
            clauses.append(f"{field}: {a!r}, {other} {b!r}")
    return "; ".join(clauses)


def plain(value):
    """A metadata value as plain data (tensors as ``Tensor``, a list of their values
    that carries their dtype and shape; dataclasses as dicts)."""
    if isinstance(value, torch.Tensor):
        values = value.detach().cpu()
        if values.dim() == 0:  # a scalar has no list to carry its dtype
            return values.item()
        return Tensor(
            values.tolist(), str(values.dtype).removeprefix("torch."), values.shape
        )
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
