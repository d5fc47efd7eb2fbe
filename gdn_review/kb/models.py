"""Typed models of a record (one PR's YAML file in ``kb/``).

Everything here is data: strings from a record reach generated code only as
Python literals, and ids are restricted to ``^[A-Za-z0-9_.-]+$`` because they
become test names and file names. A record's parts have modules of their own
where they are many: its cases (``kb.cases``), its checks (``kb.checks``), the
PR or contract it is about (``kb.subjects``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from gdn_review.common.vocabulary import Verdict
from gdn_review.kb.cases import Case
from gdn_review.kb.checks import Check, InvariantProperty, LatencyCheck
from gdn_review.kb.server_config import BUILDER_EXPECT_FIELDS, SERVER_EXPECT_FIELDS
from gdn_review.kb.subjects import (
    OPEN_STATES,
    Contract,
    ContractMove,
    PullRequest,
    key_label,
    key_order,
    key_short,
    state_words,
)
from gdn_review.kb.types import (  # noqa: F401  (re-exported: other stages import them from here)
    CoreExpectField,
    ExpectField,
    FieldName,
    Id,
    PlainValue,
    Release,
    ReleaseRange,
    Strict,
    Text,
    python_name,
)

RelationKind = Literal[
    "same-area", "supersedes", "superseded-by", "changes-claim", "fixes", "fixed-by", "depends-on"
]


class MetadataChange(Strict):
    """What a related PR changed in build()'s metadata: these cases, these fields."""

    cases: Annotated[list[Id], Field(min_length=1)]
    fields: list[FieldName] = Field(
        default_factory=list,
        description="snapshot fields it changed (empty: any field of these cases)",
    )
    note: str | None = None


class Target(Strict):
    file: Text
    symbol: Text
    # Optional only so that a draft (imported) record can leave them open; a
    # record without them is incomplete (see kb.completeness).
    base_release: Release | None = Field(default=None, description="last release without the PR")
    head_release: Release | None = Field(default=None, description="first release with the PR")
    changes: list[MetadataChange] = Field(
        default_factory=list,
        description="metadata the PR itself changed (cases and fields): explains "
        "snapshot drift from base to head release",
    )
    moved: list[ContractMove] = Field(
        default_factory=list,
        description="untied kb/history/changes.yaml entries (no PR known) that moved some of this "
        "record's cases and fields between releases: explains the matrix's drift, as "
        "contract.moved does",
    )
    own_hunks: list[Text] | None = Field(
        default=None,
        description="when the base->head step also carries other PRs' changes of the file: a line "
        "(stripped) of each of this PR's hunks; only those hunks give automatic mutants ([]: the "
        "PR does not change the file). Default: every hunk",
    )


class KnownDeviation(Strict):
    releases: ReleaseRange | None = None
    cases: list[Id] = Field(default_factory=list, description="only these cases (empty: all)")
    properties: list[InvariantProperty] = Field(
        default_factory=list, description="only these invariants"
    )
    reason: Text
    measured: str | None = None
    expect: dict[str, PlainValue] | None = Field(
        default=None,
        description="what the deviating build measures now: op counts (op_budget) or metadata "
        "fields (equivalence); a run that measures anything else fails instead of xfailing",
    )
    instead: InvariantProperty | None = Field(
        default=None,
        description="invariant checks: the property that holds in place of the deviating one",
    )


class Claim(Strict):
    id: Id
    text: Text
    source: str | None = Field(default=None, description="where the report states it")
    releases: ReleaseRange | None = None
    note: str | None = None
    check: Check
    known_deviations: list[KnownDeviation] = Field(default_factory=list)
    before: Literal[Verdict.FAILS.value, Verdict.HOLDS.value] | None = Field(
        default=None,
        description="what the check should do on target.base_release (the release without the PR): "
        "fails for an improvement claim (the check must fail there, which proves it can fail), "
        "holds for a preservation claim; `gdn-review matrix` says whether the check discriminates",
    )


class Mutant(Strict):
    id: Id
    find: Text
    replace: str
    count: Annotated[int, Field(ge=1)] = 1
    releases: ReleaseRange | None = None
    equivalent: str | None = Field(
        default=None,
        description="why this edit cannot change behaviour; such a mutant is "
        "reported as equivalent, not run",
    )


