"""Evidence JSON + records -> verdicts per claim, coverage per risk -> markdown or JSON.

Plain functions, no I/O beyond reading evidence and writing report files.
A verdict is only as strong as what ran: a claim holds when every test that
could run for it ran and passed; a claim of which only some tests ran (the
others deselected) stays unverified; tests skipped for want of CUDA are named
but do not demote what ran on CPU.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

from gdn_review.files import atomic_write
from gdn_review.generate import environment, expected_tests
from gdn_review.kb import Record, is_draft

EVIDENCE_FORMAT = "gdn-review-evidence/1"
RAN = {"passed", "failed", "xfailed", "xpassed", "error"}
FAILED = {"failed", "error", "xpassed"}
VERDICTS = ("holds", "fails", "known deviation", "not applicable", "unverified")
COVERAGE = ("uncovered", "targeted", "passing", "mutation-verified")
MUTANT_STATUSES = ("killed", "survived", "timeout", "error", "not applicable", "equivalent")


class ReportError(Exception):
    """Evidence that cannot be read (bad input)."""


@dataclasses.dataclass
class Evidence:
    tests: list[dict]
    environments: list[dict]
    finished_at: list[str]
    sources: list[str]
    mutants: list[dict] = dataclasses.field(default_factory=list)  # results of `gdn-review mutate`
    mutation: dict = dataclasses.field(default_factory=dict)  # record number -> release, gone hunks, notes
    bench: dict = dataclasses.field(default_factory=dict)  # record number -> device -> `gdn-review bench` result


def load_evidence(paths: list[Path]) -> Evidence:
    """Merge evidence files; each test keeps a pointer to the environment it ran in."""
    tests, environments, finished, sources, mutants, mutation, bench = [], [], [], [], [], {}, {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ReportError(f"{path}: no such evidence file (run `gdn-review run` or pytest on generated_tests/ first)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ReportError(f"{path}: cannot read evidence: {error}") from None
        if not isinstance(data, dict) or data.get("format") != EVIDENCE_FORMAT:
            raise ReportError(f"{path}: not gdn-review evidence (expected format {EVIDENCE_FORMAT!r})")
        if not isinstance(data.get("tests"), list):
            raise ReportError(f"{path}: evidence has no 'tests' list")
        index = len(environments)
        environments.append(data.get("environment") or {})
        finished.append(str(data.get("finished_at", "")))
        sources.append(str(path))
        for position, test in enumerate(data["tests"]):
            problem = _entry_problem(test)
            if problem:
                raise ReportError(f"{path}: tests[{position}]: {problem}")
            tests.append({**test, "risks": list(test.get("risks") or []), "environment": index})
        section = data.get("mutation")
        if section is not None:
            if not isinstance(section, dict) or not isinstance(section.get("mutants"), list):
                raise ReportError(f"{path}: 'mutation' must be an object with a 'mutants' list")
            for position, mutant in enumerate(section["mutants"]):
                problem = _mutant_problem(mutant)
                if problem:
                    raise ReportError(f"{path}: mutation.mutants[{position}]: {problem}")
                mutants.append({**mutant, "environment": index})
            for number, info in (section.get("records") or {}).items():
                mutation[str(number)] = info
        for number, result in (data.get("bench") or {}).items():
            if not isinstance(result, dict) or not isinstance(result.get("pooled"), dict) or not isinstance(result.get("cases"), list):
                raise ReportError(f"{path}: bench.{number}: expected a `gdn-review bench` result (pooled, cases)")
            bench.setdefault(str(number), {})[result.get("device") or "cpu"] = result  # per device; a later file wins
    return Evidence(tests, environments, finished, sources, mutants, mutation, bench)


def _mutant_problem(mutant) -> str | None:
    if not isinstance(mutant, dict):
        return f"expected an object, got {type(mutant).__name__}"
    if not isinstance(mutant.get("record"), int) or not isinstance(mutant.get("id"), str):
        return "'record' (integer) and 'id' (string) are required"
    if mutant.get("status") not in MUTANT_STATUSES:
        return f"unknown status {mutant.get('status')!r} (expected one of {', '.join(MUTANT_STATUSES)})"
    if not isinstance(mutant.get("killed_by", {}), dict) or not isinstance(mutant.get("risks", []), list):
        return "'killed_by' must be an object and 'risks' a list"
    return None


OUTCOMES = RAN | {"skipped", "deselected", "not run"}


def _entry_problem(test) -> str | None:
    """What is wrong with one evidence test entry, or None."""
    if not isinstance(test, dict):
        return f"expected an object, got {type(test).__name__}"
    kinds = {"nodeid": str, "record": int, "claim": str, "outcome": str}
    for key, kind in kinds.items():
        if not isinstance(test.get(key), kind) or isinstance(test.get(key), bool):
            return f"{key!r} must be {'an integer' if kind is int else 'a string'}, got {test.get(key)!r}"
    if test["outcome"] not in OUTCOMES:
        return f"unknown outcome {test['outcome']!r} (expected one of {', '.join(sorted(OUTCOMES))})"
    risks = test.get("risks", [])
    if risks is not None and not (isinstance(risks, list) and all(isinstance(r, str) for r in risks)):
        return f"'risks' must be a list of ids, got {risks!r}"
    for key in ("measured", "expected"):
        if test.get(key) is not None and not isinstance(test[key], dict):
            return f"{key!r} must be an object, got {test[key]!r}"
    for key in ("case", "property", "device", "reason"):
        if test.get(key) is not None and not isinstance(test[key], str):
            return f"{key!r} must be a string, got {test[key]!r}"
    return None


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _label(test: dict) -> str:
    return test.get("case") or test.get("property") or test["nodeid"].rsplit("[", 1)[-1].rstrip("]")


def _compact(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_compact(v)}" for k, v in value.items())
    return json.dumps(value) if not isinstance(value, str) else value


def _check_summary(claim) -> str:
    check = claim.check
    if check.kind == "op_budget":
        budget = ", ".join(f"{op} ≤ {limit}" for op, limit in check.budget.items())
        return f"op_budget: {budget} per build() on {_n(len(check.cases), 'case')}"
    if check.kind == "equivalence":
        return f"equivalence: expected metadata on {_n(len(check.cases), 'case')}"
    if check.kind == "invariant":
        return f"invariant: {len(check.properties)} properties on random valid batches (Hypothesis) and every named case"
    if check.kind == "latency":
        return f"latency: build() A/B between releases on {_n(len(check.cases), 'case')} (gdn-review bench)"
    if check.kind == "gpu_sync":
        return f"gpu_sync: ≤ {check.max_syncs} host-device syncs per build() on {_n(len(check.cases), 'case')} (CUDA)"
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
                    if isinstance(t.get("measured"), dict) and isinstance(t["measured"].get(op), int)
                }
            )
            if values:
                shown = str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"
                parts.append(f"{op}: measured {shown}, budget ≤ {limit}")
    return "; ".join(parts)


LATENCY_VERDICTS = {"supported": "holds", "contradicted": "fails", "not distinguishable from noise": "unverified"}
MECHANISM = "build() latency is the mechanism the claim names; the end-to-end throughput figure needs a serving benchmark"


def latency_claim(claim, number: int, results: dict | None) -> dict:
    """Verdict, reason, measured values and per-case rows of a latency claim, from `gdn-review bench` per device.

    Where the bench ran on CUDA too, CUDA's verdict is the claim's (the claim is
    about a GPU server); every device's numbers are shown.
    """
    if not results:
        return {"verdict": "unverified", "reason": f"not measured: run `gdn-review bench --record {number}`", "measured": "not measured", "vllm": "—", "devices": "—", "tests": [], "by_device": {}}
    devices = sorted(results, key=lambda device: (device != "cuda", device))
    reasons, measured, rows, by_device = [], [], [], {}
    for device in devices:
        result = results[device]
        low, high = result["pooled"]["ci95"]
        pooled = f"head/base {result['pooled']['ratio']:.3f} (95% interval {low:.3f}–{high:.3f}) over {_n(len(result['cases']), 'case')}"
        by_device[device] = LATENCY_VERDICTS.get(result.get("verdict"), "unverified")
        reasons.append(f"{result.get('verdict')}: build() on {result['head']} vs {result['base']}, {pooled}, {device}")
        measured.append(pooled if len(devices) == 1 else f"{device}: {pooled}")
        rows += [
            {
                "label": row["case"],
                "device": device,
                "outcome": "measured",
                "measured": f"{result['base']}: {row['base_median_us']} µs, {result['head']}: {row['head_median_us']} µs (median)",
                "expected": "head/base < 1",
                "reason": f"head/base {row['ratio']:.3f} [{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}], {row['samples'][0]}+{row['samples'][1]} samples",
            }
            for row in result["cases"]
        ]
    first = results[devices[0]]
    return {
        "verdict": by_device[devices[0]], "reason": "; ".join(reasons) + f"; {MECHANISM}", "measured": "; ".join(measured), "tests": rows,
        "vllm": f"{first['base']} → {first['head']}", "devices": _device_cell(by_device), "by_device": by_device,
    }


def _device_cell(by_device: dict[str, str], ran: bool = True) -> str:
    """``cpu: holds; cuda: unverified``: each device's verdict; one device whose tests ran: just its name."""
    if len(by_device) == 1 and ran:
        return next(iter(by_device))
    return "; ".join(f"{device}: {verdict}" for device, verdict in by_device.items()) or "—"


