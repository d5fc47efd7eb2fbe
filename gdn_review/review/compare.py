"""The change's effect on one record: claims, fields and known deviations, before and after.

Reads what the worker wrote (each side's evidence and snapshots) and says per
record which claims' verdicts or measurements changed, which snapshot fields
moved (attributed as the release matrix attributes drift between two
releases: to the record's own PR or a related PR that first shipped after the
release the change is applied onto, up to the release it would land in), and
which known deviations appeared or vanished. Plain data in, plain data out.
"""

from __future__ import annotations

from pathlib import Path

from gdn_review.common import forked, snapshots
from gdn_review.common.release import Release
from gdn_review.common.vocabulary import FAILING, HOLDING, NOT_MEASURED, Outcome, Verdict
from gdn_review.common.vocabulary import MutantStatus as M
from gdn_review.kb.subjects import key_order
from gdn_review.matrix.drift import drift_data
from gdn_review.matrix.matrix_report import cell_measure
from gdn_review.report import failing_batch
from gdn_review.report.report_contents import report_data
from gdn_review.report.verdicts import label_of
from gdn_review.run import evidence_file


def _side(
    side: dict | None, record, with_change: bool = False
) -> tuple[dict | None, list[dict], dict | None]:
    """(report data, the record's tests, snapshot document) of one side; Nones where it did not
    run."""
    if not side or side.get("status") != "ran" or not side.get("evidence"):
        return None, [], None
    folder = Path(side["folder"])
    evidence = evidence_file.load([folder / side["evidence"]])
    name = side.get("snapshots", {}).get(str(record.key))
    snapshot = snapshots.load(folder / name) if name else None
    return (
        report_data(record, evidence, with_change),
        [t for t in evidence.tests if t["record"] == record.key],
        snapshot,
    )


def failing_cases(tests: list[dict], claim_id: str) -> list[dict]:
    """The failing tests of a claim: its case (or property), device, and why; an invariant's
    smallest failing batch (Hypothesis's note, and the batch itself, described). A test that
    could not run, or whose check raised, is none of them (``unmeasured_cases``)."""
    return [
        {
            "case": label_of(test),
            "device": test.get("device") or "?",
            "reason": (test.get("reason") or test["outcome"])[:400],
            "smallest": test.get("smallest_batch"),
            # The batch it failed on: rows, configuration and a case to paste.
            "failing_batch": failing_batch.of_test(test),
        }
        for test in tests
        if test["claim"] == claim_id and test["outcome"] in FAILING
    ]


def unmeasured_cases(tests: list[dict], claim_id: str) -> list[dict]:
    """The tests of a claim that measured nothing: could not run (set-up raised before the builder
    under test was entered) or raised an error in the check (gdn-review's own code); each its
    case, device, outcome and message."""
    return [
        {
            "case": label_of(t),
            "device": t.get("device") or "?",
            "outcome": t["outcome"],
            "reason": (t.get("reason") or t["outcome"]).removeprefix(f"{t['outcome']}: ")[:400],
        }
        for t in tests
        if t["claim"] == claim_id and t["outcome"] in NOT_MEASURED
    ]


def _measure(claim, tests: list[dict]) -> str:
    return cell_measure(claim, [t for t in tests if t["claim"] == claim.id])


def side_failure(side: dict | None) -> str | None:
    """Why a side has no results (timeout, crash), or None."""
    if not side:
        return "did not run"
    if side.get("status") != "ran":
        return side.get("reason") or side.get("status")
    return None


def record_effect(
    record, sides: dict, onto: str, lands_in: str, known: set[int], own: bool = False
) -> dict:
    """Claims, fields and deviations of one record, unpatched against patched.

    ``own``: the change is the record's own PR (its diff): the patched side is
    read with the change in (no claim pending there), and what the record states
    it changes explains the fields that move.
    """
    from gdn_review.run.snapshot_take import core_expect  # it imports pytest: only when needed

    before = _side(sides.get("unpatched"), record)
    after = _side(sides.get("patched"), record, with_change=own)
    (_, before_tests, before_snapshot), (_, after_tests, after_snapshot) = before, after
    not_run = _not_run_verdict(sides.get("patched"))
    drift = drift_data(
        record, [(onto, before_snapshot), (lands_in, after_snapshot)], known, own_change=own
    )
    # The cases that could not be built on a side (set-up raised, or our own code): drift_data
    # compares no field of them; said apart, never as drift.
    not_built = {row["case"]: row["reason"] for row in drift.get("not_compared", [])}
    for row in drift["rows"]:
        row.pop("from"), row.pop("to")
    xfailed_before = {t["nodeid"] for t in before_tests if t["outcome"] == Outcome.XFAILED}
    xfailed_after = {t["nodeid"] for t in after_tests if t["outcome"] == Outcome.XFAILED}
    moved_cases = {row["case"] for row in drift["rows"]}
    after_cases = (after_snapshot or {}).get("cases", {})
    return {
        "key": record.key,
        "title": record.title,
        "claims": [_claim_effect(claim, before, after, not_run, own) for claim in record.claims],
        "moved": drift["rows"],
        # What each moved case measures with the change, in `expect` terms (for a draft record).
        "expect_after": {
            case: core_expect(after_cases[case])
            for case in sorted(moved_cases)
            if case in after_cases
        },
        "unexplained": [row for row in drift["rows"] if not row["explained_by"]],
        "fields_added_or_removed": drift["schema"],
        "applicability": drift["applicability"],
        "not_built": not_built,
        "deviations_appeared": sorted(xfailed_after - xfailed_before),
        "deviations_vanished": sorted(xfailed_before - xfailed_after),
        # The change is (or carries) this record's PR: it first shipped in the window.
        "carries_pr": _shipped_between(record.target.head_release, onto, lands_in),
        # The change is the record's own PR's diff (review --pr N, or run's diff side).
        "own": own,
        "sides": {
            name: side_failure(sides.get(name)) or "ran" for name in ("unpatched", "patched")
        },
    }


