# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Tests of GDNAttentionMetadataBuilder.build() from the review of vLLM PR #1.

Golden "record" with ''' and ""\" and {{ braces }} and a \\ backslash
https://github.com/example/repo/pull/1

Every test builds vLLM's real GDNAttentionMetadataBuilder from a real VllmConfig (a tiny
Qwen3-Next config written to a temporary folder: no weights, no network) and checks what
build() returns or executes, on CPU and, where there is one, on a CUDA device. Known
deviations of vLLM 0.33.0 are strict xfails: the tests stay green, and fail when a
deviation disappears or changes. A test that ends in CouldNotRun (could not run: ...)
measured nothing: its set-up (the platform, VllmConfig, an import) raised before the
builder ran; fix the environment.

Risks these tests address:
R1: Risk tied to a case.
R2: Risk tied to an invariant claim only.

Not exported for vLLM 0.33.0: the full-metadata snapshot (no stored snapshot of vLLM
0.33.0: make one with `gdn-review snapshot --record 1 --release 0.33.0`).

Exported by gdn-review from kb/1.yaml for vLLM 0.33.0. Change the record and export
again rather than editing: gdn-review export --record 1
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import copy
import dataclasses
import enum
import functools
import importlib
import inspect
import json
import os
import random
import shutil
import sys
import tempfile
import traceback
import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

# The helpers below are gdn-review's harness (gdn_review/harness/), copied verbatim
# by the export: a real GDNAttentionMetadataBuilder from a real VllmConfig, a case
# turned into build() inputs (and its scenario: graph mode, entry point, builds
# before it), and what build() returns as plain data. On a machine without a GPU,
# prepare_platform() selects vLLM's CPU platform as vLLM's CPU tests do
# (VLLM_TARGET_DEVICE=cpu, set before vLLM is imported).


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


class SkipKind:
    """Why a generated test skipped, as the harness says it (``harness.origin.skip``
    marks pytest's skip; the plugin writes the test's ``skip_kind``): a report reads
    the verdict from it, never from the reason. Plain words, not an enum: the export
    copies this class into modules that run without gdn-review."""

    ABSENT = "absent"  # the release lacks what the case needs: pending for an open PR
    NOT_APPLICABLE = "not applicable"  # outside the claim's or case's releases, ...
    REFUSED = "refused"  # an adaptation the release refuses: never pending
    NEEDS_CUDA = "needs CUDA"
    OTHER = "other"  # any other skip (pytest's own, no stored snapshot): unverified


# The attribute ``under_test`` sets on an exception that vLLM's code under test raised.
UNDER_TEST = "gdn_review_under_test"


# The attribute ``skip`` sets on its skip: why the test skipped (a SkipKind).
SKIP_KIND = "gdn_review_skip_kind"


def last_frame(error: BaseException) -> str:
    """Where ``error`` was raised: ``path:line in function`` of vLLM's innermost frame
    in its traceback (or in the exceptions it was raised from or while handling:
    pydantic re-raises a validator's error as its own), else of the innermost frame."""
    innermost = None
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        frames = traceback.extract_tb(error.__traceback__)
        innermost = innermost or (frames[-1] if frames else None)
        for frame in reversed(frames):
            if short_path(frame.filename).startswith("vllm/"):
                return f"{short_path(frame.filename)}:{frame.lineno} in {frame.name}"
        error = error.__cause__ or error.__context__
    if innermost is None:
        return "(no traceback)"
    return f"{short_path(innermost.filename)}:{innermost.lineno} in {innermost.name}"


def short_path(filename: str) -> str:
    """``vllm/platforms/cpu.py`` of ``/…/site-packages/vllm/platforms/cpu.py``."""
    parts = filename.replace(os.sep, "/").split("/")
    for root in ("vllm", "gdn_review", "torch", "transformers"):
        if root in parts:
            index = len(parts) - 1 - parts[::-1].index(root)
            return "/".join(parts[index:])
    return parts[-1]


def first_line(error: BaseException) -> str:
    """The message's first line; for a message whose first line only counts (pydantic's
    "1 validation error for VllmConfig"), its second too."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and "validation error" in lines[0]:
        return f"{lines[0]}: {lines[1]}"[:400]
    return lines[0][:400]


class CouldNotRun(Exception):
    """The check could not run: something before the builder under test raised.

    ``step`` names what the harness was doing (``VllmConfig``, ``import``, ...);
    the message is vLLM's, with the frame that raised it.
    """

    def __init__(self, step: str, error: BaseException):
        self.step = step
        self.cause = f"{type(error).__name__}: {first_line(error)}"
        self.where = last_frame(error)
        super().__init__(f"could not run: {step} raised {self.cause} (at {self.where})")


@contextlib.contextmanager
def setting_up(step: str):
    """Run set-up (not the code under test): what it raises becomes ``CouldNotRun``.

    pytest's skips and failures pass through (they are not ``Exception``), and so
    does an exception that code under test raised inside (``under_test`` marked it).
    """
    try:
        yield
    except CouldNotRun:
        raise
    except Exception as error:
        if getattr(error, UNDER_TEST, None) is not None:
            raise
        raise CouldNotRun(step, error) from error


@contextlib.contextmanager
def under_test(what: str):
    """Run vLLM's code under test: what it raises is behaviour, marked with ``what``."""
    try:
        yield
    except CouldNotRun:
        raise
    except Exception as error:
        if getattr(error, UNDER_TEST, None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(error, UNDER_TEST, what)
        raise


def raised_by_code_under_test(error: BaseException) -> str | None:
    """What code under test raised ``error`` (``under_test``'s mark), or None."""
    return getattr(error, UNDER_TEST, None)


def skip(kind: str, reason: str):
    """pytest's skip with ``reason``, marked with its ``kind`` (a SkipKind), which the
    plugin records: a report reads the verdict from it, never from the reason."""
    import pytest

    __tracebackhide__ = True
    skipped = pytest.skip.Exception(reason)
    setattr(skipped, SKIP_KIND, kind)
    raise skipped


# Set to 1: no adaptation applies (a release runs as it is, or could not run).
SWITCH_OFF = "GDN_REVIEW_NO_RELEASE_ADAPTATIONS"


@dataclasses.dataclass(frozen=True)
class Adaptation:
    name: str
    releases: str  # in words: "0.34.0 on", "before 0.32.0"
    what: str
    reason: str
    # The first release it applies to (and every later one); None: found by probing
    # the loaded release's API.
    first_release: str | None = None


X86_CPU_WITHOUT_TRITON = Adaptation(
    name="x86_cpu_without_triton",
    releases="0.34.0 on",
    first_release="0.34.0",
    what=(
        "while the harness makes its VllmConfig on the CPU platform of an x86 machine, "
        "vllm.triton_utils.HAS_TRITON reads True (False again once the config is made, "
        "also in the modules first imported meanwhile)"
    ),
    reason=(
        "vLLM's CPU platform refuses x86 without Triton's CPU backend (triton-cpu) "
        "in check_and_update_config ('vLLM on x86 CPUs requires Triton "
        "(triton-cpu).'), for its model runner; the metadata builder launches no "
        "Triton kernel on CPU, and 0.33.0 only warned there"
    ),
)


PREFIX_CACHING_UNRESOLVED = Adaptation(
    name="prefix_caching_unresolved",
    releases="before 0.32.0 (CacheConfig without hash_block_size)",
    what=(
        "a case's prefix caching in align mode sets mamba_cache_mode 'align' and "
        "enable_prefix_caching, not hash_block_size nor cache_hit_alignment_tokens"
    ),
    reason=(
        "the release's CacheConfig has neither field (0.32.0 added them, with prefill "
        "checkpoints); its engine resolved prefix caching without them, so the builder "
        "is configured as that engine configured it"
    ),
)


METADATA_WITHOUT_ROW_FACTS = Adaptation(
    name="metadata_without_row_facts",
    releases="before 0.20.0 (CommonAttentionMetadata without them)",
    what=(
        "the rows' is_prefilling or seq_lens_cpu_upper_bound (those the class lacks) "
        "not passed to CommonAttentionMetadata"
    ),
    reason=(
        "the release's CommonAttentionMetadata has no such field: its runners sent "
        "none and its builder reads none (a case stating host lengths there is not "
        "applicable)"
    ),
)


ADAPTATIONS = (
    X86_CPU_WITHOUT_TRITON,
    PREFIX_CACHING_UNRESOLVED,
    METADATA_WITHOUT_ROW_FACTS,
)


# build()'s inputs that carry the rows' own facts, each a field of
# CommonAttentionMetadata from some release on (METADATA_WITHOUT_ROW_FACTS).
ROW_FACT_FIELDS = ("is_prefilling", "seq_lens_cpu_upper_bound")


# The engine's prefix-caching resolution (PREFIX_CACHING_UNRESOLVED).
PREFIX_CACHING_FIELDS = ("hash_block_size", "cache_hit_alignment_tokens")


def switched_off() -> bool:
    return os.environ.get(SWITCH_OFF) == "1"


def _release_tuple(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers)


def _applies(adaptation: Adaptation, version: str) -> bool:
    return not switched_off() and _release_tuple(version) >= _release_tuple(
        adaptation.first_release
    )


def _x86_cpu_without_triton() -> bool:
    """The loaded vLLM's platform is its CPU one on x86 and finds no Triton."""
    import platform

    import vllm.triton_utils
    from vllm.platforms import current_platform

    machine = platform.machine().lower()
    return (
        current_platform.is_cpu()
        and machine in ("x86_64", "amd64", "i386", "i686")
        and not vllm.triton_utils.HAS_TRITON
    )


def _missing_fields(cls, names) -> list[str]:
    fields = {field.name for field in dataclasses.fields(cls)}
    return [name for name in names if name not in fields]


def in_force() -> list[dict]:
    """The adaptations that apply to the loaded release on this machine (plain data)."""
    import vllm
    from vllm.config import CacheConfig
    from vllm.v1.attention.backend import CommonAttentionMetadata

    found = []
    if _applies(X86_CPU_WITHOUT_TRITON, vllm.__version__) and _x86_cpu_without_triton():
        found.append(X86_CPU_WITHOUT_TRITON)
    if _missing_fields(CacheConfig, PREFIX_CACHING_FIELDS):
        found.append(PREFIX_CACHING_UNRESOLVED)
    missing = _missing_fields(CommonAttentionMetadata, ROW_FACT_FIELDS)
    if missing:  # 0.19.0 lacks one of them, 0.17.0 and 0.18.0 both
        found.append(
            dataclasses.replace(
                METADATA_WITHOUT_ROW_FACTS,
                what=f"the rows' {' and '.join(missing)} not passed to "
                "CommonAttentionMetadata",
            )
        )
    return [dataclasses.asdict(adaptation) for adaptation in found]


def resolve_prefix_caching(cache_config, hash_block_size: int, alignment: int) -> None:
    """The engine's resolution of prefix caching (EngineCore, then the worker copies it
    into the cache config), where the release has it (PREFIX_CACHING_UNRESOLVED)."""
    if _missing_fields(type(cache_config), PREFIX_CACHING_FIELDS):
        return
    cache_config.hash_block_size = hash_block_size
    cache_config.cache_hit_alignment_tokens = alignment


# Where vLLM resolves GDN's prefill backend (defined in the layer's module; gdn_attn
# imports it by name, so both names are replaced).
PREFILL_BACKEND_RESOLVER = "_resolve_gdn_prefill_backend"


RESOLVER_MODULES = (
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    "vllm.v1.attention.backends.gdn_attn",
)


def prefill_backend_resolvers() -> list:
    """The modules of the loaded release that hold vLLM's prefill-backend resolver;
    ``NotInRelease`` where none does: a case that asks for the backend a GPU server
    resolves cannot have it."""
    import importlib

    found = []
    for name in RESOLVER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, PREFILL_BACKEND_RESOLVER):
            found.append(module)
    if not found:
        asked = f"{PREFILL_BACKEND_RESOLVER} (resolved_prefill_backend)"
        _not_in_release("GDN layer module", [asked])
    return found


@contextlib.contextmanager
def making_config():
    """While the harness makes a VllmConfig: the adaptations of that step in force."""
    import vllm

    if not (
        _applies(X86_CPU_WITHOUT_TRITON, vllm.__version__) and _x86_cpu_without_triton()
    ):
        yield
        return
    import sys

    import vllm.triton_utils

    # How many modules were loaded: those imported meanwhile come after them (a dict
    # keeps its insertion order), and a set of every name per config cost a millisecond.
    before = len(sys.modules)
    # vllm/platforms/cpu.py reads it at call time (from vllm.triton_utils import ...).
    vllm.triton_utils.HAS_TRITON = True
    try:
        yield
    finally:
        vllm.triton_utils.HAS_TRITON = False
        # A module first imported meanwhile copied True (from vllm.triton_utils
        # import HAS_TRITON), e.g. 0.34.0's jit_warmup_triton_helper: its decorators
        # would then reach triton.runtime, which the placeholder has not, once the
        # builder imports its kernels.
        for module in list(sys.modules.values())[before:]:
            names = getattr(module, "__dict__", None)  # getattr(module, ...) may import
            if isinstance(names, dict) and names.get("HAS_TRITON") is True:
                module.HAS_TRITON = False


def model_runner_env(runner: str | None) -> tuple[str, str] | None:
    """How the case's ``model_runner`` is chosen on the loaded release: the environment
    variable and its value, or None where the release has one runner only. A release
    without the one asked skips as not applicable (vLLM 0.34.0 removed model runner V1:
    its gpu_model_runner.py is gone, VLLM_USE_V2_MODEL_RUNNER is no longer read)."""
    if runner is None:
        return None
    import vllm
    import vllm.envs

    if "VLLM_USE_V2_MODEL_RUNNER" in vllm.envs.environment_variables:
        return "VLLM_USE_V2_MODEL_RUNNER", "1" if runner == "v2" else "0"
    if runner == "v2":
        return None
    skip(
        SkipKind.REFUSED,
        f"not applicable: vLLM {vllm.__version__} has no model runner V1 (removed in "
        "0.34.0: VLLM_USE_V2_MODEL_RUNNER is no longer read; V2 is the only runner)",
    )


class NotInRelease(TypeError):
    """The loaded release has no such field: a case that sets it would run elsewise."""


def accepted_kwargs(cls, asked=(), **kwargs):
    """The keyword arguments of ``kwargs`` that this release's ``cls`` accepts.

    The harness's own defaults (``kwargs`` not in ``asked``) are dropped where a
    release does not take them; a field the case sets (``asked``) is never dropped:
    ``NotInRelease`` names it (renamed or removed), so the case could not run rather
    than run in another configuration.
    """
    import inspect

    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    missing = sorted(
        name for name in asked if name in kwargs and name not in parameters
    )
    if missing:
        _not_in_release(cls.__name__, missing)
    return {name: value for name, value in kwargs.items() if name in parameters}


def set_field(owner, name: str, value) -> None:
    """``owner.name = value`` where the release's config has that field; else
    ``NotInRelease`` (setting it would add an attribute vLLM never reads)."""
    if not hasattr(owner, name):
        _not_in_release(type(owner).__name__, [name])
    setattr(owner, name, value)


def _not_in_release(owner: str, names: list[str]) -> None:
    import vllm

    raise NotInRelease(
        f"vLLM {vllm.__version__}'s {owner} has no {', '.join(names)}, which the "
        "case sets (renamed or removed in this release?): run as it is, the case "
        "would check another configuration"
    )


# A tiny Qwen3-Next: one linear-attention (GDN) layer and one full-attention layer.
# transformers fills in every field left out. The architecture is named, as a
# Qwen3-Next checkpoint's config.json names it: left out, it was transformers' base
# class (Qwen3NextModel), which vLLM serves as an embedding model (pooling runner),
# inspecting a second model class in a subprocess of its own per release.
MODEL_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
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


# A tiny Llama, the standalone draft model of method draft_model (its vocabulary the
# target's, as vLLM requires of a draft).
DRAFT_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 1024,
}


# The methods a case may name (kb.cases.SpeculativeMethod).
SPECULATIVE_METHODS = ("ngram", "draft_model", "mtp")


@functools.cache
def model_dir(draft: bool = False) -> str:
    folder = tempfile.mkdtemp(prefix="gdn-review-model-")
    config = DRAFT_MODEL_CONFIG if draft else MODEL_CONFIG
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
    atexit.register(_remove_model_dir, folder, os.getpid())
    return folder


def _remove_model_dir(folder: str, owner: int) -> None:
    """Once the process that made it ends (each process used to leave one behind)."""
    if os.getpid() == owner:  # a forked child (a mutant's) shares its parent's folder
        shutil.rmtree(folder, ignore_errors=True)


def model_config(max_model_len: int):
    """A fresh ModelConfig for each VllmConfig, as each vLLM engine has its own.

    Never cached: VllmConfig runs the model's config hooks (which turn prefix
    caching into mamba_cache_mode "align") once per ModelConfig and marks it
    done, so a shared one left every builder after the first in "none" mode.
    After the first (imports), one costs a few milliseconds.
    """
    from vllm.config import ModelConfig

    return ModelConfig(
        **accepted_kwargs(
            ModelConfig,
            ("max_model_len",),
            model=model_dir(),
            tokenizer=None,
            skip_tokenizer_init=True,
            max_model_len=max_model_len,
            dtype="float32",
            # Eager: no full CUDA graphs, so CUDA metadata is not padded to a
            # graph's batch size and compares field by field with CPU runs.
            enforce_eager=True,
        )
    )


def speculative_config(method: str | None, tokens: int, target):
    """The SpeculativeConfig of ``method`` (None: ngram), ``tokens`` speculative tokens,
    for the target model config ``target``; a release that cannot configure the method
    skips as not applicable."""
    import typing

    import vllm
    from vllm.config import ParallelConfig, SpeculativeConfig
    from vllm.config import speculative as module

    method = method or "ngram"
    if method not in typing.get_args(getattr(module, "SpeculativeMethod", None)):
        skip(
            SkipKind.ABSENT,
            f"not applicable: vLLM {vllm.__version__} has no speculative "
            f"method {method}",
        )
    if method == "ngram":
        extra = {"prompt_lookup_max": 2, "prompt_lookup_min": 1}
    else:
        # vLLM derives the drafter's model config from the target's, as the engine does.
        extra = {
            "target_model_config": target,
            "target_parallel_config": ParallelConfig(),
        }
        if method == "draft_model":
            extra["model"] = model_dir(draft=True)
    return SpeculativeConfig(
        **accepted_kwargs(
            SpeculativeConfig,
            ("method", "num_speculative_tokens"),
            method=method,
            num_speculative_tokens=tokens,
            **extra,
        )
    )


@dataclasses.dataclass(frozen=True)
class BuilderSettings:
    """What a case needs of the builder: device, speculative and scenario config.

    ``None`` leaves a setting as the VllmConfig makes it (eager, no capture size
    limit, the model's mamba cache mode, the release's default prefill backend).
    """

    device: str = "cpu"
    speculative_tokens: int | None = None  # None: no speculative config at all
    max_num_seqs: int = 8
    max_model_len: int = 256
    block_size: int = 16
    cudagraph_mode: str | None = None  # a CUDAGraphMode name, e.g. "FULL_AND_PIECEWISE"
    mamba_cache_mode: str | None = None  # "none" or "align"
    max_cudagraph_capture_size: int | None = None
    prefill_backend: str | None = None  # additional_config["gdn_prefill_backend"]
    # The builder as a GPU server configures it (None: as this machine resolves
    # it): the prefill backend vLLM's resolver returns there (made to return it
    # off CUDA),
    resolved_prefill_backend: str | None = None
    # prefix caching in align mode as the engine resolves it: (hash_block_size,
    # cache_hit_alignment_tokens, num_prefill_checkpoint_blocks,
    # prefill_checkpoint_alignment),
    prefix_caching: tuple[int, int, int, int | None] | None = None
    # and the model runner ("v1", "v2": VLLM_USE_V2_MODEL_RUNNER meanwhile).
    model_runner: str | None = None
    # The builder class: an in-tree subclass of GDNAttentionMetadataBuilder that the
    # loaded release ships (harness.family finds them); None: GDN's own.
    builder: str | None = None
    # A subclass's own configuration: additional_config["kda_prefill_backend"],
    kda_prefill_backend: str | None = None
    # and cache_config.use_kda_recoverssm (derived by vLLM; set after the config).
    use_kda_recoverssm: bool | None = None
    # speculative_config.enable_adaptive_verification (None: the config's default).
    adaptive_verification: bool | None = None
    # speculative_config.method (None: ngram; tiny_models.SPECULATIVE_METHODS).
    speculative_method: str | None = None

    @property
    def block_table_columns(self) -> int:
        # cdiv(max_model_len, block_size) columns, as the runner allocates them;
        # never fewer than the 1 + k state slots a speculative row reads.
        columns = -(-self.max_model_len // self.block_size)
        return max(columns, 1 + (self.speculative_tokens or 0))


def _accepted_kwargs(cls, asked=(), **kwargs):
    """Keep only the keyword arguments this release's ``cls`` accepts; one of ``asked``
    (a field the case sets) that it does not accept raises (adaptations.py)."""
    return accepted_kwargs(cls, asked, **kwargs)


def make_vllm_config(settings: BuilderSettings):
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig

    target = model_config(settings.max_model_len)
    speculative = None
    if settings.speculative_tokens is not None:
        speculative = speculative_config(
            settings.speculative_method, settings.speculative_tokens, target
        )
    scheduler = SchedulerConfig(
        **_accepted_kwargs(
            SchedulerConfig,
            ("max_num_seqs",),
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=max(2048, settings.max_model_len),
            max_model_len=settings.max_model_len,
            is_encoder_decoder=False,
        )
    )
    additional = {}
    if settings.prefill_backend is not None:
        additional["gdn_prefill_backend"] = settings.prefill_backend
    if settings.kda_prefill_backend is not None:
        additional["kda_prefill_backend"] = settings.kda_prefill_backend
    # A release's platform may refuse this machine for its runner (adaptations.py).
    with making_config():
        config = VllmConfig(
            model_config=target,
            # vLLM's CPU platform asserts a cpu device config. Where the builder's
            # tensors go to CUDA under it (CUDA platform unavailable: a bundle on a
            # GPU machine), the config says cpu and the builder gets the device.
            device_config=DeviceConfig(
                device="cpu"
                if os.environ.get("VLLM_TARGET_DEVICE") == "cpu"
                else settings.device
            ),
            cache_config=CacheConfig(
                **_accepted_kwargs(
                    CacheConfig,
                    ("block_size", "mamba_cache_mode", "enable_prefix_caching"),
                    block_size=settings.block_size,
                    **(
                        {"mamba_cache_mode": "align", "enable_prefix_caching": True}
                        if settings.prefix_caching is not None
                        else {}
                    ),
                )
            ),
            scheduler_config=scheduler,
            speculative_config=speculative,
            **_accepted_kwargs(
                VllmConfig,
                ("additional_config",) if additional else (),
                additional_config=additional,
            ),
        )
    _set_after_config(config, speculative, settings)
    return config


@functools.cache
def engine_config(settings: BuilderSettings):
    """The VllmConfig of ``settings``, made once per process: an engine's builders
    share its one config and only read it (no builder of the releases searched,
    0.17.0 to 0.19.0 and 0.28.0 to 0.34.0, writes into it). Dropped with the
    builders where a mutated module is loaded (making a config might run it)."""
    return make_vllm_config(settings)


def _set_after_config(config, speculative, settings: BuilderSettings) -> None:
    """What the case sets once the config is made, as vLLM's own CPU tests of the
    builder do: made with them, the eager model config would turn a requested graph
    mode back into NONE, and the engine resolves prefix caching only later.
    ``speculative``: the config's speculative config, as it was made."""
    if settings.cudagraph_mode is not None:
        from vllm.config import CUDAGraphMode

        config.compilation_config.cudagraph_mode = CUDAGraphMode[
            settings.cudagraph_mode
        ]
    if settings.max_cudagraph_capture_size is not None:
        compilation = config.compilation_config
        compilation.max_cudagraph_capture_size = settings.max_cudagraph_capture_size
    if settings.mamba_cache_mode is not None:
        set_field(config.cache_config, "mamba_cache_mode", settings.mamba_cache_mode)
    if settings.use_kda_recoverssm is not None:
        set_field(
            config.cache_config, "use_kda_recoverssm", settings.use_kda_recoverssm
        )
    if settings.adaptive_verification is not None and speculative is not None:
        # vLLM's check (V2 runner, FULL graphs) reads the graph mode the eager
        # model config has turned back into NONE by then.
        set_field(
            speculative, "enable_adaptive_verification", settings.adaptive_verification
        )
    if settings.prefix_caching is not None:
        # The engine resolves these after the config is made (EngineCore, then the
        # worker copies them into the cache config); a bare VllmConfig leaves them None.
        hash_block_size, alignment_tokens, _, _ = settings.prefix_caching
        set_field(config.cache_config, "mamba_cache_mode", "align")
        # Where the release resolves them (adaptations.PREFIX_CACHING_UNRESOLVED).
        resolve_prefix_caching(config.cache_config, hash_block_size, alignment_tokens)


def _vllm_platform_is_cuda() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cuda()


@contextlib.contextmanager
def as_on_server(settings: BuilderSettings):
    """While the builder is constructed: vLLM's own resolver returns the case's prefill
    backend (off vLLM's CUDA platform; on it vLLM resolves it with no override), and the
    model runner is the case's. The builder's __init__ then derives its own attributes
    from them."""
    runner = model_runner_env(settings.model_runner)
    saved_runner = os.environ.get(runner[0]) if runner else None
    if runner is not None:
        os.environ[runner[0]] = runner[1]
    patched = []
    backend = settings.resolved_prefill_backend
    # vLLM's resolver answers for vLLM's platform, not the tensors' device: on its CPU
    # platform it says "triton" also beside CUDA tensors (the first H200 run).
    if backend is not None and not _vllm_platform_is_cuda():
        for module in prefill_backend_resolvers():
            patched.append((module, module._resolve_gdn_prefill_backend))
            module._resolve_gdn_prefill_backend = lambda config: (backend, backend)
    try:
        yield
    finally:
        for module, original in patched:
            module._resolve_gdn_prefill_backend = original
        if runner is not None:
            if saved_runner is None:
                os.environ.pop(runner[0], None)
            else:
                os.environ[runner[0]] = saved_runner


GDN_BUILDER_MODULE = "vllm.v1.attention.backends.gdn_attn"


GDN_BUILDER = "GDNAttentionMetadataBuilder"


@functools.cache
def family_modules() -> dict[str, str]:
    """The loaded release's GDN builder family: each class whose base is
    GDNAttentionMetadataBuilder or one of its subclasses (GDN's own included) -> its
    module. Found by scanning the release's own files, not from a list."""
    import re

    import vllm

    root = os.path.dirname(vllm.__file__)
    bases: dict[str, tuple[str, list[str]]] = {}
    pattern = re.compile(rb"^class (\w+)\(([\w., ]+)\):", re.MULTILINE)
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                text = handle.read()
            if b"MetadataBuilder)" not in text and b"MetadataBuilder," not in text:
                continue
            module = "vllm." + os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            for found in pattern.finditer(text):
                parents = [
                    b.strip().rsplit(b".", 1)[-1].decode()
                    for b in found.group(2).split(b",")
                ]
                bases[found.group(1).decode()] = (
                    module.removesuffix(".__init__"),
                    parents,
                )
    family = {GDN_BUILDER: GDN_BUILDER_MODULE}
    grown = True
    while grown:
        grown = False
        for cls, (module, parents) in bases.items():
            if cls not in family and any(parent in family for parent in parents):
                family[cls] = module
                grown = True
    return dict(sorted(family.items()))


def builder_class(name: str | None):
    """The builder class ``name`` (None: GDN's) of the loaded release; a release
    without it skips as not applicable."""
    import importlib

    import vllm

    if name is None or name == GDN_BUILDER:
        return getattr(importlib.import_module(GDN_BUILDER_MODULE), GDN_BUILDER)
    module = family_modules().get(name)
    if module is None:
        skip(SkipKind.ABSENT, f"not applicable: vLLM {vllm.__version__} has no {name}")
    loaded = importlib.import_module(module)
    cls = getattr(loaded, name)
    gdn = getattr(importlib.import_module(GDN_BUILDER_MODULE), GDN_BUILDER)
    if gdn not in cls.__mro__:
        # GDN's module was replaced after the subclass was imported (a mutant loaded in
        # memory): import the subclass again, as a fresh process would, so that it
        # derives from the loaded GDN builder.
        cls = getattr(importlib.reload(loaded), name)
    return cls


@functools.cache
def make_builder(settings: BuilderSettings):
    """The real builder for ``settings``; built once per process and reused."""
    return new_builder(settings)


def new_builder(settings: BuilderSettings):
    """A fresh real builder: its persistent (FULL-graph) buffers are its own."""
    prepare_platform()
    with setting_up("importing vLLM's builder"):
        cls = builder_class(settings.builder)

    spec = mamba_spec(settings)
    with setting_up("VllmConfig"):
        config = engine_config(settings)
    with contextlib.ExitStack() as server:
        with setting_up("the server's configuration"):  # a release without its resolver
            server.enter_context(as_on_server(settings))
        with under_test(f"{cls.__name__}.__init__"):
            # As the engine does: builder_cls(kv_cache_spec, layer_names, config,
            # device).
            return cls(
                spec,
                ["model.layers.0.linear_attn"],
                config,
                torch.device(settings.device),
            )


def mamba_spec(settings: BuilderSettings):
    """The MambaSpec the engine hands the builder (kv_cache_spec) for ``settings``."""
    with setting_up("importing vLLM's MambaSpec"):
        from vllm.v1.kv_cache_interface import MambaSpec

    checkpoints = {}
    if settings.prefix_caching is not None:
        _, _, blocks, alignment = settings.prefix_caching
        checkpoints = {
            "mamba_cache_mode": "align",
            "num_prefill_checkpoint_blocks": blocks,
            "prefill_checkpoint_alignment": alignment,
        }
    with setting_up("MambaSpec"):
        spec = MambaSpec(
            **_accepted_kwargs(
                MambaSpec,
                ("block_size", "shapes", "dtypes", *checkpoints)
                + (("num_speculative_blocks",) if settings.speculative_tokens else ()),
                block_size=settings.block_size,
                shapes=((4, 4),),
                dtypes=(torch.float32,),
                num_speculative_blocks=settings.speculative_tokens or 0,
                **checkpoints,
            )
        )
    return spec


# What a comparison shows for a field that one side lacks.
NO_FIELD = "(no such field)"


# The keys of a tensor's stored form where it states its dtype (``values.stored_form``).
TENSOR_KEYS = {"dtype", "values", "shape"}


def explicit_form(form, name: str | None, usual: dict[str, str]):
    """A stored form (an expect's value, a snapshot's field) with every tensor that
    states no dtype but has one by ``usual`` written ``{dtype, values}``: what it
    means, read with the table it was written with, so that it compares the same read
    with any other. A list of a field ``usual`` does not name stays a list (its values
    only)."""
    if isinstance(form, dict):
        # A tensor that states its dtype, or {values}: that it states none.
        if "values" in form and set(form) <= TENSOR_KEYS:
            return form
        return {k: explicit_form(item, str(k), usual) for k, item in form.items()}
    if isinstance(form, list) and name in usual:
        return {"dtype": usual[name], "values": form}
    if isinstance(form, list):
        return [explicit_form(item, name, usual) for item in form]
    return form


def implied_shape(values) -> list[int]:
    """The shape a nested list of values implies: [] -> [0], [[], []] -> [2, 0]."""
    shape = []
    while isinstance(values, list):
        shape.append(len(values))
        if not values:
            break
        values = values[0]
    return shape


def tensor_parts(form, usual: str | None):
    """(dtype, shape, values) of a stored form that is a tensor: ``{dtype, values}``
    states its own, a list has its field's ``usual`` dtype (None: the field holds no
    tensor); else None."""
    if isinstance(form, dict) and {"dtype", "values"} <= set(form) <= TENSOR_KEYS:
        values = form["values"]
        return form["dtype"], form.get("shape", implied_shape(values)), values
    if isinstance(form, list) and usual is not None:
        return usual, implied_shape(form), form
    return None


def tensor_change(first, second):
    """("dtype" or "shape", first's, second's) where two tensors (``tensor_parts``)
    have the same values and their dtype or shape differ; None otherwise."""
    if first is None or second is None or first[2] != second[2]:
        return None
    if first[0] != second[0]:
        return "dtype", first[0], second[0]
    if first[1] != second[1]:
        return "shape", first[1], second[1]
    return None


# The dtype of each tensor build() returns whose dtype does not depend on the batch,
# by the name it has in a snapshot (a metadata field, a field of one of its parts such
# as ``checkpoint`` or ``nums_dict``, a server field): measured from the real builder
# (vLLM 0.33.0 on CPU, every case of kb/, tests/test_dtype_rule.py). Part of format 2:
# changing an entry changes what format-2 records and snapshots mean (a new version).
USUAL_DTYPES = {
    # GDNAttentionMetadata
    "batch_ptr": "int32",
    "chunk_indices": "int32",
    "chunk_offsets": "int64",
    "has_initial_state": "bool",
    "non_spec_query_start_loc": "int32",
    "non_spec_state_indices_tensor": "int32",
    "num_accepted_tokens": "int32",
    "prefill_has_initial_state": "bool",
    "prefill_query_start_loc": "int32",
    "prefill_state_indices": "int32",
    "spec_query_start_loc": "int32",
    "spec_sequence_masks": "bool",
    "spec_sequence_masks_cpu": "bool",
    "spec_state_indices_tensor": "int32",
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


# Classes a call may pass as its builder_cls argument (kb.server_config.HostClass) ->
# their module (None: the builder's own).
HOST_CLASSES = {
    "GDNAttentionMetadataBuilder": None,
    "KimiK3ROCmKDAMetadataBuilder": "vllm.models.kimi_k3.amd.kda_metadata",
}


# The parameters the harness fills from the case (kb.call_targets.CASE_ARGUMENTS).
CASE_ARGUMENTS = ("vllm_config", "kv_cache_spec", "device")


def backend_classes(builder_cls) -> list:
    """The classes of the builder's module whose get_builder_cls returns it."""
    module = sys.modules[builder_cls.__module__]
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and "get_builder_cls" in vars(value)
        and value.get_builder_cls() is builder_cls
    ]


def declaration(target: str, builder: str | None):
    """The loaded release's ``target`` (``name`` of the builder's module, or
    ``Class.name`` of the builder or its backend class), inherited or its own."""
    import vllm

    with setting_up("importing vLLM's builder module"):
        cls = builder_class(builder)
        module = importlib.import_module(cls.__module__)
    owner_name, _, name = target.rpartition(".")
    if not owner_name:
        owner = module
    elif owner_name == cls.__name__:
        owner = cls
    else:
        owner = next(
            (b for b in backend_classes(cls) if b.__name__ == owner_name), None
        )
    if owner is None or not hasattr(owner, name):
        release = vllm.__version__
        skip(SkipKind.ABSENT, f"not applicable: vLLM {release} has no {target}")
    return module, getattr(owner, name)


def _case_arguments(function, settings) -> dict:
    """The case's own VllmConfig, MambaSpec and device for the parameters that ask."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to fill
        return {}
    made = {}
    if "vllm_config" in parameters:
        with setting_up("VllmConfig"):
            made["vllm_config"] = make_vllm_config(settings)
    if "kv_cache_spec" in parameters:
        made["kv_cache_spec"] = mamba_spec(settings)
    if "device" in parameters:
        made["device"] = torch.device(settings.device)
    return made


def call_declaration(case: dict, settings) -> dict:
    """A ``call`` case's measurement: what its target returned (or, for ``attribute``,
    holds) as plain data, or what it raised; ``settings``: its BuilderSettings."""
    prepare_platform()
    call = case["call"]
    target = call.get("function") or call["attribute"]
    module, value = declaration(target, case.get("builder"))
    if "function" not in call:
        return {"returned": measured_value(value), "raised": None}
    arguments = {
        **_case_arguments(value, settings),
        **call.get("arguments", {}),
    }
    if "builder_cls" in arguments:
        # A class named by the record (kb.server_config.HostClass): the loaded module's
        # own builder, or vLLM's subclass of it.
        name = arguments["builder_cls"]
        where = HOST_CLASSES[name]
        arguments["builder_cls"] = getattr(
            module if where is None else importlib.import_module(where), name
        )
    # Only the call is the case's behaviour: where the server set-up around it raises,
    # it could not run; reading what it returned is our own code (origin.py's rule).
    with contextlib.ExitStack() as server:
        with setting_up("the server's configuration"):
            server.enter_context(as_on_server(settings))
        try:
            returned = value(**arguments)
        except Exception as error:  # noqa: BLE001  (what it raises is what the case states)
            return {"returned": None, "raised": raised_words(error)}
        return {"returned": measured_value(returned), "raised": None}


def row_values(case: dict) -> list[dict]:
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


def build_arguments(case: dict, settings: BuilderSettings):
    """``build()``'s arguments, with a CommonAttentionMetadata fitted to the release
    (what raises while they are made: could not run)."""
    with setting_up("build()'s inputs"):
        return _build_arguments(case, settings)


def _build_arguments(case: dict, settings: BuilderSettings):
    device = torch.device(settings.device)
    rows = row_values(case)
    columns = settings.block_table_columns
    common = _common_metadata(case, rows, columns, device)
    drafts, num_accepted = _speculation_counts(case, rows, device)
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


def _common_metadata(case: dict, rows: list[dict], columns: int, device):
    """The case's CommonAttentionMetadata, with the fields this release accepts."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    query_lens = [row["query_len"] for row in rows]
    seq_lens = [row["seq_len"] for row in rows]
    starts = [0]
    for length in query_lens:
        starts.append(starts[-1] + length)
    # Token padding (FULL-graph replay) counts tokens beyond the real ones.
    num_tokens = starts[-1] + case.get("padded_tokens", 0)
    # Entry (r, c) = offset + r * columns + c + 1: every state index names its
    # row, and 0 (vLLM's NULL_BLOCK_ID) never appears as a real entry.
    block_table = case.get("block_table_offset", 0) + torch.arange(
        1, len(rows) * columns + 1, dtype=torch.int32
    ).reshape(len(rows), columns)
    if case.get("null_padded_blocks"):
        # Padded rows own no blocks: every entry is NULL_BLOCK_ID (0).
        block_table[len(case["rows"]) :] = 0
    # Unless a row says so, a row that does not speculate and has more than one
    # query token is a prefill (vLLM's is_prefilling); capture batches are decodes.
    capture = case.get("entry") == "capture"
    prefilling = [
        row["prefilling"]
        if row.get("prefilling") is not None
        else (not capture and row.get("drafted") is None and row["query_len"] > 1)
        for row in rows
    ]
    # What the host believes of each sequence's length (vLLM may overestimate).
    host_seq_lens = [
        row["seq_len"]
        if row.get("padded")
        else row.get("host_seq_len")
        or row["seq_len"] + case.get("host_seq_len_offset", 0)
        for row in rows
    ]
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    query_lens_cpu = torch.tensor(query_lens, dtype=torch.int32)
    query_start_loc_cpu = torch.tensor(starts, dtype=torch.int32)
    candidates = {
        "query_start_loc": query_start_loc_cpu.to(device, copy=True),
        "query_start_loc_cpu": query_start_loc_cpu,
        "seq_lens": seq_lens_cpu.to(device, copy=True),
        "num_reqs": len(rows),
        "num_actual_tokens": num_tokens,
        "max_query_len": max(query_lens, default=0),
        "max_seq_len": max(seq_lens, default=0),
        "block_table_tensor": block_table.to(device),
        "slot_mapping": torch.arange(num_tokens, dtype=torch.int64).to(device),
        "causal": True,
        # A runner that sends no is_prefilling (no_is_prefilling) leaves it None.
        "is_prefilling": None
        if case.get("no_is_prefilling")
        else torch.tensor(prefilling, dtype=torch.bool),
        "seq_lens_cpu_upper_bound": torch.tensor(host_seq_lens, dtype=torch.int32),
        # Fields of older releases (0.29.0 and before), left out where absent.
        "_seq_lens_cpu": seq_lens_cpu.clone(),
        "_num_computed_tokens_cpu": seq_lens_cpu - query_lens_cpu,
    }
    # The fields this release's class has: a row fact it lacks is left out
    # (adaptations.METADATA_WITHOUT_ROW_FACTS), and so are the inputs of other releases;
    # a row's own `prefilling` is not: NotInRelease, the case could not run.
    stated = any(row.get("prefilling") is not None for row in case["rows"])
    asked = ("is_prefilling",) if stated else ()
    fitted = accepted_kwargs(CommonAttentionMetadata, asked, **candidates)
    return CommonAttentionMetadata(**fitted)


def _speculation_counts(case: dict, rows: list[dict], device):
    """(draft counts, accepted counts) of a speculative case; None where not sent."""
    drafts = None
    num_accepted = None
    given = case.get("drafts", "given")
    if given != "none" and case.get("speculative_tokens") is not None:
        # "accepted_only": the accepted counts without draft counts (a runner
        # step that drafted nothing still passes what the last step accepted).
        if given == "given":
            drafts = torch.tensor(
                [-1 if row.get("drafted") is None else row["drafted"] for row in rows],
                dtype=torch.int32,
            )
        num_accepted = torch.tensor(
            [row.get("accepted", 1) for row in rows], dtype=torch.int32
        ).to(device)
    return drafts, num_accepted


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


# Reads whose result is a host value or a host tensor, not device-origin.
_HOST_COPIES = frozenset(
    {"item", "tolist", "numpy", "cpu", "equal", "allclose", "__contains__"}
    | {"__bool__", "__int__", "__float__", "__index__"}
)


# Ops whose output size depends on the data: the host waits for the device to
# report the size, but the result itself stays on the device.
_SIZE_SYNCS = frozenset(
    {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}
)


# Ops that take sizes or scalars: a device tensor there is read as a Python number.
_SCALAR_ARGS = frozenset(
    {"zeros", "ones", "empty", "full", "arange", "range", "linspace"}
    | {"rand", "randn", "randint", "new_zeros", "new_ones", "new_empty", "new_full"}
)


_MASK_DTYPES = (torch.bool, torch.uint8)


def _label(func) -> str:
    qualname = getattr(func, "__qualname__", "") or ""
    owner = "Tensor" if qualname.startswith(("TensorBase.", "Tensor.")) else "torch"
    return f"{owner}.{getattr(func, '__name__', repr(func))}"


def _tensors(tree) -> list[torch.Tensor]:
    leaves = []
    for leaf in tree_flatten(tree)[0]:
        # pytree keeps a slice whole, and its bounds may be tensors (x[:n]).
        is_slice = isinstance(leaf, slice)
        leaves.extend((leaf.start, leaf.stop, leaf.step) if is_slice else (leaf,))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


class DeviceOriginReads(TorchFunctionMode):
    """A function mode counting host reads of device-origin tensors (see above)."""

    def __init__(self) -> None:
        super().__init__()
        # Weak keys: tracking must not keep tensors alive nor set attributes on them.
        self._origin = WeakIdKeyDictionary()
        self.reads: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        return sum(self.reads.values())

    def mark(self, *tensors: torch.Tensor | None) -> None:
        """Declare tensors device-origin; anything else (None) is ignored."""
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor):
                self._origin[tensor] = True

    def mark_attributes(self, obj) -> None:
        """Declare obj's tensor attributes device-origin (a builder's buffers)."""
        self.mark(*vars(obj).values())

    def is_device_origin(self, value) -> bool:
        return isinstance(value, torch.Tensor) and value in self._origin

    def _read(self, func, name: str, args, kwargs) -> tuple[str, bool] | None:
        """(label, result is on the host) when the call reads device data."""
        origin = self.is_device_origin
        one_arg_where = name == "where" and len(args) + len(kwargs) == 1
        if name in _HOST_COPIES or name in _SIZE_SYNCS or one_arg_where:
            hit = any(map(origin, _tensors((args, kwargs))))
            return (_label(func), name in _HOST_COPIES) if hit else None
        if name in _SCALAR_ARGS:
            sizes = args[1:] if name.startswith("new_") else args
            rest = {key: value for key, value in kwargs.items() if key != "out"}
            if not any(map(origin, _tensors((sizes, rest)))):
                return None
            # Without device= the real result is a host tensor.
            return f"{_label(func)}[tensor arg]", "device" not in kwargs
        if name == "repeat_interleave" and kwargs.get("output_size") is None:
            # Tensor repeats and no output_size: the length is read from the device.
            first = args[0] if args else None
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats", first)
            return (_label(func), False) if origin(repeats) else None
        if name in ("__getitem__", "__setitem__"):
            leaves = tree_flatten(args[1])[0]
            value = args[2] if name == "__setitem__" else None
            masks = any(origin(t) and t.dtype in _MASK_DTYPES for t in leaves)
            # x[mask] = scalar becomes masked_fill_, which needs no sync.
            scalar = not isinstance(value, torch.Tensor) or value.numel() == 1
            if masks and (value is None or not scalar):
                # The mask's nonzero runs on the device.
                return f"Tensor.{name}[bool mask]", False
            slices = [leaf for leaf in leaves if isinstance(leaf, slice)]
            if any(map(origin, _tensors(slices))):
                return f"Tensor.{name}[tensor slice bound]", not origin(args[0])
            if origin(value) and not origin(args[0]):
                return "Tensor.__setitem__[to host]", True
            return None
        if name == "copy_":
            # Copies between device-origin tensors (staging into persistent
            # buffers) are not reads.
            to_host = origin(args[1]) and not origin(args[0])
            return ("Tensor.copy_[to host]", True) if to_host else None
        if name == "to" and origin(args[0]):
            target = kwargs.get("device", args[1] if len(args) > 1 else None)
            if isinstance(target, (str, torch.device)):
                to_host = torch.device(target).type == "cpu"
            else:  # x.to(other) takes other's device
                to_host = isinstance(target, torch.Tensor) and not origin(target)
            return ("Tensor.to[cpu]", True) if to_host else None
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # torch pops this mode while the handler runs, so the calls made here
        # (func itself, tensor._base, numel) are neither seen nor counted.
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        touches_origin = any(map(self.is_device_origin, _tensors((args, kwargs))))
        read = self._read(func, name, args, kwargs) if touches_origin else None
        result = func(*args, **kwargs)
        if read is not None:
            self.reads[read[0]] += 1
            if read[1] and self.is_device_origin(result):
                # On the CPU, x.cpu() and x.to("cpu") return x itself; a new view
                # stands for the host copy so that it is not device-origin.
                result = result.view_as(result)
        if touches_origin and not (read is not None and read[1]):
            written = _tensors(kwargs.get("out"))
            in_place = name.endswith("_") and not name.startswith("__")
            if (in_place or name == "__setitem__") and args:
                written.extend(_tensors(args[0]))
            # A write into a view lands in its base too: cumsum(out=buf[1:]) fills buf.
            self.mark(*_tensors(result), *written, *(t._base for t in written))
        return result


def configured(batch: dict, configuration: dict | None) -> dict:
    """``batch`` in an invariant's ``configuration`` (a named case's builder settings):
    the settings added, and where they hand the V2 runner's aligned state indices,
    indices made for this batch's requests (padded ones included: build() reads
    ``aligned_state_indices[: m.num_reqs]``). Request r's are entries (r, 0..k) of the
    block table the harness makes, so the rows each state index selects read as for
    that table."""
    if not configuration:
        return batch
    done = {**batch, **configuration}
    if configuration.get("aligned_state_indices") is not None:
        columns = -(-done.get("max_model_len", 256) // done.get("block_size", 16))
        slots = (batch.get("speculative_tokens") or 0) + 1
        requests = len(batch["rows"]) + batch.get("padded_rows", 0)
        done["aligned_state_indices"] = [
            [r * columns + c + 1 for c in range(slots)] for r in range(requests)
        ]
    return done


def draw_batch(
    integer,
    choice,
    speculative_tokens: list[int],
    max_rows: int,
    configuration=None,
    decodes_only: bool = False,
) -> dict:
    """A valid batch, chosen by ``integer(low, high)`` and ``choice(options)``, in
    ``configuration`` (see ``configured``); ``decodes_only``: no prefill rows."""
    k = choice([None, *sorted(speculative_tokens)])
    drafts = "given" if k is None else choice(["given", "given", "given", "none"])
    count = integer(1, max_rows)
    decodes = count if decodes_only else integer(0, count)
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
    aligned = ((configuration or {}).get("prefix_caching") or {}).get(
        "cache_hit_alignment_tokens"
    )
    resumes, continuing, first = [], [], []
    for _ in range(count - decodes):
        # Every prefilling row kind GDN's classification tells apart: a chunk that
        # resumes a sequence with one token (a decode to GDN's first-chunk rule from
        # 0.31, a prefill beside spec decodes), a longer continuing chunk, and a first
        # chunk (no context; one token for a one-token prompt).
        kind = choice(["one-token resume", "continuing chunk", "first chunk"])
        if aligned:
            # With prefix caching, chunks that start on an aligned token and cross the
            # next aligned token are the ones that take a checkpoint: draw those too.
            query = integer(2, 3 * aligned)
            start = choice([aligned, integer(1, 2 * aligned)])
        else:
            query, start = integer(2, 16), integer(1, 64)
        if kind == "one-token resume":
            resumes.append({"seq_len": start + 1, "query_len": 1, "prefilling": True})
        elif kind == "continuing chunk":
            continuing.append(
                {"seq_len": start + query, "query_len": query, "prefilling": True}
            )
        else:
            query = choice([1, query, query])
            first.append({"seq_len": query, "query_len": query, "prefilling": True})
    # The V1 runner's order (reorder_batch_to_split_decodes_and_prefills, threshold
    # k + 1): decodes, short extends, long extends, then first chunks.
    rows += resumes + sorted(continuing, key=lambda row: row["query_len"]) + first
    batch = {
        "speculative_tokens": k,
        "drafts": drafts,
        "rows": rows,
        "padded_rows": integer(0, max_rows - count),
        "max_num_seqs": max(8, max_rows),
    }
    return configured(batch, configuration)


def seeded_batches(
    seed: int,
    count: int,
    speculative_tokens: list[int],
    max_rows: int,
    configuration: dict | None = None,
) -> list[dict]:
    """``count`` valid batches from ``random.Random(seed)``: the same on every run."""
    rng = random.Random(seed)
    return [
        draw_batch(rng.randint, rng.choice, speculative_tokens, max_rows, configuration)
        for _ in range(count)
    ]


def _decode_row(k: int | None, drafted: int | None = None) -> dict:
    """A decode row of a batch with ``k`` speculative tokens that drafted ``drafted``
    (default k, every draft accepted: the most tokens a decode row has), or a plain
    one-token decode."""
    if k is None:
        return {"seq_len": 17, "query_len": 1, "prefilling": False}
    drafted = k if drafted is None else drafted
    return {
        "seq_len": 17 + drafted,
        "query_len": drafted + 1,
        "drafted": drafted,
        "accepted": drafted + 1,
    }


def _every_row_kind(k: int | None) -> list[dict]:
    """One row of each kind GDN's classification tells apart, in the V1 runner's order:
    decodes (a spec row of each draft count 0..k, or a plain one), a one-token resume,
    continuing chunks (of k + 1 tokens or two, and longer), first chunks (of one token
    and longer)."""
    if k is None:
        decodes = [_decode_row(k)]
    else:
        decodes = [_decode_row(k, drafted) for drafted in range(k + 1)]
    return [
        *decodes,
        {"seq_len": 30, "query_len": 1, "prefilling": True},
        {"seq_len": 40, "query_len": (k or 1) + 1, "prefilling": True},
        {"seq_len": 60, "query_len": 20, "prefilling": True},
        {"seq_len": 1, "query_len": 1, "prefilling": True},
        {"seq_len": 24, "query_len": 24, "prefilling": True},
    ]


def _checkpoint_stride(configuration: dict | None) -> int | None:
    """The token stride prefill checkpoints land on in ``configuration``: a multiple of
    the cache-hit alignment and of the checkpoint alignment (offsets from an aligned
    chunk start). None where it takes none (no alignment or no checkpoint blocks) or
    has no room for a chunk three strides long."""
    caching = (configuration or {}).get("prefix_caching") or {}
    alignment = caching.get("prefill_checkpoint_alignment")
    if not alignment or not caching.get("num_prefill_checkpoint_blocks"):
        return None
    hit = caching.get("cache_hit_alignment_tokens") or alignment
    stride = next(
        n
        for n in range(max(hit, alignment), hit * alignment + 1)
        if n % hit == 0 == n % alignment
    )
    return stride if 3 * stride + 1 <= configuration.get("max_model_len", 256) else None


def _stride_prefills(stride: int, delta: int) -> list[dict]:
    """Prefills ending ``delta`` tokens from a multiple of ``stride``: first chunks of
    one and two strides, and a chunk continuing at the first stride to the third."""
    return [
        {"seq_len": stride + delta, "query_len": stride + delta},
        {"seq_len": 2 * stride + delta, "query_len": 2 * stride + delta},
        {
            "seq_len": 3 * stride + delta,
            "query_len": 2 * stride + delta,
            "prefilling": True,
        },
    ]


# over 80 lines: one list of named edges, read top to bottom, each in the docstring
def boundary_batches(
    speculative_tokens: list[int],
    max_rows: int,
    configuration: dict | None = None,
    decodes_only: bool = False,
) -> dict[str, dict]:
    """The batches at the edges of an invariant's own parameters, by name.

    Random examples reach a bound by luck; these reach it on every run, whatever the
    seed. The bound is vLLM's ``decode_cudagraph_max_bs``: ``max_num_seqs * (k + 1)``,
    capped by ``max_cudagraph_capture_size``; it limits a FULL-graph build's staging and
    ``build_for_cudagraph_capture``, in requests and in tokens. For each k (and no
    speculation): one row; ``max_rows`` rows without and with trailing padding; the
    bound in tokens (``max_num_seqs`` rows of k + 1 tokens) and one above it (the same
    rows, the capture size one below); the bound in requests (``max_num_seqs`` one-token
    rows, the capture size ``max_num_seqs``) and one above it (one row fewer plus a
    padded row, the capture size one below); a decode and a prefill followed by a padded
    row (unless ``decodes_only``). Without speculation and for the largest k, unless
    ``decodes_only``: every row kind beside the others (``_every_row_kind``) and a
    padded row. Where the configuration takes prefill checkpoints
    (``_checkpoint_stride``), for the largest k (or none): prefills ending
    exactly at, one short of and one past the stride's multiples (``_stride_prefills``),
    without and with a padded row behind. Then a batch of only padding. Batches that
    coincide keep one entry, named by every edge they stand on.
    """
    seqs = max(8, max_rows)  # max_num_seqs, as draw_batch's
    stride = _checkpoint_stride(configuration)
    named: dict[str, tuple[list[str], dict]] = {}

    def add(
        edge: str,
        k,
        rows: list[dict],
        padded: int = 0,
        capture: int | None = None,
        requests: int = seqs,
    ):
        batch = {
            "speculative_tokens": k,
            "drafts": "given",
            "rows": rows,
            "padded_rows": padded,
            "max_num_seqs": requests,
        }
        if capture is not None:
            batch["max_cudagraph_capture_size"] = capture
        batch = configured(batch, configuration)
        key = repr(sorted(batch.items()))
        named.setdefault(key, ([], batch))[0].append(edge)

    for k in [None, *sorted(set(speculative_tokens))]:
        bound = seqs * ((k or 0) + 1)
        rows = [_decode_row(k) for _ in range(max_rows)]
        full = [_decode_row(k) for _ in range(seqs)]
        one_token = [_decode_row(k, drafted=0) for _ in range(seqs)]
        add("1 row", k, [_decode_row(k)])
        add(f"{max_rows} rows (max_rows)", k, rows)
        add(f"{max_rows} rows (max_rows) + 1 padded", k, rows, padded=1)
        add(f"{seqs} rows at the capture bound in tokens ({bound})", k, full)
        add(
            f"{seqs} rows one above the capture bound in tokens ({bound - 1})",
            k,
            full,
            capture=bound - 1,
        )
        add(
            f"{seqs} one-token rows at the capture bound in requests ({seqs})",
            k,
            one_token,
            capture=seqs,
        )
        add(
            f"{seqs - 1} one-token rows + 1 padded one above the capture bound in "
            f"requests ({seqs - 1})",
            k,
            one_token[1:],
            padded=1,
            capture=seqs - 1,
        )
        # A first chunk that crosses token 64 (a checkpoint where the configuration has
        # prefix caching), padded behind as a runner pads it.
        prefill = {"seq_len": 100, "query_len": 100}
        if not decodes_only:
            add("a prefill + 1 padded", k, [_decode_row(k), prefill], padded=1)
        # One k (the largest; none without speculation) keeps the set small: the
        # checkpoint rows are the prefills', laid out alike on both paths.
        largest = k == max(speculative_tokens, default=None)
        if not decodes_only and (k is None or largest):
            rows = _every_row_kind(k)
            # A large k has more kinds than max_num_seqs: the scheduler's limit grows.
            requests = max(seqs, len(rows) + 1)
            add("every row kind + 1 padded", k, rows, padded=1, requests=requests)
        if stride and not decodes_only and largest:
            for edge, delta in (("at", 0), ("one short of", -1), ("one past", 1)):
                rows = [_decode_row(k), *_stride_prefills(stride, delta)]
                edge = f"prefills ending {edge} the checkpoint stride ({stride})"
                add(edge, k, rows)
                add(f"{edge} + 1 padded", k, rows, padded=1)
    add("only padding (1 padded row)", None, [], padded=1)
    found = {}
    for edges, batch in named.values():
        k = batch["speculative_tokens"]
        name = "; ".join(edges) + (f", k={k}" if k else ", no speculation")
        found[name] = dict(batch, boundary=name)
    return dict(sorted(found.items()))


# Properties that read the drafts a case's rows state: a capture derives its drafts from
# the query lengths (build_for_cudagraph_capture), so they say nothing of it.
READS_ROW_DRAFTS = {
    "fallback_condition",
    "fallback_without_speculating_rows",
    "spec_rows_match_drafts",
}


def capture_bound(batch) -> int:
    """vLLM's decode_cudagraph_max_bs for the batch's settings: max_num_seqs * (k + 1),
    capped by max_cudagraph_capture_size; a FULL-graph build stages, and a capture
    accepts, at most this many requests and tokens."""
    bound = batch.get("max_num_seqs", 8) * ((batch.get("speculative_tokens") or 0) + 1)
    if batch.get("max_cudagraph_capture_size") is not None:
        bound = min(bound, batch["max_cudagraph_capture_size"])
    return bound


def not_applicable_reason(name, batch):
    """Why property ``name`` says nothing of this batch's entry point (None: it
    applies)."""
    if batch.get("call") is not None:
        return (
            f"{name} is a property of build()'s metadata; this case calls a host "
            "function on its own"
        )
    requests = len(batch["rows"]) + batch.get("padded_rows", 0)
    if name == "full_graph_tails_neutral" and requests > capture_bound(batch):
        # The runner pads a FULL-graph batch to a captured size, never past the bound
        # (and the staging buffers hold only that many rows).
        return (
            f"{name}: a runner pads a FULL-graph batch to at most the capture bound "
            f"({capture_bound(batch)} requests); this one has {requests}"
        )
    if name == "checkpoints_on_real_prefills" and batch.get("prefix_caching") is None:
        return (
            f"{name} needs prefix caching in align mode (a case with prefix_caching, "
            "or an invariant whose configuration names one)"
        )
    if batch.get("entry") == "capture" and name in READS_ROW_DRAFTS:
        return (
            f"{name} reads the drafts the rows state; a capture derives them from "
            "the query lengths"
        )
    return None


def _real_rows(rows):
    """State-index rows without NULL_BLOCK_ID (-1): CUDA-graph padding is not a row."""
    return [row for row in (rows or []) if row != -1]


def check_fallback_condition(batch, run):
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


def check_fallback_without_speculating_rows(batch, run):
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


def check_accepted_counts_in_range(batch, run):
    # The kernels index a spec row's state slots with num_accepted_tokens - 1:
    # a count outside 1..k+1 reads another row's slot or past the row (PR #51508).
    if run.metadata["path"] != "spec":
        return
    k = batch["speculative_tokens"]
    real = _real_rows(run.metadata["spec_state_rows"])
    counts = run.metadata["num_accepted_tokens"][: len(real)]
    outside = [
        (row, count) for row, count in zip(real, counts) if not 1 <= count <= k + 1
    ]
    assert not outside, f"accepted counts outside 1..{k + 1} (row, count): {outside}"


def check_partition(batch, run):
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


def check_spec_rows_match_drafts(batch, run):
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


def check_counts_add_up(batch, run):
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


def check_indices_in_bounds(batch, run):
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


def check_checkpoints_on_real_prefills(batch, run):
    # A prefill checkpoint lies inside its row's chunk, on a cache-hit-aligned position,
    # with a block column and a real state slot; a padded row has none ("0 and -1 mean
    # the row has none": compute_mamba_prefill_checkpoints, vLLM 0.33.0). A runner pads
    # behind the prefills, so a padded row that takes a checkpoint writes a state the
    # prefix cache then serves.
    m = run.metadata
    offsets = m.get("checkpoint_offsets")
    if offsets is None:
        return
    alignment = batch["prefix_caching"]["cache_hit_alignment_tokens"]
    rows = batch["rows"]
    parts = zip(
        m["checkpoint_request_rows"],
        offsets,
        m["checkpoint_block_columns"],
        m["checkpoint_state_indices"],
    )
    for row, offset, column, state in parts:
        if row >= len(rows) or offset == 0:
            what = "padded row" if row >= len(rows) else "row without a checkpoint"
            assert offset == 0 and column == -1, (
                f"{what} {row} has checkpoint offset {offset}, block column {column}"
            )
            continue
        start = rows[row]["seq_len"] - rows[row]["query_len"]
        assert 0 < offset <= rows[row]["query_len"], (
            f"row {row}'s checkpoint offset {offset} is outside its chunk of "
            f"{rows[row]['query_len']} tokens"
        )
        assert (start + offset) % alignment == 0, (
            f"row {row}'s checkpoint at token {start + offset} is not a multiple of "
            f"{alignment}"
        )
        assert column >= 0 and state > 0, (
            f"row {row}'s checkpoint has block column {column}, state index {state}"
        )


def check_plan_picks_checkpoint_states(batch, run):
    # FlashInfer's GDN prefill emits a state every N tokens of each sequence it runs
    # (the trailing checkpoint rows): N divides each checkpoint offset, q tokens emit
    # q // N states, and a checkpoint row's plan row is the state emitted at its offset
    # (plan_flashinfer_checkpoints, vLLM 0.33.0). No plan: nothing to check.
    m = run.metadata
    every = m.get("flashinfer_plan_every_n_tokens")
    if every is None:
        return
    offsets, starts = m["checkpoint_offsets"], m["flashinfer_plan_cu_starts"]
    rows = batch["rows"]  # the prefill kernel's: the trailing checkpoint rows
    ran = list(m["checkpoint_request_rows"])[len(offsets) - len(starts) + 1 :]
    lens = [rows[row]["query_len"] if row < len(rows) else 0 for row in ran]
    emitted = [0]
    for query_len in lens:
        emitted.append(emitted[-1] + query_len // every)
    assert (
        list(starts) == emitted and m["flashinfer_plan_num_checkpoints"] == emitted[-1]
    ), f"plan counts states {starts}; every {every} tokens of {lens}: {emitted}"
    first = len(offsets) - len(lens)
    for i, (offset, row) in enumerate(zip(offsets, m["flashinfer_plan_rows"])):
        if i < first or offset == 0:
            continue
        state = emitted[i - first] + offset // every - 1
        assert offset % every == 0 and row == state, (
            f"checkpoint row {i} at offset {offset} takes plan row {row}; the state "
            f"emitted there (every {every} tokens) is {state}"
        )


# Keys an invariant's check adds to every batch for mirrors_gdn (not a case's own).
MIRROR_KEYS = ("builder", "mirror_fields")


def _field_words(value) -> str:
    """A snapshot value in words: a tensor's values with its dtype."""
    dtype = getattr(value, "dtype", None)
    return f"{list(value)!r} ({dtype})" if dtype is not None else repr(value)


def check_mirrors_gdn(batch, run):
    # The same batch and configuration through two builder classes: ``run`` is the
    # subclass's build() (the batch names it: the check's builder), and GDN's own
    # build() must return the same value, dtype and shape on each of the check's fields.
    # Where a subclass keeps its own copy of GDN's classification and staging (Kimi-K3's
    # KimiK3KDAMetadataBuilder "intentionally mirrors" them), a fix to one copy that the
    # other lacks shows here, batch by batch.
    subject = batch.get("builder") or GDN_BUILDER
    reference = {key: value for key, value in batch.items() if key not in MIRROR_KEYS}
    try:
        gdn = build_case(run.device, reference, count_ops=False).metadata
    except AssertionError as error:  # a crash is no deviation of the mirror
        raise RuntimeError(
            f"{GDN_BUILDER}.build() raised AssertionError: {error}"
        ) from error
    fields = batch.get("mirror_fields") or sorted(set(run.metadata) & set(gdn))
    differ = [
        field
        for field in fields
        if run.metadata.get(field, NO_FIELD) != gdn.get(field, NO_FIELD)
    ]
    assert not differ, f"{subject} differs from {GDN_BUILDER} on " + "; ".join(
        f"{field}: {_field_words(run.metadata.get(field, NO_FIELD))}, GDN's "
        f"{_field_words(gdn.get(field, NO_FIELD))}"
        for field in differ
    )


def check_deterministic(batch, run):
    again = build_case(run.device, batch, count_ops=False)
    assert again.metadata == run.metadata, "two builds of the same batch differ"


FULL_GRAPH = "FULL_AND_PIECEWISE"


# Fields build() stages into the FULL-graph buffers, by path: (field, its tail
# value, whether it holds one entry per request plus one).
STAGED = {
    "spec": [
        ("spec_state_indices_tensor", "null", False),
        ("spec_sequence_masks", False, False),
        ("spec_query_start_loc", "flat", True),
        ("num_accepted_tokens", 1, False),
    ],
    "decode": [
        ("non_spec_state_indices_tensor", 0, False),
        ("non_spec_query_start_loc", "flat", True),
    ],
}


# Derived from the state-index tensors: they follow from the tensors themselves;
# and the layout of a case that states one (which builder's buffers, contiguity).
DERIVED = {
    "spec_state_rows",
    "spec_state_cells",
    "prefill_state_rows",
    "non_spec_state_rows",
    "persistent_views",
    "noncontiguous",
    "reorder_batch_threshold",
}


def _variant(batch, **changes):
    """The batch as another scenario: scenario keys replaced, earlier builds dropped."""
    keys = ("after", "entry", "cudagraph_mode", "block_table_offset", "step")
    variant = {key: value for key, value in batch.items() if key not in keys}
    variant.update({key: value for key, value in changes.items() if value is not None})
    return variant


def _dirty_batches(batch):
    """Builds that fill every FULL-graph buffer with other state ids first."""
    k = batch.get("speculative_tokens")
    size = batch.get("max_num_seqs", 8)
    decodes = [{"seq_len": 40, "query_len": 1, "prefilling": False}] * size
    dirty = [_variant(batch, rows=decodes, padded_rows=0, block_table_offset=20000)]
    if k is not None:
        spec = [
            {"seq_len": 40, "query_len": k + 1, "drafted": k, "accepted": k + 1}
        ] * size
        dirty.append(_variant(batch, rows=spec, padded_rows=0, drafts="given"))
        dirty[-1]["block_table_offset"] = 30000
    return [dict(d, cudagraph_mode=FULL_GRAPH) for d in dirty]


def check_full_graph_tails_neutral(batch, run):
    # After larger batches filled the buffers, a FULL-graph build's padded
    # tails are neutral and its real prefix is the eager build's.
    eager = build_case(run.device, _variant(batch), count_ops=False).metadata
    full = build_case(
        run.device,
        _variant(batch, cudagraph_mode=FULL_GRAPH, after=_dirty_batches(batch)),
        count_ops=False,
    ).metadata
    requests = len(batch["rows"]) + batch.get("padded_rows", 0)
    # The buffers hold decode_cudagraph_max_bs requests (and tokens): what the
    # builder stages must fit, as _stage_spec_decode / _stage_decode require.
    limit = capture_bound(batch)
    staged = []
    if (
        eager["num_prefills"] == 0
        and eager["num_decodes"] == 0
        and eager["num_spec_decodes"] <= limit
        and eager["num_spec_decode_tokens"] <= limit
    ):
        staged, real = STAGED["spec"], eager["num_spec_decodes"]
    elif (
        eager["num_prefills"] == 0
        and eager["num_spec_decodes"] == 0
        and eager["num_decodes"] <= limit
    ):
        staged, real = STAGED["decode"], eager["num_decodes"]
    for field, tail, plus_one in staged:
        values, length = full[field], requests + int(plus_one)
        assert len(values) == length, f"{field} has {len(values)} entries, not {length}"
        cut = real + int(plus_one)
        assert values[:cut] == eager[field][:cut], (
            f"{field}: real prefix {values[:cut]} != eager {eager[field][:cut]}"
        )
        expected = values[cut - 1] if tail == "flat" else tail
        for value in values[cut:]:
            flat = value if isinstance(value, list) else [value]
            assert all(v == (0 if tail == "null" else expected) for v in flat), (
                f"{field}: padded tail {values[cut:]} is not neutral"
            )
    skip = {field for field, _, _ in staged} | DERIVED
    differ = sorted(f for f in eager if f not in skip and full.get(f) != eager[f])
    assert not differ, f"the FULL-graph build differs from the eager one on {differ}"


def check_capture_matches_build(batch, run):
    # Capture derives drafts from the query lengths: it equals a build of the
    # same batch with drafts = query length - 1 and accepted = query length.
    k = batch.get("speculative_tokens")
    query = 1 + (k or 0)
    rows = [
        {"seq_len": max(row["seq_len"], query), "query_len": query}
        for row in batch["rows"]
    ]
    built_rows = [
        dict(row, prefilling=False)
        if k is None
        else dict(row, drafted=query - 1, accepted=query, prefilling=False)
        for row in rows
    ]
    capture = _variant(batch, rows=rows, entry="capture")
    requests, tokens = len(rows) + batch.get("padded_rows", 0), query * len(rows)
    bound = capture_bound(batch)
    if requests > bound or tokens > bound:
        # Above decode_cudagraph_max_bs a capture is refused: no graph that size exists.
        try:
            build_case(run.device, capture, count_ops=False)
        except AssertionError as refused:
            assert "capture" in str(refused), f"refused for another reason: {refused}"
            return
        raise AssertionError(
            f"capture of {requests} requests and {tokens} tokens was accepted above "
            f"the capture bound {bound}"
        )
    captured = build_case(run.device, capture, count_ops=False).metadata
    built = build_case(
        run.device, _variant(batch, rows=built_rows, drafts="given"), count_ops=False
    ).metadata
    differ = {
        f: (captured[f], built.get(f)) for f in captured if captured[f] != built.get(f)
    }
    assert not differ, f"capture differs from build (capture, build): {differ}"


def check_regather_matches_fresh_build(batch, run):
    # update_block_table with a second table equals a fresh build with that
    # table on the state indices, and leaves every other field as it was.
    # In align mode the re-gathering group reads the aligned state indices the V2
    # runner hands it (its own, or the first group's when the case names none), and
    # its prefill checkpoint re-gathers from its own block table.
    # Without them the re-gather is stated in mamba_cache_mode none (no prefix cache).
    aligned = batch.get("aligned_state_indices") is not None
    plain_cache = {k: v for k, v in batch.items() if k != "prefix_caching"}
    base = batch if aligned else _variant(plain_cache, mamba_cache_mode="none")
    regather = build_case(
        run.device, _variant(base, entry="update_block_table"), count_ops=False
    )
    second = (batch.get("second_builder") or {}).get("aligned_state_indices")
    fresh = build_case(
        run.device,
        _variant(base, block_table_offset=10000, aligned_state_indices=second),
        count_ops=False,
    ).metadata
    state = set(STATE_INDEX_FIELDS)
    for field in sorted(state):
        assert regather.metadata[field] == fresh[field], (
            f"{field}: re-gathered {regather.metadata[field]} != fresh {fresh[field]}"
        )
    checkpoint = regather.metadata.get("checkpoint")
    if checkpoint is not None or fresh.get("checkpoint") is not None:
        got = (checkpoint or {}).get("state_indices")
        want = (fresh.get("checkpoint") or {}).get("state_indices")
        assert got == want, (
            f"checkpoint state indices: re-gathered {got} != fresh {want}"
        )
        kept = regather.built.get("checkpoint") or {}
        moved = sorted(
            k for k in kept if k != "state_indices" and kept[k] != checkpoint.get(k)
        )
        assert not moved, f"update_block_table changed the checkpoint's {moved}"
    others = set(regather.metadata) - state - DERIVED - {"checkpoint"}
    # (Parts a server configuration adds are measured on the result only.)
    changed = sorted(
        f
        for f in others
        if f in regather.built and regather.metadata[f] != regather.built[f]
    )
    assert not changed, f"update_block_table changed batch-level fields {changed}"


# The record's named batches (cases), as build() inputs: rows of seq_len,
# query_len, drafted (draft tokens of a speculating row; absent: vLLM's -1) and
# accepted, then padded_rows zero-length rows at the back; scenario keys where a
# case has them (see build_arguments and _builder_after above).
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

# The releases each claim and case covers (the record's ranges): outside them a test
# skips as not applicable, on whichever vLLM runs the module.
EXPORTED_FOR = "0.33.0"
RELEASES = {"case plain": ">=0.29", "claim C1": ">=0.29"}


def _release(text):
    # "0.33.0", "0.31", "0.34.0.dev12+g1a2b3c": the first three numbers.
    parts = []
    for part in text.split("+")[0].split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple((parts + [0, 0, 0])[:3])


def _in_releases(releases):
    """Whether the loaded vLLM falls in a range such as ">=0.31,<0.33"."""
    import operator

    prepare_platform()  # before vLLM's first import (a deviation's mark asks at import)
    import vllm

    compare = {">=": operator.ge, "<=": operator.le, "==": operator.eq}
    compare |= {"!=": operator.ne, ">": operator.gt, "<": operator.lt}
    loaded = _release(vllm.__version__)
    for clause in releases.split(","):
        clause = clause.strip()
        signs = (">=", "<=", "==", "!=", ">", "<")
        sign = next(s for s in signs if clause.startswith(s))
        if not compare[sign](loaded, _release(clause[len(sign) :].strip())):
            return False
    return True


def _skip_outside(*names):
    """Skip (not applicable) where the loaded vLLM is outside the range of a named
    claim or case."""
    prepare_platform()
    import vllm

    for name in names:
        releases = RELEASES.get(name)
        if releases and not _in_releases(releases):
            loaded = vllm.__version__
            pytest.skip(
                f"not applicable: {name} covers vLLM {releases}; loaded {loaded}"
            )


# What build() returns for each case, field by field (the equivalence checks).
EXPECTED = {
    "plain": {"path": "non_spec"},
    "spec": {"path": "spec", "spec_state_rows": [0, 1]},
}


def _check_op_budget(case_id, run, budget, pinned, per="step"):
    # Alternatives ("aten.a|aten.b") count together; per step: every call of the
    # case, per call: the most one call executed (see op_counts above).
    measured = op_counts(run, budget, per)
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
    # Value, dtype and shape of each field (values.stored_form).
    # A field the build did not give (it raised instead) reads as missing.
    measured = {f: run.metadata[f] for f in expected if f in run.metadata}
    differences = stored_differences(measured, expected)
    assert not differences, (
        f"{case_id}: fields differ: {describe_differences(differences)}"
    )


def _check_property(
    device, prop, seed, random_batches, boundaries, instead, case_ids=None
):
    # The named cases the invariant lists (None: every case of the module).
    batches = [
        (case_id, case)
        for case_id, case in CASES.items()
        if case_ids is None or case_id in case_ids
    ]
    batches += [
        (f"random batch {index} of seed {seed}", batch)
        for index, batch in enumerate(random_batches)
    ]
    batches += [(f"boundary: {name}", batch) for name, batch in boundaries.items()]
    failures = []
    not_applicable = []
    for name, batch in batches:
        # A property that says nothing of a batch's entry point is not checked there,
        # nor on a case outside its releases.
        outside = RELEASES.get(f"case {name}")
        if not_applicable_reason(prop, batch) is not None or (
            outside and not _in_releases(outside)
        ):
            not_applicable.append(name)
            continue
        try:
            run = build_case(device, batch, count_ops=False)
        except pytest.skip.Exception:  # a named case this release cannot run
            not_applicable.append(name)
            continue
        if instead is not None:
            try:
                globals()["check_" + instead](batch, run)
            except AssertionError as error:
                # What holds in place of a deviating property must hold: a failure.
                pytest.fail(
                    f"{name}: {instead} (holds instead of {prop}) fails: {error}",
                    pytrace=False,
                )
        try:
            globals()["check_" + prop](batch, run)
        except AssertionError as error:
            failures.append(f"{name}: {error}; batch: {batch}")
    checked = len(batches) - len(not_applicable)
    assert not failures, (
        f"{prop} fails on {len(failures)} of {checked} batches"
        f" ({len(not_applicable)} it says nothing of: {not_applicable}):\n"
        + "\n".join(failures[:5])
    )


def _check_deviation_unchanged(measured, pinned):
    # A known deviation (strict xfail) must measure what the record pins: a changed
    # deviation fails instead of xfailing. Compared as stored: values, dtype and shape.
    changed = stored_differences(measured, pinned, pinned)
    if changed:
        pytest.fail(
            "the known deviation changed: " + describe_differences(changed, "recorded"),
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
    """The device build() runs on; its builders are made once per module (not those of a
    case outside its releases, which never runs here)."""
    ranges = {case_id: RELEASES.get("case " + case_id) for case_id in CASES}
    cases = [c for i, c in CASES.items() if not ranges[i] or _in_releases(ranges[i])]
    prepare_builders(request.param, cases)
    return request.param


C1_BUDGET = {"aten.ge": 1, "aten.bitwise_not": 1}
C1_KNOWN_DEVIATION = pytest.mark.xfail(
    _in_releases(">=0.32"),
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
    _skip_outside("claim C1", "case " + case_id)
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
    _skip_outside("claim C2.equal-rows", "case " + case_id)
    run = build_case(device, CASES[case_id], count_ops=False)
    _check_fields(
        case_id,
        run,
        EXPECTED[case_id],
        None,
    )


# Random valid batches for the invariant below: EXAMPLES of them drawn from
# random.Random(SEED), the same batches on every run; and the boundary batches of
# its parameters (boundary_batches: the capture bound, one above it, padding, ...).
C3_SEED = 1131756586
C3_EXAMPLES = 5
C3_BATCHES = seeded_batches(
    C3_SEED,
    C3_EXAMPLES,
    speculative_tokens=[2],
    max_rows=4,
)
C3_BOUNDARIES = boundary_batches(
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
    valid batches drawn from random.Random(1131756586). Risks it addresses: R2 (module
    docstring).
    """
    _skip_outside("claim C3")
    _check_property(
        device,
        prop,
        C3_SEED,
        C3_BATCHES,
        C3_BOUNDARIES,
        None,
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "case_id",
    ["spec"],
)
def test_c4_gpu_sync(case_id):
    """Claim C4 of PR #1: No syncs.

    Checked on CUDA: the case's builder call synchronises host and device at most 0
    times (torch.cuda.set_sync_debug_mode). On any device, a CPU proxy counts the host
    reads of tensors that would live on the device (DeviceOriginReads): at most 0;
    CUDA's count stays the authority.
    """
    _skip_outside("claim C4", "case " + case_id)
    prepare_builders("cuda", [CASES[case_id]])
    # A warm-up build first: first-call allocations are not what the claim is about.
    build_case("cuda", CASES[case_id], count_ops=False)
    syncs = count_sync_warnings("cuda", CASES[case_id])
    assert syncs <= 0, f"{case_id}: build() synchronised {syncs} times"


@pytest.mark.parametrize(
    "case_id",
    ["spec"],
)
def test_c4_gpu_sync_cpu_proxy(case_id):
    """Claim C4 of PR #1: No syncs.

    CPU proxy of the check above: host reads, while the case's builder call runs, of
    tensors that would live on the device (its device-side inputs, the builder's buffers
    and what is computed from them), counted by DeviceOriginReads. The CUDA count stays
    the authority; this one runs where CUDA is absent.
    """
    _skip_outside("claim C4", "case " + case_id)
    reads = count_device_origin_reads("cpu", CASES[case_id])
    assert sum(reads.values()) <= 0, (
        f"{case_id}: {sum(reads.values())} device-origin reads (CPU proxy): {reads}"
    )
