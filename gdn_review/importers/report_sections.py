"""A review report's markdown -> its metadata lines and what each known section says.

Headings and labels are recognised in Chinese and English (``执行摘要`` /
``Summary``, ``- 仓库：`` / ``- Repository:``, ``关键文件：`` / ``Key files:``...);
sections may be missing, reordered, repeated or unknown (unknown ones are
ignored). The markdown is parsed by ``markdown-it-py`` (CommonMark, with
source line numbers). Nothing here builds or checks a record: review_report.py
turns the result into a draft.
"""

from __future__ import annotations

import dataclasses
import re

from markdown_it import MarkdownIt

# ---------------------------------------------------------------- markdown -> blocks

# Characters a YAML stream cannot carry (or reads as line breaks), removed up front
# so that every string of the draft reads back exactly as it was written.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufeff\ufffe\uffff]")
_BREAKS = re.compile("\r\n|[\r\x85\u2028\u2029]")
# Block structure only: the text of headings and paragraphs is read raw (labels, `code`, **marks**).
_MARKDOWN = MarkdownIt("commonmark").disable(["inline", "text_join"])


@dataclasses.dataclass
class _Heading:
    level: int
    text: str


@dataclasses.dataclass
class _Fence:
    code: str


@dataclasses.dataclass
class _Block:
    """A paragraph, or the first paragraph of a list item (``item``), and its first line."""

    text: str
    line: int
    item: bool = False
    ordered: bool = False


def parse_markdown(text: str) -> list[_Heading | _Fence | _Block]:
    text = _UNSAFE.sub("", _BREAKS.sub("\n", text))
    tokens = _MARKDOWN.parse("\n".join(line.rstrip() for line in text.split("\n")))
    events: list[_Heading | _Fence | _Block] = []
    lists: list[bool] = []  # open lists, innermost last: ordered?
    for index, token in enumerate(tokens):
        if token.type.endswith("list_open"):
            lists.append(token.type == "ordered_list_open")
        elif token.type.endswith("list_close"):
            lists.pop()
        elif token.type == "heading_open":
            events.append(_Heading(int(token.tag[1]), tokens[index + 1].content.strip()))
        elif token.type == "fence":
            events.append(_Fence(token.content))
        elif token.type == "paragraph_open":
            content = " ".join(
                part.strip() for part in tokens[index + 1].content.split("\n")
            ).strip()
            item = tokens[index - 1].type == "list_item_open"
            if content:
                events.append(_Block(content, token.map[0] + 1, item, item and lists[-1]))
    return events


def _unmark(text: str) -> str:
    """Heading or label text without markdown emphasis and code marks."""
    return text.strip().strip("*_`").strip()


def _looks_like_path(text: str) -> bool:
    return bool(text) and not any(ch.isspace() for ch in text) and ("/" in text or "." in text)


_SECTION_NAMES = {
    "summary": ["执行摘要", "摘要", "summary", "executive summary", "tl;dr", "tldr"],
    "motivation": [
        "功能与动机",
        "动机",
        "motivation",
        "feature and motivation",
        "features and motivation",
        "what and why",
    ],
    "implementation": ["实现拆解", "实现", "implementation", "implementation breakdown"],
    "key_files": ["关键文件", "key files"],
    "key_symbols": ["关键符号", "key symbols"],
    "code": [
        "关键源码片段",
        "源码片段",
        "code",
        "key code",
        "code snippets",
        "key code snippets",
        "key source snippets",
    ],
    "discussion": ["评论区精华", "评论", "discussion", "review discussion", "comments"],
    "risks": [
        "风险与影响",
        "风险",
        "risks and impact",
        "risk and impact",
        "risks & impact",
        "risks",
        "risk",
    ],
    "related": ["关联脉络", "相关 pr", "related", "related prs", "related pull requests"],
}
_SECTIONS = {name: kind for kind, names in _SECTION_NAMES.items() for name in names}
_NUMBERING = re.compile(r"^(?:\d{1,3}[.)、]|[一二三四五六七八九十]{1,3}[、.])\s*")
_PR_IN_HEADING = re.compile(r"\bPR\s*#\s*(\d{1,12})(?!\d)", re.IGNORECASE)


def _section_kind(heading: str) -> str | None:
    text = _NUMBERING.sub("", _unmark(heading).rstrip(":：").strip().lower())
    # Whole heading, or one part of "Summary / 执行摘要", "执行摘要（Summary）".
    for part in [text, *re.split(r"\s*[/|（(]\s*", text)]:
        kind = _SECTIONS.get(_unmark(part.rstrip(")）")))
        if kind:
            return kind
    return None


@dataclasses.dataclass
class _Section:
    kind: str
    title: str
    level: int
    events: list = dataclasses.field(default_factory=list)


