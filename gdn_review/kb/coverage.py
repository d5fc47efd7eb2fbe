"""Which vLLM releases the KB covers: every record that applies to a release has its stored
snapshot there (``kb/snapshots/<record>/<release>.json``, made by ``gdn-review snapshot``).

A record applies to a release when its matrix would run it: a PR's record from its base release
on (an open PR's too), a contract where ``contract.releases`` holds it (no range: every
release); a draft applies nowhere. A release no record applies to is not covered.
``against_kb`` sets the KB's releases beside those the package index serves
(``common.published``), so ``gdn-review releases`` can say that a release is new. No vLLM here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gdn_review.common import release_range, snapshots
from gdn_review.common.release import Release, ReleaseError
from gdn_review.kb.completeness import is_draft
from gdn_review.kb.load import load_kb
from gdn_review.kb.models import Record


@dataclasses.dataclass(frozen=True)
class Row:
    """One release: published (served by the package index, or offline at hand), covered, and
    the records that apply to it and lack its snapshot."""

    release: str
    published: bool
    applicable: tuple[str, ...]  # the records that apply to it (short names: #52078, a contract)
    missing: tuple[str, ...]  # of those, the ones without kb/snapshots/<record>/<release>.json

    @property
    def covered(self) -> bool:
        return bool(self.applicable) and not self.missing

    def as_dict(self) -> dict:
        return {
            "release": self.release,
            "published": self.published,
            "covered": self.covered,
            "records": len(self.applicable),
            "missing": list(self.missing),
        }


def applies(record: Record, release: str) -> bool:
    """Whether ``record``'s matrix runs ``release``: from a PR's base release on, within a
    contract's range; never for a draft."""
    if is_draft(record):
        return False
    if record.contract is not None:
        return release_range.contains(record.contract.releases, release)
    first = record.target.base_release or record.target.head_release
    return first is not None and Release(release) >= Release(first)


def _records(kb_dir: Path) -> list[Record]:
    return sorted(load_kb(kb_dir).values(), key=lambda record: record.sort_key)


def snapshot_releases(kb_dir: Path) -> set[Release]:
    """Every release that some record has a stored snapshot of (file names that are no release
    number are left out)."""
    found = set()
    for path in (Path(kb_dir) / snapshots.FOLDER).glob("*/*.json"):
        try:
            found.add(Release(path.stem))
        except ReleaseError:
            continue
    return found


def row(kb_dir: Path, records: list[Record], release: str, published: bool = False) -> Row:
    """``release``'s coverage by ``records``."""
    applicable = [r for r in records if applies(r, release)]
    missing = [
        r.short for r in applicable if not snapshots.snapshot_path(kb_dir, r.key, release).is_file()
    ]
    return Row(str(release), published, tuple(r.short for r in applicable), tuple(missing))


def covered(kb_dir: Path) -> list[Release]:
    """The releases the KB covers, oldest first."""
    records = _records(kb_dir)
    return [v for v in sorted(snapshot_releases(kb_dir)) if row(kb_dir, records, v).covered]


def newest_covered(kb_dir: Path) -> Release | None:
    """The newest release the KB covers (None: none)."""
    found = covered(kb_dir)
    return found[-1] if found else None


def against_kb(kb_dir: Path, published: list[str], since: str | None = None) -> list[Row]:
    """One row per release, oldest first: every release of ``published`` and every release the
    KB has a snapshot of, none older than ``since``."""
    records = _records(kb_dir)
    served = {Release(v) for v in published}
    releases = served | snapshot_releases(kb_dir)
    if since is not None:
        releases = {v for v in releases if v >= Release(since)}
    return [row(kb_dir, records, v, v in served) for v in sorted(releases)]


def uncovered_newer(rows: list[Row], newest: str | None) -> list[str]:
    """The published releases of ``rows`` newer than ``newest`` (the newest covered; None: the KB
    covers none), none of them covered, oldest first: what ``releases --check`` fails on."""
    floor = None if newest is None else Release(newest)
    return [
        r.release
        for r in rows
        if r.published and not r.covered and (floor is None or Release(r.release) > floor)
    ]


def next_step(release: str) -> str:
    """The command that brings the KB to ``release`` (``gdn-review release-step``)."""
    return f"gdn-review release-step --to {release}"


def releases_data(
    kb_dir: Path, published: list[str], since: str | None = None, source: str = "package index"
) -> dict:
    """What ``gdn-review releases`` shows, as plain data: the rows from ``since`` on, the newest
    published and covered releases, the published ones newer than the KB, and the next step.
    ``source``: where ``published`` came from ("package index", or offline "at hand")."""
    rows = against_kb(kb_dir, published, since)
    newest = newest_covered(kb_dir)
    newer = uncovered_newer(rows, newest)
    top = max(map(Release, published), default=None)
    return {
        "source": source,
        "since": since,
        "newest_published": top and str(top),
        "newest_covered": newest and str(newest),
        "uncovered_newer": newer,
        "next": next_step(newer[-1]) if newer else None,
        "rows": [r.as_dict() for r in rows],
    }


def _lacking(row_data: dict) -> str:
    missing, total = row_data["missing"], row_data["records"]
    if not total:
        return "no record applies to it"
    if not missing:
        return ""
    if len(missing) == total:
        return f"all {total} records"
    return f"{', '.join(missing)} ({len(missing)} of {total})"


def releases_lines(data: dict) -> list[str]:
    """``releases_data`` as markdown: the table, then what is newest and what to run."""
    at_hand = data["source"] != "package index"
    head = "at hand" if at_hand else "published"
    out = [
        f"| release | {head} | covered | records without its snapshot |",
        "|---|---|---|---|",
    ]
    for item in data["rows"]:
        shown = "yes" if item["covered"] else ("**no**" if item["published"] else "no")
        out.append(
            f"| {item['release']} | {'yes' if item['published'] else 'no'} | {shown} "
            f"| {_lacking(item)} |"
        )
    out.append("")
    if at_hand:
        out.append(
            "offline: the releases at hand (installed, release cache) stand in for those the "
            "package index serves"
        )
    covered_text = data["newest_covered"] or "no release"
    out.append(
        f"the KB covers {covered_text} (newest covered); the newest {head} is "
        f"{data['newest_published'] or 'none'}"
    )
    newer = data["uncovered_newer"]
    if newer:
        word = "at hand" if at_hand else "published"
        out.append(f"vLLM {newer[-1]} is {word} and the KB does not cover it: run {data['next']}")
        if len(newer) > 1:
            out.append(f"also newer than the KB and not covered: {', '.join(newer[:-1])}")
    return out
