"""What a diff touches in the KB, read from the text alone, before anything runs.

Per record whose target file the diff changes: the functions of that file
whose lines the hunks change (``Class.method`` from the release's own AST),
whether the record's target symbol reaches them (the symbol itself, or a
method of its class it calls through ``self``, transitively; ``__init__``
always, since every case constructs a builder), and the record's mutant
sites (its ``find`` texts) that the hunks land on, with their risks. Which
cases actually move is for the run to say; this is the reviewer's first look.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gdn_review.common.unified_diff import FileDiff
from gdn_review.kb.subjects import key_label

MODULE_LEVEL = "(module level)"


def symbol_spans(source: str) -> dict[str, tuple[int, int]]:
    """``Class.method`` and top-level function names -> (first, last) line, decorators included."""
    spans: dict[str, tuple[int, int]] = {}
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            spans[node.name] = (_first_line(node), node.end_lineno)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    spans[f"{node.name}.{item.name}"] = (_first_line(item), item.end_lineno)
    return spans


def _first_line(node) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def touched_symbols(source: str, lines: set[int]) -> list[str]:
    """The innermost named symbols holding any of ``lines``; MODULE_LEVEL for lines outside all of
    them."""
    spans = symbol_spans(source)
    found = set()
    for line in lines:
        holders = [name for name, (first, last) in spans.items() if first <= line <= last]
        if not holders:
            found.add(MODULE_LEVEL)
            continue
        methods = [name for name in holders if "." in name]
        found.update(methods or holders)
    return sorted(found)


def reached_from(source: str, symbol: str) -> set[str]:
    """``symbol`` and the methods of its class it calls through ``self.``, transitively (plus
    ``__init__``)."""
    cls, _, method = symbol.rpartition(".")
    tree = ast.parse(source)
    methods = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            methods = {
                item.name: item
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    if not cls or method not in methods:
        return {symbol}
    reached, todo = set(), [method] + (["__init__"] if "__init__" in methods else [])
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        for node in ast.walk(methods[name]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and node.attr in methods
            ):
                todo.append(node.attr)
    return {f"{cls}.{name}" for name in reached}


def _find_lines(source: str, text: str) -> list[tuple[int, int]]:
    """(first, last) line of every occurrence of ``text`` in ``source``."""
    spans, start = [], source.find(text)
    while start >= 0 and text:
        first = source.count("\n", 0, start) + 1
        spans.append((first, first + text.count("\n")))
        start = source.find(text, start + 1)
    return spans


def record_impact(
    record, path: Path, file: FileDiff, source: str, symbol: str | None = None
) -> dict:
    """What the diff's hunks on one file the record covers touch, as plain data: its target file
    (``symbol`` None: the record's target symbol), or a file that defines a builder its cases
    name (``symbol``: that builder's ``build``)."""
    own = symbol is None
    symbol = symbol or record.target.symbol
    changed = set().union(*(hunk.changed_old_lines() for hunk in file.hunks))
    symbols = touched_symbols(source, changed) if changed else []
    reached = reached_from(source, symbol)
    reaching = [s for s in symbols if s in reached]
    sites = []
    for risk in record.risks if own else []:  # a record's mutants edit its target file
        for mutant in risk.mutants:
            hit = [
                (first, last)
                for first, last in _find_lines(source, mutant.find)
                if any(first <= line <= last for line in changed)
            ]
            if hit:
                first, last = hit[0]
                lines = str(first) if first == last else f"{first}-{last}"
                sites.append({"risk": risk.id, "mutant": mutant.id, "lines": lines})
    checked = [claim.id for claim in record.claims if claim.check.kind != "TODO"]
    return {
        "key": record.key,
        "record": str(path),
        "target": f"{record.target.file if own else file.path} ({symbol})",
        "hunks": len(file.hunks),
        "symbols": symbols,
        "reaches_target": reaching,
        # Every case builds through the target symbol: a change it reaches may move any of them.
        "cases": sorted(case.id for case in record.cases) if reaching else [],
        "claims": checked if reaching else [],
        "risks": sorted({site["risk"] for site in sites}),
        "mutant_sites": sites,
    }


def impact_lines(files: list[dict], impacts: list[dict]) -> list[str]:
    """The impact, printed before anything runs."""
    lines = [f"  {file['path']}: {file['status']}" for file in files]
    for impact in impacts:
        lines.append(
            f"record of {key_label(impact['key'])} ({impact['record']}) targets {impact['target']}"
        )
        lines.append(f"  hunks change: {', '.join(impact['symbols']) or 'nothing'}")
        if impact["reaches_target"]:
            lines.append(f"  reached from the target symbol: {', '.join(impact['reaches_target'])}")
            lines.append(
                f"  may move: {len(impact['cases'])} case(s); claims "
                f"{', '.join(impact['claims']) or 'none'}"
            )
        else:
            lines.append("  the target symbol reaches none of them: no case should move")
        for site in impact["mutant_sites"]:
            lines.append(
                f"  lands on risk {site['risk']}'s mutant {site['mutant']} (line {site['lines']})"
            )
    return lines
