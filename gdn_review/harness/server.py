"""The builder as a GPU server configures it: what such a case adds to a run.

A case can configure the builder as vLLM configures it on a GPU server (the
prefill backend vLLM resolves there, prefix caching in align mode, the V2
runner's aligned state indices; see ``builders.as_on_server``). This module
holds what those cases add to a run: the V2 runner's hand-over of aligned
state indices, the metadata parts such a configuration adds (the prefill
checkpoint, FlashInfer's plan), the builder's own attributes, and how a value
is measured. No kernel runs in any of it. (``call`` cases: ``declarations``.)
"""

from __future__ import annotations

import enum

import torch

from gdn_review.harness.values import plain


def raised_words(error: BaseException) -> str:
    """What a case measures of an exception (expect: raised): "Type: its first line"."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}"


# The builder's own attributes that subclasses and runners read (expect fields of
# kb.types.BuilderExpectField), measured from the real object.
BUILDER_ATTRIBUTES = (
    "layer_names",
    "device",
    "kernel_block_size",
    "reorder_batch_threshold",
    "_cudagraph_support",
)


def builder_attributes(builder, names) -> dict:
    """The builder's attributes ``names`` as plain data: a device as its name ("cpu",
    "cuda:0"), an enum (``_cudagraph_support``) as its member's name. One the builder
    lacks is measured as absent, naming the AttributeError reading it raises (the
    check fails: a subclass or runner that reads it fails the same way)."""
    measured = {}
    for name in names:
        try:
            value = getattr(builder, name)
        except AttributeError as error:
            measured[name] = f"(no such field: AttributeError: {error})"
            continue
        measured[name] = measured_value(value)
    return measured


def measured_value(value):
    """A value as a case states it: plain data, a device as its name ("cpu",
    "cuda:0"), an enum (``_cudagraph_support``) as its member's name."""
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.name
    return plain(value)


def expected_on(device: str, case: dict, expected: dict) -> dict:
    """A case's expected fields on ``device``: on CUDA, its ``expect_on_cuda``
    overrides the fields it names (a value that differs there, such as
    supports_update_block_table)."""
    if not str(device).startswith("cuda"):
        return expected
    overrides = case.get("expect_on_cuda") or {}
    return {field: overrides.get(field, value) for field, value in expected.items()}


def server_fields(builder, metadata) -> dict:
    """The parts of the metadata a GPU server's configuration adds: the prefill
    checkpoint, FlashInfer's checkpoint plan, whether FLA's chunk metadata was
    built, and the prefill backend the builder resolved."""
    checkpoint = getattr(metadata, "checkpoint", None)
    plan = getattr(metadata, "flashinfer_checkpoint_plan", None)

    def part(owner, name):
        return None if owner is None else plain(getattr(owner, name, None))

    return {
        "checkpoint_offsets": part(checkpoint, "checkpoint_offsets"),
        "checkpoint_state_indices": part(checkpoint, "state_indices"),
        "checkpoint_request_rows": part(checkpoint, "request_rows"),
        "checkpoint_block_columns": part(checkpoint, "block_cols"),
        "flashinfer_plan_every_n_tokens": part(plan, "every_n_tokens"),
        "flashinfer_plan_num_checkpoints": part(plan, "num_checkpoints"),
        "flashinfer_plan_cu_starts": part(plan, "cu_starts"),
        "flashinfer_plan_rows": part(plan, "rows"),
        "chunk_metadata_built": getattr(metadata, "chunk_indices", None) is not None
        and getattr(metadata, "chunk_offsets", None) is not None,
        "prefill_backend_resolved": getattr(builder, "gdn_prefill_backend", None),
        # What vLLM reads before it calls update_block_table (0.33.0: the V2 runner
        # on CUDA only).
        "supports_update_block_table": getattr(
            builder, "supports_update_block_table", None
        ),
    }


def hand_aligned_indices(builder, indices, device: str) -> None:
    """What the V2 runner does before each build in align mode: hand the builder its
    group's aligned state indices (``mamba_aligned_state_indices``)."""
    if indices is not None:
        builder.mamba_aligned_state_indices = torch.tensor(
            indices, dtype=torch.int32
        ).to(device)
