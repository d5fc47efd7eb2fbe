"""Import a review report (markdown) into a draft record.

A review report looks like ``seeds/pr-52078-review-report.md``: a title line
``# PR #52078 完整报告``, metadata bullets (``- 仓库：``, ``- 标题：``,
``- 合并时间：``, ``- 原文链接：``; English labels Repository / Title / Merged /
Link work too) and sections (执行摘要, 功能与动机, 实现拆解, 关键源码片段,
评论区精华, 风险与影响, 关联脉络, or their English names). Sections may be
missing, reordered, repeated or unknown (unknown ones are ignored).

The result is a *draft*: a record that loads, but whose claims have checks of
kind ``TODO`` and whose target names no releases yet. ``gdn-review validate``
lists those open items; ``gdn-review generate`` skips the draft until a person
has completed it. Nothing from the report becomes code: code snippets are kept
as plain strings under ``report.code_snippets``.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from pathlib import Path

import yaml

from gdn_review.files import atomic_write
from gdn_review.kb.errors import RecordErrors
from gdn_review.kb.load import parse_record


class ReportImportError(Exception):
    """A report that cannot give a draft record; the message says why and where."""


# --------------------------------------------------------------------------- text


# Characters a YAML stream cannot carry (or that YAML reads as line breaks), removed
# up front so that every string of the draft reads back exactly as it was written.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufeff\ufffe\uffff]")
_BREAKS = re.compile("\r\n|[\r\x85\u2028\u2029]")


def _normalize(text: str) -> list[str]:
    text = _BREAKS.sub("\n", text)
    text = _UNSAFE.sub("", text)
    return [line.rstrip() for line in text.split("\n")]


def _printable(value: str) -> str:
    """A string safe to put into a YAML comment (one line, printable)."""
    return "".join(ch if ch.isprintable() else "?" for ch in value)


def _has_word(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _unmark(text: str) -> str:
    """Heading or label text without markdown emphasis and code marks."""
    return text.strip().strip("*_`").strip()


def _looks_like_path(text: str) -> bool:
    return bool(text) and not any(ch.isspace() for ch in text) and ("/" in text or "." in text)


# ------------------------------------------------------------------ markdown scan


@dataclasses.dataclass
class _Heading:
    level: int
    text: str
    line: int


@dataclasses.dataclass
class _Fence:
    code: list[str]
    line: int


@dataclasses.dataclass
class _Line:
    text: str
    line: int


def _heading(line: str) -> tuple[int, str] | None:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3 or not stripped.startswith("#"):
        return None
    level = len(stripped) - len(stripped.lstrip("#"))
    rest = stripped[level:]
    if level > 6 or (rest and rest[0] not in " \t"):
        return None
    text = rest.strip()
    closed = text.rstrip("#")
    if not closed or closed[-1] in " \t":
        text = closed.strip()
    return level, text


def _fence_open(line: str) -> tuple[str, int] | None:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3 or not stripped.startswith(("```", "~~~")):
        return None
    char = stripped[0]
    count = len(stripped) - len(stripped.lstrip(char))
    if char == "`" and "`" in stripped[count:]:
        return None  # an inline code span, not a fence
    return char, count


def _fence_close(line: str, char: str, count: int) -> bool:
    stripped = line.strip()
    return len(stripped) >= count and stripped == char * len(stripped)


def _scan(lines: list[str]) -> list[_Heading | _Fence | _Line]:
    events: list[_Heading | _Fence | _Line] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _fence_open(line)
        if fence:
            start = index + 1
            index += 1
            code = []
            while index < len(lines) and not _fence_close(lines[index], *fence):
                code.append(lines[index])
                index += 1
            events.append(_Fence(code, start))
            index += 1  # the closing fence (an unclosed fence runs to the end)
            continue
        heading = _heading(line)
        events.append(_Heading(heading[0], heading[1], index + 1) if heading else _Line(line, index + 1))
        index += 1
    return events


_SECTION_NAMES = {
    "summary": ["执行摘要", "摘要", "summary", "executive summary", "tl;dr", "tldr"],
    "motivation": ["功能与动机", "动机", "motivation", "feature and motivation", "features and motivation", "what and why"],
    "implementation": ["实现拆解", "实现", "implementation", "implementation breakdown"],
    "key_files": ["关键文件", "key files"],
    "key_symbols": ["关键符号", "key symbols"],
    "code": ["关键源码片段", "源码片段", "code", "key code", "code snippets", "key code snippets", "key source snippets"],
    "discussion": ["评论区精华", "评论", "discussion", "review discussion", "comments"],
    "risks": ["风险与影响", "风险", "risks and impact", "risk and impact", "risks & impact", "risks", "risk"],
    "related": ["关联脉络", "相关 pr", "related", "related prs", "related pull requests"],
}
_SECTIONS = {name: kind for kind, names in _SECTION_NAMES.items() for name in names}
_NUMBERING = re.compile(r"^(?:\d{1,3}[.)、]|[一二三四五六七八九十]{1,3}[、.])\s*")


def _section_kind(heading: str) -> str | None:
    text = _unmark(heading).rstrip(":：").strip().lower()
    text = _NUMBERING.sub("", text)
    if text in _SECTIONS:
        return _SECTIONS[text]
    for part in re.split(r"\s*[/|（(]\s*", text):  # "Summary / 执行摘要", "执行摘要（Summary）"
        part = _unmark(part.rstrip(")）"))
        if part in _SECTIONS:
            return _SECTIONS[part]
    return None


@dataclasses.dataclass
class _Section:
    kind: str
    title: str
    level: int
    events: list = dataclasses.field(default_factory=list)


_PR_IN_HEADING = re.compile(r"\bPR\s*#\s*(\d{1,12})(?!\d)", re.IGNORECASE)


def _sections(events) -> tuple[list, list[_Section], tuple[int, int] | None]:
    """(events outside any known section, known sections, (number, line) from a title heading)."""
    outside: list = []
    sections: list[_Section] = []
    current: _Section | None = None
    number: tuple[int, int] | None = None
    for event in events:
        if isinstance(event, _Heading):
            kind = _section_kind(event.text)
            if kind:
                current = _Section(kind, _unmark(event.text), event.level)
                sections.append(current)
                continue
            inside = current is not None and (
                event.level > current.level or (current.kind == "code" and _looks_like_path(_unmark(event.text)))
            )
            if inside:
                current.events.append(event)
                continue
            current = None
            match = _PR_IN_HEADING.search(event.text)
            if number is None and match and int(match.group(1)) > 0:
                number = (int(match.group(1)), event.line)
            continue
        (current.events if current else outside).append(event)
    return outside, sections, number


@dataclasses.dataclass
class _Block:
    text: str
    line: int
    item: bool  # a list item (else a paragraph)
    ordered: bool = False


_ITEM = re.compile(r"^[ \t]*([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")


def _blocks(events) -> list[_Block]:
    """List items and paragraphs; a line right after one continues it."""
    blocks: list[_Block] = []
    open_block: _Block | None = None
    for event in events:
        if not isinstance(event, _Line) or not event.text.strip():
            open_block = None
            continue
        match = _ITEM.match(event.text)
        if match:
            open_block = _Block((match.group(2) or "").strip(), event.line, True, match.group(1)[0].isdigit())
            blocks.append(open_block)
        elif open_block is not None:
            open_block.text = f"{open_block.text} {event.text.strip()}".strip()
        else:
            open_block = _Block(event.text.strip(), event.line, False)
            blocks.append(open_block)
    return [b for b in blocks if b.text]


def _render(blocks: list[_Block]) -> str | None:
    text = "\n".join(f"- {b.text}" if b.item else b.text for b in blocks).strip()
    return text or None


def _label(text: str) -> tuple[str | None, str]:
    """'一句话：x' -> ('一句话', 'x'); no short label before a colon -> (None, text)."""
    positions = [p for p in (text.find("："), text.find(":")) if 0 < p <= 40]
    if not positions:
        return None, text
    cut = min(positions)
    return _unmark(text[:cut]).lower(), text[cut + 1 :].strip().lstrip("*").strip()


def _split_list(text: str) -> list[str]:
    return [p for p in (_unmark(x) for x in re.split(r"\s*[,，、;；]\s*", text)) if p]


# --------------------------------------------------------------------- metadata

_META_LABELS = {
    "仓库": "repo", "repository": "repo", "repo": "repo",
    "标题": "title", "title": "title",
    "合并时间": "merged_at", "merged": "merged_at", "merged at": "merged_at", "merged_at": "merged_at", "merge time": "merged_at",
    "原文链接": "url", "链接": "url", "link": "url", "url": "url",
}
_URL = re.compile(r"https?://[^\s<>()\[\]`\"'，。]+")
_PULL = re.compile(r"/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/pulls?/(\d{1,12})(?!\d)")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_DATE = re.compile(r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})\s*日?(?:[ \tT]*(\d{1,2})[:：](\d{2})(?:[:：](\d{2}))?)?")


def _metadata(blocks: list[_Block]) -> dict[str, tuple[str, int]]:
    found: dict[str, tuple[str, int]] = {}
    for block in blocks:
        label, value = _label(block.text)
        key = _META_LABELS.get(label or "")
        if key and key not in found and value:
            found[key] = (value, block.line)
    return found


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
        raise ReportImportError(f"{where}: merge time {value[:80]!r} is not a date (expected for example '2026-08-20 11:52')")
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if hour is not None:
        text += f" {hour:02d}:{minute:02d}" + (f":{second:02d}" if second is not None else "")
    return text


# ------------------------------------------------------------------------ claims

# Words that make a sentence a checkable claim, and the kind of check each suggests.
_CHECKABLE = [
    ("equivalence: build() returns the same metadata as on the base release, on named cases",
     ("无行为变化", "行为不变", "行为一致", "等价", "no behaviour change", "no behavior change", "no functional change",
      "same output", "same result", "equivalent", "unchanged")),
    ("op_budget: count the aten ops build() runs (for example aten.ge) on the cases where this applies",
     ("计算", "次", "冗余", "重复", "once", "twice", "times", "compute", "redundant", "duplicate")),
    ("gpu_sync: count host-device synchronisations in build() (CUDA only)",
     ("同步", "内核启动", "sync", "kernel launch")),
    ("latency or gpu_sync: a unit check measures the mechanism; an end-to-end figure belongs to a serving benchmark",
     ("性能", "吞吐", "延迟", "加速", "performance", "throughput", "latency", "faster", "speedup", "speed-up")),
]
_FALLBACK_HINT = "which check (op_budget, equivalence, invariant, gpu_sync) can test this sentence?"


def _sentences(text: str) -> list[str]:
    """Sentences, split at 。！？ and at .!? before a space; never inside `code`."""
    found: list[str] = []
    start = 0
    in_code = False
    length = len(text)
    for index, ch in enumerate(text):
        if ch == "`":
            in_code = not in_code
        elif not in_code and (ch in "。！？" or (ch in ".!?" and (index + 1 == length or text[index + 1] in " \t\n"))):
            found.append(text[start : index + 1])
            start = index + 1
    found.append(text[start:])
    return [s.strip() for s in found if _has_word(s)]


def _hint(sentence: str) -> str | None:
    lowered = sentence.lower()
    hints = [hint for hint, words in _CHECKABLE if any(word in lowered for word in words)]
    return "; or ".join(hints) if hints else None


def _claims(sources: list[tuple[str, str]]) -> list[dict]:
    """One TODO claim per checkable sentence of (text, where) sources."""
    candidates = [(sentence, where) for text, where in sources for sentence in _sentences(text)]
    checkable = [(s, w, _hint(s)) for s, w in candidates if _hint(s)]
    if not checkable:  # no sentence names an effect: every sentence is a candidate claim
        checkable = [(s, w, _FALLBACK_HINT) for s, w in candidates]
    claims: list[dict] = []
    seen: set[str] = set()
    for sentence, where, hint in checkable:
        if sentence in seen:
            continue
        seen.add(sentence)
        claims.append({"id": f"C{len(claims) + 1}", "text": sentence, "source": where, "check": {"kind": "TODO", "hint": hint}})
    if not claims:
        claims.append({
            "id": "C1",
            "text": "TODO: the report states no claim that could be found; write what the PR claims.",
            "source": "(none found)",
            "check": {"kind": "TODO", "hint": _FALLBACK_HINT},
        })
    return claims


# ---------------------------------------------------------------- the sections

_SUMMARY_LABELS = {"一句话", "一句话总结", "摘要", "summary", "one-line", "one line", "one-liner", "in one sentence", "tl;dr", "tldr"}
_RECOMMEND_LABELS = {"推荐动作", "推荐", "建议", "recommendation", "recommended action", "recommend"}
_FILES_LABELS = {"关键文件", "key files", "files"}
_SYMBOLS_LABELS = {"关键符号", "key symbols", "symbols"}
_RISK_LABELS = {"风险", "risk", "risks"}
_IMPACT_LABELS = {"影响", "impact"}
_FLAG_LABELS = {"风险标记", "标记", "risk flags", "flags", "risk tags", "tags"}
_LINK = re.compile(r"\[([^\[\]\n]{0,300})\]\(([^()\s]{0,2000})\)")
_RELATED = re.compile(r"^(?:PR\s*)?#\s*(\d{1,12})(?!\d)\s*(.*)$", re.IGNORECASE | re.DOTALL)


def _key_file(text: str) -> dict | None:
    match = re.search(r"`([^`]+)`", text)
    if match:
        path, rest = match.group(1).strip(), text[match.end() :]
    else:
        head = re.split(r"[\s（(:：]", text.strip(), maxsplit=1)[0]
        path, rest = _unmark(head), text.strip()[len(head) :]
    if not path:
        return None
    paren = None
    inner = re.match(r"\s*[（(]([^（()）]*)[）)]", rest)
    if inner:
        paren, rest = inner.group(1).strip() or None, rest[inner.end() :]
    after = rest.strip().lstrip(":：").strip() or None
    note = f"{after} ({paren})" if after and paren else (after or paren)
    return {"path": path, "note": note} if note else {"path": path}


def _symbols(text: str) -> list[str]:
    return [p for p in (_unmark(x) for x in re.split(r"[\s,，、;；]+", text)) if p]


@dataclasses.dataclass
class _Report:
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


def _join(old: str | None, new: str | None) -> str | None:
    return "\n\n".join(x for x in (old, new) if x) or None


def _read_summary(report: _Report, section: _Section) -> None:
    loose = []
    for block in _blocks(section.events):
        label, value = _label(block.text)
        if label in _SUMMARY_LABELS and value:
            report.summary = _join(report.summary, value)
        elif label in _RECOMMEND_LABELS and value:
            report.recommendation = _join(report.recommendation, value)
        else:
            loose.append(block)
    if report.summary is None:
        report.summary = _render(loose)


def _read_motivation(report: _Report, section: _Section) -> None:
    blocks = _blocks(section.events)
    report.motivation = _join(report.motivation, _render(blocks))
    report.claim_sources.extend((block.text, section.title) for block in blocks)


def _read_implementation(report: _Report, section: _Section) -> None:
    label = None
    for block in _blocks(section.events):
        name, value = _label(block.text)
        if name in _FILES_LABELS or name in _SYMBOLS_LABELS:
            label = "files" if name in _FILES_LABELS else "symbols"
            if value and label == "files":
                entry = _key_file(value)
                report.key_files.extend([entry] if entry else [])
            elif value:
                report.key_symbols.extend(_symbols(value))
        elif block.item and label == "files" and not block.ordered:
            entry = _key_file(block.text)
            report.key_files.extend([entry] if entry else [])
        elif block.item and label == "symbols" and not block.ordered:
            report.key_symbols.extend(_symbols(block.text))
        else:
            label = None
            report.implementation.append(block.text)


def _read_key_files(report: _Report, section: _Section) -> None:
    for block in _blocks(section.events):
        entry = _key_file(block.text)
        report.key_files.extend([entry] if entry else [])


def _read_key_symbols(report: _Report, section: _Section) -> None:
    for block in _blocks(section.events):
        report.key_symbols.extend(_symbols(block.text))


def _read_code(report: _Report, section: _Section) -> None:
    file = None
    for event in section.events:
        if isinstance(event, _Heading):
            name = _unmark(event.text)
            file = name if _looks_like_path(name) else None
        elif isinstance(event, _Fence):
            lines = list(event.code)
            while lines and not lines[0].strip():
                lines.pop(0)
            while lines and not lines[-1].strip():
                lines.pop()
            if not lines:
                continue
            snippet: dict = {}
            first = lines[0].strip()
            comment = _unmark(first.lstrip("#/").strip()) if first.startswith(("#", "//")) else ""
            if file or _looks_like_path(comment):
                snippet["file"] = file or comment
            snippet["code"] = "\n".join(lines)
            report.code_snippets.append(snippet)


def _read_discussion(report: _Report, section: _Section) -> None:
    report.discussion = _join(report.discussion, _render(_blocks(section.events)))


def _read_risks(report: _Report, section: _Section) -> None:
    for block in _blocks(section.events):
        label, value = _label(block.text)
        if label in _FLAG_LABELS:
            report.risk_flags.extend(_split_list(value))
        elif label in _IMPACT_LABELS:
            if value:
                report.impact = _join(report.impact, value)
                report.risks.append(value)
                report.claim_sources.append((value, f"{section.title} ({label})"))
        elif label in _RISK_LABELS:
            if value:
                report.risks.append(value)
        else:
            report.risks.append(block.text)


def _read_related(report: _Report, section: _Section) -> None:
    for block in _blocks(section.events):
        text = _LINK.sub(lambda m: m.group(1), block.text).strip().strip("*").strip()
        match = _RELATED.match(text)
        if not match or int(match.group(1)) == 0:
            continue
        number, rest = int(match.group(1)), match.group(2).replace("**", "").strip()
        cuts = [p for p in (rest.find("："), rest.find(": ")) if p >= 0]
        if rest.endswith(":"):
            cuts.append(len(rest) - 1)
        title, note = (rest[: min(cuts)].strip(), rest[min(cuts) + 1 :].strip()) if cuts else (rest, "")
        entry = {"number": number, "title": title or f"PR #{number} (no title in the report)", "relation": "same-area"}
        if note:
            entry["note"] = note
        report.related.append(entry)


_READERS = {
    "summary": _read_summary,
    "motivation": _read_motivation,
    "implementation": _read_implementation,
    "key_files": _read_key_files,
    "key_symbols": _read_key_symbols,
    "code": _read_code,
    "discussion": _read_discussion,
    "risks": _read_risks,
    "related": _read_related,
}


# ------------------------------------------------------------------------ output


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (readable code snippets); no anchors."""

    def ignore_aliases(self, data) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)

