"""Plain data as Python source, in the two styles gdn-review writes modules in.

One layout, two styles: ``GENERATED`` (generated_tests/: ``repr`` strings, dict keys
sorted, lines of 100 columns, the project's ruff settings) and ``RUFF`` (exported modules:
double quotes, keys in their order, lines of 88 columns, vLLM's settings). Either way a
value that does not fit is laid out as ``ruff format`` lays it out (a collection one item
a line with magic trailing commas, a long string split at spaces, docstrings wrapped), so
a module passes ``ruff check`` without running ruff, and an exported one ``ruff format
--check`` too.

This is how record text becomes source: an escaped string literal or escaped
docstring text, never raw interpolation. Long runs in plain data (a stored
snapshot's padded buffers) can be written as starred list items, ``*[-1] * 2045``
and ``*range(13, 37)`` (``Style.runs``), which evaluate to the same list.
"""

from __future__ import annotations

import dataclasses
import math
import re
import unicodedata
from typing import Callable


class LiteralError(Exception):
    """A value that has no Python literal (an object of another type, a float that is
    not finite); each stage says it as its own error."""


@dataclasses.dataclass(frozen=True)
class Code:
    """Source text placed as is inside a literal (a name, ``marks=X``)."""

    text: str


@dataclasses.dataclass(frozen=True)
class Call:
    """A call inside a literal, e.g. ``pytest.param("case", marks=[...])``: its arguments,
    then its keyword arguments (values laid out as the rest of the literal)."""

    function: str
    args: tuple
    keywords: dict = dataclasses.field(default_factory=dict)

    def items(self) -> list[tuple[str, object]]:
        """Its arguments as (prefix, value): "" for a positional one, "name=" for a keyword."""
        return [("", a) for a in self.args] + [(f"{k}=", v) for k, v in self.keywords.items()]


SHORTEST_RUN = 8  # fewer equal or consecutive items stay written out


def display_width(text: str) -> int:
    """Columns a line takes, as ruff counts them (East Asian wide characters: 2)."""
    if text.isascii():  # nearly every line: one column a character
        return len(text)
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


def ruff_string(text: str) -> str:
    """A string literal as ruff writes it: double quotes unless single ones escape less."""
    quote = "'" if text.count('"') > text.count("'") else '"'
    return quote + _escape(text, quote) + quote


def _scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, str))


