"""Automatic mutants: standard operators on the lines a PR added or changed.

The PR's diff is taken between the base and head releases' copies of the
target file. Its hunks are mapped onto the loaded release's file by content
(never by line number): a hunk none of whose lines is still there yields no
mutant and is listed as gone. On the mapped lines, and only there, each AST
node gets the operators that fit it; the mutated source replaces exactly that
node's text, so the rest of the file is untouched and the mutant's diff is one
expression or statement.

Ids are stable across runs and releases: operator + a slug of the site + a
short hash of the site's own text (not its line number).

``broad=True`` (``gdn-review mutate --whole-file``) adds the operators of the
bugs real PRs of the target file fixed: ``is``/``in`` flips, a slice's bound
dropped (``[:n]`` -> the whole tensor), an integer constant + 1, ``+``/``-``
swapped, another fill value, a dropped in-place statement (``fill_``,
``copy_``, ``-=``, a write into a slice) and two arguments swapped. They stay
out of the PR-hunk mutants so that records' named ids and counts do not move.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import keyword
import re

COMPARISON_FLIPS = {
    ast.GtE: ast.Gt,
    ast.Gt: ast.GtE,
    ast.LtE: ast.Lt,
    ast.Lt: ast.LtE,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
OP_NAMES = {ast.GtE: "ge", ast.Gt: "gt", ast.LtE: "le", ast.Lt: "lt", ast.Eq: "eq", ast.NotEq: "ne"}
BROAD_FLIPS = {ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
BROAD_NAMES = {ast.Is: "is", ast.IsNot: "is_not", ast.In: "in", ast.NotIn: "not_in"}
# Calls whose arguments commute: swapping them is never a bug.
COMMUTATIVE_CALLS = {"min", "max", "gcd", "math.gcd", "replace"}


@dataclasses.dataclass(frozen=True)
class Hunk:
    """Lines the PR added or changed, as they read on the head release."""

    head_start: int  # 1-based line in the head file
    lines: tuple[str, ...]

    def label(self) -> str:
        first = next(
            (line.strip() for line in self.lines if _meaningful(line)),
            self.lines[0].strip() if self.lines else "",
        )
        return f"head line {self.head_start}: {first[:70]}"


@dataclasses.dataclass(frozen=True)
class AutoMutant:
    id: str
    operator: str
    line: int  # 1-based line of the site in the loaded file
    before: str  # the site's source text
    after: str  # what replaces it
    source: str  # the whole mutated file


def pr_hunks(base: str, head: str) -> list[Hunk]:
    """The PR's added or changed lines (head side of each diff opcode)."""
    base_lines, head_lines = base.splitlines(), head.splitlines()
    matcher = difflib.SequenceMatcher(a=base_lines, b=head_lines, autojunk=False)
    hunks = []
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            hunks.append(Hunk(j1 + 1, tuple(head_lines[j1:j2])))
    return hunks


def _meaningful(line: str) -> bool:
    """A line that says something of its own: a name other than a keyword (not `if (`, `== 0`,
    `):`)."""
    text = line.strip()
    if not text or text.startswith("#"):
        return False
    return any(not keyword.iskeyword(name) for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def map_hunks(hunks: list[Hunk], loaded: str) -> tuple[set[int], list[Hunk]]:
    """Lines of ``loaded`` (1-based) that carry the PR's changes, and the hunks that are gone.

    A hunk maps where its meaningful lines appear, stripped, as a contiguous
    run; failing that, each of its lines that occurs exactly once in the loaded
    file maps on its own (the hunk was edited since, but that line survives).
    """
    lines = [line.strip() for line in loaded.splitlines()]
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    mapped: set[int] = set()
    gone: list[Hunk] = []
    for hunk in hunks:
        wanted = [line.strip() for line in hunk.lines]
        found = _find_run(lines, wanted)
        if found is not None:
            mapped.update(i + 1 for i in range(found, found + len(wanted)) if _meaningful(lines[i]))
            continue
        single = [lines.index(w) + 1 for w in wanted if _meaningful(w) and counts.get(w) == 1]
        if single:
            mapped.update(single)
        elif any(_meaningful(w) for w in wanted):
            gone.append(hunk)
    return mapped, gone


def _find_run(lines: list[str], wanted: list[str]) -> int | None:
    if not any(_meaningful(w) for w in wanted):
        return None
    hits = [i for i in range(len(lines) - len(wanted) + 1) if lines[i : i + len(wanted)] == wanted]
    return hits[0] if len(hits) == 1 else None


class _Site:
    """Byte-exact text of one node in the file, and how to replace it."""

    def __init__(self, source: str):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.offsets = [0]
        for line in self.lines:
            self.offsets.append(self.offsets[-1] + len(line.encode("utf-8")))
        self.data = source.encode("utf-8")

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offsets[node.lineno - 1] + node.col_offset
        end = self.offsets[node.end_lineno - 1] + node.end_col_offset
        return start, end

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode("utf-8")

    def replace(self, node: ast.AST, text: str) -> str:
        start, end = self.span(node)
        return (self.data[:start] + text.encode("utf-8") + self.data[end:]).decode("utf-8")


def _slug(text: str) -> str:
    names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)
    interesting = [
        n
        for n in names
        if n not in {"self", "and", "or", "not", "None", "True", "False", "sum", "item"}
    ]
    return (interesting or names or ["site"])[0][:32]