# Comments put before top-level keys (lines at column 0 are top-level keys only).
_KEY_COMMENTS = {
    "target:": "# TODO: target.base_release (last vLLM release without the PR) and target.head_release (first with it).",
    "claims:": "# TODO: replace each `kind: TODO` check with op_budget, equivalence, invariant or gpu_sync (see its hint).",
    "cases: []": "# TODO: the named batches (cases) the checks run on.",
    "risks:": "# TODO: tie each risk to the cases and claims that address it.",
    "report:": "# What the review report says, kept for people. Code snippets are reference text: never run, never rendered.",
}


def _dump(data: dict, literal: bool) -> str:
    return yaml.dump(
        data,
        Dumper=_Dumper if literal else yaml.SafeDumper,
        allow_unicode=True,
        sort_keys=False,
        default_flow_style=False,
        width=2**30,
    )


def _header(data: dict, source: str) -> str:
    pr = data["pr"]
    claim_ids = [c["id"] for c in data["claims"]]
    ids = ", ".join(claim_ids) if len(claim_ids) <= 8 else f"{claim_ids[0]}..{claim_ids[-1]}"
    lines = [
        f"# DRAFT record of PR #{pr['number']} ({_printable(pr['repo'])}), imported by `gdn-review import`",
        f"# from {_printable(source) or '(unnamed report)'}.",
        "# A draft loads but is not yet checkable: `gdn-review validate` lists its open",
        "# TODOs and exits 1; `gdn-review generate` skips it. Open TODOs:",
        "#   - target.base_release, target.head_release: not in the report",
        f"#   - claims {ids}: each check is `kind: TODO`",
        "#   - cases: none yet; risks name no cases or claims yet",
    ]
    if data["target"]["file"] == "TODO" or data["target"]["symbol"] == "TODO":
        lines.append("#   - target.file / target.symbol: not found in the report (they say TODO)")
    return "\n".join(lines) + "\n"


