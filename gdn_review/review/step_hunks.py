"""A release step's diff of the builder's files, and each hunk's attribution.

The files are GDN's ``gdn_attn.py`` and every file that defines a subclass of its builder in
either release (``kb.builder_family.scan_tree``: the family as the releases' own sources say).
``step_diff`` writes them as one git-style unified diff (what ``review`` applies onto the older
release); ``attribute`` ties each hunk to the ``kb/history/changes.yaml`` entries of the newer
release whose ``hunks:`` name one of its changed lines; ``draft_entries`` drafts an entry for
each hunk and metadata field no entry explains, with the terms to search the PR threads for.
Nothing here imports vLLM: the releases are read as text.
"""

from __future__ import annotations

import difflib
import keyword
import re
from pathlib import Path
from typing import Callable

from gdn_review.common import unified_diff
from gdn_review.kb.builder_family import scan_tree
from gdn_review.mutation.family import GDN_FILE

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
# Names too common in the builder to find a PR by.
_COMMON = frozenset(
    {"self", "torch", "None", "True", "False", "return", "device", "tensor", "Tensor", "dtype"}
    | set(keyword.kwlist)
)


def family_paths(trees: list[Path]) -> list[str]:
    """``vllm/...py`` of GDN's file and of every file defining a builder of its family, in any of
    the trees (each the folder holding ``vllm/``)."""
    found = {GDN_FILE}
    for tree in trees:
        for module, _ in scan_tree(tree / "vllm").values():
            found.add(module.replace(".", "/") + ".py")
    return sorted(found)


def step_diff(paths: list[str], read_old: Callable, read_new: Callable) -> str:
    """The unified diff (``git diff`` form, 3 lines of context) of ``paths`` from the old release
    to the new (``read_*``: relative path -> text, None where the release has no such file)."""
    parts = []
    for path in paths:
        old, new = read_old(path), read_new(path)
        if old == new:
            continue
        old_lines = (old or "").splitlines(keepends=True)
        new_lines = (new or "").splitlines(keepends=True)
        body = list(
            difflib.unified_diff(
                old_lines,
                new_lines,
                "/dev/null" if old is None else f"a/{path}",
                "/dev/null" if new is None else f"b/{path}",
                n=3,
            )
        )
        head = [f"diff --git a/{path} b/{path}\n"]
        if old is None:
            head.append("new file mode 100644\n")
        elif new is None:
            head.append("deleted file mode 100644\n")
        for line in body:
            if not line.endswith("\n"):
                line += "\n\\ No newline at end of file\n"
            head.append(line)
        parts.append("".join(head))
    return "".join(parts)


def split_by_file(text: str) -> dict[str, str]:
    """Each file's part of a ``step_diff`` text, by its path (``unified_diff`` reads it)."""
    lines = text.splitlines(keepends=True)
    files = unified_diff.read_diff(text, "step diff")
    starts = [file.line - 1 for file in files] + [len(lines)]
    return {file.path: "".join(lines[a:b]) for file, a, b in zip(files, starts, starts[1:])}


def hunks(text: str, name: str = "step diff") -> list[dict]:
    """Every hunk of the diff: file, number, header, the lines it removes and adds."""
    rows = []
    for file in unified_diff.read_diff(text, name):
        for hunk in file.hunks:
            rows.append(
                {
                    "file": file.path,
                    "number": hunk.number,
                    "header": hunk.header.strip(),
                    "old_start": hunk.old_start,
                    "new_start": hunk.new_start,
                    "removed": [line[1:] for line in hunk.lines if line[:1] == "-"],
                    "added": [line[1:] for line in hunk.lines if line[:1] == "+"],
                }
            )
    return rows


def _label(change) -> str:
    if change.pr is not None:
        return f"PR #{change.pr.number} ({change.pr.evidence})"
    return f"changes.yaml {change.id}" if change.id else f"changes.yaml: {change.what[:60]}"