def _not_run_verdict(side: dict | None) -> tuple[str, str]:
    """(verdict, reason) of a claim after, where the patched side gave no results: its child
    timed out or crashed (the change's doing: ``not run``, a break of what held), or our own
    code raised in it (``error in the check``)."""
    why = side_failure(side)
    if side and side.get("status") == forked.ERROR:
        return Verdict.CHECK_ERROR, f"the review's own code raised in that side: {why}"
    return f"{Outcome.NOT_RUN}: {why}", ""


def _claim_effect(claim, before: tuple, after: tuple, not_run: tuple[str, str], own: bool) -> dict:
    """One claim's verdict and measurement on each side (``_side``'s), and whether it broke;
    ``not_run``: its verdict (and reason) after where the patched side has none.

    A claim that could not run, or whose check raised, on either side measured nothing: it
    never breaks (``unmeasured``: the review says so, ``render.findings`` as an error)."""
    old, new = _claim_row(before[0], claim.id), _claim_row(after[0], claim.id)
    old_verdict = old["verdict"] if old else Outcome.NOT_RUN
    new_verdict = new["verdict"] if new else not_run[0]
    unmeasured = old_verdict in NOT_MEASURED or new_verdict in NOT_MEASURED
    measures = (_measure(claim, before[1]), _measure(claim, after[1]))
    return {
        "id": claim.id,
        "text": claim.text,
        "check": claim.check.kind,
        # what the check expects (budget, cases)
        "expected": (new or old or {}).get("check", ""),
        "before": old_verdict,
        "after": new_verdict,
        "measured_before": measures[0],
        "measured_after": measures[1],
        "reason_before": old["reason"] if old else "",
        "reason_after": new["reason"] if new else not_run[1],
        "failing_after": failing_cases(after[1], claim.id),
        "unmeasured_after": unmeasured_cases(after[1], claim.id),
        "unmeasured": unmeasured,
        "changed": old_verdict != new_verdict or measures[0] != measures[1],
        # A claim that held (or deviated only as known) and no longer does
        # (one whose range ends before the release the change lands in has not broken).
        # The PR's own claim failing with its own diff is a break too.
        "broke": not unmeasured
        and (
            (
                old_verdict in HOLDING
                and new_verdict not in HOLDING
                and new_verdict != Verdict.NOT_APPLICABLE
            )
            or (own and new_verdict == Verdict.FAILS)
        ),
    }


def _claim_row(data: dict | None, claim_id: str) -> dict | None:
    """The claim's row in a side's report data (None: the side did not run)."""
    return next((c for c in data["claims"] if c["id"] == claim_id), None) if data else None


def carried(records, onto: str, lands_in: str) -> list[dict]:
    """The recorded PRs (records' own, and related PRs they name) that first shipped after ``onto``,
    by ``lands_in``.

    A change between those releases is explained by them; none means no record explains it.
    """
    found = {}
    for record in records:
        shipped = [(record.key, record.title, record.target.head_release, True)]
        shipped += [(r.number, r.title, r.from_release, False) for r in record.related]
        for key, title, release, own in shipped:
            # A record's own entry wins over a related PR's entry of the same PR.
            if _shipped_between(release, onto, lands_in) and (own or key not in found):
                found[key] = {"key": key, "title": title, "release": release, "record": own}
    return sorted(found.values(), key=lambda entry: key_order(entry["key"]))


def _shipped_between(release: str | None, onto: str, lands_in: str) -> bool:
    """Whether a PR that first shipped in ``release`` shipped after ``onto``, by ``lands_in``."""
    return release is not None and Release(onto) < release <= Release(lands_in)


def mutant_entries(catalogue: list[dict], results: list[dict]) -> list[dict]:
    """Each mutant of the new lines with its result against the tests that passed with the
    change."""
    by_id = {result["id"]: result for result in results}
    entries = []
    for mutant in catalogue:
        result = by_id.get(mutant["id"], {"status": Outcome.NOT_RUN})
        entries.append(
            {
                **{k: v for k, v in mutant.items() if k != "source_file"},
                "status": result["status"],
                "killed_by": result.get("killed_by", {}),
                "reason": result.get("reason", ""),
                "duration_s": result.get("duration_s"),
            }
        )
    return entries


# Merging shards: a mutant is killed when any shard's tests kill it (one run over
# every record's tests fails as soon as one test fails).
STATUS_ORDER = (M.KILLED, M.TIMEOUT, M.ERROR, M.SURVIVED, M.NOT_REACHED, Outcome.NOT_RUN)


def merged_status(statuses: list[str]) -> str:
    return min(
        statuses, key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else len(STATUS_ORDER)
    )
