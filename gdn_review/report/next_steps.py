"""A report's next steps: what to do about each claim and risk the evidence leaves open.

report_contents.py calls ``next_steps`` with the report's claim and risk rows, its kill matrix
and its diff side; the wording is for the reader of reports/N.md.
"""

from __future__ import annotations

from gdn_review.common.vocabulary import MutantStatus, Verdict
from gdn_review.kb import Record
from gdn_review.report.markdown import text


def next_steps(
    claims: list[dict],
    risks: list[dict],
    mutation: dict | None = None,
    diff_side: dict | None = None,
    record: Record | None = None,
) -> list[str]:
    """One sentence per thing to do: a pending claim's diff to store, what the PR's diff breaks or
    moves unstated, missing tests, claims whose checks could not run or raised in gdn-review,
    failing and unverified claims, risks short of protected, known deviations to decide on."""
    steps = _change_steps(claims, mutation, diff_side, record)
    steps += _not_measured_steps(claims)
    steps += [
        f"Claim {claim['id']} fails: {claim['reason']}. Fix the code, or "
        "record the deviation with its measured reason."
        for claim in claims
        if claim["verdict"] == Verdict.FAILS
    ]
    for claim in claims:
        if claim["verdict"] == Verdict.UNVERIFIED:
            hint = (
                " Run the suite on a machine with a CUDA GPU."
                if "needs CUDA" in claim["reason"]
                else ""
            )
            steps.append(f"Claim {claim['id']} is unverified: {claim['reason']}.{hint}")
    steps += [
        f"Claim {claim['id']} holds by its CPU proxy only: CUDA's sync count, the authority, "
        "needs the suite on a machine with a CUDA GPU (gdn-review bundle)."
        for claim in claims
        if claim["kind"] == "gpu_sync"
        and claim["verdict"] == Verdict.HOLDS
        and "CPU proxy" in claim["reason"]
    ]
    for risk in risks:
        if risk["coverage"] == "uncovered":
            steps.append(f"Risk {risk['id']} is uncovered: {risk['missing'][0]}.")
        elif risk["coverage"] == "targeted":
            steps.append(f"Risk {risk['id']} is only targeted: {'; '.join(risk['missing'][:2])}.")
        elif risk["coverage"] == "not protected":
            steps.append(
                f"Risk {risk['id']} is not protected: {risk['coverage_note']}; its tests pass "
                "with the bug planted. Add a case, an expected field or a property that kills "
                "them (see Survivors), or mark one equivalent with a reason."
            )
    return steps + [
        f"Claim {claim['id']} is a known deviation (see its row): decide "
        "whether the claim's wording or vLLM should change."
        for claim in claims
        if claim["verdict"] == Verdict.KNOWN_DEVIATION
    ]


def _change_steps(
    claims: list[dict], mutation: dict | None, diff_side: dict | None, record: Record | None
) -> list[str]:
    """The PR's change: a pending claim's diff to store, a claim that fails with the diff, a case
    that moves with it unstated, a mutant of its code that no test reaches or kills."""
    steps = []
    pending = [c["id"] for c in claims if c["verdict"] == Verdict.PENDING]
    if pending and diff_side is None and record is not None and record.pr is not None:
        steps.append(
            f"Claim{'s' if len(pending) > 1 else ''} {', '.join(pending)} pending until the "
            "PR's change is in: store its diff beside the record "
            f"(`gh pr diff {record.pr.number} > kb/{record.pr.number}.diff`) and "
            f"`gdn-review run` checks {'them' if len(pending) > 1 else 'it'} with the change."
        )
    for row in (diff_side or {}).get("claims", []):
        if row["with_diff"] == Verdict.FAILS:
            # The reason and case names come from evidence: shown as text.
            steps.append(
                f"Claim {row['id']} fails with the PR's diff: {text(row['reason'])}"
                + (f" (cases: {text(', '.join(row['failing']))})" if row["failing"] else "")
                + "."
            )
    steps += [
        f"With the PR's diff, case {item['case']} moves in {', '.join(item['fields'])}, which the "
        "record does not state: add it to target.changes or the case's expect."
        for item in (diff_side or {}).get("unexplained", [])
    ]
    return steps + [
        f"Missing test: mutant {row['id']} of the PR's code is not reached ({row['reason']})."
        if row["status"] == MutantStatus.NOT_REACHED
        else f"Missing test: the PR's code survives mutant {row['id']} (see its diff): add a "
        "case, an expected field or a property that catches it, or mark it equivalent with a "
        "reason."
        for row in (mutation or {}).get("missing_tests", [])
    ]


def _not_measured_steps(claims: list[dict]) -> list[str]:
    """A claim whose check measured nothing: what to fix is the set-up (could not run) or
    gdn-review (error in the check), never vLLM's code. The reason holds vLLM's message, or
    our own, with the frame it came from (evidence: shown as text)."""
    steps = []
    for claim in claims:
        on = f" on vLLM {claim['vllm']}" if claim.get("vllm", "—") != "—" else ""
        if claim["verdict"] == Verdict.COULD_NOT_RUN:
            steps.append(
                f"Claim {claim['id']} could not run{on}: {text(claim['reason'])}. Nothing was "
                "measured: fix the set-up (the release's platform on this machine, its "
                "VllmConfig or an import, as the message says), or run where that release "
                "loads; the claim is neither held nor broken until then."
            )
        elif claim["verdict"] == Verdict.CHECK_ERROR:
            steps.append(
                f"Claim {claim['id']}: error in the check{on}: {text(claim['reason'])}. A fault in "
                "gdn-review, not in vLLM: report it with this message (the record or the "
                "harness may need a fix); the claim is neither held nor broken until then."
            )
    return steps