def verdicts_by_device(claim, tests: list[dict]) -> dict[str, str]:
    """The claim's verdict from each device's tests alone (a CPU run and a GPU run merged: both shown)."""
    devices = sorted({t.get("device") for t in tests if t.get("device")}, key=lambda device: (device != "cpu", device))
    return {device: claim_verdict(claim, [t for t in tests if t.get("device") == device])[0] for device in devices}


def _superseded_skips(tests: list[dict]) -> list[dict]:
    """Drop a test's "needs CUDA" skip where the same test ran in another evidence file (a GPU run merged)."""
    ran = {(t["record"], t["nodeid"]) for t in tests if t["outcome"] in RAN}
    return [
        t for t in tests
        if not (t["outcome"] == "skipped" and (t.get("reason") or "").startswith("needs CUDA") and (t["record"], t["nodeid"]) in ran)
    ]


def claim_verdict(claim, tests: list[dict]) -> tuple[str, str]:
    """(verdict, reason) of one claim from the tests that address it."""
    if claim.check.kind == "TODO":
        return "unverified", "draft: the claim has no check yet"
    if not tests:
        return "unverified", "no test ran (none collected: run the generated module for this record)"
    ran = [t for t in tests if t["outcome"] in RAN]
    not_run = [t for t in tests if t["outcome"] in {"deselected", "not run"}]
    skipped = [t for t in tests if t["outcome"] == "skipped"]
    not_applicable = [t for t in skipped if (t.get("reason") or "").startswith("not applicable")]
    needs_cuda = [t for t in skipped if (t.get("reason") or "").startswith("needs CUDA")]
    other_skips = [t for t in skipped if t not in not_applicable and t not in needs_cuda]
    failing = [t for t in ran if t["outcome"] in FAILED]
    if failing:
        first = failing[0]
        return "fails", f"{len(failing)} of {len(ran)} tests fail; first: {_label(first)} ({first.get('device')}): {first.get('reason') or first['outcome']}"
    if ran:
        if not_run or other_skips:
            why = sorted({_not_run_reason(t) for t in not_run})
            return "unverified", (
                f"only {_n(len(ran), 'test')} ran ({len(not_run)} {'; '.join(why) or 'not run'}"
                + (f", {len(other_skips)} skipped" if other_skips else "")
                + "); those that ran "
                + ("pass" if not any(t["outcome"] == "xfailed" for t in ran) else "pass or deviate as known")
            )
        note = f" ({_n(len(needs_cuda), 'CUDA test')} not run: needs CUDA)" if needs_cuda else ""
        deviations = [t for t in ran if t["outcome"] == "xfailed"]
        if deviations:
            reasons = sorted({(t.get("reason") or "").removeprefix("known deviation: ") for t in deviations})
            where = ", ".join(sorted({_label(t) for t in deviations}))
            return "known deviation", f"holds on {len(ran) - len(deviations)} of {len(ran)}; deviates on {where}: {' / '.join(reasons)}{note}"
        return "holds", f"{'all ' if len(ran) > 1 else ''}{_n(len(ran), 'test')} pass{'es' if len(ran) == 1 else ''}{note}"
    # Nothing ran: say why, the release range first (CUDA variants of an
    # out-of-range claim are out of range too).
    if not_applicable:
        return "not applicable", not_applicable[0]["reason"]
    if needs_cuda and not not_run:
        return "unverified", "needs CUDA: " + needs_cuda[0]["reason"].removeprefix("needs CUDA: ")
    if not_run:
        return "unverified", _not_run_reason(not_run[0])
    return "unverified", "skipped: " + (other_skips[0].get("reason") or "no reason given")


