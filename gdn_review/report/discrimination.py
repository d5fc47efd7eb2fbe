"""Across releases: does a claim's check tell the release without the PR from the release with
it (``discrimination``), and does a contract hold on every release of its range (``kept``).

Plain functions over the per-release verdicts ``verdicts.claim_verdict`` gives (the matrix's and
a report's before/after); a side that could not run, or whose check raised, decides nothing.
"""

from __future__ import annotations

from gdn_review.common.vocabulary import HOLDING, NOT_MEASURED, Outcome, Verdict

FAILS, PENDING, UNVERIFIED = Verdict.FAILS, Verdict.PENDING, Verdict.UNVERIFIED


def discrimination(
    before: str | None, base: dict | None, head: dict | None, head_name: str = "the head release"
) -> tuple[str, str]:
    """(verdict, why): does the check tell the release without the PR from the release with it?

    ``before: fails`` (an improvement) discriminates when it fails on the base
    release and holds on the head release; ``before: holds`` (a preservation
    claim) reads **preserved** when it holds on both.
    """
    on_head = f"on {head_name}" if head_name == "the head release" else f"with {head_name}"
    if before is None:
        return "not stated", "the record gives no `before` for this claim"
    for side, name in ((base, "the base release"), (head, head_name)):
        if side is not None and side["verdict"] in NOT_MEASURED:
            return side["verdict"], f"{side['verdict']} on {name}: {side['reason']}"
    if base is not None and head is None and base.get("open"):
        # An open PR: no release has its change, and no diff of it ran.
        vb = base["verdict"]
        if before == FAILS:
            if vb == PENDING:
                return (
                    PENDING,
                    "fails on the base release as the PR says it should; no release "
                    "has the PR's change yet (store its diff beside the record to "
                    "check it)",
                )
            if vb == FAILS:  # pending_verdict: not by a measured difference
                return "does not discriminate", f"fails on the base release: {base['reason']}"
            return (
                "does not discriminate",
                f"{vb} on the base release already: the check is never seen to fail",
            )
        if vb in HOLDING:
            return "holds so far", f"{vb} on the base release; no release has the PR's change yet"
        return (
            "does not discriminate",
            f"{vb} on the base release although the record says it held there: {base['reason']}",
        )
    if base is None or head is None:
        missing = "the base release" if base is None else "the head release"
        return UNVERIFIED, f"the matrix did not run {missing}"
    vb, vh = base["verdict"], head["verdict"]
    if vb == PENDING and before == FAILS:
        vb = FAILS  # an open PR's improvement claim, read against its diff (the head side)
    after_ok = vh in HOLDING
    if UNVERIFIED in (vb, vh) or Verdict.NOT_APPLICABLE in (vb, vh):
        return UNVERIFIED, f"{vb} on the base release, {vh} {on_head}"
    if before == FAILS:
        if vb == FAILS and after_ok:
            return (
                "discriminates",
                "fails on the base release "
                f"({base['measure'] or base['reason']}), {vh} "
                f"{'from the head release' if head_name == 'the head release' else on_head} "
                f"({head['measure']})",
            )
        if vb == FAILS:
            return "does not discriminate", f"fails {on_head} too ({head['reason']})"
        return (
            "does not discriminate",
            f"{vb} on the base release too: the check is never seen to fail",
        )
    if vb == FAILS:
        return (
            "does not discriminate",
            f"fails on the base release although the record says it held there: {base['reason']}",
        )
    if not after_ok:
        return (
            "does not discriminate",
            f"holds on the base release but {vh} {on_head}: {head['reason']}",
        )
    # A preservation claim is not meant to tell the releases apart: holding on both is its pass.
    return (
        "preserved",
        f"{vb} on the base release and {vh} {on_head}, as the record says (before: holds)",
    )


def kept(cells: list[dict]) -> tuple[str, str]:
    """(verdict, why) of a contract's claim across its releases: **kept** where it holds on every
    one that ran."""
    ran = [c for c in cells if c["verdict"] not in {Outcome.NOT_RUN, Verdict.NOT_APPLICABLE}]
    if not ran:
        return UNVERIFIED, "no release of the contract's range ran"
    unmeasured = [c for c in ran if c["verdict"] in NOT_MEASURED]
    if unmeasured:
        first = unmeasured[0]
        return first["verdict"], "; ".join(
            f"{c['verdict']} on {c['version']}: {c['reason']}" for c in unmeasured
        )
    broken = [c for c in ran if c["verdict"] not in HOLDING]
    if broken:
        return "broken", "; ".join(
            f"{c['verdict']} on {c['version']}: {c['reason']}" for c in broken
        )
    return (
        "kept",
        f"holds on {', '.join(c['version'] for c in ran)} (every release "
        "of the contract's range that ran; a contract has no base "
        "release)",
    )
