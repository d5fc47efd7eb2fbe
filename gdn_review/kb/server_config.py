"""A case's server configuration: the builder as vLLM configures it on a GPU server.

CPU resolves another configuration than a GPU server (the prefill backend, the
prefill checkpoint alignment, the model runner), so code that only such a server
reaches looks unreachable here although it is host code. These fields configure
the builder as the engine does there (``harness.builders``); ``server_problems``
refuses what vLLM itself refuses, and ``configuration_words`` is how reports name
such a run.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, StringConstraints, model_validator

from gdn_review.kb.types import BuilderExpectField, Id, PlainValue, ServerExpectField, Strict
from gdn_review.kb.yaml_source import Problems

# The GDN prefill backends vLLM's _resolve_gdn_prefill_backend returns (the Literal of its return
# annotation: 0.34.0 added sycl, on XPU, and hip, on ROCm's RDNA 3.5; a test compares this with the
# installed release's), and the device a server resolves each on ("configured as on ...").
ResolvedBackend = Literal["triton", "flashinfer", "cutedsl", "aiter_flydsl", "sycl", "hip"]
BACKEND_DEVICE = {
    "triton": "CUDA",
    "flashinfer": "CUDA",
    "cutedsl": "CUDA",
    "aiter_flydsl": "ROCm",
    "sycl": "XPU",
    "hip": "ROCm",
}
# What a call case names: a public function of the builder's module (``name``), or a
# classmethod, staticmethod or class attribute of the builder class or of the backend class
# whose get_builder_cls returns it (``Class.name``); kb.call_targets checks it against the
# releases at hand.
Declaration = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
]
# Classes a call may pass as its `builder_cls` argument: vLLM's GDN builder and the subclass
# that overrides _build_chunk_metadata (Kimi-K3's ROCm KDA builder, importable on CPU).
HostClass = Literal["GDNAttentionMetadataBuilder", "KimiK3ROCmKDAMetadataBuilder"]

# Expect fields the harness measures only for a case that states one (kb.types.ExpectField).
SERVER_EXPECT_FIELDS = get_args(ServerExpectField)
BUILDER_EXPECT_FIELDS = get_args(BuilderExpectField)

StateIndices = Annotated[
    list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]], Field(min_length=1)
]


class SecondBuilder(Strict):
    """The other KV-cache group's builder a re-gather runs on."""

    after: list[Id] | None = Field(
        default=None, description="cases built on that builder first (its buffers dirtied)"
    )
    aligned_state_indices: StateIndices | None = Field(
        default=None,
        description="model_runner v2: the aligned state indices the V2 runner hands that group's "
        "builder (mamba_aligned_state_indices), one row per request",
    )


class PrefixCaching(Strict):
    """Prefix caching in mamba align mode, as the engine resolves it on a GPU server.

    CPU resolves the prefill checkpoint alignment to None (no checkpoints); these fields
    configure the builder as the engine does where a prefill backend can export them.
    """

    hash_block_size: Annotated[int, Field(ge=1)] = Field(
        description="cache_config.hash_block_size (the engine's resolve_kv_cache_block_sizes)"
    )
    cache_hit_alignment_tokens: Annotated[int, Field(ge=1)] = Field(
        description="cache_config.cache_hit_alignment_tokens: where prefix-cache "
        "hits land, a multiple of hash_block_size"
    )
    num_prefill_checkpoint_blocks: Annotated[int, Field(ge=0)] = Field(
        default=1, description="MambaSpec.num_prefill_checkpoint_blocks (0: no prefill checkpoints)"
    )
    prefill_checkpoint_alignment: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="MambaSpec.prefill_checkpoint_alignment: a checkpoint's offset "
        "into its query is a multiple of it (null: none)",
    )


class HostCall(Strict):
    """A declaration of the builder's module called (or read) on its own, as the engine does:
    a module-level function, or a class-level declaration of the builder or its backend."""

    function: Declaration | None = Field(
        default=None,
        description="a public function of the builder's module (plan_flashinfer_checkpoints), or "
        "a classmethod or staticmethod of the builder class or its backend class "
        "(GDNAttentionBackend.supports_device_cpu_query_lens_mismatch): called, expect: returned",
    )
    attribute: Declaration | None = Field(
        default=None,
        description="a class attribute of the builder class or its backend class "
        "(GDNAttentionMetadataBuilder._cudagraph_support): read, expect: returned",
    )
    arguments: dict[
        Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_]*$")], PlainValue
    ] = Field(
        default_factory=dict,
        description="keyword arguments, plain values (builder_cls: the name of a "
        "vLLM builder class)",
    )

    @property
    def target(self) -> str:
        """The declaration the case names (``function`` or ``attribute``)."""
        return self.function or self.attribute or ""

    @model_validator(mode="after")
    def _known_class(self) -> HostCall:
        if (self.function is None) == (self.attribute is None):
            raise ValueError(
                "a call names one declaration: give function (called) or attribute (read)"
            )
        if self.attribute is not None and "." not in self.attribute:
            raise ValueError(
                f"attribute {self.attribute!r}: name its class, as in "
                "GDNAttentionMetadataBuilder._cudagraph_support"
            )
        if self.attribute is not None and self.arguments:
            raise ValueError("an attribute is read, not called: leave out arguments")
        name = self.arguments.get("builder_cls")
        if name is not None and name not in get_args(HostClass):
            raise ValueError(
                f"builder_cls {name!r} is not a builder class a call can pass "
                f"(choose from {', '.join(get_args(HostClass))})"
            )
        return self


