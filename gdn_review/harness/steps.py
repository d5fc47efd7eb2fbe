"""One engine step on a batch: each KV-cache group's call, as vLLM's runners make it.

The runners build attention metadata once per KV-cache group and step
(``gpu_model_runner._build_attention_metadata``; the V2 runner's
``gpu/attn_utils.build_attn_metadata``): group g gets a shallow copy of the
step's common metadata with its own block table (here the first group's entries
+ g * SECOND_TABLE; a null entry stays null) and its own builder, whose buffers
are its own. A later group re-gathers with ``update_block_table`` where its
builder supports it (CUDA's V2 runner), else it builds. In align mode the V2
runner first hands each such builder its group's aligned state indices
(``mamba_aligned_state_indices``), which ``update_block_table`` asserts. Methods a
PR adds (``step["before_builds"]``) run once before the groups, on the first group's
builder. The case gives ``{"step": {"groups": 2, "before_builds": [...]}}``.
"""

from __future__ import annotations

import collections
import copy
import inspect

import torch

from gdn_review.harness.origin import setting_up, under_test
from gdn_review.harness.values import SECOND_TABLE, snapshot

# State-index fields of build()'s metadata: entries of the group's own block table.
STATE_INDEX_FIELDS = (
    "spec_state_indices_tensor",
    "non_spec_state_indices_tensor",
    "prefill_state_indices",
)


def step_skip_reason(case: dict, builder) -> str | None:
    """Why the loaded release cannot run the step: a method it calls is absent
    (None: it can)."""
    import vllm

    build_parameters = inspect.signature(builder.build).parameters
    for call in (case.get("step") or {}).get("before_builds") or []:
        if not callable(getattr(builder, call["method"], None)):
            return (
                f"not applicable: vLLM {vllm.__version__} has no "
                f"{type(builder).__name__}.{call['method']}"
            )
        # The result goes to build() by name: a build() without that parameter would
        # run the step without it.
        if call.get("result_as") and call["result_as"] not in build_parameters:
            return (
                f"not applicable: vLLM {vllm.__version__}'s "
                f"{type(builder).__name__}.build() takes no {call['result_as']}"
            )
    return None


def group_block_table(table, group: int):
    """Group ``group``'s block table: the first group's entries + group * 10000."""
    return torch.where(table == 0, table, table + group * SECOND_TABLE)


def _call_arguments(method, names: list[str], kwargs: dict) -> dict:
    """A step call's arguments: those it names, else those its signature names."""
    if names:
        return {name: kwargs[name] for name in names}
    parameters = inspect.signature(method).parameters
    return {name: value for name, value in kwargs.items() if name in parameters}


def _hand_aligned_indices(builder, group_common) -> None:
    """What 0.33.0's V2 runner does in align mode before it builds a step's groups
    (``vllm/v1/worker/gpu/model_states/mamba_hybrid.py`` lines 303-318): every
    group's builder with a ``mamba_aligned_state_indices`` attribute gets its
    group's aligned indices. 0.33.0's GDN builder has one exactly where it has
    ``supports_update_block_table`` (V2 runner, CUDA device; ``gdn_attn.py``
    lines 185-193), the builders run_step hands them to. (KimiK3KDAMetadataBuilder
    declares it on the class; the harness leaves that builder as it was.)

    The runner computes them with one Triton kernel for every group
    (``vllm/v1/worker/mamba_utils.py``: lines 39-99,
    ``get_aligned_state_indices_multi_group_kernel``, launched by
    ``compute_aligned_state_indices``, lines 1106-1141):
    row r, slot s is ``block_table[r, max((seq_len - 1) // block_size, 0) + s]``
    for s < 1 + num_speculative_blocks. That is
    ``vllm.v1.attention.backends.utils.mamba_get_block_table_tensor`` in align mode
    (``utils.py`` lines 1283-1357; build() calls it where no indices were handed),
    here on the group's own block table. The hand-over is the runner's line 318.
    """
    from vllm.v1.attention.backends.utils import mamba_get_block_table_tensor

    builder.mamba_aligned_state_indices = mamba_get_block_table_tensor(
        group_common.block_table_tensor,
        group_common.seq_lens,
        builder.kv_cache_spec,
        "align",
    )


