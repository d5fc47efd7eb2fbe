"""A report's claim rows: each claim's verdict in words, with what its check is, what was
measured, on which releases and devices, under which server configuration.

verdicts.py decides what a claim's tests say; this module words it per claim (a latency
claim from `gdn-review bench`'s results); report_contents.py gathers the rows into a report.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gdn_review.common.vocabulary import NOT_MEASURED, RAN, Outcome, SkipKind, Verdict
from gdn_review.kb import Record
from gdn_review.kb.subjects import state_words
from gdn_review.report import failing_batch
from gdn_review.report.verdicts import (
    LATENCY_VERDICTS,
    claim_verdict,
    label_of,
    pending_verdict,
    plural,
    skipped,
    verdicts_by_device,
)
from gdn_review.run.evidence_file import Evidence

# Tests that were tried on a release: those that ran, and those that could not run there or
# raised in the check (they name the release and device they were tried on).
TRIED = RAN | set(NOT_MEASURED)


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
        where = f" in case {check.configuration}'s configuration" if check.configuration else ""
        return (
            f"invariant: {len(check.properties)} properties on random valid batches "
            f"(Hypothesis, seeded by the claim), the boundary batches and every named case{where}"
        )
    if check.kind == "latency":
        return (
            "latency: build() A/B between releases on "
            f"{plural(len(check.cases), 'case')} (gdn-review bench)"
        )
    if check.kind == "gpu_sync":
        return (
            f"gpu_sync: ≤ {check.max_syncs} host-device syncs {_per(record, check)} "
            f"on {plural(len(check.cases), 'case')} "
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
    parts = [f"{counts[Outcome.PASSED]}/{len(ran)} as expected"]
    if counts[Outcome.XFAILED]:
        parts.append(f"{counts[Outcome.XFAILED]} {Verdict.KNOWN_DEVIATION}")
    if claim.check.kind == "op_budget":
        for op, limit in claim.check.budget.items():
            shown = span(op_values(ran, op))
            if shown:
                parts.append(f"{op}: measured {shown}, budget ≤ {limit}")
    if claim.check.kind == "gpu_sync":
        for device, key, name in (
            ("cuda", "syncs", "CUDA syncs"),
            ("cpu", "device_origin_reads", "CPU proxy: device-origin reads"),
        ):
            on_device = [t.get("measured") for t in ran if t.get("device") == device]
            shown = span([m[key] for m in on_device if isinstance(m, dict) and key in m])
            if shown:
                parts.append(f"{name}: measured {shown}, budget ≤ {claim.check.max_syncs}")
    return "; ".join(parts)


def op_values(tests: list[dict], key: str) -> list[int]:
    """The ``key`` op counts the tests measured, lowest first."""
    return sorted(
        t["measured"][key]
        for t in tests
        if isinstance(t.get("measured"), dict) and isinstance(t["measured"].get(key), int)
    )


def span(values: list) -> str | None:
    """``3`` or ``2–5``: the values measured, lowest to highest (None: none)."""
    values = sorted(set(values))
    if not values:
        return None
    return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"


MECHANISM = (
    "build() latency is the mechanism the claim names; the "
    "end-to-end throughput figure needs a serving benchmark"
)


def not_measured(claim, record: Record, path: Path | None) -> str:
    """Why a latency claim has no bench result, advising only a command that can run.

    An open PR is timed against its diff (``kb/N.diff``): where none is stored
    beside the record (or the record's file ``path`` is not known), the claim
    is measured once it is, or once the change is released.
    """
    key = record.key
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
            f"not measured: {record.label} is {state_words(record.state)}, so no release has "
            "its change; the latency claim is measured "
            f"once the PR's diff is stored beside the record (`gh pr diff {key} > {diff}`, "
            f"then `gdn-review bench --record {key}`) "
            "or the change is released"
        )
    if not base or not head:
        return (
            "not measured: the record has no base and head release; "
            f"`gdn-review bench --record {key} --releases BASE,HEAD` times "
            "two releases"
        )
    return f"not measured: run `gdn-review bench --record {key}`"


def latency_claim(claim, record: Record, results: dict | None, path: Path | None) -> dict:
    """Verdict, reason, measured values and per-case rows of a latency claim, from `gdn-review
    bench` per device.

    Where the bench ran on CUDA too, CUDA's verdict is the claim's (the claim is
    about a GPU server); every device's numbers are shown. ``path``: the
    record's file, where an open PR's diff would lie beside it (None: not known).
    """
    if not results:
        return {
            "verdict": Verdict.UNVERIFIED,
            "reason": not_measured(claim, record, path),
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
        by_device[device] = LATENCY_VERDICTS.get(result.get("verdict"), Verdict.UNVERIFIED)
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


def configurations(record: Record, claim, ran: list[dict], evidence: Evidence) -> str:
    """How the claim's cases configured the builder as a GPU server would, in words ("" when
    none did): every report line of such a run names it. On vLLM's CUDA platform vLLM resolves
    the prefill backend itself (no override); the backend it resolved is what the tests
    measured. CUDA tensors on vLLM's CPU platform get the case's backend, as on CPU."""
    names = set(getattr(claim.check, "cases", []) or [])
    words = sorted({w for c in record.cases if c.id in names and (w := c.configuration())})
    cuda = [t for t in ran if t.get("device") == "cuda"]
    if any(_on_cpu_platform(evidence, t) for t in cuda):
        words.append("CUDA tensors on vLLM's CPU platform: the case's backend, not vLLM's choice")
    elif cuda:
        resolved = sorted(
            {
                str(t["measured"]["prefill_backend_resolved"])
                for t in cuda
                if isinstance(t.get("measured"), dict)
                and "prefill_backend_resolved" in t["measured"]
            }
        )
        words.append(
            "on CUDA the backend vLLM resolved itself"
            + (f": {', '.join(resolved)}" if resolved else "")
        )
    return "; ".join(words)


def _on_cpu_platform(evidence: Evidence, test: dict) -> bool:
    index = test.get("environment")
    if index is None or index >= len(evidence.environments):
        return False
    return bool(evidence.environments[index].get("cuda_on_cpu_platform"))


def tested_on(evidence: Evidence, tests: list[dict]) -> list[str]:
    """The releases tests ran on, and those that lack what a case needs ("vLLM X has no ...")."""
    found = {release_of(evidence, t) for t in tests if t["outcome"] in TRIED}
    for test in skipped(tests, SkipKind.ABSENT, SkipKind.REFUSED):
        found.add(evidence.environments[test["environment"]].get("vllm_version", "?"))
    return sorted(found)


def release_of(evidence: Evidence, test: dict) -> str:
    env = evidence.environments[test["environment"]]
    version = env.get("vllm_version", "?")
    return (
        version if env.get("vllm_source", "").startswith("installed") else f"{version} (unpacked)"
    )


def releases_cell(evidence: Evidence, tests: list[dict]) -> str:
    """The releases the tests were tried on (ran, or could not run), for a table cell."""
    tried = {release_of(evidence, t) for t in tests if t["outcome"] in TRIED}
    return ", ".join(sorted(tried)) or "—"


def claim_rows(
    record: Record,
    evidence: Evidence,
    mine: list[dict],
    with_change: bool = False,
    path: Path | None = None,
) -> list[dict]:
    """Each claim's row, from ``mine``: the record's tests (those that did not run named too).

    ``with_change`` and ``path`` as ``report_contents.report_data`` takes them.
    """
    claims = []
    for claim in record.claims:
        tests = [t for t in mine if t["claim"] == claim.id]
        ran = [t for t in tests if t["outcome"] in RAN]
        tried = [t for t in tests if t["outcome"] in TRIED]
        verdict, reason = claim_verdict(claim, tests)
        tested = tested_on(evidence, tests)
        verdict, reason = pending_verdict(
            record, claim, verdict, reason, tested, with_change, tests
        )
        configured = configurations(record, claim, ran, evidence)
        if configured:
            reason = f"{reason} [{configured}]"
        by_device = {
            device: pending_verdict(
                record,
                claim,
                v,
                "",
                tested,
                with_change,
                [t for t in tests if t.get("device") == device],
            )[0]
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
                "vllm": releases_cell(evidence, tried),
                # a CUDA-only claim here: "cuda: unverified"
                "devices": _device_cell(by_device, bool(ran)),
                "by_device": by_device,
                "note": claim.note,
                # The batches its failed tests failed on (invariants): rows and a case to paste.
                "failing_batches": failing_batch.of_tests(tests),
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
                    if t["outcome"] in TRIED or claim.check.kind == "gpu_sync"
                ],
            }
        )
        if claim.check.kind == "latency":
            claims[-1].update(
                latency_claim(claim, record, evidence.bench.get(str(record.key)), path)
            )
    return claims
