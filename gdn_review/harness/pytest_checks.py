"""The steps every generated test shares: applicability, known deviations, devices.

Generated modules call these as ``harness.<name>`` and keep only what is their
record's own (its cases, expectations, one test per claim). Skips and failures
raised here are reported at the calling test's line (``__tracebackhide__``).
"""

from __future__ import annotations

import gc

import pytest

from gdn_review.common.vocabulary import SkipKind
from gdn_review.harness.case_build import prepare_builders
from gdn_review.harness.environment import device_skip_reason
from gdn_review.harness.mutation import runs_a_mutant
from gdn_review.harness.origin import skip
from gdn_review.harness.release_ranges import (
    active_deviation,
    claim_in_range,
    release_for_ranges,
    release_in_range,
)
from gdn_review.harness.values import describe_differences, stored_differences


def skip_outside_releases(releases: str | None, what: str) -> None:
    """Skip (not applicable) when the loaded vLLM is outside the releases of ``what`` (a
    case)."""
    __tracebackhide__ = True
    if not release_in_range(releases):
        skip(
            SkipKind.NOT_APPLICABLE,
            f"not applicable: {what} covers vLLM {releases}; loaded "
            f"{release_for_ranges()}",
        )


def skip_outside_claim_releases(releases: str | None, claim_id: str) -> None:
    """Skip (not applicable) outside the claim's releases; the release matrix's base run
    checks every claim."""
    __tracebackhide__ = True
    if not claim_in_range(releases):
        skip(
            SkipKind.NOT_APPLICABLE,
            f"not applicable: claim {claim_id} covers vLLM {releases}; loaded "
            f"{release_for_ranges()}",
        )


def known_deviation(
    request, deviations: list[dict], selector: str, value: str
) -> dict | None:
    """A known deviation is a strict xfail: CI stays green and notices when it
    disappears.

    Only a failed assertion counts as the deviation (raises=AssertionError): a crash
    fails. Returns the deviation that applies (None when none does).
    """
    deviation = active_deviation(deviations, selector, value)
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if deviation is not None and "boundary" not in params:
        request.applymarker(
            pytest.mark.xfail(
                strict=True, raises=AssertionError, reason=deviation_reason(deviation)
            )
        )
    # A boundary test is one batch, which a property's deviation may not concern: it
    # xfails only where the property fails (harness.check_invariant), and the random
    # examples' test stays the strict one.
    return deviation


def deviation_reason(deviation: dict) -> str:
    reason = "known deviation: " + deviation["reason"]
    if deviation.get("measured"):
        reason += " (measured: " + deviation["measured"] + ")"
    return reason


def check_deviation_unchanged(deviation: dict | None, measured: dict) -> None:
    """Fail (not xfail) when a known deviation measures other values than the record
    says."""
    __tracebackhide__ = True
    if deviation is None or deviation.get("expect") is None:
        return
    # Compared as stored (values, dtype, shape): a deviation whose tensor changes dtype
    # has changed too.
    changed = stored_differences(measured, deviation["expect"], deviation["expect"])
    if changed:
        pytest.fail(
            "the known deviation changed: " + describe_differences(changed, "recorded"),
            pytrace=False,
        )


def prepare_device(device: str, cases) -> str:
    """The device build() runs on, for a module's ``device`` fixture: skip when it
    cannot be used, else make the builders of ``cases`` once (every test of the module
    reuses them)."""
    reason = device_skip_reason(device)
    if reason:
        skip(SkipKind.NEEDS_CUDA if device == "cuda" else SkipKind.OTHER, reason)
    if runs_a_mutant():
        # A mutant's child runs a few of the module's tests, then ends: each test makes
        # the one builder it uses when it asks (``make_builder``, before what it
        # measures), not every builder of the module.
        return device
    # A case outside its releases never runs here (its tests skip): no builder of it is
    # made, as a release may not take what it sets (harness/adaptations.py).
    prepare_builders(device, [c for c in cases if release_in_range(c.get("releases"))])
    # What is loaded now (torch, vLLM, the builders: millions of objects) lives to
    # the end of the session: frozen, the collector's full passes no longer walk it.
    # (Garbage first: frozen, it would never be freed; after the first freeze this
    # collection is short.)
    gc.collect()
    gc.freeze()
    return device
