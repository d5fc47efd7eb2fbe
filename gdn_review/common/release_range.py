"""A range of vLLM releases (``>=0.29,<0.32``): parsed once, then asked which releases it holds.

Claims, cases, known deviations, mutants, contracts and history entries each
state the releases they speak of as such a range; no range (``None`` or
``""``) means every release. Every stage tests a release against a range here,
with ``ReleaseRange.contains`` (pre-releases included, as packaging's
``prereleases=True`` reads them).
"""

from __future__ import annotations

import dataclasses

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from gdn_review.common.release import Release


@dataclasses.dataclass(frozen=True)
class ReleaseRange:
    """A parsed range; ``text`` as the record states it ("" for every release)."""

    text: str = ""

    def __post_init__(self) -> None:
        self._specifiers()  # a range that does not parse is refused where it is made

    @classmethod
    def of(cls, text: str | None) -> ReleaseRange:
        """The range ``text`` states (None or "": every release); ValueError says what is wrong."""
        return cls((text or "").strip())

    def _specifiers(self) -> SpecifierSet:
        try:
            return SpecifierSet(self.text)
        except InvalidSpecifier:
            raise ValueError(
                f"{self.text!r} is not a release range (for example '>=0.29,<0.32')"
            ) from None

    def contains(self, release: str | Version) -> bool:
        """Whether ``release`` (``0.31.0``, a ``Version``) is in the range; ReleaseError (a
        ValueError) where it is no release number."""
        if not self.text:
            return True
        version = release if isinstance(release, Version) else Release(release).version
        return self._specifiers().contains(version, prereleases=True)

    def first(self) -> Version | None:
        """The lowest release the range names as a lower bound (``>=X``, ``==X``); None where it
        names none."""
        bounds = [
            Version(spec.version) for spec in self._specifiers() if spec.operator in (">=", "==")
        ]
        return min(bounds, default=None)

    def __bool__(self) -> bool:
        return bool(self.text)

    def __str__(self) -> str:
        return self.text


def contains(releases: str | None, release: str | Version) -> bool:
    """Whether the range ``releases`` states (None: every release) holds ``release``."""
    return ReleaseRange.of(releases).contains(release)
