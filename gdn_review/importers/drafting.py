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

from gdn_review.kb.completeness import open_items
from gdn_review.kb.errors import RecordErrors
from gdn_review.kb.load import parse_record
from gdn_review.kb.subjects import OPEN_STATES


class ReportImportError(Exception):
    """A report that cannot give a draft record; the message says why and where."""


# ------------------------------------------------------------------------ claims

# Words that make a sentence a checkable claim, and the kind of check each suggests.
_CHECKABLE = [
    (
        "equivalence: build() returns the same metadata as on the base release, on named cases",
        (
            "无行为变化",
            "行为不变",
            "行为一致",
            "等价",
            "no behaviour change",
            "no behavior change",
            "no functional change",
            "same output",
            "same result",
            "equivalent",
            "unchanged",
            "behavior is preserved",
            "behaviour is preserved",
            "matches the",
            "preserve",
            "remains",
        ),
    ),
    (
        "op_budget: count the aten ops build() runs (for example "
        "aten.ge) on the cases where this applies",
        (
            "计算",
            "次",
            "冗余",
            "重复",
            "once",
            "twice",
            "times",
            "compute",
            "redundant",
            "duplicate",
        ),
    ),
    (
        "gpu_sync: count host-device synchronisations in build() (CUDA only)",
        ("同步", "内核启动", "sync", "kernel launch", "device-to-host", "host-to-device"),
    ),
    (
        "latency or gpu_sync: a unit check measures the mechanism; an "
        "end-to-end figure belongs to a serving benchmark",
        (
            "性能",
            "吞吐",
            "延迟",
            "加速",
            "performance",
            "throughput",
            "latency",
            "faster",
            "speedup",
            "speed-up",
        ),
    ),
]
FALLBACK_HINT = "which check (op_budget, equivalence, invariant, gpu_sync) can test this sentence?"
# A sentence ends at 。！？, or at .!? before a space or the end; never inside `code`.
_SENTENCE = re.compile(
    r"(?:`[^`]*`?|[^`。！？.!?]|[.!?](?=[^ \t\n]))*(?:[。！？]|[.!?](?=[ \t\n]|$))?"
)

# Sentences of three shapes get a hint of their own (and a source that quotes them),
# in place of the general hint of the same kind above (_CHECKABLE's entry at _REPLACES).
LATENCY_HINT = (
    "latency: a latency claim, measured by `gdn-review bench` "
    "(build() timed A/B, base release against head, "
    "on named cases: check {kind: latency, cases: [...]}); an "
    "end-to-end throughput figure needs a serving benchmark"
)
MOVES_HINT = (
    "op_budget: what moves: the computation it names is counted once "
    "per step (an op budget per step), "
    "not once per group's build()"
)
STAYS_HINT = (
    "equivalence: what stays: each group's metadata equals today's "
    "build() (equivalence on named cases)"
)
# A timing (~900µs, 0.3 ms, from 900us to 300us): a latency claim by itself.
_TIMING = re.compile(
    r"(?<![\w.])~?\d+(?:[.,]\d+)?\s?(?:µs|μs|us|ms|ns|microseconds?|milliseconds?)(?![A-Za-z])"
)
# A percentage or a factor (61%, 1.5x) is one when the sentence speaks of speed
# (improves 61%, 吞吐量约有 1% 的提升).
_FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:%|[x×](?![\w]))")
_SPEED_WORDS = (
    "throughput",
    "latency",
    "faster",
    "slower",
    "speedup",
    "speed-up",
    "speeds up",
    "improve",
    "reduc",
    "e2e",
    "end-to-end",
    "takes",
    "吞吐",
    "延迟",
    "加速",
    "提升",
    "降低",
    "减少",
)
# What moves out of each group's build() (computed once per step instead), lowercase.
_MOVES = re.compile(
    r"\bmov(?:e|es|ed|ing)\b.{0,120}?\bout of\b|\b(?:once|one time) "
    r"(?:per|each|a) (?:step|batch|forward|iteration)\b"
    r"|\binstead of "
    r"(?:re-?)?comput\w*\b.{0,60}?\b(?:in|inside|for|per) "
    r"(?:each|every)\b|\bhoist(?:s|ed|ing)?\b"
    r"|\bone level up\b|移出|每步一次|每个 ?step 一次"
)
# What stays in each group's build(), lowercase.
_STAYS = re.compile(
    r"\b(?:stay|stays|stayed|remain|remains|is kept|are "
    r"kept|keep|keeps)\b.{0,40}?\bper[- ]?(?:group|layer|build)\b"
    r"|\bper[- ]?group\b.{0,40}?\b(?:stay|stays|remain|remains)\b|仍在每个|保留在每个"
)
_REPLACES = {LATENCY_HINT: 3, MOVES_HINT: 1, STAYS_HINT: 0}  # the general hint each one replaces
_QUOTE_LIMIT = 300


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if any(ch.isalnum() for ch in s)]


