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

from gdn_review.common import fail_conditions
from gdn_review.kb import Record
from gdn_review.kb.builder_family import GDN_BUILDER
from gdn_review.matrix.drift import drift_data
from gdn_review.report import failing_batch, verdicts
from gdn_review.report.report_contents import report_data
from gdn_review.report.verdicts import discrimination, kept
from gdn_review.run import evidence_file
from gdn_review.run.evidence_file import RAN


def op_values(tests: list[dict], key: str) -> list[int]:
    return sorted(
        t["measured"][key]
        for t in tests
        if isinstance(t.get("measured"), dict) and isinstance(t["measured"].get(key), int)
    )


def cell_measure(claim, tests: list[dict]) -> str:
    """What a release measured for a claim, in a few words (op counts as a range over the cases)."""
    ran = [t for t in tests if t["outcome"] in RAN]
    if not ran:
        return ""
    if claim.check.kind == "op_budget":
        parts = []
        for key in claim.check.budget:
            values = op_values(ran, key)
            if values:
                shown = str(values[0]) if values[0] == values[-1] else f"{values[0]}–{values[-1]}"
                parts.append(f"{key.split('|')[0]} {shown}")
        return ", ".join(parts)
    passed = sum(t["outcome"] == "passed" for t in ran)
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
    if "failed" in outcomes or "xpassed" in outcomes:
        return "fails"
    if "passed" in outcomes:
        return "known deviation" if "xfailed" in outcomes else "holds"
    if "xfailed" in outcomes:
        return "known deviation"
    return "not applicable" if "skipped" in outcomes else "not run"


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


