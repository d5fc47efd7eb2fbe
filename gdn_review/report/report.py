"""Evidence JSON + records -> one report per record (markdown or JSON) and an index.

Rendering and writing only: verdicts.py says what the evidence means,
report_contents.py gathers it per record (the matrix stage adds the release
matrix, matrix/matrix_report.py); the markdown comes from templates/report.md.j2 and index.md.j2.
"""

from __future__ import annotations

import json
from pathlib import Path

from gdn_review.common.files import atomic_write
from gdn_review.generate import environment
from gdn_review.kb import Record
from gdn_review.kb.subjects import key_label
from gdn_review.report import failing_batch, markdown
from gdn_review.report.report_contents import report_data
from gdn_review.run.evidence_file import Evidence


def _template(name: str):
    """A report template, with the report's own filters: untrusted text shown as text, failing
    batches."""
    env = environment()
    env.filters.update(
        cell=markdown.cell, text=markdown.text, failing_batch=failing_batch.markdown_text
    )
    return env.get_template(name)


def render_markdown(data: dict) -> str:
    return _template("report.md.j2").render(**data)


def render_index(reports: list[dict]) -> str:
    finished_at = max((r["finished_at"] for r in reports), default="")
    return _template("index.md.j2").render(reports=reports, finished_at=finished_at)


def write_reports(
    records: dict[Path, Record],
    evidence: Evidence,
    out_dir: Path,
    fmt: str = "markdown",
    reports: list[dict] | None = None,
) -> tuple[list[Path], list[dict]]:
    """One report per record plus an index; returns the paths written and the report data.

    ``reports``: report data made already (the release matrix's), written as they are.
    """
    if reports is None:
        reports = [
            report_data(record, evidence, path=path)
            for path, record in sorted(records.items(), key=lambda item: item[1].sort_key)
        ]
        # A related PR with a record of its own links to that record's report.
        keys = {record.key for record in records.values()}
        for data in reports:
            for related in data["related"]:
                related["has_record"] = related["number"] in keys
    written = []
    for data in reports:
        if fmt == "json":
            path = out_dir / f"{data['key']}.json"
            atomic_write(
                path, json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
            )
        else:
            path = out_dir / f"{data['key']}.md"
            atomic_write(path, render_markdown(data))
        written.append(path)
    if fmt == "markdown":
        index = out_dir / "index.md"
        atomic_write(index, render_index(reports))
        written.append(index)
    return written, reports


def summary_lines(reports: list[dict]) -> list[str]:
    """A line per record: its claims by verdict and its risks by coverage; under it, the batches
    its failed invariants failed on, and each part of its evidence measured on an earlier version
    of the record."""
    lines = []
    for data in reports:
        claims = ", ".join(f"{n} {v}" for v, n in data["verdict_counts"].items() if n)
        coverage = (
            ", ".join(f"{n} {c}" for c, n in data["coverage_counts"].items() if n) or "no risks"
        )
        lines.append(f"{key_label(data['key'])}: claims {claims}; risks {coverage}")
        for claim in data.get("claims", []):
            lines += failing_batch.terminal_section(claim.get("failing_batches"))
        lines += [f"  {line}" for line in data.get("stale", [])]
    return lines


def render_history(data: dict) -> str:
    return _template("history.md.j2").render(**data)


def write_history(data: dict, path: Path) -> Path:
    """reports/history.md from ``history.history_data``; its path."""
    atomic_write(Path(path), render_history(data))
    return Path(path)
