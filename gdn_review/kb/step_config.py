"""A case's engine step: several KV-cache groups' calls on one batch, as the runner makes them.

vLLM's runners build attention metadata once per KV-cache group and step
(``gpu_model_runner._build_attention_metadata``, ``gpu/attn_utils.build_attn_metadata``): each group
gets a copy of the step's common metadata with its own block table, and its own builder, whose
buffers are its own. A PR that changes *how* the builder is called (a computation moved out of
``build()`` into a per-step call, metadata shared by the groups) is stated on such a step. ``step``
names the groups and the methods a PR adds, called once per step before the groups' builds; a
release without such a method reads "vLLM X has no ..." (pending for an open PR). What a step
measures per group is in ``STEP_EXPECT_FIELDS``.
"""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import Field, StringConstraints

from gdn_review.kb.types import StepExpectField, Strict
from gdn_review.kb.yaml_source import Problems

PythonName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=80)]

# Expect fields only a step measures (kb.types.ExpectField).
STEP_EXPECT_FIELDS = get_args(StepExpectField)


class StepCall(Strict):
    """A builder method a PR adds, called once per step (on the first group's builder) before the
    groups' builds."""

    method: PythonName = Field(
        description="the method's name on GDNAttentionMetadataBuilder (a release "
        "without it: not applicable / pending)"
    )
    arguments: list[PythonName] = Field(
        default_factory=list,
        description="build()'s arguments it takes, by name (common_attn_metadata, "
        "num_accepted_tokens, num_decode_draft_tokens_cpu, common_prefix_len); empty: those its "
        "signature names",
    )
    result_as: PythonName | None = Field(
        default=None,
        description="build()'s keyword argument each group's build() gets the result "
        "as (where build() takes it)",
    )


class Step(Strict):
    """One engine step on the case's batch: ``groups`` KV-cache groups, each its own builder and
    block table."""

    groups: Annotated[int, Field(ge=1, le=4)] = Field(
        default=2,
        description="KV-cache groups of GDN layers: group g's block table is the "
        "first's entries + g * 10000",
    )
    before_builds: list[StepCall] = Field(
        default_factory=list,
        description="methods called once per step before the groups' builds (what a PR adds)",
    )


# build()'s arguments a step call may take by name (the harness's step vocabulary).
STEP_ARGUMENTS = (
    "common_attn_metadata",
    "num_accepted_tokens",
    "num_decode_draft_tokens_cpu",
    "common_prefix_len",
)


def step_problems(case) -> list[tuple[tuple, str]]:
    """Steps the harness cannot run as a runner would (a record error, not a skip)."""
    step = case.step
    problems = Problems()
    if step is None:
        return problems
    if case.call is not None:
        problems.add(("step",), "a call case calls a host function on its own: a step needs rows")
    if case.entry not in (None, "build"):
        problems.add(
            ("entry",), "a step calls each group's build() as the runner does: leave entry out"
        )
    for name in ("second_builder", "after"):
        if getattr(case, name) is not None:
            problems.add((name,), f"a step makes each group's builder itself: leave {name} out")
    if case.aligned_state_indices is not None:
        problems.add(
            ("aligned_state_indices",),
            "a step hands no aligned indices (one group's): leave aligned_state_indices out",
        )
    for index, call in enumerate(step.before_builds):
        for a_index, argument in enumerate(call.arguments):
            if argument not in STEP_ARGUMENTS:
                problems.add(
                    ("step", "before_builds", index, "arguments", a_index),
                    f"{argument!r} is not one of build()'s arguments a step passes "
                    f"({', '.join(STEP_ARGUMENTS)})",
                )
    missing = set(STEP_EXPECT_FIELDS) & set(case.expect) if step.groups < 2 else set()
    if missing:
        problems.add(
            ("step", "groups"),
            f"{', '.join(sorted(missing))} compare groups: give groups: 2 or more",
        )
    return problems


def step_words(case) -> str | None:
    """How reports name a step case (None: one call)."""
    step = case.step
    if step is None:
        return None
    calls = ", ".join(f"{call.method}()" for call in step.before_builds)
    first = f"{calls} once, then " if calls else ""
    return (
        f"one engine step: {first}build() of each of {step.groups} "
        "KV-cache groups (own builders and block tables)"
    )