class Risk(Strict):
    id: Id
    text: Text
    cases: list[Id] = Field(default_factory=list)
    claims: list[Id] = Field(default_factory=list)
    mutants: list[Mutant] = Field(default_factory=list)
    auto_mutants: list[Id] = Field(
        default_factory=list,
        description="ids of automatic mutants (from the PR's diff, see `gdn-review "
        "mutate --list`) that embody this risk",
    )


class Relation(Strict):
    number: Annotated[int, Field(gt=0)]
    title: Text
    relation: RelationKind
    note: str | None = None
    from_release: Release | None = None
    claims: list[Id] = Field(default_factory=list)
    cases: list[Id] = Field(default_factory=list)
    changes: list[MetadataChange] = Field(
        default_factory=list,
        description="metadata this PR changed from from_release on (cases and fields); "
        "`gdn-review matrix` attributes snapshot drift between releases to it",
    )


class KeyFile(Strict):
    path: Text
    note: str | None = None


class CodeSnippet(Strict):
    """Reference text from the report; never executed, never rendered into tests."""

    file: str | None = None
    code: Text


class ReportNotes(Strict):
    """What the review report says beyond claims and risks, kept for people."""

    summary: str | None = None
    recommendation: str | None = None
    motivation: str | None = None
    implementation: list[str] = Field(default_factory=list)
    key_files: list[KeyFile] = Field(default_factory=list)
    key_symbols: list[str] = Field(default_factory=list)
    code_snippets: list[CodeSnippet] = Field(default_factory=list)
    discussion: str | None = None
    impact: str | None = None
    risk_flags: list[str] = Field(default_factory=list)


class UpstreamTest(Strict):
    """A test of vLLM's own suite this record states as cases and claims."""

    test: Annotated[str, StringConstraints(pattern=r"^tests/\S+\.py::\S+$")] = Field(
        description="vLLM's test id: tests/<path>.py::<name>[<param>]"
    )
    cases: Annotated[list[Id], Field(min_length=1)]
    claims: Annotated[list[Id], Field(min_length=1)]
    note: str | None = None


