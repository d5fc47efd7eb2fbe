"""What the evidence says: a verdict per claim, coverage per risk, what --fail-on can name.

Plain functions over evidence and records; no markdown, no files written
(report_contents.py, with claim_rows.py, risk_rows.py and next_steps.py, words
these results into a report; report.py renders it).
A verdict is only as strong as what ran: a claim holds when every test that
could run for it ran and passed; a claim of which only some tests ran (the
others deselected) stays unverified; tests skipped for want of CUDA are named
but do not demote what ran on CPU.
"""

from __future__ import annotations

from gdn_review.common.fail_conditions import ERROR
from gdn_review.common.vocabulary import (
    FAILING,
    NOT_MEASURED,
    NOT_RUN,
    RAN,
    SURVIVORS,
    Outcome,
    SkipKind,
    Verdict,
)
from gdn_review.common.vocabulary import MutantStatus as M
from gdn_review.kb.subjects import key_label, state_words
from gdn_review.run.evidence_file import MEASURED

# Mutants a risk's coverage does not count: none of this release, one that cannot change
# behaviour, one only another device or backend can run (kb/guard/ notes; named beside it).
NOT_SCORED = {M.NOT_APPLICABLE, M.EQUIVALENT, M.UNREACHABLE}
# The skips that make a claim not applicable; only a release that lacks what the case needs
# (ABSENT) makes an open PR's claim pending.
NOT_APPLICABLE = (SkipKind.ABSENT, SkipKind.NOT_APPLICABLE, SkipKind.REFUSED)
# "not protected": its tests pass, but mutants that embody it survive them (or run on lines no test
# executes).
COVERAGE = ("uncovered", "targeted", "not protected", "passing", "mutation-verified")


