"""The release matrix in a report: one record's claims release by release, and drift.

Per claim, the verdict and what each release measured, whether the check tells
the base release from the head release, op-count trajectories; per pair of
consecutive releases, the snapshot fields that changed and which PR explains
them. `gdn-review matrix` (matrix.py) runs the releases; this module reads what
they wrote.
"""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from gdn_review.common.fail_conditions import ERROR
from gdn_review.common.release import Release
from gdn_review.common.vocabulary import NOT_MEASURED, RAN, Outcome, Verdict
from gdn_review.kb import Record
from gdn_review.kb.builder_family import GDN_BUILDER
from gdn_review.kb.subjects import key_label
from gdn_review.matrix.drift import drift_data
from gdn_review.matrix.release_plan import cannot_run_here, left_out
from gdn_review.report import failing_batch, verdicts
from gdn_review.report.claim_rows import op_values, span
from gdn_review.report.discrimination import discrimination, kept
from gdn_review.report.markdown import text
from gdn_review.report.report_contents import report_data
from gdn_review.run import evidence_file


def most_ops(tests: list[dict], key: str) -> int | None:
    """The most ``key`` ops per build() measured by the tests that ran (None: none measured it)."""
    found = op_values([t for t in tests if t["outcome"] in RAN], key)
    return found[-1] if found else None


def cell_measure(claim, tests: list[dict]) -> str:
    """What a release measured for a claim, in a few words (op counts as a range over the cases)."""
    ran = [t for t in tests if t["outcome"] in RAN]
    if not ran:
        return ""
    if claim.check.kind == "op_budget":
        parts = []
        for key in claim.check.budget:
            shown = span(op_values(ran, key))
            if shown:
                parts.append(f"{key.split('|')[0]} {shown}")
        return ", ".join(parts)
    passed = sum(t["outcome"] == Outcome.PASSED for t in ran)
    unit = "properties" if claim.check.kind == "invariant" else "cases"
    return f"{passed} of {len(ran)} {unit} match"


def case_builders(record: Record) -> dict[str, str]:
    """Case id -> the builder class it builds (``builder:``; GDN's own where it names none)."""
    return {case.id: getattr(case, "builder", None) or GDN_BUILDER for case in record.cases}


def record_builders(record: Record) -> list[str]:
    """The builder classes the record's cases build, GDN's first."""
    named = set(case_builders(record).values())
    return sorted(named, key=lambda name: (name != GDN_BUILDER, name))


def builder_verdict(tests: list[dict]) -> str | None:
    """One builder's tests of a claim on one release, in a word (None: it has none there)."""
    if not tests:
        return None
    outcomes = {t["outcome"] for t in tests}
    for unmeasured in (Outcome.CHECK_ERROR, Outcome.COULD_NOT_RUN):  # no verdict (ours first)
        if unmeasured in outcomes:
            return Verdict(unmeasured)
    if outcomes & {Outcome.FAILED, Outcome.XPASSED}:
        return Verdict.FAILS
    if Outcome.PASSED in outcomes:
        return Verdict.KNOWN_DEVIATION if Outcome.XFAILED in outcomes else Verdict.HOLDS
    if Outcome.XFAILED in outcomes:
        return Verdict.KNOWN_DEVIATION
    return Verdict.NOT_APPLICABLE if Outcome.SKIPPED in outcomes else Outcome.NOT_RUN


def by_builder(record: Record, cells: list[dict]) -> dict[str, str]:
    """Builder -> its verdict release by release (``fails (0.29.0) → holds (0.30.0–0.33.0)``), from
    the tests of one claim's cells. A test's builder is the one the evidence names, else the one
    its case names in the record."""
    builders = case_builders(record)
    found: dict[str, list[tuple[str, str | None]]] = {}
    for name in record_builders(record):
        values = []
        for cell in cells:
            tests = [
                t
                for t in cell.get("tests", [])
                if (t.get("builder") or builders.get(t.get("case") or "", GDN_BUILDER)) == name
            ]
            values.append((cell["version"], builder_verdict(tests)))
        if any(v is not None for _, v in values):
            found[name] = _trajectory(values)
    return found


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


DIFF_SIDE = "base + the PR's diff"  # an open PR's head side: its diff on the base release


