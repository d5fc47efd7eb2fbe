"""What a record is about: a PR (``pr:``), or a contract no PR carries (``contract:``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from gdn_review.common import release_range
from gdn_review.kb.types import ChangeId, FieldName, Id, Release, ReleaseRange, Strict, Text, Url


class PullRequest(Strict):
    number: Annotated[int, Field(gt=0)]
    repo: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]
    title: Text
    merged_at: (
        Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2})?)?$")]
        | None
    ) = Field(
        default=None,
        description="when the PR was merged (YYYY-MM-DD, optionally HH:MM[:SS]); "
        "leave it out while unknown",
    )
    url: Url | None = Field(
        default=None, description="the PR's page; default: https://github.com/<repo>/pull/<number>"
    )
    source_report: str | None = None
    state: Literal["merged", "open", "closed"] = Field(
        default="merged",
        description="open: not merged when the record was written (no head release yet; its "
        "improvement claims read pending); closed: closed unmerged (its change is in no release). "
        "Once merged: state merged and target.head_release",
    )

    @model_validator(mode="after")
    def _default_url(self) -> PullRequest:
        # The URL follows from repo and number; set once here (the model is frozen).
        if self.url is None:
            object.__setattr__(self, "url", f"https://github.com/{self.repo}/pull/{self.number}")
        return self


CONTRACT_ID = r"[a-z][a-z0-9_]{2,59}"  # a contract record's id: a file, module and test name
ContractId = Annotated[str, StringConstraints(pattern=rf"^{CONTRACT_ID}$")]


class ContractMove(Strict):
    """A covered (or any untied) changes.yaml entry that moved some of the contract's cases between
    releases."""

    change: ChangeId = Field(description="the changes.yaml entry's id")
    release: Release = Field(description="the first release with it (the entry's release)")
    cases: Annotated[list[Id], Field(min_length=1)]
    fields: list[FieldName] = Field(default_factory=list)
    note: str | None = None


class Contract(Strict):
    """What the builder promises where no PR can carry it: code whose PR is unknown, or behaviour
    older than any record."""

    id: ContractId = Field(description="the record's name: kb/<id>.yaml, test_contract_<id>.py")
    title: Text
    covers: list[ChangeId] = Field(
        default_factory=list,
        description="ids of kb/history/changes.yaml entries whose code it guards "
        "(validate checks them)",
    )
    releases: ReleaseRange | None = Field(
        default=None, description="the releases the promise holds on, e.g. '>=0.31'"
    )
    moved: list[ContractMove] = Field(
        default_factory=list,
        description="what untied changes.yaml entries moved in its cases (explains "
        "the matrix's drift)",
    )

    @property
    def first_release(self) -> str | None:
        """The first release its range names (``>=0.31`` -> ``0.31.0``), where its matrix starts;
        None: it names none."""
        first = release_range.ReleaseRange.of(self.releases).first()
        return None if first is None else f"{first.major}.{first.minor}.{first.micro}"

    @model_validator(mode="after")
    def _covers_something(self) -> Contract:
        if not self.covers and not self.releases:
            raise ValueError(
                "a contract names the changes.yaml entries it covers (covers: "
                "[...]) or its release range (releases: ...)"
            )
        return self


# a PR whose change is in no release: its `before: fails` claims are pending
OPEN_STATES = ("open", "closed")


def state_words(state: str) -> str:
    """How reports say a PR's state: ``open``, ``closed, unmerged``, ``merged``."""
    return {"closed": "closed, unmerged"}.get(state, state)


def as_key(text: str) -> int | str:
    """A record's key from text (a file's stem, a JSON key): a PR's number is an int."""
    return int(text) if text.isdigit() else text


def key_label(key: int | str) -> str:
    """How people read a record's key where only the key is at hand: ``PR #52078``, ``contract
    update_block_table``."""
    return f"PR #{key}" if isinstance(key, int) else f"contract {key}"


def key_short(key: int | str) -> str:
    """``#52078`` or ``update_block_table`` (lists, tables)."""
    return f"#{key}" if isinstance(key, int) else str(key)


def is_record_key(value) -> bool:
    """A PR's number or a contract's id (a key read back from JSON or a command line)."""
    if isinstance(value, bool):
        return False
    return (isinstance(value, int) and value > 0) or (
        isinstance(value, str) and re.fullmatch(CONTRACT_ID, value) is not None
    )


def key_order(key: int | str) -> tuple:
    """Sort key of record keys: PR numbers first, in order, then contract ids."""
    return (1, 0, key) if isinstance(key, str) else (0, key, "")