def plural(count: int, word: str) -> str:
    """``1 test``, ``2 tests``."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def label_of(test: dict) -> str:
    """The name a test goes by in a report: its case or property, else its parametrize id."""
    return test.get("case") or test.get("property") or test["nodeid"].rsplit("[", 1)[-1].rstrip("]")


# `gdn-review bench`'s word for a latency A/B -> the claim's verdict.
LATENCY_VERDICTS = {
    "supported": Verdict.HOLDS,
    "contradicted": Verdict.FAILS,
    "not distinguishable from noise": Verdict.UNVERIFIED,
}


def verdicts_by_device(claim, tests: list[dict]) -> dict[str, str]:
    """The claim's verdict from each device's tests alone (a CPU run and a GPU run merged: both
    shown)."""
    devices = sorted(
        {t.get("device") for t in tests if t.get("device")},
        key=lambda device: (device != "cpu", device),
    )
    return {
        device: claim_verdict(claim, [t for t in tests if t.get("device") == device])[0]
        for device in devices
    }


def superseded_skips(tests: list[dict]) -> list[dict]:
    """Drop a test's "needs CUDA" skip where the same test ran in another evidence file (a GPU run
    merged)."""
    ran = {(t["record"], t["nodeid"]) for t in tests if t["outcome"] in RAN}
    cuda = skipped(tests, SkipKind.NEEDS_CUDA)
    return [t for t in tests if not (t in cuda and (t["record"], t["nodeid"]) in ran)]


def skipped(tests: list[dict], *kinds: str) -> list[dict]:
    """The tests that skipped for one of ``kinds`` (a skip without a kind is a plain one)."""
    other = SkipKind.OTHER
    return [
        t for t in tests if t["outcome"] == Outcome.SKIPPED and t.get("skip_kind", other) in kinds
    ]


def claim_verdict(claim, tests: list[dict]) -> tuple[str, str]:
    """(verdict, reason) of one claim from the tests that address it."""
    if claim.check.kind == "TODO":
        return Verdict.UNVERIFIED, "draft: the claim has no check yet"
    if not tests:
        return (
            Verdict.UNVERIFIED,
            "no test ran (none collected: run the generated module for this record)",
        )
    ran = [t for t in tests if t["outcome"] in RAN]
    not_run = [t for t in tests if t["outcome"] in NOT_RUN]
    not_applicable = skipped(tests, *NOT_APPLICABLE)
    needs_cuda = skipped(tests, SkipKind.NEEDS_CUDA)
    other_skips = skipped(tests, SkipKind.OTHER)
    failing = [t for t in ran if t["outcome"] in FAILING]
    unmeasured = not_measured(tests)
    if unmeasured is not None:
        return unmeasured
    if failing:
        first = failing[0]
        proxy = (
            " (CPU proxy: device-origin reads)"
            if claim.check.kind == "gpu_sync" and first.get("device") == "cpu"
            else ""
        )
        return (
            Verdict.FAILS,
            f"{len(failing)} of {len(ran)} tests fail; first: "
            f"{label_of(first)} ({first.get('device')}){proxy}: "
            f"{first.get('reason') or first['outcome']}",
        )
    if ran:
        if not_run or other_skips:
            why = sorted({_not_run_reason(t) for t in not_run})
            skips = f", {len(other_skips)} skipped" if other_skips else ""
            known = any(t["outcome"] == Outcome.XFAILED for t in ran)
            return Verdict.UNVERIFIED, (
                f"only {plural(len(ran), 'test')} ran ({len(not_run)} {'; '.join(why) or 'not run'}"
                f"{skips}); those that ran {'pass or deviate as known' if known else 'pass'}"
            )
        notes = (
            [f"{plural(len(needs_cuda), 'CUDA test')} not run: needs CUDA"] if needs_cuda else []
        )
        if claim.check.kind == "gpu_sync" and not any(t.get("device") == "cuda" for t in ran):
            # Only the CPU proxy ran: say so, CUDA's count stays the authority.
            notes.insert(0, "CPU proxy: device-origin reads")
        note = f" ({'; '.join(notes)})" if notes else ""
        deviations = [t for t in ran if t["outcome"] == Outcome.XFAILED]
        if deviations:
            reasons = sorted(
                {(t.get("reason") or "").removeprefix("known deviation: ") for t in deviations}
            )
            where = ", ".join(sorted({label_of(t) for t in deviations}))
            return (
                Verdict.KNOWN_DEVIATION,
                f"holds on {len(ran) - len(deviations)} of {len(ran)}; deviates "
                f"on {where}: {' / '.join(reasons)}{note}",
            )
        return (
            Verdict.HOLDS,
            f"{'all ' if len(ran) > 1 else ''}{plural(len(ran), 'test')} "
            f"pass{'es' if len(ran) == 1 else ''}{note}",
        )
    # Nothing ran: say why, the release range first (CUDA variants of an
    # out-of-range claim are out of range too).
    if not_applicable:
        return Verdict.NOT_APPLICABLE, not_applicable[0]["reason"]
    if needs_cuda and not not_run:
        return Verdict.UNVERIFIED, needs_cuda[0]["reason"]  # "needs CUDA: ...", the harness's
    if not_run:
        return Verdict.UNVERIFIED, _not_run_reason(not_run[0])
    return Verdict.UNVERIFIED, "skipped: " + (other_skips[0].get("reason") or "no reason given")


def not_measured(tests: list[dict]) -> tuple[str, str] | None:
    """(verdict, reason) where some of a claim's tests measured nothing: an error in the check
    (gdn-review's fault) first, then could not run. Never read as holds, fails or pending: what
    did run is named beside it. None where every test that ran measured."""
    for outcome in (Outcome.CHECK_ERROR, Outcome.COULD_NOT_RUN):
        these = [t for t in tests if t["outcome"] == outcome]
        if not these:
            continue
        first = these[0]
        failing = sum(t["outcome"] in FAILING for t in tests)
        passed = sum(t["outcome"] in {Outcome.PASSED, Outcome.XFAILED} for t in tests)
        others = [f"{plural(passed, 'other test')} passed"] if passed else []
        if failing:
            others.append(f"{failing} failed")
        beside = f" ({', '.join(others)})" if others else ""
        return Verdict(outcome), (
            f"{len(these)} of {plural(len(tests), 'test')} {outcome_words(outcome)}{beside}; "
            f"first: {label_of(first)} ({first.get('device')}): {message_of(first)}"
        )
    return None


def message_of(test: dict) -> str:
    """What a test that measured nothing says, without its outcome's own words before it: the
    step and vLLM's message with its frame ("VllmConfig raised RuntimeError: ... (at
    vllm/platforms/cpu.py:NN in check_and_update_config)"), or what gdn-review's own code
    raised and where."""
    outcome = test["outcome"]
    reason = test.get("reason") or outcome
    if reason.startswith(f"{outcome} (") and reason.endswith(")"):  # the plugin's check error
        return reason[len(outcome) + 2 : -1]
    return reason.removeprefix(f"{outcome}: ")


def outcome_words(outcome: str) -> str:
    """``could not run``; ``raised an error in the check``."""
    return outcome if outcome == Outcome.COULD_NOT_RUN else f"raised an {Outcome.CHECK_ERROR}"


def measured_failures(tests: list[dict]) -> bool:
    """Whether every failed test of these measured its failure (an assertion on measured values,
    or the exception a case expects), not an exception the code under test raised on its own."""
    failed = [t for t in tests if t["outcome"] == Outcome.FAILED]
    return all(t.get("failure", MEASURED) == MEASURED for t in failed)


def pending_verdict(
    record,
    claim,
    verdict: str,
    reason: str,
    releases: list[str],
    with_change: bool = False,
    tests: list[dict] = (),
) -> tuple[str, str]:
    """A claim of an open (or closed, unmerged) PR read on a release without its change:
    **pending**, not failing.

    An improvement claim (``before: fails``) that fails there fails as the PR
    says it should, where every failure is a measured one (``tests``: the claim's);
    a claim whose cases need what only the PR adds (``needs``) cannot run there.
    Both are decided once the change is in: on a release that has it, or with the
    PR's diff applied (``with_change``). Could not run and error in the check stay
    what they are.
    """
    if with_change or not record.is_open:
        return verdict, reason
    where = f"vLLM {', '.join(releases)}" if releases else "this release"
    state = state_words(record.pr.state)
    improvement = verdict == Verdict.FAILS and claim.before == Verdict.FAILS
    if improvement and not measured_failures(tests):
        raised = next(
            t
            for t in tests
            if t["outcome"] == Outcome.FAILED and t.get("failure", MEASURED) != MEASURED
        )
        return (
            Verdict.FAILS,
            f"{reason}; not pending: on {where} {raised['failure']} raised "
            f"({raised.get('reason')}), not the difference the claim states",
        )
    if improvement:
        return (
            Verdict.PENDING,
            f"fails on {where} as the PR says it should (before: fails); "
            f"holds once the change is in (the PR is {state})",
        )
    first = skipped(tests, *NOT_APPLICABLE)[:1]  # the skip whose reason the verdict gives
    if verdict == Verdict.NOT_APPLICABLE and first and first[0]["skip_kind"] == SkipKind.ABSENT:
        return (
            Verdict.PENDING,
            f"{reason.removeprefix('not applicable: ')}: what the PR adds; "
            f"checked once the change is in (the PR is {state})",
        )
    return verdict, reason


def _not_run_reason(test: dict) -> str:
    if test["outcome"] == Outcome.DESELECTED:
        return "not run: deselected"
    return (
        test.get("reason")
        or "not run: the session ended before it ran (-x, an interrupt or --collect-only)"
    )


def risk_coverage(
    risk,
    tests: list[dict],
    has_tests: bool,
    mutants: list[dict] | None = None,
    pending: set[str] = frozenset(),
) -> tuple[str, list[str]]:
    """(coverage, what is missing) of one risk; ``mutants``: its mutants' results (None: mutate
    never ran).

    Tests of ``pending`` claims (an open PR's, on a release without its change)
    are set aside: the risk is judged on what the record can check now, and says so.
    """
    missing: list[str] = []
    if not has_tests:
        return "uncovered", [
            "no claim and case of the record address it: add a case or a claim that checks it"
        ]
    set_aside = sorted({t["claim"] for t in tests if t["claim"] in pending})
    if set_aside:
        tests = [t for t in tests if t["claim"] not in pending]
        missing.append(
            f"claim{'s' if len(set_aside) > 1 else ''} {', '.join(set_aside)} pending "
            "(the PR's change is not in this release): "
            "judged on the record's other tests"
        )
        if not tests:
            return "targeted", missing + [
                "every test of it is pending: checked once the change is in (or with the PR's diff)"
            ]
    ran = [t for t in tests if t["outcome"] in RAN]
    failing = [t for t in ran if t["outcome"] in FAILING]
    passing = [t for t in ran if t["outcome"] == Outcome.PASSED]
    not_run = sum(t["outcome"] in NOT_RUN for t in tests)
    needs_cuda = len(skipped(tests, SkipKind.NEEDS_CUDA))
    # A test that could not run, or whose check raised, measured nothing: never passing.
    unmeasured = [t for t in tests if t["outcome"] in NOT_MEASURED]
    missing += _unmeasured_lines(unmeasured)
    if failing:
        missing.append(
            f"{len(failing)} failing: " + ", ".join(sorted({label_of(t) for t in failing}))
        )
    if not_run:
        missing.append(f"{plural(not_run, 'test')} not run")
    if needs_cuda:
        missing.append(f"{plural(needs_cuda, 'test')} need{'s' if needs_cuda == 1 else ''} CUDA")
    verified = False
    declared = len(risk.mutants) + len(getattr(risk, "auto_mutants", []))
    if mutants is None:
        if declared:
            missing.append(
                f"{plural(declared, 'mutant')} declared, not yet run against the "
                "tests (run `gdn-review mutate`)"
            )
        else:
            missing.append("no mutant embodies it: coverage cannot be mutation-verified")
    else:
        applicable = [m for m in mutants if m["status"] not in NOT_SCORED]
        unkilled = [m for m in applicable if m["status"] != M.KILLED]
        for m in unkilled + [m for m in mutants if m["status"] == M.UNREACHABLE]:
            said = m["status"] in (M.NOT_REACHED, M.UNREACHABLE) and m.get("reason")
            missing.append(f"mutant {m['id']} {m['status']}" + (f": {m['reason']}" if said else ""))
        if not applicable:
            missing.append(
                "no mutant of it applies to this release: coverage cannot be mutation-verified here"
            )
        verified = bool(applicable) and not unkilled
    # Passing means every test of it that could run here ran, and none failed; and
    # no mutant of it survived them: tests that let its bug through do not protect it.
    level = "passing" if passing and not failing and not not_run and not unmeasured else "targeted"
    if level == "passing" and verified:
        level = "mutation-verified"
    if level == "passing" and protection(mutants):
        level = "not protected"  # the report gives the count beside it (protection)
    if level == "targeted" and ran and not failing and not passing and not unmeasured:
        missing.insert(0, "only known deviations ran")
    return level, missing


def _unmeasured_lines(unmeasured: list[dict]) -> list[str]:
    """``2 tests could not run: case_a, case_b``, an error in the check first."""
    lines = []
    for outcome in (Outcome.CHECK_ERROR, Outcome.COULD_NOT_RUN):
        these = sorted({label_of(t) for t in unmeasured if t["outcome"] == outcome})
        if these:
            count = sum(t["outcome"] == outcome for t in unmeasured)
            lines.append(f"{plural(count, 'test')} {outcome_words(outcome)}: {', '.join(these)}")
    return lines


def protection(mutants: list[dict] | None) -> str | None:
    """``3 of 4 mutants survived (1 not reached)``: a risk's survivors among its applicable mutants;
    None if none survived."""
    applicable = [m for m in mutants or [] if m["status"] not in NOT_SCORED]
    survived = [m for m in applicable if m["status"] in SURVIVORS]
    if not survived:
        return None
    unreached = sum(m["status"] == M.NOT_REACHED for m in survived)
    word = "mutant" if len(applicable) == 1 else "mutants"
    if unreached == len(survived):
        how = " (not reached)" if unreached == 1 else " (none of them reached)"
    else:
        how = f" ({unreached} not reached)" if unreached else ""
    return f"{len(survived)} of {len(applicable)} {word} survived{how}"


def missing_tests(
    key: int | str, expected: dict[str, list[dict]], present: list[dict]
) -> list[dict]:
    """Entries for the tests the record's module holds that the evidence never saw."""
    seen = {(t["claim"], label_of(t), t.get("device")) for t in present}
    missing = []
    for claim_id, tests in expected.items():
        for test in tests:
            if (claim_id, test["label"], test["device"]) not in seen:
                missing.append(
                    {
                        "nodeid": f"(not collected) {claim_id}[{test['device']}-{test['label']}]",
                        "record": key,
                        "claim": claim_id,
                        "risks": test["risks"],
                        "case": test["label"],
                        "device": test["device"],
                        "outcome": Outcome.NOT_RUN,
                        "reason": "not run: not collected",
                        "environment": None,
                    }
                )
    return missing


def tie_to_change(claims: list[dict], reach: dict | None) -> list[dict]:
    """The claim rows, each that holds read **not tied to the change** where the record's cases
    execute none of its PR's own lines (the evidence's ``reach`` part, state ``not tied``).

    Such a claim passed its tests, but nothing says the tests ran the change: a case
    that missed the PR's line holds on the release before it too.
    """
    if not reach or reach.get("state") != "not tied":
        return claims
    missed = reach.get("unreached") or []
    first = missed[0] if missed else {}
    closest = f"; closest: {first['closest']} ({first['why']})" if first.get("closest") else ""
    why = (
        f"no case executes any of the PR's {plural(len(missed), 'own line')} in "
        f"{reach.get('target', 'the target file')} (first: line {first.get('line')} of "
        f"{first.get('function')}{closest})"
    )
    tied = []
    for row in claims:
        if row["verdict"] == Verdict.HOLDS:
            row = {**row, "verdict": Verdict.NOT_TIED, "reason": f"{row['reason']}, but {why}"}
        tied.append(row)
    return tied


def reach_steps(reach: dict | None) -> list[str]:
    """A next step per own line of the PR that no case executes (with the case that came
    closest)."""
    from gdn_review.report.markdown import code, text

    steps = []
    for row in (reach or {}).get("unreached") or []:
        near = (
            f" (closest: {text(row['closest'])}, which {text(row['why'])})"
            if row.get("closest")
            else f" ({text(row['why'])})"
        )
        steps.append(
            f"Add a case that executes line {row['line']} of {text(row['function'])} "
            f"({code(row['code'])}), a line the PR added or changed: no case reaches it{near}."
        )
    return steps


def findings(reports: list[dict]) -> list[tuple[str, str]]:
    """What in the reports --fail-on can name, a ``(condition, what)`` pair each
    (``fail_conditions.tripped`` keeps the chosen ones)."""
    found = []
    for data in reports:
        who = key_label(data["key"])
        for claim in data["claims"]:
            verdict, claim_id = Verdict.of(claim["verdict"]), f"{who} claim {claim['id']}"
            if verdict is None or verdict.condition is None:
                continue
            what = f"{claim_id}: {claim['reason']}"
            if verdict in (Verdict.FAILS, Verdict.NOT_TIED):
                what = claim_id if verdict == Verdict.FAILS else f"{claim_id} {verdict}"
            elif verdict in NOT_MEASURED:
                what = f"{claim_id} {verdict}: {claim['reason']}"
            found.append((verdict.condition, what))
        found += [
            ("uncovered", f"{who} risk {r['id']}")
            for r in data["risks"]
            if r["coverage"] == "uncovered"
        ]
        for row in (data.get("mutation") or {}).get("errors", []):
            what = f"{Outcome.CHECK_ERROR}: {row.get('reason')}"
            found.append((ERROR, f"{who} mutant {row['id']} {what}"))
        for row in (data.get("mutation") or {}).get("survivors", []):
            if row["status"] in SURVIVORS:
                how = "" if row["status"] == M.SURVIVED else f" ({row['status']})"
                found.append((M.SURVIVED, f"{who} mutant {row['id']}{how}"))
    return found
