"""Import a review report (markdown) into a draft record.

A review report looks like ``seeds/pr-52078-review-report.md``: a title line
``# PR #52078 完整报告``, metadata bullets (``- 仓库：``, ``- 标题：``,
``- 合并时间：``, ``- 原文链接：``, or Repository / Title / Merged / Link) and
sections (执行摘要, 功能与动机, 实现拆解, 关键源码片段, 评论区精华, 风险与影响,
关联脉络, or their English names) that may be missing, reordered, repeated or
unknown (unknown ones are ignored). Reading the markdown is report_sections.py's
job; this module builds the draft from what it read: the pr fields, one TODO
claim per checkable sentence (drafting.py drafts the claims and the YAML text,
as for gh's JSON), the report's prose under ``report:``. Reading the file and
writing the draft is dispatch.py's job.

The result is a *draft*: a record that loads, but whose claims have checks of
kind ``TODO`` and whose target names no releases yet; ``gdn-review validate``
lists those open items and ``gdn-review generate`` skips the draft. Nothing
from the report becomes code: code snippets stay plain strings.
"""

from __future__ import annotations

import datetime
import re

from gdn_review.common import record_format
from gdn_review.importers.drafting import ReportImportError, checked, draft_claims, draft_yaml
from gdn_review.importers.report_sections import (
    blocks_of,
    parse_markdown,
    read_metadata,
    read_sections,
    split_sections,
)

__all__ = ["ReportImportError", "import_report"]

# ------------------------------------------------------------- the pr fields

_URL = re.compile(r"https?://[^\s<>()\[\]`\"'，。]+")
_PULL = re.compile(r"/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/pulls?/(\d{1,12})(?!\d)")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_DATE = re.compile(
    r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})\s*日?(?:[ "
    r"\tT]*(\d{1,2})[:：](\d{2})(?:[:：](\d{2}))?)?"
)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == "`" and value.count("`") == 2:
        value = value[1:-1].strip()
    return value


def _merged_at(value: str, where: str) -> str:
    match = _DATE.search(value)
    if match:
        year, month, day, hour, minute, second = (int(g) if g else None for g in match.groups())
        try:
            datetime.datetime(year, month, day, hour or 0, minute or 0, second or 0)
        except ValueError:
            match = None
    if not match:
        raise ReportImportError(
            f"{where}: merge time {value[:80]!r} is not a date (expected for "
            "example '2026-08-20 11:52')"
        )
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if hour is not None:
        text += f" {hour:02d}:{minute:02d}" + (f":{second:02d}" if second is not None else "")
    return text


# ------------------------------------------------------------------------- API


def _pull_request(
    meta: dict[str, tuple[str, int]], heading_number: int | None, source: str
) -> dict:
    """The record's pr fields; without a merge time or link it leaves them out (unknown; the GitHub
    pull page)."""

    def where(key: str) -> str:
        return f"{source}:{meta[key][1]}"

    url = None
    if "url" in meta:
        match = _URL.search(meta["url"][0])
        if not match:
            raise ReportImportError(
                f"{where('url')}: link {meta['url'][0][:80]!r} is not an http(s) address"
            )
        url = match.group(0).rstrip(".,;:!?")
    pull = _PULL.search(url) if url else None
    if heading_number:
        number = heading_number
    elif pull and int(pull.group(3)) > 0:
        number = int(pull.group(3))
    else:
        raise ReportImportError(
            f"{source}: no PR number found: expected a title line like '# PR #52078 ...' "
            "or a link line ('- 原文链接：' / '- Link:') ending in /pull/<number>"
        )
    if "repo" in meta:
        repo = meta["repo"][0].replace("`", "").strip()
        if not _REPO.match(repo):
            raise ReportImportError(
                f"{where('repo')}: repository {repo[:80]!r} is not owner/name "
                "(for example vllm-project/vllm)"
            )
    elif pull:
        repo = f"{pull.group(1)}/{pull.group(2)}"
    else:
        raise ReportImportError(
            f"{source}: PR #{number}: no repository: expected a line like '- "
            "仓库：`vllm-project/vllm`' or '- Repository: vllm-project/vllm', "
            "or a link ('- 原文链接：' / '- Link:') to .../<owner>/<name>/pull/<number>"
        )
    title = _unquote(meta["title"][0]) if "title" in meta else ""
    if not title:
        raise ReportImportError(
            f"{source}: PR #{number}: no title: expected a line like '- 标题：...' "
            "or '- Title: ...'"
        )
    pr = {"number": number, "repo": repo, "title": title}
    if "merged_at" in meta:
        pr["merged_at"] = _merged_at(meta["merged_at"][0], where("merged_at"))
    if url:
        pr["url"] = url
    return {**pr, "source_report": source}


def import_report(text: str, source: str) -> str:
    """The YAML text of a draft record made from a review report's markdown ``text``.

    ``source`` names the report (it becomes ``pr.source_report`` and appears in
    messages). Raises ReportImportError when the report lacks what a record
    cannot do without: the PR number, its repository (a line or a pull link) and title.
    """
    outside, sections, heading_number = split_sections(parse_markdown(text))
    meta = read_metadata(outside)
    for key, value in read_metadata(
        [b for section in sections for b in blocks_of(section)]
    ).items():
        meta.setdefault(key, value)  # a metadata line that strayed into a section still counts
    pr = _pull_request(meta, heading_number, source)
    report = read_sections(sections)
    data: dict = {
        "schema_version": record_format.CURRENT,
        "pr": pr,
        "target": {
            "file": report.key_files[0]["path"] if report.key_files else "TODO",
            "symbol": report.key_symbols[0] if report.key_symbols else "TODO",
        },
        "claims": draft_claims(report.claim_sources, own=pr["number"]),
        "cases": [],
        "risks": [
            {"id": f"R{i}", "text": text, "cases": [], "claims": []}
            for i, text in enumerate(report.risks, 1)
        ],
        "related": report.related,
    }
    if report.notes():
        data["report"] = report.notes()
    return checked(draft_yaml(data, source), pr["number"], source)
