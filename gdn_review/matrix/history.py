"""The builder's history: per release, the PRs that changed it, what moved, and each claim's verdict
since.

Reads what `gdn-review matrix` left for every record (``matrix.json`` and each
release's evidence and snapshot under ``.gdn-review/matrix-N/``) and, where
`gdn-review bench` ran, its latency ratios (history_sources.py reads them); writes
nothing itself but the data that ``report.write_history`` renders into
``reports/history.md``. No vLLM is imported: the history is a reading of runs already made.
"""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from gdn_review.common.vocabulary import Verdict
from gdn_review.kb import Record
from gdn_review.kb.subjects import key_order, key_short
from gdn_review.matrix.history_sources import HistoryError, Matrices, load_bench, load_matrices
from gdn_review.matrix.matrix_report import most_ops, not_measured


def _in(version: str, since: str | None) -> bool:
    return since is None or Version(version) >= Version(since)


def _releases(reports: dict[int, dict], since: str | None) -> list[str]:
    seen = {c["version"] for data in reports.values() for c in data["matrix"]["columns"]}
    return sorted((v for v in seen if _in(v, since)), key=Version)


def _window(
    reports: dict[int, dict], since: str | None, newest: str | None
) -> tuple[list[str], str | None]:
    """The page's releases, from ``since`` to ``newest`` (the newest published release), and
    ``newest`` where the runs stop short of it (None: they reach it)."""
    releases = [v for v in _releases(reports, since) if newest is None or _in(newest, v)]
    if not releases:
        raise HistoryError(f"no release at or after {since} in any matrix run")
    return releases, newest if newest is not None and not _in(releases[-1], newest) else None


def _shipped(
    records: list[Record], reports: dict[int, dict], releases: list[str]
) -> dict[str, list[dict]]:
    """Per release, the PRs that first shipped in it: records by their head release, relations by
    from_release."""
    numbers = {r.key for r in records}
    per: dict[str, dict[int, dict]] = {v: {} for v in releases}
    for record in records:
        head = record.target.head_release
        if record.contract is not None:  # under the first release its range names
            head = record.contract.first_release
        if head in per:
            per[head][record.key] = {
                "number": record.key,
                "title": record.title,
                "record": True,
                "merged_at": record.pr.merged_at if record.pr else None,
                "contract": record.contract is not None,
                "named_by": [],
                "summary": record.summary,
            }
    for record in records:
        for relation in record.related:
            release = relation.from_release
            if release not in per:
                continue
            entry = per[release].setdefault(
                relation.number,
                {
                    "number": relation.number,
                    "title": relation.title,
                    "record": relation.number in numbers,
                    "merged_at": None,
                    "named_by": [],
                    "summary": None,
                },
            )
            entry["named_by"].append(_relation_check(record, relation, reports.get(record.key)))
    return {v: sorted(per[v].values(), key=lambda e: key_order(e["number"])) for v in releases}


def _relation_check(record: Record, relation, report: dict | None) -> dict:
    """What a record says a related PR changed in its cases, and whether the matrix shows that."""
    said = [
        f"{', '.join(c.cases)}" + (f" ({', '.join(c.fields)})" if c.fields else "")
        for c in relation.changes
    ]
    entry = {
        "record": record.key,
        "relation": relation.relation,
        "says": said,
        "note": relation.note,
    }
    if report is None:
        entry["checked"] = "not checked: this record has no matrix run"
        return entry
    # Only releases with a snapshot: one that could not run compared nothing, confirmed nothing.
    missing = set(report["matrix"]["drift"].get("missing", []))
    versions = [c["version"] for c in report["matrix"]["columns"] if c["version"] not in missing]
    release = relation.from_release
    earlier = [v for v in versions if Version(v) < Version(release)]
    if release not in versions or not earlier:
        entry["checked"] = (
            f"not checked: the matrix of {record.short} does not run both sides of {release}"
        )
        return entry
    previous = earlier[-1]
    moved = [
        r for r in report["matrix"]["drift"]["rows"] if r["from"] == previous and r["to"] == release
    ]
    mine = [r for r in moved if any(e["number"] == relation.number for e in r["explained_by"])]
    if relation.changes:
        entry["checked"] = (
            f"confirmed: {len(mine)} case(s) of {record.short} moved "
            f"{previous} → {release} as stated"
            if mine
            else f"not seen: no case of {record.short} it names moved {previous} → {release}"
        )
    else:
        entry["checked"] = (
            f"confirmed: changes none of {record.short}'s cases (no field "
            f"moved {previous} → {release})"
            if not moved
            else f"contradicted: {len(moved)} case(s) of {record.short} moved "
            f"{previous} → {release}"
        )
    return entry


def _moved(reports: dict[int, dict], releases: list[str]) -> dict[str, list[dict]]:
    """Per release, the drift rows of every record that end in it (what moved since the release
    before)."""
    per: dict[str, list[dict]] = {v: [] for v in releases}
    for number, data in sorted(reports.items(), key=lambda item: key_order(item[0])):
        for row in data["matrix"]["drift"]["rows"]:
            if row["to"] in per and row["from"] in per:
                per[row["to"]].append({"record": number, **row})
    return per


