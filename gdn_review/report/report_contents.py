"""What a report says about one record, as plain data: claim and risk rows, kill matrix, next steps.

verdicts.py decides what the evidence says; this module gathers it per record
and words it (summaries, measured values, environments, what to do next);
report.py renders the result as markdown or JSON.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gdn_review.generate import expected_tests
from gdn_review.kb import Record, is_draft
from gdn_review.kb.subjects import state_words
from gdn_review.report.evidence_age import evidence_parts, stale_parts
from gdn_review.report.markdown import text
from gdn_review.report.verdicts import (
    COVERAGE,
    LATENCY_VERDICTS,
    SURVIVED,
    claim_verdict,
    discrimination,
    label_of,
    missing_tests,
    pending_verdict,
    plural,
    protection,
    risk_coverage,
    superseded_skips,
    verdicts_by_device,
)
from gdn_review.run.evidence_file import MUTANT_STATUSES, RAN, VERDICTS, Evidence


def _compact(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_compact(v)}" for k, v in value.items())
    return json.dumps(value) if not isinstance(value, str) else value


def _per(record: Record, check) -> str:
    """What a count is per: a build(), or (on engine steps) a step or its busiest call."""
    steps = [
        c
        for c in check.cases
        if any(case.id == c and case.step is not None for case in record.cases)
    ]
    if not steps:
        return "per build()" if check.kind == "op_budget" else "per call"
    return "per engine step" if check.per == "step" else "per call of a step"


def _check_summary(claim, record: Record) -> str:
    check = claim.check
    if check.kind == "op_budget":
        budget = ", ".join(f"{op} ≤ {limit}" for op, limit in check.budget.items())
        return f"op_budget: {budget} {_per(record, check)} on {plural(len(check.cases), 'case')}"
    if check.kind == "equivalence":
        return f"equivalence: expected metadata on {plural(len(check.cases), 'case')}"
    if check.kind == "invariant":
        return (
            f"invariant: {len(check.properties)} properties on random valid "
            "batches (Hypothesis) and every named case"
        )
    if check.kind == "latency":
        return (
            "latency: build() A/B between releases on "
            f"{plural(len(check.cases), 'case')} (gdn-review bench)"
        )
    if check.kind == "gpu_sync":
        return (
            f"gpu_sync: ≤ {check.max_syncs} host-device syncs {_per(record, check)} on {plural(len(check.cases), 'case')} "
            "(CUDA, the authority; on CPU its proxy: device-origin reads)"
        )
    if check.kind == "differential":
        return (
            f"differential: {plural(len(check.pairs), 'pair')} of scenarios "
            f"agree on {', '.join(check.fields)} ({check.compare})"
        )
    return "TODO: no check yet"


def _measured_summary(claim, ran: list[dict]) -> str:
    if not ran:
        return "not measured"
    counts = Counter(t["outcome"] for t in ran)
    as_expected = counts["passed"]
    parts = [f"{as_expected}/{len(ran)} as expected"]
    if counts["xfailed"]:
        parts.append(f"{counts['xfailed']} known deviation")
    if claim.check.kind == "op_budget":
        for op, limit in claim.check.budget.items():
            values = sorted(
                {
                    t["measured"][op]
                    for t in ran
                    if isinstance(t.get("measured"), dict)
                    and isinstance(t["measured"].get(op), int)
                }
            )
            if values:
                shown = str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"
                parts.append(f"{op}: measured {shown}, budget ≤ {limit}")
    if claim.check.kind == "gpu_sync":
        for device, key, name in (
            ("cuda", "syncs", "CUDA syncs"),
            ("cpu", "device_origin_reads", "CPU proxy: device-origin reads"),
        ):
            values = sorted(
                {
                    t["measured"][key]
                    for t in ran
                    if t.get("device") == device
                    and isinstance(t.get("measured"), dict)
                    and key in t["measured"]
                }
            )
            if values:
                shown = str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"
                parts.append(f"{name}: measured {shown}, budget ≤ {claim.check.max_syncs}")
    return "; ".join(parts)


MECHANISM = (
    "build() latency is the mechanism the claim names; the "
    "end-to-end throughput figure needs a serving benchmark"
)


def not_measured(claim, record: Record | None, key, path: Path | None = None) -> str:
    """Why a latency claim has no bench result, advising only a command that can run.

    An open PR is timed against its diff (``kb/N.diff``): where none is stored
    beside the record (or the record's file ``path`` is not known), the claim
    is measured once it is, or once the change is released.
    """
    if record is None:
        return f"not measured: run `gdn-review bench --record {key}`"
    base = claim.check.base or record.target.base_release
    head = claim.check.head or record.target.head_release
    if base and not head and record.is_open:
        beside = Path(path).with_suffix(".diff") if path is not None else None
        diff = str(beside) if beside is not None else f"kb/{key}.diff"
        if beside is not None and beside.is_file() and not beside.is_symlink():
            return (
                f"not measured: run `gdn-review bench --record {key}` (vLLM "
                f"{base} against {base} with the PR's diff, {diff})"
            )
        return (
            f"not measured: {record.label} is {state_words(record.state)}, so no release has its change; the latency claim is measured "
            f"once the PR's diff is stored beside the record (`gh pr diff {key} > {diff}`, then `gdn-review bench --record {key}`) "
            "or the change is released"
        )
    if not base or not head:
        return (
            "not measured: the record has no base and head release; "
            f"`gdn-review bench --record {key} --releases BASE,HEAD` times "
            "two releases"
        )
    return f"not measured: run `gdn-review bench --record {key}`"


def latency_claim(
    claim,
    key: int | str,
    results: dict | None,
    record: Record | None = None,
    path: Path | None = None,
) -> dict:
    """Verdict, reason, measured values and per-case rows of a latency claim, from `gdn-review
    bench` per device.

    Where the bench ran on CUDA too, CUDA's verdict is the claim's (the claim is
    about a GPU server); every device's numbers are shown. ``path``: the
    record's file, where an open PR's diff would lie beside it (None: not known).
    """
    if not results:
        return {
            "verdict": "unverified",
            "reason": not_measured(claim, record, key, path),
            "measured": "not measured",
            "vllm": "—",
            "devices": "—",
            "tests": [],
            "by_device": {},
        }
    devices = sorted(results, key=lambda device: (device != "cuda", device))
    reasons, measured, rows, by_device = [], [], [], {}
    for device in devices:
        result = results[device]
        low, high = result["pooled"]["ci95"]
        pooled = (
            f"head/base {result['pooled']['ratio']:.3f} (95% interval "
            f"{low:.3f}–{high:.3f}) over "
            f"{plural(len(result['cases']), 'case')}"
        )
        by_device[device] = LATENCY_VERDICTS.get(result.get("verdict"), "unverified")
        reasons.append(
            f"{result.get('verdict')}: build() on {result['head']} vs "
            f"{result['base']}, {pooled}, {device}"
        )
        measured.append(pooled if len(devices) == 1 else f"{device}: {pooled}")
        rows += [
            {
                "label": row["case"],
                "device": device,
                "outcome": "measured",
                "measured": f"{result['base']}: {row['base_median_us']} µs, {result['head']}: "
                f"{row['head_median_us']} µs (median)",
                "expected": "head/base < 1",
                "reason": f"head/base {row['ratio']:.3f} [{row['ci95'][0]:.3f}, "
                f"{row['ci95'][1]:.3f}], {row['samples'][0]}+{row['samples'][1]} "
                "samples",
            }
            for row in result["cases"]
        ]
    first = results[devices[0]]
    return {
        "verdict": by_device[devices[0]],
        "reason": "; ".join(reasons) + f"; {MECHANISM}",
        "measured": "; ".join(measured),
        "tests": rows,
        "vllm": f"{first['base']} → {first['head']}",
        "devices": _device_cell(by_device),
        "by_device": by_device,
    }


def _device_cell(by_device: dict[str, str], ran: bool = True) -> str:
    """``cpu: holds; cuda: unverified``: each device's verdict; one device whose tests ran: just its
    name."""
    if len(by_device) == 1 and ran:
        return next(iter(by_device))
    return "; ".join(f"{device}: {verdict}" for device, verdict in by_device.items()) or "—"


def _kill_cell(mutant: dict, claim_id: str) -> str:
    if mutant["status"] != "killed" and mutant["status"] not in SURVIVED:
        return "—"
    killers = mutant.get("killed_by", {}).get(claim_id)
    if killers:
        return "killed"
    return "passed" if claim_id in mutant.get("claims_passed", []) else "·"


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
        "counts": {s: sum(r["status"] == s for r in rows) for s in MUTANT_STATUSES},
        "survivors": [r for r in rows if r["status"] in SURVIVED | {"timeout", "error"}],
        "missing_tests": [
            r for r in rows if r["status"] in SURVIVED and r["origin"] == "diff" and not r["risks"]
        ],
        "others": [r for r in rows if not r["risks"]],
        "gone_hunks": (info or {}).get("gone_hunks", []),
        "notes": (info or {}).get("notes", []),
        "total": len(rows),
    }


def _risk_mutants(risk, mutants: list[dict] | None) -> list[dict] | None:
    if mutants is None:
        return None
    return [m for m in mutants if risk.id in m.get("risks", [])]


def configurations(record: Record, claim, ran: list[dict]) -> str:
    """How the claim's cases configured the builder as a GPU server would, in words ("" when
    none did): every report line of such a run names it. On CUDA vLLM resolves the prefill
    backend itself (no override); the backend it resolved is what the tests measured."""
    names = set(getattr(claim.check, "cases", []) or [])
    words = sorted({w for c in record.cases if c.id in names and (w := c.configuration())})
    if any(t.get("device") == "cuda" for t in ran):
        resolved = sorted(
            {
                str(t["measured"]["prefill_backend_resolved"])
                for t in ran
                if isinstance(t.get("measured"), dict)
                and "prefill_backend_resolved" in t["measured"]
            }
        )
        words.append(
            "on CUDA the backend vLLM resolved itself"
            + (f": {', '.join(resolved)}" if resolved else "")
        )
    return "; ".join(words)


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
    claims = []
    for claim in record.claims:
        tests = [t for t in mine if t["claim"] == claim.id]
        ran = [t for t in tests if t["outcome"] in RAN]
        verdict, reason = claim_verdict(claim, tests)
        tested_on = _tested_on(evidence, tests)
        verdict, reason = pending_verdict(record, claim, verdict, reason, tested_on, with_change)
        configured = configurations(record, claim, ran)
        if configured:
            reason = f"{reason} [{configured}]"
        by_device = {
            device: pending_verdict(record, claim, v, "", tested_on, with_change)[0]
            for device, v in verdicts_by_device(claim, tests).items()
        }
        claims.append(
            {
                "id": claim.id,
                "text": claim.text,
                "check": _check_summary(claim, record),
                "kind": claim.check.kind,
                "releases": claim.releases or "all",
                "verdict": verdict,
                "reason": reason,
                "measured": _measured_summary(claim, ran),
                "vllm": ", ".join(sorted({_release(evidence, t) for t in ran})) or "—",
                "devices": _device_cell(
                    by_device, bool(ran)
                ),  # a CUDA-only claim here: "cuda: unverified"
                "by_device": by_device,
                "note": claim.note,
                "tests": [
                    {
                        "label": label_of(t),
                        "device": t.get("device") or "?",
                        "outcome": t["outcome"],
                        "measured": _compact(t.get("measured")),
                        "expected": _compact(t.get("expected")),
                        "reason": t.get("reason") or "",
                    }
                    for t in sorted(
                        tests, key=lambda t: (t.get("device") or "", label_of(t), t["nodeid"])
                    )
                    if t["outcome"] in RAN or claim.check.kind == "gpu_sync"
                ],
            }
        )
        if claim.check.kind == "latency":
            claims[-1].update(
                latency_claim(claim, record.key, evidence.bench.get(str(record.key)), record, path)
            )
    diff_side = _diff_side(record, evidence, claims) if not with_change else None
    upstream = []
    for item in record.upstream_tests:
        # The verdict of the claims' tests on these cases only (a claim's other cases aside).
        chosen = [
            t
            for t in mine
            if t["claim"] in item.claims
            and (t.get("case") in item.cases or t.get("property") in item.cases)
        ]
        by_id = {claim.id: claim for claim in record.claims}
        verdicts = []
        for cid in item.claims:
            picked = [t for t in chosen if t["claim"] == cid]
            verdicts.append(
                pending_verdict(
                    record,
                    by_id[cid],
                    *claim_verdict(by_id[cid], picked),
                    _tested_on(evidence, picked),
                    with_change,
                )
            )
        severity = ("fails", "unverified", "pending", "known deviation", "not applicable", "holds")
        worst = min(verdicts, key=lambda v: severity.index(v[0]) if v[0] in severity else 0)
        upstream.append(
            {
                "test": item.test,
                "cases": item.cases,
                "claims": item.claims,
                "verdict": worst[0],
                "reason": worst[1].removeprefix("not applicable: "),
                "vllm": ", ".join(
                    sorted({_release(evidence, t) for t in chosen if t["outcome"] in RAN})
                )
                or "—",
                "note": item.note,
            }
        )
    addressed = {risk for tests in expected.values() for test in tests for risk in test["risks"]}
    mutation = mutation_data(record, evidence)
    ran_mutants = [m for m in evidence.mutants if m["record"] == record.key] if mutation else None
    risks = []
    pending = {c["id"] for c in claims if c["verdict"] == "pending"}
    for risk in record.risks:
        tests = [t for t in mine if risk.id in t.get("risks", [])]
        mutants = _risk_mutants(risk, ran_mutants)
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
    stale = stale_parts(record, evidence, path, mine)
    data = {
        "number": record.key,
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
        "upstream_tests": upstream,
        "verdict_counts": {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS},
        "coverage_counts": {c: sum(r["coverage"] == c for r in risks) for c in COVERAGE},
        "mutation": mutation,
        "diff_side": diff_side,
        "parts": evidence_parts(record, evidence, mine, diff_side, stale),
        # A part measured on an earlier version of the record: the first thing to do again.
        "next_steps": [line[:1].upper() + line[1:] + "." for line in stale.values()]
        + _next_steps(claims, risks, mutation, diff_side, record),
        "finished_at": max(evidence.finished_at, default=""),
        "tests_total": len(mine),
    }
    if stale:  # only then: a report of evidence without stale parts stays as it was (JSON goldens)
        data["stale"] = list(stale.values())
    return data


def _tested_on(evidence: Evidence, tests: list[dict]) -> list[str]:
    """The releases tests ran on, and those a "not applicable: vLLM X has no ..." skip names."""
    found = {_release(evidence, t) for t in tests if t["outcome"] in RAN}
    for test in tests:
        reason = test.get("reason") or ""
        if test["outcome"] == "skipped" and reason.startswith("not applicable: vLLM "):
            found.add(reason.removeprefix("not applicable: vLLM ").split(" ", 1)[0].rstrip("'s"))
    return sorted(found)


def _diff_side(record: Record, evidence: Evidence, claims: list[dict]) -> dict | None:
    """Each claim with the open PR's diff applied (the evidence's ``diff`` part), and before → after
    against it."""
    side = evidence.diff.get(str(record.key))
    if side is None:
        return None
    rows = []
    for claim, row in zip(record.claims, claims):
        found = side["claims"].get(claim.id) or {
            "verdict": "unverified",
            "reason": "not run with the diff",
            "measured": "",
        }
        verdict, why = discrimination(
            claim.before,
            {"verdict": row["verdict"], "reason": row["reason"], "measure": row["measured"]},
            {
                "verdict": found["verdict"],
                "reason": found.get("reason", ""),
                "measure": found.get("measured", ""),
            },
            head_name="the PR's diff",
        )
        rows.append(
            {
                "id": claim.id,
                "before": claim.before or "—",
                "on_release": row["verdict"],
                "with_diff": found["verdict"],
                "reason": found.get("reason", ""),
                "measured": found.get("measured", ""),
                "discrimination": verdict,
                "why": why,
                "failing": [
                    f"{f.get('case')} ({f.get('device')})"
                    for f in found.get("failing") or []
                    if isinstance(f, dict)
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


def _release(evidence: Evidence, test: dict) -> str:
    env = evidence.environments[test["environment"]]
    version = env.get("vllm_version", "?")
    return (
        version if env.get("vllm_source", "").startswith("installed") else f"{version} (unpacked)"
    )


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
            f"vLLM {env.get('vllm_version', '?')} ({env.get('vllm_source', '?')}), torch {env.get('torch_version', '?')}, "
            f"device: {device}, Python {env.get('python', '?')}, kb/ at {revision}{dirty}"
        )
    return lines


def _next_steps(
    claims: list[dict],
    risks: list[dict],
    mutation: dict | None = None,
    diff_side: dict | None = None,
    record: Record | None = None,
) -> list[str]:
    steps = []
    pending = [c["id"] for c in claims if c["verdict"] == "pending"]
    if pending and diff_side is None and record is not None and record.pr is not None:
        steps.append(
            f"Claim{'s' if len(pending) > 1 else ''} {', '.join(pending)} pending until the PR's change is in: store its diff beside the record "
            f"(`gh pr diff {record.pr.number} > kb/{record.pr.number}.diff`) and `gdn-review run` checks {'them' if len(pending) > 1 else 'it'} with the change."
        )
    for row in (diff_side or {}).get("claims", []):
        if row["with_diff"] == "fails":
            # The reason and case names come from evidence: shown as text.
            steps.append(
                f"Claim {row['id']} fails with the PR's diff: {text(row['reason'])}"
                + (f" (cases: {text(', '.join(row['failing']))})" if row["failing"] else "")
                + "."
            )
    for item in (diff_side or {}).get("unexplained", []):
        steps.append(
            f"With the PR's diff, case {item['case']} moves in "
            f"{', '.join(item['fields'])}, which the record does not state: "
            "add it to target.changes or the case's expect."
        )
    for row in (mutation or {}).get("missing_tests", []):
        if row["status"] == "not reached":
            steps.append(
                f"Missing test: mutant {row['id']} of the PR's code is not "
                f"reached ({row['reason']})."
            )
        else:
            steps.append(
                f"Missing test: the PR's code survives mutant {row['id']} (see "
                "its diff): add a case, an expected field or a property that "
                "catches it, or mark it equivalent with a reason."
            )
    for claim in claims:
        if claim["verdict"] == "fails":
            steps.append(
                f"Claim {claim['id']} fails: {claim['reason']}. Fix the code, or "
                "record the deviation with its measured reason."
            )
    for claim in claims:
        if claim["verdict"] == "unverified":
            hint = (
                " Run the suite on a machine with a CUDA GPU."
                if "needs CUDA" in claim["reason"]
                else ""
            )
            steps.append(f"Claim {claim['id']} is unverified: {claim['reason']}.{hint}")
    for claim in claims:
        if (
            claim["kind"] == "gpu_sync"
            and claim["verdict"] == "holds"
            and "CPU proxy" in claim["reason"]
        ):
            steps.append(
                f"Claim {claim['id']} holds by its CPU proxy only: CUDA's sync count, the authority, "
                "needs the suite on a machine with a CUDA GPU (gdn-review bundle)."
            )
    for risk in risks:
        if risk["coverage"] == "uncovered":
            steps.append(f"Risk {risk['id']} is uncovered: {risk['missing'][0]}.")
        elif risk["coverage"] == "targeted":
            steps.append(f"Risk {risk['id']} is only targeted: {'; '.join(risk['missing'][:2])}.")
        elif risk["coverage"] == "not protected":
            steps.append(
                f"Risk {risk['id']} is not protected: {risk['coverage_note']}; its tests pass with the bug planted. "
                "Add a case, an expected field or a property that kills them (see Survivors), or mark one equivalent with a reason."
            )
    for claim in claims:
        if claim["verdict"] == "known deviation":
            steps.append(
                f"Claim {claim['id']} is a known deviation (see its row): decide "
                "whether the claim's wording or vLLM should change."
            )
    return steps
