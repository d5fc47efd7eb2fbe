"""Import gh's JSON of a pull request (and its diff) into a draft record.

The JSON is what ``gh pr view N --json number,title,body,mergedAt,url,files,reviews,comments``
writes: ``number`` and ``title`` are needed, ``url`` gives the repository;
``body``, ``mergedAt`` (ISO 8601, or null while not merged), ``files``
(``path``, ``additions``, ``deletions``), ``reviews`` (``author.login``,
``body``, ``state``...) and ``comments`` (``author.login``, ``body``...) are
read when present; other fields are ignored. ``--diff`` takes what
``gh pr diff N`` writes: the target file and symbol come from its hunks
(diff_target.py).

The draft mirrors the markdown importer's (review_report.py): the pr fields,
one TODO claim per checkable sentence of the title and body (drafting.py),
whose ``source`` says where (``PR title``, ``PR body``); one risk per paragraph
of a review or comment that raises a concern (or of a review that requests
changes), naming its author; related PRs from ``#NNNNN`` references; the
body, the discussion, the files and the diff's hunks under ``report:``.
A JSON that is not valid, or not of gh's shape, is a ReportImportError naming
``file:line:col`` or the field; nothing from it becomes code.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

from gdn_review.common import record_format
from gdn_review.common.unified_diff import PatchError, read_diff_file
from gdn_review.importers.diff_target import diff_target
from gdn_review.importers.drafting import (
    PR_REFERENCE,
    ReportImportError,
    checked,
    cut,
    draft_claims,
    draft_yaml,
    sentences,
)
from gdn_review.importers.report_sections import parse_markdown
from gdn_review.kb.record_rules import ENTRY_SYMBOLS

ORIGIN = "the PR's JSON"
_PULL = re.compile(
    r"^https?://[^/\s]+/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/pulls?/(\d{1,12})(?:[/?#]\S*)?$"
)
_TAGS = re.compile(r"^(?:\s*\[[^\[\]]{1,40}\])+\s*")  # "[Perf][GDN] " before a title
# Words that make a paragraph of a review or comment a concern (lowercase).
_CONCERNS = (
    "concern",
    "risk",
    "bug",
    "break",
    "wrong",
    "incorrect",
    "race",
    "regress",
    "unsafe",
    "missing",
    "edge case",
    "corner case",
    "crash",
    "stale",
    "overflow",
    "out of bounds",
    "deadlock",
    "hang",
    "leak",
    "not covered",
    "untested",
    "major",
    "critical",
    "风险",
    "问题",
    "错误",
)


def _problem(source: str, path: str, message: str) -> str:
    return f"{source}: {path}: {message}"


def _read_json(text: str, source: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReportImportError(
            f"{source}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ReportImportError(
            f"{source}: expected a JSON object (what `gh pr view N --json "
            f"number,title,...` writes), got {type(data).__name__}"
        )
    return data


def _check_shape(data: dict, source: str) -> None:
    """Every field of gh's shape that is present has its type; all problems at once, each naming its
    field."""
    problems: list[str] = []

    def expect(value, path: str, kinds: tuple, what: str, needed: bool = False) -> bool:
        if value is None and not needed:
            return False
        if isinstance(value, bool) or not isinstance(value, kinds):
            problems.append(
                _problem(
                    source,
                    path,
                    f"expected {what}"
                    + (f", got {json.dumps(value)[:60]}" if value is not None else ""),
                )
            )
            return False
        return True

    if "number" not in data:
        problems.append(
            _problem(source, "number", "missing (ask gh for it: --json number,title,body,url,...)")
        )
    elif (
        expect(data["number"], "number", (int,), "an integer", needed=True) and data["number"] <= 0
    ):
        problems.append(_problem(source, "number", "expected a positive integer"))
    if "title" not in data:
        problems.append(_problem(source, "title", "missing"))
    elif (
        expect(data["title"], "title", (str,), "a string", needed=True)
        and not data["title"].strip()
    ):
        problems.append(_problem(source, "title", "is empty"))
    for key in ("body", "url", "mergedAt"):
        expect(data.get(key), key, (str,), "a string or null")
    for index, file in enumerate(
        data.get("files") or [] if expect(data.get("files"), "files", (list,), "a list") else []
    ):
        if expect(
            file, f"files[{index}]", (dict,), "an object {path, additions, deletions}", needed=True
        ):
            expect(file.get("path"), f"files[{index}].path", (str,), "a string", needed=True)
            for key in ("additions", "deletions"):
                expect(file.get(key), f"files[{index}].{key}", (int,), "an integer")
    for field in ("reviews", "comments"):
        entries = data.get(field) if expect(data.get(field), field, (list,), "a list") else []
        for index, entry in enumerate(entries):
            where = f"{field}[{index}]"
            if not expect(entry, where, (dict,), "an object {author, body, ...}", needed=True):
                continue
            if expect(entry.get("author"), f"{where}.author", (dict,), "an object {login}"):
                expect(entry["author"].get("login"), f"{where}.author.login", (str,), "a string")
            expect(entry.get("body"), f"{where}.body", (str,), "a string")
            expect(entry.get("state"), f"{where}.state", (str,), "a string")
    if problems:
        raise ReportImportError("\n".join(problems))


def _merged_at(value: str, source: str) -> str:
    """ISO 8601 (``2026-09-04T18:02:11Z``) -> the record's ``2026-09-04 18:02:11`` (the time as gh
    wrote it)."""
    try:
        moment = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ReportImportError(
            _problem(
                source,
                "mergedAt",
                f"{value[:60]!r} is not an ISO 8601 time (gh writes 2026-09-04T18:02:11Z)",
            )
        ) from None
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _pull_request(data: dict, source: str) -> dict:
    number, url = data["number"], (data.get("url") or "").strip()
    match = _PULL.match(url)
    if not match:
        what = (
            f"{url[:80]!r} is not" if url else "missing: it is needed for the repository; expected"
        )
        raise ReportImportError(
            _problem(
                source,
                "url",
                f"{what} the PR's address (https://github.com/<owner>/<name>/pull/<number>)",
            )
        )
    if int(match.group(3)) != number:
        raise ReportImportError(
            _problem(source, "url", f"names PR #{match.group(3)}, but number is {number}")
        )
    pr = {
        "number": number,
        "repo": f"{match.group(1)}/{match.group(2)}",
        "title": data["title"].strip(),
    }
    if data.get("mergedAt"):
        pr["merged_at"] = _merged_at(data["mergedAt"], source)
    pr["url"] = url
    pr["source_report"] = source
    if "mergedAt" in data and data["mergedAt"] is None:
        pr["state"] = "open"  # gh writes null for a PR that is not merged
    return pr


# ------------------------------------------------------------------ the thread


def _blocks(markdown: str | None) -> list[str]:
    """The paragraphs and list items of a markdown text (no code, no HTML, no headings)."""
    # blocks have .item
    return [event.text for event in parse_markdown(markdown or "") if hasattr(event, "item")]


def _fences(markdown: str | None) -> list[str]:
    """The code blocks of a markdown text (fences have .code)."""
    return [
        event.code.strip("\n").rstrip()
        for event in parse_markdown(markdown or "")
        if hasattr(event, "code") and event.code.strip()
    ]


def _thread(data: dict) -> list[tuple[str, str, list[str], bool, list[str]]]:
    """(who, what, paragraphs, requests changes, code blocks) per review and comment, reviews first,
    in gh's order."""
    entries = []
    for field, kind in (("reviews", "review"), ("comments", "comment")):
        for entry in data.get(field) or []:
            login = (entry.get("author") or {}).get("login") or "(unknown author)"
            state = entry.get("state") or ""
            label = f"{kind} by {login}" + (
                f", {state}" if kind == "review" and state and state != "COMMENTED" else ""
            )
            entries.append(
                (
                    login,
                    label,
                    _blocks(entry.get("body")),
                    state == "CHANGES_REQUESTED",
                    _fences(entry.get("body")),
                )
            )
    return entries