def _merged(changes: list[dict], by: str, keep: tuple[str, ...] = ()) -> dict[str, dict]:
    """The fields ``added`` and ``removed`` of ``changes`` (drift's, any record's) merged per
    ``change[by]``, with the first change's ``keep`` keys."""
    per: dict[str, dict] = {}
    for change in changes:
        entry = per.setdefault(change[by], {key: change[key] for key in keep})
        for side in ("added", "removed"):
            entry[side] = sorted({*entry.get(side, ()), *change[side]})
    return per


def _schema(reports: dict[int, dict], releases: list[str]) -> dict[str, dict]:
    """Per release, the metadata fields that appeared or went away (any record's snapshots)."""
    changes = [c for data in reports.values() for c in data["matrix"]["drift"]["schema"]]
    inside = [c for c in changes if c["to"] in releases and c["from"] in releases]
    return _merged(inside, "to", keep=("from",))


def _family_schema(reports: dict[int, dict], release: str) -> list[dict]:
    """The subclass builders' own metadata fields that came or went in ``release`` (any
    record's drift), one entry per builder."""
    changes = [c for d in reports.values() for c in d["matrix"]["drift"].get("family_schema", [])]
    merged = _merged([c for c in changes if c["to"] == release], "builder")
    return [{"builder": builder, **entry} for builder, entry in sorted(merged.items())]


def _ops(records: dict[int, Record], matrices: Matrices, releases: list[str]) -> list[dict]:
    """Op counts per release of every op_budget claim: the most per build() over its cases."""
    series = []
    for number in sorted(matrices.reports, key=key_order):
        for claim in records[number].claims:
            if claim.check.kind != "op_budget":
                continue
            by_release = matrices.tests[number]
            tests = {
                v: [t for t in by_release.get(v, []) if t["claim"] == claim.id] for v in releases
            }
            for key in claim.check.budget:
                values = {version: most_ops(ran, key) for version, ran in tests.items()}
                if any(v is not None for v in values.values()):
                    series.append(
                        {
                            "record": number,
                            "claim": claim.id,
                            "op": key.split("|")[0],
                            "budget": claim.check.budget[key],
                            "values": values,
                            "complete": all(v is not None for v in values.values()),
                        }
                    )
    return series


def _verdicts(
    records: dict[int, Record], reports: dict[int, dict], releases: list[str]
) -> list[dict]:
    rows = []
    for number, data in sorted(reports.items(), key=lambda item: key_order(item[0])):
        record = records[number]
        for row in data["matrix"]["rows"]:
            by_version = {c["version"]: c for c in row["cells"]}
            claim = next(c for c in record.claims if c.id == row["id"])
            verdicts = [by_version[v]["verdict"] if v in by_version else "" for v in releases]
            # A verdict's short form (Verdict.short); anything else ("not run", "") as it is.
            cells = [getattr(Verdict.of(verdict), "short", verdict) for verdict in verdicts]
            verdict = row["discrimination"]
            base = record.target.base_release
            if base and base not in releases and claim.before:
                # The window starts after the base release: before -> after was judged by the
                # record's own matrix.
                verdict = f"base {base} not in this window (`gdn-review matrix --record {number}`)"
            rows.append(
                {
                    "record": number,
                    "claim": row["id"],
                    "text": claim.text,
                    "kind": claim.check.kind,
                    "cells": cells,
                    "discrimination": verdict,
                }
            )
    return rows


def _attributed_schema(schema: dict | None, notes: list) -> dict | None:
    """A release's added and removed fields, each with the noted change that adds it (None:
    unattributed)."""
    if not schema:
        return None
    owner = {name: note for note in notes for name in note.fields}

    def who(name):
        note = owner.get(name)
        if note is None:
            return None
        return f"#{note.pr.number}" if note.pr else "no PR found"

    return {
        "from": schema["from"],
        "added": [{"field": f, "by": who(f)} for f in schema["added"]],
        "removed": [{"field": f, "by": who(f)} for f in schema["removed"]],
    }


def _unattributed(fields: dict | None, version: str) -> list[dict]:
    """A release's metadata fields that came or went with no noted change behind them, each as
    an unexplained row of the metadata class."""
    return [
        {
            "record": None,
            "from": fields["from"],
            "to": version,
            "case": "(metadata class)",
            "fields": [f["field"]],
            "explained_by": [],
        }
        for f in (fields["added"] + fields["removed"] if fields else [])
        if f["by"] is None
    ]


def _note(change) -> dict:
    pr = change.pr
    return {
        "what": change.what,
        "fields": change.fields,
        "searched": change.searched,
        "pr": None
        if pr is None
        else {
            "number": pr.number,
            "title": pr.title,
            "url": pr.url or f"https://github.com/vllm-project/vllm/pull/{pr.number}",
            "evidence": pr.evidence,
            "why": pr.why,
        },
    }