def _not_run_reason(test: dict) -> str:
    if test["outcome"] == "deselected":
        return "not run: deselected"
    return test.get("reason") or "not run: the session ended before it ran (-x, an interrupt or --collect-only)"


def risk_coverage(risk, tests: list[dict], has_tests: bool, mutants: list[dict] | None = None) -> tuple[str, list[str]]:
    """(coverage, what is missing) of one risk; ``mutants``: its mutants' results (None: mutate never ran)."""
    missing: list[str] = []
    if not has_tests:
        return "uncovered", ["no claim and case of the record address it: add a case or a claim that checks it"]
    ran = [t for t in tests if t["outcome"] in RAN]
    failing = [t for t in ran if t["outcome"] in FAILED]
    passing = [t for t in ran if t["outcome"] == "passed"]
    not_run = sum(t["outcome"] in {"deselected", "not run"} for t in tests)
    needs_cuda = sum(t["outcome"] == "skipped" and (t.get("reason") or "").startswith("needs CUDA") for t in tests)
    if failing:
        missing.append(f"{len(failing)} failing: " + ", ".join(sorted({_label(t) for t in failing})))
    if not_run:
        missing.append(f"{_n(not_run, 'test')} not run")
    if needs_cuda:
        missing.append(f"{_n(needs_cuda, 'test')} need{'s' if needs_cuda == 1 else ''} CUDA")
    verified = False
    declared = len(risk.mutants) + len(getattr(risk, "auto_mutants", []))
    if mutants is None:
        if declared:
            missing.append(f"{_n(declared, 'mutant')} declared, not yet run against the tests (run `gdn-review mutate`)")
        else:
            missing.append("no mutant embodies it: coverage cannot be mutation-verified")
    else:
        applicable = [m for m in mutants if m["status"] not in {"not applicable", "equivalent"}]
        unkilled = [m for m in applicable if m["status"] != "killed"]
        for m in unkilled:
            missing.append(f"mutant {m['id']} {m['status']}")
        if not applicable:
            missing.append("no mutant of it applies to this release: coverage cannot be mutation-verified here")
        verified = bool(applicable) and not unkilled
    # Passing means every test of it that could run here ran, and none failed.
    level = "passing" if passing and not failing and not not_run else "targeted"
    if level == "passing" and verified:
        level = "mutation-verified"
    if level == "targeted" and ran and not failing and not passing:
        missing.insert(0, "only known deviations ran")
    return level, missing


