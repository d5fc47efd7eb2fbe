"""Turn a case into ``build()`` inputs, run the real ``build()``, snapshot the result.

A case is plain data (as a record states it)::

    {
        "speculative_tokens": 2,
        "drafts": "given",
        "padded_rows": 1,
        "rows": [{"seq_len": 9, "query_len": 3, "drafted": 2}, ...],
    }

``drafted``: the row's draft count, None for a row that does not speculate (vLLM's
-1). Padded rows: zero-length rows at the back, as the runner pads for CUDA graphs.

Scenario keys (all optional) describe the builder as vLLM runs it: builder
settings (``cudagraph_mode``, ``mamba_cache_mode``, ``max_cudagraph_capture_size``,
``block_size``, ``prefill_backend``), token padding (``padded_tokens``), host
sequence lengths above the real ones (``host_seq_len_offset``, or a row's
``host_seq_len``), the block table's ``block_table_offset``, the ``entry``
point (``build``, ``capture``: ``build_for_cudagraph_capture``,
``update_block_table``: a re-gather of the build's metadata with the second
block table), ``after``: cases (as dicts, each with its own ``after``) built
first on the same builder, ``second_builder``: the re-gather runs on another
builder of the same settings (another KV-cache group; ``{"after": [...]}``:
built on first), and ``layout``: the snapshot also says which fields are views
of the builder's persistent buffers and which are not contiguous.
Block-table entry (r, c) is ``offset + r * columns + c + 1``; the second table
of a re-gather is the first plus ``SECOND_TABLE``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import warnings

import torch

from gdn_review.common.vocabulary import SkipKind
from gdn_review.harness.builders import BuilderSettings, make_builder, new_builder
from gdn_review.harness.declarations import backend_classes, call_declaration
from gdn_review.harness.environment import prepare_platform
from gdn_review.harness.inputs import build_arguments
from gdn_review.harness.origin import (
    CouldNotRun,
    raised_by_code_under_test,
    setting_up,
    skip,
    under_test,
)
from gdn_review.harness.server import (
    BUILDER_ATTRIBUTES,
    builder_attributes,
    hand_aligned_indices,
    raised_words,
    server_fields,
)
from gdn_review.harness.steps import run_step, step_skip_reason, step_snapshot
from gdn_review.harness.sync_proxy import DeviceOriginReads
from gdn_review.harness.values import SECOND_TABLE, layout, snapshot

# Entry points of the builder a case can use: case "entry" -> method name.
ENTRY_METHODS = {
    "build": "build",
    "capture": "build_for_cudagraph_capture",
    "update_block_table": "update_block_table",
}


@dataclasses.dataclass
class BuildRun:
    """What one ``build()`` returned (as plain data) and which aten ops it executed."""

    metadata: dict
    ops: dict[str, int]
    rows: int
    padded_rows: int
    device: str
    # update_block_table: the snapshot of the build it re-gathered
    built: dict | None = None
    # The aten ops of each call (one, or a step's several), in order.
    call_ops: list[dict] | None = None


def settings_for(case: dict, device: str) -> BuilderSettings:
    return BuilderSettings(
        device=device,
        speculative_tokens=case.get("speculative_tokens"),
        max_num_seqs=case.get("max_num_seqs", 8),
        block_size=case.get("block_size", 16),
        cudagraph_mode=case.get("cudagraph_mode"),
        mamba_cache_mode=case.get("mamba_cache_mode"),
        max_cudagraph_capture_size=case.get("max_cudagraph_capture_size"),
        prefill_backend=case.get("prefill_backend"),
        max_model_len=case.get("max_model_len", 256),
        resolved_prefill_backend=case.get("resolved_prefill_backend"),
        prefix_caching=_prefix_caching(case.get("prefix_caching")),
        model_runner=case.get("model_runner"),
        builder=case.get("builder"),
        kda_prefill_backend=case.get("kda_prefill_backend"),
        use_kda_recoverssm=case.get("use_kda_recoverssm"),
        adaptive_verification=case.get("adaptive_verification"),
        speculative_method=case.get("speculative_method"),
    )


def _prefix_caching(given: dict | None):
    """The case's prefix_caching as BuilderSettings holds it (hashable), or None."""
    if given is None:
        return None
    return (
        given["hash_block_size"],
        given["cache_hit_alignment_tokens"],
        given.get("num_prefill_checkpoint_blocks", 1),
        given.get("prefill_checkpoint_alignment"),
    )


