"""The lines the whole-file score covers, and who reaches each of them.

``scope``: every statement line of a builder class's methods and of the module-level
functions, with its function; ``construction_functions``: what runs once per cached builder
(so its mutants run under every test); ``line_map``: per line of the scope, the records whose
tests execute it and under which configurations of the builder, or why none can.
"""

from __future__ import annotations

import ast
from pathlib import Path


def _is_builder(node: ast.ClassDef) -> bool:
    return node.name.endswith("MetadataBuilder")


def scope(source: str) -> dict[int, str]:
    """Line -> qualified function, for every line of a statement in a builder method or module-level
    function.

    Docstrings are left out (no behaviour); a nested function belongs to its outer one.
    """
    tree = ast.parse(source)
    lines: dict[int, str] = {}

    def cover(function: ast.FunctionDef, name: str) -> None:
        body = function.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:]
        for statement in body:
            for line in range(statement.lineno, statement.end_lineno + 1):
                lines[line] = name

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cover(node, node.name)
        elif isinstance(node, ast.ClassDef) and _is_builder(node):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    cover(item, f"{node.name}.{item.name}")
    return lines


def construction_functions(source: str) -> set[str]:
    """``__init__`` of each builder class and the methods it calls on ``self`` (they run once per
    cached builder)."""
    found: set[str] = set()
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ClassDef) and _is_builder(node)):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                found.add(f"{node.name}.__init__")
                for call in ast.walk(item):
                    if (
                        isinstance(call, ast.Call)
                        and isinstance(call.func, ast.Attribute)
                        and isinstance(call.func.value, ast.Name)
                        and call.func.value.id == "self"
                    ):
                        found.add(f"{node.name}.{call.func.attr}")
    return found


def test_configurations(
    by_test: dict[str, set[int]],
    modules: dict[str, Path],
    configurations: dict[str, dict[str, str]],
) -> dict[str, str]:
    """Test id -> the configuration its case ran under (``configurations``: record -> case ->
    label); a test of no named case (an invariant's random batches) ran as CPU resolves the
    builder."""
    record_of = {Path(path).name: name for name, path in modules.items()}
    found = {}
    for nodeid in by_test:
        path, _, name = nodeid.partition("::")
        case = name.rsplit("[", 1)[-1].rstrip("]").split("-", 1)[-1] if "[" in name else ""
        found[nodeid] = configurations.get(record_of.get(Path(path).name, ""), {}).get(
            case, "CPU default"
        )
    return found


def line_map(
    source: str,
    scope_lines: dict[int, str],
    by_module: dict[str, set[int]],
    records: dict[str, str],
    unreachable: dict[int, str],
    by_test: dict[str, set[int]] | None = None,
    configured: dict[str, str] | None = None,
) -> list[dict]:
    """Per line of the scope that holds code: its function, the records whose tests execute it and
    under which configurations (``configured``: test id -> its case's configuration), or why none
    can."""
    # A statement's lines as the trace reports them: a multi-line statement's line events
    # may come from any of its lines (a compound statement: its header's).
    spans: dict[int, range] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            last = (
                body[0].lineno - 1
                if isinstance(body, list) and body and body[0].lineno > node.lineno
                else node.end_lineno
            )
            spans[node.lineno] = range(node.lineno, max(node.lineno, last) + 1)
    rows = []
    text = source.splitlines()
    for line in sorted(scope_lines):
        if line not in spans:
            continue
        reached_by = sorted(
            records[module]
            for module, lines in by_module.items()
            if module in records and any(at in lines for at in spans[line])
        )
        under = sorted(
            {
                (configured or {}).get(nodeid, "CPU default")
                for nodeid, lines in (by_test or {}).items()
                if any(at in lines for at in spans[line])
            }
        )
        rows.append(
            {
                "line": line,
                "function": scope_lines[line],
                "code": text[line - 1].strip()[:90],
                "records": reached_by,
                "configurations": under,
                "unreachable": unreachable.get(line) if not reached_by else None,
            }
        )
    return rows