def _kill_cell(mutant: dict, claim_id: str) -> str:
    if mutant["status"] != "killed" and mutant["status"] != "survived":
        return "—"
    killers = mutant.get("killed_by", {}).get(claim_id)
    if killers:
        return "killed"
    return "passed" if claim_id in mutant.get("claims_passed", []) else "·"


def mutation_data(record: Record, evidence: Evidence) -> dict | None:
    """Kill matrix per risk, survivors with their diffs, unnamed survivors as missing tests."""
    mine = [m for m in evidence.mutants if m["record"] == record.pr.number]
    info = evidence.mutation.get(str(record.pr.number))
    if not mine and info is None:
        return None
    claims = [c.id for c in record.claims]
    # Columns for tests of no claim (e.g. the full-metadata snapshot) that ran under the mutants.
    claims += sorted({k for m in mine for k in [*m.get("killed_by", {}), *m.get("claims_passed", [])]} - set(claims))
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
    per_risk = [{"id": risk.id, "mutants": [r for r in rows if risk.id in r["risks"]]} for risk in record.risks]
    return {
        "release": (info or {}).get("release", "?"),
        "claims": claims,
        "risks": per_risk,
        "counts": {s: sum(r["status"] == s for r in rows) for s in MUTANT_STATUSES},
        "survivors": [r for r in rows if r["status"] in {"survived", "timeout", "error"}],
        "missing_tests": [r for r in rows if r["status"] == "survived" and r["origin"] == "diff" and not r["risks"]],
        "others": [r for r in rows if not r["risks"]],
        "gone_hunks": (info or {}).get("gone_hunks", []),
        "notes": (info or {}).get("notes", []),
        "total": len(rows),
    }