def _expression(node: ast.AST) -> str:
    """Source of a replacement expression, parenthesised so it binds as one operand."""
    text = ast.unparse(node)
    return (
        f"({text})"
        if isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp, ast.IfExp))
        else text
    )


def _candidates(node: ast.AST):
    """(operator, node to replace, replacement text) for every operator that fits ``node``."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            flipped = COMPARISON_FLIPS.get(type(op))
            if flipped is None:
                continue
            ops = list(node.ops)
            ops[index] = flipped()
            new = ast.Compare(left=node.left, ops=ops, comparators=node.comparators)
            yield f"{OP_NAMES[type(op)]}_to_{OP_NAMES[flipped]}", node, _expression(new)
    elif isinstance(node, ast.BoolOp):
        swapped = ast.BoolOp(
            op=ast.And() if isinstance(node.op, ast.Or) else ast.Or(), values=node.values
        )
        yield (
            ("or_to_and" if isinstance(node.op, ast.Or) else "and_to_or"),
            node,
            _expression(swapped),
        )
        for index in range(len(node.values)):
            rest = [v for i, v in enumerate(node.values) if i != index]
            new = rest[0] if len(rest) == 1 else ast.BoolOp(op=node.op, values=rest)
            yield f"drop_clause{index + 1}", node, _expression(new)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
        yield "drop_invert", node, _expression(node.operand)
    elif isinstance(node, ast.Subscript):
        # A row mask used as an index: select the other rows instead.
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if isinstance(part, ast.Name) and "mask" in part.id:
                yield "invert_mask", part, f"~{part.id}"
    elif isinstance(node, ast.Slice):
        for bound in ("lower", "upper"):
            value = getattr(node, bound)
            if value is None:
                continue
            for sign, name in (("+", "plus1"), ("-", "minus1")):
                changed = {b: getattr(node, b) for b in ("lower", "upper", "step")}
                changed[bound] = ast.BinOp(
                    left=value, op=ast.Add() if sign == "+" else ast.Sub(), right=ast.Constant(1)
                )
                yield f"slice_{bound}_{name}", node, ast.unparse(ast.Slice(**changed))
    elif (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    ):
        name = node.targets[0].id
        if "mask" in name:
            yield "drop_mask_assign", node, "pass"
        elif name.startswith("num_"):
            for sign, label in (("+", "plus1"), ("-", "minus1")):
                value = ast.BinOp(
                    left=node.value,
                    op=ast.Add() if sign == "+" else ast.Sub(),
                    right=ast.Constant(1),
                )
                yield f"count_{label}", node.value, _expression(value)


def _broad_candidates(node: ast.AST):
    """The whole-file operators beyond ``_candidates`` (see the module docstring)."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            flipped = BROAD_FLIPS.get(type(op))
            if flipped is not None:
                ops = list(node.ops)
                ops[index] = flipped()
                new = ast.Compare(left=node.left, ops=ops, comparators=node.comparators)
                yield f"{BROAD_NAMES[type(op)]}_to_{BROAD_NAMES[flipped]}", node, _expression(new)
    elif isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if (
                isinstance(part, ast.Slice)
                and part.step is None
                and (part.lower is None) != (part.upper is None)
            ):
                yield "slice_whole", part, ":"  # [:n] or [n:] -> every row
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "const_plus1", node, str(node.value + 1)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        swapped = ast.BinOp(
            left=node.left,
            op=ast.Sub() if isinstance(node.op, ast.Add) else ast.Add(),
            right=node.right,
        )
        yield (
            ("add_to_sub" if isinstance(node.op, ast.Add) else "sub_to_add"),
            node,
            _expression(swapped),
        )
    elif isinstance(node, ast.Call):
        name = ast.unparse(node.func)
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "fill_"
            and len(node.args) == 1
        ):
            yield from _fill_values(node.args[0])
        if name.split(".")[-1] not in COMMUTATIVE_CALLS and name not in COMMUTATIVE_CALLS:
            args = node.args
            for index in range(len(args) - 1):
                first, second = args[index], args[index + 1]
                if (
                    isinstance(first, ast.Starred)
                    or isinstance(second, ast.Starred)
                    or ast.dump(first) == ast.dump(second)
                ):
                    continue
                swapped = ast.Call(
                    func=node.func,
                    args=[*args[:index], second, first, *args[index + 2 :]],
                    keywords=node.keywords,
                )
                yield f"swap_args{index + 1}", node, ast.unparse(swapped)
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _in_place(node.value):
        yield "drop_statement", node, "pass"
    elif isinstance(node, ast.AugAssign):
        yield "drop_statement", node, "pass"
    elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in node.targets):
        yield "drop_statement", node, "pass"


