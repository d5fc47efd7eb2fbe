"""A case of a record: a named batch (its rows) and the scenario it is built in.

The scenario (all optional) is how the builder is configured and called beyond a
fresh builder in the eager default and one build(): graph mode, cache mode,
capture, a re-gather, builds before it on the same builder, a GPU server's
configuration (``kb.server_config``), an engine step (``kb.step_config``). What
vLLM can produce is checked by ``kb.batch_rules``; scenarios that can never run,
by ``kb.record_rules``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from gdn_review.kb.checks import BuilderClass
from gdn_review.kb.server_config import SecondBuilder, ServerFields, configuration_words
from gdn_review.kb.step_config import Step, step_words
from gdn_review.kb.types import ExpectField, Id, PlainValue, ReleaseRange, Strict, Text


class Row(Strict):
    """One request of a batch. What vLLM can produce is checked by kb.batch_rules."""

    seq_len: Annotated[int, Field(ge=1)] = Field(
        description="tokens of the sequence after this step: already computed + query_len"
    )
    query_len: Annotated[int, Field(ge=0)] = Field(
        description="tokens this step computes (0: a zero-length padded row; padding "
        "belongs in padded_rows)"
    )
    drafted: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="draft tokens of a speculating row (0..k); null: the row does "
        "not speculate (-1)",
    )
    accepted: Annotated[int, Field(ge=0)] = Field(
        default=1,
        description="tokens the row accepted at the previous step (1..k+1; 1 without speculation); "
        "0: a speculating row whose previous async step was discarded (vLLM writes its valid "
        "sampled count, 0)",
    )
    prefilling: bool | None = Field(
        default=None,
        description="still in its prompt (vLLM's is_prefilling); null: true for a "
        "row that does not speculate and has query_len > 1",
    )
    host_seq_len: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="the host's (optimistic) length of the sequence, vLLM's "
        "seq_lens_cpu_upper_bound; at least seq_len; null: seq_len plus the case's "
        "host_seq_len_offset",
    )


# vLLM's CUDAGraphMode names (vllm/config/compilation.py).
CudaGraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
# What a case calls on the builder: build(), build_for_cudagraph_capture(), or
# update_block_table() on the metadata of the case's build, with the second block table.
Entry = Literal["build", "capture", "update_block_table"]
# The speculation methods the harness configures on CPU without weights (harness.builders);
# kb.call_targets checks that a release at hand can configure the one a case names.
SpeculativeMethod = Literal["ngram", "draft_model", "mtp"]


class Case(ServerFields):
    id: Id
    text: Text
    speculative_tokens: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="k of the speculative config; null: no speculative config"
    )
    drafts: Literal["given", "none", "accepted_only"] = Field(
        default="given",
        description="none: build() gets num_decode_draft_tokens_cpu=None (and no accepted counts); "
        "accepted_only: no draft counts, but each row's accepted count",
    )
    rows: list[Row] = Field(
        default_factory=list, description="the batch (at least one row; none for a `call` case)"
    )
    padded_rows: Annotated[int, Field(ge=0)] = 0
    max_num_seqs: Annotated[int, Field(ge=1)] = 8
    releases: ReleaseRange | None = None
    # Scenario (all optional; left out: a fresh builder in the eager default, one build()).
    cudagraph_mode: CudaGraphMode | None = Field(
        default=None,
        description="compilation_config.cudagraph_mode (vLLM's names); FULL modes "
        "stage metadata into the builder's persistent buffers",
    )
    mamba_cache_mode: Literal["none", "align"] | None = Field(
        default=None,
        description="cache_config.mamba_cache_mode; null: as the config makes it "
        "(align: prefix caching is on)",
    )
    max_cudagraph_capture_size: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="compilation_config.max_cudagraph_capture_size: caps the "
        "FULL-graph buffers (decode_cudagraph_max_bs)",
    )
    block_size: Annotated[int, Field(ge=1, le=256)] | None = Field(
        default=None, description="block size of the cache and the mamba spec (default 16)"
    )
    prefill_backend: Text | None = Field(
        default=None,
        description="additional_config.gdn_prefill_backend (auto, triton, "
        "flashinfer, ...), where the release reads it",
    )
    padded_tokens: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="token padding: num_actual_tokens counts this many tokens beyond "
        "the real ones (FULL-graph replay)",
    )
    host_seq_len_offset: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="every real row's host sequence length "
        "(seq_lens_cpu_upper_bound) is seq_len plus this",
    )
    block_table_offset: Annotated[int, Field(ge=10000, multiple_of=10000)] | None = Field(
        default=None,
        description="added to every block-table entry (a multiple of 10000: an entry still names "
        "its row), so a build's state ids differ from those of builds before it",
    )
    entry: Entry | None = Field(
        default=None,
        description="build (default), capture (build_for_cudagraph_capture: drafts from the query "
        "lengths), update_block_table (re-gather of this case's build with the second block table: "
        "entries + 10000)",
    )
    no_is_prefilling: bool | None = Field(
        default=None,
        description="the runner passes no is_prefilling (None) in the common "
        "metadata, as runners before it did",
    )
    null_padded_blocks: bool | None = Field(
        default=None,
        description="padded rows own no blocks: their block-table entries are NULL_BLOCK_ID (0)",
    )
    needs: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] | None = (
        Field(
            default=None,
            description="metadata fields or builder attributes the case needs (of a later release "
            "or an open PR); a release without one reads 'not applicable: vLLM X has no <name>'",
        )
    )
    after: Annotated[list[Id], Field(min_length=1)] | None = Field(
        default=None,
        description="cases built first on the same builder (its persistent buffers "
        "are reused, as in a server)",
    )
    second_builder: SecondBuilder | None = Field(
        default=None,
        description="entry update_block_table only: the re-gather runs on another builder of the "
        "same settings (another KV-cache group), whose buffers are its own; `after` builds on it "
        "first",
    )
    step: Step | None = Field(
        default=None,
        description="one engine step on this batch: each KV-cache group's build() on its own "
        "builder and block table, after the methods a PR adds (before_builds), as the runner calls "
        "them; checks count per step or per call",
    )
    builder: BuilderClass | None = Field(
        default=None,
        description="the builder class: an in-tree subclass of GDNAttentionMetadataBuilder that "
        "a release ships (e.g. KimiK3KDAMetadataBuilder), constructed as the engine does; a "
        "release without it reads 'not applicable: vLLM X has no <class>'; null: GDN's own",
    )
    kda_prefill_backend: Literal["auto", "triton", "flashkda", "flashinfer", "fused"] | None = (
        Field(
            default=None,
            description="Kimi-K3's additional_config.kda_prefill_backend (vLLM's "
            "--kda-prefill-backend choices, 0.33.0), which KimiK3KDAMetadataBuilder reads; only "
            "with a Kimi-K3 builder",
        )
    )
    use_kda_recoverssm: bool | None = Field(
        default=None,
        description="cache_config.use_kda_recoverssm (RecoverSSM for Kimi-K3's speculative "
        "decoding; vLLM derives it from --use-replayssm)",
    )
    adaptive_verification: bool | None = Field(
        default=None,
        description="speculative_config.enable_adaptive_verification (vLLM 0.33.0: adaptively "
        "size the draft-verification budget; KimiK3ROCmKDAMetadataBuilder reads it); needs "
        "speculative_tokens",
    )
    speculative_method: SpeculativeMethod | None = Field(
        default=None,
        description="speculative_config.method (null: ngram): ngram, draft_model (a tiny Llama "
        "draft, no weights) or mtp (the target model's own MTP layer); a release that cannot "
        "configure it reads 'not applicable'; needs speculative_tokens",
    )
    allow_impossible: Text | None = Field(
        default=None,
        description="why this batch is one vLLM never produces, on purpose (a robustness check); "
        "the batch rules are not applied to it, and a case that breaks none of them must not say "
        "this",
    )
    expect: dict[ExpectField, PlainValue] = Field(
        default_factory=dict,
        description="what the case measures, field by field; `raised` on a batch case: what "
        "constructing the builder and calling its entry point raise ('Type: first line'; null: "
        "nothing)",
    )
    expect_on_cuda: dict[ExpectField, PlainValue] = Field(
        default_factory=dict,
        description="expected values that differ on a CUDA device (e.g. "
        "supports_update_block_table with the V2 runner): each overrides the same field of "
        "`expect` there",
    )

    @model_validator(mode="after")
    def _batch_or_call(self) -> Case:
        if "message" in self.expect and "raised" not in self.expect:
            raise ValueError("expect.message is the first line of what `raised` names: state both")
        if "message" in self.expect and self.call is not None:
            raise ValueError("a call case states `raised` as 'Type: first line', not `message`")
        if self.call is None and not self.rows:
            raise ValueError("a case needs rows (the batch), or call (a host function on its own)")
        if self.call is not None and (self.rows or self.entry is not None or self.padded_rows):
            raise ValueError(
                "a call case calls a host function on its own: give it no rows, "
                "padded_rows or entry"
            )
        return self

    def configuration(self) -> str | None:
        """How the case configures and calls the builder beyond one build() as CPU resolves it, in
        words (a GPU server's configuration, an engine step); None: neither."""
        parts = [words for words in (configuration_words(self), step_words(self)) if words]
        return "; ".join(parts) or None
