"""A report's risk rows and kill matrix: coverage per risk, and per planted mutant which
claims' tests killed it.

verdicts.py decides a risk's coverage from its tests and mutants; this module gathers them
per risk and lays out the mutation run (survivors, missing tests) for report_contents.py.
"""

from __future__ import annotations

from collections import Counter

from gdn_review.common.vocabulary import SURVIVORS, MutantStatus, Outcome, Verdict
from gdn_review.kb import Record
from gdn_review.report.verdicts import protection, risk_coverage
from gdn_review.run.evidence_file import Evidence


def _kill_cell(mutant: dict, claim_id: str) -> str:
    if mutant["status"] != MutantStatus.KILLED and mutant["status"] not in SURVIVORS:
        return "—"
    if mutant.get("killed_by", {}).get(claim_id):
        return MutantStatus.KILLED
    return Outcome.PASSED if claim_id in mutant.get("claims_passed", []) else "·"


def mutation_data(record: Record, evidence: Evidence) -> dict | None:
    """Kill matrix per risk, survivors with their diffs, unnamed survivors as missing tests."""
    mine = [m for m in evidence.mutants if m["record"] == record.key]
    info = evidence.mutation.get(str(record.key))
    if not mine and info is None:
        return None
    claims = [c.id for c in record.claims]
    # Columns for tests of no claim (e.g. the full-metadata snapshot) that ran under the mutants.
    claims += sorted(
        {k for m in mine for k in [*m.get("killed_by", {}), *m.get("claims_passed", [])]}
        - set(claims)
    )
    rows = [
        {
            "id": m["id"],
            "origin": m.get("origin", "record"),
            "risks": m.get("risks", []),
            "status": m["status"],
            "reason": m.get("reason") or "",
            "cells": [_kill_cell(m, claim) for claim in claims],
            "tests_run": m.get("tests_run", 0),
            "diff": m.get("diff") or "",
            "claims_passed": m.get("claims_passed", []),
            "duration_s": m.get("duration_s", 0.0),
        }
        for m in mine
    ]
    per_risk = [
        {"id": risk.id, "mutants": [r for r in rows if risk.id in r["risks"]]}
        for risk in record.risks
    ]
    return {
        "release": (info or {}).get("release", "?"),
        "claims": claims,
        "risks": per_risk,
        "counts": {s: sum(r["status"] == s for r in rows) for s in MutantStatus},
        "survivors": [r for r in rows if r["status"] in SURVIVORS | {MutantStatus.TIMEOUT}],
        # gdn-review's own code raised while running them: neither killed nor survived.
        "errors": [r for r in rows if r["status"] == MutantStatus.ERROR],
        "missing_tests": [
            r for r in rows if r["status"] in SURVIVORS and r["origin"] == "diff" and not r["risks"]
        ],
        "others": [r for r in rows if not r["risks"]],
        "gone_hunks": (info or {}).get("gone_hunks", []),
        "notes": (info or {}).get("notes", []),
        "total": len(rows),
    }


def risk_rows(
    record: Record,
    evidence: Evidence,
    mine: list[dict],
    expected: dict[str, list[dict]],
    claims: list[dict],
    mutation: dict | None,
    diff_side: dict | None,
) -> list[dict]:
    """Each risk's row: its tests, coverage and what is missing for more.

    ``mine``: the record's tests; ``expected``: the tests its module should hold (by claim);
    ``claims``: the claim rows; ``mutation``: ``mutation_data``'s; ``diff_side``: the claims
    with the open PR's diff, or None.
    """
    addressed = {risk for tests in expected.values() for test in tests for risk in test["risks"]}
    own_mutants = [m for m in evidence.mutants if m["record"] == record.key]
    risks = []
    pending = {c["id"] for c in claims if c["verdict"] == Verdict.PENDING}
    for risk in record.risks:
        tests = [t for t in mine if risk.id in t.get("risks", [])]
        # Its mutants' results (None: mutate never ran).
        mutants = [m for m in own_mutants if risk.id in m.get("risks", [])] if mutation else None
        coverage, missing = risk_coverage(risk, tests, risk.id in addressed, mutants, pending)
        for row in (diff_side or {}).get("claims", []):
            if row["id"] in pending and any(t["claim"] == row["id"] for t in tests):
                missing.append(f"with the PR's diff, {row['id']} {row['with_diff']}")
        outcomes = Counter(t["outcome"] for t in tests)
        risks.append(
            {
                "id": risk.id,
                "text": risk.text,
                "cases": risk.cases,
                "claims": risk.claims,
                "tests": len(tests),
                "outcomes": ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "none",
                "coverage": coverage,
                # "not protected: 3 of 4 mutants survived": the count beside the word
                "coverage_note": protection(mutants) if coverage == "not protected" else "",
                "missing": missing,
            }
        )
    return risks