def shaped_hints(sentence: str) -> list[str]:
    """The hints of the sentence's shapes: a timing or speed figure, what moves, what stays (in that
    order)."""
    lowered = sentence.lower()
    found = []
    if _TIMING.search(sentence) or (
        _FIGURE.search(sentence) and any(word in lowered for word in _SPEED_WORDS)
    ):
        found.append(LATENCY_HINT)
    if _MOVES.search(lowered):
        found.append(MOVES_HINT)
    if _STAYS.search(lowered):
        found.append(STAYS_HINT)
    return found


def hint(sentence: str) -> str | None:
    """The checks a sentence's words suggest, or None when it names no checkable effect."""
    lowered = sentence.lower()
    shaped = shaped_hints(sentence)
    replaced = {_REPLACES[text] for text in shaped}
    general = [
        text
        for index, (text, words) in enumerate(_CHECKABLE)
        if index not in replaced and any(word in lowered for word in words)
    ]
    return "; or ".join(shaped + general) or None


def quoted(where: str, sentence: str) -> str:
    """``where: 'sentence'`` (cut at 300 characters): the source of a claim whose text a reviewer
    will rewrite."""
    return f"{where}: '{cut(sentence)}'"


def cut(sentence: str) -> str:
    """The sentence, cut at 300 characters (an ellipsis its last)."""
    return sentence if len(sentence) <= _QUOTE_LIMIT else sentence[: _QUOTE_LIMIT - 1] + "…"


# A PR named in a sentence (``#53426``, a pull link): the sentence is about that PR.
PR_REFERENCE = re.compile(r"(?<![\w&#/])#(\d{1,12})(?!\d)|/pulls?/(\d{1,12})(?!\d)")


def names_other_pr(sentence: str, own: int | None) -> bool:
    """The sentence names a PR other than ``own``: it speaks of that PR's change, not this one's."""
    return any(int(m.group(1) or m.group(2)) != own for m in PR_REFERENCE.finditer(sentence))


def draft_claims(
    sources: list[tuple[str, str]], origin: str = "the report", own: int | None = None
) -> list[dict]:
    """One TODO claim per checkable sentence of (text, where) sources; ``where`` becomes its
    ``source``.

    A sentence with a timing or a speed figure (a latency claim), one that says
    what moves out of each group's build() or what stays in it gets the hint of
    its shape, and its ``source`` quotes it (``where: 'sentence'``): its text is
    what the PR says, the claim a reviewer writes from it is narrower. A
    sentence is drafted once, even when it has several shapes or sources.

    A sentence that names another PR than ``own`` is about that PR (it becomes a
    related entry elsewhere), never a claim. When no sentence names an effect,
    every sentence is a candidate claim; when there is no sentence at all, one
    TODO claim says that ``origin`` states none.
    """
    candidates = [
        (sentence, where)
        for text, where in sources
        for sentence in sentences(text)
        if not names_other_pr(sentence, own)
    ]
    checkable = [(s, w, hint(s)) for s, w in candidates if hint(s)]
    if not checkable:
        checkable = [(s, w, FALLBACK_HINT) for s, w in candidates]
    claims: list[dict] = []
    seen: set[str] = set()
    for sentence, where, suggested in checkable:
        if sentence not in seen:  # one claim per sentence, however many sources repeat it
            seen.add(sentence)
            source = quoted(where, sentence) if shaped_hints(sentence) else where
            claims.append(
                {
                    "id": f"C{len(claims) + 1}",
                    "text": sentence,
                    "source": source,
                    "check": {"kind": "TODO", "hint": suggested},
                }
            )
    return claims or [
        {
            "id": "C1",
            "text": f"TODO: {origin} states no claim that could be found; write what "
            "the PR claims.",
            "source": "(none found)",
            "check": {"kind": "TODO", "hint": FALLBACK_HINT},
        }
    ]