def _durations(reports: dict[int, dict]) -> list[str]:
    """Wall time of the matrix runs read: one entry per run (``--all`` runs every record at
    once)."""
    runs: dict[tuple, list[int]] = {}
    for number, data in sorted(reports.items(), key=lambda item: key_order(item[0])):
        key = (
            data["matrix"].get("run_id") or key_short(number),
            data["matrix"].get("duration_s") or 0.0,
        )
        runs.setdefault(key, []).append(number)
    return [
        f"{seconds:.0f} s for {', '.join(key_short(n) for n in numbers)}"
        for (_, seconds), numbers in sorted(runs.items(), key=lambda item: item[1][0])
    ]


def _not_measured(reports: dict[int, dict]) -> list[dict]:
    """Each record's releases that could not run and claims whose tests could not run or raised
    in our own code, on any release: no verdict (``--fail-on error``)."""
    return [
        {"record": number, "what": what}
        for number, data in sorted(reports.items(), key=lambda item: key_order(item[0]))
        for _, what in not_measured(data, every_release=True)
    ]


def history_data(
    records: dict[Path, Record],
    matrices: Matrices,
    bench: dict[int, dict] | None = None,
    since: str | None = None,
    changes: list | None = None,
    newest: str | None = None,
) -> dict:
    """Everything reports/history.md shows, as plain data; ``changes``: kb/history/changes.yaml's
    notes; ``newest``: where the window ends (the newest published release; None: the runs')."""
    changes = changes or []
    by_number = {r.key: r for r in records.values()}
    reports = matrices.reports
    releases, not_run = _window(reports, since, newest)
    shipped = _shipped(list(by_number.values()), reports, releases)
    moved = _moved(reports, releases)
    schema = _schema(reports, releases)
    earlier = sorted(
        (
            {"number": r.key, "title": r.title, "head": r.target.head_release}
            for r in by_number.values()
            if r.target.head_release
            and not _in(r.target.head_release, releases[0])
            and r.key in reports
        ),
        key=lambda e: Version(e["head"]),
    )
    open_prs = [
        {"number": r.key, "title": r.title, "base": r.target.base_release}
        for r in by_number.values()
        if r.state == "open"
    ]
    latency = [
        {
            "record": number,
            **{key: result.get(key) for key in ("base", "head", "verdict")},
            "device": result.get("device", "cpu"),
            "ratio": result["pooled"].get("ratio"),
            "ci95": result["pooled"].get("ci95"),
        }
        for number, result in sorted((bench or {}).items(), key=lambda item: key_order(item[0]))
        if number in by_number
    ]
    per_release = []
    for index, version in enumerate(releases):
        notes = [c for c in changes if c.release == version]
        fields = _attributed_schema(schema.get(version), notes)
        per_release.append(
            {
                "version": version,
                "previous": releases[index - 1] if index else None,
                "prs": shipped[version],
                "moved": moved[version],
                "unexplained": [r for r in moved[version] if not r["explained_by"]]
                + _unattributed(fields, version),
                "schema": fields,
                "family_schema": _family_schema(reports, version),
                "changes": [_note(c) for c in notes],
                "latency": [entry for entry in latency if entry["head"] == version],
            }
        )
    unexplained = [r for entry in per_release for r in entry["unexplained"]]
    return {
        "since": since,
        "releases": releases,
        "newest": newest,
        "newest_not_run": not_run,
        "per_release": per_release,
        "verdicts": _verdicts(by_number, reports, releases),
        "ops": _ops(by_number, matrices, releases),
        "earlier": earlier,
        "open_prs": open_prs,
        "missing": matrices.missing,
        "unexplained": unexplained,
        "not_measured": _not_measured(reports),
        "latency": latency,
        "durations": _durations(reports),
        # the records' matrix reports, from the page's folder (write_page sets it)
        "matrix_link": "matrix/",
    }


def write_page(
    kb_dir: Path,
    work_root: Path,
    bench_path: Path,
    out_path: Path,
    since: str | None = None,
    matrix_reports: Path = Path("reports/matrix"),
    newest: str | None = None,
) -> tuple[dict, Path]:
    """``gdn-review history`` (and the end of ``matrix --all``): the page from the matrix runs; its
    data and path.

    ``matrix_reports``: the folder of the records' matrix reports, which the page
    links relative to its own folder; ``newest``: the newest published release, where the
    window ends.
    """
    import os

    from gdn_review.kb.changes import load_changes
    from gdn_review.report import report as reporting
    from gdn_review.run.selection import load_records

    records = load_records(kb_dir)
    data = history_data(
        records,
        load_matrices(records, work_root),
        load_bench(bench_path),
        since=since,
        changes=load_changes(kb_dir),
        newest=newest,
    )
    link = os.path.relpath(Path(matrix_reports).resolve(), Path(out_path).resolve().parent)
    data["matrix_link"] = Path(link).as_posix() + "/"
    return data, reporting.write_history(data, out_path)
