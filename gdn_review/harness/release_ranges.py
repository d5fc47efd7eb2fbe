"""Release ranges (``>=0.29,<0.32``) of claims, cases and known deviations, evaluated against the loaded vLLM."""

from __future__ import annotations

import os

from packaging.specifiers import SpecifierSet

from gdn_review.harness.environment import vllm_release


def release_in_range(releases: str | None) -> bool:
    """True when the loaded vLLM falls in ``releases`` (None or "" means every release)."""
    if not releases:
        return True
    return SpecifierSet(releases).contains(vllm_release(), prereleases=True)


# Set by the release matrix for its run of the base release (the release without
# the PR): every claim runs there whatever its `releases` range, so that a claim
# of an improvement can be seen to fail without the PR. Case ranges and known
# deviations keep their ranges.
CLAIMS_ON_ANY_RELEASE = "GDN_REVIEW_CLAIMS_ON_ANY_RELEASE"


def claim_in_range(releases: str | None) -> bool:
    """Whether a claim with this range runs on the loaded vLLM (always, in the matrix's base run)."""
    if os.environ.get(CLAIMS_ON_ANY_RELEASE) == "1":
        return True
    return release_in_range(releases)


def active_deviation(deviations: list[dict], selector: str, value: str) -> dict | None:
    """The known deviation that applies to this release and ``value`` of ``selector``.

    A deviation without a list under ``selector`` applies to every value.
    """
    for deviation in deviations:
        if not release_in_range(deviation.get("releases")):
            continue
        chosen = deviation.get(selector)
        if not chosen or value in chosen:
            return deviation
    return None
