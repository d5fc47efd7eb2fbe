"""What ``build()`` returns, as plain data: snapshots, the rows each state index
names (see the block table ``inputs.build_arguments`` makes), and the layout of its
tensors.

The dtype rule: a tensor is its values, its dtype and its shape (the kernels take
these tensors as raw pointers: an int64 tensor turned int32 is an ABI break). In a
run, ``plain`` makes it a ``Tensor``: a list of its values that also carries its
dtype and shape, so two runs compare all three (``==``) wherever they are compared.
Stored (snapshots, a record's ``expect``) it is ``stored_form``: its values where its
dtype is its field's usual one (``USUAL_DTYPES``, ``common.record_format``) and its
values imply its shape, else ``{dtype, values}`` (and ``shape`` where the values do
not imply it). ``stored_differences`` compares a run with stored data field by field,
read with the table the data was written with (a record's format, a snapshot's own
``usual_dtypes``): a tensor stored as values that the table gives no dtype compares
its values only, never a guessed dtype. ``describe_differences`` names what differs
(``num_accepted_tokens: dtype int64, expected int32``).
"""

from __future__ import annotations

import dataclasses

import torch

from gdn_review.common.record_format import USUAL_DTYPES
from gdn_review.common.snapshots import (
    NO_FIELD,
    TENSOR_KEYS,
    explicit_form,
    implied_shape,
    tensor_change,
    tensor_parts,
)

# Offset of the second block table (update_block_table); table offsets are
# multiples of it, so an entry still names its row and slot.
SECOND_TABLE = 10000


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


def stored_differences(
    measured: dict, stored: dict, fields=None, usual: dict | None = None
) -> dict:
    """field -> (measured, stored), both in stored form, of every field (of ``fields``;
    default: of either) whose value, dtype or shape differs, or that only one has
    (``NO_FIELD`` on the side that lacks it).

    ``usual``: the dtype a tensor stored as its values has, by field (the table it was
    written with; None: none). A tensor stored as values that ``usual`` gives no dtype
    compares its values only: its dtype was never stated, so it is never guessed.
    """
    usual = usual or {}
    if fields is None:
        fields = sorted(set(measured) | set(stored))
    found = {}
    for field in fields:
        b = stored.get(field, NO_FIELD)
        if field not in measured:
            if b != NO_FIELD:
                found[field] = (NO_FIELD, b)
            continue
        a = measured[field]
        if not _agrees(a, explicit_form(b, field, usual)):
            found[field] = (_shown(a, explicit_form(b, field, usual), field), b)
    return found


def _agrees(measured, stored) -> bool:
    """Whether a measured value (``Tensor``s inside) is what an explicit stored form
    says: a tensor its values, and its dtype and shape where it states them (a dtype
    implies the shape its values have); a plain list its values."""
    if isinstance(measured, Tensor):
        if isinstance(stored, list):
            return list(measured) == stored
        if not (isinstance(stored, dict) and "values" in stored):
            return False
        shape = stored.get("shape")
        if shape is None and "dtype" in stored:
            shape = implied_shape(stored["values"])
        return (
            set(stored) <= TENSOR_KEYS
            and list(measured) == stored["values"]
            and stored.get("dtype", measured.dtype) == measured.dtype
            and (shape is None or shape == measured.shape)
        )
    if isinstance(measured, dict):
        return (
            isinstance(stored, dict)
            and set(measured) == set(stored)
            and all(_agrees(measured[key], stored[key]) for key in measured)
        )
    if isinstance(measured, list):
        return (
            isinstance(stored, list)
            and len(measured) == len(stored)
            and all(_agrees(a, b) for a, b in zip(measured, stored))
        )
    return measured == stored


def _shown(measured, stored, name: str | None):
    """A measured value as the stored side states it: values where it states values
    only, else in stored form (its dtype where it is not the field's usual one)."""
    if isinstance(measured, Tensor):
        if isinstance(stored, list) or (
            isinstance(stored, dict) and "dtype" not in stored
        ):
            return list(measured)
        return stored_form(measured, name)
    if isinstance(measured, dict) and isinstance(stored, dict):
        return {k: _shown(v, stored.get(k), str(k)) for k, v in measured.items()}
    if isinstance(measured, list) and isinstance(stored, list):
        return [
            _shown(item, stored[index] if index < len(stored) else None, name)
            for index, item in enumerate(measured)
        ]
    return stored_form(measured, name)


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