class Record(Strict):
    schema_version: Literal[1, 2] = Field(
        default=1,
        description="the record format it is written in, and read as (docs/records.md, "
        "format versions): 1 compares an expected tensor's values where it states no dtype; "
        "2 (current) reads a tensor written as its values as its field's usual dtype. "
        "`gdn-review migrate` brings a record to the current one",
    )
    pr: PullRequest | None = Field(
        default=None, description="the PR the record reviews (a contract record has none)"
    )
    contract: Contract | None = Field(
        default=None, description="instead of pr: what the builder promises where no PR carries it"
    )
    target: Target
    summary: str | None = None
    report: ReportNotes | None = None
    claims: Annotated[list[Claim], Field(min_length=1)]
    cases: list[Case] = Field(default_factory=list)
    risks: list[Risk] = Field(default_factory=list)
    related: list[Relation] = Field(default_factory=list)
    upstream_tests: list[UpstreamTest] = Field(
        default_factory=list,
        description="vLLM's own tests this record states (its cases and claims); the "
        "report gives each a verdict",
    )
    equivalent_mutants: dict[Id, Text] = Field(
        default_factory=dict,
        description="automatic mutants (by id, see `gdn-review mutate --list`) that cannot change "
        "behaviour, and why; they are reported as equivalent and not run",
    )

    @model_validator(mode="after")
    def _pr_or_contract(self) -> Record:
        if (self.pr is None) == (self.contract is None):
            raise ValueError(
                "a record has either pr: (the PR it reviews) or contract: (a "
                "promise no PR carries), not both or neither"
            )
        return self

    @property
    def key(self) -> int | str:
        """The record's key: its PR's number, or its contract's id (kb/<key>.yaml)."""
        return self.pr.number if self.pr is not None else self.contract.id

    @property
    def label(self) -> str:
        """How people read the key: ``PR #52078``, ``contract update_block_table``."""
        return key_label(self.key)

    @property
    def short(self) -> str:
        """``#52078`` or ``update_block_table`` (lists, tables)."""
        return key_short(self.key)

    @property
    def title(self) -> str:
        return self.pr.title if self.pr is not None else self.contract.title

    @property
    def state(self) -> str:
        """merged, open, or contract."""
        return self.pr.state if self.pr is not None else "contract"

    @property
    def is_open(self) -> bool:
        """A PR whose change is in no release (open, or closed unmerged): no head release, pending
        claims."""
        return self.pr is not None and self.pr.state in OPEN_STATES

    def pending_claims(self) -> dict[str, str]:
        """Claims that fail until the open PR's change is in (``before: fails``), and why (generated
        and exported modules)."""
        if not self.is_open:
            return {}
        words = state_words(self.pr.state)
        return {
            claim.id: f"PR #{self.pr.number} is {words}: claim {claim.id} (before: "
            "fails) holds once its change is in"
            for claim in self.claims
            if claim.before == Verdict.FAILS
        }

    @property
    def sort_key(self) -> tuple:
        """PR records by number first, then contracts by id."""
        return key_order(self.key)

    def claim_releases(self, claim: Claim) -> str | None:
        """The releases a claim speaks of: its own range, within a contract's (a contract's claim
        outside ``contract.releases`` skips as not applicable, as one outside its own range
        does)."""
        ranges = [
            r
            for r in (claim.releases, self.contract.releases if self.contract is not None else None)
            if r
        ]
        return ",".join(ranges) or None

    @property
    def latency_check(self) -> LatencyCheck | None:
        """The check of the record's latency claim (``gdn-review bench`` times it); None: it has
        none."""
        return next((c.check for c in self.claims if c.check.kind == "latency"), None)

    def latency_releases(self) -> tuple[str | None, str | None]:
        """(base, head): the releases the latency claim compares, its check's own else the record's.

        The one resolver of a record's two sides for ``bench`` and the GPU bundle. An open
        PR has no head release (None): its head side is its diff (``kb/N.diff``).
        """
        check = self.latency_check
        base = (check.base if check else None) or self.target.base_release
        head = (check.head if check else None) or self.target.head_release
        return base, head

    def case(self, case_id: str) -> Case:
        return next(c for c in self.cases if c.id == case_id)

    def case_inputs(self) -> dict[str, dict]:
        """Every case as the harness takes it (generated modules' CASES), sorted by id.

        A case's ``after`` (and ``second_builder.after``) names cases; the harness
        takes them as batches, each with its own ``after`` (validate rejects cycles).
        A case whose expect states a layout field gets ``layout: True``.
        """
        plain = {
            case.id: case.model_dump(
                mode="json", exclude={"expect", "text"}, exclude_none=True, by_alias=True
            )
            for case in sorted(self.cases, key=lambda c: c.id)
        }
        for case in self.cases:
            if not case.expect_on_cuda:
                del plain[case.id]["expect_on_cuda"]
            if {"persistent_views", "noncontiguous"} & set(case.expect):
                plain[case.id]["layout"] = True
            # The builder's own attributes it states (kb.types.BuilderExpectField), on
            # CUDA too (expect_on_cuda).
            attributes = set(BUILDER_EXPECT_FIELDS) & (set(case.expect) | set(case.expect_on_cuda))
            if attributes:
                plain[case.id]["builder_fields"] = sorted(attributes)
            # A batch case that states what constructing and building raise.
            if "raised" in case.expect and case.call is None:
                # With `message`: `raised` is the type alone and `message` its first line.
                plain[case.id]["raises"] = "type" if "message" in case.expect else True
            if set(SERVER_EXPECT_FIELDS) & set(case.expect):
                plain[case.id]["server_fields"] = True

        def expanded(case_id: str) -> dict:
            data = dict(plain[case_id])
            if "after" in data:
                data["after"] = [expanded(earlier) for earlier in data["after"]]
            if data.get("second_builder", {}).get("after"):
                data["second_builder"] = {
                    "after": [expanded(earlier) for earlier in data["second_builder"]["after"]]
                }
            return data

        return {case_id: expanded(case_id) for case_id in plain}