def matrix_data(record: Record, matrix: dict, known_records: set[int] | None = None) -> dict:
    """Release x claim table, before -> after per claim, op-count trajectories and drift of one
    record."""
    known_records = known_records or set()
    entries = matrix["releases"]
    columns, per_release = [], {}
    for entry in entries:
        version = entry["version"]
        columns.append(
            {
                "version": version,
                "role": entry["role"],
                "source": entry["source"],
                "claims_on_any_release": entry.get("claims_on_any_release", False),
                "summary": entry.get("summary", ""),
            }
        )
        if entry.get("evidence_path"):
            evidence = evidence_file.load([Path(entry["evidence_path"])])
            per_release[version] = (report_data(record, evidence), evidence)
    base = record.target.base_release
    head = record.target.head_release
    rows = []
    for claim in record.claims:
        cells = []
        for entry in entries:
            version = entry["version"]
            if version not in per_release:
                cells.append(
                    {
                        "version": version,
                        "verdict": "not run",
                        "reason": entry.get("summary", ""),
                        "measure": "",
                    }
                )
                continue
            data, evidence = per_release[version]
            row = next(c for c in data["claims"] if c["id"] == claim.id)
            tests = [
                t for t in evidence.tests if t["record"] == record.key and t["claim"] == claim.id
            ]
            found = failing_batch.of_tests(tests)
            cells.append(
                {
                    "version": version,
                    "verdict": row["verdict"],
                    "reason": row["reason"],
                    "measure": cell_measure(claim, tests),
                    "tests": tests,
                    # The batches its failed tests failed on: one line here, whole under the table.
                    "failing_batch": failing_batch.compact(found[0]) if found else "",
                    "failing_batches": found,
                }
            )
        by_version = {c["version"]: c for c in cells}
        # A head release that cannot run here (0.24 to 0.27 pick no CPU platform) is
        # stood in for by the first later release that ran; the reason says so.
        after = head
        if head and head not in per_release:
            later = sorted((v for v in per_release if Version(v) > Version(head)), key=Version)
            after = later[0] if later else head
        if record.contract is not None:
            verdict, why = kept(cells)
        elif record.is_open and by_version.get(base) is not None:
            # An open PR: the head side is its diff applied onto the base release, where stored.
            data, _ = per_release[base]
            with_diff = next(
                (
                    row
                    for row in (data.get("diff_side") or {}).get("claims", [])
                    if row["id"] == claim.id
                ),
                None,
            )
            if with_diff is not None:
                verdict, why = with_diff["discrimination"], with_diff["why"]
                cells.append(
                    {
                        "version": "base + the PR's diff",
                        "verdict": with_diff["with_diff"],
                        "reason": with_diff["reason"],
                        "measure": with_diff["measured"],
                    }
                )
            else:
                verdict, why = discrimination(
                    claim.before, {**by_version[base], "open": True}, None
                )
        else:
            verdict, why = discrimination(
                claim.before, by_version.get(base), by_version.get(after) if after else None
            )
        if after != head and record.contract is None and head:
            why += (
                f" (head release {head} not run: {after}, the first later release "
                "that ran, stands in)"
            )
        trajectories = []
        if claim.check.kind == "op_budget":
            for key in claim.check.budget:
                values = []
                for cell in cells:
                    ran = [t for t in cell.get("tests", []) if t["outcome"] in RAN]
                    found = op_values(ran, key)
                    values.append((cell["version"], found[-1] if found else None))
                if any(v is not None for _, v in values):
                    trajectories.append(f"{key}, most per build(): {_trajectory(values)}")
        rows.append(
            {
                "id": claim.id,
                "before": claim.before or "—",
                "cells": [
                    {k: v for k, v in c.items() if k not in ("tests", "failing_batches")}
                    for c in cells
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
        )
    if rows and all(
        len(row["cells"]) == len(columns) + 1 for row in rows
    ):  # the PR's diff ran: its column
        columns.append(
            {
                "version": "base + the PR's diff",
                "role": "head side",
                "source": "diff",
                "claims_on_any_release": False,
                "summary": "",
            }
        )
    drift = drift_data(
        record, [(e["version"], e.get("snapshot_data")) for e in entries], known_records
    )
    return {
        "columns": columns,
        # A column per builder class the record's cases build (shown where one is a subclass).
        "builders": record_builders(record),
        "releases_run": len(entries),
        "rows": rows,
        "drift": drift,
        "downloaded": matrix.get("downloaded", []),
        "duration_s": matrix.get("duration_s"),
        "run_id": matrix.get("run_id"),
        "jobs": matrix.get("jobs"),
        "target_diff": matrix.get("target_diff"),
        "base_release": base,
        "head_release": head,
    }


def matrix_report(record: Record, matrix: dict, known_records: set[int] | None = None) -> dict:
    """A record's report on its newest release's evidence, with the release matrix added."""
    entries = [e for e in matrix["releases"] if e.get("evidence_path")]
    if not entries:
        raise evidence_file.EvidenceError("no release of the matrix wrote evidence")
    data = report_data(record, evidence_file.load([Path(entries[-1]["evidence_path"])]))
    data["matrix"] = matrix_data(record, matrix, known_records)
    for related in data["related"]:
        related["has_record"] = related["number"] in (known_records or set())
    return data


def summary_lines(report_data: dict) -> list[str]:
    """The matrix in a few terminal lines: per claim its verdict per release, then the drift
    count."""
    lines = []
    for row in report_data["matrix"]["rows"]:
        cells = ", ".join(
            f"{c['version']} {c['verdict']}" + (f" ({c['measure']})" if c["measure"] else "")
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
    drift = report_data["matrix"]["drift"]
    lines.append(
        f"drift: {len(drift['rows'])} changed case(s) between releases, "
        f"{len(drift['unexplained'])} unexplained"
    )
    return lines


FAIL_ON = (
    fail_conditions.MATRIX
)  # what a matrix run (or the history page alone: fail_conditions.HISTORY) can trip


def tripped(chosen: set[str], reports: list[dict] = (), history: dict | None = None) -> list[str]:
    """What a matrix run (its records' ``reports``, and with ``--all`` the ``history`` page's data)
    or the history page alone trips among the chosen --fail-on conditions, a line each.

    drift: a case's field that moved between releases with no recorded change behind it
    (per record), and a metadata field that came or went with none (the history's own).
    """
    found = verdicts.tripped(list(reports), chosen - {"drift"})
    if "drift" not in chosen:
        return found
    for data in reports:
        for row in data["matrix"]["drift"]["unexplained"]:
            found.append(
                f"PR {data['number']} unexplained drift {row['from']} → "
                f"{row['to']}: {row['case']}: {', '.join(row['fields'])}"
            )
    said = {data["number"] for data in reports}
    for row in (history or {}).get("unexplained", []):
        if row["record"] is not None and row["record"] in said:
            continue  # already said as that record's drift
        whose = f"{row['record']} " if row["record"] is not None else ""
        found.append(
            f"history: {whose}{row['from']} → {row['to']}: field "
            f"{', '.join(row['fields'])} unattributed"
        )
    return found