def attribute(rows: list[dict], changes: list, release: str) -> list[dict]:
    """Each hunk with ``by``: the entries of ``release`` in kb/history/changes.yaml whose
    ``hunks:`` name one of its changed lines (empty: unexplained)."""
    notes = [c for c in changes if str(c.release) == str(release)]
    out = []
    for row in rows:
        changed = [line.strip() for line in row["removed"] + row["added"]]
        by = [_label(c) for c in notes if any(t.matches(row["file"], changed) for t in c.hunks)]
        out.append({**row, "by": by})
    return out


def search_terms(row: dict) -> list[str]:
    """What to search the PR threads for, for one hunk: the names its added lines bring in (or
    its removed lines take out), the file's name, and its first changed line verbatim."""
    added = {m.group(0) for line in row["added"] for m in _NAME.finditer(line)}
    removed = {m.group(0) for line in row["removed"] for m in _NAME.finditer(line)}
    new = sorted((added - removed) or (removed - added), key=lambda n: (-len(n), n))
    names = [n for n in new if n not in _COMMON][:4]
    stem = Path(row["file"]).stem
    terms = [f"{' '.join(names)} {stem}".strip()] if names else []
    first = next((line.strip() for line in row["added"] + row["removed"] if line.strip()), "")
    if first:
        terms.append(first[:120])
    return terms


def _specific(line: str) -> set[str]:
    """The names in a line that look like code (snake_case or CamelCase), not words."""
    return {
        n
        for n in _NAME.findall(line)
        if n not in _COMMON and len(n) >= 6 and ("_" in n.strip("_") or n[1:] != n[1:].lower())
    }


def tie_line(row: dict) -> str:
    """The changed line a ``hunks:`` tie quotes: the one (code before comments) carrying the most
    code-like names."""
    lines = [x.strip() for x in row["added"] + row["removed"] if x.strip()]
    if not lines:
        return ""
    return max(lines, key=lambda x: (not x.startswith("#"), len(_specific(x)), len(x)))


def candidates(row: dict, changes: list, release: str) -> list[str]:
    """The entries of ``release`` whose text names a code name the hunk's changed lines carry:
    where its ``hunks:`` tie may belong (a hint for the draft, never an attribution); most
    shared names first, at most two."""
    names = set().union(*(_specific(x) for x in row["added"] + row["removed"]))
    scored = []
    for change in changes:
        if str(change.release) != str(release):
            continue
        shared = names & _specific(change.what)
        if shared:
            label = change.id or (f"PR #{change.pr.number}" if change.pr else change.what[:40])
            scored.append((-len(shared), label))
    return [label for _, label in sorted(scored)[:2]]


def draft_entries(
    hunk_rows: list[dict], fields: list[dict], release: str, changes: list = ()
) -> list[dict]:
    """A draft changes.yaml entry per unexplained hunk (tied by ``hunks:``) and per metadata field
    that came or went with no entry behind it; ``to_search``: what to search for its PR, then
    ``pr:`` or ``searched:`` (validate refuses an entry with neither); ``candidates``: entries of
    the release that already name what the hunk carries (add the ``hunks:`` tie there instead)."""
    drafts = []
    for row in hunk_rows:
        if row["by"]:
            continue
        line = tie_line(row)
        draft = {
            "release": str(release),
            "what": f"TODO: what {row['file']} hunk {row['number']} ({row['header']}) changes",
            "hunks": [{"file": row["file"], "line": line}],
            "to_search": search_terms(row),
        }
        if found := candidates(row, changes, release):
            draft["candidates"] = found
        drafts.append(draft)
    for field in fields:
        drafts.append(
            {
                "release": str(release),
                "what": f"TODO: the metadata field {field['field']} {field['how']}",
                "fields": [field["field"]],
                "to_search": [f"{field['field']} GDN metadata"],
            }
        )
    return drafts
