"""Import a review report (markdown) into a draft record.

A review report looks like ``seeds/pr-52078-review-report.md``: a title line
``# PR #52078 完整报告``, metadata bullets (``- 仓库：``, ``- 标题：``,
``- 合并时间：``, ``- 原文链接：``, or Repository / Title / Merged / Link) and
sections (执行摘要, 功能与动机, 实现拆解, 关键源码片段, 评论区精华, 风险与影响,
关联脉络, or their English names) that may be missing, reordered, repeated or
unknown (unknown ones are ignored). The markdown is parsed by ``markdown-it-py``
(CommonMark, with source line numbers).

The result is a *draft*: a record that loads, but whose claims have checks of
kind ``TODO`` and whose target names no releases yet; ``gdn-review validate``
lists those open items and ``gdn-review generate`` skips the draft. Nothing
from the report becomes code: code snippets stay plain strings.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from pathlib import Path

import yaml
from markdown_it import MarkdownIt

from gdn_review.files import atomic_write
from gdn_review.kb.errors import RecordErrors
from gdn_review.kb.load import parse_record


class ReportImportError(Exception):
    """A report that cannot give a draft record; the message says why and where."""


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


def _parse(text: str) -> list[_Heading | _Fence | _Block]:
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
            content = " ".join(part.strip() for part in tokens[index + 1].content.split("\n")).strip()
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


def _sections(events) -> tuple[list[_Block], list[_Section], int | None]:
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
            if current and (event.level > current.level or (current.kind == "code" and _looks_like_path(_unmark(event.text)))):
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


def _blocks(section: _Section) -> list[_Block]:
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
# A sentence ends at 。！？, or at .!? before a space or the end; never inside `code`.
_SENTENCE = re.compile(r"(?:`[^`]*`?|[^`。！？.!?]|[.!?](?=[^ \t\n]))*(?:[。！？]|[.!?](?=[ \t\n]|$))?")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if any(ch.isalnum() for ch in s)]


def _hint(sentence: str) -> str | None:
    lowered = sentence.lower()
    return "; or ".join(hint for hint, words in _CHECKABLE if any(word in lowered for word in words)) or None


def _claims(sources: list[tuple[str, str]]) -> list[dict]:
    """One TODO claim per checkable sentence of (text, where) sources."""
    candidates = [(sentence, where) for text, where in sources for sentence in _sentences(text)]
    checkable = [(s, w, _hint(s)) for s, w in candidates if _hint(s)]
    if not checkable:  # no sentence names an effect: every sentence is a candidate claim
        checkable = [(s, w, _FALLBACK_HINT) for s, w in candidates]
    claims: list[dict] = []
    seen: set[str] = set()
    for sentence, where, hint in checkable:
        if sentence not in seen:
            seen.add(sentence)
            claims.append({"id": f"C{len(claims) + 1}", "text": sentence, "source": where, "check": {"kind": "TODO", "hint": hint}})
    return claims or [{
        "id": "C1",
        "text": "TODO: the report states no claim that could be found; write what the PR claims.",
        "source": "(none found)",
        "check": {"kind": "TODO", "hint": _FALLBACK_HINT},
    }]


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
class _Report:
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


def _read_summary(report: _Report, section: _Section) -> None:
    loose = []
    for block in _blocks(section):
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
    report.motivation = _join(report.motivation, _render(_blocks(section)))
    report.claim_sources.extend((block.text, section.title) for block in _blocks(section))


def _read_implementation(report: _Report, section: _Section) -> None:
    label = None  # the bullets after '关键文件：' name files, after '关键符号：' symbols
    for block in _blocks(section):
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


def _read_key_files(report: _Report, section: _Section) -> None:
    for block in _blocks(section):
        report.key_files.extend(_key_file(block.text))


def _read_key_symbols(report: _Report, section: _Section) -> None:
    for block in _blocks(section):
        report.key_symbols.extend(_split_list(block.text, _SYMBOL_SEPARATORS))


def _read_code(report: _Report, section: _Section) -> None:
    file = None  # a heading naming a file names the snippets under it
    for event in section.events:
        if isinstance(event, _Heading):
            file = _unmark(event.text) if _looks_like_path(_unmark(event.text)) else None
        elif isinstance(event, _Fence) and event.code.strip():
            code = event.code.lstrip("\n").rstrip()  # lines were stripped on the right: blank ones are empty
            first = code.split("\n", 1)[0].strip()
            comment = _unmark(first.lstrip("#/").strip()) if first.startswith(("#", "//")) else ""
            snippet = {"file": file or comment} if file or _looks_like_path(comment) else {}
            report.code_snippets.append({**snippet, "code": code})


def _read_discussion(report: _Report, section: _Section) -> None:
    report.discussion = _join(report.discussion, _render(_blocks(section)))


def _read_risks(report: _Report, section: _Section) -> None:
    for block in _blocks(section):
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


def _read_related(report: _Report, section: _Section) -> None:
    for block in _blocks(section):
        text = _LINK.sub(lambda m: m.group(1), block.text).strip().strip("*").strip()
        match = _RELATED.match(text)
        if not match or int(match.group(1)) == 0:
            continue
        number, rest = int(match.group(1)), match.group(2).replace("**", "").strip()
        cuts = [p for p in (rest.find("："), rest.find(": ")) if p >= 0] + ([len(rest) - 1] if rest.endswith(":") else [])
        title, note = (rest[: min(cuts)].strip(), rest[min(cuts) + 1 :].strip()) if cuts else (rest, "")
        entry = {"number": number, "title": title or f"PR #{number} (no title in the report)", "relation": "same-area"}
        report.related.append({**entry, "note": note} if note else entry)


# One reader per section kind: _read_<kind>.
_READERS = {kind: globals()[f"_read_{kind}"] for kind in _SECTION_NAMES}


# ------------------------------------------------------------------------ output


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (readable code snippets); no anchors."""

    def ignore_aliases(self, data) -> bool:
        return True