def run_step(builders, case: dict, kwargs: dict, counts=None):
    """Run one step: the case's before_builds calls, then each group's build() (or
    re-gather). Returns each group's metadata and, per call, the aten ops it
    executed (``counts``: the op counter's running Counter, or None)."""
    common = kwargs["common_attn_metadata"]
    extra, call_ops = {}, []

    def counted(function, *args, **keywords):
        before = collections.Counter(counts) if counts is not None else None
        with under_test(getattr(function, "__qualname__", "the step's call")):
            result = function(*args, **keywords)
        if counts is not None:
            call_ops.append(dict(sorted((counts - before).items())))
        return result

    def uncounted(function, *args):
        before = collections.Counter(counts) if counts is not None else None
        with setting_up("the runner's aligned state indices"):
            function(*args)
        if counts is not None:
            counts.clear()
            counts.update(before)

    for call in case["step"].get("before_builds") or []:
        method = getattr(builders[0], call["method"])
        arguments = _call_arguments(method, call.get("arguments") or [], kwargs)
        result = counted(method, **arguments)
        if call.get("result_as"):  # a build() parameter (step_skip_reason)
            extra[call["result_as"]] = result
    metadatas = []
    for group, builder in enumerate(builders):
        group_common = copy.copy(common)  # the runner's shallow copy per group
        if group:
            group_common.block_table_tensor = group_block_table(
                common.block_table_tensor, group
            )
        if getattr(builder, "supports_update_block_table", False) and (
            builder.vllm_config.cache_config.mamba_cache_mode == "align"
        ):
            # The runner's work, not the builder's: outside the op counts. (A step
            # case gives no aligned_state_indices of its own: kb/step_config.py.)
            uncounted(_hand_aligned_indices, builder, group_common)
        if group and getattr(builder, "supports_update_block_table", False):
            metadata = counted(
                builder.update_block_table,
                metadatas[0],
                group_common.block_table_tensor,
                group_common.slot_mapping,
            )
        else:
            group_kwargs = {**kwargs, "common_attn_metadata": group_common, **extra}
            metadata = counted(builder.build, **group_kwargs)
        metadatas.append(metadata)
    return metadatas, call_ops


def _state_indices(data: dict) -> list:
    """Every state-index value of a snapshot: three fields, the prefill checkpoint's."""
    checkpoint = data.get("checkpoint")
    found = [data.get(name) for name in STATE_INDEX_FIELDS]
    return found + [
        checkpoint.get("state_indices") if isinstance(checkpoint, dict) else None
    ]


def _tables_of(data: dict, offset: int) -> list[int]:
    """The block tables a group's state indices came from (0: the first group's)."""
    tables = set()
    pending = _state_indices(data)
    while pending:
        value = pending.pop()
        if isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, int) and value > 0:
            tables.add((value - 1 - offset) // SECOND_TABLE)
    return sorted(tables)


def _as_first_group(value, group: int):
    """A state-index value of group ``group`` as an entry of the first group's table."""
    if isinstance(value, list):
        return [_as_first_group(item, group) for item in value]
    if isinstance(value, int) and value > 0:
        return value - group * SECOND_TABLE
    return value


def step_snapshot(metadatas, columns: int, offset: int) -> dict:
    """The first group's snapshot, and what compares the groups: per group, the block
    tables its state indices came from; per later group, the fields that differ from
    the first group's (state indices read as entries of each group's own table)."""
    groups = [snapshot(metadata, columns) for metadata in metadatas]
    data = dict(groups[0])
    data["group_state_tables"] = [_tables_of(group, offset) for group in groups]
    differences = []
    for index, group in enumerate(groups[1:], start=1):
        mapped = {
            name: _as_first_group(value, index) if name in STATE_INDEX_FIELDS else value
            for name, value in group.items()
        }
        if isinstance(group.get("checkpoint"), dict):
            checkpoint = dict(group["checkpoint"])
            checkpoint["state_indices"] = _as_first_group(
                checkpoint.get("state_indices"), index
            )
            mapped["checkpoint"] = checkpoint
        differences.append(
            sorted(name for name in groups[0] if mapped.get(name) != groups[0][name])
        )
    data["group_differences"] = differences
    return data