# ------------------------------------------------------------------------ output


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (readable code snippets); no anchors."""

    def ignore_aliases(self, data) -> bool:
        return True


_Dumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    ),
)

# Comments put before top-level keys (lines at column 0 are top-level keys only).
_KEY_COMMENTS = {
    "target:": "# TODO: target.base_release (last vLLM release without the PR) "
    "and target.head_release (first with it).",
    "claims:": "# TODO: replace each `kind: TODO` check with op_budget, "
    "equivalence, invariant or gpu_sync (see its hint).",
    "cases: []": "# TODO: the named batches (cases) the checks run on.",
    "risks:": "# TODO: tie each risk to the cases and claims that address it.",
    "report:": "# What the review report says, kept for people. Code snippets "
    "are reference text: never run, never rendered.",
}


def printable(value: str) -> str:
    """A string safe to put into a YAML comment (one line, printable)."""
    return "".join(ch if ch.isprintable() else "?" for ch in value)


def draft_yaml(
    data: dict, source: str, origin: str = "the report", notes: tuple[str, ...] = ()
) -> str:
    """The draft's text: a header of open TODOs (plus ``notes``), then the data with comments before
    its keys."""
    # literal blocks read best; plain dumping is the fallback
    for dumper in (_Dumper, yaml.SafeDumper):
        body = yaml.dump(
            data,
            Dumper=dumper,
            allow_unicode=True,
            sort_keys=False,
            default_flow_style=False,
            width=2**30,
        )
        if yaml.safe_load(body) == data:
            break
    else:
        raise ReportImportError(
            f"{source}: internal error: the draft does not read back as "
            "written (please report this)"
        )
    pr = data["pr"]
    items = open_todos(body, pr["number"], source)
    header = [
        f"# DRAFT record of PR #{pr['number']} ({printable(pr['repo'])}), "
        "imported by `gdn-review import`",
        f"# from {printable(source) or '(unnamed report)'}.",
        "# A draft loads but is not yet checkable: `gdn-review validate` lists its open",
        "# TODOs and exits 1; `gdn-review generate` skips it. Open TODOs "
        f"({len(items)}, not in {printable(origin)}):",
    ]
    header.extend(f"#   - {printable(item)}" for item in items)
    header.append(
        "# Also to write: the cases (named batches) and, per risk, the "
        "cases and claims that address it."
    )
    header.extend(f"# Note: {printable(note)}" for note in notes)
    comments = dict(_KEY_COMMENTS)
    if pr.get("state") in OPEN_STATES:  # no release has its change: a base release only
        comments["target:"] = (
            "# TODO: target.base_release (the vLLM release the open PR's "
            "claims are checked against; it has no head release)."
        )
    lines = [
        comment
        for line in body.split("\n")
        for comment in ([comments[line]] if line in comments else []) + [line]
    ]
    return "\n".join(header) + "\n" + "\n".join(lines)


def open_todos(text: str, number: int, source: str) -> list[str]:
    """The draft's open items, as `gdn-review validate` and the import's count name them (one line
    each)."""
    return [
        message.removeprefix("TODO: ") for _, message in open_items(_loaded(text, number, source))
    ]


def checked(text: str, number: int, source: str) -> str:
    """``text`` once it loads as the record of PR ``number``; an internal error otherwise."""
    _loaded(text, number, source)
    return text


def _loaded(text: str, number: int, source: str):
    """The draft as a record (an importer's draft always loads: an internal error otherwise)."""
    try:
        return parse_record(text, f"{number}.yaml")
    except RecordErrors as failure:
        raise ReportImportError(
            f"{source}: internal error: the draft of PR #{number} does not load:\n{failure}"
        ) from None
