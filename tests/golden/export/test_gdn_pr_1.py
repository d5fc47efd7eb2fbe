# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Tests of GDNAttentionMetadataBuilder.build() from the review of vLLM PR #1.

Golden "record" with ''' and ""\" and {{ braces }} and a \\ backslash
https://github.com/example/repo/pull/1

Every test builds vLLM's real GDNAttentionMetadataBuilder from a real VllmConfig (a tiny
Qwen3-Next config written to a temporary folder: no weights, no network) and checks what
build() returns or executes, on CPU and, where there is one, on a CUDA device. Known
deviations of vLLM 0.33.0 are strict xfails: the tests stay green, and fail when a
deviation disappears or changes.

Risks these tests address:
R1: Risk tied to a case.
R2: Risk tied to an invariant claim only.

Exported by gdn-review from kb/1.yaml for vLLM 0.33.0. Change the record and export
again rather than editing: gdn-review export --record 1
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import json
import os
import random
import tempfile
import warnings

import pytest
import torch

# The helpers below are gdn-review's harness (gdn_review/harness/), copied verbatim
# by the export: a real GDNAttentionMetadataBuilder from a real VllmConfig, a case
# turned into build() inputs, and what build() returns as plain data. On a machine
# without a GPU, prepare_platform() selects vLLM's CPU platform as vLLM's CPU tests
# do (VLLM_TARGET_DEVICE=cpu, set before vLLM is imported).


def prepare_platform() -> None:
    """Tell vLLM its platform before it is first imported.

    Without a GPU, vLLM must be told ``cpu`` or it reaches for pinned memory
    and fails with "Found no NVIDIA driver". An explicit setting wins.
    """
    # The model is a config in a local folder: never ask a hub for anything.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Importing the builder's module imports vLLM's humming kernels, which
    # start two background processes (a whole Python and torch each, ~18 s of
    # CPU) to compile CUDA launchers the builder never calls.
    os.environ.setdefault("HUMMING_DISABLE_PARALLEL_BUILD", "1")
    if "VLLM_TARGET_DEVICE" in os.environ:
        return
    import torch

    os.environ["VLLM_TARGET_DEVICE"] = "cuda" if torch.cuda.is_available() else "cpu"


@dataclasses.dataclass(frozen=True)
class BuilderSettings:
    """What a case needs of the builder: device and speculative config."""

    device: str = "cpu"
    speculative_tokens: int | None = None  # None: no speculative config at all
    max_num_seqs: int = 8
    max_model_len: int = 256
    block_size: int = 16

    @property
    def block_table_columns(self) -> int:
        # cdiv(max_model_len, block_size) columns, as the runner allocates them;
        # never fewer than the 1 + k state slots a speculative row reads.
        columns = -(-self.max_model_len // self.block_size)
        return max(columns, 1 + (self.speculative_tokens or 0))


def _accepted_kwargs(cls, **kwargs):
    """Keep only the keyword arguments this release's ``cls`` accepts."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    return {name: value for name, value in kwargs.items() if name in parameters}


# A tiny Qwen3-Next: one linear-attention (GDN) layer and one full-attention layer.
# transformers fills in every field left out.
MODEL_CONFIG = {
    "model_type": "qwen3_next",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "linear_num_value_heads": 2,
    "linear_num_key_heads": 1,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "num_experts": 2,
    "num_experts_per_tok": 1,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "max_position_embeddings": 1024,
}


@functools.cache
def _model_dir() -> str:
    folder = tempfile.mkdtemp(prefix="gdn-review-model-")
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(MODEL_CONFIG, handle, indent=2, sort_keys=True)
    return folder


def _model_config(max_model_len: int):
    """A fresh ModelConfig for each VllmConfig, as each vLLM engine has its own.

    Never cached: VllmConfig runs the model's config hooks (which turn prefix
    caching into mamba_cache_mode "align") once per ModelConfig and marks it
    done, so a shared one left every builder after the first in "none" mode.
    After the first (imports), one costs a few milliseconds.
    """
    from vllm.config import ModelConfig

    return ModelConfig(
        **_accepted_kwargs(
            ModelConfig,
            model=_model_dir(),
            tokenizer=None,
            skip_tokenizer_init=True,
            max_model_len=max_model_len,
            dtype="float32",
            # Eager: no full CUDA graphs, so CUDA metadata is not padded to a
            # graph's batch size and compares field by field with CPU runs.
            enforce_eager=True,
        )
    )


def _vllm_config(settings: BuilderSettings):
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    speculative = None
    if settings.speculative_tokens is not None:
        speculative = SpeculativeConfig(
            **_accepted_kwargs(
                SpeculativeConfig,
                method="ngram",
                num_speculative_tokens=settings.speculative_tokens,
                prompt_lookup_max=2,
                prompt_lookup_min=1,
            )
        )
    scheduler = SchedulerConfig(
        **_accepted_kwargs(
            SchedulerConfig,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=max(2048, settings.max_model_len),
            max_model_len=settings.max_model_len,
            is_encoder_decoder=False,
        )
    )
    return VllmConfig(
        model_config=_model_config(settings.max_model_len),
        # vLLM's CPU platform asserts a cpu device config. Where the builder's
        # tensors go to CUDA under it (CUDA platform unavailable: a bundle on a
        # GPU machine), the config says cpu and the builder gets the device.
        device_config=DeviceConfig(
            device="cpu"
            if os.environ.get("VLLM_TARGET_DEVICE") == "cpu"
            else settings.device
        ),
        cache_config=CacheConfig(
            **_accepted_kwargs(CacheConfig, block_size=settings.block_size)
        ),
        scheduler_config=scheduler,
        speculative_config=speculative,
    )


@functools.cache
def make_builder(settings: BuilderSettings):
    """The real builder for ``settings``; built once per process and reused."""
    prepare_platform()
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder
    from vllm.v1.kv_cache_interface import MambaSpec

    spec = MambaSpec(
        **_accepted_kwargs(
            MambaSpec,
            block_size=settings.block_size,
            shapes=((4, 4),),
            dtypes=(torch.float32,),
            num_speculative_blocks=settings.speculative_tokens or 0,
        )
    )
    return GDNAttentionMetadataBuilder(
        spec,
        ["model.layers.0.linear_attn"],
        _vllm_config(settings),
        torch.device(settings.device),
    )


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


def draw_batch(integer, choice, speculative_tokens: list[int], max_rows: int) -> dict:
    """A valid batch, chosen by ``integer(low, high)`` and ``choice(options)``."""
    k = choice([None, *sorted(speculative_tokens)])
    drafts = "given" if k is None else choice(["given", "given", "given", "none"])
    count = integer(1, max_rows)
    decodes = integer(0, count)
    rows = []
    for _ in range(decodes):
        context = integer(1, 64)
        if k is not None and drafts == "given":
            drafted = integer(0, k)
            accepted = integer(1, drafted + 1)
            rows.append(
                {
                    "seq_len": context + drafted + 1,
                    "query_len": drafted + 1,
                    "drafted": drafted,
                    "accepted": accepted,
                }
            )
        else:
            rows.append({"seq_len": context + 1, "query_len": 1, "prefilling": False})
    for _ in range(count - decodes):
        query = integer(2, 16)
        rows.append({"seq_len": integer(0, 64) + query, "query_len": query})
    return {
        "speculative_tokens": k,
        "drafts": drafts,
        "rows": rows,
        "padded_rows": integer(0, max_rows - count),
        "max_num_seqs": max(8, max_rows),
    }


def seeded_batches(
    seed: int, count: int, speculative_tokens: list[int], max_rows: int
) -> list[dict]:
    """``count`` valid batches from ``random.Random(seed)``: the same on every run."""
    rng = random.Random(seed)
    return [
        draw_batch(rng.randint, rng.choice, speculative_tokens, max_rows)
        for _ in range(count)
    ]


def _real_rows(rows):
    """State-index rows without NULL_BLOCK_ID (-1): CUDA-graph padding is not a row."""
    return [row for row in (rows or []) if row != -1]


def _check_fallback_condition(batch, run):
    # The old condition: fall back unless a speculating row drafted at least one token.
    drafted = [
        row["drafted"] for row in batch["rows"] if row.get("drafted") is not None
    ]
    falls_back = (
        batch.get("speculative_tokens") is None
        or batch.get("drafts", "given") == "none"
        or sum(drafted) == 0
    )
    path = run.metadata["path"]
    assert (path == "non_spec") == falls_back, (
        f"path {path!r}, but the old condition says fall back = {falls_back}"
    )


def _check_fallback_without_speculating_rows(batch, run):
    # The rule since vLLM 0.32 (PR #56531): fall back only when no row speculates.
    speculating = [row for row in batch["rows"] if row.get("drafted") is not None]
    falls_back = (
        batch.get("speculative_tokens") is None
        or batch.get("drafts", "given") == "none"
        or not speculating
    )
    path = run.metadata["path"]
    assert (path == "non_spec") == falls_back, (
        f"path {path!r}, but no-speculating-row rule says fall back = {falls_back}"
    )


def _check_partition(batch, run):
    spec = _real_rows(run.metadata["spec_state_rows"])
    non_spec = _real_rows(run.metadata["non_spec_state_rows"])
    assert len(spec) == len(set(spec)) and len(non_spec) == len(set(non_spec)), (
        "a row appears twice"
    )
    assert not set(spec) & set(non_spec), (
        f"rows on both paths: {sorted(set(spec) & set(non_spec))}"
    )
    missing = set(range(run.rows)) - set(spec) - set(non_spec)
    assert not missing, f"rows on neither path: {sorted(missing)}"


def _check_spec_rows_match_drafts(batch, run):
    if run.metadata["path"] != "spec":
        return
    speculating = [
        i for i, row in enumerate(batch["rows"]) if row.get("drafted") is not None
    ]
    assert _real_rows(run.metadata["spec_state_rows"]) == speculating
    assert run.metadata["num_spec_decodes"] == len(speculating)
    accepted = [batch["rows"][i].get("accepted", 1) for i in speculating]
    assert run.metadata["num_accepted_tokens"][: len(speculating)] == accepted
    # Each spec row reads k + 1 consecutive state slots of its own block-table row.
    for row, cells in zip(speculating, run.metadata["spec_state_cells"]):
        assert [cell[0] for cell in cells] == [row] * (
            batch["speculative_tokens"] + 1
        ), f"row {row} reads {cells}"
        first = cells[0][1]
        assert [cell[1] for cell in cells] == list(range(first, first + len(cells))), (
            f"row {row} reads {cells}"
        )
    # The spec token indices are exactly the tokens of the spec rows, in order.
    starts = [0]
    for row in batch["rows"]:
        starts.append(starts[-1] + row["query_len"])
    spec_tokens = [t for i in speculating for t in range(starts[i], starts[i + 1])]
    if run.metadata["spec_token_indx"] is not None:
        assert run.metadata["spec_token_indx"] == spec_tokens, (
            "spec_token_indx selects other tokens"
        )
    if run.metadata["non_spec_token_indx"] is not None:
        others = [t for t in range(starts[-1]) if t not in set(spec_tokens)]
        assert run.metadata["non_spec_token_indx"] == others, (
            "non_spec_token_indx selects other tokens"
        )


def _check_counts_add_up(batch, run):
    m = run.metadata
    tokens = sum(row["query_len"] for row in batch["rows"])
    counted = (
        m["num_prefill_tokens"] + m["num_decode_tokens"] + m["num_spec_decode_tokens"]
    )
    assert counted == tokens, f"{counted} tokens counted, batch has {tokens}"
    # Every real row is counted once; zero-length padding may count as a decode
    # on the non-speculative path (vLLM sizes CUDA graphs by it).
    requests = m["num_prefills"] + m["num_decodes"] + m["num_spec_decodes"]
    assert run.rows <= requests <= run.rows + run.padded_rows, (
        f"{requests} requests counted, batch has {run.rows} (+{run.padded_rows} padded)"
    )
    assert not (m["num_decodes"] > 0 and m["num_spec_decodes"] > 0), (
        "plain and spec decodes together"
    )


def _check_indices_in_bounds(batch, run):
    m = run.metadata
    total_rows = run.rows + run.padded_rows
    for key in ("spec_state_rows", "non_spec_state_rows", "prefill_state_rows"):
        for row in _real_rows(m.get(key)):
            assert 0 <= row < total_rows, f"{key} selects row {row} of {total_rows}"
    tokens = sum(row["query_len"] for row in batch["rows"])
    for key in ("spec_query_start_loc", "non_spec_query_start_loc"):
        starts = m.get(key)
        if starts:
            assert starts[0] == 0 and all(a <= b for a, b in zip(starts, starts[1:])), (  # noqa: RUF007
                f"{key} {starts}"
            )
            assert starts[-1] <= tokens, (
                f"{key} ends at {starts[-1]} of {tokens} tokens"
            )
    spec_tokens, non_spec_tokens = (
        m.get("spec_token_indx"),
        m.get("non_spec_token_indx"),
    )
    if spec_tokens is not None and non_spec_tokens is not None:
        everything = sorted(spec_tokens + non_spec_tokens)
        assert (
            everything == list(range(len(everything))) and len(everything) <= tokens
        ), "token indices overlap or leave gaps"


def _check_deterministic(batch, run):
    again = build_case(run.device, batch, count_ops=False)
    assert again.metadata == run.metadata, "two builds of the same batch differ"


# The record's named batches (cases), as build() inputs: rows of seq_len,
# query_len, drafted (draft tokens of a speculating row; absent: vLLM's -1) and
# accepted, then padded_rows zero-length rows at the back.
CASES = {
    "plain": {
        "drafts": "given",
        "max_num_seqs": 8,
        "padded_rows": 0,
        "rows": [{"accepted": 1, "query_len": 1, "seq_len": 10}],
    },
    "spec": {
        "drafts": "given",
        "max_num_seqs": 8,
        "padded_rows": 1,
        "rows": [
            {"accepted": 2, "drafted": 2, "query_len": 3, "seq_len": 10},
            {"accepted": 1, "drafted": 0, "query_len": 1, "seq_len": 12},
        ],
        "speculative_tokens": 2,
    },
}

# What build() returns for each case, field by field (the equivalence checks).
EXPECTED = {
    "plain": {"path": "non_spec"},
    "spec": {"path": "spec", "spec_state_rows": [0, 1]},
}


def _check_op_budget(case_id, run, budget, pinned):
    # A budget key may name alternatives ("aten.a|aten.b"): they count together.
    measured = {key: sum(run.ops.get(op, 0) for op in key.split("|")) for key in budget}
    if pinned is not None:
        _check_deviation_unchanged(measured, pinned)
    over = {
        op: (measured[op], limit)
        for op, limit in budget.items()
        if measured[op] > limit
    }
    assert not over, (
        f"{case_id}: over budget (measured, budget): {over}; all ops: {run.ops}"
    )


def _check_fields(case_id, run, expected, pinned):
    if pinned is not None:
        _check_deviation_unchanged(run.metadata, pinned)
    measured = {field: run.metadata[field] for field in expected}
    differences = {
        field: (measured[field], value)
        for field, value in expected.items()
        if measured[field] != value
    }
    assert not differences, (
        f"{case_id}: fields differ (measured, expected): {differences}"
    )


def _check_property(device, prop, seed, random_batches, instead):
    batches = list(CASES.items())
    batches += [
        (f"random batch {index} of seed {seed}", batch)
        for index, batch in enumerate(random_batches)
    ]
    failures = []
    for name, batch in batches:
        run = build_case(device, batch, count_ops=False)
        if instead is not None:
            try:
                globals()["_check_" + instead](batch, run)
            except AssertionError as error:
                # What holds in place of a deviating property must hold: a failure.
                pytest.fail(
                    f"{name}: {instead} (holds instead of {prop}) fails: {error}",
                    pytrace=False,
                )
        try:
            globals()["_check_" + prop](batch, run)
        except AssertionError as error:
            failures.append(f"{name}: {error}; batch: {batch}")
    assert not failures, (
        f"{prop} fails on {len(failures)} of {len(batches)} batches:\n"
        + "\n".join(failures[:5])
    )


def _check_deviation_unchanged(measured, pinned):
    # A known deviation (strict xfail) must measure what the record pins: a changed
    # deviation fails instead of xfailing.
    changed = {
        key: (measured.get(key), value)
        for key, value in pinned.items()
        if measured.get(key) != value
    }
    if changed:
        pytest.fail(
            f"the known deviation changed (measured, recorded): {changed}",
            pytrace=False,
        )


@pytest.fixture(
    scope="module",
    params=[
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(
                not torch.cuda.is_available(), reason="needs a CUDA device"
            ),
        ),
    ],
)
def device(request):
    """The device build() runs on; its builders are made once per module."""
    prepare_builders(request.param, CASES.values())
    return request.param


C1_BUDGET = {"aten.ge": 1, "aten.bitwise_not": 1}
C1_KNOWN_DEVIATION = pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason=(
        "known deviation on vLLM 0.33.0: a reason with 'quotes' and \"double\" and {% "
        "raw %} and\nnewline (measured: aten.ge = 2)"
    ),
)
C1_PINNED = {"spec": {"aten.ge": 2}}


@pytest.mark.parametrize(
    "case_id",
    [pytest.param("spec", marks=C1_KNOWN_DEVIATION)],
)
def test_c1_op_budget(device, case_id):
    """Claim C1 of PR #1: ""\"; import os; os.system('echo pwned') #

    Checked as an op budget: the aten ops build() executes on the case, counted with a
    TorchDispatchMode, stay within {"aten.ge": 1, "aten.bitwise_not": 1}. Risks it
    addresses: R1 (module docstring).

    Strict xfail, known deviation on vLLM 0.33.0: a reason with 'quotes' and "double"
    and {% raw %} and newline (measured: aten.ge = 2)
    """
    run = build_case(device, CASES[case_id])
    _check_op_budget(
        case_id,
        run,
        C1_BUDGET,
        C1_PINNED.get(case_id),
    )


@pytest.mark.parametrize(
    "case_id",
    ["spec", "plain"],
)
def test_c2_equal_rows_equivalence(device, case_id):
    """Claim C2.equal-rows of PR #1: Multi line '''text''' {{ x }} \\n

    Checked as equivalence: build() returns the case's expected fields (EXPECTED). Risks
    it addresses: R1 (module docstring).
    """
    run = build_case(device, CASES[case_id], count_ops=False)
    _check_fields(
        case_id,
        run,
        EXPECTED[case_id],
        None,
    )


# Random valid batches for the invariant below: EXAMPLES of them drawn from
# random.Random(SEED), the same batches on every run.
C3_SEED = 1
C3_EXAMPLES = 5
C3_BATCHES = seeded_batches(
    C3_SEED,
    C3_EXAMPLES,
    speculative_tokens=[2],
    max_rows=4,
)


@pytest.mark.parametrize(
    "prop",
    ["partition", "deterministic"],
)
def test_c3_invariant(device, prop):
    """Claim C3 of PR #1: Invariants hold.

    Checked as an invariant: the property holds on every named case and on 5 random
    valid batches drawn from random.Random(1). Risks it addresses: R2 (module
    docstring).
    """
    _check_property(
        device,
        prop,
        C3_SEED,
        C3_BATCHES,
        None,
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "case_id",
    ["spec"],
)
def test_c4_gpu_sync(case_id):
    """Claim C4 of PR #1: No syncs.

    Checked on CUDA only: build() synchronises host and device at most 0 times
    (torch.cuda.set_sync_debug_mode).
    """
    prepare_builders("cuda", [CASES[case_id]])
    # A warm-up build first: first-call allocations are not what the claim is about.
    build_case("cuda", CASES[case_id], count_ops=False)
    syncs = count_sync_warnings("cuda", CASES[case_id])
    assert syncs <= 0, f"{case_id}: build() synchronised {syncs} times"