def _risk_mutants(risk, mutants: list[dict] | None) -> list[dict] | None:
    if mutants is None:
        return None
    return [m for m in mutants if risk.id in m.get("risks", [])]


def report_data(record: Record, evidence: Evidence) -> dict:
    """Everything a report says about one record, as plain data."""
    expected = expected_tests(record) if not is_draft(record) else {}
    mine = _superseded_skips([t for t in evidence.tests if t["record"] == record.pr.number])
    mine += _missing_tests(record.pr.number, expected, mine)
    environments = sorted(
        {evidence.environments[t["environment"]].get("vllm_version", "?") for t in mine if t["outcome"] in RAN}
    )
    claims = []
    for claim in record.claims:
        tests = [t for t in mine if t["claim"] == claim.id]
        ran = [t for t in tests if t["outcome"] in RAN]
        verdict, reason = claim_verdict(claim, tests)
        by_device = verdicts_by_device(claim, tests)
        claims.append(
            {
                "id": claim.id,
                "text": claim.text,
                "check": _check_summary(claim),
                "kind": claim.check.kind,
                "releases": claim.releases or "all",
                "verdict": verdict,
                "reason": reason,
                "measured": _measured_summary(claim, ran),
                "vllm": ", ".join(sorted({_release(evidence, t) for t in ran})) or "—",
                "devices": _device_cell(by_device, bool(ran)),  # a CUDA-only claim here: "cuda: unverified"
                "by_device": by_device,
                "note": claim.note,
                "tests": [
                    {
                        "label": _label(t),
                        "device": t.get("device") or "?",
                        "outcome": t["outcome"],
                        "measured": _compact(t.get("measured")),
                        "expected": _compact(t.get("expected")),
                        "reason": t.get("reason") or "",
                    }
                    for t in sorted(tests, key=lambda t: (t.get("device") or "", _label(t), t["nodeid"]))
                    if t["outcome"] in RAN or claim.check.kind == "gpu_sync"
                ],
            }
        )
        if claim.check.kind == "latency":
            claims[-1].update(latency_claim(claim, record.pr.number, evidence.bench.get(str(record.pr.number))))
    addressed = {risk for tests in expected.values() for test in tests for risk in test["risks"]}
    mutation = mutation_data(record, evidence)
    ran_mutants = [m for m in evidence.mutants if m["record"] == record.pr.number] if mutation else None
    risks = []
    for risk in record.risks:
        tests = [t for t in mine if risk.id in t.get("risks", [])]
        coverage, missing = risk_coverage(risk, tests, risk.id in addressed, _risk_mutants(risk, ran_mutants))
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
                "missing": missing,
            }
        )
    return {
        "number": record.pr.number,
        "title": record.pr.title,
        "repo": record.pr.repo,
        "url": record.pr.url,
        "merged_at": record.pr.merged_at or "unknown",
        "base_release": record.target.base_release or "TODO",
        "head_release": record.target.head_release or "TODO",
        "target": f"{record.target.file} ({record.target.symbol})",
        "draft": is_draft(record),
        "related": [r.model_dump(mode="json") for r in record.related],
        "environments": _environment_lines(evidence, mine),
        "vllm_versions": environments,
        "claims": claims,
        "risks": risks,
        "verdict_counts": {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS},
        "coverage_counts": {c: sum(r["coverage"] == c for r in risks) for c in COVERAGE},
        "mutation": mutation,
        "next_steps": _next_steps(claims, risks, mutation),
        "finished_at": max(evidence.finished_at, default=""),
        "tests_total": len(mine),
    }


def _missing_tests(number: int, expected: dict[str, list[dict]], present: list[dict]) -> list[dict]:
    """Entries for the tests the record's module holds that the evidence never saw."""
    seen = {(t["claim"], _label(t), t.get("device")) for t in present}
    missing = []
    for claim_id, tests in expected.items():
        for test in tests:
            if (claim_id, test["label"], test["device"]) not in seen:
                missing.append(
                    {
                        "nodeid": f"(not collected) {claim_id}[{test['device']}-{test['label']}]",
                        "record": number,
                        "claim": claim_id,
                        "risks": test["risks"],
                        "case": test["label"],
                        "device": test["device"],
                        "outcome": "not run",
                        "reason": "not run: not collected",
                        "environment": None,
                    }
                )
    return missing


