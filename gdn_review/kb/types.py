"""The basic types of a record's fields: ids, text, releases, release ranges, plain values.

Kept apart from ``models`` (what a record holds) so that ``subjects`` (the PR
or contract a record is about) and ``models`` share them.
"""

from __future__ import annotations

import keyword
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from gdn_review.common import release, release_range


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$", min_length=1, max_length=80)]


def python_name(identifier: str) -> str:
    """The Python name an id becomes in generated code ('C2.a-b' -> 'C2_a_b')."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", identifier)
    return name + "_" if keyword.iskeyword(name) else name


Text = Annotated[str, StringConstraints(min_length=1)]
Url = Annotated[str, StringConstraints(pattern=r"^https?://\S+$")]
# A metadata field by name (what a change changed: a record's or a changes.yaml entry's fields).
FieldName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]+$")]
# A kb/history/changes.yaml entry's id, as a contract's covers and a record's moved name it.
ChangeId = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]*$")]


def _release_range(value: str) -> str:
    if not value.strip():
        raise ValueError("an empty release range; leave the field out to mean every release")
    release_range.ReleaseRange.of(value)  # ValueError says what is wrong
    return value


def _plain_value(value: Any) -> Any:
    """Expected values are plain data: null, booleans, integers, strings, lists of them, and
    a tensor that states its dtype, ``{dtype: int64, values: [...]}`` (and ``shape: [0, 3]``
    where the values do not imply it), or that says it states none, ``{values: [...]}``
    (record formats, docs/records.md)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, list):
        return [_plain_value(item) for item in value]
    if (
        isinstance(value, dict)
        and "values" in value
        and set(value) <= {"dtype", "values", "shape"}
        and isinstance(value.get("dtype", ""), str)
        and isinstance(value["values"], list)
        and all(isinstance(n, int) for n in value.get("shape", []))
    ):
        return {key: _plain_value(item) for key, item in value.items()}
    raise ValueError(
        "expected values are null, true/false, integers, strings or "
        "lists of them, or a tensor as {dtype: int64, values: [...]}; "
        f"got {type(value).__name__} {value!r}"
    )


PlainValue = Annotated[Any, AfterValidator(_plain_value)]
# A plain release number (``common.release.Release`` checks it), kept a plain str.
Release = Annotated[str, AfterValidator(lambda value: str(release.Release(value)))]
ReleaseRange = Annotated[str, AfterValidator(_release_range)]

# Fields of a build() snapshot that a case may state expectations for: the core ones
# (what drafts and `snapshot --as-expect` write)...
CoreExpectField = Literal[
    "path",
    "num_prefills",
    "num_prefill_tokens",
    "num_decodes",
    "num_decode_tokens",
    "num_spec_decodes",
    "num_spec_decode_tokens",
    "num_actual_tokens",
    "spec_state_rows",
    "spec_state_cells",
    "non_spec_state_rows",
    "prefill_state_rows",
    "spec_query_start_loc",
    "non_spec_query_start_loc",
    "prefill_query_start_loc",
    "has_initial_state",
    "prefill_has_initial_state",
    "num_accepted_tokens",
    "spec_token_indx",
    "non_spec_token_indx",
]
# Parts of the metadata a GPU server's configuration adds (kb/server_config.py), measured
# only for a case that states one: the prefill checkpoint (0.32+) by its parts, FlashInfer's
# checkpoint plan (0.33+) by its parts, whether FLA's chunk metadata was built, the backend
# the builder resolved, and whether it supports update_block_table.
ServerExpectField = Literal[
    "checkpoint_offsets",
    "checkpoint_state_indices",
    "checkpoint_request_rows",
    "checkpoint_block_columns",
    "flashinfer_plan_every_n_tokens",
    "flashinfer_plan_num_checkpoints",
    "flashinfer_plan_cu_starts",
    "flashinfer_plan_rows",
    "chunk_metadata_built",
    "prefill_backend_resolved",
    "supports_update_block_table",
]
# The builder's own attributes that subclasses and runners read, measured from the real
# object only for a case that states one (a release whose builder lacks one measures it as
# absent, naming the AttributeError: the check fails): the layer names and device the base
# constructor sets, the kernel block size, the reorder threshold, the CUDA-graph support
# level (an enum: its member's name).
BuilderExpectField = Literal[
    "layer_names",
    "device",
    "kernel_block_size",
    "reorder_batch_threshold",
    "_cudagraph_support",
]
# What one engine step (a case's `step`, kb/steps.py) measures across its KV-cache groups:
# per group, the block tables its state indices came from (group g's own is g), and per
# group after the first, the fields of its metadata that differ from the first group's
# (state indices compared as entries of each group's own table).
StepExpectField = Literal["group_state_tables", "group_differences"]
# ...and the others.
ExpectField = Literal[
    CoreExpectField,
    # The other fields build() returns (GDNAttentionMetadata of every cached release, read
    # by tests/test_release_facts.py) as plain values: raw tensors as lists, the padded
    # tails of FULL-graph buffers included.
    "spec_state_indices_tensor",
    "non_spec_state_indices_tensor",
    "prefill_state_indices",
    # Layout (the harness measures them only for a case that states one): which fields
    # are views of the builder's persistent buffer of the same name, which are not contiguous.
    "persistent_views",
    "noncontiguous",
    # The builder's own attributes (measured only for a case that states one).
    BuilderExpectField,
    "spec_sequence_masks",
    "spec_sequence_masks_cpu",
    "uniform_spec_sequence_length",
    "chunk_indices",
    "chunk_offsets",
    "batch_ptr",
    "token_chunk_offset_ptr",
    # nums_dict, checkpoint, flashinfer_checkpoint_plan and aiter_prefill_metadata are
    # dicts or objects, not plain values: the full-metadata snapshots cover them.
    # The builder as a GPU server configures it.
    ServerExpectField,
    StepExpectField,
    # What a `call` case's host function returned (a tuple as a list), or what it raised.
    "returned",
    "raised",
    # With `raised: <type>` on a batch case: the exception's first line.
    "message",
    # Fields of open PRs (#40738, #55504) that no cached release has (read as above); a
    # case stating them lists them in `needs`.
    "spec_decode_src_indices",
    "non_spec_num_accepted",
]
