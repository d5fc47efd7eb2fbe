"""How a claim is checked: the check kinds of a record (``claims[].check``).

Each kind is a pytest check the generator writes (``templates/checks/<kind>.py.j2``),
except latency (``gdn-review bench``) and TODO (a draft's open claim).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, StringConstraints, model_validator

from gdn_review.kb.types import ExpectField, Id, Release, Strict

# One aten op, or alternatives counted together ("aten.bitwise_not|aten.logical_not"),
# so a rewrite of the same computation with another op is still counted.
OpName = Annotated[str, StringConstraints(pattern=r"^aten\.[A-Za-z0-9_]+(\|aten\.[A-Za-z0-9_]+)*$")]


InvariantProperty = Literal[
    "fallback_condition",
    "accepted_counts_in_range",
    "fallback_without_speculating_rows",
    # Scenario invariants: FULL-graph staging, capture, re-gather.
    "full_graph_tails_neutral",
    "capture_matches_build",
    "regather_matches_fresh_build",
    "partition",
    "spec_rows_match_drafts",
    "counts_add_up",
    "indices_in_bounds",
    "deterministic",
    # Server configurations: prefill checkpoints (align mode with prefix caching).
    "checkpoints_on_real_prefills",
    # FlashInfer's checkpoint plan picks the state its prefill emits at each checkpoint.
    "plan_picks_checkpoint_states",
    # The builder family: the check's builder (a subclass) agrees with GDN's own build()
    # of the same batch and configuration on the check's fields.
    "mirrors_gdn",
]

# A builder class by name (an in-tree subclass of GDNAttentionMetadataBuilder).
BuilderClass = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
GDN_BUILDER = "GDNAttentionMetadataBuilder"

# The decodes_only of equivalence and invariant checks.
DecodesOnly = Annotated[
    bool,
    Field(
        description="draw only decode rows (speculating or not) and padding, and leave out "
        "the boundary batches with a prefill: for a builder whose prefill metadata is a "
        "device-only kernel (Kimi-K3's ROCm builder: a Triton kernel); name decode cases only"
    ),
]

# What a budget counts on a step case (one call elsewhere): the whole step, or the most one call
# executed.
CountPer = Literal["step", "call"]


class OpBudgetCheck(Strict):
    kind: Literal["op_budget"]
    budget: Annotated[dict[OpName, Annotated[int, Field(ge=0)]], Field(min_length=1)]
    cases: Annotated[list[Id], Field(min_length=1)]
    per: CountPer = Field(
        default="step",
        description="step: ops of every call of the case (a step case's whole step: "
        "once per step); call: the most any one call executed",
    )


class EquivalenceCheck(Strict):
    kind: Literal["equivalence"]
    cases: Annotated[list[Id], Field(min_length=1)]
    decodes_only: DecodesOnly = False
    fields: Annotated[list[ExpectField], Field(min_length=1)] | None = Field(
        default=None,
        description="compare only these of each case's expected fields (one case, several claims)",
    )
    except_: Annotated[list[ExpectField], Field(min_length=1)] | None = Field(
        default=None, alias="except", description="compare every expected field but these"
    )

    @model_validator(mode="after")
    def _fields_or_except(self) -> EquivalenceCheck:
        if self.fields is not None and self.except_ is not None:
            raise ValueError("give fields (what to compare) or except (what not to), not both")
        return self

    def compared(self, expected: dict) -> dict:
        """The expected fields this claim compares."""
        if self.fields is not None:
            return {k: v for k, v in expected.items() if k in self.fields}
        if self.except_ is not None:
            return {k: v for k, v in expected.items() if k not in self.except_}
        return dict(expected)


class InvariantCheck(Strict):
    kind: Literal["invariant"]
    properties: Annotated[list[InvariantProperty], Field(min_length=1)]
    speculative_tokens: Annotated[list[Annotated[int, Field(ge=1, le=8)]], Field(min_length=1)] = [
        1,
        2,
        3,
    ]
    max_rows: Annotated[int, Field(ge=1, le=64)] = 8
    examples: Annotated[int, Field(ge=1, le=1000)] = 40
    cases: Annotated[list[Id], Field(min_length=1)] | None = Field(
        default=None,
        description="the record's cases it runs on besides the random batches "
        "(default: every case of the record)",
    )
    configuration: Id | None = Field(
        default=None,
        description="a case of the record whose builder settings (cache mode, prefix "
        "caching, backend, model runner, aligned indices, step...) every random and "
        "boundary batch takes; its rows, padding and speculation are drawn as usual",
    )
    builder: BuilderClass | None = Field(
        default=None,
        description="the builder class every batch of the claim is built with (drawn, "
        "boundary and named: then the configuration applies to the named cases too), an "
        "in-tree subclass of GDNAttentionMetadataBuilder; a release without it reads 'not "
        "applicable: vLLM X has no <class>'; mirrors_gdn compares it with GDN's own",
    )
    decodes_only: DecodesOnly = False
    fields: Annotated[list[ExpectField], Field(min_length=1)] | None = Field(
        default=None,
        description="mirrors_gdn: the metadata fields the builder's build() must return as "
        "GDN's build() of the same batch and configuration does (value, dtype and shape)",
    )

    @model_validator(mode="after")
    def _mirror_names_its_builder(self) -> InvariantCheck:
        mirror = "mirrors_gdn" in self.properties
        if mirror and (self.builder is None or self.builder == GDN_BUILDER):
            raise ValueError(
                "mirrors_gdn compares a subclass with GDNAttentionMetadataBuilder: name "
                "it in builder (e.g. builder: KimiK3KDAMetadataBuilder)"
            )
        if mirror and self.fields is None:
            raise ValueError(
                "mirrors_gdn compares named fields: list them in fields (e.g. fields: "
                "[num_decodes, num_prefills, num_spec_decodes])"
            )
        if self.fields is not None and not mirror:
            raise ValueError("fields are what mirrors_gdn compares: add it to properties")
        return self


class GpuSyncCheck(Strict):
    kind: Literal["gpu_sync"]
    max_syncs: Annotated[int, Field(ge=0)]
    cases: Annotated[list[Id], Field(min_length=1)]
    per: CountPer = Field(
        default="step",
        description="step: syncs of every call of the case (a step case: the whole "
        "step); call: the most of one call",
    )


class DifferentialCheck(Strict):
    """Two scenarios of the same batch agree on named fields (vLLM's "fast metadata matches
    legacy")."""

    kind: Literal["differential"]
    pairs: Annotated[
        list[Annotated[list[Id], Field(min_length=2, max_length=2)]], Field(min_length=1)
    ]
    fields: Annotated[list[ExpectField], Field(min_length=1)]
    compare: Literal["equal", "prefix"] = Field(
        default="equal",
        description="prefix: the first case's lists are a prefix of the second's "
        "(the real rows of a padded FULL-graph build)",
    )

    @property
    def cases(self) -> list[str]:
        """Every case of the pairs, once, in order (what other checks call ``cases``)."""
        return list(dict.fromkeys(case_id for pair in self.pairs for case_id in pair))


class LatencyCheck(Strict):
    """build() latency, A/B between two releases (`gdn-review bench`), not a pytest check."""

    kind: Literal["latency"]
    cases: Annotated[list[Id], Field(min_length=1)]
    base: Release | None = Field(
        default=None, description="release without the change (default: target.base_release)"
    )
    head: Release | None = Field(
        default=None, description="release with the change (default: target.head_release)"
    )


class TodoCheck(Strict):
    """A claim not yet turned into a check (drafts from `gdn-review import`)."""

    kind: Literal["TODO"]
    hint: str | None = Field(default=None, description="what the check should measure")


Check = Annotated[
    Union[
        OpBudgetCheck,
        EquivalenceCheck,
        InvariantCheck,
        GpuSyncCheck,
        DifferentialCheck,
        LatencyCheck,
        TodoCheck,
    ],
    Field(discriminator="kind"),
]
