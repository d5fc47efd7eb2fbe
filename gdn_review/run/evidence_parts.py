"""Evidence accumulates: each kind of run keeps its latest result, keyed by kind and release.

The evidence file holds the tests of the latest ``run`` (or ``mutate``'s
baseline), plus parts that other commands add: ``mutation`` (``mutate``:
per record, the release it ran on) and ``diff`` (the open PR's diff side:
per record, the release the diff was applied onto). A command that rewrites
the file carries over the parts it did not produce, per record, where they
were measured on the same vLLM release as the new tests; a part of another
release is dropped and the command says so. ``bench`` keeps its own file.

Each part names the record it measured by the sha256 of the record's file
as it was when the part ran (``record_sha256``: the tests' per record at the
top, a mutation record's, a diff side's, a bench result's), so a report can
say which parts an edit of the record left stale. Evidence written before
these hashes has none: unknown, never stale.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gdn_review.common.files import atomic_write

EVIDENCE_FORMAT = "gdn-review-evidence/1"
PARTS = ("mutation", "diff")


def record_sha256(path: Path) -> str | None:
    """The sha256 (hex) of a record's file as it is now; None where it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def previous(path: Path) -> dict:
    """The parts of the evidence file at ``path`` before it is replaced ({} where there is none or it is not evidence)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != EVIDENCE_FORMAT:
        return {}
    return {kind: data[kind] for kind in PARTS if isinstance(data.get(kind), dict)}


def _release_of(data: dict) -> str | None:
    return (data.get("environment") or {}).get("vllm_version")


def carry_over(path: Path, parts: dict) -> list[str]:
    """Put ``parts`` (from ``previous``) back into the new evidence at ``path``; what was kept or dropped, as lines.

    Of a kind the new run produced itself, only the records it did not measure are carried over.
    """
    if not parts or not Path(path).exists():
        return []
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    release = _release_of(data)
    lines = []
    for kind, old in parts.items():
        records = old.get("records") if kind == "mutation" else old
        if not isinstance(records, dict):
            continue
        new = data.get(kind) if isinstance(data.get(kind), dict) else None
        have = set((new or {}).get("records", {}) if kind == "mutation" else (new or {}))
        kept, dropped = [], []
        for number, info in records.items():
            if number in have:
                continue
            same = isinstance(info, dict) and info.get("release") == release
            (kept if same else dropped).append((number, info))
        for number, info in dropped:
            lines.append(f"evidence: dropped the {kind} results of record {number} (vLLM {info.get('release') if isinstance(info, dict) else '?'}; this run is on {release})")
        if not kept:
            continue
        if kind == "mutation":
            section = new or {key: value for key, value in old.items() if key not in ("records", "mutants")}
            section.setdefault("records", {})
            section.setdefault("mutants", [])
            numbers = {number for number, _ in kept}
            for number, info in kept:
                section["records"][number] = {**info, "finished_at": info.get("finished_at") or old.get("finished_at")}
            section["mutants"] += [m for m in old.get("mutants", []) if isinstance(m, dict) and str(m.get("record")) in numbers]
            data["mutation"] = section
        else:
            data[kind] = {**(new or {}), **dict(kept)}
        lines.append(f"evidence: kept the {kind} results of {', '.join(n for n, _ in kept)} (vLLM {release}; "
                     f"from {min(str(i.get('finished_at', '?')) for _, i in kept)})")
    atomic_write(Path(path), json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    return lines