class ServerFields(Strict):
    """The fields of a case that configure the builder as a GPU server would (kb.cases.Case has
    them)."""

    call: HostCall | None = Field(
        default=None,
        description="instead of a batch: call a function of the builder's module, or a "
        "class-level declaration of the builder or its backend, as the engine does (expect: "
        "returned)",
    )
    resolved_prefill_backend: ResolvedBackend | None = Field(
        default=None,
        description="the GDN prefill backend vLLM resolves on the server's GPU: vLLM's "
        "_resolve_gdn_prefill_backend returns it while the builder is constructed (off CUDA; on "
        "CUDA vLLM resolves with no override)",
    )
    prefix_caching: PrefixCaching | None = Field(
        default=None,
        description="prefix caching in mamba align mode, with the kv-cache spec and "
        "cache config the engine computes on a GPU",
    )
    max_model_len: Annotated[int, Field(ge=16, le=1024)] | None = Field(
        default=None,
        description="the model's max_model_len (default 256, at most the tiny "
        "model's 1024 positions): longer prefills, more block-table "
        "columns",
    )
    model_runner: Literal["v1", "v2"] | None = Field(
        default=None,
        description="VLLM_USE_V2_MODEL_RUNNER while the builder is constructed; "
        "null: vLLM's default",
    )
    aligned_state_indices: StateIndices | None = Field(
        default=None,
        description="model_runner v2 in align mode: the aligned state indices the V2 runner "
        "precomputes and hands the builder (mamba_aligned_state_indices) before each build, one "
        "row per request (padded rows included)",
    )


def _configuration_parts(case) -> list[tuple[str | None, str]]:
    """(short name for the guard's line map or None, words for reports) of each way a batch case
    configures the builder as a GPU server would; one walk over the fields for both."""
    parts: list[tuple[str | None, str]] = []
    if case.resolved_prefill_backend is not None:
        parts.append(
            (case.resolved_prefill_backend, f"prefill backend {case.resolved_prefill_backend}")
        )
    if case.prefix_caching is not None:
        caching = case.prefix_caching
        parts.append(
            (
                "align prefix caching",
                f"prefix caching in align mode (block {case.block_size or 16}, checkpoint "
                f"alignment {caching.prefill_checkpoint_alignment}, "
                f"{caching.num_prefill_checkpoint_blocks} checkpoint block)",
            )
        )
    if case.model_runner == "v2" or case.aligned_state_indices is not None:
        aligned = case.aligned_state_indices is not None
        parts.append(
            (
                "V2 aligned indices" if aligned else None,
                "the V2 runner" + ("'s aligned state indices" if aligned else ""),
            )
        )
    if case.cudagraph_mode is not None and "FULL" in case.cudagraph_mode:
        parts.append((case.cudagraph_mode, f"cudagraph {case.cudagraph_mode}"))
    return parts


def builder_words(case) -> str | None:
    """The builder class a case builds, with its own configuration, in words (None: GDN's
    own builder, unconfigured)."""
    name = getattr(case, "builder", None)
    own = []
    if getattr(case, "use_kda_recoverssm", None) is not None:
        own.append(f"RecoverSSM {'on' if case.use_kda_recoverssm else 'off'}")
    if getattr(case, "kda_prefill_backend", None) is not None:
        own.append(f"kda_prefill_backend {case.kda_prefill_backend}")
    if getattr(case, "adaptive_verification", None) is not None:
        own.append(f"adaptive verification {'on' if case.adaptive_verification else 'off'}")
    if name is None and not own:
        return None
    words = f"builder {name or 'GDNAttentionMetadataBuilder'}"
    return words + (f" ({', '.join(own)})" if own else "")


