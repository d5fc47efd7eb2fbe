"""The builder as a GPU server configures it: what such a case adds to a run.

A case can configure the builder as vLLM configures it on a GPU server (the
prefill backend vLLM resolves there, prefix caching in align mode, the V2
runner's aligned state indices; see ``builders._as_on_server``). This module
holds what those cases add to a run: the V2 runner's hand-over of aligned
state indices, the metadata parts such a configuration adds (the prefill
checkpoint, FlashInfer's plan), and ``call`` cases, which call a module-level
function of the target file on its own. No kernel runs in any of it.
"""

from __future__ import annotations

import enum

import torch

from gdn_review.harness.environment import prepare_platform
from gdn_review.harness.origin import setting_up
from gdn_review.harness.values import plain

# Classes a call case may pass (kb.models.HostClass) -> their module (None: target's).
HOST_CLASSES = {
    "GDNAttentionMetadataBuilder": None,
    "KimiK3ROCmKDAMetadataBuilder": "vllm.models.kimi_k3.amd.kda_metadata",
}


def call_host_function(case: dict) -> dict:
    """A ``call`` case: the target file's module-level function on its own (the loaded
    module's, a mutant's where one is loaded), its result as plain data."""
    import importlib

    import vllm

    prepare_platform()
    call = case["call"]
    with setting_up("importing vLLM's builder module"):
        module = importlib.import_module("vllm.v1.attention.backends.gdn_attn")
    function = module
    for name in call["function"].split("."):
        function = getattr(function, name, None)
    if function is None:
        import pytest

        pytest.skip(
            f"not applicable: vLLM {vllm.__version__} has no {call['function']}"
        )
    arguments = dict(call.get("arguments", {}))
    if "builder_cls" in arguments:
        # A class named by the record (kb.models.HostClass): the loaded module's own
        # builder, or vLLM's subclass of it.
        name = arguments["builder_cls"]
        where = HOST_CLASSES[name]
        arguments["builder_cls"] = getattr(
            module if where is None else importlib.import_module(where), name
        )
    try:
        return {"returned": plain(function(**arguments)), "raised": None}
    except Exception as error:  # noqa: BLE001  (what it raises is what the case states)
        return {"returned": None, "raised": raised_words(error)}


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
        if isinstance(value, torch.device):
            value = str(value)
        elif isinstance(value, enum.Enum):
            value = value.name
        measured[name] = plain(value)
    return measured


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