def matrix_data(record: Record, matrix: dict, known_records: set[int] | None = None) -> dict:
    """Release x claim table, before -> after per claim, op-count trajectories and drift of one
    record."""
    entries = matrix["releases"]
    columns = [_column(entry) for entry in entries]
    per_release = {}
    for entry in entries:
        if entry.get("evidence_path"):
            evidence = evidence_file.load([Path(entry["evidence_path"])])
            per_release[entry["version"]] = (report_data(record, evidence), evidence)
    rows = [_claim_row(record, claim, entries, per_release) for claim in record.claims]
    if rows and all(len(row["cells"]) == len(columns) + 1 for row in rows):  # the diff ran
        columns.append(_column({"version": DIFF_SIDE, "role": "head side", "source": "diff"}))
    taken = [(e["version"], e.get("snapshot_data")) for e in entries]
    ran = sorted(Release(e["version"]) for e in entries)
    between = [v for v in ran[0].minors_until(ran[-1]) if v not in ran] if ran else []
    return {
        "columns": columns,
        # Releases inside the run's span that cannot run on this machine, each with why.
        "left_out": left_out(between),
        # Releases that ran and whose probe could not run (set-up raised): vLLM's message and
        # where it came from; none of their tests ran, no claim is judged there.
        "could_not_run": {
            e["version"]: e["could_not_run"] for e in entries if e.get("could_not_run")
        },
        # How the harness set up each release that needed it (harness/adaptations.py).
        "adapted": {
            version: evidence.environments[0].get("adaptations")
            for version, (_, evidence) in per_release.items()
            if evidence.environments and evidence.environments[0].get("adaptations")
        },
        # A column per builder class the record's cases build (shown where one is a subclass).
        "builders": record_builders(record),
        "releases_run": len(entries),
        "rows": rows,
        "drift": drift_data(record, taken, known_records or set()),
        **{key: matrix.get(key) for key in ("duration_s", "run_id", "jobs", "target_diff")},
        "downloaded": matrix.get("downloaded", []),
        "base_release": record.target.base_release,
        "head_release": record.target.head_release,
    }


def _column(entry: dict) -> dict:
    """A release's column of the table, from its matrix.json entry (or the diff side's)."""
    return {
        "version": entry["version"],
        "role": entry["role"],
        "source": entry["source"],
        "claims_on_any_release": entry.get("claims_on_any_release", False),
        "summary": entry.get("summary", ""),
    }


def _claim_row(record: Record, claim, entries: list[dict], per_release: dict) -> dict:
    """One claim's row: its cell per release, before -> after, op-count trajectories."""
    cells = [_cell(record, claim, entry, per_release.get(entry["version"])) for entry in entries]
    verdict, why = _before_after(record, claim, cells, per_release)
    trajectories = []
    for key in claim.check.budget if claim.check.kind == "op_budget" else ():
        values = [(cell["version"], most_ops(cell.get("tests", []), key)) for cell in cells]
        if any(v is not None for _, v in values):
            trajectories.append(f"{key}, most per build(): {_trajectory(values)}")
    return {
        "id": claim.id,
        "before": claim.before or "—",
        "cells": [
            {k: v for k, v in c.items() if k not in ("tests", "failing_batches")} for c in cells
        ],
        "failing_batches": [
            {"version": c["version"], "batches": c["failing_batches"]}
            for c in cells
            if c.get("failing_batches")
        ],
        "discrimination": verdict,
        "discrimination_reason": why,
        "trajectories": trajectories,
        "builders": by_builder(record, cells),
    }


def _cell(record: Record, claim, entry: dict, ran: tuple | None) -> dict:
    """A claim on one release: its verdict, why, what was measured (``ran``: that release's
    report data and evidence; None: it wrote none)."""
    if entry.get("could_not_run"):  # the release's probe: its set-up raised, no test ran
        return {
            "version": entry["version"],
            "verdict": Verdict.COULD_NOT_RUN,
            "reason": f"vLLM {entry['version']} could not run: {entry['could_not_run']}",
            "measure": entry["could_not_run"],
            "release_could_not_run": True,
        }
    if ran is None:
        return {
            "version": entry["version"],
            "verdict": Outcome.NOT_RUN,
            "reason": entry.get("summary", ""),
            "measure": "",
        }
    data, evidence = ran
    row = next(c for c in data["claims"] if c["id"] == claim.id)
    tests = [t for t in evidence.tests if t["record"] == record.key and t["claim"] == claim.id]
    found = failing_batch.of_tests(tests)
    measure = cell_measure(claim, tests)
    if row["verdict"] == Verdict.NOT_APPLICABLE and not measure:  # the skip's text says why
        measure = row["reason"].removeprefix("not applicable: ")
    return {
        "version": entry["version"],
        "verdict": row["verdict"],
        "reason": row["reason"],
        "measure": measure,
        "tests": tests,
        # The batches its failed tests failed on: one line here, whole under the table.
        "failing_batch": failing_batch.compact(found[0]) if found else "",
        "failing_batches": found,
    }