def configuration_label(case) -> str:
    """A short name of how the case configures the builder (the guard's line map): "CPU default"
    when it is as this machine resolves it."""
    if case.call is not None:
        return f"host call {case.call.target.rsplit('.', 1)[-1]}"
    shorts = [short for short, _ in _configuration_parts(case) if short]
    if getattr(case, "builder", None) is not None:
        shorts.insert(0, case.builder)
    if getattr(case, "step", None) is not None:  # an engine step: several groups' calls
        shorts.append(f"step of {case.step.groups} groups")
    return " + ".join(shorts) or "CPU default"


def configuration_words(case) -> str | None:
    """How a case configures the builder as a GPU server would, in words (None: as CPU resolves it).

    Every report line about such a case carries these words, and they say that no kernel runs.
    """
    if case.call is not None:
        if case.call.attribute is not None:
            return f"class attribute {case.call.attribute} read; no kernel runs"
        return f"host function {case.call.function} called on its own; no kernel runs"
    parts = [words for _, words in _configuration_parts(case)]
    builder = builder_words(case)
    if not parts:
        return builder
    device = BACKEND_DEVICE.get(case.resolved_prefill_backend or "triton", "CUDA")
    server = f"configured as on {device}: " + "; ".join(parts) + "; no kernel runs"
    return f"{builder}; {server}" if builder else server


def server_problems(case) -> list[tuple[tuple, str]]:
    """Server configurations vLLM itself refuses or never makes (a record error, not a skip)."""
    problems = _prefix_caching_problems(case) + _aligned_indices_problems(case)
    # A call case builds nothing: no builds before it, no re-gather. (The configuration a
    # target's vllm_config or kv_cache_spec parameter takes: kb.call_targets.)
    scenario = [
        name
        for name in ("aligned_state_indices", "after", "second_builder")
        if case.call is not None and getattr(case, name) is not None
    ]
    if scenario:
        problems.append(
            (
                ("call",),
                "a call case calls a declaration on its own and builds nothing: "
                f"leave out {', '.join(scenario)}",
            )
        )
    return problems


def _prefix_caching_problems(case) -> Problems:
    """Prefix caching is align mode, on blocks the hash blocks divide."""
    problems = Problems()
    caching = case.prefix_caching
    if caching is None:
        return problems
    block_size = case.block_size or 16
    if case.mamba_cache_mode == "none":
        problems.add(
            ("mamba_cache_mode",),
            "prefix_caching is mamba align mode: leave mamba_cache_mode out or give align",
        )
    if block_size % caching.hash_block_size:
        problems.add(
            ("prefix_caching", "hash_block_size"),
            f"block_size {block_size} is not a multiple of hash_block_size "
            f"{caching.hash_block_size} (vLLM's BlockPool asserts it)",
        )
    if caching.cache_hit_alignment_tokens % caching.hash_block_size:
        problems.add(
            ("prefix_caching", "cache_hit_alignment_tokens"),
            f"{caching.cache_hit_alignment_tokens} is not a multiple of "
            f"hash_block_size {caching.hash_block_size}: cache hits land on "
            "hash blocks",
        )
    return problems


def _aligned_indices_problems(case) -> Problems:
    """Aligned state indices (the case's, its second builder's) as the V2 runner hands them: in
    align mode, one row per request, each k + 1 slots wide."""
    problems = Problems()
    align = case.prefix_caching is not None or case.mamba_cache_mode == "align"
    k = case.speculative_tokens or 0
    given = [(("aligned_state_indices",), case.aligned_state_indices)]
    if case.second_builder is not None:
        given.append(
            (("second_builder", "aligned_state_indices"), case.second_builder.aligned_state_indices)
        )
    for loc, indices in given:
        if indices is None:
            continue
        if case.model_runner != "v2":
            problems.add(
                loc,
                "only the V2 model runner hands the builder aligned state "
                "indices: give model_runner: v2",
            )
        if not align:
            problems.add(
                loc,
                "the V2 runner precomputes aligned state indices only in mamba "
                "align mode: give prefix_caching (or mamba_cache_mode: align)",
            )
        requests = len(case.rows) + case.padded_rows
        if len(indices) != requests:
            problems.add(
                loc,
                f"{len(indices)} rows of aligned indices for {requests} requests: the V2 "
                "runner hands one per request (compute_aligned_state_indices returns "
                "aligned_state_indices[:, :num_reqs])",
            )
        widths = {len(row) for row in indices}
        if len(widths) > 1:
            problems.add(
                loc, f"rows of different widths {sorted(widths)}: the runner hands one tensor"
            )
        elif min(widths) < k + 1:
            problems.add(
                loc,
                f"width {min(widths)} < 1 + speculative_tokens = {k + 1}: a "
                "speculating row reads k + 1 state slots",
            )
    return problems
