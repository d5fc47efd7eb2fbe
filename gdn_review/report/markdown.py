"""Text from records, diffs and PR threads, made safe to show in markdown (reports, PR comments).

Strangers write much of what a report shows: a diff's file names, a PR's
title, a thread's sentences. Shown raw, a ``|`` breaks a table, ``<img ...>``
or ``<details>`` injects HTML, ``[x](https://...)`` a link, ``@someone`` a
mention, and three backticks close a code block. Every string that did not come
from gdn-review's own code passes through one of these before it reaches
markdown:

- ``text``: plain text, every markdown and HTML character escaped;
- ``code``: inline code (a file name, a symbol), fenced with enough backticks;
- ``cell``: a record's prose, which may hold `code spans`: kept as code,
  everything outside them escaped as ``text`` is, ``|`` escaped, newlines as
  ``<br>``;
- ``fence``: a block of code (a mutant's diff) that nothing inside can close.
"""

from __future__ import annotations

import re

# Characters that start markup in running text (links, images, HTML, tables,
# code, emphasis); a backslash escapes any ASCII punctuation in CommonMark.
_MARKUP = set("\\`*_[]|~")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# GitHub links bare URLs (scheme: or www.) and notifies @names: both are broken
# by an escape (\:, www\.) or a zero-width space after the @, invisible when shown.
_AUTOLINK = re.compile(r"(?i)\b(https?|ftp|mailto|javascript|data|file|vbscript)(:)|\b(www)(\.)")
_MENTION = "@\u200b"


def _one_line(value) -> str:
    text = "" if value is None else str(value)
    return "".join(" " if ch in "\r\n\t" or ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)


def _escape(line: str, markup: set[str]) -> str:
    out = []
    for index, ch in enumerate(line):
        following = line[index + 1 : index + 2]
        # "<" only where HTML would start a tag or comment: "<= 1" stays readable.
        if ch == "<" and (following.isalpha() or following in ("/", "!", "?")):
            out.append("&lt;")
        elif ch == "&" and (following.isalnum() or following == "#"):
            out.append("&amp;")  # only where it could start an entity
        elif ch in markup:
            out.append("\\" + ch)
        elif ch == "@":
            out.append(_MENTION)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(" ")
        else:
            out.append(ch)
    return _AUTOLINK.sub(
        lambda m: f"{m.group(1) or m.group(3)}\\{m.group(2) or m.group(4)}", "".join(out)
    )


def text(value) -> str:
    """``value`` as plain text on one line: nothing in it is read as markdown or HTML, links or
    mentions."""
    return _escape(_one_line(value), _MARKUP).strip()


def code(value) -> str:
    """``value`` as inline code on one line, safe in a table cell."""
    body = _one_line(value).replace("|", "\\|")  # GFM splits cells on | even inside code spans
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"


def cell(value) -> str:
    """A record's prose in a table cell: its `code spans` kept, the rest escaped, newlines as
    ``<br>``."""
    source = "" if value is None else str(value)
    pieces, at = [], 0
    for match in _CODE_SPAN.finditer(source):
        pieces.append(_prose(source[at : match.start()]))
        pieces.append(code(match.group(2).strip()))
        at = match.end()
    pieces.append(_prose(source[at:]))
    return "".join(pieces).strip()


def _prose(value: str) -> str:
    # Emphasis stays (harmless, and records use `_` in names); links, HTML and table pipes do not
    # work.
    lines = value.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "<br>".join(_escape(line, set("\\[]|`")) for line in lines)


def fence(value: str, info: str = "") -> list[str]:
    """``value`` as a fenced code block whose fence no line inside can close."""
    body = "" if value is None else str(value).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`{3,}", body)), default=2)
    ticks = "`" * (longest + 1)
    return [f"{ticks}{info}", body, ticks]