_Dumper.add_representer(
    str, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)
)

# Comments put before top-level keys (lines at column 0 are top-level keys only).
_KEY_COMMENTS = {
    "target:": "# TODO: target.base_release (last vLLM release without the PR) and target.head_release (first with it).",
    "claims:": "# TODO: replace each `kind: TODO` check with op_budget, equivalence, invariant or gpu_sync (see its hint).",
    "cases: []": "# TODO: the named batches (cases) the checks run on.",
    "risks:": "# TODO: tie each risk to the cases and claims that address it.",
    "report:": "# What the review report says, kept for people. Code snippets are reference text: never run, never rendered.",
}


def _printable(value: str) -> str:
    """A string safe to put into a YAML comment (one line, printable)."""
    return "".join(ch if ch.isprintable() else "?" for ch in value)


def _yaml(data: dict, source: str) -> str:
    """The draft's text: a header of open TODOs, then the data with comments before its keys."""
    for dumper in (_Dumper, yaml.SafeDumper):  # literal blocks read best; plain dumping is the fallback
        body = yaml.dump(data, Dumper=dumper, allow_unicode=True, sort_keys=False, default_flow_style=False, width=2**30)
        if yaml.safe_load(body) == data:
            break
    else:
        raise ReportImportError(f"{source}: internal error: the draft does not read back as written (please report this)")
    pr, ids = data["pr"], [c["id"] for c in data["claims"]]
    header = [
        f"# DRAFT record of PR #{pr['number']} ({_printable(pr['repo'])}), imported by `gdn-review import`",
        f"# from {_printable(source) or '(unnamed report)'}.",
        "# A draft loads but is not yet checkable: `gdn-review validate` lists its open",
        "# TODOs and exits 1; `gdn-review generate` skips it. Open TODOs:",
        "#   - target.base_release, target.head_release: not in the report",
        f"#   - claims {', '.join(ids) if len(ids) <= 8 else f'{ids[0]}..{ids[-1]}'}: each check is `kind: TODO`",
        "#   - cases: none yet; risks name no cases or claims yet",
    ]
    if "TODO" in (data["target"]["file"], data["target"]["symbol"]):
        header.append("#   - target.file / target.symbol: not found in the report (they say TODO)")
    lines = [comment for line in body.split("\n") for comment in ([_KEY_COMMENTS[line]] if line in _KEY_COMMENTS else []) + [line]]
    return "\n".join(header) + "\n" + "\n".join(lines)


# ------------------------------------------------------------------------- API


def _pull_request(meta: dict[str, tuple[str, int]], heading_number: int | None, source: str) -> dict:
    """The record's pr fields; without a merge time or link it leaves them out (unknown; the GitHub pull page)."""

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
            raise ReportImportError(f"{where('repo')}: repository {repo[:80]!r} is not owner/name (for example vllm-project/vllm)")
    elif pull:
        repo = f"{pull.group(1)}/{pull.group(2)}"
    else:
        raise ReportImportError(
            f"{source}: PR #{number}: no repository: expected a line like '- 仓库：`vllm-project/vllm`' or '- Repository: vllm-project/vllm', "
            "or a link ('- 原文链接：' / '- Link:') to .../<owner>/<name>/pull/<number>"
        )
    title = _unquote(meta["title"][0]) if "title" in meta else ""
    if not title:
        raise ReportImportError(f"{source}: PR #{number}: no title: expected a line like '- 标题：...' or '- Title: ...'")
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
    outside, sections, heading_number = _sections(_parse(text))
    meta = _metadata(outside)
    for key, value in _metadata([b for section in sections for b in _blocks(section)]).items():
        meta.setdefault(key, value)  # a metadata line that strayed into a section still counts
    pr = _pull_request(meta, heading_number, source)
    report = _Report()
    for section in sections:
        _READERS[section.kind](report, section)
    data: dict = {
        "schema_version": 1,
        "pr": pr,
        "target": {
            "file": report.key_files[0]["path"] if report.key_files else "TODO",
            "symbol": report.key_symbols[0] if report.key_symbols else "TODO",
        },
        "claims": _claims(report.claim_sources),
        "cases": [],
        "risks": [{"id": f"R{i}", "text": text, "cases": [], "claims": []} for i, text in enumerate(report.risks, 1)],
        "related": report.related,
    }
    if report.notes():
        data["report"] = report.notes()
    result = _yaml(data, source)
    try:
        parse_record(result, f"{pr['number']}.yaml")
    except RecordErrors as failure:
        raise ReportImportError(f"{source}: internal error: the draft of PR #{pr['number']} does not load:\n{failure}") from None
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