def _before_after(record: Record, claim, cells: list[dict], per_release: dict) -> tuple[str, str]:
    """A claim's before -> after verdict and why; an open PR's diff side, where it ran, is added
    to ``cells`` as a column of its own."""
    base, head = record.target.base_release, record.target.head_release
    by_version = {c["version"]: c for c in cells}
    if record.contract is not None:
        return kept(cells)
    if record.is_open and base in by_version and base in per_release:
        # An open PR: the head side is its diff applied onto the base release, where stored.
        sides = (per_release[base][0].get("diff_side") or {}).get("claims", [])
        with_diff = next((row for row in sides if row["id"] == claim.id), None)
        if with_diff is None:
            return discrimination(claim.before, {**by_version[base], "open": True}, None)
        cells.append(
            {
                "version": DIFF_SIDE,
                "verdict": with_diff["with_diff"],
                "reason": with_diff["reason"],
                "measure": with_diff["measured"],
            }
        )
        return with_diff["discrimination"], with_diff["why"]
    # A head release that did not run (left out: 0.24 to 0.27 pick no CPU platform here) is
    # stood in for by the first later release that ran; the reason says so.
    later = sorted((v for v in per_release if head and Version(v) > Version(head)), key=Version)
    after = head if not head or head in per_release or not later else later[0]
    verdict, why = discrimination(
        claim.before, by_version.get(base), by_version.get(after) if after else None
    )
    if after != head:  # the whole reason is said once, with the releases left out
        cause = Outcome.NOT_RUN
        if cannot_run_here(head):
            cause = "cannot run on this machine"
        elif (by_version.get(head) or {}).get("release_could_not_run"):
            cause = Outcome.COULD_NOT_RUN
        why += f" (head release {head} {cause}: {after}, the first later release that ran, "
        why += "stands in)"
    return verdict, why


class NothingRan(evidence_file.EvidenceError):
    """Every release of a record's matrix could not run: no report (``--fail-on error``)."""


def matrix_report(record: Record, matrix: dict, known_records: set[int] | None = None) -> dict:
    """A record's report on its newest release's evidence, with the release matrix added."""
    entries = [e for e in matrix["releases"] if e.get("evidence_path")]
    could_not = [
        f"vLLM {e['version']} {Outcome.COULD_NOT_RUN}: {e['could_not_run']}"
        for e in matrix["releases"]
        if e.get("could_not_run")
    ]
    if not entries and could_not:
        raise NothingRan(f"{record.label}: no release ran: {'; '.join(could_not)}")
    if not entries:
        raise evidence_file.EvidenceError("no release of the matrix wrote evidence")
    data = report_data(record, evidence_file.load([Path(entries[-1]["evidence_path"])]))
    data["matrix"] = matrix_data(record, matrix, known_records)
    # The release whose evidence the report's own claims read (verdicts.findings names them).
    data["matrix"]["claims_release"] = entries[-1]["version"]
    data["next_steps"] += [
        f"vLLM {version} could not run: {text(why)}. Fix the set-up or the release's platform "
        "(none of its tests ran: no claim is judged there), then run the matrix again."
        for version, why in data["matrix"]["could_not_run"].items()
    ]
    for related in data["related"]:
        related["has_record"] = related["number"] in (known_records or set())
    return data


