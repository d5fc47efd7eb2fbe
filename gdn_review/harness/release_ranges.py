"""Release ranges (``>=0.29,<0.32``) of claims, cases and known deviations, evaluated
against the loaded vLLM."""

from __future__ import annotations

import os

from gdn_review.common import release_range
from gdn_review.common.release import Release
from gdn_review.common.release_trees import CLAIMS_ON_ANY_RELEASE
from gdn_review.harness.environment import vllm_release

# Set by `gdn-review review` for its run of a change that is not released yet:
# ranges (claims, cases, known deviations, stored snapshots) are read as of the
# release the change would first ship in, not the release it is applied onto.
RANGES_AS_RELEASE = "GDN_REVIEW_RANGES_AS_RELEASE"


def release_for_ranges() -> Release:
    """The release that ranges are read against: the loaded vLLM's, unless a review says
    otherwise."""
    forced = os.environ.get(RANGES_AS_RELEASE)
    return Release(forced) if forced else vllm_release()


def release_in_range(releases: str | None) -> bool:
    """True when the loaded vLLM falls in ``releases`` (None or "" means every
    release)."""
    return release_range.contains(releases, release_for_ranges())


def claim_in_range(releases: str | None) -> bool:
    """Whether a claim with this range runs on the loaded vLLM (always, in the matrix's
    base run; case ranges and known deviations keep theirs there)."""
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