def _release(evidence: Evidence, test: dict) -> str:
    env = evidence.environments[test["environment"]]
    version = env.get("vllm_version", "?")
    return version if env.get("vllm_source", "").startswith("installed") else f"{version} (unpacked)"


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


def _next_steps(claims: list[dict], risks: list[dict], mutation: dict | None = None) -> list[str]:
    steps = []
    for row in (mutation or {}).get("missing_tests", []):
        steps.append(f"Missing test: the PR's code survives mutant {row['id']} (see its diff): add a case, an expected field or a property that catches it, or mark it equivalent with a reason.")
    for claim in claims:
        if claim["verdict"] == "fails":
            steps.append(f"Claim {claim['id']} fails: {claim['reason']}. Fix the code, or record the deviation with its measured reason.")
    for claim in claims:
        if claim["verdict"] == "unverified":
            hint = " Run the suite on a machine with a CUDA GPU." if "needs CUDA" in claim["reason"] else ""
            steps.append(f"Claim {claim['id']} is unverified: {claim['reason']}.{hint}")
    for risk in risks:
        if risk["coverage"] == "uncovered":
            steps.append(f"Risk {risk['id']} is uncovered: {risk['missing'][0]}.")
        elif risk["coverage"] == "targeted":
            steps.append(f"Risk {risk['id']} is only targeted: {'; '.join(risk['missing'][:2])}.")
    for claim in claims:
        if claim["verdict"] == "known deviation":
            steps.append(f"Claim {claim['id']} is a known deviation (see its row): decide whether the claim's wording or vLLM should change.")
    return steps