def summary_lines(report_data: dict) -> list[str]:
    """The matrix in a few terminal lines: per claim its verdict per release, then the drift
    count."""
    lines = []
    for row in report_data["matrix"]["rows"]:
        cells = ", ".join(
            f"{c['version']} {c['verdict']}"
            + (f" ({c['measure']})" if c["measure"] and not c.get("release_could_not_run") else "")
            for c in row["cells"]
        )
        lines.append(f"{row['id']}: {row['discrimination']}: {cells}")
        if report_data["matrix"].get("builders", [GDN_BUILDER]) != [GDN_BUILDER]:
            lines += [
                f"    {name}: {trajectory}" for name, trajectory in row.get("builders", {}).items()
            ]
        for found in row.get("failing_batches", []):
            lines.append(f"    on {found['version']}:")
            lines += failing_batch.terminal_section(found["batches"], indent="    ")
        lines += [f"    {line}" for line in row["trajectories"]]
    left = report_data["matrix"].get("left_out") or {}
    for why in dict.fromkeys(left.values()):  # one line per reason, not per release
        lines.append(f"left out: vLLM {', '.join(v for v, w in left.items() if w == why)}: {why}")
    for version, why in (report_data["matrix"].get("could_not_run") or {}).items():
        lines.append(
            f"could not run: vLLM {version}: {why}; none of its tests ran (fix the set-up or "
            "the release's platform; no claim is judged there)"
        )
    drift = report_data["matrix"]["drift"]
    lines.append(
        f"drift: {len(drift['rows'])} changed case(s) between releases, "
        f"{len(drift['unexplained'])} unexplained"
    )
    if drift.get("missing"):
        lines.append(f"    no snapshot from vLLM {', '.join(drift['missing'])}: not compared")
    lines += [
        f"    {row['from']} → {row['to']}: case {row['case']} not compared ({row['reason']})"
        for row in drift.get("not_compared", [])
    ]
    lines += [
        f"    {row['from']} → {row['to']}: case {row['case']} became {row['became']} "
        f"(not applicable {'before' if row['became'] == 'applicable' else 'now'}: "
        f"{row['reason'].removeprefix('not applicable: ')})"
        for row in drift.get("applicability", [])
    ]
    return lines


def not_measured(data: dict, every_release: bool = False) -> list[tuple[str, str]]:
    """``("error", what)`` for each release of a record's matrix that could not run, and each
    claim whose tests could not run or raised in our own code on a release (but the one the
    report's own claims read, which ``verdicts.findings`` names, unless ``every_release``)."""
    who = key_label(data["key"])
    matrix = data["matrix"]
    found = [
        (ERROR, f"{who} vLLM {version} {Outcome.COULD_NOT_RUN}: {why}")
        for version, why in (matrix.get("could_not_run") or {}).items()
    ]
    for row in matrix["rows"]:
        found += [
            (
                ERROR,
                f"{who} claim {row['id']} {cell['verdict']} on vLLM {cell['version']}: "
                f"{cell['reason']}",
            )
            for cell in row["cells"]
            if cell["verdict"] in NOT_MEASURED
            and not cell.get("release_could_not_run")
            and (every_release or cell["version"] != matrix.get("claims_release"))
        ]
    return found


def findings(reports: list[dict] = (), history: dict | None = None) -> list[tuple[str, str]]:
    """What a matrix run (its records' ``reports``, and with ``--all`` the ``history`` page's data)
    or the history page alone holds that --fail-on can name, a ``(condition, what)`` pair each.

    drift: a case's field that moved between releases with no recorded change behind it
    (per record), and a metadata field that came or went with none (the history's own);
    error: a release that could not run, a claim's tests that could not run or raised in our
    own code (no verdict: exit code 3 where nothing else trips).
    """
    found = verdicts.findings(list(reports))
    for data in reports:
        found += not_measured(data)
        for row in data["matrix"]["drift"]["unexplained"]:
            found.append(
                (
                    "drift",
                    f"{key_label(data['key'])} {row['from']} → {row['to']}: "
                    f"{row['case']}: {', '.join(row['fields'])}",
                )
            )
    said = {data["key"] for data in reports}
    found += [
        (ERROR, f"history: {row['what']}")
        for row in (history or {}).get("not_measured", [])
        if row["record"] not in said  # already said as that record's
    ]
    for row in (history or {}).get("unexplained", []):
        if row["record"] is not None and row["record"] in said:
            continue  # already said as that record's drift
        whose = f"{key_label(row['record'])} " if row["record"] is not None else ""
        found.append(
            (
                "drift",
                f"history: {whose}{row['from']} → {row['to']}: field "
                f"{', '.join(row['fields'])} unattributed",
            )
        )
    return found
