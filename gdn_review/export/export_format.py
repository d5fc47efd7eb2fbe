"""Python source as ``ruff format`` writes it at vLLM's settings, for ``gdn-review export``.

Literals (strings, numbers, lists, dicts, calls) laid out to line length 88
with double quotes and magic trailing commas, and docstrings wrapped to it, so
an exported module passes ``ruff check`` and ``ruff format --check`` without
running ruff. These functions are how record text becomes source: an escaped
string literal or escaped docstring text, never raw interpolation. Long runs in
plain data (a stored snapshot's padded buffers) are written as starred list
items, ``*[-1] * 2045`` and ``*range(13, 37)`` (``runs``), which evaluate to
the same list.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import unicodedata

WIDTH = 88  # vLLM's ruff line length


# Defined here because the formatter raises it too; callers import it from export.py.
class ExportError(Exception):
    """The record cannot be exported (not found, a draft, nothing applies, bad helpers)."""


@dataclasses.dataclass(frozen=True)
class Code:
    """Source text placed as is inside a literal (a name, ``marks=X``)."""

    text: str


@dataclasses.dataclass(frozen=True)
class Call:
    """A call inside a literal, e.g. ``pytest.param("case", marks=X)``."""

    function: str
    args: tuple


SHORTEST_RUN = 8  # fewer equal or consecutive items stay written out


def _scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, str))


def _counting(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def runs(value, shortest: int = SHORTEST_RUN):
    """``value`` with every run of ``shortest`` or more equal scalars in a list written
    ``*[v] * n``, and every run of consecutive integers ``*range(a, b)`` (recursively).

    The result is laid out by ``literal`` and evaluates to ``value``; a list of
    2048 buffer entries becomes one line instead of 2048.
    """
    if isinstance(value, dict):
        return {key: runs(item, shortest) for key, item in value.items()}
    if not isinstance(value, list):
        return value
    out, index = [], 0
    while index < len(value):
        item, end = value[index], index + 1
        if _scalar(item):
            while end < len(value) and type(value[end]) is type(item) and value[end] == item:
                end += 1
            if end - index >= shortest:
                out.append(Code(f"*[{flat_literal(item)}] * {end - index}"))
                index = end
                continue
            end = index + 1
            while end < len(value) and _counting(item) and _counting(value[end]) and value[end] == value[end - 1] + 1:
                end += 1
            if end - index >= shortest:
                stop = value[end - 1] + 1
                out.append(Code(f"*range({stop})" if item == 0 else f"*range({item}, {stop})"))
                index = end
                continue
        out.append(runs(item, shortest))
        index += 1
    return out


def width(text: str) -> int:
    """Columns a line takes, as ruff counts them (East Asian wide characters: 2)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _escape(text: str, quote: str) -> str:
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == quote:
            out.append("\\" + quote)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif not char.isprintable():
            out.append(repr(char)[1:-1])
        else:
            out.append(char)
    return "".join(out)


def py_str(text: str) -> str:
    """A string literal as ruff writes it: double quotes unless single ones escape less."""
    quote = "'" if text.count('"') > text.count("'") else '"'
    return quote + _escape(text, quote) + quote


def flat_literal(value) -> str:
    """``value`` as a Python literal on one line."""
    if isinstance(value, Code):
        return value.text
    if isinstance(value, Call):
        return value.function + "(" + ", ".join(flat_literal(a) for a in value.args) + ")"
    if isinstance(value, str):
        return py_str(value)
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(flat_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flat_literal(k)}: {flat_literal(v)}" for k, v in value.items()) + "}"
    raise ExportError(f"cannot write {type(value).__name__} as a Python literal")


def _string_pieces(text: str, indent: int) -> list[str]:
    """Split ``text`` at spaces into pieces whose literals fit a line at ``indent``."""
    pieces, current = [], ""
    for token in re.findall(r"\S+\s*|\s+", text):
        if current and indent + width(py_str(current + token)) > WIDTH:
            pieces.append(current)
            current = ""
        word = token.rstrip()
        if not current and word and indent + width(py_str(token)) > WIDTH:
            # A word longer than a line: a piece of its own, without spaces, which
            # ruff's line-length rule lets pass; the spaces go to the next piece.
            pieces.append(word)
            token = token[len(word) :]
        current += token
    pieces.append(current)
    return [piece for piece in pieces if piece]


