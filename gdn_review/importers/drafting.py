"""What every importer drafts the same way: TODO claims from sentences, the draft's YAML text.

An importer reads its format (a markdown review report: review_report.py; gh's
JSON of a pull request: gh_pr.py) into plain data and (text, where) sources of
claims. This module turns each checkable sentence into a claim whose check is
``kind: TODO`` with a hint at the check that fits, and the data into the
draft's text: a header naming the open TODOs, comments before the top-level
keys, multi-line strings (code) as literal blocks; then checks that the text
loads as a record. Nothing here reads or writes a file.
"""

from __future__ import annotations

import re

import yaml

from gdn_review.kb.errors import RecordErrors
from gdn_review.kb.load import parse_record
from gdn_review.kb.subjects import OPEN_STATES


class ReportImportError(Exception):
    """A report that cannot give a draft record; the message says why and where."""


# ------------------------------------------------------------------------ claims

# Words that make a sentence a checkable claim, and the kind of check each suggests.
_CHECKABLE = [
    ("equivalence: build() returns the same metadata as on the base release, on named cases",
     ("无行为变化", "行为不变", "行为一致", "等价", "no behaviour change", "no behavior change", "no functional change",
      "same output", "same result", "equivalent", "unchanged", "behavior is preserved", "behaviour is preserved",
      "matches the", "preserve", "remains")),
    ("op_budget: count the aten ops build() runs (for example aten.ge) on the cases where this applies",
     ("计算", "次", "冗余", "重复", "once", "twice", "times", "compute", "redundant", "duplicate")),
    ("gpu_sync: count host-device synchronisations in build() (CUDA only)",
     ("同步", "内核启动", "sync", "kernel launch", "device-to-host", "host-to-device")),
    ("latency or gpu_sync: a unit check measures the mechanism; an end-to-end figure belongs to a serving benchmark",
     ("性能", "吞吐", "延迟", "加速", "performance", "throughput", "latency", "faster", "speedup", "speed-up")),
]
FALLBACK_HINT = "which check (op_budget, equivalence, invariant, gpu_sync) can test this sentence?"
# A sentence ends at 。！？, or at .!? before a space or the end; never inside `code`.
_SENTENCE = re.compile(r"(?:`[^`]*`?|[^`。！？.!?]|[.!?](?=[^ \t\n]))*(?:[。！？]|[.!?](?=[ \t\n]|$))?")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if any(ch.isalnum() for ch in s)]


def hint(sentence: str) -> str | None:
    """The checks a sentence's words suggest, or None when it names no checkable effect."""
    lowered = sentence.lower()
    return "; or ".join(text for text, words in _CHECKABLE if any(word in lowered for word in words)) or None


# A PR named in a sentence (``#53426``, a pull link): the sentence is about that PR.
PR_REFERENCE = re.compile(r"(?<![\w&#/])#(\d{1,12})(?!\d)|/pulls?/(\d{1,12})(?!\d)")


def names_other_pr(sentence: str, own: int | None) -> bool:
    """The sentence names a PR other than ``own``: it speaks of that PR's change, not this one's."""
    return any(int(m.group(1) or m.group(2)) != own for m in PR_REFERENCE.finditer(sentence))


def draft_claims(sources: list[tuple[str, str]], origin: str = "the report", own: int | None = None) -> list[dict]:
    """One TODO claim per checkable sentence of (text, where) sources; ``where`` becomes its ``source``.

    A sentence that names another PR than ``own`` is about that PR (it becomes a
    related entry elsewhere), never a claim. When no sentence names an effect,
    every sentence is a candidate claim; when there is no sentence at all, one
    TODO claim says that ``origin`` states none.
    """
    candidates = [(sentence, where) for text, where in sources for sentence in sentences(text) if not names_other_pr(sentence, own)]
    checkable = [(s, w, hint(s)) for s, w in candidates if hint(s)]
    if not checkable:
        checkable = [(s, w, FALLBACK_HINT) for s, w in candidates]
    claims: list[dict] = []
    seen: set[str] = set()
    for sentence, where, suggested in checkable:
        if sentence not in seen:
            seen.add(sentence)
            claims.append({"id": f"C{len(claims) + 1}", "text": sentence, "source": where, "check": {"kind": "TODO", "hint": suggested}})
    return claims or [{
        "id": "C1",
        "text": f"TODO: {origin} states no claim that could be found; write what the PR claims.",
        "source": "(none found)",
        "check": {"kind": "TODO", "hint": FALLBACK_HINT},
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


def printable(value: str) -> str:
    """A string safe to put into a YAML comment (one line, printable)."""
    return "".join(ch if ch.isprintable() else "?" for ch in value)


def draft_yaml(data: dict, source: str, origin: str = "the report", notes: tuple[str, ...] = ()) -> str:
    """The draft's text: a header of open TODOs (plus ``notes``), then the data with comments before its keys."""
    for dumper in (_Dumper, yaml.SafeDumper):  # literal blocks read best; plain dumping is the fallback
        body = yaml.dump(data, Dumper=dumper, allow_unicode=True, sort_keys=False, default_flow_style=False, width=2**30)
        if yaml.safe_load(body) == data:
            break
    else:
        raise ReportImportError(f"{source}: internal error: the draft does not read back as written (please report this)")
    pr = data["pr"]
    items = open_todos(body, pr["number"], source)
    header = [
        f"# DRAFT record of PR #{pr['number']} ({printable(pr['repo'])}), imported by `gdn-review import`",
        f"# from {printable(source) or '(unnamed report)'}.",
        "# A draft loads but is not yet checkable: `gdn-review validate` lists its open",
        f"# TODOs and exits 1; `gdn-review generate` skips it. Open TODOs ({len(items)}, not in {printable(origin)}):",
    ]
    header.extend(f"#   - {printable(item)}" for item in items)
    header.append("# Also to write: the cases (named batches) and, per risk, the cases and claims that address it.")
    header.extend(f"# Note: {printable(note)}" for note in notes)
    comments = dict(_KEY_COMMENTS)
    if pr.get("state") in OPEN_STATES:  # no release has its change: a base release only
        comments["target:"] = "# TODO: target.base_release (the vLLM release the open PR's claims are checked against; it has no head release)."
    lines = [comment for line in body.split("\n") for comment in ([comments[line]] if line in comments else []) + [line]]
    return "\n".join(header) + "\n" + "\n".join(lines)


def open_todos(text: str, number: int, source: str) -> list[str]:
    """The draft's open items, as `gdn-review validate` and the import's count name them (one line each)."""
    from gdn_review.kb.completeness import open_items

    try:
        record = parse_record(text, f"{number}.yaml")
    except RecordErrors as failure:
        raise ReportImportError(f"{source}: internal error: the draft of PR #{number} does not load:\n{failure}") from None
    return [message.removeprefix("TODO: ") for _, message in open_items(record)]


def checked(text: str, number: int, source: str) -> str:
    """``text`` once it loads as the record of PR ``number``; an internal error otherwise."""
    try:
        parse_record(text, f"{number}.yaml")
    except RecordErrors as failure:
        raise ReportImportError(f"{source}: internal error: the draft of PR #{number} does not load:\n{failure}") from None
    return text