def _counting(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _wrap(text: str, first: int, rest: int, columns: Callable[[str], int]) -> list[str]:
    """Greedy word wrap: the first line may take ``first`` columns, the others ``rest``."""
    lines, current = [], ""
    for word in text.split():
        limit = first if not lines else rest
        if current and columns(current + " " + word) > limit:
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


@dataclasses.dataclass(frozen=True)
class Style:
    """How plain data is laid out as source. Every method works in every style."""

    line_length: int
    string: Callable[[str], str]  # a str's literal
    sort_keys: bool  # dict keys sorted by their text; else in insertion order

    def _items(self, value: dict):
        return sorted(value.items(), key=lambda kv: str(kv[0])) if self.sort_keys else value.items()

    def flat(self, value) -> str:
        """``value`` as a Python literal on one line."""
        if isinstance(value, Code):
            return value.text
        if isinstance(value, Call):
            return f"{value.function}({', '.join(k + self.flat(a) for k, a in value.items())})"
        if isinstance(value, str):
            return self.string(value)
        if value is None or isinstance(value, (bool, int)):
            return repr(value)
        if isinstance(value, float) and math.isfinite(value):
            return repr(value)
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(self.flat(v) for v in value) + "]"
        if isinstance(value, dict):
            items = (f"{self.flat(k)}: {self.flat(v)}" for k, v in self._items(value))
            return "{" + ", ".join(items) + "}"
        raise LiteralError(f"cannot write {type(value).__name__} as a Python literal")

    def literal(self, value, first: int = 0, indent: int = 0, trail: int = 0, rhs: bool = False):
        """``value`` (plain data, Code, Call) as Python source (str) laid out in this style.

        ``first``: columns taken before the value on its first line; ``indent``: the
        indentation of that line; ``trail``: columns after the value on its last line.
        What fits stays on one line; a collection that does not is split one item a
        line with a trailing comma; a string that does not becomes parenthesized
        pieces (implicit concatenation), split at spaces. ``rhs``: the
        value is the right-hand side of an assignment, which ruff puts in parentheses
        of its own when that makes it fit.
        """
        flat = self.flat(value)
        if first + display_width(flat) + trail <= self.line_length:
            return flat
        inner = indent + 4
        pad = " " * inner
        close = "\n" + " " * indent
        if isinstance(value, str):
            pieces = self._string_pieces(value, inner)
            if len(pieces) == 1:
                if rhs and inner + display_width(flat) <= self.line_length:
                    return "(\n" + pad + flat + close + ")"
                return flat  # one word: nothing to split
            return "(\n" + "\n".join(pad + self.string(piece) for piece in pieces) + close + ")"
        if isinstance(value, Call):
            # Arguments on one line of their own if they fit there, else one a line.
            joined = ", ".join(k + self.flat(a) for k, a in value.items())
            if inner + display_width(joined) <= self.line_length:
                return f"{value.function}(\n{pad}{joined}" + close + ")"
            items = [
                pad + k + self._item(a, inner + display_width(k), inner) + ","
                for k, a in value.items()
            ]
            return value.function + "(\n" + "\n".join(items) + close + ")"
        if isinstance(value, (list, tuple)) and value:
            items = [pad + self._item(v, inner, inner) + "," for v in value]
            return "[\n" + "\n".join(items) + close + "]"
        if isinstance(value, dict) and value:
            items = []
            for key, item in self._items(value):
                head = pad + self.flat(key) + ": "
                items.append(head + self._item(item, display_width(head), inner) + ",")
            return "{\n" + "\n".join(items) + close + "}"
        return flat

    def _item(self, value, first: int, indent: int) -> str:
        """One item of a split collection (or call): it must fit with what precedes it on
        its line (its key) and its trailing comma, as ruff counts."""
        return self.literal(value, first, indent, 1)

    def _string_pieces(self, text: str, indent: int) -> list[str]:
        """Split ``text`` at spaces into pieces whose literals fit a line at ``indent``."""
        pieces, current = [], ""

        def too_long(piece: str) -> bool:
            return indent + display_width(self.string(piece)) > self.line_length

        for token in re.findall(r"\S+\s*|\s+", text):
            if current and too_long(current + token):
                pieces.append(current)
                current = ""
            word = token.rstrip()
            if not current and word and too_long(token):
                # A word longer than a line: a piece of its own, without spaces, which
                # ruff's line-length rule lets pass; the spaces go to the next piece.
                pieces.append(word)
                token = token[len(word) :]
            current += token
        pieces.append(current)
        return [piece for piece in pieces if piece]

    def assignment(self, name: str, value) -> str:
        """``NAME = value`` laid out in this style."""
        return f"{name} = " + self.literal(value, len(name) + 3, rhs=True)

    def runs(self, value, shortest: int = SHORTEST_RUN):
        """``value`` with every run of ``shortest`` or more equal scalars in a list written
        ``*[v] * n``, and every run of consecutive integers ``*range(a, b)`` (recursively).

        The result is laid out by ``literal`` and evaluates to ``value``; a list of
        2048 buffer entries becomes one line instead of 2048.
        """
        if isinstance(value, dict):
            return {key: self.runs(item, shortest) for key, item in value.items()}
        if not isinstance(value, list):
            return value
        out, index = [], 0
        while index < len(value):
            item, end = value[index], index + 1
            if _scalar(item):
                while end < len(value) and type(value[end]) is type(item) and value[end] == item:
                    end += 1
                if end - index >= shortest:
                    out.append(Code(f"*[{self.flat(item)}] * {end - index}"))
                    index = end
                    continue
                end = index + 1
                while (
                    end < len(value)
                    and _counting(item)
                    and _counting(value[end])
                    and value[end] == value[end - 1] + 1
                ):
                    end += 1
                if end - index >= shortest:
                    stop = value[end - 1] + 1
                    out.append(Code(f"*range({stop})" if item == 0 else f"*range({item}, {stop})"))
                    index = end
                    continue
            out.append(self.runs(item, shortest))
            index += 1
        return out

    def docstring(self, paragraphs: list, indent: int = 0) -> str:
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
                first = self.line_length - indent - (3 if not lines else 0)
                rest = self.line_length - indent - len(hang)
                wrapped = _wrap(_doc_text(entry), first, rest, display_width)
                lines.extend([wrapped[0], *(hang + line for line in wrapped[1:])])
        if len(lines) == 1 and indent + display_width(lines[0]) + 6 <= self.line_length:
            return f'"""{lines[0]}"""'
        body = "\n".join(pad + line if line else "" for line in lines[1:])
        return f'"""{lines[0]}\n{body}\n{pad}"""' if body else f'"""{lines[0]}\n{pad}"""'


# Generated modules: the generator's own layout (what generated_tests/ holds), at the
# project's line length, so `ruff check` passes on them as on the rest of the project.
GENERATED = Style(line_length=100, string=repr, sort_keys=True)
# Exported modules: ruff format at vLLM's settings (line length 88).
RUFF = Style(line_length=88, string=ruff_string, sort_keys=False)
