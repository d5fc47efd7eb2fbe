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


class ReportImportError(Exception):
    """A report that cannot give a draft record; the message says why and where."""


# ------------------------------------------------------------------------ claims

# Words that make a sentence a checkable claim, and the kind of check each suggests.
_CHECKABLE = [
    ("equivalence: build() returns the same metadata as on the base release, on named cases",
     ("无行为变化", "行为不变", "行为一致", "等价", "no behaviour change", "no behavior change", "no functional change",
      "same output", "same result", "equivalent", "unchanged", "behavior is preserved", "behaviour is preserved",
      "matches the")),
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


def draft_claims(sources: list[tuple[str, str]], origin: str = "the report") -> list[dict]:
    """One TODO claim per checkable sentence of (text, where) sources; ``where`` becomes its ``source``.

    When no sentence names an effect, every sentence is a candidate claim; when
    there is no sentence at all, one TODO claim says that ``origin`` states none.
    """
    candidates = [(sentence, where) for text, where in sources for sentence in sentences(text)]
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
    pr, ids = data["pr"], [c["id"] for c in data["claims"]]
    releases = "target.base_release" if pr.get("state") == "open" else "target.base_release, target.head_release"
    header = [
        f"# DRAFT record of PR #{pr['number']} ({printable(pr['repo'])}), imported by `gdn-review import`",
        f"# from {printable(source) or '(unnamed report)'}.",
        "# A draft loads but is not yet checkable: `gdn-review validate` lists its open",
        "# TODOs and exits 1; `gdn-review generate` skips it. Open TODOs:",
        f"#   - {releases}: not in {origin}",
        f"#   - claims {', '.join(ids) if len(ids) <= 8 else f'{ids[0]}..{ids[-1]}'}: each check is `kind: TODO`",
        "#   - cases: none yet; risks name no cases or claims yet",
    ]
    if "TODO" in (data["target"]["file"], data["target"]["symbol"]):
        header.append(f"#   - target.file / target.symbol: not found in {origin} (they say TODO)")
    header.extend(f"#   - {printable(note)}" for note in notes)
    lines = [comment for line in body.split("\n") for comment in ([_KEY_COMMENTS[line]] if line in _KEY_COMMENTS else []) + [line]]
    return "\n".join(header) + "\n" + "\n".join(lines)


def checked(text: str, number: int, source: str) -> str:
    """``text`` once it loads as the record of PR ``number``; an internal error otherwise."""
    try:
        parse_record(text, f"{number}.yaml")
    except RecordErrors as failure:
        raise ReportImportError(f"{source}: internal error: the draft of PR #{number} does not load:\n{failure}") from None
    return text