def split_sections(events) -> tuple[list[_Block], list[_Section], int | None]:
    """(blocks outside any known section, known sections, the PR number of a title heading)."""
    outside: list[_Block] = []
    sections: list[_Section] = []
    current: _Section | None = None
    number = None
    for event in events:
        if isinstance(event, _Heading):
            kind = _section_kind(event.text)
            if kind:
                current = _Section(kind, _unmark(event.text), event.level)
                sections.append(current)
                continue
            # A deeper heading stays in its section; so does a file name in the code section.
            if current and (
                event.level > current.level
                or (current.kind == "code" and _looks_like_path(_unmark(event.text)))
            ):
                current.events.append(event)
                continue
            current = None
            match = _PR_IN_HEADING.search(event.text)
            if number is None and match and int(match.group(1)) > 0:
                number = int(match.group(1))
        elif current:
            current.events.append(event)
        elif isinstance(event, _Block):
            outside.append(event)
    return outside, sections, number


def blocks_of(section: _Section) -> list[_Block]:
    return [e for e in section.events if isinstance(e, _Block)]


def _render(blocks: list[_Block]) -> str | None:
    return "\n".join(f"- {b.text}" if b.item else b.text for b in blocks).strip() or None


def _label(text: str) -> tuple[str | None, str]:
    """'一句话：x' -> ('一句话', 'x'); no short label before a colon -> (None, text)."""
    positions = [p for p in (text.find("："), text.find(":")) if 0 < p <= 40]
    if not positions:
        return None, text
    cut = min(positions)
    return _unmark(text[:cut]).lower(), text[cut + 1 :].strip().lstrip("*").strip()


def _split_list(text: str, separators: str = r"\s*[,，、;；]\s*") -> list[str]:
    return [p for p in (_unmark(x) for x in re.split(separators, text)) if p]


# --------------------------------------------------------------------- metadata

_META_LABELS = {
    "仓库": "repo",
    "repository": "repo",
    "repo": "repo",
    "标题": "title",
    "title": "title",
    "合并时间": "merged_at",
    "merged": "merged_at",
    "merged at": "merged_at",
    "merged_at": "merged_at",
    "merge time": "merged_at",
    "原文链接": "url",
    "链接": "url",
    "link": "url",
    "url": "url",
}


def read_metadata(blocks: list[_Block]) -> dict[str, tuple[str, int]]:
    """Labelled lines (``- 仓库：``, ``- Repository:``...): field -> (value, line);
    the first of each counts."""
    found: dict[str, tuple[str, int]] = {}
    for block in blocks:
        label, value = _label(block.text)
        key = _META_LABELS.get(label or "")
        if key and key not in found and value:
            found[key] = (value, block.line)
    return found


# ---------------------------------------------------------------- the sections

_SUMMARY_LABELS = {
    "一句话",
    "一句话总结",
    "摘要",
    "summary",
    "one-line",
    "one line",
    "one-liner",
    "in one sentence",
    "tl;dr",
    "tldr",
}
_RECOMMEND_LABELS = {
    "推荐动作",
    "推荐",
    "建议",
    "recommendation",
    "recommended action",
    "recommend",
}
_FILES_LABELS = {"关键文件", "key files", "files"}
_SYMBOLS_LABELS = {"关键符号", "key symbols", "symbols"}
_RISK_LABELS = {"风险", "risk", "risks"}
_IMPACT_LABELS = {"影响", "impact"}
_FLAG_LABELS = {"风险标记", "标记", "risk flags", "flags", "risk tags", "tags"}
_LINK = re.compile(r"\[([^\[\]\n]{0,300})\]\(([^()\s]{0,2000})\)")
_RELATED = re.compile(r"^(?:PR\s*)?#\s*(\d{1,12})(?!\d)\s*(.*)$", re.IGNORECASE | re.DOTALL)
_SYMBOL_SEPARATORS = r"[\s,，、;；]+"


def _key_file(text: str) -> list[dict]:
    """`path` (or the first word) and what follows it as a note: [] when there is no path."""
    match = re.search(r"`([^`]+)`", text)
    if match:
        path, rest = match.group(1).strip(), text[match.end() :]
    else:
        head = re.split(r"[\s（(:：]", text.strip(), maxsplit=1)[0]
        path, rest = _unmark(head), text.strip()[len(head) :]
    paren = None
    inner = re.match(r"\s*[（(]([^（()）]*)[）)]", rest)
    if inner:
        paren, rest = inner.group(1).strip() or None, rest[inner.end() :]
    after = rest.strip().lstrip(":：").strip() or None
    note = f"{after} ({paren})" if after and paren else (after or paren)
    return [{"path": path, "note": note} if note else {"path": path}] if path else []