def needs_own_builder(case: dict) -> bool:
    """Whether a case needs a builder of its own: FULL-graph staging writes the
    builder's persistent buffers, so a build there depends on the builds before."""
    mode = case.get("cudagraph_mode")
    # The V2 runner's aligned indices stay set on the builder it hands them to.
    # A step makes each KV-cache group's builder afresh, as an engine has one per group.
    return (
        bool(case.get("after"))
        or (mode is not None and "FULL" in mode)
        or case.get("aligned_state_indices") is not None
        or case.get("step") is not None
    )


def skip_what_cannot_run(case: dict, builder) -> None:
    """Skip, with its kind and reason, where the loaded release or device cannot run
    this case."""
    import sys

    import vllm
    from vllm.v1.attention.backend import CommonAttentionMetadata

    release = vllm.__version__
    method = ENTRY_METHODS[case.get("entry", "build")]
    if not hasattr(builder, method):
        skip(
            SkipKind.ABSENT,
            f"not applicable: vLLM {release} has no {type(builder).__name__}.{method}",
        )
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadata

    step_reason = step_skip_reason(case, builder)
    if step_reason is not None:
        skip(SkipKind.ABSENT, step_reason)
    # What the case needs is looked for where validate looks (kb.release_names): a
    # metadata field, the builder (its class and bases), the backend class whose
    # get_builder_cls returns the builder's class, a module-level name of its module.
    fields = {f.name for f in dataclasses.fields(GDNAttentionMetadata)}
    module = sys.modules[type(builder).__module__]
    places = [builder, *backend_classes(type(builder)), module]
    for name in case.get("needs") or []:
        if name not in fields and not any(hasattr(place, name) for place in places):
            skip(
                SkipKind.ABSENT,
                f"not applicable: vLLM {release} has no {name} (metadata, builder, "
                "backend or module)",
            )
    # A row fact the case states, on a release whose CommonAttentionMetadata lacks it
    # (METADATA_WITHOUT_ROW_FACTS leaves out only those it does not state).
    rows = case["rows"]
    host_lens = case.get("host_seq_len_offset") or any(
        row.get("host_seq_len") is not None for row in rows
    )
    stated = {
        "seq_lens_cpu_upper_bound": ("host sequence lengths", host_lens),
        "is_prefilling": (
            "a row's prefilling",
            any(r.get("prefilling") is not None for r in rows),
        ),
    }
    names = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    for field, (what, given) in stated.items():
        if given and field not in names:
            metadata = f"vLLM {release}'s CommonAttentionMetadata"
            skip(SkipKind.ABSENT, f"not applicable: {metadata} has no {field} ({what})")
    regather_indices = (case.get("second_builder") or {}).get(
        "aligned_state_indices"
    ) or (None if case.get("second_builder") else case.get("aligned_state_indices"))
    if (
        case.get("entry") == "update_block_table"
        and builder.vllm_config.cache_config.mamba_cache_mode == "align"
        and not getattr(builder, "supports_update_block_table", False)
        and regather_indices is None
    ):
        skip(
            SkipKind.NOT_APPLICABLE,
            "not applicable: update_block_table in mamba_cache_mode 'align' re-gathers "
            "the V2 runner's aligned state indices, and the case gives none "
            "(model_runner: v2 with aligned_state_indices)",
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


def _call_entry(builder, case: dict, kwargs: dict, keep_built=None, other=None):
    """Call the case's entry point with ``build()``'s arguments; returns the metadata
    and, for a re-gather, ``keep_built`` of the build it re-gathered, taken before
    the re-gather restages the FULL-graph buffers (else None). ``other``: the
    builder of another KV-cache group that re-gathers (default: ``builder``)."""
    common = kwargs["common_attn_metadata"]
    entry = case.get("entry", "build")
    device = str(common.query_start_loc.device)
    with setting_up("the runner's aligned state indices"):
        hand_aligned_indices(builder, case.get("aligned_state_indices"), device)
    if entry == "capture":
        with under_test(f"{type(builder).__name__}.build_for_cudagraph_capture"):
            return builder.build_for_cudagraph_capture(common), None
    with under_test(f"{type(builder).__name__}.build"):
        metadata = builder.build(**kwargs)
    if entry == "build":
        return metadata, None
    built = keep_built(metadata) if keep_built else None
    # The other group's table: a null entry (a padded row's) stays null there too.
    table = common.block_table_tensor
    second = torch.where(table == 0, table, table + SECOND_TABLE)
    regather = other if other is not None else builder
    if other is not None:
        with setting_up("the runner's aligned state indices"):
            hand_aligned_indices(
                other,
                (case.get("second_builder") or {}).get("aligned_state_indices"),
                device,
            )
    with under_test(f"{type(regather).__name__}.update_block_table"):
        return regather.update_block_table(metadata, second, common.slot_mapping), built


def _second_builder(case: dict, settings: BuilderSettings):
    """The other KV-cache group's builder of a re-gather (``second_builder``): same
    settings, its persistent buffers its own, after the builds it names; or None."""
    second = case.get("second_builder")
    if second is None:
        return None
    other = new_builder(settings)
    for earlier in second.get("after") or []:
        _run_after(other, earlier, settings.device)
    return other


def _run_entry(builder, case: dict, settings: BuilderSettings, other=None):
    """Call the case's entry point on ``builder``; returns (metadata, the snapshot of
    the build it re-gathered or None)."""
    kwargs, _, columns = build_arguments(case, settings)
    return _call_entry(
        builder, case, kwargs, lambda metadata: snapshot(metadata, columns), other
    )


def _run_after(builder, earlier: dict, device: str) -> None:
    """Build ``earlier`` on ``builder``, after the builds it names in turn."""
    for before in earlier.get("after") or []:
        _run_after(builder, before, device)
    settings = settings_for(earlier, device)
    _run_entry(builder, earlier, settings, _second_builder(earlier, settings))


def build_case(device: str, case: dict, count_ops: bool = True) -> BuildRun:
    """Run the real builder on ``case`` (its entry point, after the builds it
    names; or its engine step) and return the snapshot of the metadata and the
    ops it executed."""
    prepare_platform()
    if case.get("call") is not None:
        return BuildRun(
            metadata=call_declaration(case, settings_for(case, device)),
            ops={},
            rows=0,
            padded_rows=0,
            device=device,
        )
    if case.get("step") is not None:
        return _build_step(device, case, count_ops)
    if case.get("raises"):
        # The case states what constructing the builder and calling its entry point
        # raise (expect: raised): the exception is the measurement, "Type: first line".
        try:
            run = _build_case(device, case, count_ops)
        except Exception as error:  # what the builder raises is what it states
            if raised_by_code_under_test(error) is None:
                raise  # the set-up's (could not run) or our own (error in the check)
            measured = {"raised": raised_words(error)}
            if case["raises"] == "type":
                kind, _, first = measured["raised"].partition(": ")
                measured = {"raised": kind, "message": first}
            return BuildRun(
                metadata=measured,
                ops={},
                rows=len(case["rows"]),
                padded_rows=case.get("padded_rows", 0),
                device=device,
            )
        run.metadata["raised"] = None
        if case["raises"] == "type":
            run.metadata["message"] = None
        return run
    return _build_case(device, case, count_ops)


def _build_case(device: str, case: dict, count_ops: bool) -> BuildRun:
    """``build_case`` of a batch case (its entry point, after the builds it names)."""
    builder, settings = _builder_after(device, case)
    other = _second_builder(case, settings)
    columns = settings.block_table_columns
    counter = _OpCounter()
    with counter.mode if count_ops else contextlib.nullcontext():
        metadata, built = _run_entry(builder, case, settings, other)
    data = snapshot(metadata, columns)
    _measure_parts(data, case, other if other is not None else builder, metadata)
    return BuildRun(
        metadata=data,
        ops=dict(sorted(counter.counts.items())),
        rows=len(case["rows"]),
        padded_rows=case.get("padded_rows", 0),
        device=device,
        built=built,
        call_ops=[dict(sorted(counter.counts.items()))],
    )


def _measure_parts(data: dict, case: dict, builder, metadata) -> None:
    """Add the optional parts the case states to its snapshot ``data``."""
    # The case states buffer identity (expect: persistent_views, ...).
    if case.get("layout"):
        data.update(layout(builder, metadata))
    # What subclasses and the runner read of the builder itself (expect: layer_names,
    # reorder_batch_threshold, ...): the fields the case states (True: every one).
    names = case.get("builder_fields")
    if names:
        data.update(
            builder_attributes(builder, BUILDER_ATTRIBUTES if names is True else names)
        )
    # The case states parts a server's configuration adds (checkpoint_offsets, ...).
    if case.get("server_fields"):
        data.update(server_fields(builder, metadata))


def _step_builders(device: str, case: dict):
    """One fresh builder per KV-cache group of the case's step (a skip where the
    release cannot run it)."""
    settings = settings_for(case, device)
    builders = [new_builder(settings) for _ in range(case["step"].get("groups", 2))]
    skip_what_cannot_run(case, builders[0])
    return builders, settings


def _build_step(device: str, case: dict, count_ops: bool) -> BuildRun:
    """Run the case's engine step (harness.steps): ops counted per step and call."""
    builders, settings = _step_builders(device, case)
    kwargs, _, columns = build_arguments(case, settings)
    counter = _OpCounter()
    with counter.mode if count_ops else contextlib.nullcontext():
        metadatas, call_ops = run_step(builders, case, kwargs, counter.counts)
    data = step_snapshot(metadatas, columns, case.get("block_table_offset", 0))
    _measure_parts(data, case, builders[0], metadatas[0])
    return BuildRun(
        metadata=data,
        ops=dict(sorted(counter.counts.items())),
        rows=len(case["rows"]),
        padded_rows=case.get("padded_rows", 0),
        device=device,
        call_ops=call_ops if count_ops else None,
    )


def op_counts(run: BuildRun, budget: dict, per: str = "step") -> dict[str, int]:
    """What an op budget measures: per key (alternatives "aten.a|aten.b" counted
    together), the ops of every call (per step) or the most one call executed (per
    call)."""
    calls = [run.ops] if per == "step" else (run.call_ops or [run.ops])
    return {
        key: max(
            (sum(ops.get(op, 0) for op in key.split("|")) for ops in calls), default=0
        )
        for key in budget
    }


def prepare_builders(device: str, cases) -> None:
    """Make every builder these cases need now (once), so tests only build(); one whose
    set-up could not run or skips (the release lacks it) is left to its own tests."""
    import pytest

    for case in cases:
        # A case that states what its construction raises is constructed in its test.
        if (
            case.get("call") is None
            and not case.get("raises")
            and not needs_own_builder(case)
        ):
            with contextlib.suppress(CouldNotRun, pytest.skip.Exception):
                make_builder(settings_for(case, device))


def _builder_after(device: str, case: dict):
    """The builder a case runs on, after the builds its ``after`` names."""
    settings = settings_for(case, device)
    if needs_own_builder(case):
        builder = new_builder(settings)
    else:
        builder = make_builder(settings)
    skip_what_cannot_run(case, builder)
    for earlier in case.get("after") or []:
        _run_after(builder, earlier, device)
    return builder, settings


def count_sync_warnings(device: str, case: dict) -> int:
    """How many host-device synchronisations CUDA reports while the case's entry
    point runs."""
    if case.get("step") is not None:
        builders, settings = _step_builders(device, case)
        kwargs, _, _ = build_arguments(case, settings)

        def entry():
            run_step(builders, case, kwargs)
    else:
        builder, settings = _builder_after(device, case)
        # The inputs are made, and the metadata read back, outside the counted call:
        # the first H200 run counted their copies (4 to 6 "syncs" in build()).
        kwargs, _, _ = build_arguments(case, settings)

        def entry():
            _call_entry(builder, case, kwargs)

    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            entry()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return sum(1 for w in caught if "synchroniz" in str(w.message).lower())


def count_device_origin_reads(device: str, case: dict) -> dict[str, int]:
    """CPU proxy for host-device syncs: host reads, while the case's entry point
    runs, of tensors that would live on the device (the device-side inputs, the
    builder's buffers, and what is computed from them). CUDA's count stays the
    authority; this tells on CPU whether such a read happens at all."""
    step = case.get("step") is not None
    if step:
        builders, settings = _step_builders(device, case)
    else:
        builder, settings = _builder_after(device, case)
        builders = [builder]
    kwargs, _, _ = build_arguments(case, settings)
    common = kwargs["common_attn_metadata"]
    tracker = DeviceOriginReads()
    tracker.mark(
        common.query_start_loc,
        common.seq_lens,
        common.block_table_tensor,
        common.slot_mapping,
        kwargs["num_accepted_tokens"],
    )
    for each in builders:
        tracker.mark_attributes(each)
    with tracker:
        if step:
            run_step(builders, case, kwargs)
        else:
            _call_entry(builder, case, kwargs)
    return dict(sorted(tracker.reads.items()))


def snapshot_case(device: str, case: dict) -> dict:
    """What the case's entry point returns, as a snapshot; a release where it
    raises (a bug a later PR fixed) gives ``{"raised": "<type>: <message>"}``."""
    try:
        return build_case(device, case, count_ops=False).metadata
    except Exception as error:  # any crash of the builder is its behaviour
        if raised_by_code_under_test(error) is None:
            raise  # the set-up's (could not run) or our own (error in the check)
        return {"raised": raised_words(error)}
