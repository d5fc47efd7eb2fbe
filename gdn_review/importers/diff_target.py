"""A diff's target for a draft: the file it changes and the function or method the changes are in.

Read from the diff alone (what ``gh pr diff`` or ``git diff`` writes, read by
common/unified_diff.py), no source tree: the file is ``TARGET_FILE`` when the diff
changes it, else the first ``.py`` file. The symbol of a changed line is the
innermost ``def`` (or ``class``) around it that the diff shows: a ``def`` or
``class`` line among the hunk's lines, or the function context git writes after
a hunk header (``@@ -542,6 +542,7 @@ def build_for_cudagraph_capture(``). A
method is qualified with its class (``GDNAttentionMetadataBuilder.build``) only
when the diff shows the class: a ``class`` line in a hunk or a hunk header
before it in the same file, with no top-level code between.
"""

from __future__ import annotations

import copy
import dataclasses
import re

from gdn_review.common.unified_diff import FileDiff

TARGET_FILE = "vllm/v1/attention/backends/gdn_attn.py"
_DEFINITION = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)")


@dataclasses.dataclass
class DiffTarget:
    file: str
    symbols: list[str]  # every symbol a change is in, in diff order; [] when the diff shows none
    snippet: str  # the file's hunks, as the diff has them


def target_file(files: list[FileDiff]) -> FileDiff | None:
    changed = [f for f in files if not f.binary]
    return (
        next((f for f in changed if f.path == TARGET_FILE), None)
        or next((f for f in changed if f.path.endswith(".py")), None)
        or (changed[0] if changed else None)
    )


class _Scope:
    """The class and function a line of one file's diff is in, as far as the diff shows them."""

    def __init__(self) -> None:
        self.cls: str | None = None
        self.func: str | None = None
        self.func_indent = 0

    def header(self, context: str) -> None:
        """The function context of a hunk header: the nearest ``def`` or ``class`` line above the
        hunk."""
        match = _DEFINITION.match(context.strip())
        self.func = None
        if match and match.group(2) == "class":
            self.cls = match.group(3)
        elif match:
            # a def: a method of the class seen before, or a function (git drops the indent)
            self.func, self.func_indent = match.group(3), 4 if self.cls else 0

    def line(self, text: str) -> None:
        match = _DEFINITION.match(text)
        indent = len(text) - len(text.lstrip(" \t"))
        if match:
            if match.group(2) == "class" and indent == 0:
                self.cls, self.func = match.group(3), None
            elif match.group(2) == "def" and (self.func is None or indent <= self.func_indent):
                if indent == 0:
                    self.cls = None
                self.func, self.func_indent = match.group(3), indent
        elif (
            indent == 0 and text.strip() and not text.lstrip().startswith(("#", ")", "]", "}", "@"))
        ):
            self.cls = self.func = None  # top-level code: outside every def and class

    def symbol(self) -> str | None:
        if self.func:
            return f"{self.cls}.{self.func}" if self.cls and self.func_indent > 0 else self.func
        return self.cls


def symbols_of(file: FileDiff) -> list[str]:
    """The symbols the file's changed lines are in (each once, in diff order)."""
    scope, found = _Scope(), []
    for hunk in file.hunks:
        context = re.sub(r"^@@ [^@]* @@", "", hunk.header)
        scope.header(context)
        for line in hunk.lines:
            kind, text = line[0], line[1:]
            if kind in " +":  # the new side: where an added def starts, what follows is in it
                scope.line(text)
            if kind in "+-" and text.strip():
                removed = copy.copy(scope)  # a removed def is the symbol of its own line only
                if kind == "-":
                    removed.line(text)
                symbol = removed.symbol()
                if symbol and symbol not in found:
                    found.append(symbol)
    return found


def diff_target(files: list[FileDiff]) -> DiffTarget | None:
    """The target of a diff's files; None when it changes no text file."""
    file = target_file(files)
    if file is None:
        return None
    # Lines stripped on the right (a blank context line is " "), so the snippet reads as a literal
    # block.
    snippet = "\n".join(line.rstrip() for hunk in file.hunks for line in [hunk.header, *hunk.lines])
    return DiffTarget(file.path, symbols_of(file), snippet)