def literal(value, first: int = 0, indent: int = 0, trail: int = 0, rhs: bool = False) -> str:
    """``value`` (plain data or Code) as Python source laid out as ruff lays it out.

    ``first``: columns taken before the value on its first line; ``indent``: the
    indentation of that line; ``trail``: columns after the value on its last line.
    What fits stays on one line; a collection that does not is split one item a
    line with a trailing comma; a string that does not becomes parenthesized
    pieces (implicit concatenation), split at spaces. ``rhs``: the value is the
    right-hand side of an assignment, which ruff puts in parentheses of its own
    when that makes it fit.
    """
    flat = flat_literal(value)
    if first + width(flat) + trail <= WIDTH:
        return flat
    inner = indent + 4
    pad = " " * inner
    if isinstance(value, str):
        pieces = _string_pieces(value, inner)
        if len(pieces) == 1:
            if rhs and inner + width(flat) <= WIDTH:
                return "(\n" + pad + flat + "\n" + " " * indent + ")"
            return flat  # one word: nothing to split
        body = "\n".join(pad + py_str(piece) for piece in pieces)
        return "(\n" + body + "\n" + " " * indent + ")"
    if isinstance(value, Call):
        # Arguments on one line of their own if they fit there, else one a line.
        joined = ", ".join(flat_literal(a) for a in value.args)
        if inner + width(joined) <= WIDTH:
            return f"{value.function}(\n{pad}{joined}\n" + " " * indent + ")"
        items = [pad + literal(a, inner, inner, 1) + "," for a in value.args]
        return value.function + "(\n" + "\n".join(items) + "\n" + " " * indent + ")"
    if isinstance(value, list) and value:
        items = [pad + literal(v, inner, inner, 1) + "," for v in value]
        return "[\n" + "\n".join(items) + "\n" + " " * indent + "]"
    if isinstance(value, dict) and value:
        items = []
        for key, item in value.items():
            head = pad + flat_literal(key) + ": "
            items.append(head + literal(item, width(head), inner, 1) + ",")
        return "{\n" + "\n".join(items) + "\n" + " " * indent + "}"
    return flat


def assignment(name: str, value) -> str:
    """``NAME = value`` as ruff writes it."""
    return f"{name} = " + literal(value, len(name) + 3, rhs=True)


def _wrap(text: str, first: int, rest: int) -> list[str]:
    """Greedy word wrap: the first line may take ``first`` columns, the others ``rest``."""
    lines, current = [], ""
    for word in text.split():
        limit = first if not lines else rest
        if current and width(current + " " + word) > limit:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return lines


def _doc_text(text: str) -> str:
    """Record text made safe inside a triple-quoted docstring."""
    text = " ".join(text.split())
    out = []
    quotes = 0  # unescaped quotes just written: a third would close the docstring
    for index, char in enumerate(text):
        quotes = quotes + 1 if char == '"' else 0
        if char == "\\":
            out.append("\\\\")
        elif char == '"' and (quotes == 3 or index == len(text) - 1):
            out.append('\\"')
            quotes = 0
        elif not char.isprintable():
            out.append(repr(char)[1:-1])
        else:
            out.append(char)
    return "".join(out)


def docstring(paragraphs: list[str], indent: int = 0) -> str:
    """A docstring: paragraphs wrapped to the line length, record text escaped.

    Each paragraph is a string (wrapped) or a list of strings (one line each,
    wrapped with a hanging indent of two spaces).
    """
    pad = " " * indent
    lines: list[str] = []
    for number, paragraph in enumerate(paragraphs):
        if number:
            lines.append("")
        entries = [paragraph] if isinstance(paragraph, str) else paragraph
        for entry in entries:
            hang = "" if isinstance(paragraph, str) else "  "
            first = WIDTH - indent - (3 if not lines else 0)
            wrapped = _wrap(_doc_text(entry), first, WIDTH - indent - len(hang))
            lines.extend([wrapped[0], *(hang + line for line in wrapped[1:])])
    if len(lines) == 1 and indent + width(lines[0]) + 6 <= WIDTH:
        return f'"""{lines[0]}"""'
    body = "\n".join(pad + line if line else "" for line in lines[1:])
    return f'"""{lines[0]}\n{body}\n{pad}"""' if body else f'"""{lines[0]}\n{pad}"""'


def import_sections(statements: list[str]) -> tuple[list[str], list[str]]:
    """Import lines as ruff's isort writes them: stdlib, then third-party; in each,
    ``import x`` lines first, then ``from x import ...`` (one line per module)."""
    plain: dict[bool, set[str]] = {True: set(), False: set()}
    froms: dict[bool, dict[str, set[str]]] = {True: {}, False: {}}
    for statement in statements:
        words = statement.split()
        stdlib = words[1].split(".")[0] in sys.stdlib_module_names
        if words[0] == "import":
            plain[stdlib].add(words[1])
        else:
            froms[stdlib].setdefault(words[1], set()).add(" ".join(words[3:]))
    sections = []
    for stdlib in (True, False):
        lines = [f"import {module}" for module in sorted(plain[stdlib])]
        lines += [f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(froms[stdlib].items())]
        sections.append(lines)
    return sections[0], sections[1]
