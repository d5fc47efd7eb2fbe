"""The basic types of a record's fields: ids, text, releases, release ranges, plain values.

Kept apart from ``models`` (what a record holds) so that ``subjects`` (the PR
or contract a record is about) and ``models`` share them.
"""

from __future__ import annotations

import keyword
import re
from typing import Annotated, Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$", min_length=1, max_length=80)]


def python_name(identifier: str) -> str:
    """The Python name an id becomes in generated code ('C2.a-b' -> 'C2_a_b')."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", identifier)
    return name + "_" if keyword.iskeyword(name) else name

Text = Annotated[str, StringConstraints(min_length=1)]


def _release(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a release number (for example '0.29.0')") from None
    return value


def _release_range(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a release range (for example '>=0.29,<0.32')") from None
    if not value.strip():
        raise ValueError("an empty release range; leave the field out to mean every release")
    return value


def _plain_value(value: Any) -> Any:
    """Expected values are plain data: null, booleans, integers, strings, lists of them."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, list):
        return [_plain_value(item) for item in value]
    raise ValueError(f"expected values are null, true/false, integers, strings or lists of them; got {type(value).__name__} {value!r}")


PlainValue = Annotated[Any, AfterValidator(_plain_value)]
Release = Annotated[str, AfterValidator(_release)]
ReleaseRange = Annotated[str, AfterValidator(_release_range)]
