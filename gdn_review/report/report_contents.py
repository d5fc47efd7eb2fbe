"""What a report says about one record, as plain data: its claims, risks, upstream tests, the
open PR's diff side, environments and next steps.

verdicts.py decides what the evidence says; this module gathers it per record: claim rows
(claim_rows.py), risk rows and the kill matrix (risk_rows.py), what to do next
(next_steps.py), and the rest here; report.py renders the result as markdown or JSON.
"""

from __future__ import annotations

from pathlib import Path

from gdn_review.common.vocabulary import NOT_MEASURED, RAN, VERDICTS, Verdict
from gdn_review.generate import expected_tests
from gdn_review.kb import Record, is_draft
from gdn_review.kb.subjects import state_words
from gdn_review.report.claim_rows import claim_rows, releases_cell, tested_on
from gdn_review.report.discrimination import discrimination
from gdn_review.report.evidence_age import evidence_parts, stale_parts
from gdn_review.report.next_steps import next_steps
from gdn_review.report.risk_rows import mutation_data, risk_rows
from gdn_review.report.verdicts import (
    COVERAGE,
    claim_verdict,
    missing_tests,
    pending_verdict,
    reach_steps,
    superseded_skips,
    tie_to_change,
)
from gdn_review.run.evidence_file import Evidence

# A claim the diff side has no result for.
NOT_WITH_DIFF = {"verdict": Verdict.UNVERIFIED, "reason": "not run with the diff", "measured": ""}
# The worst verdict first: the one an upstream test's row gives of its claims'.
SEVERITY = (Verdict.CHECK_ERROR, Verdict.COULD_NOT_RUN, Verdict.FAILS, Verdict.UNVERIFIED)
SEVERITY += (Verdict.PENDING, Verdict.KNOWN_DEVIATION, Verdict.NOT_APPLICABLE, Verdict.HOLDS)


def report_data(
    record: Record, evidence: Evidence, with_change: bool = False, path: Path | None = None
) -> dict:
    """Everything a report says about one record, as plain data.

    ``with_change``: the evidence ran with the record's own PR applied (its diff),
    so an open PR's claims are read as they are, never pending. ``path``: the
    record's file (``kb/N.yaml``), where known: whether its PR's diff is stored,
    and which parts of the evidence were measured on an earlier version of it.
    """
    expected = expected_tests(record) if not is_draft(record) else {}
    mine = superseded_skips([t for t in evidence.tests if t["record"] == record.key])
    mine += missing_tests(record.key, expected, mine)
    environments = sorted(
        {
            evidence.environments[t["environment"]].get("vllm_version", "?")
            for t in mine
            if t["outcome"] in RAN
        }
    )
    reach = evidence.reach.get(str(record.key)) if not with_change else None
    claims = tie_to_change(claim_rows(record, evidence, mine, with_change, path), reach)
    diff_side = _diff_side(record, evidence, claims) if not with_change else None
    mutation = mutation_data(record, evidence)
    risks = risk_rows(record, evidence, mine, expected, claims, mutation, diff_side)
    stale = stale_parts(record, evidence, path, mine)
    data = {
        "key": record.key,
        "title": record.title,
        "label": record.label,
        "repo": record.pr.repo if record.pr else None,
        "url": record.pr.url if record.pr else None,
        "merged_at": (record.pr.merged_at or "unknown") if record.pr else None,
        "contract": record.contract.model_dump(mode="json") if record.contract else None,
        "state": state_words(record.state) if record.pr else "contract",
        "base_release": record.target.base_release or "not set yet (a draft)",
        "head_release": record.target.head_release
        or (
            "none: the PR's change is in no release" if record.is_open else "not set yet (a draft)"
        ),
        "target": f"{record.target.file} ({record.target.symbol})",
        "draft": is_draft(record),
        "related": [r.model_dump(mode="json") for r in record.related],
        "environments": _environment_lines(evidence, mine),
        "vllm_versions": environments,
        "claims": claims,
        "risks": risks,
        "upstream_tests": _upstream_rows(record, evidence, mine, with_change),
        # Could not run and error in the check are counted where they happened only.
        "verdict_counts": {
            v: sum(c["verdict"] == v for c in claims)
            for v in VERDICTS
            + ((Verdict.NOT_TIED,) if reach and reach.get("state") == "not tied" else ())
            if v not in NOT_MEASURED or any(c["verdict"] == v for c in claims)
        },
        "coverage_counts": {c: sum(r["coverage"] == c for r in risks) for c in COVERAGE},
        "mutation": mutation,
        "diff_side": diff_side,
        "parts": evidence_parts(record, evidence, mine, diff_side, stale),
        # A part measured on an earlier version of the record: the first thing to do again.
        "next_steps": [line[:1].upper() + line[1:] + "." for line in stale.values()]
        + reach_steps(reach)
        + next_steps(claims, risks, mutation, diff_side, record),
        "finished_at": max(evidence.finished_at, default=""),
        "tests_total": len(mine),
    }
    if reach is not None:  # only then: reports of evidence without it stay as they were
        data["reach"] = reach
    if stale:  # only then: a report of evidence without stale parts stays as it was (JSON goldens)
        data["stale"] = list(stale.values())
    return data