def _comment_keys(body: str) -> str:
    out = []
    for line in body.split("\n"):
        if line in _KEY_COMMENTS:
            out.append(_KEY_COMMENTS[line])
        out.append(line)
    return "\n".join(out)


def _report_notes(report: _Report) -> dict:
    notes = {
        "summary": report.summary,
        "recommendation": report.recommendation,
        "motivation": report.motivation,
        "implementation": report.implementation,
        "key_files": report.key_files,
        "key_symbols": report.key_symbols,
        "code_snippets": report.code_snippets,
        "discussion": report.discussion,
        "impact": report.impact,
        "risk_flags": report.risk_flags,
    }
    return {key: value for key, value in notes.items() if value}


# ------------------------------------------------------------------------- API


def import_report(text: str, source: str) -> str:
    """The YAML text of a draft record made from a review report's markdown ``text``.

    ``source`` names the report (it becomes ``pr.source_report`` and appears in
    messages). Raises ReportImportError when the report lacks what a record
    cannot do without: the PR number, title, merge time, link (and repository).
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = _normalize(text)
    outside, sections, heading_number = _sections(_scan(lines))
    meta = _metadata(_blocks(outside))
    for key, value in _metadata([b for section in sections for b in _blocks(section.events)]).items():
        meta.setdefault(key, value)  # a metadata line that strayed into a section still counts

    def where(key: str) -> str:
        return f"{source}:{meta[key][1]}"

    url = None
    if "url" in meta:
        match = _URL.search(meta["url"][0])
        if not match:
            raise ReportImportError(f"{where('url')}: link {meta['url'][0][:80]!r} is not an http(s) address")
        url = match.group(0).rstrip(".,;:!?")
    pull = _PULL.search(url) if url else None

    if heading_number:
        number = heading_number[0]
    elif pull and int(pull.group(3)) > 0:
        number = int(pull.group(3))
    else:
        raise ReportImportError(
            f"{source}: no PR number found: expected a title line like '# PR #52078 ...' "
            "or a link line ('- 原文链接：' / '- Link:') ending in /pull/<number>"
        )
    if url is None:
        raise ReportImportError(f"{source}: PR #{number}: no link found: expected a line like '- 原文链接：https://...' or '- Link: https://...'")
    if "repo" in meta:
        repo = meta["repo"][0].replace("`", "").strip()
        if not _REPO.match(repo):
            raise ReportImportError(f"{where('repo')}: repository {repo[:80]!r} is not owner/name (for example vllm-project/vllm)")
    elif pull:
        repo = f"{pull.group(1)}/{pull.group(2)}"
    else:
        raise ReportImportError(f"{source}: PR #{number}: no repository: expected a line like '- 仓库：`vllm-project/vllm`' or '- Repository: vllm-project/vllm'")
    title = _unquote(meta["title"][0]) if "title" in meta else ""
    if not title:
        raise ReportImportError(f"{source}: PR #{number}: no title: expected a line like '- 标题：...' or '- Title: ...'")
    if "merged_at" not in meta:
        raise ReportImportError(f"{source}: PR #{number}: no merge time: expected a line like '- 合并时间：2026-08-20 11:52' or '- Merged: 2026-08-20 11:52'")
    merged_at = _merged_at(meta["merged_at"][0], where("merged_at"))

    report = _Report()
    for section in sections:
        _READERS[section.kind](report, section)

    data: dict = {
        "schema_version": 1,
        "pr": {"number": number, "repo": repo, "title": title, "merged_at": merged_at, "url": url, "source_report": source},
        "target": {
            "file": report.key_files[0]["path"] if report.key_files else "TODO",
            "symbol": report.key_symbols[0] if report.key_symbols else "TODO",
        },
        "claims": _claims(report.claim_sources),
        "cases": [],
        "risks": [{"id": f"R{i}", "text": text, "cases": [], "claims": []} for i, text in enumerate(report.risks, 1)],
        "related": report.related,
    }
    notes = _report_notes(report)
    if notes:
        data["report"] = notes

    for literal in (True, False):  # literal blocks read best; plain dumping is the fallback
        body = _dump(data, literal)
        if yaml.safe_load(body) == data:
            break
    else:
        raise ReportImportError(f"{source}: internal error: the draft does not read back as written (please report this)")
    result = _header(data, source) + _comment_keys(body)
    try:
        parse_record(result, f"{number}.yaml")
    except RecordErrors as failure:
        raise ReportImportError(f"{source}: internal error: the draft of PR #{number} does not load:\n{failure}") from None
    return result


def _read_report(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ReportImportError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ReportImportError(f"{path}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})") from None


def write_draft(report_path: Path, out_path: Path | None = None, force: bool = False) -> Path:
    """Import ``report_path`` and write the draft; returns the path written.

    ``out_path`` is a file (named ``<number>.yaml``, as the loader requires) or an
    existing folder; by default ``kb/<number>.yaml``. An existing file is replaced
    only with ``force``. The write goes through a temp file and a rename.
    """
    report_path = Path(report_path)
    text = import_report(_read_report(report_path), str(report_path))
    number = yaml.safe_load(text)["pr"]["number"]
    name = f"{number}.yaml"
    if out_path is None:
        target = Path("kb") / name
    elif Path(out_path).is_dir():
        target = Path(out_path) / name
    else:
        target = Path(out_path)
        if target.name != name:
            raise ReportImportError(f"{target}: a record of PR #{number} must be named {name} (or give a folder to --out)")
    if target.exists() and not force:
        raise ReportImportError(f"{target} exists; use --force to replace it")
    atomic_write(target, text)
    return target