def _in_place(call: ast.Call) -> bool:
    """A call made for its effect on a tensor: ``x.fill_()``, ``x.copy_()``, ``torch.cumsum(...,
    out=x)``."""
    if (
        isinstance(call.func, ast.Attribute)
        and call.func.attr.endswith("_")
        and not call.func.attr.startswith("_")
    ):
        return True
    return any(k.arg == "out" for k in call.keywords)


def _fill_values(value: ast.AST):
    """Another value for a ``fill_``: the null block <-> 1, a bool flipped, an offset + 1."""
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        yield "fill_value", value, str(not value.value)
    elif (
        isinstance(value, ast.Constant)
        and value.value == 0
        or (isinstance(value, ast.Name) and value.id == "NULL_BLOCK_ID")
    ):
        yield "fill_value", value, "1"
    elif isinstance(value, ast.Constant) and isinstance(value.value, int):
        yield "fill_value", value, "0"
    else:  # a computed value (the last offset): one past it, and 0
        yield "fill_value", value, f"({ast.unparse(value)}) + 1"
        yield "fill_zero", value, "0"


def _statements(tree: ast.AST) -> dict[int, ast.stmt]:
    """id(node) -> the innermost statement holding it (a site is named after its statement)."""
    owner: dict[int, ast.stmt] = {}

    def visit(node: ast.AST, statement: ast.stmt | None) -> None:
        if isinstance(node, ast.stmt):
            statement = node
        owner[id(node)] = statement
        for child in ast.iter_child_nodes(node):
            visit(child, statement)

    visit(tree, None)
    return owner


def _statement_name(statement: ast.stmt | None, fallback: str) -> str:
    if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        target = statement.targets[0] if isinstance(statement, ast.Assign) else statement.target
        return _slug(ast.unparse(target))
    return _slug(fallback)


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes no operator may touch: f-strings (messages), assert messages, docstrings,
    annotations."""
    skipped: set[int] = set()

    def skip(node: ast.AST | None) -> None:
        if node is not None:
            skipped.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip(node)
        elif isinstance(node, ast.Assert):
            skip(node.msg)
        elif isinstance(node, ast.AnnAssign):
            skip(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skip(node.returns)
            for argument in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
                skip(argument.annotation)
    return skipped


def automatic_mutants(loaded: str, lines: set[int], broad: bool = False) -> list[AutoMutant]:
    """Every operator applied to every fitting node on ``lines`` of ``loaded`` (``broad``: the
    whole-file set too)."""
    tree = ast.parse(loaded)
    site = _Site(loaded)
    owners = _statements(tree)
    skipped = _skipped_nodes(tree) if broad else set()
    found: dict[str, AutoMutant] = {}
    for node in ast.walk(tree):
        if getattr(node, "end_lineno", None) is None or id(node) in skipped:
            continue
        if not lines.intersection(range(node.lineno, node.end_lineno + 1)):
            continue
        candidates = _candidates(node)
        if broad:
            candidates = [*candidates, *_broad_candidates(node)]
        for operator, target, replacement in candidates:
            before = site.text(target)
            if before == replacement:
                continue
            statement = owners.get(id(target))
            # Named by what the edit does and the statement it is in, never by line number.
            context = " ".join(site.text(statement).split()) if statement is not None else before
            key = f"{operator}\0{context}\0{before}\0{replacement}"
            digest = hashlib.sha1(key.encode()).hexdigest()[:6]
            ident = f"auto.{operator}.{_statement_name(statement, before)}.{digest}"
            if ident in found:  # the same edit twice in one statement: number them in file order
                ident = f"{ident}.{sum(1 for key in found if key.startswith(ident)) + 1}"
            found[ident] = AutoMutant(
                ident,
                operator,
                target.lineno,
                before,
                replacement,
                site.replace(target, replacement),
            )
    return sorted(found.values(), key=lambda m: (m.line, m.id))