@dataclasses.dataclass
class ReportContents:
    """What the sections say; every field but the last three becomes report notes."""

    summary: str | None = None
    recommendation: str | None = None
    motivation: str | None = None
    implementation: list[str] = dataclasses.field(default_factory=list)
    key_files: list[dict] = dataclasses.field(default_factory=list)
    key_symbols: list[str] = dataclasses.field(default_factory=list)
    code_snippets: list[dict] = dataclasses.field(default_factory=list)
    discussion: str | None = None
    impact: str | None = None
    risk_flags: list[str] = dataclasses.field(default_factory=list)
    risks: list[str] = dataclasses.field(default_factory=list)
    related: list[dict] = dataclasses.field(default_factory=list)
    claim_sources: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def notes(self) -> dict:
        fields = [f.name for f in dataclasses.fields(self)][:-3]
        return {name: getattr(self, name) for name in fields if getattr(self, name)}


def _join(old: str | None, new: str | None) -> str | None:
    return "\n\n".join(x for x in (old, new) if x) or None


def _read_summary(report: ReportContents, section: _Section) -> None:
    loose = []
    for block in blocks_of(section):
        label, value = _label(block.text)
        if label in _SUMMARY_LABELS and value:
            report.summary = _join(report.summary, value)
        elif label in _RECOMMEND_LABELS and value:
            report.recommendation = _join(report.recommendation, value)
        else:
            loose.append(block)
    if report.summary is None:
        report.summary = _render(loose)


def _read_motivation(report: ReportContents, section: _Section) -> None:
    report.motivation = _join(report.motivation, _render(blocks_of(section)))
    report.claim_sources.extend((block.text, section.title) for block in blocks_of(section))


def _read_implementation(report: ReportContents, section: _Section) -> None:
    label = None  # the bullets after '关键文件：' name files, after '关键符号：' symbols
    for block in blocks_of(section):
        name, value = _label(block.text)
        if name in _FILES_LABELS or name in _SYMBOLS_LABELS:
            label = "files" if name in _FILES_LABELS else "symbols"
            text = value
        elif block.item and not block.ordered and label:
            text = block.text
        else:
            label = None
            report.implementation.append(block.text)
            continue
        if label == "files" and text:
            report.key_files.extend(_key_file(text))
        elif text:
            report.key_symbols.extend(_split_list(text, _SYMBOL_SEPARATORS))


def _read_key_files(report: ReportContents, section: _Section) -> None:
    for block in blocks_of(section):
        report.key_files.extend(_key_file(block.text))


def _read_key_symbols(report: ReportContents, section: _Section) -> None:
    for block in blocks_of(section):
        report.key_symbols.extend(_split_list(block.text, _SYMBOL_SEPARATORS))


def _read_code(report: ReportContents, section: _Section) -> None:
    file = None  # a heading naming a file names the snippets under it
    for event in section.events:
        if isinstance(event, _Heading):
            file = _unmark(event.text) if _looks_like_path(_unmark(event.text)) else None
        elif isinstance(event, _Fence) and event.code.strip():
            # lines were stripped on the right: blank ones are empty
            code = event.code.lstrip("\n").rstrip()
            first = code.split("\n", 1)[0].strip()
            comment = _unmark(first.lstrip("#/").strip()) if first.startswith(("#", "//")) else ""
            snippet = {"file": file or comment} if file or _looks_like_path(comment) else {}
            report.code_snippets.append({**snippet, "code": code})


def _read_discussion(report: ReportContents, section: _Section) -> None:
    report.discussion = _join(report.discussion, _render(blocks_of(section)))


def _read_risks(report: ReportContents, section: _Section) -> None:
    for block in blocks_of(section):
        label, value = _label(block.text)
        if label in _FLAG_LABELS:
            report.risk_flags.extend(_split_list(value))
        elif label in _IMPACT_LABELS and value:
            report.impact = _join(report.impact, value)
            report.risks.append(value)
            report.claim_sources.append((value, f"{section.title} ({label})"))
        elif label in _RISK_LABELS and value:
            report.risks.append(value)
        elif label not in _IMPACT_LABELS | _RISK_LABELS:
            report.risks.append(block.text)


def _read_related(report: ReportContents, section: _Section) -> None:
    for block in blocks_of(section):
        text = _LINK.sub(lambda m: m.group(1), block.text).strip().strip("*").strip()
        match = _RELATED.match(text)
        if not match or int(match.group(1)) == 0:
            continue
        number, rest = int(match.group(1)), match.group(2).replace("**", "").strip()
        cuts = [p for p in (rest.find("："), rest.find(": ")) if p >= 0] + (
            [len(rest) - 1] if rest.endswith(":") else []
        )
        title, note = (
            (rest[: min(cuts)].strip(), rest[min(cuts) + 1 :].strip()) if cuts else (rest, "")
        )
        entry = {
            "number": number,
            "title": title or f"PR #{number} (no title in the report)",
            "relation": "same-area",
        }
        report.related.append({**entry, "note": note} if note else entry)


# One reader per section kind: _read_<kind>.
_READERS = {kind: globals()[f"_read_{kind}"] for kind in _SECTION_NAMES}


def read_sections(sections: list[_Section]) -> ReportContents:
    """What the known sections say, each read by the reader of its kind, in report order."""
    report = ReportContents()
    for section in sections:
        _READERS[section.kind](report, section)
    return report