# What makes a comment carry a concrete failure: an error message, a traceback, a crash or a failing
# shape.
_FAILURE = re.compile(
    r"Traceback \(most recent call "
    r"last\)|\b[A-Z][A-Za-z]*(?:Error|Exception)\b|illegal (?:memory "
    r")?address|illegal memory access|"
    r"\bIMA\b|\bcrash(?:es|ed)?\b|segfault|\bmust be "
    r"contiguous\b|\bexpected\b.{0,60}\bgot\b|torch\.Size\(|\bNaN\b|\bXid\b",
    re.IGNORECASE | re.DOTALL,
)


def _risks(thread) -> list[dict]:
    """Concerns of reviews and comments as risks: those that carry a concrete failure first, then
    the others."""
    found = []
    for _, label, blocks, changes_requested, fences in thread:
        for block in blocks:
            failure = _FAILURE.search(block)
            if failure or changes_requested or any(word in block.lower() for word in _CONCERNS):
                found.append((failure is None, f"{block} ({label})"))
        for code in fences:  # an error printed in a code block: its last error line
            errors = [
                line.strip()
                for line in code.splitlines()
                if re.search(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b:", line)
            ]
            if errors:
                found.append((False, f"`{errors[-1][:300]}` ({label}: the error it reports)"))
    # stable: the thread's order within each group
    ordered = [text for _, text in sorted(found, key=lambda item: item[0])]
    return [
        {"id": f"R{i}", "text": text, "cases": [], "claims": []}
        for i, text in enumerate(ordered, 1)
    ]


def _related(data: dict, thread_sources: list[tuple[str, str]]) -> list[dict]:
    """One same-area relation per PR number referenced (``#NNNNN``, a pull link), with the sentence
    that first names it."""
    found: dict[int, tuple[str, str]] = {}
    for text, where in thread_sources:
        for sentence in sentences(text or ""):
            for match in PR_REFERENCE.finditer(sentence):
                number = int(match.group(1) or match.group(2))
                if number > 0 and number != data["number"]:
                    found.setdefault(number, (where, sentence))
    return [
        {
            "number": n,
            "title": f"PR #{n} (no title in the PR's JSON; a PR or an issue)",
            "relation": "same-area",
            "note": f"referenced in the {where}: {cut(sentence)}",
        }
        for n, (where, sentence) in found.items()
    ]


def _key_files(data: dict, diff_files: list[str]) -> list[dict]:
    files = []
    for file in data.get("files") or []:
        counts = [
            f"{sign}{file[key]}"
            for sign, key in (("+", "additions"), ("-", "deletions"))
            if isinstance(file.get(key), int)
        ]
        files.append(
            {"path": file["path"], "note": " ".join(counts)} if counts else {"path": file["path"]}
        )
    return files or [{"path": path, "note": "from the diff"} for path in diff_files]


# ------------------------------------------------------------------------- API


def _read_diff(diff_path: Path):
    try:
        _, files = read_diff_file(diff_path)
    except PatchError as error:
        raise ReportImportError(str(error)) from None
    target = diff_target(files)
    if target is None:
        raise ReportImportError(
            f"{diff_path}: changes no text file (only binary files): no target file in it"
        )
    return files, target


def import_gh_pr(text: str, source: str, diff_path: Path | None = None) -> str:
    """The YAML text of a draft record made from gh's JSON of a PR (``text``) and, optionally, its
    diff.

    ``source`` names the JSON file (it becomes ``pr.source_report`` and appears in
    messages). Raises ReportImportError: invalid JSON (``file:line:col``), a field
    of the wrong type (``file: field: expected ...``), no PR address, a bad diff.
    """
    data = _read_json(text, source)
    _check_shape(data, source)
    pr = _pull_request(data, source)
    files, target = _read_diff(diff_path) if diff_path is not None else ([], None)
    thread = _thread(data)
    title = _TAGS.sub("", pr["title"]).strip() or pr["title"]
    body = _blocks(data.get("body"))
    body_sources = [(block, "PR body") for block in body]
    paths = [file["path"] for file in data.get("files") or []]
    notes: dict = {"motivation": "\n".join(body)}
    notes["key_files"] = _key_files(data, [f.path for f in files if not f.binary])
    if target:
        notes["key_symbols"] = target.symbols
    notes["code_snippets"] = [{"code": code} for code in _fences(data.get("body"))] + (
        [{"file": target.file, "code": target.snippet}] if target and target.snippet else []
    )
    notes["discussion"] = "\n".join(
        f"- {label}: {' '.join(blocks)}" for _, label, blocks, _, _ in thread if blocks
    )
    if target:
        file, symbol = target.file, (target.symbols[0] if target.symbols else "TODO")
    else:
        file = next((p for p in paths if p.endswith("gdn_attn.py")), None) or next(
            (p for p in paths if p.endswith(".py")), "TODO"
        )
        symbol = "TODO"
    data_out: dict = {
        "schema_version": record_format.CURRENT,
        "pr": pr,
        "target": {"file": file, "symbol": symbol},
        "claims": draft_claims(
            [(title, "PR title")] + body_sources, origin="the PR's title and body", own=pr["number"]
        ),
        "cases": [],
        "risks": _risks(thread),
        "related": _related(
            data,
            [(data.get("title"), "PR title")]
            + body_sources
            + [(" ".join(blocks), label) for _, label, blocks, _, _ in thread],
        ),
    }
    report = {key: value for key, value in notes.items() if value}
    if report:
        data_out["report"] = report
    header_notes = []
    if str(data.get("state") or "").upper() == "CLOSED" and not data.get("mergedAt"):
        # gh's state (when asked for with --json state) tells a PR closed unmerged from an open one;
        # both have mergedAt null.
        header_notes.append(
            "pr.state: gh says CLOSED, not merged: its change is in no "
            "release; state: open keeps it checkable against a base release"
        )
    if target and "." not in symbol and symbol != "TODO":
        header_notes.append(
            f"target.symbol: {symbol} as the diff names it; the diff does not "
            f"show its class (qualify a method: Class.{symbol})"
        )
    if symbol.rsplit(".", 1)[-1] in ENTRY_SYMBOLS:
        entry, prop = ENTRY_SYMBOLS[symbol.rsplit(".", 1)[-1]]
        header_notes.append(
            f"target.symbol: build() alone never calls {symbol}: a check "
            f"needs a case with `entry: {entry}` (or the invariant {prop})"
        )
    return checked(
        draft_yaml(data_out, source, origin=ORIGIN, notes=tuple(header_notes)), pr["number"], source
    )
