"""Import a review report (markdown) into a draft record.

A review report looks like ``seeds/pr-52078-review-report.md``: a title line
``# PR #52078 完整报告``, metadata bullets (``- 仓库：``, ``- 标题：``,
``- 合并时间：``, ``- 原文链接：``, or Repository / Title / Merged / Link) and
sections (执行摘要, 功能与动机, 实现拆解, 关键源码片段, 评论区精华, 风险与影响,
关联脉络, or their English names) that may be missing, reordered, repeated or
unknown (unknown ones are ignored). Reading the markdown is report_sections.py's
job; this module builds the draft from what it read: the pr fields, one TODO
claim per checkable sentence, the YAML text with its TODO comments.

The result is a *draft*: a record that loads, but whose claims have checks of
kind ``TODO`` and whose target names no releases yet; ``gdn-review validate``
lists those open items and ``gdn-review generate`` skips the draft. Nothing
from the report becomes code: code snippets stay plain strings.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import yaml

from gdn_review.files import atomic_write
from gdn_review.importers.report_sections import blocks_of, parse_markdown, read_metadata, read_sections, split_sections
from gdn_review.kb.errors import RecordErrors
from gdn_review.kb.load import parse_record


class ReportImportError(Exception):
    """A report that cannot give a draft record; the message says why and where."""


# ------------------------------------------------------------- the pr fields

_URL = re.compile(r"https?://[^\s<>()\[\]`\"'，。]+")
_PULL = re.compile(r"/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/pulls?/(\d{1,12})(?!\d)")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_DATE = re.compile(r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})\s*日?(?:[ \tT]*(\d{1,2})[:：](\d{2})(?:[:：](\d{2}))?)?")


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
    outside, sections, heading_number = split_sections(parse_markdown(text))
    meta = read_metadata(outside)
    for key, value in read_metadata([b for section in sections for b in blocks_of(section)]).items():
        meta.setdefault(key, value)  # a metadata line that strayed into a section still counts
    pr = _pull_request(meta, heading_number, source)
    report = read_sections(sections)
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