def _cell(value) -> str:
    """Text safe inside a markdown table cell."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>").strip()


def render_markdown(data: dict) -> str:
    return environment(cell=_cell).get_template("report.md.j2").render(**data)


def render_index(reports: list[dict]) -> str:
    return environment(cell=_cell).get_template("index.md.j2").render(reports=reports, finished_at=max((r["finished_at"] for r in reports), default=""))


def write_reports(
    records: dict[Path, Record], evidence: Evidence, out_dir: Path, fmt: str = "markdown", reports: list[dict] | None = None
) -> tuple[list[Path], list[dict]]:
    """One report per record plus an index; returns the paths written and the report data.

    ``reports``: report data made already (the release matrix's), written as they are.
    """
    if reports is None:
        reports = [report_data(record, evidence) for record in sorted(records.values(), key=lambda r: r.pr.number)]
        # A related PR with a record of its own links to that record's report.
        numbers = {record.pr.number for record in records.values()}
        for data in reports:
            for related in data["related"]:
                related["has_record"] = related["number"] in numbers
    written = []
    for data in reports:
        if fmt == "json":
            path = out_dir / f"{data['number']}.json"
            atomic_write(path, json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        else:
            path = out_dir / f"{data['number']}.md"
            atomic_write(path, render_markdown(data))
        written.append(path)
    if fmt == "markdown":
        index = out_dir / "index.md"
        atomic_write(index, render_index(reports))
        written.append(index)
    return written, reports


def failures(reports: list[dict], fail_on: set[str]) -> list[str]:
    """What in the reports trips the chosen --fail-on conditions."""
    found = []
    for data in reports:
        for claim in data["claims"]:
            if claim["verdict"] == "fails" and "fails" in fail_on:
                found.append(f"PR {data['number']} claim {claim['id']} fails")
            if claim["verdict"] == "unverified" and "unverified" in fail_on:
                found.append(f"PR {data['number']} claim {claim['id']} unverified: {claim['reason']}")
        for risk in data["risks"]:
            if risk["coverage"] == "uncovered" and "uncovered" in fail_on:
                found.append(f"PR {data['number']} risk {risk['id']} uncovered")
        if "survived" in fail_on:
            for row in (data.get("mutation") or {}).get("survivors", []):
                if row["status"] == "survived":
                    found.append(f"PR {data['number']} mutant {row['id']} survived")
    return found


# --- The release matrix (gdn-review matrix) -------------------------------------------


def _op_values(tests: list[dict], key: str) -> list[int]:
    return sorted(
        t["measured"][key] for t in tests if isinstance(t.get("measured"), dict) and isinstance(t["measured"].get(key), int)
    )


def _cell_measure(claim, tests: list[dict]) -> str:
    """What a release measured for a claim, in a few words (op counts as a range over the cases)."""
    ran = [t for t in tests if t["outcome"] in RAN]
    if not ran:
        return ""
    if claim.check.kind == "op_budget":
        parts = []
        for key in claim.check.budget:
            values = _op_values(ran, key)
            if values:
                shown = str(values[0]) if values[0] == values[-1] else f"{values[0]}–{values[-1]}"
                parts.append(f"{key.split('|')[0]} {shown}")
        return ", ".join(parts)
    passed = sum(t["outcome"] == "passed" for t in ran)
    return f"{passed}/{len(ran)} as expected"


def _discrimination(before: str | None, base: dict | None, head: dict | None) -> tuple[str, str]:
    """(verdict, why): does the check tell the release without the PR from the release with it?"""
    if before is None:
        return "not stated", "the record gives no `before` for this claim"
    if base is None or head is None:
        return "unverified", "the matrix did not run both the base and the head release"
    vb, vh = base["verdict"], head["verdict"]
    after_ok = vh in {"holds", "known deviation"}
    if "unverified" in (vb, vh) or "not applicable" in (vb, vh):
        return "unverified", f"{vb} on the base release, {vh} on the head release"
    if before == "fails":
        if vb == "fails" and after_ok:
            return "discriminates", f"fails on the base release ({base['measure'] or base['reason']}), {vh} from the head release ({head['measure']})"
        if vb == "fails":
            return "does not discriminate", f"fails on the head release too ({head['reason']})"
        return "does not discriminate", f"{vb} on the base release too: the check is never seen to fail"
    if vb == "fails":
        return "does not discriminate", f"fails on the base release although the record says it held there: {base['reason']}"
    if not after_ok:
        return "does not discriminate", f"holds on the base release but {vh} on the head release: {head['reason']}"
    return "does not discriminate", "as the record says (before: holds): a preservation claim holds before and after the PR"


def _trajectory(values: list[tuple[str, int | None]]) -> str:
    """'5 (0.28.0) → 2 (0.29.0–0.31.0) → 3 (0.32.0–0.33.0)'."""
    runs: list[list] = []
    for version, value in values:
        if value is None:
            continue
        if runs and runs[-1][0] == value:
            runs[-1][2] = version
        else:
            runs.append([value, version, version])
    return " → ".join(f"{v} ({a})" if a == b else f"{v} ({a}–{b})" for v, a, b in runs)


def _in_window(release: str | None, after: str, upto: str) -> bool:
    from packaging.version import Version

    return release is not None and Version(after) < Version(release) <= Version(upto)


def _explainers(record: Record, previous: str, current: str) -> list[tuple[str, int, list]]:
    """(label, PR number, changes) of the PRs that first shipped after ``previous``, up to ``current``."""
    found = []
    if _in_window(record.target.head_release, previous, current):
        found.append(("this PR", record.pr.number, record.target.changes))
    for relation in record.related:
        if _in_window(relation.from_release, previous, current):
            found.append((relation.relation, relation.number, relation.changes))
    return found


def _short(value, limit: int = 60) -> str:
    """A snapshot value for a table cell: JSON, cut at ``limit`` characters (the stored snapshots have it whole)."""
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def drift_data(record: Record, snapshots_by_release: list[tuple[str, dict | None]], known_records: set[int]) -> dict:
    """Field differences between consecutive releases' snapshots, each attributed or unexplained."""
    from gdn_review import snapshot as snapshot_module

    rows, schema, missing = [], [], []
    present = [(v, s) for v, s in snapshots_by_release if s is not None]
    missing = [v for v, s in snapshots_by_release if s is None]
    for (previous, old), (current, new) in zip(present, present[1:]):
        differences = snapshot_module.differences(old["cases"], new["cases"])
        added, removed = set(), set()
        by_case: dict[str, list[dict]] = {}
        for difference in differences:
            if difference["field"] == "(case)":
                continue
            if difference["before"] == "(no such field)":
                added.add(difference["field"])
            elif difference["after"] == "(no such field)":
                removed.add(difference["field"])
            else:
                by_case.setdefault(difference["case"], []).append(difference)
        if added or removed:
            schema.append({"from": previous, "to": current, "added": sorted(added), "removed": sorted(removed)})
        explainers = _explainers(record, previous, current)
        for case_id, changed in sorted(by_case.items()):
            fields = [d["field"] for d in changed]
            explained_by = []
            for label, number, changes in explainers:
                for change in changes:
                    if case_id in change.cases and (not change.fields or set(fields) <= set(change.fields)):
                        explained_by.append({"number": number, "relation": label, "record": number in known_records, "note": change.note})
                        break
            rows.append(
                {
                    "from": previous,
                    "to": current,
                    "case": case_id,
                    "fields": fields,
                    "changes": [f"{d['field']}: {_short(d['before'])} → {_short(d['after'])}" for d in changed],
                    "explained_by": explained_by,
                }
            )
    return {
        "rows": rows,
        "unexplained": [r for r in rows if not r["explained_by"]],
        "schema": schema,
        "missing": missing,
    }


def matrix_data(record: Record, matrix: dict, known_records: set[int] | None = None) -> dict:
    """Release x claim table, before -> after per claim, op-count trajectories and drift of one record."""
    known_records = known_records or set()
    entries = matrix["releases"]
    columns, per_release = [], {}
    for entry in entries:
        version = entry["version"]
        columns.append({"version": version, "role": entry["role"], "source": entry["source"], "claims_on_any_release": entry.get("claims_on_any_release", False), "summary": entry.get("summary", "")})
        if entry.get("evidence_path"):
            evidence = load_evidence([Path(entry["evidence_path"])])
            per_release[version] = (report_data(record, evidence), evidence)
    base = record.target.base_release
    head = record.target.head_release
    rows = []
    for claim in record.claims:
        cells = []
        for entry in entries:
            version = entry["version"]
            if version not in per_release:
                cells.append({"version": version, "verdict": "not run", "reason": entry.get("summary", ""), "measure": ""})
                continue
            data, evidence = per_release[version]
            row = next(c for c in data["claims"] if c["id"] == claim.id)
            tests = [t for t in evidence.tests if t["record"] == record.pr.number and t["claim"] == claim.id]
            cells.append({"version": version, "verdict": row["verdict"], "reason": row["reason"], "measure": _cell_measure(claim, tests), "tests": tests})
        by_version = {c["version"]: c for c in cells}
        verdict, why = _discrimination(claim.before, by_version.get(base), by_version.get(head))
        trajectories = []
        if claim.check.kind == "op_budget":
            for key in claim.check.budget:
                values = []
                for cell in cells:
                    ran = [t for t in cell.get("tests", []) if t["outcome"] in RAN]
                    found = _op_values(ran, key)
                    values.append((cell["version"], found[-1] if found else None))
                if any(v is not None for _, v in values):
                    trajectories.append(f"{key}, most per build(): {_trajectory(values)}")
        rows.append(
            {
                "id": claim.id,
                "before": claim.before or "—",
                "cells": [{k: v for k, v in c.items() if k != "tests"} for c in cells],
                "discrimination": verdict,
                "discrimination_reason": why,
                "trajectories": trajectories,
            }
        )
    drift = drift_data(record, [(e["version"], e.get("snapshot_data")) for e in entries], known_records)
    return {
        "columns": columns,
        "rows": rows,
        "drift": drift,
        "downloaded": matrix.get("downloaded", []),
        "duration_s": matrix.get("duration_s"),
        "jobs": matrix.get("jobs"),
        "target_diff": matrix.get("target_diff"),
        "base_release": base,
        "head_release": head,
    }


def matrix_report(record: Record, matrix: dict, known_records: set[int] | None = None) -> dict:
    """A record's report on its newest release's evidence, with the release matrix added."""
    entries = [e for e in matrix["releases"] if e.get("evidence_path")]
    if not entries:
        raise ReportError("no release of the matrix wrote evidence")
    data = report_data(record, load_evidence([Path(entries[-1]["evidence_path"])]))
    data["matrix"] = matrix_data(record, matrix, known_records)
    for related in data["related"]:
        related["has_record"] = related["number"] in (known_records or set())
    return data


def matrix_failures(data: dict, fail_on: set[str]) -> list[str]:
    """--fail-on for a matrix: drift (unexplained snapshot differences) besides report.failures'."""
    found = failures([data], fail_on - {"drift"})
    if "drift" in fail_on:
        for row in data["matrix"]["drift"]["unexplained"]:
            found.append(f"PR {data['number']} unexplained drift {row['from']} → {row['to']}: {row['case']}: {', '.join(row['fields'])}")
    return found