def _upstream_rows(
    record: Record, evidence: Evidence, mine: list[dict], with_change: bool
) -> list[dict]:
    """Each vLLM test the record states: the verdict of its claims' tests on its cases only (a
    claim's other cases aside), the worst of them."""
    by_id = {claim.id: claim for claim in record.claims}
    rows = []
    for item in record.upstream_tests:
        chosen = [
            t
            for t in mine
            if t["claim"] in item.claims
            and (t.get("case") in item.cases or t.get("property") in item.cases)
        ]
        verdicts = []
        for cid in item.claims:
            picked = [t for t in chosen if t["claim"] == cid]
            verdict, reason = claim_verdict(by_id[cid], picked)
            tested = tested_on(evidence, picked)
            verdicts.append(
                pending_verdict(record, by_id[cid], verdict, reason, tested, with_change, picked)
            )
        worst = min(verdicts, key=lambda v: SEVERITY.index(v[0]) if v[0] in SEVERITY else 0)
        rows.append(
            {
                "test": item.test,
                "cases": item.cases,
                "claims": item.claims,
                "verdict": worst[0],
                "reason": worst[1].removeprefix("not applicable: "),
                "vllm": releases_cell(evidence, chosen),
                "note": item.note,
            }
        )
    return rows


def _diff_side(record: Record, evidence: Evidence, claims: list[dict]) -> dict | None:
    """Each claim with the open PR's diff applied (the evidence's ``diff`` part), and before → after
    against it."""
    side = evidence.diff.get(str(record.key))
    if side is None:
        return None
    rows = []
    for claim, row in zip(record.claims, claims):
        found = {"reason": "", "measured": "", **(side["claims"].get(claim.id) or NOT_WITH_DIFF)}
        failing = [f for f in found.get("failing") or [] if isinstance(f, dict)]
        verdict, why = discrimination(
            claim.before, _verdict_of(row), _verdict_of(found), head_name="the PR's diff"
        )
        rows.append(
            {
                "id": claim.id,
                "before": claim.before or "—",
                "on_release": row["verdict"],
                "with_diff": found["verdict"],
                "reason": found["reason"],
                "measured": found["measured"],
                "discrimination": verdict,
                "why": why,
                "failing": [f"{f.get('case')} ({f.get('device')})" for f in failing],
                # The batches its invariants failed on with the diff (shown through
                # report.failing_batch, which describes each again from its batch).
                "failing_batches": [
                    f["failing_batch"] for f in failing if isinstance(f.get("failing_batch"), dict)
                ],
            }
        )
    return {
        "diff": side["diff"],
        "release": side["release"],
        "finished_at": side["finished_at"],
        "sha256": str(side.get("diff_sha256", ""))[:12],
        "moved": side.get("moved", 0),
        "unexplained": side.get("unexplained") or [],
        "claims": rows,
    }


def _verdict_of(row: dict) -> dict:
    """A claim's verdict, reason and measured values as ``discrimination()`` takes them."""
    return {"verdict": row["verdict"], "reason": row["reason"], "measure": row["measured"]}


def _environment_lines(evidence: Evidence, tests: list[dict]) -> list[str]:
    used = sorted({t["environment"] for t in tests if t["environment"] is not None})
    lines = []
    for index in used:
        env = evidence.environments[index]
        revision = (env.get("kb_revision") or "unknown")[:10]
        dirty = " (kb/ has uncommitted changes)" if env.get("kb_dirty") else ""
        device = env.get("cuda_device") or ("cuda" if env.get("cuda_available") else "cpu only")
        if env.get("cuda_on_cpu_platform"):
            device += " (CUDA tensors on vLLM's CPU platform: its CUDA platform could not load)"
        lines.append(
            f"vLLM {env.get('vllm_version', '?')} ({env.get('vllm_source', '?')}), "
            f"torch {env.get('torch_version', '?')}, "
            f"device: {device}, Python {env.get('python', '?')}, kb/ at {revision}{dirty}"
            + "".join(_adaptation_words(a) for a in env.get("adaptations") or [])
        )
    return lines


def _adaptation_releases(adaptation: dict) -> str:
    # Evidence written before 2026-12-07 names only the first release.
    return adaptation.get("releases") or f"{adaptation.get('first_release')} on"


def _adaptation_words(adaptation: dict) -> str:
    """How the harness set up a release that refuses this machine (harness/adaptations.py)."""
    return (
        f", adapted ({adaptation.get('name')}, vLLM {_adaptation_releases(adaptation)}): "
        f"{adaptation.get('what')}; sound because {adaptation.get('reason')}"
    )
